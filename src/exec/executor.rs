//! The parent side: a pool of GPU workers, one or more per visible GPU, each pinned with
//! `CUDA_VISIBLE_DEVICES`. Every job gets a result, whatever the candidate does.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use super::job::{ExecJob, TimingOptions};
use super::report::{ExecResult, ExecStatus};
use super::secret::{fresh_secret, JobSecret};
use crate::sandbox::{locate_worker, Role, WorkerNotFound};
use crate::sandbox::{JobOutcome, Pool, WorkerSpec};
use crate::task::TaskLimits;

/// Why GPU jobs cannot run here (the GPU stages then report `unavailable`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum GpuUnavailable {
    /// libcuda cannot be loaded.
    #[error("no NVIDIA driver (libcuda) on this machine")]
    NoDriver,
    /// A driver call failed.
    #[error("{call} failed: {code}")]
    Driver {
        /// The driver function.
        call: &'static str,
        /// Its error.
        code: String,
    },
    /// The driver sees no device.
    #[error("the driver reports no GPU")]
    NoGpu,
    /// No worker executable was found.
    #[error("GPU jobs need a worker: {0}; set ExecOptions::worker or CUDAPERF_WORKER, or serve as your own worker (EvalOptions::self_worker)")]
    NoWorker(WorkerNotFound),
}

/// GPU execution settings; every field has a documented default.
#[derive(Debug, Clone, PartialEq)]
pub struct ExecOptions {
    /// Worker processes per visible GPU (default 1).
    pub workers_per_gpu: usize,
    /// Wall-clock budget of one candidate in a job: all of its runs on every config and
    /// the timing together (default 60 s). A candidate that exhausts it is a `timeout`,
    /// alone or in a group, and the other members go on. The job's own deadline is every
    /// member's budget plus as much for the reference and a headroom
    /// ([`ExecJob::deadline_for`]); a worker that does not answer within that plus a grace
    /// period is ours (`unavailable`).
    pub timeout: Duration,
    /// Longest a single run of a candidate's plan may take (default 10 s): a kernel that
    /// hangs is a `timeout` after this long, not after its whole budget.
    pub run_timeout: Duration,
    /// Timing protocol (see [`TimingOptions`]).
    pub timing: TimingOptions,
    /// Device memory cap per job in bytes (default 0: 90 % of the GPU's free memory).
    pub max_device_bytes: u64,
    /// Pin the job's secret (default: a fresh [`JobSecret`] per job, so answers cannot be
    /// memorised).
    pub seed: Option<u64>,
    /// Check at most this many configs, spread over the task's list (default: all).
    pub max_configs: Option<usize>,
    /// Worker executable (default: found like the compile workers).
    pub worker: Option<PathBuf>,
    /// Memory bandwidth for the physical floor, GB/s (default 0: the device table).
    pub bandwidth_gbps: f64,
    /// Peak arithmetic rate for the compute floor, TFLOP/s (default 0: the device table).
    pub peak_tflops: f64,
    /// Check and time against the task's PyTorch original in this mode instead of its CUDA
    /// reference (torch2cuda tasks; the report's `timing.reference` says which ran). Default
    /// `None`: the task's own reference — its CUDA reference, or its PyTorch original in
    /// eager mode for a task that has only that (`cudaperf tasks import`).
    pub torch_reference: Option<super::torch::TorchMode>,
}

impl Default for ExecOptions {
    fn default() -> Self {
        ExecOptions {
            workers_per_gpu: 1,
            timeout: Duration::from_secs(60),
            run_timeout: Duration::from_secs(10),
            timing: TimingOptions::default(),
            max_device_bytes: 0,
            seed: None,
            max_configs: None,
            worker: None,
            bandwidth_gbps: 0.0,
            peak_tflops: 0.0,
            torch_reference: None,
        }
    }
}

/// Runs GPU jobs in sandboxed workers.
pub struct Executor {
    pool: Pool<ExecJob, Vec<ExecResult>>,
    options: ExecOptions,
    gpus: Vec<String>,
}

/// The GPUs this process may use, as `CUDA_VISIBLE_DEVICES` entries; `Err` says why none.
pub fn visible_gpus() -> Result<Vec<String>, GpuUnavailable> {
    if !super::driver::driver_present() {
        return Err(GpuUnavailable::NoDriver);
    }
    cudarc::driver::result::init().map_err(|e| GpuUnavailable::Driver {
        call: "cuInit",
        code: format!("{e:?}"),
    })?;
    let count =
        cudarc::driver::result::device::get_count().map_err(|e| GpuUnavailable::Driver {
            call: "cuDeviceGetCount",
            code: format!("{e:?}"),
        })?;
    if count <= 0 {
        return Err(GpuUnavailable::NoGpu);
    }
    let listed: Option<Vec<String>> = std::env::var("CUDA_VISIBLE_DEVICES").ok().map(|v| {
        v.split(',')
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .collect()
    });
    Ok(match listed {
        Some(l) if !l.is_empty() => l.into_iter().take(count as usize).collect(),
        _ => (0..count).map(|i| i.to_string()).collect(),
    })
}

/// The task buffer cap for this machine: [`TaskLimits::for_device_memory`] of the smallest
/// visible GPU as the driver reports it, or the default where there is no driver or no GPU.
/// This initialises the CUDA driver in the calling process (no context is created).
pub fn task_limits_for_this_machine() -> TaskLimits {
    match smallest_gpu_memory() {
        Ok(bytes) => TaskLimits::for_device_memory(bytes),
        Err(_) => TaskLimits::default(),
    }
}

/// The memory of the smallest GPU this process may use, in bytes, as the driver reports it
/// (`cuDeviceTotalMem`; no context is created). Task limits follow it
/// ([`task_limits_for_this_machine`]).
pub fn smallest_gpu_memory() -> Result<u64, GpuUnavailable> {
    let count = visible_gpus()?.len();
    let mut smallest = u64::MAX;
    for ordinal in 0..count {
        let dev = cudarc::driver::result::device::get(ordinal as i32).map_err(|e| {
            GpuUnavailable::Driver {
                call: "cuDeviceGet",
                code: format!("{e:?}"),
            }
        })?;
        // SAFETY: `dev` was just returned by the driver.
        let bytes = unsafe { cudarc::driver::result::device::total_mem(dev) }.map_err(|e| {
            GpuUnavailable::Driver {
                call: "cuDeviceTotalMem",
                code: format!("{e:?}"),
            }
        })?;
        smallest = smallest.min(bytes as u64);
    }
    if smallest == u64::MAX {
        return Err(GpuUnavailable::NoGpu);
    }
    Ok(smallest)
}

impl Executor {
    /// Starts nothing yet; fails with a reason when there is no GPU or no worker binary.
    pub fn new(options: ExecOptions) -> Result<Executor, GpuUnavailable> {
        let gpus = visible_gpus()?;
        let command = locate_worker(options.worker.as_deref(), Role::Gpu)
            .map_err(GpuUnavailable::NoWorker)?;
        let mut specs = Vec::new();
        for g in &gpus {
            for _ in 0..options.workers_per_gpu.max(1) {
                let mut spec = command.spec(Role::Gpu);
                spec.env = vec![("CUDA_VISIBLE_DEVICES".into(), g.clone())];
                specs.push(spec);
            }
        }
        Ok(Executor {
            pool: Pool::new(specs),
            options,
            gpus,
        })
    }

    /// An executor over explicit worker slots, without looking for a driver: the seam for
    /// tests of the pool's failure paths (a `gpu` worker that cannot start, greets wrongly,
    /// dies or hangs must be `unavailable`, never the candidate's fault) and for deployments
    /// that start GPU workers their own way. Each spec should announce the `gpu` role;
    /// `gpus` names the devices for [`Executor::gpus`].
    pub fn with_workers(
        options: ExecOptions,
        gpus: Vec<String>,
        specs: Vec<WorkerSpec>,
    ) -> Executor {
        Executor {
            pool: Pool::new(specs),
            options,
            gpus,
        }
    }

    /// The options.
    pub fn options(&self) -> &ExecOptions {
        &self.options
    }

    /// The GPUs in use.
    pub fn gpus(&self) -> &[String] {
        &self.gpus
    }

    /// GPU worker slots (one or more per visible GPU).
    pub fn workers(&self) -> usize {
        self.pool.len()
    }

    /// Workers replaced so far (timeouts, crashes, sticky errors).
    pub fn restarts(&self) -> u64 {
        self.pool.stats().restarts
    }

    /// A fresh job secret (inputs and timing schedule derive from it), unless pinned.
    pub fn secret(&self) -> JobSecret {
        JobSecret(self.options.seed.unwrap_or_else(fresh_secret))
    }

    /// Runs one job (one candidate or a group); one result per member, always.
    pub fn run(&self, job: ExecJob) -> Vec<ExecResult> {
        self.run_all(vec![job]).pop().unwrap_or_default()
    }

    /// Runs jobs on all workers at once; per job, one result per member, in order.
    pub fn run_all(&self, jobs: Vec<ExecJob>) -> Vec<Vec<ExecResult>> {
        let start = Instant::now();
        let members: Vec<usize> = jobs.iter().map(|j| j.candidates.len()).collect();
        // Candidates never run inside the GPU worker (it starts runner processes for them),
        // so a worker that dies or stops answering is our failure, never a candidate's.
        let grace = Duration::from_secs(15);
        let limit = jobs
            .iter()
            .map(|j| Duration::from_millis(j.deadline_ms))
            .max()
            .unwrap_or(self.options.timeout)
            .max(self.options.timeout);
        self.pool
            .run_all(&jobs, limit + grace)
            .into_iter()
            .zip(members)
            .map(|(o, n)| {
                let ours = |reason: String| {
                    vec![ExecResult::status_only(ExecStatus::Unavailable { reason }); n]
                };
                let mut rs = match o {
                    JobOutcome::Done(rs) if rs.len() == n => rs,
                    JobOutcome::Done(rs) => ours(format!(
                        "the GPU worker answered {} results for {n} candidates",
                        rs.len()
                    )),
                    JobOutcome::Refused { reason } | JobOutcome::Unavailable { reason } => {
                        ours(reason)
                    }
                    JobOutcome::Timeout { limit } => ours(format!(
                        "the GPU worker did not answer within {} ms",
                        limit.as_millis()
                    )),
                    JobOutcome::Crashed {
                        reason,
                        stderr_tail,
                    } => {
                        let tail = crate::sandbox::last_lines(&stderr_tail, 5, " | ");
                        ours(if tail.is_empty() {
                            format!("the GPU worker died: {reason}")
                        } else {
                            format!("the GPU worker died: {reason}; stderr: {tail}")
                        })
                    }
                };
                for r in &mut rs {
                    if r.millis == 0.0 {
                        r.millis = start.elapsed().as_secs_f64() * 1e3;
                    }
                }
                rs
            })
            .collect()
    }
}
