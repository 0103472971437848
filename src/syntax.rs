//! Syntax stage: does tree-sitter-cuda parse the candidate, and how badly does it not.

use serde::{Deserialize, Serialize};

/// `stages.syntax` of a report.
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
}

/// Parses `source` with tree-sitter-cuda and counts problems. Never panics.
pub fn check(source: &[u8]) -> SyntaxStage {
    // The analysis keeps one parser per thread; reuse it rather than building another.
    let text = String::from_utf8_lossy(source);
    let Some(tree) = crate::analysis::parse::parse(&text) else {
        return SyntaxStage {
            ok: false,
            error_nodes: 1,
            missing_nodes: 0,
            first_error_line: None,
        };
    };
    let mut stage = SyntaxStage::default();
    let mut cursor = tree.walk();
    // Iterative pre-order walk: deep trees must not overflow the stack.
    loop {
        let node = cursor.node();
        if node.is_error() || node.is_missing() {
            if node.is_error() {
                stage.error_nodes += 1;
            } else {
                stage.missing_nodes += 1;
            }
            let line = node.start_position().row as u32 + 1;
            stage.first_error_line = Some(stage.first_error_line.map_or(line, |l| l.min(line)));
        }
        if node.has_error() && cursor.goto_first_child() {
            continue;
        }
        loop {
            if cursor.goto_next_sibling() {
                break;
            }
            if !cursor.goto_parent() {
                stage.ok = stage.error_nodes == 0 && stage.missing_nodes == 0;
                return stage;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clean_kernel_has_no_errors() {
        let s = check(b"extern \"C\" __global__ void k(float* a, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) a[i] = 2.0f * a[i]; }");
        assert!(s.ok, "{s:?}");
    }

    #[test]
    fn broken_kernel_counts_errors_and_line() {
        let s = check(b"__global__ void k(float* a) {\n  int i = ;\n  a[i] = (1 + ;\n");
        assert!(!s.ok);
        assert!(s.error_nodes + s.missing_nodes >= 1, "{s:?}");
        // The grammar may wrap the whole broken function in one ERROR node, so the first
        // problem is reported at or before the line that is actually wrong.
        assert!(matches!(s.first_error_line, Some(1..=2)), "{s:?}");
    }

    #[test]
    fn garbage_does_not_panic() {
        let s = check(&[0xff, 0xfe, 0x00, b'{', b'{', b'(']);
        assert!(!s.ok);
    }
}
