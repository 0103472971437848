//! CudaPerf's offline stage as library calls: train the pairwise ranker on the dataset's
//! measured implementations and evaluate it leave-tasks-out (tasks, not kernels, held out):
//! several seeds of 5-fold CV, each feature group ablated, calibration (ECE, ties, ensemble
//! disagreement) and the held-out misses grouped by cause. This is what
//! `docs/ranker-cv.md` reports.
//!
//! ```text
//! cargo run --release --example cudaperf_ranker -- --out runs/ranker [--cv 5] [--seeds 42,7,1] [--ablate true]
//! ```
//! Reads `fixtures/tasks` and the H200 timings `fixtures/timings/h200.json`; writes the model
//! (`ranker.json` + weights, the ensemble trained on every task exactly as each fold's model
//! is), its training curve `training.png`, `cv.json` and `cv.md` to `--out`. Training runs on
//! burn's default device (the ndarray CPU backend; libtorch with `--features tch`).

#[path = "common/mod.rs"]
mod common;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;

use clap::Parser;
use cudaperf::dataset::Dataset;
use cudaperf::ranker::{
    self, cross_validate, cross_validate_scorer, CvReport, FeatureSet, RankerConfig, RankingData,
    CLEAR_PAIR_LOG_RATIO, CLOSE_PAIR_LOG_RATIO, LAUNCH_PREFIX, REFERENCE_PREFIX, TRAFFIC_PREFIX,
};
use cudaperf::reward::ShrunkRankerReward;
use cudaperf::timings::Timings;
use serde::{Deserialize, Serialize};

#[derive(Parser, Debug)]
#[command(about = "Train the pairwise ranker and evaluate it leave-tasks-out")]
struct Args {
    /// Output folder for the model, its curve and the cross-validation report.
    #[arg(long, default_value = "runs/ranker")]
    out: PathBuf,
    /// Folds of the leave-tasks-out cross-validation.
    #[arg(long, default_value_t = 5)]
    cv: usize,
    /// Seeds of the cross-validation (folds, weights, shuffling); the first one also seeds
    /// the saved model.
    #[arg(long, default_value = "42,7,1", value_delimiter = ',')]
    seeds: Vec<u64>,
    /// Also cross-validate with each feature group removed.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    ablate: bool,
    /// Ensemble members (the model's `ensemble`).
    #[arg(long, default_value_t = 5)]
    ensemble: usize,
    /// Maximum epochs.
    #[arg(long, default_value_t = 300)]
    epochs: usize,
    /// Skip training the saved model (evaluation only).
    #[arg(long)]
    no_model: bool,
    /// Skip the cross-validation (train and save the model only).
    #[arg(long)]
    no_cv: bool,
    /// Reuse the feature vectors saved at this path (computed and saved there when missing).
    #[arg(long)]
    data_cache: Option<PathBuf>,
    /// Fixtures folder.
    #[arg(long)]
    fixtures: Option<PathBuf>,
    /// A measured program table (`program_table`'s output, e.g.
    /// docs/rl/table/program_table.jsonl.gz) whose correct programs add train-only pairs:
    /// they train every fold's model and the saved one, held out with their task, never
    /// validated or tested on.
    #[arg(long)]
    table: Option<PathBuf>,
    /// Train-only pairs per task taken from `--table`.
    #[arg(long, default_value_t = 200)]
    table_pairs: usize,
    /// A measured program table whose tasks are held out: two recipes (the shipped one and
    /// an MLP on the features alone) are trained on every other task and judged on all
    /// pairs of the table's correct programs (kernels and tasks neither model saw, timed on
    /// a GPU). Written to `table-test.md` in `--out`, with the shipped recipe's score and
    /// base features of every program in `table-test-programs.json` (for looking at misses).
    #[arg(long)]
    table_test: Option<PathBuf>,
    /// Give the model each implementation's features next to their difference from its
    /// task's reference (`vs_reference_*`), as the shipped model has; false: the features alone.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    reference_context: bool,
    /// Weight of the analytical time estimate in the score (`RankerConfig::estimate_weight`;
    /// default: the shipped recipe's).
    #[arg(long)]
    estimate_weight: Option<f32>,
}

/// Which feature names an ablation keeps.
type Keep = Box<dyn Fn(&str) -> bool>;

/// One scorer's cross-validation over all seeds.
#[derive(Debug, Serialize, Deserialize)]
struct SeededCv {
    scorer: String,
    features: usize,
    reports: Vec<CvReport>,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let fixtures = common::setup::fixtures_root(args.fixtures.as_deref())?;
    std::fs::create_dir_all(&args.out)?;
    // 1. Data: every correct, timed implementation and every pair outside the noise floor.
    let dataset = Dataset::load(fixtures.join("tasks"))?;
    let timings = Timings::load(fixtures.join("timings/h200.json"))?;
    let mut data: RankingData = match args.data_cache.as_ref().filter(|p| p.is_file()) {
        Some(p) => serde_json::from_str(&std::fs::read_to_string(p)?)?,
        None => {
            let set = FeatureSet {
                launch: true,
                traffic: true,
                ngram_buckets: 0,
            };
            let d = ranker::ranking_data(&dataset, &timings, &set)?;
            if let Some(p) = &args.data_cache {
                std::fs::write(p, serde_json::to_string(&d)?)?;
            }
            d
        }
    };
    let (dataset_samples, dataset_pairs) = (data.samples.len(), data.pairs.len());
    let extra = match &args.table {
        Some(path) => {
            let rows = common::table::read(path)?;
            let (samples, pairs) =
                common::table::add_train_only_pairs(&mut data, &rows, &fixtures, args.table_pairs)?;
            format!(
                "; plus, to train only, {samples} programs and {pairs} pairs of the measured \
                 program table `{}`",
                path.display()
            )
        }
        None => String::new(),
    };
    if let Some(path) = &args.table_test {
        let md = table_test(&data, path, &fixtures, &args)?;
        std::fs::write(args.out.join("table-test.md"), &md)?;
        print!("{md}");
    }
    // After the table: its programs' features are computed on the base names too.
    if args.reference_context {
        data = data.with_reference_context()?;
    }
    let mut md = String::new();
    let _ = writeln!(
        md,
        "{} implementations, {} pairs, {} features, {} tasks (timings: {} on {}, \
         fixtures/timings/h200.json){extra}\n",
        dataset_samples,
        dataset_pairs,
        data.feature_names.len(),
        data.tasks().len(),
        timings.device,
        timings.date,
    );
    let mut config = RankerConfig::new()
        .with_epochs(args.epochs)
        .with_ensemble(args.ensemble)
        .with_seed(args.seeds.first().copied().unwrap_or(42));
    if let Some(w) = args.estimate_weight {
        config = config.with_estimate_weight(w);
    }

    // 2. The model: the same ensemble every fold trains, on every task.
    if !args.no_model {
        let (model, history) = ranker::train(&data, &config, |_| {})?;
        model.save(&args.out)?;
        ranker::plot_history(&history, args.out.join("training.png"))?;
        let s = model.summary();
        let epochs: Vec<String> = std::iter::once((s.epochs_run, s.best_epoch))
            .chain(s.members.iter().map(|m| (m.epochs_run, m.best_epoch)))
            .map(|(run, best)| format!("{best}/{run}"))
            .collect();
        let _ = writeln!(
            md,
            "Saved model: {} members (best epoch / epochs run: {}), temperature {:.2}, trained \
             in {:.1} s.\n",
            model.ensemble_size(),
            epochs.join(", "),
            model.temperature(),
            history.seconds
        );
    }

    if args.no_cv {
        std::fs::write(args.out.join("model.md"), &md)?;
        print!("{md}");
        return Ok(());
    }
    // 3. Leave-tasks-out CV, per seed, of the full model and each ablation.
    // An ablation removes a feature and its `vs_reference_` copy together.
    let base = |n: &str| n.strip_prefix(REFERENCE_PREFIX).unwrap_or(n).to_string();
    let groups: Vec<(&str, Keep)> = {
        let mut g: Vec<(&str, Keep)> = vec![("all features (shipped)", Box::new(|_: &str| true))];
        if args.ablate {
            if args.reference_context {
                g.push((
                    "without reference context (the features alone)",
                    Box::new(|n: &str| !n.starts_with(REFERENCE_PREFIX)),
                ));
            }
            g.push((
                "without traffic (memory, reuse, serial work)",
                Box::new(move |n: &str| !base(n).starts_with(TRAFFIC_PREFIX)),
            ));
            g.push((
                "without launch plan",
                Box::new(move |n: &str| !base(n).starts_with(LAUNCH_PREFIX)),
            ));
            g.push((
                "without structural (launch + traffic only)",
                Box::new(move |n: &str| {
                    let n = base(n);
                    n.starts_with(LAUNCH_PREFIX) || n.starts_with(TRAFFIC_PREFIX)
                }),
            ));
            g.push((
                "structural only (the previous features minus launch)",
                Box::new(move |n: &str| {
                    let n = base(n);
                    !n.starts_with(LAUNCH_PREFIX) && !n.starts_with(TRAFFIC_PREFIX)
                }),
            ));
            g.push((
                "analytical time estimate alone (nothing trained)",
                Box::new(|n: &str| n == "traffic_estimated_time_us"),
            ));
        }
        g
    };
    let mut all = Vec::new();
    for (name, keep) in &groups {
        let d = data.select_features(|n| keep(n));
        let mut reports = Vec::new();
        for &seed in &args.seeds {
            let cfg = config.clone().with_seed(seed);
            let r = if d.feature_names.len() == 1 {
                // Lower estimated time = faster: the estimate itself as a fixed score.
                cross_validate_scorer(&d, args.cv, &cfg, name, |s| -f64::from(s.features[0]))?
            } else {
                cross_validate(&d, args.cv, &cfg)?
            };
            eprintln!(
                "{name}, seed {seed}: {:.1} %",
                100.0 * r.accuracy.overall.accuracy.unwrap_or(0.0)
            );
            reports.push(r);
        }
        all.push(SeededCv {
            scorer: name.to_string(),
            features: d.feature_names.len(),
            reports,
        });
    }
    md.push_str(&table(&all, args.cv));
    if let Some(main) = all.first() {
        md.push_str(&calibration_section(main));
        md.push_str(&shrink_section(&data, main, ShrunkRankerReward::default()));
        md.push_str(&misses(&data, main));
    }
    std::fs::write(
        args.out.join("cv.json"),
        serde_json::to_string_pretty(&all)?,
    )?;
    std::fs::write(args.out.join("cv.md"), &md)?;
    print!("{md}");
    Ok(())
}

fn mean(xs: impl Iterator<Item = f64>) -> (f64, f64) {
    let v: Vec<f64> = xs.collect();
    let n = v.len().max(1) as f64;
    let m = v.iter().sum::<f64>() / n;
    let sd = (v.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / n).sqrt();
    (m, sd)
}

/// Mean ± standard deviation over seeds of each bucket's pooled held-out accuracy.
fn table(all: &[SeededCv], k: usize) -> String {
    let mut out = format!(
        "Leave-tasks-out {k}-fold pairwise accuracy, mean ± sd over seeds (pairs per seed in \
         brackets; chance 50 %):\n\n| scorer | features | all pairs | >= 2x apart | 1.1-2x apart | \
         < 2x apart | c2cuda | torch2cuda | ECE |\n|---|---|---|---|---|---|---|---|---|\n"
    );
    for s in all {
        let cell = |f: &dyn Fn(&CvReport) -> &cudaperf::ranker::PairAccuracy| {
            let (m, sd) = mean(s.reports.iter().map(|r| f(r).accuracy.unwrap_or(0.0)));
            let n = s.reports.first().map_or(0, |r| f(r).pairs);
            format!("{:.1} ± {:.1} % ({n})", 100.0 * m, 100.0 * sd)
        };
        fn c2cuda(r: &CvReport) -> &cudaperf::ranker::PairAccuracy {
            r.accuracy
                .by_kind
                .get("c2cuda")
                .unwrap_or(&r.accuracy.overall)
        }
        fn torch2cuda(r: &CvReport) -> &cudaperf::ranker::PairAccuracy {
            r.accuracy
                .by_kind
                .get("torch2cuda")
                .unwrap_or(&r.accuracy.overall)
        }
        let ece = if s.reports.iter().all(|r| r.calibration.is_some()) {
            let (m, sd) = mean(
                s.reports
                    .iter()
                    .filter_map(|r| r.calibration.as_ref().map(|c| c.ece)),
            );
            format!("{m:.3} ± {sd:.3}")
        } else {
            "-".into()
        };
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            s.scorer,
            s.features,
            cell(&|r| &r.accuracy.overall),
            cell(&|r| &r.accuracy.ratio_at_least_2x),
            cell(&|r| &r.accuracy.ratio_1_1_to_2x),
            cell(&|r| &r.accuracy.ratio_below_2x),
            cell(&c2cuda),
            cell(&torch2cuda),
            ece
        );
    }
    out.push('\n');
    out
}

fn calibration_section(main: &SeededCv) -> String {
    let mut out = String::from(
        "Calibration of the held-out probabilities (first seed; each pair in both orders):\n\n\
         | p bin | mean p | observed | pairs |\n|---|---|---|---|\n",
    );
    let Some(c) = main.reports.first().and_then(|r| r.calibration.as_ref()) else {
        return String::new();
    };
    for (i, (p, y, n)) in c.bins.iter().enumerate() {
        if *n > 0 {
            let _ = writeln!(
                out,
                "| {:.1}-{:.1} | {p:.3} | {y:.3} | {n} |",
                i as f64 / 10.0,
                (i + 1) as f64 / 10.0
            );
        }
    }
    let _ = writeln!(
        out,
        "\nECE {:.3} over {} pair orders; ties within noise (< min_log_ratio): {} pairs, mean \
         |p − 0.5| = {}; ensemble disagreement: mean {:.3}, on misses {:.3}, on hits {:.3}.\n",
        c.ece,
        c.pairs,
        c.tie_pairs,
        c.tie_mean_abs_dev.map_or("-".into(), |d| format!("{d:.3}")),
        c.mean_uncertainty,
        c.uncertainty_wrong_right.0,
        c.uncertainty_wrong_right.1
    );
    out
}

/// What `ShrunkRankerReward` (the ranker term `(2p − 1) · max(0, 1 − uncertainty / scale)`)
/// does on the first seed's held-out pairs, each seen from its faster kernel: the mean weight
/// left on pairs ordered right and wrong, the share of the term's mass with the wrong sign,
/// and the mean |term| on ties.
fn shrink_section(data: &RankingData, main: &SeededCv, shrunk: ShrunkRankerReward) -> String {
    let Some(r) = main.reports.first() else {
        return String::new();
    };
    let scale = shrunk.scale();
    let (mut hits, mut misses, mut ties) = (Vec::new(), Vec::new(), Vec::new());
    for &(i, p, u) in &r.held_out_pairs {
        let w = shrunk.weight(u);
        let term = 2.0 * p - 1.0;
        if data.pairs[i].log_ratio < r.min_log_ratio {
            ties.push((term.abs(), term.abs() * w));
        } else if p > 0.5 {
            hits.push((term, w));
        } else {
            misses.push((term, w));
        }
    }
    let avg = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
    let wrong_share = |shrunk: bool| {
        let mass = |v: &[(f64, f64)]| -> f64 {
            v.iter()
                .map(|&(t, w)| t.abs() * if shrunk { w } else { 1.0 })
                .sum()
        };
        let (right, wrong) = (mass(&hits), mass(&misses));
        wrong / (right + wrong).max(f64::MIN_POSITIVE)
    };
    let weights = |v: &[(f64, f64)]| avg(&v.iter().map(|&(_, w)| w).collect::<Vec<_>>());
    format!(
        "The ranker term shrunk by the ensemble's disagreement (`ShrunkRankerReward`, scale \
         {scale}; first seed, held-out pairs): mean weight left {:.2} on the {} pairs ordered \
         right and {:.2} on the {} ordered wrong; share of the term's mass with the wrong sign \
         {:.1} % → {:.1} %; mean |term| on the {} ties {:.2} → {:.2}.\n\n",
        weights(&hits),
        hits.len(),
        weights(&misses),
        misses.len(),
        100.0 * wrong_share(false),
        100.0 * wrong_share(true),
        ties.len(),
        avg(&ties.iter().map(|t| t.0).collect::<Vec<_>>()),
        avg(&ties.iter().map(|t| t.1).collect::<Vec<_>>()),
    )
}

/// The feature group that differs most (in training standard deviations) between the two
/// implementations of a missed pair: a first guess at what the model weighed wrongly.
fn cause(data: &RankingData, std: &[f64], fast: usize, slow: usize) -> &'static str {
    let (a, b) = (&data.samples[fast].features, &data.samples[slow].features);
    let mut best = (0.0, "");
    for (i, name) in data.feature_names.iter().enumerate() {
        let d = f64::from((a[i] - b[i]).abs()) / std[i].max(1e-6);
        if d > best.0 {
            best = (d, name.as_str());
        }
    }
    let n = best.1.strip_prefix(REFERENCE_PREFIX).unwrap_or(best.1);
    if n.is_empty() {
        "identical features"
    } else if n.starts_with("traffic_barriers")
        || n.starts_with("traffic_serial")
        || n.starts_with("traffic_chain")
        || n.starts_with("launch_small_grid")
        || n.starts_with("launch_min_blocks")
    {
        "serial work (barriers, small grids, chains)"
    } else if n.starts_with(TRAFFIC_PREFIX) {
        "memory traffic and reuse"
    } else if n.starts_with(LAUNCH_PREFIX) {
        "launch shape (grid, threads per element, atomics, coalescing probe)"
    } else {
        "source structure (access classes, shared memory, syncs, loops)"
    }
}

fn misses(data: &RankingData, main: &SeededCv) -> String {
    let Some(r) = main.reports.first() else {
        return String::new();
    };
    let dim = data.feature_names.len();
    let n = data.samples.len().max(1) as f64;
    let std: Vec<f64> = (0..dim)
        .map(|i| {
            let m = data
                .samples
                .iter()
                .map(|s| f64::from(s.features[i]))
                .sum::<f64>()
                / n;
            (data
                .samples
                .iter()
                .map(|s| (f64::from(s.features[i]) - m).powi(2))
                .sum::<f64>()
                / n)
                .sqrt()
        })
        .collect();
    let mut groups: BTreeMap<(&str, &str), usize> = BTreeMap::new();
    let mut worst = Vec::new();
    for p in &data.pairs {
        if p.train_only || p.log_ratio < r.min_log_ratio {
            continue;
        }
        if r.held_out_scores[p.fast] > r.held_out_scores[p.slow] {
            continue;
        }
        let bucket = if p.log_ratio >= CLEAR_PAIR_LOG_RATIO {
            ">= 2x"
        } else if p.log_ratio >= CLOSE_PAIR_LOG_RATIO {
            "1.1-2x"
        } else {
            "< 1.1x"
        };
        *groups
            .entry((cause(data, &std, p.fast, p.slow), bucket))
            .or_default() += 1;
        worst.push(*p);
    }
    let mut out = String::from(
        "Held-out misses (first seed) by cause — the feature group whose values differ most \
         between the two kernels, in standard deviations — and ratio bucket:\n\n| cause | \
         bucket | misses |\n|---|---|---|\n",
    );
    for ((c, b), k) in &groups {
        let _ = writeln!(out, "| {c} | {b} | {k} |");
    }
    worst.sort_by(|a, b| b.log_ratio.total_cmp(&a.log_ratio));
    out.push_str("\nThe widest misses:\n\n| task | predicted faster | measured faster | ratio |\n|---|---|---|---|\n");
    for p in worst.iter().take(12) {
        let (f, s) = (&data.samples[p.fast], &data.samples[p.slow]);
        let _ = writeln!(
            out,
            "| {} | {} | {} | {:.2}x |",
            f.task,
            s.name,
            f.name,
            p.log_ratio.exp()
        );
    }
    out
}

/// Held-out check on a measured program table: each recipe trained without the table's
/// tasks, then every pair of the table's correct programs of a task ordered by the model's
/// score and by the measured speedups (pairs closer than `min_log_ratio` are ties, left out).
fn table_test(
    base: &RankingData,
    path: &std::path::Path,
    fixtures: &std::path::Path,
    args: &Args,
) -> Result<String, Box<dyn std::error::Error>> {
    use common::table::RankerScorer;
    use cudaperf::pipeline::Verdict;
    let rows = common::table::read(path)?;
    let held: std::collections::BTreeSet<String> = rows.iter().map(|r| r.task.clone()).collect();
    let kept = keep_tasks(base, |t| !held.contains(t));
    let mut out = format!(
        "Held-out program table `{}`: {} rows of tasks {}; both models trained on the other {} \
         tasks ({} pairs).\n\n| recipe | task | pairs | all | >= 2x | 1.1-2x | < 1.1x |\n|---|---|---|---|---|---|---|\n",
        path.display(),
        rows.len(),
        held.iter().cloned().collect::<Vec<_>>().join(", "),
        kept.tasks().len(),
        kept.pairs.len(),
    );
    let seed = args.seeds.first().copied().unwrap_or(42);
    let shipped_weight = args
        .estimate_weight
        .unwrap_or(RankerConfig::new().estimate_weight);
    let recipes: [(&str, bool, usize, f32); 2] = [
        (
            "shipped (reference context, MLP + trees, estimate term)",
            true,
            300,
            shipped_weight,
        ),
        ("MLP on the features alone", false, 0, 0.0),
    ];
    // The shipped recipe's score and base features of every program, for looking at misses.
    let mut per_program = Vec::new();
    for (label, context, trees, estimate_weight) in recipes {
        let data = if context {
            kept.with_reference_context()?
        } else {
            kept.clone()
        };
        let config = RankerConfig::new()
            .with_epochs(args.epochs)
            .with_ensemble(args.ensemble)
            .with_seed(seed)
            .with_trees(trees)
            .with_estimate_weight(estimate_weight);
        let (model, _) = ranker::train(&data, &config, |_| {})?;
        let dir = tempfile::tempdir()?;
        model.save(dir.path())?;
        let mut scorer = RankerScorer::new(dir.path())?;
        let mut scored: BTreeMap<&str, Vec<(f64, f64)>> = BTreeMap::new();
        for r in &rows {
            let Some(speedup) = r.speedup.filter(|s| *s > 0.0 && s.is_finite()) else {
                continue;
            };
            if r.verdict != Verdict::Correct {
                continue;
            }
            scorer.add_task(fixtures, &r.task)?;
            let stage = scorer.stage(r)?;
            scored
                .entry(r.task.as_str())
                .or_default()
                .push((stage.candidate_score, speedup.ln()));
            if context {
                let (names, f) = scorer.row_features(r)?;
                let space = common::space::task(&r.task);
                per_program.push(serde_json::json!({
                    "task": r.task,
                    "program": space.map(|t| t.describe(&r.knobs)),
                    "log_speedup": speedup.ln(),
                    "score": stage.candidate_score,
                    "features": names.iter().zip(&f).map(|(n, v)| (n.clone(), *v)).collect::<BTreeMap<_, _>>(),
                }));
            }
        }
        let mut pooled = [(0usize, 0usize); 4];
        for (task, v) in &scored {
            let mut counts = [(0usize, 0usize); 4];
            for i in 0..v.len() {
                for j in i + 1..v.len() {
                    let d = (v[i].1 - v[j].1).abs();
                    if d < f64::from(config.min_log_ratio) {
                        continue;
                    }
                    let right = (v[i].0 - v[j].0) * (v[i].1 - v[j].1) > 0.0;
                    let bucket = if d >= f64::from(CLEAR_PAIR_LOG_RATIO) {
                        1
                    } else if d >= f64::from(CLOSE_PAIR_LOG_RATIO) {
                        2
                    } else {
                        3
                    };
                    for b in [0, bucket] {
                        counts[b].0 += usize::from(right);
                        counts[b].1 += 1;
                    }
                }
            }
            for (p, c) in pooled.iter_mut().zip(counts) {
                p.0 += c.0;
                p.1 += c.1;
            }
            let _ = writeln!(out, "{}", table_test_row(label, task, &counts));
        }
        let _ = writeln!(out, "{}", table_test_row(label, "all", &pooled));
    }
    std::fs::write(
        args.out.join("table-test-programs.json"),
        serde_json::to_string(&per_program)?,
    )?;
    out.push_str(
        "\nSpeedups are the table's (each program against its own reference in the same run); \
         scores are the models' candidate scores, so every pair compares two programs of one \
         task on one card.\n\n",
    );
    Ok(out)
}

fn table_test_row(label: &str, task: &str, c: &[(usize, usize); 4]) -> String {
    let pct = |(r, n): (usize, usize)| {
        if n == 0 {
            "-".to_string()
        } else {
            format!("{:.1} %", 100.0 * r as f64 / n as f64)
        }
    };
    format!(
        "| {label} | {task} | {} | {} | {} | {} | {} |",
        c[0].1,
        pct(c[0]),
        pct(c[1]),
        pct(c[2]),
        pct(c[3])
    )
}

/// The samples of the tasks `keep` accepts and the pairs between them.
fn keep_tasks(data: &RankingData, keep: impl Fn(&str) -> bool) -> RankingData {
    let mut index = vec![None; data.samples.len()];
    let mut samples = Vec::new();
    for (i, s) in data.samples.iter().enumerate() {
        if keep(&s.task) {
            index[i] = Some(samples.len());
            samples.push(s.clone());
        }
    }
    let pairs = data
        .pairs
        .iter()
        .filter_map(|p| {
            Some(ranker::Pair {
                fast: index[p.fast]?,
                slow: index[p.slow]?,
                ..*p
            })
        })
        .collect();
    RankingData {
        feature_names: data.feature_names.clone(),
        samples,
        pairs,
    }
}
