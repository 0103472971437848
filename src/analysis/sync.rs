//! Calls: barriers, warp primitives and atomics (this file), plus dispatch of
//! the other call kinds (`__ldg`, math functions, device-function inlining).

use super::node::NodeExt;
use tree_sitter::Node;

use super::accesses::{classify, Target};
use super::features::{AccessClass, AccessKind};
use super::parse::text;
use super::symbolic::Sym;
use super::walk::Walker;

/// What a called name means for synchronisation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SyncCall {
    /// Block-wide barrier.
    Barrier,
    /// Warp barrier.
    SyncWarp,
    /// Warp shuffle or warp-level reduction.
    Shuffle,
    /// Warp vote / match.
    Vote,
    /// Atomic read-modify-write.
    Atomic,
}

/// Classifies a call by its (unqualified) name; `member` is true for `g.name()`.
pub(crate) fn sync_call(name: &str, member: bool) -> Option<SyncCall> {
    let kind = match name {
        "__syncthreads" | "__syncthreads_count" | "__syncthreads_and" | "__syncthreads_or" => {
            SyncCall::Barrier
        }
        "sync" if member => SyncCall::Barrier,
        "__syncwarp" => SyncCall::SyncWarp,
        "__shfl_sync" | "__shfl_up_sync" | "__shfl_down_sync" | "__shfl_xor_sync" | "__shfl"
        | "__shfl_up" | "__shfl_down" | "__shfl_xor" | "__reduce_add_sync"
        | "__reduce_min_sync" | "__reduce_max_sync" | "__reduce_and_sync" | "__reduce_or_sync"
        | "__reduce_xor_sync" => SyncCall::Shuffle,
        "shfl" | "shfl_up" | "shfl_down" | "shfl_xor" if member => SyncCall::Shuffle,
        "__ballot_sync" | "__any_sync" | "__all_sync" | "__ballot" | "__any" | "__all"
        | "__match_any_sync" | "__match_all_sync" | "__activemask" => SyncCall::Vote,
        "ballot" | "any" | "all" if member => SyncCall::Vote,
        n if n.starts_with("atomic") && n.len() > "atomic".len() => SyncCall::Atomic,
        _ => return None,
    };
    Some(kind)
}

impl<'t> Walker<'_, 't> {
    /// Any call expression.
    pub fn call(&mut self, node: Node<'t>) {
        let Some(func) = node.field("function") else {
            return self.children(node);
        };
        let args: Vec<Node<'t>> = node
            .field("arguments")
            .map(|a| a.named_children(&mut a.walk()).collect())
            .unwrap_or_default();
        let (name_node, member) = match func.kind_str() {
            "template_function" => (func.field("name").unwrap_or(func), false),
            "field_expression" => (func.field("field").unwrap_or(func), true),
            _ => (func, false),
        };
        let full = text(name_node, self.src);
        let name = full.rsplit("::").next().unwrap_or(full).to_string();
        if func.kind_str() == "template_function" {
            self.visit(func); // template arguments may name vector types
        } else if member {
            if let Some(obj) = func.field("argument") {
                self.visit(obj);
            }
        }
        match sync_call(&name, member) {
            Some(SyncCall::Barrier) => self.barrier(node),
            Some(SyncCall::SyncWarp) => self.k.sync.syncwarp += 1,
            Some(SyncCall::Shuffle) => {
                self.k.sync.shuffles += 1;
                let why = format!("`{name}` exchanges registers within a warp (no shared memory)");
                Self::finding(&mut self.k.sync.findings, "shuffle", node, why);
            }
            Some(SyncCall::Vote) => self.k.sync.votes += 1,
            Some(SyncCall::Atomic) => {
                if let Some(addr) = args.first() {
                    self.atomic(node, *addr, &name);
                }
                for a in args.iter().skip(1) {
                    self.visit(*a);
                }
                return;
            }
            None => {}
        }
        if super::memory_ops::is_ldg(&name) {
            self.k.memory_ops.ldg += 1;
            let why = format!("`{name}`: load through the read-only/cache-hinted path");
            Self::finding(&mut self.k.memory_ops.findings, "ldg", node, why);
            if let Some(a) = args.first() {
                self.address_read(*a);
            }
            return;
        }
        if super::memory_ops::is_async_copy(&name) {
            self.k.memory_ops.async_copies += 1;
            let why = format!("`{name}`: asynchronous global-to-shared copy");
            Self::finding(&mut self.k.memory_ops.findings, "async_copy", node, why);
        }
        self.math_call(node, &name);
        for a in &args {
            self.visit(*a);
        }
        if !member && func.kind_str() != "template_function" {
            self.inline_call(&name, &args);
        }
    }

    /// `__ldg(&p[i])`, `__ldg(p + i)`: a read of the addressed element.
    fn address_read(&mut self, addr: Node<'t>) {
        let is_addr_of = addr.kind_str() == "pointer_expression"
            && addr.field("operator").is_some_and(|o| o.kind_str() == "&");
        match addr.field("argument") {
            Some(inner) if is_addr_of && inner.kind_str() == "subscript_expression" => {
                self.access(inner, AccessKind::Read)
            }
            _ => {
                self.visit(addr);
                if let Some(t) = self.resolve_target(addr) {
                    // `p + i`: the offset already sits in the resolved target.
                    self.access_target(addr, t, &[Sym::konst(0)], AccessKind::Read);
                }
            }
        }
    }

    /// A block barrier: flags it when threads of one block may not all reach it.
    fn barrier(&mut self, node: Node<'t>) {
        self.k.sync.syncthreads += 1;
        if let Some(cond) = self.conds.last().copied() {
            self.k.sync.divergent_barriers += 1;
            let why = format!(
                "barrier under a thread-dependent condition (line {}): threads that skip it deadlock or cause undefined behaviour",
                cond.line
            );
            Self::finding(&mut self.k.sync.findings, "divergent_barrier", node, why);
        } else if let Some(ret) = self.divergent_return {
            self.k.sync.barriers_after_divergent_return += 1;
            let why = format!(
                "barrier after a thread-dependent early return (line {}): exited threads never arrive",
                ret.line
            );
            Self::finding(&mut self.k.sync.findings, "barrier_after_return", node, why);
        }
    }

    /// `atomicAdd(&hist[bin], 1)`: shared or global by the address's target.
    fn atomic(&mut self, node: Node<'t>, addr: Node<'t>, name: &str) {
        // Visit index sub-expressions (reads inside them) without counting a load.
        let inner = addr
            .field("argument")
            .filter(|_| addr.kind_str() == "pointer_expression");
        if let Some(sub) = inner {
            if let Some(idx) = sub.field("indices") {
                self.in_index += 1;
                self.visit(idx);
                self.in_index -= 1;
            }
        } else {
            self.visit(addr);
        }
        let shared = matches!(self.resolve_target(addr), Some(Target::Shared(_)));
        // Distinct per-thread addresses (hist[tid]) do not contend; data-dependent
        // or shared addresses (hist[data[i]], *counter) serialise.
        let index = inner
            .filter(|s| s.kind_str() == "subscript_expression")
            .and_then(|s| s.field("indices"))
            .and_then(|i| i.named_child(0))
            .map(|i| self.eval(i));
        let distinct = index.is_some_and(|i| {
            matches!(
                classify(&i).0,
                AccessClass::Coalesced | AccessClass::Strided
            )
        });
        let in_loop = self.in_loop() && !distinct;
        let s = &mut self.k.sync;
        let (kind, why) = if shared {
            s.atomics_shared += 1;
            (
                "shared_atomic",
                format!("`{name}` on shared memory (block-local contention)"),
            )
        } else {
            s.atomics_global += 1;
            if in_loop {
                s.atomics_global_in_loops += 1;
                ("global_atomic_in_loop", format!("`{name}` on global memory inside a loop, on addresses threads share: serialises on hot addresses"))
            } else {
                ("global_atomic", format!("`{name}` on global memory"))
            }
        };
        Self::finding(&mut s.findings, kind, node, why);
    }
}
