//! Device side: buffers, launches, correctness and timing (cudarc driver API), run in
//! sandboxed workers by an [`Executor`].
//!
//! Everything that touches the GPU happens in worker processes; the parent only builds
//! [`ExecJob`]s (every expression evaluated) and reads back [`ExecResult`]s. A GPU job goes
//! to a `gpu` worker (the harness, `GpuHandler`), which runs the reference and the candidate
//! in two `runner` processes of their own (`RunnerHandler`) so that neither can address
//! the other's memory or the harness's (timing protocol v2, [`PROTOCOL_VERSION`]). Without a
//! driver or GPU, [`Executor::new`] says why and the stages report `Unavailable`.

mod checks;
pub mod cubin;
mod device;
mod direct;
mod driver;
mod executor;
mod fdpass;
mod harness;
mod job;
pub(crate) mod report;
mod runner;
pub(crate) mod secret;
mod settings;
mod support;
mod timed;
mod timing;
mod torch;
mod values;

pub use device::{table_bandwidth, table_peak_tflops};
pub use direct::{DirectGpu, DirectGpuError};
pub use driver::CudaError;
pub use executor::{
    smallest_gpu_memory, task_limits_for_this_machine, visible_gpus, ExecOptions, Executor,
    GpuUnavailable,
};
pub(crate) use harness::GpuHandler;
pub use job::{
    fills_of, BuildError, ConfigValues, ExecJob, Fill, JobBuffer, JobConfig, JobModule, JobParam,
    JobParts, JobReference, JobRegime, JobSide, TimingOptions, ValuesError, JOB_HEADROOM_MS,
};
pub(crate) use report::{ConfigCheck, ExecStatus, ExecuteStage, TimingStage};
/// The wire message of a GPU job's member; its stages are the report's
/// ([`crate::pipeline::report`]).
pub use report::{ExecResult, PROTOCOL_VERSION};
pub(crate) use runner::RunnerHandler;
/// The runner worker's wire messages (public for the worker protocol's tests only).
#[doc(hidden)]
pub use runner::{RunArg, RunLaunch, RunnerCmd, RunnerReply, ZeroRange};
pub use secret::{derive_seed, fresh_secret, JobSecret};
pub use settings::{CtxSched, GpuSettings};
pub use torch::{
    default_python, runner_script, ReferenceKind, TorchMode, TorchReference, RUNNER_SOURCE,
};
