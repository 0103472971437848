//! Training: RankNet / Bradley–Terry loss on same-task pairs, Adam, early stopping on a
//! validation split by task, an ensemble of members and a fitted temperature.
//!
//! For a pair (fast, slow) with `d = s(fast) − s(slow)` the loss is the cross-entropy
//! `w · −(t log σ(d) + (1 − t) log σ(−d))` against the soft target
//! `t = σ(log_ratio / soft_target_scale)` ([`RankerConfig::pair_target`]): a 1.06× pair is
//! trained towards p ≈ 0.6, not certainty, which is what keeps near-ties near 0.5. The
//! weight `w = min(log_ratio, max_pair_weight)` (at least `min_pair_weight`) lets a 4×
//! difference pull harder than a 1.1× one. With `soft_target_scale = 0` it is the plain
//! RankNet loss `w · (−log σ(d))` with ties below `min_log_ratio` dropped. Each
//! batch's loss is the weighted mean over its pairs, plus `input_l1 · Σ|W₁|` on the first
//! layer: with ~45 tasks and 40–80 features, most features are uninformative for a given
//! slice of the data, and Adam (whose step size ignores gradient magnitude) lets their
//! weights drift; the L1 term pulls them back to zero. On the synthetic fixture-sized set
//! (one deciding feature among 60) it lifts held-out accuracy from ~0.71 to ~0.98.
//!
//! Every member of the ensemble ([`RankerConfig::ensemble`]) runs this loop with its own seed,
//! so its own validation tasks: each stops on its own held-out tasks, and the shipped model
//! is exactly the ensemble that cross-validation trains per fold. The temperature is then
//! fitted on the pooled validation pairs of all members (each scored by the member that did
//! not train on it).

use std::collections::BTreeSet;
use std::time::Instant;

use burn::optim::decay::WeightDecayConfig;
use burn::optim::{AdamConfig, GradientsParams};
use burn::tensor::activation::log_sigmoid;
use burn::tensor::{Device, Tensor, TensorData};
use serde::{Deserialize, Serialize};

use super::config::RankerConfig;
use super::data::{split_tasks, RankingData};
use super::error::{RankerError, Result};
use super::eval::pair_loss_and_accuracy;
use super::model::{layer_dims, read_vec, MlpWeights, ScorerNet};
use super::normalize::Normalizer;
use super::rng::SplitMix64;
use super::trained::{MemberSummary, TrainedRanker, TrainingSummary};
use super::trees::{estimate_term, estimate_value, member_score, BoostedTrees};

/// What one epoch did; passed to the progress callback and kept in [`TrainingHistory`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EpochStats {
    /// 0-based ensemble member the epoch belongs to.
    #[serde(default)]
    pub member: usize,
    /// 1-based epoch number.
    pub epoch: usize,
    /// Weighted mean training loss over the epoch's batches (with dropout, if any).
    pub train_loss: f32,
    /// Pairwise accuracy on the training pairs after the epoch.
    pub train_accuracy: f64,
    /// Weighted mean loss on the validation pairs (`None` without a validation split).
    pub val_loss: Option<f32>,
    /// Pairwise accuracy on the validation pairs.
    pub val_accuracy: Option<f64>,
    /// True when this epoch's weights are the best so far (and so, for now, the kept ones).
    pub is_best: bool,
    /// Seconds since training started.
    pub elapsed_s: f64,
}

/// The per-epoch record of a training run (of its first ensemble member; the others' are in
/// `members`).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct TrainingHistory {
    /// One entry per epoch that ran.
    pub epochs: Vec<EpochStats>,
    /// The other members' histories.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub members: Vec<TrainingHistory>,
    /// Epoch (1-based) whose weights were kept.
    pub best_epoch: usize,
    /// True when early stopping ended the run before `config.epochs`.
    pub stopped_early: bool,
    /// Wall-clock seconds of the whole run.
    pub seconds: f64,
}

/// Trains a ranker on all tasks of `data` on burn's default device (the ndarray CPU backend
/// by default, libtorch with the `tch` feature; `BURN_DEVICE` overrides). `progress` is called
/// after every epoch.
///
/// ```
/// use cudaperf::ranker::{synthetic, train, RankerConfig};
/// # fn main() -> Result<(), cudaperf::ranker::RankerError> {
/// let data = synthetic::decisive_feature(12, 4, 8, 1);
/// let config = RankerConfig::new().with_epochs(20);
/// let (ranker, history) = train(&data, &config, |e| println!("epoch {} loss {}", e.epoch, e.train_loss))?;
/// assert!(history.epochs.len() <= 20);
/// let s = ranker.score(&data.samples[0].features)?;
/// assert!(s.is_finite());
/// # Ok(()) }
/// ```
pub fn train(
    data: &RankingData,
    config: &RankerConfig,
    progress: impl FnMut(EpochStats),
) -> Result<(TrainedRanker, TrainingHistory)> {
    train_on(&Device::default(), data, config, progress)
}

/// Like [`train`], on the given device (autodiff is enabled on it for training).
pub fn train_on(
    device: &Device,
    data: &RankingData,
    config: &RankerConfig,
    progress: impl FnMut(EpochStats),
) -> Result<(TrainedRanker, TrainingHistory)> {
    config.validate()?;
    data.validate()?;
    train_on_tasks(device, data, &data.tasks(), config, progress)
}

/// Trains the ensemble on the pairs of `tasks` only (the caller has validated data and
/// config); each member's validation split is drawn from these tasks. Cross-validation uses
/// this per fold.
pub(crate) fn train_on_tasks(
    device: &Device,
    data: &RankingData,
    tasks: &[String],
    config: &RankerConfig,
    mut progress: impl FnMut(EpochStats),
) -> Result<(TrainedRanker, TrainingHistory)> {
    let start = Instant::now();
    let dim = data.feature_names.len();
    let task_set: BTreeSet<&str> = tasks.iter().map(String::as_str).collect();
    // Statistics (and the clamp range) from these tasks only: held-out tasks never leak in.
    let normalizer = Normalizer::fit(
        data.samples
            .iter()
            .filter(|s| task_set.contains(s.task.as_str()))
            .map(|s| s.features.as_slice()),
        dim,
    );
    let mut normed = vec![0.0f32; data.samples.len() * dim];
    for (s, out) in data.samples.iter().zip(normed.chunks_exact_mut(dim)) {
        normalizer.apply_into(&s.features, out);
    }
    let mut runs = Vec::with_capacity(config.ensemble);
    for m in 0..config.ensemble {
        let member_config = config
            .clone()
            .with_seed(config.seed.wrapping_add(1000 * m as u64));
        runs.push(train_member(
            device,
            data,
            tasks,
            &normed,
            &member_config,
            m,
            &mut progress,
        )?);
    }
    let temperature = if config.calibrate {
        let term = estimate_term(&data.feature_names, &normalizer, config.estimate_weight);
        fit_temperature(&validation_margins(data, &runs, &normed, dim, term, config))
    } else {
        1.0
    };
    let mut runs = runs.into_iter();
    let first = runs.next().ok_or_else(|| RankerError::NoPairs {
        reason: "no ensemble member ran".into(),
    })?;
    let others: Vec<MemberRun> = runs.collect();
    let mut summary = first.summary.clone();
    summary.members = others.iter().map(|r| r.member_summary()).collect();
    summary.temperature = temperature;
    let mut history = first.history;
    history.members = others.iter().map(|r| r.history.clone()).collect();
    history.seconds = start.elapsed().as_secs_f64();
    let ranker = TrainedRanker {
        feature_names: data.feature_names.clone(),
        normalizer,
        weights: first.weights,
        config: config.clone(),
        summary,
        trees: std::iter::once(first.trees)
            .chain(others.iter().map(|r| r.trees.clone()))
            .collect::<Option<Vec<_>>>()
            .unwrap_or_default(),
        members: others.into_iter().map(|r| r.weights).collect(),
        temperature,
    };
    Ok((ranker, history))
}

/// Each member's validation pairs scored by that member: (margin, label), label 1 when the
/// first is faster beyond `min_log_ratio`, 0.5 for a tie.
fn validation_margins(
    data: &RankingData,
    runs: &[MemberRun],
    normed: &[f32],
    dim: usize,
    term: Option<(usize, f32)>,
    config: &RankerConfig,
) -> Vec<(f64, f64)> {
    let mut val_d = Vec::new();
    for r in runs {
        let scores = r.weights_scores(normed, dim, term);
        for &i in &r.val_pairs {
            let p = data.pairs[i];
            let label = if p.log_ratio >= config.min_log_ratio {
                1.0
            } else {
                0.5
            };
            val_d.push((scores[p.fast] - scores[p.slow], label));
        }
    }
    val_d
}

/// The temperature `T` that minimises the cross-entropy of `σ(d / T)` against the labels
/// (1: the first is faster; 0.5: a tie), searched on a log grid from 0.1 to 20 (1 without
/// pairs).
pub(crate) fn fit_temperature(pairs: &[(f64, f64)]) -> f32 {
    if pairs.is_empty() {
        return 1.0;
    }
    let nll = |t: f64| -> f64 {
        pairs
            .iter()
            .map(|&(d, y)| {
                let z = d / t;
                // −[y log σ(z) + (1−y) log σ(−z)], overflow-free.
                y * softplus(-z) + (1.0 - y) * softplus(z)
            })
            .sum()
    };
    let mut best = (f64::INFINITY, 1.0);
    for k in 0..=100 {
        let t = 0.1 * (200f64).powf(f64::from(k) / 100.0);
        let l = nll(t);
        if l < best.0 {
            best = (l, t);
        }
    }
    best.1 as f32
}

/// `ln(1 + e^x)` without overflow.
pub(crate) fn softplus(x: f64) -> f64 {
    if x > 0.0 {
        x + (-x).exp().ln_1p()
    } else {
        x.exp().ln_1p()
    }
}

/// One member's training run.
struct MemberRun {
    weights: MlpWeights,
    /// The member's boosted trees (`None` with `config.trees == 0`).
    trees: Option<BoostedTrees>,
    history: TrainingHistory,
    summary: TrainingSummary,
    seed: u64,
    val_pairs: Vec<usize>,
}

impl MemberRun {
    /// The member's scores of the normalised rows, with the estimate term `term`.
    fn weights_scores(&self, normed: &[f32], dim: usize, term: Option<(usize, f32)>) -> Vec<f64> {
        normed
            .chunks_exact(dim)
            .map(|x| {
                let learned = member_score(self.weights.forward(x), self.trees.as_ref(), x);
                f64::from(learned + estimate_value(term, x))
            })
            .collect()
    }

    fn member_summary(&self) -> MemberSummary {
        MemberSummary {
            seed: self.seed,
            epochs_run: self.summary.epochs_run,
            best_epoch: self.summary.best_epoch,
            best_val_loss: self.summary.best_val_loss,
            best_val_accuracy: self.summary.best_val_accuracy,
            val_tasks: self.summary.val_tasks.clone(),
        }
    }
}

/// What every epoch of one member's training reads: the pairs, the normalised feature rows
/// (`dim` values each), the settings and the autodiff device.
struct Epochs<'a> {
    data: &'a RankingData,
    normed: &'a [f32],
    dim: usize,
    config: &'a RankerConfig,
    ad: Device,
    train_pairs: Vec<usize>,
    val_pairs: Vec<usize>,
}

/// One epoch's evaluation: the weights, the training accuracy and the validation loss and
/// accuracy (`None` without validation pairs).
struct EpochEval {
    weights: MlpWeights,
    train_accuracy: f64,
    val: Option<(f32, f64)>,
}

impl Epochs<'_> {
    /// The feature rows of samples `idx`, concatenated.
    fn rows(&self, idx: impl Iterator<Item = usize>) -> Vec<f32> {
        let dim = self.dim;
        idx.flat_map(|s| self.normed[s * dim..(s + 1) * dim].iter().copied())
            .collect()
    }

    /// The loss of one batch of pairs (what backpropagates: the weighted ranking loss, plus
    /// the input L1 penalty), the ranking loss's value and the batch's total pair weight.
    fn batch_loss(
        &self,
        model: &ScorerNet,
        batch: &[usize],
        rng: &mut SplitMix64,
        epoch: usize,
    ) -> Result<(Tensor<1>, f32, f32)> {
        let (config, ad, b, dim) = (self.config, &self.ad, batch.len(), self.dim);
        let pairs = batch.iter().map(|&i| self.data.pairs[i]);
        let xf = self.rows(pairs.clone().map(|p| p.fast));
        let xs = self.rows(pairs.clone().map(|p| p.slow));
        let w: Vec<f32> = pairs
            .clone()
            .map(|p| config.pair_weight(p.log_ratio))
            .collect();
        let targets: Vec<f32> = pairs.map(|p| config.pair_target(p.log_ratio)).collect();
        let w_total: f32 = w.iter().sum();
        let w_norm: Vec<f32> = w.iter().map(|x| x / w_total).collect();

        let xf = Tensor::<2>::from_data(TensorData::new(xf, [b, dim]), ad);
        let xs = Tensor::<2>::from_data(TensorData::new(xs, [b, dim]), ad);
        let wt = Tensor::<1>::from_data(TensorData::new(w_norm, [b]), ad);
        let tt = Tensor::<1>::from_data(TensorData::new(targets, [b]), ad);
        let mut mask = dropout_masks(config.dropout, ad, rng);
        let sf = model.forward_with_dropout(xf, &mut mask);
        let ss = model.forward_with_dropout(xs, &mut mask);
        // Cross-entropy against the soft target: t·log σ(d) + (1 − t)·log σ(−d).
        let d = sf - ss;
        let ll = log_sigmoid(d.clone()).mul(tt.clone())
            + log_sigmoid(d.neg()).mul(tt.neg().add_scalar(1.0));
        let mut loss = ll.mul(wt).sum().neg();
        let ranking_loss = loss.clone();
        if config.input_l1 > 0.0 {
            if let Some(first) = model.layers.first() {
                let l1 = first.weight.val().abs().sum().mul_scalar(config.input_l1);
                loss = loss + l1;
            }
        }
        let value = read_vec(ranking_loss)?.first().copied().unwrap_or(f32::NAN);
        if !value.is_finite() {
            return Err(RankerError::Diverged { epoch, loss: value });
        }
        Ok((loss, value, w_total))
    }

    /// Evaluates the model after an epoch with the plain forward pass (same numbers as burn,
    /// no graph to build).
    fn evaluate(&self, model: &ScorerNet) -> Result<EpochEval> {
        let weights = MlpWeights::from_module(model)?;
        let scores: Vec<f64> = self
            .normed
            .chunks_exact(self.dim)
            .map(|x| f64::from(weights.forward(x)))
            .collect();
        let (_, train_accuracy) =
            pair_loss_and_accuracy(self.data, &self.train_pairs, &scores, self.config);
        let val = (!self.val_pairs.is_empty())
            .then(|| pair_loss_and_accuracy(self.data, &self.val_pairs, &scores, self.config));
        Ok(EpochEval {
            weights,
            train_accuracy,
            val,
        })
    }
}

/// A member's split of the tasks and the pairs of each side.
struct MemberPairs {
    train_tasks: Vec<String>,
    val_tasks: Vec<String>,
    train_pairs: Vec<usize>,
    val_pairs: Vec<usize>,
}

/// The training and validation pairs of `tasks` (the validation split drawn with
/// `config.seed`), refused when the training pairs cannot teach an order.
fn member_pairs(
    data: &RankingData,
    tasks: &[String],
    config: &RankerConfig,
) -> Result<MemberPairs> {
    let (train_tasks, val_tasks) = split_tasks(tasks, config.validation_fraction, config.seed);
    let train_set: BTreeSet<&str> = train_tasks.iter().map(String::as_str).collect();
    let val_set: BTreeSet<&str> = val_tasks.iter().map(String::as_str).collect();
    let train_pairs = data.training_pairs_of_tasks(&train_set, config.train_min_log_ratio());
    let val_pairs = data.pairs_of_tasks(&val_set, config.train_min_log_ratio());
    // Ties (trained towards 0.5 with soft targets) cannot teach an order on their own.
    let decisive = train_pairs
        .iter()
        .any(|&i| data.pairs[i].log_ratio >= config.min_log_ratio);
    if train_pairs.is_empty() || !decisive {
        return Err(RankerError::NoPairs {
            reason: format!(
                "the {} training tasks have no pair with log_ratio >= min_log_ratio ({})",
                train_tasks.len(),
                config.min_log_ratio
            ),
        });
    }
    Ok(MemberPairs {
        train_tasks,
        val_tasks,
        train_pairs,
        val_pairs,
    })
}

/// The best weights so far (with their validation loss) and the epochs since.
#[derive(Default)]
struct Best {
    kept: Option<(f32, MlpWeights)>,
    val_accuracy: Option<f64>,
    since: usize,
}

impl Best {
    /// Keeps `e`'s weights if they improved on the best (always before `min_epochs`, and
    /// without validation); whether they did.
    fn offer(&mut self, e: EpochEval, epoch: usize, config: &RankerConfig) -> bool {
        let improved = match (e.val, &self.kept) {
            // Before `min_epochs` the latest weights are kept whatever the validation says.
            _ if epoch <= config.min_epochs => true,
            (Some((l, _)), Some((best_loss, _))) => l < best_loss - 1e-6,
            _ => true, // first epoch, or no validation: the latest weights are the ones kept
        };
        if improved {
            self.kept = Some((e.val.map_or(f32::NAN, |v| v.0), e.weights));
            self.val_accuracy = e.val.map(|v| v.1);
            self.since = 0;
        } else {
            self.since += 1;
        }
        improved
    }
}

/// Trains one scorer on `tasks` (its validation split drawn with `config.seed`) from the
/// normalised feature rows `normed`.
fn train_member(
    device: &Device,
    data: &RankingData,
    tasks: &[String],
    normed: &[f32],
    config: &RankerConfig,
    member: usize,
    progress: &mut impl FnMut(EpochStats),
) -> Result<MemberRun> {
    let start = Instant::now();
    let dim = data.feature_names.len();
    let MemberPairs {
        train_tasks,
        val_tasks,
        train_pairs,
        val_pairs,
    } = member_pairs(data, tasks, config)?;
    let mut rng = SplitMix64::new(config.seed);
    let init = MlpWeights::init(&layer_dims(dim, &config.hidden), &mut rng);
    let epochs = Epochs {
        data,
        normed,
        dim,
        config,
        ad: device.clone().autodiff(),
        train_pairs,
        val_pairs,
    };
    let mut model = init.to_module(&epochs.ad);
    let weight_decay =
        (config.weight_decay > 0.0).then(|| WeightDecayConfig::new(config.weight_decay));
    let mut optim = AdamConfig::new().with_weight_decay(weight_decay).init();
    let mut history = TrainingHistory::default();
    let mut best = Best::default();
    let mut order = epochs.train_pairs.clone();
    for epoch in 1..=config.epochs {
        rng.shuffle(&mut order);
        let (mut loss_sum, mut weight_sum) = (0.0f64, 0.0f64);
        for batch in order.chunks(config.batch_size) {
            let (loss, value, w_total) = epochs.batch_loss(&model, batch, &mut rng, epoch)?;
            loss_sum += f64::from(value) * f64::from(w_total);
            weight_sum += f64::from(w_total);
            let grads = GradientsParams::from_grads(loss.backward(), &model);
            model = optim.step(config.learning_rate, model, grads);
        }
        let e = epochs.evaluate(&model)?;
        let (train_accuracy, val) = (e.train_accuracy, e.val);
        let improved = best.offer(e, epoch, config);
        if improved {
            history.best_epoch = epoch;
        }
        let stats = EpochStats {
            member,
            epoch,
            train_loss: (loss_sum / weight_sum.max(f64::MIN_POSITIVE)) as f32,
            train_accuracy,
            val_loss: val.map(|v| v.0),
            val_accuracy: val.map(|v| v.1),
            is_best: improved,
            elapsed_s: start.elapsed().as_secs_f64(),
        };
        history.epochs.push(stats.clone());
        progress(stats);
        if val.is_some() && best.since >= config.patience {
            history.stopped_early = epoch < config.epochs;
            break;
        }
    }
    history.seconds = start.elapsed().as_secs_f64();
    epochs.finish(best, history, train_tasks, val_tasks)
}

impl Epochs<'_> {
    /// The member's run: the best weights, the history and the summary of its training.
    fn finish(
        self,
        best: Best,
        history: TrainingHistory,
        train_tasks: Vec<String>,
        val_tasks: Vec<String>,
    ) -> Result<MemberRun> {
        let (best_loss, weights) = best.kept.ok_or_else(|| RankerError::NoPairs {
            reason: "no epoch ran".into(),
        })?;
        let summary = TrainingSummary {
            epochs_run: history.epochs.len(),
            best_epoch: history.best_epoch,
            best_val_loss: best_loss.is_finite().then_some(best_loss),
            best_val_accuracy: best.val_accuracy,
            train_tasks,
            val_tasks,
            train_pairs: self.train_pairs.len(),
            val_pairs: self.val_pairs.len(),
            members: Vec::new(),
            temperature: 1.0,
        };
        // The trees learn from the member's training pairs only, like its MLP, so the
        // temperature fitted on its validation pairs stays honest.
        let config = self.config;
        let trees = (config.trees > 0).then(|| {
            let pairs: Vec<(usize, usize, f32, f32)> = self
                .train_pairs
                .iter()
                .map(|&i| {
                    let p = self.data.pairs[i];
                    (
                        p.fast,
                        p.slow,
                        config.pair_target(p.log_ratio),
                        config.pair_weight(p.log_ratio),
                    )
                })
                .collect();
            BoostedTrees::fit(self.normed, self.dim, &pairs, config, config.seed)
        });
        Ok(MemberRun {
            weights,
            trees,
            history,
            summary,
            seed: self.config.seed,
            val_pairs: self.val_pairs,
        })
    }
}

/// Inverted-dropout masks (keep with probability `1 − p`, scaled by `1 / (1 − p)`), drawn
/// from the ranker's generator; `None` when `p == 0`.
fn dropout_masks<'a>(
    p: f64,
    device: &'a Device,
    rng: &'a mut SplitMix64,
) -> impl FnMut(usize, usize) -> Option<Tensor<2>> + 'a {
    move |n, width| {
        if p <= 0.0 {
            return None;
        }
        let keep = (1.0 - p) as f32;
        let values: Vec<f32> = (0..n * width)
            .map(|_| {
                if rng.next_f32() < keep {
                    1.0 / keep
                } else {
                    0.0
                }
            })
            .collect();
        Some(Tensor::from_data(
            TensorData::new(values, [n, width]),
            device,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Guards the calibration step: labels drawn with P(first faster) = σ(d / 2) give back a
    // temperature near 2, and ties (label 0.5) push it up, never down.
    #[test]
    fn temperature_recovers_the_scale_of_the_labels() {
        let mut rng = SplitMix64::new(3);
        let pairs: Vec<(f64, f64)> = (0..4000)
            .map(|_| {
                let d = (f64::from(rng.next_f32()) - 0.5) * 12.0;
                let p = 1.0 / (1.0 + (-d / 2.0).exp());
                (
                    d,
                    if f64::from(rng.next_f32()) < p {
                        1.0
                    } else {
                        0.0
                    },
                )
            })
            .collect();
        let t = fit_temperature(&pairs);
        assert!((1.6..2.5).contains(&t), "fitted T = {t}");
        let mut with_ties = pairs.clone();
        with_ties.extend((0..2000).map(|i| (f64::from(i % 7) - 3.0, 0.5)));
        assert!(fit_temperature(&with_ties) >= t);
        assert_eq!(fit_temperature(&[]), 1.0);
    }

    // Guards the soft targets: a 1.06x pair is trained towards ~0.6, not certainty; 2x
    // towards near-certainty; hard targets stay at 1.
    #[test]
    fn soft_targets_follow_the_measured_ratio() {
        let c = RankerConfig::new();
        assert!((0.55..0.65).contains(&c.pair_target(1.06f32.ln())));
        assert!(c.pair_target(2f32.ln()) > 0.98);
        let hard = c.clone().with_soft_target_scale(0.0);
        assert_eq!(hard.pair_target(1.06f32.ln()), 1.0);
        assert_eq!(hard.train_min_log_ratio(), hard.min_log_ratio);
        assert_eq!(c.train_min_log_ratio(), 0.0);
    }
}
