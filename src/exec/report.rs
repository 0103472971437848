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
    /// The last timed run's output differed from the reference (behaves differently after warm-up).
    pub timed_run_mismatch: bool,
    /// Why it failed, in words (empty when passed).
    pub reasons: Vec<String>,
}

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
    /// Seed of the input generator (to reproduce a failure).
    pub seed: u64,
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
    /// Config that was timed (the largest by buffer bytes).
    pub config: String,
    /// Median time of the reference plan, microseconds.
    #[serde(deserialize_with = "nan_if_null")]
    pub reference_us: f64,
    /// Median time of the candidate plan, microseconds.
    #[serde(deserialize_with = "nan_if_null")]
    pub candidate_us: f64,
    /// Reported speedup: median(ref)/median(cand), 1.0 when within noise, 0 when implausible.
    #[serde(deserialize_with = "nan_if_null")]
    pub speedup: f64,
    /// The measured ratio before the noise and plausibility rules.
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
    /// Faster than the physical floor: no speedup is awarded.
    pub implausible: bool,
    /// Bytes the ABI must move / device bandwidth, microseconds.
    #[serde(deserialize_with = "nan_if_null")]
    pub floor_us: f64,
    /// ABI bytes / candidate time, GB/s.
    #[serde(deserialize_with = "nan_if_null")]
    pub achieved_gbps: f64,
    /// Timed repetitions per side.
    pub repetitions: u32,
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
    /// GPU time of the timed and checked launches (both sides), milliseconds.
    #[serde(deserialize_with = "nan_if_null")]
    pub gpu_millis: f64,
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
    /// GPU time of the protocol's launches, ms.
    #[serde(deserialize_with = "nan_if_null")]
    pub gpu_millis: f64,
}
