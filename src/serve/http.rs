//! Routes, limits and error answers of `cudaperf serve` (axum).
//!
//! | route | answer |
//! |---|---|
//! | `POST /v1/score` | [`ScoreResponse`] (see [`super::api`]) |
//! | `GET /v1/tasks` | `{"tasks": [TaskSummary, ...]}` |
//! | `GET /v1/tasks/{id}` | [`super::api::TaskDetail`] with the prompt |
//! | `GET /healthz` | `200 {"status": "ok", ...}` or `503 {"status": "unavailable", "reason"}` |
//! | `GET /metrics` | Prometheus text |
//!
//! Errors: `400` bad JSON, types or values (the message names the field), `404` unknown
//! task or route, `405` wrong method, `408` a body not received within the read timeout,
//! `413` body over the limit, `429` queue full (with `Retry-After`), `503` queue
//! unavailable or shutting down (with `Retry-After`). A bad request never reaches the
//! evaluator.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, FromRequest, Path, Request, State};
use axum::http::{header, HeaderValue, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};

use super::api::{ErrorBody, ScoreResponse, Timing};
use super::metrics::Metrics;
use super::pool::{LocalJob, LocalPool, Rejected};
use super::queue::{QueueClient, QueueError};
use super::request::{parse, Limits, ParsedRequest};
use super::score::{timeout_item, JobOutcome, PartialResults};
use super::tasks::TaskStore;

/// Where accepted jobs go.
pub(crate) enum Backend {
    /// Scored in this process.
    Local(LocalPool),
    /// Put on the Redis stream for the nodes.
    Queue(Arc<QueueClient>),
}

/// Everything a handler needs.
pub(crate) struct AppState {
    pub tasks: Arc<TaskStore>,
    pub limits: Limits,
    pub backend: Backend,
    pub metrics: Arc<Metrics>,
    /// How long a request body may take to arrive (the headers are bounded by the
    /// connection's own read timeout, see [`super::listen`]).
    pub read_timeout: std::time::Duration,
    /// Moving average of a group's scoring time (f64 bits, seconds), for `Retry-After`.
    pub avg_score_s: AtomicU64,
}

impl AppState {
    fn depth(&self) -> usize {
        match &self.backend {
            Backend::Local(p) => p.depth(),
            Backend::Queue(q) => q.depth(),
        }
    }

    /// Seconds until a queue slot is likely free (1 … 60).
    fn retry_after(&self) -> u64 {
        let avg = f64::from_bits(self.avg_score_s.load(Ordering::Relaxed));
        let workers = match &self.backend {
            Backend::Local(p) => p.workers(),
            Backend::Queue(_) => 1,
        } as f64;
        let est = avg * (self.depth() as f64) / workers.max(1.0);
        (est.ceil() as u64).clamp(1, 60)
    }

    fn note_score_time(&self, seconds: f64) {
        let old = f64::from_bits(self.avg_score_s.load(Ordering::Relaxed));
        let new = if old == 0.0 {
            seconds
        } else {
            0.8 * old + 0.2 * seconds
        };
        self.avg_score_s.store(new.to_bits(), Ordering::Relaxed);
    }
}

/// The router with every route and the body limit.
pub(crate) fn router(state: Arc<AppState>) -> Router {
    let limit = state.limits.max_body_bytes;
    Router::new()
        .route("/v1/score", post(score))
        .route("/v1/tasks", get(list_tasks))
        .route("/v1/tasks/{id}", get(task_detail))
        .route("/healthz", get(healthz))
        .route("/metrics", get(metrics))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(limit))
        .with_state(state)
}

fn error(status: StatusCode, message: impl Into<String>) -> Response {
    let message: String = message.into();
    // One line, always.
    let message = message.replace('\n', " ");
    (status, Json(ErrorBody { error: message })).into_response()
}

fn with_retry_after(mut r: Response, seconds: u64) -> Response {
    if let Ok(v) = HeaderValue::from_str(&seconds.to_string()) {
        r.headers_mut().insert(header::RETRY_AFTER, v);
    }
    r
}

/// `429` with `Retry-After`: `waiting` jobs fill the queue.
fn queue_full(st: &AppState, waiting: usize) -> Response {
    st.metrics.rejected.with_label_values(&["queue_full"]).inc();
    with_retry_after(
        error(
            StatusCode::TOO_MANY_REQUESTS,
            format!(
                "queue full: {waiting} jobs waiting (limit {}); retry later",
                st.limits.queue_len
            ),
        ),
        st.retry_after(),
    )
}

fn record(st: &AppState, route: &str, status: StatusCode, start: Instant) {
    st.metrics
        .requests
        .with_label_values(&[route, status.as_str()])
        .inc();
    st.metrics
        .request_seconds
        .with_label_values(&[route])
        .observe(start.elapsed().as_secs_f64());
}

async fn score(State(st): State<Arc<AppState>>, req: Request) -> Response {
    let start = Instant::now();
    // A client that sends its body slowly (or never) gives up its slot after the read
    // timeout instead of holding the connection for the request deadline.
    let r = match tokio::time::timeout(st.read_timeout, Bytes::from_request(req, &())).await {
        Ok(body) => score_inner(&st, body, start).await,
        Err(_) => {
            st.metrics
                .rejected
                .with_label_values(&["body_timeout"])
                .inc();
            let mut r = error(
                StatusCode::REQUEST_TIMEOUT,
                format!(
                    "request body: not received within this server's read timeout of {} s",
                    st.read_timeout.as_secs_f64()
                ),
            );
            r.headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
            r
        }
    };
    record(&st, "/v1/score", r.status(), start);
    st.metrics.queue_depth.set(st.depth() as i64);
    r
}

async fn score_inner(
    st: &AppState,
    body: Result<Bytes, BytesRejection>,
    start: Instant,
) -> Response {
    let parsed = match read_request(st, body) {
        Ok(p) => p,
        Err(r) => return *r,
    };
    let n = parsed.job.completions.len();
    let deadline = parsed.deadline;
    let task_id = parsed.task.id.clone();
    let step = parsed.job.step;
    // The preset as asked, not the name of the combinator behind it.
    let reward_name = parsed.job.reward.name();
    // Local mode: completions whose results were final before the deadline are answered
    // even when the group as a whole is not.
    let partial: Arc<PartialResults> = Arc::new(std::sync::Mutex::new(vec![None; n]));
    let answer = match &st.backend {
        Backend::Local(pool) => score_local(st, pool, parsed, &partial).await,
        Backend::Queue(q) => score_queued(st, q, &parsed, start).await,
    };
    let (outcome, queue_ms) = match answer {
        Ok(Some((o, q))) => {
            st.metrics.observe_outcome(&o);
            st.note_score_time(o.score_ms / 1e3);
            (o, q)
        }
        Ok(None) => {
            let o = timed_out(&partial, reward_name.clone(), deadline.as_millis() as u64);
            st.metrics.observe_outcome(&o);
            (o, start.elapsed().as_secs_f64() * 1e3)
        }
        Err(response) => return response,
    };
    let response = ScoreResponse {
        task: task_id,
        reward: reward_name,
        step,
        results: outcome.results,
        timing: Timing {
            queue_ms,
            score_ms: outcome.score_ms,
            total_ms: start.elapsed().as_secs_f64() * 1e3,
        },
        scored_by: outcome.scored_by,
    };
    (StatusCode::OK, Json(response)).into_response()
}

/// The request of a body, or the error answer (counted as rejected).
fn read_request(
    st: &AppState,
    body: Result<Bytes, BytesRejection>,
) -> Result<ParsedRequest, Box<Response>> {
    let body = body.map_err(|rej| {
        st.metrics.rejected.with_label_values(&["body"]).inc();
        let status = rej.status();
        let msg = if status == StatusCode::PAYLOAD_TOO_LARGE {
            format!(
                "request body: larger than this server's limit of {} bytes",
                st.limits.max_body_bytes
            )
        } else {
            format!("request body: {}", rej.body_text())
        };
        Box::new(error(status, msg))
    })?;
    parse(&body, &st.limits, &st.tasks).map_err(|e| {
        st.metrics.rejected.with_label_values(&["invalid"]).inc();
        let status = StatusCode::from_u16(e.status).unwrap_or(StatusCode::BAD_REQUEST);
        Box::new(error(status, e.message))
    })
}

/// What a scored job answered (with the time it waited in the queue), `None` when the
/// deadline passed first, or the error answer.
type Answer = Result<Option<(JobOutcome, f64)>, Response>;

/// Scores the request in this process.
async fn score_local(
    st: &AppState,
    pool: &LocalPool,
    parsed: ParsedRequest,
    partial: &Arc<PartialResults>,
) -> Answer {
    let deadline = parsed.deadline;
    let (tx, rx) = tokio::sync::oneshot::channel();
    let job = LocalJob {
        task: parsed.task,
        spec: parsed.job,
        reward: parsed.reward,
        deadline_ms: deadline.as_millis() as u64,
        enqueued: Instant::now(),
        reply: tx,
        partial: Arc::clone(partial),
    };
    match pool.try_submit(job) {
        Ok(()) => {}
        Err(Rejected::Full) => return Err(queue_full(st, pool.depth())),
        Err(Rejected::Closed) => {
            return Err(with_retry_after(
                error(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "the server is shutting down",
                ),
                1,
            ))
        }
    }
    st.metrics.queue_depth.set(st.depth() as i64);
    match tokio::time::timeout(deadline, rx).await {
        Ok(Ok(answer)) => Ok(Some(answer)),
        Ok(Err(_)) => Err(error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "the scoring thread ended without an answer",
        )),
        Err(_) => Ok(None),
    }
}

/// Puts the request on the queue for the nodes and waits for its outcome.
async fn score_queued(
    st: &AppState,
    q: &QueueClient,
    parsed: &ParsedRequest,
    start: Instant,
) -> Answer {
    let (job_id, rx) = match q.submit(&parsed.job).await {
        Ok(x) => x,
        Err(QueueError::Full) => return Err(queue_full(st, q.depth())),
        Err(e @ QueueError::Unavailable(_)) => {
            st.metrics
                .rejected
                .with_label_values(&["queue_unavailable"])
                .inc();
            return Err(with_retry_after(
                error(StatusCode::SERVICE_UNAVAILABLE, e.to_string()),
                1,
            ));
        }
    };
    st.metrics.queue_depth.set(st.depth() as i64);
    match tokio::time::timeout(parsed.deadline, rx).await {
        Ok(Ok(outcome)) => {
            let waited = (start.elapsed().as_secs_f64() * 1e3 - outcome.score_ms).max(0.0);
            Ok(Some((outcome, waited)))
        }
        Ok(Err(_)) | Err(_) => {
            q.forget(&job_id);
            Ok(None)
        }
    }
}

/// The outcome when the deadline passed: the results final by then, a timeout for the rest.
fn timed_out(partial: &PartialResults, reward: String, deadline_ms: u64) -> JobOutcome {
    let done = partial.lock().unwrap_or_else(|p| p.into_inner()).clone();
    JobOutcome {
        reward,
        results: done
            .into_iter()
            .enumerate()
            .map(|(i, r)| r.unwrap_or_else(|| timeout_item(i, deadline_ms)))
            .collect(),
        score_ms: 0.0,
        stages: Default::default(),
        scored_by: String::new(),
    }
}

async fn list_tasks(State(st): State<Arc<AppState>>) -> Response {
    let start = Instant::now();
    let r = Json(serde_json::json!({ "tasks": st.tasks.summaries() })).into_response();
    record(&st, "/v1/tasks", r.status(), start);
    r
}

async fn task_detail(State(st): State<Arc<AppState>>, Path(id): Path<String>) -> Response {
    let start = Instant::now();
    let r = match st.tasks.detail(&id) {
        Some(d) => Json(d).into_response(),
        None => error(
            StatusCode::NOT_FOUND,
            format!(
                "unknown task `{id}` ({} tasks are served; GET /v1/tasks lists them)",
                st.tasks.len()
            ),
        ),
    };
    record(&st, "/v1/tasks/{id}", r.status(), start);
    r
}

async fn healthz(State(st): State<Arc<AppState>>) -> Response {
    let (ok, mut body) = match &st.backend {
        Backend::Local(p) => (
            true,
            serde_json::json!({
                "status": "ok", "mode": "local", "workers": p.workers(),
                "queue_depth": p.depth(), "tasks": st.tasks.len(),
            }),
        ),
        Backend::Queue(q) => {
            let s = q.status();
            let status = if s.up { "ok" } else { "unavailable" };
            let mut body = serde_json::json!({
                "status": status, "mode": "queue", "queue": s, "tasks": st.tasks.len(),
            });
            if let Some(e) = &s.error {
                body["reason"] = format!("queue: {e}").into();
            }
            (s.up, body)
        }
    };
    // What a client needs to explain a refusal (a 413 it only saw as a broken pipe).
    body["limits"] = serde_json::json!({
        "max_body_bytes": st.limits.max_body_bytes,
        "max_completions": st.limits.max_completions,
        "read_timeout_s": st.read_timeout.as_secs_f64(),
    });
    let status = if ok {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    let mut r = (status, Json(body)).into_response();
    if !ok {
        r = with_retry_after(r, 1);
    }
    r
}

async fn metrics(State(st): State<Arc<AppState>>) -> Response {
    st.metrics.queue_depth.set(st.depth() as i64);
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        st.metrics.render(),
    )
        .into_response()
}

const ROUTES: &str =
    "POST /v1/score, GET /v1/tasks, GET /v1/tasks/{id}, GET /healthz, GET /metrics";

async fn not_found(method: Method, uri: Uri) -> Response {
    error(
        StatusCode::NOT_FOUND,
        format!("no route for {method} {} (routes: {ROUTES})", uri.path()),
    )
}

async fn method_not_allowed(method: Method, uri: Uri) -> Response {
    error(
        StatusCode::METHOD_NOT_ALLOWED,
        format!(
            "{method} is not allowed on {} (routes: {ROUTES})",
            uri.path()
        ),
    )
}
