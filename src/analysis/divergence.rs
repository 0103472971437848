//! Thread-dependent branches: warp divergence, warp-uniform tests, and the
//! interleaved-reduction test `tid % (2*s) == 0`.

use super::node::NodeExt;
use tree_sitter::Node;

use super::parse::{span, text};
use super::symbolic::{Coef, Sym};
use super::walk::Walker;

/// What a branch condition means for the lanes of one warp.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CondClass {
    /// Same outcome for every thread of the block.
    Uniform,
    /// Thread-dependent but constant within each warp (`warp_id == 0`, `tid < 64`).
    WarpUniform,
    /// A bounds check `i < n` (contiguous index against a run-time size): only the
    /// last warp can diverge.
    Guard,
    /// Lanes of one warp may disagree.
    Divergent,
}

impl<'t> Walker<'_, 't> {
    /// Classifies a condition expression.
    pub fn classify_condition(&self, cond: Node<'t>) -> CondClass {
        let s = self.eval(cond);
        if !s.thread_dependent() {
            return CondClass::Uniform;
        }
        if self.warp_uniform(cond, 0) {
            CondClass::WarpUniform
        } else if self.guard(cond, 0) {
            CondClass::Guard
        } else {
            CondClass::Divergent
        }
    }

    /// True when every thread-dependent comparison in `cond` splits only at warp boundaries.
    fn warp_uniform(&self, cond: Node<'t>, depth: usize) -> bool {
        self.all_comparisons(cond, depth, &|op, t, other| {
            if !matches!(op, "<" | "<=" | ">" | ">=" | "==" | "!=")
                || other.thread_dependent()
                || t.thread_yz
            {
                return false;
            }
            match t.tx {
                // warp_id = tid / 32 compared with anything uniform
                Coef::Sub(d) => d % 32 == 0,
                // tid < 64: the split falls on a warp boundary
                Coef::Lin(1) => {
                    matches!(op, "<" | ">=") && other.konst.is_some_and(|k| k % 32 == 0)
                }
                _ => false,
            }
        })
    }

    /// True when `cond` is made of `index < bound` tests with run-time bounds.
    fn guard(&self, cond: Node<'t>, depth: usize) -> bool {
        self.all_comparisons(cond, depth, &|op, t, other| {
            let monotone = matches!(t.tx, Coef::Lin(_) | Coef::Scaled | Coef::Zero);
            matches!(op, "<" | "<=" | ">" | ">=")
                && monotone
                && !t.loaded
                && !t.opaque
                && !other.thread_dependent()
                && other.konst.is_none()
        })
    }

    /// Walks `cond` through parentheses, `&&` and `||`; every comparison with a
    /// thread-dependent side must satisfy `ok(operator, thread side, other side)`.
    fn all_comparisons(
        &self,
        cond: Node<'t>,
        depth: usize,
        ok: &dyn Fn(&str, &Sym, &Sym) -> bool,
    ) -> bool {
        if depth > 16 {
            return false;
        }
        match cond.kind_str() {
            "parenthesized_expression" => cond
                .named_child(0)
                .is_some_and(|c| self.all_comparisons(c, depth + 1, ok)),
            "binary_expression" => {
                let (Some(l), Some(r), Some(op)) = (
                    cond.field("left"),
                    cond.field("right"),
                    cond.field("operator"),
                ) else {
                    return false;
                };
                let (a, b) = (self.eval(l), self.eval(r));
                match op.kind_str() {
                    "&&" | "||" => {
                        (!a.thread_dependent() || self.all_comparisons(l, depth + 1, ok))
                            && (!b.thread_dependent() || self.all_comparisons(r, depth + 1, ok))
                    }
                    kind => {
                        let (t, other) = if a.thread_dependent() {
                            (&a, &b)
                        } else {
                            (&b, &a)
                        };
                        ok(kind, t, other)
                    }
                }
            }
            _ => false,
        }
    }

    /// Finds `tid % m` or `tid & m` with a run-time `m` (the interleaved pattern).
    fn interleaved(&self, cond: Node<'t>) -> bool {
        let mut stack = vec![(cond, 0usize)];
        while let Some((n, d)) = stack.pop() {
            if n.kind_str() == "binary_expression" {
                let op = n.field("operator").map(|o| o.kind_str());
                if let (Some("%" | "&"), Some(l), Some(r)) = (op, n.field("left"), n.field("right"))
                {
                    let (a, b) = (self.eval(l), self.eval(r));
                    if a.thread_dependent() && !b.thread_dependent() && b.konst.is_none() {
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

    /// Records a branch; returns whether its body runs under a thread-dependent condition.
    fn branch(&mut self, stmt: Node<'t>, cond: Node<'t>) -> bool {
        let class = self.classify_condition(cond);
        let dv = &mut self.k.divergence;
        let cond_text = text(cond, self.src).trim();
        let short: String = cond_text.chars().take(60).collect();
        match class {
            CondClass::Uniform => return false,
            CondClass::WarpUniform => {
                dv.warp_uniform_branches += 1;
                let why = format!("`{short}` depends on the thread but is uniform per warp");
                Self::finding(&mut dv.findings, "warp_uniform_branch", stmt, why);
            }
            CondClass::Guard => {
                dv.bounds_checks += 1;
                let why = format!("`{short}` is a bounds check: at most the last warp diverges");
                Self::finding(&mut dv.findings, "bounds_check", stmt, why);
            }
            CondClass::Divergent => {
                dv.divergent_branches += 1;
                let why = format!(
                    "`{short}` differs between lanes of a warp: both paths execute serially"
                );
                Self::finding(&mut dv.findings, "divergent_branch", stmt, why);
            }
        }
        if class == CondClass::Divergent && self.interleaved(cond) {
            let dv = &mut self.k.divergence;
            dv.interleaved_modulo += 1;
            let why = format!(
                "`{short}`: interleaved addressing keeps only every (2*s)-th thread active, idling most lanes of every warp; use `tid < s` with sequential addressing"
            );
            Self::finding(&mut dv.findings, "interleaved_modulo", stmt, why);
        }
        true
    }

    /// `if (cond) ... else ...`
    pub fn if_statement(&mut self, node: Node<'t>) {
        let cond = node
            .field("condition")
            .map(|c| c.field("value").unwrap_or(c));
        let Some(cond) = cond else {
            return self.children(node);
        };
        self.visit(cond);
        let dependent = self.branch(node, cond);
        if dependent {
            self.conds.push(span(node));
        }
        for f in ["consequence", "alternative"] {
            if let Some(b) = node.field(f) {
                self.visit(b);
            }
        }
        if dependent {
            self.conds.pop();
        }
    }

    /// `switch (cond) { ... }`
    pub fn switch_statement(&mut self, node: Node<'t>) {
        let cond = node
            .field("condition")
            .map(|c| c.field("value").unwrap_or(c));
        let Some(cond) = cond else {
            return self.children(node);
        };
        self.visit(cond);
        let dependent = self.branch(node, cond);
        if dependent {
            self.conds.push(span(node));
        }
        if let Some(b) = node.field("body") {
            self.visit(b);
        }
        if dependent {
            self.conds.pop();
        }
    }
}
