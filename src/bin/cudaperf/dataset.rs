//! `cudaperf dataset`: statistics, RL prompt export, and the checks of the tasks' originals.

use std::path::PathBuf;
use std::process::ExitCode;

use cudaperf::dataset::{Dataset, DatasetError};
use cudaperf::task::Task;
use cudaperf::timings::{Timings, TimingsError};

use crate::check_originals;
use crate::output::{pretty, write_text, OutputError};
use crate::torch_eager;

/// Dataset statistics and RL prompt export.
#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(clap::Subcommand)]
enum Command {
    /// Tasks by kind, implementations, configs, timed pairs.
    Stats(StatsArgs),
    /// Write one RL prompt per task.
    Export(ExportArgs),
    /// Run every task's original (C with the system compiler; PyTorch, or the task's NumPy
    /// twin where PyTorch is not importable) on the smallest config's inputs, from the CPU
    /// twin of the device input generator; with --gpu, compare with the reference run on the
    /// same inputs here, and the generator with the device's; with --samples, compare with
    /// reference values sampled on a GPU earlier. Exits 1 when a task fails.
    CheckOriginals(check_originals::Args),
    /// PyTorch-eager time of every torch2cuda task's original on its timed config (this
    /// machine's GPU; needs python3 with torch), next to the reference's from a timings file.
    TorchEager(torch_eager::Args),
}

/// `cudaperf dataset stats`.
#[derive(clap::Args)]
struct StatsArgs {
    /// Folder of task folders (the crate's: fixtures/tasks).
    #[arg(long)]
    tasks: PathBuf,
    /// Timings file for the pair count (none: pairs are not counted).
    #[arg(long)]
    timings: Option<PathBuf>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

/// `cudaperf dataset export`.
#[derive(clap::Args)]
struct ExportArgs {
    /// Folder of task folders (the crate's: fixtures/tasks).
    #[arg(long)]
    tasks: PathBuf,
    /// Output format (jsonl: {"id", "kind", "prompt"} per line).
    #[arg(long, default_value = "jsonl")]
    format: String,
    /// Only the train or test split (deterministic by task id), or all.
    #[arg(long, default_value = "all")]
    split: String,
    /// Output file (default: standard output).
    #[arg(long)]
    out: Option<PathBuf>,
}

/// Why a `dataset` command failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The dataset does not load.
    #[error(transparent)]
    Dataset(#[from] DatasetError),
    /// The timings do not load.
    #[error(transparent)]
    Timings(#[from] TimingsError),
    /// `--format` other than jsonl.
    #[error("unknown format `{0}` (expected jsonl)")]
    UnknownFormat(String),
    /// `--split` other than all, train or test.
    #[error("unknown split `{0}` (expected all, train or test)")]
    UnknownSplit(String),
    /// `check-originals` failed.
    #[error(transparent)]
    CheckOriginals(#[from] check_originals::Error),
    /// `torch-eager` failed.
    #[error(transparent)]
    TorchEager(#[from] torch_eager::Error),
    /// A result could not be written.
    #[error(transparent)]
    Output(#[from] OutputError),
}

/// Runs `cudaperf dataset ...`.
pub fn run(a: Args) -> Result<ExitCode, Error> {
    match a.command {
        Command::Stats(s) => stats(s),
        Command::Export(e) => export(e),
        Command::CheckOriginals(c) => Ok(check_originals::run(c)?),
        Command::TorchEager(t) => Ok(torch_eager::run(t)?),
    }
}

fn stats(a: StatsArgs) -> Result<ExitCode, Error> {
    let ds = Dataset::load(&a.tasks)?;
    let t = match &a.timings {
        Some(p) => Some(Timings::load(p)?),
        None => None,
    };
    let s = ds.stats(t.as_ref());
    if a.json {
        println!("{}", pretty("the statistics", &s)?);
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "tasks: {} (c2cuda {}, torch2cuda {})",
        s.tasks, s.by_kind.c2cuda, s.by_kind.torch2cuda
    );
    println!(
        "implementations: {} (reference included)",
        s.implementations
    );
    println!("configs: {}", s.configs);
    match &a.timings {
        Some(p) => println!(
            "pairs: {} (from {}, ties within noise dropped)",
            s.pairs,
            p.display()
        ),
        None => println!(
            "pairs: not counted (give --timings, e.g. fixtures/timings/h200.json, written by \
             `cudaperf measure` on a GPU)"
        ),
    }
    Ok(ExitCode::SUCCESS)
}

fn export(a: ExportArgs) -> Result<ExitCode, Error> {
    if a.format != "jsonl" {
        return Err(Error::UnknownFormat(a.format));
    }
    let ds = Dataset::load(&a.tasks)?;
    let (train, test) = ds.split(0.2, 0);
    let chosen: Vec<&Task> = match a.split.as_str() {
        "all" => ds.tasks.iter().collect(),
        "train" => train,
        "test" => test,
        _ => return Err(Error::UnknownSplit(a.split)),
    };
    let mut text = String::new();
    for t in chosen {
        let line = serde_json::json!({"id": t.id, "kind": t.kind.as_str(), "prompt": t.prompt()});
        text.push_str(&line.to_string());
        text.push('\n');
    }
    match &a.out {
        Some(p) => write_text(p, text)?,
        None => print!("{text}"),
    }
    Ok(ExitCode::SUCCESS)
}
