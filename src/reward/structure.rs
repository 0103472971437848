//! [`StructuralReward`]: the structure stage's hand-weighted score as a reward.

use super::{require, Context, Evaluation, Result, Reward, Stage};
use crate::analysis::Features;

/// The hand-weighted structural score in [-1, 1] (see `analysis::structural_score`);
/// 0 when there is no code to analyse. The score reads the compile stage's registers and
/// spills, so it is unavailable (not a number computed without them) when the compile stage
/// could not run here.
pub struct StructuralReward;

impl Reward for StructuralReward {
    fn name(&self) -> String {
        "structure".into()
    }
    fn needs(&self, _: &Context) -> Stage {
        Stage::Structure
    }
    fn value(&self, _: &Context, eval: &Evaluation) -> Result<f64> {
        require(self, eval, Stage::Structure)?;
        Ok(eval.stages.structure.as_ref().map_or(0.0, |s| s.score))
    }
}

/// Features of an evaluation, if the structure stage ran.
pub fn features_of(eval: &Evaluation) -> Option<&Features> {
    eval.features.as_ref()
}
