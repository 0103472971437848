//! Candidates: CUDA source plus the launch plan written in its structured comments.
//!
//! ```text
//! // @launch row_softmax grid=(rows) block=(256) smem=(256*4)
//! // @scratch partial f32 (rows*8)
//! extern "C" __global__ void row_softmax(const float* x, float* y, int rows, int cols) { ... }
//! ```
//! [`Candidate::from_completion`] pulls the code out of an LLM completion (`extract`),
//! [`Candidate::parse`] reads the plan (`directives`) and parses the source once with
//! tree-sitter-cuda ([`SourceTree`], the same tree the syntax, structure and ranker stages
//! read), [`Candidate::check_abi`] matches the plan against a task (`abi`) and
//! [`Candidate::resolve`] evaluates it for one input configuration (`plan`).

use std::collections::BTreeSet;
use std::sync::Arc;

use crate::analysis::{KernelSignature, SourceTree};
use crate::expr::ExprError;

mod abi;
mod directives;
mod extract;
mod plan;

pub use directives::{Launch, LaunchArg, Scratch};
pub use extract::{code_blocks, extract_code};
pub use plan::{PlanLimits, ResolvedArg, ResolvedLaunch, ResolvedPlan};

/// Why a completion or source is not a usable candidate.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum CandidateError {
    /// The completion has no fenced code block.
    #[error("no code block found: put the CUDA source in a ```cuda fenced block")]
    NoCodeBlock,
    /// The source has no `// @launch` line.
    #[error(
        "no launch plan: add a line `// @launch KERNEL grid=(...) block=(...)` above the kernel"
    )]
    NoLaunchPlan,
    /// A launch names a kernel the source does not define.
    #[error("line {line}: @launch names kernel `{name}`, but the source defines no __global__ function of that name (found: {available})")]
    UnknownKernel {
        /// The kernel name in the launch line.
        name: String,
        /// Line of the launch directive (1-based).
        line: usize,
        /// The `__global__` functions found, comma-separated.
        available: String,
    },
    /// The kernel's parameters do not fit the task's ABI or the launch's `args`.
    #[error("line {line}: kernel `{kernel}` does not match the task ABI: {detail}")]
    AbiMismatch {
        /// The kernel.
        kernel: String,
        /// Line of the launch directive.
        line: usize,
        /// What differs.
        detail: String,
    },
    /// A `@launch` or `@scratch` line is malformed.
    #[error("line {line}: {message}")]
    BadDirective {
        /// Line (1-based).
        line: usize,
        /// What is wrong.
        message: String,
    },
    /// An expression in the plan could not be evaluated for a config.
    #[error("line {line}: {source}")]
    Expr {
        /// Line (1-based).
        line: usize,
        /// The expression error.
        source: ExprError,
    },
    /// The evaluated launch is outside what CUDA allows or what the limits allow.
    #[error("line {line}, config `{config}`: {message}")]
    InvalidLaunch {
        /// Line (1-based).
        line: usize,
        /// The config it was evaluated for.
        config: String,
        /// What is out of range.
        message: String,
    },
    /// The completion or source is larger than the size cap; nothing was parsed.
    #[error("the {what} is {bytes} bytes, more than the {limit}-byte limit")]
    TooLarge {
        /// `completion` or `source`.
        what: &'static str,
        /// Its size.
        bytes: usize,
        /// The cap ([`MAX_SOURCE_BYTES`] or [`MAX_COMPLETION_BYTES`]).
        limit: usize,
    },
}

/// A candidate implementation: source and launch plan.
#[derive(Debug, Clone)]
pub struct Candidate {
    /// The CUDA source.
    pub source: String,
    /// Launches, run in order on one stream.
    pub launches: Vec<Launch>,
    /// Scratch buffers, zeroed before each run.
    pub scratch: Vec<Scratch>,
    /// The syntax tree of `source` (`None` when the grammar could not parse it).
    tree: Option<Arc<SourceTree>>,
}

/// Candidates are equal when their source and plan are (the tree follows from the source).
impl PartialEq for Candidate {
    fn eq(&self, other: &Candidate) -> bool {
        self.source == other.source
            && self.launches == other.launches
            && self.scratch == other.scratch
    }
}

/// Bytes of source accepted; larger inputs are rejected before any parsing (the syntax
/// tree of 5 MB of CUDA takes about 20 s and 730 MB to build).
pub const MAX_SOURCE_BYTES: usize = 1 << 20;

/// Bytes of LLM completion accepted (the code block and the prose around it).
pub const MAX_COMPLETION_BYTES: usize = 2 << 20;

/// Names of the `__global__` functions declared or defined in `source`, in source order
/// (from its tree-sitter-cuda parse; empty when the source cannot be parsed).
pub fn global_function_names(source: &str) -> Vec<String> {
    SourceTree::parse(source.as_bytes())
        .map(|t| t.kernel_signatures().into_iter().map(|k| k.name).collect())
        .unwrap_or_default()
}

/// Refuses sources over [`MAX_SOURCE_BYTES`].
fn check_size(source: &str) -> Result<(), CandidateError> {
    if source.len() > MAX_SOURCE_BYTES {
        return Err(CandidateError::TooLarge {
            what: "source",
            bytes: source.len(),
            limit: MAX_SOURCE_BYTES,
        });
    }
    Ok(())
}

impl Candidate {
    /// Parses the launch plan from a CUDA source, and the source with tree-sitter-cuda.
    pub fn parse(source: &str) -> Result<Candidate, CandidateError> {
        check_size(source)?;
        let tree = SourceTree::parse(source.as_bytes()).ok().map(Arc::new);
        Candidate::with_tree(source.to_string(), tree)
    }

    /// Reads the launch plan of an already parsed source (the submission's one parse).
    pub fn from_tree(tree: Arc<SourceTree>) -> Result<Candidate, CandidateError> {
        Candidate::with_tree(tree.text().to_string(), Some(tree))
    }

    /// The candidate of `source` with its syntax tree (`None`: the grammar could not parse
    /// it). A tree of another text is dropped.
    pub(crate) fn with_tree(
        source: String,
        tree: Option<Arc<SourceTree>>,
    ) -> Result<Candidate, CandidateError> {
        check_size(&source)?;
        let tree = tree.filter(|t| t.text() == source);
        let (launches, scratch) = directives::read(&source)?;
        let candidate = Candidate {
            source,
            launches,
            scratch,
            tree,
        };
        candidate.check_kernels_exist()?;
        Ok(candidate)
    }

    /// Every launched kernel is a `__global__` function of the source. Without a tree (the
    /// grammar could not parse it) nothing is refused here: the compiler will tell.
    fn check_kernels_exist(&self) -> Result<(), CandidateError> {
        if self.tree().is_none() {
            return Ok(());
        }
        let defined: Vec<String> = self.kernels().into_iter().map(|k| k.name).collect();
        for l in &self.launches {
            if !defined.iter().any(|d| d == l.base_name()) {
                return Err(CandidateError::UnknownKernel {
                    name: l.kernel.clone(),
                    line: l.line,
                    available: if defined.is_empty() {
                        "none".into()
                    } else {
                        defined.join(", ")
                    },
                });
            }
        }
        Ok(())
    }

    /// Extracts the code from an LLM completion and parses it. Fences ```cuda, ```cu,
    /// ```cpp, ```c++, ```c and bare ``` are accepted; the last block that defines a
    /// `__global__` function wins, else the largest block.
    pub fn from_completion(text: &str) -> Result<Candidate, CandidateError> {
        Candidate::parse(&extract_code(text)?)
    }

    /// The syntax tree of [`Candidate::source`], parsed once with the candidate; `None` when
    /// the grammar could not parse it or `source` was changed since.
    pub fn tree(&self) -> Option<&Arc<SourceTree>> {
        self.tree.as_ref().filter(|t| t.text() == self.source)
    }

    /// The `__global__` functions of the source, from its tree (parsed again only when
    /// `source` was changed since the candidate was parsed).
    pub fn kernels(&self) -> Vec<KernelSignature> {
        match self.tree() {
            Some(t) => t.kernel_signatures(),
            None => SourceTree::parse(self.source.as_bytes())
                .map(|t| t.kernel_signatures())
                .unwrap_or_default(),
        }
    }

    /// Names of the kernels launched, without template arguments, deduplicated in order.
    pub fn kernel_names(&self) -> Vec<String> {
        let mut seen = BTreeSet::new();
        self.launches
            .iter()
            .filter(|l| seen.insert(l.base_name().to_string()))
            .map(|l| l.base_name().to_string())
            .collect()
    }
}
