//! Concrete coalescing probe: runs a kernel's integer index arithmetic for the first lanes
//! of one warp ([`PROBE_LANES`]), with the launch's real grid, block and scalar arguments, and counts the 32-byte
//! sectors each global access of the warp touches.
//!
//! The symbolic classification ([`super::accesses`]) decides from the `threadIdx.x`
//! coefficient of an index and gives up on `%`, `/` of run-time values and multi-dimensional
//! index arithmetic (`(i / c / hw * c + i % c) * hw + ...`): exactly how uncoalesced thread
//! mappings are usually written. Here those are plain numbers. Only straight-line integer
//! code is followed: the first iteration of a loop, the branch a known condition takes,
//! both statements of an unknown one; data loaded from memory is unknown, and an access
//! whose index is unknown on any lane is not counted.

use std::collections::{BTreeMap, HashMap};

use tree_sitter::Node;

use super::memory_ops::type_bytes;
use super::node::NodeExt;
use super::parse::{collect, parameters, text, Program};
use super::symbolic::declared_name;
use super::SourceTree;

/// A kernel argument's value for the probe.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ProbeArg {
    /// A device buffer (global memory); its element size comes from the parameter's type.
    Buffer,
    /// An integer scalar.
    Int(i64),
    /// Anything else (a floating-point scalar).
    Other,
}

/// One global access of the probed warp.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AccessProbe {
    /// Lanes whose address was known.
    pub lanes: u32,
    /// Distinct 32-byte sectors those lanes touch.
    pub sectors: u32,
    /// The fewest sectors those lanes could touch (contiguous addresses).
    pub ideal: u32,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Val {
    Int(i64),
    /// A pointer into buffer `param` at element `offset` of `elem` bytes.
    Ptr {
        param: usize,
        offset: i64,
        elem: u32,
    },
    /// A 2-D shared array: indexing it once gives a row pointer of `row` elements.
    Rows {
        param: usize,
        row: i64,
        elem: u32,
    },
    Unknown,
}

/// Parameter numbers from this one on name `__shared__` arrays, not kernel buffers.
const SHARED_BASE: usize = 1 << 20;

/// Header iterations simulated before a loop's trip count is extrapolated (additive steps).
const TRIP_SIMULATION: usize = 32;

/// Trip counts above this are cut (a loop over a 2^40-element range is still finite).
const MAX_TRIPS: f64 = 1e12;

const MAX_STEPS: usize = 4000;

/// Deepest nesting of expressions and statements followed (hostile sources nest thousands
/// of parentheses; the probe must not overflow the stack).
const MAX_DEPTH: usize = 64;

/// Lanes probed: the first 8 of the warp. For 4-byte elements they span one sector when
/// coalesced and 8 when scattered, the same 8× ratio the full warp shows (4 against 32), at a
/// quarter of the cost (each lane is interpreted separately: about 25 µs for a 100-line
/// kernel).
const PROBE_LANES: i64 = 8;

struct Lane<'a> {
    src: &'a str,
    vars: HashMap<&'a str, Val>,
    tid: [i64; 3],
    bid: [i64; 3],
    bdim: [i64; 3],
    gdim: [i64; 3],
    /// (access node start byte) -> (param, byte address, element bytes)
    seen: BTreeMap<usize, (usize, i64, u32)>,
    /// (access node start byte) -> product of the trip counts of the loops around it
    trips: BTreeMap<usize, f64>,
    /// Product of the trip counts of the loops being executed (1 outside loops).
    mult: f64,
    /// `__syncthreads` executions of this thread (each weighted by its loops' trips).
    barriers: f64,
    /// `while`/`do` loops whose condition reads global memory or an atomic (spin waits).
    spin_waits: u32,
    /// Loops whose trip count could not be computed (counted once).
    unknown_trips: u32,
    /// Shared arrays declared so far (their `param` numbers start at [`SHARED_BASE`]).
    shared_arrays: usize,
    /// Simulate loop headers for trip counts (the detailed probe; the sector probe skips it).
    count_trips: bool,
    steps: usize,
    depth: usize,
    returned: bool,
}

impl<'a> Lane<'a> {
    fn eval<'t>(&mut self, n: Node<'t>) -> Val {
        self.steps += 1;
        if self.steps > MAX_STEPS || self.depth >= MAX_DEPTH {
            return Val::Unknown;
        }
        self.depth += 1;
        let v = self.eval_node(n);
        self.depth -= 1;
        v
    }

    fn eval_node<'t>(&mut self, n: Node<'t>) -> Val {
        match n.kind_str() {
            "number_literal" => {
                let t = text(n, self.src).trim_end_matches(['u', 'U', 'l', 'L']);
                let v = if let Some(h) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
                    i64::from_str_radix(h, 16).ok()
                } else {
                    t.parse::<i64>().ok()
                };
                v.map_or(Val::Unknown, Val::Int)
            }
            "true" => Val::Int(1),
            "false" => Val::Int(0),
            "identifier" => {
                let name = text(n, self.src);
                match self.vars.get(name) {
                    Some(v) => *v,
                    None if name == "warpSize" => Val::Int(32),
                    None => Val::Unknown,
                }
            }
            "field_expression" => {
                let (Some(a), Some(f)) = (n.field("argument"), n.field("field")) else {
                    return Val::Unknown;
                };
                let k = match text(f, self.src) {
                    "x" => 0,
                    "y" => 1,
                    "z" => 2,
                    _ => return Val::Unknown,
                };
                match text(a, self.src) {
                    "threadIdx" => Val::Int(self.tid[k]),
                    "blockIdx" => Val::Int(self.bid[k]),
                    "blockDim" => Val::Int(self.bdim[k]),
                    "gridDim" => Val::Int(self.gdim[k]),
                    _ => Val::Unknown,
                }
            }
            "parenthesized_expression" => n.named_child(0).map_or(Val::Unknown, |c| self.eval(c)),
            "cast_expression" => {
                let v = n.field("value").map_or(Val::Unknown, |c| self.eval(c));
                let ty = n.field("type").map_or("", |t| text(t, self.src));
                retype(v, ty)
            }
            "binary_expression" => {
                let (Some(l), Some(r), Some(op)) =
                    (n.field("left"), n.field("right"), n.field("operator"))
                else {
                    return Val::Unknown;
                };
                let (a, b) = (self.eval(l), self.eval(r));
                binary(op.kind_str(), a, b)
            }
            "unary_expression" => {
                let (Some(arg), Some(op)) = (n.field("argument"), n.field("operator")) else {
                    return Val::Unknown;
                };
                match (op.kind_str(), self.eval(arg)) {
                    ("-", Val::Int(v)) => Val::Int(v.wrapping_neg()),
                    ("+", v) => v,
                    ("!", Val::Int(v)) => Val::Int(i64::from(v == 0)),
                    ("~", Val::Int(v)) => Val::Int(!v),
                    _ => Val::Unknown,
                }
            }
            "conditional_expression" => {
                let c = n.field("condition").map_or(Val::Unknown, |c| self.eval(c));
                match c {
                    Val::Int(0) => n
                        .field("alternative")
                        .map_or(Val::Unknown, |x| self.eval(x)),
                    Val::Int(_) => n
                        .field("consequence")
                        .map_or(Val::Unknown, |x| self.eval(x)),
                    _ => Val::Unknown,
                }
            }
            "assignment_expression" => self.assign(n),
            "update_expression" => {
                let Some(arg) = n.field("argument") else {
                    return Val::Unknown;
                };
                let old = self.eval(arg);
                let op = n.field("operator").map_or("", |o| o.kind_str());
                let new = binary(if op == "--" { "-" } else { "+" }, old, Val::Int(1));
                self.store(arg, new);
                old
            }
            "comma_expression" => {
                if let Some(l) = n.field("left") {
                    self.eval(l);
                }
                n.field("right").map_or(Val::Unknown, |r| self.eval(r))
            }
            "subscript_expression" => {
                let (b, idx) = self.base_and_index(n);
                if let (Val::Rows { param, row, elem }, Val::Int(i)) = (b, idx) {
                    // `tile[r]` of `tile[R][C]`: a row, the access is `tile[r][c]`.
                    return Val::Ptr {
                        param,
                        offset: i.saturating_mul(row),
                        elem,
                    };
                }
                self.touch(n, b, idx);
                Val::Unknown
            }
            "pointer_expression" => {
                let Some(arg) = n.field("argument") else {
                    return Val::Unknown;
                };
                if n.field("operator").is_some_and(|o| o.kind_str() == "&") {
                    // &a[i] is a pointer, not a load.
                    if arg.kind_str() != "subscript_expression" {
                        return Val::Unknown;
                    }
                    let (b, idx) = self.base_and_index(arg);
                    return binary("+", b, idx);
                }
                let p = self.eval(arg);
                self.touch(n, p, Val::Int(0));
                Val::Unknown
            }
            "call_expression" => self.call(n),
            _ => Val::Unknown,
        }
    }

    /// The pointer and the index of `a[i]`.
    fn base_and_index<'t>(&mut self, n: Node<'t>) -> (Val, Val) {
        let base = n.field("argument").map_or(Val::Unknown, |b| self.eval(b));
        let idx = n
            .field("indices")
            .and_then(|i| i.named_child(0))
            .or_else(|| n.field("index"))
            .map_or(Val::Unknown, |i| self.eval(i));
        (base, idx)
    }

    fn call<'t>(&mut self, n: Node<'t>) -> Val {
        let f = n.field("function").map_or("", |f| text(f, self.src));
        let args: Vec<Node<'t>> = n
            .field("arguments")
            .map(|a| a.named_children(&mut a.walk()).collect())
            .unwrap_or_default();
        let vals: Vec<Val> = args.iter().map(|a| self.eval(*a)).collect();
        let ints = |i: usize| match vals.get(i) {
            Some(Val::Int(v)) => Some(*v),
            _ => None,
        };
        if let Some(ty) = f
            .strip_prefix("reinterpret_cast<")
            .or_else(|| f.strip_prefix("static_cast<"))
        {
            return retype(
                vals.first().copied().unwrap_or(Val::Unknown),
                ty.trim_end_matches('>'),
            );
        }
        if f.starts_with("__syncthreads") {
            self.barriers += self.mult;
        }
        match f {
            "min" | "umin" | "llmin" | "ullmin" => match (ints(0), ints(1)) {
                (Some(a), Some(b)) => Val::Int(a.min(b)),
                _ => Val::Unknown,
            },
            "max" | "umax" | "llmax" | "ullmax" => match (ints(0), ints(1)) {
                (Some(a), Some(b)) => Val::Int(a.max(b)),
                _ => Val::Unknown,
            },
            "__ldg" | "__ldcs" | "__ldca" | "__ldcg" | "__ldlu" | "__ldcv" => {
                let p = vals.first().copied().unwrap_or(Val::Unknown);
                self.touch(n, p, Val::Int(0));
                Val::Unknown
            }
            _ => Val::Unknown,
        }
    }

    fn assign<'t>(&mut self, n: Node<'t>) -> Val {
        let (Some(l), Some(r)) = (n.field("left"), n.field("right")) else {
            return Val::Unknown;
        };
        let rv = self.eval(r);
        let op = n.field("operator").map_or("=", |o| o.kind_str());
        let new = if op == "=" {
            rv
        } else {
            let cur = self.eval(l);
            binary(op.trim_end_matches('='), cur, rv)
        };
        self.store(l, new);
        new
    }

    /// Writes a variable, or records the store of an element.
    fn store<'t>(&mut self, l: Node<'t>, v: Val) {
        match l.kind_str() {
            "identifier" => {
                let name = text(l, self.src);
                if self.vars.contains_key(name) {
                    self.vars.insert(name, v);
                }
            }
            _ => {
                self.eval(l);
            }
        }
    }

    /// Records that this lane accesses `base[idx]` at node `n`.
    fn touch<'t>(&mut self, n: Node<'t>, base: Val, idx: Val) {
        if let (
            Val::Ptr {
                param,
                offset,
                elem,
            },
            Val::Int(i),
        ) = (base, idx)
        {
            let addr = offset.saturating_add(i).saturating_mul(i64::from(elem));
            self.seen
                .entry(n.start_byte())
                .or_insert((param, addr, elem));
            self.trips.entry(n.start_byte()).or_insert(self.mult);
        }
    }

    fn declare<'t>(&mut self, d: Node<'t>) {
        let ty = d.field("type").map_or("", |t| text(t, self.src));
        if text(d, self.src).contains("__shared__") {
            self.declare_shared(d, ty);
            return;
        }
        let mut c = d.walk();
        for decl in d.children_by_field_name("declarator", &mut c) {
            let Some(name) = declared_name(decl, self.src) else {
                continue;
            };
            let v = if decl.kind_str() == "init_declarator" {
                let v = decl.field("value").map_or(Val::Unknown, |v| self.eval(v));
                let ptr = decl
                    .field("declarator")
                    .is_some_and(|x| x.kind_str() == "pointer_declarator");
                match v {
                    Val::Ptr { .. } if ptr => retype(v, &format!("{ty}*")),
                    Val::Int(_) if !ptr && is_integer_type(ty) => v,
                    _ => Val::Unknown,
                }
            } else {
                Val::Unknown
            };
            self.vars.insert(name, v);
        }
    }

    /// A `__shared__` array: 1-D as a pointer, 2-D as rows (sizes that do not evaluate
    /// leave it unknown), each with its own number from [`SHARED_BASE`] on.
    fn declare_shared<'t>(&mut self, d: Node<'t>, ty: &str) {
        let elem = type_bytes(ty.trim()).filter(|&e| e > 0).unwrap_or(4);
        let mut c = d.walk();
        for decl in d.children_by_field_name("declarator", &mut c) {
            let Some(name) = declared_name(decl, self.src) else {
                continue;
            };
            let param = SHARED_BASE + self.shared_arrays;
            self.shared_arrays += 1;
            // Sizes from the outermost declarator in: `a[R][C]` is array(array(a, R), C).
            let mut sizes = Vec::new();
            let mut cur = Some(decl);
            while let Some(n) = cur.filter(|n| n.kind_str() == "array_declarator") {
                sizes.push(n.field("size").map_or(Val::Unknown, |v| self.eval(v)));
                cur = n.field("declarator");
            }
            let v = match sizes.as_slice() {
                [] | [_] => Val::Ptr {
                    param,
                    offset: 0,
                    elem,
                },
                [Val::Int(row), _] => Val::Rows {
                    param,
                    row: *row,
                    elem,
                },
                _ => Val::Unknown,
            };
            self.vars.insert(name, v);
        }
    }

    /// Trip count of a `for` loop whose initializer has run: its header (condition, update)
    /// simulated on a copy of the variables, extrapolated for an additive step when it runs
    /// longer than [`TRIP_SIMULATION`]. `None` when the condition is unknown.
    fn trip_count<'t>(&mut self, s: Node<'t>) -> Option<f64> {
        let cond = s.field("condition")?;
        let update = s.field("update");
        let saved = (self.vars.clone(), self.steps, self.depth);
        let (seen_before, trips_before) = (self.seen.clone(), self.trips.clone());
        let var = loop_variable(cond, self.src);
        let start = var.and_then(|v| self.vars.get(v).copied());
        let mut trips = None;
        let mut after_one = None;
        for k in 0..=TRIP_SIMULATION {
            self.steps = 0;
            match self.eval(cond) {
                Val::Int(0) => {
                    trips = Some(k as f64);
                    break;
                }
                Val::Int(_) => {}
                _ => break,
            }
            if k == TRIP_SIMULATION {
                // Still running: extrapolate `v < bound` with the step `v` took.
                trips = self.extrapolate(cond, var, start, after_one);
                break;
            }
            match update {
                Some(u) => {
                    self.eval(u);
                }
                None => break,
            }
            if k == 0 {
                after_one = var.and_then(|v| self.vars.get(v).copied());
            }
        }
        self.vars = saved.0;
        self.steps = saved.1;
        self.depth = saved.2;
        self.seen = seen_before;
        self.trips = trips_before;
        trips
    }

    fn extrapolate<'t>(
        &mut self,
        cond: Node<'t>,
        var: Option<&str>,
        start: Option<Val>,
        after_one: Option<Val>,
    ) -> Option<f64> {
        let (Some(Val::Int(x0)), Some(Val::Int(x1))) = (start, after_one) else {
            return None;
        };
        let step = x1.wrapping_sub(x0);
        let op = cond.field("operator")?.kind_str();
        let (l, r) = (cond.field("left")?, cond.field("right")?);
        let bound_node = if Some(text(l, self.src)) == var { r } else { l };
        let Val::Int(bound) = self.eval(bound_node) else {
            return None;
        };
        if step == 0 {
            return None;
        }
        let span = (bound as f64 - x0 as f64) / step as f64;
        let extra = if matches!(op, "<=" | ">=") { 1.0 } else { 0.0 };
        Some((span.ceil() + extra).clamp(0.0, MAX_TRIPS))
    }

    fn exec<'t>(&mut self, s: Node<'t>) {
        if self.returned || self.steps > MAX_STEPS || self.depth >= MAX_DEPTH {
            return;
        }
        self.steps += 1;
        self.depth += 1;
        self.exec_node(s);
        self.depth -= 1;
    }

    fn exec_node<'t>(&mut self, s: Node<'t>) {
        match s.kind_str() {
            "compound_statement" => {
                let mut c = s.walk();
                let kids: Vec<Node<'t>> = s.named_children(&mut c).collect();
                for k in kids {
                    self.exec(k);
                }
            }
            "declaration" => self.declare(s),
            "expression_statement" => {
                if let Some(e) = s.named_child(0) {
                    self.eval(e);
                }
            }
            "return_statement" => self.returned = true,
            "if_statement" => {
                let c = s
                    .field("condition")
                    .and_then(|c| c.named_child(0).or(Some(c)))
                    .map_or(Val::Unknown, |c| self.eval(c));
                let (then, alt) = (s.field("consequence"), s.field("alternative"));
                let alt = alt.map(|a| {
                    if a.kind_str() == "else_clause" {
                        a.named_child(0).unwrap_or(a)
                    } else {
                        a
                    }
                });
                match c {
                    Val::Int(0) => {
                        if let Some(a) = alt {
                            self.exec(a);
                        }
                    }
                    Val::Int(_) => {
                        if let Some(t) = then {
                            self.exec(t);
                        }
                    }
                    _ => {
                        // Unknown: see the accesses of both sides, without letting a
                        // `return` in one of them end the lane.
                        for b in [then, alt].into_iter().flatten() {
                            self.exec(b);
                            self.returned = false;
                        }
                    }
                }
            }
            "for_statement" => {
                if let Some(init) = s.field("initializer") {
                    match init.kind_str() {
                        "declaration" => self.declare(init),
                        _ => {
                            self.eval(init);
                        }
                    }
                }
                let trips = if self.count_trips {
                    self.trip_count(s)
                } else {
                    Some(1.0)
                };
                if trips.is_none() {
                    self.unknown_trips += 1;
                }
                let c = s.field("condition").map_or(Val::Int(1), |c| self.eval(c));
                if c != Val::Int(0) {
                    if let Some(b) = s.field("body") {
                        let outer = self.mult;
                        self.mult = (outer * trips.unwrap_or(1.0).max(1.0)).min(MAX_TRIPS);
                        self.exec(b);
                        self.mult = outer;
                        // A `return`/`break` inside the first iteration ends nothing more.
                    }
                }
            }
            "while_statement" | "do_statement" => {
                let c = s
                    .field("condition")
                    .and_then(|c| c.named_child(0).or(Some(c)))
                    .map_or(Val::Unknown, |c| self.eval(c));
                // A loop that waits: its exit is not known from the indices (`while (true)`
                // or a data-dependent test) and it reads memory other blocks write.
                let cond_text = s.field("condition").map_or("", |c| text(c, self.src));
                let open_ended = !matches!(c, Val::Int(_))
                    || matches!(cond_text.trim_matches(['(', ')', ' ']), "true" | "1");
                let loop_text = text(s, self.src);
                if open_ended
                    && ["volatile", "atomic", "__ldcv", "ld.acquire"]
                        .iter()
                        .any(|w| loop_text.contains(w))
                {
                    self.spin_waits += 1;
                }
                if !matches!(c, Val::Int(_)) {
                    self.unknown_trips += 1;
                }
                if c != Val::Int(0) || s.kind_str() == "do_statement" {
                    if let Some(b) = s.field("body") {
                        self.exec(b);
                    }
                }
            }
            _ => {}
        }
    }
}

/// The variable a loop condition compares (`i` of `i < n`, `n > i`): the side that is a
/// plain identifier, the left one when both are.
fn loop_variable<'s>(cond: Node<'_>, src: &'s str) -> Option<&'s str> {
    let c = if cond.kind_str() == "parenthesized_expression" {
        cond.named_child(0)?
    } else {
        cond
    };
    if c.kind_str() != "binary_expression" {
        return None;
    }
    [c.field("left")?, c.field("right")?]
        .into_iter()
        .find(|n| n.kind_str() == "identifier")
        .map(|n| text(n, src))
}

fn is_integer_type(ty: &str) -> bool {
    let t = ty.replace("const", "").replace("unsigned", "");
    let t = t.trim();
    matches!(
        t,
        "int"
            | "long"
            | "long long"
            | "size_t"
            | "short"
            | "char"
            | ""
            | "int64_t"
            | "uint64_t"
            | "int32_t"
            | "uint32_t"
            | "ptrdiff_t"
            | "long int"
            | "auto"
    )
}

/// A value seen as another type: pointer casts change the element size.
fn retype(v: Val, ty: &str) -> Val {
    let t = ty.trim();
    match v {
        Val::Ptr {
            param,
            offset,
            elem,
        } if t.ends_with('*') => {
            let base = t
                .trim_end_matches('*')
                .replace("const", "")
                .replace("__restrict__", "");
            match type_bytes(base.trim()) {
                Some(e) if e > 0 => {
                    let bytes = offset.saturating_mul(i64::from(elem));
                    if bytes % i64::from(e) == 0 {
                        Val::Ptr {
                            param,
                            offset: bytes / i64::from(e),
                            elem: e,
                        }
                    } else {
                        Val::Unknown
                    }
                }
                _ => v,
            }
        }
        Val::Int(_) if t.contains("float") || t.contains("double") => Val::Unknown,
        Val::Int(x)
            if t.contains("int")
                && !t.contains("64")
                && !t.contains("long")
                && !t.contains("size_t") =>
        {
            if t.contains("unsigned") {
                Val::Int(i64::from(x as u32))
            } else {
                Val::Int(i64::from(x as i32))
            }
        }
        _ => v,
    }
}

fn binary(op: &str, a: Val, b: Val) -> Val {
    match (a, b) {
        (Val::Int(x), Val::Int(y)) => Val::Int(match op {
            "+" => x.wrapping_add(y),
            "-" => x.wrapping_sub(y),
            "*" => x.wrapping_mul(y),
            "/" if y != 0 => x.wrapping_div(y),
            "%" if y != 0 => x.wrapping_rem(y),
            "<<" if (0..63).contains(&y) => x.wrapping_shl(y as u32),
            ">>" if (0..63).contains(&y) => x.wrapping_shr(y as u32),
            "&" => x & y,
            "|" => x | y,
            "^" => x ^ y,
            "<" => i64::from(x < y),
            "<=" => i64::from(x <= y),
            ">" => i64::from(x > y),
            ">=" => i64::from(x >= y),
            "==" => i64::from(x == y),
            "!=" => i64::from(x != y),
            "&&" => i64::from(x != 0 && y != 0),
            "||" => i64::from(x != 0 || y != 0),
            _ => return Val::Unknown,
        }),
        (
            Val::Ptr {
                param,
                offset,
                elem,
            },
            Val::Int(y),
        ) if op == "+" || op == "-" => Val::Ptr {
            param,
            offset: if op == "+" {
                offset.wrapping_add(y)
            } else {
                offset.wrapping_sub(y)
            },
            elem,
        },
        (
            Val::Int(x),
            Val::Ptr {
                param,
                offset,
                elem,
            },
        ) if op == "+" => Val::Ptr {
            param,
            offset: offset.wrapping_add(x),
            elem,
        },
        _ => Val::Unknown,
    }
}

/// The kernels of one parsed source, found once, to probe launch by launch.
pub struct WarpProbe<'t> {
    src: &'t str,
    prog: Program<'t>,
}

impl<'t> WarpProbe<'t> {
    /// Finds the functions of `tree`.
    pub fn new(tree: &'t SourceTree) -> WarpProbe<'t> {
        // The text the tree was parsed from (grammar gaps blanked), as the analysis reads.
        WarpProbe {
            src: tree.parsed_text(),
            prog: collect(tree.tree(), tree.parsed_text()),
        }
    }

    /// Probes kernel `kernel` launched with `grid` × `block` and these arguments (in
    /// parameter order): lanes 0..8 of the first warp of the block in the middle of the
    /// grid. One entry per global access reached with a known address on at least half the
    /// lanes; none when the kernel is not found or takes other parameters.
    pub fn run(
        &self,
        kernel: &str,
        grid: [u32; 3],
        block: [u32; 3],
        args: &[ProbeArg],
    ) -> Vec<AccessProbe> {
        let base = kernel.split('<').next().unwrap_or(kernel).trim();
        let Some(def) = self.prog.functions.get(base).map(|f| f.node) else {
            return Vec::new();
        };
        probe_kernel(self.src, def, grid, block, args, false)
            .map(|k| {
                k.accesses
                    .iter()
                    .filter(|a| a.space == MemorySpace::Global)
                    .map(|a| a.probe)
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The same probe with what the ranker's traffic features need: every global and shared
    /// access with its loop trip count, element size and whether a neighbouring block reads
    /// the same address, and the thread's barrier count. `None` when the kernel is not
    /// found or takes other parameters.
    pub fn run_detailed(
        &self,
        kernel: &str,
        grid: [u32; 3],
        block: [u32; 3],
        args: &[ProbeArg],
    ) -> Option<KernelProbe> {
        let base = kernel.split('<').next().unwrap_or(kernel).trim();
        let def = self.prog.functions.get(base).map(|f| f.node)?;
        probe_kernel(self.src, def, grid, block, args, true)
    }
}

/// Which memory an access goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemorySpace {
    /// A kernel buffer (global memory).
    Global,
    /// A `__shared__` array.
    Shared,
}

/// One access of the probed warp with its repetition and reuse.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AccessDetail {
    /// Global or shared.
    pub space: MemorySpace,
    /// Parameter index of the buffer (global accesses), or the shared array's number.
    pub array: usize,
    /// Bytes per lane and execution.
    pub elem_bytes: u32,
    /// Lanes, sectors, ideal sectors (for shared accesses: 32-byte spans of the lanes).
    pub probe: AccessProbe,
    /// Product of the trip counts of the loops around the access on lane 0 (1 outside
    /// loops; a loop whose trip count is unknown counts once).
    pub trips: f64,
    /// Lane 0 of the next block along x (y when the grid has one column) reads the same
    /// address: the blocks re-read the same data.
    pub block_invariant: bool,
    /// Shared accesses: lanes of a full warp that fall in one bank for different words
    /// (1 = conflict-free), from the word stride between lanes 0 and 1 (`gcd(stride, 32)`),
    /// or the probed lanes' own worst bank when the stride is not constant. 1 for global.
    pub bank_degree: u32,
}

/// What one probed thread of a kernel does.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct KernelProbe {
    /// The accesses reached with known addresses on at least half the probed lanes.
    pub accesses: Vec<AccessDetail>,
    /// `__syncthreads` executed by lane 0, each weighted by its loops' trip counts.
    pub barriers: f64,
    /// `while`/`do` loops waiting on global memory or an atomic (inter-block chains).
    pub spin_waits: u32,
    /// Loops whose trip count is unknown on lane 0.
    pub unknown_trips: u32,
}

struct LaneRun {
    seen: BTreeMap<usize, (usize, i64, u32)>,
    trips: BTreeMap<usize, f64>,
    barriers: f64,
    spin_waits: u32,
    unknown_trips: u32,
}

fn probe_kernel(
    src: &str,
    def: Node<'_>,
    grid: [u32; 3],
    block: [u32; 3],
    args: &[ProbeArg],
    detailed: bool,
) -> Option<KernelProbe> {
    let body = def.field("body")?;
    let params = parameters(def);
    if params.len() != args.len() {
        return None;
    }
    let mut bound: HashMap<&str, Val> = HashMap::new();
    for (i, (p, a)) in params.iter().zip(args).enumerate() {
        let ty = p.field("type").map_or("", |t| text(t, src));
        let Some(d) = p.field("declarator") else {
            continue;
        };
        let Some(name) = declared_name(d, src) else {
            continue;
        };
        let v = match a {
            ProbeArg::Buffer => Val::Ptr {
                param: i,
                offset: 0,
                elem: type_bytes(ty).filter(|&e| e > 0).unwrap_or(4),
            },
            ProbeArg::Int(x) => Val::Int(*x),
            ProbeArg::Other => Val::Unknown,
        };
        bound.insert(name, v);
    }
    let g = grid.map(i64::from);
    let b = block.map(i64::from);
    let bid = [g[0] / 2, g[1] / 2, g[2] / 2];
    // Trip counts are read from lane 0 only: the other lanes give addresses.
    let run = |tid: [i64; 3], bid: [i64; 3], count_trips: bool| {
        let mut l = Lane {
            src,
            vars: bound.clone(),
            tid,
            bid,
            bdim: b,
            gdim: g,
            seen: BTreeMap::new(),
            trips: BTreeMap::new(),
            mult: 1.0,
            barriers: 0.0,
            spin_waits: 0,
            unknown_trips: 0,
            shared_arrays: 0,
            count_trips,
            steps: 0,
            depth: 0,
            returned: false,
        };
        l.exec(body);
        LaneRun {
            seen: l.seen,
            trips: l.trips,
            barriers: l.barriers,
            spin_waits: l.spin_waits,
            unknown_trips: l.unknown_trips,
        }
    };
    let mut per_access: BTreeMap<usize, Vec<(usize, i64, u32)>> = BTreeMap::new();
    let lanes = PROBE_LANES.min(b[0] * b[1] * b[2]).max(1);
    let mut first = None;
    for lane in 0..lanes {
        let tid = [lane % b[0], (lane / b[0]) % b[1], lane / (b[0] * b[1])];
        let r = run(tid, bid, detailed && lane == 0);
        for (k, v) in &r.seen {
            per_access.entry(*k).or_default().push(*v);
        }
        if lane == 0 {
            first = Some(r);
        }
    }
    let first = first?;
    // Lane 0 of the neighbouring block: the same address there means the blocks share it.
    let next = if !detailed {
        None
    } else if g[0] > 1 {
        Some([(bid[0] + 1) % g[0], bid[1], bid[2]])
    } else if g[1] > 1 {
        Some([bid[0], (bid[1] + 1) % g[1], bid[2]])
    } else {
        None
    };
    let neighbour = next.map(|nb| run([0, 0, 0], nb, false).seen);
    let accesses = per_access
        .into_iter()
        .filter(|(_, v)| v.len() as i64 * 2 >= lanes)
        .map(|(node, v)| {
            let (param, addr0, elem) = v[0];
            let elem = elem.max(1);
            let mut sectors: Vec<(usize, i64)> =
                v.iter().map(|&(p, a, _)| (p, a.div_euclid(32))).collect();
            sectors.sort_unstable();
            sectors.dedup();
            let bytes = v.len() as u32 * elem;
            let shared = param >= SHARED_BASE;
            let bank_degree = if shared { bank_degree(&v) } else { 1 };
            AccessDetail {
                space: if shared {
                    MemorySpace::Shared
                } else {
                    MemorySpace::Global
                },
                array: if shared { param - SHARED_BASE } else { param },
                elem_bytes: elem,
                probe: AccessProbe {
                    lanes: v.len() as u32,
                    sectors: sectors.len() as u32,
                    ideal: bytes.div_ceil(32).max(1),
                },
                trips: first.trips.get(&node).copied().unwrap_or(1.0),
                block_invariant: neighbour
                    .as_ref()
                    .and_then(|n| n.get(&node))
                    .is_some_and(|&(p, a, _)| p == param && a == addr0),
                bank_degree,
            }
        })
        .collect();
    Some(KernelProbe {
        accesses,
        barriers: first.barriers,
        spin_waits: first.spin_waits,
        unknown_trips: first.unknown_trips,
    })
}

/// Lanes of a full warp that hit one bank with different 4-byte words: `gcd(stride, 32)`
/// for a constant word stride between the probed lanes (0: a broadcast, 1), else the worst
/// bank among the probed lanes.
fn bank_degree(lanes: &[(usize, i64, u32)]) -> u32 {
    let words: Vec<i64> = lanes.iter().map(|&(_, a, _)| a.div_euclid(4)).collect();
    let stride = words.get(1).zip(words.first()).map(|(b, a)| b - a);
    let constant = stride.is_some_and(|s| words.windows(2).all(|w| w[1] - w[0] == s));
    match stride {
        Some(0) if constant => 1,
        Some(s) if constant => {
            let (mut a, mut b) = (s.unsigned_abs(), 32u64);
            while b != 0 {
                (a, b) = (b, a % b);
            }
            a.clamp(1, 32) as u32
        }
        _ => {
            let mut per_bank: BTreeMap<i64, Vec<i64>> = BTreeMap::new();
            for w in words {
                let e = per_bank.entry(w.rem_euclid(32)).or_default();
                if !e.contains(&w) {
                    e.push(w);
                }
            }
            per_bank.values().map(|v| v.len() as u32).max().unwrap_or(1)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn probe(src: &str, grid: [u32; 3], block: [u32; 3], args: &[ProbeArg]) -> Vec<AccessProbe> {
        let tree = SourceTree::parse(src.as_bytes()).expect("parses");
        WarpProbe::new(&tree).run("k", grid, block, args)
    }

    #[test]
    fn one_thread_per_element_is_coalesced() {
        let p = probe(
            "extern \"C\" __global__ void k(const float* a, float* b, int n) {\n  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i < n) b[i] = 2.0f * a[i];\n}\n",
            [100, 1, 1],
            [256, 1, 1],
            &[ProbeArg::Buffer, ProbeArg::Buffer, ProbeArg::Int(25600)],
        );
        assert_eq!(p.len(), 2, "{p:?}");
        assert!(
            p.iter()
                .all(|a| a.lanes == 8 && a.sectors == 1 && a.ideal == 1),
            "{p:?}"
        );
    }

    #[test]
    fn channel_fastest_mapping_is_seen_through_div_and_mod() {
        // The batchnorm2d_inference slow variant: i % c picks the channel, planes hw apart.
        let src = "extern \"C\" __global__ void k(const float* x, float* y, int n, int c, int hw) {\n  size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;\n  size_t total = (size_t)n * c * hw;\n  if (i >= total) return;\n  int ch = (int)(i % c);\n  size_t rest = i / c;\n  size_t img = rest / hw, s = rest % hw;\n  size_t off = (img * c + ch) * (size_t)hw + s;\n  y[off] = x[off];\n}\n";
        let p = probe(
            src,
            [1000, 1, 1],
            [256, 1, 1],
            &[
                ProbeArg::Buffer,
                ProbeArg::Buffer,
                ProbeArg::Int(8),
                ProbeArg::Int(64),
                ProbeArg::Int(4096),
            ],
        );
        assert_eq!(p.len(), 2, "{p:?}");
        assert!(p.iter().all(|a| a.sectors == 8 && a.ideal == 1), "{p:?}");
    }

    #[test]
    fn deep_nesting_is_cut_off() {
        let deep = format!(
            "__global__ void k(float* y) {{ y[{}threadIdx.x{}] = 1.0f; {}{} }}",
            "(".repeat(20_000),
            ")".repeat(20_000),
            "{".repeat(5_000),
            "}".repeat(5_000)
        );
        let p = probe(&deep, [1, 1, 1], [32, 1, 1], &[ProbeArg::Buffer]);
        assert!(p.is_empty(), "{p:?}");
    }

    #[test]
    fn unknown_indices_and_loops_do_not_panic() {
        let src = "__global__ void k(const int* idx, float* y, int n) {\n  for (int j = threadIdx.x; j < n; j += blockDim.x) { y[idx[j]] = 1.0f; while (n) { n--; } }\n}\n";
        let p = probe(
            src,
            [1, 1, 1],
            [128, 1, 1],
            &[ProbeArg::Buffer, ProbeArg::Buffer, ProbeArg::Int(1000)],
        );
        // idx[j] is known (coalesced); y[idx[j]] is not.
        assert_eq!(p.len(), 1, "{p:?}");
        assert_eq!(p[0].sectors, 1);
    }

    // Guards the trip counts the traffic features multiply by: a block-stride loop over n
    // runs n / blockDim times on lane 0, a halving tree log2(blockDim) times, and a
    // `__syncthreads` inside the tree counts once per level.
    #[test]
    fn loop_trip_counts_and_barriers_are_counted() {
        let src = "__global__ void k(const float* x, float* y, int n) {\n  __shared__ float s[256];\n  float acc = 0.0f;\n  for (int i = threadIdx.x; i < n; i += blockDim.x) acc += x[i];\n  s[threadIdx.x] = acc;\n  __syncthreads();\n  for (int h = blockDim.x / 2; h > 0; h >>= 1) {\n    if (threadIdx.x < h) s[threadIdx.x] += s[threadIdx.x + h];\n    __syncthreads();\n  }\n  if (threadIdx.x == 0) y[blockIdx.x] = s[0];\n}\n";
        let tree = SourceTree::parse(src.as_bytes()).unwrap();
        let k = WarpProbe::new(&tree)
            .run_detailed(
                "k",
                [4, 1, 1],
                [256, 1, 1],
                &[ProbeArg::Buffer, ProbeArg::Buffer, ProbeArg::Int(1 << 20)],
            )
            .unwrap();
        let global: Vec<&AccessDetail> = k
            .accesses
            .iter()
            .filter(|a| a.space == MemorySpace::Global)
            .collect();
        // x[i]: (2^20) / 256 = 4096 trips, and every block reads the same first addresses.
        assert!(global
            .iter()
            .any(|a| a.trips == 4096.0 && a.block_invariant));
        // 1 barrier after the store + 8 tree levels.
        assert_eq!(k.barriers, 9.0);
        let shared: Vec<&AccessDetail> = k
            .accesses
            .iter()
            .filter(|a| a.space == MemorySpace::Shared)
            .collect();
        assert!(!shared.is_empty());
        assert!(shared.iter().all(|a| a.bank_degree == 1), "{shared:?}");
        assert_eq!(k.spin_waits, 0);
    }

    // Guards the bank-degree estimate: a column walk of an unpadded 32×32 tile puts all 32
    // lanes in one bank, the padded [32][33] tile spreads them.
    #[test]
    fn column_walk_of_an_unpadded_tile_conflicts_32_ways() {
        let src = |cols: u32| {
            format!(
                "__global__ void t(const float* x, float* y) {{\n  __shared__ float tile[32][{cols}];\n  tile[threadIdx.x][threadIdx.y] = x[threadIdx.x];\n  y[threadIdx.x] = tile[threadIdx.y][threadIdx.x];\n}}\n"
            )
        };
        for (cols, degree) in [(32, 32), (33, 1)] {
            let text = src(cols);
            let tree = SourceTree::parse(text.as_bytes()).unwrap();
            let k = WarpProbe::new(&tree)
                .run_detailed(
                    "t",
                    [1, 1, 1],
                    [32, 8, 1],
                    &[ProbeArg::Buffer, ProbeArg::Buffer],
                )
                .unwrap();
            let worst = k
                .accesses
                .iter()
                .filter(|a| a.space == MemorySpace::Shared)
                .map(|a| a.bank_degree)
                .max();
            assert_eq!(worst, Some(degree), "tile[32][{cols}]: {k:?}");
        }
    }
}
