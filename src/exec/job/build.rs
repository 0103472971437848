//! Building a job from a task, its configs and the resolved plans of every side.

use super::{
    fills_of, ConfigValues, ExecJob, JobBuffer, JobConfig, JobModule, JobParam, JobRegime,
    TimingOptions, ValuesError,
};
use crate::candidate::{Candidate, ResolvedPlan};
use crate::compile::CompiledModule;
use crate::exec::secret::JobSecret;
use crate::task::{Direction, Param, Task};

/// Why a job could not be built: a candidate's plan fails for some config.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum BuildError {
    /// A member's plan is invalid for a config.
    #[error("candidate {member}: {reason}")]
    Candidate {
        /// The member (index into `JobParts::candidates`).
        member: usize,
        /// Why.
        reason: String,
    },
    /// The task or its reference is broken.
    #[error("{0}")]
    Reference(String),
}

impl JobModule {
    fn new(cand: &Candidate, module: &CompiledModule) -> JobModule {
        use base64::Engine;
        JobModule {
            cubin_b64: base64::engine::general_purpose::STANDARD.encode(module.cubin.as_slice()),
            symbols: cand
                .launches
                .iter()
                .map(|l| (l.kernel.clone(), module.symbol(&l.kernel)))
                .collect(),
            scratch: cand.scratch.iter().map(|s| s.dtype).collect(),
        }
    }
}

/// One side of a job: a candidate after its ABI check, its module, and its plan resolved
/// for each config of [`JobParts::configs`] (by the pipeline, once).
#[derive(Debug, Clone, Copy)]
pub struct JobSide<'a> {
    /// The parsed candidate.
    pub candidate: &'a Candidate,
    /// Its compiled module.
    pub module: &'a CompiledModule,
    /// Its plan for each entry of `configs`, in order.
    pub plans: &'a [ResolvedPlan],
}

/// The reference side of a job.
#[derive(Debug, Clone, Copy)]
pub enum JobReference<'a> {
    /// The task's CUDA reference, compiled, its plan resolved per config.
    Cuda(JobSide<'a>),
    /// The task's PyTorch original, run by a Python runner.
    Torch(&'a crate::exec::torch::TorchReference),
}

/// Inputs to [`ExecJob::build`].
pub struct JobParts<'a> {
    /// The task.
    pub task: &'a Task,
    /// Configs to check (indices into `task.configs`).
    pub configs: &'a [usize],
    /// The reference.
    pub reference: JobReference<'a>,
    /// The candidates: the members of a group, or one.
    pub candidates: &'a [JobSide<'a>],
    /// Index into `configs` of the config to time (the pipeline's one rule:
    /// `task::timing_config`, also used for static occupancy).
    pub timing_config: usize,
    /// The job's secret ([`JobSecret`]'s number; [`Executor::secret`](crate::exec::Executor::secret)
    /// draws a fresh one per job).
    pub seed: u64,
    /// Timing, if wanted.
    pub timing: Option<TimingOptions>,
    /// Device memory cap (0: automatic).
    pub max_device_bytes: u64,
    /// Bandwidth override (0: automatic).
    pub bandwidth_gbps: f64,
    /// Peak arithmetic rate override, TFLOP/s (0: automatic).
    pub peak_tflops: f64,
    /// Wall-clock budget of the job inside the worker, ms (0: 600 s).
    pub deadline_ms: u64,
    /// Longest single run of a member, ms (0: its whole budget).
    pub run_limit_ms: u64,
    /// Wall time of all of one member's runner calls, ms (0: the job's deadline).
    pub member_budget_ms: u64,
}

/// Config `ci` of the task, the `k`-th checked, with every value evaluated.
fn job_config(
    p: &JobParts<'_>,
    k: usize,
    ci: usize,
    reference_plans: Option<&[ResolvedPlan]>,
) -> Result<JobConfig, BuildError> {
    let task = p.task;
    let timing_config = p.timing_config;
    let cfg = task
        .configs
        .get(ci)
        .ok_or_else(|| BuildError::Reference(format!("config index {ci} out of range")))?;
    let ConfigValues {
        lens,
        scalars,
        fills,
    } = ConfigValues::of(task, cfg).map_err(|e| BuildError::Reference(e.to_string()))?;
    let regimes = config_regimes(task, cfg, k, timing_config)?;
    // The probe changes low-order bits of continuous float inputs the contract
    // says must keep them.
    let probes = task
        .buffers()
        .zip(&fills)
        .map(|(b, f)| {
            f.as_ref()
                .filter(|f| f.is_continuous() && b.direction == Direction::In)
                .and_then(|_| task.precision.probe_bits(b.dtype))
        })
        .collect();
    let shapes = config_shapes(task, cfg, &lens)?;
    Ok(JobConfig {
        name: cfg.name.clone(),
        lens,
        scalars,
        fills,
        regimes,
        probes,
        shapes,
        reference: reference_plans.map_or_else(
            || ResolvedPlan {
                launches: Vec::new(),
                scratch_lens: Vec::new(),
            },
            |r| r[k].clone(),
        ),
        candidates: p.candidates.iter().map(|s| s.plans[k].clone()).collect(),
    })
}

/// The job's buffers and parameters, in the task's parameter order.
fn job_params(task: &Task) -> (Vec<JobBuffer>, Vec<JobParam>) {
    let mut buffers = Vec::new();
    let mut params = Vec::new();
    for param in &task.params {
        match param {
            Param::Buffer {
                name,
                direction,
                dtype,
                ..
            } => {
                params.push(JobParam::Buffer {
                    buffer: buffers.len(),
                });
                buffers.push(JobBuffer {
                    name: name.clone(),
                    dtype: *dtype,
                    direction: *direction,
                });
            }
            Param::Scalar { dtype, .. } => params.push(JobParam::Scalar { dtype: *dtype }),
        }
    }
    (buffers, params)
}

/// The plans of the reference and of every member must match the configs.
fn check_plans(
    p: &JobParts<'_>,
    reference_plans: Option<&[ResolvedPlan]>,
) -> Result<(), BuildError> {
    let timing_config = p.timing_config;
    if timing_config >= p.configs.len().max(1)
        || reference_plans.is_some_and(|r| r.len() != p.configs.len())
    {
        return Err(BuildError::Reference(format!(
            "{} configs, {} reference plans, timed config {timing_config}: they must match",
            p.configs.len(),
            reference_plans.map_or(0, <[ResolvedPlan]>::len),
        )));
    }
    if let Some((member, side)) = p
        .candidates
        .iter()
        .enumerate()
        .find(|(_, s)| s.plans.len() != p.configs.len())
    {
        return Err(BuildError::Candidate {
            member,
            reason: format!(
                "{} plans for {} configs: the pipeline must resolve one per config",
                side.plans.len(),
                p.configs.len()
            ),
        });
    }
    Ok(())
}

/// The regimes config `cfg` (the `k`-th checked) runs.
fn config_regimes(
    task: &Task,
    cfg: &crate::task::InputConfig,
    k: usize,
    timing_config: usize,
) -> Result<Vec<JobRegime>, BuildError> {
    // A regime runs on the configs it lists, or else on the timed one: a kernel
    // that is wrong in general fails it there, where its speed would count.
    task.regimes
        .iter()
        .filter(|r| {
            if r.configs.is_empty() {
                k == timing_config
            } else {
                r.applies_to(&cfg.name)
            }
        })
        .map(|r| {
            Ok(JobRegime {
                name: r.name.clone(),
                fills: fills_of(task, cfg, Some(r))?,
            })
        })
        .collect::<Result<Vec<_>, ValuesError>>()
        .map_err(|e| BuildError::Reference(e.to_string()))
}

/// The shape of every buffer of config `cfg` (its length alone when the task gives none).
fn config_shapes(
    task: &Task,
    cfg: &crate::task::InputConfig,
    lens: &[u64],
) -> Result<Vec<Vec<u64>>, BuildError> {
    task.buffers()
        .zip(lens)
        .map(|(b, &n)| {
            if b.shape.is_empty() {
                return Ok(vec![n]);
            }
            b.shape
                .iter()
                .map(|d| d.eval_int(&cfg.sizes).map(|v| v.max(0) as u64))
                .collect::<Result<Vec<u64>, _>>()
                .map_err(|e| {
                    BuildError::Reference(format!(
                        "shape of buffer `{}` in config `{}`: {e}",
                        b.name, cfg.name
                    ))
                })
        })
        .collect::<Result<Vec<_>, _>>()
}

impl ExecJob {
    /// Evaluates everything for the chosen configs.
    pub fn build(p: JobParts<'_>) -> Result<ExecJob, BuildError> {
        let task = p.task;
        let (buffers, params) = job_params(task);
        let timing_config = p.timing_config;
        let reference_plans = match p.reference {
            JobReference::Cuda(side) => Some(side.plans),
            JobReference::Torch(_) => None,
        };
        check_plans(&p, reference_plans)?;
        let configs = (p.configs.iter().enumerate())
            .map(|(k, &ci)| job_config(&p, k, ci, reference_plans))
            .collect::<Result<Vec<_>, _>>()?;
        let timed_value = |e: &Option<crate::expr::Expr>| {
            let c = task.configs.get(*p.configs.get(timing_config)?)?;
            e.as_ref()?.eval_f64(&c.sizes).ok()
        };
        let flops = timed_value(&task.flops).unwrap_or(0.0);
        let min_bytes = timed_value(&task.min_bytes);
        Ok(ExecJob {
            buffers,
            params,
            configs,
            reference: match p.reference {
                JobReference::Cuda(side) => JobModule::new(side.candidate, side.module),
                JobReference::Torch(_) => JobModule {
                    cubin_b64: String::new(),
                    symbols: Vec::new(),
                    scratch: Vec::new(),
                },
            },
            torch_reference: match p.reference {
                JobReference::Cuda(_) => None,
                JobReference::Torch(t) => Some(t.clone()),
            },
            candidates: p
                .candidates
                .iter()
                .map(|s| JobModule::new(s.candidate, s.module))
                .collect(),
            tolerance: task.tolerance,
            secret: JobSecret(p.seed),
            timing: p.timing,
            timing_config,
            max_device_bytes: p.max_device_bytes,
            bandwidth_gbps: p.bandwidth_gbps,
            flops,
            peak_tflops: p.peak_tflops,
            deadline_ms: p.deadline_ms,
            run_limit_ms: p.run_limit_ms,
            member_budget_ms: p.member_budget_ms,
            precision: task.precision.describe(),
            min_bytes,
        })
    }
}
