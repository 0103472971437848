//! Running untrusted work in worker processes that can be killed.
//!
//! NVRTC calls cannot be interrupted and a faulting or hanging kernel poisons or blocks its
//! process, so both run in `cudaperf worker` processes (or any program that calls
//! [`run_if_requested`]). [`Pool`] keeps them alive between jobs (loading NVRTC and creating
//! a CUDA context cost tens of milliseconds), enforces a wall-clock limit per job, and
//! replaces a worker that hangs, crashes or reports a sticky CUDA error.

mod pool;
pub mod protocol;
mod worker;

use std::path::{Path, PathBuf};

pub use pool::{last_lines, JobOutcome, Pool, PoolStats, WorkerSpec};
pub use worker::{main as worker_main, run_if_requested, serve, WORKER_ARG};

/// Environment variable naming the worker executable.
pub const WORKER_ENV: &str = "CUDAPERF_WORKER";

/// Finds the worker executable: `explicit`, then `$CUDAPERF_WORKER`, then a `cudaperf`
/// binary beside the current executable (or one folder up, where cargo puts test binaries).
/// Returns the program and the arguments that start it in worker mode.
pub fn find_worker(explicit: Option<&Path>) -> Option<(PathBuf, Vec<String>)> {
    let args = vec!["worker".to_string()];
    if let Some(p) = explicit {
        return Some((p.to_path_buf(), args));
    }
    if let Some(p) = std::env::var_os(WORKER_ENV) {
        return Some((PathBuf::from(p), args));
    }
    let exe = std::env::current_exe().ok()?;
    let dir = exe.parent()?;
    for candidate in [dir.join("cudaperf"), dir.parent()?.join("cudaperf")] {
        if candidate.is_file() && candidate != exe {
            return Some((candidate, args));
        }
    }
    if exe.file_name().and_then(|n| n.to_str()) == Some("cudaperf") {
        return Some((exe, args));
    }
    None
}
