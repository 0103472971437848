//! `cudaperf train-ranker`: train the pairwise ranker on the dataset's timed pairs, plot the
//! curve, and cross-validate it with and without the launch-plan features.

use std::path::PathBuf;
use std::process::ExitCode;

use cudaperf::dataset::{Dataset, DatasetError};
use cudaperf::ranker::{self, FeatureSet, RankerConfig, RankerError, RankingData, LAUNCH_PREFIX};
use cudaperf::timings::{Timings, TimingsError};

use crate::args::{count, whole};
use crate::output::{check_output_file, check_writable_dir, write_json, OutputError};

/// Train the pairwise ranker on the dataset's timed pairs (and cross-validate it).
#[derive(clap::Args)]
pub struct Args {
    /// Folder of task folders (the crate's: fixtures/tasks).
    #[arg(long)]
    tasks: PathBuf,
    /// Timings from `cudaperf measure` (the crate's: fixtures/timings/h200.json).
    #[arg(long)]
    timings: PathBuf,
    /// Output model folder.
    #[arg(long)]
    out: PathBuf,
    /// PNG plot of the training curve (default: <out>/training.png).
    #[arg(long)]
    plot: Option<PathBuf>,
    /// Leave-tasks-out folds for the cross-validation report (0: skip it; else 2 or more).
    #[arg(long, default_value_t = 5, value_parser = count)]
    cv: usize,
    /// Hashed syntax n-gram buckets added to the structural features (0: none).
    #[arg(long, default_value_t = 0, value_parser = count)]
    ngrams: usize,
    /// Include the launch-plan features (`launch_*`: each implementation's `// @launch`
    /// plan resolved on its task's timed config — launches, blocks per SM against the
    /// H200's 132 SMs, passes over the data, serial elements per thread, atomics per
    /// element). On by default for new models; `--launch-features false` trains on the
    /// source features only. The cross-validation report shows the ranker with and
    /// without them either way.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, value_name = "BOOL")]
    launch_features: bool,
    /// Give the model each implementation's features next to their difference from its
    /// task's reference implementation (`vs_reference_*`), as the shipped model has; the
    /// model then scores a candidate against the task's reference. `false`: the features alone.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, value_name = "BOOL")]
    reference_context: bool,
    /// Boosted trees per ensemble member (the member's score is the mean of its MLP and its
    /// trees); 0: MLPs only.
    #[arg(long, default_value_t = 300)]
    trees: usize,
    /// Training epochs (maximum; early stopping may end sooner; at least 1).
    #[arg(long, default_value_t = 300, value_parser = count)]
    epochs: usize,
    /// Random seed.
    #[arg(long, default_value_t = 42, value_parser = whole)]
    seed: u64,
    /// Also write the cross-validation report as JSON here.
    #[arg(long)]
    report: Option<PathBuf>,
}

/// Why `train-ranker` refused or stopped.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// `--epochs 0`.
    #[error("--epochs must be at least 1")]
    NoEpochs,
    /// `--cv 1`.
    #[error("--cv must be 0 (no cross-validation) or at least 2 folds")]
    OneFold,
    /// More n-gram buckets than the ranker takes.
    #[error("--ngrams {0}: at most 4096 buckets")]
    TooManyNgrams(usize),
    /// A `--plot` that is not a PNG file.
    #[error("--plot {0}: the curve is a PNG file (*.png)")]
    PlotNotPng(PathBuf),
    /// An output that cannot be written.
    #[error("{flag} {path}: {source}")]
    NotWritable {
        /// `--out`, `--plot` or `--report`.
        flag: &'static str,
        /// The path given.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The dataset does not load.
    #[error("--tasks: {0}")]
    Tasks(DatasetError),
    /// The timings do not load.
    #[error("--timings: {0}")]
    Timings(TimingsError),
    /// More folds than tasks with timed pairs.
    #[error("--cv {cv}: only {tasks} tasks have timed pairs, so at most {tasks} folds")]
    TooManyFolds {
        /// Folds asked for.
        cv: usize,
        /// Tasks with timed pairs.
        tasks: usize,
    },
    /// Configuration, data, training, saving or plotting failed.
    #[error(transparent)]
    Ranker(#[from] RankerError),
    /// The progress bar's template is invalid (a bug).
    #[error("progress bar: {0}")]
    Progress(#[from] indicatif::style::TemplateError),
    /// The report could not be written.
    #[error(transparent)]
    Output(#[from] OutputError),
}

/// Runs `cudaperf train-ranker`.
pub fn run(a: Args) -> Result<ExitCode, Error> {
    let png = check_args(&a)?;
    let config = RankerConfig::new()
        .with_epochs(a.epochs)
        .with_seed(a.seed)
        .with_trees(a.trees);
    config.validate()?;
    let ds = Dataset::load(&a.tasks).map_err(Error::Tasks)?;
    let t = Timings::load(&a.timings).map_err(Error::Timings)?;
    let (mut data, mut full) = ranking_data(&ds, &t, a.ngrams, a.launch_features)?;
    if a.reference_context {
        data = data.with_reference_context()?;
        full = full.map(|f| f.with_reference_context()).transpose()?;
    }
    if a.cv > data.tasks().len() {
        return Err(Error::TooManyFolds {
            cv: a.cv,
            tasks: data.tasks().len(),
        });
    }
    eprintln!(
        "{} samples, {} pairs, {} features, {} tasks (timings: {} on {}, {})",
        data.samples.len(),
        data.pairs.len(),
        data.feature_names.len(),
        data.tasks().len(),
        a.timings.display(),
        t.device,
        t.date
    );
    train_and_save(&data, &config, &a.out, &png)?;
    if a.cv >= 2 {
        let compared =
            ranker::compare_on_folds(&ds, full.as_ref().unwrap_or(&data), a.cv, &config)?;
        println!(
            "leave-tasks-out {}-fold pairwise accuracy (chance 50 %):",
            a.cv
        );
        print!("{}", compared.table());
        if let Some(p) = &a.report {
            write_json(p, &compared)?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Every argument checked before the (long) training starts; gives the curve's path.
fn check_args(a: &Args) -> Result<PathBuf, Error> {
    if a.epochs == 0 {
        return Err(Error::NoEpochs);
    }
    if a.cv == 1 {
        return Err(Error::OneFold);
    }
    if a.ngrams > 4096 {
        return Err(Error::TooManyNgrams(a.ngrams));
    }
    let png = a.plot.clone().unwrap_or_else(|| a.out.join("training.png"));
    if png.extension().and_then(|e| e.to_str()) != Some("png") {
        return Err(Error::PlotNotPng(png));
    }
    check_writable_dir(&a.out).map_err(|source| Error::NotWritable {
        flag: "--out",
        path: a.out.clone(),
        source,
    })?;
    for (flag, file) in [("--plot", Some(&png)), ("--report", a.report.as_ref())] {
        if let Some(f) = file {
            check_output_file(f).map_err(|source| Error::NotWritable {
                flag,
                path: f.clone(),
                source,
            })?;
        }
    }
    Ok(png)
}

/// The training data, and the data with launch-plan features when they resolve (the
/// cross-validation compares with and without them). Without `--launch-features`, a plan
/// that does not resolve only drops that comparison.
fn ranking_data(
    ds: &Dataset,
    t: &Timings,
    ngrams: usize,
    launch_features: bool,
) -> Result<(RankingData, Option<RankingData>), Error> {
    let with_launch = ranker::ranking_data(
        ds,
        t,
        &FeatureSet {
            launch: true,
            traffic: true,
            ngram_buckets: ngrams,
        },
    );
    Ok(match (with_launch, launch_features) {
        (Ok(full), true) => (full.clone(), Some(full)),
        (Ok(full), false) => (
            full.select_features(|n| {
                !n.starts_with(LAUNCH_PREFIX) && !n.starts_with(ranker::TRAFFIC_PREFIX)
            }),
            Some(full),
        ),
        (Err(e), true) => return Err(e.into()),
        (Err(e), false) => {
            eprintln!("launch-plan features unavailable, compared without them: {e}");
            let plain = FeatureSet {
                launch: false,
                traffic: false,
                ngram_buckets: ngrams,
            };
            (ranker::ranking_data(ds, t, &plain)?, None)
        }
    })
}

/// Trains with a progress bar and a line per epoch, then saves the model and its curve.
fn train_and_save(
    data: &RankingData,
    config: &RankerConfig,
    out: &std::path::Path,
    png: &std::path::Path,
) -> Result<(), Error> {
    let bar = indicatif::ProgressBar::new(config.epochs as u64);
    bar.set_style(indicatif::ProgressStyle::with_template(
        "{elapsed_precise} [{bar:30}] epoch {pos}/{len} {msg}",
    )?);
    let (model, history) = ranker::train(data, config, |s| {
        bar.set_position(s.epoch as u64);
        let line = format!(
            "epoch {:>3}: train loss {:.4} acc {:.3} | val loss {} acc {}{}",
            s.epoch,
            s.train_loss,
            s.train_accuracy,
            s.val_loss.map_or("-".into(), |v| format!("{v:.4}")),
            s.val_accuracy.map_or("-".into(), |v| format!("{v:.3}")),
            if s.is_best { " *" } else { "" }
        );
        bar.set_message(line.clone());
        bar.suspend(|| eprintln!("{line}"));
    })?;
    bar.finish_and_clear();
    model.save(out)?;
    ranker::plot_history(&history, png)?;
    eprintln!(
        "trained in {:.1} s ({} epochs, best {}); model in {}, curve in {}",
        history.seconds,
        history.epochs.len(),
        history.best_epoch,
        out.display(),
        png.display()
    );
    Ok(())
}
