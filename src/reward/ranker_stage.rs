//! [`RankerReward`]: the learned pairwise ranker as a reward.

use super::{
    require, unavailable_error, Context, Evaluation, RankerStage, Result, Reward, Stage,
    StageUnavailable,
};

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
        require(self, eval, Stage::Ranker)?;
        match &eval.stages.ranker {
            Some(RankerStage::Scored(r)) => Ok(2.0 * r.prob_faster - 1.0),
            // The ranker compares a candidate with the task's CUDA reference; a task whose
            // only reference is its PyTorch original has none: no preference, not a missing
            // number.
            Some(RankerStage::NotApplicable { .. }) => Ok(0.0),
            // The candidate has no launch plan for a model that reads one: no number either.
            Some(RankerStage::Failed { error, .. }) => Err(unavailable_error(
                &self.name(),
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
}
