//! Loops: nesting, `#pragma unroll`, grid-stride loops, constant trip counts.

use super::node::NodeExt;
use tree_sitter::Node;

use super::parse::text;
use super::symbolic::Sym;
use super::walk::{LoopFrame, Walker};

/// Trip counts above this are not treated as constants (they are sizes, not unrolling).
const MAX_TRIP: u64 = 1 << 16;

/// Trip count of `for (v = start; v OP bound; v STEP)` when all are constants.
pub(crate) fn trip_count(
    start: i64,
    cmp: &str,
    bound: i64,
    step_op: &str,
    step: i64,
) -> Option<u64> {
    let mut v = start;
    let mut n = 0u64;
    let holds = |v: i64| match cmp {
        "<" => v < bound,
        "<=" => v <= bound,
        ">" => v > bound,
        ">=" => v >= bound,
        "!=" => v != bound,
        _ => false,
    };
    // Closed form for additive steps, simulation for multiplicative ones.
    if matches!(step_op, "+" | "-") {
        let d = if step_op == "+" {
            step
        } else {
            step.checked_neg()?
        };
        if d == 0 {
            return None;
        }
        let span = match cmp {
            "<" if d > 0 => bound.checked_sub(start)?,
            "<=" if d > 0 => bound.checked_sub(start)?.checked_add(1)?,
            ">" if d < 0 => start.checked_sub(bound)?,
            ">=" if d < 0 => start.checked_sub(bound)?.checked_add(1)?,
            "!=" => {
                let s = bound.checked_sub(start)?;
                let q = s.checked_div(d)?;
                return (s.checked_rem(d)? == 0 && q >= 0)
                    .then_some(q as u64)
                    .filter(|t| *t <= MAX_TRIP);
            }
            _ => return None,
        };
        let step = d.checked_abs()?;
        let t = if span <= 0 {
            0
        } else {
            span.checked_add(step - 1)? / step
        };
        return u64::try_from(t).ok().filter(|t| *t <= MAX_TRIP);
    }
    while holds(v) {
        n += 1;
        if n > 64 {
            return None;
        }
        v = match step_op {
            "*" => v.checked_mul(step)?,
            "/" => v.checked_div(step)?,
            "<<" => v.checked_shl(u32::try_from(step).ok()?)?,
            ">>" => v.checked_shr(u32::try_from(step).ok()?)?,
            _ => return None,
        };
    }
    Some(n)
}

impl<'t> Walker<'_, 't> {
    /// `for`, `while`, `do`, range-`for`.
    pub fn loop_statement(&mut self, node: Node<'t>) {
        // `#pragma unroll 1` asks for the loop to stay rolled.
        let unrolled = super::gaps::unroll_at(&self.prog.unrolls, self.src, node.start_byte())
            .is_some_and(|u| u.count != Some(1));
        self.k.loops.loops += 1;
        if unrolled {
            self.k.loops.unrolled += 1;
        }
        let cond = node.field("condition").map(|c| {
            if c.kind_str() == "condition_clause" {
                c.field("value").unwrap_or(c)
            } else {
                c
            }
        });
        let (mut trip, mut grid_stride) = (None, false);
        if node.kind_str() == "for_statement" {
            (trip, grid_stride) = self.for_header(node, cond);
        } else if node.kind_str() == "while_statement" {
            if let (Some(c), Some(body)) = (cond, node.field("body")) {
                grid_stride = self.while_grid_stride(c, body);
            }
        }
        let cond_sym = cond.map(|c| self.eval(c)).unwrap_or_default();
        let divergent = cond_sym.thread_dependent();
        if let Some(c) = cond {
            self.visit(c);
        }
        if let Some(u) = node.field("update") {
            self.visit(u);
        }
        self.loops.push(LoopFrame { trip });
        let depth = u32::try_from(self.loops.len()).unwrap_or(u32::MAX);
        self.k.loops.max_nesting = self.k.loops.max_nesting.max(depth);
        if divergent {
            self.conds.push(super::parse::span(node));
        }
        if let Some(body) = node.field("body") {
            self.visit(body);
        }
        if divergent {
            self.conds.pop();
        }
        self.loops.pop();
        let l = &mut self.k.loops;
        let mut notes = Vec::new();
        if grid_stride {
            l.grid_stride += 1;
            notes.push("grid-stride loop (scales to any grid size, coalesced steps)".to_string());
        }
        if let Some(t) = trip {
            l.constant_trip += 1;
            notes.push(format!("constant trip count {t}"));
        }
        if unrolled {
            notes.push("#pragma unroll".to_string());
        }
        if notes.is_empty() {
            notes.push("loop".to_string());
        }
        let kind = if grid_stride {
            "grid_stride_loop"
        } else {
            "loop"
        };
        Self::finding(&mut l.findings, kind, node, notes.join("; "));
    }

    /// A `for` header: visits the initializer, binds the loop variable (keeping its thread
    /// coefficient only when every thread steps alike) and gives the constant trip count and
    /// whether the loop strides over the grid.
    fn for_header(&mut self, node: Node<'t>, cond: Option<Node<'t>>) -> (Option<u64>, bool) {
        let (mut trip, mut grid_stride) = (None, false);
        if let Some(init) = node.field("initializer") {
            self.visit(init);
        }
        let var = node
            .field("initializer")
            .and_then(|i| loop_var(i, self.src));
        let update = node.field("update");
        if let (Some(var), Some(upd)) = (var.as_deref(), update) {
            let start = self.vars.get(var).cloned().unwrap_or_default();
            let step = step_of(upd, var, self);
            if let Some((op, step_sym)) = &step {
                grid_stride = start.thread_dependent() && step_sym.grid && op == "+";
                if let (Some(a), Some(c), Some(s)) = (start.konst, cond, step_sym.konst) {
                    trip =
                        bound_of(c, var, self).and_then(|(cmp, b)| trip_count(a, &cmp, b, op, s));
                }
            }
            // The loop variable varies per iteration; it keeps its thread coefficient
            // only when the step is the same for every thread.
            let step_uniform = step.as_ref().is_some_and(|(op, s)| {
                op != "*" && !s.thread_dependent() || op == "*" && !start.thread_dependent()
            });
            let mut v = start.clone();
            v.konst = None;
            if !step_uniform {
                v = v.collapse();
            }
            self.vars.insert(var.to_string(), v);
        }
        (trip, grid_stride)
    }

    /// `while (i < n) { ...; i += blockDim.x * gridDim.x; }`
    fn while_grid_stride(&self, cond: Node<'t>, body: Node<'t>) -> bool {
        let Some(var) = cond.field("left").filter(|l| l.kind_str() == "identifier") else {
            return false;
        };
        let var = text(var, self.src);
        if !self.vars.get(var).is_some_and(Sym::thread_dependent) {
            return false;
        }
        let mut stack = vec![(body, 0usize)];
        while let Some((n, d)) = stack.pop() {
            if n.kind_str() == "assignment_expression" {
                if let Some((op, s)) = step_of(n, var, self) {
                    if op == "+" && s.grid {
                        return true;
                    }
                }
            }
            if d < 8 {
                let mut c = n.walk();
                stack.extend(n.named_children(&mut c).map(|ch| (ch, d + 1)));
            }
        }
        false
    }
}

/// The variable a `for` initializer declares or assigns.
fn loop_var(init: Node, src: &str) -> Option<String> {
    let n = match init.kind_str() {
        "declaration" => init.field("declarator")?.field("declarator")?,
        "assignment_expression" => init.field("left")?,
        _ => return None,
    };
    (n.kind_str() == "identifier").then(|| text(n, src).to_string())
}

/// `i++`, `i += s`, `i = i + s`, `s >>= 1`, `s *= 2` → (operator, step value).
fn step_of<'t>(upd: Node<'t>, var: &str, w: &Walker<'_, 't>) -> Option<(String, Sym)> {
    match upd.kind_str() {
        "update_expression" => {
            let arg = upd.field("argument")?;
            if text(arg, w.src) != var {
                return None;
            }
            let op = upd.field("operator")?.kind_str();
            Some((
                if op == "++" { "+" } else { "-" }.to_string(),
                Sym::konst(1),
            ))
        }
        "assignment_expression" => {
            let left = upd.field("left")?;
            if text(left, w.src) != var {
                return None;
            }
            let op = upd.field("operator")?.kind_str();
            let right = upd.field("right")?;
            if op != "=" {
                return Some((op.trim_end_matches('=').to_string(), w.eval(right)));
            }
            // i = i + s
            let (l, r) = (right.field("left")?, right.field("right")?);
            let bop = right.field("operator")?.kind_str();
            (text(l, w.src) == var).then(|| (bop.to_string(), w.eval(r)))
        }
        "comma_expression" => step_of(upd.field("left")?, var, w),
        _ => None,
    }
}

/// `i < N` → ("<", N) with the comparison normalised to the loop variable on the left.
fn bound_of<'t>(cond: Node<'t>, var: &str, w: &Walker<'_, 't>) -> Option<(String, i64)> {
    let (l, r) = (cond.field("left")?, cond.field("right")?);
    let op = cond.field("operator")?.kind_str();
    if text(l, w.src) == var {
        Some((op.to_string(), w.eval(r).konst?))
    } else if text(r, w.src) == var {
        let flipped = match op {
            "<" => ">",
            ">" => "<",
            "<=" => ">=",
            ">=" => "<=",
            o => o,
        };
        Some((flipped.to_string(), w.eval(l).konst?))
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::trip_count;

    #[test]
    fn trip_counts() {
        assert_eq!(trip_count(0, "<", 32, "+", 1), Some(32));
        assert_eq!(trip_count(0, "<", 32, "+", 4), Some(8));
        assert_eq!(trip_count(0, "<=", 31, "+", 1), Some(32));
        assert_eq!(trip_count(128, ">", 0, ">>", 1), Some(8));
        assert_eq!(trip_count(16, ">", 0, "/", 2), Some(5));
        assert_eq!(trip_count(1, "<", 32, "*", 2), Some(5));
        assert_eq!(trip_count(31, ">=", 0, "-", 1), Some(32));
        assert_eq!(trip_count(0, "<", 10, "+", 0), None);
        assert_eq!(trip_count(1, "<", 32, "*", 1), None);
    }
}
