//! [`RankerReward`]: the learned pairwise ranker as a reward, and [`ShrunkRankerReward`],
//! the same term faded by the ranker's uncertainty.

use super::{
    require, unavailable_error, Context, Evaluation, RankerStage, Result, Reward, Stage,
    StageUnavailable,
};
use crate::pipeline::report::RankerScores;

/// `2σ(s(candidate) − s(reference)) − 1` in [-1, 1]: the ranker's confidence that the
/// candidate is faster than the task's reference (0 = no preference). The evaluator's model
/// is the one embedded in the library unless `EvalOptions::ranker_model`,
/// `$CUDAPERF_RANKER_MODEL` or `Evaluator::with_ranker` name another; an unreadable model
/// makes this reward unavailable, never a number. No GPU needed.
pub struct RankerReward;

impl Reward for RankerReward {
    fn name(&self) -> String {
        "ranker".into()
    }
    fn needs(&self, _: &Context) -> Stage {
        Stage::Ranker
    }
    fn value(&self, _: &Context, eval: &Evaluation) -> Result<f64> {
        ranker_value(self, eval, |r| 2.0 * r.prob_faster - 1.0)
    }
}

/// [`RankerReward`] shrunk by the ranker's own uncertainty:
/// `(2p − 1) · max(0, 1 − uncertainty / scale)`, where `uncertainty` is the standard
/// deviation of the ensemble members' probabilities (`RankerScores::uncertainty`). The
/// members disagree most on code unlike their training data and on near-ties, so the term
/// fades where the ranker is least trustworthy. On the leave-tasks-out folds of
/// docs/ranker-cv.md (seed 42), `scale = 0.15` keeps on average 0.69 of the term on pairs
/// the ranker orders right and 0.35 on those it orders wrong. The share of the term's mass
/// with the wrong sign falls from 6.3 % to 3.3 %, and the mean |term| on pairs within 5 %
/// of each other from 0.35 to 0.15. A report without an uncertainty (written before it
/// existed) or a one-member model is not shrunk.
///
/// The unified reward with this term in place of the plain one:
/// ```
/// use cudaperf::reward::{presets, ShrunkRankerReward, StructuralReward};
/// let reward = presets::cudaperf_with(
///     presets::CudaPerfWeights::default(),
///     Some(Box::new(StructuralReward)),
///     Some(Box::new(ShrunkRankerReward::default())),
/// );
/// # let _ = reward;
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ShrunkRankerReward {
    scale: f64,
}

impl ShrunkRankerReward {
    /// The uncertainty at which the term reaches 0. `None` unless it is finite and > 0.
    pub fn new(scale: f64) -> Option<ShrunkRankerReward> {
        (scale.is_finite() && scale > 0.0).then_some(ShrunkRankerReward { scale })
    }

    /// The uncertainty at which the term reaches 0.
    pub fn scale(&self) -> f64 {
        self.scale
    }

    /// The share of the ranker term kept at this uncertainty: `max(0, 1 − uncertainty /
    /// scale)`.
    pub fn weight(&self, uncertainty: f64) -> f64 {
        (1.0 - uncertainty / self.scale).max(0.0)
    }
}

impl Default for ShrunkRankerReward {
    /// `scale = 0.15`.
    fn default() -> Self {
        ShrunkRankerReward { scale: 0.15 }
    }
}

impl Reward for ShrunkRankerReward {
    fn name(&self) -> String {
        format!("ranker_shrunk({})", self.scale)
    }
    fn needs(&self, _: &Context) -> Stage {
        Stage::Ranker
    }
    fn value(&self, _: &Context, eval: &Evaluation) -> Result<f64> {
        ranker_value(self, eval, |r| {
            let u = r.uncertainty.filter(|u| u.is_finite()).unwrap_or(0.0);
            (2.0 * r.prob_faster - 1.0) * self.weight(u)
        })
    }
}

/// The ranker stage read by `reward`: `scored` of the scores, 0 where there is nothing to
/// rank, unavailable where the stage failed.
fn ranker_value(
    reward: &dyn Reward,
    eval: &Evaluation,
    scored: impl Fn(&RankerScores) -> f64,
) -> Result<f64> {
    require(reward, eval, Stage::Ranker)?;
    match &eval.stages.ranker {
        Some(RankerStage::Scored(r)) => Ok(scored(r)),
        // The ranker compares a candidate with the task's CUDA reference; a task whose
        // only reference is its PyTorch original has none: no preference, not a missing
        // number.
        Some(RankerStage::NotApplicable { .. }) => Ok(0.0),
        // The candidate has no launch plan for a model that reads one: no number either.
        Some(RankerStage::Failed { error, .. }) => Err(unavailable_error(
            &reward.name(),
            StageUnavailable {
                stage: Stage::Ranker,
                reason: error.clone(),
            },
            eval,
        )),
        // No code to rank: no preference.
        None => Ok(0.0),
    }
}
