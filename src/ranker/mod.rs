//! Pairwise ranker: a learned score `s(x)` of an implementation's structural features such
//! that, between two correct implementations of the same task, the faster one scores higher.
//!
//! * Model: an ensemble of members, each a small MLP (`inputs → 64 → 32 → 1`, ReLU) in burn
//!   and, by default, gradient-boosted regression trees ([`BoostedTrees`]) fitted on the same pairs;
//!   a member scores the mean of the two. Both are trained with the RankNet / Bradley–Terry
//!   loss on soft targets `σ(ln(t_slow / t_fast) / 0.15)`, weighted by the pair's
//!   `|ln(t_slow / t_fast)|` (capped); the MLP with an L1 penalty on the input layer, Adam and
//!   early stopping on a validation split by task. Features are clamped to their training
//!   range and standardised with statistics saved in the model; a temperature fitted on the
//!   members' validation pairs calibrates `p = σ(Δs / T)`.
//! * Reference context: the shipped model sees a candidate's features next to their
//!   difference from its task's reference implementation ([`RankingData::with_reference_context`],
//!   [`TrainedRanker::input_against`]); the reward always compares with that reference.
//! * Backends: burn's default device — the ndarray CPU backend by default, libtorch with the
//!   cargo feature `tch`; [`train_on`] and [`cross_validate_on`] take any device.
//! * Inference: [`TrainedRanker::score`] runs a plain-Rust forward pass over the extracted
//!   weights and walks the trees (about 12 µs for five members of 300 trees, no tensor
//!   overhead); the MLP part matches burn's forward within 1e-5.
//! * Evaluation: [`cross_validate`] (leave-tasks-out k-fold pairwise accuracy, by task kind
//!   and by time-ratio bucket) and [`cross_validate_scorer`] for any fixed score on the same
//!   folds; chance is 50 %.
//! * Optional inputs: the launch-plan features ([`LAUNCH_FEATURE_NAMES`], the resolved
//!   `// @launch` plan on the task's timed configuration: grid against the SM count, passes,
//!   serial work per thread, atomics per element), the traffic features
//!   ([`TRAFFIC_FEATURE_NAMES`]: bytes, reuse, serial work, memory and compute time) and
//!   [`syntax_ngrams`], hashed syntax-node n-grams of the CUDA source. A model's feature names
//!   say which it uses ([`FeatureSet`], [`context_base_len`]).
//!
//! ```
//! use cudaperf::ranker::{ranker_reward_value, synthetic, train, RankerConfig, TrainedRanker};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let data = synthetic::decisive_feature(16, 4, 6, 7);
//! let config = RankerConfig::new().with_epochs(40);
//! let (ranker, _history) = train(&data, &config, |_| {})?;
//!
//! let dir = std::env::temp_dir().join("cudaperf-ranker-doc");
//! ranker.save(&dir)?;
//! let ranker = TrainedRanker::load(&dir, &data.feature_names)?;
//!
//! let candidate = ranker.score(&data.samples[0].features)?;
//! let reference = ranker.score(&data.samples[1].features)?;
//! let reward = ranker_reward_value(candidate, reference); // in [-1, 1]
//! assert!((-1.0..=1.0).contains(&reward));
//! # Ok(()) }
//! ```

mod compare;
mod config;
mod context;
mod data;
mod error;
mod eval;
mod from_dataset;
mod io;
mod launch;
mod model;
mod ngrams;
mod normalize;
#[cfg(feature = "cli")]
mod plot;
mod rng;
pub mod synthetic;
mod traffic;
mod train;
mod trained;
mod trees;

pub use compare::{compare_on_folds, cv_table, hand_weighted_scores, CvComparison};
pub use config::RankerConfig;
pub use context::{
    context_base_len, context_names, with_reference, REFERENCE_PREFIX, REFERENCE_SAMPLE,
};
pub use data::{Pair, RankingData, Sample};
pub use error::{RankerError, Result};
pub use eval::{
    calibration, cross_validate, cross_validate_on, cross_validate_scorer, cv_folds,
    pairwise_accuracy, AccuracyBreakdown, Calibration, CvReport, FoldReport, PairAccuracy,
    CLEAR_PAIR_LOG_RATIO, CLOSE_PAIR_LOG_RATIO,
};
pub use from_dataset::{
    feature_names, features_for, features_from, ngram_buckets, ranking_data, FeatureSet,
};
pub use io::{
    METADATA_FILE, MODEL_FORMAT, MODEL_FORMAT_VERSION, SHIPPED_ORIGIN, TREES_FILE, WEIGHTS_FILE,
};
pub use launch::{
    launch_features, launch_features_named, LaunchInput, TimedPlan, LAUNCH_FEATURE_NAMES,
    LAUNCH_PREFIX, REFERENCE_SMS,
};
pub use model::{DenseLayer, EnsembleNet, MlpWeights, ScorerNet};
pub use ngrams::{syntax_ngram_names, syntax_ngrams, syntax_ngrams_of};
pub use normalize::Normalizer;
#[cfg(feature = "cli")]
pub use plot::plot_history;
pub use traffic::{
    traffic_features, traffic_features_named, Device as ReferenceDevice, ESTIMATE_FEATURE, H200,
    TRAFFIC_FEATURE_NAMES, TRAFFIC_PREFIX,
};
pub use train::{train, train_on, EpochStats, TrainingHistory};
pub use trained::{
    ranker_reward_value, sigmoid, Comparison, MemberSummary, TrainedRanker, TrainingSummary,
};
pub use trees::{BoostedTrees, Tree, BINS as TREE_BINS};
