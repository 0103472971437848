//! `cudaperf serve` on loopback, as trainers see it: limits, bad input, deadlines,
//! concurrent clients, graceful shutdown. Real processes, real NVRTC compiles (where
//! NVRTC is installed), no GPU (the GPU stages answer `unavailable`).
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

/// Bad input gets a 4xx with a one-line reason and never reaches the evaluator.
#[test]
fn bad_requests_are_refused_before_scoring() {
    let (_serve, url) = start_serve(&["--max-body-bytes", "4096", "--max-completions", "3"]);
    let a = agent(Duration::from_secs(30));
    let score = format!("{url}/v1/score");
    let big = json!({"task": "vector_add", "completions": ["x".repeat(5000)]});
    let cases: Vec<(Vec<u8>, u16, &str)> = vec![
        (b"{not json".to_vec(), 400, "malformed JSON"),
        (
            b"{\"task\": \"vector_add\", \"completions\": \"x\"}".to_vec(),
            400,
            "field `completions`",
        ),
        (
            b"{\"task\": \"vector_add\", \"completions\": [\"a\",\"b\",\"c\",\"d\"]}".to_vec(),
            400,
            "limit of 3",
        ),
        (
            b"{\"task\": \"nope\", \"completions\": [\"a\"]}".to_vec(),
            404,
            "unknown task `nope`",
        ),
        (
            b"{\"task\": \"vector_add\", \"completions\": [\"a\"], \"reward\": 5}".to_vec(),
            400,
            "field `reward`",
        ),
        (big.to_string().into_bytes(), 413, "limit of 4096 bytes"),
    ];
    for (body, status, says) in &cases {
        let r = post(&a, &score, body);
        assert_eq!(
            r.status,
            *status,
            "{}: {}",
            String::from_utf8_lossy(body),
            r.body
        );
        let msg = r.json()["error"].as_str().unwrap_or_default().to_string();
        assert!(msg.contains(says), "`{msg}` lacks `{says}`");
        assert!(!msg.contains('\n'));
    }
    let r = get(&a, &format!("{url}/v1/nothing"));
    assert_eq!(r.status, 404);
    assert!(r.json()["error"].as_str().unwrap().contains("/v1/score"));
    let r = get(&a, &score);
    assert_eq!(r.status, 405, "{}", r.body);
    let r = get(&a, &format!("{url}/v1/tasks/nope"));
    assert_eq!(r.status, 404);
    // None of it reached the pipeline.
    let m = get(&a, &format!("{url}/metrics")).body;
    assert_eq!(
        metric_sum(&m, "cudaperf_stage_duration_seconds_count"),
        0.0,
        "{m}"
    );
    assert_eq!(
        metric_sum(&m, "cudaperf_rejected_total"),
        cases.len() as f64
    );
}

#[test]
fn tasks_and_health() {
    let (_serve, url) = start_serve(&[]);
    let a = agent(Duration::from_secs(30));
    let h = get(&a, &format!("{url}/healthz"));
    assert_eq!(h.status, 200);
    assert_eq!(h.json()["status"], "ok");
    let tasks = get(&a, &format!("{url}/v1/tasks")).json();
    let n = tasks["tasks"].as_array().unwrap().len();
    assert_eq!(
        n,
        cudaperf::dataset::Dataset::load(manifest_dir().join("fixtures/tasks"))
            .unwrap()
            .tasks
            .len()
    );
    let t = get(&a, &format!("{url}/v1/tasks/vector_add")).json();
    assert!(t["prompt"].as_str().unwrap().contains("@launch"));
    assert_eq!(
        t["signature"],
        "(const float* a, const float* b, float* c, int n)"
    );
}

/// Many clients at once share one evaluator; each gets its own results, in order.
#[test]
fn concurrent_clients_get_their_own_results_in_order() {
    if !nvrtc() {
        return;
    }
    let (_serve, url) = start_serve(&["--workers", "2"]);
    let score = format!("{url}/v1/score");
    let reference =
        std::fs::read_to_string(manifest_dir().join("fixtures/tasks/vector_add/reference.cu"))
            .unwrap();
    let threads: Vec<_> = (0..6)
        .map(|c| {
            let score = score.clone();
            let good = fenced(&reference);
            std::thread::spawn(move || {
                let a = agent(Duration::from_secs(120));
                // Client c puts its good completion at position c % 3.
                let mut completions = vec!["no code".to_string(); 3];
                completions[c % 3] = good;
                let r = post_json(
                    &a,
                    &score,
                    &json!({"task": "vector_add", "completions": completions, "reward": "dhrcl", "step": 0}),
                );
                assert_eq!(r.status, 200, "{}", r.body);
                let v = r.json();
                let results = v["results"].as_array().unwrap().clone();
                (c, results)
            })
        })
        .collect();
    for t in threads {
        let (c, results) = t.join().unwrap();
        assert_eq!(results.len(), 3);
        for (i, r) in results.iter().enumerate() {
            assert_eq!(r["index"], i);
            if i == c % 3 {
                assert_eq!(r["verdict"], "compiled", "{r}");
                assert_eq!(r["value"], 1.0);
                // Next-turn feedback from `rl::feedback` on the report.
                let fb = r["feedback"].as_str().expect("feedback text");
                assert!(fb.starts_with("Compiles;"), "{fb}");
            } else {
                assert_eq!(r["verdict"], "extract_error", "{r}");
                let fb = r["feedback"].as_str().expect("feedback text");
                assert!(fb.starts_with("No candidate could be read"), "{fb}");
            }
        }
    }
}

/// A full queue answers 429 with Retry-After; an expired deadline answers `timeout`.
#[test]
fn queue_full_and_deadline() {
    if !nvrtc() {
        return;
    }
    let (_serve, url) = start_serve(&["--workers", "1", "--queue-len", "1"]);
    let score = format!("{url}/v1/score");
    // Every request has fresh completions (real compiles, well over the few milliseconds
    // it takes to send them all), sent together: one runs, one waits, the rest are refused.
    let barrier = std::sync::Arc::new(std::sync::Barrier::new(6));
    let threads: Vec<_> = (0..6)
        .map(|c| {
            let (score, barrier) = (score.clone(), barrier.clone());
            std::thread::spawn(move || {
                let a = agent(Duration::from_secs(300));
                let completions: Vec<String> = (0..3)
                    .map(|k| fresh_vector_add(&format!("full-{c}-{k}-{:?}", Instant::now())))
                    .collect();
                barrier.wait();
                post_json(
                    &a,
                    &score,
                    &json!({"task": "vector_add", "completions": completions, "reward": "dhrcl"}),
                )
            })
        })
        .collect();
    let answers: Vec<Answer> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    let refused: Vec<&Answer> = answers.iter().filter(|a| a.status == 429).collect();
    let served: Vec<&Answer> = answers.iter().filter(|a| a.status == 200).collect();
    assert_eq!(refused.len() + served.len(), 6, "{answers:?}");
    assert!(!refused.is_empty() && !served.is_empty(), "{answers:?}");
    for r in &refused {
        let secs: u64 = r.retry_after.as_deref().unwrap().parse().unwrap();
        assert!((1..=60).contains(&secs));
        assert!(r.json()["error"].as_str().unwrap().contains("queue full"));
    }
    for s in &served {
        for r in s.json()["results"].as_array().unwrap() {
            assert_eq!(r["verdict"], "compiled", "{r}");
        }
    }
    // A 1 ms deadline passes before fresh compiles finish: every completion is `timeout`,
    // with no value.
    let a = agent(Duration::from_secs(60));
    let r = post_json(
        &a,
        &score,
        &json!({"task": "vector_add", "deadline_ms": 1,
                "completions": [fresh_vector_add("deadline-a"), fresh_vector_add("deadline-b")]}),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    for (i, item) in r.json()["results"].as_array().unwrap().iter().enumerate() {
        assert_eq!(item["index"], i);
        assert_eq!(item["verdict"], "timeout", "{item}");
        assert!(item["value"].is_null());
        assert!(item["reason"].as_str().unwrap().contains("deadline"));
    }
}

/// A deadline that passes while one completion still compiles answers the others with their
/// own verdicts: a completion without code and one that only needed compiling (`dhrcl` at
/// step 0) are final long before a template bomb finishes; only the bomb is `timeout`.
#[test]
fn deadline_answers_what_is_done() {
    if !nvrtc() {
        return;
    }
    let (_serve, url) = start_serve(&["--workers", "1", "--compile-timeout", "8"]);
    let bomb =
        std::fs::read_to_string(manifest_dir().join("fixtures/bad/slow_compile.cu")).unwrap();
    let a = agent(Duration::from_secs(60));
    let t = Instant::now();
    let r = post_json(
        &a,
        &format!("{url}/v1/score"),
        &json!({"task": "vector_add", "deadline_ms": 3000, "reward": "dhrcl",
                "completions": ["no code here, sorry", fenced(&bomb),
                                fresh_vector_add(&format!("partial {:?}", Instant::now()))]}),
    );
    let waited = t.elapsed();
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(
        waited < Duration::from_secs(7),
        "answered after {waited:?}, not at the deadline"
    );
    let results = r.json()["results"].as_array().unwrap().clone();
    let verdicts: Vec<&str> = results
        .iter()
        .map(|x| x["verdict"].as_str().unwrap())
        .collect();
    assert_eq!(
        verdicts,
        ["extract_error", "timeout", "compiled"],
        "{results:?}"
    );
    assert!(results[0]["value"].is_number(), "{results:?}");
    assert_eq!(results[2]["value"], 1.0);
    assert!(results[1]["value"].is_null());
    for i in [0, 2] {
        assert!(results[i]["feedback"]
            .as_str()
            .is_some_and(|f| !f.is_empty()));
    }
}

/// SIGTERM: the server stops accepting, answers what it accepted, and exits 0.
#[test]
fn sigterm_finishes_accepted_requests() {
    if !nvrtc() {
        return;
    }
    let (mut serve, url) = start_serve(&[]);
    let score = format!("{url}/v1/score");
    let inflight = {
        let score = score.clone();
        std::thread::spawn(move || {
            let a = agent(Duration::from_secs(300));
            let completions: Vec<String> = (0..4)
                .map(|k| fresh_vector_add(&format!("term-{k}-{:?}", Instant::now())))
                .collect();
            post_json(
                &a,
                &score,
                &json!({"task": "vector_add", "completions": completions, "reward": "dhrcl"}),
            )
        })
    };
    // Wait until the job is accepted (queue depth 1), then signal.
    let a = agent(Duration::from_secs(10));
    let end = Instant::now() + Duration::from_secs(30);
    loop {
        let m = get(&a, &format!("{url}/metrics")).body;
        if metric_sum(&m, "cudaperf_queue_depth") >= 1.0 {
            break;
        }
        assert!(Instant::now() < end, "the request was never accepted");
        std::thread::sleep(Duration::from_millis(5));
    }
    serve.signal(libc::SIGTERM);
    let r = inflight.join().unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    let results = r.json()["results"].as_array().unwrap().clone();
    assert_eq!(results.len(), 4);
    assert!(
        results.iter().all(|r| r["verdict"] == "compiled"),
        "{results:?}"
    );
    let status = serve
        .wait_exit(Duration::from_secs(30))
        .expect("serve did not exit after SIGTERM");
    assert!(status.success(), "{status:?}\n{}", serve.output());
    // Nothing listens any more.
    let addr = url.trim_start_matches("http://");
    assert!(std::net::TcpStream::connect(addr).is_err());
}

/// Reads from `s` until the peer closes it or `limit` passes; returns what came and when
/// the connection ended (None: still open at `limit`).
fn read_until_closed(s: &mut std::net::TcpStream, limit: Duration) -> (String, Option<Duration>) {
    use std::io::Read;
    let t = Instant::now();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while t.elapsed() < limit {
        s.set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        match s.read(&mut buf) {
            Ok(0) => return (String::from_utf8_lossy(&got).into(), Some(t.elapsed())),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(_) => return (String::from_utf8_lossy(&got).into(), Some(t.elapsed())),
        }
    }
    (String::from_utf8_lossy(&got).into(), None)
}

fn connect(url: &str) -> std::net::TcpStream {
    std::net::TcpStream::connect(url.trim_start_matches("http://")).unwrap()
}

/// Regression (issue 20): a client that sends half a request head, half a body, or keeps
/// an idle connection open lost nothing and held its connection for minutes. Each now
/// loses it after `--read-timeout`; a body too slow gets a 408 that says why.
#[test]
fn slow_and_idle_clients_lose_their_connection() {
    use std::io::Write;
    let (_serve, url) = start_serve(&["--read-timeout", "1"]);
    let bound = Duration::from_secs(5);
    // Half a request head.
    let mut s = connect(&url);
    s.write_all(b"POST /v1/score HTTP/1.1\r\nHost: x\r\nContent-Le")
        .unwrap();
    let (_, closed) = read_until_closed(&mut s, bound);
    let closed = closed.expect("half a head kept its connection");
    assert!(closed >= Duration::from_millis(900), "{closed:?}");
    // Headers, then a body that never comes: 408 with the reason, then closed.
    let mut s = connect(&url);
    s.write_all(b"POST /v1/score HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"task\"")
        .unwrap();
    let (got, closed) = read_until_closed(&mut s, bound);
    assert!(closed.is_some(), "half a body kept its connection: {got}");
    assert!(got.starts_with("HTTP/1.1 408"), "{got}");
    assert!(got.contains("read timeout of 1 s"), "{got}");
    // A kept-alive connection: answered, then closed once idle for the timeout.
    let mut s = connect(&url);
    s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let (got, closed) = read_until_closed(&mut s, bound);
    assert!(got.starts_with("HTTP/1.1 200"), "{got}");
    assert!(got.contains("\"max_body_bytes\""), "{got}");
    assert!(closed.is_some(), "an idle connection stayed open");
    // The server still serves.
    let a = agent(Duration::from_secs(10));
    assert_eq!(get(&a, &format!("{url}/healthz")).status, 200);
    let m = get(&a, &format!("{url}/metrics")).body;
    assert_eq!(
        metric_sum(&m, "cudaperf_rejected_total"),
        1.0,
        "one body timeout: {m}"
    );
}

/// Regression (issue 20): SIGTERM with stuck clients (half a head, half a body, a kept-alive
/// idle connection) waited on them; now the server exits within `--shutdown-grace` even
/// with a read timeout far longer than that.
#[test]
fn shutdown_ends_within_the_grace_despite_stuck_clients() {
    use std::io::Write;
    let (mut serve, url) = start_serve(&["--read-timeout", "120", "--shutdown-grace", "1"]);
    let mut stuck = Vec::new();
    for head in [
        &b"POST /v1/score HTTP/1.1\r\nHost: x\r\nContent-Le"[..],
        &b"POST /v1/score HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{"[..],
    ] {
        let mut s = connect(&url);
        s.write_all(head).unwrap();
        stuck.push(s);
    }
    let mut idle = connect(&url);
    idle.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let t = Instant::now();
    serve.signal(libc::SIGTERM);
    let status = serve
        .wait_exit(Duration::from_secs(15))
        .unwrap_or_else(|| panic!("serve did not exit:\n{}", serve.output()));
    let took = t.elapsed();
    assert!(status.success(), "{status:?}\n{}", serve.output());
    assert!(took < Duration::from_secs(5), "exit took {took:?}");
    drop(stuck);
}

/// Regression (issue 20): a second SIGTERM forces the exit while a request is still being
/// scored (a template that takes NVRTC long to compile) and the grace is long.
#[test]
fn a_second_signal_forces_exit() {
    if !nvrtc() {
        return;
    }
    let (mut serve, url) = start_serve(&["--shutdown-grace", "300", "--compile-timeout", "60"]);
    let bomb =
        std::fs::read_to_string(manifest_dir().join("fixtures/bad/slow_compile.cu")).unwrap();
    let score = format!("{url}/v1/score");
    let inflight = std::thread::spawn(move || {
        let a = agent(Duration::from_secs(120));
        agent_post_ignoring_errors(
            &a,
            &score,
            &json!({"task": "vector_add", "completions": [fenced(&bomb)]}),
        )
    });
    let a = agent(Duration::from_secs(10));
    let end = Instant::now() + Duration::from_secs(30);
    while metric_sum(
        &get(&a, &format!("{url}/metrics")).body,
        "cudaperf_queue_depth",
    ) < 1.0
    {
        assert!(Instant::now() < end, "the request was never accepted");
        std::thread::sleep(Duration::from_millis(5));
    }
    serve.signal(libc::SIGTERM);
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        serve.child.try_wait().unwrap().is_none(),
        "exited before the request was done: {}",
        serve.output()
    );
    let t = Instant::now();
    serve.signal(libc::SIGTERM);
    let status = serve.wait_exit(Duration::from_secs(10)).unwrap_or_else(|| {
        panic!(
            "a second signal did not force the exit:\n{}",
            serve.output()
        )
    });
    assert!(t.elapsed() < Duration::from_secs(5));
    assert_eq!(status.code(), Some(130), "{}", serve.output());
    let _ = inflight.join();
}

/// POSTs and returns the status, or 0 when the connection was closed without an answer.
fn agent_post_ignoring_errors(a: &ureq::Agent, url: &str, body: &serde_json::Value) -> u16 {
    a.post(url)
        .header("content-type", "application/json")
        .send(body.to_string().as_bytes())
        .map_or(0, |r| r.status().as_u16())
}

/// Regression (issue 20): results named the combinator behind a preset (`staged` for
/// `dhrcl`), and an unavailable `cudaperf` result named its part `outcome`; logs sent to a
/// pipe carried ANSI colour codes; `cudaperf_queue_up` read 0 in local mode.
#[test]
fn results_name_the_reward_asked_and_logs_are_plain() {
    if !nvrtc() {
        return;
    }
    let (mut serve, url) = start_serve(&[]);
    let a = agent(Duration::from_secs(120));
    let score = format!("{url}/v1/score");
    let good = fresh_vector_add(&format!("names {:?}", Instant::now()));
    let r = post_json(
        &a,
        &score,
        &json!({"task": "vector_add", "completions": [good.clone()], "reward": "dhrcl", "step": 0}),
    )
    .json();
    assert_eq!(r["reward"], "dhrcl", "{r}");
    assert_eq!(r["results"][0]["report"]["reward"], "dhrcl", "{r}");
    let r = post_json(
        &a,
        &score,
        &json!({"task": "vector_add", "completions": [good], "reward": "cudaperf"}),
    )
    .json();
    assert_eq!(r["reward"], "cudaperf");
    let item = &r["results"][0];
    assert_eq!(item["verdict"], "unavailable", "{item}");
    let reason = item["reason"].as_str().unwrap();
    assert!(
        reason.starts_with("cudaperf: stage `Correctness` is unavailable"),
        "{reason}"
    );
    assert_eq!(item["report"]["reward"], "cudaperf", "{item}");
    let m = get(&a, &format!("{url}/metrics")).body;
    assert_eq!(metric_sum(&m, "cudaperf_queue_up"), 1.0, "{m}");
    // The shutdown logs a line at INFO.
    serve.signal(libc::SIGTERM);
    assert!(serve.wait_exit(Duration::from_secs(30)).is_some());
    let logged = serve.wait_for_line(Duration::from_secs(5), |l| l.contains("INFO"));
    let logs = serve.output();
    assert!(logged.is_some(), "no log lines to check:\n{logs}");
    assert!(
        !logs.contains('\u{1b}'),
        "ANSI codes in piped logs:\n{logs}"
    );
}
