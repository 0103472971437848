//! `cudaperf score`: score candidate files against a task with a reward preset.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use cudaperf::exec::TorchMode;
use cudaperf::pipeline::report::RewardReport;
use cudaperf::pipeline::{EvalOptions, Submission, Verdict};
use cudaperf::reward::{presets, Context, Reward};

use crate::args::{evaluator, whole, CompileArgs, EvaluatorError, LimitArgError, LimitArgs};
use crate::input::{self, InputError, TaskArgError};
use crate::output::{pretty, OutputError};
use crate::verdict::{first_reason, one_line};

/// Score candidate files (.cu in the candidate format, or .md/.txt LLM completions).
#[derive(clap::Args)]
pub struct Args {
    /// The task folder or its task.toml.
    #[arg(long)]
    task: PathBuf,
    /// Candidate files; `-` reads one from standard input (a completion with a fenced
    /// code block, or CUDA source).
    #[arg(required = true)]
    files: Vec<PathBuf>,
    /// Reward preset: cudaperf, correctness, kevin, fast_p:<p>, dhrcl.
    #[arg(long, default_value = "cudaperf")]
    reward: String,
    /// Training step (for the dhrcl curriculum).
    #[arg(long, default_value_t = 0, value_parser = whole)]
    step: u64,
    /// Print the full JSON report.
    #[arg(long)]
    json: bool,
    /// The reference to check and time against: `task` (its CUDA reference, or its PyTorch
    /// original in eager mode when that is its only one), `torch-eager` or `torch-compile`
    /// (the task's PyTorch original; torch2cuda tasks). The report's `timing.reference`
    /// says which ran.
    #[arg(long, default_value = "task", value_parser = reference_choice)]
    reference: Reference,
    #[command(flatten)]
    compile: CompileArgs,
    #[command(flatten)]
    limits: LimitArgs,
}

/// `--reference`: `None` for the task's own reference, else a PyTorch mode.
#[derive(Debug, Clone, Copy)]
struct Reference(Option<TorchMode>);

fn reference_choice(name: &str) -> Result<Reference, String> {
    match name {
        "task" => Ok(Reference(None)),
        "torch-eager" | "torch_eager" | "eager" => Ok(Reference(Some(TorchMode::Eager))),
        "torch-compile" | "torch_compile" | "compile" => Ok(Reference(Some(TorchMode::Compile))),
        other => Err(format!(
            "`{other}` is not a reference (expected task, torch-eager or torch-compile)"
        )),
    }
}

/// Why `score` could not score.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A candidate could not be read.
    #[error(transparent)]
    Input(#[from] InputError),
    /// `--task` is not a task that loads.
    #[error(transparent)]
    Task(#[from] TaskArgError),
    /// `--max-buffer-gib` is unusable.
    #[error(transparent)]
    Limits(#[from] LimitArgError),
    /// `--reward` names no preset, or a bad `fast_p` threshold.
    #[error(transparent)]
    Reward(#[from] presets::PresetError),
    /// The compile flags are unusable.
    #[error(transparent)]
    Evaluator(#[from] EvaluatorError),
    /// The report could not be printed.
    #[error(transparent)]
    Output(#[from] OutputError),
}

/// Runs `cudaperf score`.
pub fn run(a: Args) -> Result<ExitCode, Error> {
    input::check_stdin_once(&a.files)?;
    let task = input::load_task_with(&a.task, &a.limits.limits()?)?;
    // The server's parser: the same names and thresholds (no `fast_p:NaN`).
    let reward = presets::by_name(&a.reward)?;
    let subs = a
        .files
        .iter()
        .map(|f| input::read_submission(f))
        .collect::<Result<Vec<_>, _>>()?;
    let evaluator = evaluator(EvalOptions {
        compile: a.compile.options(),
        exec: cudaperf::exec::ExecOptions {
            torch_reference: a.reference.0,
            ..Default::default()
        },
        ..Default::default()
    })?;
    let ctx = Context::new(&task, &evaluator).at_step(a.step);
    let mut outputs = Vec::new();
    for (file, sub) in a.files.iter().zip(&subs) {
        let scored = Scored::of(reward.as_ref(), &ctx, sub);
        if !a.json {
            println!("{}", scored.line(file));
        }
        outputs.push(scored.json(file)?);
    }
    if a.json {
        let out = if outputs.len() == 1 {
            outputs.remove(0)
        } else {
            serde_json::Value::Array(outputs)
        };
        println!("{}", pretty("the report", &out)?);
    }
    Ok(ExitCode::SUCCESS)
}

/// One file's result: a value and its report, or the error with what report there is.
struct Scored {
    value: Option<f64>,
    report: Option<RewardReport>,
    error: Option<String>,
}

impl Scored {
    fn of(reward: &dyn Reward, ctx: &Context<'_>, sub: &Submission) -> Scored {
        match reward.score(ctx, sub) {
            Ok(s) => Scored {
                value: Some(s.value),
                report: Some(s.report),
                error: None,
            },
            Err(e) => Scored {
                value: None,
                report: Some(e.report().clone()),
                error: Some(e.to_string()),
            },
        }
    }

    /// The plain-text line: value, verdict, extract and compile outcomes, then the error
    /// (an unavailable stage) or the reason of a verdict that is not correct.
    fn line(&self, file: &Path) -> String {
        let report = self.report.as_ref();
        let verdict = report.map(|r| r.verdict);
        let why = match (&self.error, report) {
            (Some(e), _) => e.clone(),
            (None, Some(r)) if is_failure(r.verdict) => {
                format!("reason: {}", one_line(&first_reason(&r.stages)))
            }
            _ => String::new(),
        };
        format!(
            "{}: value {} | {} | extract {} | compile {} | {}",
            input::display_name(file),
            self.value.map_or("n/a".to_string(), |v| format!("{v:.4}")),
            verdict.map_or("?", Verdict::as_str),
            report.map_or("null".into(), |r| r.stages.extract.is_ok().to_string()),
            report
                .and_then(|r| r.stages.compile.as_ref())
                .map_or("null".to_string(), |c| format!(
                    "\"{}\"",
                    c.status().as_str()
                )),
            why,
        )
    }

    /// The JSON report with the file, the value (`null` when there is none) and the error.
    fn json(&self, file: &Path) -> Result<serde_json::Value, OutputError> {
        let mut report = match &self.report {
            Some(r) => serde_json::to_value(r).map_err(|source| OutputError::Json {
                what: "the report",
                source,
            })?,
            None => serde_json::Value::Object(Default::default()),
        };
        if let Some(obj) = report.as_object_mut() {
            obj.insert("file".into(), input::display_name(file).into());
            obj.insert(
                "value".into(),
                self.value.map_or(serde_json::Value::Null, Into::into),
            );
            if let Some(e) = &self.error {
                obj.insert("error".into(), e.clone().into());
            }
        }
        Ok(report)
    }
}

/// Verdicts that say the candidate failed a stage (not `correct`, and not a stage the
/// reward did not read).
fn is_failure(verdict: Verdict) -> bool {
    !matches!(
        verdict,
        Verdict::Correct | Verdict::Extracted | Verdict::Compiled
    )
}
