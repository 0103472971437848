//! Shared memory: declared bytes, dynamic arrays, accesses, bank conflicts, padding.
//!
//! Bank model (sm_50 and later): 32 banks of 4 bytes. When consecutive lanes
//! access elements `c` apart, lanes hit banks `(lane * c * elem / 4) mod 32`;
//! the number of lanes sharing a bank is `gcd(c * elem / 4, 32)` for 4-byte
//! words (8- and 16-byte elements are served in 2 or 4 phases, which divides it).

use super::node::NodeExt;
use tree_sitter::Node;

use super::accesses::{SharedRef, Target};
use super::features::AccessKind;
use super::memory_ops::type_bytes;
use super::parse::{has_qualifier, text};
use super::symbolic::{declared_name, Coef, Sym};
use super::walk::Walker;

/// How many lanes of a warp land in one bank when consecutive lanes access
/// elements `stride` apart (1 = conflict-free, 0 stride = broadcast = 1).
pub(crate) fn bank_ways(stride: i64, elem_bytes: u32) -> u32 {
    let bytes = stride
        .unsigned_abs()
        .saturating_mul(u64::from(elem_bytes.max(1)));
    if bytes == 0 || bytes < 4 {
        return 1; // broadcast, or several lanes inside one word
    }
    if bytes % 4 != 0 {
        return 1;
    }
    let words = bytes / 4;
    let ways = gcd(words, 32);
    // Wide accesses are split into 2 (8-byte) or 4 (16-byte) conflict-free phases.
    let phases = u64::from((elem_bytes / 4).clamp(1, 4));
    u32::try_from((ways / phases).max(1)).unwrap_or(32)
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

impl<'t> Walker<'_, 't> {
    /// `__shared__ float tile[TILE][TILE + 1];`, `extern __shared__ float s[];`
    pub fn declare_shared(&mut self, node: Node<'t>) {
        let ty = node.field("type").map_or("", |t| text(t, self.src));
        let elem_known = type_bytes(ty);
        let elem = elem_known.unwrap_or(4);
        let is_extern = has_qualifier(node, "extern");
        let mut c = node.walk();
        let decls: Vec<Node<'t>> = node.children_by_field_name("declarator", &mut c).collect();
        for d in decls {
            let d = if d.kind_str() == "init_declarator" {
                d.field("declarator").unwrap_or(d)
            } else {
                d
            };
            let Some(name) = declared_name(d, self.src).map(str::to_string) else {
                continue;
            };
            // Sizes, innermost declarator first in the tree: tile[A][B] nests [A] inside [B].
            let mut dims = Vec::new();
            let mut empty = false;
            let mut cur = d;
            while cur.kind_str() == "array_declarator" {
                match cur.field("size") {
                    Some(sz) => dims.push(self.eval(sz).konst.filter(|v| *v > 0)),
                    None => {
                        empty = true;
                        dims.push(None);
                    }
                }
                match cur.field("declarator") {
                    Some(inner) => cur = inner,
                    None => break,
                }
            }
            dims.reverse();
            let sh = &mut self.k.shared;
            sh.arrays += 1;
            let padded =
                dims.len() >= 2 && matches!(dims.last(), Some(Some(v)) if *v > 1 && v % 2 == 1);
            if is_extern || empty {
                sh.dynamic_arrays += 1;
                let why = format!("dynamic shared array `{name}` (size set at launch)");
                Self::finding(&mut sh.findings, "dynamic_shared", node, why);
            } else {
                let bytes = dims.iter().try_fold(u64::from(elem), |acc, d| {
                    d.and_then(|v| acc.checked_mul(v as u64))
                });
                match bytes {
                    Some(b) if elem_known.is_some() => {
                        sh.static_bytes = sh.static_bytes.saturating_add(b);
                        let why = format!("`{name}`: {b} bytes of static shared memory");
                        Self::finding(&mut sh.findings, "shared_array", node, why);
                    }
                    _ => {
                        sh.unresolved_sizes += 1;
                        let why = format!("`{name}`: size not a compile-time constant here");
                        Self::finding(&mut sh.findings, "shared_array", node, why);
                    }
                }
            }
            if padded {
                sh.padded_arrays += 1;
                let why =
                    format!("`{name}` rows are padded to an odd length (avoids bank conflicts)");
                Self::finding(&mut sh.findings, "padding", node, why);
            }
            let r = SharedRef {
                array: name.clone(),
                dims,
                elem_bytes: elem,
                padded,
                offset: Sym::konst(0),
            };
            self.targets.insert(name, Target::Shared(r));
        }
    }

    /// One load or store of a shared array; checks the bank pattern of a warp.
    pub fn shared_access(&mut self, node: Node<'t>, s: &SharedRef, idx: &[Sym], kind: AccessKind) {
        let in_loop = self.in_loop();
        let sh = &mut self.k.shared;
        match kind {
            AccessKind::Read => sh.reads += 1,
            AccessKind::Write => sh.writes += 1,
            AccessKind::ReadWrite => {
                sh.reads += 1;
                sh.writes += 1;
            }
        }
        if in_loop {
            sh.accesses_in_loops += 1;
        }
        // Flatten to one element index; needs every inner dimension to be known.
        let n = s.dims.len().max(1);
        if idx.len() != n {
            return;
        }
        let mut flat = s.offset.clone();
        for (i, ix) in idx.iter().enumerate() {
            let inner: Option<i64> = s.dims.get(i + 1..).map_or(Some(1), |rest| {
                rest.iter()
                    .try_fold(1i64, |a, d| d.and_then(|v| a.checked_mul(v)))
            });
            let stride = inner.map_or_else(Sym::uniform, Sym::konst);
            flat = flat.binary("+", &ix.binary("*", &stride));
        }
        if flat.loaded || flat.opaque {
            return;
        }
        let shape: String = s
            .dims
            .iter()
            .map(|d| d.map_or("[?]".to_string(), |v| format!("[{v}]")))
            .collect();
        match flat.tx {
            Coef::Lin(c) => {
                let ways = bank_ways(c, s.elem_bytes);
                if ways >= 2 {
                    sh.bank_conflicts += 1;
                    let fix = if s.dims.len() >= 2 && !s.padded {
                        "; pad the row by one element"
                    } else {
                        ""
                    };
                    let why = format!(
                        "{ways}-way bank conflict: consecutive threadIdx.x are {c} elements apart in `{}`{shape} ({}-byte elements){fix}",
                        s.array, s.elem_bytes
                    );
                    Self::finding(&mut sh.findings, "bank_conflict", node, why);
                }
            }
            Coef::Scaled => {
                sh.possible_bank_conflicts += 1;
                let why = format!(
                    "threadIdx.x stride in `{}` is a run-time value: possible bank conflicts",
                    s.array
                );
                Self::finding(&mut sh.findings, "possible_bank_conflict", node, why);
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::bank_ways;

    #[test]
    fn bank_ways_matches_the_bank_model() {
        assert_eq!(bank_ways(1, 4), 1);
        assert_eq!(bank_ways(32, 4), 32); // tile[tid][k] on [32][32] floats
        assert_eq!(bank_ways(33, 4), 1); // padded [32][33]
        assert_eq!(bank_ways(2, 4), 2);
        assert_eq!(bank_ways(0, 4), 1); // broadcast
        assert_eq!(bank_ways(1, 8), 1); // doubles, two phases
        assert_eq!(bank_ways(16, 8), 16);
        assert_eq!(bank_ways(1, 2), 1); // halves share words
    }
}
