//! Where the worker program is and how to start it in a role: the crate's worker roles, the
//! command line a pool starts, and the search for the executable (an explicit path,
//! `$CUDAPERF_WORKER`, a `cudaperf` binary beside the current executable). What each role
//! does is [`crate::worker`]'s.

use std::path::{Path, PathBuf};

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
    pub fn spec(&self, role: Role) -> super::WorkerSpec {
        super::WorkerSpec {
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
