//! A GPU job: everything a worker needs, with every expression already evaluated, so the
//! worker runs no parser on task or candidate text.

use serde::{Deserialize, Serialize};

mod build;

pub use build::{BuildError, JobParts, JobReference, JobSide};

use super::secret::JobSecret;
use crate::candidate::ResolvedPlan;
use crate::task::{DType, Direction, Distribution, Param, Task, Tolerance};

/// One ABI buffer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobBuffer {
    /// Name (for reports).
    pub name: String,
    /// Element type.
    pub dtype: DType,
    /// Direction.
    pub direction: Direction,
}

/// One ABI parameter, in order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum JobParam {
    /// Index into [`ExecJob::buffers`].
    Buffer {
        /// The buffer.
        buffer: usize,
    },
    /// A scalar of this dtype; values are per config.
    Scalar {
        /// Its type.
        dtype: DType,
    },
}

/// How to fill an input buffer (the support kernel's modes).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Fill {
    /// 0 uniform, 1 normal, 2 integer range, 3 arange, 4 constant, 5 ragged arange.
    pub mode: i32,
    /// First parameter (low, mean, start, value).
    pub a: f64,
    /// Second parameter (high, std, step).
    pub b: f64,
    /// Whether a new seed gives new values.
    pub random: bool,
    /// Special values mixed in (bits of [`crate::task::SpecialValue::bit`]; 0: none).
    #[serde(default)]
    pub special: u32,
    /// Fraction of elements replaced by a special value.
    #[serde(default)]
    pub special_rate: f64,
}

impl Fill {
    /// A fill of `mode` with parameters `a`, `b` and no special values.
    pub fn new(mode: i32, a: f64, b: f64, random: bool) -> Fill {
        Fill {
            mode,
            a,
            b,
            random,
            special: 0,
            special_rate: 0.0,
        }
    }

    /// Whether the values are drawn from a continuous distribution (uniform or normal),
    /// which the precision probe may change in their low-order bits.
    pub fn is_continuous(&self) -> bool {
        self.random && (self.mode == 0 || self.mode == 1) && self.special == 0
    }
}

/// An input regime of one config: other fills for some inputs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobRegime {
    /// The regime's name (for reports).
    pub name: String,
    /// Fill per buffer (`None` for outputs).
    pub fills: Vec<Option<Fill>>,
}

/// One configuration, evaluated.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobConfig {
    /// Config name.
    pub name: String,
    /// Element count per buffer.
    pub lens: Vec<u64>,
    /// Value per parameter (0 for buffers); integers are exact in f64 up to 2^53.
    pub scalars: Vec<f64>,
    /// Fill per buffer (`None` for outputs).
    pub fills: Vec<Option<Fill>>,
    /// The task's other input regimes that apply to this config, each checked once.
    #[serde(default)]
    pub regimes: Vec<JobRegime>,
    /// Per buffer, the low-order bits the precision probe changes (`None`: not probed).
    #[serde(default)]
    pub probes: Vec<Option<crate::task::ProbeBits>>,
    /// Per buffer, the tensor shape the original sees on this config (its length as one
    /// axis where the task gives no shape); what a PyTorch reference's forward is called on.
    #[serde(default)]
    pub shapes: Vec<Vec<u64>>,
    /// The reference's plan (no launches for a PyTorch reference).
    pub reference: ResolvedPlan,
    /// Each candidate's plan, in member order.
    pub candidates: Vec<ResolvedPlan>,
}

/// A compiled side (reference or candidate).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobModule {
    /// The cubin, base64.
    pub cubin_b64: String,
    /// (kernel as launched, symbol to look up).
    pub symbols: Vec<(String, String)>,
    /// Scratch buffer dtypes, in plan order.
    pub scratch: Vec<DType>,
}

/// How to time (protocol v2). The counts that a candidate could use to tell runs apart are
/// drawn per job from the job's secret seed within the ranges below; the defaults are what
/// a demanding user wants and are documented per field.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct TimingOptions {
    /// Typical warm-up runs per side; each job draws from `warmup/2 ..= warmup*3/2` (at
    /// least 1). Warm-up runs are checked like timed ones (default 4).
    pub warmup: u32,
    /// Fewest timed runs per side before the interval may stop the loop; each job draws from
    /// `min_reps ..= min_reps*3/2` (default 10).
    pub min_reps: u32,
    /// Most timed runs per side (default 200).
    pub max_reps: u32,
    /// Stop once the 95 % interval of the speedup is within ± this fraction of it
    /// (default 0.01).
    pub target_rel_ci: f64,
    /// Stop adding runs once both sides' timed runs took this much GPU time, ms (default 300).
    pub budget_ms: f64,
    /// Write a buffer of twice the L2 size before every run (default true).
    pub flush_l2: bool,
    /// Bootstrap resamples for the reported interval (default 2000).
    pub bootstrap: u32,
    /// Smallest noise floor, relative (default 0.005).
    pub min_noise_floor: f64,
    /// Reference-only runs that calibrate its timing spread, once per worker, task config
    /// and reference build (default 12).
    pub calibration_runs: u32,
    /// A reference spread above `unstable_factor` × its calibration + 0.005 marks the result
    /// unstable and withholds the speedup (default 3.0).
    pub unstable_factor: f64,
}

impl Default for TimingOptions {
    fn default() -> Self {
        TimingOptions {
            warmup: 4,
            min_reps: 10,
            max_reps: 200,
            target_rel_ci: 0.01,
            budget_ms: 300.0,
            flush_l2: true,
            bootstrap: 2000,
            min_noise_floor: 0.005,
            calibration_runs: 12,
            unstable_factor: 3.0,
        }
    }
}

/// Headroom of a job's deadline beyond its members' and the reference's budgets, ms.
pub const JOB_HEADROOM_MS: u64 = 30_000;

/// A complete GPU job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExecJob {
    /// ABI buffers.
    pub buffers: Vec<JobBuffer>,
    /// ABI parameters in order.
    pub params: Vec<JobParam>,
    /// Configurations to check.
    pub configs: Vec<JobConfig>,
    /// The reference (an empty module for a PyTorch reference).
    pub reference: JobModule,
    /// The reference is the task's PyTorch original, run in a Python runner
    /// ([`crate::exec::TorchReference`]); `None`: the CUDA reference of `reference`.
    #[serde(default)]
    pub torch_reference: Option<super::torch::TorchReference>,
    /// The candidates: the members of a group (one for a single candidate). Each runs in a
    /// runner process of its own; their results come back in this order.
    pub candidates: Vec<JobModule>,
    /// Tolerance.
    pub tolerance: Tolerance,
    /// The job's secret: every input seed and the timing schedule derive from it. The
    /// candidate's process never sees it. Serialised as `seed`, a bare number.
    #[serde(rename = "seed")]
    pub secret: JobSecret,
    /// Timing, when wanted (only run if every config passed).
    pub timing: Option<TimingOptions>,
    /// Index of the config to time.
    pub timing_config: usize,
    /// Most device memory the job may allocate, bytes (0: 90 % of free memory).
    pub max_device_bytes: u64,
    /// Bandwidth for the physical floor, GB/s (0: the device table).
    pub bandwidth_gbps: f64,
    /// FLOPs of one run of the timed config, from the task's `flops` (0: not declared).
    pub flops: f64,
    /// Peak arithmetic rate for the compute floor, TFLOP/s (0: the device table).
    pub peak_tflops: f64,
    /// Wall-clock budget of the whole job inside the worker, ms (0: 600 s). It covers the
    /// reference, the harness's own work and every member's budget with headroom, so it only
    /// runs out when something of ours is stuck (`unavailable`).
    pub deadline_ms: u64,
    /// Longest a single runner call of a member may take, ms (0: its whole budget); a
    /// member past it is a `timeout` and the others go on.
    #[serde(default)]
    pub run_limit_ms: u64,
    /// Wall time all of one member's runner calls may take together, ms (0: the job's
    /// deadline); a member past it is a `timeout` and the others go on.
    #[serde(default)]
    pub member_budget_ms: u64,
    /// The task's precision contract, in words (for the report).
    #[serde(default)]
    pub precision: String,
    /// Bytes one run of the timed config must move, from the task's `min_bytes` (`None`:
    /// the ABI's bytes, [`ExecJob::abi_bytes`]).
    #[serde(default)]
    pub min_bytes: Option<f64>,
}

fn fill_for(dist: &Distribution, dtype: DType, sizes: &crate::expr::Sizes) -> Result<Fill, String> {
    let e = |b: &crate::task::Bound| b.eval(sizes).map_err(|e| e.to_string());
    let (mode, a, b) = match dist {
        Distribution::Uniform { low, high } => (0, e(low)?, e(high)?),
        Distribution::Normal { mean, std } => (1, e(mean)?, e(std)?),
        Distribution::IntRange { low, high } => (2, e(low)?, e(high)?),
        Distribution::Arange { start, step } => (3, e(start)?, e(step)?),
        Distribution::Constant { value } => (4, e(value)?, 0.0),
        Distribution::Ragged { start, step } => (5, e(start)?, e(step)?),
        Distribution::Special { base, values, rate } => {
            let mut f = fill_for(base, dtype, sizes)?;
            f.special = values.iter().fold(0, |m, v| m | v.bit());
            f.special_rate = *rate;
            f.random = true;
            return Ok(f);
        }
    };
    // Integer buffers cannot hold fractions: uniform/normal become integer-valued.
    let mode = if !dtype.is_float() && mode <= 1 {
        2
    } else {
        mode
    };
    Ok(Fill::new(mode, a, b, dist.is_random()))
}

/// What one config of a task evaluates to: buffer lengths, scalar values and input fills.
/// The harness and the CPU twin of its input generator ([`crate::inputs`]) both start here.
#[derive(Debug, Clone, PartialEq)]
pub struct ConfigValues {
    /// Element count per buffer (the ABI's buffers in order).
    pub lens: Vec<u64>,
    /// Value per parameter (0 for buffers).
    pub scalars: Vec<f64>,
    /// Fill per buffer (`None` for `out` buffers).
    pub fills: Vec<Option<Fill>>,
}

/// A config's values could not be evaluated: the error names the buffer, scalar or input
/// and the config.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ValuesError {
    /// A buffer's length (the error names the buffer and the config).
    #[error(transparent)]
    Length(#[from] crate::task::SizeError),
    /// A scalar's value or an input's distribution.
    #[error("{what} in config `{config}`: {reason}")]
    Value {
        /// `scalar `n``, `inputs.x`, or `regime `r`: inputs.x`.
        what: String,
        /// The config.
        config: String,
        /// Why it could not be evaluated.
        reason: String,
    },
}

impl ConfigValues {
    /// Evaluates `cfg` of `task`; the error names the buffer, scalar or input and the config.
    pub fn of(task: &Task, cfg: &crate::task::InputConfig) -> Result<ConfigValues, ValuesError> {
        let lens: Vec<u64> = task.buffer_lens(cfg)?.iter().map(|b| b.2).collect();
        let mut scalars = Vec::new();
        for param in &task.params {
            match param {
                Param::Scalar { name, dtype, value } => {
                    let v = if dtype.is_float() {
                        value.eval_f64(&cfg.sizes)
                    } else {
                        value.eval_int(&cfg.sizes).map(|i| i as f64)
                    };
                    scalars.push(v.map_err(|e| ValuesError::Value {
                        what: format!("scalar `{name}`"),
                        config: cfg.name.clone(),
                        reason: e.to_string(),
                    })?);
                }
                Param::Buffer { .. } => scalars.push(0.0),
            }
        }
        Ok(ConfigValues {
            lens,
            scalars,
            fills: fills_of(task, cfg, None)?,
        })
    }
}

/// The fill of every buffer of `task` on `cfg` (`None` for `out` buffers): the main
/// distributions, or those of `regime` where it gives one.
pub fn fills_of(
    task: &Task,
    cfg: &crate::task::InputConfig,
    regime: Option<&crate::task::Regime>,
) -> Result<Vec<Option<Fill>>, ValuesError> {
    let mut fills = Vec::new();
    for b in task.buffers() {
        if !b.direction.is_input() {
            fills.push(None);
            continue;
        }
        let dist = regime
            .and_then(|r| r.inputs.get(b.name))
            .or_else(|| task.inputs.get(b.name))
            .cloned()
            .unwrap_or_else(|| Distribution::default_for(b.dtype));
        let what = match regime {
            Some(r) => format!("regime `{}`: inputs.{}", r.name, b.name),
            None => format!("inputs.{}", b.name),
        };
        let fill = fill_for(&dist, b.dtype, &cfg.sizes).map_err(|e| ValuesError::Value {
            what,
            config: cfg.name.clone(),
            reason: e.to_string(),
        })?;
        fills.push(Some(fill));
    }
    Ok(fills)
}

impl ExecJob {
    /// The deadline a job of `members` members needs so that only our own failures can reach
    /// it: every member's budget, as much again for the reference and the harness, and a
    /// fixed headroom for starting runner processes.
    pub fn deadline_for(members: usize, member_budget_ms: u64) -> u64 {
        (members as u64 + 1)
            .saturating_mul(member_budget_ms)
            .saturating_add(JOB_HEADROOM_MS)
    }

    /// Bytes of ABI buffer `i` on config `c`.
    pub fn buffer_bytes(&self, c: &JobConfig, i: usize) -> u64 {
        match (self.buffers.get(i), c.lens.get(i)) {
            (Some(b), Some(n)) => n * b.dtype.size_bytes(),
            _ => 0,
        }
    }

    /// Bytes the timed config must move: the task's `min_bytes` where it declares them,
    /// else every ABI byte once.
    pub fn floor_bytes(&self) -> f64 {
        self.min_bytes
            .unwrap_or_else(|| self.abi_bytes(self.timing_config) as f64)
    }

    /// Bytes the ABI must move once: inputs read, outputs written (inout both).
    pub fn abi_bytes(&self, config: usize) -> u64 {
        let Some(c) = self.configs.get(config) else {
            return 0;
        };
        self.buffers
            .iter()
            .zip(&c.lens)
            .map(|(b, n)| {
                let bytes = n * b.dtype.size_bytes();
                if b.direction == Direction::Inout {
                    2 * bytes
                } else {
                    bytes
                }
            })
            .sum()
    }
}
