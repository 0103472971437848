//! Errors of the pairwise ranker: every message says what was wrong and where.

use std::path::PathBuf;

/// Everything that can go wrong while validating data, training, scoring, saving or loading a
/// ranker. No input makes the ranker panic; it returns one of these instead.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RankerError {
    /// There is nothing to train or evaluate on.
    #[error("no usable pairs: {reason}")]
    NoPairs {
        /// Why no pair is left (empty input, all ties, no pair in a fold, ...).
        reason: String,
    },

    /// A reference-context transform needs each task's reference implementation, and this
    /// task has none (no sample named `reference`).
    #[error(
        "task `{task}` has no sample named `{name}`: features relative to the reference need the task's reference implementation"
    )]
    NoReference {
        /// The task without a reference sample.
        task: String,
        /// The sample name that marks a reference.
        name: String,
    },

    /// A reference-context model was asked to score features without the reference's.
    #[error(
        "{what}: the model scores a candidate against its task's reference ({features} of its \
         input features are `vs_reference_*`), so it needs the reference's features too; use \
         `TrainedRanker::input_against`"
    )]
    NeedsReference {
        /// What was being scored.
        what: String,
        /// Number of reference-relative inputs.
        features: usize,
    },

    /// The data set declares no feature names, or samples have no features.
    #[error("no features: the ranking data declares no feature names")]
    NoFeatures,

    /// A sample's feature vector does not have one value per feature name.
    #[error(
        "sample {index} (task `{task}`, `{name}`) has {found} features, but {expected} feature names are declared"
    )]
    FeatureCount {
        /// Index of the sample in `samples`.
        index: usize,
        /// The sample's task.
        task: String,
        /// The sample's implementation name.
        name: String,
        /// Number of declared feature names.
        expected: usize,
        /// Number of values in the sample.
        found: usize,
    },

    /// A sample has a NaN or infinite feature value.
    #[error(
        "sample {index} (task `{task}`, `{name}`): feature {feature_index} `{feature}` is {value}, features must be finite"
    )]
    NonFiniteFeature {
        /// Index of the sample in `samples`.
        index: usize,
        /// The sample's task.
        task: String,
        /// The sample's implementation name.
        name: String,
        /// Position of the bad value in the feature vector.
        feature_index: usize,
        /// Name of that feature.
        feature: String,
        /// The offending value.
        value: f32,
    },

    /// A pair points at a sample that does not exist.
    #[error("pair {pair}: sample index {index} is out of range (there are {samples} samples)")]
    PairIndex {
        /// Index of the pair in `pairs`.
        pair: usize,
        /// The out-of-range sample index.
        index: usize,
        /// Number of samples.
        samples: usize,
    },

    /// A pair compares an implementation with itself.
    #[error("pair {pair}: `fast` and `slow` are the same sample ({index})")]
    SelfPair {
        /// Index of the pair in `pairs`.
        pair: usize,
        /// The sample index used twice.
        index: usize,
    },

    /// A pair compares implementations of two different tasks.
    #[error("pair {pair}: fast sample is of task `{fast_task}` but slow sample is of task `{slow_task}`; pairs must compare implementations of the same task")]
    PairAcrossTasks {
        /// Index of the pair in `pairs`.
        pair: usize,
        /// Task of the fast sample.
        fast_task: String,
        /// Task of the slow sample.
        slow_task: String,
    },

    /// A pair's `log_ratio` is negative, NaN or infinite.
    #[error("pair {pair}: log_ratio is {value}; it must be finite and >= 0 (ln(t_slow / t_fast), with the faster sample in `fast`)")]
    InvalidLogRatio {
        /// Index of the pair in `pairs`.
        pair: usize,
        /// The offending value.
        value: f32,
    },

    /// A configuration field has a value the ranker cannot use.
    #[error("invalid ranker configuration: `{field}` {reason}")]
    InvalidConfig {
        /// The field name in [`RankerConfig`](super::RankerConfig) (or the argument name).
        field: &'static str,
        /// What is wrong with it.
        reason: String,
    },

    /// Cross-validation asked for more folds than there are tasks, or fewer than two.
    #[error(
        "cannot split {tasks} tasks into {k_folds} folds: need 2 <= k_folds <= number of tasks"
    )]
    Folds {
        /// Number of distinct tasks in the data.
        tasks: usize,
        /// Requested number of folds.
        k_folds: usize,
    },

    /// A list of per-sample scores does not have one score per sample.
    #[error("{found} scores given for {expected} samples; give one score per sample")]
    ScoreCount {
        /// Number of samples.
        expected: usize,
        /// Number of scores.
        found: usize,
    },

    /// A feature vector given for scoring has the wrong length.
    #[error("input {index}: {found} features given, the model expects {expected}")]
    InputLength {
        /// Index of the vector in the batch (0 for a single vector).
        index: usize,
        /// Number of features the model was trained on.
        expected: usize,
        /// Number of values given.
        found: usize,
    },

    /// A feature vector given for scoring holds a NaN or infinite value.
    #[error(
        "input {index}: feature {feature_index} `{feature}` is {value}, features must be finite"
    )]
    NonFiniteInput {
        /// Index of the vector in the batch (0 for a single vector).
        index: usize,
        /// Position of the bad value.
        feature_index: usize,
        /// Name of that feature.
        feature: String,
        /// The offending value.
        value: f32,
    },

    /// A saved model was trained on other features than the caller provides.
    #[error("{model} was trained on different features than given: {detail}")]
    FeatureMismatch {
        /// Which model (`ranker model at DIR` or `trained ranker`).
        model: String,
        /// What differs (count, or the first differing position and both names).
        detail: String,
        /// The feature names stored with the model.
        model_features: Vec<String>,
        /// The feature names the caller expected.
        expected_features: Vec<String>,
    },

    /// Training produced a NaN or infinite loss.
    #[error(
        "training diverged at epoch {epoch}: the loss became {loss} (try a lower learning_rate)"
    )]
    Diverged {
        /// Epoch (1-based) in which the loss stopped being finite.
        epoch: usize,
        /// The loss value.
        loss: f32,
    },

    /// The tensor backend failed (reading a tensor back, for instance).
    #[error("tensor backend error while {step}: {message}")]
    Backend {
        /// What the ranker was doing.
        step: &'static str,
        /// The backend's message.
        message: String,
    },

    /// Reading or writing a file failed.
    #[error("cannot {action} {path}: {source}")]
    Io {
        /// What was attempted ("read", "write", "create directory").
        action: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },

    /// A model file is not valid JSON or misses fields.
    #[error("cannot parse ranker metadata {path}: {source}")]
    Json {
        /// The metadata file.
        path: PathBuf,
        /// The parse error (with line and column).
        source: serde_json::Error,
    },

    /// A model directory is not in a format this version understands, or is inconsistent.
    #[error("invalid ranker model at {path}: {reason}")]
    InvalidModel {
        /// The file or directory.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },

    /// The weights file could not be written or read by burn's recorder.
    #[error("burn record error for {path}: {message}")]
    Record {
        /// The weights file.
        path: PathBuf,
        /// burn's message.
        message: String,
    },

    /// tree-sitter could not parse the source (n-gram features).
    #[error("syntax n-grams: {reason}")]
    Syntax {
        /// What failed.
        reason: String,
    },

    /// The launch plan needed by the `launch_*` features could not be read or resolved on
    /// the task's timed configuration.
    #[error("launch-plan features of {what}: {reason}")]
    LaunchPlan {
        /// The source (task and implementation, `candidate`, `the task's reference`, ...).
        what: String,
        /// Why (parse, ABI or launch-limit error, no plan given).
        reason: String,
    },

    /// Drawing the training curve failed.
    #[error("cannot plot training history to {path}: {message}")]
    Plot {
        /// The PNG path.
        path: PathBuf,
        /// The drawing backend's message.
        message: String,
    },
}

/// Result type of the ranker module.
pub type Result<T, E = RankerError> = std::result::Result<T, E>;

impl RankerError {
    pub(crate) fn backend(step: &'static str, err: impl std::fmt::Debug) -> Self {
        RankerError::Backend {
            step,
            message: format!("{err:?}"),
        }
    }

    pub(crate) fn config(field: &'static str, reason: impl Into<String>) -> Self {
        RankerError::InvalidConfig {
            field,
            reason: reason.into(),
        }
    }
}
