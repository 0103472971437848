//! The `cudaperf` command line: score candidates, run workers, and more (`cudaperf --help`).
//!
//! One file per command, each with its `Args` and a `run` that returns the command's own
//! error; this file only parses the command line, sets up logging and prints the error.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod args;
mod check_originals;
mod dataset;
mod features;
mod input;
mod measure;
#[cfg(feature = "serve")]
mod node;
mod output;
mod rank;
mod score;
#[cfg(feature = "serve")]
mod serve;
mod tasks;
mod torch_eager;
mod train_ranker;
mod verdict;

#[derive(Parser)]
#[command(
    name = "cudaperf",
    version,
    about = "Rewards for RL of CUDA-kernel-writing models"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Score candidate files (.cu in the candidate format, or .md/.txt LLM completions).
    #[command(allow_negative_numbers = true)]
    Score(score::Args),
    /// List the tasks and what they are (`tasks list`).
    Tasks(tasks::Args),
    /// Serve rewards over HTTP/JSON (POST /v1/score, GET /v1/tasks, /healthz, /metrics).
    #[cfg(feature = "serve")]
    Serve(Box<serve::Args>),
    /// Consume scoring jobs from the Redis queue that `serve --queue` feeds.
    #[cfg(feature = "serve")]
    Node(Box<node::Args>),
    /// Print the structural features of a candidate (.cu) or completion (.md).
    #[command(allow_negative_numbers = true)]
    Features(features::Args),
    /// Dataset statistics and RL prompt export.
    Dataset(dataset::Args),
    /// Train the pairwise ranker on the dataset's timed pairs (and cross-validate it).
    #[command(allow_negative_numbers = true)]
    TrainRanker(train_ranker::Args),
    /// Predict which of two candidates is faster, with the probability.
    Rank(rank::Args),
    /// Time every implementation of every task on the GPU against its reference.
    #[command(allow_negative_numbers = true)]
    Measure(measure::Args),
}

/// A command's error, printed as `error: ...` with exit code 2.
#[derive(Debug, thiserror::Error)]
enum CliError {
    #[error(transparent)]
    Score(#[from] score::Error),
    #[error(transparent)]
    Tasks(#[from] tasks::Error),
    #[cfg(feature = "serve")]
    #[error(transparent)]
    Serve(#[from] serve::Error),
    #[cfg(feature = "serve")]
    #[error(transparent)]
    Node(#[from] node::Error),
    #[error(transparent)]
    Features(#[from] features::Error),
    #[error(transparent)]
    Dataset(#[from] dataset::Error),
    #[error(transparent)]
    TrainRanker(#[from] train_ranker::Error),
    #[error(transparent)]
    Rank(#[from] rank::Error),
    #[error(transparent)]
    Measure(#[from] measure::Error),
}

/// Runs the command.
fn dispatch(command: Command) -> Result<ExitCode, CliError> {
    Ok(match command {
        Command::Score(a) => score::run(a)?,
        Command::Tasks(a) => tasks::run(a)?,
        #[cfg(feature = "serve")]
        Command::Serve(a) => serve::run(*a)?,
        #[cfg(feature = "serve")]
        Command::Node(a) => node::run(*a)?,
        Command::Features(a) => features::run(a)?,
        Command::Dataset(a) => dataset::run(a)?,
        Command::TrainRanker(a) => train_ranker::run(a)?,
        Command::Rank(a) => rank::run(a)?,
        Command::Measure(a) => measure::run(a)?,
    })
}

fn main() -> ExitCode {
    // Pools start workers as `cudaperf __cudaperf_worker <role>`; nothing else runs then.
    cudaperf::worker::run_if_requested();
    // Die quietly on a closed pipe (`cudaperf score ... | head`) like other Unix tools.
    #[cfg(unix)]
    // SAFETY: restoring the default disposition of SIGPIPE before any thread starts.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    let cli = Cli::parse();
    // Colour codes only on a terminal: logs sent to a file or a pipe stay plain text.
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_env("CUDAPERF_LOG"))
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr)
        .init();
    match dispatch(cli.command) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}
