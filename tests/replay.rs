//! The replayed ablation of issue 21 on the committed BOOKKEEPING FIXTURE
//! (`fixtures/rl/program_table.bookkeeping.jsonl`: real CPU stages, GPU columns made up from
//! the hazard knobs, every row marked `synthetic`). It checks the sparsity figures and every
//! arm's bookkeeping, never an outcome; and that `Evaluation::from_stages` lets the crate's
//! presets score stored stages (a real H200 report) as they would the evaluation.

#[path = "../examples/common/mod.rs"]
mod excommon;

use cudaperf::reward::{
    presets, Context, EvalOptions, Evaluation, Evaluator, Reward, RewardReport,
};
use excommon::replay::{self, Arm, ReplayConfig};
use excommon::{replay_report, table};

fn root() -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn fixture_rows() -> Vec<table::Row> {
    table::read(&root().join("fixtures/rl/program_table.bookkeeping.jsonl")).expect("fixture table")
}

/// The fixture's figures follow from its construction: 1 combination in 16 free of the four
/// hazards (all of them correct, nothing else), one near-best program per task of 128.
#[test]
fn fixture_sparsity_figures() {
    let rows = fixture_rows();
    assert!(
        rows.iter().all(|r| r.synthetic),
        "the fixture must be marked synthetic"
    );
    let s = table::sparsity(&rows);
    assert_eq!(s.len(), 3);
    for x in &s {
        assert_eq!((x.programs, x.combinations), (128, 128), "{}", x.task);
        assert_eq!(x.correct, 1.0 / 16.0, "{}", x.task);
        assert_eq!(x.hazard_free, 1.0 / 16.0, "{}", x.task);
        assert_eq!(x.near_best, 1.0 / 128.0, "{}", x.task);
        assert_eq!(x.surprises, 0, "{}", x.task);
    }
}

/// Every arm runs every seed on every task with the same sample budget, the seeds are
/// paired (the first step, drawn before any update, is the same program set in every arm),
/// and the summary counts what the runs hold. Must stay well under 60 s.
#[test]
fn replay_bookkeeping_of_every_arm() {
    let start = std::time::Instant::now();
    let fixtures = root().join("fixtures");
    let tasks = replay::load_tasks(fixture_rows(), &fixtures, &[]).expect("tasks");
    let evaluator = Evaluator::new(EvalOptions {
        no_gpu: true,
        ranker_model: Some(fixtures.join("models/ranker")),
        ..EvalOptions::default()
    })
    .expect("evaluator");
    let cfg = ReplayConfig::default();
    assert_eq!(
        (cfg.steps, cfg.group, cfg.turns, cfg.seeds.len()),
        (40, 8, 2, 20)
    );
    let s = replay_report::run_all(&tasks, &evaluator, &cfg);
    assert_eq!(s.samples_per_run, 640);
    assert_eq!(s.runs.len(), Arm::ALL.len() * 20 * 3);
    for a in &s.arms {
        let runs: Vec<_> = s.runs.iter().filter(|r| r.arm == a.arm).collect();
        assert_eq!(runs.len(), 60, "{:?}", a.arm);
        assert_eq!(a.runs, 60);
        assert_eq!(a.seeds.len(), 20);
        for seed in 0..20u64 {
            for t in ["matmul", "softmax_rows", "transpose"] {
                let n = runs
                    .iter()
                    .filter(|r| r.seed == seed && r.task == t)
                    .count();
                assert_eq!(n, 1, "{:?} seed {seed} {t}", a.arm);
            }
        }
        for r in &runs {
            assert_eq!(r.samples, 640);
            assert_eq!(r.curve.len(), 40);
            assert!(r
                .samples_to_near_best
                .is_none_or(|k| (1..=640).contains(&k)));
            assert!((0.0..=1.0).contains(&r.auc) && (0.0..=1.0).contains(&r.hazard_rate));
            // The same first step as outcome-only's run of this seed and task.
            let base = s
                .runs
                .iter()
                .find(|b| b.arm == Arm::Outcome && b.seed == r.seed && b.task == r.task)
                .unwrap();
            assert_eq!(
                r.curve[0], base.curve[0],
                "{:?} seed {} {}",
                r.arm, r.seed, r.task
            );
        }
        let compared = a.arm != Arm::Outcome;
        assert_eq!(a.vs_outcome.len(), if compared { 4 } else { 0 });
        for c in &a.vs_outcome {
            assert!(
                c.ci[0] <= c.diff + 1e-12 && c.diff <= c.ci[1] + 1e-12,
                "{c:?}"
            );
            assert!((0.0..=1.0).contains(&c.p_holm));
        }
    }
    let dir = tempfile::tempdir().unwrap();
    replay_report::write(&s, dir.path(), "fixture").unwrap();
    for f in ["ablation.md", "ablation.json", "curves.png"] {
        assert!(dir.path().join(f).metadata().unwrap().len() > 100, "{f}");
    }
    assert!(start.elapsed().as_secs() < 60, "took {:?}", start.elapsed());
}

/// A table row's stored stages score like the report they came from: a real H200 report of
/// `softmax_rows/warp_per_row_shuffle`, rebuilt with `Evaluation::from_stages`, through the
/// table's compact storage.
#[test]
fn stored_stages_score_through_the_presets() {
    let report: RewardReport = serde_json::from_str(
        &std::fs::read_to_string(
            root().join("docs/gpu-runs/2026-11-29-score-softmax-warp_per_row_shuffle.json"),
        )
        .unwrap(),
    )
    .unwrap();
    let task = cudaperf::Task::load(root().join("fixtures/tasks/softmax_rows")).unwrap();
    let evaluator = Evaluator::new(EvalOptions {
        no_gpu: true,
        ..EvalOptions::default()
    })
    .unwrap();
    let ctx = Context::new(&task, &evaluator);
    let speedup = report.stages.timing.as_ref().unwrap().speedup;
    let direct = Evaluation::from_stages(report.stages.clone());
    let t = excommon::space::task("softmax_rows").unwrap();
    let d = &t.distinct()[0];
    let row = table::row_from(t, d, direct.verdict(), report.stages.clone());
    let line = serde_json::to_string(&row).unwrap();
    let back: table::Row = serde_json::from_str(&line).unwrap();
    let mut full = Vec::new();
    for e in [direct, back.evaluation()] {
        assert_eq!(e.verdict(), cudaperf::reward::Verdict::Correct);
        // Kevin: 0.3 · correct + speedup.
        let k = presets::kevin().value(&ctx, &e).unwrap();
        assert!((k - (0.3 + speedup)).abs() < 1e-12, "{k}");
        assert_eq!(presets::correctness_only().value(&ctx, &e).unwrap(), 1.0);
        full.push(presets::cudaperf().value(&ctx, &e).unwrap());
    }
    // The unified reward: the same value before and after the table's storage, above 1.
    assert_eq!(full[0], full[1]);
    assert!(full[0] > 1.0, "{full:?}");
    let mut failed = report.stages.clone();
    let c = failed.correctness.as_mut().unwrap();
    c.passed = false;
    c.pass_rate = 0.5;
    failed.timing = None;
    let e = Evaluation::from_stages(failed);
    // The ladder's incorrect rung: −0.25 + 0.25 · pass_rate.
    let v = presets::cudaperf_with(Default::default(), None, None)
        .value(&ctx, &e)
        .unwrap();
    assert!((v - (-0.125)).abs() < 1e-12, "{v}");
}
