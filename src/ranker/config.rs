//! Hyper-parameters of the ranker, with documented defaults.

use burn::config::Config;

use super::error::{RankerError, Result};

/// Hyper-parameters of the pairwise ranker. Every field has a default chosen for the fixture
/// data set (about 45 tasks × 4 implementations, 40–80 features); change one with its
/// `with_*` setter: `RankerConfig::new().with_epochs(100)`.
///
/// The configuration is saved with a trained model, so the model can be rebuilt exactly.
#[derive(Config, Debug, PartialEq)]
pub struct RankerConfig {
    /// Widths of the hidden layers of the MLP scorer `s(x)`, each followed by a ReLU; the
    /// output layer has width 1. An empty list gives a linear scorer.
    #[config(default = "vec![64, 32]")]
    pub hidden: Vec<usize>,
    /// Probability of zeroing a hidden activation during training (0 disables dropout).
    #[config(default = 0.0)]
    pub dropout: f64,
    /// Adam learning rate.
    #[config(default = 3e-3)]
    pub learning_rate: f64,
    /// L2 penalty added to the gradients by Adam (0 disables it).
    #[config(default = 1e-4)]
    pub weight_decay: f32,
    /// L1 penalty on the first layer's weights, added to each batch's loss: pushes the
    /// weights of uninformative features to zero (0 disables it).
    #[config(default = 1e-3)]
    pub input_l1: f32,
    /// Maximum number of passes over the training pairs.
    #[config(default = 300)]
    pub epochs: usize,
    /// Stop after this many epochs without a lower validation loss (the weights of the best
    /// epoch are kept). Without a validation split, all `epochs` run.
    #[config(default = 30)]
    pub patience: usize,
    /// Epochs always trained before early stopping may keep a best epoch: the weights kept
    /// are the best of epochs `min_epochs..` (validation loss on ~25 tasks is noisy enough
    /// to pick epoch 2 of 32, which is what the model shipped before this setting did).
    #[config(default = 20)]
    pub min_epochs: usize,
    /// Pairs per gradient step.
    #[config(default = 64)]
    pub batch_size: usize,
    /// Seed of weight initialisation, shuffling, dropout and the task splits: the same seed
    /// and data give bit-identical scores.
    #[config(default = 42)]
    pub seed: u64,
    /// Fraction of the training *tasks* held out for early stopping (rounded, at least one
    /// task when > 0 and there are two tasks or more). No task is in both parts.
    #[config(default = 0.2)]
    pub validation_fraction: f64,
    /// Pairs with `log_ratio` below this are ties within measurement noise and are dropped
    /// (0.05 ≈ a 5 % time difference).
    #[config(default = 0.05)]
    pub min_log_ratio: f32,
    /// Cap on a pair's loss weight `min(log_ratio, max_pair_weight)`, so that a few
    /// 100× pairs do not drown the rest (2.0 ≈ a 7.4× time difference).
    #[config(default = 2.0)]
    pub max_pair_weight: f32,
    /// Soft targets: a pair's target probability that the faster one wins is
    /// `σ(log_ratio / soft_target_scale)` (0.15: a 1.06× pair ≈ 0.6, a 1.5× pair ≈ 0.94,
    /// 2× ≈ 0.99), so near-ties are trained towards p = 0.5 instead of certainty, and
    /// every pair is trained on (`min_log_ratio` then only filters evaluation). 0: hard
    /// targets (target 1, ties below `min_log_ratio` dropped), as before.
    #[config(default = 0.15)]
    pub soft_target_scale: f32,
    /// Lower bound of a pair's loss weight with soft targets (near-ties still count).
    #[config(default = 0.1)]
    pub min_pair_weight: f32,
    /// Members of the ensemble: each is trained with its own seed (`seed + 1000·m`), so its
    /// own initialisation, shuffling and early-stopping split of tasks; the score is their
    /// mean and their disagreement is the uncertainty signal. 1: a single model.
    #[config(default = 5)]
    pub ensemble: usize,
    /// Fit a temperature `T` on the members' validation pairs so that `σ(Δs / T)` is
    /// calibrated (false: `T = 1`).
    #[config(default = true)]
    pub calibrate: bool,
    /// Gradient-boosted trees per member, fitted on the member's training pairs with the same
    /// loss as its MLP; the member's score is then the mean of the two (0: MLP only, as
    /// models before format version 3). See [`BoostedTrees`](super::BoostedTrees).
    #[config(default = 300)]
    pub trees: usize,
    /// Deepest split level of a tree (4: at most 16 leaves).
    #[config(default = 4)]
    pub tree_depth: usize,
    /// Shrinkage `η` of each tree's leaf values.
    #[config(default = 0.05)]
    pub tree_learning_rate: f64,
    /// Fewest training samples in a leaf.
    #[config(default = 10)]
    pub tree_min_samples: usize,
    /// Share of the features one tree may split on (drawn per tree from the member's seed).
    #[config(default = 0.8)]
    pub tree_colsample: f64,
    /// L2 penalty `λ` on leaf values (`−η G / (H + λ)`).
    #[config(default = 1.0)]
    pub tree_lambda: f64,
    /// Weight `w` of the analytical time estimate in every member's score: the member's
    /// learned score minus `w · (e − mean e)`, `e = traffic_estimated_time_us` (`ln(1 + t̂)`,
    /// t̂ in µs) clamped to its training range, so a pair's margin moves by `−w` per unit of
    /// the two kernels' estimated log-time difference. The learned parts are trained as
    /// without it; the temperature is fitted on the sum. 0: the learned score alone (models
    /// before format version 4); ignored by feature sets without that feature.
    #[config(default = 0.25)]
    pub estimate_weight: f32,
}

impl Default for RankerConfig {
    fn default() -> Self {
        Self::new()
    }
}

impl RankerConfig {
    /// Checks every field; called by training and cross-validation.
    pub fn validate(&self) -> Result<()> {
        if let Some(i) = self.hidden.iter().position(|&h| h == 0) {
            return Err(RankerError::config(
                "hidden",
                format!("has a zero-width layer at position {i}"),
            ));
        }
        if !(0.0..1.0).contains(&self.dropout) {
            return Err(RankerError::config(
                "dropout",
                format!("is {}, must be in [0, 1)", self.dropout),
            ));
        }
        if !(self.learning_rate.is_finite() && self.learning_rate > 0.0) {
            return Err(RankerError::config(
                "learning_rate",
                format!("is {}, must be finite and > 0", self.learning_rate),
            ));
        }
        if !(self.weight_decay.is_finite() && self.weight_decay >= 0.0) {
            return Err(RankerError::config(
                "weight_decay",
                format!("is {}, must be finite and >= 0", self.weight_decay),
            ));
        }
        if !(self.input_l1.is_finite() && self.input_l1 >= 0.0) {
            return Err(RankerError::config(
                "input_l1",
                format!("is {}, must be finite and >= 0", self.input_l1),
            ));
        }
        if self.epochs == 0 {
            return Err(RankerError::config("epochs", "is 0, must be >= 1"));
        }
        if self.batch_size == 0 {
            return Err(RankerError::config("batch_size", "is 0, must be >= 1"));
        }
        if !(0.0..1.0).contains(&self.validation_fraction) {
            return Err(RankerError::config(
                "validation_fraction",
                format!("is {}, must be in [0, 1)", self.validation_fraction),
            ));
        }
        if !(self.min_log_ratio.is_finite() && self.min_log_ratio >= 0.0) {
            return Err(RankerError::config(
                "min_log_ratio",
                format!("is {}, must be finite and >= 0", self.min_log_ratio),
            ));
        }
        if !(self.soft_target_scale.is_finite() && self.soft_target_scale >= 0.0) {
            return Err(RankerError::config(
                "soft_target_scale",
                format!("is {}, must be finite and >= 0", self.soft_target_scale),
            ));
        }
        if !(self.min_pair_weight.is_finite() && self.min_pair_weight >= 0.0) {
            return Err(RankerError::config(
                "min_pair_weight",
                format!("is {}, must be finite and >= 0", self.min_pair_weight),
            ));
        }
        if self.ensemble == 0 {
            return Err(RankerError::config("ensemble", "is 0, must be >= 1"));
        }
        if !(self.max_pair_weight.is_finite() && self.max_pair_weight > 0.0) {
            return Err(RankerError::config(
                "max_pair_weight",
                format!("is {}, must be finite and > 0", self.max_pair_weight),
            ));
        }
        if !(self.estimate_weight.is_finite() && self.estimate_weight >= 0.0) {
            return Err(RankerError::config(
                "estimate_weight",
                format!("is {}, must be finite and >= 0", self.estimate_weight),
            ));
        }
        self.validate_trees()
    }

    /// The tree fields, checked only when trees are trained (`trees > 0`).
    fn validate_trees(&self) -> Result<()> {
        if self.trees == 0 {
            return Ok(());
        }
        if !(1..=12).contains(&self.tree_depth) {
            return Err(RankerError::config(
                "tree_depth",
                format!("is {}, must be 1 to 12", self.tree_depth),
            ));
        }
        if !(self.tree_learning_rate.is_finite() && self.tree_learning_rate > 0.0) {
            return Err(RankerError::config(
                "tree_learning_rate",
                format!("is {}, must be finite and > 0", self.tree_learning_rate),
            ));
        }
        if self.tree_min_samples == 0 {
            return Err(RankerError::config(
                "tree_min_samples",
                "is 0, must be >= 1",
            ));
        }
        if !(self.tree_colsample > 0.0 && self.tree_colsample <= 1.0) {
            return Err(RankerError::config(
                "tree_colsample",
                format!("is {}, must be in (0, 1]", self.tree_colsample),
            ));
        }
        if !(self.tree_lambda.is_finite() && self.tree_lambda >= 0.0) {
            return Err(RankerError::config(
                "tree_lambda",
                format!("is {}, must be finite and >= 0", self.tree_lambda),
            ));
        }
        Ok(())
    }

    /// The loss weight of a pair: `min(log_ratio, max_pair_weight)`, at least
    /// `min_pair_weight` with soft targets.
    pub fn pair_weight(&self, log_ratio: f32) -> f32 {
        let w = log_ratio.min(self.max_pair_weight);
        if self.soft_target_scale > 0.0 {
            w.max(self.min_pair_weight)
        } else {
            w
        }
    }

    /// The target probability that the faster implementation of a pair is faster:
    /// `σ(log_ratio / soft_target_scale)`, or 1 with hard targets.
    pub fn pair_target(&self, log_ratio: f32) -> f32 {
        if self.soft_target_scale > 0.0 {
            super::trained::sigmoid(log_ratio / self.soft_target_scale)
        } else {
            1.0
        }
    }

    /// The smallest log ratio of a pair that is trained on: every pair with soft targets,
    /// `min_log_ratio` with hard ones.
    pub fn train_min_log_ratio(&self) -> f32 {
        if self.soft_target_scale > 0.0 {
            0.0
        } else {
            self.min_log_ratio
        }
    }
}
