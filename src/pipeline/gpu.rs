//! Stages 6 and 7, correctness and timing: one job in a sandboxed GPU worker runs the
//! candidates of a group (each in a runner process of its own) against the reference on
//! every selected configuration and, when asked, times them on the configuration the
//! extract stage chose.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use crate::candidate::{Candidate, PlanLimits, ResolvedPlan};
use crate::compile::{CompileOutcome, CompiledModule, Compiler};
use crate::exec::{
    BuildError, ExecJob, ExecOptions, ExecResult, ExecStatus, ExecuteStage, Executor, JobParts,
    JobReference, JobSide, TorchMode, TorchReference,
};
use crate::task::Task;

use super::error::NoExecutor;
use super::extract::Plan;

/// Most candidates in one GPU job (each member has a runner process of its own).
pub const MAX_JOB_MEMBERS: usize = 16;

/// A compiled candidate with its plan, ready for the GPU stages.
pub(crate) struct GpuMember<'a> {
    pub candidate: &'a Candidate,
    pub module: &'a CompiledModule,
    pub plan: &'a Plan,
}

/// The task's reference, ready to run: the CUDA reference parsed, checked, compiled, its
/// plan resolved; or the PyTorch original, which its runner builds.
pub(crate) enum Reference {
    Cuda {
        candidate: Candidate,
        module: CompiledModule,
        plans: Vec<ResolvedPlan>,
    },
    Torch(TorchReference),
}

impl Reference {
    /// The reference as a job's side.
    fn side(&self) -> JobReference<'_> {
        match self {
            Reference::Cuda {
                candidate,
                module,
                plans,
            } => JobReference::Cuda(JobSide {
                candidate,
                module,
                plans,
            }),
            Reference::Torch(t) => JobReference::Torch(t),
        }
    }
}

/// The plans were checked against CUDA's limits at extraction, so an invalid launch is
/// reported as such on a machine without a GPU too: those members' results, and the members
/// that can run.
fn invalid_launches(members: &[GpuMember<'_>]) -> (Vec<Option<ExecResult>>, Vec<usize>) {
    let mut results: Vec<Option<ExecResult>> = vec![None; members.len()];
    let mut runnable = Vec::new();
    for (k, m) in members.iter().enumerate() {
        match &m.plan.resolved {
            Ok(_) => runnable.push(k),
            Err(e) => {
                results[k] = Some(ExecResult::status_only(ExecStatus::InvalidLaunch {
                    reason: e.to_string(),
                }))
            }
        }
    }
    (results, runnable)
}

/// Identical sources run once and share their result: the members (of `runnable`) whose
/// source is the first of its kind, and for every member the one whose result it takes.
fn unique_sources(members: &[GpuMember<'_>], runnable: &[usize]) -> (Vec<usize>, Vec<usize>) {
    let mut unique: Vec<usize> = Vec::new();
    let mut same_as: Vec<usize> = (0..members.len()).collect();
    for &k in runnable {
        match unique
            .iter()
            .find(|&&u| members[u].candidate.source == members[k].candidate.source)
        {
            Some(&u) => same_as[k] = u,
            None => unique.push(k),
        }
    }
    (unique, same_as)
}

/// The PyTorch mode a task's reference runs in, when it is its PyTorch original: the one
/// asked for ([`ExecOptions::torch_reference`]), or eager for a task whose only reference
/// is its original. `None`: the task's CUDA reference.
fn torch_mode(task: &Task, options: &ExecOptions) -> Option<TorchMode> {
    options
        .torch_reference
        .or_else(|| task.torch_reference().then_some(TorchMode::Eager))
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
        let mode = torch_mode(task, &self.options);
        let key = reference_key(task, mode);
        if let Some(r) = self
            .references
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&key)
        {
            return Ok(Arc::clone(r));
        }
        let built = match mode {
            Some(mode) => torch_reference(task, mode),
            None => build_reference(task, configs, compiler, limits),
        };
        let built = match built {
            Ok(r) => Ok(r),
            Err(ReferenceError::Broken(reason)) => Err(reason),
            Err(ReferenceError::Unavailable(reason)) => return Err(reason),
        };
        let r = Arc::new(built);
        self.references
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key, Arc::clone(&r));
        Ok(r)
    }

    /// Runs the GPU stages for a group of compiled candidates of one task as few jobs:
    /// the reference's runs are shared by the members of a job, identical sources run once,
    /// and the jobs are spread over every GPU worker (at most [`MAX_JOB_MEMBERS`] each).
    /// Every member gets a result, in order; a job that failed only for our reasons is
    /// retried once.
    pub fn run_group(
        &self,
        task: &Task,
        members: &[GpuMember<'_>],
        compiler: &Compiler,
        limits: &PlanLimits,
        with_timing: bool,
    ) -> Vec<(ExecuteStage, ExecResult)> {
        let start = std::time::Instant::now();
        let results = self.results(task, members, compiler, limits, with_timing);
        let millis = start.elapsed().as_secs_f64() * 1e3;
        results
            .into_iter()
            .map(|result| {
                let stage = ExecuteStage {
                    status: result.status.clone(),
                    device: result.device.clone(),
                    millis,
                    gpu_millis: result.gpu_millis,
                    job_gpu_millis: result.job_gpu_millis,
                    job_members: result.job_members,
                };
                (stage, result)
            })
            .collect()
    }

    fn results(
        &self,
        task: &Task,
        members: &[GpuMember<'_>],
        compiler: &Compiler,
        limits: &PlanLimits,
        with_timing: bool,
    ) -> Vec<ExecResult> {
        let all = |status: ExecStatus| vec![ExecResult::status_only(status); members.len()];
        let (mut results, runnable) = invalid_launches(members);
        // Every member without a result yet gets `status`.
        let finish = |results: Vec<Option<ExecResult>>, status: ExecStatus| {
            results
                .into_iter()
                .map(|r| r.unwrap_or_else(|| ExecResult::status_only(status.clone())))
                .collect::<Vec<_>>()
        };
        let unavailable = |reason: String| ExecStatus::Unavailable { reason };
        if runnable.is_empty() {
            return finish(results, unavailable("no member to run".into()));
        }
        let executor = match self.executor() {
            Ok(x) => x,
            Err(e) => return finish(results, unavailable(e.to_string())),
        };
        let plan0 = members[runnable[0]].plan;
        let reference = match self.reference(task, &plan0.configs, compiler, limits) {
            Ok(r) => r,
            Err(reason) => return finish(results, unavailable(reason)),
        };
        let reference = match reference.as_ref() {
            Ok(r) => r,
            Err(reason) => {
                let reason = reason.clone();
                return finish(results, ExecStatus::ReferenceFailed { reason });
            }
        };
        let (unique, same_as) = unique_sources(members, &runnable);
        let sides: Vec<JobSide<'_>> = unique
            .iter()
            .filter_map(|&k| {
                let m = &members[k];
                Some(JobSide {
                    candidate: m.candidate,
                    module: m.module,
                    plans: m.plan.resolved.as_ref().ok()?,
                })
            })
            .collect();
        let run = self.run_sides(executor, task, plan0, reference.side(), &sides, with_timing);
        if run.len() != unique.len() {
            return all(ExecStatus::Unavailable {
                reason: format!(
                    "the GPU workers answered for {} of {} candidates",
                    run.len(),
                    unique.len()
                ),
            });
        }
        for (&u, r) in unique.iter().zip(run) {
            results[u] = Some(r);
        }
        for &k in &runnable {
            if same_as[k] != k {
                results[k] = results[same_as[k]].clone();
            }
        }
        finish(results, unavailable("no result for this candidate".into()))
    }

    /// Splits the members into jobs (at most [`MAX_JOB_MEMBERS`] each, spread over the GPU
    /// workers), runs them, retries once a job that failed only for our reasons, and
    /// returns one result per member.
    fn run_sides(
        &self,
        executor: &Executor,
        task: &Task,
        plan: &Plan,
        reference: JobReference<'_>,
        members: &[JobSide<'_>],
        with_timing: bool,
    ) -> Vec<ExecResult> {
        let workers = executor.workers().max(1);
        let per_job = members.len().div_ceil(workers).clamp(1, MAX_JOB_MEMBERS);
        let budget_ms = self.options.timeout.as_millis() as u64;
        let run_ms = (self.options.run_timeout.as_millis() as u64).min(budget_ms);
        let mut out: Vec<Vec<ExecResult>> = Vec::new();
        let mut jobs = Vec::new();
        let mut slots = Vec::new(); // which chunk each job is
        for (ci, chunk) in members.chunks(per_job).enumerate() {
            let built = ExecJob::build(JobParts {
                task,
                configs: &plan.configs,
                reference,
                candidates: chunk,
                timing_config: plan.timed,
                seed: executor.secret().0,
                timing: with_timing.then_some(self.options.timing),
                max_device_bytes: self.options.max_device_bytes,
                bandwidth_gbps: self.options.bandwidth_gbps,
                peak_tflops: self.options.peak_tflops,
                deadline_ms: ExecJob::deadline_for(chunk.len(), budget_ms),
                run_limit_ms: run_ms,
                member_budget_ms: budget_ms,
            });
            match built {
                Ok(job) => {
                    jobs.push(job);
                    slots.push(ci);
                    out.push(Vec::new());
                }
                // The task's own expressions (sizes, scalars, fills) do not evaluate.
                Err(BuildError::Reference(reason)) => out.push(vec![
                    ExecResult::status_only(
                        ExecStatus::ReferenceFailed { reason }
                    );
                    chunk.len()
                ]),
                // Plans that do not match the configs: our bug, not the candidate's.
                Err(e @ BuildError::Candidate { .. }) => {
                    out.push(vec![
                        ExecResult::status_only(ExecStatus::Unavailable {
                            reason: format!("the GPU job could not be built: {e}"),
                        });
                        chunk.len()
                    ])
                }
            }
        }
        let ours = |rs: &[ExecResult]| {
            rs.iter()
                .all(|r| matches!(r.status, ExecStatus::Unavailable { .. }))
        };
        let first = executor.run_all(jobs.clone());
        let mut retry = Vec::new();
        for ((job, rs), ci) in jobs.into_iter().zip(first).zip(slots) {
            if ours(&rs) {
                retry.push((job, ci));
            }
            out[ci] = rs;
        }
        if !retry.is_empty() {
            // One GPU's failure must not lose the group: once more, on whichever worker is
            // free (a broken worker was replaced by the pool).
            let (jobs, cis): (Vec<ExecJob>, Vec<usize>) = retry.into_iter().unzip();
            for (rs, ci) in executor.run_all(jobs).into_iter().zip(cis) {
                if !ours(&rs) {
                    out[ci] = rs;
                }
            }
        }
        out.into_iter().flatten().collect()
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
    Ok(Reference::Cuda {
        candidate: c,
        module,
        plans,
    })
}

/// What a built reference is remembered by: the task's id and a fingerprint of everything
/// the reference is built from (its source or original, the ABI and the configs), so that
/// two tasks with one id — an inline task edited between requests, a folder reloaded — never
/// share a reference (seen on the H200: a second task named `add_layernorm` with another
/// original ran against the first one's).
fn reference_key(task: &Task, mode: Option<TorchMode>) -> String {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    match mode {
        Some(m) => (m.as_str(), &task.original).hash(&mut h),
        None => task.reference.source.hash(&mut h),
    }
    format!("{:?}{:?}", task.params, task.configs).hash(&mut h);
    format!("{}#{:016x}", task.id, h.finish())
}

/// The task's PyTorch original as its reference (torch2cuda tasks only).
fn torch_reference(task: &Task, mode: TorchMode) -> Result<Reference, ReferenceError> {
    if task.kind != crate::task::TaskKind::Torch2cuda || task.original.trim().is_empty() {
        return Err(ReferenceError::Unavailable(format!(
            "task `{}` has no PyTorch original (a {} task): it cannot be timed against PyTorch {}",
            task.id,
            task.kind.as_str(),
            mode.as_str()
        )));
    }
    Ok(Reference::Torch(TorchReference {
        source: task.original.clone(),
        mode,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two tasks with one id but another original (or reference, or configs) never share a
    /// built reference; the same task always finds its own.
    #[test]
    fn references_are_remembered_by_content_not_only_by_id() {
        let dir =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/tasks/add_layernorm");
        let task = Task::load(dir).unwrap();
        let eager = Some(TorchMode::Eager);
        assert_eq!(
            reference_key(&task, eager),
            reference_key(&task.clone(), eager)
        );
        assert_ne!(
            reference_key(&task, eager),
            reference_key(&task, Some(TorchMode::Compile))
        );
        assert_ne!(reference_key(&task, eager), reference_key(&task, None));
        let mut other = task.clone();
        other.original.push_str("\n# another original\n");
        assert_ne!(reference_key(&task, eager), reference_key(&other, eager));
        assert_eq!(reference_key(&task, None), reference_key(&other, None));
        let mut other = task.clone();
        other.reference.source.push_str("\n// another reference\n");
        assert_ne!(reference_key(&task, None), reference_key(&other, None));
        let mut other = task.clone();
        other.configs.pop();
        assert_ne!(reference_key(&task, None), reference_key(&other, None));
        assert!(reference_key(&task, None).starts_with("add_layernorm#"));
    }
}
