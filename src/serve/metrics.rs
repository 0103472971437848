//! `/metrics`: Prometheus text exposition (the `prometheus` crate) of requests, queue
//! depth, stage latencies and GPU busy time.

use prometheus::core::Collector;
use prometheus::{
    Encoder, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, Opts,
    Registry, TextEncoder,
};

use super::score::JobOutcome;

/// Latency buckets in seconds: 1 ms … about 10 min.
fn buckets() -> Vec<f64> {
    prometheus::exponential_buckets(0.001, 2.0, 20).unwrap_or_default()
}

/// Registers a metric built from constant, valid options under a unique name.
fn register<M: Collector + Clone + 'static>(
    registry: &Registry,
    metric: prometheus::Result<M>,
) -> M {
    let metric = metric.expect("valid metric");
    registry
        .register(Box::new(metric.clone()))
        .expect("metric names are unique");
    metric
}

/// A labelled counter, registered.
fn counters(registry: &Registry, name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
    register(registry, IntCounterVec::new(Opts::new(name, help), labels))
}

/// A labelled latency histogram ([`buckets`]), registered.
fn histograms(registry: &Registry, name: &str, help: &str, labels: &[&str]) -> HistogramVec {
    register(
        registry,
        HistogramVec::new(HistogramOpts::new(name, help).buckets(buckets()), labels),
    )
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
        let r = &registry;
        Metrics {
            requests: counters(
                r,
                "cudaperf_http_requests_total",
                "HTTP requests by route and status",
                &["route", "status"],
            ),
            request_seconds: histograms(
                r,
                "cudaperf_request_duration_seconds",
                "HTTP request latency by route",
                &["route"],
            ),
            completions: counters(
                r,
                "cudaperf_completions_total",
                "Completions answered, by verdict",
                &["verdict"],
            ),
            queue_depth: register(
                r,
                IntGauge::new(
                    "cudaperf_queue_depth",
                    "Scoring jobs accepted and not yet answered",
                ),
            ),
            queue_wait: register(
                r,
                Histogram::with_opts(
                    HistogramOpts::new(
                        "cudaperf_queue_wait_seconds",
                        "Time a job waited for a scoring thread",
                    )
                    .buckets(buckets()),
                ),
            ),
            stage_seconds: histograms(
                r,
                "cudaperf_stage_duration_seconds",
                "Pipeline stage latency: score (a whole group), compile (cache misses), execute (GPU jobs)",
                &["stage"],
            ),
            gpu_busy: register(
                r,
                prometheus::Counter::new(
                    "cudaperf_gpu_busy_seconds_total",
                    "GPU time of the correctness and timing launches",
                ),
            ),
            rejected: counters(
                r,
                "cudaperf_rejected_total",
                "Requests refused before scoring, by reason",
                &["reason"],
            ),
            queue_up: register(
                r,
                IntGauge::new(
                    "cudaperf_queue_up",
                    "1 while jobs are taken: the Redis queue answers (queue mode) or the scoring threads take jobs (local mode); else 0",
                ),
            ),
            resubmitted: register(
                r,
                IntCounter::new(
                    "cudaperf_jobs_resubmitted_total",
                    "Jobs put on the Redis stream again after Redis lost them",
                ),
            ),
            // Last: the fields above register into it.
            registry,
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
