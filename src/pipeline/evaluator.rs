//! The [`Evaluator`]: options, the memo of evaluations, batching, and the loop that runs
//! the stages in order, each at most once per submission.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use sha2::{Digest, Sha256};

use crate::analysis::{DeviceSpec, DEVICES};
use crate::candidate::PlanLimits;
use crate::compile::{CompileOptions, Compiler};
use crate::exec::{ExecOptions, Executor};
use crate::ranker::TrainedRanker;
use crate::task::Task;

use super::error::{EvalError, NoExecutor, NoRanker};
use super::evaluation::Evaluation;
use super::extract::{self, Plan, Submission};
use super::gpu::{GpuMember, GpuState};
use super::ranker::{RankerInput, RankerState};
use super::{compile, structure, syntax, Stage};

/// Settings of the pipeline; every field has a documented default.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct EvalOptions {
    /// Compile stage settings (default: `sm_90`, sandboxed workers, memory-only cache).
    pub compile: CompileOptions,
    /// Launch plan limits.
    pub plan_limits: PlanLimits,
    /// GPU execution settings.
    pub exec: ExecOptions,
    /// Skip the GPU stages even when a GPU is present (they report `Unavailable`).
    /// Default false.
    pub no_gpu: bool,
    /// Device for static occupancy (a name in `analysis::DEVICES`; default H200).
    pub occupancy_device: Option<String>,
    /// Ranker model folder for the ranker stage (default: the model embedded in the library,
    /// see [`TrainedRanker::shipped`]; the command line fills it from
    /// `$CUDAPERF_RANKER_MODEL`, [`crate::pipeline::RANKER_MODEL_ENV`]).
    pub ranker_model: Option<PathBuf>,
}

impl EvalOptions {
    /// Default options whose sandbox workers are this very program: the pools start
    /// `<current exe> __cudaperf_worker <role>`, so the program must call
    /// [`crate::worker::run_if_requested`] first thing in `main`. A trainer then needs no
    /// `cudaperf` binary beside it.
    ///
    /// ```no_run
    /// use cudaperf::pipeline::{EvalOptions, Evaluator};
    /// fn main() -> Result<(), Box<dyn std::error::Error>> {
    ///     cudaperf::worker::run_if_requested(); // returns at once unless started as a worker
    ///     let evaluator = Evaluator::new(EvalOptions::self_worker()?)?;
    ///     // ... score with it ...
    ///     # let _ = evaluator;
    ///     Ok(())
    /// }
    /// ```
    pub fn self_worker() -> Result<EvalOptions, EvalError> {
        let exe = std::env::current_exe().map_err(EvalError::CurrentExe)?;
        let mut o = EvalOptions::default();
        o.compile.worker = Some(exe.clone());
        o.exec.worker = Some(exe);
        Ok(o)
    }
}

/// Runs and remembers stages. Share one per trainer (it holds the compile cache, the worker
/// pools and the ranker).
///
/// The memo keeps only what the candidate caused. Each call of [`evaluate`](Self::evaluate),
/// [`evaluate_batch`](Self::evaluate_batch), [`evaluate_groups`](Self::evaluate_groups) or
/// [`evaluate_cpu_stages_with`](Self::evaluate_cpu_stages_with) is one attempt: a stage that
/// failed for our reasons in it (see [`Evaluation::unavailable`]) is reported `unavailable`
/// to that caller and forgotten, so the same submission is evaluated again by the next call
/// — once the worker, GPU or model is back, it scores normally. A caller that reads one
/// attempt twice keeps the [`Evaluation`] it got (`Reward::score_evaluated`).
pub struct Evaluator {
    options: EvalOptions,
    configs: Mutex<HashMap<String, Vec<usize>>>,
    compiler: Compiler,
    memo: Mutex<HashMap<String, Arc<Mutex<Evaluation>>>>,
    gpu: GpuState,
    ranker: RankerState,
    spec: &'static DeviceSpec,
}

/// Submissions remembered before the memo is cleared (about one GRPO step's worth).
const MEMO_ENTRIES: usize = 2048;

impl Evaluator {
    /// A pipeline with these options. The compile stage's options are checked now (see
    /// [`Compiler::new`]): no worker executable for sandboxed compiles, an architecture
    /// NVRTC does not know or an unusable cache folder is an error, not a stage that
    /// silently fails for every candidate. The GPU executor and the ranker model are
    /// started and loaded on first use; when they cannot be, their stages are `unavailable`.
    pub fn new(options: EvalOptions) -> Result<Evaluator, EvalError> {
        let compiler = Compiler::new(options.compile.clone())?;
        let spec = options
            .occupancy_device
            .as_deref()
            .and_then(DeviceSpec::by_name)
            .unwrap_or(&DEVICES[0]);
        Ok(Evaluator {
            configs: Mutex::new(HashMap::new()),
            compiler,
            memo: Mutex::new(HashMap::new()),
            gpu: GpuState::new(options.exec.clone(), options.no_gpu),
            ranker: RankerState::new(options.ranker_model.as_ref()),
            spec,
            options,
        })
    }

    /// Uses this ranker for the ranker stage (instead of `EvalOptions::ranker_model`).
    pub fn with_ranker(self, ranker: TrainedRanker) -> Evaluator {
        Evaluator {
            ranker: RankerState::with_model(ranker),
            ..self
        }
    }

    /// Uses this executor for the GPU stages instead of starting one (see
    /// [`Executor::with_workers`]: tests of the GPU pool's failure paths without a GPU).
    pub fn with_executor(self, executor: Executor) -> Evaluator {
        Evaluator {
            gpu: self.gpu.with_executor(executor),
            ..self
        }
    }

    /// The GPU executor, started on first use; `Err` says why there is none.
    pub fn executor(&self) -> Result<&Executor, NoExecutor> {
        self.gpu.executor()
    }

    /// The ranker model, loaded on first use; `Err` says why there is none.
    pub fn ranker(&self) -> Result<&Arc<TrainedRanker>, NoRanker> {
        self.ranker.model()
    }

    /// The options.
    pub fn options(&self) -> &EvalOptions {
        &self.options
    }

    /// The compiler (shared cache).
    pub fn compiler(&self) -> &Compiler {
        &self.compiler
    }

    /// Indices of the configs the GPU stages check (all, or `exec.max_configs` spread over
    /// the list).
    pub fn config_indices(&self, task: &Task) -> Vec<usize> {
        let mut cache = self.configs.lock().unwrap_or_else(|p| p.into_inner());
        cache
            .entry(task.id.clone())
            .or_insert_with(|| extract::select_configs(task, self.options.exec.max_configs))
            .clone()
    }

    /// Forgets remembered evaluations (compiled modules stay in the compile cache), so the
    /// next call measures again.
    pub fn clear_memo(&self) {
        self.memo.lock().unwrap_or_else(|p| p.into_inner()).clear();
    }

    fn memo_key(task: &Task, sub: &Submission) -> String {
        let mut h = Sha256::new();
        h.update(task.id.as_bytes());
        h.update(b"\0");
        h.update(sub.text().as_bytes());
        h.finalize().iter().map(|b| format!("{b:02x}")).collect()
    }

    fn memo_entry(&self, task: &Task, sub: &Submission) -> Arc<Mutex<Evaluation>> {
        let key = Self::memo_key(task, sub);
        let mut memo = self.memo.lock().unwrap_or_else(|p| p.into_inner());
        if memo.len() >= MEMO_ENTRIES {
            memo.clear();
        }
        Arc::clone(memo.entry(key).or_default())
    }

    /// Evaluates `sub` for `task` up to and including `upto`; earlier results the candidate
    /// caused are reused, stages that failed for our reasons run again.
    pub fn evaluate(&self, task: &Task, sub: &Submission, upto: Stage) -> Evaluation {
        let entry = self.memo_entry(task, sub);
        let mut eval = entry.lock().unwrap_or_else(|p| p.into_inner());
        self.advance(task, sub, &mut eval, upto);
        let out = eval.clone();
        eval.forget_our_failures();
        out
    }

    /// [`evaluate`](Self::evaluate) within a larger attempt: what failed for our reasons is
    /// kept until the attempt ends ([`forget_our_failures`](Self::forget_our_failures)).
    fn evaluate_within(&self, task: &Task, sub: &Submission, upto: Stage) -> Evaluation {
        let entry = self.memo_entry(task, sub);
        let mut eval = entry.lock().unwrap_or_else(|p| p.into_inner());
        self.advance(task, sub, &mut eval, upto);
        eval.clone()
    }

    /// Ends an attempt on these submissions: their failures of ours are forgotten.
    fn forget_our_failures(&self, task: &Task, subs: &[Submission]) {
        let keys: std::collections::HashSet<String> =
            subs.iter().map(|s| Self::memo_key(task, s)).collect();
        let entries: Vec<Arc<Mutex<Evaluation>>> = {
            let memo = self.memo.lock().unwrap_or_else(|p| p.into_inner());
            keys.iter().filter_map(|k| memo.get(k).cloned()).collect()
        };
        for entry in entries {
            entry
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .forget_our_failures();
        }
    }

    /// Evaluates a GRPO group, one evaluation per submission, in order: the CPU stages in
    /// parallel (identical sources compiled once), then the GPU stages of every member as
    /// few jobs (see [`MAX_JOB_MEMBERS`](super::MAX_JOB_MEMBERS)), sharing the reference's
    /// runs and spread over every GPU.
    pub fn evaluate_batch(&self, task: &Task, subs: &[Submission], upto: Stage) -> Vec<Evaluation> {
        let out = self.batch_within(task, subs, upto);
        self.forget_our_failures(task, subs);
        out
    }

    /// [`evaluate_batch`](Self::evaluate_batch) within a larger attempt (failures of ours
    /// are kept until the caller ends it).
    fn batch_within(&self, task: &Task, subs: &[Submission], upto: Stage) -> Vec<Evaluation> {
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
        drop(evals);
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
        subs.iter()
            .zip(&per_sub)
            .map(|(s, entry)| {
                let mut e = entry.lock().unwrap_or_else(|p| p.into_inner());
                self.advance(task, s, &mut e, upto);
                e.clone()
            })
            .collect()
    }

    /// Evaluates several groups, each one task's submissions, one list of evaluations per
    /// group, in order. The CPU stages of a group run while earlier groups are on the GPUs:
    /// a thread compiles the groups one after another, and each group's GPU stages start as
    /// soon as its compiles are through (groups run side by side when there are several GPU
    /// workers). Each group is scored as [`evaluate_batch`](Self::evaluate_batch) would.
    pub fn evaluate_groups(
        &self,
        groups: &[(&Task, &[Submission])],
        upto: Stage,
    ) -> Vec<Vec<Evaluation>> {
        if upto <= Stage::Ranker || groups.len() < 2 {
            return groups
                .iter()
                .map(|(task, subs)| self.evaluate_batch(task, subs, upto))
                .collect();
        }
        let (ready, compiled) = std::sync::mpsc::channel::<usize>();
        std::thread::scope(|s| {
            s.spawn(move || {
                for (k, (task, subs)) in groups.iter().enumerate() {
                    // The same attempt as the GPU stages that follow (which end it).
                    let _ = self.batch_within(task, subs, Stage::Ranker);
                    if ready.send(k).is_err() {
                        return;
                    }
                }
            });
            let running: Vec<_> = compiled
                .iter()
                .map(|k| {
                    let (task, subs) = groups[k];
                    (k, s.spawn(move || self.evaluate_batch(task, subs, upto)))
                })
                .collect();
            let mut out: Vec<Vec<Evaluation>> = vec![Vec::new(); groups.len()];
            for (k, h) in running {
                out[k] = h.join().unwrap_or_else(|p| std::panic::resume_unwind(p));
            }
            out
        })
    }

    /// Evaluates submissions up to `upto`, at most [`Stage::Ranker`] (the stages that need no
    /// GPU), in parallel on the compile workers' threads, and calls `done(i, &evaluation)` for
    /// each submission as soon as its own stages are through — from those threads, in no
    /// particular order. A server uses it to answer what is done when a request's deadline
    /// passes while another completion still compiles.
    pub fn evaluate_cpu_stages_with(
        &self,
        task: &Task,
        subs: &[Submission],
        upto: Stage,
        done: &(dyn Fn(usize, &Evaluation) + Sync),
    ) -> Vec<Evaluation> {
        let out = self.evaluate_parallel_with(task, subs, upto.min(Stage::Ranker), done);
        self.forget_our_failures(task, subs);
        out
    }

    /// Evaluates submissions up to `upto` on the compile workers' threads.
    fn evaluate_parallel(&self, task: &Task, subs: &[Submission], upto: Stage) -> Vec<Evaluation> {
        self.evaluate_parallel_with(task, subs, upto, &|_, _| {})
    }

    fn evaluate_parallel_with(
        &self,
        task: &Task,
        subs: &[Submission],
        upto: Stage,
        done: &(dyn Fn(usize, &Evaluation) + Sync),
    ) -> Vec<Evaluation> {
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
                    let e = self.evaluate_within(task, &subs[k], upto);
                    done(k, &e);
                    out.lock().unwrap_or_else(|p| p.into_inner())[k] = Some(e);
                });
            }
        });
        out.into_inner()
            .unwrap_or_else(|p| p.into_inner())
            .into_iter()
            .enumerate()
            .map(|(k, e)| e.unwrap_or_else(|| self.evaluate_within(task, &subs[k], upto)))
            .collect()
    }

    fn advance(&self, task: &Task, sub: &Submission, eval: &mut Evaluation, upto: Stage) {
        // A ranker result forgotten after an error of ours runs again on its own (the stages
        // after it are the candidate's and stay).
        let ranked = eval.reached.is_some_and(|r| r >= Stage::Ranker);
        if ranked && upto >= Stage::Ranker && eval.stages.ranker.is_none() {
            self.run_stage(task, sub, eval, Stage::Ranker, upto);
        }
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

    /// The stages, in the order they run.
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
                let configs = self.config_indices(task);
                let e = extract::run(task, sub, configs, &self.options.plan_limits);
                eval.stages.extract = e.stage;
                eval.candidate = e.candidate;
                eval.plan = e.plan;
            }
            Stage::Syntax => {
                // The submission's one parse, which the extract stage already read.
                if let Some(tree) = sub.tree() {
                    eval.stages.syntax = Some(syntax::stage(tree));
                    eval.tree = tree.as_ref().ok().cloned();
                }
            }
            Stage::Compile => {
                if let Some(c) = &eval.candidate {
                    let (stage, module) = compile::run(&self.compiler, c);
                    if stage.is_compiled() {
                        // NVRTC's verdict: what tree-sitter could not parse is the grammar's.
                        if let Some(s) = eval.stages.syntax.as_mut() {
                            syntax::compiled(s);
                        }
                    }
                    eval.stages.compile = Some(stage);
                    eval.module = module;
                }
            }
            Stage::Structure => {
                if let Some(tree) = &eval.tree {
                    let resources = eval
                        .stages
                        .compile
                        .as_ref()
                        .map(|c| c.kernels())
                        .unwrap_or_default();
                    let plan = eval.plan.as_ref().and_then(Plan::timed_plan);
                    let compiled = eval
                        .stages
                        .compile
                        .as_ref()
                        .is_some_and(|c| c.is_compiled());
                    let (stage, features) =
                        structure::run(tree, plan, resources, self.spec, compiled);
                    eval.stages.structure = Some(stage);
                    eval.features = Some(features);
                }
            }
            Stage::Ranker => {
                if let (Some(features), Some(tree)) = (&eval.features, &eval.tree) {
                    let input = RankerInput {
                        features,
                        tree: Some(tree),
                        candidate: eval.candidate.as_ref(),
                        plan: eval.plan.as_ref(),
                        limits: &self.options.plan_limits,
                    };
                    eval.stages.ranker = Some(self.ranker.run(task, &input));
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
        }
    }

    fn run_gpu(&self, task: &Task, eval: &mut Evaluation, with_timing: bool) {
        self.run_gpu_group(task, &mut [eval], with_timing);
    }

    /// The GPU stages for evaluated members of one group; members that did not compile
    /// (no candidate, module or plan) are left as they are.
    fn run_gpu_group(&self, task: &Task, evals: &mut [&mut Evaluation], with_timing: bool) {
        let ready: Vec<usize> = (0..evals.len())
            .filter(|&k| {
                let e = &evals[k];
                e.candidate.is_some() && e.module.is_some() && e.plan.is_some()
            })
            .collect();
        let results = {
            let members: Vec<GpuMember<'_>> = ready
                .iter()
                .filter_map(|&k| {
                    let e = &evals[k];
                    Some(GpuMember {
                        candidate: e.candidate.as_ref()?,
                        module: e.module.as_ref()?,
                        plan: e.plan.as_ref()?,
                    })
                })
                .collect();
            self.gpu.run_group(
                task,
                &members,
                &self.compiler,
                &self.options.plan_limits,
                with_timing,
            )
        };
        for (&k, (stage, result)) in ready.iter().zip(results) {
            let e = &mut evals[k];
            e.stages.execute = Some(stage);
            e.stages.correctness = result.correctness;
            e.stages.timing = result.timing;
            e.timed = with_timing;
        }
    }
}
