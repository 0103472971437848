//! The `__global__` functions of a source as its syntax tree shows them: their names and
//! parameter lists, for the candidate's launch plan (does the launched kernel exist, does it
//! take what the launch passes) and the ranker's launch features.

use tree_sitter::Node;

use super::node::NodeExt;
use super::parse::{function_name, has_qualifier, text};
use super::source::SourceTree;

/// A `__global__` function declared or defined in a source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelSignature {
    /// Its unqualified name, without template arguments.
    pub name: String,
    /// The text of each parameter, in order (`const float* __restrict__ a`; `void` for
    /// `(void)`).
    pub params: Vec<String>,
}

/// The function declarator under a definition's or declaration's declarator chain.
fn function_declarator(node: Node<'_>) -> Option<Node<'_>> {
    let mut d = node.field("declarator");
    for _ in 0..16 {
        let n = d?;
        if n.kind_str() == "function_declarator" {
            return Some(n);
        }
        d = n.field("declarator");
    }
    None
}

/// The items of a parenthesised list as text: the source between its top-level commas
/// (comments left out; a list the parser could not structure still splits at its commas).
fn list_items(list: Node<'_>, src: &str) -> Vec<String> {
    let mut items = Vec::new();
    let mut span: Option<(usize, usize)> = None;
    let mut c = list.walk();
    for child in list.children(&mut c) {
        match child.kind_str() {
            "(" | ")" | "comment" => {}
            "," => items.extend(span.take()),
            _ => {
                let (start, _) = span.unwrap_or((child.start_byte(), 0));
                span = Some((start, child.end_byte()));
            }
        }
    }
    items.extend(span);
    items
        .into_iter()
        .map(|(a, b)| src.get(a..b).unwrap_or("").trim().to_string())
        .collect()
}

/// The parameters of a function declarator as text.
fn params(declarator: Node<'_>, src: &str) -> Vec<String> {
    declarator
        .field("parameters")
        .map(|list| list_items(list, src))
        .unwrap_or_default()
}

fn signature(node: Node<'_>, src: &str) -> Option<KernelSignature> {
    if !has_qualifier(node, "__global__") {
        return None;
    }
    let declarator = function_declarator(node)?;
    let name = function_name(node, src)?;
    Some(KernelSignature {
        name,
        params: params(declarator, src),
    })
}

/// Whether some ancestor of `node` is an `ERROR` node.
fn inside_error(node: Node<'_>) -> bool {
    let mut p = node.parent();
    while let Some(n) = p {
        if n.is_error() {
            return true;
        }
        p = n.parent();
    }
    false
}

/// The leaves (tokens) under `node`, in order, without comments and without the subtrees of
/// definitions and declarations (the structured walk reads those).
fn leaves<'t>(node: Node<'t>) -> Vec<Node<'t>> {
    let mut out = Vec::new();
    let mut cursor = node.walk();
    loop {
        let n = cursor.node();
        let skip = n.id() != node.id()
            && matches!(
                n.kind_str(),
                "function_definition" | "declaration" | "comment"
            );
        if !skip {
            if n.child_count() == 0 {
                out.push(n);
            } else if cursor.goto_first_child() {
                continue;
            }
        }
        loop {
            if cursor.node().id() == node.id() {
                return out;
            }
            if cursor.goto_next_sibling() {
                break;
            }
            if !cursor.goto_parent() {
                return out;
            }
        }
    }
}

fn is_identifier(t: &str) -> bool {
    t.chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && t.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Kernels the parser could only recover as loose tokens of an `ERROR` node (an unclosed
/// body, braces split over `#if` branches, a line it could not read before the kernel): a
/// `__global__` token, then, before any `{` or `;`, a name followed by a parenthesised list
/// (`__launch_bounds__(...)` skipped), whose items are the parameters.
fn recovered(error: Node<'_>, src: &str) -> Vec<KernelSignature> {
    let leaves = leaves(error);
    let at = |i: usize| text(leaves[i], src);
    let mut out = Vec::new();
    let mut i = 0;
    while i < leaves.len() {
        let global = at(i) == "__global__";
        i += 1;
        if !global {
            continue;
        }
        while i < leaves.len() && !matches!(at(i), "{" | ";" | "__global__") {
            let list = leaves[i].parent().filter(|_| at(i) == "(" && i > 0);
            let Some(list) = list else {
                i += 1;
                continue;
            };
            let name = at(i - 1);
            if name == "__launch_bounds__" {
                while i < leaves.len() && leaves[i].start_byte() < list.end_byte() {
                    i += 1;
                }
                continue;
            }
            if is_identifier(name) {
                out.push(KernelSignature {
                    name: name.to_string(),
                    params: list_items(list, src),
                });
            }
            break;
        }
    }
    out
}

impl SourceTree {
    /// The `__global__` functions declared or defined in the source, in source order (a
    /// prototype and its definition both count). Function bodies are not entered, except
    /// where the parser recovered from an error; a kernel whose definition the parser could
    /// only recover in pieces (an unclosed body, braces split over `#if` branches) is still
    /// found by its `__global__` token and declarator.
    pub fn kernel_signatures(&self) -> Vec<KernelSignature> {
        let src = self.text();
        let mut out = Vec::new();
        let mut cursor = self.tree().walk();
        loop {
            let node = cursor.node();
            let descend = match node.kind_str() {
                "function_definition" | "declaration" => {
                    out.extend(signature(node, src));
                    node.has_error()
                }
                "ERROR" => {
                    if !inside_error(node) {
                        out.extend(recovered(node, src));
                    }
                    true
                }
                _ => true,
            };
            if descend && cursor.goto_first_child() {
                continue;
            }
            loop {
                if cursor.goto_next_sibling() {
                    break;
                }
                if !cursor.goto_parent() {
                    return out;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sigs(src: &str) -> Vec<(String, Vec<String>)> {
        SourceTree::parse(src.as_bytes())
            .expect("parses")
            .kernel_signatures()
            .into_iter()
            .map(|k| (k.name, k.params))
            .collect()
    }

    fn owned(name: &str, params: &[&str]) -> (String, Vec<String>) {
        (
            name.to_string(),
            params.iter().map(|p| p.to_string()).collect(),
        )
    }

    #[test]
    fn definitions_prototypes_templates_and_launch_bounds() {
        let src = "__global__ void proto(float* a);\n\
            extern \"C\" __global__ void __launch_bounds__(128, 4) k(const float* __restrict__ a, int n) {}\n\
            template <int B> __global__ void t(float* x /* out */, int m[4]) { x[0] = 1.f; }\n\
            __device__ float helper(float v) { return v; }\n\
            namespace ns { __global__ void inner(void) {} }\n\
            __global__ void proto(float* a) {}\n";
        assert_eq!(
            sigs(src),
            [
                owned("proto", &["float* a"]),
                owned("k", &["const float* __restrict__ a", "int n"]),
                owned("t", &["float* x", "int m[4]"]),
                owned("inner", &["void"]),
                owned("proto", &["float* a"]),
            ]
        );
    }

    /// Kernels in definitions the parser could not close are still found.
    #[test]
    fn recovered_definitions() {
        let unclosed = "extern \"C\" __global__ void k(const float* a, int n) {\n  if (n) {\n";
        assert_eq!(sigs(unclosed), [owned("k", &["const float* a", "int n"])]);
        let split = "__global__ void s(float* c, int n) {\n#if W\n  if (n) {\n#else\n  if (n > 0) {\n#endif\n    c[0] = 1.f;\n  }\n}\n";
        assert_eq!(sigs(split), [owned("s", &["float* c", "int n"])]);
        let garbled = "%:include </etc/passwd>\n__global__ void __launch_bounds__(64) g(const float* a, int n) {}\n";
        assert_eq!(sigs(garbled), [owned("g", &["const float* a", "int n"])]);
    }

    #[test]
    fn comments_and_strings_do_not_count() {
        let src = "// __global__ void fake(int a) {}\n\
            const char* s = \"__global__ void fake2(int b)\";\n\
            __global__ void real(int* c) {}\n";
        assert_eq!(sigs(src), [owned("real", &["int* c"])]);
    }
}
