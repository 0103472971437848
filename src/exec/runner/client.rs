//! The harness's side of a runner: its process, the commands' limits, and what a failure
//! comes to.

use std::time::Duration;

use base64::Engine;

use super::{RunLaunch, RunnerCmd, RunnerReply, ZeroRange};
use crate::exec::driver::{CudaError, IpcHandle};
use crate::exec::fdpass::FdInbox;
use crate::sandbox::{JobOutcome, Pool, WorkerSpec};

/// Why a runner command did not succeed, and whose failure that is.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum RunnerFault {
    /// A CUDA call failed in the runner (a fault of the kernels it runs).
    Cuda(CudaError),
    /// The command ran past its limit; the runner was killed.
    Timeout(Duration),
    /// The runner died during the command.
    Crashed(String),
    /// No usable runner (could not start, wrong protocol, no GPU): ours.
    Unavailable(String),
}

impl std::fmt::Display for RunnerFault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RunnerFault::Cuda(e) => write!(f, "{e}"),
            RunnerFault::Timeout(d) => write!(f, "no answer within {} ms", d.as_millis()),
            RunnerFault::Crashed(r) => write!(f, "the runner died: {r}"),
            RunnerFault::Unavailable(r) => write!(f, "no runner: {r}"),
        }
    }
}

/// The harness's handle on one runner process.
pub(crate) struct RunnerClient {
    pool: Pool<RunnerCmd, RunnerReply>,
    /// Where the runner sends its buffers' descriptors (`None`: legacy CUDA IPC only).
    inbox: Option<FdInbox>,
    /// The module loaded now (a hash of the cubin), to skip reloading a trusted one.
    pub loaded: Option<u64>,
}

/// How the harness maps one of a runner's buffers.
pub(crate) enum BufferShare {
    /// A shareable buffer's file descriptor (the VMM API: full-speed access).
    Fd(std::os::fd::OwnedFd),
    /// A legacy CUDA IPC handle.
    Ipc(IpcHandle),
}

impl RunnerClient {
    /// A runner started from this executable, in its own process.
    pub(crate) fn new(what: &str) -> Result<RunnerClient, String> {
        let exe = std::env::current_exe()
            .map_err(|e| format!("cannot find this executable to start the {what} runner: {e}"))?;
        let mut spec: WorkerSpec =
            crate::sandbox::WorkerCommand::new(exe, crate::sandbox::Role::Runner)
                .spec(crate::sandbox::Role::Runner);
        // Without an inbox the runner's buffers are mapped through legacy CUDA IPC (slower
        // for the harness's own kernels, the same for the runner's).
        // Every function is loaded with its module, not at its first launch (which would
        // fall in a timed window, and a module that keeps data is reloaded before each run).
        spec.env
            .push(("CUDA_MODULE_LOADING".to_string(), "EAGER".to_string()));
        let inbox = FdInbox::new().ok();
        if let Some(inbox) = &inbox {
            spec.env.push((
                crate::exec::fdpass::INBOX_ENV.to_string(),
                inbox.name().to_string(),
            ));
        }
        Ok(RunnerClient {
            pool: Pool::new(vec![spec]),
            inbox,
            loaded: None,
        })
    }

    /// A PyTorch reference runner: `python` running the crate's `torch_runner.py`. Its
    /// buffers are mapped through legacy CUDA IPC (the harness's own kernels are a little
    /// slower on them; the forward is not).
    pub(crate) fn torch(python: &std::path::Path) -> Result<RunnerClient, String> {
        let script = crate::exec::torch::runner_script()
            .map_err(|e| format!("cannot write the PyTorch runner script: {e}"))?;
        let spec = WorkerSpec {
            program: python.to_path_buf(),
            args: vec![
                script.display().to_string(),
                "--protocol".into(),
                crate::sandbox::protocol::PROTOCOL_VERSION.to_string(),
                "--version".into(),
                env!("CARGO_PKG_VERSION").into(),
            ],
            env: vec![("PYTHONDONTWRITEBYTECODE".into(), "1".into())],
            memory_limit_bytes: None,
            role: "torch_runner".into(),
        };
        Ok(RunnerClient {
            pool: Pool::new(vec![spec]),
            inbox: None,
            loaded: None,
        })
    }

    /// Builds a PyTorch reference's module (`key` identifies it; loaded once per key).
    pub fn load_torch(
        &mut self,
        reference: &crate::exec::torch::TorchReference,
        buffers: Vec<crate::exec::JobBuffer>,
        key: u64,
        limit: Duration,
    ) -> Result<(), RunnerFault> {
        if self.loaded == Some(key) {
            return Ok(());
        }
        let cmd = RunnerCmd::LoadTorch {
            source: reference.source.clone(),
            mode: reference.mode,
            buffers,
        };
        match self.call(&cmd, limit)? {
            RunnerReply::Loaded => {
                self.loaded = Some(key);
                Ok(())
            }
            other => Err(Self::unexpected(other)),
        }
    }

    /// One timed run of a PyTorch reference; its milliseconds.
    pub fn run_torch(
        &mut self,
        shapes: Vec<Vec<u64>>,
        flush: (u64, u32),
        limit: Duration,
    ) -> Result<f64, RunnerFault> {
        let cmd = RunnerCmd::RunTorch {
            shapes,
            flush_bytes: flush.0,
            flush_value: flush.1,
        };
        match self.call(&cmd, limit)? {
            RunnerReply::Ran { millis, .. } => Ok(millis),
            other => Err(Self::unexpected(other)),
        }
    }

    /// Frees the runner's buffers and module (its process stays).
    pub fn reset(&mut self, limit: Duration) -> Result<(), RunnerFault> {
        self.loaded = None;
        match self.call(&RunnerCmd::Reset, limit)? {
            RunnerReply::Reset => Ok(()),
            other => Err(Self::unexpected(other)),
        }
    }

    fn call(&mut self, cmd: &RunnerCmd, limit: Duration) -> Result<RunnerReply, RunnerFault> {
        let out = self.pool.run(cmd, limit);
        if !matches!(out, JobOutcome::Done(_)) {
            self.loaded = None;
        }
        match out {
            JobOutcome::Done(RunnerReply::Failed { error }) => {
                self.loaded = None;
                Err(RunnerFault::Cuda(error))
            }
            JobOutcome::Done(r) => Ok(r),
            JobOutcome::Refused { reason } | JobOutcome::Unavailable { reason } => {
                Err(RunnerFault::Unavailable(reason))
            }
            JobOutcome::Timeout { limit } => Err(RunnerFault::Timeout(limit)),
            JobOutcome::Crashed {
                reason,
                stderr_tail,
            } => {
                let tail = crate::sandbox::last_lines(&stderr_tail, 3, " | ");
                Err(RunnerFault::Crashed(if tail.is_empty() {
                    reason
                } else {
                    format!("{reason}; stderr: {tail}")
                }))
            }
        }
    }

    fn unexpected(reply: RunnerReply) -> RunnerFault {
        RunnerFault::Unavailable(format!("runner answered out of turn: {reply:?}"))
    }

    /// Loads a module (`key` identifies it; `None` forces a load); with `reload_each_run`
    /// the runner loads it afresh before every run after the first.
    pub fn load(
        &mut self,
        cubin_b64: &str,
        symbols: Vec<String>,
        key: Option<u64>,
        reload_each_run: bool,
        limit: Duration,
    ) -> Result<(), RunnerFault> {
        if key.is_some() && self.loaded == key {
            return Ok(());
        }
        let cmd = RunnerCmd::Load {
            cubin_b64: cubin_b64.to_string(),
            symbols,
            reload_each_run,
        };
        match self.call(&cmd, limit)? {
            RunnerReply::Loaded => {
                self.loaded = key;
                Ok(())
            }
            other => Err(Self::unexpected(other)),
        }
    }

    /// Allocates buffers; returns how to map each, in order.
    pub fn alloc(
        &mut self,
        bytes: Vec<u64>,
        limit: Duration,
    ) -> Result<Vec<BufferShare>, RunnerFault> {
        let count = bytes.len();
        // A nonzero number marks this request's descriptors (0: do not share).
        let share_token = self
            .inbox
            .as_ref()
            .map_or(0, |_| crate::exec::secret::fresh_secret() | 1);
        match self.call(&RunnerCmd::Alloc { bytes, share_token }, limit)? {
            RunnerReply::Allocated { shared: true, .. } => {
                let inbox = self
                    .inbox
                    .as_ref()
                    .filter(|_| share_token != 0)
                    .ok_or_else(|| {
                        RunnerFault::Unavailable("runner shared buffers nobody asked for".into())
                    })?;
                let fds = inbox
                    .receive(share_token, count, limit.min(Duration::from_secs(10)))
                    .map_err(|e| {
                        RunnerFault::Unavailable(format!(
                            "the runner's buffer descriptors did not arrive: {e}"
                        ))
                    })?;
                Ok(fds.into_iter().map(BufferShare::Fd).collect())
            }
            RunnerReply::Allocated { handles, .. } => handles
                .iter()
                .map(|h| {
                    base64::engine::general_purpose::STANDARD
                        .decode(h)
                        .ok()
                        .and_then(|v| IpcHandle::try_from(v.as_slice()).ok())
                        .map(BufferShare::Ipc)
                        .ok_or_else(|| {
                            RunnerFault::Unavailable("runner sent a malformed IPC handle".into())
                        })
                })
                .collect(),
            other => Err(Self::unexpected(other)),
        }
    }

    /// One timed run; returns its milliseconds and those of reloading the module first.
    /// With `scrub` the runner first overwrites what an earlier run could have left in the
    /// context's shared and local memory.
    pub fn run(
        &mut self,
        launches: Vec<RunLaunch>,
        (zero, used, scrub): (Vec<ZeroRange>, Vec<u64>, bool),
        flush: (u64, u32),
        limit: Duration,
    ) -> Result<(f64, f64), RunnerFault> {
        let cmd = RunnerCmd::Run {
            launches,
            zero,
            used,
            scrub,
            flush_bytes: flush.0,
            flush_value: flush.1,
        };
        match self.call(&cmd, limit)? {
            RunnerReply::Ran { millis, reload_ms } => Ok((millis, reload_ms)),
            other => Err(Self::unexpected(other)),
        }
    }

    /// Driver occupancy per query.
    pub fn occupancy(
        &mut self,
        queries: Vec<(usize, u32, u32)>,
        limit: Duration,
    ) -> Result<Vec<Option<i32>>, RunnerFault> {
        match self.call(&RunnerCmd::Occupancy { queries }, limit)? {
            RunnerReply::Occupancy { blocks } => Ok(blocks),
            other => Err(Self::unexpected(other)),
        }
    }
}
