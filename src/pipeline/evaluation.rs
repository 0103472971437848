//! What the pipeline knows of one submission: the report form of every stage run so far and
//! what the later stages read (the checked candidate, the module, the features, the plan,
//! the syntax tree); what was ours rather than the candidate's is forgotten.

use std::sync::Arc;

use crate::analysis::{Features, SourceTree};
use crate::candidate::Candidate;
use crate::compile::CompiledModule;
use crate::exec::ExecStatus;

use super::extract::Plan;
use super::report::{CompileStatus, Stages};
use super::{Outcome, Stage, Verdict};

/// The stages a submission has been through so far.
#[derive(Debug, Clone, Default)]
pub struct Evaluation {
    /// Report form of every stage run so far.
    pub stages: Stages,
    /// The candidate after the ABI check.
    pub candidate: Option<Candidate>,
    /// The compiled module.
    pub module: Option<CompiledModule>,
    /// Structural features (after the structure stage).
    pub features: Option<Features>,
    /// The launch plan evaluated for the checked configurations (after extraction).
    pub plan: Option<Plan>,
    /// The one parse of the code, shared by the syntax, structure and ranker stages.
    pub(super) tree: Option<Arc<SourceTree>>,
    /// The furthest stage run.
    pub(super) reached: Option<Stage>,
    /// Whether the GPU job timed the candidate.
    pub(super) timed: bool,
}

impl Evaluation {
    /// An evaluation rebuilt from stored stages (a report's `stages`, a measured table's
    /// rows), so that rewards can score it again without compiling or running anything: a
    /// replayed ablation scores one measurement under many rewards. Rewards read `stages`;
    /// a successful compile gets a module without code (its resources only: it cannot be
    /// loaded), the features and the syntax tree stay empty. The furthest
    /// stage present counts as evaluated (`timing`, else `correctness` or `execute`, else
    /// `ranker`, `structure`, `compile`, `syntax`, else `extract`).
    pub fn from_stages(stages: Stages) -> Evaluation {
        let reached = if stages.timing.is_some() {
            Stage::Timing
        } else if stages.correctness.is_some() || stages.execute.is_some() {
            Stage::Correctness
        } else if stages.ranker.is_some() {
            Stage::Ranker
        } else if stages.structure.is_some() {
            Stage::Structure
        } else if stages.compile.is_some() {
            Stage::Compile
        } else if stages.syntax.is_some() {
            Stage::Syntax
        } else {
            Stage::Extract
        };
        // Rewards tell a compiled candidate by its module: a stored successful compile gets
        // one without code (its resources only), which nothing can load or launch.
        let module = stages
            .compile
            .as_ref()
            .filter(|c| c.is_compiled())
            .map(|c| CompiledModule {
                cubin: Arc::new(Vec::new()),
                kernels: c.kernels().to_vec(),
                lowered: Vec::new(),
                log: String::new(),
            });
        Evaluation {
            timed: stages.timing.is_some(),
            stages,
            module,
            reached: Some(reached),
            ..Evaluation::default()
        }
    }

    /// The furthest stage evaluated.
    pub fn reached(&self) -> Option<Stage> {
        self.reached
    }

    /// The verdict of every stage run so far.
    pub fn verdict(&self) -> Verdict {
        Verdict::of(&self.stages, self.reached.unwrap_or(Stage::Extract))
    }

    /// The verdict of the stages up to `upto` (what a reward that needs `upto` read).
    pub fn verdict_at(&self, upto: Stage) -> Verdict {
        Verdict::of(&self.stages, upto)
    }

    /// The verdict of every stage run so far with the first reason it is not `correct`
    /// ([`Stages::outcome`]).
    pub fn outcome(&self) -> Outcome {
        self.stages.outcome(self.reached.unwrap_or(Stage::Extract))
    }

    /// Whether the GPU stages have nothing to run for this submission: it has no compiled
    /// module or no valid launch plan, so its report is final after the stages that need no
    /// GPU (an invalid plan is reported without a device).
    pub fn gpu_stages_moot(&self) -> bool {
        self.module.is_none()
            || self.candidate.is_none()
            || self.plan.as_ref().is_none_or(|p| p.resolved.is_err())
    }

    /// The syntax tree of the code, once the syntax stage has run.
    pub fn tree(&self) -> Option<&SourceTree> {
        self.tree.as_deref()
    }

    /// Why `stage`, or a stage it is built from, has no result the candidate earned: it could
    /// not run here (no NVRTC, no usable worker, no GPU, an unreadable ranker model, a broken
    /// reference) or did not run. `None` when the stage can be read: it ran, or the
    /// candidate's own failure before it (no code, a compile error, a fault) makes it moot.
    ///
    /// What each stage is built from: `compile` and `structure` (registers and spills) need
    /// the compile stage; `ranker` needs only itself; `correctness` needs the compile stage
    /// and the GPU; `timing` needs `correctness` and, for a correct candidate, a measurement.
    /// A reward turns the answer into its error with [`crate::reward::require`].
    pub fn unavailable(&self, stage: Stage) -> Option<StageUnavailable> {
        let missing = |stage: Stage, reason: String| Some(StageUnavailable { stage, reason });
        if !self.stages.extract.is_ok() || stage <= Stage::Syntax {
            return None;
        }
        if stage == Stage::Ranker {
            // No ranker stage: there was no syntax tree to rank, and nothing is missing.
            let error = self
                .stages
                .ranker
                .as_ref()
                .and_then(|r| r.error().map(str::to_string));
            return error.and_then(|e| missing(Stage::Ranker, e));
        }
        match &self.stages.compile {
            None => return missing(Stage::Compile, "the compile stage did not run".into()),
            Some(c) if c.status() == CompileStatus::Unavailable => {
                return missing(Stage::Compile, c.reason().unwrap_or_default().to_string())
            }
            // The candidate's compile failure: no later stage is missing.
            Some(c) if !c.is_compiled() => return None,
            Some(_) => {}
        }
        if stage < Stage::Correctness {
            return None;
        }
        let Some(execute) = &self.stages.execute else {
            return missing(Stage::Correctness, "the GPU stages did not run".into());
        };
        match &execute.status {
            ExecStatus::Unavailable { reason } => {
                return missing(Stage::Correctness, reason.clone())
            }
            ExecStatus::ReferenceFailed { reason } => {
                return missing(
                    Stage::Correctness,
                    format!(
                        "the task's reference failed, so the candidate cannot be judged: {reason}"
                    ),
                )
            }
            _ => {}
        }
        let passed = self.stages.correctness.as_ref().is_some_and(|c| c.passed);
        if stage == Stage::Timing && passed && self.stages.timing.is_none() {
            return missing(
                Stage::Timing,
                "the candidate was correct but was not timed".into(),
            );
        }
        None
    }

    /// Drops the results that are ours rather than the candidate's, so that the next
    /// evaluation of the same submission runs those stages again: a compile that could not
    /// run (and the stages after it), a ranker error, GPU stages that were unavailable or
    /// whose reference failed, and a timing that is missing or was withheld because the
    /// reference's own timing was unstable. Only outcomes the candidate caused stay
    /// remembered.
    pub(super) fn forget_our_failures(&mut self) {
        let compile_ours = self
            .stages
            .compile
            .as_ref()
            .is_some_and(|c| c.status() == CompileStatus::Unavailable);
        if compile_ours {
            let stages = &mut self.stages;
            stages.compile = None;
            stages.structure = None;
            stages.ranker = None;
            stages.execute = None;
            stages.correctness = None;
            stages.timing = None;
            self.module = None;
            self.features = None;
            self.timed = false;
            self.reached = self.reached.map(|r| r.min(Stage::Syntax));
            return;
        }
        if self
            .stages
            .ranker
            .as_ref()
            .is_some_and(|r| r.error().is_some())
        {
            // Cheap: run again on its own by the next `advance`.
            self.stages.ranker = None;
        }
        let gpu_ours = self.stages.execute.as_ref().is_some_and(|e| {
            matches!(
                e.status,
                ExecStatus::Unavailable { .. } | ExecStatus::ReferenceFailed { .. }
            )
        });
        if gpu_ours {
            self.stages.execute = None;
            self.stages.correctness = None;
            self.stages.timing = None;
            self.timed = false;
            self.reached = self.reached.map(|r| r.min(Stage::Ranker));
            return;
        }
        let passed = self.stages.correctness.as_ref().is_some_and(|c| c.passed);
        let timing_ours = self.stages.timing.as_ref().is_none_or(|t| t.unstable);
        if passed && self.timed && timing_ours {
            self.stages.timing = None;
            self.timed = false;
            self.reached = self.reached.map(|r| r.min(Stage::Correctness));
        }
    }
}

/// A stage without a result the candidate earned (see [`Evaluation::unavailable`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StageUnavailable {
    /// The stage that could not run.
    pub stage: Stage,
    /// Why, in words (the worker, library or model that failed).
    pub reason: String,
}
