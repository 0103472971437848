//! Parsing with tree-sitter-cuda and the program-level tables the walker needs:
//! functions by name, integer constants, syntax-error counts.

use super::node::NodeExt;
use std::cell::RefCell;
use std::collections::HashMap;

use tree_sitter::{Node, Parser, Tree};

use super::consts::{eval_text, Consts};
use super::features::{Span, SyntaxFeatures};

thread_local! {
    // Creating a parser and loading the grammar costs more than parsing a small
    // kernel, so each thread keeps one.
    static PARSER: RefCell<Option<Parser>> = const { RefCell::new(None) };
}

/// Parses `text` with the CUDA grammar; `None` when the grammar cannot be loaded.
pub(crate) fn parse(text: &str) -> Option<Tree> {
    PARSER.with(|cell| {
        let mut slot = cell.try_borrow_mut().ok()?;
        if slot.is_none() {
            let mut p = Parser::new();
            p.set_language(&tree_sitter_cuda::LANGUAGE.into()).ok()?;
            *slot = Some(p);
        }
        let parser = slot.as_mut()?;
        parser.reset();
        parser.parse(text, None)
    })
}

/// The 1-based span of `node`.
pub(crate) fn span(node: Node) -> Span {
    let (s, e) = (node.start_position(), node.end_position());
    let u = |v: usize| u32::try_from(v).unwrap_or(u32::MAX).saturating_add(1);
    Span {
        line: u(s.row),
        column: u(s.column),
        end_line: u(e.row),
        end_column: u(e.column),
    }
}

/// The source text of `node` (empty if the range is not on a char boundary).
pub(crate) fn text<'s>(node: Node, src: &'s str) -> &'s str {
    src.get(node.byte_range()).unwrap_or("")
}

/// A function definition with a body.
#[derive(Clone, Copy)]
pub(crate) struct FuncDef<'t> {
    /// The `function_definition` node.
    pub node: Node<'t>,
    /// Marked `__global__`.
    pub is_global: bool,
}

/// Program-level tables.
pub(crate) struct Program<'t> {
    /// Kernels in source order.
    pub kernels: Vec<(String, Node<'t>)>,
    /// Every function with a body, by unqualified name (first definition wins).
    pub functions: HashMap<String, FuncDef<'t>>,
    /// File-scope integer constants and `#define`s.
    pub consts: Consts,
    /// File-scope `__shared__` declarations.
    pub shared_decls: Vec<Node<'t>>,
    /// Parse-health counters.
    pub syntax: SyntaxFeatures,
    /// The `#pragma unroll`s blanked before parsing (`gaps::unroll_at`).
    pub unrolls: Vec<super::gaps::UnrollPragma>,
}

impl<'t> Program<'t> {
    /// The program of a parsed source: [`collect`] over the text the tree was parsed from,
    /// with the `#pragma unroll`s blanked before parsing.
    pub(crate) fn of(source: &'t super::SourceTree) -> Program<'t> {
        Program {
            unrolls: source.unrolls().to_vec(),
            ..collect(source.tree(), source.parsed_text())
        }
    }
}

/// Walks the whole tree once (iteratively: input nesting cannot overflow the
/// stack), collecting functions, constants and error counts.
pub(crate) fn collect<'t>(tree: &'t Tree, src: &str) -> Program<'t> {
    let mut prog = Program {
        kernels: Vec::new(),
        functions: HashMap::new(),
        consts: Consts::new(),
        shared_decls: Vec::new(),
        syntax: SyntaxFeatures::default(),
        unrolls: Vec::new(),
    };
    let mut cursor = tree.walk();
    let mut in_function = 0usize;
    loop {
        let node = cursor.node();
        let mut descend = true;
        if node.is_error() {
            prog.syntax.error_nodes = prog.syntax.error_nodes.saturating_add(1);
        }
        if node.is_missing() {
            prog.syntax.missing_nodes = prog.syntax.missing_nodes.saturating_add(1);
        }
        match node.kind_str() {
            "function_definition" if in_function == 0 => {
                add_function(&mut prog, node, src);
                // Only error nodes inside bodies still need counting.
                descend = node.has_error();
            }
            "preproc_def" if in_function == 0 => add_define(&mut prog.consts, node, src),
            "declaration" if in_function == 0 => {
                add_const_decl(&mut prog.consts, node, src);
                if has_qualifier(node, "__shared__") {
                    prog.shared_decls.push(node);
                }
                descend = node.has_error();
            }
            _ => {}
        }
        // Inside a function only syntax errors are counted: skip subtrees without one.
        if in_function > 0 && !node.has_error() {
            descend = false;
        }
        if descend && cursor.goto_first_child() {
            if node.kind_str() == "function_definition" {
                in_function += 1;
            }
            continue;
        }
        loop {
            if cursor.goto_next_sibling() {
                break;
            }
            if !cursor.goto_parent() {
                return prog;
            }
            if cursor.node().kind_str() == "function_definition" {
                in_function = in_function.saturating_sub(1);
            }
        }
    }
}

/// Whether a declaration or definition carries the anonymous token `qual`
/// (`__global__`, `__shared__`, `const`, ...), directly or in a type qualifier.
pub(crate) fn has_qualifier(node: Node, qual: &str) -> bool {
    let mut c = node.walk();
    let found = node.children(&mut c).any(|ch| {
        ch.kind_str() == qual
            || (matches!(ch.kind_str(), "type_qualifier" | "storage_class_specifier")
                && ch.child(0).is_some_and(|t| t.kind_str() == qual))
    });
    found
}

fn add_function<'t>(prog: &mut Program<'t>, node: Node<'t>, src: &str) {
    if node.field("body").is_none() {
        return;
    }
    let Some(name) = function_name(node, src) else {
        return;
    };
    let is_global = has_qualifier(node, "__global__");
    if is_global {
        prog.kernels.push((name.clone(), node));
    }
    prog.functions
        .entry(name)
        .or_insert(FuncDef { node, is_global });
}

/// The unqualified name of a function definition.
pub(crate) fn function_name(def: Node, src: &str) -> Option<String> {
    let mut d = def.field("declarator")?;
    for _ in 0..16 {
        if d.kind_str() == "function_declarator" {
            let n = d.field("declarator")?;
            let t = text(n, src);
            let unqualified = t.rsplit("::").next().unwrap_or(t);
            let name = unqualified.split('<').next().unwrap_or(unqualified).trim();
            return (!name.is_empty()).then(|| name.to_string());
        }
        d = d.field("declarator")?;
    }
    None
}

/// The parameter list of a function definition.
pub(crate) fn parameters<'t>(def: Node<'t>) -> Vec<Node<'t>> {
    let mut d = def.field("declarator");
    for _ in 0..16 {
        let Some(n) = d else { break };
        if n.kind_str() == "function_declarator" {
            if let Some(list) = n.field("parameters") {
                let mut c = list.walk();
                return list
                    .named_children(&mut c)
                    .filter(|p| p.kind_str() == "parameter_declaration")
                    .collect();
            }
            break;
        }
        d = n.field("declarator");
    }
    Vec::new()
}

fn add_define(consts: &mut Consts, node: Node, src: &str) {
    let (Some(name), Some(value)) = (node.field("name"), node.field("value")) else {
        return;
    };
    if let Some(v) = eval_text(text(value, src), consts) {
        consts.insert(text(name, src).to_string(), v);
    }
}

/// `const int N = 1024;`, `constexpr int T = 32;`, `static const unsigned B = 256u;`.
pub(crate) fn add_const_decl(consts: &mut Consts, node: Node, src: &str) {
    if !(has_qualifier(node, "const") || has_qualifier(node, "constexpr")) {
        return;
    }
    let mut c = node.walk();
    for d in node.children_by_field_name("declarator", &mut c) {
        if d.kind_str() != "init_declarator" {
            continue;
        }
        let (Some(n), Some(v)) = (d.field("declarator"), d.field("value")) else {
            continue;
        };
        if n.kind_str() == "identifier" {
            if let Some(val) = eval_text(text(v, src), consts) {
                consts.insert(text(n, src).to_string(), val);
            }
        }
    }
}
