//! Rewards: the [`Reward`] trait, combinators, the stage rewards and the presets.
//!
//! Every reward scores a [`Submission`] for a task through a shared [`Evaluator`], which
//! runs the pipeline stages lazily and remembers them, so `Weighted([correctness, speedup,
//! structure])` compiles and executes each candidate once. Each stage is a reward of its
//! own; combinators build the rest; [`presets`] are built only from these parts.
//!
//! ```
//! use cudaperf::reward::{Reward, Weighted, Clip, Map, CompileReward, SyntaxReward};
//! let r = Clip::new(Weighted::new().add(0.5, SyntaxReward).add(0.5, CompileReward), 0.0, 1.0);
//! let doubled = Map::new("doubled", r, |v| 2.0 * v);
//! assert_eq!(doubled.name(), "doubled");
//! ```

mod combinators;
mod evaluator;
pub mod presets;
mod report;
mod stages;
mod structure;

pub use combinators::{Clip, Gate, Map, Staged, Weighted};
pub use evaluator::{Context, EvalOptions, Evaluation, Evaluator, Submission, Verdict};
pub use report::{ExtractStage, RankerStage, RewardReport, Stages, StructureStage, Term};
mod ranker_stage;
pub use ranker_stage::RankerReward;
pub use stages::{
    CompileReward, CorrectReward, OutcomeLadder, PassRateReward, SpeedupReward, SyntaxReward,
};
pub use structure::{features_of, static_occupancy, LaunchOccupancy, StructuralReward};

use serde::{Deserialize, Serialize};

/// Pipeline stages, cheapest first. The ranker needs only the structure stage, so it runs
/// before the GPU stages and a ranker-only reward never needs a GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Stage {
    /// Code block, launch plan, ABI.
    Extract,
    /// tree-sitter parse.
    Syntax,
    /// NVRTC.
    Compile,
    /// Structural features.
    Structure,
    /// Learned ranker.
    Ranker,
    /// GPU run and correctness.
    Correctness,
    /// Speedup measurement.
    Timing,
}

impl Stage {
    /// The stage after this one.
    pub fn next(self) -> Option<Stage> {
        use Stage::*;
        match self {
            Extract => Some(Syntax),
            Syntax => Some(Compile),
            Compile => Some(Structure),
            Structure => Some(Ranker),
            Ranker => Some(Correctness),
            Correctness => Some(Timing),
            Timing => None,
        }
    }
}

/// A reward value and its report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Scored {
    /// The value.
    pub value: f64,
    /// Why.
    pub report: RewardReport,
}

/// Why a reward could not be computed.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum RewardError {
    /// A stage the reward needs cannot run here (no GPU, no NVRTC, no ranker model).
    /// Rewards never make up a number; the partial report says how far it got.
    #[error("{reward}: stage `{stage:?}` is unavailable: {reason}")]
    Unavailable {
        /// The reward.
        reward: String,
        /// The stage.
        stage: Stage,
        /// Why.
        reason: String,
        /// What was evaluated before it.
        report: Box<RewardReport>,
    },
}

/// Result alias for rewards.
pub type Result<T> = std::result::Result<T, RewardError>;

/// A reward for CUDA candidates.
///
/// Implement [`Reward::needs`] and [`Reward::value`]; `score` and `score_batch` follow.
/// A custom reward in a few lines:
/// ```
/// use cudaperf::reward::{Context, Evaluation, Reward, Stage};
/// struct FewRegisters;
/// impl Reward for FewRegisters {
///     fn name(&self) -> String { "few_registers".into() }
///     fn needs(&self, _: &Context) -> Stage { Stage::Compile }
///     fn value(&self, _: &Context, e: &Evaluation) -> cudaperf::reward::Result<f64> {
///         let regs = e.stages.compile.as_ref().and_then(|c| c.kernels.iter().map(|k| k.registers).max());
///         Ok(regs.map_or(0.0, |r| 1.0 - f64::from(r.min(255)) / 255.0))
///     }
/// }
/// ```
pub trait Reward: Send + Sync {
    /// Short name, used in reports.
    fn name(&self) -> String;

    /// The last pipeline stage this reward reads (at this training step).
    fn needs(&self, ctx: &Context) -> Stage;

    /// The value, from an evaluation that has reached [`Reward::needs`].
    fn value(&self, ctx: &Context, eval: &Evaluation) -> Result<f64>;

    /// Contributions for the report (composite rewards list their parts).
    fn terms(&self, ctx: &Context, eval: &Evaluation) -> Vec<Term> {
        let _ = (ctx, eval);
        Vec::new()
    }

    /// Scores one submission.
    fn score(&self, ctx: &Context, sub: &Submission) -> Result<Scored> {
        let eval = ctx.evaluate(sub, self.needs(ctx));
        self.score_evaluated(ctx, &eval)
    }

    /// Scores a GRPO group; stages run in parallel through the evaluator's pools.
    fn score_batch(&self, ctx: &Context, subs: &[Submission]) -> Result<Vec<Scored>> {
        let evals = ctx
            .evaluator
            .evaluate_batch(ctx.task, subs, self.needs(ctx));
        evals.iter().map(|e| self.score_evaluated(ctx, e)).collect()
    }

    /// Builds the scored report from an evaluation.
    fn score_evaluated(&self, ctx: &Context, eval: &Evaluation) -> Result<Scored> {
        let value = self.value(ctx, eval)?;
        Ok(Scored {
            value,
            report: RewardReport {
                value,
                reward: self.name(),
                terms: self.terms(ctx, eval),
                stages: eval.stages.clone(),
            },
        })
    }
}

impl<R: Reward + ?Sized> Reward for Box<R> {
    fn name(&self) -> String {
        (**self).name()
    }
    fn needs(&self, ctx: &Context) -> Stage {
        (**self).needs(ctx)
    }
    fn value(&self, ctx: &Context, eval: &Evaluation) -> Result<f64> {
        (**self).value(ctx, eval)
    }
    fn terms(&self, ctx: &Context, eval: &Evaluation) -> Vec<Term> {
        (**self).terms(ctx, eval)
    }
}

impl<R: Reward + ?Sized> Reward for std::sync::Arc<R> {
    fn name(&self) -> String {
        (**self).name()
    }
    fn needs(&self, ctx: &Context) -> Stage {
        (**self).needs(ctx)
    }
    fn value(&self, ctx: &Context, eval: &Evaluation) -> Result<f64> {
        (**self).value(ctx, eval)
    }
    fn terms(&self, ctx: &Context, eval: &Evaluation) -> Vec<Term> {
        (**self).terms(ctx, eval)
    }
}

/// Builds the `Unavailable` error with the partial report.
pub(crate) fn unavailable(
    reward: &dyn Reward,
    stage: Stage,
    reason: impl Into<String>,
    eval: &Evaluation,
) -> RewardError {
    RewardError::Unavailable {
        reward: reward.name(),
        stage,
        reason: reason.into(),
        report: Box::new(RewardReport {
            value: f64::NAN,
            reward: reward.name(),
            terms: Vec::new(),
            stages: eval.stages.clone(),
        }),
    }
}
