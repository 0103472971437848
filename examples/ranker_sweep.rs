//! Hyper-parameter sweep of the pairwise ranker on the dataset: leave-tasks-out accuracy
//! (all pairs and pairs >= 2x apart) of each configuration, on the same folds.
//!
//! `cargo run --release --example ranker_sweep -- [--seeds 42,7] [--no-launch] [--ngrams N] [--quick]`
//! (reads fixtures/tasks and fixtures/timings/h200.json).

use cudaperf::ranker::{self, cross_validate, FeatureSet, RankerConfig};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let seeds: Vec<u64> = args
        .iter()
        .position(|a| a == "--seeds")
        .and_then(|i| args.get(i + 1))
        .map(|s| s.split(',').filter_map(|x| x.parse().ok()).collect())
        .unwrap_or_else(|| vec![42]);
    let launch = !args.iter().any(|a| a == "--no-launch");
    let ngram_buckets: usize = args
        .iter()
        .position(|a| a == "--ngrams")
        .and_then(|i| args.get(i + 1))
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let only_default = args.iter().any(|a| a == "--quick");
    // Accuracy restricted to the pairs of these tasks (e.g. the first 43), from the same CV.
    let subset: Option<std::collections::BTreeSet<String>> = args
        .iter()
        .position(|a| a == "--subset-file")
        .and_then(|i| args.get(i + 1))
        .map(|p| {
            std::fs::read_to_string(p)
                .unwrap_or_default()
                .split_whitespace()
                .map(String::from)
                .collect()
        });
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let ds = cudaperf::dataset::Dataset::load(root.join("fixtures/tasks"))?;
    let t = cudaperf::timings::Timings::load(root.join("fixtures/timings/h200.json"))?;
    let data = ranker::ranking_data(
        &ds,
        &t,
        &FeatureSet {
            launch,
            traffic: launch,
            ngram_buckets,
        },
    )?;
    println!(
        "{} samples, {} pairs, {} features",
        data.samples.len(),
        data.pairs.len(),
        data.feature_names.len()
    );
    let base = RankerConfig::new();
    if args.iter().any(|a| a == "--misses") {
        // The held-out pairs >= 2x apart that the default ranker orders wrongly (first seed).
        let r = cross_validate(&data, 5, &base.clone().with_seed(seeds[0]))?;
        for p in &data.pairs {
            let (f, sl) = (&data.samples[p.fast], &data.samples[p.slow]);
            if p.log_ratio >= std::f32::consts::LN_2
                && r.held_out_scores[p.fast] <= r.held_out_scores[p.slow]
            {
                println!(
                    "MISS {:<26} {:<34} beats {:<34} by {:>6.1}x",
                    f.task,
                    f.name,
                    sl.name,
                    p.log_ratio.exp()
                );
            }
        }
        return Ok(());
    }
    let configs: Vec<(&str, RankerConfig)> = vec![
        ("default", base.clone()),
        ("lr 1e-3", base.clone().with_learning_rate(1e-3)),
        ("lr 3e-4", base.clone().with_learning_rate(3e-4)),
        ("dropout 0.2", base.clone().with_dropout(0.2)),
        ("hidden 128,64", base.clone().with_hidden(vec![128, 64])),
        ("hidden 32", base.clone().with_hidden(vec![32])),
        ("linear", base.clone().with_hidden(vec![])),
        ("l1 1e-4", base.clone().with_input_l1(1e-4)),
        ("pair weight 4", base.clone().with_max_pair_weight(4.0)),
        (
            "lr 1e-3 dropout 0.2 128,64",
            base.clone()
                .with_learning_rate(1e-3)
                .with_dropout(0.2)
                .with_hidden(vec![128, 64]),
        ),
        (
            "no early stop, 10 epochs",
            base.clone().with_validation_fraction(0.0).with_epochs(10),
        ),
        (
            "no early stop, 30 epochs",
            base.clone().with_validation_fraction(0.0).with_epochs(30),
        ),
        (
            "no early stop, 100 epochs",
            base.clone().with_validation_fraction(0.0).with_epochs(100),
        ),
        (
            "no early stop, 30 epochs, dropout 0.2",
            base.clone()
                .with_validation_fraction(0.0)
                .with_epochs(30)
                .with_dropout(0.2),
        ),
        ("patience 100", base.clone().with_patience(100)),
    ];
    println!("| config | seeds | all pairs | >= 2x apart | < 2x apart | subset pairs | subset >= 2x |\n|---|---|---|---|---|---|---|");
    let pick: Option<String> = args
        .iter()
        .position(|a| a == "--only")
        .and_then(|i| args.get(i + 1))
        .cloned();
    for (name, cfg) in configs
        .into_iter()
        .take(if only_default { 2 } else { usize::MAX })
        .filter(|(n, _)| pick.as_deref().is_none_or(|p| n.contains(p)))
    {
        let (mut all, mut far, mut near, mut sub, mut subfar) = (0.0, 0.0, 0.0, 0.0, 0.0);
        for &s in &seeds {
            let r = cross_validate(&data, 5, &cfg.clone().with_seed(s))?;
            if let Some(set) = &subset {
                let pairs: Vec<usize> = (0..data.pairs.len())
                    .filter(|&i| {
                        let p = &data.pairs[i];
                        p.log_ratio >= cfg.min_log_ratio && set.contains(&data.samples[p.fast].task)
                    })
                    .collect();
                let acc = ranker::pairwise_accuracy(&data, &pairs, &r.held_out_scores)?;
                sub += acc.overall.accuracy.unwrap_or(0.0);
                subfar += acc.ratio_at_least_2x.accuracy.unwrap_or(0.0);
            }
            all += r.accuracy.overall.accuracy.unwrap_or(0.0);
            far += r.accuracy.ratio_at_least_2x.accuracy.unwrap_or(0.0);
            near += r.accuracy.ratio_below_2x.accuracy.unwrap_or(0.0);
        }
        let n = seeds.len() as f64;
        println!(
            "| {name} | {seeds:?} | {:.1} % | {:.1} % | {:.1} % | {:.1} % | {:.1} % |",
            100.0 * all / n,
            100.0 * far / n,
            100.0 * near / n,
            100.0 * sub / n,
            100.0 * subfar / n
        );
    }
    Ok(())
}
