//! `cudaperf serve` and `cudaperf node`: rewards over HTTP/JSON for trainers in other
//! languages (TRL, verl through `python/`), and a Redis Streams queue to spread the work
//! over many GPU hosts.
//!
//! * [`run_server`] (or [`Server::start`] in-process) answers `POST /v1/score` and the
//!   other routes (docs/server.md). Without a queue it scores in this process: a bounded queue
//!   of jobs in front of a few blocking threads that share one
//!   [`crate::pipeline::Evaluator`] (its compile cache and GPU worker pools), so
//!   many trainers share one pipeline and the async reactor never blocks.
//! * With [`QueueConfig`] the server puts each job on a Redis Stream and
//!   [`run_node`] on every GPU host consumes it (see [`QueueConfig`] for the protocol:
//!   consumer groups, reclaim of a dead node's jobs, idempotent results).
//!
//! A trainer's group is scored together ([`score_group`]); results follow the order of
//! the request, and a completion that cannot be scored here is
//! `{"verdict": "unavailable", "value": null, "reason": ...}`, never a made-up number.
//!
//! ```no_run
//! use cudaperf::serve::{ServeConfig, Server};
//! let server = Server::start(ServeConfig {
//!     tasks_dir: Some("fixtures/tasks".into()),
//!     ..ServeConfig::default()
//! })?;
//! println!("listening on http://{}", server.addr());
//! server.shutdown()?;
//! # Ok::<(), cudaperf::serve::ServeError>(())
//! ```

mod api;
mod http;
mod listen;
mod metrics;
mod node;
mod pool;
mod queue;
mod request;
mod reward_spec;
mod score;
mod tasks;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::watch;

pub use api::{
    ErrorBody, InlineTask, ItemResult, JobSpec, RewardSpec, ScoreResponse, TaskDetail, TaskRef,
    TaskSummary, Timing, Weights,
};
pub use metrics::Metrics;
pub use node::{node_main, run_node, NodeConfig};
pub use queue::{QueueConfig, QueueError, QueueStatus};
pub use request::Limits;
pub use reward_spec::{build_reward, SpecError, PRESET_NAMES};
pub use score::{item_result, run_job, score_group, JobOutcome, PartialResults, StageTimes};
pub use tasks::{load_inline, load_inline_with, TaskRefError, TaskStore};

use crate::pipeline::{EvalOptions, Evaluator};
use http::{AppState, Backend};
use pool::LocalPool;

/// Why the server or a node could not run.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ServeError {
    /// A setting is invalid (the message names it).
    #[error("invalid setting: {0}")]
    Config(String),
    /// The tasks folder does not load.
    #[error("tasks: {0}")]
    Tasks(String),
    /// Binding, the runtime or another OS-level step failed.
    #[error("{0}")]
    Io(String),
    /// The queue could not be reached at start.
    #[error("queue: {0}")]
    Queue(String),
}

/// Settings of `cudaperf serve`.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    /// Address to bind (default `127.0.0.1`).
    pub host: String,
    /// Port (default 0: any free port; the bound address is printed and returned).
    pub port: u16,
    /// Tasks folder served by id (default none: inline tasks only).
    pub tasks_dir: Option<PathBuf>,
    /// The buffer cap folder and inline tasks are validated against (default
    /// [`TaskLimits::default`](crate::task::TaskLimits::default), 8 GiB; the CLI uses the device's:
    /// [`exec::task_limits_for_this_machine`](crate::exec::task_limits_for_this_machine)).
    pub task_limits: crate::task::TaskLimits,
    /// The pipeline's options (local mode).
    pub eval: EvalOptions,
    /// Scoring threads (local mode; default 2). Each scores one group at a time, itself
    /// compiled in parallel by the evaluator.
    pub workers: usize,
    /// Request limits.
    pub limits: Limits,
    /// Put jobs on this Redis queue for `cudaperf node`s instead of scoring here.
    pub queue: Option<QueueConfig>,
    /// How long a client may take to send a request's head, or its body, and how long a
    /// kept-alive connection may wait for its next request (default 30 s). A slow or
    /// stuck client loses its connection instead of holding it (and shutdown) for minutes.
    pub read_timeout: Duration,
    /// On shutdown, how long requests in flight may take to finish before their
    /// connections are closed and the scoring threads are left behind (default 30 s).
    pub shutdown_grace: Duration,
}

impl Default for ServeConfig {
    fn default() -> Self {
        ServeConfig {
            host: "127.0.0.1".into(),
            port: 0,
            tasks_dir: None,
            task_limits: crate::task::TaskLimits::default(),
            eval: EvalOptions::default(),
            workers: 2,
            limits: Limits::default(),
            queue: None,
            read_timeout: Duration::from_secs(30),
            shutdown_grace: Duration::from_secs(30),
        }
    }
}

/// A server running on its own threads (for tests, benchmarks and programs that embed it).
pub struct Server {
    addr: SocketAddr,
    stop: Option<watch::Sender<bool>>,
    thread: Option<std::thread::JoinHandle<Result<(), ServeError>>>,
}

impl Server {
    /// Binds and starts serving; returns once the port is bound.
    pub fn start(config: ServeConfig) -> Result<Server, ServeError> {
        let (stop_tx, stop_rx) = watch::channel(false);
        let (addr_tx, addr_rx) = std::sync::mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("cudaperf-serve".into())
            .spawn(move || {
                let rt = runtime()?;
                let served = rt.block_on(async move {
                    serve_until(config, stop_rx, |addr| {
                        let _ = addr_tx.send(Ok(addr));
                    })
                    .await
                    .inspect_err(|e| {
                        let _ = addr_tx.send(Err(e.clone()));
                    })
                });
                // Scoring left behind after the grace period does not hold the caller.
                rt.shutdown_timeout(Duration::from_millis(100));
                served
            })
            .map_err(|e| ServeError::Io(format!("cannot start the server thread: {e}")))?;
        match addr_rx.recv() {
            Ok(Ok(addr)) => Ok(Server {
                addr,
                stop: Some(stop_tx),
                thread: Some(thread),
            }),
            Ok(Err(e)) => {
                let _ = thread.join();
                Err(e)
            }
            Err(_) => Err(match thread.join() {
                Ok(Err(e)) => e,
                _ => ServeError::Io("the server thread ended before binding".into()),
            }),
        }
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops accepting, finishes the accepted requests, and waits for the threads.
    pub fn shutdown(mut self) -> Result<(), ServeError> {
        self.stop_and_join()
    }

    fn stop_and_join(&mut self) -> Result<(), ServeError> {
        if let Some(s) = self.stop.take() {
            let _ = s.send(true);
        }
        match self.thread.take().map(|t| t.join()) {
            Some(Ok(r)) => r,
            Some(Err(_)) => Err(ServeError::Io("the server thread panicked".into())),
            None => Ok(()),
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.stop_and_join();
    }
}

fn runtime() -> Result<tokio::runtime::Runtime, ServeError> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("cudaperf-http")
        .enable_all()
        .build()
        .map_err(|e| ServeError::Io(format!("cannot start the async runtime: {e}")))
}

/// Runs `cudaperf serve` until SIGTERM or SIGINT: prints `cudaperf serve listening on
/// http://ADDR` on stdout once bound, then on the signal stops accepting, finishes what was
/// accepted within [`ServeConfig::shutdown_grace`] and returns. A second signal exits the
/// process at once (status 130).
pub fn run_server(config: ServeConfig) -> Result<(), ServeError> {
    let rt = runtime()?;
    let served = rt.block_on(async move {
        let (tx, rx) = watch::channel(false);
        tokio::spawn(async move {
            on_signals(|| {
                tracing::info!(
                    "shutting down: no new connections; finishing accepted requests (a second signal exits at once)"
                );
                let _ = tx.send(true);
            })
            .await;
        });
        serve_until(config, rx, |addr| {
            use std::io::Write;
            println!("cudaperf serve listening on http://{addr}");
            let _ = std::io::stdout().flush();
        })
        .await
    });
    rt.shutdown_timeout(Duration::from_millis(100));
    served
}

async fn serve_until(
    config: ServeConfig,
    stop: watch::Receiver<bool>,
    on_bound: impl FnOnce(SocketAddr),
) -> Result<(), ServeError> {
    let tasks = Arc::new(TaskStore::load_with(
        config.tasks_dir.as_deref(),
        config.task_limits,
    )?);
    let metrics = Arc::new(Metrics::new());
    let backend = match &config.queue {
        None => {
            let pool = LocalPool::new(
                Arc::new(
                    Evaluator::new(config.eval.clone())
                        .map_err(|e| ServeError::Config(format!("the pipeline: {e}")))?,
                ),
                config.workers,
                config.limits.queue_len,
                Arc::clone(&metrics),
            );
            // The local "queue" is up while the scoring threads take jobs.
            metrics.queue_up.set(1);
            Backend::Local(pool)
        }
        Some(q) => {
            let client =
                queue::QueueClient::new(q.clone(), config.limits.queue_len, Arc::clone(&metrics))?;
            if let Err(e) = client.connect_now().await {
                // Serve anyway: /healthz says unavailable until Redis answers.
                tracing::warn!("queue {} unavailable at start: {e}", q.url);
            }
            client.spawn_loops(stop.clone());
            Backend::Queue(client)
        }
    };
    let listener = tokio::net::TcpListener::bind((config.host.as_str(), config.port))
        .await
        .map_err(|e| ServeError::Io(format!("cannot bind {}:{}: {e}", config.host, config.port)))?;
    let addr = listener
        .local_addr()
        .map_err(|e| ServeError::Io(format!("bound address: {e}")))?;
    let state = Arc::new(AppState {
        tasks,
        limits: config.limits,
        backend,
        metrics,
        read_timeout: config.read_timeout,
        avg_score_s: AtomicU64::new(0),
    });
    let app = http::router(Arc::clone(&state));
    on_bound(addr);
    let mut stopped = stop.clone();
    let shutdown_began = async move {
        let _ = stopped.wait_for(|s| *s).await;
    };
    let grace = config.shutdown_grace;
    listen::serve_connections(listener, app, config.read_timeout, grace, shutdown_began).await;
    let began = Instant::now();
    if let Backend::Local(pool) = &state.backend {
        state.metrics.queue_up.set(0);
        // Every connection is answered or closed; let the threads end, within what is left
        // of the grace period (a GPU job in progress is not waited for past it).
        let pool: &LocalPool = pool;
        let left = grace.saturating_sub(began.elapsed());
        if !tokio::task::block_in_place(|| pool.close(left)) {
            tracing::warn!(
                "shutting down: scoring threads still busy after the grace period; leaving them"
            );
        }
    }
    Ok(())
}

/// Calls `first` on the first SIGTERM or SIGINT; on a second one, exits the process with
/// status 130 (a stuck shutdown can always be forced).
pub(crate) async fn on_signals(first: impl FnOnce()) {
    let mut signals = Signals::new();
    signals.next().await;
    first();
    signals.next().await;
    tracing::warn!("second signal: exiting now");
    std::process::exit(130);
}

/// SIGTERM and SIGINT as one stream (SIGINT only off Unix).
struct Signals {
    #[cfg(unix)]
    term: Option<tokio::signal::unix::Signal>,
}

impl Signals {
    fn new() -> Signals {
        Signals {
            #[cfg(unix)]
            term: tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok(),
        }
    }

    async fn next(&mut self) {
        #[cfg(unix)]
        if let Some(term) = self.term.as_mut() {
            tokio::select! {
                _ = term.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
            return;
        }
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// This machine's host name (for node names and job ids).
pub(crate) fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is valid for its length; gethostname writes at most that much.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return "host".into();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}
