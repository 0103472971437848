//! CudaPerf's offline stage as library calls: train the pairwise ranker on the dataset's
//! measured implementations and compare it, leave-tasks-out, with the hand-weighted
//! structural score (what `cudaperf train-ranker --cv 5` prints).
//!
//! ```text
//! cargo run --release --example cudaperf_ranker -- --out runs/ranker [--cv 5] [--seed 42] [--ngrams 0] [--launch-features true]
//! ```
//! Reads `fixtures/tasks` and the H200 timings `fixtures/timings/h200.json`; writes the model
//! (`ranker.json` + weights), its training curve `training.png` and `cv.json` to `--out`,
//! and prints the accuracy table (the ranker with and without launch-plan features and the
//! hand-weighted score, on the same folds). Training runs on burn's default device (the ndarray CPU
//! backend; libtorch with `--features tch`).

#[path = "common/setup.rs"]
#[allow(dead_code)]
mod setup;

use std::path::PathBuf;

use clap::Parser;
use cudaperf::dataset::Dataset;
use cudaperf::ranker::{self, FeatureSet, RankerConfig, LAUNCH_PREFIX};
use cudaperf::timings::Timings;

#[derive(Parser, Debug)]
#[command(about = "Train the pairwise ranker and compare it with the hand-weighted score")]
struct Args {
    /// Output folder for the model, its curve and the cross-validation report.
    #[arg(long, default_value = "runs/ranker")]
    out: PathBuf,
    /// Folds of the leave-tasks-out cross-validation.
    #[arg(long, default_value_t = 5)]
    cv: usize,
    /// Seed (weights, shuffling, folds).
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Hashed syntax n-gram buckets added to the structural features (0: none).
    #[arg(long, default_value_t = 0)]
    ngrams: usize,
    /// Train the saved model with the launch-plan features (`launch_*`; the comparison
    /// shows both either way).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    launch_features: bool,
    /// Maximum epochs.
    #[arg(long, default_value_t = 300)]
    epochs: usize,
    /// Fixtures folder.
    #[arg(long)]
    fixtures: Option<PathBuf>,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let fixtures = setup::fixtures_root(args.fixtures.as_deref())?;
    // 1. Data: every correct, timed implementation and the pairs outside the noise.
    let dataset = Dataset::load(fixtures.join("tasks"))?;
    let timings = Timings::load(fixtures.join("timings/h200.json"))?;
    // With launch-plan features; the model drops them unless --launch-features.
    let full = ranker::ranking_data(
        &dataset,
        &timings,
        &FeatureSet {
            launch: true,
            ngram_buckets: args.ngrams,
        },
    )?;
    let data = if args.launch_features {
        full.clone()
    } else {
        full.select_features(|n| !n.starts_with(LAUNCH_PREFIX))
    };
    println!(
        "{} implementations, {} pairs, {} features, {} tasks (timings: {} on {})",
        data.samples.len(),
        data.pairs.len(),
        data.feature_names.len(),
        data.tasks().len(),
        timings.device,
        timings.date
    );

    // 2. Train on every task and save the model with its curve.
    let config = RankerConfig::new()
        .with_epochs(args.epochs)
        .with_seed(args.seed);
    let (model, history) = ranker::train(&data, &config, |_| {})?;
    model.save(&args.out)?;
    ranker::plot_history(&history, args.out.join("training.png"))?;
    println!(
        "trained in {:.2} s ({} epochs, best {}); model in {}",
        history.seconds,
        history.epochs.len(),
        history.best_epoch,
        args.out.display()
    );

    // 3. Leave-tasks-out: the learned ranker with and without launch-plan features and the
    //    hand-weighted score, on the same folds.
    let compared = ranker::compare_on_folds(&dataset, &full, args.cv, &config)?;
    std::fs::write(
        args.out.join("cv.json"),
        serde_json::to_string_pretty(&compared)?,
    )?;
    println!(
        "\nleave-tasks-out {}-fold pairwise accuracy (chance 50 %):\n",
        args.cv
    );
    print!("{}", compared.table());
    Ok(())
}
