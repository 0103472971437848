//! Running untrusted work in worker processes that can be killed.
//!
//! NVRTC calls cannot be interrupted and a faulting or hanging kernel poisons or blocks its
//! process, so both run in worker processes. [`Pool`] keeps them alive between jobs
//! (loading NVRTC and creating a CUDA context cost tens of milliseconds), checks each new
//! worker's greeting (protocol version and role), enforces a wall-clock limit per job, and
//! replaces a worker that hangs, crashes or reports a sticky CUDA error.
//!
//! The sandbox is generic: a pool moves jobs of one type to workers and results back, and
//! a worker answers them through a [`Handler`]. It does not know what the jobs are; the
//! roles cudaperf's workers serve and how a pool finds their program are [`Role`] and
//! [`locate_worker`]; how a program becomes a worker lives in [`crate::worker`].

mod locate;
mod pool;
pub mod protocol;
mod worker;

pub use locate::{
    find_worker, locate_worker, Role, WorkerCommand, WorkerNotFound, WORKER_ARG, WORKER_ENV,
};
pub use pool::{last_lines, JobOutcome, Pool, PoolStats, WorkerSpec};
pub use worker::{run, serve, Handled, Handler};
