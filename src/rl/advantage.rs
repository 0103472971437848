//! Advantages of a group of samples: GRPO, Dr. GRPO, RLOO, discounted multi-turn returns,
//! dropping zero-variance groups, and noise-aware speed terms.
//!
//! | estimator | advantage of sample `i` in a group of `G` | source |
//! |---|---|---|
//! | [`Estimator::Grpo`] | `(rᵢ − mean) / (std + ε)`, `std` with `G − 1` (as TRL) | Shao et al., 2024 (DeepSeekMath) |
//! | [`Estimator::DrGrpo`] | `rᵢ − mean` | Liu et al., 2025 ("Understanding R1-Zero-like training") |
//! | [`Estimator::Rloo`] | `rᵢ − mean_{j≠i} r_j = G/(G−1) · (rᵢ − mean)` | Ahmadian et al., 2024 |
//!
//! A group whose rewards are all equal teaches nothing (every advantage is 0) but still costs
//! a forward and backward pass; DAPO (Yu et al., 2025) drops such groups ("dynamic sampling"):
//! [`advantages`] returns `None` for them when [`AdvantageOptions::drop_zero_variance`] is set.
//!
//! Multi-turn: [`discounted_returns`] turns per-turn rewards into `G_t = Σ_{k≥t} γ^{k−t} r_k`
//! (Kevin-32B uses γ = 0.4), so an early turn is credited for what its refinement achieved.
//!
//! Timing noise: two candidates whose speedup intervals overlap are not measurably different,
//! yet their measured speedups differ, and GRPO would turn that difference into advantage.
//! [`noise_aware_rewards`] gives every candidate of an overlapping cluster the cluster's mean
//! speed term before advantages are computed.
//!
//! ```
//! use cudaperf::rl::{advantages, grpo, rloo, AdvantageOptions, Estimator};
//! # fn main() -> Result<(), cudaperf::rl::RlError> {
//! let r = [1.0, 2.0, 3.0];
//! assert_eq!(rloo(&r)?, vec![-1.5, 0.0, 1.5]);
//! let a = grpo(&r, 0.0)?; // std = 1
//! assert_eq!(a, vec![-1.0, 0.0, 1.0]);
//! // A zero-variance group is dropped (DAPO).
//! assert_eq!(advantages(&[0.5, 0.5], &AdvantageOptions::default())?, None);
//! # Ok(()) }
//! ```

use serde::{Deserialize, Serialize};

use super::{Result, RlError};
use crate::pipeline::report::RewardReport;

/// How a group's rewards become advantages (see the module table).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Estimator {
    /// `(r − mean) / (std + ε)`, the sample standard deviation (`G − 1`), as TRL computes it.
    #[default]
    Grpo,
    /// `r − mean`: no division by the standard deviation (Dr. GRPO's bias fix).
    DrGrpo,
    /// Leave-one-out baseline: `rᵢ − mean of the others`. Needs `G ≥ 2`.
    Rloo,
}

impl Estimator {
    /// The snake_case name.
    pub fn as_str(self) -> &'static str {
        match self {
            Estimator::Grpo => "grpo",
            Estimator::DrGrpo => "dr_grpo",
            Estimator::Rloo => "rloo",
        }
    }

    /// Parses `grpo`, `dr_grpo` (or `drgrpo`, `dr-grpo`) and `rloo`.
    pub fn parse(s: &str) -> Option<Estimator> {
        match s.trim().to_ascii_lowercase().replace('-', "_").as_str() {
            "grpo" => Some(Estimator::Grpo),
            "dr_grpo" | "drgrpo" => Some(Estimator::DrGrpo),
            "rloo" => Some(Estimator::Rloo),
            _ => None,
        }
    }
}

/// Settings of [`advantages`]; every field has a documented default.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct AdvantageOptions {
    /// The estimator (default [`Estimator::Grpo`]).
    pub estimator: Estimator,
    /// ε added to the standard deviation by GRPO (default 1e-4, as TRL).
    pub eps: f64,
    /// Drop groups whose rewards are all equal (default true: DAPO's dynamic sampling).
    pub drop_zero_variance: bool,
    /// Rewards within this of each other count as equal (default 1e-9).
    pub zero_variance_tol: f64,
}

impl Default for AdvantageOptions {
    fn default() -> Self {
        AdvantageOptions {
            estimator: Estimator::Grpo,
            eps: 1e-4,
            drop_zero_variance: true,
            zero_variance_tol: 1e-9,
        }
    }
}

impl AdvantageOptions {
    /// Options with this estimator and the other defaults.
    pub fn with_estimator(estimator: Estimator) -> AdvantageOptions {
        AdvantageOptions {
            estimator,
            ..Default::default()
        }
    }

    fn check(&self) -> Result<()> {
        if !(self.eps.is_finite() && self.eps >= 0.0) {
            return Err(RlError::Option {
                name: "eps",
                reason: format!("is {}, must be finite and >= 0", self.eps),
            });
        }
        if !(self.zero_variance_tol.is_finite() && self.zero_variance_tol >= 0.0) {
            return Err(RlError::Option {
                name: "zero_variance_tol",
                reason: format!("is {}, must be finite and >= 0", self.zero_variance_tol),
            });
        }
        Ok(())
    }
}

fn check_rewards(rewards: &[f64]) -> Result<()> {
    if rewards.is_empty() {
        return Err(RlError::EmptyGroup);
    }
    match rewards.iter().position(|r| !r.is_finite()) {
        Some(index) => Err(RlError::NonFinite {
            index,
            value: rewards[index],
        }),
        None => Ok(()),
    }
}

fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len() as f64
}

/// GRPO: `(rᵢ − mean) / (std + eps)` with the sample standard deviation (`G − 1`; 0 for a
/// group of one).
pub fn grpo(rewards: &[f64], eps: f64) -> Result<Vec<f64>> {
    check_rewards(rewards)?;
    let m = mean(rewards);
    let n = rewards.len();
    let std = if n > 1 {
        (rewards.iter().map(|r| (r - m).powi(2)).sum::<f64>() / (n - 1) as f64).sqrt()
    } else {
        0.0
    };
    let d = std + eps;
    Ok(rewards
        .iter()
        .map(|r| if d > 0.0 { (r - m) / d } else { 0.0 })
        .collect())
}

/// Dr. GRPO: `rᵢ − mean`.
pub fn dr_grpo(rewards: &[f64]) -> Result<Vec<f64>> {
    check_rewards(rewards)?;
    let m = mean(rewards);
    Ok(rewards.iter().map(|r| r - m).collect())
}

/// RLOO: `rᵢ − (Σ_{j≠i} r_j) / (G − 1)`. Needs at least two samples.
pub fn rloo(rewards: &[f64]) -> Result<Vec<f64>> {
    check_rewards(rewards)?;
    let n = rewards.len();
    if n < 2 {
        return Err(RlError::GroupTooSmall {
            estimator: "rloo",
            needed: 2,
            len: n,
        });
    }
    let total: f64 = rewards.iter().sum();
    Ok(rewards
        .iter()
        .map(|r| r - (total - r) / (n - 1) as f64)
        .collect())
}

/// Whether every reward is within `tol` of every other (max − min ≤ tol).
pub fn is_zero_variance(rewards: &[f64], tol: f64) -> bool {
    let (lo, hi) = rewards
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &r| {
            (lo.min(r), hi.max(r))
        });
    rewards.is_empty() || hi - lo <= tol
}

/// The advantages of one group with `opts.estimator`; `None` when the group is dropped
/// because all its rewards are equal (and `opts.drop_zero_variance` is set). Every reward
/// must be finite; [`scored_advantages`] takes groups with unscored (NaN) members.
pub fn advantages(rewards: &[f64], opts: &AdvantageOptions) -> Result<Option<Vec<f64>>> {
    opts.check()?;
    check_rewards(rewards)?;
    if opts.drop_zero_variance && is_zero_variance(rewards, opts.zero_variance_tol) {
        return Ok(None);
    }
    Ok(Some(match opts.estimator {
        Estimator::Grpo => grpo(rewards, opts.eps)?,
        Estimator::DrGrpo => dr_grpo(rewards)?,
        Estimator::Rloo => rloo(rewards)?,
    }))
}

/// What to do with the members of a group that have no reward: a completion that could not
/// be scored here (its report's value is NaN, `null` in JSON). Its advantage is never made
/// up: it is left out of the comparison, or the whole group is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UnscoredPolicy {
    /// The scored members are compared among themselves; an unscored member gets no
    /// advantage (`None`: no gradient from it). The default.
    #[default]
    SkipMember,
    /// A group with an unscored member gives no advantage to anyone (its baseline would be
    /// taken over a different group than the one sampled).
    SkipGroup,
    /// An unscored member is an error ([`RlError::NonFinite`]), as [`advantages`] does.
    Error,
}

/// Why a group gave no advantages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DroppedGroup {
    /// Every scored member has the same reward (DAPO's dynamic sampling; see
    /// [`AdvantageOptions::drop_zero_variance`]).
    ZeroVariance,
    /// A member is unscored and the policy is [`UnscoredPolicy::SkipGroup`].
    Unscored,
    /// Too few scored members for the estimator (none, or one for RLOO).
    TooFewScored,
}

/// The advantages of a group that may have unscored members (see [`scored_advantages`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GroupAdvantages {
    /// One per member, in order: `None` for an unscored member and for every member of a
    /// dropped group.
    pub advantages: Vec<Option<f64>>,
    /// Positions of the members without a reward.
    pub unscored: Vec<usize>,
    /// Why the group gave no advantages; `None` when it gave some.
    pub dropped: Option<DroppedGroup>,
}

/// Advantages of a group whose unscored members (NaN rewards) are handled by `policy`:
/// with [`UnscoredPolicy::SkipMember`] the estimator runs over the scored subset (its mean,
/// spread and leave-one-out baselines are the subset's), and the result says which members
/// were left out. An infinite reward is always an error (a bug, not a missing score).
///
/// ```
/// use cudaperf::rl::{scored_advantages, AdvantageOptions, DroppedGroup, UnscoredPolicy};
/// # fn main() -> Result<(), cudaperf::rl::RlError> {
/// let opts = AdvantageOptions::default();
/// let g = scored_advantages(&[1.0, f64::NAN, 3.0], &opts, UnscoredPolicy::SkipMember)?;
/// assert_eq!(g.unscored, vec![1]);
/// assert_eq!(g.advantages[1], None);
/// assert!(g.advantages[0].unwrap() < 0.0 && g.advantages[2].unwrap() > 0.0);
/// let g = scored_advantages(&[1.0, f64::NAN, 3.0], &opts, UnscoredPolicy::SkipGroup)?;
/// assert_eq!(g.dropped, Some(DroppedGroup::Unscored));
/// assert!(scored_advantages(&[1.0, f64::NAN], &opts, UnscoredPolicy::Error).is_err());
/// # Ok(()) }
/// ```
pub fn scored_advantages(
    rewards: &[f64],
    opts: &AdvantageOptions,
    policy: UnscoredPolicy,
) -> Result<GroupAdvantages> {
    opts.check()?;
    if rewards.is_empty() {
        return Err(RlError::EmptyGroup);
    }
    if let Some(index) = rewards.iter().position(|r| r.is_infinite()) {
        return Err(RlError::NonFinite {
            index,
            value: rewards[index],
        });
    }
    let unscored: Vec<usize> = (0..rewards.len())
        .filter(|&i| rewards[i].is_nan())
        .collect();
    let dropped = |why| GroupAdvantages {
        advantages: vec![None; rewards.len()],
        unscored: unscored.clone(),
        dropped: Some(why),
    };
    if let Some(&index) = unscored.first() {
        match policy {
            UnscoredPolicy::Error => {
                return Err(RlError::NonFinite {
                    index,
                    value: rewards[index],
                })
            }
            UnscoredPolicy::SkipGroup => return Ok(dropped(DroppedGroup::Unscored)),
            UnscoredPolicy::SkipMember => {}
        }
    }
    let scored: Vec<f64> = rewards.iter().copied().filter(|r| !r.is_nan()).collect();
    let needed = if opts.estimator == Estimator::Rloo {
        2
    } else {
        1
    };
    if scored.len() < needed {
        return Ok(dropped(DroppedGroup::TooFewScored));
    }
    let Some(a) = advantages(&scored, opts)? else {
        return Ok(dropped(DroppedGroup::ZeroVariance));
    };
    let mut a = a.into_iter();
    Ok(GroupAdvantages {
        advantages: rewards
            .iter()
            .map(|r| if r.is_nan() { None } else { a.next() })
            .collect(),
        unscored,
        dropped: None,
    })
}

/// Discounted returns of one episode's per-turn rewards:
/// `G_t = r_t + γ · G_{t+1}` (so `G_t = Σ_{k≥t} γ^{k−t} r_k`). γ must be in [0, 1].
pub fn discounted_returns(rewards: &[f64], gamma: f64) -> Result<Vec<f64>> {
    if !(0.0..=1.0).contains(&gamma) {
        return Err(RlError::Gamma(gamma));
    }
    check_rewards(rewards)?;
    let mut out = vec![0.0; rewards.len()];
    let mut next = 0.0;
    for (t, r) in rewards.iter().enumerate().rev() {
        next = r + gamma * next;
        out[t] = next;
    }
    Ok(out)
}

/// Gives every member of a cluster of overlapping intervals the cluster's mean value.
///
/// `values[i]` is sample `i`'s speed term and `intervals[i]` the 95 % interval of its speedup
/// (`None`: not timed, left unchanged). Intervals are closed; clusters are the connected
/// components of the overlap graph (A overlaps B and B overlaps C puts all three together:
/// none of them is measurably different from its neighbour). Non-finite or reversed
/// intervals count as `None`.
///
/// ```
/// use cudaperf::rl::equalize_overlapping;
/// let v = equalize_overlapping(
///     &[0.9, 1.1, 2.0, 0.0],
///     &[Some([1.8, 1.95]), Some([1.9, 2.2]), Some([3.9, 4.1]), None],
/// );
/// assert_eq!(v, vec![1.0, 1.0, 2.0, 0.0]);
/// ```
pub fn equalize_overlapping(values: &[f64], intervals: &[Option<[f64; 2]>]) -> Vec<f64> {
    let mut out = values.to_vec();
    let mut timed: Vec<(usize, f64, f64)> = intervals
        .iter()
        .enumerate()
        .take(values.len())
        .filter_map(|(i, iv)| {
            let [lo, hi] = (*iv)?;
            (lo.is_finite() && hi.is_finite() && lo <= hi && values[i].is_finite())
                .then_some((i, lo, hi))
        })
        .collect();
    timed.sort_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)));
    let mut start = 0;
    while start < timed.len() {
        let mut end = start + 1;
        let mut hi = timed[start].2;
        while end < timed.len() && timed[end].1 <= hi {
            hi = hi.max(timed[end].2);
            end += 1;
        }
        let cluster = &timed[start..end];
        let m = cluster.iter().map(|c| values[c.0]).sum::<f64>() / cluster.len() as f64;
        for c in cluster {
            out[c.0] = m;
        }
        start = end;
    }
    out
}

/// Which of a report's terms are speed terms (their weighted values get equalized).
///
/// The default matches the stage rewards this crate names after speed: `speedup`,
/// `speedup_log2` (also inside gates, `correct|speedup_log2`) and KernelBench's `fast_p`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpeedTermSelector {
    /// A term is a speed term when its name contains one of these.
    pub patterns: Vec<String>,
}

impl Default for SpeedTermSelector {
    fn default() -> Self {
        SpeedTermSelector {
            patterns: vec!["speedup".into(), "fast_".into()],
        }
    }
}

impl SpeedTermSelector {
    /// Whether `name` names a speed term.
    pub fn matches(&self, name: &str) -> bool {
        self.patterns.iter().any(|p| name.contains(p.as_str()))
    }

    /// The weighted speed contribution of a report (`None` when it has none).
    fn speed_part(&self, report: &RewardReport) -> Option<f64> {
        if report.terms.is_empty() {
            // A bare speed reward: the whole value is the speed term.
            return self.matches(&report.reward).then_some(report.value);
        }
        let parts: Vec<f64> = report
            .terms
            .iter()
            .filter(|t| self.matches(&t.name))
            .map(|t| t.weight * t.value)
            .collect();
        (!parts.is_empty()).then(|| parts.iter().sum())
    }
}

/// Rewards of a group with timing noise removed: candidates whose speedup intervals
/// (`stages.timing.ci95`) overlap get the mean of their speed terms; every other term is
/// kept. Candidates without timing, or whose timing is `implausible` (no speedup awarded),
/// are unchanged. Use the result in place of `report.value` before [`advantages`].
///
/// An unscored report (value NaN: a reward that could not be computed) stays NaN and joins
/// no cluster, so [`scored_advantages`] can leave it out; an infinite value is an error.
/// `reports` is anything that yields `&RewardReport` (`&[RewardReport]`, `Vec<&RewardReport>`).
pub fn noise_aware_rewards<'a>(
    reports: impl IntoIterator<Item = &'a RewardReport>,
) -> Result<Vec<f64>> {
    noise_aware_rewards_with(reports, &SpeedTermSelector::default())
}

/// [`noise_aware_rewards`] with a custom choice of speed terms.
pub fn noise_aware_rewards_with<'a>(
    reports: impl IntoIterator<Item = &'a RewardReport>,
    selector: &SpeedTermSelector,
) -> Result<Vec<f64>> {
    let reports: Vec<&RewardReport> = reports.into_iter().collect();
    let values: Vec<f64> = reports.iter().map(|r| r.value).collect();
    if let Some(index) = values.iter().position(|v| v.is_infinite()) {
        return Err(RlError::NonFinite {
            index,
            value: values[index],
        });
    }
    let speed: Vec<Option<f64>> = reports
        .iter()
        .map(|r| selector.speed_part(r).filter(|_| !r.value.is_nan()))
        .collect();
    let intervals: Vec<Option<[f64; 2]>> = reports
        .iter()
        .zip(&speed)
        .map(|(r, s)| {
            let t = r.stages.timing.as_ref()?;
            s.filter(|_| !t.implausible)?;
            Some(t.ci95)
        })
        .collect();
    let raw: Vec<f64> = speed.iter().map(|s| s.unwrap_or(0.0)).collect();
    let equal = equalize_overlapping(&raw, &intervals);
    Ok(values
        .iter()
        .zip(raw.iter().zip(&equal))
        .map(|(v, (old, new))| v - old + new)
        .collect())
}

#[cfg(test)]
mod tests;
