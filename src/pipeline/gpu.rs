//! Stages 6 and 7, correctness and timing: one job in a sandboxed GPU worker runs the
//! candidate against the reference on every selected configuration and, when asked, times
//! it on the configuration the extract stage chose.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use crate::candidate::{Candidate, PlanLimits, ResolvedPlan};
use crate::compile::{CompileOutcome, CompiledModule, Compiler};
use crate::exec::{BuildError, ExecJob, ExecOptions, ExecResult, ExecStatus, Executor, JobParts};
use crate::task::Task;

use super::error::NoExecutor;
use super::extract::Plan;
use super::report::ExecuteStage;

/// The task's reference, ready to run: parsed, checked, compiled, its plan resolved.
pub(crate) struct Reference {
    candidate: Candidate,
    module: CompiledModule,
    plans: Vec<ResolvedPlan>,
}

/// Why the reference is not ready: the task's fault (`ReferenceFailed`) or ours, for now
/// (`Unavailable`, not remembered, so the next job tries again).
enum ReferenceError {
    Broken(String),
    Unavailable(String),
}

/// The GPU stages' state: the executor (started on first use) and the references.
pub(crate) struct GpuState {
    options: ExecOptions,
    no_gpu: bool,
    executor: OnceLock<Result<Executor, NoExecutor>>,
    references: Mutex<HashMap<String, Arc<Result<Reference, String>>>>,
}

impl GpuState {
    pub fn new(options: ExecOptions, no_gpu: bool) -> GpuState {
        GpuState {
            options,
            no_gpu,
            executor: OnceLock::new(),
            references: Mutex::new(HashMap::new()),
        }
    }

    /// Uses this executor instead of starting one.
    pub fn with_executor(self, executor: Executor) -> GpuState {
        let _ = self.executor.set(Ok(executor));
        self
    }

    pub fn executor(&self) -> Result<&Executor, NoExecutor> {
        self.executor
            .get_or_init(|| {
                if self.no_gpu {
                    Err(NoExecutor::Disabled)
                } else {
                    Executor::new(self.options.clone()).map_err(NoExecutor::from)
                }
            })
            .as_ref()
            .map_err(Clone::clone)
    }

    /// The reference of `task` for `configs`, built once per task.
    fn reference(
        &self,
        task: &Task,
        configs: &[usize],
        compiler: &Compiler,
        limits: &PlanLimits,
    ) -> Result<Arc<Result<Reference, String>>, String> {
        if let Some(r) = self
            .references
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&task.id)
        {
            return Ok(Arc::clone(r));
        }
        let built = match build_reference(task, configs, compiler, limits) {
            Ok(r) => Ok(r),
            Err(ReferenceError::Broken(reason)) => Err(reason),
            Err(ReferenceError::Unavailable(reason)) => return Err(reason),
        };
        let r = Arc::new(built);
        self.references
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(task.id.clone(), Arc::clone(&r));
        Ok(r)
    }

    /// Runs the GPU job (correctness, and timing when `with_timing`) for a compiled
    /// candidate; every path gives a result.
    #[allow(clippy::too_many_arguments)]
    pub fn run(
        &self,
        task: &Task,
        candidate: &Candidate,
        module: &CompiledModule,
        plan: &Plan,
        compiler: &Compiler,
        limits: &PlanLimits,
        with_timing: bool,
    ) -> (ExecuteStage, ExecResult) {
        let start = std::time::Instant::now();
        let result = self.result(task, candidate, module, plan, compiler, limits, with_timing);
        let stage = ExecuteStage {
            status: result.status.clone(),
            device: result.device.clone(),
            millis: start.elapsed().as_secs_f64() * 1e3,
            gpu_millis: result.gpu_millis,
        };
        (stage, result)
    }

    #[allow(clippy::too_many_arguments)]
    fn result(
        &self,
        task: &Task,
        candidate: &Candidate,
        module: &CompiledModule,
        plan: &Plan,
        compiler: &Compiler,
        limits: &PlanLimits,
        with_timing: bool,
    ) -> ExecResult {
        // The plan was checked against CUDA's limits at extraction, so an invalid launch is
        // reported as such on a machine without a GPU too.
        let plans = match &plan.resolved {
            Ok(p) => p,
            Err(e) => {
                return ExecResult::status_only(ExecStatus::InvalidLaunch {
                    reason: e.to_string(),
                })
            }
        };
        let executor = match self.executor() {
            Ok(x) => x,
            Err(e) => {
                return ExecResult::status_only(ExecStatus::Unavailable {
                    reason: e.to_string(),
                })
            }
        };
        let reference = match self.reference(task, &plan.configs, compiler, limits) {
            Ok(r) => r,
            Err(reason) => return ExecResult::status_only(ExecStatus::Unavailable { reason }),
        };
        let reference = match reference.as_ref() {
            Ok(r) => r,
            Err(reason) => {
                return ExecResult::status_only(ExecStatus::ReferenceFailed {
                    reason: reason.clone(),
                })
            }
        };
        let built = ExecJob::build(JobParts {
            task,
            configs: &plan.configs,
            reference: (&reference.candidate, &reference.module),
            candidate: (candidate, module),
            reference_plans: &reference.plans,
            candidate_plans: plans,
            timing_config: plan.timed,
            seed: executor.seed(),
            timing: with_timing.then_some(self.options.timing),
            max_device_bytes: self.options.max_device_bytes,
            bandwidth_gbps: self.options.bandwidth_gbps,
            peak_tflops: self.options.peak_tflops,
            deadline_ms: self.options.timeout.as_millis() as u64,
        });
        match built {
            Ok(job) => executor.run(job),
            Err(BuildError::Candidate(reason)) => {
                ExecResult::status_only(ExecStatus::InvalidLaunch { reason })
            }
            Err(BuildError::Reference(reason)) => {
                ExecResult::status_only(ExecStatus::ReferenceFailed { reason })
            }
        }
    }
}

fn build_reference(
    task: &Task,
    configs: &[usize],
    compiler: &Compiler,
    limits: &PlanLimits,
) -> Result<Reference, ReferenceError> {
    let path = task.reference.path.display();
    let broken = |what: String| ReferenceError::Broken(format!("reference {path}: {what}"));
    let mut c = Candidate::parse(&task.reference.source).map_err(|e| broken(e.to_string()))?;
    c.check_abi(task).map_err(|e| broken(e.to_string()))?;
    let module = match compiler.compile(&c) {
        CompileOutcome::Compiled { module, .. } => module,
        CompileOutcome::Unavailable { reason } => {
            return Err(ReferenceError::Unavailable(format!(
                "the task's reference could not be compiled here: {reason}"
            )))
        }
        CompileOutcome::Failed { log, .. } => {
            return Err(broken(format!(
                "does not compile: {}",
                log.lines()
                    .find(|l| l.contains("error"))
                    .unwrap_or("")
                    .trim()
            )))
        }
        CompileOutcome::Rejected { reason } => {
            return Err(broken(format!("was rejected: {reason}")))
        }
        CompileOutcome::Timeout { limit_ms } => {
            return Err(broken(format!("did not compile within {limit_ms} ms")))
        }
    };
    let plans = configs
        .iter()
        .map(|&i| c.resolve(task, &task.configs[i], limits))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| broken(format!("plan: {e}")))?;
    Ok(Reference {
        candidate: c,
        module,
        plans,
    })
}
