//! The report every reward returns: the value and each stage's result.
//!
//! Field names are stable; new stages are added as optional fields, never renamed.
//!
//! ```json
//! {
//!   "value": 1.42,
//!   "reward": "cudaperf",
//!   "terms": [{"name": "outcome", "weight": 1.0, "value": 1.0}, ...],
//!   "stages": {
//!     "extract": {"ok": true, "kernels": ["vector_add"], "launches": 1},
//!     "syntax": {"ok": true, "error_nodes": 0, "missing_nodes": 0},
//!     "compile": {"ok": true, "status": "compiled", "kernels": [{"name": "vector_add", "registers": 12, ...}], "cached": false, "millis": 31.2, ...},
//!     "structure": {...}, "execute": {...}, "correctness": {...}, "timing": {...}, "ranker": {...}
//!   }
//! }
//! ```

use serde::{Deserialize, Serialize};

use crate::compile::CompileStage;
use crate::exec::{CorrectnessStage, ExecuteStage, TimingStage};
use crate::syntax::SyntaxStage;

/// `stages.extract`: was there code, and does its launch plan fit the task?
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ExtractStage {
    /// A candidate was extracted and matches the task ABI.
    pub ok: bool,
    /// Error kind when not ok: `no_code_block`, `no_launch_plan`, `unknown_kernel`,
    /// `abi_mismatch`, `bad_directive`, `expression`, `invalid_launch`.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub error_kind: Option<String>,
    /// The error message.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub error: Option<String>,
    /// Kernels launched.
    pub kernels: Vec<String>,
    /// Number of launches in the plan.
    pub launches: usize,
}

/// `stages.structure`: the structural score and the features behind it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StructureStage {
    /// Hand-weighted structural score in [-1, 1].
    pub score: f64,
    /// The score's terms (name, weight, contribution as `value`).
    pub terms: Vec<Term>,
    /// Static occupancy per launch on the spec device (largest config).
    pub occupancy: Vec<super::structure::LaunchOccupancy>,
    /// The features, as produced by the analysis (see `analysis::Features`).
    pub features: serde_json::Value,
}

/// `stages.ranker`: the learned pairwise score against the reference.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RankerStage {
    /// s(candidate).
    pub candidate_score: f64,
    /// s(reference).
    pub reference_score: f64,
    /// σ(s(candidate) − s(reference)): predicted probability the candidate is faster.
    pub prob_faster: f64,
    /// Model folder the scores came from.
    pub model: String,
    /// Why the ranker could not score (no model, feature mismatch); the scores are NaN then.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub error: Option<String>,
}

/// All stages; a stage that did not run is `null`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Stages {
    /// Code extraction and launch-plan parsing.
    pub extract: ExtractStage,
    /// tree-sitter parse.
    pub syntax: Option<SyntaxStage>,
    /// NVRTC compile.
    pub compile: Option<CompileStage>,
    /// Structural features.
    pub structure: Option<StructureStage>,
    /// GPU run outcome.
    pub execute: Option<ExecuteStage>,
    /// Correctness against the reference.
    pub correctness: Option<CorrectnessStage>,
    /// Speedup measurement.
    pub timing: Option<TimingStage>,
    /// Learned ranker.
    pub ranker: Option<RankerStage>,
}

/// One named contribution to a reward value.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Term {
    /// What it measures.
    pub name: String,
    /// Its weight.
    pub weight: f64,
    /// Its unweighted value.
    pub value: f64,
}

/// A reward value with everything that explains it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RewardReport {
    /// The scalar reward.
    pub value: f64,
    /// Name of the reward that produced it.
    pub reward: String,
    /// Contributions, for composite rewards.
    pub terms: Vec<Term>,
    /// Every stage's result.
    pub stages: Stages,
}
