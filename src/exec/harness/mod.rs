//! The `gpu` worker role: the harness of timing protocol v2.
//!
//! The harness never runs a candidate's code. It keeps a [runner](super::runner) process
//! for the reference and one per member of a group (a single candidate is a group of one),
//! each with its own CUDA context, and maps their buffers into its own context (the VMM API:
//! each runner sends file descriptors of its buffers, see [`super::fdpass`]; legacy CUDA IPC
//! where that is not possible). Every side has its own inputs; the reference's outputs, the
//! saved copies, the generated inputs and the checks live in the reference's runner or here,
//! where no member's kernels can address them, and no member can address another's. A side's
//! buffers are allocated once per job, at their largest size over the configurations.
//!
//! Per configuration ([`super::checks`]): set A (reference once, every member once),
//! set A again (members only, fresh poison), set B. Timing ([`super::timed`]) on the
//! largest configuration for the members that passed every configuration: per run, fresh
//! inputs (generated once here, copied into every side), the reference and the members in
//! an order drawn per run, every member's outputs compared with that run's reference
//! outputs and its inputs verified against the generated copy.

mod job_state;
mod memory;
mod plans;
mod run;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use super::driver::{CudaError, Event, Gpu};
use super::job::{ExecJob, JobModule};
use super::report::*;
use super::runner::{RunnerClient, RunnerFault};
use super::settings::GpuSettings;
use super::support::{StatsSlots, Support};
use crate::sandbox::{Handled, Handler};

use job_state::MemberLimit;
pub(crate) use job_state::{JobState, JobTrace, Member};
pub(crate) use memory::{InputSet, JobMemory, JobSizes};
pub(crate) use plans::{runner_launches, side_bytes, ConfigPlans, SidePlan};
use run::reference_fault;
pub(crate) use run::SideRun;

/// Serves [`ExecJob`]s (the `gpu` worker role): one result per member, in order.
#[derive(Default)]
pub struct GpuHandler {
    state: Option<Result<Harness, String>>,
    settings: GpuSettings,
}

impl GpuHandler {
    /// A harness started with `settings` (its runners are started as workers of their own
    /// and read theirs at their start).
    pub fn new(settings: GpuSettings) -> GpuHandler {
        GpuHandler {
            state: None,
            settings,
        }
    }
}

impl Handler for GpuHandler {
    type Job = ExecJob;
    type Reply = Vec<ExecResult>;

    fn handle(&mut self, job: ExecJob) -> Handled<Vec<ExecResult>> {
        let start = Instant::now();
        let settings = &self.settings;
        let harness = match self.state.get_or_insert_with(|| Harness::open(settings)) {
            Ok(h) => h,
            Err(reason) => {
                let r = ExecResult::status_only(ExecStatus::Unavailable {
                    reason: reason.clone(),
                });
                return Handled::ok(vec![r; job.candidates.len()]);
            }
        };
        let (mut results, restart) = harness.execute(&job);
        let millis = start.elapsed().as_secs_f64() * 1e3;
        for r in &mut results {
            r.millis = millis;
        }
        if restart {
            // The harness's own context may be poisoned; nothing more runs in this process.
            self.state = None;
        }
        Handled {
            reply: Ok(results),
            restart,
        }
    }
}

/// Why the whole job stopped (a member's own failure only stops that member).
pub(crate) enum Fault {
    /// The reference failed: the task is broken.
    Reference(String),
    /// Ours (no runner, a harness CUDA error); `true` when the harness must be replaced.
    Ours(String, bool),
}

pub(crate) type Run<T> = Result<T, Fault>;

pub(crate) fn ours<T>(r: Result<T, CudaError>) -> Run<T> {
    r.map_err(|e| Fault::Ours(format!("harness failure: {e}"), true))
}

/// One side of a job.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Who {
    Reference,
    Member(usize),
}

/// The harness: its context, its kernels, and its runners. Every resource of the context
/// holds a handle on it, so the context is released after them in any order.
pub(crate) struct Harness {
    pub gpu: Gpu,
    pub support: Support,
    pub info: DeviceInfo,
    pub max_warps_per_sm: i32,
    pub reference: RunnerClient,
    /// The PyTorch reference's runner (started at the first job that has one).
    pub torch: Option<RunnerClient>,
    /// The interpreter that runs it.
    pub torch_python: std::path::PathBuf,
    pub runners: Vec<RunnerClient>,
    /// Reference spread when it ran alone, per (reference build, config).
    pub calibration: HashMap<(u64, String), f64>,
    pub clock: (Event, Event),
    /// Statistics slots of the checks, kept between batches (grown when a batch needs more).
    pub stats: Option<StatsSlots>,
    /// Where each job's trace is appended ([`GpuSettings::trace_jobs`]).
    pub trace_jobs: Option<std::path::PathBuf>,
}

/// What a member's module can keep between runs (its cubin, base64, as the job carries it).
fn module_state(cubin_b64: &str) -> Result<super::cubin::CubinState, String> {
    use base64::Engine;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(cubin_b64)
        .map_err(|e| e.to_string())?;
    super::cubin::inspect(&bytes).map_err(|e| e.to_string())
}

/// What each member's module can keep between runs decides how it is loaded: with data of
/// its own it is reloaded before every run (`true`); with the device heap it is refused.
fn reload_flags(st: &mut JobState) -> Vec<bool> {
    let job = st.job;
    let mut reload = vec![false; job.candidates.len()];
    for (i, m) in job.candidates.iter().enumerate() {
        match module_state(&m.cubin_b64) {
            Ok(state) if state.uses_heap() => st.stop(
                i,
                ExecStatus::InvalidLaunch {
                    reason: format!(
                        "the module calls the device heap ({}): memory it allocates outlives a run, so it could carry results from one run to the next; device-side malloc/free is not allowed",
                        state.heap_calls.join(", ")
                    ),
                },
            ),
            Ok(state) => reload[i] = state.keeps_data(),
            Err(_) => reload[i] = true,
        }
    }
    reload
}

/// The symbols a runner looks up in a module, in launch order.
fn symbols(m: &JobModule) -> Vec<String> {
    m.symbols.iter().map(|(_, s)| s.clone()).collect()
}

fn key_of(text: &str) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    text.hash(&mut h);
    h.finish()
}

impl Harness {
    fn open(settings: &GpuSettings) -> Result<Harness, String> {
        let (gpu, info, max_warps_per_sm, support, _) =
            super::support::open_gpu(settings.ctx_sched)?;
        let clock = (
            gpu.event().map_err(|e| e.to_string())?,
            gpu.event().map_err(|e| e.to_string())?,
        );
        Ok(Harness {
            support,
            info,
            max_warps_per_sm,
            reference: RunnerClient::new("reference")?,
            torch: None,
            torch_python: settings
                .torch_python
                .clone()
                .unwrap_or_else(|| super::torch::default_python().to_path_buf()),
            runners: Vec::new(),
            calibration: HashMap::new(),
            stats: None,
            clock,
            gpu,
            trace_jobs: settings.trace_jobs.clone(),
        })
    }

    /// Runs a job; the flag asks the pool to replace this worker.
    fn execute(&mut self, job: &ExecJob) -> (Vec<ExecResult>, bool) {
        let n = job.candidates.len();
        while self.runners.len() < n {
            match RunnerClient::new("candidate") {
                Ok(r) => self.runners.push(r),
                Err(reason) => {
                    let r = ExecResult::status_only(ExecStatus::Unavailable { reason });
                    return (vec![r; n], false);
                }
            }
        }
        let mut st = JobState::start(job);
        let started = Instant::now();
        let outcome = self.run_job(&mut st);
        let reset = Instant::now();
        // The members' modules and memory go now, not at the next job (in parallel: each
        // runner scrubs its buffers before freeing them).
        self.reset_runners(n);
        st.trace.reset_ms = ms_since(reset);
        st.trace.wall_ms = ms_since(started);
        st.trace.run_gpu_ms = st.runs_ms;
        st.trace.harness_gpu_ms = st.harness_ms;
        write_trace(self.trace_jobs.as_deref(), &st.trace);
        let mut restart = false;
        let job_gpu_ms = st.runs_ms + st.harness_ms;
        let results = match outcome {
            Ok(()) => st
                .members
                .into_iter()
                .map(|m| self.member_result(job, m, n, job_gpu_ms))
                .collect(),
            Err(fault) => {
                let status = match fault {
                    Fault::Reference(reason) => ExecStatus::ReferenceFailed { reason },
                    Fault::Ours(reason, r) => {
                        restart = r;
                        ExecStatus::Unavailable { reason }
                    }
                };
                let mut r = ExecResult::status_only(status);
                r.device = Some(self.info.clone());
                vec![r; n]
            }
        };
        (results, restart)
    }

    /// What member `m` of a job that ran to its end comes to.
    fn member_result(&self, job: &ExecJob, m: Member, n: usize, job_gpu_ms: f64) -> ExecResult {
        let (status, correctness, timing) = match m.stopped {
            Some(s) => (s, None, None),
            None => {
                let passed = m.checks.iter().filter(|c| c.passed).count();
                let all = passed == m.checks.len() && !m.checks.is_empty();
                let pass_rate = if m.checks.is_empty() {
                    0.0
                } else {
                    passed as f64 / m.checks.len() as f64
                };
                (
                    ExecStatus::Ok,
                    Some(CorrectnessStage {
                        passed: all,
                        pass_rate,
                        configs: m.checks,
                        seed: job.secret.0,
                        protocol: PROTOCOL_VERSION,
                        precision: job.precision.clone(),
                    }),
                    // A config timed before a later one failed awards nothing.
                    m.timing.filter(|_| all),
                )
            }
        };
        ExecResult {
            status,
            correctness,
            timing,
            device: Some(self.info.clone()),
            millis: 0.0,
            gpu_millis: m.gpu_ms,
            job_gpu_millis: job_gpu_ms,
            job_members: n as u32,
        }
    }

    /// Resets the first `n` runners: the members' modules and memory go now.
    fn reset_runners(&mut self, n: usize) {
        std::thread::scope(|s| {
            for r in self.runners.iter_mut().take(n) {
                s.spawn(move || {
                    let _ = r.reset(Duration::from_secs(10));
                });
            }
        });
    }

    fn run_job(&mut self, st: &mut JobState) -> Run<()> {
        let job = st.job;
        if job.params.len() != job.configs.first().map_or(0, |c| c.scalars.len())
            || job
                .configs
                .iter()
                .any(|c| c.candidates.len() != job.candidates.len())
        {
            return Err(Fault::Ours(
                "malformed job: parameters, config scalars or member plans disagree".into(),
                false,
            ));
        }
        let ref_key = match &job.torch_reference {
            Some(t) => key_of(&format!("torch {}\n{}", t.mode.as_str(), t.source)),
            None => key_of(&job.reference.cubin_b64),
        };
        self.load_reference(st, ref_key)?;
        self.load_members(st)?;
        let cap = if job.max_device_bytes > 0 {
            job.max_device_bytes
        } else {
            self.gpu.free_memory() / 10 * 9
        };
        // Every side's buffers are allocated once for the job, each at its largest size over
        // the configs; a config uses their starts. Members whose memory would not fit are an
        // invalid launch; the rest go on.
        let sizes = JobSizes::new(job);
        self.admit(st, &sizes, cap)?;
        if st.active().is_empty() {
            return Ok(());
        }
        let t = Instant::now();
        let mem = self.alloc_job(st, &sizes)?;
        st.trace.alloc_ms += ms_since(t);
        self.run_configs(st, &mem, ref_key)?;
        let t = Instant::now();
        drop(mem);
        st.trace.alloc_ms += ms_since(t);
        Ok(())
    }

    /// Loads the job's reference (the trusted reference is reloaded only when it changes).
    fn load_reference(&mut self, st: &JobState, ref_key: u64) -> Run<()> {
        let job = st.job;
        // The reference is trusted and stateless: reloaded only when it changes. Every
        // member gets a fresh module (fresh `__device__` globals) for every job.
        let limit = self.limit(st)?;
        let loaded = match &job.torch_reference {
            Some(t) => {
                self.reference_runner(job)?
                    .load_torch(t, job.buffers.clone(), ref_key, limit)
            }
            None => self.reference.load(
                &job.reference.cubin_b64,
                symbols(&job.reference),
                Some(ref_key),
                false,
                limit,
            ),
        };
        loaded.map_err(|f| reference_fault("the reference failed to load", f))?;
        Ok(())
    }

    /// Loads every member's module, each in a fresh module for this job.
    fn load_members(&mut self, st: &mut JobState) -> Run<()> {
        let job = st.job;
        // Members load in parallel: a runner that has to start first (process, CUDA
        // context) costs a few hundred milliseconds.
        let t = Instant::now();
        // What each member's module can keep between runs decides how it is loaded: with
        // data of its own it is reloaded before every run; with the device heap it is
        // refused (the heap outlives any reload).
        let reload = reload_flags(st);
        let limits = st.active_limits()?;
        st.trace.reloaded_members = reload.iter().filter(|&&r| r).count();
        let loads = self.load_parallel(job, &limits, &reload);
        for (i, (l, limit)) in loads.into_iter().zip(&limits).enumerate() {
            if let (Some((Err(f), took)), Some(limit)) = (l, limit) {
                st.charge(i, took);
                st.member_failed(i, f, limit)?;
            }
        }
        st.trace.load_ms = ms_since(t);
        Ok(())
    }

    /// Each member with a limit loads its module in its runner, all in parallel; per member,
    /// the outcome and the wall time it took (`None`: not loaded).
    fn load_parallel(
        &mut self,
        job: &ExecJob,
        limits: &[Option<MemberLimit>],
        reload: &[bool],
    ) -> Vec<Option<(Result<(), RunnerFault>, Duration)>> {
        std::thread::scope(|s| {
            let handles: Vec<_> = self
                .runners
                .iter_mut()
                .zip(&job.candidates)
                .zip(limits)
                .zip(reload)
                .map(|(((r, m), l), &each)| {
                    let syms = symbols(m);
                    l.as_ref().map(|l| {
                        let limit = l.limit;
                        s.spawn(move || {
                            let t = Instant::now();
                            (r.load(&m.cubin_b64, syms, None, each, limit), t.elapsed())
                        })
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.map(|h| {
                        h.join().unwrap_or_else(|_| {
                            (
                                Err(RunnerFault::Unavailable("a loader thread panicked".into())),
                                Duration::ZERO,
                            )
                        })
                    })
                })
                .collect()
        })
    }

    /// Stops the members whose buffers would not fit under `cap` bytes with the reference's
    /// and the generated inputs'; fails the job when the task itself does not fit.
    fn admit(&self, st: &mut JobState, sizes: &JobSizes, cap: u64) -> Run<()> {
        let job = st.job;
        let mut need = sizes.reference.iter().sum::<u64>() + sizes.generated.iter().sum::<u64>();
        // The task itself must fit with one scratch-free candidate: otherwise every member
        // would be refused for a size it did not choose, and that is ours, not theirs.
        let abi = (job.configs.iter())
            .map(|c| {
                (0..job.buffers.len())
                    .map(|i| job.buffer_bytes(c, i))
                    .sum::<u64>()
            })
            .max()
            .unwrap_or(0);
        let least = need + abi + sizes.saved.iter().sum::<u64>();
        if least > cap {
            return Err(Fault::Ours(
                format!(
                    "the task's buffers need {least} bytes of device memory for one candidate (reference, generated inputs, the candidate's buffers and saved outputs), more than the job's cap of {cap} bytes (ExecOptions::max_device_bytes; default 90% of the GPU's free memory)"
                ),
                false,
            ));
        }
        for i in st.active() {
            let own = sizes.members[i].iter().sum::<u64>() + sizes.saved.iter().sum::<u64>();
            if own + need > cap {
                let largest = job
                    .configs
                    .iter()
                    .max_by_key(|c| {
                        side_bytes(job, c, &c.candidates[i], &job.candidates[i].scratch)
                            .iter()
                            .sum::<u64>()
                    })
                    .map_or("?", |c| c.name.as_str());
                st.stop(
                    i,
                    ExecStatus::InvalidLaunch {
                        reason: format!(
                            "config `{largest}` needs {own} bytes of device memory for this candidate (buffers, scratch and saved copies, each at its largest over the configs), more than the {} left under the cap of {cap}",
                            cap.saturating_sub(need)
                        ),
                    },
                );
            } else {
                need += own;
            }
        }
        Ok(())
    }

    /// Checks every config in order, and times the timing config.
    fn run_configs(&mut self, st: &mut JobState, mem: &JobMemory, ref_key: u64) -> Run<()> {
        let job = st.job;
        for (k, c) in job.configs.iter().enumerate() {
            if st.active().is_empty() {
                break;
            }
            mem.pristine_set.set(None);
            let plans = ConfigPlans::new(job, k, c);
            let t = Instant::now();
            self.check_config(st, k, c, mem, &plans)?;
            st.trace.check_ms += ms_since(t);
            if k == job.timing_config {
                if let Some(opts) = job.timing {
                    let t = Instant::now();
                    self.time_config(st, c, mem, &plans, &opts, ref_key)?;
                    st.trace.time_ms += ms_since(t);
                }
            }
        }
        Ok(())
    }
}

fn ms_since(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}

/// Appends the job's trace to `path` ([`GpuSettings::trace_jobs`]), when set (best effort:
/// a diagnostic).
fn write_trace(path: Option<&std::path::Path>, trace: &JobTrace) {
    let Some(path) = path else {
        return;
    };
    if let Ok(line) = serde_json::to_string(trace) {
        use std::io::Write;
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
        {
            let _ = writeln!(f, "{line}");
        }
    }
}
