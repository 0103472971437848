//! How a program becomes a cudaperf worker: the roles' dispatch. How the pools find the
//! program is [`crate::sandbox::locate_worker`].
//!
//! Pools start workers as `<program> __cudaperf_worker <role>`: the `cudaperf` binary, or
//! any program that links the crate and calls [`run_if_requested`] first thing in `main`
//! (a trainer can then serve as its own worker: see
//! [`crate::pipeline::EvalOptions::self_worker`]). The roles:
//!
//! | role | jobs | started by |
//! |---|---|---|
//! | `compile` | NVRTC compiles of untrusted source | the compile stage's pool |
//! | `gpu` | correctness and timing of one candidate (the harness) | the GPU stage's pool, one or more per GPU |
//! | `runner` | one side's kernels, in a process of its own | a `gpu` worker, one for the reference and one for the candidate |
//! | `diag` | ping, sleep, exit: tests of the pool itself | tests |
//!
//! ```no_run
//! // First thing in `main`: returns at once unless this process was started as a worker.
//! cudaperf::worker::run_if_requested();
//! // ... the trainer ...
//! ```

use serde::{Deserialize, Serialize};

use crate::sandbox::{Handled, Handler, Role, WORKER_ARG};

/// Turns this process into a worker if it was started as one (`<exe> __cudaperf_worker
/// <role>`), and never returns then; otherwise returns at once.
pub fn run_if_requested() {
    let mut args = std::env::args();
    if args.nth(1).as_deref() != Some(WORKER_ARG) {
        return;
    }
    let role = args.next().unwrap_or_default();
    std::process::exit(run_role(&role));
}

/// Runs the worker loop of the role named `role` on stdin/stdout; returns the exit code.
pub fn run_role(role: &str) -> i32 {
    match Role::from_name(role) {
        Some(Role::Compile) => {
            crate::sandbox::run(role, &mut crate::compile::worker::CompileHandler)
        }
        Some(Role::Gpu) => {
            let mut harness = crate::exec::GpuHandler::new(gpu_settings_from_env());
            crate::sandbox::run(role, &mut harness)
        }
        Some(Role::Runner) => {
            let mut runner = crate::exec::RunnerHandler::new(&gpu_settings_from_env());
            crate::sandbox::run(role, &mut runner)
        }
        Some(Role::Diag) => crate::sandbox::run(role, &mut DiagHandler),
        None => {
            eprintln!(
                "cudaperf worker: unknown role `{role}` (expected one of: {})",
                Role::ALL.map(Role::as_str).join(", ")
            );
            2
        }
    }
}

/// The GPU workers' settings, from the environment they inherit from the program that
/// started them (the one place they are read): `$CUDAPERF_CTX_SCHED` (`spin`, `yield`,
/// `blocking`; else the driver's choice), `$CUDAPERF_TRACE_JOBS` (a file for one JSON
/// line per job) and `$CUDAPERF_TORCH_PYTHON` (the interpreter of a PyTorch reference).
fn gpu_settings_from_env() -> crate::exec::GpuSettings {
    crate::exec::GpuSettings {
        ctx_sched: std::env::var("CUDAPERF_CTX_SCHED").map_or(crate::exec::CtxSched::Auto, |s| {
            crate::exec::CtxSched::from_name(&s)
        }),
        trace_jobs: std::env::var_os("CUDAPERF_TRACE_JOBS").map(std::path::PathBuf::from),
        torch_python: std::env::var_os("CUDAPERF_TORCH_PYTHON")
            .filter(|p| !p.is_empty())
            .map(std::path::PathBuf::from),
    }
}

/// Jobs of the `diag` role.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum DiagJob {
    /// Answer at once.
    Ping,
    /// Sleep, then answer.
    Sleep {
        /// Milliseconds.
        ms: u64,
    },
    /// Exit with a code without answering.
    Exit {
        /// Exit code.
        code: i32,
    },
    /// Answer, asking to be replaced.
    Restart,
}

/// The `diag` role's answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DiagReply {
    /// Done.
    Pong,
}

struct DiagHandler;

impl Handler for DiagHandler {
    type Job = DiagJob;
    type Reply = DiagReply;

    fn handle(&mut self, job: DiagJob) -> Handled<DiagReply> {
        match job {
            DiagJob::Ping => Handled::ok(DiagReply::Pong),
            DiagJob::Sleep { ms } => {
                std::thread::sleep(std::time::Duration::from_millis(ms));
                Handled::ok(DiagReply::Pong)
            }
            DiagJob::Exit { code } => std::process::exit(code),
            DiagJob::Restart => Handled {
                reply: Ok(DiagReply::Pong),
                restart: true,
            },
        }
    }
}
