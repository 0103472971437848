//! `cudaperf node`: a consumer of the Redis queue that `cudaperf serve --queue` feeds.

use std::path::PathBuf;
use std::process::ExitCode;

use cudaperf::serve::{NodeConfig, ServeError};

use crate::args::{CompileArgs, DurationError, LimitArgError, LimitArgs};
use crate::serve::{eval_options, QueueArgs};

/// Consume scoring jobs from the Redis queue that `serve --queue` feeds.
#[derive(clap::Args)]
pub struct Args {
    /// The Redis queue (redis://host:port) that `cudaperf serve --queue` feeds.
    #[arg(long)]
    queue: String,
    #[command(flatten)]
    queue_args: QueueArgs,
    /// Consumer name (default: <hostname>-<pid>).
    #[arg(long)]
    name: Option<String>,
    /// Tasks folder for jobs that name a task by id (the server's); required unless
    /// --inline-only.
    #[arg(long)]
    tasks: Option<PathBuf>,
    /// Start without --tasks: every job carries an inline task.
    #[arg(long)]
    inline_only: bool,
    /// Jobs scored at once.
    #[arg(long, default_value_t = 1)]
    concurrency: usize,
    /// Skip the GPU stages even when a GPU is present.
    #[arg(long)]
    no_gpu: bool,
    #[command(flatten)]
    compile: CompileArgs,
    #[command(flatten)]
    limits: LimitArgs,
}

/// Why the node did not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A duration flag is not a positive number of seconds.
    #[error(transparent)]
    Duration(#[from] DurationError),
    /// `--max-buffer-gib` is unusable.
    #[error(transparent)]
    Limits(#[from] LimitArgError),
    /// The node failed (queue, tasks folder, evaluator).
    #[error(transparent)]
    Serve(#[from] ServeError),
}

/// Runs `cudaperf node` until it is stopped.
pub fn run(a: Args) -> Result<ExitCode, Error> {
    let config = NodeConfig {
        queue: a.queue_args.config(&a.queue)?,
        name: a.name,
        tasks_dir: a.tasks,
        task_limits: a.limits.limits()?,
        inline_only: a.inline_only,
        eval: eval_options(&a.compile, a.no_gpu),
        concurrency: a.concurrency.max(1),
    };
    cudaperf::serve::run_node(config)?;
    Ok(ExitCode::SUCCESS)
}
