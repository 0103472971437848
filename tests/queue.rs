//! `cudaperf serve --queue` + `cudaperf node` over a real `redis-server` (started here on a
//! free loopback port): a node killed in the middle of a job, Redis restarted mid-run.
//! Every job must be answered exactly once, none lost. Nodes run the CPU stages (no GPU).
#![cfg(feature = "serve")]

mod serve_util;

use std::time::{Duration, Instant};

use serde_json::json;
use serve_util::*;

fn nvrtc() -> bool {
    let ok = cudaperf::compile::nvrtc::load().is_ok();
    if !ok {
        eprintln!("SKIPPED: NVRTC not found");
    }
    ok
}

/// Sends `jobs` requests of `per_job` fresh completions at once; returns the threads.
fn send_jobs(
    url: &str,
    tag: &str,
    jobs: usize,
    per_job: usize,
) -> Vec<std::thread::JoinHandle<Answer>> {
    (0..jobs)
        .map(|j| {
            let score = format!("{url}/v1/score");
            let tag = format!("{tag}-{j}-{:?}", Instant::now());
            std::thread::spawn(move || {
                let a = agent(Duration::from_secs(240));
                let completions: Vec<String> = (0..per_job)
                    .map(|k| fresh_vector_add(&format!("{tag}-{k}")))
                    .collect();
                post_json(
                    &a,
                    &score,
                    &json!({"task": "vector_add", "completions": completions,
                            "reward": "dhrcl", "step": 0, "deadline_ms": 200000}),
                )
            })
        })
        .collect()
}

fn check_all_scored(answers: &[Answer], per_job: usize) {
    for a in answers {
        assert_eq!(a.status, 200, "{}", a.body);
        let v = a.json();
        let results = v["results"].as_array().unwrap();
        assert_eq!(results.len(), per_job);
        for (i, r) in results.iter().enumerate() {
            assert_eq!(r["index"], i);
            assert_eq!(r["verdict"], "compiled", "{r}");
            assert_eq!(r["value"], 1.0, "{r}");
        }
    }
}

/// The job id a node log line names (`... job <id> started ...`).
fn job_id(line: &str) -> String {
    let words: Vec<&str> = line.split_whitespace().collect();
    let i = words.iter().position(|w| *w == "job").expect("a job line");
    words[i + 1].to_string()
}

/// Two nodes; one is killed (SIGKILL) while it scores a job. The other takes the job over
/// after the visibility timeout; every job is answered once, none lost or duplicated.
#[test]
fn a_killed_node_s_job_is_reclaimed_and_answered_once() {
    if !nvrtc() {
        return;
    }
    let redis = Redis::start(None);
    let q = redis.url();
    let (_serve, url) = start_serve(&["--queue", &q]);
    let mut a = start_node(&q, "alpha", &["--visibility-timeout", "2"]);
    let b = start_node(&q, "beta", &["--visibility-timeout", "2"]);
    let (jobs, per_job) = (6, 3);
    let threads = send_jobs(&url, "kill", jobs, per_job);
    let started = a
        .wait_for_line(Duration::from_secs(120), |l| l.contains("started"))
        .unwrap_or_else(|| panic!("alpha never started a job:\n{}", a.output()));
    a.signal(libc::SIGKILL);
    let _ = a.wait_exit(Duration::from_secs(10));
    let killed_job = job_id(&started);
    let answers: Vec<Answer> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    check_all_scored(&answers, per_job);
    // Alpha never finished the job; beta took it over.
    assert!(
        !a.output().contains(&format!("job {killed_job} done")),
        "alpha finished the job before it was killed:\n{}",
        a.output()
    );
    let reclaimed = b.wait_for_line(Duration::from_secs(5), |l| {
        l.contains(&format!("job {killed_job} started")) && l.contains("reclaimed")
    });
    assert!(
        reclaimed.is_some(),
        "beta did not reclaim {killed_job}:\n{}",
        b.output()
    );
    // Exactly once: one stored result and one announcement per job, nothing pending.
    let mut c = redis.conn();
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("cudaperf:result:*")
        .query(&mut c)
        .unwrap();
    assert_eq!(keys.len(), jobs, "{keys:?}");
    let announced: usize = redis::cmd("XLEN")
        .arg("cudaperf:results")
        .query(&mut c)
        .unwrap();
    assert_eq!(announced, jobs);
    let left: usize = redis::cmd("XLEN")
        .arg("cudaperf:jobs")
        .query(&mut c)
        .unwrap();
    assert_eq!(left, 0, "jobs left on the stream");
    let pending: redis::streams::StreamPendingReply = redis::cmd("XPENDING")
        .arg("cudaperf:jobs")
        .arg("nodes")
        .query(&mut c)
        .unwrap();
    assert_eq!(pending.count(), 0);
    eprintln!("--- alpha\n{}\n--- beta\n{}", a.output(), b.output());
    // The server answered each completion once.
    let m = get(&agent(Duration::from_secs(10)), &format!("{url}/metrics")).body;
    assert_eq!(
        metric_sum(&m, "cudaperf_completions_total"),
        (jobs * per_job) as f64,
        "{m}"
    );
}

/// Redis killed while a job is in flight: serve reports unavailable (healthz 503, score
/// 503 with Retry-After), then recovers when Redis is back, and the job in flight is still
/// answered once.
#[test]
fn redis_restart_is_reported_and_recovered() {
    if !nvrtc() {
        return;
    }
    let redis = Redis::start(None);
    let port = redis.port;
    let q = redis.url();
    let (serve, url) = start_serve(&["--queue", &q]);
    let node = start_node(&q, "gamma", &["--visibility-timeout", "2"]);
    let a = agent(Duration::from_secs(30));
    // Healthy first.
    assert_eq!(get(&a, &format!("{url}/healthz")).status, 200);
    check_all_scored(
        &send_jobs(&url, "before", 1, 2)
            .into_iter()
            .map(|t| t.join().unwrap())
            .collect::<Vec<_>>(),
        2,
    );
    // A job in flight when Redis dies.
    let inflight = send_jobs(&url, "inflight", 1, 4);
    node.wait_for_line(Duration::from_secs(60), |l| {
        l.contains("started (4 completions")
    })
    .unwrap_or_else(|| panic!("the node never started the job:\n{}", node.output()));
    redis.kill();
    let end = Instant::now() + Duration::from_secs(15);
    let down = loop {
        let h = get(&a, &format!("{url}/healthz"));
        if h.status == 503 {
            break h;
        }
        assert!(Instant::now() < end, "healthz never reported the outage");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(down.json()["status"], "unavailable");
    assert!(down.json()["reason"]
        .as_str()
        .unwrap()
        .starts_with("queue:"));
    let r = post_json(
        &a,
        &format!("{url}/v1/score"),
        &json!({"task": "vector_add", "completions": ["x"]}),
    );
    assert_eq!(r.status, 503, "{}", r.body);
    assert!(r.retry_after.is_some());
    assert!(r.json()["error"]
        .as_str()
        .unwrap()
        .contains("queue is unavailable"));
    // Back on the same port (empty: no persistence).
    std::thread::sleep(Duration::from_millis(500));
    let redis2 = Redis::start(Some(port));
    let end = Instant::now() + Duration::from_secs(20);
    while get(&a, &format!("{url}/healthz")).status != 200 {
        assert!(Instant::now() < end, "serve never recovered");
        std::thread::sleep(Duration::from_millis(100));
    }
    // The job in flight is answered, once.
    let answers: Vec<Answer> = inflight.into_iter().map(|t| t.join().unwrap()).collect();
    check_all_scored(&answers, 4);
    // New work flows again.
    check_all_scored(
        &send_jobs(&url, "after", 2, 2)
            .into_iter()
            .map(|t| t.join().unwrap())
            .collect::<Vec<_>>(),
        2,
    );
    eprintln!(
        "--- serve\n{}\n--- gamma\n{}",
        serve.output(),
        node.output()
    );
    let m = get(&a, &format!("{url}/metrics")).body;
    assert_eq!(
        metric_sum(&m, "cudaperf_completions_total"),
        (2 + 4 + 4) as f64,
        "{m}"
    );
    drop(redis2);
}

/// Regression (issue 20): a node started without `--tasks` took every job that named a
/// task by id and answered it `unavailable`. It now refuses to start (unless
/// `--inline-only`), and says why.
#[test]
fn a_node_without_tasks_refuses_to_start() {
    let redis = Redis::start(None);
    let mut cmd = std::process::Command::new(cudaperf_bin());
    cmd.current_dir(manifest_dir())
        .env("CUDAPERF_WORKER", cudaperf_bin())
        .args([
            "node",
            "--queue",
            &redis.url(),
            "--no-gpu",
            "--name",
            "bare",
        ]);
    let mut node = Proc::spawn("node bare", cmd);
    let status = node
        .wait_exit(Duration::from_secs(30))
        .expect("a node without --tasks kept running");
    assert!(!status.success());
    let said = node.wait_for_line(Duration::from_secs(5), |l| l.contains("--tasks"));
    assert!(
        said.is_some_and(|l| l.contains("--inline-only")),
        "{}",
        node.output()
    );
    // Nothing was consumed: the consumer group has no consumer named after it.
    let mut c = redis.conn();
    let groups: redis::RedisResult<redis::streams::StreamInfoGroupsReply> = redis::cmd("XINFO")
        .arg("GROUPS")
        .arg("cudaperf:jobs")
        .query(&mut c);
    assert!(groups.is_err() || groups.unwrap().groups.iter().all(|g| g.consumers == 0));
    // With --inline-only it starts.
    let _inline = start_node_inline(&redis.url());
}

fn start_node_inline(queue: &str) -> Proc {
    let mut cmd = std::process::Command::new(cudaperf_bin());
    cmd.current_dir(manifest_dir())
        .env("CUDAPERF_WORKER", cudaperf_bin())
        .args([
            "node",
            "--queue",
            queue,
            "--no-gpu",
            "--inline-only",
            "--name",
            "inline",
        ]);
    let p = Proc::spawn("node inline", cmd);
    let line = p.first_stdout_line(Duration::from_secs(60));
    assert!(line.contains("consuming"), "{line}");
    p
}

/// Regression (issue 20): in queue mode SIGTERM waited for requests in flight up to their
/// deadline (10 min by default) when no node answered; it now ends within
/// `--shutdown-grace`.
#[test]
fn queue_mode_shutdown_is_bounded() {
    let redis = Redis::start(None);
    let (mut serve, url) = start_serve(&["--queue", &redis.url(), "--shutdown-grace", "1"]);
    // No node: the job waits on the stream.
    let score = format!("{url}/v1/score");
    let inflight = std::thread::spawn(move || {
        agent(Duration::from_secs(120))
            .post(&score)
            .header("content-type", "application/json")
            .send(
                json!({"task": "vector_add", "completions": ["x"]})
                    .to_string()
                    .as_bytes(),
            )
            .map(|r| r.status().as_u16())
    });
    let a = agent(Duration::from_secs(10));
    let end = Instant::now() + Duration::from_secs(30);
    while metric_sum(
        &get(&a, &format!("{url}/metrics")).body,
        "cudaperf_queue_depth",
    ) < 1.0
    {
        assert!(Instant::now() < end, "the job was never queued");
        std::thread::sleep(Duration::from_millis(10));
    }
    let t = Instant::now();
    serve.signal(libc::SIGTERM);
    let status = serve
        .wait_exit(Duration::from_secs(20))
        .unwrap_or_else(|| panic!("serve --queue did not exit:\n{}", serve.output()));
    assert!(status.success(), "{status:?}");
    assert!(
        t.elapsed() < Duration::from_secs(6),
        "took {:?}",
        t.elapsed()
    );
    // The client was cut off, not answered with a made-up result.
    assert!(inflight.join().unwrap().is_err());
}
