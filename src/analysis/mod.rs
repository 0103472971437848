//! Structural analysis of CUDA source without a GPU.
//!
//! [`analyze`] parses a candidate with tree-sitter-cuda, finds every
//! `__global__` function (inlining the `__device__` functions it calls) and
//! computes per-kernel and summed [`Features`]: global-memory access classes,
//! shared-memory use and bank conflicts, synchronisation, loops, divergence,
//! memory-instruction choices, arithmetic and an arithmetic-intensity estimate.
//! Every finding keeps its 1-based source [`Span`] and a short reason so that
//! feedback can point at the line.
//!
//! [`structural_score`] turns features into a hand-weighted score in `[-1, 1]`,
//! [`Features::to_vector`] into a fixed-length vector for a learned ranker
//! ([`FEATURE_NAMES`]), and [`occupancy()`] computes static theoretical occupancy.
//!
//! ```
//! use cudaperf::analysis::{analyze, AccessClass};
//!
//! let src = br#"
//! __global__ void copy(const float* __restrict__ in, float* out, int n) {
//!     int i = blockIdx.x * blockDim.x + threadIdx.x;
//!     if (i < n) out[i] = in[i];
//! }"#;
//! let f = analyze(src);
//! assert_eq!(f.kernels[0].name, "copy");
//! assert_eq!(f.totals.global_accesses.coalesced, 2);
//! assert_eq!(f.kernels[0].global_accesses.findings[0].class, AccessClass::Coalesced);
//! ```
//!
//! The analysis is static and approximate: variables are tracked
//! flow-insensitively (the last assignment wins), pointers only through simple
//! aliases of kernel parameters, and constants through `#define`, `const` and
//! `constexpr` integers.

mod accesses;
mod compute;
mod consts;
mod divergence;
mod features;
mod gaps;
mod loops;
mod memory_ops;
mod node;
mod occupancy;
pub(crate) mod parse;
mod probe;
mod score;
mod shared;
mod signatures;
mod source;
mod symbolic;
mod sync;
mod vector;
mod walk;

pub use compute::special_function_cost;
pub use features::{
    AccessClass, AccessFinding, AccessKind, ComputeFeatures, DivergenceFeatures, Features, Finding,
    GlobalAccesses, KernelFeatures, LoopFeatures, MemoryOps, SharedMemory, Span, SyncFeatures,
    SyntaxFeatures, Totals,
};
pub use occupancy::{occupancy, DeviceSpec, Limiter, Occupancy, OccupancyError, DEVICES};
pub use probe::{AccessDetail, AccessProbe, KernelProbe, MemorySpace, ProbeArg, WarpProbe};
pub use score::{structural_score, ScoreTerm, StructuralScore};
pub use signatures::KernelSignature;
pub use source::{SourceTree, SyntaxProblems};
pub use vector::FEATURE_NAMES;

/// Largest input analysed in full, in bytes (1 MiB). Real kernels are a few KiB.
pub const MAX_SOURCE_BYTES: usize = 1 << 20;

/// Upper bound on syntax nodes visited by the kernel walks of one analysis,
/// which bounds the cost of inlining device functions into many call sites.
const VISIT_BUDGET: u64 = 2_000_000;

/// Why [`try_analyze`] refused or failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AnalysisError {
    /// The input is larger than [`MAX_SOURCE_BYTES`].
    #[error("source is {len} bytes, more than the {max}-byte analysis limit")]
    TooLarge {
        /// Input length in bytes.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// tree-sitter could not load the CUDA grammar or produced no tree.
    #[error("tree-sitter-cuda produced no syntax tree")]
    ParseFailed,
}

/// Analyses `source`, refusing inputs over [`MAX_SOURCE_BYTES`].
///
/// Non-UTF-8 bytes are replaced (lossy decoding). Syntax errors are not errors
/// here: they are counted in [`SyntaxFeatures`] and the rest is analysed anyway.
pub fn try_analyze(source: &[u8]) -> Result<Features, AnalysisError> {
    Ok(analyze_tree(&SourceTree::parse(source)?))
}

/// Features of a source already parsed (the pipeline parses each submission once and shares
/// the tree between its stages).
pub fn analyze_tree(source: &SourceTree) -> Features {
    // The walkers read the text the tree was parsed from (grammar gaps blanked).
    let text = source.parsed_text();
    let prog = parse::Program::of(source);
    let mut features = Features {
        syntax: prog.syntax.clone(),
        ..Features::default()
    };
    let mut fuel = VISIT_BUDGET;
    for (name, def) in &prog.kernels {
        let (k, truncated) = walk::analyze_kernel(&prog, text, name, *def, &mut fuel);
        features.syntax.truncated |= truncated;
        features.kernels.push(k);
    }
    features.recompute_totals();
    features
}

/// Analyses `source`; never panics and always returns features.
///
/// Inputs over [`MAX_SOURCE_BYTES`] are cut to that size (at a line break when
/// possible) and flagged with `syntax.truncated`; a parser failure yields empty
/// features with `syntax.parse_failed`.
pub fn analyze(source: &[u8]) -> Features {
    match try_analyze(source) {
        Ok(f) => f,
        Err(AnalysisError::TooLarge { .. }) => {
            let head = source.get(..MAX_SOURCE_BYTES).unwrap_or(source);
            let cut = head
                .iter()
                .rposition(|b| *b == b'\n')
                .map_or(head, |i| &head[..=i]);
            let mut f = try_analyze(cut).unwrap_or_default();
            f.syntax.truncated = true;
            f
        }
        Err(AnalysisError::ParseFailed) => Features {
            syntax: SyntaxFeatures {
                parse_failed: true,
                ..SyntaxFeatures::default()
            },
            ..Features::default()
        },
    }
}
