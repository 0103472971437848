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
pub mod presets;
mod ranker_stage;
mod stages;
mod structure;

pub use combinators::{Clip, Gate, Map, Staged, Weighted};
pub use ranker_stage::{RankerReward, ShrunkRankerReward};
pub use stages::{
    CompileReward, CorrectReward, OutcomeLadder, PassRateReward, RooflineReward, SpeedupReward,
    SpeedupScale, SyntaxReward, DEFAULT_SPEED_CAP_LOG2,
};
pub use structure::{features_of, StructuralReward};

// What the rewards read (private: their public paths are the pipeline's).
use crate::pipeline::report::{CompileStatus, RankerStage, RewardReport, Term, TimingStage};
use crate::pipeline::{Evaluation, Evaluator, Stage, StageUnavailable, Submission, Verdict};
use crate::task::Task;
use serde::{Deserialize, Serialize};

/// What a reward sees besides the submission.
#[derive(Clone, Copy)]
pub struct Context<'a> {
    /// The task being solved.
    pub task: &'a Task,
    /// Training step (for curricula such as [`Staged`]).
    pub step: u64,
    /// The shared pipeline.
    pub evaluator: &'a Evaluator,
}

impl<'a> Context<'a> {
    /// A context at step 0.
    pub fn new(task: &'a Task, evaluator: &'a Evaluator) -> Context<'a> {
        Context {
            task,
            step: 0,
            evaluator,
        }
    }

    /// The same context at another training step.
    pub fn at_step(self, step: u64) -> Context<'a> {
        Context { step, ..self }
    }

    /// Evaluates a submission up to `upto` (memoised).
    pub fn evaluate(&self, sub: &Submission, upto: Stage) -> Evaluation {
        self.evaluator.evaluate(self.task, sub, upto)
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
    /// A stage the reward needs cannot run here (no GPU, no NVRTC, no usable worker, an
    /// unreadable model). Rewards never make up a number; the partial report (its `verdict`
    /// is `unavailable` or `reference_failed`) says how far it got. `Display` is one line.
    #[error("{reward}: stage `{stage:?}` is unavailable: {}", one_line(.reason))]
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

impl RewardError {
    /// The partial report: every stage that ran before the one that was unavailable.
    pub fn report(&self) -> &RewardReport {
        match self {
            RewardError::Unavailable { report, .. } => report,
        }
    }
}

/// The first line of `text`, at most 300 characters, for one-line messages.
fn one_line(text: &str) -> String {
    let mut lines = text.lines().map(str::trim).filter(|l| !l.is_empty());
    let first = lines.next().unwrap_or("");
    let mut out: String = first.chars().take(300).collect();
    if out.len() < first.len() || lines.next().is_some() {
        out.push_str(" …");
    }
    out
}

/// Result alias for rewards.
pub type Result<T> = std::result::Result<T, RewardError>;

/// A reward for CUDA candidates.
///
/// Implement [`Reward::needs`] and [`Reward::value`]; `score` and `score_batch` follow.
/// A custom reward in a few lines; [`require`] first, so that a stage that could not run
/// here (a compile worker that cannot start, no NVRTC) is an error, never a made-up value:
/// ```
/// use cudaperf::reward::{require, Context, Reward};
/// use cudaperf::pipeline::{Evaluation, Stage};
/// struct FewRegisters;
/// impl Reward for FewRegisters {
///     fn name(&self) -> String { "few_registers".into() }
///     fn needs(&self, _: &Context) -> Stage { Stage::Compile }
///     fn value(&self, _: &Context, e: &Evaluation) -> cudaperf::reward::Result<f64> {
///         require(self, e, Stage::Compile)?;
///         let regs = e.stages.compile.as_ref().and_then(|c| c.kernels().iter().map(|k| k.registers).max());
///         Ok(regs.map_or(0.0, |r| 1.0 - f64::from(r.min(255)) / 255.0))
///     }
/// }
/// # use cudaperf::pipeline::{EvalOptions, Evaluator, Submission, Verdict};
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let task = cudaperf::task::Task::load(concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/tasks/vector_add"))?;
/// // With a compile worker that cannot start, the reward is an error, not a value of 0.
/// let mut options = EvalOptions::default();
/// options.compile.worker = Some("/nonexistent/cudaperf".into());
/// let evaluator = Evaluator::new(options)?;
/// let ctx = Context::new(&task, &evaluator);
/// let sub = Submission::from_source(task.reference.source.clone());
/// let err = FewRegisters.score(&ctx, &sub).unwrap_err();
/// assert_eq!(err.report().verdict, Verdict::Unavailable);
/// assert!(err.report().value.is_nan());
/// // `value` itself refuses too (`require`), whoever calls it.
/// let eval = evaluator.evaluate(&task, &sub, Stage::Compile);
/// assert!(FewRegisters.value(&ctx, &eval).is_err());
/// # Ok(()) }
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

    /// Scores a GRPO group; stages run in parallel through the evaluator's pools. One
    /// result per submission, in order: a submission whose stage is unavailable does not
    /// take its group down with it.
    fn score_batch(&self, ctx: &Context, subs: &[Submission]) -> Vec<Result<Scored>> {
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
                verdict: eval.verdict_at(self.needs(ctx)),
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

/// Checks that `stage`, and every stage it is built from, has a result the candidate earned
/// (see [`Evaluation::unavailable`]); otherwise [`RewardError::Unavailable`] with the partial
/// report, naming `reward`, the stage and why. Call it first in [`Reward::value`] for every
/// stage the value reads: a compile stage that could not run has no registers, a GPU stage
/// that could not run has no pass rate, and neither is 0.
///
/// `Ok` also when the candidate's own failure before `stage` makes it moot (no code, a
/// compile error, a fault): the reward scores that failure.
///
/// ```
/// use cudaperf::reward::{require, Context, Reward};
/// use cudaperf::pipeline::{Evaluation, Stage};
/// struct PassedFirstConfig;
/// impl Reward for PassedFirstConfig {
///     fn name(&self) -> String { "passed_first_config".into() }
///     fn needs(&self, _: &Context) -> Stage { Stage::Correctness }
///     fn value(&self, _: &Context, e: &Evaluation) -> cudaperf::reward::Result<f64> {
///         require(self, e, Stage::Correctness)?; // no GPU here: an error, not 0
///         let first = e.stages.correctness.as_ref().and_then(|c| c.configs.first());
///         Ok(if first.is_some_and(|c| c.passed) { 1.0 } else { 0.0 })
///     }
/// }
/// ```
pub fn require(reward: &dyn Reward, eval: &Evaluation, stage: Stage) -> Result<()> {
    match eval.unavailable(stage) {
        Some(u) => Err(unavailable_error(&reward.name(), u, eval)),
        None => Ok(()),
    }
}

/// The `Unavailable` error for a stage without a result, with the partial report.
pub(crate) fn unavailable_error(
    reward: &str,
    u: StageUnavailable,
    eval: &Evaluation,
) -> RewardError {
    let verdict = match Verdict::of(&eval.stages, u.stage) {
        v @ (Verdict::Unavailable | Verdict::ReferenceFailed) => v,
        _ => Verdict::Unavailable,
    };
    RewardError::Unavailable {
        reward: reward.to_string(),
        stage: u.stage,
        reason: u.reason,
        report: Box::new(RewardReport {
            value: f64::NAN,
            reward: reward.to_string(),
            verdict,
            terms: Vec::new(),
            stages: eval.stages.clone(),
        }),
    }
}
