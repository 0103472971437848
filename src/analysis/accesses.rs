//! Global-memory access classification: which element does each lane of a warp
//! touch? The index (plus any pointer-alias offset) is evaluated symbolically and
//! its `threadIdx.x` coefficient decides the class.

use super::node::NodeExt;
use tree_sitter::Node;

use super::features::{AccessClass, AccessFinding, AccessKind};
use super::memory_ops::{is_vector_type, type_bytes};
use super::parse::{span, text};
use super::symbolic::{Coef, Sym};
use super::walk::{Walker, MAX_FINDINGS};

/// A pointer into global memory derived from a kernel parameter.
#[derive(Debug, Clone)]
pub(crate) struct GlobalPtr {
    /// The kernel parameter it derives from.
    pub param: String,
    /// Element offset already applied (`p + blockIdx.x * n`).
    pub offset: Sym,
    /// Size of one element as accessed.
    pub elem_bytes: u32,
    /// Accessed through a vector type.
    pub vector: bool,
}

/// A `__shared__` array (or a pointer into one).
#[derive(Debug, Clone)]
pub(crate) struct SharedRef {
    /// Declared name.
    pub array: String,
    /// Dimensions, outermost first; `None` when not a constant (or dynamic).
    pub dims: Vec<Option<i64>>,
    /// Element size.
    pub elem_bytes: u32,
    /// Declared with an odd padded row length.
    pub padded: bool,
    /// Flat element offset (pointer arithmetic into the array).
    pub offset: Sym,
}

/// What a pointer expression points into.
#[derive(Debug, Clone)]
pub(crate) enum Target {
    /// Global memory.
    Global(GlobalPtr),
    /// Shared memory.
    Shared(SharedRef),
}

/// Classifies an element index by the element consecutive `threadIdx.x` hit.
pub(crate) fn classify(index: &Sym) -> (AccessClass, Option<i64>, String) {
    if index.loaded {
        let why = "index is loaded from memory (gather/scatter)";
        return (AccessClass::Indirect, None, why.into());
    }
    match index.tx {
        _ if index.opaque => (
            AccessClass::Unknown,
            None,
            "index computed by an untracked expression".into(),
        ),
        Coef::Zero => (
            AccessClass::Uniform,
            Some(0),
            "index does not depend on threadIdx.x: one address per warp (broadcast)".into(),
        ),
        Coef::Sub(d) => (
            AccessClass::Uniform,
            Some(0),
            format!("threadIdx.x / {d}: groups of {d} lanes share one element"),
        ),
        Coef::Lin(c) if c == 1 || c == -1 => (
            AccessClass::Coalesced,
            Some(c),
            "consecutive threadIdx.x touch consecutive elements".into(),
        ),
        Coef::Lin(c) => (
            AccessClass::Strided,
            Some(c),
            format!("consecutive threadIdx.x are {c} elements apart"),
        ),
        Coef::Scaled => (
            AccessClass::Strided,
            None,
            "threadIdx.x is multiplied by a run-time factor (e.g. a row length)".into(),
        ),
        Coef::Nonlinear => (
            AccessClass::Unknown,
            None,
            "index is a non-linear function of threadIdx.x".into(),
        ),
    }
}

impl<'t> Walker<'_, 't> {
    /// Resolves a pointer-valued expression to the memory it points into.
    pub fn resolve_target(&self, node: Node<'t>) -> Option<Target> {
        self.resolve_at(node, 0)
    }

    fn resolve_at(&self, node: Node<'t>, depth: usize) -> Option<Target> {
        if depth > 16 {
            return None;
        }
        let d = depth + 1;
        match node.kind_str() {
            "identifier" => {
                let name = text(node, self.src);
                self.targets
                    .get(name)
                    .or_else(|| self.file_targets.get(name))
                    .cloned()
            }
            "parenthesized_expression" => self.resolve_at(node.named_child(0)?, d),
            "cast_expression" => {
                let ty = node.field("type")?;
                let inner = self.resolve_at(node.field("value")?, d)?;
                Some(retype(inner, text(ty, self.src)))
            }
            "call_expression" => {
                // reinterpret_cast<float4*>(p), static_cast<const float*>(p)
                let f = node.field("function")?;
                let name = f.field("name").map(|n| text(n, self.src));
                if !matches!(
                    name,
                    Some("reinterpret_cast" | "static_cast" | "const_cast")
                ) {
                    return None;
                }
                let ty = f.field("arguments")?;
                let arg = node.field("arguments")?.named_child(0)?;
                let inner = self.resolve_at(arg, d)?;
                Some(retype(inner, text(ty, self.src).trim_matches(['<', '>'])))
            }
            "binary_expression" => {
                let op = node.field("operator")?.kind_str();
                let (l, r) = (node.field("left")?, node.field("right")?);
                let (base, off, sign) = match self.resolve_at(l, d) {
                    Some(t) => (t, r, op),
                    None if op == "+" => (self.resolve_at(r, d)?, l, "+"),
                    None => return None,
                };
                if sign != "+" && sign != "-" {
                    return None;
                }
                Some(shift(base, sign, &self.eval(off)))
            }
            "pointer_expression" => {
                // &p[i]: the address of element i.
                let is_addr = node.field("operator")?.kind_str() == "&";
                let arg = node.field("argument")?;
                if !is_addr || arg.kind_str() != "subscript_expression" {
                    return None;
                }
                let base = self.resolve_at(arg.field("argument")?, d)?;
                let idx = arg.field("indices")?.named_child(0)?;
                match &base {
                    Target::Shared(s) if s.dims.len() > 1 => None,
                    _ => Some(shift(base, "+", &self.eval(idx))),
                }
            }
            _ => None,
        }
    }

    /// A subscript or dereference that reads and/or writes memory.
    pub fn access(&mut self, node: Node<'t>, kind: AccessKind) {
        let mut indices = Vec::new();
        let mut base = node;
        if node.kind_str() == "pointer_expression" {
            let Some(arg) = node.field("argument") else {
                return;
            };
            if node.field("operator").is_some_and(|o| o.kind_str() == "&") {
                return self.visit(arg);
            }
            base = arg;
            // *p, *(p + i): the offset is folded in by resolve_target.
            indices.push(Sym::konst(0));
        } else {
            while base.kind_str() == "subscript_expression" {
                let Some(idx) = base.field("indices") else {
                    break;
                };
                self.in_index += 1;
                self.visit(idx);
                self.in_index -= 1;
                indices.push(
                    idx.named_child(0)
                        .map_or_else(Sym::opaque, |i| self.eval(i)),
                );
                match base.field("argument") {
                    Some(a) => base = a,
                    None => break,
                }
            }
            indices.reverse();
        }
        let Some(target) = self.resolve_target(base) else {
            // Local arrays, struct members, __constant__ tables: not global traffic.
            self.visit(base);
            return;
        };
        self.access_target(node, target, &indices, kind);
    }

    /// Records an access of a resolved target with element `indices` (outermost first).
    pub fn access_target(
        &mut self,
        node: Node<'t>,
        target: Target,
        indices: &[Sym],
        kind: AccessKind,
    ) {
        match target {
            Target::Global(p) => self.global_access(node, &p, indices, kind),
            Target::Shared(s) => self.shared_access(node, &s, indices, kind),
        }
    }

    /// `*p` reads; `&x` only computes an address.
    pub fn pointer_expression(&mut self, node: Node<'t>) {
        self.access(node, AccessKind::Read);
    }

    fn global_access(&mut self, node: Node<'t>, p: &GlobalPtr, indices: &[Sym], kind: AccessKind) {
        let mut index = p.offset.clone();
        for (i, s) in indices.iter().enumerate() {
            // A 2-D global array `a[r][c]`: outer indices scale by an unknown row length.
            let scaled = if i + 1 < indices.len() {
                s.binary("*", &Sym::uniform())
            } else {
                s.clone()
            };
            index = index.binary("+", &scaled);
        }
        let (class, stride, reason) = classify(&index);
        let in_loop = self.in_loop();
        let g = &mut self.k.global_accesses;
        match class {
            AccessClass::Coalesced => g.coalesced += 1,
            AccessClass::Strided => g.strided += 1,
            AccessClass::Uniform => g.uniform += 1,
            AccessClass::Indirect => g.indirect += 1,
            AccessClass::Unknown => g.unknown += 1,
        }
        if in_loop {
            g.in_loops += 1;
        }
        if p.vector {
            g.vector_accesses += 1;
        }
        if g.findings.len() < MAX_FINDINGS {
            g.findings.push(AccessFinding {
                span: span(node),
                array: p.param.clone(),
                access: kind,
                class,
                stride,
                in_loop,
                bytes: p.elem_bytes,
                reason,
            });
        }
        let moves = if kind == AccessKind::ReadWrite {
            2.0
        } else {
            1.0
        };
        self.k.compute.weighted_global_bytes += moves * f64::from(p.elem_bytes) * self.weight();
    }
}

/// The target seen through a pointer of type `ty` (`float4*` after a cast).
fn retype(t: Target, ty: &str) -> Target {
    let elem = ty.trim_end_matches(|c: char| c == '*' || c.is_whitespace());
    let Some(bytes) = type_bytes(elem) else {
        return t;
    };
    match t {
        Target::Global(mut g) => {
            g.vector = is_vector_type(elem);
            g.elem_bytes = bytes;
            Target::Global(g)
        }
        Target::Shared(mut s) => {
            if s.dims.len() <= 1 {
                s.elem_bytes = bytes;
            }
            Target::Shared(s)
        }
    }
}

/// The target advanced by `sign off` elements.
fn shift(t: Target, sign: &str, off: &Sym) -> Target {
    match t {
        Target::Global(mut g) => {
            g.offset = g.offset.binary(sign, off);
            Target::Global(g)
        }
        Target::Shared(mut s) => {
            s.offset = s.offset.binary(sign, off);
            Target::Shared(s)
        }
    }
}
