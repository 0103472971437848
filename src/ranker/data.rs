//! Input data of the ranker: samples (implementations with features) and timed pairs.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use super::error::{RankerError, Result};
use super::rng::SplitMix64;

/// One implementation of a task, described by its feature vector.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    /// Task id; pairs only compare samples of the same task.
    pub task: String,
    /// Task kind, `"c2cuda"` or `"torch2cuda"` (free text: evaluation groups by it).
    pub kind: String,
    /// Implementation name, used in error messages.
    pub name: String,
    /// One value per entry of [`RankingData::feature_names`], in that order.
    pub features: Vec<f32>,
}

/// A measured ordering of two implementations of the same task.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Pair {
    /// Index into `samples` of the faster implementation.
    pub fast: usize,
    /// Index into `samples` of the slower implementation.
    pub slow: usize,
    /// `ln(t_slow / t_fast)`, >= 0. Pairs below
    /// [`RankerConfig::min_log_ratio`](super::RankerConfig::min_log_ratio) count as ties
    /// within measurement noise and are skipped in training and evaluation.
    pub log_ratio: f32,
    /// Used to train only: never a validation (early stopping, temperature) or a held-out
    /// test pair, so extra data (e.g. a measured program table) can teach the model without
    /// changing what cross-validation reports. Its task still follows its fold: a held-out
    /// task's train-only pairs are held out with it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub train_only: bool,
}

/// Samples, pairs and the names of the feature dimensions: everything training needs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RankingData {
    /// Names of the feature dimensions; saved with a trained model and checked on load.
    pub feature_names: Vec<String>,
    /// The implementations.
    pub samples: Vec<Sample>,
    /// Timed pairs, indices into `samples`.
    pub pairs: Vec<Pair>,
}

impl RankingData {
    /// Checks that every sample has one finite value per feature name and that every pair
    /// joins two distinct samples of the same task with a finite, non-negative log ratio.
    pub fn validate(&self) -> Result<()> {
        let dim = self.feature_names.len();
        if dim == 0 {
            return Err(RankerError::NoFeatures);
        }
        for (index, s) in self.samples.iter().enumerate() {
            if s.features.len() != dim {
                return Err(RankerError::FeatureCount {
                    index,
                    task: s.task.clone(),
                    name: s.name.clone(),
                    expected: dim,
                    found: s.features.len(),
                });
            }
            if let Some((feature_index, &value)) =
                s.features.iter().enumerate().find(|(_, v)| !v.is_finite())
            {
                return Err(RankerError::NonFiniteFeature {
                    index,
                    task: s.task.clone(),
                    name: s.name.clone(),
                    feature_index,
                    feature: self.feature_names[feature_index].clone(),
                    value,
                });
            }
        }
        if self.pairs.is_empty() {
            return Err(RankerError::NoPairs {
                reason: "the data set has no pairs".into(),
            });
        }
        let n = self.samples.len();
        for (pair, p) in self.pairs.iter().enumerate() {
            for index in [p.fast, p.slow] {
                if index >= n {
                    return Err(RankerError::PairIndex {
                        pair,
                        index,
                        samples: n,
                    });
                }
            }
            if p.fast == p.slow {
                return Err(RankerError::SelfPair {
                    pair,
                    index: p.fast,
                });
            }
            let (f, s) = (&self.samples[p.fast], &self.samples[p.slow]);
            if f.task != s.task {
                return Err(RankerError::PairAcrossTasks {
                    pair,
                    fast_task: f.task.clone(),
                    slow_task: s.task.clone(),
                });
            }
            if !p.log_ratio.is_finite() || p.log_ratio < 0.0 {
                return Err(RankerError::InvalidLogRatio {
                    pair,
                    value: p.log_ratio,
                });
            }
        }
        Ok(())
    }

    /// The same samples and pairs with only the features whose name `keep` accepts (e.g.
    /// without the launch-plan features, to compare on the very same pairs and folds).
    pub fn select_features(&self, keep: impl Fn(&str) -> bool) -> RankingData {
        let cols: Vec<usize> = (0..self.feature_names.len())
            .filter(|&i| keep(&self.feature_names[i]))
            .collect();
        RankingData {
            feature_names: cols
                .iter()
                .map(|&i| self.feature_names[i].clone())
                .collect(),
            samples: self
                .samples
                .iter()
                .map(|s| Sample {
                    features: cols
                        .iter()
                        .filter_map(|&i| s.features.get(i).copied())
                        .collect(),
                    ..s.clone()
                })
                .collect(),
            pairs: self.pairs.clone(),
        }
    }

    /// Sorted distinct task ids.
    pub fn tasks(&self) -> Vec<String> {
        let set: BTreeSet<&str> = self.samples.iter().map(|s| s.task.as_str()).collect();
        set.into_iter().map(str::to_owned).collect()
    }

    /// Indices of the pairs whose task is in `tasks` and whose log ratio is not a tie,
    /// without the [`Pair::train_only`] ones: those that validation and evaluation read.
    pub(crate) fn pairs_of_tasks(&self, tasks: &BTreeSet<&str>, min_log_ratio: f32) -> Vec<usize> {
        self.pairs_where(tasks, min_log_ratio, false)
    }

    /// The same with the train-only pairs: those that training reads.
    pub(crate) fn training_pairs_of_tasks(
        &self,
        tasks: &BTreeSet<&str>,
        min_log_ratio: f32,
    ) -> Vec<usize> {
        self.pairs_where(tasks, min_log_ratio, true)
    }

    fn pairs_where(&self, tasks: &BTreeSet<&str>, min_log_ratio: f32, train: bool) -> Vec<usize> {
        self.pairs
            .iter()
            .enumerate()
            .filter(|(_, p)| {
                (train || !p.train_only)
                    && p.log_ratio >= min_log_ratio
                    && tasks.contains(self.samples[p.fast].task.as_str())
            })
            .map(|(i, _)| i)
            .collect()
    }
}

/// Splits `tasks` into (kept, held out) with a seeded shuffle; `held_out` tasks get no pair in
/// `kept`, so a model is always judged on tasks it never saw.
pub(crate) fn split_tasks(
    tasks: &[String],
    fraction: f64,
    seed: u64,
) -> (Vec<String>, Vec<String>) {
    let mut shuffled = tasks.to_vec();
    SplitMix64::new(seed ^ 0x7a5c_5eed).shuffle(&mut shuffled);
    let n = shuffled.len();
    let held = if fraction <= 0.0 || n < 2 {
        0
    } else {
        ((fraction * n as f64).round() as usize).clamp(1, n - 1)
    };
    let kept = shuffled.split_off(held);
    (kept, shuffled)
}

/// Assigns tasks to `k` folds (seeded shuffle, then round robin): fold sizes differ by <= 1.
pub(crate) fn task_folds(tasks: &[String], k: usize, seed: u64) -> Vec<Vec<String>> {
    let mut shuffled = tasks.to_vec();
    SplitMix64::new(seed ^ 0xf01d_5eed).shuffle(&mut shuffled);
    let mut folds = vec![Vec::new(); k];
    for (i, t) in shuffled.into_iter().enumerate() {
        folds[i % k].push(t);
    }
    for f in &mut folds {
        f.sort();
    }
    folds
}

/// The task kind of a pair (that of its fast sample; both share the task).
pub(crate) fn kind_of_pair(data: &RankingData, pair: usize) -> &str {
    data.samples[data.pairs[pair].fast].kind.as_str()
}
