//! One probed thread: the interpreter of a kernel's integer index arithmetic (expressions,
//! statements, loops with their trip counts, shared arrays), recording the global and shared
//! accesses it makes.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use super::super::gaps::{unroll_at, UnrollPragma};
use super::super::memory_ops::type_bytes;
use super::flat::FlatNode;
use super::values::{binary, comparison, is_integer_type, retype};
use super::{Val, DEFAULT_UNROLL, MAX_DEPTH, MAX_STEPS, MAX_TRIPS, SHARED_BASE, TRIP_SIMULATION};

pub(super) struct Lane<'a> {
    pub(super) vars: HashMap<&'a str, Val>,
    pub(super) tid: [i64; 3],
    pub(super) bid: [i64; 3],
    pub(super) bdim: [i64; 3],
    pub(super) gdim: [i64; 3],
    /// (access node start byte) -> (param, byte address, element bytes)
    pub(super) seen: BTreeMap<usize, (usize, i64, u32)>,
    /// (access node start byte) -> product of the trip counts of the loops around it
    pub(super) trips: BTreeMap<usize, f64>,
    /// Per access node: iterations of its innermost loop the compiler unrolls (see
    /// [`Lane::unroll`]).
    pub(super) unrolled: BTreeMap<usize, f64>,
    /// Iterations of the innermost loop being executed that the compiler unrolls, so that
    /// their loads can be in flight together: a `#pragma unroll N`'s count, the trip count
    /// for a bare `#pragma unroll`, [`DEFAULT_UNROLL`] without a pragma, 1 outside loops and for `#pragma unroll 1`; never more than the trips.
    pub(super) unroll: f64,
    /// The `#pragma unroll`s of the source and the text they index (to find a loop's).
    pub(super) unrolls: &'a [UnrollPragma],
    pub(super) text: &'a str,
    /// Access nodes written (the target of an assignment or an increment).
    pub(super) stores: BTreeSet<usize>,
    /// The assignment target being stored to, while its address is evaluated.
    pub(super) store_target: Option<usize>,
    /// Product of the trip counts of the loops being executed (1 outside loops).
    pub(super) mult: f64,
    /// `__syncthreads` executions of this thread (each weighted by its loops' trips).
    pub(super) barriers: f64,
    /// Device- or system-scope fence executions (`__threadfence`, `__threadfence_system`),
    /// weighted like the barriers.
    pub(super) fences: f64,
    /// `while`/`do` loops whose condition reads global memory or an atomic (spin waits).
    pub(super) spin_waits: u32,
    /// Loops whose trip count could not be computed (counted once).
    pub(super) unknown_trips: u32,
    /// Shared arrays declared so far (their `param` numbers start at [`SHARED_BASE`]).
    pub(super) shared_arrays: usize,
    /// Simulate loop headers for trip counts (the detailed probe; the sector probe skips it).
    pub(super) count_trips: bool,
    pub(super) steps: usize,
    pub(super) depth: usize,
    pub(super) returned: bool,
}

impl<'a> Lane<'a> {
    pub(super) fn eval(&mut self, n: FlatNode<'a>) -> Val {
        self.steps += 1;
        if self.steps > MAX_STEPS || self.depth >= MAX_DEPTH {
            return Val::Unknown;
        }
        self.depth += 1;
        let v = self.eval_node(n);
        self.depth -= 1;
        v
    }

    pub(super) fn eval_node(&mut self, n: FlatNode<'a>) -> Val {
        match n.kind_str() {
            "number_literal" => number(n.text()),
            "true" => Val::Int(1),
            "false" => Val::Int(0),
            "identifier" => {
                let name = n.text();
                match self.vars.get(name) {
                    Some(v) => *v,
                    None if name == "warpSize" => Val::Int(32),
                    None => Val::Unknown,
                }
            }
            "field_expression" => self.builtin_index(n),
            "parenthesized_expression" => n.named_child(0).map_or(Val::Unknown, |c| self.eval(c)),
            "cast_expression" => {
                let v = n.field("value").map_or(Val::Unknown, |c| self.eval(c));
                let ty = n.field("type").map_or("", |t| t.text());
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
            "subscript_expression" => self.subscript(n),
            "pointer_expression" => self.pointer(n),
            "call_expression" => self.call(n),
            _ => Val::Unknown,
        }
    }

    /// `threadIdx.x`, `blockIdx.y`, `blockDim.z`, `gridDim.x`: this lane's coordinates.
    fn builtin_index(&mut self, n: FlatNode<'a>) -> Val {
        let (Some(a), Some(f)) = (n.field("argument"), n.field("field")) else {
            return Val::Unknown;
        };
        let k = match f.text() {
            "x" => 0,
            "y" => 1,
            "z" => 2,
            _ => return Val::Unknown,
        };
        match a.text() {
            "threadIdx" => Val::Int(self.tid[k]),
            "blockIdx" => Val::Int(self.bid[k]),
            "blockDim" => Val::Int(self.bdim[k]),
            "gridDim" => Val::Int(self.gdim[k]),
            _ => Val::Unknown,
        }
    }

    /// `a[i]`: a load or store through a buffer, or a row of a 2-D shared array.
    fn subscript(&mut self, n: FlatNode<'a>) -> Val {
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

    /// `*p` (an access) or `&a[i]` (a pointer).
    fn pointer(&mut self, n: FlatNode<'a>) -> Val {
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

    /// The pointer and the index of `a[i]`.
    pub(super) fn base_and_index(&mut self, n: FlatNode<'a>) -> (Val, Val) {
        let base = n.field("argument").map_or(Val::Unknown, |b| self.eval(b));
        let idx = n
            .field("indices")
            .and_then(|i| i.named_child(0))
            .or_else(|| n.field("index"))
            .map_or(Val::Unknown, |i| self.eval(i));
        (base, idx)
    }

    pub(super) fn call(&mut self, n: FlatNode<'a>) -> Val {
        let f = n.field("function").map_or("", |f| f.text());
        let args: Vec<FlatNode<'a>> = n
            .field("arguments")
            .map(|a| a.named_children().collect())
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
        // A block-scope fence only orders the block's view (no wait for the device to
        // acknowledge a write), so it is not counted.
        if f == "__threadfence" || f == "__threadfence_system" {
            self.fences += self.mult;
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

    pub(super) fn assign(&mut self, n: FlatNode<'a>) -> Val {
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
    pub(super) fn store(&mut self, l: FlatNode<'a>, v: Val) {
        match l.kind_str() {
            "identifier" => {
                let name = l.text();
                if self.vars.contains_key(name) {
                    self.vars.insert(name, v);
                }
            }
            _ => {
                let outer = self.store_target.replace(l.start_byte());
                self.eval(l);
                self.store_target = outer;
            }
        }
    }

    /// Records that this lane accesses `base[idx]` at node `n`.
    pub(super) fn touch(&mut self, n: FlatNode<'a>, base: Val, idx: Val) {
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
            self.unrolled.entry(n.start_byte()).or_insert(self.unroll);
            if self.store_target == Some(n.start_byte()) {
                self.stores.insert(n.start_byte());
            }
        }
    }

    pub(super) fn declare(&mut self, d: FlatNode<'a>) {
        let ty = d.field("type").map_or("", |t| t.text());
        if d.text().contains("__shared__") {
            self.declare_shared(d, ty);
            return;
        }
        for decl in d.fields("declarator") {
            let Some(name) = decl.declared_name() else {
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
    pub(super) fn declare_shared(&mut self, d: FlatNode<'a>, ty: &str) {
        let elem = type_bytes(ty.trim()).filter(|&e| e > 0).unwrap_or(4);
        for decl in d.fields("declarator") {
            let Some(name) = decl.declared_name() else {
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
    pub(super) fn trip_count(&mut self, s: FlatNode<'a>) -> Option<f64> {
        let cond = s.field("condition")?;
        let update = s.field("update");
        let saved = (self.vars.clone(), self.steps, self.depth);
        let (seen_before, trips_before) = (self.seen.clone(), self.trips.clone());
        let stores_before = (self.stores.clone(), self.unrolled.clone());
        // Both sides of the comparison before and after one update: whichever side moves
        // (`i < n`, `r + 1 < rows`, `n > i`) gives the step to extrapolate with.
        let cmp = comparison(cond);
        let sides = |lane: &mut Self| -> Option<(Val, Val)> {
            let c = cmp?;
            let (l, r) = (c.field("left")?, c.field("right")?);
            Some((lane.eval(l), lane.eval(r)))
        };
        let start = sides(self);
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
                // Still running: extrapolate `moving < fixed` with the step it took.
                trips = cmp.and_then(|c| self.extrapolate(c, start, after_one));
                break;
            }
            match update {
                Some(u) => {
                    self.eval(u);
                }
                None => break,
            }
            if k == 0 {
                after_one = sides(self);
            }
        }
        self.vars = saved.0;
        self.steps = saved.1;
        self.depth = saved.2;
        self.seen = seen_before;
        self.trips = trips_before;
        (self.stores, self.unrolled) = stores_before;
        trips
    }

    /// Trips of a comparison loop from both sides of its condition at the start and after
    /// one update: the side that moved by a constant step reaches the other's value in
    /// `span / step` iterations (`None` when neither or both moved, or a value is unknown).
    pub(super) fn extrapolate(
        &mut self,
        cond: FlatNode<'a>,
        start: Option<(Val, Val)>,
        after_one: Option<(Val, Val)>,
    ) -> Option<f64> {
        let (Some((Val::Int(l0), Val::Int(r0))), Some((Val::Int(l1), Val::Int(r1)))) =
            (start, after_one)
        else {
            return None;
        };
        let op = cond.field("operator")?.kind_str();
        // Written as `moving OP fixed` from the moving side's point of view.
        let (x0, x1, bound) = match (l1 != l0, r1 != r0) {
            (true, false) => (l0, l1, r0),
            (false, true) => (r0, r1, l0),
            _ => return None,
        };
        let step = x1.wrapping_sub(x0);
        if step == 0 {
            return None;
        }
        let span = (bound as f64 - x0 as f64) / step as f64;
        let extra = if matches!(op, "<=" | ">=") { 1.0 } else { 0.0 };
        Some((span.ceil() + extra).clamp(0.0, MAX_TRIPS))
    }

    pub(super) fn exec(&mut self, s: FlatNode<'a>) {
        if self.returned || self.steps > MAX_STEPS || self.depth >= MAX_DEPTH {
            return;
        }
        self.steps += 1;
        self.depth += 1;
        self.exec_node(s);
        self.depth -= 1;
    }

    pub(super) fn exec_node(&mut self, s: FlatNode<'a>) {
        match s.kind_str() {
            "compound_statement" => {
                for k in s.named_children() {
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
            "if_statement" => self.if_statement(s),
            "for_statement" => self.for_statement(s),
            "while_statement" | "do_statement" => self.while_statement(s),
            _ => {}
        }
    }

    /// The branch a known condition takes, both when it is unknown.
    fn if_statement(&mut self, s: FlatNode<'a>) {
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

    /// The first iteration of a `for`, its accesses weighted by the loop's trip count.
    fn for_statement(&mut self, s: FlatNode<'a>) {
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
                let outer = (self.mult, self.unroll);
                let n = trips.unwrap_or(1.0).max(1.0);
                self.mult = (outer.0 * n).min(MAX_TRIPS);
                self.unroll = match unroll_at(self.unrolls, self.text, s.start_byte()) {
                    Some(UnrollPragma { count: Some(c), .. }) => f64::from(c.max(1)),
                    Some(UnrollPragma { count: None, .. }) => n,
                    None => DEFAULT_UNROLL,
                }
                .min(n);
                self.exec(b);
                (self.mult, self.unroll) = outer;
                // A `return`/`break` inside the first iteration ends nothing more.
            }
        }
    }

    /// The first iteration of a `while` or `do`; a loop that waits on memory is a spin wait.
    fn while_statement(&mut self, s: FlatNode<'a>) {
        let c = s
            .field("condition")
            .and_then(|c| c.named_child(0).or(Some(c)))
            .map_or(Val::Unknown, |c| self.eval(c));
        // A loop that waits: its exit is not known from the indices (`while (true)`
        // or a data-dependent test) and it reads memory other blocks write.
        let cond_text = s.field("condition").map_or("", |c| c.text());
        let open_ended = !matches!(c, Val::Int(_))
            || matches!(cond_text.trim_matches(['(', ')', ' ']), "true" | "1");
        let loop_text = s.text();
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
}

/// An integer literal (decimal or hex, suffixes dropped).
fn number(t: &str) -> Val {
    let t = t.trim_end_matches(['u', 'U', 'l', 'L']);
    let v = if let Some(h) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        i64::from_str_radix(h, 16).ok()
    } else {
        t.parse::<i64>().ok()
    };
    v.map_or(Val::Unknown, Val::Int)
}
