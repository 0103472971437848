//! Ranker inference cost: one candidate (target ≤ 20 µs) and a GRPO-sized batch of 64, on the
//! plain-Rust path that scoring uses and, for comparison, through burn; the launch-plan
//! features; and the whole ranker stage of one candidate with the shipped model (target
//! ≤ 0.5 ms).

use burn::tensor::Device;
use criterion::{black_box, criterion_group, criterion_main, BatchSize, Criterion};
use cudaperf::ranker::{synthetic, train, RankerConfig};

fn bench_inference(c: &mut Criterion) {
    // Fixture-like width (60 structural features + 64 n-gram buckets); a short training run
    // is enough, inference cost does not depend on the weights' values.
    let data = synthetic::decisive_feature(20, 4, 124, 1);
    let (ranker, _) = train(&data, &RankerConfig::new().with_epochs(3), |_| {}).unwrap();
    let one = data.samples[0].features.clone();
    let batch: Vec<Vec<f32>> = data
        .samples
        .iter()
        .cycle()
        .take(64)
        .map(|s| s.features.clone())
        .collect();
    let device = Device::default();

    let mut g = c.benchmark_group("ranker_inference");
    g.bench_function("score_1", |b| {
        b.iter(|| ranker.score(black_box(&one)).unwrap())
    });
    g.bench_function("score_batch_64", |b| {
        b.iter(|| ranker.score_batch(black_box(&batch)).unwrap())
    });
    g.bench_function("prob_faster", |b| {
        b.iter(|| {
            ranker
                .prob_faster(black_box(&one), black_box(&batch[1]))
                .unwrap()
        })
    });
    g.bench_function("burn_score_batch_64", |b| {
        b.iter_batched(
            || batch.clone(),
            |x| ranker.score_batch_on(&device, &x).unwrap(),
            BatchSize::SmallInput,
        )
    });
    g.bench_function("burn_score_1", |b| {
        b.iter(|| {
            ranker
                .score_batch_on(&device, std::slice::from_ref(&one))
                .unwrap()
        })
    });
    g.finish();
}

/// The launch-plan features of one candidate on its parsed tree (what the pipeline's ranker
/// stage adds for a launch-feature model): plan, atomics, and the warp probe.
fn bench_launch_features(c: &mut Criterion) {
    use cudaperf::analysis::{analyze_tree, SourceTree};
    use cudaperf::candidate::PlanLimits;
    use cudaperf::ranker::{launch_features, LaunchInput, TimedPlan};
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/tasks");
    let mut g = c.benchmark_group("ranker_launch_features");
    for (task, imp) in [
        ("layernorm", "block_per_row_smem"),
        ("batchnorm2d_inference", "channel_major_strided"),
    ] {
        let task = cudaperf::task::Task::load(dir.join(task)).unwrap();
        let source = task.implementation(imp).unwrap().source.clone();
        let tree = SourceTree::parse(source.as_bytes()).unwrap();
        let features = analyze_tree(&tree);
        let plan = TimedPlan::of_source(&task, &source, &PlanLimits::default(), imp).unwrap();
        let input = LaunchInput {
            tree: Some(&tree),
            ..plan.input(&task, &source)
        };
        g.bench_function(imp, |b| {
            b.iter(|| launch_features(black_box(&input), &features, "bench").unwrap())
        });
    }
    g.finish();
}

/// The whole ranker stage for one candidate with the shipped model, from its parsed tree and
/// structure features (what the pipeline already has): launch-plan and traffic features
/// (one shared warp probe), the input against the reference's cached features, the
/// ensemble's member scores (MLPs and trees) and the calibrated comparison with the
/// reference's cached member scores. Target: <= 0.5 ms per candidate.
fn bench_stage(c: &mut Criterion) {
    use cudaperf::analysis::{analyze_tree, SourceTree};
    use cudaperf::candidate::PlanLimits;
    use cudaperf::ranker::{features_for, features_from, LaunchInput, TimedPlan, TrainedRanker};
    let model = TrainedRanker::shipped().unwrap();
    let names = model.base_feature_names().to_vec();
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/tasks");
    let mut g = c.benchmark_group("ranker_stage");
    for (task, imp) in [
        ("layernorm", "block_per_row_smem"),
        ("prefix_sum", "blelloch_padded_smem"),
        ("matmul", "reference"),
    ] {
        let task = cudaperf::task::Task::load(dir.join(task)).unwrap();
        let source = if imp == "reference" {
            task.reference.source.clone()
        } else {
            task.implementation(imp).unwrap().source.clone()
        };
        let reference = {
            let r = &task.reference.source;
            let plan = TimedPlan::of_source(&task, r, &PlanLimits::default(), "ref").unwrap();
            let x = features_for(r, Some(&plan.input(&task, r)), &names).unwrap();
            let scores = model
                .member_scores(&model.input_against(&x, &x).unwrap())
                .unwrap();
            (x, scores)
        };
        let tree = SourceTree::parse(source.as_bytes()).unwrap();
        let features = analyze_tree(&tree);
        let plan = TimedPlan::of_source(&task, &source, &PlanLimits::default(), imp).unwrap();
        let input = LaunchInput {
            tree: Some(&tree),
            ..plan.input(&task, &source)
        };
        g.bench_function(format!("{}/{imp}", task.id), |b| {
            b.iter(|| {
                let x =
                    features_from(&features, Some(&tree), Some(black_box(&input)), &names).unwrap();
                let x = model.input_against(&x, &reference.0).unwrap();
                let s = model.member_scores(&x).unwrap();
                model.compare_scores(&s, &reference.1, Some(&x))
            })
        });
    }
    g.finish();
}

criterion_group!(benches, bench_inference, bench_launch_features, bench_stage);
criterion_main!(benches);
