//! A kernel body copied out of the tree-sitter tree into plain vectors, once per probe.
//!
//! The probe interprets the same few dozen nodes many times: nine lane runs per launch, and
//! loop headers simulated up to [`TRIP_SIMULATION`](super::TRIP_SIMULATION) times each.
//! Asked of a tree-sitter node, every field lookup walks the node's children through the C
//! library, and that walk was about two thirds of the ranker stage (perf, prefix_sum's
//! Blelloch scan: 410 µs of 480). Here a field is a scan of a node's two to four children
//! in a slice, and a node's kind and text are stored with it; the stage fell to ~230 µs, of
//! which copying the three kernels' bodies is now the largest single part.

use tree_sitter::Node;

use super::super::node::{static_field_name, static_kind};
use super::super::symbolic::DECLARATOR_WRAPPERS;

/// One node: its kind, byte range and the range of its children in [`FlatTree::kids`].
struct Flat {
    kind: &'static str,
    start: usize,
    end: usize,
    first_kid: usize,
    kids: usize,
}

/// A child of a node: which node, in which field, and whether it is named.
struct Kid {
    node: usize,
    field: Option<&'static str>,
    named: bool,
}

/// The nodes under one root, children of a node stored next to each other.
pub(super) struct FlatTree<'s> {
    src: &'s str,
    nodes: Vec<Flat>,
    kids: Vec<Kid>,
}

impl<'s> FlatTree<'s> {
    /// Copies `root` and everything under it (`src` is the text it was parsed from).
    pub(super) fn new(root: Node<'_>, src: &'s str) -> FlatTree<'s> {
        let flat = |n: Node<'_>| Flat {
            kind: static_kind(n),
            start: n.start_byte(),
            end: n.end_byte(),
            first_kid: 0,
            kids: 0,
        };
        // One cursor, depth first (a hostile source nests thousands deep: no recursion),
        // each node recorded with its parent; the children are grouped per parent after.
        let mut nodes = vec![flat(root)];
        let mut parents = vec![usize::MAX];
        let mut edges: Vec<(Option<&'static str>, bool)> = vec![(None, root.is_named())];
        let mut cursor = root.walk();
        let mut path = vec![0usize];
        let mut push = |cursor: &tree_sitter::TreeCursor<'_>, parent: usize| {
            let node = cursor.node();
            nodes.push(flat(node));
            parents.push(parent);
            edges.push((
                cursor.field_id().and_then(static_field_name),
                node.is_named(),
            ));
            nodes.len() - 1
        };
        'walk: loop {
            if cursor.goto_first_child() {
                let id = push(&cursor, path[path.len() - 1]);
                path.push(id);
                continue;
            }
            loop {
                if cursor.goto_next_sibling() {
                    path.pop();
                    let id = push(&cursor, path[path.len() - 1]);
                    path.push(id);
                    continue 'walk;
                }
                if !cursor.goto_parent() {
                    break 'walk;
                }
                path.pop();
            }
        }
        // Pre-order keeps each parent's children in order: a counting sort by parent.
        for &p in &parents[1..] {
            nodes[p].kids += 1;
        }
        let mut next = 0;
        for n in &mut nodes {
            n.first_kid = next;
            next += n.kids;
        }
        let mut fill: Vec<usize> = nodes.iter().map(|n| n.first_kid).collect();
        let mut kids: Vec<Kid> = (0..next)
            .map(|_| Kid {
                node: 0,
                field: None,
                named: false,
            })
            .collect();
        for (id, &p) in parents.iter().enumerate().skip(1) {
            let (field, named) = edges[id];
            kids[fill[p]] = Kid {
                node: id,
                field,
                named,
            };
            fill[p] += 1;
        }
        FlatTree { src, nodes, kids }
    }

    /// The root node.
    pub(super) fn root(&self) -> FlatNode<'_> {
        FlatNode { tree: self, id: 0 }
    }
}

/// A node of a [`FlatTree`], with the queries the probe asks of tree-sitter nodes.
#[derive(Clone, Copy)]
pub(super) struct FlatNode<'a> {
    tree: &'a FlatTree<'a>,
    id: usize,
}

impl<'a> FlatNode<'a> {
    fn flat(&self) -> &'a Flat {
        &self.tree.nodes[self.id]
    }

    fn kids(&self) -> &'a [Kid] {
        let f = self.flat();
        &self.tree.kids[f.first_kid..f.first_kid + f.kids]
    }

    fn at(&self, id: usize) -> FlatNode<'a> {
        FlatNode {
            tree: self.tree,
            id,
        }
    }

    /// The node's kind, as [`Node::kind`] gives it.
    pub(super) fn kind_str(&self) -> &'static str {
        self.flat().kind
    }

    /// Byte offset of the node's start in the source.
    pub(super) fn start_byte(&self) -> usize {
        self.flat().start
    }

    /// The node's source text.
    pub(super) fn text(&self) -> &'a str {
        let f = self.flat();
        self.tree.src.get(f.start..f.end).unwrap_or("")
    }

    /// The first child in field `name`, as [`Node::child_by_field_name`] gives it.
    pub(super) fn field(&self, name: &str) -> Option<FlatNode<'a>> {
        self.kids()
            .iter()
            .find(|k| k.field == Some(name))
            .map(|k| self.at(k.node))
    }

    /// Every child in field `name`.
    pub(super) fn fields(&self, name: &'a str) -> impl Iterator<Item = FlatNode<'a>> + 'a {
        let this = *self;
        self.kids()
            .iter()
            .filter(move |k| k.field == Some(name))
            .map(move |k| this.at(k.node))
    }

    /// The named children, in order.
    pub(super) fn named_children(&self) -> impl Iterator<Item = FlatNode<'a>> + 'a {
        let this = *self;
        self.kids()
            .iter()
            .filter(|k| k.named)
            .map(move |k| this.at(k.node))
    }

    /// The `i`-th named child.
    pub(super) fn named_child(&self, i: usize) -> Option<FlatNode<'a>> {
        self.named_children().nth(i)
    }

    /// The name a declarator declares (`x` of `*x`, `a` of `a[4][4]`, `n` of `n = 3`), as
    /// [`declared_name`](super::super::symbolic::declared_name) reads it from a tree-sitter node.
    pub(super) fn declared_name(mut self) -> Option<&'a str> {
        for _ in 0..16 {
            match self.kind_str() {
                "identifier" | "field_identifier" => return Some(self.text()),
                k if DECLARATOR_WRAPPERS.contains(&k) => {
                    self = match self.field("declarator") {
                        Some(n) => n,
                        None => self
                            .named_children()
                            .find(|c| c.kind_str() != "type_qualifier")?,
                    };
                }
                _ => return None,
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::super::super::node::tests::real_and_broken_sources;
    use super::super::super::parse::parse;
    use super::super::super::symbolic::declared_name;
    use super::*;

    /// Every node of a real kernel (and of a broken one) answers as its tree-sitter node does.
    #[test]
    fn same_answers_as_tree_sitter() {
        for text in real_and_broken_sources() {
            let tree = parse(&text).unwrap();
            let flat = FlatTree::new(tree.root_node(), &text);
            let mut stack = vec![(tree.root_node(), flat.root())];
            let mut seen = 0;
            while let Some((n, f)) = stack.pop() {
                seen += 1;
                assert_eq!(f.kind_str(), n.kind());
                assert_eq!(f.start_byte(), n.start_byte());
                assert_eq!(f.text(), &text[n.byte_range()]);
                assert_eq!(f.declared_name(), declared_name(n, &text));
                for name in ["left", "right", "declarator", "body", "condition", "value"] {
                    assert_eq!(
                        f.field(name).map(|c| c.start_byte()),
                        n.child_by_field_name(name).map(|c| c.start_byte()),
                        "{name} of {}",
                        n.kind()
                    );
                    let all: Vec<_> = f.fields(name).map(|c| c.start_byte()).collect();
                    let ts: Vec<_> = n
                        .children_by_field_name(name, &mut n.walk())
                        .map(|c| c.start_byte())
                        .collect();
                    assert_eq!(all, ts);
                }
                let named: Vec<_> = f.named_children().collect();
                let ts: Vec<_> = n.named_children(&mut n.walk()).collect();
                assert_eq!(named.len(), ts.len());
                assert_eq!(
                    f.named_child(0).map(|c| c.start_byte()),
                    n.named_child(0).map(|c| c.start_byte())
                );
                let all: Vec<_> = n.children(&mut n.walk()).collect();
                assert_eq!(f.kids().len(), all.len());
                for (k, c) in f.kids().iter().zip(all) {
                    stack.push((c, f.at(k.node)));
                }
            }
            assert!(seen > 500);
        }
    }
}
