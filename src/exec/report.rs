//! What the GPU stages report: `stages.execute`, `stages.correctness`, `stages.timing`.

use serde::{Deserialize, Deserializer, Serialize};

/// JSON has no NaN: serde_json writes it as `null`; read `null` back as NaN.
fn nan_if_null<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    Ok(Option::<f64>::deserialize(d)?.unwrap_or(f64::NAN))
}

fn nan_pair_if_null<'de, D: Deserializer<'de>>(d: D) -> Result<[f64; 2], D::Error> {
    let v = <[Option<f64>; 2]>::deserialize(d)?;
    Ok([v[0].unwrap_or(f64::NAN), v[1].unwrap_or(f64::NAN)])
}

/// The GPU protocol that produced a report's correctness and timing stages.
///
/// * 1 (reports without the field): one process, inputs shared by both sides, only the last
///   timed run re-checked.
/// * 2: reference and candidate in separate runner processes (separate CUDA contexts, so
///   neither can address the other's memory or the harness's); fresh inputs for every run,
///   every warm-up and timed run checked and the candidate's inputs verified after each;
///   warm-up, repetition counts and batch boundaries drawn from the job's secret; scratch
///   zeroed inside the timed window; compute and bandwidth floors; unstable references
///   withhold the speedup.
/// * 3: nothing survives between runs (a module with writable data is reloaded before each
///   run, the device heap is refused, buffers are zeroed past the bytes a run uses); two
///   output poisons; every input regime of the task checked on every config; the precision
///   probe on the timed config; floors from the task's declared minimum bytes; a member's
///   timeouts are its own (per-run limit and budget).
pub const PROTOCOL_VERSION: u32 = 3;

fn protocol_v1() -> u32 {
    1
}

/// How the run ended, before correctness is judged.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum ExecStatus {
    /// Every launch of every config ran and synchronised.
    Ok,
    /// A CUDA call failed (fault in the candidate, bad launch, out of resources).
    CudaError {
        /// CUresult code.
        code: i32,
        /// CUresult name, e.g. `CUDA_ERROR_ILLEGAL_ADDRESS`.
        name: String,
        /// Which step failed (`launch vector_add (config large)`, `synchronize`, ...).
        during: String,
    },
    /// The plan could not be evaluated or exceeds limits (grid, smem, memory cap).
    InvalidLaunch {
        /// Why.
        reason: String,
    },
    /// The job ran past its wall-clock limit; the worker was killed.
    Timeout {
        /// The limit in milliseconds.
        limit_ms: u64,
    },
    /// The worker process died.
    Crashed {
        /// Exit status or protocol problem.
        reason: String,
    },
    /// The reference itself failed: the task or the harness is broken, not the candidate.
    ReferenceFailed {
        /// Why.
        reason: String,
    },
    /// No GPU or driver here.
    Unavailable {
        /// Why.
        reason: String,
    },
}

impl ExecStatus {
    /// Whether everything ran.
    pub fn is_ok(&self) -> bool {
        matches!(self, ExecStatus::Ok)
    }

    /// Whether this is a fault of the candidate (crash, timeout, CUDA error, bad launch).
    pub fn is_candidate_fault(&self) -> bool {
        matches!(
            self,
            ExecStatus::CudaError { .. }
                | ExecStatus::InvalidLaunch { .. }
                | ExecStatus::Timeout { .. }
                | ExecStatus::Crashed { .. }
        )
    }

    /// Short name (`ok`, `cuda_error`, ...).
    pub fn name(&self) -> &'static str {
        match self {
            ExecStatus::Ok => "ok",
            ExecStatus::CudaError { .. } => "cuda_error",
            ExecStatus::InvalidLaunch { .. } => "invalid_launch",
            ExecStatus::Timeout { .. } => "timeout",
            ExecStatus::Crashed { .. } => "crashed",
            ExecStatus::ReferenceFailed { .. } => "reference_failed",
            ExecStatus::Unavailable { .. } => "unavailable",
        }
    }
}

/// The first element that differs from the reference.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Mismatch {
    /// Output buffer name.
    pub buffer: String,
    /// Element index.
    pub index: u64,
    /// Candidate's value.
    #[serde(deserialize_with = "nan_if_null")]
    pub got: f64,
    /// Reference value.
    #[serde(deserialize_with = "nan_if_null")]
    pub want: f64,
}

/// Correctness on one input configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConfigCheck {
    /// Config name.
    pub config: String,
    /// Whether every check passed on this config.
    pub passed: bool,
    /// Largest |got - want| over all output elements (NaN if any element mismatched on NaN).
    #[serde(deserialize_with = "nan_if_null")]
    pub max_abs_err: f64,
    /// Largest |got - want| / |want| over elements with want != 0.
    #[serde(deserialize_with = "nan_if_null")]
    pub max_rel_err: f64,
    /// Elements outside tolerance (all outputs, first run).
    pub mismatches: u64,
    /// Total output elements compared.
    pub elements: u64,
    /// The first mismatching element.
    pub first_mismatch: Option<Mismatch>,
    /// Elements still holding the poison value (never written).
    pub unwritten: u64,
    /// The candidate changed an input buffer.
    pub inputs_modified: bool,
    /// A second run on freshly poisoned outputs disagreed beyond tolerance (a race).
    pub nondeterministic: bool,
    /// The output did not change when the inputs did.
    pub input_independent: bool,
    /// A warm-up or timed run's output differed from the reference on the same fresh inputs,
    /// or left an input changed (behaves differently when timed).
    pub timed_run_mismatch: bool,
    /// Why it failed, in words (empty when passed).
    pub reasons: Vec<String>,
    /// The task's input regimes this config checked, and whether each passed.
    #[serde(default)]
    pub regimes: Vec<RegimeCheck>,
    /// The precision probe, per probed input (the timed config only).
    #[serde(default)]
    pub precision: Vec<PrecisionProbe>,
}

/// One input regime of a config ([`crate::task::Regime`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RegimeCheck {
    /// The regime's name.
    pub name: String,
    /// Every output within tolerance, every element written, inputs untouched.
    pub passed: bool,
    /// Output elements outside tolerance (or never written).
    pub mismatches: u64,
    /// The first mismatching element.
    pub first_mismatch: Option<Mismatch>,
}

/// How the outputs followed a change in the low-order bits of one input (the precision
/// probe): bits that arithmetic at the task's contracted precision keeps and TF32, FP16 or
/// BF16 would round away. `ratio` is ‖Δout − Δref‖ / ‖Δref‖ over the outputs: near 0 when
/// the candidate computes at the contract's precision, 1 when it ignores those bits.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PrecisionProbe {
    /// The input whose bits changed.
    pub input: String,
    /// ‖Δout − Δref‖ / ‖Δref‖ (NaN when not judged).
    #[serde(deserialize_with = "nan_if_null")]
    pub ratio: f64,
    /// Whether the reference's outputs moved enough for the ratio to mean something.
    pub judged: bool,
    /// Not judged, or ratio within `PRECISION_PROBE_LIMIT` (0.5).
    pub passed: bool,
}

/// Largest ‖Δout − Δref‖ / ‖Δref‖ a candidate may show on the precision probe.
pub const PRECISION_PROBE_LIMIT: f64 = 0.5;

/// `stages.correctness` of a report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CorrectnessStage {
    /// Every config passed.
    pub passed: bool,
    /// Passed configs / configs run.
    #[serde(deserialize_with = "nan_if_null")]
    pub pass_rate: f64,
    /// Per-config results.
    pub configs: Vec<ConfigCheck>,
    /// The job's secret seed, from which every input set and the timing schedule derive
    /// (to reproduce a failure).
    pub seed: u64,
    /// The protocol version ([`PROTOCOL_VERSION`]; 1 for reports without the field).
    #[serde(default = "protocol_v1")]
    pub protocol: u32,
    /// The task's precision contract, in words.
    #[serde(default)]
    pub precision: String,
}

/// Occupancy of one kernel from the driver.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KernelOccupancy {
    /// Kernel as launched.
    pub kernel: String,
    /// Threads per block in the launch.
    pub block_threads: u32,
    /// Active blocks per multiprocessor (cuOccupancyMaxActiveBlocksPerMultiprocessor).
    pub blocks_per_sm: i32,
    /// Active warps / maximum warps per multiprocessor.
    #[serde(deserialize_with = "nan_if_null")]
    pub occupancy: f64,
}

/// `stages.timing` of a report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TimingStage {
    /// The protocol version that measured this ([`PROTOCOL_VERSION`]; 1 when absent). A
    /// trainer can refuse timings from an older protocol.
    #[serde(default = "protocol_v1")]
    pub protocol: u32,
    /// Config that was timed (the largest by buffer bytes).
    pub config: String,
    /// The reference the speedup is against: the task's CUDA reference (`cuda`, also when
    /// absent from older reports) or its PyTorch original (`torch_eager`, `torch_compile`).
    #[serde(default)]
    pub reference: super::torch::ReferenceKind,
    /// Median time of the reference plan, microseconds.
    #[serde(deserialize_with = "nan_if_null")]
    pub reference_us: f64,
    /// Median time of the candidate plan (its scratch zeroing included), microseconds.
    #[serde(deserialize_with = "nan_if_null")]
    pub candidate_us: f64,
    /// The speedup awarded: median(ref)/median(cand); 1.0 when within noise or implausible;
    /// at most 1.0 when unstable (a slowdown still counts, a gain does not).
    #[serde(deserialize_with = "nan_if_null")]
    pub speedup: f64,
    /// The measured ratio before the noise, plausibility and stability rules.
    #[serde(deserialize_with = "nan_if_null")]
    pub raw_speedup: f64,
    /// Bootstrap 95 % interval of the ratio.
    #[serde(deserialize_with = "nan_pair_if_null")]
    pub ci95: [f64; 2],
    /// Half-width of the reference-vs-reference ratio interval (relative): the noise floor.
    #[serde(deserialize_with = "nan_if_null")]
    pub noise_floor: f64,
    /// The speedup was inside the noise floor and is reported as 1.0.
    pub within_noise: bool,
    /// Faster than a physical floor (bytes or FLOPs): no speedup is awarded.
    pub implausible: bool,
    /// Bytes the ABI must move / device bandwidth, microseconds.
    #[serde(deserialize_with = "nan_if_null")]
    pub floor_us: f64,
    /// FLOPs the task declares / the device's peak rate, microseconds (0 without `flops`).
    #[serde(default)]
    pub compute_floor_us: f64,
    /// The reference's timing spread in this job was far above its calibration: the speedup
    /// is withheld.
    #[serde(default)]
    pub unstable: bool,
    /// The reference's relative spread in this job (median absolute deviation / median).
    #[serde(default)]
    pub reference_spread: f64,
    /// The reference's relative spread when it ran alone (its calibration).
    #[serde(default)]
    pub reference_calibration: f64,
    /// Why no speedup (or less than measured) is awarded, in words; `None` when awarded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub withheld: Option<String>,
    /// ABI bytes / candidate time, GB/s.
    #[serde(deserialize_with = "nan_if_null")]
    pub achieved_gbps: f64,
    /// Timed repetitions per side.
    pub repetitions: u32,
    /// Warm-up runs per side (drawn per job).
    #[serde(default)]
    pub warmup: u32,
    /// Candidate runs whose outputs were compared with the reference's on the same fresh
    /// inputs, and whose inputs were verified afterwards (warm-up and timed).
    #[serde(default)]
    pub checked_runs: u32,
    /// Driver-reported occupancy per kernel.
    pub occupancy: Vec<KernelOccupancy>,
}

/// The device a job ran on.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DeviceInfo {
    /// Device name.
    pub name: String,
    /// Compute capability (major, minor).
    pub compute_capability: (i32, i32),
    /// Driver version as reported by cuDriverGetVersion (e.g. 13000).
    pub driver_version: i32,
    /// Multiprocessors.
    pub sms: i32,
    /// L2 size in bytes.
    pub l2_bytes: i64,
    /// Global memory in bytes.
    pub memory_bytes: u64,
    /// Bandwidth used for the physical floor, GB/s.
    #[serde(deserialize_with = "nan_if_null")]
    pub bandwidth_gbps: f64,
    /// Peak arithmetic rate used for the compute floor, TFLOP/s (0: unknown device).
    #[serde(default)]
    pub peak_tflops: f64,
    /// The driver says device code can read pageable host memory (HMM/ATS). Candidates run
    /// in a runner process that holds nothing secret, so this is informational.
    #[serde(default)]
    pub pageable_memory_access: bool,
}

/// Everything a GPU job returns.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExecResult {
    /// How the run ended.
    pub status: ExecStatus,
    /// Correctness (present when the run got that far).
    pub correctness: Option<CorrectnessStage>,
    /// Timing (present when asked for and the candidate was correct).
    pub timing: Option<TimingStage>,
    /// The device.
    pub device: Option<DeviceInfo>,
    /// Wall time inside the worker, milliseconds.
    #[serde(deserialize_with = "nan_if_null")]
    pub millis: f64,
    /// GPU time of this candidate's own runs (between their events), milliseconds.
    #[serde(deserialize_with = "nan_if_null")]
    pub gpu_millis: f64,
    /// GPU time of every launch of the job this candidate was part of (every side's runs
    /// and the harness's input generation, poisoning and checks), milliseconds.
    #[serde(default)]
    pub job_gpu_millis: f64,
    /// Candidates in that job (a GRPO group is scored as one job).
    #[serde(default)]
    pub job_members: u32,
}

impl ExecResult {
    /// A result with only a status.
    pub fn status_only(status: ExecStatus) -> ExecResult {
        ExecResult {
            status,
            correctness: None,
            timing: None,
            device: None,
            millis: 0.0,
            gpu_millis: 0.0,
            job_gpu_millis: 0.0,
            job_members: 0,
        }
    }
}

/// `stages.execute` of a report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExecuteStage {
    /// How the run ended.
    #[serde(flatten)]
    pub status: ExecStatus,
    /// The device, when one was used.
    pub device: Option<DeviceInfo>,
    /// Wall time of the stage (parent side, including the worker round trip), ms.
    #[serde(deserialize_with = "nan_if_null")]
    pub millis: f64,
    /// GPU time of this candidate's own runs, ms.
    #[serde(deserialize_with = "nan_if_null")]
    pub gpu_millis: f64,
    /// GPU time of every launch of the job it was scored in (see
    /// [`ExecResult::job_gpu_millis`]), ms.
    #[serde(default)]
    pub job_gpu_millis: f64,
    /// Candidates scored in that job.
    #[serde(default)]
    pub job_members: u32,
}
