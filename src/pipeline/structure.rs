//! Stage 4, structure: features from the shared syntax tree, static occupancy of the timed
//! configuration's launches, and the hand-weighted structural score.

use crate::analysis::{self, DeviceSpec, Features, SourceTree};
use crate::candidate::ResolvedPlan;
use crate::compile::Resources;

use super::report::{LaunchOccupancy, StructureStage, Term};

/// Static occupancy of every launch of a resolved plan on `spec` (the pipeline passes the
/// plan of the timed configuration). Launches whose kernel has no compile resources are
/// left out.
pub fn static_occupancy(
    plan: &ResolvedPlan,
    resources: &[Resources],
    spec: &DeviceSpec,
) -> Vec<LaunchOccupancy> {
    let mut out = Vec::new();
    for l in &plan.launches {
        let base = l.kernel.split('<').next().unwrap_or(&l.kernel);
        let Some(r) = resources
            .iter()
            .find(|r| r.name == l.kernel || r.name == base)
        else {
            continue;
        };
        let threads = l.block.iter().product::<u32>();
        if let Ok(o) = analysis::occupancy(
            spec,
            r.registers,
            r.static_smem_bytes as u64,
            l.smem as u64,
            threads,
        ) {
            out.push(LaunchOccupancy {
                kernel: l.kernel.clone(),
                block_threads: threads,
                registers: r.registers,
                shared_bytes: r.static_smem_bytes as u64 + l.smem as u64,
                occupancy: o.occupancy,
                limiter: o.limiter,
            });
        }
    }
    out
}

/// The structure stage from features already computed: score and report.
pub fn stage_from(
    features: &Features,
    occupancy: Vec<LaunchOccupancy>,
    resources: &[Resources],
) -> StructureStage {
    let occ = occupancy.iter().map(|o| o.occupancy).reduce(f64::min);
    let spills = (!resources.is_empty()).then(|| {
        resources
            .iter()
            .map(|r| u64::from(r.spill_store_bytes + r.spill_load_bytes))
            .sum()
    });
    let score = analysis::structural_score(features, occ, spills);
    StructureStage {
        score: score.value,
        terms: score
            .terms
            .iter()
            .map(|t| Term {
                name: t.name.clone(),
                weight: t.weight,
                value: t.contribution,
            })
            .collect(),
        occupancy,
        features: features.clone(),
    }
}

/// Runs the structure stage on the shared tree: features, occupancy for `plan` (the timed
/// configuration's, when the candidate was extracted), score. `compiled`: NVRTC compiled the
/// code, so the syntax problems left in the tree are the grammar's and cost nothing
/// ([`analysis::SyntaxFeatures::attribute_to_grammar`]).
pub(crate) fn run(
    tree: &SourceTree,
    plan: Option<&ResolvedPlan>,
    resources: &[Resources],
    spec: &DeviceSpec,
    compiled: bool,
) -> (StructureStage, Features) {
    let mut features = analysis::analyze_tree(tree);
    if compiled {
        features.syntax.attribute_to_grammar();
    }
    let occupancy = plan.map_or_else(Vec::new, |p| static_occupancy(p, resources, spec));
    (stage_from(&features, occupancy, resources), features)
}
