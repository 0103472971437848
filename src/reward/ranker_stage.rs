//! [`RankerReward`]: the learned pairwise ranker as a reward.

use std::path::PathBuf;

use super::{unavailable, Context, Evaluation, Result, Reward, Stage};

/// `2σ(s(candidate) − s(reference)) − 1` in [-1, 1]: the ranker's confidence that the
/// candidate is faster than the task's reference (0 = no preference). Needs a model in the
/// evaluator (`EvalOptions::ranker_model` or `Evaluator::with_ranker`); the crate ships one
/// in `fixtures/models/ranker`. No GPU needed.
pub struct RankerReward;

impl RankerReward {
    /// The model folder shipped with the crate source.
    pub fn shipped_model_dir() -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/models/ranker")
    }
}

impl Reward for RankerReward {
    fn name(&self) -> String {
        "ranker".into()
    }
    fn needs(&self, _: &Context) -> Stage {
        Stage::Ranker
    }
    fn value(&self, _: &Context, eval: &Evaluation) -> Result<f64> {
        match &eval.stages.ranker {
            Some(r) if r.error.is_none() => Ok(2.0 * r.prob_faster - 1.0),
            Some(r) => Err(unavailable(
                self,
                Stage::Ranker,
                r.error.clone().unwrap_or_default(),
                eval,
            )),
            // No code to rank: no preference.
            None => Ok(0.0),
        }
    }
}
