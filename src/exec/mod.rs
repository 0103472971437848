//! Device side: buffers, launches, correctness and timing (cudarc driver API), run in
//! sandboxed workers by an [`Executor`].
//!
//! Everything that touches the GPU happens in `cudaperf worker` processes; the parent only
//! builds [`ExecJob`]s (every expression evaluated) and reads back [`ExecResult`]s. Without
//! a driver or GPU, [`Executor::new`] says why and the stages report `Unavailable`.

mod driver;
mod executor;
mod job;
mod report;
mod run;
pub mod timing;

pub use executor::{visible_gpus, ExecOptions, Executor};
pub use job::{
    BuildError, ExecJob, Fill, JobBuffer, JobConfig, JobModule, JobParam, JobParts, TimingOptions,
};
pub use report::*;
pub use run::WorkerState;
