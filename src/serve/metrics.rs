//! `/metrics`: Prometheus text exposition (the `prometheus` crate) of requests, queue
//! depth, stage latencies and GPU busy time.

use prometheus::{
    Encoder, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, Opts,
    Registry, TextEncoder,
};

use super::score::JobOutcome;

/// Latency buckets in seconds: 1 ms … about 10 min.
fn buckets() -> Vec<f64> {
    prometheus::exponential_buckets(0.001, 2.0, 20).unwrap_or_default()
}

/// Every metric the server exports.
pub struct Metrics {
    registry: Registry,
    /// `cudaperf_http_requests_total{route, status}`.
    pub requests: IntCounterVec,
    /// `cudaperf_request_duration_seconds{route}`.
    pub request_seconds: HistogramVec,
    /// `cudaperf_completions_total{verdict}`.
    pub completions: IntCounterVec,
    /// `cudaperf_queue_depth`: jobs accepted and not yet answered.
    pub queue_depth: IntGauge,
    /// `cudaperf_queue_wait_seconds`: time a job waited for a worker (local mode).
    pub queue_wait: Histogram,
    /// `cudaperf_stage_duration_seconds{stage}`: `score` (a whole group), `compile` (cache
    /// misses), `execute` (GPU jobs).
    pub stage_seconds: HistogramVec,
    /// `cudaperf_gpu_busy_seconds_total`: GPU time of the protocol's launches.
    pub gpu_busy: prometheus::Counter,
    /// `cudaperf_rejected_total{reason}`: requests refused before scoring.
    pub rejected: IntCounterVec,
    /// `cudaperf_queue_up`: 1 while jobs are taken: the Redis queue answers (queue mode) or
    /// the scoring threads take jobs (local mode, 0 once shutting down).
    pub queue_up: IntGauge,
    /// `cudaperf_jobs_resubmitted_total`: jobs put on the queue again after Redis lost them.
    pub resubmitted: IntCounter,
}

impl Metrics {
    /// Registers every metric.
    pub fn new() -> Metrics {
        let registry = Registry::new();
        let requests = IntCounterVec::new(
            Opts::new(
                "cudaperf_http_requests_total",
                "HTTP requests by route and status",
            ),
            &["route", "status"],
        )
        .expect("valid metric");
        let request_seconds = HistogramVec::new(
            HistogramOpts::new(
                "cudaperf_request_duration_seconds",
                "HTTP request latency by route",
            )
            .buckets(buckets()),
            &["route"],
        )
        .expect("valid metric");
        let completions = IntCounterVec::new(
            Opts::new(
                "cudaperf_completions_total",
                "Completions answered, by verdict",
            ),
            &["verdict"],
        )
        .expect("valid metric");
        let queue_depth = IntGauge::new(
            "cudaperf_queue_depth",
            "Scoring jobs accepted and not yet answered",
        )
        .expect("valid metric");
        let queue_wait = Histogram::with_opts(
            HistogramOpts::new(
                "cudaperf_queue_wait_seconds",
                "Time a job waited for a scoring thread",
            )
            .buckets(buckets()),
        )
        .expect("valid metric");
        let stage_seconds = HistogramVec::new(
            HistogramOpts::new(
                "cudaperf_stage_duration_seconds",
                "Pipeline stage latency: score (a whole group), compile (cache misses), execute (GPU jobs)",
            )
            .buckets(buckets()),
            &["stage"],
        )
        .expect("valid metric");
        let gpu_busy = prometheus::Counter::new(
            "cudaperf_gpu_busy_seconds_total",
            "GPU time of the correctness and timing launches",
        )
        .expect("valid metric");
        let rejected = IntCounterVec::new(
            Opts::new(
                "cudaperf_rejected_total",
                "Requests refused before scoring, by reason",
            ),
            &["reason"],
        )
        .expect("valid metric");
        let queue_up = IntGauge::new(
            "cudaperf_queue_up",
            "1 while jobs are taken: the Redis queue answers (queue mode) or the scoring threads take jobs (local mode); else 0",
        )
        .expect("valid metric");
        let resubmitted = IntCounter::new(
            "cudaperf_jobs_resubmitted_total",
            "Jobs put on the Redis stream again after Redis lost them",
        )
        .expect("valid metric");
        for c in [
            Box::new(requests.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(request_seconds.clone()),
            Box::new(completions.clone()),
            Box::new(queue_depth.clone()),
            Box::new(queue_wait.clone()),
            Box::new(stage_seconds.clone()),
            Box::new(gpu_busy.clone()),
            Box::new(rejected.clone()),
            Box::new(queue_up.clone()),
            Box::new(resubmitted.clone()),
        ] {
            registry.register(c).expect("metric names are unique");
        }
        Metrics {
            registry,
            requests,
            request_seconds,
            completions,
            queue_depth,
            queue_wait,
            stage_seconds,
            gpu_busy,
            rejected,
            queue_up,
            resubmitted,
        }
    }

    /// Records what a job's outcome says about its stages and verdicts.
    pub fn observe_outcome(&self, outcome: &JobOutcome) {
        self.stage_seconds
            .with_label_values(&["score"])
            .observe(outcome.score_ms / 1e3);
        for ms in &outcome.stages.compile_ms {
            self.stage_seconds
                .with_label_values(&["compile"])
                .observe(ms / 1e3);
        }
        for ms in &outcome.stages.execute_ms {
            self.stage_seconds
                .with_label_values(&["execute"])
                .observe(ms / 1e3);
        }
        if outcome.stages.gpu_ms > 0.0 {
            self.gpu_busy.inc_by(outcome.stages.gpu_ms / 1e3);
        }
        for r in &outcome.results {
            self.completions
                .with_label_values(&[r.verdict.as_str()])
                .inc();
        }
    }

    /// The text exposition.
    pub fn render(&self) -> String {
        let mut buf = Vec::new();
        let families = self.registry.gather();
        if let Err(e) = TextEncoder::new().encode(&families, &mut buf) {
            return format!("# error encoding metrics: {e}\n");
        }
        String::from_utf8_lossy(&buf).into_owned()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}
