//! The one-word outcome of an evaluation, for reports, tables and manifests.

use serde::{Deserialize, Serialize};

use super::report::{CompileStatus, ExecStatus, Stages};
use super::Stage;

/// The outcome of the stages a reward read, in one word (`verdict` in the report).
///
/// Infrastructure failures are [`Verdict::Unavailable`] (or [`Verdict::ReferenceFailed`]
/// for a broken task), never one of the candidate's verdicts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Verdict {
    /// No candidate (no code block, plan or ABI problem, too large).
    ExtractError,
    /// Extracted; the reward read no later stage.
    Extracted,
    /// NVRTC failed, the source was rejected, or the compile timed out.
    CompileError,
    /// Compiled; the reward read no GPU stage.
    Compiled,
    /// The plan exceeds CUDA's or the configured limits.
    InvalidLaunch,
    /// A CUDA call failed while the candidate ran.
    CudaError,
    /// The candidate's runs exhausted the job's time limit.
    Timeout,
    /// The candidate's process died.
    Crashed,
    /// The reference failed (a broken task, not the candidate's fault).
    ReferenceFailed,
    /// A stage the reward needs could not run here (no NVRTC, no GPU, no usable worker,
    /// an unreadable model): never the candidate's fault.
    #[default]
    Unavailable,
    /// Ran, but failed a check.
    Incorrect,
    /// Passed every check.
    Correct,
}

impl Verdict {
    /// The snake_case name.
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::ExtractError => "extract_error",
            Verdict::Extracted => "extracted",
            Verdict::CompileError => "compile_error",
            Verdict::Compiled => "compiled",
            Verdict::InvalidLaunch => "invalid_launch",
            Verdict::CudaError => "cuda_error",
            Verdict::Timeout => "timeout",
            Verdict::Crashed => "crashed",
            Verdict::ReferenceFailed => "reference_failed",
            Verdict::Unavailable => "unavailable",
            Verdict::Incorrect => "incorrect",
            Verdict::Correct => "correct",
        }
    }

    /// Whether the candidate itself caused this outcome (and may be scored for it).
    pub fn is_candidate_outcome(self) -> bool {
        !matches!(self, Verdict::Unavailable | Verdict::ReferenceFailed)
    }

    /// The verdict of `stages` for a reward that reads up to `upto` (stages past it, which an
    /// evaluation remembered for another reward may hold, do not decide it).
    pub fn of(stages: &Stages, upto: Stage) -> Verdict {
        if !stages.extract.ok {
            return Verdict::ExtractError;
        }
        if upto < Stage::Compile {
            return Verdict::Extracted;
        }
        match stages.compile.as_ref().map(|c| c.status) {
            None => return Verdict::Unavailable,
            Some(CompileStatus::Unavailable) => return Verdict::Unavailable,
            Some(CompileStatus::Compiled) => {}
            Some(_) => return Verdict::CompileError,
        }
        if upto < Stage::Correctness {
            return Verdict::Compiled;
        }
        if let Some(c) = &stages.correctness {
            return if c.passed {
                Verdict::Correct
            } else {
                Verdict::Incorrect
            };
        }
        match stages.execute.as_ref().map(|e| &e.status) {
            Some(ExecStatus::CudaError { .. }) => Verdict::CudaError,
            Some(ExecStatus::InvalidLaunch { .. }) => Verdict::InvalidLaunch,
            Some(ExecStatus::Timeout { .. }) => Verdict::Timeout,
            Some(ExecStatus::Crashed { .. }) => Verdict::Crashed,
            Some(ExecStatus::ReferenceFailed { .. }) => Verdict::ReferenceFailed,
            _ => Verdict::Unavailable,
        }
    }
}

impl std::fmt::Display for Verdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
