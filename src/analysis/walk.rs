//! The per-kernel walk: one pass over a kernel body (device callees inlined at
//! their call sites) that keeps symbolic variable bindings and the context
//! (enclosing loops, thread-dependent conditions) every feature needs.
//!
//! Concern-specific handlers live in sibling modules as further `impl Walker`
//! blocks: `accesses`, `shared`, `sync`, `loops`, `divergence`, `compute`.

use super::node::NodeExt;
use std::collections::HashMap;

use tree_sitter::Node;

use super::accesses::{GlobalPtr, Target};
use super::features::{intensity, Finding, KernelFeatures, Span};
use super::memory_ops::{is_float_type, is_reduced_precision_type, is_vector_type, type_bytes};
use super::parse::{add_const_decl, has_qualifier, parameters, span, text, Program};
use super::symbolic::{declared_name, Evaluator, Sym};

/// Deepest syntax nesting walked; deeper subtrees are skipped (stack safety).
const MAX_DEPTH: usize = 160;
/// Device-function inlining depth.
const MAX_INLINE: usize = 4;
/// Findings kept per list; counts keep growing past it.
pub(super) const MAX_FINDINGS: usize = 256;

/// One enclosing loop.
pub(super) struct LoopFrame {
    /// Constant trip count, if known.
    pub trip: Option<u64>,
}

/// State of the walk over one kernel.
pub(super) struct Walker<'a, 't> {
    pub ev: Evaluator<'a, 't>,
    pub src: &'a str,
    pub prog: &'a Program<'t>,
    /// Integer and data variables in scope (flow-insensitive: last assignment wins).
    pub vars: HashMap<String, Sym>,
    /// Pointers and arrays that name global or shared memory.
    pub targets: HashMap<String, Target>,
    /// File-scope `__shared__` arrays, visible in every function.
    pub file_targets: HashMap<String, Target>,
    pub loops: Vec<LoopFrame>,
    /// Enclosing thread-dependent conditions (span of each).
    pub conds: Vec<Span>,
    /// A thread-dependent early `return` seen earlier in this function.
    pub divergent_return: Option<Span>,
    pub inline_stack: Vec<String>,
    /// Nesting of subscript indices being visited (index math is not FLOPs).
    pub in_index: usize,
    depth: usize,
    /// Remaining node visits for the whole analysis.
    pub fuel: &'a mut u64,
    pub truncated: bool,
    pub k: KernelFeatures,
}

/// Walks kernel `def` and returns its features; sets `truncated` when the
/// visit budget ran out.
pub(crate) fn analyze_kernel<'t>(
    prog: &Program<'t>,
    src: &str,
    name: &str,
    def: Node<'t>,
    fuel: &mut u64,
) -> (KernelFeatures, bool) {
    let mut w = Walker {
        ev: Evaluator {
            src,
            consts: &prog.consts,
            functions: &prog.functions,
        },
        src,
        prog,
        vars: HashMap::new(),
        targets: HashMap::new(),
        file_targets: HashMap::new(),
        loops: Vec::new(),
        conds: Vec::new(),
        divergent_return: None,
        inline_stack: vec![name.to_string()],
        in_index: 0,
        depth: 0,
        fuel,
        truncated: false,
        k: KernelFeatures {
            name: name.to_string(),
            span: span(def),
            ..Default::default()
        },
    };
    for decl in &prog.shared_decls {
        w.declare_shared(*decl);
    }
    w.file_targets = std::mem::take(&mut w.targets);
    w.kernel_params(def);
    if let Some(body) = def.field("body") {
        w.visit(body);
    }
    sort_findings(&mut w.k);
    let c = &w.k.compute;
    w.k.arithmetic_intensity = intensity(c.weighted_flops, c.weighted_global_bytes);
    (w.k, w.truncated)
}

/// Orders every findings list by source position (inlined callees and loops
/// are recorded out of order).
fn sort_findings(k: &mut KernelFeatures) {
    let key = |s: &Span| (s.line, s.column);
    k.global_accesses.findings.sort_by_key(|f| key(&f.span));
    for list in [
        &mut k.shared.findings,
        &mut k.sync.findings,
        &mut k.loops.findings,
        &mut k.divergence.findings,
        &mut k.memory_ops.findings,
        &mut k.compute.findings,
    ] {
        list.sort_by_key(|f| key(&f.span));
    }
}

impl<'t> Walker<'_, 't> {
    /// Binds kernel parameters: pointers become global targets, scalars uniform values.
    fn kernel_params(&mut self, def: Node<'t>) {
        for p in parameters(def) {
            let ty = p.field("type").map_or("", |t| text(t, self.src));
            let Some(d) = p.field("declarator") else {
                continue;
            };
            let Some(name) = declared_name(d, self.src) else {
                continue;
            };
            self.count_type(ty, p);
            if matches!(d.kind_str(), "pointer_declarator" | "array_declarator") {
                let m = &mut self.k.memory_ops;
                m.pointer_params += 1;
                let dtext = text(d, self.src);
                if dtext.contains("restrict") {
                    m.restrict_params += 1;
                }
                if has_qualifier(p, "const") {
                    m.const_params += 1;
                }
                let ptr = GlobalPtr {
                    param: name.to_string(),
                    offset: Sym::konst(0),
                    elem_bytes: type_bytes(ty).unwrap_or(4),
                    vector: is_vector_type(ty),
                };
                self.targets.insert(name.to_string(), Target::Global(ptr));
            } else {
                let s = Sym {
                    data: is_float_type(ty),
                    ..Sym::uniform()
                };
                self.vars.insert(name.to_string(), s);
            }
        }
    }

    /// Product of the known trip counts of the enclosing loops (capped).
    pub fn weight(&self) -> f64 {
        self.loops
            .iter()
            .filter_map(|l| l.trip)
            .fold(1.0f64, |w, t| (w * t as f64).min(1e6))
    }

    pub fn in_loop(&self) -> bool {
        !self.loops.is_empty()
    }

    /// Evaluates `node` against the current bindings.
    pub fn eval(&self, node: Node<'t>) -> Sym {
        self.ev.eval(node, &self.vars, 0)
    }

    /// Records a finding unless the list is full.
    pub fn finding(list: &mut Vec<Finding>, kind: &str, node: Node, reason: String) {
        if list.len() < MAX_FINDINGS {
            list.push(Finding {
                kind: kind.to_string(),
                span: span(node),
                reason,
            });
        }
    }

    /// Counts vector and reduced-precision type mentions.
    pub fn count_type(&mut self, ty: &str, at: Node) {
        if is_vector_type(ty) {
            self.k.memory_ops.vector_types += 1;
            let why = format!("vector type `{ty}` moves several elements per instruction");
            Self::finding(&mut self.k.memory_ops.findings, "vector_type", at, why);
        }
        if ty == "double" {
            self.k.compute.fp64_mentions += 1;
        }
        if is_reduced_precision_type(ty) {
            self.k.compute.reduced_precision += 1;
            let why = format!("reduced-precision type `{ty}`");
            Self::finding(&mut self.k.compute.findings, "reduced_precision", at, why);
        }
    }

    /// Visits any node, dispatching on its kind.
    pub fn visit(&mut self, node: Node<'t>) {
        if *self.fuel == 0 {
            self.truncated = true;
            return;
        }
        *self.fuel -= 1;
        if self.depth >= MAX_DEPTH {
            self.truncated = true;
            return;
        }
        self.depth += 1;
        match node.kind_str() {
            "compound_statement" => self.children(node),
            "declaration" => self.declaration(node),
            "if_statement" => self.if_statement(node),
            "switch_statement" => self.switch_statement(node),
            "for_statement" | "while_statement" | "do_statement" | "for_range_loop" => {
                self.loop_statement(node)
            }
            "return_statement" => {
                self.children(node);
                if !self.conds.is_empty() && self.divergent_return.is_none() {
                    self.divergent_return = Some(span(node));
                }
            }
            "assignment_expression" => self.assignment(node),
            "update_expression" => self.update(node),
            "subscript_expression" => self.access(node, super::features::AccessKind::Read),
            "pointer_expression" => self.pointer_expression(node),
            "call_expression" => self.call(node),
            "binary_expression" => {
                self.count_arith(node);
                self.children(node);
            }
            "gnu_asm_expression" | "asm_statement" => self.inline_asm(node),
            "type_identifier" | "primitive_type" => {
                let t = text(node, self.src).to_string();
                self.count_type(&t, node);
            }
            "preproc_call" | "comment" | "string_literal" | "preproc_def" => {}
            _ => self.children(node),
        }
        self.depth -= 1;
    }

    /// Visits all named children.
    pub fn children(&mut self, node: Node<'t>) {
        let mut c = node.walk();
        for ch in node.named_children(&mut c) {
            self.visit(ch);
        }
    }

    /// Local declarations: shared arrays, constants, pointer aliases, index variables.
    fn declaration(&mut self, node: Node<'t>) {
        if has_qualifier(node, "__shared__") {
            self.declare_shared(node);
            return;
        }
        let ty_node = node.field("type");
        let ty = ty_node.map_or("", |t| text(t, self.src)).to_string();
        if let Some(t) = ty_node {
            if t.kind_str() == "type_identifier" || t.kind_str() == "primitive_type" {
                self.count_type(&ty, t);
            } else {
                self.children(t); // template types such as wmma::fragment<..., half, ...>
            }
        }
        if ty.contains("wmma") || ty.contains("fragment") {
            self.k.compute.tensor_core += 1;
            let why = "WMMA fragment: tensor-core matrix multiply-accumulate".to_string();
            Self::finding(&mut self.k.compute.findings, "tensor_core", node, why);
        }
        let mut consts = HashMap::new();
        add_const_decl(&mut consts, node, self.src);
        let is_float = is_float_type(&ty);
        let mut c = node.walk();
        let decls: Vec<Node<'t>> = node.children_by_field_name("declarator", &mut c).collect();
        for d in decls {
            let (target, value) = if d.kind_str() == "init_declarator" {
                (d.field("declarator"), d.field("value"))
            } else {
                (Some(d), None)
            };
            let Some(target) = target else { continue };
            let Some(name) = declared_name(target, self.src).map(str::to_string) else {
                continue;
            };
            if let Some(v) = value {
                self.visit(v);
            }
            self.targets.remove(&name);
            match (target.kind_str(), value) {
                ("pointer_declarator", Some(v)) => {
                    if let Some(t) = self.resolve_target(v) {
                        self.targets.insert(name, t);
                    }
                }
                ("array_declarator", _) => {
                    self.vars.remove(&name);
                }
                (_, Some(v)) => {
                    let mut s = match consts.get(&name) {
                        Some(k) => Sym::konst(*k),
                        None => self.eval(v),
                    };
                    s.data |= is_float;
                    self.vars.insert(name, s);
                }
                (_, None) => {
                    let s = Sym {
                        data: is_float,
                        ..Sym::uniform()
                    };
                    self.vars.insert(name, s);
                }
            }
        }
    }

    /// `x = e`, `x += e`, `a[i] = e`, `a[i] += e`.
    fn assignment(&mut self, node: Node<'t>) {
        let (Some(left), Some(right), Some(op)) = (
            node.field("left"),
            node.field("right"),
            node.field("operator"),
        ) else {
            self.children(node);
            return;
        };
        self.visit(right);
        let op = op.kind_str();
        let compound = op != "=";
        let value = self.eval(right);
        let mut lhs = left;
        while lhs.kind_str() == "field_expression" || lhs.kind_str() == "parenthesized_expression" {
            match lhs.named_child(0) {
                Some(inner) => lhs = inner,
                None => break,
            }
        }
        let lhs_data = match lhs.kind_str() {
            "identifier" => {
                let name = text(lhs, self.src).to_string();
                let old = self.vars.get(&name).cloned().unwrap_or_default();
                let data = old.data;
                if !compound {
                    if let Some(t) = self.resolve_target(right) {
                        self.targets.insert(name.clone(), t);
                    }
                }
                let new = if compound {
                    let mut s = old.binary(op.trim_end_matches('='), &value);
                    s.konst = None;
                    s
                } else {
                    Sym {
                        data: value.data || old.data,
                        ..value.clone()
                    }
                };
                self.vars.insert(name, new);
                data
            }
            "subscript_expression" | "pointer_expression" => {
                let kind = if compound {
                    super::features::AccessKind::ReadWrite
                } else {
                    super::features::AccessKind::Write
                };
                self.access(lhs, kind);
                true
            }
            _ => {
                self.visit(left);
                false
            }
        };
        if compound && matches!(op, "+=" | "-=" | "*=" | "/=") && (value.data || lhs_data) {
            self.add_flops(1.0);
        }
    }

    /// `i++`, `a[i]++`.
    fn update(&mut self, node: Node<'t>) {
        let Some(arg) = node.field("argument") else {
            return;
        };
        match arg.kind_str() {
            "identifier" => {
                let name = text(arg, self.src);
                if let Some(s) = self.vars.get_mut(name) {
                    s.konst = None;
                }
            }
            "subscript_expression" | "pointer_expression" => {
                self.access(arg, super::features::AccessKind::ReadWrite)
            }
            _ => self.visit(arg),
        }
    }

    /// Inlines a `__device__` callee, binding its parameters to the arguments.
    pub fn inline_call(&mut self, name: &str, args: &[Node<'t>]) -> bool {
        let Some(def) = self.prog.functions.get(name).copied() else {
            return false;
        };
        if def.is_global
            || self.inline_stack.len() > MAX_INLINE
            || self.inline_stack.iter().any(|n| n == name)
        {
            return false;
        }
        let Some(body) = def.node.field("body") else {
            return false;
        };
        if !self.k.device_functions.iter().any(|n| n == name) {
            self.k.device_functions.push(name.to_string());
        }
        let mut vars = HashMap::new();
        let mut targets = HashMap::new();
        for (p, a) in parameters(def.node).into_iter().zip(args) {
            let Some(d) = p.field("declarator") else {
                continue;
            };
            let Some(pname) = declared_name(d, self.src) else {
                continue;
            };
            if let Some(t) = self.resolve_target(*a) {
                targets.insert(pname.to_string(), t);
            } else {
                vars.insert(pname.to_string(), self.eval(*a));
            }
        }
        let saved_vars = std::mem::replace(&mut self.vars, vars);
        let saved_targets = std::mem::replace(&mut self.targets, targets);
        let saved_return = self.divergent_return.take();
        self.inline_stack.push(name.to_string());
        self.visit(body);
        self.inline_stack.pop();
        self.vars = saved_vars;
        self.targets = saved_targets;
        self.divergent_return = saved_return;
        true
    }
}
