//! `cudaperf node`: a GPU host's consumer of the Redis Streams queue (see [`super::queue`]).
//!
//! Each consumer slot takes one job at a time (`XREADGROUP … COUNT 1`), first taking over
//! jobs left idle by dead nodes (`XAUTOCLAIM` after the visibility timeout), scores it on a
//! blocking thread through the node's one [`Evaluator`], renews its claim while it runs,
//! stores the result (`SET NX`), announces it and acknowledges the job. Without a GPU the
//! GPU stages answer `unavailable` and everything else runs, so the whole path is testable
//! on a CPU machine.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;
use redis::streams::{StreamAutoClaimReply, StreamId, StreamPendingCountReply, StreamReadReply};
use tokio::sync::watch;

use super::api::{ItemResult, JobSpec};
use super::queue::{connect, ensure_group, job_fields, QueueConfig, RESULTS_MAXLEN};
use super::reward_spec::build_reward;
use super::score::{ms_until, run_job, unavailable_items, JobOutcome};
use super::tasks::TaskStore;
use super::ServeError;
use crate::pipeline::{EvalOptions, Evaluator, Verdict};

/// Settings of a node.
#[derive(Debug, Clone)]
pub struct NodeConfig {
    /// The queue.
    pub queue: QueueConfig,
    /// Consumer name prefix (default `<hostname>-<pid>`); slot `i` consumes as `<name>-<i>`.
    pub name: Option<String>,
    /// Tasks folder for jobs that name a task by id (inline tasks need none). A node needs
    /// one unless [`NodeConfig::inline_only`] says it takes inline tasks only: a node
    /// without tasks would take every job that names a task by id and answer it
    /// `unavailable`, jobs that a node with the tasks could have scored.
    pub tasks_dir: Option<PathBuf>,
    /// The buffer cap tasks are validated against (default [`TaskLimits::default`]; the
    /// CLI uses the device's).
    ///
    /// [`TaskLimits::default`]: crate::task::TaskLimits::default
    pub task_limits: crate::task::TaskLimits,
    /// Start without a tasks folder, for a queue whose jobs all carry inline tasks.
    pub inline_only: bool,
    /// The pipeline's options.
    pub eval: EvalOptions,
    /// Jobs scored at once (default 1; each job's group is itself scored in parallel).
    pub concurrency: usize,
}

struct Node {
    cfg: NodeConfig,
    client: redis::Client,
    evaluator: Arc<Evaluator>,
    tasks: Arc<TaskStore>,
}

/// Runs a node until SIGTERM or SIGINT (a job being scored is finished first; a second
/// signal exits at once, and the job is taken over by another node after the visibility
/// timeout).
pub fn run_node(cfg: NodeConfig) -> Result<(), ServeError> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| ServeError::Io(format!("cannot start the async runtime: {e}")))?;
    let ran = rt.block_on(async move {
        let (tx, rx) = watch::channel(false);
        tokio::spawn(async move {
            super::on_signals(|| {
                tracing::info!(
                    "stopping: no new jobs; finishing the jobs being scored (a second signal exits at once)"
                );
                let _ = tx.send(true);
            })
            .await;
        });
        node_main(cfg, rx).await
    });
    rt.shutdown_timeout(Duration::from_millis(100));
    ran
}

/// Runs a node until `shutdown` turns true.
pub async fn node_main(cfg: NodeConfig, shutdown: watch::Receiver<bool>) -> Result<(), ServeError> {
    if cfg.tasks_dir.is_none() && !cfg.inline_only {
        return Err(ServeError::Config(
            "a node needs --tasks (the server's tasks folder): without it every job that names a task by id would be taken and answered `unavailable`; pass --inline-only if all jobs carry inline tasks".into(),
        ));
    }
    let client = cfg.queue.client()?;
    let tasks = Arc::new(TaskStore::load_with(
        cfg.tasks_dir.as_deref(),
        cfg.task_limits,
    )?);
    let evaluator = Arc::new(
        Evaluator::new(cfg.eval.clone())
            .map_err(|e| ServeError::Config(format!("the pipeline: {e}")))?,
    );
    let name = cfg
        .name
        .clone()
        .unwrap_or_else(|| format!("{}-{}", super::hostname(), std::process::id()));
    let node = Arc::new(Node {
        cfg,
        client,
        evaluator,
        tasks,
    });
    println!(
        "cudaperf node {name} consuming {} (stream {}, group {}, {} slot(s), {} tasks)",
        node.cfg.queue.url,
        node.cfg.queue.jobs_key(),
        node.cfg.queue.group(),
        node.cfg.concurrency.max(1),
        node.tasks.len()
    );
    use std::io::Write;
    let _ = std::io::stdout().flush();
    let mut slots = Vec::new();
    for i in 0..node.cfg.concurrency.max(1) {
        let consumer = format!("{name}-{i}");
        slots.push(tokio::spawn(
            Arc::clone(&node).slot(consumer, shutdown.clone()),
        ));
    }
    for s in slots {
        let _ = s.await;
    }
    tracing::info!("node {name} stopped");
    Ok(())
}

/// What a read of the stream gave.
struct Taken {
    entry: StreamId,
    reclaimed: bool,
}

impl Node {
    async fn slot(self: Arc<Self>, consumer: String, mut shutdown: watch::Receiver<bool>) {
        let vis = self
            .cfg
            .queue
            .visibility_timeout
            .max(Duration::from_millis(100));
        let mut conn: Option<MultiplexedConnection> = None;
        let mut last_reclaim: Option<Instant> = None;
        let mut backoff = Duration::from_millis(100);
        let mut down_logged = false;
        while !*shutdown.borrow() {
            let Some(c) = conn.as_mut() else {
                match self.open().await {
                    Ok(c) => {
                        if down_logged {
                            tracing::info!("node {consumer}: queue available again");
                        }
                        down_logged = false;
                        backoff = Duration::from_millis(100);
                        conn = Some(c);
                    }
                    Err(e) => {
                        if !down_logged {
                            tracing::warn!("node {consumer}: queue unavailable: {e}");
                            down_logged = true;
                        }
                        tokio::select! {
                            _ = tokio::time::sleep(backoff) => {}
                            _ = shutdown.changed() => {}
                        }
                        backoff = (backoff * 2).min(Duration::from_secs(2));
                    }
                }
                continue;
            };
            let reclaim_due = last_reclaim.is_none_or(|t| t.elapsed() >= vis / 2);
            let taken = if reclaim_due {
                match self.reclaim(c, &consumer, vis).await {
                    Ok(Some(t)) => Ok(Some(t)),
                    Ok(None) => {
                        last_reclaim = Some(Instant::now());
                        self.read(c, &consumer).await
                    }
                    Err(e) => Err(e),
                }
            } else {
                self.read(c, &consumer).await
            };
            match taken {
                Ok(Some(t)) => {
                    let mut c = c.clone();
                    self.process(&mut c, &consumer, t, vis).await;
                }
                Ok(None) => {}
                Err(e) if e.code() == Some("NOGROUP") => {
                    let _ = ensure_group(c, &self.cfg.queue).await;
                }
                Err(e) => {
                    tracing::warn!("node {consumer}: queue unavailable: {e}");
                    down_logged = true;
                    conn = None;
                }
            }
        }
    }

    async fn open(&self) -> redis::RedisResult<MultiplexedConnection> {
        // Reads block for up to 1 s; the response limit leaves room for that.
        let mut c = connect(&self.client, Duration::from_secs(5)).await?;
        ensure_group(&mut c, &self.cfg.queue).await?;
        Ok(c)
    }

    async fn read(
        &self,
        c: &mut MultiplexedConnection,
        consumer: &str,
    ) -> redis::RedisResult<Option<Taken>> {
        let reply: Option<StreamReadReply> = redis::cmd("XREADGROUP")
            .arg("GROUP")
            .arg(self.cfg.queue.group())
            .arg(consumer)
            .arg("COUNT")
            .arg(1)
            .arg("BLOCK")
            .arg(1000)
            .arg("STREAMS")
            .arg(self.cfg.queue.jobs_key())
            .arg(">")
            .query_async(c)
            .await?;
        Ok(reply
            .and_then(|r| r.keys.into_iter().next())
            .and_then(|k| k.ids.into_iter().next())
            .map(|entry| Taken {
                entry,
                reclaimed: false,
            }))
    }

    /// Takes over one job left idle past the visibility timeout.
    async fn reclaim(
        &self,
        c: &mut MultiplexedConnection,
        consumer: &str,
        vis: Duration,
    ) -> redis::RedisResult<Option<Taken>> {
        let reply: StreamAutoClaimReply = redis::cmd("XAUTOCLAIM")
            .arg(self.cfg.queue.jobs_key())
            .arg(self.cfg.queue.group())
            .arg(consumer)
            .arg(vis.as_millis() as u64)
            .arg("0-0")
            .arg("COUNT")
            .arg(1)
            .query_async(c)
            .await?;
        Ok(reply.claimed.into_iter().next().map(|entry| Taken {
            entry,
            reclaimed: true,
        }))
    }

    async fn process(
        &self,
        c: &mut MultiplexedConnection,
        consumer: &str,
        taken: Taken,
        vis: Duration,
    ) {
        let q = &self.cfg.queue;
        let entry_id = taken.entry.id.clone();
        let (job_id, payload) = job_fields(&taken.entry);
        let Some(job_id) = job_id else {
            tracing::warn!("node {consumer}: entry {entry_id} has no job id; dropped");
            self.ack(c, &entry_id).await;
            return;
        };
        let exists: redis::RedisResult<bool> = redis::cmd("EXISTS")
            .arg(q.result_key(&job_id))
            .query_async(c)
            .await;
        if exists.unwrap_or(false) {
            // Answered already (by a node that died before acknowledging).
            self.ack(c, &entry_id).await;
            return;
        }
        let spec = payload.as_deref().map(serde_json::from_str::<JobSpec>);
        let outcome = match spec {
            None | Some(Err(_)) => {
                let why = match spec {
                    Some(Err(e)) => format!("malformed job payload: {e}"),
                    _ => "job without payload".into(),
                };
                tracing::warn!("node {consumer}: job {job_id}: {why}");
                JobOutcome {
                    reward: String::new(),
                    results: Vec::new(),
                    score_ms: 0.0,
                    stages: Default::default(),
                    scored_by: consumer.into(),
                }
            }
            Some(Ok(spec)) => {
                let deliveries = if taken.reclaimed {
                    self.deliveries(c, &entry_id).await
                } else {
                    1
                };
                if deliveries > q.max_deliveries {
                    tracing::warn!(
                        "node {consumer}: job {job_id} delivered {deliveries} times; answered crashed"
                    );
                    crashed(&spec, deliveries, consumer)
                } else {
                    tracing::info!(
                        "node {consumer}: job {job_id} started ({} completions{})",
                        spec.completions.len(),
                        if taken.reclaimed {
                            format!(", reclaimed, delivery {deliveries}")
                        } else {
                            String::new()
                        }
                    );
                    let heartbeat = self.heartbeat(c.clone(), consumer, &entry_id, vis);
                    let outcome = self.score(spec, consumer).await;
                    heartbeat.abort();
                    outcome
                }
            }
        };
        self.store(c, consumer, &job_id, &entry_id, &outcome).await;
    }

    async fn score(&self, spec: JobSpec, consumer: &str) -> JobOutcome {
        let n = spec.completions.len();
        let task = match self.tasks.resolve(&spec.task) {
            Ok(t) => t,
            Err(e) => {
                return outcome_of(
                    unavailable_items(n, &format!("node {consumer}: {e}")),
                    consumer,
                )
            }
        };
        let reward = match build_reward(&spec.reward) {
            Ok(r) => r,
            Err(e) => {
                return outcome_of(
                    unavailable_items(n, &format!("node {consumer}: {e}")),
                    consumer,
                )
            }
        };
        let ev = Arc::clone(&self.evaluator);
        let who = consumer.to_string();
        let deadline_ms = ms_until(spec.deadline_unix_ms);
        match tokio::task::spawn_blocking(move || {
            run_job(&ev, &task, &spec, reward.as_ref(), deadline_ms, &who, None)
        })
        .await
        {
            Ok(o) => o,
            Err(e) => outcome_of(
                unavailable_items(n, &format!("node {consumer}: scoring thread failed: {e}")),
                consumer,
            ),
        }
    }

    /// Renews the claim on a job while it is scored, so that a live node keeps it.
    fn heartbeat(
        &self,
        mut c: MultiplexedConnection,
        consumer: &str,
        entry_id: &str,
        vis: Duration,
    ) -> tokio::task::JoinHandle<()> {
        let (key, group, consumer, entry) = (
            self.cfg.queue.jobs_key(),
            self.cfg.queue.group(),
            consumer.to_string(),
            entry_id.to_string(),
        );
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(vis / 3).await;
                let r: redis::RedisResult<redis::Value> = redis::cmd("XCLAIM")
                    .arg(&key)
                    .arg(group)
                    .arg(&consumer)
                    .arg(0)
                    .arg(&entry)
                    .arg("JUSTID")
                    .query_async(&mut c)
                    .await;
                if let Err(e) = r {
                    tracing::debug!("node {consumer}: renewing job {entry}: {e}");
                }
            }
        })
    }

    async fn deliveries(&self, c: &mut MultiplexedConnection, entry_id: &str) -> usize {
        let r: redis::RedisResult<StreamPendingCountReply> = redis::cmd("XPENDING")
            .arg(self.cfg.queue.jobs_key())
            .arg(self.cfg.queue.group())
            .arg(entry_id)
            .arg(entry_id)
            .arg(1)
            .query_async(c)
            .await;
        r.ok()
            .and_then(|r| r.ids.first().map(|p| p.times_delivered))
            .unwrap_or(1)
    }

    /// Stores the result (first one wins), announces it and acknowledges the job;
    /// retried while Redis is away (bounded), after which serve adds the job again.
    async fn store(
        &self,
        c: &mut MultiplexedConnection,
        consumer: &str,
        job_id: &str,
        entry_id: &str,
        outcome: &JobOutcome,
    ) {
        let q = &self.cfg.queue;
        let Ok(json) = serde_json::to_string(outcome) else {
            return;
        };
        let give_up = Instant::now() + Duration::from_secs(120);
        let mut wait = Duration::from_millis(100);
        loop {
            let r: redis::RedisResult<()> = async {
                let set: Option<String> = redis::cmd("SET")
                    .arg(q.result_key(job_id))
                    .arg(&json)
                    .arg("NX")
                    .arg("PX")
                    .arg(q.result_ttl.as_millis() as u64)
                    .query_async(c)
                    .await?;
                if set.is_some() {
                    let _: String = redis::cmd("XADD")
                        .arg(q.results_key())
                        .arg("MAXLEN")
                        .arg("~")
                        .arg(RESULTS_MAXLEN)
                        .arg("*")
                        .arg("job")
                        .arg(job_id)
                        .arg("result")
                        .arg(&json)
                        .query_async(c)
                        .await?;
                }
                let _: () = ack_and_delete(q, entry_id).query_async(c).await?;
                Ok(())
            }
            .await;
            match r {
                Ok(()) => {
                    tracing::info!(
                        "node {consumer}: job {job_id} done in {:.0} ms",
                        outcome.score_ms
                    );
                    return;
                }
                Err(e) if Instant::now() < give_up => {
                    tracing::warn!("node {consumer}: storing job {job_id}: {e}; retrying");
                    tokio::time::sleep(wait).await;
                    wait = (wait * 2).min(Duration::from_secs(2));
                    if let Ok(fresh) = self.open().await {
                        *c = fresh;
                    }
                }
                Err(e) => {
                    tracing::error!("node {consumer}: giving up storing job {job_id}: {e}");
                    return;
                }
            }
        }
    }

    async fn ack(&self, c: &mut MultiplexedConnection, entry_id: &str) {
        let _: redis::RedisResult<()> = ack_and_delete(&self.cfg.queue, entry_id)
            .query_async(c)
            .await;
    }
}

/// Acknowledges a stream entry in the consumer group and removes it from the stream.
fn ack_and_delete(q: &QueueConfig, entry_id: &str) -> redis::Pipeline {
    let mut p = redis::pipe();
    p.cmd("XACK")
        .arg(q.jobs_key())
        .arg(q.group())
        .arg(entry_id)
        .ignore()
        .cmd("XDEL")
        .arg(q.jobs_key())
        .arg(entry_id)
        .ignore();
    p
}

fn outcome_of(results: Vec<ItemResult>, consumer: &str) -> JobOutcome {
    JobOutcome {
        reward: String::new(),
        results,
        score_ms: 0.0,
        stages: Default::default(),
        scored_by: consumer.into(),
    }
}

/// A job that killed every node that took it.
fn crashed(spec: &JobSpec, deliveries: usize, consumer: &str) -> JobOutcome {
    let reason = format!(
        "the job was delivered {deliveries} times and no node finished it (the nodes that took it died)"
    );
    let results = (0..spec.completions.len())
        .map(|index| ItemResult {
            index,
            verdict: Verdict::Crashed,
            value: None,
            reason: Some(reason.clone()),
            report: None,
            feedback: None,
        })
        .collect();
    outcome_of(results, consumer)
}
