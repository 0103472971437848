//! The RL side's per-group costs for a GRPO group of 64: feedback text for every candidate,
//! and advantages (GRPO over 64 rewards; noise-aware speed terms over 64 reports; discounted
//! per-turn advantages of 64 two-turn episodes). Target: ≤ 50 µs each.
//!
//! The reports are real: the committed H200 report of `softmax_rows/warp_per_row_shuffle`
//! and CPU-stage reports (NVRTC, structure, ranker) of fixture implementations, so NVRTC
//! must be installed (as for `benches/compile.rs`).
//!
//! `replay_table/reward_and_advantages_64`: the replayed ablation's per-group cost (issue 21):
//! the unified reward of 64 rows of a program table, each with a fresh draw of its timing
//! noise, then GRPO advantages over the 64 (target ≤ 50 µs). The table is
//! `$CUDAPERF_TABLE`, else the committed CI sub-table (256 measured rows per task cut from
//! the H200 table, `fixtures/rl/program_table.sub.jsonl.gz`).

#[path = "../examples/common/mod.rs"]
#[allow(unused_imports)]
mod common;

use criterion::{black_box, criterion_group, criterion_main, Criterion};
use cudaperf::pipeline::report::RewardReport;
use cudaperf::pipeline::{EvalOptions, Evaluator, Stage, Submission};
use cudaperf::reward::{presets, Context, Reward, RewardError};
use cudaperf::rl::{self, Episode, EpisodeOptions, FeedbackOptions, Turn};
use cudaperf::task::Task;

fn root() -> std::path::PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| env!("CARGO_MANIFEST_DIR").into())
}

/// `(task, report, source)` for 64 candidates.
fn group() -> Vec<(Task, RewardReport, String)> {
    let root = root();
    // The fixtures are this repository's own kernels: compiled in-process (trusted).
    let mut options = EvalOptions {
        no_gpu: true,
        ..EvalOptions::default()
    };
    options.compile.isolation = cudaperf::compile::Isolation::InProcess;
    let evaluator = Evaluator::new(options).expect("evaluator");
    let mut base = Vec::new();
    let real: RewardReport = serde_json::from_str(
        &std::fs::read_to_string(
            root.join("docs/gpu-runs/2026-11-29-score-softmax-warp_per_row_shuffle.json"),
        )
        .unwrap(),
    )
    .unwrap();
    let softmax = Task::load(root.join("fixtures/tasks/softmax_rows")).unwrap();
    let src = softmax
        .implementation("warp_per_row_shuffle")
        .unwrap()
        .source
        .clone();
    base.push((softmax, real, src));
    for (task, file) in [
        ("transpose", "smem_tiled_nopad.cu"),
        ("transpose", "reference.cu"),
        ("matmul", "uncoalesced_row_threads.cu"),
        ("vector_add", "strided_blocks.cu"),
        ("max_reduce", "reference.cu"),
        ("stencil_1d", "shared_tiled.cu"),
        ("softmax_rows", "block_per_row_smem.cu"),
    ] {
        let t = Task::load(root.join("fixtures/tasks").join(task)).unwrap();
        let src =
            std::fs::read_to_string(root.join("fixtures/tasks").join(task).join(file)).unwrap();
        let ctx = Context::new(&t, &evaluator);
        let eval = evaluator.evaluate(
            &t,
            &Submission::from_source(src.clone()),
            Stage::Correctness,
        );
        let report = match presets::cudaperf().score_evaluated(&ctx, &eval) {
            Ok(s) => s.report,
            Err(RewardError::Unavailable { report, .. }) => *report,
            Err(e) => panic!("{e}"),
        };
        base.push((t, report, src));
    }
    base.iter().cycle().take(64).cloned().collect()
}

fn bench_rl(c: &mut Criterion) {
    if cudaperf::compile::nvrtc::load().is_err() {
        eprintln!("benches/rl.rs needs NVRTC (pip install nvidia-cuda-nvrtc==13.*)");
        return;
    }
    let g64 = group();
    let opts = FeedbackOptions::default();
    // Rewards of a GPU-measured group: the real report's value spread over 64 candidates,
    // with distinct speedup intervals so the noise-aware step has clusters to form.
    let gpu_reports: Vec<RewardReport> = (0..64)
        .map(|i| {
            let mut r = g64[0].1.clone();
            let t = r.stages.timing.as_mut().unwrap();
            let s = 1.0 + 0.05 * (i % 16) as f64;
            t.ci95 = [s * 0.99, s * 1.01];
            r.value = 1.0 + 0.3 * s.log2();
            r
        })
        .collect();
    let rewards: Vec<f64> = gpu_reports.iter().map(|r| r.value).collect();
    let episodes: Vec<Episode> = (0..64)
        .map(|i| {
            let mut e = Episode::new("softmax_rows");
            e.push(Turn::new("", gpu_reports[i].clone()));
            e.push(Turn::new("", gpu_reports[(i * 7) % 64].clone()));
            e
        })
        .collect();

    let mut g = c.benchmark_group("rl_group_of_64");
    g.bench_function("feedback_text", |b| {
        b.iter(|| {
            g64.iter()
                .map(|(t, r, s)| rl::feedback(t, r, s, &opts).text().len())
                .sum::<usize>()
        })
    });
    g.bench_function("advantages_grpo", |b| {
        b.iter(|| rl::advantages(black_box(&rewards), &rl::AdvantageOptions::default()).unwrap())
    });
    g.bench_function("noise_aware_rewards", |b| {
        b.iter(|| rl::noise_aware_rewards(black_box(&gpu_reports)).unwrap())
    });
    g.bench_function("episode_advantages_2_turns_noise_aware", |b| {
        let o = EpisodeOptions {
            noise_aware: true,
            ..Default::default()
        };
        b.iter(|| rl::episode_advantages(black_box(&episodes), &o).unwrap())
    });
    g.finish();
}

fn bench_replay(c: &mut Criterion) {
    use rand::SeedableRng;
    let root = root();
    let path = std::env::var_os("CUDAPERF_TABLE")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| root.join("fixtures/rl/program_table.sub.jsonl.gz"));
    let rows = common::table::read(&path).expect("program table");
    let tasks = common::replay::load_tasks(rows, &root.join("fixtures"), &["softmax_rows".into()])
        .expect("table task");
    let t = &tasks[0];
    let evaluator = Evaluator::new(EvalOptions {
        no_gpu: true,
        ..EvalOptions::default()
    })
    .expect("evaluator");
    let ctx = Context::new(&t.task, &evaluator);
    let reward = common::replay::Arm::Both.reward().unwrap();
    let mut scorer = common::replay::Scorer::new(t, reward.as_ref(), false);
    // 64 rows: the correct ones first (they carry timing noise), then the others.
    let mut picked: Vec<usize> = (0..t.rows.len()).filter(|&i| t.rows[i].correct()).collect();
    picked.extend((0..t.rows.len()).filter(|&i| !t.rows[i].correct()));
    let picked: Vec<usize> = picked.into_iter().cycle().take(64).collect();
    let mut rng = rand::rngs::SmallRng::seed_from_u64(7);
    let opts = rl::AdvantageOptions::default();
    let mut g = c.benchmark_group("replay_table");
    g.bench_function("reward_and_advantages_64", |b| {
        b.iter(|| {
            let r: Vec<f64> = picked
                .iter()
                .map(|&i| scorer.score(&ctx, i, &mut rng))
                .collect();
            rl::advantages(black_box(&r), &opts).unwrap()
        })
    });
    g.finish();
}

criterion_group!(benches, bench_rl, bench_replay);
criterion_main!(benches);
