//! GPU tests: hostile and reward-hacking candidates get their expected verdicts, all in one
//! worker pool that must survive them. They need an NVIDIA GPU and are `#[ignore]`d so CI
//! (no GPU) lists them as ignored, not passed. Run on a GPU machine with
//! `cargo test --release --test gpu -- --include-ignored --nocapture` (README).

use std::path::PathBuf;
use std::time::Duration;

use cudaperf::exec::ExecOptions;
use cudaperf::reward::{EvalOptions, Evaluator, Stage, Submission};
use cudaperf::task::Task;

fn root() -> PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")))
}

fn worker() -> Option<PathBuf> {
    std::env::var_os("CUDAPERF_WORKER")
        .map(PathBuf::from)
        .or_else(|| Some(PathBuf::from(env!("CARGO_BIN_EXE_cudaperf"))))
}

#[derive(serde::Deserialize)]
struct Manifest {
    case: Vec<Case>,
}

#[derive(serde::Deserialize)]
struct Case {
    file: String,
    expect: Vec<String>,
}

fn evaluator(timeout_s: u64) -> Evaluator {
    let mut opts = EvalOptions {
        exec: ExecOptions {
            worker: worker(),
            timeout: Duration::from_secs(timeout_s),
            workers_per_gpu: 2,
            ..Default::default()
        },
        ..Default::default()
    };
    opts.compile.worker = worker();
    Evaluator::new(opts).expect("evaluator")
}

fn gpu_or_skip(e: &Evaluator) -> bool {
    match e.executor() {
        Ok(_) => true,
        Err(reason) => {
            eprintln!("SKIPPED (no GPU): {reason}");
            false
        }
    }
}

/// Runs every hostile and hack case as one batch through one pool and checks each verdict.
#[test]
#[ignore = "needs an NVIDIA GPU"]
fn hostile_and_hack_candidates_get_their_verdicts_in_one_pool() {
    let e = evaluator(15);
    if !gpu_or_skip(&e) {
        return;
    }
    let task = Task::load(root().join("fixtures/tasks/vector_add")).expect("vector_add task");
    let mut cases = Vec::new();
    for dir in ["hostile", "hacks"] {
        let d = root().join("fixtures").join(dir);
        let m: Manifest =
            toml::from_str(&std::fs::read_to_string(d.join("manifest.toml")).expect("manifest"))
                .expect("manifest toml");
        for c in m.case {
            let src = std::fs::read_to_string(d.join(&c.file)).expect("case file");
            cases.push((
                format!("{dir}/{}", c.file),
                c.expect,
                Submission::from_source(src),
            ));
        }
    }
    // A correct candidate last: the pool must still work after all of the above.
    cases.push((
        "tasks/vector_add/reference.cu".into(),
        vec!["correct".into()],
        Submission::from_source(task.reference.source.clone()),
    ));
    let subs: Vec<Submission> = cases.iter().map(|c| c.2.clone()).collect();
    let start = std::time::Instant::now();
    let evals = e.evaluate_batch(&task, &subs, Stage::Correctness);
    assert_eq!(evals.len(), cases.len(), "a job was lost");
    let mut failures = Vec::new();
    println!("{:<42} {:<16} {:<16} detail", "case", "expected", "verdict");
    for ((name, expect, _), ev) in cases.iter().zip(&evals) {
        let v = ev.verdict();
        let detail = ev
            .stages
            .execute
            .as_ref()
            .map(|x| serde_json::to_string(&x.status).unwrap_or_default())
            .unwrap_or_default();
        let reasons = ev
            .stages
            .correctness
            .as_ref()
            .map(|c| {
                c.configs
                    .iter()
                    .flat_map(|k| k.reasons.clone())
                    .take(2)
                    .collect::<Vec<_>>()
                    .join("; ")
            })
            .unwrap_or_default();
        println!(
            "{:<42} {:<16} {:<16} {} {}",
            name,
            expect.join("|"),
            v.as_str(),
            detail,
            reasons
        );
        if !expect.iter().any(|x| x == v.as_str()) {
            failures.push(format!("{name}: expected {expect:?}, got {v}"));
        }
    }
    let restarts = e.executor().map(|x| x.restarts()).unwrap_or(0);
    println!(
        "{} cases in {:.1} s, worker restarts: {restarts}",
        cases.len(),
        start.elapsed().as_secs_f64()
    );
    assert!(failures.is_empty(), "{failures:#?}");
}
