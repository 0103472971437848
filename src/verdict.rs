//! The one-word outcome of an evaluation (`verdict` in reports, tables and timings files).
//! Which stages decide it is [`crate::pipeline`]'s (`Stages::outcome`); this is only the
//! word, low in the build order so that the dataset and the timings files can name it.

use serde::{Deserialize, Serialize};

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
}

/// Lets a verdict be compared with its report string (`verdict == "correct"`).
impl PartialEq<&str> for Verdict {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl PartialEq<str> for Verdict {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl std::fmt::Display for Verdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
