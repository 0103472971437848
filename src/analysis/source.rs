//! One parse of a candidate's source, shared by every stage that reads its syntax tree
//! (the syntax check, the structural features, the ranker's n-grams).

use tree_sitter::Tree;

use super::gaps::UnrollPragma;
use super::{AnalysisError, MAX_SOURCE_BYTES};

/// A CUDA source and its tree-sitter-cuda syntax tree.
///
/// The tree is of the source with its grammar gaps blanked (constructs NVRTC compiles that
/// the grammar misparses: `#pragma` lines, `_Pragma(...)`, `__align__(...)`), byte for byte,
/// so every offset, line and column is the source's; see [`SourceTree::parsed_text`].
///
/// Parsing dominates the cost of the CPU stages (about 10 µs per line here), so the pipeline
/// parses a submission once and hands the same tree to the syntax stage, the structure stage
/// ([`analyze_tree`](super::analyze_tree)) and the ranker
/// ([`syntax_ngrams_of`](crate::ranker::syntax_ngrams_of)). Cheap to share behind an `Arc`.
///
/// ```
/// use cudaperf::analysis::{analyze_tree, SourceTree};
/// # fn main() -> Result<(), cudaperf::analysis::AnalysisError> {
/// let src = SourceTree::parse(b"__global__ void k(float* x) { x[threadIdx.x] = 0.f; }")?;
/// assert_eq!(src.syntax_problems().error_nodes, 0);
/// assert_eq!(analyze_tree(&src).kernels[0].name, "k");
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct SourceTree {
    text: String,
    /// The text the tree was parsed from, where it differs from `text`.
    parsed: Option<String>,
    /// Blanked `#pragma unroll`s (see `gaps::Neutralised::unrolls`).
    unrolls: Vec<UnrollPragma>,
    tree: Tree,
}

impl std::fmt::Debug for SourceTree {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SourceTree")
            .field("bytes", &self.text.len())
            .field("root", &self.tree.root_node().kind())
            .finish()
    }
}

/// Error and missing nodes of a syntax tree, and the first line with one.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SyntaxProblems {
    /// `ERROR` nodes.
    pub error_nodes: u32,
    /// `MISSING` nodes (tokens the parser had to invent).
    pub missing_nodes: u32,
    /// Line (1-based) of the first problem, if any.
    pub first_line: Option<u32>,
}

impl SourceTree {
    /// Parses `source` (non-UTF-8 bytes are replaced), refusing inputs over
    /// [`MAX_SOURCE_BYTES`] before any parsing.
    pub fn parse(source: &[u8]) -> Result<SourceTree, AnalysisError> {
        if source.len() > MAX_SOURCE_BYTES {
            return Err(AnalysisError::TooLarge {
                len: source.len(),
                max: MAX_SOURCE_BYTES,
            });
        }
        let text = String::from_utf8_lossy(source).into_owned();
        let gaps = super::gaps::neutralise(&text);
        let parsed = gaps.text.as_deref().unwrap_or(&text);
        let tree = super::parse::parse(parsed).ok_or(AnalysisError::ParseFailed)?;
        Ok(SourceTree {
            text,
            parsed: gaps.text,
            unrolls: gaps.unrolls,
            tree,
        })
    }

    /// The source text (after lossy UTF-8 decoding).
    pub fn text(&self) -> &str {
        &self.text
    }

    /// The text the tree was parsed from: [`SourceTree::text`] with its grammar gaps
    /// replaced by spaces (same length, same lines).
    pub fn parsed_text(&self) -> &str {
        self.parsed.as_deref().unwrap_or(&self.text)
    }

    /// The blanked `#pragma unroll`s, ascending (for [`super::gaps::unroll_at`]).
    pub(crate) fn unrolls(&self) -> &[UnrollPragma] {
        &self.unrolls
    }

    /// The syntax tree.
    pub fn tree(&self) -> &Tree {
        &self.tree
    }

    /// Counts `ERROR` and `MISSING` nodes, descending only into subtrees that hold one.
    pub fn syntax_problems(&self) -> SyntaxProblems {
        let mut p = SyntaxProblems::default();
        let mut cursor = self.tree.walk();
        // Iterative pre-order walk: deep trees must not overflow the stack.
        loop {
            let node = cursor.node();
            if node.is_error() || node.is_missing() {
                if node.is_error() {
                    p.error_nodes = p.error_nodes.saturating_add(1);
                } else {
                    p.missing_nodes = p.missing_nodes.saturating_add(1);
                }
                let line = u32::try_from(node.start_position().row)
                    .unwrap_or(u32::MAX - 1)
                    .saturating_add(1);
                p.first_line = Some(p.first_line.map_or(line, |l| l.min(line)));
            }
            if node.has_error() && cursor.goto_first_child() {
                continue;
            }
            loop {
                if cursor.goto_next_sibling() {
                    break;
                }
                if !cursor.goto_parent() {
                    return p;
                }
            }
        }
    }
}
