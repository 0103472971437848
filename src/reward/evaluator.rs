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
#[derive(Debug, Clone, PartialEq, Default)]
pub struct EvalOptions {
    /// Compile stage settings.
    pub compile: CompileOptions,
    /// Launch plan limits.
    pub plan_limits: PlanLimits,
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
    reached: Option<Stage>,
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
}

/// Submissions remembered before the memo is cleared (about one GRPO step's worth).
const MEMO_ENTRIES: usize = 2048;

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
        }
    }

    /// The options.
    pub fn options(&self) -> &EvalOptions {
        &self.options
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

    /// Evaluates many submissions, in parallel where the stages allow.
    pub fn evaluate_batch(&self, task: &Task, subs: &[Submission], upto: Stage) -> Vec<Evaluation> {
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
            self.run_stage(task, sub, eval, next);
            eval.reached = Some(next);
        }
    }

    fn run_stage(&self, task: &Task, sub: &Submission, eval: &mut Evaluation, stage: Stage) {
        match stage {
            Stage::Extract => {
                let checked = sub.parsed.clone().and_then(|mut c| {
                    c.check_abi(task)?;
                    // Evaluate the plan for every config now: bad grids are a plan error.
                    for cfg in &task.configs {
                        c.resolve(task, cfg, &self.options.plan_limits)?;
                    }
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
                    eval.stages.compile = Some(outcome.to_stage(&self.options.compile.arch, self.compiler.is_sandboxed()));
                    if let CompileOutcome::Compiled { module, .. } = outcome {
                        eval.module = Some(module);
                    }
                }
            }
            Stage::Structure | Stage::Correctness | Stage::Timing | Stage::Ranker => {}
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
        Context { task, step: 0, evaluator }
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
