//! Integration tests of the pairwise ranker: real burn training on synthetic data, nothing
//! mocked.

use std::collections::BTreeSet;
use std::time::Instant;

use burn::tensor::Device;
use cudaperf::ranker::{
    cross_validate, cross_validate_scorer, cv_folds, pairwise_accuracy, plot_history,
    ranker_reward_value, syntax_ngram_names, syntax_ngrams, synthetic, train, Pair, RankerConfig,
    RankerError, RankingData, Sample, TrainedRanker, METADATA_FILE, WEIGHTS_FILE,
};

/// Small, quick configuration for tests that do not measure quality.
fn quick() -> RankerConfig {
    RankerConfig::new().with_epochs(15)
}

/// Pairwise accuracy of `ranker` on the pairs of `test` tasks (all of them unseen).
fn held_out_accuracy(ranker: &TrainedRanker, test: &RankingData) -> f64 {
    let scores: Vec<f64> = test
        .samples
        .iter()
        .map(|s| f64::from(ranker.score(&s.features).unwrap()))
        .collect();
    let all: Vec<usize> = (0..test.pairs.len()).collect();
    let acc = pairwise_accuracy(test, &all, &scores).unwrap();
    acc.overall.accuracy.unwrap()
}

// Guards the core claim: the ranker learns the one feature that decides speed, and
// generalises to tasks it never saw. Also measures a fixture-sized run (50 tasks × 4 impls =
// 300 pairs, 60 features) against the 60 s budget.
#[test]
fn learns_the_deciding_feature_on_unseen_tasks_quickly() {
    let data = synthetic::decisive_feature(50, 4, 60, 11);
    assert_eq!(data.pairs.len(), 300);
    let start = Instant::now();
    let mut epochs_seen = 0;
    // One member: the 60 s budget is for one model (the shipped ensemble trains 5).
    let config = RankerConfig {
        ensemble: 1,
        ..RankerConfig::new()
    };
    let (ranker, history) = train(&data, &config, |_| epochs_seen += 1).unwrap();
    let secs = start.elapsed().as_secs_f64();
    eprintln!(
        "fixture-sized training: {secs:.2} s, {} epochs (best {}), stopped early: {}",
        history.epochs.len(),
        history.best_epoch,
        history.stopped_early
    );
    // The callback sees every epoch of every ensemble member.
    let all_epochs = history.epochs.len()
        + history
            .members
            .iter()
            .map(|m| m.epochs.len())
            .sum::<usize>();
    assert_eq!(epochs_seen, all_epochs);
    assert!(secs < 60.0, "training took {secs:.1} s");

    // Fresh tasks from another seed: no task of these was trained on.
    let test = synthetic::decisive_feature(30, 4, 60, 999);
    let acc = held_out_accuracy(&ranker, &test);
    eprintln!("held-out pairwise accuracy: {acc:.3}");
    assert!(acc > 0.95, "held-out accuracy {acc}");

    // The validation split is by task: no task on both sides.
    let s = ranker.summary();
    let train: BTreeSet<_> = s.train_tasks.iter().collect();
    assert!(!s.val_tasks.is_empty());
    assert!(s.val_tasks.iter().all(|t| !train.contains(t)));
}

// Guards reproducibility: the same seed gives bit-identical scores, another seed does not.
#[test]
fn same_seed_gives_identical_scores() {
    let data = synthetic::decisive_feature(10, 4, 8, 5);
    let config = quick().with_dropout(0.1);
    let (a, _) = train(&data, &config, |_| {}).unwrap();
    let (b, _) = train(&data, &config, |_| {}).unwrap();
    let (c, _) = train(&data, &config.clone().with_seed(7), |_| {}).unwrap();
    let rows: Vec<Vec<f32>> = data.samples.iter().map(|s| s.features.clone()).collect();
    let (sa, sb, sc) = (
        a.score_batch(&rows).unwrap(),
        b.score_batch(&rows).unwrap(),
        c.score_batch(&rows).unwrap(),
    );
    assert_eq!(sa, sb);
    assert_ne!(sa, sc);
}

// Guards the fast inference path: the plain-Rust forward equals burn's within 1e-5.
#[test]
fn plain_forward_matches_burn() {
    let data = synthetic::decisive_feature(10, 4, 12, 3);
    let (ranker, _) = train(&data, &quick(), |_| {}).unwrap();
    let rows: Vec<Vec<f32>> = data.samples.iter().map(|s| s.features.clone()).collect();
    let plain = ranker.score_batch(&rows).unwrap();
    let burn = ranker.score_batch_on(&Device::default(), &rows).unwrap();
    assert_eq!(plain.len(), burn.len());
    for (p, b) in plain.iter().zip(&burn) {
        assert!(
            (p - b).abs() <= 1e-5 * (1.0 + b.abs()),
            "plain {p} vs burn {b}"
        );
    }
    assert_eq!(ranker.score(&rows[3]).unwrap(), plain[3]);
}

// Guards the model format: save → load gives identical scores and metadata.
#[test]
fn save_load_roundtrip_is_exact() {
    let data = synthetic::decisive_feature(8, 4, 6, 2);
    let (ranker, _) = train(&data, &quick(), |_| {}).unwrap();
    let dir = tempfile::tempdir().unwrap();
    ranker.save(dir.path()).unwrap();
    assert!(dir.path().join(METADATA_FILE).is_file());
    assert!(dir.path().join(WEIGHTS_FILE).is_file());
    let loaded = TrainedRanker::load(dir.path(), &data.feature_names).unwrap();
    // Field by field, so that a failure names the part that changed (no model dump).
    assert!(
        loaded.feature_names() == ranker.feature_names(),
        "feature names differ"
    );
    assert!(
        loaded.normalizer() == ranker.normalizer(),
        "normalizer differs"
    );
    assert!(loaded.weights() == ranker.weights(), "weights differ");
    assert!(loaded.config() == ranker.config(), "config differs");
    // serde_json's default float parser may land one ulp off on f64 (float_roundtrip
    // would fix it at the price of rebuilding burn), so accuracy is compared to 1e-12.
    let (a, b) = (loaded.summary(), ranker.summary());
    let acc_close = match (a.best_val_accuracy, b.best_val_accuracy) {
        (Some(x), Some(y)) => (x - y).abs() < 1e-12,
        (x, y) => x == y,
    };
    assert!(
        acc_close
            && a.epochs_run == b.epochs_run
            && a.best_epoch == b.best_epoch
            && a.best_val_loss == b.best_val_loss
            && a.train_tasks == b.train_tasks
            && a.val_tasks == b.val_tasks
            && a.train_pairs == b.train_pairs
            && a.val_pairs == b.val_pairs,
        "summary differs: {a:?} vs {b:?}"
    );
    for s in &data.samples {
        assert_eq!(
            loaded.score(&s.features).unwrap(),
            ranker.score(&s.features).unwrap()
        );
    }
    let p = loaded
        .prob_faster(&data.samples[0].features, &data.samples[1].features)
        .unwrap();
    assert!((0.0..=1.0).contains(&p));
}

// Guards the typed error on a model trained for other features (never a panic, and the
// message names the differing position).
#[test]
fn load_with_other_feature_names_is_a_typed_error() {
    let data = synthetic::decisive_feature(6, 3, 4, 2);
    let (ranker, _) = train(&data, &quick(), |_| {}).unwrap();
    let dir = tempfile::tempdir().unwrap();
    ranker.save(dir.path()).unwrap();
    let mut other = data.feature_names.clone();
    other[2] = "smem_bytes".into();
    let err = TrainedRanker::load(dir.path(), &other).unwrap_err();
    assert!(matches!(err, RankerError::FeatureMismatch { .. }), "{err}");
    let msg = err.to_string();
    assert!(
        msg.contains("feature 2") && msg.contains("smem_bytes"),
        "{msg}"
    );
    let shorter = &data.feature_names[..3];
    assert!(matches!(
        TrainedRanker::load(dir.path(), shorter),
        Err(RankerError::FeatureMismatch { .. })
    ));
}

// Guards loading of damaged model directories: errors, not panics.
#[test]
fn damaged_model_files_are_errors() {
    let data = synthetic::decisive_feature(6, 3, 4, 2);
    let (ranker, _) = train(&data, &quick(), |_| {}).unwrap();
    let names = &data.feature_names;

    let missing = tempfile::tempdir().unwrap();
    assert!(matches!(
        TrainedRanker::load(missing.path(), names),
        Err(RankerError::Io { .. })
    ));

    let dir = tempfile::tempdir().unwrap();
    ranker.save(dir.path()).unwrap();
    let weights = dir.path().join(WEIGHTS_FILE);
    let bytes = std::fs::read(&weights).unwrap();
    std::fs::write(&weights, &bytes[..bytes.len() / 2]).unwrap();
    let err = TrainedRanker::load(dir.path(), names).unwrap_err();
    assert!(
        matches!(
            err,
            RankerError::Record { .. } | RankerError::InvalidModel { .. }
        ),
        "{err}"
    );

    let meta = dir.path().join(METADATA_FILE);
    let text = std::fs::read_to_string(&meta).unwrap();
    std::fs::write(
        &meta,
        text.replace("\"format_version\": 4", "\"format_version\": 99"),
    )
    .unwrap();
    let err = TrainedRanker::load(dir.path(), names).unwrap_err();
    assert!(err.to_string().contains("format_version"), "{err}");
    std::fs::write(&meta, "{ not json").unwrap();
    assert!(matches!(
        TrainedRanker::load(dir.path(), names),
        Err(RankerError::Json { .. })
    ));
}

// Guards cross-validation: folds partition the tasks, every held-out pair is counted once,
// the breakdowns add up, and a fixed scorer is evaluated on the same folds.
#[test]
fn cross_validate_runs_with_task_groups() {
    let data = synthetic::decisive_feature(15, 4, 8, 21);
    let config = RankerConfig::new().with_epochs(60);
    let report = cross_validate(&data, 5, &config).unwrap();
    assert_eq!(report.folds.len(), 5);
    assert_eq!(report.chance, 0.5);
    let folds = cv_folds(&data, 5, config.seed).unwrap();
    let mut seen = BTreeSet::new();
    for (f, fold) in report.folds.iter().zip(&folds) {
        assert_eq!(&f.test_tasks, fold);
        for t in &f.test_tasks {
            assert!(seen.insert(t.clone()), "task {t} in two folds");
        }
        let training = f.training.as_ref().unwrap();
        assert!(training.train_tasks.iter().all(|t| !fold.contains(t)));
        assert!(training.val_tasks.iter().all(|t| !fold.contains(t)));
    }
    assert_eq!(seen.len(), 15);
    let acc = &report.accuracy;
    let usable = data
        .pairs
        .iter()
        .filter(|p| p.log_ratio >= config.min_log_ratio)
        .count();
    assert_eq!(acc.overall.pairs, usable);
    assert_eq!(
        acc.ratio_at_least_2x.pairs + acc.ratio_below_2x.pairs,
        acc.overall.pairs
    );
    assert_eq!(
        acc.by_kind.values().map(|a| a.pairs).sum::<usize>(),
        acc.overall.pairs
    );
    assert_eq!(acc.by_kind.len(), 2);
    assert!(acc.overall.accuracy.unwrap() > 0.8, "{:?}", acc.overall);

    // The true rule scores 100 %, its negation 0 %, a constant 50 % (ties count ½).
    let oracle =
        cross_validate_scorer(&data, 5, &config, "oracle", |s| f64::from(s.features[0])).unwrap();
    assert_eq!(oracle.accuracy.overall.accuracy, Some(1.0));
    assert_eq!(oracle.accuracy.overall.pairs, usable);
    let anti =
        cross_validate_scorer(&data, 5, &config, "anti", |s| -f64::from(s.features[0])).unwrap();
    assert_eq!(anti.accuracy.overall.accuracy, Some(0.0));
    let flat = cross_validate_scorer(&data, 5, &config, "flat", |_| 1.0).unwrap();
    assert_eq!(flat.accuracy.overall.accuracy, Some(0.5));
    let json = serde_json::to_string(&report).unwrap();
    assert!(json.contains("ratio_at_least_2x"));
}

// Guards `Pair::train_only` (extra data such as a measured program table): such pairs train
// the model but are never a held-out test pair, a validation pair or a calibrated
// comparison, so cross-validation reports exactly the other pairs.
#[test]
fn train_only_pairs_train_but_are_never_validated_or_tested() {
    let mut data = synthetic::decisive_feature(15, 4, 8, 21);
    for (i, p) in data.pairs.iter_mut().enumerate() {
        p.train_only = i % 2 == 0;
    }
    let config = RankerConfig::new().with_epochs(40);
    let usable = |data: &RankingData| {
        data.pairs
            .iter()
            .filter(|p| !p.train_only && p.log_ratio >= config.min_log_ratio)
            .count()
    };
    let report = cross_validate(&data, 5, &config).unwrap();
    assert_eq!(report.accuracy.overall.pairs, usable(&data));
    assert!(usable(&data) > 0 && usable(&data) < data.pairs.len());
    assert!(!report.held_out_pairs.is_empty());
    for &(i, _, _) in &report.held_out_pairs {
        assert!(!data.pairs[i].train_only, "train-only pair {i} was tested");
    }
    let oracle =
        cross_validate_scorer(&data, 5, &config, "oracle", |s| f64::from(s.features[0])).unwrap();
    assert_eq!(oracle.accuracy.overall.pairs, usable(&data));

    // Only train-only pairs: training still learns the deciding feature (nothing to validate
    // on, so every epoch runs), judged on tasks it never saw.
    for p in &mut data.pairs {
        p.train_only = true;
    }
    let (ranker, _) = train(&data, &config, |_| {}).unwrap();
    let unseen = synthetic::decisive_feature(6, 4, 8, 99);
    assert!(held_out_accuracy(&ranker, &unseen) > 0.8);
    // Serialised without the field when false, so older data files read back as before.
    let json = serde_json::to_string(&unseen.pairs[0]).unwrap();
    assert!(!json.contains("train_only"), "{json}");
    let back: Pair = serde_json::from_str(r#"{"fast":0,"slow":1,"log_ratio":0.5}"#).unwrap();
    assert!(!back.train_only);
}

fn tiny() -> RankingData {
    let sample = |task: &str, f: [f32; 2]| Sample {
        task: task.into(),
        kind: "c2cuda".into(),
        name: format!("{task}_{}", f[0]),
        features: f.to_vec(),
    };
    RankingData {
        feature_names: vec!["a".into(), "b".into()],
        samples: vec![
            sample("t0", [1.0, 0.0]),
            sample("t0", [0.0, 1.0]),
            sample("t1", [1.0, 1.0]),
            sample("t1", [0.0, 0.0]),
        ],
        pairs: vec![
            Pair {
                fast: 0,
                slow: 1,
                log_ratio: 0.5,
                train_only: false,
            },
            Pair {
                fast: 2,
                slow: 3,
                log_ratio: 0.7,
                train_only: false,
            },
        ],
    }
}

/// Table-driven input errors: each case breaks one thing and expects its typed error.
macro_rules! input_error_tests {
    ($($name:ident: $mutate:expr => $pattern:pat,)*) => {$(
        #[test]
        fn $name() {
            let mut data = tiny();
            #[allow(clippy::redundant_closure_call)]
            ($mutate)(&mut data);
            let err = train(&data, &quick(), |_| {}).unwrap_err();
            assert!(matches!(err, $pattern), "unexpected error: {err}");
            // Same checks on the evaluation path.
            let err = cross_validate(&data, 2, &quick()).unwrap_err();
            assert!(matches!(err, $pattern), "unexpected error: {err}");
        }
    )*};
}

input_error_tests! {
    empty_pair_set: |d: &mut RankingData| d.pairs.clear() => RankerError::NoPairs { .. },
    all_pairs_are_ties: |d: &mut RankingData| for p in &mut d.pairs { p.log_ratio = 0.01 }
        => RankerError::NoPairs { .. },
    nan_feature: |d: &mut RankingData| d.samples[2].features[1] = f32::NAN
        => RankerError::NonFiniteFeature { index: 2, feature_index: 1, .. },
    wrong_feature_count: |d: &mut RankingData| d.samples[1].features.push(3.0)
        => RankerError::FeatureCount { index: 1, expected: 2, found: 3, .. },
    no_feature_names: |d: &mut RankingData| d.feature_names.clear() => RankerError::NoFeatures,
    pair_out_of_range: |d: &mut RankingData| d.pairs[1].slow = 9
        => RankerError::PairIndex { pair: 1, index: 9, .. },
    pair_across_tasks: |d: &mut RankingData| d.pairs[0].slow = 2
        => RankerError::PairAcrossTasks { pair: 0, .. },
    negative_log_ratio: |d: &mut RankingData| d.pairs[0].log_ratio = -0.2
        => RankerError::InvalidLogRatio { pair: 0, .. },
    self_pair: |d: &mut RankingData| d.pairs[0].slow = 0 => RankerError::SelfPair { pair: 0, .. },
}

// Guards config validation and fold-count checks (typed errors naming the field).
#[test]
fn bad_config_and_folds_are_typed_errors() {
    let data = tiny();
    let err = train(&data, &quick().with_learning_rate(-1.0), |_| {}).unwrap_err();
    assert!(
        matches!(
            err,
            RankerError::InvalidConfig {
                field: "learning_rate",
                ..
            }
        ),
        "{err}"
    );
    for w in [-0.5, f32::NAN] {
        let err = train(&data, &quick().with_estimate_weight(w), |_| {}).unwrap_err();
        assert!(
            matches!(
                err,
                RankerError::InvalidConfig {
                    field: "estimate_weight",
                    ..
                }
            ),
            "{err}"
        );
    }
    let err = train(&data, &quick().with_hidden(vec![8, 0]), |_| {}).unwrap_err();
    assert!(matches!(
        err,
        RankerError::InvalidConfig {
            field: "hidden",
            ..
        }
    ));
    let err = cross_validate(&data, 3, &quick()).unwrap_err();
    assert!(
        matches!(
            err,
            RankerError::Folds {
                tasks: 2,
                k_folds: 3
            }
        ),
        "{err}"
    );
}

// Guards scoring input checks: wrong length and NaN are errors, not panics or NaN scores.
#[test]
fn scoring_rejects_bad_vectors() {
    let data = synthetic::decisive_feature(6, 3, 4, 2);
    let (ranker, _) = train(&data, &quick(), |_| {}).unwrap();
    assert!(matches!(
        ranker.score(&[1.0, 2.0]),
        Err(RankerError::InputLength {
            expected: 4,
            found: 2,
            ..
        })
    ));
    let err = ranker.score(&[0.0, f32::NAN, 0.0, 0.0]).unwrap_err();
    assert!(err.to_string().contains("`f1`"), "{err}");
    assert!(matches!(
        ranker.score_batch(&[vec![0.0; 4], vec![0.0; 5]]),
        Err(RankerError::InputLength { index: 1, .. })
    ));
}

// Guards the reward mapping used by the unified reward: bounded, zero at equality.
#[test]
fn reward_value_is_bounded() {
    assert_eq!(ranker_reward_value(0.3, 0.3), 0.0);
    assert!(ranker_reward_value(5.0, 0.0) > 0.9);
    assert!(ranker_reward_value(-5.0, 0.0) < -0.9);
}

// Guards the optional n-gram input: training accepts features with n-grams appended.
#[test]
fn training_accepts_syntax_ngram_features() {
    let kernels: [&[u8]; 2] = [
        b"__global__ void k(float* x, int n){ int i = blockIdx.x*blockDim.x+threadIdx.x; if(i<n) x[i]*=2.f; }",
        b"__global__ void k(float* x, int n){ for(int i=threadIdx.x;i<n;i+=blockDim.x*gridDim.x){ x[i]*=2.f; } }",
    ];
    let mut data = synthetic::decisive_feature(8, 4, 4, 9);
    data.feature_names.extend(syntax_ngram_names(32));
    for (i, s) in data.samples.iter_mut().enumerate() {
        s.features
            .extend(syntax_ngrams(kernels[i % 2], 32).unwrap());
    }
    let (ranker, _) = train(&data, &quick(), |_| {}).unwrap();
    assert_eq!(ranker.feature_names().len(), 36);
}

// Guards the PNG output (bundled font: no system font needed).
#[test]
fn plot_history_writes_a_png() {
    let data = synthetic::decisive_feature(10, 4, 6, 4);
    let (_, history) = train(&data, &RankerConfig::new().with_epochs(40), |_| {}).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let png = dir.path().join("history.png");
    plot_history(&history, &png).unwrap();
    let bytes = std::fs::read(&png).unwrap();
    assert!(bytes.len() > 1000);
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
    if let Ok(keep) = std::env::var("CUDAPERF_KEEP_PLOT") {
        std::fs::copy(&png, keep).unwrap();
    }
    let empty = cudaperf::ranker::TrainingHistory::default();
    assert!(matches!(
        plot_history(&empty, dir.path().join("x.png")),
        Err(RankerError::Plot { .. })
    ));
    assert!(matches!(
        plot_history(&history, dir.path().join("no/such/dir.png")),
        Err(RankerError::Plot { .. })
    ));
}

// Guards sharing one model across reward-server threads.
#[test]
fn trained_ranker_is_send_and_sync() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<TrainedRanker>();
    assert_send_sync::<cudaperf::ranker::CvReport>();
}

// ---- Launch-plan features on real fixtures ----

mod launch {
    use cudaperf::analysis::analyze;
    use cudaperf::candidate::PlanLimits;
    use cudaperf::dataset::Dataset;
    use cudaperf::ranker::{
        features_for, launch_features_named, ranking_data, train, FeatureSet, RankerConfig,
        RankerError, TimedPlan, TrainedRanker, LAUNCH_FEATURE_NAMES, LAUNCH_PREFIX, REFERENCE_SMS,
    };
    use cudaperf::task::Task;
    use cudaperf::timings::Timings;
    use std::collections::HashMap;
    use std::path::PathBuf;

    fn fixture(rel: &str) -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("fixtures")
            .join(rel)
    }

    fn task(id: &str) -> Task {
        Task::load(fixture("tasks").join(id)).expect("task")
    }

    /// The launch features of `source` on `task`'s timed config, by name.
    fn of(task: &Task, source: &str) -> HashMap<&'static str, f32> {
        let plan = TimedPlan::of_source(task, source, &PlanLimits::default(), "test").unwrap();
        let f = launch_features_named(
            &plan.input(task, source),
            &analyze(source.as_bytes()),
            "test",
        )
        .unwrap();
        let names: Vec<&str> = f.iter().map(|(n, _)| *n).collect();
        assert_eq!(names, LAUNCH_FEATURE_NAMES);
        assert!(f.iter().all(|(_, v)| v.is_finite()), "{f:?}");
        f.into_iter().collect()
    }

    fn imp(task: &Task, name: &str) -> String {
        task.implementation(name)
            .expect("implementation")
            .source
            .clone()
    }

    /// One block of 1024 threads walks the whole array (the "one SM works" shape).
    const SINGLE_BLOCK_SCAN: &str = r#"
// @launch scan_one_block grid=(1) block=(1024)
extern "C" __global__ void scan_one_block(const float* __restrict__ x, float* __restrict__ y, int n) {
    __shared__ float part[1024];
    float carry = 0.0f;
    for (int base = 0; base < n; base += 1024) {
        int i = base + threadIdx.x;
        part[threadIdx.x] = i < n ? x[i] : 0.0f;
        __syncthreads();
        for (int o = 1; o < 1024; o <<= 1) {
            float v = threadIdx.x >= o ? part[threadIdx.x - o] : 0.0f;
            __syncthreads();
            part[threadIdx.x] += v;
            __syncthreads();
        }
        if (i < n) y[i] = carry + part[threadIdx.x];
        carry += part[1023];
        __syncthreads();
    }
}
"#;

    // Guards the concrete coalescing probe: the batchnorm variant whose thread index runs
    // over channels first (`i % c`, planes h*w apart) touches 32 sectors per warp access,
    // 8 times the 4 a coalesced float access needs; the reference's accesses are coalesced.
    #[test]
    fn channel_fastest_mapping_touches_eight_times_the_sectors() {
        let t = task("batchnorm2d_inference");
        let slow = of(&t, &imp(&t, "channel_major_strided"));
        let reference = of(&t, &t.reference.source);
        assert!(
            (slow["launch_sector_excess_max"] - 8f32.ln()).abs() < 1e-4,
            "{slow:?}"
        );
        // x and y are scattered; the four per-channel parameters (`running_mean[ch]`...) are
        // read by consecutive channels, so coalesced.
        assert!(slow["launch_sector_excess_mean"] > 0.5, "{slow:?}");
        assert!(reference["launch_sector_excess_max"] < 0.1, "{reference:?}");
    }

    // Guards the starved-grid signal: a one-block scan sits far below one block per SM and
    // sweeps the whole array in that launch; the multi-block reference's one-block pass
    // only touches the block sums.
    #[test]
    fn one_block_plans_are_far_below_one_block_per_sm() {
        let t = task("prefix_sum");
        let one = of(&t, SINGLE_BLOCK_SCAN);
        let one_block = (1.0f32 / REFERENCE_SMS as f32).ln();
        assert!(
            (one["launch_max_blocks_per_sm"] - one_block).abs() < 1e-5,
            "{one:?}"
        );
        assert_eq!(
            one["launch_min_blocks_per_sm"],
            one["launch_max_blocks_per_sm"]
        );
        assert!(
            (one["launch_small_grid_work"] - 2f32.ln()).abs() < 1e-5,
            "{one:?}"
        );
        // 33.5 M elements over 1024 threads: ~32 K serial elements per thread.
        assert!(one["launch_max_elements_per_thread"] > 10.0, "{one:?}");
        assert_eq!(one["launch_count"], 2f32.ln());

        let reference = of(&t, &imp(&t, "reference"));
        assert_eq!(reference["launch_count"], 4f32.ln()); // three launches
        assert!((reference["launch_min_blocks_per_sm"] - one_block).abs() < 1e-5);
        assert!(reference["launch_max_blocks_per_sm"] > 5.0, "{reference:?}");
        assert_eq!(reference["launch_small_grids"], 2f32.ln());
        assert!(reference["launch_small_grid_work"] < 0.01, "{reference:?}");
        // Two full passes (scan, add offsets) plus the block sums.
        assert!(
            (reference["launch_passes"] - 3f32.ln()).abs() < 0.01,
            "{reference:?}"
        );
        assert!(
            reference["launch_max_elements_per_thread"] < one["launch_max_elements_per_thread"]
        );
    }

    // Guards the atomics signal: the reference histogram does one global atomic per element;
    // the privatized one does its per-element atomics in shared memory and few global ones.
    #[test]
    fn histogram_atomics_per_element() {
        let t = task("histogram_256");
        let global = of(&t, &imp(&t, "reference"));
        let private = of(&t, &imp(&t, "shared_privatized"));
        assert!(
            (global["launch_global_atomics_per_element"] - 2f32.ln()).abs() < 0.01,
            "{global:?}"
        );
        assert_eq!(global["launch_shared_atomics_per_element"], 0.0);
        assert!(
            private["launch_global_atomics_per_element"] < 0.1,
            "{private:?}"
        );
        assert!(
            private["launch_shared_atomics_per_element"] > 0.5,
            "{private:?}"
        );
        // Both zero the bins with one block first.
        assert_eq!(global["launch_small_grids"], 2f32.ln());
    }

    // Guards the parallelism signal: one thread per element against a grid-stride loop over
    // 1056 blocks (8 per SM).
    #[test]
    fn grid_stride_against_one_thread_per_element() {
        let t = task("black_scholes");
        let flat = of(&t, &imp(&t, "reference"));
        let stride = of(&t, &imp(&t, "grid_stride_ilp2"));
        assert!(flat["launch_threads_per_element"].abs() < 0.01, "{flat:?}");
        assert!(stride["launch_threads_per_element"] < -1.0, "{stride:?}");
        assert!((stride["launch_max_blocks_per_sm"] - 8f32.ln()).abs() < 1e-5);
        assert!(stride["launch_max_elements_per_thread"] > flat["launch_max_elements_per_thread"]);
        assert_eq!(flat["launch_small_grids"], 0.0);
    }

    // Guards errors: a plan that cannot resolve on the timed config, or a model that needs a
    // plan scored without one, is a typed error naming the source, never a panic.
    #[test]
    fn unresolvable_plans_are_errors() {
        let t = task("black_scholes");
        let bad = imp(&t, "reference").replace("grid=(ceil_div(n, 256))", "grid=(n - n)");
        let err = TimedPlan::of_source(&t, &bad, &PlanLimits::default(), "bad.cu").unwrap_err();
        assert!(matches!(err, RankerError::LaunchPlan { .. }), "{err}");
        assert!(err.to_string().contains("bad.cu"), "{err}");
        let err = TimedPlan::of_source(&t, "__global__ void k() {}", &PlanLimits::default(), "x")
            .unwrap_err();
        assert!(matches!(err, RankerError::LaunchPlan { .. }), "{err}");
        let names = FeatureSet {
            launch: true,
            traffic: true,
            ngram_buckets: 0,
        }
        .names();
        let err = features_for(&imp(&t, "reference"), None, &names).unwrap_err();
        assert!(matches!(err, RankerError::LaunchPlan { .. }), "{err}");
    }

    // Guards the model with and without launch features: trained on the real dataset, saved,
    // loaded and scored with the same features; the two share samples and pairs.
    #[test]
    fn models_with_and_without_launch_features_round_trip() {
        let ds = Dataset::load(fixture("tasks")).unwrap();
        let timings = Timings::load(fixture("timings/h200.json")).unwrap();
        let set = FeatureSet {
            launch: true,
            traffic: false,
            ngram_buckets: 0,
        };
        let full = ranking_data(&ds, &timings, &set).unwrap();
        assert_eq!(FeatureSet::of(&full.feature_names), set);
        let plain = full.select_features(|n| !n.starts_with(LAUNCH_PREFIX));
        assert_eq!(plain.feature_names, FeatureSet::default().names());
        assert_eq!(
            full.feature_names.len(),
            plain.feature_names.len() + LAUNCH_FEATURE_NAMES.len()
        );
        assert_eq!(full.pairs, plain.pairs);
        let config = RankerConfig::new().with_epochs(5);
        for data in [&full, &plain] {
            let (model, _) = train(data, &config, |_| {}).unwrap();
            let dir = tempfile::tempdir().unwrap();
            model.save(dir.path()).unwrap();
            let loaded = TrainedRanker::load(dir.path(), &data.feature_names).unwrap();
            let launch = FeatureSet::of(loaded.feature_names()).launch;
            assert_eq!(launch, std::ptr::eq(data, &full));
            // Scoring from source (as `cudaperf rank` does) gives the training vector.
            let s = &data.samples[0];
            let t = ds.task(&s.task).unwrap();
            let source = &t.implementation(&s.name).unwrap().source;
            let plan = launch
                .then(|| TimedPlan::of_source(t, source, &PlanLimits::default(), &s.name).unwrap());
            let input = plan.as_ref().map(|p| p.input(t, source));
            let v = features_for(source, input.as_ref(), loaded.feature_names()).unwrap();
            assert_eq!(v, s.features);
            assert_eq!(loaded.score(&v).unwrap(), model.score(&s.features).unwrap());
        }
    }

    // Guards old models: the model shipped until 2026-12-01 (structural features only,
    // kept in fixtures/models/ranker-structural-2026-11-29) loads, needs no launch plan and
    // scores; the shipped model now needs one.
    #[test]
    fn old_model_file_still_loads_and_scores() {
        let old =
            TrainedRanker::load_unchecked(fixture("models/ranker-structural-2026-11-29")).unwrap();
        assert_eq!(FeatureSet::of(old.feature_names()), FeatureSet::default());
        let t = task("histogram_256");
        let (a, b) = (imp(&t, "reference"), imp(&t, "shared_privatized"));
        let fa = features_for(&a, None, old.feature_names()).unwrap();
        let fb = features_for(&b, None, old.feature_names()).unwrap();
        assert!(old.score(&fa).unwrap().is_finite() && old.score(&fb).unwrap().is_finite());
        assert_ne!(old.score(&fa).unwrap(), old.score(&fb).unwrap());
        let shipped = TrainedRanker::shipped().unwrap();
        assert!(FeatureSet::of(shipped.base_feature_names()).launch);
        let err = features_for(&a, None, shipped.base_feature_names()).unwrap_err();
        assert!(matches!(err, RankerError::LaunchPlan { .. }), "{err}");
    }
}

// ---- Reference context and boosted trees (model format 3) ----

mod context_and_trees {
    use cudaperf::dataset::Dataset;
    use cudaperf::ranker::{
        features_for, ranking_data, synthetic, train, FeatureSet, RankerConfig, RankerError,
        TrainedRanker, ESTIMATE_FEATURE, REFERENCE_SAMPLE, TREES_FILE,
    };
    use cudaperf::timings::Timings;
    use std::path::PathBuf;

    fn fixture(rel: &str) -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("fixtures")
            .join(rel)
    }

    // Guards the shipped model's shape: trained on the real dataset with reference context
    // and trees (structural features here, for speed), it saves its trees, loads scoring
    // bit-identically, builds its input from the kernel's and the reference's base features
    // exactly as training did, refuses a vector without the reference, and rejects tampered
    // or missing tree files with an error that names them.
    #[test]
    fn context_model_with_trees_round_trips_and_needs_the_reference() {
        let ds = Dataset::load(fixture("tasks")).unwrap();
        let timings = Timings::load(fixture("timings/h200.json")).unwrap();
        let base = ranking_data(&ds, &timings, &FeatureSet::default()).unwrap();
        let data = base.with_reference_context().unwrap();
        let config = RankerConfig::new()
            .with_epochs(3)
            .with_min_epochs(1)
            .with_ensemble(2)
            .with_trees(20);
        let (model, _) = train(&data, &config, |_| {}).unwrap();
        assert!(model.reference_context());
        assert_eq!(model.base_feature_names(), base.feature_names.as_slice());
        assert_eq!(model.trees().len(), 2);
        assert!(model.trees().iter().all(|t| t.trees.len() == 20));

        // A member's score is the mean of its MLP's and its trees'.
        let s = &data.samples[0];
        let xn = model.normalizer().apply(&s.features);
        let by_hand = 0.5 * (model.weights().forward(&xn) + model.trees()[0].score(&xn));
        let members = model.member_scores(&s.features).unwrap();
        assert!(
            (members[0] - by_hand).abs() < 1e-5,
            "{} vs {by_hand}",
            members[0]
        );

        // From source: base features, then the input against the task's reference.
        let i = data
            .samples
            .iter()
            .position(|s| s.name != REFERENCE_SAMPLE)
            .unwrap();
        let s = &data.samples[i];
        let t = ds.task(&s.task).unwrap();
        let names = model.base_feature_names();
        let f = features_for(&t.implementation(&s.name).unwrap().source, None, names).unwrap();
        let r = features_for(&t.reference.source, None, names).unwrap();
        assert_eq!(model.input_against(&f, &r).unwrap(), s.features);
        let err = model.member_scores(&f).unwrap_err();
        assert!(matches!(err, RankerError::NeedsReference { .. }), "{err}");
        assert!(err.to_string().contains("input_against"), "{err}");
        let err = model.input_against(&f, &r[1..]).unwrap_err();
        assert!(
            matches!(err, RankerError::InputLength { index: 1, .. }),
            "{err}"
        );

        let dir = tempfile::tempdir().unwrap();
        model.save(dir.path()).unwrap();
        assert!(dir.path().join(TREES_FILE).is_file());
        let loaded = TrainedRanker::load(dir.path(), &data.feature_names).unwrap();
        for s in data.samples.iter().step_by(37) {
            assert_eq!(
                loaded.member_scores(&s.features).unwrap(),
                model.member_scores(&s.features).unwrap()
            );
        }

        // Tampered tree files are invalid models naming trees.json.
        let trees_path = dir.path().join(TREES_FILE);
        let text = std::fs::read_to_string(&trees_path).unwrap();
        let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
        v.as_array_mut().unwrap().pop();
        std::fs::write(&trees_path, v.to_string()).unwrap();
        let err = TrainedRanker::load_unchecked(dir.path()).unwrap_err();
        assert!(matches!(err, RankerError::InvalidModel { .. }), "{err}");
        assert!(err.to_string().contains(TREES_FILE), "{err}");
        let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
        let first = &mut v[0]["trees"][0];
        if first["feature"][0].as_i64().unwrap() >= 0 {
            first["left"][0] = serde_json::json!(0);
        } else {
            first["feature"][0] = serde_json::json!(100_000);
            first["left"][0] = serde_json::json!(0);
        }
        std::fs::write(&trees_path, v.to_string()).unwrap();
        let err = TrainedRanker::load_unchecked(dir.path()).unwrap_err();
        assert!(err.to_string().contains("member 0: tree 0"), "{err}");
        std::fs::remove_file(&trees_path).unwrap();
        let err = TrainedRanker::load_unchecked(dir.path()).unwrap_err();
        assert!(matches!(err, RankerError::Io { .. }), "{err}");
        assert!(err.to_string().contains(TREES_FILE), "{err}");
    }

    // Guards the estimate term of format 4: the learned parts train as without it (same
    // seed, same scores), and every score moves by exactly `−w · e` with the estimate `e`
    // inside its training range; the weight survives a save and load, and a format-3 model
    // loads without the term.
    #[test]
    fn the_estimate_term_moves_every_score_by_its_weight() {
        let mut data = synthetic::decisive_feature(12, 4, 4, 5);
        // Feature 1 (noise on a 0.01 scale, in [−0.01, 0.01]) plays the estimate.
        data.feature_names[1] = ESTIMATE_FEATURE.into();
        let config = RankerConfig::new()
            .with_epochs(3)
            .with_min_epochs(0)
            .with_ensemble(2)
            .with_trees(5);
        let (plain, _) = train(&data, &config.clone().with_estimate_weight(0.0), |_| {}).unwrap();
        let (with, _) = train(&data, &config.with_estimate_weight(0.5), |_| {}).unwrap();
        let a = data.samples[0].features.clone();
        let mut b = a.clone();
        b[1] = a[1] + if a[1] > 0.0 { -0.004 } else { 0.004 };
        let margin = |m: &TrainedRanker| m.score(&a).unwrap() - m.score(&b).unwrap();
        let moved = margin(&with) - margin(&plain);
        assert!((moved + 0.5 * (a[1] - b[1])).abs() < 1e-5, "{moved}");
        let dir = tempfile::tempdir().unwrap();
        with.save(dir.path()).unwrap();
        let back = TrainedRanker::load_unchecked(dir.path()).unwrap();
        assert_eq!(back.config().estimate_weight, 0.5);
        assert_eq!(back.score(&a).unwrap(), with.score(&a).unwrap());
        // A format-3 file: the held-out ranker's, as written before format 4 (no
        // `estimate_weight` in its configuration).
        let v3_dir = tempfile::tempdir().unwrap();
        let heldout = fixture("models/ranker-heldout-rl");
        for f in std::fs::read_dir(&heldout).unwrap() {
            let f = f.unwrap().path();
            std::fs::copy(&f, v3_dir.path().join(f.file_name().unwrap())).unwrap();
        }
        let meta_path = v3_dir.path().join("ranker.json");
        let mut meta: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&meta_path).unwrap()).unwrap();
        meta["format_version"] = serde_json::json!(3);
        meta["config"]
            .as_object_mut()
            .unwrap()
            .remove("estimate_weight");
        std::fs::write(&meta_path, meta.to_string()).unwrap();
        let v3 = TrainedRanker::load_unchecked(v3_dir.path()).unwrap();
        assert_eq!(v3.config().estimate_weight, 0.0);
        let v4 = TrainedRanker::load_unchecked(&heldout).unwrap();
        assert_eq!(v4.config().estimate_weight, 0.25);
        assert!(TrainedRanker::shipped().unwrap().config().estimate_weight > 0.0);
    }

    // Guards older models: a format-2 model (the one shipped until 2026-12-07) loads as
    // MLP members without trees or reference context, and the shipped model has both.
    #[test]
    fn format_2_models_load_without_trees_and_the_shipped_one_has_them() {
        let old = TrainedRanker::load_unchecked(fixture("models/ranker-v2-2026-12-02")).unwrap();
        assert!(old.trees().is_empty());
        assert_eq!(old.config().trees, 0);
        assert!(!old.reference_context());
        assert_eq!(old.base_feature_names(), old.feature_names());
        let shipped = TrainedRanker::shipped().unwrap();
        assert!(shipped.reference_context());
        assert_eq!(shipped.trees().len(), shipped.ensemble_size());
        assert_eq!(
            2 * shipped.base_feature_names().len(),
            shipped.feature_names().len()
        );
    }
}
