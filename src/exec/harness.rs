//! The `gpu` worker role: the harness of timing protocol v2.
//!
//! The harness never runs a candidate's code. It starts two [runner](super::runner)
//! processes, one for the reference and one for the candidate, each with its own CUDA
//! context, and maps their buffers into its own context through CUDA IPC. Each side has its
//! own inputs; the reference's outputs, the saved copies and the checks live in the
//! reference runner or here, where no candidate kernel can address them.
//!
//! Per configuration (input sets derive from the job's secret, which no runner sees):
//! 1. set A: inputs generated on the device into both sides, outputs poisoned, candidate
//!    and reference run, outputs compared, the candidate's inputs verified;
//! 2. set A again, candidate only, on fresh poison: must agree with its first run (races,
//!    first-call-only work) and with the reference;
//! 3. set B: must match again, and its output must change when the reference's does.
//!
//! Timing (the largest configuration, once every configuration passed): warm-up runs, then
//! timed pairs in an order drawn per pair, every run on inputs generated fresh for it and
//! every run's outputs compared with the reference's on the same inputs, the candidate's
//! inputs verified after each; warm-up count, minimum count and batch boundaries drawn from
//! the secret; stopping once the speedup's 95 % interval is within the target.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use super::device;
use super::driver::{self, CudaError, DevSlice, DeviceBuffer, Gpu, IpcMapping};
use super::job::{ExecJob, JobConfig, JobParam, TimingOptions};
use super::report::*;
use super::runner::{RunArg, RunLaunch, RunnerClient, RunnerFault};
use super::support::{Stats, StatsSlots, Support};
use super::timing::{self, derive_seed, domain, Schedule};
use super::values::{arg_i32, element_value, scalar_arg};
use crate::candidate::{ResolvedArg, ResolvedPlan};
use crate::sandbox::{Handled, Handler};
use crate::task::{DType, Direction};

/// Statistics slots: two per run of the largest batch.
const SLOTS: usize = 32;

/// Serves [`ExecJob`]s (the `gpu` worker role).
#[derive(Default)]
pub struct GpuHandler {
    state: Option<Result<Harness, String>>,
}

impl Handler for GpuHandler {
    type Job = ExecJob;
    type Reply = ExecResult;

    fn handle(&mut self, job: ExecJob) -> Handled<ExecResult> {
        let start = Instant::now();
        let harness = match self.state.get_or_insert_with(Harness::open) {
            Ok(h) => h,
            Err(reason) => {
                return Handled::ok(ExecResult::status_only(ExecStatus::Unavailable {
                    reason: reason.clone(),
                }))
            }
        };
        let (mut result, restart) = harness.execute(&job);
        result.millis = start.elapsed().as_secs_f64() * 1e3;
        if restart {
            // The harness's own context may be poisoned; nothing more runs in this process.
            self.state = None;
        }
        Handled {
            reply: Ok(result),
            restart,
        }
    }
}

/// Why a job stopped early, and whose failure it was.
enum Fault {
    /// The candidate's doing: a CUDA fault, a timeout, a crash of its runner, a bad plan.
    Candidate(ExecStatus),
    /// The reference failed: the task is broken.
    Reference(String),
    /// Ours (no runner, a harness CUDA error); `true` when the harness must be replaced.
    Ours(String, bool),
}

type Run<T> = Result<T, Fault>;

fn ours<T>(r: Result<T, CudaError>) -> Run<T> {
    r.map_err(|e| Fault::Ours(format!("harness failure: {e}"), true))
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Side {
    Reference,
    Candidate,
}

/// One configuration's device memory, as the harness sees it.
struct ConfigMemory {
    /// Per ABI buffer, the reference runner's buffer mapped here.
    reference: Vec<IpcMapping>,
    /// Per ABI buffer, the candidate runner's buffer mapped here.
    candidate: Vec<IpcMapping>,
    /// Per ABI buffer, a harness-owned copy of the candidate's output (outputs only).
    saved: Vec<Option<DeviceBuffer>>,
}

impl ConfigMemory {
    fn slices(&self, side: Side) -> Vec<DevSlice> {
        match side {
            Side::Reference => self.reference.iter().map(IpcMapping::slice).collect(),
            Side::Candidate => self.candidate.iter().map(IpcMapping::slice).collect(),
        }
    }
}

impl Drop for ConfigMemory {
    fn drop(&mut self) {
        for s in self.saved.iter().flatten() {
            s.scrub();
        }
        // The mappings close before the runners free the memory behind them.
        self.candidate.clear();
        self.reference.clear();
    }
}

/// What one job is doing: its deadline and the GPU time its runs took.
struct JobState<'a> {
    job: &'a ExecJob,
    deadline: Instant,
    gpu_ms: f64,
    flush_counter: u32,
}

impl JobState<'_> {
    /// Time left for the next runner call; `Err` once the job's budget is spent.
    fn limit(&self, side: Side) -> Run<Duration> {
        let left = self.deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(match side {
                Side::Candidate => Fault::Candidate(ExecStatus::Timeout {
                    limit_ms: self.job.deadline_ms,
                }),
                Side::Reference => Fault::Reference(format!(
                    "the job's {} ms ran out while the reference ran",
                    self.job.deadline_ms
                )),
            });
        }
        Ok(left)
    }
}

/// The harness: its context, its kernels, and the two runners. Every resource of the
/// context holds a handle on it, so the context is released after them in any order.
pub(crate) struct Harness {
    gpu: Gpu,
    support: Support,
    slots: StatsSlots,
    info: DeviceInfo,
    max_warps_per_sm: i32,
    reference: RunnerClient,
    candidate: RunnerClient,
    /// Reference spread when it ran alone, per (reference build, config).
    calibration: HashMap<(u64, String), f64>,
}

fn side_fault(side: Side, f: RunnerFault, deadline_ms: u64) -> Fault {
    match (side, f) {
        (_, RunnerFault::Unavailable(r)) => Fault::Ours(r, false),
        (Side::Reference, f) => Fault::Reference(format!("the reference failed: {f}")),
        (Side::Candidate, RunnerFault::Cuda(e)) => Fault::Candidate(ExecStatus::CudaError {
            code: e.code,
            name: e.name,
            during: e.during,
        }),
        (Side::Candidate, RunnerFault::Timeout(_)) => Fault::Candidate(ExecStatus::Timeout {
            limit_ms: deadline_ms,
        }),
        (Side::Candidate, RunnerFault::Crashed(r)) => {
            Fault::Candidate(ExecStatus::Crashed { reason: r })
        }
    }
}

fn key_of(text: &str) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    text.hash(&mut h);
    h.finish()
}

/// The kernel launches of one side's plan, for its runner (`nb` ABI buffers come first in
/// the runner's allocation, scratch buffers after them).
fn runner_launches(job: &ExecJob, c: &JobConfig, plan: &ResolvedPlan) -> Vec<RunLaunch> {
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

/// Bytes of each buffer a side's runner holds: the ABI buffers, then its scratch.
fn side_bytes(job: &ExecJob, c: &JobConfig, plan: &ResolvedPlan, scratch: &[DType]) -> Vec<u64> {
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

/// Device memory one config needs, all processes together.
fn config_bytes(job: &ExecJob, c: &JobConfig) -> u64 {
    let r: u64 = side_bytes(job, c, &c.reference, &job.reference.scratch)
        .iter()
        .sum();
    let k: u64 = side_bytes(job, c, &c.candidate, &job.candidate.scratch)
        .iter()
        .sum();
    let saved: u64 = job
        .buffers
        .iter()
        .zip(&c.lens)
        .filter(|(b, _)| b.direction.is_output())
        .map(|(b, n)| n * b.dtype.size_bytes())
        .sum();
    r + k + saved
}

/// The seed of buffer `i` within an input set.
fn buffer_seed(seed: u64, i: usize) -> u64 {
    seed ^ 0x9E37_79B9_7F4A_7C15u64.wrapping_mul(i as u64 + 1)
}

fn random_inputs(c: &JobConfig) -> bool {
    c.fills.iter().flatten().any(|f| f.random)
}

impl Harness {
    fn open() -> Result<Harness, String> {
        if !driver::driver_present() {
            return Err("libcuda not found: no NVIDIA driver on this machine".into());
        }
        let gpu = Gpu::open().map_err(|e| format!("no usable GPU: {e}"))?;
        let (info, max_warps_per_sm) = device::describe(&gpu)?;
        let arch = format!(
            "sm_{}{}",
            info.compute_capability.0, info.compute_capability.1
        );
        let support = Support::load(&gpu, &arch, info.sms)?;
        let slots = StatsSlots::new(&gpu, SLOTS).map_err(|e| e.to_string())?;
        Ok(Harness {
            support,
            slots,
            info,
            max_warps_per_sm,
            reference: RunnerClient::new("reference")?,
            candidate: RunnerClient::new("candidate")?,
            calibration: HashMap::new(),
            gpu,
        })
    }

    /// Runs a job; the flag asks the pool to replace this worker.
    fn execute(&mut self, job: &ExecJob) -> (ExecResult, bool) {
        let deadline_ms = if job.deadline_ms > 0 {
            job.deadline_ms
        } else {
            600_000
        };
        let mut st = JobState {
            job,
            deadline: Instant::now() + Duration::from_millis(deadline_ms),
            gpu_ms: 0.0,
            flush_counter: (job.seed >> 32) as u32,
        };
        let outcome = self.run_job(&mut st);
        // The candidate's module and memory go now, not at the next job.
        if let Ok(limit) = st.limit(Side::Candidate) {
            let _ = self.candidate.reset(limit.min(Duration::from_secs(10)));
        }
        let mut restart = false;
        let (status, correctness, timing) = match outcome {
            Ok((c, t)) => (ExecStatus::Ok, Some(c), t),
            Err(Fault::Candidate(s)) => (s, None, None),
            Err(Fault::Reference(reason)) => (ExecStatus::ReferenceFailed { reason }, None, None),
            Err(Fault::Ours(reason, r)) => {
                restart = r;
                (ExecStatus::Unavailable { reason }, None, None)
            }
        };
        (
            ExecResult {
                status,
                correctness,
                timing,
                device: Some(self.info.clone()),
                millis: 0.0,
                gpu_millis: st.gpu_ms,
            },
            restart,
        )
    }

    fn run_job(&mut self, st: &mut JobState) -> Run<(CorrectnessStage, Option<TimingStage>)> {
        let job = st.job;
        if job.params.len() != job.configs.first().map_or(0, |c| c.scalars.len()) {
            return Err(Fault::Candidate(ExecStatus::InvalidLaunch {
                reason: "job parameters and config scalars disagree".into(),
            }));
        }
        let ref_key = key_of(&job.reference.cubin_b64);
        let symbols =
            |m: &super::job::JobModule| m.symbols.iter().map(|(_, s)| s.clone()).collect();
        // The reference is trusted and stateless: it is reloaded only when it changes. The
        // candidate gets a fresh module (fresh `__device__` globals) for every job.
        let limit = st.limit(Side::Reference)?;
        self.reference
            .load(
                &job.reference.cubin_b64,
                symbols(&job.reference),
                Some(ref_key),
                limit,
            )
            .map_err(|f| side_fault(Side::Reference, f, job.deadline_ms))?;
        let limit = st.limit(Side::Candidate)?;
        self.candidate
            .load(
                &job.candidate.cubin_b64,
                symbols(&job.candidate),
                None,
                limit,
            )
            .map_err(|f| side_fault(Side::Candidate, f, job.deadline_ms))?;
        let cap = if job.max_device_bytes > 0 {
            job.max_device_bytes
        } else {
            self.gpu.free_memory() / 10 * 9
        };
        let mut checks = Vec::new();
        let mut timing_stage = None;
        for (k, c) in job.configs.iter().enumerate() {
            let need = config_bytes(job, c);
            if need > cap {
                return Err(Fault::Candidate(ExecStatus::InvalidLaunch {
                    reason: format!(
                        "config `{}` needs {need} bytes of device memory (both sides' buffers, scratch and saved copies), more than the cap of {cap}",
                        c.name
                    ),
                }));
            }
            let mem = self.alloc_config(st, c)?;
            let mut check = self.check_config(st, k, c, &mem)?;
            if k == job.timing_config
                && checks.iter().all(|c: &ConfigCheck| c.passed)
                && check.passed
            {
                if let Some(opts) = &job.timing {
                    match self.time_config(st, c, &mem, opts, ref_key)? {
                        Timed::Measured(t) => timing_stage = Some(t),
                        Timed::Failed(reason) => {
                            check.timed_run_mismatch = true;
                            check.passed = false;
                            check.reasons.push(reason);
                        }
                    }
                }
            }
            checks.push(check);
            drop(mem);
        }
        // A config timed before a later one failed must not award a speedup.
        let passed = checks.iter().filter(|c| c.passed).count();
        if passed < checks.len() {
            timing_stage = None;
        }
        Ok((
            CorrectnessStage {
                passed: passed == checks.len() && !checks.is_empty(),
                pass_rate: if checks.is_empty() {
                    0.0
                } else {
                    passed as f64 / checks.len() as f64
                },
                configs: checks,
                seed: job.seed,
                protocol: PROTOCOL_VERSION,
            },
            timing_stage,
        ))
    }

    fn alloc_config(&mut self, st: &JobState, c: &JobConfig) -> Run<ConfigMemory> {
        let job = st.job;
        let nb = job.buffers.len();
        let gpu = self.gpu.clone();
        let open =
            |handles: Vec<driver::IpcHandle>, bytes: &[u64], who: &str| -> Run<Vec<IpcMapping>> {
                handles
                    .iter()
                    .zip(bytes)
                    .take(nb)
                    .zip(&job.buffers)
                    .map(|((h, b), buf)| {
                        ours(gpu.open_ipc(h, *b as usize, &format!("{who} `{}`", buf.name)))
                    })
                    .collect()
            };
        let rb = side_bytes(job, c, &c.reference, &job.reference.scratch);
        let handles = self
            .reference
            .alloc(rb.clone(), st.limit(Side::Reference)?)
            .map_err(|f| side_fault(Side::Reference, f, job.deadline_ms))?;
        let reference = open(handles, &rb, "reference buffer")?;
        let cb = side_bytes(job, c, &c.candidate, &job.candidate.scratch);
        let handles = self
            .candidate
            .alloc(cb.clone(), st.limit(Side::Candidate)?)
            .map_err(|f| side_fault(Side::Candidate, f, job.deadline_ms))?;
        let candidate = open(handles, &cb, "candidate buffer")?;
        let saved = job
            .buffers
            .iter()
            .zip(&c.lens)
            .map(|(b, n)| {
                b.direction
                    .is_output()
                    .then(|| {
                        self.gpu.alloc(
                            (n * b.dtype.size_bytes()) as usize,
                            &format!("saved output `{}`", b.name),
                        )
                    })
                    .transpose()
            })
            .collect::<Result<Vec<_>, _>>();
        Ok(ConfigMemory {
            reference,
            candidate,
            saved: ours(saved)?,
        })
    }

    /// Writes input set `seed` into the chosen sides and poisons their outputs; waits.
    fn prepare(
        &self,
        st: &JobState,
        c: &JobConfig,
        mem: &ConfigMemory,
        sides: &[Side],
        seed: u64,
    ) -> Run<()> {
        let stream = self.gpu.stream();
        for &side in sides {
            let bufs = mem.slices(side);
            for (i, b) in st.job.buffers.iter().enumerate() {
                match (&c.fills[i], b.direction) {
                    (Some(f), _) => ours(self.support.fill(
                        bufs[i],
                        b.dtype,
                        c.lens[i],
                        buffer_seed(seed, i),
                        f,
                        stream,
                    ))?,
                    (None, Direction::Out) => ours(bufs[i].memset(0xFF, stream))?,
                    (None, _) => {}
                }
            }
        }
        ours(
            self.gpu
                .sync(|| "synchronize after preparing inputs".into()),
        )
    }

    /// One run of a side's plan in its runner; returns its milliseconds.
    fn run(
        &mut self,
        st: &mut JobState,
        side: Side,
        launches: &[RunLaunch],
        zero: &[usize],
        flush: bool,
    ) -> Run<f64> {
        let limit = st.limit(side)?;
        let flush_bytes = if flush {
            2 * self.info.l2_bytes.max(0) as u64
        } else {
            0
        };
        st.flush_counter = st.flush_counter.wrapping_mul(2_654_435_761).wrapping_add(1);
        let runner = match side {
            Side::Reference => &mut self.reference,
            Side::Candidate => &mut self.candidate,
        };
        let ms = runner
            .run(
                launches.to_vec(),
                zero.to_vec(),
                (flush_bytes, st.flush_counter),
                limit,
            )
            .map_err(|f| side_fault(side, f, st.job.deadline_ms))?;
        st.gpu_ms += ms;
        Ok(ms)
    }

    /// Compares every output of `got` with `want`, buffer by buffer (waits).
    fn compare_outputs(
        &self,
        st: &JobState,
        c: &JobConfig,
        got: &[DevSlice],
        want: &[DevSlice],
        nan_equal: bool,
        exact: bool,
    ) -> Run<(Stats, Option<Mismatch>)> {
        let job = st.job;
        let mut total = Stats::default();
        let mut first = None;
        let tol = if exact {
            (0.0, 0.0)
        } else {
            (job.tolerance.atol, job.tolerance.rtol)
        };
        for (i, b) in job.buffers.iter().enumerate() {
            if !b.direction.is_output() {
                continue;
            }
            ours(self.slots.reset())?;
            ours(self.support.compare(
                got[i],
                want[i],
                b.dtype,
                c.lens[i],
                tol,
                nan_equal,
                self.slots.slot(0),
                self.gpu.stream(),
            ))?;
            ours(self.gpu.sync(|| "synchronize after compare".into()))?;
            let s = ours(self.slots.read())?[0];
            if first.is_none() {
                if let Some(idx) = s.first_index {
                    let size = b.dtype.size_bytes() as usize;
                    let off = idx as usize * size;
                    first = Some(Mismatch {
                        buffer: b.name.clone(),
                        index: idx,
                        got: element_value(b.dtype, &ours(got[i].read(off, size))?),
                        want: element_value(b.dtype, &ours(want[i].read(off, size))?),
                    });
                }
            }
            total.merge(&s);
        }
        Ok((total, first))
    }

    /// Whether the candidate's `in` buffers differ from input set `seed` (waits).
    fn inputs_modified(
        &self,
        st: &JobState,
        c: &JobConfig,
        mem: &ConfigMemory,
        seed: u64,
    ) -> Run<bool> {
        ours(self.slots.reset())?;
        self.enqueue_verify(st, c, mem, seed, self.slots.slot(0))?;
        ours(
            self.gpu
                .sync(|| "synchronize after input verification".into()),
        )?;
        Ok(ours(self.slots.read())?[0].mismatches > 0)
    }

    fn enqueue_verify(
        &self,
        st: &JobState,
        c: &JobConfig,
        mem: &ConfigMemory,
        seed: u64,
        slot: DevSlice,
    ) -> Run<()> {
        let bufs = mem.slices(Side::Candidate);
        for (i, b) in st.job.buffers.iter().enumerate() {
            if let (Direction::In, Some(f)) = (b.direction, &c.fills[i]) {
                ours(self.support.verify(
                    bufs[i],
                    b.dtype,
                    c.lens[i],
                    buffer_seed(seed, i),
                    f,
                    slot,
                    self.gpu.stream(),
                ))?;
            }
        }
        Ok(())
    }

    fn enqueue_compare(
        &self,
        st: &JobState,
        c: &JobConfig,
        mem: &ConfigMemory,
        slot: DevSlice,
    ) -> Run<()> {
        let (got, want) = (mem.slices(Side::Candidate), mem.slices(Side::Reference));
        for (i, b) in st.job.buffers.iter().enumerate() {
            if b.direction.is_output() {
                ours(self.support.compare(
                    got[i],
                    want[i],
                    b.dtype,
                    c.lens[i],
                    (st.job.tolerance.atol, st.job.tolerance.rtol),
                    false,
                    slot,
                    self.gpu.stream(),
                ))?;
            }
        }
        Ok(())
    }

    fn check_config(
        &mut self,
        st: &mut JobState,
        k: usize,
        c: &JobConfig,
        mem: &ConfigMemory,
    ) -> Run<ConfigCheck> {
        let job = st.job;
        let mut check = ConfigCheck {
            config: c.name.clone(),
            passed: false,
            max_abs_err: 0.0,
            max_rel_err: 0.0,
            mismatches: 0,
            elements: job
                .buffers
                .iter()
                .zip(&c.lens)
                .filter(|(b, _)| b.direction.is_output())
                .map(|(_, n)| *n)
                .sum(),
            first_mismatch: None,
            unwritten: 0,
            inputs_modified: false,
            nondeterministic: false,
            input_independent: false,
            timed_run_mismatch: false,
            reasons: Vec::new(),
        };
        let lr = runner_launches(job, c, &c.reference);
        let lc = runner_launches(job, c, &c.candidate);
        let nb = job.buffers.len();
        let zr: Vec<usize> = (nb..nb + c.reference.scratch_lens.len()).collect();
        let zc: Vec<usize> = (nb..nb + c.candidate.scratch_lens.len()).collect();
        let (cand, refr) = (mem.slices(Side::Candidate), mem.slices(Side::Reference));
        let saved: Vec<DevSlice> = mem
            .saved
            .iter()
            .zip(&cand)
            .map(|(s, c)| s.as_ref().map_or(*c, DeviceBuffer::slice))
            .collect();
        let seed_a = derive_seed(job.seed, domain::SET_A, k as u64);
        let seed_b = derive_seed(job.seed, domain::SET_B, k as u64);

        // Input set A, both sides.
        self.prepare(st, c, mem, &[Side::Reference, Side::Candidate], seed_a)?;
        self.run(st, Side::Candidate, &lc, &zc, false)?;
        self.run(st, Side::Reference, &lr, &zr, false)?;
        let (s, first) = self.compare_outputs(st, c, &cand, &refr, false, false)?;
        check.mismatches = s.mismatches;
        check.unwritten = s.unwritten;
        check.max_abs_err = s.max_abs;
        check.max_rel_err = s.max_rel;
        check.first_mismatch = first;
        check.inputs_modified = self.inputs_modified(st, c, mem, seed_a)?;
        for (s, k) in saved.iter().zip(&cand) {
            if s != k {
                ours(s.copy_from(*k, self.gpu.stream()))?;
            }
        }
        // Set A again, candidate only, on fresh poison: races and first-call-only work.
        self.prepare(st, c, mem, &[Side::Candidate], seed_a)?;
        self.run(st, Side::Candidate, &lc, &zc, false)?;
        let (again, _) = self.compare_outputs(st, c, &cand, &saved, true, false)?;
        check.nondeterministic = again.mismatches > 0;
        let (again_ref, _) = self.compare_outputs(st, c, &cand, &refr, false, false)?;
        check.inputs_modified |= self.inputs_modified(st, c, mem, seed_a)?;
        // Input set B: must match again, and must change when the reference changes.
        let mut b_mismatches = 0;
        if random_inputs(c) {
            self.prepare(st, c, mem, &[Side::Reference, Side::Candidate], seed_b)?;
            self.run(st, Side::Reference, &lr, &zr, false)?;
            self.run(st, Side::Candidate, &lc, &zc, false)?;
            let (sb, fb) = self.compare_outputs(st, c, &cand, &refr, false, false)?;
            b_mismatches = sb.mismatches;
            check.unwritten = check.unwritten.max(sb.unwritten);
            check.max_abs_err = check.max_abs_err.max(sb.max_abs);
            check.max_rel_err = check.max_rel_err.max(sb.max_rel);
            if check.first_mismatch.is_none() {
                check.first_mismatch = fb;
            }
            check.inputs_modified |= self.inputs_modified(st, c, mem, seed_b)?;
            let (same_cand, _) = self.compare_outputs(st, c, &cand, &saved, true, true)?;
            let (ref_changed, _) = self.compare_outputs(st, c, &refr, &saved, true, false)?;
            check.input_independent = same_cand.mismatches == 0 && ref_changed.mismatches > 0;
        }
        if check.mismatches > 0 || b_mismatches > 0 {
            check.mismatches = check.mismatches.max(b_mismatches);
            check.reasons.push(format!(
                "{} of {} output elements differ from the reference",
                check.mismatches, check.elements
            ));
        }
        if check.unwritten > 0 {
            check.reasons.push(format!(
                "{} output elements were never written",
                check.unwritten
            ));
        }
        if check.inputs_modified {
            check
                .reasons
                .push("the candidate modified an input buffer".into());
        }
        if check.nondeterministic || (check.mismatches == 0 && again_ref.mismatches > 0) {
            check.nondeterministic = true;
            check.reasons.push("a second run on the same inputs gave a different result (race or first-call-only work)".into());
        }
        if check.input_independent {
            check
                .reasons
                .push("the output did not change when the inputs did".into());
        }
        check.passed = check.reasons.is_empty();
        Ok(check)
    }

    /// The reference's relative spread when it runs alone (cached per build and config).
    fn calibrate(
        &mut self,
        st: &mut JobState,
        c: &JobConfig,
        mem: &ConfigMemory,
        opts: &TimingOptions,
        key: (u64, String),
        flush: bool,
    ) -> Run<f64> {
        if let Some(v) = self.calibration.get(&key) {
            return Ok(*v);
        }
        let lr = runner_launches(st.job, c, &c.reference);
        let nb = st.job.buffers.len();
        let zr: Vec<usize> = (nb..nb + c.reference.scratch_lens.len()).collect();
        let mut times = Vec::new();
        for i in 0..opts.calibration_runs.max(3) {
            let seed = derive_seed(st.job.seed, domain::CALIBRATION, u64::from(i));
            self.prepare(st, c, mem, &[Side::Reference], seed)?;
            let ms = self.run(st, Side::Reference, &lr, &zr, flush)?;
            if i > 0 {
                times.push(ms * 1e3);
            }
        }
        let spread = timing::rel_mad(&times);
        self.calibration.insert(key, spread);
        Ok(spread)
    }

    fn time_config(
        &mut self,
        st: &mut JobState,
        c: &JobConfig,
        mem: &ConfigMemory,
        opts: &TimingOptions,
        ref_key: u64,
    ) -> Run<Timed> {
        let job = st.job;
        let flush = opts.flush_l2;
        let calibration = self.calibrate(st, c, mem, opts, (ref_key, c.name.clone()), flush)?;
        let mut sched = Schedule::new(job.seed, opts);
        let lr = runner_launches(job, c, &c.reference);
        let lc = runner_launches(job, c, &c.candidate);
        let nb = job.buffers.len();
        let zr: Vec<usize> = (nb..nb + c.reference.scratch_lens.len()).collect();
        let zc: Vec<usize> = (nb..nb + c.candidate.scratch_lens.len()).collect();
        let (mut ref_us, mut cand_us) = (Vec::new(), Vec::new());
        let mut spent_ms = 0.0;
        let mut run = 0u32;
        let boot_seed = derive_seed(job.seed, domain::BOOTSTRAP, 0);
        loop {
            let batch = (sched.next_batch() as usize).min(self.slots.len() / 2);
            ours(self.slots.reset())?;
            for b in 0..batch {
                run += 1;
                let seed = derive_seed(job.seed, domain::TIMED, u64::from(run));
                self.prepare(st, c, mem, &[Side::Reference, Side::Candidate], seed)?;
                let (r, k) = if sched.candidate_first() {
                    let k = self.run(st, Side::Candidate, &lc, &zc, flush)?;
                    (self.run(st, Side::Reference, &lr, &zr, flush)?, k)
                } else {
                    let r = self.run(st, Side::Reference, &lr, &zr, flush)?;
                    (r, self.run(st, Side::Candidate, &lc, &zc, flush)?)
                };
                // Every run is checked: its outputs against the reference's on the same
                // fresh inputs, and the inputs it was given.
                self.enqueue_compare(st, c, mem, self.slots.slot(2 * b))?;
                self.enqueue_verify(st, c, mem, seed, self.slots.slot(2 * b + 1))?;
                if run > sched.warmup {
                    ref_us.push(r * 1e3);
                    cand_us.push(k * 1e3);
                    spent_ms += r + k;
                }
            }
            ours(self.gpu.sync(|| "synchronize after timed checks".into()))?;
            let stats = ours(self.slots.read())?;
            for b in 0..batch {
                let (out, inp) = (stats[2 * b], stats[2 * b + 1]);
                let n = run as usize - batch + b + 1;
                if !out.clean() {
                    return Ok(Timed::Failed(format!(
                        "run {n} of the timing phase (fresh inputs) gave a wrong result: {} elements differ from the reference, {} never written",
                        out.mismatches, out.unwritten
                    )));
                }
                if inp.mismatches > 0 {
                    return Ok(Timed::Failed(format!(
                        "run {n} of the timing phase left {} input elements modified",
                        inp.mismatches
                    )));
                }
            }
            let timed = ref_us.len() as u32;
            if timed >= sched.max_reps || spent_ms >= opts.budget_ms {
                break;
            }
            if timed >= sched.min_reps {
                let ratio = timing::median(&ref_us) / timing::median(&cand_us);
                let [lo, hi] = timing::ratio_ci(&ref_us, &cand_us, 500, boot_seed);
                if (hi - lo) / 2.0 <= opts.target_rel_ci * ratio {
                    break;
                }
            }
        }
        let checked_runs = run;
        let ref_med = timing::median(&ref_us);
        let cand_med = timing::median(&cand_us);
        let raw = ref_med / cand_med;
        let ci95 = timing::ratio_ci(&ref_us, &cand_us, opts.bootstrap as usize, boot_seed);
        let noise = timing::noise_floor(
            &ref_us,
            opts.bootstrap as usize,
            boot_seed,
            opts.min_noise_floor,
        );
        let spread = timing::rel_mad(&ref_us);
        let unstable = spread > opts.unstable_factor * calibration + 0.005;
        let bandwidth = if job.bandwidth_gbps > 0.0 {
            job.bandwidth_gbps
        } else {
            self.info.bandwidth_gbps
        };
        let peak = if job.peak_tflops > 0.0 {
            job.peak_tflops
        } else {
            self.info.peak_tflops
        };
        let bytes = job.abi_bytes(job.timing_config) as f64;
        let floor_us = if bandwidth > 0.0 {
            bytes / (bandwidth * 1e3)
        } else {
            0.0
        };
        let compute_floor_us = if peak > 0.0 && job.flops > 0.0 {
            job.flops / (peak * 1e6)
        } else {
            0.0
        };
        let implausible = cand_med < floor_us.max(compute_floor_us);
        let within_noise = (raw - 1.0).abs() <= noise;
        let (speedup, withheld) = if implausible {
            (
                1.0,
                Some(format!(
                    "implausible: {cand_med:.1} µs is below the physical floor ({floor_us:.1} µs to move the ABI's bytes at {bandwidth:.0} GB/s, {compute_floor_us:.1} µs for the task's FLOPs at {peak:.0} TFLOP/s)"
                )),
            )
        } else if unstable {
            (
                raw.min(1.0),
                Some(format!(
                    "unstable: the reference's timing spread was {:.1} % in this job against {:.1} % when it ran alone",
                    spread * 100.0,
                    calibration * 100.0
                )),
            )
        } else if within_noise {
            (1.0, None)
        } else {
            (raw, None)
        };
        let queries = c
            .candidate
            .launches
            .iter()
            .enumerate()
            .map(|(i, l)| (i, l.block.iter().product::<u32>(), l.smem))
            .collect();
        let blocks = match st.limit(Side::Candidate) {
            Ok(limit) => self.candidate.occupancy(queries, limit).unwrap_or_default(),
            Err(_) => Vec::new(),
        };
        let occupancy = c
            .candidate
            .launches
            .iter()
            .zip(blocks)
            .filter_map(|(l, b)| {
                let blocks = b?;
                let threads = l.block.iter().product::<u32>();
                let warps = f64::from(blocks) * f64::from(threads.div_ceil(32));
                Some(KernelOccupancy {
                    kernel: l.kernel.clone(),
                    block_threads: threads,
                    blocks_per_sm: blocks,
                    occupancy: (warps / f64::from(self.max_warps_per_sm)).min(1.0),
                })
            })
            .collect();
        Ok(Timed::Measured(TimingStage {
            protocol: PROTOCOL_VERSION,
            config: c.name.clone(),
            reference_us: ref_med,
            candidate_us: cand_med,
            speedup,
            raw_speedup: raw,
            ci95,
            noise_floor: noise,
            within_noise,
            implausible,
            floor_us,
            compute_floor_us,
            unstable,
            reference_spread: spread,
            reference_calibration: calibration,
            withheld,
            achieved_gbps: if cand_med > 0.0 {
                bytes / (cand_med * 1e3)
            } else {
                0.0
            },
            repetitions: ref_us.len() as u32,
            warmup: sched.warmup,
            checked_runs,
            occupancy,
        }))
    }
}

/// How the timing phase ended.
enum Timed {
    Measured(TimingStage),
    /// A checked run failed; the candidate is incorrect.
    Failed(String),
}
