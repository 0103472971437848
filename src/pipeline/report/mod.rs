//! The report schema: `RewardReport` and every `stages.*` entry, in one place.
//!
//! Field names are stable; new stages and fields are added as optional, never renamed.
//! Where a field takes one of a few values it is a typed enum that serialises to the same
//! snake_case string as before (`stages.compile.status`, `stages.extract.error_kind`,
//! `stages.structure.occupancy[].limiter`, `verdict`).
//!
//! ```json
//! {
//!   "value": 1.42,
//!   "reward": "cudaperf",
//!   "verdict": "correct",
//!   "terms": [{"name": "outcome", "weight": 1.0, "value": 1.0}, ...],
//!   "stages": {
//!     "extract": {"ok": true, "kernels": ["vector_add"], "launches": 1},
//!     "syntax": {"ok": true, "error_nodes": 0, "missing_nodes": 0},
//!     "compile": {"ok": true, "status": "compiled", "isolation": "sandboxed", "kernels": [...], ...},
//!     "structure": {...}, "ranker": {...}, "execute": {...}, "correctness": {...}, "timing": {...}
//!   }
//! }
//! ```
//!
//! The GPU stages' types (`execute`, `correctness`, `timing`) are defined by the device side
//! (`exec`, which sends them from its workers) and have their one public path here. Every
//! type of the report has one public path: this module.

use serde::{Deserialize, Serialize};

use crate::analysis::Limiter;
use crate::compile::{Isolation, Resources};
pub use crate::exec::report::{
    ConfigCheck, CorrectnessStage, DeviceInfo, ExecStatus, ExecuteStage, KernelOccupancy, Mismatch,
    PrecisionProbe, RegimeCheck, TimingStage,
};

use super::Verdict;

mod wire;

/// A reward value with everything that explains it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RewardReport {
    /// The scalar reward (NaN, written `null`, when there is none: see
    /// [`crate::reward::RewardError`]).
    pub value: f64,
    /// Name of the reward that produced it.
    pub reward: String,
    /// The outcome of the stages the reward read, in one word.
    #[serde(default)]
    pub verdict: Verdict,
    /// Contributions, for composite rewards.
    pub terms: Vec<Term>,
    /// Every stage's result.
    pub stages: Stages,
}

/// One named contribution to a reward value.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Term {
    /// What it measures.
    pub name: String,
    /// Its weight.
    pub weight: f64,
    /// Its unweighted value.
    pub value: f64,
}

/// All stages, in the order they run; a stage that did not run is `null`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Stages {
    /// Code extraction and launch-plan parsing.
    pub extract: ExtractStage,
    /// tree-sitter parse.
    pub syntax: Option<SyntaxStage>,
    /// NVRTC compile.
    pub compile: Option<CompileStage>,
    /// Structural features.
    pub structure: Option<StructureStage>,
    /// GPU run outcome.
    pub execute: Option<ExecuteStage>,
    /// Correctness against the reference.
    pub correctness: Option<CorrectnessStage>,
    /// Speedup measurement.
    pub timing: Option<TimingStage>,
    /// Learned ranker.
    pub ranker: Option<RankerStage>,
}

/// `stages.extract`: was there code, and does its launch plan fit the task? One of its
/// outcomes; in JSON `{"ok": true, "kernels": [...], "launches": n}` or `{"ok": false,
/// "error_kind": "...", "error": "...", "kernels": [], "launches": 0}`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(into = "wire::ExtractWire", try_from = "wire::ExtractWire")]
pub enum ExtractStage {
    /// The stage never ran: a report made without an evaluation (a request the server
    /// refused, a job it lost). Written like a failure without a reason.
    #[default]
    NotRun,
    /// A candidate was extracted and matches the task ABI.
    Extracted {
        /// Kernels launched.
        kernels: Vec<String>,
        /// Number of launches in the plan.
        launches: usize,
    },
    /// No candidate: why.
    Failed {
        /// What went wrong.
        kind: ExtractErrorKind,
        /// The error message.
        error: String,
    },
}

impl ExtractStage {
    /// Whether a candidate was extracted (`ok` in JSON).
    pub fn is_ok(&self) -> bool {
        matches!(self, ExtractStage::Extracted { .. })
    }

    /// The error message of a failed extraction.
    pub fn error(&self) -> Option<&str> {
        match self {
            ExtractStage::Failed { error, .. } => Some(error),
            _ => None,
        }
    }

    /// What went wrong, for a failed extraction.
    pub fn error_kind(&self) -> Option<ExtractErrorKind> {
        match self {
            ExtractStage::Failed { kind, .. } => Some(*kind),
            _ => None,
        }
    }

    /// The kernels launched (empty unless extracted).
    pub fn kernels(&self) -> &[String] {
        match self {
            ExtractStage::Extracted { kernels, .. } => kernels,
            _ => &[],
        }
    }
}

/// `stages.extract.error_kind`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ExtractErrorKind {
    /// The completion has no fenced code block.
    NoCodeBlock,
    /// The source has no `// @launch` line.
    NoLaunchPlan,
    /// A launch names a kernel the source does not define.
    UnknownKernel,
    /// The kernel's parameters do not fit the task's ABI.
    AbiMismatch,
    /// A `@launch` or `@scratch` line is malformed.
    BadDirective,
    /// An expression in the plan is invalid or names an unknown size.
    Expression,
    /// The evaluated launch is outside CUDA's or the configured limits.
    InvalidLaunch,
    /// The submission is larger than the size cap (checked before any parsing).
    TooLarge,
}

impl ExtractErrorKind {
    /// The snake_case name used in reports.
    pub fn as_str(self) -> &'static str {
        match self {
            ExtractErrorKind::NoCodeBlock => "no_code_block",
            ExtractErrorKind::NoLaunchPlan => "no_launch_plan",
            ExtractErrorKind::UnknownKernel => "unknown_kernel",
            ExtractErrorKind::AbiMismatch => "abi_mismatch",
            ExtractErrorKind::BadDirective => "bad_directive",
            ExtractErrorKind::Expression => "expression",
            ExtractErrorKind::InvalidLaunch => "invalid_launch",
            ExtractErrorKind::TooLarge => "too_large",
        }
    }
}

impl std::fmt::Display for ExtractErrorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `stages.syntax`: does tree-sitter-cuda parse the candidate, and how badly does it not.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SyntaxStage {
    /// No error or missing nodes.
    pub ok: bool,
    /// `ERROR` nodes in the tree.
    pub error_nodes: u32,
    /// `MISSING` nodes (tokens the parser had to invent).
    pub missing_nodes: u32,
    /// Line of the first problem (1-based), if any.
    pub first_error_line: Option<u32>,
    /// Problems tree-sitter-cuda reported in code that NVRTC then compiled: gaps of the
    /// grammar (a macro standing for a statement without its `;`, `#if`/`#else` branches
    /// that each open a brace), not errors of the code, so not counted above.
    #[serde(default)]
    pub grammar_gaps: u32,
}

/// `stages.compile.status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CompileStatus {
    /// A cubin was produced.
    Compiled,
    /// NVRTC reported errors (the candidate's).
    Error,
    /// The source was refused before compiling (forbidden include, NUL byte).
    Rejected,
    /// The compile ran past its limit and was killed (the candidate's).
    Timeout,
    /// The compile could not run here (no NVRTC, no usable worker): never the candidate's.
    Unavailable,
}

impl CompileStatus {
    /// The snake_case name used in reports.
    pub fn as_str(self) -> &'static str {
        match self {
            CompileStatus::Compiled => "compiled",
            CompileStatus::Error => "error",
            CompileStatus::Rejected => "rejected",
            CompileStatus::Timeout => "timeout",
            CompileStatus::Unavailable => "unavailable",
        }
    }
}

impl std::fmt::Display for CompileStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `stages.compile`: how the NVRTC compile ended, and where it ran. In JSON the outcome is
/// spread over `ok`, `status`, `kernels`, `cached` and `reason` (and `sandboxed` repeats
/// `isolation`), as it always was.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(into = "wire::CompileWire", try_from = "wire::CompileWire")]
pub struct CompileStage {
    /// How the stage ended.
    pub end: CompileEnd,
    /// Trimmed compile log (errors first); empty when NVRTC did not run.
    pub log: String,
    /// Wall time of the stage in milliseconds.
    pub millis: f64,
    /// Target architecture.
    pub arch: String,
    /// Where compiles run: `sandboxed` (a worker process with a time and memory limit) or
    /// `in_process` (only when the caller opted in, for trusted sources).
    pub isolation: Isolation,
}

/// How a compile ended (`stages.compile.status` and what goes with it).
#[derive(Debug, Clone, PartialEq)]
pub enum CompileEnd {
    /// A cubin was produced.
    Compiled {
        /// Per-kernel resources from ptxas.
        kernels: Vec<Resources>,
        /// Served from the cache.
        cached: bool,
    },
    /// NVRTC reported errors (the candidate's); they are in the log.
    Error {
        /// Served from the cache.
        cached: bool,
    },
    /// The source was refused before compiling (forbidden include, NUL byte).
    Rejected {
        /// Why.
        reason: String,
    },
    /// The compile ran past its limit and was killed (the candidate's).
    Timeout {
        /// What the limit was.
        reason: String,
    },
    /// The compile could not run here (no NVRTC, no usable worker): never the candidate's.
    Unavailable {
        /// Why.
        reason: String,
    },
}

impl CompileEnd {
    /// The status word of this ending.
    pub fn status(&self) -> CompileStatus {
        match self {
            CompileEnd::Compiled { .. } => CompileStatus::Compiled,
            CompileEnd::Error { .. } => CompileStatus::Error,
            CompileEnd::Rejected { .. } => CompileStatus::Rejected,
            CompileEnd::Timeout { .. } => CompileStatus::Timeout,
            CompileEnd::Unavailable { .. } => CompileStatus::Unavailable,
        }
    }
}

impl CompileStage {
    /// How the stage ended, in one word.
    pub fn status(&self) -> CompileStatus {
        self.end.status()
    }

    /// Whether a cubin was produced (`ok` in JSON).
    pub fn is_compiled(&self) -> bool {
        matches!(self.end, CompileEnd::Compiled { .. })
    }

    /// Per-kernel resources from ptxas (empty unless compiled).
    pub fn kernels(&self) -> &[Resources] {
        match &self.end {
            CompileEnd::Compiled { kernels, .. } => kernels,
            _ => &[],
        }
    }

    /// Whether the outcome was served from the cache.
    pub fn cached(&self) -> bool {
        match self.end {
            CompileEnd::Compiled { cached, .. } | CompileEnd::Error { cached } => cached,
            _ => false,
        }
    }

    /// Why the stage produced no result (rejected, timeout, unavailable).
    pub fn reason(&self) -> Option<&str> {
        match &self.end {
            CompileEnd::Rejected { reason }
            | CompileEnd::Timeout { reason }
            | CompileEnd::Unavailable { reason } => Some(reason),
            _ => None,
        }
    }
}

/// `stages.structure`: the structural score and the features behind it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StructureStage {
    /// Hand-weighted structural score in [-1, 1].
    pub score: f64,
    /// The score's terms (name, weight, contribution as `value`).
    pub terms: Vec<Term>,
    /// Static occupancy per launch on the spec device, for the timed (largest) config.
    pub occupancy: Vec<LaunchOccupancy>,
    /// The features, as produced by the analysis.
    pub features: crate::analysis::Features,
}

/// Static occupancy of one launch (`stages.structure.occupancy[]`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LaunchOccupancy {
    /// Kernel as launched.
    pub kernel: String,
    /// Threads per block.
    pub block_threads: u32,
    /// Registers per thread (from ptxas).
    pub registers: u32,
    /// Static + dynamic shared memory per block.
    pub shared_bytes: u64,
    /// Theoretical occupancy on the spec device.
    pub occupancy: f64,
    /// What limits it: `warps`, `registers`, `shared_memory` or `blocks`.
    pub limiter: Limiter,
}

/// `stages.ranker`: the learned pairwise score against the reference, or why there is none.
/// In JSON the scores are `null` and `error` says why when the model did not score.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(into = "wire::RankerWire", try_from = "wire::RankerWire")]
pub enum RankerStage {
    /// The model scored the candidate against the reference.
    Scored(RankerScores),
    /// The ranker does not apply to this task (its only reference is PyTorch code, which
    /// has no CUDA features to compare with): no preference, nothing missing. Written with
    /// `"applicable": false`.
    NotApplicable {
        /// Where the model came from.
        model: String,
        /// Why it does not apply.
        reason: String,
    },
    /// The ranker could not score (unreadable model, no launch plan for a model that reads
    /// one): the ranker term has no value.
    Failed {
        /// Where the model came from.
        model: String,
        /// Why.
        error: String,
    },
}

/// The scores of [`RankerStage::Scored`].
#[derive(Debug, Clone, PartialEq)]
pub struct RankerScores {
    /// s(candidate).
    pub candidate_score: f64,
    /// s(reference).
    pub reference_score: f64,
    /// σ(s(candidate) − s(reference)): predicted probability the candidate is faster.
    pub prob_faster: f64,
    /// Where the model came from (a folder, or `<shipped ranker>` for the embedded one).
    pub model: String,
    /// How unsure the ranker is: the standard deviation over its ensemble members of their
    /// own probability that the candidate is faster (0 to 0.5; 0 for a one-member model).
    /// High on code unlike the training data; a reward can shrink the ranker term by it,
    /// e.g. `(2p − 1) · max(0, 1 − uncertainty / 0.15)`. Absent in reports written before
    /// it existed.
    pub uncertainty: Option<f64>,
    /// How far the candidate's features lie outside the ranker's training range, in
    /// standard deviations (0 inside; the model clamps them to the range).
    pub out_of_range: Option<f64>,
}

impl RankerStage {
    /// The scores, when the model scored.
    pub fn scores(&self) -> Option<&RankerScores> {
        match self {
            RankerStage::Scored(s) => Some(s),
            _ => None,
        }
    }

    /// Why the model could not score (not for a task it does not apply to).
    pub fn error(&self) -> Option<&str> {
        match self {
            RankerStage::Failed { error, .. } => Some(error),
            _ => None,
        }
    }

    /// Where the model came from.
    pub fn model(&self) -> &str {
        match self {
            RankerStage::Scored(s) => &s.model,
            RankerStage::NotApplicable { model, .. } | RankerStage::Failed { model, .. } => model,
        }
    }
}
