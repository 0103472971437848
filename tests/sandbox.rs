//! The worker pool without a GPU: round trips, timeouts, crashes, impostors, spawn
//! failures, many jobs, and noisy workers. Every job must get an outcome.

mod common;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use cudaperf::sandbox::protocol::{Job, JobResult, Response};
use cudaperf::sandbox::{find_worker, serve, JobOutcome, Pool, WorkerSpec};

fn spec(program: impl Into<PathBuf>, args: &[&str]) -> WorkerSpec {
    WorkerSpec {
        program: program.into(),
        args: args.iter().map(|s| s.to_string()).collect(),
        env: Vec::new(),
        memory_limit_bytes: None,
    }
}

fn worker_spec() -> WorkerSpec {
    spec(common::cudaperf_bin(), &["worker"])
}

fn pool(n: usize) -> Pool {
    Pool::new(vec![worker_spec(); n])
}

const LONG: Duration = Duration::from_secs(30);

/// A ping comes back as a pong, and the worker is kept for the next job.
#[test]
fn ping_round_trip() {
    let p = pool(1);
    assert_eq!(p.len(), 1);
    for _ in 0..3 {
        assert_eq!(p.run(&Job::Ping, LONG), JobOutcome::Done(JobResult::Pong));
    }
    assert_eq!(p.stats().restarts, 0);
}

/// A job past its limit is a Timeout (promptly), the worker is replaced, and the next job
/// succeeds.
#[test]
fn sleep_past_limit_times_out_and_worker_is_replaced() {
    let p = pool(1);
    assert_eq!(p.run(&Job::Ping, LONG), JobOutcome::Done(JobResult::Pong));
    let limit = Duration::from_millis(300);
    let t = Instant::now();
    let out = p.run(&Job::Sleep { ms: 20_000 }, limit);
    assert_eq!(out, JobOutcome::Timeout { limit });
    assert!(
        t.elapsed() < Duration::from_secs(3),
        "timeout took {:?}",
        t.elapsed()
    );
    assert_eq!(p.stats().restarts, 1);
    assert_eq!(p.run(&Job::Ping, LONG), JobOutcome::Done(JobResult::Pong));
    assert_eq!(p.stats().restarts, 1);
}

/// A sleep within its limit is answered.
#[test]
fn sleep_within_limit_is_answered() {
    let p = pool(1);
    assert_eq!(
        p.run(&Job::Sleep { ms: 50 }, LONG),
        JobOutcome::Done(JobResult::Pong)
    );
}

/// A worker that exits mid-job is Crashed with its exit status, and is respawned.
#[test]
fn exit_is_crashed_and_respawned() {
    let p = pool(1);
    let out = p.run(&Job::Exit { code: 7 }, LONG);
    match &out {
        JobOutcome::Crashed { reason, .. } => assert!(
            reason.contains("exit") || reason.contains("closed"),
            "{reason}"
        ),
        other => panic!("expected Crashed, got {other:?}"),
    }
    assert_eq!(p.stats().restarts, 1);
    assert_eq!(p.run(&Job::Ping, LONG), JobOutcome::Done(JobResult::Pong));
}

/// `/bin/cat` echoes the request, which is not a response: a protocol error, reported as
/// Crashed (not a hang, not a panic).
#[test]
fn cat_is_not_a_worker() {
    let p = Pool::new(vec![spec("/bin/cat", &[])]);
    let t = Instant::now();
    match p.run(&Job::Ping, Duration::from_secs(10)) {
        JobOutcome::Crashed { reason, .. } => assert!(reason.contains("protocol"), "{reason}"),
        other => panic!("expected Crashed, got {other:?}"),
    }
    assert!(t.elapsed() < Duration::from_secs(5));
}

/// A program that prints garbage and then lingers is reported as a protocol error at once,
/// not after its sleep or the job limit.
#[test]
fn garbage_printer_is_a_protocol_error() {
    let p = Pool::new(vec![spec("sh", &["-c", "echo garbage; sleep 5"])]);
    let t = Instant::now();
    match p.run(&Job::Ping, Duration::from_secs(20)) {
        JobOutcome::Crashed { reason, .. } => assert!(
            reason.contains("protocol") && reason.contains("garbage"),
            "{reason}"
        ),
        other => panic!("expected Crashed, got {other:?}"),
    }
    assert!(
        t.elapsed() < Duration::from_secs(4),
        "took {:?}",
        t.elapsed()
    );
}

/// A program that exits at once without answering is Crashed.
#[test]
fn silent_exit_is_crashed() {
    let p = Pool::new(vec![spec("sh", &["-c", "echo last words >&2; exit 3"])]);
    match p.run(&Job::Ping, Duration::from_secs(10)) {
        JobOutcome::Crashed { stderr_tail, .. } => {
            assert!(stderr_tail.contains("last words"), "{stderr_tail}")
        }
        other => panic!("expected Crashed, got {other:?}"),
    }
}

/// A program that does not exist is SpawnFailed, naming it.
#[test]
fn nonexistent_program_is_spawn_failed() {
    let p = Pool::new(vec![spec("/nonexistent/cudaperf-worker", &["worker"])]);
    match p.run(&Job::Ping, LONG) {
        JobOutcome::SpawnFailed { reason } => {
            assert!(reason.contains("/nonexistent/cudaperf-worker"), "{reason}")
        }
        other => panic!("expected SpawnFailed, got {other:?}"),
    }
}

fn kind(o: &JobOutcome) -> &'static str {
    match o {
        JobOutcome::Done(JobResult::Pong) => "pong",
        JobOutcome::Done(_) => "done-other",
        JobOutcome::Timeout { .. } => "timeout",
        JobOutcome::Crashed { .. } => "crashed",
        JobOutcome::SpawnFailed { .. } => "spawn_failed",
    }
}

/// 20 mixed jobs (answers, timeouts, crashes) on 3 workers: 20 outcomes, in input order.
#[test]
fn run_all_loses_no_job_and_keeps_order() {
    let p = pool(3);
    let limit = Duration::from_millis(800);
    let jobs: Vec<Job> = (0..20)
        .map(|i| match i % 5 {
            0 | 1 => Job::Ping,
            2 => Job::Sleep { ms: 20 },
            3 => Job::Exit { code: 1 },
            _ => Job::Sleep { ms: 10_000 },
        })
        .collect();
    let t = Instant::now();
    let out = p.run_all(&jobs, limit);
    assert_eq!(out.len(), 20);
    for (i, o) in out.iter().enumerate() {
        let want = match i % 5 {
            0..=2 => "pong",
            3 => "crashed",
            _ => "timeout",
        };
        assert_eq!(kind(o), want, "job {i}: {o:?}");
    }
    assert_eq!(p.stats().restarts, 8, "4 crashes + 4 timeouts");
    // 4 timeouts of 0.8 s spread over 3 workers: well under running them in sequence.
    assert!(
        t.elapsed() < Duration::from_secs(10),
        "took {:?}",
        t.elapsed()
    );
}

/// A worker whose stderr is flooded (like a kernel printf storm) keeps answering; the
/// pool drains stderr and keeps only a bounded tail.
#[test]
fn protocol_survives_a_stderr_flood() {
    let bin = common::cudaperf_bin();
    let script = "(yes 'printf flood printf flood printf flood' | head -c 30000000 >&2 &) ; exec \"$0\" worker";
    let p = Pool::new(vec![spec("sh", &["-c", script, bin.to_str().unwrap()])]);
    for _ in 0..20 {
        assert_eq!(
            p.run(&Job::Sleep { ms: 20 }, LONG),
            JobOutcome::Done(JobResult::Pong)
        );
    }
    match p.run(&Job::Exit { code: 2 }, LONG) {
        JobOutcome::Crashed { stderr_tail, .. } => assert!(
            stderr_tail.len() <= 4096,
            "tail of {} bytes",
            stderr_tail.len()
        ),
        other => panic!("expected Crashed, got {other:?}"),
    }
}

/// Concurrent `run` calls from many threads share the slots without losing jobs.
#[test]
fn concurrent_runs_share_the_pool() {
    let p = pool(2);
    let results: Vec<JobOutcome> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..8)
            .map(|_| s.spawn(|| p.run(&Job::Sleep { ms: 30 }, LONG)))
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert!(
        results
            .iter()
            .all(|o| *o == JobOutcome::Done(JobResult::Pong)),
        "{results:?}"
    );
}

/// The worker loop answers bad request lines with an error instead of dying, and skips
/// blank lines.
#[test]
fn serve_answers_bad_requests() {
    let input = b"{\"id\":5,\"job\":{\"type\":\"ping\"}}\n\nnot json\n{\"id\":6,\"job\":{\"type\":\"fly\"}}\n{\"id\":7,\"job\":{\"type\":\"sleep\",\"ms\":1}}\n";
    let mut out = Vec::new();
    serve(&input[..], &mut out).unwrap();
    let responses: Vec<Response> = String::from_utf8(out)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(responses.len(), 4);
    assert_eq!(
        (responses[0].id, &responses[0].result),
        (5, &JobResult::Pong)
    );
    assert!(
        matches!(&responses[1].result, JobResult::Error { message } if message.contains("bad request"))
    );
    assert!(matches!(&responses[2].result, JobResult::Error { .. }));
    assert_eq!(
        (responses[3].id, &responses[3].result),
        (7, &JobResult::Pong)
    );
}

/// An explicit worker path wins over the environment and the search.
#[test]
fn find_worker_prefers_explicit_path() {
    let (p, args) = find_worker(Some(std::path::Path::new("/opt/w"))).unwrap();
    assert_eq!(p, PathBuf::from("/opt/w"));
    assert_eq!(args, ["worker"]);
    // Without one, something is found in a cargo build (env var or the built binary).
    assert!(find_worker(None).is_some());
}
