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

use std::collections::HashMap;
use std::time::{Duration, Instant};

use super::driver::{CudaError, DevSlice, DeviceBuffer, Event, Gpu, IpcMapping};
use super::job::{ExecJob, JobConfig, JobModule, JobParam};
use super::report::*;
use super::runner::{BufferShare, RunArg, RunLaunch, RunnerClient, RunnerFault, ZeroRange};
use super::settings::GpuSettings;
use super::support::{StatsSlots, Support};
use super::values::{arg_i32, scalar_arg};
use crate::candidate::{ResolvedArg, ResolvedPlan};
use crate::sandbox::{Handled, Handler};
use crate::task::{DType, Direction};

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

/// What happened to one member so far.
pub(crate) struct Member {
    /// Set once the member failed in a way that stops it (its fault, timeout, crash).
    pub stopped: Option<ExecStatus>,
    /// Its per-config checks.
    pub checks: Vec<ConfigCheck>,
    /// Its timing, once measured.
    pub timing: Option<TimingStage>,
    /// GPU time of its own runs, ms.
    pub gpu_ms: f64,
    /// Wall time of its runner's calls so far (load, allocation, runs): its own budget.
    pub spent: Duration,
    /// The config its buffers' slack was last zeroed for.
    pub slack_zeroed: Option<usize>,
}

impl Member {
    pub fn active(&self) -> bool {
        self.stopped.is_none()
    }

    pub fn passed_so_far(&self) -> bool {
        self.active() && self.checks.iter().all(|c| c.passed)
    }
}

/// One side's buffers of one configuration, mapped here.
pub(crate) struct SideMemory {
    /// Per ABI buffer, the runner's buffer.
    pub mapped: Vec<IpcMapping>,
    /// Per ABI buffer, a harness-owned copy of this side's output (members' outputs only).
    pub saved: Vec<Option<DeviceBuffer>>,
}

impl SideMemory {
    pub fn slices(&self) -> Vec<DevSlice> {
        self.mapped.iter().map(IpcMapping::slice).collect()
    }

    /// The saved copies (the live buffer where there is none: inputs).
    pub fn saved_slices(&self) -> Vec<DevSlice> {
        self.saved
            .iter()
            .zip(&self.mapped)
            .map(|(s, m)| s.as_ref().map_or(m.slice(), DeviceBuffer::slice))
            .collect()
    }
}

impl Drop for JobMemory {
    fn drop(&mut self) {
        for s in self.reference_saved.iter().flatten() {
            s.scrub();
        }
    }
}

impl Drop for SideMemory {
    fn drop(&mut self) {
        for s in self.saved.iter().flatten() {
            s.scrub();
        }
        // The mappings close before the runner frees the memory behind them.
        self.mapped.clear();
    }
}

/// One input set: the values every side of a run is given. Every element derives from the
/// job's secret through `seed`; the regime and the probe choose which distributions and which
/// low-order bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct InputSet {
    pub seed: u64,
    /// The config's regime that fills it (`None`: the main distributions).
    pub regime: Option<usize>,
    /// The precision probe: `None` off; `Some(false)` its base set (every probed input with
    /// the first draw of its low-order bits); `Some(true)` every probed input with the second.
    pub probe: Option<bool>,
}

impl InputSet {
    /// The main distributions' set `seed`.
    pub fn main(seed: u64) -> InputSet {
        InputSet {
            seed,
            regime: None,
            probe: None,
        }
    }
}

/// A job's device memory, as the harness sees it (each config uses the start of every buffer).
pub(crate) struct JobMemory {
    pub reference: SideMemory,
    /// Per ABI buffer, a harness-owned copy of the reference's output (the precision probe
    /// compares two runs of each side).
    pub reference_saved: Vec<Option<DeviceBuffer>>,
    /// Per member (`None` for members no longer running).
    pub members: Vec<Option<SideMemory>>,
    /// Per ABI buffer with a fill, the input set generated once here (harness-owned, out of
    /// every runner's reach): sides get copies of it, and their inputs are verified against it.
    pub pristine: Vec<Option<DeviceBuffer>>,
    /// The input set `pristine` holds now.
    pub pristine_set: std::cell::Cell<Option<InputSet>>,
}

impl JobMemory {
    pub fn side(&self, who: Who) -> Option<&SideMemory> {
        match who {
            Who::Reference => Some(&self.reference),
            Who::Member(i) => self.members.get(i).and_then(Option::as_ref),
        }
    }
}

/// Where a job's wall time went (`$CUDAPERF_TRACE_JOBS`: a file that gets one JSON line per
/// job). Host-side figures only; they change nothing in the job.
#[derive(Debug, Default, serde::Serialize)]
pub(crate) struct JobTrace {
    pub members: usize,
    pub wall_ms: f64,
    pub load_ms: f64,
    pub alloc_ms: f64,
    pub check_ms: f64,
    pub time_ms: f64,
    pub reset_ms: f64,
    /// Runner runs: how many, the host wall time of their calls, their GPU time.
    pub runs: u32,
    pub run_call_ms: f64,
    pub run_gpu_ms: f64,
    /// Members whose module keeps data and is reloaded before every run; how many reloads
    /// that took and their wall time in the runners.
    pub reloaded_members: usize,
    pub reloads: u32,
    pub reload_ms: f64,
    /// The harness's waits for its own GPU work, and that work's GPU time.
    pub syncs: u32,
    pub sync_wait_ms: f64,
    pub harness_gpu_ms: f64,
}

/// A job in progress: its deadline, its members, and the GPU time it used.
///
/// Time limits are by cause: one runner call of a member may take `run_limit`, and all of a
/// member's calls together `member_budget`; a member past either is a `timeout` and is
/// stopped alone. The job's own `deadline` (reference, harness work and every member's
/// budget, with headroom) only binds when something of ours is stuck, which is `unavailable`.
pub(crate) struct JobState<'a> {
    pub job: &'a ExecJob,
    deadline: Instant,
    run_limit: Duration,
    member_budget: Duration,
    pub members: Vec<Member>,
    /// GPU time of every run of every side, ms.
    pub runs_ms: f64,
    /// GPU time of the harness's own launches (inputs, poison, checks), ms.
    pub harness_ms: f64,
    flush_counter: u32,
    pub trace: JobTrace,
}

/// How long a member's next runner call may take, and the status if it runs out.
pub(crate) struct MemberLimit {
    /// The limit of the call.
    pub limit: Duration,
    /// What the member gets when the call runs past `limit` (`None`: the job's deadline is
    /// what binds, so a call past it is ours).
    pub on_timeout: Option<ExecStatus>,
}

impl MemberLimit {
    /// The limit of a member's call: its per-run limit, what is left of its budget, and
    /// what is left of the job's deadline, whichever is least. `None` when its budget is
    /// already spent.
    pub fn of(
        run_limit: Duration,
        budget: Duration,
        spent: Duration,
        job_left: Duration,
    ) -> Option<MemberLimit> {
        let left = budget.saturating_sub(spent);
        if left.is_zero() {
            return None;
        }
        let own = run_limit.min(left);
        Some(if job_left < own {
            MemberLimit {
                limit: job_left,
                on_timeout: None,
            }
        } else {
            MemberLimit {
                limit: own,
                on_timeout: Some(ExecStatus::Timeout {
                    limit_ms: if run_limit <= left { run_limit } else { budget }.as_millis() as u64,
                }),
            }
        })
    }
}

impl JobState<'_> {
    /// The limit of member `i`'s next runner call; `Ok(None)` when its budget is spent (it is
    /// stopped as a `timeout` then), `Err` when the job's deadline has passed (ours).
    pub fn member_limit(&mut self, i: usize) -> Run<Option<MemberLimit>> {
        let job_left = self.deadline.saturating_duration_since(Instant::now());
        if job_left.is_zero() {
            return Err(self.deadline_passed());
        }
        let spent = self.members.get(i).map_or(Duration::ZERO, |m| m.spent);
        match MemberLimit::of(self.run_limit, self.member_budget, spent, job_left) {
            Some(l) => Ok(Some(l)),
            None => {
                let limit_ms = self.member_budget.as_millis() as u64;
                self.stop(i, ExecStatus::Timeout { limit_ms });
                Ok(None)
            }
        }
    }

    /// Adds the wall time of a runner call to member `i`'s budget.
    pub fn charge(&mut self, i: usize, took: Duration) {
        if let Some(m) = self.members.get_mut(i) {
            m.spent += took;
        }
    }

    /// What member `i`'s failed call comes to: its own fault stops it, ours fails the job.
    pub fn member_failed(&mut self, i: usize, f: RunnerFault, limit: &MemberLimit) -> Run<()> {
        let status = match f {
            RunnerFault::Timeout(_) => match &limit.on_timeout {
                Some(s) => s.clone(),
                None => return Err(self.deadline_passed()),
            },
            other => member_status(other)?,
        };
        self.stop(i, status);
        Ok(())
    }

    fn deadline_passed(&self) -> Fault {
        Fault::Ours(
            format!(
                "the job's {} ms ran out (each member may take {} ms per run and {} ms in all)",
                self.job.deadline_ms,
                self.run_limit.as_millis(),
                self.member_budget.as_millis()
            ),
            false,
        )
    }

    /// Members still running.
    pub fn active(&self) -> Vec<usize> {
        (0..self.members.len())
            .filter(|&i| self.members[i].active())
            .collect()
    }

    /// Stops member `i` with `status` (its own failure).
    pub fn stop(&mut self, i: usize, status: ExecStatus) {
        if let Some(m) = self.members.get_mut(i) {
            if m.stopped.is_none() {
                m.stopped = Some(status);
            }
        }
    }
}

/// What a runner call for one side came to.
pub(crate) enum SideRun<T> {
    /// It answered.
    Ok(T),
    /// The member failed by its own doing and is stopped now.
    MemberStopped,
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

/// The kernel launches of one side's plan, for its runner (`nb` ABI buffers come first in
/// the runner's allocation, scratch buffers after them).
pub(crate) fn runner_launches(job: &ExecJob, c: &JobConfig, plan: &ResolvedPlan) -> Vec<RunLaunch> {
    let nb = job.buffers.len();
    plan.launches
        .iter()
        .enumerate()
        .map(|(li, l)| RunLaunch {
            function: li,
            grid: l.grid,
            block: l.block,
            smem: l.smem,
            args: l
                .args
                .iter()
                .map(|a| match a {
                    ResolvedArg::Param { index } => match job.params.get(*index) {
                        Some(JobParam::Buffer { buffer }) => RunArg::Buffer { index: *buffer },
                        Some(JobParam::Scalar { dtype }) => RunArg::Value {
                            bits: u64::from_le_bytes(scalar_arg(
                                *dtype,
                                c.scalars.get(*index).copied().unwrap_or(0.0),
                            )),
                        },
                        None => RunArg::Value { bits: 0 },
                    },
                    ResolvedArg::Scratch { index } => RunArg::Buffer { index: nb + index },
                    ResolvedArg::Int { value } => RunArg::Value {
                        bits: u64::from_le_bytes(arg_i32(*value)),
                    },
                })
                .collect(),
        })
        .collect()
}

/// A side's plan in runner form: launches, the buffers to zero in the timed window, and the
/// bytes of each buffer the config uses (the runner zeroes the rest before the run; empty
/// for the trusted reference).
pub(crate) struct SidePlan {
    pub launches: Vec<RunLaunch>,
    pub zero: Vec<ZeroRange>,
    pub used: Vec<u64>,
    /// The config (index into the job's) and whether it is the timed one.
    pub config: usize,
    pub timed: bool,
}

/// The runner launches of every side of one config, built once for its checks and timing.
pub(crate) struct ConfigPlans {
    pub reference: SidePlan,
    pub members: Vec<SidePlan>,
}

impl ConfigPlans {
    pub fn new(job: &ExecJob, k: usize, c: &JobConfig) -> ConfigPlans {
        let side = |plan: &ResolvedPlan, scratch: &[DType]| SidePlan {
            config: k,
            timed: k == job.timing_config,
            ..SidePlan::new(job, c, plan, scratch)
        };
        let mut reference = side(&c.reference, &job.reference.scratch);
        reference.used.clear();
        ConfigPlans {
            reference,
            members: c
                .candidates
                .iter()
                .zip(&job.candidates)
                .map(|(p, m)| side(p, &m.scratch))
                .collect(),
        }
    }
}

impl SidePlan {
    pub fn new(job: &ExecJob, c: &JobConfig, plan: &ResolvedPlan, scratch: &[DType]) -> SidePlan {
        let nb = job.buffers.len();
        SidePlan {
            launches: runner_launches(job, c, plan),
            zero: plan
                .scratch_lens
                .iter()
                .zip(scratch)
                .enumerate()
                .map(|(k, (n, d))| ZeroRange {
                    buffer: nb + k,
                    bytes: n * d.size_bytes(),
                })
                .collect(),
            used: side_bytes(job, c, plan, scratch),
            config: 0,
            timed: false,
        }
    }
}

/// Bytes of each buffer a side's runner holds: the ABI buffers, then its scratch.
pub(crate) fn side_bytes(
    job: &ExecJob,
    c: &JobConfig,
    plan: &ResolvedPlan,
    scratch: &[DType],
) -> Vec<u64> {
    job.buffers
        .iter()
        .zip(&c.lens)
        .map(|(b, n)| n * b.dtype.size_bytes())
        .chain(
            plan.scratch_lens
                .iter()
                .zip(scratch)
                .map(|(n, d)| n * d.size_bytes()),
        )
        .collect()
}

/// Bytes of every buffer of a job, each at its largest over the configs (what is allocated
/// once for the whole job).
pub(crate) struct JobSizes {
    /// The reference's ABI buffers, then its scratch.
    pub reference: Vec<u64>,
    /// Per member, its ABI buffers, then its scratch.
    pub members: Vec<Vec<u64>>,
    /// Per ABI buffer, the harness's generated copy (0: the buffer is not generated).
    pub generated: Vec<u64>,
    /// Per ABI buffer, the harness's saved copy of a member's output (0: not an output).
    pub saved: Vec<u64>,
}

impl JobSizes {
    pub fn new(job: &ExecJob) -> JobSizes {
        let most = |per: &dyn Fn(&JobConfig) -> Vec<u64>| -> Vec<u64> {
            let mut out: Vec<u64> = Vec::new();
            for c in &job.configs {
                let v = per(c);
                if out.len() < v.len() {
                    out.resize(v.len(), 0);
                }
                for (o, x) in out.iter_mut().zip(v) {
                    *o = (*o).max(x);
                }
            }
            out
        };
        let abi = |c: &JobConfig, keep: &dyn Fn(usize) -> bool| -> Vec<u64> {
            (0..job.buffers.len())
                .map(|i| if keep(i) { job.buffer_bytes(c, i) } else { 0 })
                .collect()
        };
        JobSizes {
            reference: most(&|c| side_bytes(job, c, &c.reference, &job.reference.scratch)),
            members: (0..job.candidates.len())
                .map(|i| {
                    most(&|c| side_bytes(job, c, &c.candidates[i], &job.candidates[i].scratch))
                })
                .collect(),
            generated: most(&|c| abi(c, &|i| c.fills[i].is_some())),
            saved: most(&|c| abi(c, &|i| job.buffers[i].direction.is_output())),
        }
    }
}

/// The seed of buffer `i` within an input set.
pub(crate) fn buffer_seed(seed: u64, i: usize) -> u64 {
    seed ^ 0x9E37_79B9_7F4A_7C15u64.wrapping_mul(i as u64 + 1)
}

/// What a member's module can keep between runs (its cubin, base64, as the job carries it).
fn module_state(cubin_b64: &str) -> Result<super::cubin::CubinState, String> {
    use base64::Engine;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(cubin_b64)
        .map_err(|e| e.to_string())?;
    super::cubin::inspect(&bytes).map_err(|e| e.to_string())
}

fn key_of(text: &str) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    text.hash(&mut h);
    h.finish()
}

/// A member's failure other than a timeout (timeouts depend on which limit bound: see
/// [`JobState::member_failed`]).
fn member_status(f: RunnerFault) -> Result<ExecStatus, Fault> {
    match f {
        RunnerFault::Unavailable(r) => Err(Fault::Ours(r, false)),
        RunnerFault::Cuda(e) => Ok(ExecStatus::CudaError {
            code: e.code,
            name: e.name,
            during: e.during,
        }),
        RunnerFault::Timeout(d) => Ok(ExecStatus::Timeout {
            limit_ms: d.as_millis() as u64,
        }),
        RunnerFault::Crashed(r) => Ok(ExecStatus::Crashed { reason: r }),
    }
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
        let deadline_ms = if job.deadline_ms > 0 {
            job.deadline_ms
        } else {
            600_000
        };
        let member_budget = Duration::from_millis(if job.member_budget_ms > 0 {
            job.member_budget_ms
        } else {
            deadline_ms
        });
        let run_limit = if job.run_limit_ms > 0 {
            Duration::from_millis(job.run_limit_ms)
        } else {
            member_budget
        };
        let mut st = JobState {
            job,
            deadline: Instant::now() + Duration::from_millis(deadline_ms),
            run_limit,
            member_budget,
            members: (0..n)
                .map(|_| Member {
                    stopped: None,
                    checks: Vec::new(),
                    timing: None,
                    gpu_ms: 0.0,
                    spent: Duration::ZERO,
                    slack_zeroed: None,
                })
                .collect(),
            runs_ms: 0.0,
            harness_ms: 0.0,
            flush_counter: (job.seed >> 32) as u32,
            trace: JobTrace {
                members: n,
                ..Default::default()
            },
        };
        let started = Instant::now();
        let outcome = self.run_job(&mut st);
        let reset = Instant::now();
        // The members' modules and memory go now, not at the next job (in parallel: each
        // runner scrubs its buffers before freeing them).
        std::thread::scope(|s| {
            for r in self.runners.iter_mut().take(n) {
                s.spawn(move || {
                    let _ = r.reset(Duration::from_secs(10));
                });
            }
        });
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
                .map(|m| {
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
                                    seed: job.seed,
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
                })
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
        let symbols =
            |m: &JobModule| -> Vec<String> { m.symbols.iter().map(|(_, s)| s.clone()).collect() };
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
        // Members load in parallel: a runner that has to start first (process, CUDA
        // context) costs a few hundred milliseconds.
        let t = Instant::now();
        // What each member's module can keep between runs decides how it is loaded: with
        // data of its own it is reloaded before every run; with the device heap it is
        // refused (the heap outlives any reload).
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
        let mut limits = Vec::with_capacity(job.candidates.len());
        for i in 0..job.candidates.len() {
            limits.push(if st.members[i].active() {
                st.member_limit(i)?
            } else {
                None
            });
        }
        st.trace.reloaded_members = reload.iter().filter(|&&r| r).count();
        let loads: Vec<Option<(Result<(), RunnerFault>, Duration)>> = std::thread::scope(|s| {
            let handles: Vec<_> = self
                .runners
                .iter_mut()
                .zip(&job.candidates)
                .zip(&limits)
                .zip(&reload)
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
        });
        for (i, (l, limit)) in loads.into_iter().zip(&limits).enumerate() {
            if let (Some((Err(f), took)), Some(limit)) = (l, limit) {
                st.charge(i, took);
                st.member_failed(i, f, limit)?;
            }
        }
        st.trace.load_ms = ms_since(t);
        let cap = if job.max_device_bytes > 0 {
            job.max_device_bytes
        } else {
            self.gpu.free_memory() / 10 * 9
        };
        // Every side's buffers are allocated once for the job, each at its largest size over
        // the configs; a config uses their starts. Members whose memory would not fit are an
        // invalid launch; the rest go on.
        let sizes = JobSizes::new(job);
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
        if st.active().is_empty() {
            return Ok(());
        }
        let t = Instant::now();
        let mem = self.alloc_job(st, &sizes)?;
        st.trace.alloc_ms += ms_since(t);
        for (k, c) in job.configs.iter().enumerate() {
            if st.active().is_empty() {
                break;
            }
            mem.pristine_set.set(None);
            let plans = ConfigPlans::new(job, k, c);
            let t = Instant::now();
            self.check_config(st, k, c, &mem, &plans)?;
            st.trace.check_ms += ms_since(t);
            if k == job.timing_config {
                if let Some(opts) = job.timing {
                    let t = Instant::now();
                    self.time_config(st, c, &mem, &plans, &opts, ref_key)?;
                    st.trace.time_ms += ms_since(t);
                }
            }
        }
        let t = Instant::now();
        drop(mem);
        st.trace.alloc_ms += ms_since(t);
        Ok(())
    }

    /// The runner of the job's reference: the CUDA reference's, or the PyTorch runner
    /// (started here the first time; a runner that cannot start is ours).
    fn reference_runner(&mut self, job: &ExecJob) -> Run<&mut RunnerClient> {
        if job.torch_reference.is_none() {
            return Ok(&mut self.reference);
        }
        if self.torch.is_none() {
            let r = RunnerClient::torch(&self.torch_python)
                .map_err(|reason| Fault::Ours(reason, false))?;
            self.torch = Some(r);
        }
        self.torch
            .as_mut()
            .ok_or_else(|| Fault::Ours("no PyTorch runner".into(), false))
    }

    /// Time left for the next call of the reference or the harness; `Err` once the job's
    /// deadline has passed.
    pub fn limit(&self, st: &JobState) -> Run<Duration> {
        let left = st.deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(st.deadline_passed());
        }
        Ok(left)
    }

    fn alloc_job(&mut self, st: &mut JobState, sizes: &JobSizes) -> Run<JobMemory> {
        let job = st.job;
        let limit = self.limit(st)?;
        let handles = self
            .reference_runner(job)?
            .alloc(sizes.reference.clone(), limit)
            .map_err(|f| reference_fault("the reference's buffers", f))?;
        let reference = self.map_side(job, &handles, &sizes.reference, "reference", None)?;
        // The members' runners allocate in parallel (each a process round trip and a few
        // large cuMemAllocs); the harness then maps their buffers one by one.
        let mut limits = Vec::with_capacity(job.candidates.len());
        for i in 0..job.candidates.len() {
            limits.push(if st.members[i].active() {
                st.member_limit(i)?
            } else {
                None
            });
        }
        type Alloc = (Result<Vec<BufferShare>, RunnerFault>, Duration);
        let allocs: Vec<Option<Alloc>> = std::thread::scope(|s| {
            let handles: Vec<_> = self
                .runners
                .iter_mut()
                .zip(&sizes.members)
                .zip(&limits)
                .map(|((r, cb), l)| {
                    l.as_ref().map(|l| {
                        let limit = l.limit;
                        s.spawn(move || {
                            let t = Instant::now();
                            (r.alloc(cb.clone(), limit), t.elapsed())
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
                                Err(RunnerFault::Unavailable(
                                    "an allocating thread panicked".into(),
                                )),
                                Duration::ZERO,
                            )
                        })
                    })
                })
                .collect()
        });
        let mut members = Vec::new();
        for (i, (a, limit)) in allocs.into_iter().zip(&limits).enumerate() {
            match (a, limit) {
                (Some((Ok(handles), took)), _) => {
                    st.charge(i, took);
                    members.push(Some(self.map_side(
                        job,
                        &handles,
                        &sizes.members[i],
                        "candidate",
                        Some(&sizes.saved),
                    )?))
                }
                (Some((Err(f), took)), Some(limit)) => {
                    st.charge(i, took);
                    st.member_failed(i, f, limit)?;
                    members.push(None);
                }
                _ => members.push(None),
            }
        }
        let pristine = job
            .buffers
            .iter()
            .zip(&sizes.generated)
            .map(|(b, &bytes)| {
                (bytes > 0)
                    .then(|| {
                        ours(
                            self.gpu
                                .alloc(bytes as usize, &format!("generated inputs `{}`", b.name)),
                        )
                    })
                    .transpose()
            })
            .collect::<Run<Vec<_>>>()?;
        let reference_saved = job
            .buffers
            .iter()
            .zip(&sizes.saved)
            .map(|(b, &bytes)| {
                (bytes > 0
                    && job
                        .configs
                        .iter()
                        .any(|c| c.probes.iter().any(Option::is_some)))
                .then(|| {
                    ours(self.gpu.alloc(
                        bytes as usize,
                        &format!("saved reference output `{}`", b.name),
                    ))
                })
                .transpose()
            })
            .collect::<Run<Vec<_>>>()?;
        Ok(JobMemory {
            reference,
            reference_saved,
            members,
            pristine,
            pristine_set: std::cell::Cell::new(None),
        })
    }

    /// Maps a side's buffers here; `saved` gives the bytes of the harness-owned copy of
    /// each output (members only).
    fn map_side(
        &self,
        job: &ExecJob,
        handles: &[BufferShare],
        bytes: &[u64],
        who: &str,
        saved: Option<&[u64]>,
    ) -> Run<SideMemory> {
        let mut mapped = Vec::new();
        let mut copies = Vec::new();
        for (i, ((h, b), buf)) in handles.iter().zip(bytes).zip(&job.buffers).enumerate() {
            let what = format!("{who} buffer `{}`", buf.name);
            mapped.push(ours(match h {
                BufferShare::Fd(fd) => self.gpu.import_shared(fd, *b as usize, &what),
                BufferShare::Ipc(h) => self.gpu.open_ipc(h, *b as usize, &what),
            })?);
            let keep = saved.and_then(|s| s.get(i)).copied().unwrap_or(0);
            copies.push(if keep > 0 {
                Some(ours(self.gpu.alloc(
                    keep as usize,
                    &format!("saved output `{}`", buf.name),
                ))?)
            } else {
                None
            });
        }
        Ok(SideMemory {
            mapped,
            saved: copies,
        })
    }

    /// Records the harness clock's start (the harness's own GPU work is timed).
    pub fn clock_start(&self) -> Run<()> {
        ours(self.clock.0.record(self.gpu.stream()))
    }

    /// Stops the harness clock and waits for the stream; adds the span to the job.
    pub fn clock_stop_sync(&self, st: &mut JobState, what: &str) -> Run<()> {
        ours(self.clock.1.record(self.gpu.stream()))?;
        let t = Instant::now();
        ours(self.gpu.sync(|| format!("synchronize after {what}")))?;
        st.trace.syncs += 1;
        st.trace.sync_wait_ms += ms_since(t);
        st.harness_ms += f64::from(ours(self.clock.1.elapsed_since(&self.clock.0))?);
        Ok(())
    }

    /// Makes `mem`'s generated inputs hold input set `set` (enqueued).
    pub fn generate(
        &self,
        st: &JobState,
        c: &JobConfig,
        mem: &JobMemory,
        set: InputSet,
    ) -> Run<()> {
        if mem.pristine_set.get() == Some(set) {
            return Ok(());
        }
        let fills = match set.regime {
            Some(r) => c.regimes.get(r).map_or(&c.fills, |r| &r.fills),
            None => &c.fills,
        };
        for (i, b) in st.job.buffers.iter().enumerate() {
            if let (Some(Some(f)), Some(Some(dst))) = (fills.get(i), mem.pristine.get(i)) {
                let seed = buffer_seed(set.seed, i);
                let stream = self.gpu.stream();
                ours(
                    self.support
                        .fill(dst.slice(), b.dtype, c.lens[i], seed, f, stream),
                )?;
                if let (Some(changed), Some(Some(bits))) = (set.probe, c.probes.get(i)) {
                    let draw = u64::from(changed);
                    let seed = super::timing::derive_seed(seed, super::timing::domain::PROBE, draw);
                    ours(self.support.perturb(
                        dst.slice(),
                        b.dtype,
                        c.lens[i],
                        seed,
                        *bits,
                        stream,
                    ))?;
                }
            }
        }
        mem.pristine_set.set(Some(set));
        Ok(())
    }

    /// Writes input set `set` into the sides and fills their outputs with the `poison`
    /// byte; waits. The set is generated once and copied into every side.
    pub fn prepare(
        &self,
        st: &mut JobState,
        c: &JobConfig,
        mem: &JobMemory,
        sides: &[Who],
        set: InputSet,
        poison: u8,
    ) -> Run<()> {
        let stream = self.gpu.stream();
        self.clock_start()?;
        self.generate(st, c, mem, set)?;
        let bufs: Vec<Vec<DevSlice>> = sides
            .iter()
            .filter_map(|&who| mem.side(who).map(SideMemory::slices))
            .collect();
        for (i, b) in st.job.buffers.iter().enumerate() {
            match (&mem.pristine[i], b.direction) {
                (Some(src), _) => {
                    let dsts: Vec<DevSlice> = bufs.iter().map(|s| s[i]).collect();
                    ours(self.support.copy_to(
                        src.slice(),
                        &dsts,
                        st.job.buffer_bytes(c, i),
                        stream,
                    ))?;
                }
                (None, Direction::Out) => {
                    for s in &bufs {
                        ours(
                            s[i].prefix(st.job.buffer_bytes(c, i))
                                .memset(poison, stream),
                        )?;
                    }
                }
                (None, _) => {}
            }
        }
        self.clock_stop_sync(st, "preparing inputs")
    }

    /// One run of a side's plan in its runner; its milliseconds, or the member stopped.
    pub fn run(
        &mut self,
        st: &mut JobState,
        who: Who,
        plan: &SidePlan,
        flush: bool,
    ) -> Run<SideRun<f64>> {
        if let Who::Member(i) = who {
            if !st.members[i].active() {
                return Ok(SideRun::MemberStopped);
            }
        }
        let flush_bytes = if flush {
            2 * self.info.l2_bytes.max(0) as u64
        } else {
            0
        };
        st.flush_counter = st.flush_counter.wrapping_mul(2_654_435_761).wrapping_add(1);
        let flush = (flush_bytes, st.flush_counter);
        let t = Instant::now();
        let out = self.run_side(st, who, plan, flush);
        st.trace.runs += 1;
        st.trace.run_call_ms += ms_since(t);
        out
    }

    fn run_side(
        &mut self,
        st: &mut JobState,
        who: Who,
        plan: &SidePlan,
        flush: (u64, u32),
    ) -> Run<SideRun<f64>> {
        match who {
            Who::Reference => {
                let limit = self.limit(st)?;
                let job = st.job;
                let ms = match &job.torch_reference {
                    Some(_) => {
                        let shapes = job
                            .configs
                            .get(plan.config)
                            .map(|c| c.shapes.clone())
                            .unwrap_or_default();
                        self.reference_runner(job)?.run_torch(shapes, flush, limit)
                    }
                    None => self
                        .reference
                        .run(
                            plan.launches.clone(),
                            (plan.zero.clone(), plan.used.clone(), false),
                            flush,
                            limit,
                        )
                        .map(|(ms, _)| ms),
                }
                .map_err(|f| reference_fault("the reference failed", f))?;
                st.runs_ms += ms;
                Ok(SideRun::Ok(ms))
            }
            Who::Member(i) => {
                let Some(limit) = st.member_limit(i)? else {
                    return Ok(SideRun::MemberStopped);
                };
                // The slack past what the config uses is zeroed before its first run and
                // before every run of the timed config: state kept between the untimed runs
                // of one config serves nothing that counts.
                let used = if plan.timed || st.members[i].slack_zeroed != Some(plan.config) {
                    st.members[i].slack_zeroed = Some(plan.config);
                    plan.used.clone()
                } else {
                    Vec::new()
                };
                let t = Instant::now();
                let out = self.runners[i].run(
                    plan.launches.clone(),
                    (plan.zero.clone(), used, true),
                    flush,
                    limit.limit,
                );
                st.charge(i, t.elapsed());
                match out {
                    Ok((ms, reload_ms)) => {
                        if reload_ms > 0.0 {
                            st.trace.reloads += 1;
                            st.trace.reload_ms += reload_ms;
                        }
                        st.runs_ms += ms;
                        st.members[i].gpu_ms += ms;
                        Ok(SideRun::Ok(ms))
                    }
                    Err(f) => {
                        st.member_failed(i, f, &limit)?;
                        Ok(SideRun::MemberStopped)
                    }
                }
            }
        }
    }
}

/// A reference runner's failure: the reference's (the task is broken, `reference_failed`)
/// unless no runner could serve it at all (not started, wrong protocol, PyTorch or its GPU
/// missing), which is ours (`unavailable`).
fn reference_fault(what: &str, f: RunnerFault) -> Fault {
    match f {
        RunnerFault::Unavailable(reason) => Fault::Ours(format!("{what}: {reason}"), false),
        other => Fault::Reference(format!("{what}: {other}")),
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

#[cfg(test)]
mod tests {
    use super::*;

    const S: fn(u64) -> Duration = Duration::from_secs;

    fn timeout_ms(l: &MemberLimit) -> Option<u64> {
        match l.on_timeout {
            Some(ExecStatus::Timeout { limit_ms }) => Some(limit_ms),
            _ => None,
        }
    }

    #[test]
    fn a_hang_is_the_members_timeout_at_its_run_limit() {
        // Fresh member, plenty of job time: one run may take the run limit, and running
        // past it is the member's own timeout.
        let l = MemberLimit::of(S(10), S(60), S(0), S(600)).unwrap();
        assert_eq!(l.limit, S(10));
        assert_eq!(timeout_ms(&l), Some(10_000));
    }

    #[test]
    fn a_slow_member_is_stopped_on_its_own_budget() {
        // 55 s of its 60 s spent: its next run may take 5 s, and past that it is a timeout
        // of its budget; once spent, there is no next call.
        let l = MemberLimit::of(S(10), S(60), S(55), S(600)).unwrap();
        assert_eq!(l.limit, S(5));
        assert_eq!(timeout_ms(&l), Some(60_000));
        assert!(MemberLimit::of(S(10), S(60), S(60), S(600)).is_none());
        assert!(MemberLimit::of(S(10), S(60), S(61), S(600)).is_none());
    }

    #[test]
    fn only_the_jobs_deadline_binding_makes_a_timeout_ours() {
        // 3 s left of the job: the call is limited to them, and a call past them is not
        // the member's fault.
        let l = MemberLimit::of(S(10), S(60), S(0), S(3)).unwrap();
        assert_eq!(l.limit, S(3));
        assert!(l.on_timeout.is_none());
    }

    #[test]
    fn a_jobs_deadline_covers_every_members_budget_and_the_reference() {
        // With every member spending its whole budget one after another, the reference and
        // the harness still have a budget's worth of time and the headroom left.
        for members in [1usize, 2, 16] {
            let budget = 60_000u64;
            let deadline = ExecJob::deadline_for(members, budget);
            assert!(
                deadline >= members as u64 * budget + budget + super::super::job::JOB_HEADROOM_MS
            );
        }
        assert_eq!(ExecJob::deadline_for(1, u64::MAX), u64::MAX);
    }
}
