//! The staged pipeline behind every reward: extract → syntax → compile → structure →
//! execute/correctness → timing → ranker, run lazily and remembered per submission, so that
//! a composite reward never compiles or executes the same candidate twice.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use sha2::{Digest, Sha256};

use super::report::{ExtractStage, Stages};
use super::Stage;
use crate::candidate::{extract_code, Candidate, CandidateError, PlanLimits};
use crate::compile::{CompileOptions, CompileOutcome, CompiledModule, Compiler};
use crate::exec::{
    BuildError, ExecJob, ExecOptions, ExecResult, ExecStatus, ExecuteStage, Executor, JobParts,
};
use crate::task::Task;

/// What a policy produced: the raw text and, if it could be read, the candidate.
#[derive(Debug, Clone)]
pub struct Submission {
    text: String,
    code: Option<String>,
    parsed: Result<Candidate, CandidateError>,
}

impl Submission {
    /// From an LLM completion (markdown with a fenced code block).
    pub fn from_completion(text: impl Into<String>) -> Submission {
        let text = text.into();
        let code = extract_code(&text).ok();
        let parsed = match &code {
            Some(c) => Candidate::parse(c),
            None => Err(CandidateError::NoCodeBlock),
        };
        Submission { text, code, parsed }
    }

    /// From CUDA source (a `.cu` file in the candidate format).
    pub fn from_source(source: impl Into<String>) -> Submission {
        let text = source.into();
        let parsed = Candidate::parse(&text);
        Submission {
            code: Some(text.clone()),
            text,
            parsed,
        }
    }

    /// The raw text.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// The extracted code, if a code block was found.
    pub fn code(&self) -> Option<&str> {
        self.code.as_deref()
    }

    /// The parsed candidate (before the task's ABI check).
    pub fn candidate(&self) -> Result<&Candidate, &CandidateError> {
        self.parsed.as_ref()
    }
}

impl From<Candidate> for Submission {
    fn from(c: Candidate) -> Submission {
        Submission {
            text: c.source.clone(),
            code: Some(c.source.clone()),
            parsed: Ok(c),
        }
    }
}

/// Settings of the pipeline.
#[derive(Debug, Clone, PartialEq)]
pub struct EvalOptions {
    /// Compile stage settings.
    pub compile: CompileOptions,
    /// Launch plan limits.
    pub plan_limits: PlanLimits,
    /// GPU execution settings.
    pub exec: ExecOptions,
    /// Skip the GPU stages even when a GPU is present (they report `Unavailable`).
    pub no_gpu: bool,
    /// Device for static occupancy (a name in `analysis::DEVICES`; default H200).
    pub occupancy_device: Option<String>,
    /// Ranker model folder for the ranker stage (default: none; see
    /// [`crate::reward::RankerReward::shipped_model_dir`]).
    pub ranker_model: Option<std::path::PathBuf>,
}

impl Default for EvalOptions {
    fn default() -> Self {
        let shipped = super::RankerReward::shipped_model_dir();
        EvalOptions {
            compile: CompileOptions::default(),
            plan_limits: PlanLimits::default(),
            exec: ExecOptions::default(),
            no_gpu: false,
            occupancy_device: None,
            // The shipped model, when the crate's fixtures are present.
            ranker_model: shipped
                .join(crate::ranker::METADATA_FILE)
                .is_file()
                .then_some(shipped),
        }
    }
}

/// The stages a submission has been through so far.
#[derive(Debug, Clone, Default)]
pub struct Evaluation {
    /// Report form of every stage run so far.
    pub stages: Stages,
    /// The candidate after the ABI check.
    pub candidate: Option<Candidate>,
    /// The compiled module.
    pub module: Option<CompiledModule>,
    /// Structural features (after the structure stage).
    pub features: Option<crate::analysis::Features>,
    reached: Option<Stage>,
    timed: bool,
}

impl Evaluation {
    /// The furthest stage evaluated.
    pub fn reached(&self) -> Option<Stage> {
        self.reached
    }
}

/// Runs and remembers stages. Share one per trainer (it holds the compile cache and the
/// worker pools).
pub struct Evaluator {
    options: EvalOptions,
    compiler: Compiler,
    memo: Mutex<HashMap<String, Arc<Mutex<Evaluation>>>>,
    executor: std::sync::OnceLock<Result<Executor, String>>,
    ranker: std::sync::OnceLock<Result<Arc<crate::ranker::TrainedRanker>, String>>,
    reference_scores: Mutex<HashMap<String, f32>>,
    references: Mutex<HashMap<String, Reference>>,
}

type Reference = Arc<Result<(Candidate, CompiledModule), String>>;

/// Submissions remembered before the memo is cleared (about one GRPO step's worth).
const MEMO_ENTRIES: usize = 2048;

/// Most candidates in one GPU job (each member has a runner process of its own).
pub const MAX_JOB_MEMBERS: usize = 16;

fn error_kind(e: &CandidateError) -> &'static str {
    match e {
        CandidateError::NoCodeBlock => "no_code_block",
        CandidateError::NoLaunchPlan => "no_launch_plan",
        CandidateError::UnknownKernel { .. } => "unknown_kernel",
        CandidateError::AbiMismatch { .. } => "abi_mismatch",
        CandidateError::BadDirective { .. } => "bad_directive",
        CandidateError::Expr { .. } => "expression",
        CandidateError::InvalidLaunch { .. } => "invalid_launch",
    }
}

impl Evaluator {
    /// A pipeline with these options.
    pub fn new(options: EvalOptions) -> Evaluator {
        Evaluator {
            compiler: Compiler::new(options.compile.clone()),
            options,
            memo: Mutex::new(HashMap::new()),
            executor: std::sync::OnceLock::new(),
            ranker: std::sync::OnceLock::new(),
            reference_scores: Mutex::new(HashMap::new()),
            references: Mutex::new(HashMap::new()),
        }
    }

    /// The GPU executor, started on first use; `Err` says why there is none.
    pub fn executor(&self) -> Result<&Executor, String> {
        self.executor
            .get_or_init(|| {
                if self.options.no_gpu {
                    Err("GPU stages are disabled (no_gpu)".into())
                } else {
                    Executor::new(self.options.exec.clone())
                }
            })
            .as_ref()
            .map_err(Clone::clone)
    }

    /// The ranker model, loaded on first use; `Err` says why there is none.
    pub fn ranker(&self) -> Result<&Arc<crate::ranker::TrainedRanker>, String> {
        self.ranker
            .get_or_init(|| {
                let dir = self
                    .options
                    .ranker_model
                    .as_ref()
                    .ok_or("no ranker model configured (EvalOptions::ranker_model)")?;
                crate::ranker::TrainedRanker::load_unchecked(dir)
                    .map(Arc::new)
                    .map_err(|e| e.to_string())
            })
            .as_ref()
            .map_err(Clone::clone)
    }

    /// Uses this ranker for the ranker stage (instead of `EvalOptions::ranker_model`).
    pub fn with_ranker(self, ranker: crate::ranker::TrainedRanker) -> Evaluator {
        let _ = self.ranker.set(Ok(Arc::new(ranker)));
        self
    }

    fn run_ranker(
        &self,
        task: &Task,
        code: &str,
        eval: &Evaluation,
    ) -> Result<super::RankerStage, String> {
        let ranker = self.ranker()?;
        let names = ranker.feature_names();
        // The structure stage already analysed this source; reuse its features.
        let features = match &eval.features {
            Some(f) => crate::ranker::features_from(f, code, names),
            None => crate::ranker::features_for(code, names),
        };
        let cand = features
            .and_then(|f| ranker.score(&f))
            .map_err(|e| e.to_string())?;
        let cached = self
            .reference_scores
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&task.id)
            .copied();
        let reference = match cached {
            Some(r) => r,
            None => {
                let r = crate::ranker::features_for(&task.reference.source, names)
                    .and_then(|f| ranker.score(&f))
                    .map_err(|e| e.to_string())?;
                self.reference_scores
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(task.id.clone(), r);
                r
            }
        };
        Ok(super::RankerStage {
            candidate_score: f64::from(cand),
            reference_score: f64::from(reference),
            prob_faster: f64::from(crate::ranker::sigmoid(cand - reference)),
            model: self
                .options
                .ranker_model
                .as_ref()
                .map_or_else(|| "in-memory model".into(), |p| p.display().to_string()),
            error: None,
        })
    }

    /// The task's reference, parsed and compiled once per task.
    pub fn reference(&self, task: &Task) -> Reference {
        if let Some(r) = self
            .references
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&task.id)
        {
            return Arc::clone(r);
        }
        let built = (|| {
            let mut c = Candidate::parse(&task.reference.source)
                .map_err(|e| format!("reference {}: {e}", task.reference.path.display()))?;
            c.check_abi(task)
                .map_err(|e| format!("reference {}: {e}", task.reference.path.display()))?;
            match self.compiler.compile(&c) {
                CompileOutcome::Compiled { module, .. } => Ok((c, module)),
                other => Err(format!(
                    "reference {} did not compile: {:?}",
                    task.reference.path.display(),
                    other.to_stage(&self.options.compile.arch, false)
                )),
            }
        })();
        let r = Arc::new(built);
        self.references
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(task.id.clone(), Arc::clone(&r));
        r
    }

    /// Indices of the configs to check (all, or `max_configs` spread over the list).
    pub fn config_indices(&self, task: &Task) -> Vec<usize> {
        let n = task.configs.len();
        match self.options.exec.max_configs {
            Some(m) if m > 0 && m < n => (0..m)
                .map(|i| i * (n - 1) / (m - 1).max(1))
                .collect::<std::collections::BTreeSet<_>>()
                .into_iter()
                .collect(),
            _ => (0..n).collect(),
        }
    }

    /// Runs the GPU job for an evaluated candidate (correctness, and timing when asked).
    fn run_gpu(&self, task: &Task, eval: &mut Evaluation, with_timing: bool) {
        self.run_gpu_group(task, &mut [eval], with_timing);
    }

    /// Runs the GPU stages for a group of evaluated candidates of one task as few jobs:
    /// the reference's runs are shared by the members of a job, identical sources run once,
    /// and the jobs are spread over every GPU worker. Every member gets a result.
    fn run_gpu_group(&self, task: &Task, evals: &mut [&mut Evaluation], with_timing: bool) {
        let start = std::time::Instant::now();
        let configs = self.config_indices(task);
        let mut results: Vec<Option<ExecResult>> = vec![None; evals.len()];
        // Plans are checked against CUDA's limits before any GPU is needed, so an invalid
        // launch is reported as such on a machine without one too.
        let mut runnable = Vec::new();
        for (k, e) in evals.iter().enumerate() {
            let (Some(cand), Some(_)) = (&e.candidate, &e.module) else {
                continue;
            };
            let plan_error = configs.iter().find_map(|&i| {
                cand.resolve(task, &task.configs[i], &self.options.plan_limits)
                    .err()
                    .map(|e| e.to_string())
            });
            match plan_error {
                Some(reason) => {
                    results[k] = Some(ExecResult::status_only(ExecStatus::InvalidLaunch {
                        reason,
                    }))
                }
                None => runnable.push(k),
            }
        }
        if !runnable.is_empty() {
            match self.executor() {
                Err(reason) => {
                    for &k in &runnable {
                        results[k] = Some(ExecResult::status_only(ExecStatus::Unavailable {
                            reason: reason.clone(),
                        }));
                    }
                }
                Ok(executor) => {
                    let reference = self.reference(task);
                    match reference.as_ref() {
                        Err(reason) => {
                            for &k in &runnable {
                                results[k] =
                                    Some(ExecResult::status_only(ExecStatus::ReferenceFailed {
                                        reason: reason.clone(),
                                    }));
                            }
                        }
                        Ok((rc, rm)) => {
                            // Identical sources run once; their results are shared.
                            let mut unique: Vec<usize> = Vec::new();
                            let mut same_as: Vec<usize> = vec![usize::MAX; evals.len()];
                            for &k in &runnable {
                                let src = evals[k].candidate.as_ref().map(|c| &c.source);
                                match unique.iter().find(|&&u| {
                                    evals[u].candidate.as_ref().map(|c| &c.source) == src
                                }) {
                                    Some(&u) => same_as[k] = u,
                                    None => {
                                        same_as[k] = k;
                                        unique.push(k);
                                    }
                                }
                            }
                            let members: Vec<(&Candidate, &CompiledModule)> = unique
                                .iter()
                                .filter_map(|&k| {
                                    Some((evals[k].candidate.as_ref()?, evals[k].module.as_ref()?))
                                })
                                .collect();
                            let run = self.run_members(
                                executor,
                                task,
                                &configs,
                                (rc, rm),
                                &members,
                                with_timing,
                            );
                            for (&u, r) in unique.iter().zip(run) {
                                results[u] = Some(r);
                            }
                            for &k in &runnable {
                                if same_as[k] != k {
                                    results[k] = results[same_as[k]].clone();
                                }
                            }
                        }
                    }
                }
            }
        }
        let millis = start.elapsed().as_secs_f64() * 1e3;
        for (e, r) in evals.iter_mut().zip(results) {
            let Some(result) = r else { continue };
            e.stages.execute = Some(ExecuteStage {
                status: result.status,
                device: result.device,
                millis,
                gpu_millis: result.gpu_millis,
                job_gpu_millis: result.job_gpu_millis,
                job_members: result.job_members,
            });
            e.stages.correctness = result.correctness;
            e.stages.timing = result.timing;
            e.timed = with_timing;
        }
    }

    /// Splits the members into jobs (at most [`MAX_JOB_MEMBERS`] each, spread over the GPU
    /// workers), runs them, retries once a job that failed for our reasons, and returns one
    /// result per member.
    fn run_members(
        &self,
        executor: &Executor,
        task: &Task,
        configs: &[usize],
        reference: (&Candidate, &CompiledModule),
        members: &[(&Candidate, &CompiledModule)],
        with_timing: bool,
    ) -> Vec<ExecResult> {
        let workers = executor.workers().max(1);
        let per_job = members.len().div_ceil(workers).clamp(1, MAX_JOB_MEMBERS);
        let chunks: Vec<&[(&Candidate, &CompiledModule)]> = members.chunks(per_job).collect();
        let timeout_ms = self.options.exec.timeout.as_millis() as u64;
        let build = |chunk: &[(&Candidate, &CompiledModule)]| {
            ExecJob::build(JobParts {
                task,
                configs,
                reference,
                candidates: chunk,
                limits: &self.options.plan_limits,
                seed: executor.seed(),
                timing: with_timing.then_some(self.options.exec.timing),
                max_device_bytes: self.options.exec.max_device_bytes,
                bandwidth_gbps: self.options.exec.bandwidth_gbps,
                peak_tflops: self.options.exec.peak_tflops,
                deadline_ms: timeout_ms * chunk.len() as u64,
                run_limit_ms: timeout_ms,
            })
        };
        let mut out: Vec<Vec<ExecResult>> = Vec::new();
        let mut jobs = Vec::new();
        let mut slots = Vec::new(); // which chunk each job is
        for (ci, chunk) in chunks.iter().enumerate() {
            match build(chunk) {
                Ok(job) => {
                    jobs.push(job);
                    slots.push(ci);
                    out.push(Vec::new());
                }
                Err(BuildError::Candidate { .. }) | Err(BuildError::Reference(_)) => {
                    out.push(
                        chunk
                            .iter()
                            .map(
                                |(c, _)| match self.build_one_error(task, configs, reference, c) {
                                    Some(status) => ExecResult::status_only(status),
                                    None => ExecResult::status_only(ExecStatus::Unavailable {
                                        reason: "the GPU job could not be built".into(),
                                    }),
                                },
                            )
                            .collect(),
                    );
                }
            }
        }
        let first = executor.run_all(jobs.clone());
        let mut retry = Vec::new();
        for ((job, rs), ci) in jobs.into_iter().zip(first).zip(slots) {
            let ours = rs
                .iter()
                .all(|r| matches!(r.status, ExecStatus::Unavailable { .. }));
            if ours {
                retry.push((job, ci));
            }
            out[ci] = rs;
        }
        if !retry.is_empty() {
            // One GPU's failure must not lose the group: once more, on whichever worker is
            // free (a broken worker was replaced by the pool).
            let (jobs, cis): (Vec<ExecJob>, Vec<usize>) = retry.into_iter().unzip();
            for (rs, ci) in executor.run_all(jobs).into_iter().zip(cis) {
                if !rs
                    .iter()
                    .all(|r| matches!(r.status, ExecStatus::Unavailable { .. }))
                {
                    out[ci] = rs;
                }
            }
        }
        out.into_iter().flatten().collect()
    }

    /// Why a single candidate's job cannot be built (its plan, or the task's reference).
    fn build_one_error(
        &self,
        task: &Task,
        configs: &[usize],
        reference: (&Candidate, &CompiledModule),
        cand: &Candidate,
    ) -> Option<ExecStatus> {
        let module = reference.1;
        match ExecJob::build(JobParts {
            task,
            configs,
            reference,
            candidates: &[(cand, module)],
            limits: &self.options.plan_limits,
            seed: 0,
            timing: None,
            max_device_bytes: 0,
            bandwidth_gbps: 0.0,
            peak_tflops: 0.0,
            deadline_ms: 0,
            run_limit_ms: 0,
        }) {
            Ok(_) => None,
            Err(BuildError::Candidate { reason, .. }) => Some(ExecStatus::InvalidLaunch { reason }),
            Err(BuildError::Reference(reason)) => Some(ExecStatus::ReferenceFailed { reason }),
        }
    }

    /// The options.
    pub fn options(&self) -> &EvalOptions {
        &self.options
    }

    /// Forgets remembered evaluations (compiled modules stay in the compile cache), so the
    /// next call measures again.
    pub fn clear_memo(&self) {
        self.memo.lock().unwrap_or_else(|p| p.into_inner()).clear();
    }

    /// The compiler (shared cache).
    pub fn compiler(&self) -> &Compiler {
        &self.compiler
    }

    fn memo_entry(&self, task: &Task, sub: &Submission) -> Arc<Mutex<Evaluation>> {
        let mut h = Sha256::new();
        h.update(task.id.as_bytes());
        h.update(b"\0");
        h.update(sub.text.as_bytes());
        let key: String = h.finalize().iter().map(|b| format!("{b:02x}")).collect();
        let mut memo = self.memo.lock().unwrap_or_else(|p| p.into_inner());
        if memo.len() >= MEMO_ENTRIES {
            memo.clear();
        }
        Arc::clone(memo.entry(key).or_default())
    }

    /// Evaluates `sub` for `task` up to and including `upto`; earlier results are reused.
    pub fn evaluate(&self, task: &Task, sub: &Submission, upto: Stage) -> Evaluation {
        let entry = self.memo_entry(task, sub);
        let mut eval = entry.lock().unwrap_or_else(|p| p.into_inner());
        self.advance(task, sub, &mut eval, upto);
        eval.clone()
    }

    /// Evaluates a GRPO group: the CPU stages in parallel (identical sources compiled
    /// once), then the GPU stages of every member as few jobs (see
    /// [`MAX_JOB_MEMBERS`]), sharing the reference's runs and spread over every GPU.
    pub fn evaluate_batch(&self, task: &Task, subs: &[Submission], upto: Stage) -> Vec<Evaluation> {
        // Compile each distinct source once before the rest hit the cache.
        let mut seen = std::collections::HashSet::new();
        let firsts: Vec<Submission> = subs
            .iter()
            .filter(|s| seen.insert(s.code().unwrap_or(s.text())))
            .cloned()
            .collect();
        let cpu = upto.min(Stage::Ranker);
        if firsts.len() < subs.len() {
            self.evaluate_parallel(task, &firsts, cpu);
        }
        let evals = self.evaluate_parallel(task, subs, cpu);
        if upto <= Stage::Ranker {
            return evals;
        }
        // The GPU stages of the whole group at once. Entries are locked in address order,
        // so concurrent batches cannot deadlock.
        let per_sub: Vec<Arc<Mutex<Evaluation>>> =
            subs.iter().map(|s| self.memo_entry(task, s)).collect();
        let mut entries = per_sub.clone();
        entries.sort_by_key(|e| Arc::as_ptr(e) as usize);
        entries.dedup_by(|a, b| Arc::ptr_eq(a, b));
        let mut guards: Vec<_> = entries
            .iter()
            .map(|e| e.lock().unwrap_or_else(|p| p.into_inner()))
            .collect();
        let with_timing = upto >= Stage::Timing;
        {
            let mut fresh: Vec<&mut Evaluation> = guards
                .iter_mut()
                .filter(|g| g.reached == Some(Stage::Ranker))
                .map(|g| &mut **g)
                .collect();
            if !fresh.is_empty() {
                self.run_gpu_group(task, &mut fresh, with_timing);
                for e in fresh {
                    e.reached = Some(if with_timing {
                        Stage::Timing
                    } else {
                        Stage::Correctness
                    });
                }
            }
        }
        if with_timing {
            let mut untimed: Vec<&mut Evaluation> = guards
                .iter_mut()
                .filter(|g| {
                    g.reached == Some(Stage::Correctness)
                        && !g.timed
                        && g.stages.correctness.as_ref().is_some_and(|c| c.passed)
                })
                .map(|g| &mut **g)
                .collect();
            if !untimed.is_empty() {
                self.run_gpu_group(task, &mut untimed, true);
            }
            for g in guards.iter_mut() {
                if g.reached == Some(Stage::Correctness) {
                    g.reached = Some(Stage::Timing);
                }
            }
        }
        drop(guards);
        drop(evals);
        subs.iter()
            .zip(&per_sub)
            .map(|(s, entry)| {
                let mut e = entry.lock().unwrap_or_else(|p| p.into_inner());
                self.advance(task, s, &mut e, upto);
                e.clone()
            })
            .collect()
    }

    /// Evaluates submissions up to `upto` on the compile workers' threads.
    fn evaluate_parallel(&self, task: &Task, subs: &[Submission], upto: Stage) -> Vec<Evaluation> {
        let threads = self.options.compile.workers.max(1).min(subs.len().max(1));
        let next = Mutex::new(0usize);
        let out: Mutex<Vec<Option<Evaluation>>> = Mutex::new(vec![None; subs.len()]);
        std::thread::scope(|s| {
            for _ in 0..threads {
                s.spawn(|| loop {
                    let k = {
                        let mut n = next.lock().unwrap_or_else(|p| p.into_inner());
                        let k = *n;
                        *n += 1;
                        k
                    };
                    if k >= subs.len() {
                        return;
                    }
                    let e = self.evaluate(task, &subs[k], upto);
                    out.lock().unwrap_or_else(|p| p.into_inner())[k] = Some(e);
                });
            }
        });
        out.into_inner()
            .unwrap_or_else(|p| p.into_inner())
            .into_iter()
            .enumerate()
            .map(|(k, e)| e.unwrap_or_else(|| self.evaluate(task, &subs[k], upto)))
            .collect()
    }

    fn advance(&self, task: &Task, sub: &Submission, eval: &mut Evaluation, upto: Stage) {
        while eval.reached.is_none_or(|r| r < upto) {
            let next = match eval.reached {
                None => Stage::Extract,
                Some(r) => match r.next() {
                    Some(n) => n,
                    None => return,
                },
            };
            self.run_stage(task, sub, eval, next, upto);
            eval.reached = Some(next);
        }
    }

    fn run_stage(
        &self,
        task: &Task,
        sub: &Submission,
        eval: &mut Evaluation,
        stage: Stage,
        upto: Stage,
    ) {
        match stage {
            Stage::Extract => {
                let checked = sub.parsed.clone().and_then(|mut c| {
                    c.check_abi(task)?;
                    Ok(c)
                });
                eval.stages.extract = match &checked {
                    Ok(c) => ExtractStage {
                        ok: true,
                        error_kind: None,
                        error: None,
                        kernels: c.kernel_names(),
                        launches: c.launches.len(),
                    },
                    Err(e) => ExtractStage {
                        ok: false,
                        error_kind: Some(error_kind(e).into()),
                        error: Some(e.to_string()),
                        kernels: Vec::new(),
                        launches: 0,
                    },
                };
                eval.candidate = checked.ok();
            }
            Stage::Syntax => {
                if let Some(code) = sub.code() {
                    eval.stages.syntax = Some(crate::syntax::check(code.as_bytes()));
                }
            }
            Stage::Compile => {
                if let Some(c) = &eval.candidate {
                    let outcome = self.compiler.compile(c);
                    eval.stages.compile = Some(
                        outcome.to_stage(&self.options.compile.arch, self.compiler.is_sandboxed()),
                    );
                    if let CompileOutcome::Compiled { module, .. } = outcome {
                        eval.module = Some(module);
                    }
                }
            }
            Stage::Structure => {
                if let Some(code) = sub.code() {
                    let name = self.options.occupancy_device.as_deref().unwrap_or("H200");
                    let spec = crate::analysis::DeviceSpec::by_name(name)
                        .unwrap_or(&crate::analysis::DEVICES[0]);
                    super::structure::run(eval, code, task, &self.options.plan_limits, spec);
                }
            }
            // One GPU job does correctness and, when a later stage is wanted, timing.
            Stage::Correctness => self.run_gpu(task, eval, upto >= Stage::Timing),
            Stage::Timing => {
                let passed = eval.stages.correctness.as_ref().is_some_and(|c| c.passed);
                if passed && !eval.timed {
                    self.run_gpu(task, eval, true);
                }
            }
            Stage::Ranker => {
                if let Some(code) = sub.code() {
                    let stage =
                        self.run_ranker(task, code, eval)
                            .unwrap_or_else(|e| super::RankerStage {
                                candidate_score: f64::NAN,
                                reference_score: f64::NAN,
                                prob_faster: f64::NAN,
                                model: String::new(),
                                error: Some(e),
                            });
                    eval.stages.ranker = Some(stage);
                }
            }
        }
    }
}

/// What a reward sees besides the submission.
#[derive(Clone, Copy)]
pub struct Context<'a> {
    /// The task being solved.
    pub task: &'a Task,
    /// Training step (for curricula such as [`super::Staged`]).
    pub step: u64,
    /// The shared pipeline.
    pub evaluator: &'a Evaluator,
}

impl<'a> Context<'a> {
    /// A context at step 0.
    pub fn new(task: &'a Task, evaluator: &'a Evaluator) -> Context<'a> {
        Context {
            task,
            step: 0,
            evaluator,
        }
    }

    /// The same context at another training step.
    pub fn at_step(self, step: u64) -> Context<'a> {
        Context { step, ..self }
    }

    /// Evaluates a submission up to `upto` (memoised).
    pub fn evaluate(&self, sub: &Submission, upto: Stage) -> Evaluation {
        self.evaluator.evaluate(self.task, sub, upto)
    }
}

/// The one-word verdict of an evaluation, for tables and manifests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// No candidate (no code block, plan or ABI problem).
    ExtractError,
    /// NVRTC failed, the source was rejected, or the compile timed out.
    CompileError,
    /// The plan exceeds CUDA's or the configured limits.
    InvalidLaunch,
    /// A CUDA call failed while the candidate ran.
    CudaError,
    /// The job ran past its limit.
    Timeout,
    /// The worker died.
    Crashed,
    /// The reference failed (a broken task, not the candidate's fault).
    ReferenceFailed,
    /// A stage could not run here.
    Unavailable,
    /// Ran, but failed a check.
    Incorrect,
    /// Passed every check.
    Correct,
}

impl Verdict {
    /// The snake_case name.
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::ExtractError => "extract_error",
            Verdict::CompileError => "compile_error",
            Verdict::InvalidLaunch => "invalid_launch",
            Verdict::CudaError => "cuda_error",
            Verdict::Timeout => "timeout",
            Verdict::Crashed => "crashed",
            Verdict::ReferenceFailed => "reference_failed",
            Verdict::Unavailable => "unavailable",
            Verdict::Incorrect => "incorrect",
            Verdict::Correct => "correct",
        }
    }
}

impl std::fmt::Display for Verdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Evaluation {
    /// The verdict of the stages run so far.
    pub fn verdict(&self) -> Verdict {
        if !self.stages.extract.ok {
            return Verdict::ExtractError;
        }
        match &self.stages.compile {
            Some(c) if c.status == "unavailable" => return Verdict::Unavailable,
            Some(c) if !c.ok => return Verdict::CompileError,
            None => return Verdict::Unavailable,
            _ => {}
        }
        if let Some(c) = &self.stages.correctness {
            return if c.passed {
                Verdict::Correct
            } else {
                Verdict::Incorrect
            };
        }
        match self.stages.execute.as_ref().map(|e| &e.status) {
            Some(ExecStatus::CudaError { .. }) => Verdict::CudaError,
            Some(ExecStatus::InvalidLaunch { .. }) => Verdict::InvalidLaunch,
            Some(ExecStatus::Timeout { .. }) => Verdict::Timeout,
            Some(ExecStatus::Crashed { .. }) => Verdict::Crashed,
            Some(ExecStatus::ReferenceFailed { .. }) => Verdict::ReferenceFailed,
            _ => Verdict::Unavailable,
        }
    }
}
