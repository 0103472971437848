//! The shipped ranker as a reward: it orders fixture pairs as the H200 timings do, and the
//! training pipeline on the real dataset works end to end.

mod common;

use cudaperf::pipeline::{EvalOptions, Evaluator, Stage, Submission};
use cudaperf::reward::{Context, RankerReward, Reward, ShrunkRankerReward};

fn evaluator() -> Evaluator {
    // The default: the model embedded in the library, no file needed.
    let opts = EvalOptions {
        no_gpu: true,
        ..Default::default()
    };
    Evaluator::new(opts).expect("evaluator")
}

/// Guards the shipped model: on clearly separated pairs (>= 2x apart in the committed
/// timings) of several tasks, the faster implementation gets the higher RankerReward.
#[test]
fn ranker_reward_orders_fixture_pairs_like_the_timings() {
    let e = evaluator();
    let ds = cudaperf::dataset::Dataset::load(common::fixture("tasks")).expect("dataset");
    let t =
        cudaperf::timings::Timings::load(common::fixture("timings/h200.json")).expect("timings");
    let cases = [
        ("vector_add", "vectorized_float4", "strided_blocks"),
        ("transpose", "smem_tiled_padded", "reference"),
    ];
    for (task_id, fast, slow) in cases {
        let task = ds.task(task_id).expect("task");
        let tt = &t.tasks[task_id].implementations;
        assert!(
            tt[fast].raw_speedup.unwrap() > tt[slow].raw_speedup.unwrap(),
            "{task_id}: timings disagree with the case"
        );
        let ctx = Context::new(task, &e);
        let score = |name: &str| {
            let sub =
                Submission::from_source(task.implementation(name).expect("impl").source.clone());
            RankerReward.score(&ctx, &sub).expect("ranker reward").value
        };
        let (f, s) = (score(fast), score(slow));
        assert!(f > s, "{task_id}: {fast} {f} should beat {slow} {s}");
        assert!((-1.0..=1.0).contains(&f) && (-1.0..=1.0).contains(&s));
    }
}

/// The reference scored against itself is exactly "no preference".
#[test]
fn reference_against_itself_is_zero() {
    let e = evaluator();
    let task = common::vector_add();
    let ctx = Context::new(&task, &e);
    let v = RankerReward
        .score(
            &ctx,
            &Submission::from_source(task.reference.source.clone()),
        )
        .expect("score")
        .value;
    assert!(v.abs() < 1e-6, "{v}");
}

/// The embedded model is the shipped folder's model, bit for bit.
#[test]
fn embedded_model_is_the_shipped_folder() {
    let embedded = cudaperf::ranker::TrainedRanker::shipped().expect("embedded model");
    let folder = cudaperf::ranker::TrainedRanker::load_unchecked(common::fixture("models/ranker"))
        .expect("folder");
    assert_eq!(embedded, folder);
    let e = evaluator();
    let task = common::vector_add();
    let eval = Context::new(&task, &e).evaluate(
        &Submission::from_source(task.reference.source.clone()),
        Stage::Ranker,
    );
    let r = eval.stages.ranker.expect("ranker stage");
    assert_eq!(r.model(), cudaperf::ranker::SHIPPED_ORIGIN);
    assert!(r.error().is_none(), "{r:?}");
}

/// Without a readable model the ranker stage says why and the reward is Unavailable, not a
/// number.
#[test]
fn missing_model_is_unavailable() {
    let e = Evaluator::new(EvalOptions {
        no_gpu: true,
        ranker_model: Some(std::env::temp_dir().join("no-such-ranker-model")),
        ..Default::default()
    })
    .expect("evaluator");
    let task = common::vector_add();
    let ctx = Context::new(&task, &e);
    let sub = Submission::from_source(task.reference.source.clone());
    let err = RankerReward.score(&ctx, &sub).expect_err("no model");
    assert!(err.to_string().contains("ranker"), "{err}");
    let eval = ctx.evaluate(&sub, Stage::Ranker);
    assert!(eval
        .stages
        .ranker
        .as_ref()
        .and_then(|r| r.error())
        .is_some());
}

/// The real pipeline: ranking data from the dataset and timings, a short training run, and a
/// cross-validation that beats chance.
#[test]
fn trains_on_the_dataset() {
    let ds = cudaperf::dataset::Dataset::load(common::fixture("tasks")).expect("dataset");
    let t =
        cudaperf::timings::Timings::load(common::fixture("timings/h200.json")).expect("timings");
    let data = cudaperf::ranker::ranking_data(&ds, &t, &cudaperf::ranker::FeatureSet::default())
        .expect("ranking data");
    assert!(data.pairs.len() >= 100 && data.samples.len() >= 100);
    let config = cudaperf::ranker::RankerConfig::new().with_epochs(60);
    let report = cudaperf::ranker::cross_validate(&data, 3, &config).expect("cv");
    let acc = report.accuracy.overall.accuracy.expect("accuracy");
    assert!(acc > 0.6, "held-out pairwise accuracy {acc}");
}

/// A model with launch-plan features in the pipeline: the ranker stage resolves the
/// candidate's and the reference's plans on the timed config; a candidate whose plan does
/// not resolve makes the reward unavailable with the reason, never a panic or a number.
#[test]
fn pipeline_scores_with_launch_features() {
    use cudaperf::ranker::{ranking_data, train, FeatureSet, RankerConfig};
    let ds = cudaperf::dataset::Dataset::load(common::fixture("tasks")).expect("dataset");
    let t =
        cudaperf::timings::Timings::load(common::fixture("timings/h200.json")).expect("timings");
    let set = FeatureSet {
        launch: true,
        traffic: true,
        ngram_buckets: 0,
    };
    let data = ranking_data(&ds, &t, &set).expect("ranking data");
    let (model, _) = train(&data, &RankerConfig::new().with_epochs(5), |_| {}).expect("train");
    let e = Evaluator::new(EvalOptions {
        no_gpu: true,
        ..Default::default()
    })
    .expect("evaluator")
    .with_ranker(model);
    let task = ds.task("histogram_256").expect("task");
    let ctx = Context::new(task, &e);
    let reference = Submission::from_source(task.reference.source.clone());
    let v = RankerReward.score(&ctx, &reference).expect("score").value;
    assert!(v.abs() < 1e-6, "{v}");
    let other = task.implementation("shared_privatized").expect("impl");
    let v = RankerReward
        .score(&ctx, &Submission::from_source(other.source.clone()))
        .expect("score")
        .value;
    assert!(
        v.is_finite() && (-1.0..=1.0).contains(&v) && v != 0.0,
        "{v}"
    );

    // Checking only the first config: the ranker still reads the plan of the timed one.
    let mut few = EvalOptions {
        no_gpu: true,
        ..Default::default()
    };
    few.exec.max_configs = Some(1);
    let e1 = Evaluator::new(few)
        .expect("evaluator")
        .with_ranker(e.ranker().expect("model").as_ref().clone());
    let ctx1 = Context::new(task, &e1);
    let sub = Submission::from_source(other.source.clone());
    let plan = ctx1.evaluate(&sub, Stage::Ranker).plan.expect("plan");
    assert_eq!(plan.configs, vec![0]);
    assert_ne!(cudaperf::ranker::TimedPlan::timed_config(task), Some(0));
    let v1 = RankerReward.score(&ctx1, &sub).expect("score").value;
    assert_eq!(v1, v);

    let broken = task
        .reference
        .source
        .replace("grid=(ceil_div(n, 256))", "grid=(n - n)");
    assert_ne!(broken, task.reference.source);
    let eval = ctx.evaluate(&Submission::from_source(broken.clone()), Stage::Ranker);
    let err = eval
        .stages
        .ranker
        .as_ref()
        .and_then(|r| r.error())
        .expect("ranker error");
    assert!(err.contains("launch-plan"), "{err}");
    assert!(RankerReward
        .score(&ctx, &Submission::from_source(broken))
        .is_err());
}

/// Guards `ShrunkRankerReward`: on real implementations scored by the shipped 5-member
/// ensemble it is the ranker term times `max(0, 1 − uncertainty / scale)`, never larger in
/// magnitude and never of the other sign; a scale below the uncertainty gives 0, a stage
/// without an uncertainty is not shrunk, and a scale that is not finite and > 0 is refused.
#[test]
fn shrunk_ranker_term_fades_with_the_ensembles_disagreement() {
    let e = evaluator();
    let ds = cudaperf::dataset::Dataset::load(common::fixture("tasks")).expect("dataset");
    let shrunk = ShrunkRankerReward::default();
    assert_eq!(shrunk.scale(), 0.15);
    let mut uncertain = 0;
    for (task_id, name) in [
        ("vector_add", "strided_blocks"),
        ("transpose", "smem_tiled_padded"),
        ("layernorm", "block_per_row_smem"),
        ("prefix_sum", "blelloch_padded_smem"),
    ] {
        let task = ds.task(task_id).expect("task");
        let ctx = Context::new(task, &e);
        let sub = Submission::from_source(task.implementation(name).expect("impl").source.clone());
        let mut eval = ctx.evaluate(&sub, Stage::Ranker);
        let plain = RankerReward.value(&ctx, &eval).expect("ranker");
        let value = shrunk.value(&ctx, &eval).expect("shrunk");
        let scores = eval
            .stages
            .ranker
            .as_ref()
            .and_then(|r| r.scores())
            .expect("scored")
            .clone();
        let u = scores
            .uncertainty
            .expect("a 5-member model reports its uncertainty");
        assert!((0.0..=0.5).contains(&u), "{task_id}/{name}: {u}");
        uncertain += usize::from(u > 0.0);
        let want = plain * (1.0 - u / 0.15).max(0.0);
        assert!(
            (value - want).abs() < 1e-12,
            "{task_id}/{name}: {value} vs {want}"
        );
        assert!(value.abs() <= plain.abs() && value * plain >= 0.0);
        if u > 0.0 {
            let tight = ShrunkRankerReward::new(u / 2.0).unwrap();
            assert_eq!(tight.value(&ctx, &eval).unwrap(), 0.0);
        }
        // A report written before uncertainties existed: the plain term.
        let mut old = scores.clone();
        old.uncertainty = None;
        eval.stages.ranker = Some(cudaperf::pipeline::report::RankerStage::Scored(old));
        assert_eq!(shrunk.value(&ctx, &eval).unwrap(), plain);
    }
    assert!(uncertain > 0, "the ensemble never disagreed");
    for bad in [0.0, -0.1, f64::NAN, f64::INFINITY] {
        assert!(ShrunkRankerReward::new(bad).is_none(), "{bad}");
    }
}
