//! A hand-weighted structural score: how much a candidate's structure looks
//! like a fast CUDA kernel, before anything runs.

use serde::{Deserialize, Serialize};

use super::features::{intensity, Features};

/// One weighted term of a [`StructuralScore`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScoreTerm {
    /// Stable snake_case name (see [`structural_score`] for the list).
    pub name: String,
    /// The hand-set weight (negative for penalties).
    pub weight: f64,
    /// `weight × signal`, the signal being in `[0, 1]` (or `[-1, 1]` for occupancy).
    pub contribution: f64,
}

/// The score and its explanation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StructuralScore {
    /// `tanh(Σ contributions)`, in `[-1, 1]`.
    pub value: f64,
    /// Every term, always in the same order, including zero contributions.
    pub terms: Vec<ScoreTerm>,
}

impl StructuralScore {
    /// The term named `name`, if any.
    pub fn term(&self, name: &str) -> Option<&ScoreTerm> {
        self.terms.iter().find(|t| t.name == name)
    }
}

/// `min(1, ln(1 + x) / ln(1 + k))`: 0 at 0, 1 from `x = k` on.
fn sat(x: f64, k: f64) -> f64 {
    (x.max(0.0).ln_1p() / k.ln_1p()).min(1.0)
}

/// Scores the structure of a candidate.
///
/// `occupancy` is the theoretical occupancy in `[0, 1]` (see
/// [`occupancy()`](super::occupancy())) and `spills_bytes` the register-spill bytes
/// reported by the compiler, when known; unknown inputs contribute 0.
///
/// `value = tanh(Σᵢ wᵢ · sᵢ)` over these terms (`G` = global accesses,
/// `sat(x, k) = min(1, ln(1+x) / ln(1+k))`):
///
/// | term | weight `w` | signal `s` |
/// |---|---|---|
/// | `coalesced` | +0.6 | coalesced / G |
/// | `strided` | −0.8 | strided / G |
/// | `indirect` | −0.2 | indirect / G |
/// | `shared_reuse` | +0.3 | sat(shared accesses in loops, 8) |
/// | `shuffles` | +0.4 | sat(warp shuffles, 2) |
/// | `vector_loads` | +0.3 | vector accesses / G |
/// | `arithmetic_intensity` | +0.3 | sat(FLOPs per global byte, 16) |
/// | `occupancy` | +0.4 | 2·occupancy − 1 |
/// | `bank_conflicts` | −0.4 | sat(bank conflicts, 1) |
/// | `possible_bank_conflicts` | −0.1 | sat(possible conflicts, 1) |
/// | `divergent_barriers` | −0.8 | sat(divergent barriers, 1) |
/// | `barriers_after_divergent_return` | −0.2 | sat(count, 1) |
/// | `interleaved_reduction` | −0.4 | sat(`tid % (2*s)` tests, 1) |
/// | `divergent_branches` | −0.1 | sat(divergent branches, 4) |
/// | `global_atomics_in_loops` | −0.5 | sat(global atomics in loops, 1) |
/// | `global_atomics` | −0.1 | sat(other global atomics, 4) |
/// | `spills` | −0.5 | sat(spill bytes, 1024) |
/// | `syntax_errors` | −1.0 | sat(ERROR + MISSING nodes, 1) |
/// | `no_kernel` | −3.0 | 1 when no `__global__` function was found |
pub fn structural_score(
    features: &Features,
    occupancy: Option<f64>,
    spills_bytes: Option<u64>,
) -> StructuralScore {
    let table = score_table(features, occupancy, spills_bytes);
    let terms: Vec<ScoreTerm> = table
        .iter()
        .map(|(name, w, sig)| ScoreTerm {
            name: (*name).to_string(),
            weight: *w,
            contribution: w * sig,
        })
        .collect();
    let raw: f64 = terms.iter().map(|t| t.contribution).sum();
    let value = if raw.is_finite() { raw.tanh() } else { 0.0 };
    StructuralScore { value, terms }
}

/// The terms of the table above as (name, weight, signal), in its order.
fn score_table(
    features: &Features,
    occupancy: Option<f64>,
    spills_bytes: Option<u64>,
) -> [(&'static str, f64, f64); 19] {
    let t = &features.totals;
    let g = &t.global_accesses;
    let n = f64::from(g.coalesced + g.strided + g.uniform + g.indirect + g.unknown);
    let frac = |x: u32| if n > 0.0 { f64::from(x) / n } else { 0.0 };
    let (s, y, d) = (&t.shared, &t.sync, &t.divergence);
    let ai = intensity(t.compute.weighted_flops, t.compute.weighted_global_bytes);
    let occ = occupancy
        .filter(|o| o.is_finite())
        .map_or(0.0, |o| 2.0 * o.clamp(0.0, 1.0) - 1.0);
    let syntax = f64::from(
        features
            .syntax
            .error_nodes
            .saturating_add(features.syntax.missing_nodes),
    );
    let other_atomics = y.atomics_global.saturating_sub(y.atomics_global_in_loops);
    [
        ("coalesced", 0.6, frac(g.coalesced)),
        ("strided", -0.8, frac(g.strided)),
        ("indirect", -0.2, frac(g.indirect)),
        (
            "shared_reuse",
            0.3,
            sat(f64::from(s.accesses_in_loops), 8.0),
        ),
        ("shuffles", 0.4, sat(f64::from(y.shuffles), 2.0)),
        ("vector_loads", 0.3, frac(g.vector_accesses)),
        ("arithmetic_intensity", 0.3, sat(ai, 16.0)),
        ("occupancy", 0.4, occ),
        (
            "bank_conflicts",
            -0.4,
            sat(f64::from(s.bank_conflicts), 1.0),
        ),
        (
            "possible_bank_conflicts",
            -0.1,
            sat(f64::from(s.possible_bank_conflicts), 1.0),
        ),
        (
            "divergent_barriers",
            -0.8,
            sat(f64::from(y.divergent_barriers), 1.0),
        ),
        (
            "barriers_after_divergent_return",
            -0.2,
            sat(f64::from(y.barriers_after_divergent_return), 1.0),
        ),
        (
            "interleaved_reduction",
            -0.4,
            sat(f64::from(d.interleaved_modulo), 1.0),
        ),
        (
            "divergent_branches",
            -0.1,
            sat(f64::from(d.divergent_branches), 4.0),
        ),
        (
            "global_atomics_in_loops",
            -0.5,
            sat(f64::from(y.atomics_global_in_loops), 1.0),
        ),
        ("global_atomics", -0.1, sat(f64::from(other_atomics), 4.0)),
        (
            "spills",
            -0.5,
            spills_bytes.map_or(0.0, |b| sat(b as f64, 1024.0)),
        ),
        ("syntax_errors", -1.0, sat(syntax, 1.0)),
        ("no_kernel", -3.0, if t.kernels == 0 { 1.0 } else { 0.0 }),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_input_scores_near_minus_one() {
        let s = structural_score(&Features::default(), None, None);
        assert!(s.value < -0.99 && s.value >= -1.0);
        assert_eq!(s.term("no_kernel").map(|t| t.contribution), Some(-3.0));
    }

    #[test]
    fn occupancy_and_spills_move_the_score() {
        let mut f = Features::default();
        f.totals.kernels = 1;
        let hi = structural_score(&f, Some(1.0), Some(0)).value;
        let lo = structural_score(&f, Some(0.25), Some(4096)).value;
        assert!(hi > lo);
        assert!(structural_score(&f, Some(f64::NAN), None).value.is_finite());
    }
}
