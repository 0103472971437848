//! What a feedback item is about ([`ItemKind`]) and how items of one importance are
//! ordered ([`priority`]).

use std::fmt;

use serde::{Deserialize, Serialize};

/// What a feedback item is about; serialised as the snake_case name (`compile_error`, ...).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ItemKind {
    /// An NVRTC or ptxas error, with its line.
    CompileError,
    /// Where tree-sitter-cuda stopped parsing code that did not extract or compile.
    SyntaxError,
    /// The launch plan is outside CUDA's or the configured limits.
    InvalidLaunch,
    /// A CUDA error while the candidate ran, by name, with a hint.
    CudaError,
    /// The run was stopped at the job's time limit.
    Timeout,
    /// The process running the kernel died.
    Crashed,
    /// A configuration whose output differs from the reference.
    Mismatch,
    /// A speedup was measured but not awarded (noise, an implausible time).
    Withheld,
    /// Slower than the reference.
    Slowdown,
    /// Faster than (or as fast as) the reference.
    Speedup,
    /// A stage that could not run here.
    NotMeasured,
    /// A strided (uncoalesced) global access.
    StridedAccess,
    /// A global access through a computed index.
    IndirectAccess,
    /// A `__syncthreads()` some threads of a block may not reach.
    DivergentBarrier,
    /// A barrier after an early `return`.
    BarrierAfterReturn,
    /// A global atomic inside a loop.
    GlobalAtomicInLoop,
    /// A shared-memory bank conflict.
    BankConflict,
    /// A shared-memory access that may conflict.
    PossibleBankConflict,
    /// A reduction with interleaved (`tid % (2*s)`) addressing.
    InterleavedReduction,
    /// A branch that splits a warp (not a bounds guard or single-thread section).
    DivergentBranch,
    /// Registers spilled to local memory.
    Spills,
    /// Theoretical occupancy below one half.
    Occupancy,
    /// How many structural findings were not shown.
    MoreFindings,
    /// The learned ranker's opinion, where speed was not measured.
    Ranker,
}

impl ItemKind {
    /// The snake_case name.
    pub fn as_str(self) -> &'static str {
        match self {
            ItemKind::CompileError => "compile_error",
            ItemKind::SyntaxError => "syntax_error",
            ItemKind::InvalidLaunch => "invalid_launch",
            ItemKind::CudaError => "cuda_error",
            ItemKind::Timeout => "timeout",
            ItemKind::Crashed => "crashed",
            ItemKind::Mismatch => "mismatch",
            ItemKind::Withheld => "withheld",
            ItemKind::Slowdown => "slowdown",
            ItemKind::Speedup => "speedup",
            ItemKind::NotMeasured => "not_measured",
            ItemKind::StridedAccess => "strided_access",
            ItemKind::IndirectAccess => "indirect_access",
            ItemKind::DivergentBarrier => "divergent_barrier",
            ItemKind::BarrierAfterReturn => "barrier_after_return",
            ItemKind::GlobalAtomicInLoop => "global_atomic_in_loop",
            ItemKind::BankConflict => "bank_conflict",
            ItemKind::PossibleBankConflict => "possible_bank_conflict",
            ItemKind::InterleavedReduction => "interleaved_reduction",
            ItemKind::DivergentBranch => "divergent_branch",
            ItemKind::Spills => "spills",
            ItemKind::Occupancy => "occupancy",
            ItemKind::MoreFindings => "more_findings",
            ItemKind::Ranker => "ranker",
        }
    }
}

impl fmt::Display for ItemKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Lets a kind be compared with its serialised name (`item.kind == "ranker"`).
impl PartialEq<&str> for ItemKind {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl PartialEq<str> for ItemKind {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

/// Order of items within one [`super::Importance`] (higher first): the item's `severity`.
pub mod priority {
    /// The first compile error; each later one is one less, in the log's order.
    pub const FIRST_COMPILE_ERROR: u32 = 1000;
    /// What stopped a compiled program: a fault, a timeout, a crash, an invalid launch.
    pub const RUN_STOPPED: u32 = 900;
    /// The first failing configuration; each later one is one less.
    pub const FIRST_MISMATCH: u32 = 800;
    /// A speed the candidate should act on: slower than the reference, or not awarded.
    pub const SPEED_PROBLEM: u32 = 700;
    /// A measured speedup.
    pub const SPEEDUP: u32 = 600;
    /// Where the code stops parsing, when NVRTC said nothing more precise.
    pub const SYNTAX_ALONE: u32 = 500;
    /// Where the code stops parsing, after NVRTC's own errors (which say what is wrong).
    pub const SYNTAX_AFTER_COMPILE_ERRORS: u32 = 100;
    /// A barrier some threads may not reach (a hang or wrong results).
    pub const DIVERGENT_BARRIER: u32 = 100;
    /// A strided global access inside a loop.
    pub const STRIDED_IN_LOOP: u32 = 85;
    /// A strided global access.
    pub const STRIDED: u32 = 80;
    /// An interleaved reduction.
    pub const INTERLEAVED_REDUCTION: u32 = 70;
    /// A shared-memory bank conflict.
    pub const BANK_CONFLICT: u32 = 65;
    /// A barrier after an early return, or a global atomic in a loop.
    pub const SYNC_HAZARD: u32 = 60;
    /// Register spills.
    pub const SPILLS: u32 = 55;
    /// Low theoretical occupancy.
    pub const LOW_OCCUPANCY: u32 = 50;
    /// A possible bank conflict.
    pub const POSSIBLE_BANK_CONFLICT: u32 = 25;
    /// A divergent branch.
    pub const DIVERGENT_BRANCH: u32 = 20;
    /// An indirect global access.
    pub const INDIRECT_ACCESS: u32 = 15;
    /// Notes, and the "N more not shown" lines: last of their importance.
    pub const LAST: u32 = 0;
}
