//! The reward pipeline: what happens to a submission, stage by stage, in the order the
//! stages run (cheapest first; each short-circuits the ones after it).
//!
//! | # | stage | file | needs a GPU |
//! |---|---|---|---|
//! | 1 | extract: code block, launch plan, ABI check, the plan resolved for every checked config | [`extract`](extract/index.html) | no |
//! | 2 | syntax: the one tree-sitter parse, shared by 4 and 5; error and missing nodes | `syntax.rs` | no |
//! | 3 | compile: NVRTC in a sandboxed worker, ptxas resources, cache | `compile.rs` | no |
//! | 4 | structure: features from the shared tree, static occupancy of the timed config, score | `structure.rs` | no |
//! | 5 | ranker: the learned pairwise score against the reference | `ranker.rs` | no |
//! | 6, 7 | correctness and timing: one job in a sandboxed GPU worker | `gpu.rs` | yes |
//!
//! [`Evaluator`] (`evaluator.rs`) runs them lazily, at most once per submission, and keeps
//! their state (compile cache, worker pools, ranker model, references); `report.rs` is the
//! whole `stages.*` schema and `verdict.rs` the one-word outcome. Rewards
//! ([`crate::reward`]) read an [`Evaluation`] and never run a stage themselves.
//!
//! ```no_run
//! use cudaperf::pipeline::{EvalOptions, Evaluator, Stage, Submission};
//! use cudaperf::task::Task;
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let task = Task::load("fixtures/tasks/vector_add")?;
//! let evaluator = Evaluator::new(EvalOptions { no_gpu: true, ..EvalOptions::default() })?;
//! let sub = Submission::from_source(task.reference.source.clone());
//! let eval = evaluator.evaluate(&task, &sub, Stage::Ranker);
//! println!("{} {:?}", eval.verdict(), eval.stages.compile.map(|c| c.status()));
//! # Ok(()) }
//! ```

mod compile;
mod error;
mod evaluation;
mod evaluator;
mod extract;
mod gpu;
mod ranker;
pub mod report;
mod structure;
mod syntax;
mod verdict;

pub use compile::stage_of as compile_stage_of;
pub use error::{EvalError, NoExecutor, NoRanker};
pub use evaluation::{Evaluation, StageUnavailable};
pub use evaluator::{EvalOptions, Evaluator};
pub use extract::{select_configs, Plan, Submission};
pub use gpu::MAX_JOB_MEMBERS;
pub use ranker::RANKER_MODEL_ENV;
pub use structure::{stage_from as structure_stage_from, static_occupancy};
pub use syntax::check_syntax;
pub use verdict::{Outcome, Verdict};

use serde::{Deserialize, Serialize};

/// Pipeline stages, in the order they run. The ranker needs only the structure stage, so it
/// runs before the GPU stages and a ranker-only reward never needs a GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Stage {
    /// Code block, launch plan, ABI.
    Extract,
    /// tree-sitter parse.
    Syntax,
    /// NVRTC.
    Compile,
    /// Structural features.
    Structure,
    /// Learned ranker.
    Ranker,
    /// GPU run and correctness.
    Correctness,
    /// Speedup measurement.
    Timing,
}

impl Stage {
    /// The stage after this one.
    pub fn next(self) -> Option<Stage> {
        use Stage::*;
        match self {
            Extract => Some(Syntax),
            Syntax => Some(Compile),
            Compile => Some(Structure),
            Structure => Some(Ranker),
            Ranker => Some(Correctness),
            Correctness => Some(Timing),
            Timing => None,
        }
    }
}
