//! Stage 2, syntax: the submission's one tree-sitter-cuda parse (made with the candidate,
//! `Submission::tree`, and kept for the structure and ranker stages), and its error and
//! missing nodes — a graded signal for code that does not compile.
//!
//! Only errors of the code count. The grammar misparses some valid CUDA: the gaps that can
//! be blanked before parsing are (`#pragma` as a brace-less loop body, `_Pragma`,
//! `__align__`; see [`crate::analysis::SourceTree`]), and once NVRTC has compiled the code,
//! what is left is the grammar's too ([`compiled`]: moved to `grammar_gaps`).

use std::sync::Arc;

use crate::analysis::{AnalysisError, SourceTree};

use super::report::SyntaxStage;

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
                grammar_gaps: 0,
            }
        }
        // No tree at all counts as one error (the size cap is enforced earlier, at
        // extraction, so this is a parser failure).
        Err(_) => SyntaxStage {
            ok: false,
            error_nodes: 1,
            missing_nodes: 0,
            first_error_line: None,
            grammar_gaps: 0,
        },
    }
}

/// The syntax stage once NVRTC has compiled the code: whatever tree-sitter-cuda could not
/// parse was a gap of the grammar, not an error of the code, so it moves to `grammar_gaps`
/// and the stage is `ok`.
pub(crate) fn compiled(stage: &mut SyntaxStage) {
    stage.grammar_gaps = stage
        .grammar_gaps
        .saturating_add(stage.error_nodes)
        .saturating_add(stage.missing_nodes);
    stage.error_nodes = 0;
    stage.missing_nodes = 0;
    stage.first_error_line = None;
    stage.ok = true;
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

    /// The GRPO example's fastest matmul program scored structure −0.595 for a
    /// `#pragma unroll` as the body of a brace-less `for` (issue 19).
    #[test]
    fn pragma_as_a_braceless_loop_body_is_not_an_error() {
        let s = check_syntax(b"__global__ void k(float* a) {\n  for (int i = 0; i < 4; ++i)\n    #pragma unroll\n    for (int j = 0; j < 4; ++j) a[i * 4 + j] = 0.f;\n}\n");
        assert!(s.ok, "{s:?}");
        // A real error next to one is still one.
        let s = check_syntax(b"__global__ void k(float* a) {\n  for (int i = 0; i < 4; ++i)\n    #pragma unroll\n    for (int j = 0; j < 4; ++j) a[i * 4 + j] = ;\n}\n");
        assert!(!s.ok, "{s:?}");
        assert_eq!(s.first_error_line, Some(4), "{s:?}");
    }

    #[test]
    fn compiled_code_has_only_grammar_gaps() {
        let mut s = check_syntax(b"#define STEP(p) { (p)[0] = 1.f; }\n__global__ void k(float* a) {\n  STEP(a)\n  a[1] = 2.f;\n}\n");
        assert!(
            !s.ok,
            "the grammar cannot see this macro is a statement: {s:?}"
        );
        let problems = s.error_nodes + s.missing_nodes;
        compiled(&mut s);
        assert!(s.ok && s.error_nodes == 0 && s.missing_nodes == 0, "{s:?}");
        assert_eq!((s.grammar_gaps, s.first_error_line), (problems, None));
    }

    #[test]
    fn garbage_does_not_panic() {
        let s = check_syntax(&[0xff, 0xfe, 0x00, b'{', b'{', b'(']);
        assert!(!s.ok);
    }
}
