//! `cudaperf serve`: the HTTP reward server, scoring in this process or through the Redis
//! queue; also the queue flags `cudaperf node` shares.

use std::path::PathBuf;
use std::process::ExitCode;

use cudaperf::pipeline::EvalOptions;
use cudaperf::serve::{Limits, QueueConfig, ServeConfig, ServeError};

use crate::args::{duration, CompileArgs, DurationError, LimitArgError, LimitArgs};

/// Where the Redis queue is and how it behaves (`serve --queue` and `node`).
#[derive(clap::Args, Clone)]
pub struct QueueArgs {
    /// Key prefix of the streams and results in Redis.
    #[arg(long, default_value = "cudaperf")]
    queue_prefix: String,
    /// Seconds a job may sit with a node that stopped renewing its claim before another
    /// node takes it over.
    #[arg(long, default_value_t = 60.0)]
    visibility_timeout: f64,
    /// Seconds results are kept in Redis.
    #[arg(long, default_value_t = 3600.0)]
    result_ttl: f64,
    /// Deliveries after which a job is answered `crashed` instead of run again.
    #[arg(long, default_value_t = 3)]
    max_deliveries: usize,
}

impl QueueArgs {
    /// The queue at `url` with these settings.
    pub fn config(&self, url: &str) -> Result<QueueConfig, DurationError> {
        Ok(QueueConfig {
            url: url.to_string(),
            prefix: self.queue_prefix.clone(),
            visibility_timeout: duration("visibility-timeout", self.visibility_timeout)?,
            result_ttl: duration("result-ttl", self.result_ttl)?,
            max_deliveries: self.max_deliveries.max(1),
        })
    }
}

/// The evaluation options of the server and the nodes.
pub fn eval_options(compile: &CompileArgs, no_gpu: bool) -> EvalOptions {
    EvalOptions {
        compile: compile.options(),
        no_gpu,
        ranker_model: crate::args::ranker_model_from_env(),
        ..Default::default()
    }
}

/// Serve rewards over HTTP/JSON (POST /v1/score, GET /v1/tasks, /healthz, /metrics).
#[derive(clap::Args)]
pub struct Args {
    /// Address to bind.
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    /// Port (0: any free port; the bound address is printed on stdout).
    #[arg(long, default_value_t = 8000)]
    port: u16,
    /// Tasks folder served by id (without it, requests carry inline tasks).
    #[arg(long)]
    tasks: Option<PathBuf>,
    /// Scoring threads (each scores one group at a time).
    #[arg(long, default_value_t = 2)]
    workers: usize,
    /// Jobs that may wait before requests are refused with 429.
    #[arg(long, default_value_t = 64)]
    queue_len: usize,
    /// Most completions in one request.
    #[arg(long, default_value_t = 64)]
    max_completions: usize,
    /// Largest request body in bytes.
    #[arg(long, default_value_t = 8 << 20)]
    max_body_bytes: usize,
    /// Deadline of a request that gives none, seconds.
    #[arg(long, default_value_t = 600.0)]
    deadline: f64,
    /// Longest deadline a request may ask for, seconds.
    #[arg(long, default_value_t = 3600.0)]
    max_deadline: f64,
    /// Put jobs on this Redis queue (redis://host:port) for `cudaperf node`s instead of
    /// scoring in this process.
    #[arg(long)]
    queue: Option<String>,
    #[command(flatten)]
    queue_args: QueueArgs,
    /// Seconds a client may take to send a request's head or body, and a kept-alive
    /// connection may wait for its next request.
    #[arg(long, default_value_t = 30.0)]
    read_timeout: f64,
    /// Seconds requests in flight may take to finish after SIGTERM (a second signal exits
    /// at once).
    #[arg(long, default_value_t = 30.0)]
    shutdown_grace: f64,
    /// Skip the GPU stages even when a GPU is present.
    #[arg(long)]
    no_gpu: bool,
    #[command(flatten)]
    compile: CompileArgs,
    #[command(flatten)]
    limits: LimitArgs,
}

/// Why the server did not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A duration flag is not a positive number of seconds.
    #[error(transparent)]
    Duration(#[from] DurationError),
    /// `--max-buffer-gib` is unusable.
    #[error(transparent)]
    Limits(#[from] LimitArgError),
    /// The server failed (bind, tasks folder, evaluator, queue).
    #[error(transparent)]
    Serve(#[from] ServeError),
}

/// Runs `cudaperf serve` until it is stopped.
pub fn run(a: Args) -> Result<ExitCode, Error> {
    let config = ServeConfig {
        eval: eval_options(&a.compile, a.no_gpu),
        workers: a.workers.max(1),
        limits: Limits {
            max_body_bytes: a.max_body_bytes,
            max_completions: a.max_completions.max(1),
            queue_len: a.queue_len.max(1),
            default_deadline: duration("deadline", a.deadline)?,
            max_deadline: duration("max-deadline", a.max_deadline)?,
        },
        queue: match &a.queue {
            Some(url) => Some(a.queue_args.config(url)?),
            None => None,
        },
        read_timeout: duration("read-timeout", a.read_timeout)?,
        shutdown_grace: duration("shutdown-grace", a.shutdown_grace)?,
        host: a.host,
        port: a.port,
        tasks_dir: a.tasks,
        task_limits: a.limits.limits()?,
    };
    cudaperf::serve::run_server(config)?;
    Ok(ExitCode::SUCCESS)
}
