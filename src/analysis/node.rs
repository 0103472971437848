//! Cheap access to node kinds and fields.
//!
//! tree-sitter's `Node::kind` re-reads the kind's C string and checks it is UTF-8 on every
//! call, and `child_by_field_name` compares the name against every field of the grammar; in
//! the analysis, which asks both questions of almost every node, they took about a third of
//! the time (callgrind). Both are looked up here once per process, by number.

use std::sync::OnceLock;

use tree_sitter::{Language, Node};

/// Field names the analysis reads.
const FIELDS: [&str; 19] = [
    "argument",
    "arguments",
    "body",
    "condition",
    "declarator",
    "directive",
    "field",
    "function",
    "indices",
    "initializer",
    "left",
    "name",
    "operator",
    "parameters",
    "right",
    "size",
    "type",
    "update",
    "value",
];

struct Tables {
    kinds: Vec<&'static str>,
    fields: [Option<u16>; FIELDS.len()],
}

fn language() -> &'static Language {
    static LANGUAGE: OnceLock<Language> = OnceLock::new();
    LANGUAGE.get_or_init(|| tree_sitter_cuda::LANGUAGE.into())
}

fn tables() -> &'static Tables {
    static TABLES: OnceLock<Tables> = OnceLock::new();
    TABLES.get_or_init(|| {
        let lang = language();
        let kinds = (0..lang.node_kind_count())
            .map(|id| {
                u16::try_from(id)
                    .ok()
                    .and_then(|id| lang.node_kind_for_id(id))
                    .unwrap_or("")
            })
            .collect();
        let mut fields = [None; FIELDS.len()];
        for (slot, name) in fields.iter_mut().zip(FIELDS) {
            *slot = lang.field_id_for_name(name).map(|id| id.get());
        }
        Tables { kinds, fields }
    })
}

/// The kind of `node` for as long as the process runs (the grammar's own string).
pub(crate) fn static_kind(node: Node<'_>) -> &'static str {
    match tables().kinds.get(usize::from(node.kind_id())) {
        Some(k) if !k.is_empty() => k,
        // ERROR and other built-in symbols outside the table.
        _ => language().node_kind_for_id(node.kind_id()).unwrap_or(""),
    }
}

/// The grammar's name of field `id`.
pub(crate) fn static_field_name(id: std::num::NonZeroU16) -> Option<&'static str> {
    language().field_name_for_id(id.get())
}

/// Node queries by number instead of by name.
pub(crate) trait NodeExt<'t> {
    /// The node's kind, as [`Node::kind`] gives it.
    fn kind_str(&self) -> &'t str;
    /// The child in field `name`, as [`Node::child_by_field_name`] gives it.
    fn field(&self, name: &'static str) -> Option<Node<'t>>;
}

impl<'t> NodeExt<'t> for Node<'t> {
    #[inline]
    fn kind_str(&self) -> &'t str {
        static_kind(*self)
    }

    #[inline]
    fn field(&self, name: &'static str) -> Option<Node<'t>> {
        match FIELDS.iter().position(|f| *f == name) {
            Some(i) => self.child_by_field_id(tables().fields[i]?),
            None => self.child_by_field_name(name),
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A real kernel, and the same with a broken tail (ERROR nodes): what the node queries
    /// are checked against tree-sitter's own answers on.
    pub(crate) fn real_and_broken_sources() -> [String; 2] {
        let src = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/fixtures/kernels/layernorm.cu"
        ))
        .unwrap();
        let broken = format!("{src}\n__global__ void k( {{{{ int x = ;");
        [src, broken]
    }

    /// The tables agree with tree-sitter's own answers on every node of a real kernel.
    #[test]
    fn same_answers_as_tree_sitter() {
        for text in real_and_broken_sources() {
            let tree = super::super::parse::parse(&text).unwrap();
            let mut stack = vec![tree.root_node()];
            let mut seen = 0;
            while let Some(n) = stack.pop() {
                seen += 1;
                assert_eq!(n.kind_str(), n.kind());
                for f in FIELDS {
                    assert_eq!(n.field(f), n.child_by_field_name(f), "{f} of {}", n.kind());
                }
                let mut c = n.walk();
                stack.extend(n.children(&mut c));
            }
            assert!(seen > 500);
        }
    }
}
