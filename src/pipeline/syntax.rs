//! Stage 2, syntax: the one tree-sitter-cuda parse of the submission (kept for the
//! structure and ranker stages), and its error and missing nodes — a graded signal for code
//! that does not compile.

use std::sync::Arc;

use crate::analysis::{AnalysisError, SourceTree};

use super::report::SyntaxStage;

/// Parses `code` once; the tree is shared by the later stages.
pub(crate) fn parse(code: &str) -> Result<Arc<SourceTree>, AnalysisError> {
    SourceTree::parse(code.as_bytes()).map(Arc::new)
}

/// The syntax stage of a parsed source, or of a source the parser refused.
pub(crate) fn stage(tree: &Result<Arc<SourceTree>, AnalysisError>) -> SyntaxStage {
    match tree {
        Ok(t) => {
            let p = t.syntax_problems();
            SyntaxStage {
                ok: p.error_nodes == 0 && p.missing_nodes == 0,
                error_nodes: p.error_nodes,
                missing_nodes: p.missing_nodes,
                first_error_line: p.first_line,
            }
        }
        // No tree at all counts as one error (the size cap is enforced earlier, at
        // extraction, so this is a parser failure).
        Err(_) => SyntaxStage {
            ok: false,
            error_nodes: 1,
            missing_nodes: 0,
            first_error_line: None,
        },
    }
}

/// Parses `source` with tree-sitter-cuda and counts problems. Never panics.
///
/// ```
/// let s = cudaperf::pipeline::check_syntax(b"__global__ void k(float* a) { a[0] = 1.f; }");
/// assert!(s.ok);
/// ```
pub fn check_syntax(source: &[u8]) -> SyntaxStage {
    stage(&SourceTree::parse(source).map(Arc::new))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clean_kernel_has_no_errors() {
        let s = check_syntax(b"extern \"C\" __global__ void k(float* a, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) a[i] = 2.0f * a[i]; }");
        assert!(s.ok, "{s:?}");
    }

    #[test]
    fn broken_kernel_counts_errors_and_line() {
        let s = check_syntax(b"__global__ void k(float* a) {\n  int i = ;\n  a[i] = (1 + ;\n");
        assert!(!s.ok);
        assert!(s.error_nodes + s.missing_nodes >= 1, "{s:?}");
        // The grammar may wrap the whole broken function in one ERROR node, so the first
        // problem is reported at or before the line that is actually wrong.
        assert!(matches!(s.first_error_line, Some(1..=2)), "{s:?}");
    }

    #[test]
    fn garbage_does_not_panic() {
        let s = check_syntax(&[0xff, 0xfe, 0x00, b'{', b'{', b'(']);
        assert!(!s.ok);
    }
}
