//! Load test of `cudaperf serve` on loopback: N concurrent clients send groups of real
//! completions (the fixtures' implementations) for a bounded count and time, after one
//! warm-up pass, so every score is served from a warm cache. Reports the sustained rate,
//! p50/p99 request latency and lost or duplicated results.
//!
//! ```sh
//! cargo run --release --example load_test -- --clients 8 --seconds 20
//! ```
//!
//! Options: `--clients N` (8), `--seconds S` (20, the bound on the timed phase),
//! `--requests R` (per client, 2000), `--group G` (completions per request, 8),
//! `--reward NAME` (`cudaperf`), `--no-report` (ask for no per-stage reports),
//! `--workers W` (server scoring threads, 2), `--url URL` (an already running server
//! instead of one started here). The in-process server finds the sandbox worker through
//! `CUDAPERF_WORKER` or `target/<profile>/cudaperf`.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use cudaperf::pipeline::EvalOptions;
use cudaperf::serve::{ServeConfig, Server};

struct Args {
    clients: usize,
    seconds: f64,
    requests: usize,
    group: usize,
    reward: String,
    report: bool,
    workers: usize,
    url: Option<String>,
}

fn args() -> Result<Args, String> {
    let mut a = Args {
        clients: 8,
        seconds: 20.0,
        requests: 2000,
        group: 8,
        reward: "cudaperf".into(),
        report: true,
        workers: 2,
        url: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(k) = it.next() {
        let mut val = || it.next().ok_or(format!("{k} needs a value"));
        match k.as_str() {
            "--clients" => a.clients = val()?.parse().map_err(|e| format!("--clients: {e}"))?,
            "--seconds" => a.seconds = val()?.parse().map_err(|e| format!("--seconds: {e}"))?,
            "--requests" => a.requests = val()?.parse().map_err(|e| format!("--requests: {e}"))?,
            "--group" => a.group = val()?.parse().map_err(|e| format!("--group: {e}"))?,
            "--reward" => a.reward = val()?,
            "--workers" => a.workers = val()?.parse().map_err(|e| format!("--workers: {e}"))?,
            "--url" => a.url = Some(val()?),
            "--no-report" => a.report = false,
            other => return Err(format!("unknown option `{other}`")),
        }
    }
    if a.clients == 0 || a.group == 0 || a.seconds.is_nan() || a.seconds <= 0.0 {
        return Err("--clients, --group and --seconds must be positive".into());
    }
    Ok(a)
}

/// Groups of real completions: for each task, its implementations (reference first),
/// cycled to `g` per group.
fn groups(g: usize) -> Vec<(String, Vec<String>)> {
    let ds = cudaperf::dataset::Dataset::load("fixtures/tasks").expect("fixtures/tasks loads");
    ds.tasks
        .iter()
        .take(12)
        .map(|t| {
            let impls: Vec<String> = t
                .all_implementations()
                .map(|i| format!("```cuda\n{}\n```", i.source))
                .collect();
            let group = (0..g).map(|k| impls[k % impls.len()].clone()).collect();
            (t.id.clone(), group)
        })
        .collect()
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn post(agent: &ureq::Agent, url: &str, body: &str) -> Result<serde_json::Value, String> {
    let mut r = agent
        .post(url)
        .header("content-type", "application/json")
        .send(body)
        .map_err(|e| e.to_string())?;
    let status = r.status().as_u16();
    let text = r
        .body_mut()
        .with_config()
        .limit(256 << 20)
        .read_to_string()
        .map_err(|e| e.to_string())?;
    if status != 200 {
        return Err(format!("{status}: {text}"));
    }
    serde_json::from_str(&text).map_err(|e| e.to_string())
}

/// (verdict, value) per completion: what a warm answer must repeat.
fn signature(v: &serde_json::Value) -> Vec<(String, String)> {
    v["results"]
        .as_array()
        .map(|rs| {
            rs.iter()
                .map(|r| (r["verdict"].to_string(), r["value"].to_string()))
                .collect()
        })
        .unwrap_or_default()
}

fn main() -> Result<(), String> {
    let a = args()?;
    if std::env::var_os("CUDAPERF_WORKER").is_none() {
        let exe = std::env::current_exe().map_err(|e| e.to_string())?;
        if let Some(bin) = exe
            .parent()
            .and_then(|p| p.parent())
            .map(|p| p.join("cudaperf"))
            .filter(|p| p.is_file())
        {
            std::env::set_var("CUDAPERF_WORKER", bin);
        }
    }
    let server = match &a.url {
        Some(_) => None,
        None => Some(
            Server::start(ServeConfig {
                tasks_dir: Some("fixtures/tasks".into()),
                eval: EvalOptions {
                    no_gpu: true,
                    ..Default::default()
                },
                workers: a.workers,
                ..Default::default()
            })
            .map_err(|e| e.to_string())?,
        ),
    };
    let base = a
        .url
        .clone()
        .unwrap_or_else(|| format!("http://{}", server.as_ref().map(|s| s.addr()).unwrap()));
    let score_url = format!("{base}/v1/score");
    let groups = groups(a.group);
    let bodies: Vec<String> = groups
        .iter()
        .map(|(task, completions)| {
            serde_json::json!({"task": task, "completions": completions,
                               "reward": a.reward, "report": a.report})
            .to_string()
        })
        .collect();

    // Warm-up: every group once (compiles, analyses); remember its answer.
    let warm = Instant::now();
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(Duration::from_secs(600)))
        .http_status_as_error(false)
        .build()
        .into();
    let mut expected = Vec::new();
    for b in &bodies {
        expected.push(signature(&post(&agent, &score_url, b)?));
    }
    eprintln!(
        "warm-up: {} groups of {} in {:.1} s",
        bodies.len(),
        a.group,
        warm.elapsed().as_secs_f64()
    );

    // Timed phase: bounded by count and time.
    let stop_at = Instant::now() + Duration::from_secs_f64(a.seconds);
    let start = Instant::now();
    let threads: Vec<_> = (0..a.clients)
        .map(|c| {
            let (bodies, expected, url) = (bodies.clone(), expected.clone(), score_url.clone());
            let (requests, group) = (a.requests, a.group);
            std::thread::spawn(move || {
                let agent: ureq::Agent = ureq::Agent::config_builder()
                    .timeout_global(Some(Duration::from_secs(60)))
                    .http_status_as_error(false)
                    .build()
                    .into();
                let mut lat = Vec::new();
                let (mut lost, mut duplicated, mut mismatched, mut errors) = (0, 0, 0, 0);
                for r in 0..requests {
                    if Instant::now() >= stop_at {
                        break;
                    }
                    let k = (c + r) % bodies.len();
                    let t = Instant::now();
                    match post(&agent, &url, &bodies[k]) {
                        Ok(v) => {
                            lat.push(t.elapsed().as_secs_f64() * 1e3);
                            let mut seen = BTreeMap::new();
                            for item in v["results"].as_array().into_iter().flatten() {
                                *seen
                                    .entry(item["index"].as_u64().unwrap_or(u64::MAX))
                                    .or_insert(0) += 1;
                            }
                            lost += (0..group as u64).filter(|i| !seen.contains_key(i)).count();
                            duplicated += seen.values().filter(|&&n| n > 1).count();
                            if signature(&v) != expected[k] {
                                mismatched += 1;
                            }
                        }
                        Err(e) => {
                            errors += 1;
                            lost += group;
                            eprintln!("client {c}: {e}");
                        }
                    }
                }
                (lat, lost, duplicated, mismatched, errors)
            })
        })
        .collect();
    let mut lat = Vec::new();
    let (mut lost, mut duplicated, mut mismatched, mut errors) = (0, 0, 0, 0);
    for t in threads {
        let (l, a1, b1, c1, d1) = t.join().map_err(|_| "a client thread panicked")?;
        lat.extend(l);
        lost += a1;
        duplicated += b1;
        mismatched += c1;
        errors += d1;
    }
    let secs = start.elapsed().as_secs_f64();
    lat.sort_by(f64::total_cmp);
    let n = lat.len();
    println!(
        "clients {} | group {} | reward {} | report {} | requests {} in {:.1} s",
        a.clients, a.group, a.reward, a.report, n, secs
    );
    println!(
        "sustained: {:.0} requests/s, {:.0} scores/s",
        n as f64 / secs,
        (n * a.group) as f64 / secs
    );
    println!(
        "latency per request: p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        percentile(&lat, 50.0),
        percentile(&lat, 99.0),
        lat.last().copied().unwrap_or(f64::NAN)
    );
    println!(
        "lost results {lost}, duplicated {duplicated}, answers differing from warm-up {mismatched}, failed requests {errors}"
    );
    if let Some(s) = server {
        s.shutdown().map_err(|e| e.to_string())?;
    }
    if lost + duplicated + mismatched + errors > 0 {
        return Err("results were lost, duplicated or changed".into());
    }
    Ok(())
}
