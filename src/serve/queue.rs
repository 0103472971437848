//! The Redis Streams queue between `cudaperf serve` and the `cudaperf node`s; the
//! protocol is on [`QueueConfig`].

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;
use redis::streams::{StreamId, StreamRangeReply, StreamReadReply};
use redis::AsyncConnectionConfig;
use sha2::{Digest, Sha256};
use tokio::sync::{oneshot, watch};

use super::api::JobSpec;
use super::metrics::Metrics;
use super::score::{unavailable_items, JobOutcome};
use super::ServeError;

/// Where the queue is and how it behaves. The protocol (`cudaperf serve` and the
/// `cudaperf node`s):
///
/// * `serve` adds each job (one request's group) to the stream `<prefix>:jobs`
///   (`XADD`, fields `job` = id and `payload` = the [`JobSpec`] as JSON) and waits for its
///   answer.
/// * Nodes read the stream in the consumer group `nodes` (`XREADGROUP`, one job at a time
///   per consumer), score the job, store the result under `<prefix>:result:<job id>` with
///   `SET NX` (the first result wins: results are idempotent), announce it on
///   `<prefix>:results`, then `XACK` and `XDEL` the job.
/// * While a node works on a job it renews its claim (`XCLAIM … JUSTID`); the jobs of a
///   node that died stay pending and idle, and after the visibility timeout another node
///   takes them over with `XAUTOCLAIM` and runs them again. A job delivered more than
///   `max_deliveries` times is answered `crashed` instead of being run again.
/// * `serve` answers each job once: the first result it sees (on `<prefix>:results`, or by
///   reading the result key for jobs waiting longer than a second) removes the waiter.
///   When Redis comes back after an outage, jobs it lost are added again.
#[derive(Debug, Clone, PartialEq)]
pub struct QueueConfig {
    /// `redis://host:port[/db]`.
    pub url: String,
    /// Key prefix (default `cudaperf`): `<prefix>:jobs`, `<prefix>:results`,
    /// `<prefix>:result:<id>`.
    pub prefix: String,
    /// How long a job may sit unacknowledged with a node that stopped renewing its claim
    /// before another node takes it over (default 60 s).
    pub visibility_timeout: Duration,
    /// How long results are kept (default 1 h).
    pub result_ttl: Duration,
    /// Deliveries after which a job is answered `crashed` instead of run again (default 3).
    pub max_deliveries: usize,
}

impl QueueConfig {
    /// A queue at `url` with the defaults.
    pub fn new(url: impl Into<String>) -> QueueConfig {
        QueueConfig {
            url: url.into(),
            prefix: "cudaperf".into(),
            visibility_timeout: Duration::from_secs(60),
            result_ttl: Duration::from_secs(3600),
            max_deliveries: 3,
        }
    }

    /// The jobs stream.
    pub fn jobs_key(&self) -> String {
        format!("{}:jobs", self.prefix)
    }

    /// The stream announcing results.
    pub fn results_key(&self) -> String {
        format!("{}:results", self.prefix)
    }

    /// Where a job's result is stored.
    pub fn result_key(&self, job_id: &str) -> String {
        format!("{}:result:{job_id}", self.prefix)
    }

    /// The nodes' consumer group.
    pub fn group(&self) -> &'static str {
        "nodes"
    }

    pub(crate) fn client(&self) -> Result<redis::Client, ServeError> {
        redis::Client::open(self.url.as_str())
            .map_err(|e| ServeError::Config(format!("--queue `{}`: {e}", self.url)))
    }
}

/// Announced results kept on `<prefix>:results` (approximate trim).
pub(crate) const RESULTS_MAXLEN: usize = 10_000;

/// Why a job could not be queued.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum QueueError {
    /// Redis does not answer.
    #[error("the job queue is unavailable: {0}")]
    Unavailable(String),
    /// Too many jobs are waiting.
    #[error("the job queue is full")]
    Full,
}

/// Opens a multiplexed connection with bounded connect and response times.
pub(crate) async fn connect(
    client: &redis::Client,
    response_timeout: Duration,
) -> redis::RedisResult<MultiplexedConnection> {
    let cfg = AsyncConnectionConfig::new()
        .set_connection_timeout(Duration::from_secs(2))
        .set_response_timeout(response_timeout);
    client
        .get_multiplexed_async_connection_with_config(&cfg)
        .await
}

/// Creates the consumer group (and the stream) unless it exists. The group starts at the
/// beginning of the stream, so jobs added before any node started are not skipped.
pub(crate) async fn ensure_group(
    conn: &mut MultiplexedConnection,
    cfg: &QueueConfig,
) -> redis::RedisResult<()> {
    let r: redis::RedisResult<()> = redis::cmd("XGROUP")
        .arg("CREATE")
        .arg(cfg.jobs_key())
        .arg(cfg.group())
        .arg("0")
        .arg("MKSTREAM")
        .query_async(conn)
        .await;
    match r {
        Err(e) if e.code() == Some("BUSYGROUP") => Ok(()),
        other => other,
    }
}

/// The server's `run_id` (changes when Redis restarts).
async fn run_id(conn: &mut MultiplexedConnection) -> redis::RedisResult<String> {
    let info: String = redis::cmd("INFO").arg("server").query_async(conn).await?;
    Ok(info
        .lines()
        .find_map(|l| l.strip_prefix("run_id:"))
        .unwrap_or("")
        .trim()
        .to_string())
}

/// A fresh job id (32 hex digits).
pub(crate) fn new_job_id() -> String {
    static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let mut h = Sha256::new();
    h.update(std::process::id().to_le_bytes());
    h.update(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos())
            .to_le_bytes(),
    );
    h.update(
        COUNTER
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            .to_le_bytes(),
    );
    h.update(super::hostname().as_bytes());
    h.finalize()[..16]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

struct Pending {
    tx: oneshot::Sender<JobOutcome>,
    payload: String,
    entry: Option<String>,
    since: Instant,
    completions: usize,
}

/// Whether the queue answers, for `/healthz`.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct QueueStatus {
    /// Redis answered the last check.
    pub up: bool,
    /// The last error, while down.
    pub error: Option<String>,
    /// Jobs waiting for a result.
    pub waiting: usize,
}

/// The server's side of the queue.
pub(crate) struct QueueClient {
    cfg: QueueConfig,
    client: redis::Client,
    conn: Mutex<Option<MultiplexedConnection>>,
    pending: Mutex<HashMap<String, Pending>>,
    up: Mutex<(bool, Option<String>)>,
    metrics: Arc<Metrics>,
    limit: usize,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl QueueClient {
    /// A client for `cfg` that lets at most `limit` jobs wait at once.
    pub fn new(
        cfg: QueueConfig,
        limit: usize,
        metrics: Arc<Metrics>,
    ) -> Result<Arc<QueueClient>, ServeError> {
        let client = cfg.client()?;
        Ok(Arc::new(QueueClient {
            cfg,
            client,
            conn: Mutex::new(None),
            pending: Mutex::new(HashMap::new()),
            up: Mutex::new((false, Some("not connected yet".into()))),
            metrics,
            limit: limit.max(1),
        }))
    }

    /// Connects now (so that a server started against a dead Redis says so at once).
    pub async fn connect_now(&self) -> redis::RedisResult<()> {
        let mut c = connect(&self.client, Duration::from_secs(2)).await?;
        ensure_group(&mut c, &self.cfg).await?;
        *lock(&self.conn) = Some(c);
        *lock(&self.up) = (true, None);
        self.metrics.queue_up.set(1);
        Ok(())
    }

    /// Starts the health and result loops; they end when `shutdown` turns true.
    pub fn spawn_loops(self: &Arc<Self>, shutdown: watch::Receiver<bool>) {
        tokio::spawn(Arc::clone(self).health_loop(shutdown.clone()));
        tokio::spawn(Arc::clone(self).results_loop(shutdown));
    }

    /// The health of the queue.
    pub fn status(&self) -> QueueStatus {
        let (up, error) = lock(&self.up).clone();
        QueueStatus {
            up,
            error,
            waiting: lock(&self.pending).len(),
        }
    }

    /// Jobs waiting for a result.
    pub fn depth(&self) -> usize {
        lock(&self.pending).len()
    }

    fn mark_down(&self, why: String) {
        let mut up = lock(&self.up);
        if up.0 {
            tracing::warn!("queue {} unavailable: {why}", self.cfg.url);
        }
        *up = (false, Some(why));
        lock(&self.conn).take();
        self.metrics.queue_up.set(0);
    }

    /// Adds a job; the receiver gets its outcome once.
    pub async fn submit(
        &self,
        job: &JobSpec,
    ) -> Result<(String, oneshot::Receiver<JobOutcome>), QueueError> {
        let conn = {
            let up = lock(&self.up);
            if !up.0 {
                return Err(QueueError::Unavailable(
                    up.1.clone().unwrap_or_else(|| "not connected".into()),
                ));
            }
            lock(&self.conn).clone()
        };
        let Some(mut conn) = conn else {
            return Err(QueueError::Unavailable("not connected".into()));
        };
        let id = new_job_id();
        let payload = serde_json::to_string(job)
            .map_err(|e| QueueError::Unavailable(format!("cannot encode the job: {e}")))?;
        let (tx, rx) = oneshot::channel();
        {
            let mut pending = lock(&self.pending);
            if pending.len() >= self.limit {
                return Err(QueueError::Full);
            }
            pending.insert(
                id.clone(),
                Pending {
                    tx,
                    payload: payload.clone(),
                    entry: None,
                    since: Instant::now(),
                    completions: job.completions.len(),
                },
            );
        }
        let added: redis::RedisResult<String> = add_job(&self.cfg, &id, &payload)
            .query_async(&mut conn)
            .await;
        match added {
            Ok(entry) => {
                if let Some(p) = lock(&self.pending).get_mut(&id) {
                    p.entry = Some(entry);
                }
                Ok((id, rx))
            }
            Err(e) => {
                lock(&self.pending).remove(&id);
                let why = e.to_string();
                self.mark_down(why.clone());
                Err(QueueError::Unavailable(why))
            }
        }
    }

    /// Stops waiting for a job (its deadline passed); a late result is dropped.
    pub fn forget(&self, job_id: &str) {
        lock(&self.pending).remove(job_id);
    }

    /// Answers a job once: the first result removes the waiter.
    fn dispatch(&self, job_id: &str, result: &str) {
        let Some(p) = lock(&self.pending).remove(job_id) else {
            return;
        };
        let outcome = match serde_json::from_str::<JobOutcome>(result) {
            Ok(mut o) => {
                if o.results.len() != p.completions {
                    let why = format!(
                        "node `{}` returned {} results for {} completions",
                        o.scored_by,
                        o.results.len(),
                        p.completions
                    );
                    o.results = unavailable_items(p.completions, &why);
                }
                o
            }
            Err(e) => JobOutcome {
                reward: String::new(),
                results: unavailable_items(
                    p.completions,
                    &format!("unreadable result from a node: {e}"),
                ),
                score_ms: 0.0,
                stages: Default::default(),
                scored_by: "unknown".into(),
            },
        };
        let _ = p.tx.send(outcome);
    }

    async fn health_loop(self: Arc<Self>, mut shutdown: watch::Receiver<bool>) {
        let mut last_run_id: Option<String> = None;
        loop {
            if *shutdown.borrow() {
                return;
            }
            let conn = lock(&self.conn).clone();
            match conn {
                Some(mut c) => {
                    let pong: redis::RedisResult<String> =
                        redis::cmd("PING").query_async(&mut c).await;
                    if let Err(e) = pong {
                        self.mark_down(e.to_string());
                    }
                }
                None => match connect(&self.client, Duration::from_secs(2)).await {
                    Ok(mut c) => {
                        let ready = async {
                            ensure_group(&mut c, &self.cfg).await?;
                            run_id(&mut c).await
                        }
                        .await;
                        match ready {
                            Ok(id) => {
                                if last_run_id.as_ref().is_some_and(|old| *old != id) {
                                    tracing::warn!("queue {}: Redis restarted", self.cfg.url);
                                }
                                last_run_id = Some(id);
                                *lock(&self.conn) = Some(c.clone());
                                let was_down = !lock(&self.up).0;
                                *lock(&self.up) = (true, None);
                                self.metrics.queue_up.set(1);
                                if was_down {
                                    tracing::info!("queue {} available", self.cfg.url);
                                }
                                if let Err(e) = self.recover(&mut c).await {
                                    self.mark_down(e.to_string());
                                }
                            }
                            Err(e) => self.mark_down(e.to_string()),
                        }
                    }
                    Err(e) => self.mark_down(e.to_string()),
                },
            }
            if last_run_id.is_none() {
                let current = lock(&self.conn).clone();
                if let Some(mut c) = current {
                    last_run_id = run_id(&mut c).await.ok();
                }
            }
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(500)) => {}
                _ = shutdown.changed() => {}
            }
        }
    }

    /// After reconnecting: answers waiting jobs whose result is stored, and adds again
    /// those Redis lost (a restart without persistence).
    async fn recover(&self, conn: &mut MultiplexedConnection) -> redis::RedisResult<()> {
        let snapshot: Vec<(String, String, Option<String>)> = lock(&self.pending)
            .iter()
            .map(|(id, p)| (id.clone(), p.payload.clone(), p.entry.clone()))
            .collect();
        for (id, payload, entry) in snapshot {
            let stored: Option<String> = redis::cmd("GET")
                .arg(self.cfg.result_key(&id))
                .query_async(conn)
                .await?;
            if let Some(result) = stored {
                self.dispatch(&id, &result);
                continue;
            }
            let present = match &entry {
                Some(e) => {
                    let r: StreamRangeReply = redis::cmd("XRANGE")
                        .arg(self.cfg.jobs_key())
                        .arg(e)
                        .arg(e)
                        .query_async(conn)
                        .await?;
                    !r.ids.is_empty()
                }
                None => false,
            };
            if !present {
                let new_entry: String = add_job(&self.cfg, &id, &payload).query_async(conn).await?;
                tracing::info!("queue: job {id} was lost by Redis; added again");
                self.metrics.resubmitted.inc();
                if let Some(p) = lock(&self.pending).get_mut(&id) {
                    p.entry = Some(new_entry);
                }
            }
        }
        Ok(())
    }

    async fn results_loop(self: Arc<Self>, shutdown: watch::Receiver<bool>) {
        let mut conn: Option<MultiplexedConnection> = None;
        let mut last = String::from("0-0");
        let mut last_sweep = Instant::now();
        while !*shutdown.borrow() {
            let Some(c) = conn.as_mut() else {
                if lock(&self.up).0 {
                    if let Ok(mut c) = connect(&self.client, Duration::from_secs(5)).await {
                        // Start after the newest announcement; older ones are found by
                        // the sweep below if still waited for.
                        let newest: redis::RedisResult<StreamRangeReply> = redis::cmd("XREVRANGE")
                            .arg(self.cfg.results_key())
                            .arg("+")
                            .arg("-")
                            .arg("COUNT")
                            .arg(1)
                            .query_async(&mut c)
                            .await;
                        if let Ok(r) = newest {
                            last = r.ids.first().map_or("0-0".into(), |e| e.id.clone());
                            conn = Some(c);
                            continue;
                        }
                    }
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            };
            let read: redis::RedisResult<Option<StreamReadReply>> = redis::cmd("XREAD")
                .arg("COUNT")
                .arg(100)
                .arg("BLOCK")
                .arg(1000)
                .arg("STREAMS")
                .arg(self.cfg.results_key())
                .arg(&last)
                .query_async(c)
                .await;
            match read {
                Ok(Some(reply)) => {
                    for key in reply.keys {
                        for e in key.ids {
                            last = e.id.clone();
                            if let (Some(job), Some(result)) =
                                (e.get::<String>("job"), e.get::<String>("result"))
                            {
                                self.dispatch(&job, &result);
                            }
                        }
                    }
                }
                Ok(None) => {}
                Err(_) => {
                    conn = None;
                    continue;
                }
            }
            if last_sweep.elapsed() >= Duration::from_secs(1) {
                last_sweep = Instant::now();
                if let Some(c) = conn.as_mut() {
                    if self.sweep(c).await.is_err() {
                        conn = None;
                    }
                }
            }
        }
    }

    /// Reads the stored result of jobs waiting longer than a second (an announcement can
    /// be missed across a reconnect).
    async fn sweep(&self, conn: &mut MultiplexedConnection) -> redis::RedisResult<()> {
        let ids: Vec<String> = lock(&self.pending)
            .iter()
            .filter(|(_, p)| p.since.elapsed() >= Duration::from_secs(1))
            .map(|(id, _)| id.clone())
            .collect();
        if ids.is_empty() {
            return Ok(());
        }
        let keys: Vec<String> = ids.iter().map(|id| self.cfg.result_key(id)).collect();
        let found: Vec<Option<String>> = redis::cmd("MGET").arg(&keys).query_async(conn).await?;
        for (id, r) in ids.iter().zip(found) {
            if let Some(result) = r {
                self.dispatch(id, &result);
            }
        }
        Ok(())
    }
}

/// The fields of a job entry.
pub(crate) fn job_fields(e: &StreamId) -> (Option<String>, Option<String>) {
    (e.get::<String>("job"), e.get::<String>("payload"))
}

/// `XADD` of a job to the jobs stream (Redis picks the entry id).
fn add_job(cfg: &QueueConfig, id: &str, payload: &str) -> redis::Cmd {
    let mut c = redis::cmd("XADD");
    c.arg(cfg.jobs_key())
        .arg("*")
        .arg("job")
        .arg(id)
        .arg("payload")
        .arg(payload);
    c
}
