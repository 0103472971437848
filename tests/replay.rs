//! The replayed ablation of issue 21 on the committed CI sub-table
//! (`fixtures/rl/program_table.sub.jsonl.gz`: 256, 256 and 128 rows cut from the measured
//! table `docs/rl/table/program_table.jsonl.gz` by `program_table --cut`). It checks the
//! sub-table's sparsity figures and every arm's bookkeeping, never an outcome; that the
//! sub-table is the cut of the committed table; that its ranker columns are the held-out
//! ranker's and equal the pipeline's ranker stage; and that `Evaluation::from_stages` lets
//! the crate's presets score stored stages (a real H200 report) as they would the evaluation.

#[path = "../examples/common/mod.rs"]
mod excommon;

use cudaperf::pipeline::report::RewardReport;
use cudaperf::pipeline::{EvalOptions, Evaluation, Evaluator, Stage, Submission};
use cudaperf::reward::{presets, Context, Reward};
use excommon::replay::{self, Arm, ReplayConfig};
use excommon::{replay_report, table};

fn root() -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn fixture_rows() -> Vec<table::Row> {
    table::read(&root().join("fixtures/rl/program_table.sub.jsonl.gz")).expect("CI sub-table")
}

/// The sub-table's figures: measured rows (none synthetic), 1 combination in 16 free of the
/// four hazards and exactly those correct (every hazard caught on the GPU), and the
/// near-best programs of the cut (2 and 3 of 256, 1 of 128; the cut keeps each task's best).
/// transpose has 128: its re-measured space has one block shape, so the cut's four
/// neighbour knobs hold 2 × 2 × 2 × 1 speed combinations.
#[test]
fn sub_table_sparsity_figures() {
    let rows = fixture_rows();
    assert!(rows.iter().all(|r| !r.synthetic), "measured rows only");
    let s = table::sparsity(&rows);
    let want = [
        ("matmul", 256, 2.0, 5.28),
        ("softmax_rows", 256, 3.0, 16.95),
        ("transpose", 128, 1.0, 3.11),
    ];
    assert_eq!(s.len(), want.len());
    for (x, (task, n, near, best)) in s.iter().zip(want) {
        assert_eq!(x.task, task);
        assert_eq!((x.programs, x.combinations), (n, n), "{task}");
        assert_eq!(x.correct, 1.0 / 16.0, "{task}");
        assert_eq!(x.hazard_free, 1.0 / 16.0, "{task}");
        assert_eq!(x.near_best, near / n as f64, "{task}");
        assert_eq!(x.surprises, 0, "{task}");
        let b = x.best.unwrap();
        assert!((b - best).abs() < 0.005, "{task}: best {b}");
    }
}

/// The committed sub-table is `program_table --cut` of the committed measured table, and
/// that table has the sparsity figures docs/rl/README.md reports.
#[test]
fn sub_table_is_the_cut_of_the_measured_table() {
    let full = table::read(&root().join("docs/rl/table/program_table.jsonl.gz")).unwrap();
    let s = table::sparsity(&full);
    let want = [
        ("matmul", 4096, 4.0),
        ("softmax_rows", 3840, 3.0),
        ("transpose", 2304, 1.0),
    ];
    for (x, (task, n, near)) in s.iter().zip(want) {
        assert_eq!((x.task.as_str(), x.programs, x.combinations), (task, n, n));
        assert_eq!(x.correct, 1.0 / 16.0, "{task}");
        assert_eq!(x.near_best, near / n as f64, "{task}");
        assert_eq!(x.surprises, 0, "{task}");
    }
    let cut = table::cut(&full, 4).unwrap();
    let sub = fixture_rows();
    assert_eq!(cut.len(), sub.len());
    for (a, b) in cut.iter().zip(&sub) {
        assert_eq!(
            serde_json::to_value(a).unwrap(),
            serde_json::to_value(b).unwrap()
        );
    }
}

/// The table's ranker columns come from the ranker retrained leaving the RL tasks out, and
/// the fast path (`table::RankerScorer`: source and task only) gives what the pipeline's
/// ranker stage (compile, extract, structure, ranker) gives.
#[test]
fn ranker_columns_are_the_held_out_rankers() {
    let fixtures = root().join("fixtures");
    let model = fixtures.join("models/ranker-heldout-rl");
    let meta: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(model.join("ranker.json")).unwrap()).unwrap();
    let seen = |k: &str| -> Vec<String> {
        meta["training"][k]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap().to_string())
            .collect()
    };
    let trained: Vec<String> = [seen("train_tasks"), seen("val_tasks")].concat();
    assert!(trained.len() > 100);
    for t in ["matmul", "softmax_rows", "transpose"] {
        assert!(!trained.iter().any(|x| x == t), "{t} in the ranker's data");
    }
    let rows = fixture_rows();
    let mut scorer =
        table::RankerScorer::new(std::path::Path::new("fixtures/models/ranker-heldout-rl"))
            .unwrap();
    let mut o = EvalOptions {
        no_gpu: true,
        ranker_model: Some(model.clone()),
        ..EvalOptions::default()
    };
    o.compile.isolation = cudaperf::compile::Isolation::InProcess;
    let evaluator = Evaluator::new(o).unwrap();
    for id in ["matmul", "softmax_rows", "transpose"] {
        scorer.add_task(&fixtures, id).unwrap();
        let task = cudaperf::task::Task::load(fixtures.join("tasks").join(id)).unwrap();
        let space = excommon::space::task(id).unwrap();
        // A correct row and a hazard row of the task.
        let picked: Vec<&table::Row> = [true, false]
            .iter()
            .map(|&c| {
                rows.iter()
                    .find(|r| r.task == id && r.correct() == c)
                    .unwrap()
            })
            .collect();
        let subs: Vec<Submission> = picked
            .iter()
            .map(|r| Submission::from_source(space.render(&r.knobs).unwrap()))
            .collect();
        let evals = evaluator.evaluate_batch(&task, &subs, Stage::Ranker);
        for (r, e) in picked.iter().zip(evals) {
            let fast = scorer.stage(r).unwrap();
            let stored = r.stages.ranker.as_ref().unwrap();
            let pipeline = e.stages.ranker.as_ref().and_then(|s| s.scores()).unwrap();
            assert_eq!(stored.model(), "fixtures/models/ranker-heldout-rl");
            let stored = stored.scores().unwrap();
            for (a, b) in [
                (fast.candidate_score, pipeline.candidate_score),
                (fast.reference_score, pipeline.reference_score),
                (fast.prob_faster, pipeline.prob_faster),
                (fast.candidate_score, stored.candidate_score),
                (fast.prob_faster, stored.prob_faster),
            ] {
                assert!((a - b).abs() < 1e-9, "{id} {}: {a} vs {b}", r.hash);
            }
        }
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
    let task = cudaperf::task::Task::load(root().join("fixtures/tasks/softmax_rows")).unwrap();
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
        assert_eq!(e.verdict(), cudaperf::pipeline::Verdict::Correct);
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

/// `table::add_train_only_pairs` (the ranker's extra training data, `cudaperf_ranker
/// --table`): every correct program of the sub-table becomes a sample of its task with the
/// features the ranker computes, and at most `pairs_per_task` train-only pairs per task
/// join two of them, ordered by their measured speedups.
#[test]
fn table_programs_become_train_only_ranker_pairs() {
    use cudaperf::ranker::{FeatureSet, RankingData};
    let rows = fixture_rows();
    let set = FeatureSet {
        launch: true,
        traffic: true,
        ngram_buckets: 0,
    };
    let mut data = RankingData {
        feature_names: set.names(),
        samples: Vec::new(),
        pairs: Vec::new(),
    };
    let (samples, pairs) =
        table::add_train_only_pairs(&mut data, &rows, &root().join("fixtures"), 10).unwrap();
    let correct = rows
        .iter()
        .filter(|r| r.verdict == cudaperf::pipeline::Verdict::Correct)
        .count();
    assert_eq!(samples, correct);
    assert_eq!(correct, 16 + 16 + 8);
    assert_eq!(pairs, 30, "10 per task");
    assert_eq!((data.samples.len(), data.pairs.len()), (samples, pairs));
    let speedup = |i: usize| {
        let hash = data.samples[i].name.strip_prefix("table:").unwrap();
        rows.iter()
            .find(|r| r.hash == hash)
            .unwrap()
            .speedup
            .unwrap()
    };
    for p in &data.pairs {
        assert!(p.train_only);
        assert_eq!(data.samples[p.fast].task, data.samples[p.slow].task);
        let want = (speedup(p.fast) / speedup(p.slow)).ln() as f32;
        assert!(want >= 0.0 && (p.log_ratio - want).abs() < 1e-6);
    }
    for s in &data.samples {
        assert_eq!(s.features.len(), data.feature_names.len());
    }
}
