//! A fixed-length numeric view of [`Features`] for a learned pairwise ranker.
//!
//! Dimensions are named by [`FEATURE_NAMES`] (stable: new dimensions are only
//! ever appended). Every value is computed from [`Features::totals`] (the whole
//! candidate) and is either a ratio in `[0, 1]`, a 0/1 flag, or a count in
//! `ln(1 + x)` form, so that kernels of different sizes stay comparable.

use super::features::{intensity, Features};

/// Names of the dimensions of [`Features::to_vector`], in order.
pub const FEATURE_NAMES: &[&str] = &[
    "kernels",
    "syntax_error_nodes",
    "syntax_missing_nodes",
    "syntax_truncated",
    "global_accesses",
    "global_coalesced_ratio",
    "global_strided_ratio",
    "global_uniform_ratio",
    "global_indirect_ratio",
    "global_unknown_ratio",
    "global_in_loops_ratio",
    "global_vector_ratio",
    "shared_arrays",
    "shared_static_kib",
    "shared_dynamic_arrays",
    "shared_accesses",
    "shared_accesses_in_loops",
    "shared_bank_conflicts",
    "shared_possible_bank_conflicts",
    "shared_padded_arrays",
    "sync_syncthreads",
    "sync_divergent_barriers",
    "sync_barriers_after_divergent_return",
    "sync_syncwarp",
    "sync_shuffles",
    "sync_votes",
    "atomics_global",
    "atomics_shared",
    "atomics_global_in_loops",
    "loops",
    "loops_max_nesting",
    "loops_unrolled",
    "loops_grid_stride",
    "loops_constant_trip",
    "divergent_branches",
    "warp_uniform_branches",
    "bounds_checks",
    "interleaved_modulo",
    "vector_types",
    "ldg",
    "restrict_ratio",
    "const_ratio",
    "async_copies",
    "arith_ops_in_loops",
    "special_functions",
    "fma",
    "reduced_precision",
    "tensor_core",
    "arithmetic_intensity",
];

fn log1p(v: impl Into<f64>) -> f32 {
    v.into().max(0.0).ln_1p() as f32
}

fn ratio(num: u32, den: u32) -> f32 {
    if den == 0 {
        0.0
    } else {
        (f64::from(num) / f64::from(den)) as f32
    }
}

impl Features {
    /// The feature vector, one value per entry of [`FEATURE_NAMES`].
    ///
    /// Counts are `ln(1 + count)`; `*_ratio` are fractions (of global accesses, or
    /// of pointer parameters); `shared_static_kib` is `ln(1 + KiB)`;
    /// `arithmetic_intensity` is `ln(1 + FLOPs per global byte)`.
    pub fn to_vector(&self) -> Vec<f32> {
        self.named_vector().into_iter().map(|(_, v)| v).collect()
    }

    /// `(name, value)` pairs in [`FEATURE_NAMES`] order.
    pub fn named_vector(&self) -> Vec<(&'static str, f32)> {
        let t = &self.totals;
        let g = &t.global_accesses;
        let n = g.coalesced + g.strided + g.uniform + g.indirect + g.unknown;
        let (s, y, l, d, m, c) = (
            &t.shared,
            &t.sync,
            &t.loops,
            &t.divergence,
            &t.memory_ops,
            &t.compute,
        );
        let ai = intensity(c.weighted_flops, c.weighted_global_bytes);
        vec![
            ("kernels", log1p(t.kernels)),
            ("syntax_error_nodes", log1p(self.syntax.error_nodes)),
            ("syntax_missing_nodes", log1p(self.syntax.missing_nodes)),
            (
                "syntax_truncated",
                f32::from(u8::from(self.syntax.truncated)),
            ),
            ("global_accesses", log1p(n)),
            ("global_coalesced_ratio", ratio(g.coalesced, n)),
            ("global_strided_ratio", ratio(g.strided, n)),
            ("global_uniform_ratio", ratio(g.uniform, n)),
            ("global_indirect_ratio", ratio(g.indirect, n)),
            ("global_unknown_ratio", ratio(g.unknown, n)),
            ("global_in_loops_ratio", ratio(g.in_loops, n)),
            ("global_vector_ratio", ratio(g.vector_accesses, n)),
            ("shared_arrays", log1p(s.arrays)),
            ("shared_static_kib", log1p(s.static_bytes as f64 / 1024.0)),
            ("shared_dynamic_arrays", log1p(s.dynamic_arrays)),
            ("shared_accesses", log1p(s.reads + s.writes)),
            ("shared_accesses_in_loops", log1p(s.accesses_in_loops)),
            ("shared_bank_conflicts", log1p(s.bank_conflicts)),
            (
                "shared_possible_bank_conflicts",
                log1p(s.possible_bank_conflicts),
            ),
            ("shared_padded_arrays", log1p(s.padded_arrays)),
            ("sync_syncthreads", log1p(y.syncthreads)),
            ("sync_divergent_barriers", log1p(y.divergent_barriers)),
            (
                "sync_barriers_after_divergent_return",
                log1p(y.barriers_after_divergent_return),
            ),
            ("sync_syncwarp", log1p(y.syncwarp)),
            ("sync_shuffles", log1p(y.shuffles)),
            ("sync_votes", log1p(y.votes)),
            ("atomics_global", log1p(y.atomics_global)),
            ("atomics_shared", log1p(y.atomics_shared)),
            ("atomics_global_in_loops", log1p(y.atomics_global_in_loops)),
            ("loops", log1p(l.loops)),
            ("loops_max_nesting", log1p(l.max_nesting)),
            ("loops_unrolled", log1p(l.unrolled)),
            ("loops_grid_stride", log1p(l.grid_stride)),
            ("loops_constant_trip", log1p(l.constant_trip)),
            ("divergent_branches", log1p(d.divergent_branches)),
            ("warp_uniform_branches", log1p(d.warp_uniform_branches)),
            ("bounds_checks", log1p(d.bounds_checks)),
            ("interleaved_modulo", log1p(d.interleaved_modulo)),
            ("vector_types", log1p(m.vector_types)),
            ("ldg", log1p(m.ldg)),
            ("restrict_ratio", ratio(m.restrict_params, m.pointer_params)),
            ("const_ratio", ratio(m.const_params, m.pointer_params)),
            ("async_copies", log1p(m.async_copies)),
            ("arith_ops_in_loops", log1p(c.arith_ops_in_loops)),
            ("special_functions", log1p(c.special_functions)),
            ("fma", log1p(c.fma)),
            ("reduced_precision", log1p(c.reduced_precision)),
            ("tensor_core", log1p(c.tensor_core)),
            ("arithmetic_intensity", log1p(ai)),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_match_the_vector() {
        let f = Features::default();
        let names: Vec<&str> = f.named_vector().iter().map(|(n, _)| *n).collect();
        assert_eq!(names, FEATURE_NAMES);
        assert!(f.to_vector().iter().all(|v| v.is_finite()));
    }
}
