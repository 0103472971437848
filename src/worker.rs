//! How a program becomes a cudaperf worker, and how the pools find one.
//!
//! Pools start workers as `<program> __cudaperf_worker <role>`: the `cudaperf` binary, or
//! any program that links the crate and calls [`run_if_requested`] first thing in `main`
//! (a trainer can then serve as its own worker: see
//! [`crate::reward::EvalOptions::self_worker`]). The roles:
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

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::sandbox::{Handled, Handler};

/// The first argument of a worker process.
pub const WORKER_ARG: &str = "__cudaperf_worker";

/// Environment variable naming the worker executable.
pub const WORKER_ENV: &str = "CUDAPERF_WORKER";

/// What a worker process serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    /// NVRTC compiles.
    Compile,
    /// GPU jobs: the harness that owns inputs, the reference's results and the checks.
    Gpu,
    /// One side's kernels (reference or candidate), isolated from everything else.
    Runner,
    /// Diagnostics for tests of the pool.
    Diag,
}

impl Role {
    /// Every role.
    pub const ALL: [Role; 4] = [Role::Compile, Role::Gpu, Role::Runner, Role::Diag];

    /// The name on the command line and in the greeting.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Compile => "compile",
            Role::Gpu => "gpu",
            Role::Runner => "runner",
            Role::Diag => "diag",
        }
    }

    /// The role with this name.
    pub fn from_name(name: &str) -> Option<Role> {
        Role::ALL.into_iter().find(|r| r.as_str() == name)
    }
}

impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

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

/// Where a worker program is and how to start it in a role.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerCommand {
    /// The executable.
    pub program: PathBuf,
    /// Its arguments (`[WORKER_ARG, role]`).
    pub args: Vec<String>,
}

impl WorkerCommand {
    /// `program __cudaperf_worker <role>`.
    pub fn new(program: impl Into<PathBuf>, role: Role) -> WorkerCommand {
        WorkerCommand {
            program: program.into(),
            args: vec![WORKER_ARG.to_string(), role.as_str().to_string()],
        }
    }

    /// A pool slot for this command.
    pub fn spec(&self, role: Role) -> crate::sandbox::WorkerSpec {
        crate::sandbox::WorkerSpec {
            program: self.program.clone(),
            args: self.args.clone(),
            env: Vec::new(),
            memory_limit_bytes: None,
            role: role.as_str().to_string(),
        }
    }
}

/// No worker executable was found; says where the search looked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("no `{role}` worker executable found (looked for: {searched})")]
pub struct WorkerNotFound {
    /// The role a worker was wanted for.
    pub role: Role,
    /// The places tried, in order.
    pub searched: String,
}

/// Finds the worker executable for `role`: `explicit`, then `$CUDAPERF_WORKER`, then a
/// `cudaperf` binary beside the current executable (or one folder up, where cargo puts test
/// binaries), then the current executable if it is `cudaperf` itself.
pub fn find_worker(explicit: Option<&Path>, role: Role) -> Option<WorkerCommand> {
    locate_worker(explicit, role).ok()
}

/// [`find_worker`], saying where it looked when nothing is found.
pub fn locate_worker(explicit: Option<&Path>, role: Role) -> Result<WorkerCommand, WorkerNotFound> {
    if let Some(p) = explicit {
        return Ok(WorkerCommand::new(p, role));
    }
    if let Some(p) = std::env::var_os(WORKER_ENV).filter(|p| !p.is_empty()) {
        return Ok(WorkerCommand::new(PathBuf::from(p), role));
    }
    let mut searched = vec![
        "an explicit worker path (none given)".to_string(),
        format!("${WORKER_ENV} (unset)"),
    ];
    let not_found = |searched: Vec<String>| WorkerNotFound {
        role,
        searched: searched.join(", "),
    };
    let exe = match std::env::current_exe() {
        Ok(e) => e,
        Err(e) => {
            searched.push(format!("beside the current executable (unknown: {e})"));
            return Err(not_found(searched));
        }
    };
    let dir = exe.parent().unwrap_or(Path::new("."));
    let beside = [
        Some(dir.join("cudaperf")),
        dir.parent().map(|p| p.join("cudaperf")),
    ];
    for candidate in beside.into_iter().flatten() {
        if candidate.is_file() && candidate != exe {
            return Ok(WorkerCommand::new(candidate, role));
        }
        searched.push(candidate.display().to_string());
    }
    if exe.file_name().and_then(|n| n.to_str()) == Some("cudaperf") {
        return Ok(WorkerCommand::new(exe, role));
    }
    Err(not_found(searched))
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
