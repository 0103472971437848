//! `cudaperf measure`: time every implementation of every task on the GPU against its
//! reference, and write the timings file the ranker and the dataset statistics read.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use cudaperf::pipeline::{EvalOptions, Evaluation, Evaluator, Stage, Submission, Verdict};
use cudaperf::task::Task;
use cudaperf::timings::{ImplTiming, TaskTimings, Timings};

use crate::args::{count, evaluator, seconds, CompileArgs, EvaluatorError};
use crate::input::{self, TaskArgError};
use crate::output::{today, write_json, OutputError};
use crate::verdict::first_reason;

/// Time every implementation of every task on the GPU against its reference.
#[derive(clap::Args)]
pub struct Args {
    /// Folder of task folders (the crate's: fixtures/tasks).
    #[arg(long)]
    tasks: PathBuf,
    /// Output timings file (e.g. fixtures/timings/h200.json).
    #[arg(long)]
    out: PathBuf,
    /// Only these task ids (comma-separated).
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
    /// GPU workers per visible GPU (at least 1).
    #[arg(long, default_value_t = 1, value_parser = count)]
    workers_per_gpu: usize,
    /// Time budget of each implementation's job (all its runs), seconds.
    #[arg(long, default_value_t = 300.0, value_parser = seconds)]
    timeout: f64,
    /// Longest single run of an implementation, seconds (the dataset's slowest runs
    /// take about 9 s on an H200).
    #[arg(long, default_value_t = 30.0, value_parser = seconds)]
    run_timeout: f64,
    #[command(flatten)]
    compile: CompileArgs,
}

/// Why `measure` could not measure.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// `--workers-per-gpu 0`.
    #[error("--workers-per-gpu must be at least 1")]
    NoWorkers,
    /// The tasks do not load.
    #[error(transparent)]
    Tasks(#[from] TaskArgError),
    /// The compile flags are unusable.
    #[error(transparent)]
    Evaluator(#[from] EvaluatorError),
    /// No GPU executor (no GPU, no driver, no worker).
    #[error(transparent)]
    Executor(#[from] cudaperf::pipeline::NoExecutor),
    /// The progress bar's template is invalid (a bug).
    #[error("progress bar: {0}")]
    Progress(#[from] indicatif::style::TemplateError),
    /// The timings file could not be written.
    #[error(transparent)]
    Output(#[from] OutputError),
}

/// Runs `cudaperf measure`; exits 1 when an implementation is not correct or not timed.
pub fn run(a: Args) -> Result<ExitCode, Error> {
    if a.workers_per_gpu == 0 {
        return Err(Error::NoWorkers);
    }
    let tasks = input::load_tasks(&a.tasks, &a.only)?;
    let evaluator = evaluator(EvalOptions {
        compile: a.compile.options(),
        exec: cudaperf::exec::ExecOptions {
            workers_per_gpu: a.workers_per_gpu,
            timeout: Duration::from_secs_f64(a.timeout.max(1.0)),
            run_timeout: Duration::from_secs_f64(a.run_timeout.max(1.0)),
            ..Default::default()
        },
        ..Default::default()
    })?;
    evaluator.executor()?;
    let total: usize = tasks.iter().map(|t| t.all_implementations().count()).sum();
    let bar = indicatif::ProgressBar::new(total as u64);
    bar.set_style(indicatif::ProgressStyle::with_template(
        "{elapsed_precise} [{bar:30}] {pos}/{len} {msg}",
    )?);
    let mut timings = Timings {
        date: today(),
        command: std::env::args().collect::<Vec<_>>().join(" "),
        cudaperf_version: env!("CARGO_PKG_VERSION").into(),
        ..Default::default()
    };
    let mut failures = 0;
    for task in &tasks {
        bar.set_message(task.id.clone());
        let tt = measure_task(&evaluator, task, &mut timings, &mut failures, &bar);
        timings.tasks.insert(task.id.clone(), tt);
        // Written after every task: a run cut short keeps what it measured.
        write_json(&a.out, &timings)?;
    }
    bar.finish_and_clear();
    eprintln!(
        "measured {total} implementations of {} tasks on {}: {failures} not correct or not \
         timed; wrote {}",
        tasks.len(),
        timings.device,
        a.out.display()
    );
    Ok(if failures == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// Times all of one task's implementations in one batch, printing a line for each; notes
/// the device and counts the implementations not correct or not timed.
fn measure_task(
    evaluator: &Evaluator,
    task: &Task,
    timings: &mut Timings,
    failures: &mut usize,
    bar: &indicatif::ProgressBar,
) -> TaskTimings {
    let impls: Vec<_> = task.all_implementations().collect();
    let subs: Vec<Submission> = impls
        .iter()
        .map(|i| Submission::from_source(i.source.clone()))
        .collect();
    let evals = evaluator.evaluate_batch(task, &subs, Stage::Timing);
    let mut tt = TaskTimings::default();
    for (imp, e) in impls.iter().zip(&evals) {
        if let Some(d) = e.stages.execute.as_ref().and_then(|x| x.device.as_ref()) {
            timings.device = d.name.clone();
            timings.driver = d.driver_version;
        }
        let timing = record(e);
        if timing.verdict != Verdict::Correct.as_str() || timing.time_us.is_none() {
            *failures += 1;
        }
        let line = format!(
            "{:<28} {:<36} {:<10} {}",
            task.id,
            imp.name,
            timing.verdict,
            e.stages.timing.as_ref().map_or_else(
                || timing.reason.clone().unwrap_or_default(),
                |t| format!(
                    "{:>10.1} us  ref {:>10.1} us  x{:.3}",
                    t.candidate_us, t.reference_us, t.raw_speedup
                )
            )
        );
        // println on a hidden bar (not a terminal) prints nothing; suspend always runs.
        bar.suspend(|| eprintln!("{line}"));
        tt.implementations.insert(imp.name.clone(), timing);
        bar.inc(1);
    }
    tt
}

/// One implementation's entry in the timings file.
fn record(e: &Evaluation) -> ImplTiming {
    let verdict = e.verdict();
    let t = e.stages.timing.as_ref();
    ImplTiming {
        verdict,
        reason: (verdict != Verdict::Correct).then(|| first_reason(&e.stages)),
        time_us: t.map(|t| t.candidate_us),
        reference_us: t.map(|t| t.reference_us),
        raw_speedup: t.map(|t| t.raw_speedup),
        ci95: t.map(|t| t.ci95),
        noise_floor: t.map(|t| t.noise_floor),
        config: t.map(|t| t.config.clone()),
    }
}
