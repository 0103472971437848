//! The worker pool without a GPU: greetings, round trips, timeouts, crashes, impostors,
//! spawn failures, many jobs, and noisy workers. Every job must get an outcome, and the
//! outcome must say whose failure it was (`Unavailable` for ours).

mod common;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use cudaperf::sandbox::protocol::{Response, PROTOCOL_VERSION};
use cudaperf::sandbox::{find_worker, Role, WORKER_ARG};
use cudaperf::sandbox::{serve, Handled, Handler, JobOutcome, Pool, WorkerSpec};
use cudaperf::worker::{DiagJob, DiagReply};

type DiagPool = Pool<DiagJob, DiagReply>;
const PONG: JobOutcome<DiagReply> = JobOutcome::Done(DiagReply::Pong);

fn spec(program: impl Into<PathBuf>, args: &[&str]) -> WorkerSpec {
    WorkerSpec {
        program: program.into(),
        args: args.iter().map(|s| s.to_string()).collect(),
        env: Vec::new(),
        memory_limit_bytes: None,
        role: "diag".into(),
    }
}

fn worker_spec() -> WorkerSpec {
    spec(common::cudaperf_bin(), &[WORKER_ARG, "diag"])
}

fn pool(n: usize) -> DiagPool {
    Pool::new(vec![worker_spec(); n])
}

fn sh(script: &str) -> WorkerSpec {
    spec("sh", &["-c", script])
}

const LONG: Duration = Duration::from_secs(30);

/// A ping comes back as a pong, and the worker is kept for the next job.
#[test]
fn ping_round_trip() {
    let p = pool(1);
    assert_eq!(p.len(), 1);
    for _ in 0..3 {
        assert_eq!(p.run(&DiagJob::Ping, LONG), PONG);
    }
    assert_eq!(p.stats().restarts, 0);
}

/// A job past its limit is a Timeout (promptly), the worker is replaced, and the next job
/// succeeds.
#[test]
fn sleep_past_limit_times_out_and_worker_is_replaced() {
    let p = pool(1);
    assert_eq!(p.run(&DiagJob::Ping, LONG), PONG);
    let limit = Duration::from_millis(300);
    let t = Instant::now();
    let out = p.run(&DiagJob::Sleep { ms: 20_000 }, limit);
    assert_eq!(out, JobOutcome::Timeout { limit });
    assert!(
        t.elapsed() < Duration::from_secs(3),
        "timeout took {:?}",
        t.elapsed()
    );
    assert_eq!(p.stats().restarts, 1);
    assert_eq!(p.run(&DiagJob::Ping, LONG), PONG);
    assert_eq!(p.stats().restarts, 1);
}

/// A sleep within its limit is answered.
#[test]
fn sleep_within_limit_is_answered() {
    assert_eq!(pool(1).run(&DiagJob::Sleep { ms: 50 }, LONG), PONG);
}

/// A worker that exits mid-job (after greeting) is Crashed with its exit status, and is
/// respawned.
#[test]
fn exit_is_crashed_and_respawned() {
    let p = pool(1);
    match p.run(&DiagJob::Exit { code: 7 }, LONG) {
        JobOutcome::Crashed { reason, .. } => {
            assert!(
                reason.contains("exit") || reason.contains("closed"),
                "{reason}"
            )
        }
        other => panic!("expected Crashed, got {other:?}"),
    }
    assert_eq!(p.stats().restarts, 1);
    assert_eq!(p.run(&DiagJob::Ping, LONG), PONG);
}

/// A worker that asks to be restarted answers, then is replaced before the next job.
#[test]
fn restart_request_replaces_the_worker() {
    let p = pool(1);
    assert_eq!(p.run(&DiagJob::Restart, LONG), PONG);
    assert_eq!(p.stats().restarts, 1);
    assert_eq!(p.run(&DiagJob::Ping, LONG), PONG);
}

fn unavailable(o: JobOutcome<DiagReply>) -> String {
    match o {
        JobOutcome::Unavailable { reason } => reason,
        other => panic!("expected Unavailable, got {other:?}"),
    }
}

/// `/bin/cat` never greets: Unavailable once the greeting wait (bounded by the job's limit)
/// is over — not a hang, and not the job's fault.
#[test]
fn cat_is_not_a_worker() {
    let p: DiagPool = Pool::new(vec![spec("/bin/cat", &[])]);
    let t = Instant::now();
    let reason = unavailable(p.run(&DiagJob::Ping, Duration::from_millis(1500)));
    assert!(reason.contains("did not greet"), "{reason}");
    assert!(t.elapsed() < Duration::from_secs(5));
}

/// A program that prints garbage and then lingers is refused at once, naming what it said.
#[test]
fn garbage_printer_is_not_a_worker() {
    let p: DiagPool = Pool::new(vec![sh("echo garbage; sleep 5")]);
    let t = Instant::now();
    let reason = unavailable(p.run(&DiagJob::Ping, Duration::from_secs(20)));
    assert!(
        reason.contains("not a cudaperf worker") && reason.contains("garbage"),
        "{reason}"
    );
    assert!(
        t.elapsed() < Duration::from_secs(4),
        "took {:?}",
        t.elapsed()
    );
}

/// `/bin/false` (the failure a trainer saw with `CUDAPERF_WORKER=/bin/false`) is
/// Unavailable, never a crash charged to the job.
#[test]
fn false_is_unavailable() {
    let p: DiagPool = Pool::new(vec![spec("/bin/false", &[])]);
    let reason = unavailable(p.run(&DiagJob::Ping, LONG));
    assert!(
        reason.contains("/bin/false") && reason.contains("before greeting"),
        "{reason}"
    );
}

/// A program that exits at once is Unavailable, with its last words.
#[test]
fn silent_exit_is_unavailable_with_stderr() {
    let p: DiagPool = Pool::new(vec![sh("echo last words >&2; exit 3")]);
    let reason = unavailable(p.run(&DiagJob::Ping, Duration::from_secs(10)));
    assert!(reason.contains("last words"), "{reason}");
}

/// A worker of another protocol version is refused, naming both versions.
#[test]
fn wrong_protocol_version_is_unavailable() {
    let hello = format!(
        r#"echo '{{"hello":{{"protocol":{},"role":"diag","version":"0.0.1","pid":1}}}}'; cat"#,
        PROTOCOL_VERSION + 7
    );
    let p: DiagPool = Pool::new(vec![sh(&hello)]);
    let reason = unavailable(p.run(&DiagJob::Ping, LONG));
    assert!(
        reason.contains(&format!("protocol {}", PROTOCOL_VERSION + 7))
            && reason.contains(&format!("speaks {PROTOCOL_VERSION}")),
        "{reason}"
    );
}

/// A worker of another role (a compile worker where a diag one is wanted) is refused.
#[test]
fn wrong_role_is_unavailable() {
    let mut s = spec(common::cudaperf_bin(), &[WORKER_ARG, "compile"]);
    s.role = "diag".into();
    let p: DiagPool = Pool::new(vec![s]);
    let reason = unavailable(p.run(&DiagJob::Ping, LONG));
    assert!(
        reason.contains("role `compile`") && reason.contains("`diag`"),
        "{reason}"
    );
}

/// A program that does not exist is Unavailable, naming it.
#[test]
fn nonexistent_program_is_unavailable() {
    let p: DiagPool = Pool::new(vec![spec("/nonexistent/cudaperf-worker", &[])]);
    let reason = unavailable(p.run(&DiagJob::Ping, LONG));
    assert!(reason.contains("/nonexistent/cudaperf-worker"), "{reason}");
}

/// An unknown role makes the worker exit with a message: the pool says so.
#[test]
fn unknown_role_is_unavailable() {
    let p: DiagPool = Pool::new(vec![spec(common::cudaperf_bin(), &[WORKER_ARG, "juggler"])]);
    let reason = unavailable(p.run(&DiagJob::Ping, LONG));
    assert!(reason.contains("unknown role `juggler`"), "{reason}");
}

fn kind(o: &JobOutcome<DiagReply>) -> &'static str {
    match o {
        JobOutcome::Done(_) => "pong",
        JobOutcome::Refused { .. } => "refused",
        JobOutcome::Timeout { .. } => "timeout",
        JobOutcome::Crashed { .. } => "crashed",
        JobOutcome::Unavailable { .. } => "unavailable",
    }
}

/// 20 mixed jobs (answers, timeouts, crashes) on 3 workers: 20 outcomes, in input order.
#[test]
fn run_all_loses_no_job_and_keeps_order() {
    let p = pool(3);
    let limit = Duration::from_millis(800);
    let jobs: Vec<DiagJob> = (0..20)
        .map(|i| match i % 5 {
            0 | 1 => DiagJob::Ping,
            2 => DiagJob::Sleep { ms: 20 },
            3 => DiagJob::Exit { code: 1 },
            _ => DiagJob::Sleep { ms: 10_000 },
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
    let script = format!(
        "(yes 'printf flood printf flood printf flood' | head -c 30000000 >&2 &) ; exec \"$0\" {WORKER_ARG} diag"
    );
    let p: DiagPool = Pool::new(vec![spec("sh", &["-c", &script, bin.to_str().unwrap()])]);
    for _ in 0..20 {
        assert_eq!(p.run(&DiagJob::Sleep { ms: 20 }, LONG), PONG);
    }
    match p.run(&DiagJob::Exit { code: 2 }, LONG) {
        JobOutcome::Crashed { stderr_tail, .. } => {
            assert!(
                stderr_tail.len() <= 4096,
                "tail of {} bytes",
                stderr_tail.len()
            )
        }
        other => panic!("expected Crashed, got {other:?}"),
    }
}

/// Concurrent `run` calls from many threads share the slots without losing jobs.
#[test]
fn concurrent_runs_share_the_pool() {
    let p = pool(2);
    let results: Vec<JobOutcome<DiagReply>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..8)
            .map(|_| s.spawn(|| p.run(&DiagJob::Sleep { ms: 30 }, LONG)))
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert!(results.iter().all(|o| *o == PONG), "{results:?}");
}

struct Echo;
impl Handler for Echo {
    type Job = DiagJob;
    type Reply = DiagReply;
    fn handle(&mut self, job: DiagJob) -> Handled<DiagReply> {
        match job {
            DiagJob::Sleep { ms } if ms > 1000 => Handled::refused("too sleepy"),
            _ => Handled::ok(DiagReply::Pong),
        }
    }
}

/// The worker loop greets first, answers bad request lines with an error (keeping the id
/// when the envelope is readable) instead of dying, and skips blank lines.
#[test]
fn serve_greets_and_answers_bad_requests() {
    let input = b"{\"id\":5,\"job\":{\"type\":\"ping\"}}\n\nnot json\n{\"id\":6,\"job\":{\"type\":\"fly\"}}\n{\"id\":7,\"job\":{\"type\":\"sleep\",\"ms\":1}}\n{\"id\":8,\"job\":{\"type\":\"sleep\",\"ms\":5000}}\n";
    let mut out = Vec::new();
    serve("diag", &input[..], &mut out, &mut Echo).unwrap();
    let text = String::from_utf8(out).unwrap();
    let mut lines = text.lines();
    let hello: serde_json::Value = serde_json::from_str(lines.next().unwrap()).unwrap();
    assert_eq!(hello["hello"]["protocol"], PROTOCOL_VERSION);
    assert_eq!(hello["hello"]["role"], "diag");
    let responses: Vec<Response<DiagReply>> =
        lines.map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(responses.len(), 5);
    assert_eq!(
        (responses[0].id, &responses[0].result),
        (5, &Some(DiagReply::Pong))
    );
    assert!(responses[1]
        .error
        .as_deref()
        .unwrap()
        .contains("bad request"));
    assert_eq!(responses[2].id, 6);
    assert!(responses[2].error.as_deref().unwrap().contains("fly"));
    assert_eq!(
        (responses[3].id, &responses[3].result),
        (7, &Some(DiagReply::Pong))
    );
    assert_eq!(responses[4].error.as_deref(), Some("too sleepy"));
}

/// An explicit worker path wins over the environment and the search, and every role is
/// started with the same spelling.
#[test]
fn find_worker_prefers_explicit_path() {
    let w = find_worker(Some(std::path::Path::new("/opt/w")), Role::Gpu).unwrap();
    assert_eq!(w.program, PathBuf::from("/opt/w"));
    assert_eq!(w.args, [WORKER_ARG, "gpu"]);
    // Without one, something is found in a cargo build (env var or the built binary).
    assert!(find_worker(None, Role::Compile).is_some());
    for r in Role::ALL {
        assert_eq!(Role::from_name(r.as_str()), Some(r));
    }
}
