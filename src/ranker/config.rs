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
        if !(self.max_pair_weight.is_finite() && self.max_pair_weight > 0.0) {
            return Err(RankerError::config(
                "max_pair_weight",
                format!("is {}, must be finite and > 0", self.max_pair_weight),
            ));
        }
        Ok(())
    }

    /// The loss weight of a pair: `min(log_ratio, max_pair_weight)`.
    pub fn pair_weight(&self, log_ratio: f32) -> f32 {
        log_ratio.min(self.max_pair_weight)
    }
}
