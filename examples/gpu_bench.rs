//! GPU benchmark of the reward pipeline; prints a table. Needs an NVIDIA GPU.
//!
//! ```text
//! cargo run --release --example gpu_bench -- [TASK_DIR]     (default fixtures/tasks/vector_add)
//! ```
//! Rows: per-stage latency (uncached compile, cached compile, correctness job, correctness +
//! timing job), end-to-end per fresh candidate, a GRPO group of 16 (one group job) with 1
//! and 2 workers per GPU, a multi-turn group (16 episodes × 2 turns with feedback and
//! advantages from `cudaperf::rl`), the coefficient of variation of 10 repeated speedup
//! measurements of one candidate, the rank stability of a mixed group scored twice (one job
//! per candidate against one job per group), a group of 64 over 8 tasks against the GPU time
//! of its launches, and 16 cold compiles in parallel against one.

use std::time::{Duration, Instant};

use cudaperf::exec::ExecOptions;
use cudaperf::pipeline::{EvalOptions, Evaluation, Evaluator, Stage, Submission};
use cudaperf::reward::Reward;
use cudaperf::task::Task;

/// Kendall's tau between two scorings of the same members (pairs tied in either count as
/// discordant halves).
fn kendall(a: &[f64], b: &[f64]) -> f64 {
    kendall_where(a, b, |_, _| true)
}

/// Kendall's tau over the pairs `(i, j)` that `keep` accepts.
fn kendall_where(a: &[f64], b: &[f64], keep: impl Fn(usize, usize) -> bool) -> f64 {
    let (mut conc, mut total) = (0.0, 0.0);
    for i in 0..a.len() {
        for j in i + 1..a.len() {
            if keep(i, j) {
                conc += (a[i] - a[j]).signum() * (b[i] - b[j]).signum();
                total += 1.0;
            }
        }
    }
    if total == 0.0 {
        f64::NAN
    } else {
        conc / total
    }
}

/// Median over implementations and scorings of the CV of the raw speedups of the copies of
/// one implementation (member `k` is implementation `k % impls`, see [`variants`]).
fn copies_cv(scorings: &[Vec<f64>], impls: usize) -> f64 {
    let mut cvs = Vec::new();
    for s in scorings {
        for i in 0..impls {
            let xs: Vec<f64> = s.iter().skip(i).step_by(impls).copied().collect();
            if xs.len() < 2 || xs.iter().any(|x| !x.is_finite()) {
                continue;
            }
            let mean = xs.iter().sum::<f64>() / xs.len() as f64;
            let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (xs.len() - 1) as f64;
            cvs.push(100.0 * var.sqrt() / mean);
        }
    }
    median(cvs)
}

/// GPU time of the jobs these evaluations were scored in, ms: every member of a job reports
/// the job's time, so each job counts once.
fn jobs_gpu_ms(evals: &[Evaluation]) -> f64 {
    let mut jobs = std::collections::BTreeMap::new();
    for v in evals {
        if let Some(x) = &v.stages.execute {
            jobs.insert(
                ((x.job_gpu_millis * 1e6) as u64, x.job_members),
                x.job_gpu_millis,
            );
        }
    }
    jobs.values().sum()
}

fn raw_speedups(evals: &[Evaluation]) -> Vec<f64> {
    evals
        .iter()
        .map(|e| e.stages.timing.as_ref().map_or(f64::NAN, |t| t.raw_speedup))
        .collect()
}

/// Every implementation of a task (reference included), as `n` distinct submissions.
fn variants(task: &Task, n: usize, tag: usize) -> Vec<Submission> {
    let impls: Vec<_> = task.all_implementations().collect();
    (0..n)
        .map(|k| fresh(&impls[k % impls.len()].source, tag * 1000 + k))
        .collect()
}

/// Rank stability of a mixed group scored twice as one job per candidate and twice as one
/// group job, and the spread of the copies of one implementation.
fn rank_rows(e: &Evaluator, task: &Task) -> Vec<(String, String)> {
    let mut out = Vec::new();
    e.clear_memo();
    // Rank stability: a mixed group (every implementation, 4 variants each), scored twice
    // as one job per candidate and twice as one group job.
    let group = variants(task, 16, 7);
    let single = |tag: usize| -> Vec<f64> {
        let subs: Vec<Submission> = group.iter().map(|s| fresh(s.text(), tag)).collect();
        let evals: Vec<Evaluation> = subs
            .iter()
            .map(|s| e.evaluate(task, s, Stage::Timing))
            .collect();
        raw_speedups(&evals)
    };
    let grouped = |tag: usize| -> Vec<f64> {
        let subs: Vec<Submission> = group.iter().map(|s| fresh(s.text(), tag)).collect();
        raw_speedups(&e.evaluate_batch(task, &subs, Stage::Timing))
    };
    let (s1, s2) = (single(71), single(72));
    let (g1, g2) = (grouped(73), grouped(74));
    out.push((
        "rank stability, group of 16 scored twice: per-candidate jobs (Kendall tau)".into(),
        format!("{:.3}", kendall(&s1, &s2)),
    ));
    out.push((
        "rank stability, group of 16 scored twice: group jobs (Kendall tau)".into(),
        format!("{:.3}", kendall(&g1, &g2)),
    ));
    // The copies of one implementation are equally fast, so their order is pure noise and
    // caps tau near 0.8; what matters to GRPO is how far apart the measurement puts them.
    let impls = task.all_implementations().count().max(1);
    let between = |a: &[f64], b: &[f64]| kendall_where(a, b, |i, j| i % impls != j % impls);
    out.push((
        "Kendall tau over pairs of different implementations: per-candidate / group jobs".into(),
        format!("{:.3} / {:.3}", between(&s1, &s2), between(&g1, &g2)),
    ));
    out.push((
        "GRPO advantages, scored twice: mean |change| (per-candidate / group jobs)".into(),
        format!(
            "{:.3} / {:.3}",
            advantage_change(&s1, &s2),
            advantage_change(&g1, &g2)
        ),
    ));
    out.push((
        "same implementation, 4 copies in one group: speedup spread (CV, median): per-candidate jobs".into(),
        format!("{:.3} %", copies_cv(&[s1, s2], impls)),
    ));
    out.push((
        "same implementation, 4 copies in one group: speedup spread (CV, median): group jobs"
            .into(),
        format!("{:.3} %", copies_cv(&[g1, g2], impls)),
    ));

    out
}

/// Mean absolute change of each member's GRPO advantage (`rl::grpo` of the
/// speedups) between two scorings of the same group: what the policy gradient would see move.
fn advantage_change(a: &[f64], b: &[f64]) -> f64 {
    match (cudaperf::rl::grpo(a, 1e-6), cudaperf::rl::grpo(b, 1e-6)) {
        (Ok(za), Ok(zb)) => {
            za.iter().zip(&zb).map(|(x, y)| (x - y).abs()).sum::<f64>() / za.len().max(1) as f64
        }
        _ => f64::NAN,
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    if v.is_empty() {
        return f64::NAN;
    }
    v[v.len() / 2]
}

fn evaluator(workers: usize) -> Evaluator {
    // Without a `cudaperf` worker (CUDAPERF_WORKER, or beside this binary) this binary serves
    // as its own worker (see `main`), so it can be carried alone to a GPU machine.
    let worker = cudaperf::sandbox::find_worker(None, cudaperf::sandbox::Role::Gpu)
        .is_none()
        .then(|| std::env::current_exe().ok())
        .flatten();
    let mut o = EvalOptions {
        exec: ExecOptions {
            workers_per_gpu: workers,
            timeout: Duration::from_secs(120),
            worker: worker.clone(),
            ..Default::default()
        },
        ..Default::default()
    };
    o.compile.worker = worker;
    Evaluator::new(o).expect("evaluator")
}

/// A fresh submission: a distinct comment defeats every cache.
fn fresh(source: &str, k: usize) -> Submission {
    Submission::from_source(format!("// variant {k} {}\n{source}", std::process::id()))
}

fn main() {
    // Started as a sandbox worker (`<exe> __cudaperf_worker <role>`): serve jobs instead.
    cudaperf::worker::run_if_requested();
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

    if std::env::var_os("GPU_BENCH_GROUP_ONLY").is_some() {
        // Only the group of 16 (1 worker per GPU), three times: for comparing settings
        // such as $CUDAPERF_CTX_SCHED within one device call.
        // $GPU_BENCH_GROUP_SIZE members (default 16) over every visible GPU.
        let size: usize = std::env::var("GPU_BENCH_GROUP_SIZE")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(16);
        if let Ok(x) = e.executor() {
            println!("GPUs: {:?}, {} worker(s)", x.gpus(), x.workers());
        }
        let warm: Vec<Submission> = (0..size).map(|k| fresh(&source, 900 + k)).collect();
        let _ = e.evaluate_batch(&task, &warm, Stage::Timing);
        for r in 0..3 {
            let subs: Vec<Submission> = (0..size)
                .map(|k| fresh(&source, 5000 + 100 * r + k))
                .collect();
            let t = Instant::now();
            let evals = e.evaluate_batch(&task, &subs, Stage::Timing);
            let secs = t.elapsed().as_secs_f64();
            let ok = evals
                .iter()
                .filter(|v| v.verdict().as_str() == "correct")
                .count();
            println!(
                "group of {size} (run {r}): {secs:.3} s wall, {:.3} s GPU, {ok}/{size} correct, median raw speedup {:.4}",
                jobs_gpu_ms(&evals) / 1e3,
                median(raw_speedups(&evals))
            );
        }
        return;
    }
    if std::env::var_os("GPU_BENCH_RANK_ONLY").is_some() {
        // Only the rank-stability rows, twice.
        for _ in 0..2 {
            for (k, v) in rank_rows(&e, &task) {
                println!("{k}: {v}");
            }
        }
        return;
    }

    let (mut compile, mut cached, mut correct, mut timed, mut e2e, mut ratio) =
        (vec![], vec![], vec![], vec![], vec![], vec![]);
    let mut reps = vec![];
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
        if let Some(t) = &ev2.stages.timing {
            reps.push(f64::from(t.checked_runs.max(t.repetitions)));
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
        "GPU-stage wall / GPU time of the runs".into(),
        format!("{:.2}", median(ratio)),
    ));
    rows.push((
        "checked timing runs per candidate (median)".into(),
        format!("{:.0}", median(reps)),
    ));

    for workers in [1usize, 2] {
        let eg = evaluator(workers);
        // Runner processes persist in the GPU worker: the first group of a run starts them.
        let warm: Vec<Submission> = (0..16).map(|k| fresh(&source, 900 + k)).collect();
        let _ = eg.evaluate_batch(&task, &warm, Stage::Timing);
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
        rows.push((
            format!("group of 16, {workers} worker(s)/GPU: GPU time of its launches (s)"),
            format!("{:.2}", jobs_gpu_ms(&evals) / 1e3),
        ));
        if workers == 1 {
            // The same group scored 5 times: each member's speedup CV, median over members.
            let mut runs: Vec<Vec<f64>> = vec![raw_speedups(&evals)];
            for r in 0..4 {
                let again: Vec<Submission> =
                    subs.iter().map(|s| fresh(s.text(), 2000 + r)).collect();
                runs.push(raw_speedups(&eg.evaluate_batch(
                    &task,
                    &again,
                    Stage::Timing,
                )));
            }
            let cvs: Vec<f64> = (0..16)
                .map(|m| {
                    let xs: Vec<f64> = runs.iter().map(|r| r[m]).collect();
                    let mean = xs.iter().sum::<f64>() / xs.len() as f64;
                    let var =
                        xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (xs.len() - 1) as f64;
                    100.0 * var.sqrt() / mean
                })
                .collect();
            rows.push((
                "group of 16 scored 5 times: speedup CV per member (median)".into(),
                format!("{:.2} %", median(cvs)),
            ));
        }
    }

    // A multi-turn GRPO group: 16 episodes × 2 turns through the unified reward; turn 2 is
    // another implementation of the task, written after the feedback on turn 1 (the feedback
    // text and the next-turn prompt are built as a trainer would); then per-turn advantages.
    {
        let reward = cudaperf::reward::presets::cudaperf();
        let ctx = cudaperf::reward::Context::new(&task, &e);
        let opts = cudaperf::rl::FeedbackOptions::default();
        let others: Vec<&str> = task
            .all_implementations()
            .map(|i| i.source.as_str())
            .collect();
        let t = Instant::now();
        let turn1: Vec<Submission> = (0..16).map(|k| fresh(&source, 2000 + k)).collect();
        let scored1 = reward.score_batch(&ctx, &turn1);
        let mut episodes = Vec::new();
        let mut prompt_bytes = 0;
        for (k, s) in scored1.iter().enumerate() {
            let Ok(s) = s else { continue };
            let mut ep = cudaperf::rl::Episode::new(&task.id);
            ep.push(cudaperf::rl::Turn::new(turn1[k].text(), s.report.clone()));
            prompt_bytes += ep.next_prompt(&task, &opts).map_or(0, |p| p.len());
            episodes.push(ep);
        }
        let turn2: Vec<Submission> = (0..16)
            .map(|k| fresh(others[k % others.len()], 3000 + k))
            .collect();
        let scored2 = reward.score_batch(&ctx, &turn2);
        for (ep, (sub, s)) in episodes.iter_mut().zip(turn2.iter().zip(&scored2)) {
            if let Ok(s) = s {
                ep.push(cudaperf::rl::Turn::new(sub.text(), s.report.clone()));
            }
        }
        let adv = cudaperf::rl::episode_advantages(&episodes, &Default::default());
        let secs = t.elapsed().as_secs_f64();
        rows.push((
            format!(
                "multi-turn group 16 × 2 turns, feedback + advantages (s{})",
                if scored1.iter().chain(&scored2).all(Result::is_ok)
                    && episodes.len() == 16
                    && adv.is_ok()
                    && prompt_bytes > 0
                {
                    ""
                } else {
                    ", FAILED"
                }
            ),
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

    rows.extend(rank_rows(&e, &task));

    // 64 candidates over 8 tasks, one group per task, against the GPU time of the launches.
    let root = std::path::Path::new(&dir)
        .parent()
        .map(std::path::Path::to_path_buf)
        .unwrap_or_default();
    let mixed = [
        "vector_add",
        "softmax_rows",
        "matmul",
        "transpose",
        "sum_dim",
        "stencil_1d",
        "spmv_csr",
        "layernorm",
    ];
    let tasks: Vec<Task> = mixed
        .iter()
        .filter_map(|id| Task::load(root.join(id)).ok())
        .collect();
    // Warm the references' compiles and each worker's runners and calibrations.
    for t in &tasks {
        let _ = e.evaluate_batch(t, &variants(t, 8, 80), Stage::Timing);
    }
    // One call for the 64: each task's group compiles while the previous one is on the GPU.
    let subs: Vec<Vec<Submission>> = tasks.iter().map(|t| variants(t, 8, 81)).collect();
    let groups: Vec<(&Task, &[Submission])> =
        tasks.iter().zip(&subs).map(|(t, s)| (t, &s[..])).collect();
    let t0 = Instant::now();
    let scored = e.evaluate_groups(&groups, Stage::Timing);
    let wall = t0.elapsed().as_secs_f64() * 1e3;
    let mut gpu_ms = 0.0;
    let mut correct = 0;
    for evals in &scored {
        correct += evals
            .iter()
            .filter(|v| v.verdict().as_str() == "correct")
            .count();
        gpu_ms += jobs_gpu_ms(evals);
    }
    rows.push((
        format!("64 candidates, 8 tasks x 8 ({correct} correct): wall (s)"),
        format!("{:.2}", wall / 1e3),
    ));
    rows.push((
        "64 candidates: wall / GPU time of the protocol's launches".into(),
        format!("{:.2}", wall / gpu_ms),
    ));

    // Compiles: 16 distinct cold sources in parallel against one.
    let t0 = Instant::now();
    let _ = e.evaluate(&task, &fresh(&source, 90_000), Stage::Compile);
    let one = t0.elapsed().as_secs_f64();
    let cold: Vec<Submission> = (0..16).map(|k| fresh(&source, 90_100 + k)).collect();
    let t0 = Instant::now();
    let _ = e.evaluate_batch(&task, &cold, Stage::Compile);
    let sixteen = t0.elapsed().as_secs_f64();
    rows.push((
        format!(
            "16 cold compiles / 1 ({} cores, {:.0} ms / {:.0} ms)",
            std::thread::available_parallelism().map_or(0, |n| n.get()),
            sixteen * 1e3,
            one * 1e3
        ),
        format!("{:.2}", sixteen / one),
    ));

    println!("gpu_bench: task {} on {device}", task.id);
    println!("| {:<52} | {:>10} |", "measure", "value");
    println!("|{:-<54}|{:->12}|", "", "");
    for (k, v) in rows {
        println!("| {k:<52} | {v:>10} |");
    }
}
