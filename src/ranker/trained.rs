//! A trained ranker: normalisation + weights + the names of the features it expects.

use burn::tensor::{Device, Tensor, TensorData};
use serde::{Deserialize, Serialize};

use super::config::RankerConfig;
use super::context::{context_base_len, with_reference};
use super::error::{RankerError, Result};
use super::model::{read_vec, MlpWeights};
use super::normalize::Normalizer;
use super::trees::{estimate_term, estimate_value, member_score, BoostedTrees};

/// What the training run that produced a model saw; saved with the model.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct TrainingSummary {
    /// Epochs that ran (early stopping may end before `config.epochs`).
    pub epochs_run: usize,
    /// Epoch (1-based) whose weights were kept.
    pub best_epoch: usize,
    /// Validation loss of the kept weights (`None` without a validation split).
    pub best_val_loss: Option<f32>,
    /// Validation pairwise accuracy of the kept weights.
    pub best_val_accuracy: Option<f64>,
    /// Tasks whose pairs were trained on.
    pub train_tasks: Vec<String>,
    /// Tasks held out for early stopping.
    pub val_tasks: Vec<String>,
    /// Number of training pairs (ties dropped).
    pub train_pairs: usize,
    /// Number of validation pairs (ties dropped).
    pub val_pairs: usize,
    /// The other ensemble members' runs (the fields above describe the first member);
    /// empty for a single model.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub members: Vec<MemberSummary>,
    /// Temperature `T` fitted on the members' validation pairs (1 when not calibrated).
    #[serde(default = "one")]
    pub temperature: f32,
}

fn one() -> f32 {
    1.0
}

/// What one ensemble member's training run saw.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct MemberSummary {
    /// The member's seed.
    pub seed: u64,
    /// Epochs that ran.
    pub epochs_run: usize,
    /// Epoch (1-based) whose weights were kept.
    pub best_epoch: usize,
    /// Validation loss of the kept weights.
    pub best_val_loss: Option<f32>,
    /// Validation pairwise accuracy of the kept weights.
    pub best_val_accuracy: Option<f64>,
    /// Tasks held out for the member's early stopping.
    pub val_tasks: Vec<String>,
}

/// The ranker's verdict on two implementations of the same task.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Comparison {
    /// Calibrated probability that the first is faster: `σ(mean_m Δs_m / T)`.
    pub prob_faster: f32,
    /// Disagreement of the ensemble: the standard deviation over members of their own
    /// calibrated probability `σ(Δs_m / T)` (0 for a single model; up to 0.5). Large on
    /// code unlike the training data, where the members extrapolate differently.
    pub uncertainty: f32,
    /// How far the first implementation's features lie outside the training range, in
    /// standard deviations of the largest such dimension (0 inside; see
    /// [`Normalizer::out_of_range`]).
    pub out_of_range: f32,
}

/// A trained pairwise ranker. Scores are comparable between implementations of the same
/// task: `s(a) > s(b)` means `a` is predicted to be faster.
///
/// Scoring uses a plain-Rust forward pass over the extracted weights (no tensor overhead);
/// [`score_batch_on`](Self::score_batch_on) runs the same model through burn on any device.
/// The type is `Send + Sync` and cheap to share behind an `Arc`.
#[derive(Debug, Clone, PartialEq)]
pub struct TrainedRanker {
    pub(crate) feature_names: Vec<String>,
    pub(crate) normalizer: Normalizer,
    pub(crate) weights: MlpWeights,
    pub(crate) config: RankerConfig,
    pub(crate) summary: TrainingSummary,
    /// Ensemble members after the first (`weights`); empty for a single model.
    pub(crate) members: Vec<MlpWeights>,
    /// Calibration temperature: probabilities are `σ(Δs / T)`.
    pub(crate) temperature: f32,
    /// Each member's boosted trees, in member order; empty for an MLP-only model.
    pub(crate) trees: Vec<BoostedTrees>,
}

/// Logistic function, written to stay finite for any input.
pub fn sigmoid(x: f32) -> f32 {
    if x >= 0.0 {
        1.0 / (1.0 + (-x).exp())
    } else {
        let e = x.exp();
        e / (1.0 + e)
    }
}

/// The ranker's reward term in [-1, 1]: `2σ(s_cand − s_ref) − 1`, positive when the candidate
/// is predicted faster than the reference (computed as `tanh((s_cand − s_ref) / 2)`, the same
/// value without cancellation).
pub fn ranker_reward_value(s_cand: f32, s_ref: f32) -> f32 {
    ((s_cand - s_ref) / 2.0).tanh()
}

impl TrainedRanker {
    /// Names of the features the model expects, in order.
    pub fn feature_names(&self) -> &[String] {
        &self.feature_names
    }

    /// The configuration it was trained with.
    pub fn config(&self) -> &RankerConfig {
        &self.config
    }

    /// The normalisation fitted on the training samples.
    pub fn normalizer(&self) -> &Normalizer {
        &self.normalizer
    }

    /// The scorer's weights.
    pub fn weights(&self) -> &MlpWeights {
        &self.weights
    }

    /// What the training run saw.
    pub fn summary(&self) -> &TrainingSummary {
        &self.summary
    }

    /// Errors with [`RankerError::FeatureMismatch`] unless `expected` equals the model's
    /// feature names (same names, same order).
    pub fn check_features(&self, expected: &[String]) -> Result<()> {
        check_names("trained ranker", &self.feature_names, expected)
    }

    /// The names of the feature vectors its callers compute: [`feature_names`](Self::feature_names)
    /// without the `vs_reference_*` half for a [reference-context](Self::reference_context)
    /// model, all of them otherwise.
    pub fn base_feature_names(&self) -> &[String] {
        let n = context_base_len(&self.feature_names).unwrap_or(self.feature_names.len());
        &self.feature_names[..n]
    }

    /// True when the model scores a candidate together with its difference from the task's
    /// reference (its feature names end with a `vs_reference_` copy of the others; see
    /// [`input_against`](Self::input_against)).
    pub fn reference_context(&self) -> bool {
        context_base_len(&self.feature_names).is_some()
    }

    /// The model's input for a candidate whose base features ([`base_feature_names`](Self::base_feature_names))
    /// are `candidate`, in a task whose reference's are `reference`: `[candidate, candidate −
    /// reference]` for a reference-context model, `candidate` itself otherwise (the reference
    /// is then only checked). Score the reference with `input_against(reference, reference)`.
    pub fn input_against(&self, candidate: &[f32], reference: &[f32]) -> Result<Vec<f32>> {
        // One pass over the names for both the width and the mode (a per-candidate call).
        let context = context_base_len(&self.feature_names);
        let base = context.unwrap_or(self.feature_names.len());
        for (index, x) in [candidate, reference].into_iter().enumerate() {
            if x.len() != base {
                return Err(RankerError::InputLength {
                    index,
                    expected: base,
                    found: x.len(),
                });
            }
        }
        Ok(if context.is_some() {
            with_reference(candidate, reference)
        } else {
            candidate.to_vec()
        })
    }

    fn check_input(&self, index: usize, x: &[f32]) -> Result<()> {
        let expected = self.feature_names.len();
        if x.len() != expected && self.reference_context() && 2 * x.len() == expected {
            return Err(RankerError::NeedsReference {
                what: format!("input {index}"),
                features: expected / 2,
            });
        }
        if x.len() != expected {
            return Err(RankerError::InputLength {
                index,
                expected,
                found: x.len(),
            });
        }
        if let Some((feature_index, &value)) = x.iter().enumerate().find(|(_, v)| !v.is_finite()) {
            return Err(RankerError::NonFiniteInput {
                index,
                feature_index,
                feature: self.feature_names[feature_index].clone(),
                value,
            });
        }
        Ok(())
    }

    /// All members' weights, the first one first.
    pub fn members(&self) -> impl Iterator<Item = &MlpWeights> {
        std::iter::once(&self.weights).chain(&self.members)
    }

    /// Each member's boosted trees, in member order (empty when the members are MLPs only;
    /// otherwise a member scores the mean of its MLP and its trees).
    pub fn trees(&self) -> &[BoostedTrees] {
        &self.trees
    }

    /// Number of ensemble members (1 for a single model).
    pub fn ensemble_size(&self) -> usize {
        1 + self.members.len()
    }

    /// The calibration temperature `T` (1 for an uncalibrated model).
    pub fn temperature(&self) -> f32 {
        self.temperature
    }

    /// Score of one raw (un-normalised) feature vector, the mean over the ensemble's
    /// members; higher means predicted faster.
    pub fn score(&self, features: &[f32]) -> Result<f32> {
        let per_member = self.member_scores(features)?;
        Ok(per_member.iter().sum::<f32>() / per_member.len() as f32)
    }

    /// Each member's score of one raw feature vector.
    pub fn member_scores(&self, features: &[f32]) -> Result<Vec<f32>> {
        self.check_input(0, features)?;
        let x = self.normalizer.apply(features);
        let (mut a, mut b) = (Vec::new(), Vec::new());
        let estimate = estimate_value(self.estimate_term(), &x);
        Ok(self
            .members()
            .enumerate()
            .map(|(i, m)| {
                member_score(m.forward_with(&x, &mut a, &mut b), self.trees.get(i), &x) + estimate
            })
            .collect())
    }

    /// The estimate term every member's score carries ([`RankerConfig::estimate_weight`]).
    fn estimate_term(&self) -> Option<(usize, f32)> {
        estimate_term(
            &self.feature_names,
            &self.normalizer,
            self.config.estimate_weight,
        )
    }

    /// The calibrated verdict on `a` against `b` from their member scores
    /// ([`member_scores`](Self::member_scores)); `a_features` (optional) gives the
    /// out-of-range distance.
    pub fn compare_scores(&self, a: &[f32], b: &[f32], a_features: Option<&[f32]>) -> Comparison {
        let t = self.temperature.max(1e-3);
        let n = a.len().min(b.len()).max(1) as f32;
        let d: Vec<f32> = a.iter().zip(b).map(|(x, y)| x - y).collect();
        let mean = d.iter().sum::<f32>() / n;
        let p: Vec<f32> = d.iter().map(|x| sigmoid(x / t)).collect();
        let pm = p.iter().sum::<f32>() / n;
        let var = p.iter().map(|x| (x - pm) * (x - pm)).sum::<f32>() / n;
        Comparison {
            prob_faster: sigmoid(mean / t),
            uncertainty: var.sqrt(),
            out_of_range: a_features.map_or(0.0, |f| self.normalizer.out_of_range(f)),
        }
    }

    /// The calibrated verdict on raw feature vectors `a` against `b`.
    pub fn compare(&self, a: &[f32], b: &[f32]) -> Result<Comparison> {
        let (sa, sb) = (self.member_scores(a)?, self.member_scores(b)?);
        Ok(self.compare_scores(&sa, &sb, Some(a)))
    }

    /// Scores of several raw feature vectors (plain-Rust forward pass).
    pub fn score_batch(&self, batch: &[Vec<f32>]) -> Result<Vec<f32>> {
        let mut buf = vec![0.0; self.feature_names.len()];
        let (mut a, mut b) = (Vec::new(), Vec::new());
        let term = self.estimate_term();
        batch
            .iter()
            .enumerate()
            .map(|(i, x)| {
                self.check_input(i, x)?;
                self.normalizer.apply_into(x, &mut buf);
                let sum: f32 = self
                    .members()
                    .enumerate()
                    .map(|(i, m)| {
                        member_score(
                            m.forward_with(&buf, &mut a, &mut b),
                            self.trees.get(i),
                            &buf,
                        )
                    })
                    .sum();
                Ok(sum / self.ensemble_size() as f32 + estimate_value(term, &buf))
            })
            .collect()
    }

    /// Scores of several raw feature vectors through burn on `device` (for large batches on
    /// an accelerator, and as the reference for the plain-Rust pass).
    pub fn score_batch_on(&self, device: &Device, batch: &[Vec<f32>]) -> Result<Vec<f32>> {
        if batch.is_empty() {
            return Ok(Vec::new());
        }
        let dim = self.feature_names.len();
        let mut rows = Vec::with_capacity(batch.len() * dim);
        for (i, x) in batch.iter().enumerate() {
            self.check_input(i, x)?;
            rows.extend(self.normalizer.apply(x));
        }
        let x = Tensor::<2>::from_data(TensorData::new(rows.clone(), [batch.len(), dim]), device);
        let mut total = vec![0.0f32; batch.len()];
        for (i, m) in self.members().enumerate() {
            let s = read_vec(m.to_module(device).forward(x.clone()))?;
            // Trees have no tensor form: they run in plain Rust on the same rows.
            let trees = self.trees.get(i);
            for ((t, v), row) in total.iter_mut().zip(s).zip(rows.chunks_exact(dim)) {
                *t += member_score(v, trees, row);
            }
        }
        let k = self.ensemble_size() as f32;
        let term = self.estimate_term();
        Ok(total
            .into_iter()
            .zip(rows.chunks_exact(dim))
            .map(|(t, row)| t / k + estimate_value(term, row))
            .collect())
    }

    /// Calibrated probability that `a` is faster than `b`: `σ((s(a) − s(b)) / T)`.
    pub fn prob_faster(&self, a: &[f32], b: &[f32]) -> Result<f32> {
        Ok(sigmoid(
            (self.score(a)? - self.score(b)?) / self.temperature.max(1e-3),
        ))
    }
}

/// Compares feature-name lists and explains the first difference.
pub(crate) fn check_names(model: &str, have: &[String], expected: &[String]) -> Result<()> {
    if have == expected {
        return Ok(());
    }
    let detail = match have.iter().zip(expected).position(|(a, b)| a != b) {
        Some(i) => format!(
            "feature {i} is `{}` in the model but `{}` in the caller's list",
            have[i], expected[i]
        ),
        None => format!(
            "the model has {} features, the caller {} (the shorter list is a prefix of the other)",
            have.len(),
            expected.len()
        ),
    };
    Err(RankerError::FeatureMismatch {
        model: model.to_owned(),
        detail,
        model_features: have.to_vec(),
        expected_features: expected.to_vec(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reward_is_bounded_antisymmetric_and_zero_at_equality() {
        assert_eq!(ranker_reward_value(1.0, 1.0), 0.0);
        let r = ranker_reward_value(3.0, 1.0);
        assert!((r - (2.0 * sigmoid(2.0) - 1.0)).abs() < 1e-6);
        assert_eq!(ranker_reward_value(1.0, 3.0), -r);
        assert_eq!(ranker_reward_value(1e30, -1e30), 1.0);
        assert!(sigmoid(-1e4) >= 0.0 && sigmoid(1e4) <= 1.0);
    }
}
