//! Evaluation: leave-tasks-out k-fold pairwise accuracy of the ranker and of any other
//! scoring function on the same folds, broken down by task kind and by time-ratio bucket.

use std::collections::{BTreeMap, BTreeSet};

use burn::tensor::Device;
use serde::{Deserialize, Serialize};

use super::config::RankerConfig;
use super::data::{kind_of_pair, task_folds, RankingData, Sample};
use super::error::{RankerError, Result};
use super::train::{softplus, train_on_tasks};
use super::trained::TrainingSummary;

/// Pairs whose time ratio is at least this (`ln 2`, a 2× difference) form the "clear" bucket.
pub const CLEAR_PAIR_LOG_RATIO: f32 = std::f32::consts::LN_2;

/// Lower edge of the "close" bucket: pairs 1.1× to 2× apart (`ln 1.1`).
pub const CLOSE_PAIR_LOG_RATIO: f32 = 0.095_310_18;

/// Pairwise accuracy of one group of pairs. A pair counts as correct when the fast
/// implementation scores strictly higher, as half when both score the same, as wrong
/// otherwise (a NaN score is wrong).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct PairAccuracy {
    /// Number of pairs.
    pub pairs: usize,
    /// Correct pairs (ties count ½).
    pub correct: f64,
    /// `correct / pairs`, `None` when there is no pair.
    pub accuracy: Option<f64>,
}

impl PairAccuracy {
    fn add(&mut self, delta: f64) {
        self.pairs += 1;
        self.correct += if delta > 0.0 {
            1.0
        } else if delta == 0.0 {
            0.5
        } else {
            0.0
        };
        self.accuracy = Some(self.correct / self.pairs as f64);
    }
}

/// Accuracy overall, per task kind and per time-ratio bucket.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct AccuracyBreakdown {
    /// All pairs.
    pub overall: PairAccuracy,
    /// Per task kind (`c2cuda`, `torch2cuda`, ...).
    pub by_kind: BTreeMap<String, PairAccuracy>,
    /// Pairs whose slower implementation takes at least 2× as long.
    pub ratio_at_least_2x: PairAccuracy,
    /// Closer pairs (below 2×, above the tie threshold).
    pub ratio_below_2x: PairAccuracy,
    /// Pairs 1.1× to 2× apart.
    #[serde(default)]
    pub ratio_1_1_to_2x: PairAccuracy,
}

/// Pairwise accuracy of per-sample `scores` (indexed like `data.samples`) on the given pairs
/// (indices into `data.pairs`).
pub fn pairwise_accuracy(
    data: &RankingData,
    pairs: &[usize],
    scores: &[f64],
) -> Result<AccuracyBreakdown> {
    if scores.len() != data.samples.len() {
        return Err(RankerError::ScoreCount {
            expected: data.samples.len(),
            found: scores.len(),
        });
    }
    for &pair in pairs {
        let p = data.pairs.get(pair).ok_or(RankerError::PairIndex {
            pair,
            index: pair,
            samples: data.pairs.len(),
        })?;
        for index in [p.fast, p.slow] {
            if index >= scores.len() {
                return Err(RankerError::PairIndex {
                    pair,
                    index,
                    samples: scores.len(),
                });
            }
        }
    }
    Ok(accuracy_of(data, pairs, scores))
}

/// [`pairwise_accuracy`] without the checks (indices come from validated data).
fn accuracy_of(data: &RankingData, pairs: &[usize], scores: &[f64]) -> AccuracyBreakdown {
    let mut out = AccuracyBreakdown::default();
    for &i in pairs {
        let p = data.pairs[i];
        let delta = scores[p.fast] - scores[p.slow];
        out.overall.add(delta);
        out.by_kind
            .entry(kind_of_pair(data, i).to_owned())
            .or_default()
            .add(delta);
        if p.log_ratio >= CLEAR_PAIR_LOG_RATIO {
            out.ratio_at_least_2x.add(delta);
        } else {
            out.ratio_below_2x.add(delta);
            if p.log_ratio >= CLOSE_PAIR_LOG_RATIO {
                out.ratio_1_1_to_2x.add(delta);
            }
        }
    }
    out
}

/// Weighted ranking loss (as in training, against the soft targets) and plain accuracy of
/// `scores` on `pairs` (pairs below `min_log_ratio` count in the loss only).
pub(crate) fn pair_loss_and_accuracy(
    data: &RankingData,
    pairs: &[usize],
    scores: &[f64],
    config: &RankerConfig,
) -> (f32, f64) {
    let (mut loss, mut wsum, mut acc) = (0.0f64, 0.0f64, PairAccuracy::default());
    for &i in pairs {
        let p = data.pairs[i];
        let d = scores[p.fast] - scores[p.slow];
        let w = f64::from(config.pair_weight(p.log_ratio));
        let t = f64::from(config.pair_target(p.log_ratio));
        // −[t log σ(d) + (1 − t) log σ(−d)], in a form that cannot overflow.
        let nll = t * softplus(-d) + (1.0 - t) * softplus(d);
        loss += w * nll;
        wsum += w;
        if p.log_ratio >= config.min_log_ratio {
            acc.add(d);
        }
    }
    (
        (loss / wsum.max(f64::MIN_POSITIVE)) as f32,
        acc.accuracy.unwrap_or(0.0),
    )
}

/// How well the held-out probabilities `p = σ(Δs / T)` match what happened.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Calibration {
    /// Expected calibration error over the held-out pairs (both orders of each pair, so
    /// the bins are symmetric), 10 equal-width bins: `Σ_b |b|/n · |accuracy_b − mean p_b|`.
    pub ece: f64,
    /// Pairs (each counted in both orders) the ECE is over.
    pub pairs: usize,
    /// Per bin: `(mean p, observed frequency, count)`.
    pub bins: Vec<(f64, f64, usize)>,
    /// Held-out pairs closer than `min_log_ratio` (ties within noise).
    pub tie_pairs: usize,
    /// Their mean `|p − 0.5|` (0: every tie at 0.5).
    pub tie_mean_abs_dev: Option<f64>,
    /// Mean ensemble disagreement over the held-out pairs (std of the members'
    /// probabilities).
    pub mean_uncertainty: f64,
    /// Mean disagreement over the pairs the model got wrong, and over those it got right.
    pub uncertainty_wrong_right: (f64, f64),
}

/// Calibration of probability `prob(pair)` on `pairs` (indices into `data.pairs`), with
/// `uncertainty(pair)` the ensemble disagreement.
pub fn calibration(
    data: &RankingData,
    pairs: &[usize],
    min_log_ratio: f32,
    prob: impl Fn(usize) -> f64,
    uncertainty: impl Fn(usize) -> f64,
) -> Calibration {
    let mut bins = vec![(0.0f64, 0.0f64, 0usize); 10];
    let mut out = Calibration::default();
    let (mut tie_dev, mut unc_sum, mut n_all) = (0.0, 0.0, 0usize);
    let (mut wrong, mut right) = ((0.0, 0usize), (0.0, 0usize));
    for &i in pairs {
        let p = prob(i);
        let u = uncertainty(i);
        if !p.is_finite() {
            continue;
        }
        unc_sum += u;
        n_all += 1;
        if data.pairs[i].log_ratio < min_log_ratio {
            out.tie_pairs += 1;
            tie_dev += (p - 0.5).abs();
            continue;
        }
        if p > 0.5 {
            right.0 += u;
            right.1 += 1;
        } else {
            wrong.0 += u;
            wrong.1 += 1;
        }
        for (q, y) in [(p, 1.0), (1.0 - p, 0.0)] {
            let b = ((q * 10.0) as usize).min(9);
            bins[b].0 += q;
            bins[b].1 += y;
            bins[b].2 += 1;
            out.pairs += 1;
        }
    }
    let n = out.pairs.max(1) as f64;
    out.ece = bins
        .iter()
        .filter(|b| b.2 > 0)
        .map(|b| (b.2 as f64 / n) * (b.1 / b.2 as f64 - b.0 / b.2 as f64).abs())
        .sum();
    out.bins = bins
        .into_iter()
        .map(|(q, y, c)| {
            let k = c.max(1) as f64;
            (q / k, y / k, c)
        })
        .collect();
    out.tie_mean_abs_dev = (out.tie_pairs > 0).then(|| tie_dev / out.tie_pairs as f64);
    out.mean_uncertainty = unc_sum / n_all.max(1) as f64;
    out.uncertainty_wrong_right = (
        wrong.0 / wrong.1.max(1) as f64,
        right.0 / right.1.max(1) as f64,
    );
    out
}

/// One fold of a cross-validation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FoldReport {
    /// 0-based fold number.
    pub fold: usize,
    /// Tasks held out (evaluated, never trained on) in this fold.
    pub test_tasks: Vec<String>,
    /// Accuracy on the held-out pairs.
    pub accuracy: AccuracyBreakdown,
    /// What the fold's training run saw (`None` for a fixed scoring function).
    pub training: Option<TrainingSummary>,
}

/// Result of a leave-tasks-out cross-validation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CvReport {
    /// What was evaluated (`"ranker"` or the name given to [`cross_validate_scorer`]).
    pub scorer: String,
    /// Number of folds.
    pub k_folds: usize,
    /// Seed of the fold assignment (the config's seed).
    pub seed: u64,
    /// Tie threshold: pairs with a smaller log ratio were not evaluated.
    pub min_log_ratio: f32,
    /// Accuracy of guessing: 0.5.
    pub chance: f64,
    /// Accuracy pooled over the held-out pairs of all folds.
    pub accuracy: AccuracyBreakdown,
    /// Per-fold results.
    pub folds: Vec<FoldReport>,
    /// Each sample's score from the fold that held its task out (indexed like
    /// `data.samples`), so that accuracy on any subset of pairs can be computed afterwards
    /// with [`pairwise_accuracy`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub held_out_scores: Vec<f64>,
    /// Calibration of the held-out probabilities (`None` for a fixed scoring function).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub calibration: Option<Calibration>,
    /// Per held-out pair (indices into `data.pairs`, ties included): the calibrated
    /// probability that the faster one is faster and the ensemble disagreement.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub held_out_pairs: Vec<(usize, f64, f64)>,
}

/// Assigns the tasks of `data` to `k_folds` folds (seeded; fold sizes differ by at most one).
/// [`cross_validate`] and [`cross_validate_scorer`] with the same seed use these folds.
pub fn cv_folds(data: &RankingData, k_folds: usize, seed: u64) -> Result<Vec<Vec<String>>> {
    let tasks = data.tasks();
    if k_folds < 2 || k_folds > tasks.len() {
        return Err(RankerError::Folds {
            tasks: tasks.len(),
            k_folds,
        });
    }
    Ok(task_folds(&tasks, k_folds, seed))
}

/// Leave-tasks-out k-fold cross-validation of the ranker on burn's default device: for each
/// fold, train on the other folds' tasks (with their own validation split for early stopping)
/// and measure pairwise accuracy on the held-out tasks.
///
/// ```
/// use cudaperf::ranker::{cross_validate, synthetic, RankerConfig};
/// # fn main() -> Result<(), cudaperf::ranker::RankerError> {
/// let data = synthetic::decisive_feature(12, 4, 6, 3);
/// let report = cross_validate(&data, 3, &RankerConfig::new().with_epochs(30))?;
/// println!("{}", serde_json::to_string_pretty(&report).unwrap());
/// assert_eq!(report.folds.len(), 3);
/// # Ok(()) }
/// ```
pub fn cross_validate(
    data: &RankingData,
    k_folds: usize,
    config: &RankerConfig,
) -> Result<CvReport> {
    cross_validate_on(&Device::default(), data, k_folds, config)
}

/// Like [`cross_validate`], on the given device.
pub fn cross_validate_on(
    device: &Device,
    data: &RankingData,
    k_folds: usize,
    config: &RankerConfig,
) -> Result<CvReport> {
    config.validate()?;
    data.validate()?;
    let folds = cv_folds(data, k_folds, config.seed)?;
    run_folds(data, &folds, config, "ranker", |train_tasks| {
        let (ranker, _) = train_on_tasks(device, data, train_tasks, config, |_| {})?;
        let members = data
            .samples
            .iter()
            .map(|s| ranker.member_scores(&s.features))
            .collect::<Result<Vec<_>>>()?;
        Ok(FoldFit {
            scores: members
                .iter()
                .map(|m| f64::from(m.iter().sum::<f32>() / m.len().max(1) as f32))
                .collect(),
            training: Some(ranker.summary().clone()),
            compare: Some(Box::new(move |a: usize, b: usize| {
                let c = ranker.compare_scores(&members[a], &members[b], None);
                (f64::from(c.prob_faster), f64::from(c.uncertainty))
            })),
        })
    })
}

/// Pairwise accuracy of any fixed scoring function (higher = predicted faster), on the same
/// folds and pairs as [`cross_validate`] with the same `config` (its `seed` and
/// `min_log_ratio`). Nothing is trained: a fixed function is scored per held-out fold so
/// that its numbers line up with the ranker's.
pub fn cross_validate_scorer(
    data: &RankingData,
    k_folds: usize,
    config: &RankerConfig,
    name: &str,
    score: impl Fn(&Sample) -> f64,
) -> Result<CvReport> {
    config.validate()?;
    data.validate()?;
    let folds = cv_folds(data, k_folds, config.seed)?;
    let scores: Vec<f64> = data.samples.iter().map(score).collect();
    run_folds(data, &folds, config, name, |_| {
        Ok(FoldFit {
            scores: scores.clone(),
            training: None,
            compare: None,
        })
    })
}

/// Probability and disagreement of a fold's model for samples `(a, b)`.
type CompareFn = Box<dyn Fn(usize, usize) -> (f64, f64)>;

/// What one fold's fit gives: a score per sample, the training summary and (for a trained
/// ranker) its calibrated comparison.
struct FoldFit {
    scores: Vec<f64>,
    training: Option<TrainingSummary>,
    compare: Option<CompareFn>,
}

impl CvReport {
    /// A report of `k_folds` folds with nothing measured yet.
    fn empty(name: &str, k_folds: usize, config: &RankerConfig) -> CvReport {
        CvReport {
            scorer: name.to_owned(),
            k_folds,
            seed: config.seed,
            min_log_ratio: config.min_log_ratio,
            chance: 0.5,
            accuracy: AccuracyBreakdown::default(),
            folds: Vec::with_capacity(k_folds),
            held_out_scores: Vec::new(),
            calibration: None,
            held_out_pairs: Vec::new(),
        }
    }
}

fn run_folds(
    data: &RankingData,
    folds: &[Vec<String>],
    config: &RankerConfig,
    name: &str,
    mut fit: impl FnMut(&[String]) -> Result<FoldFit>,
) -> Result<CvReport> {
    let mut report = CvReport::empty(name, folds.len(), config);
    let mut compared = Vec::new();
    let mut all_test_pairs = Vec::new();
    let mut pooled_scores = vec![f64::NAN; data.samples.len()];
    for (fold, test_tasks) in folds.iter().enumerate() {
        let test_set: BTreeSet<&str> = test_tasks.iter().map(String::as_str).collect();
        let train_tasks: Vec<String> = folds
            .iter()
            .flatten()
            .filter(|t| !test_set.contains(t.as_str()))
            .cloned()
            .collect();
        let test_pairs = data.pairs_of_tasks(&test_set, config.min_log_ratio);
        let FoldFit {
            scores,
            training,
            compare,
        } = fit(&train_tasks).map_err(|e| match e {
            RankerError::NoPairs { reason } => RankerError::NoPairs {
                reason: format!("fold {fold}: {reason}"),
            },
            other => other,
        })?;
        // Each test task belongs to exactly one fold, so pooling copies disjoint samples.
        for (i, s) in data.samples.iter().enumerate() {
            if test_set.contains(s.task.as_str()) {
                pooled_scores[i] = scores[i];
            }
        }
        if let Some(compare) = &compare {
            for i in data.pairs_of_tasks(&test_set, 0.0) {
                let p = data.pairs[i];
                let (prob, unc) = compare(p.fast, p.slow);
                compared.push((i, prob, unc));
            }
        }
        report.folds.push(FoldReport {
            fold,
            test_tasks: test_tasks.clone(),
            accuracy: accuracy_of(data, &test_pairs, &scores),
            training,
        });
        all_test_pairs.extend(test_pairs);
    }
    if all_test_pairs.is_empty() {
        return Err(RankerError::NoPairs {
            reason: format!(
                "every pair is a tie (log_ratio < min_log_ratio = {})",
                config.min_log_ratio
            ),
        });
    }
    report.accuracy = accuracy_of(data, &all_test_pairs, &pooled_scores);
    report.held_out_scores = pooled_scores;
    if !compared.is_empty() {
        report.calibration = Some(calibration_of(data, &compared, config));
        report.held_out_pairs = compared;
    }
    Ok(report)
}

/// The calibration of the held-out comparisons `(pair, probability, uncertainty)`.
fn calibration_of(
    data: &RankingData,
    compared: &[(usize, f64, f64)],
    config: &RankerConfig,
) -> Calibration {
    let by_pair: BTreeMap<usize, (f64, f64)> =
        compared.iter().map(|&(i, p, u)| (i, (p, u))).collect();
    let pairs: Vec<usize> = by_pair.keys().copied().collect();
    calibration(
        data,
        &pairs,
        config.min_log_ratio,
        |i| by_pair[&i].0,
        |i| by_pair[&i].1,
    )
}
