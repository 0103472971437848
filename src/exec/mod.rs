//! Device side: buffers, launches, correctness and timing (cudarc driver API).

mod report;

pub use report::*;

use serde::{Deserialize, Serialize};

/// A GPU job as sent to a worker (filled in by the GPU-execution stage).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExecJob {}

/// Per-worker GPU state.
#[derive(Default)]
pub struct WorkerState {}

impl WorkerState {
    /// Runs a job; the flag asks the parent to restart the worker.
    pub fn execute(&mut self, _job: &ExecJob) -> (ExecResult, bool) {
        (
            ExecResult::status_only(ExecStatus::Unavailable {
                reason: "GPU execution is not built yet".into(),
            }),
            false,
        )
    }
}
