//! The structure stage: features from the syntax tree, static occupancy, the hand-weighted
//! structural score — and [`StructuralReward`], its reward.

use serde::{Deserialize, Serialize};

use super::{Context, Evaluation, Result, Reward, Stage};
use crate::analysis::{self, DeviceSpec, Features};
use crate::candidate::{Candidate, PlanLimits};
use crate::compile::Resources;
use crate::task::Task;

/// Static occupancy of one launch.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LaunchOccupancy {
    /// Kernel as launched.
    pub kernel: String,
    /// Threads per block.
    pub block_threads: u32,
    /// Registers per thread (from ptxas).
    pub registers: u32,
    /// Static + dynamic shared memory per block.
    pub shared_bytes: u64,
    /// Theoretical occupancy on the spec device.
    pub occupancy: f64,
    /// What limits it: `warps`, `registers`, `shared_memory` or `blocks`.
    pub limiter: String,
}

/// Static occupancy of every launch of a candidate for one config, on `spec`.
/// Launches whose kernel has no compile resources are left out.
pub fn static_occupancy(
    candidate: &Candidate,
    resources: &[Resources],
    task: &Task,
    limits: &PlanLimits,
    spec: &DeviceSpec,
) -> Vec<LaunchOccupancy> {
    // The largest config is the one timed.
    let Some(config) = task
        .configs
        .iter()
        .max_by_key(|c| task.buffer_bytes(c).unwrap_or(0))
    else {
        return Vec::new();
    };
    let Ok(plan) = candidate.resolve(task, config, limits) else {
        return Vec::new();
    };
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
                limiter: serde_json::to_value(o.limiter)
                    .ok()
                    .and_then(|v| v.as_str().map(String::from))
                    .unwrap_or_default(),
            });
        }
    }
    out
}

/// Runs the structure stage on an evaluation that has reached the compile stage.
pub(crate) fn run(
    eval: &mut Evaluation,
    code: &str,
    task: &Task,
    limits: &PlanLimits,
    spec: &DeviceSpec,
) {
    let features = analysis::analyze(code.as_bytes());
    let resources: Vec<Resources> = eval
        .stages
        .compile
        .as_ref()
        .map(|c| c.kernels.clone())
        .unwrap_or_default();
    let occupancy = match &eval.candidate {
        Some(c) => static_occupancy(c, &resources, task, limits, spec),
        None => Vec::new(),
    };
    let occ = occupancy.iter().map(|o| o.occupancy).reduce(f64::min);
    let spills = (!resources.is_empty()).then(|| {
        resources
            .iter()
            .map(|r| u64::from(r.spill_store_bytes + r.spill_load_bytes))
            .sum()
    });
    let score = analysis::structural_score(&features, occ, spills);
    eval.stages.structure = Some(super::StructureStage {
        score: score.value,
        terms: score
            .terms
            .iter()
            .map(|t| super::Term {
                name: t.name.clone(),
                weight: t.weight,
                value: t.contribution,
            })
            .collect(),
        occupancy,
        features: serde_json::to_value(&features).unwrap_or_default(),
    });
    eval.features = Some(features);
}

/// The hand-weighted structural score in [-1, 1] (see `analysis::structural_score`);
/// 0 when there is no code to analyse.
pub struct StructuralReward;

impl Reward for StructuralReward {
    fn name(&self) -> String {
        "structure".into()
    }
    fn needs(&self, _: &Context) -> Stage {
        Stage::Structure
    }
    fn value(&self, _: &Context, eval: &Evaluation) -> Result<f64> {
        Ok(eval.stages.structure.as_ref().map_or(0.0, |s| s.score))
    }
}

/// Features of an evaluation, if the structure stage ran.
pub fn features_of(eval: &Evaluation) -> Option<&Features> {
    eval.features.as_ref()
}
