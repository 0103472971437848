//! Symbolic values of integer expressions, tracked as "what happens to this
//! value when `threadIdx.x` grows by one" plus dependence flags.
//!
//! This is the heart of access classification: `blockIdx.x * blockDim.x +
//! threadIdx.x` has `threadIdx.x`-coefficient 1 (coalesced), `tid * N + k` has
//! coefficient `N` (strided), `idx[i]` is loaded (indirect).

use super::node::NodeExt;
use std::collections::HashMap;

use tree_sitter::Node;

use super::consts::{parse_int, Consts};
use super::parse::{parameters, text, FuncDef};

/// Coefficient of `threadIdx.x` in a value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum Coef {
    /// Independent of `threadIdx.x`.
    #[default]
    Zero,
    /// `c * threadIdx.x + ...` with a known constant `c`.
    Lin(i64),
    /// `threadIdx.x` times a run-time value (a parameter, `blockDim.x`, ...).
    Scaled,
    /// `threadIdx.x / d` for `d > 1`: groups of `d` lanes share a value.
    Sub(i64),
    /// Anything else (products of thread indices, opaque calls of them, ...).
    Nonlinear,
}

/// The abstract value of an expression.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Sym {
    /// Coefficient of `threadIdx.x`.
    pub tx: Coef,
    /// Depends on `threadIdx.y` / `threadIdx.z` (or a linear thread rank).
    pub thread_yz: bool,
    /// Depends on `blockIdx`.
    pub block: bool,
    /// Mentions `gridDim` (grid-stride steps).
    pub grid: bool,
    /// Loaded from memory (an index built from it is indirect).
    pub loaded: bool,
    /// Computed by something we do not model.
    pub opaque: bool,
    /// A data value (floating-point, loaded, call result): arithmetic on it is a FLOP.
    pub data: bool,
    /// Compile-time value.
    pub konst: Option<i64>,
}

impl Sym {
    /// A known constant.
    pub fn konst(v: i64) -> Self {
        Sym {
            konst: Some(v),
            ..Sym::default()
        }
    }
    /// A block-uniform run-time value (kernel parameter, `blockDim.x`).
    pub fn uniform() -> Self {
        Sym::default()
    }
    /// A value we cannot model.
    pub fn opaque() -> Self {
        Sym {
            opaque: true,
            data: true,
            ..Sym::default()
        }
    }
    /// Whether the value can differ between threads of one block.
    pub fn thread_dependent(&self) -> bool {
        self.tx != Coef::Zero || self.thread_yz
    }
    /// Dependence flags of `self` and `o` merged, coefficient left to the caller.
    fn flags(&self, o: &Sym) -> Sym {
        Sym {
            tx: Coef::Zero,
            thread_yz: self.thread_yz || o.thread_yz,
            block: self.block || o.block,
            grid: self.grid || o.grid,
            loaded: self.loaded || o.loaded,
            opaque: self.opaque || o.opaque,
            data: self.data || o.data,
            konst: None,
        }
    }
    /// The value of `self OP o` for an arithmetic or bitwise operator.
    pub fn binary(&self, op: &str, o: &Sym) -> Sym {
        let mut r = self.flags(o);
        r.konst = match (self.konst, o.konst) {
            (Some(a), Some(b)) => fold(op, a, b),
            _ => None,
        };
        r.tx = match op {
            "+" => add(self.tx, o.tx),
            "-" => add(self.tx, neg(o.tx)),
            "*" => mul(self, o),
            "/" => div(self, o),
            "%" => rem(self, o),
            "<<" => match o
                .konst
                .and_then(|k| u32::try_from(k).ok())
                .filter(|k| *k < 31)
            {
                Some(k) => mul(self, &Sym::konst(1 << k)),
                None => nonlinear_if(self.tx != Coef::Zero || o.tx != Coef::Zero),
            },
            ">>" => match o
                .konst
                .and_then(|k| u32::try_from(k).ok())
                .filter(|k| *k < 31)
            {
                Some(k) => div(self, &Sym::konst(1 << k)),
                None => nonlinear_if(self.tx != Coef::Zero || o.tx != Coef::Zero),
            },
            "&" => and_mask(self, o),
            _ => nonlinear_if(self.tx != Coef::Zero || o.tx != Coef::Zero),
        };
        r
    }
    /// A value that is one of `self` or `o` (conditional, `min`, `max`).
    pub fn join(&self, o: &Sym) -> Sym {
        let mut r = self.flags(o);
        r.konst = if self.konst == o.konst {
            self.konst
        } else {
            None
        };
        r.tx = match (self.tx, o.tx) {
            (a, b) if a == b => a,
            (Coef::Zero, b) if self.konst.is_some() || !self.opaque => b,
            (a, Coef::Zero) if o.konst.is_some() || !o.opaque => a,
            _ => Coef::Nonlinear,
        };
        r
    }
    /// A boolean (or otherwise non-affine) function of `self`: same dependences.
    pub fn collapse(&self) -> Sym {
        let mut r = self.clone();
        r.konst = None;
        if r.tx != Coef::Zero {
            r.tx = Coef::Nonlinear;
        }
        r
    }
}

fn nonlinear_if(b: bool) -> Coef {
    if b {
        Coef::Nonlinear
    } else {
        Coef::Zero
    }
}

fn fold(op: &str, a: i64, b: i64) -> Option<i64> {
    match op {
        "+" => a.checked_add(b),
        "-" => a.checked_sub(b),
        "*" => a.checked_mul(b),
        "/" => a.checked_div(b),
        "%" => a.checked_rem(b),
        "<<" => u32::try_from(b).ok().and_then(|b| a.checked_shl(b)),
        ">>" => u32::try_from(b).ok().and_then(|b| a.checked_shr(b)),
        "&" => Some(a & b),
        "|" => Some(a | b),
        "^" => Some(a ^ b),
        _ => None,
    }
}

fn neg(c: Coef) -> Coef {
    match c {
        Coef::Lin(a) => a.checked_neg().map_or(Coef::Scaled, Coef::Lin),
        other => other,
    }
}

fn add(a: Coef, b: Coef) -> Coef {
    match (a, b) {
        (Coef::Zero, x) | (x, Coef::Zero) => x,
        (Coef::Lin(x), Coef::Lin(y)) => match x.checked_add(y) {
            Some(0) => Coef::Zero,
            Some(s) => Coef::Lin(s),
            None => Coef::Scaled,
        },
        (Coef::Scaled, Coef::Lin(_))
        | (Coef::Lin(_), Coef::Scaled)
        | (Coef::Scaled, Coef::Scaled) => Coef::Scaled,
        _ => Coef::Nonlinear,
    }
}

fn mul(a: &Sym, b: &Sym) -> Coef {
    match (a.tx, b.tx) {
        (Coef::Zero, Coef::Zero) => Coef::Zero,
        (Coef::Zero, _) => scale(b.tx, a),
        (_, Coef::Zero) => scale(a.tx, b),
        _ => Coef::Nonlinear,
    }
}

/// `coef * factor` where `factor` does not depend on `threadIdx.x`.
fn scale(c: Coef, factor: &Sym) -> Coef {
    if factor.thread_yz || factor.loaded || factor.opaque {
        return Coef::Nonlinear;
    }
    match (c, factor.konst) {
        (_, Some(0)) => Coef::Zero,
        (Coef::Lin(a), Some(k)) => a.checked_mul(k).map_or(Coef::Scaled, Coef::Lin),
        (Coef::Lin(_) | Coef::Scaled, None) => Coef::Scaled,
        (Coef::Sub(d), Some(k)) if k > 0 => Coef::Sub(d), // (tid / 32) * 32: still grouped
        (Coef::Scaled, Some(_)) => Coef::Scaled,
        _ => Coef::Nonlinear,
    }
}

fn div(a: &Sym, b: &Sym) -> Coef {
    if b.tx != Coef::Zero {
        return Coef::Nonlinear;
    }
    match (a.tx, b.konst) {
        (Coef::Zero, _) => Coef::Zero,
        (Coef::Lin(c), Some(d)) if c.checked_rem(d) == Some(0) => {
            c.checked_div(d).map_or(Coef::Nonlinear, Coef::Lin)
        }
        (Coef::Lin(c), Some(d)) if d > 0 && c > 0 && d % c == 0 => Coef::Sub(d / c),
        (Coef::Sub(s), Some(d)) if d > 0 => s.checked_mul(d).map_or(Coef::Nonlinear, Coef::Sub),
        (Coef::Scaled, _) => Coef::Scaled,
        _ => Coef::Nonlinear,
    }
}

fn rem(a: &Sym, b: &Sym) -> Coef {
    if b.tx != Coef::Zero {
        return Coef::Nonlinear;
    }
    match (a.tx, b.konst) {
        (Coef::Zero, _) => Coef::Zero,
        // Wrap-around every >= 32 lanes leaves a warp's neighbours adjacent.
        (Coef::Lin(c), Some(m)) if m >= c.saturating_abs().saturating_mul(32) => Coef::Lin(c),
        (Coef::Lin(c), None) => Coef::Lin(c),
        _ => Coef::Nonlinear,
    }
}

fn and_mask(a: &Sym, b: &Sym) -> Coef {
    let (t, m) = match (a.tx, b.tx) {
        (Coef::Zero, Coef::Zero) => return Coef::Zero,
        (_, Coef::Zero) => (a.tx, b.konst),
        (Coef::Zero, _) => (b.tx, a.konst),
        _ => return Coef::Nonlinear,
    };
    match (t, m) {
        (Coef::Lin(1), Some(m)) if m >= 31 && m.checked_add(1).is_some_and(|n| n & m == 0) => {
            Coef::Lin(1)
        }
        _ => Coef::Nonlinear,
    }
}

/// Maximum expression depth evaluated; deeper is opaque (stack safety).
const MAX_DEPTH: usize = 96;

/// Evaluates expressions against variable bindings.
pub(crate) struct Evaluator<'a, 't> {
    /// The source text.
    pub src: &'a str,
    /// Program constants.
    pub consts: &'a Consts,
    /// Functions, for one-line `__device__` index helpers.
    pub functions: &'a HashMap<String, FuncDef<'t>>,
}

impl<'t> Evaluator<'_, 't> {
    /// The symbolic value of `node` given variable bindings `vars`.
    pub fn eval(&self, node: Node<'t>, vars: &HashMap<String, Sym>, depth: usize) -> Sym {
        if depth > MAX_DEPTH {
            return Sym::opaque();
        }
        let d = depth + 1;
        let field = |n: Node<'t>, f: &'static str| n.field(f);
        match node.kind_str() {
            "number_literal" => match parse_int(text(node, self.src)) {
                Some(v) => Sym::konst(v),
                None => Sym {
                    data: true,
                    ..Sym::default()
                },
            },
            "true" => Sym::konst(1),
            "false" => Sym::konst(0),
            "char_literal" => Sym::uniform(),
            "identifier" => self.identifier(node, vars),
            "field_expression" => self.field(node, vars, d),
            "parenthesized_expression"
            | "cast_expression"
            | "update_expression"
            | "subscript_argument_list" => match node.named_children(&mut node.walk()).last() {
                Some(inner) => self.eval(inner, vars, d),
                None => Sym::opaque(),
            },
            "binary_expression" => self.binary(node, vars, d),
            "unary_expression" => match (field(node, "argument"), field(node, "operator")) {
                (Some(arg), Some(op)) => {
                    let v = self.eval(arg, vars, d);
                    match op.kind_str() {
                        "-" => Sym::konst(0).binary("-", &v),
                        "+" => v,
                        _ => v.collapse(),
                    }
                }
                _ => Sym::opaque(),
            },
            "conditional_expression" => {
                match (field(node, "consequence"), field(node, "alternative")) {
                    (Some(a), Some(b)) => self.eval(a, vars, d).join(&self.eval(b, vars, d)),
                    _ => Sym::opaque(),
                }
            }
            "assignment_expression" => match field(node, "right") {
                Some(r) => self.eval(r, vars, d),
                None => Sym::opaque(),
            },
            "comma_expression" => match field(node, "right") {
                Some(r) => self.eval(r, vars, d),
                None => Sym::opaque(),
            },
            "subscript_expression" | "pointer_expression" => self.load(node, vars, d),
            "call_expression" => self.call(node, vars, d),
            "sizeof_expression" => Sym::uniform(),
            _ => Sym::opaque(),
        }
    }

    /// A variable's binding, a known constant, `warpSize`, else a uniform value.
    fn identifier(&self, node: Node<'t>, vars: &HashMap<String, Sym>) -> Sym {
        let name = text(node, self.src);
        if let Some(s) = vars.get(name) {
            s.clone()
        } else if let Some(v) = self.consts.get(name) {
            Sym::konst(*v)
        } else if name == "warpSize" {
            Sym::konst(32)
        } else {
            Sym::uniform()
        }
    }

    /// Arithmetic on the operands' values; comparisons and logic join them.
    fn binary(&self, node: Node<'t>, vars: &HashMap<String, Sym>, d: usize) -> Sym {
        let (Some(l), Some(r), Some(op)) = (
            node.field("left"),
            node.field("right"),
            node.field("operator"),
        ) else {
            return Sym::opaque();
        };
        let (a, b) = (self.eval(l, vars, d), self.eval(r, vars, d));
        match op.kind_str() {
            "+" | "-" | "*" | "/" | "%" | "<<" | ">>" | "&" | "|" | "^" => {
                a.binary(op.kind_str(), &b)
            }
            _ => {
                let mut j = a.join(&b).collapse();
                j.data = false;
                j
            }
        }
    }

    /// `threadIdx.x` and friends; other members inherit their object's value.
    fn field(&self, node: Node<'t>, vars: &HashMap<String, Sym>, d: usize) -> Sym {
        let (Some(arg), Some(f)) = (node.field("argument"), node.field("field")) else {
            return Sym::opaque();
        };
        let is_x = text(f, self.src) == "x";
        match text(arg, self.src) {
            "threadIdx" if is_x => Sym {
                tx: Coef::Lin(1),
                ..Sym::default()
            },
            "threadIdx" => Sym {
                thread_yz: true,
                ..Sym::default()
            },
            "blockIdx" => Sym {
                block: true,
                ..Sym::default()
            },
            "gridDim" => Sym {
                grid: true,
                ..Sym::default()
            },
            "blockDim" => Sym::uniform(),
            _ => self.eval(arg, vars, d),
        }
    }

    /// A value read from memory: `a[i]`, `*p`. Varies per thread if the address does.
    fn load(&self, node: Node<'t>, vars: &HashMap<String, Sym>, d: usize) -> Sym {
        if node.kind_str() == "pointer_expression"
            && node.field("operator").is_some_and(|o| o.kind_str() == "&")
        {
            return Sym::opaque();
        }
        let mut addr = Sym::default();
        let mut c = node.walk();
        for ch in node.named_children(&mut c) {
            addr = addr.join(&self.eval(ch, vars, d));
        }
        Sym {
            tx: nonlinear_if(addr.thread_dependent()),
            thread_yz: addr.thread_yz,
            block: addr.block,
            loaded: true,
            data: true,
            ..Sym::default()
        }
    }

    fn call(&self, node: Node<'t>, vars: &HashMap<String, Sym>, d: usize) -> Sym {
        let args: Vec<Node<'t>> = node
            .field("arguments")
            .map(|a| a.named_children(&mut a.walk()).collect())
            .unwrap_or_default();
        let Some(func) = node.field("function") else {
            return Sym::opaque();
        };
        let name_node = match func.kind_str() {
            "template_function" => func.field("name").unwrap_or(func),
            "field_expression" => func.field("field").unwrap_or(func),
            _ => func,
        };
        let full = text(name_node, self.src);
        let name = full.rsplit("::").next().unwrap_or(full);
        let arg = |i: usize| args.get(i).map(|a| self.eval(*a, vars, d));
        match name {
            "min" | "max" | "umin" | "umax" | "imin" | "imax" => match (arg(0), arg(1)) {
                (Some(a), Some(b)) => a.join(&b),
                _ => Sym::opaque(),
            },
            "static_cast" | "reinterpret_cast" | "int" | "unsigned" => {
                arg(0).unwrap_or_else(Sym::opaque)
            }
            "__mul24" | "__umul24" => match (arg(0), arg(1)) {
                (Some(a), Some(b)) => a.binary("*", &b),
                _ => Sym::opaque(),
            },
            "thread_rank" => Sym {
                tx: Coef::Lin(1),
                thread_yz: true,
                block: text(func, self.src).contains("grid"),
                ..Sym::default()
            },
            "__ldg" | "__ldcg" | "__ldca" | "__ldcs" => match args.first() {
                Some(a) => Sym {
                    loaded: true,
                    data: true,
                    ..self.eval(*a, vars, d).collapse()
                },
                None => Sym::opaque(),
            },
            _ => self.inline_return(name, &args, vars, d),
        }
    }

    /// `__device__ int gid() { return blockIdx.x * blockDim.x + threadIdx.x; }`:
    /// evaluates single-`return` helpers with their arguments bound.
    fn inline_return(
        &self,
        name: &str,
        args: &[Node<'t>],
        vars: &HashMap<String, Sym>,
        d: usize,
    ) -> Sym {
        let mut dep = Sym::default();
        let arg_syms: Vec<Sym> = args.iter().map(|a| self.eval(*a, vars, d)).collect();
        for s in &arg_syms {
            dep = dep.join(s);
        }
        let opaque = Sym {
            opaque: true,
            data: true,
            ..dep.collapse()
        };
        let Some(def) = self.functions.get(name) else {
            return opaque;
        };
        let Some(body) = def.node.field("body") else {
            return opaque;
        };
        let stmts: Vec<Node<'t>> = body.named_children(&mut body.walk()).collect();
        let [ret] = stmts.as_slice() else {
            return opaque;
        };
        let Some(expr) = (ret.kind_str() == "return_statement")
            .then(|| ret.named_child(0))
            .flatten()
        else {
            return opaque;
        };
        let mut bound = HashMap::new();
        for (p, s) in parameters(def.node).into_iter().zip(arg_syms) {
            if let Some(n) = declared_name(p, self.src) {
                bound.insert(n.to_string(), s);
            }
        }
        self.eval(expr, &bound, d + 8)
    }
}

/// Declarator kinds that wrap the declared name (`*x`, `a[4]`, `n = 3`, `(f)`): the name is
/// in their `declarator` field, or their first named child that is not a qualifier.
pub(crate) const DECLARATOR_WRAPPERS: [&str; 6] = [
    "parameter_declaration",
    "init_declarator",
    "pointer_declarator",
    "array_declarator",
    "reference_declarator",
    "parenthesized_declarator",
];

/// The identifier a declarator introduces (`*const p`, `a[32]`, `x = 1` → name).
pub(crate) fn declared_name<'s>(mut node: Node, src: &'s str) -> Option<&'s str> {
    for _ in 0..16 {
        match node.kind_str() {
            "identifier" | "field_identifier" => return Some(text(node, src)),
            k if DECLARATOR_WRAPPERS.contains(&k) => {
                node = match node.field("declarator") {
                    Some(n) => n,
                    None => node
                        .named_children(&mut node.walk())
                        .find(|c| c.kind_str() != "type_qualifier")?,
                };
            }
            _ => return None,
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tx() -> Sym {
        Sym {
            tx: Coef::Lin(1),
            ..Sym::default()
        }
    }

    #[test]
    fn affine_rules() {
        let k = |v| Sym::konst(v);
        assert_eq!(tx().binary("*", &k(32)).tx, Coef::Lin(32));
        assert_eq!(tx().binary("*", &Sym::uniform()).tx, Coef::Scaled);
        assert_eq!(tx().binary("/", &k(32)).tx, Coef::Sub(32));
        assert_eq!(tx().binary("%", &k(32)).tx, Coef::Lin(1));
        assert_eq!(tx().binary("&", &k(31)).tx, Coef::Lin(1));
        assert_eq!(tx().binary("*", &tx()).tx, Coef::Nonlinear);
        assert_eq!(tx().binary("-", &tx()).tx, Coef::Zero);
        assert_eq!(tx().binary("<<", &k(2)).tx, Coef::Lin(4));
    }
}
