//! GPU benchmark of the reward pipeline; prints a table. Needs an NVIDIA GPU.
//!
//! ```text
//! cargo run --release --example gpu_bench -- [TASK_DIR]     (default fixtures/tasks/vector_add)
//! ```
//! Rows: per-stage latency (uncached compile, cached compile, correctness job, correctness +
//! timing job), end-to-end per fresh candidate, a GRPO group of 16 through the pool with 1
//! and 4 workers, the coefficient of variation of 10 repeated speedup measurements of one
//! candidate, and wall time over the GPU time the protocol needs.

use std::time::{Duration, Instant};

use cudaperf::exec::ExecOptions;
use cudaperf::reward::{EvalOptions, Evaluator, Stage, Submission};
use cudaperf::task::Task;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    if v.is_empty() {
        return f64::NAN;
    }
    v[v.len() / 2]
}

fn evaluator(workers: usize) -> Evaluator {
    Evaluator::new(EvalOptions {
        exec: ExecOptions {
            workers_per_gpu: workers,
            timeout: Duration::from_secs(120),
            ..Default::default()
        },
        ..Default::default()
    })
    .expect("evaluator")
}

/// A fresh submission: a distinct comment defeats every cache.
fn fresh(source: &str, k: usize) -> Submission {
    Submission::from_source(format!("// variant {k} {}\n{source}", std::process::id()))
}

fn main() {
    let dir = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "fixtures/tasks/vector_add".into());
    let task = match Task::load(&dir) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(2);
        }
    };
    let e = evaluator(1);
    if let Err(reason) = e.executor() {
        eprintln!("gpu_bench needs a GPU: {reason}");
        std::process::exit(2);
    }
    let source = task
        .implementations
        .first()
        .unwrap_or(&task.reference)
        .source
        .clone();
    // Warm everything once (worker start, NVRTC load, reference compile, harness kernels).
    let warm = e.evaluate(&task, &fresh(&source, 0), Stage::Timing);
    let device = warm
        .stages
        .execute
        .as_ref()
        .and_then(|x| x.device.clone())
        .map(|d| d.name)
        .unwrap_or_default();
    let mut rows: Vec<(String, String)> = Vec::new();

    let (mut compile, mut cached, mut correct, mut timed, mut e2e, mut ratio) =
        (vec![], vec![], vec![], vec![], vec![], vec![]);
    for k in 1..=8 {
        let sub = fresh(&source, k);
        let t = Instant::now();
        let ev = e.evaluate(&task, &sub, Stage::Compile);
        compile.push(t.elapsed().as_secs_f64() * 1e3);
        let _ = ev;
        let t = Instant::now();
        let _ = e.compiler().compile(sub.candidate().expect("candidate"));
        cached.push(t.elapsed().as_secs_f64() * 1e3);
        let t = Instant::now();
        let ev = e.evaluate(&task, &sub, Stage::Correctness);
        correct.push(t.elapsed().as_secs_f64() * 1e3);
        let _ = ev;
        e.clear_memo();
        let t = Instant::now();
        let ev = e.evaluate(&task, &sub, Stage::Timing);
        timed.push(t.elapsed().as_secs_f64() * 1e3);
        // End to end on a never-seen candidate: compile + correctness + timing.
        let sub2 = fresh(&source, 100 + k);
        let t = Instant::now();
        let ev2 = e.evaluate(&task, &sub2, Stage::Timing);
        let wall = t.elapsed().as_secs_f64() * 1e3;
        e2e.push(wall);
        if let Some(x) = &ev2.stages.execute {
            if x.gpu_millis > 0.0 {
                ratio.push(x.millis / x.gpu_millis);
            }
        }
        let _ = ev;
    }
    rows.push((
        "compile, uncached (ms, median of 8)".into(),
        format!("{:.1}", median(compile)),
    ));
    rows.push((
        "compile, cached (ms)".into(),
        format!("{:.3}", median(cached)),
    ));
    rows.push((
        "correctness job, all configs (ms)".into(),
        format!("{:.1}", median(correct)),
    ));
    rows.push((
        "correctness + timing job (ms)".into(),
        format!("{:.1}", median(timed)),
    ));
    rows.push((
        "end-to-end fresh candidate (ms)".into(),
        format!("{:.1}", median(e2e)),
    ));
    rows.push((
        "GPU-stage wall / GPU time of the protocol".into(),
        format!("{:.2}", median(ratio)),
    ));

    for workers in [1usize, 4] {
        let eg = evaluator(workers);
        let _ = eg.evaluate(&task, &fresh(&source, 999), Stage::Timing);
        let subs: Vec<Submission> = (0..16).map(|k| fresh(&source, 1000 + k)).collect();
        let t = Instant::now();
        let evals = eg.evaluate_batch(&task, &subs, Stage::Timing);
        let secs = t.elapsed().as_secs_f64();
        let ok = evals
            .iter()
            .filter(|v| v.verdict().as_str() == "correct")
            .count();
        rows.push((
            format!("group of 16, {workers} worker(s)/GPU (s, {ok}/16 correct)"),
            format!("{secs:.2}"),
        ));
    }

    let mut speedups = Vec::new();
    let sub = fresh(&source, 5000);
    for _ in 0..10 {
        e.clear_memo();
        let ev = e.evaluate(&task, &sub, Stage::Timing);
        if let Some(t) = &ev.stages.timing {
            speedups.push(t.raw_speedup);
        }
    }
    let n = speedups.len() as f64;
    let mean = speedups.iter().sum::<f64>() / n;
    let sd = (speedups.iter().map(|s| (s - mean).powi(2)).sum::<f64>() / (n - 1.0).max(1.0)).sqrt();
    let us = warm.stages.timing.as_ref().map_or(0.0, |t| t.reference_us);
    rows.push((
        format!(
            "speedup CV over {} runs (reference {us:.0} us)",
            speedups.len()
        ),
        format!("{:.2} %", 100.0 * sd / mean),
    ));
    rows.push(("speedup mean".into(), format!("{mean:.3}")));

    println!("gpu_bench: task {} on {device}", task.id);
    println!("| {:<52} | {:>10} |", "measure", "value");
    println!("|{:-<54}|{:->12}|", "", "");
    for (k, v) in rows {
        println!("| {k:<52} | {v:>10} |");
    }
}
