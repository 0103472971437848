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
