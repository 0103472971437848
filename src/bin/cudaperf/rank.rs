//! `cudaperf rank`: which of two candidates the learned ranker predicts is faster.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use cudaperf::candidate::PlanLimits;
use cudaperf::ranker::{features_for, FeatureSet, RankerError, TimedPlan, TrainedRanker};
use cudaperf::task::Task;

use crate::input::{self, InputError, TaskArgError};
use crate::output::{pretty, OutputError};

/// Predict which of two candidates is faster, with the probability.
#[derive(clap::Args)]
pub struct Args {
    /// The task folder.
    #[arg(long)]
    task: PathBuf,
    /// First candidate.
    a: PathBuf,
    /// Second candidate.
    b: PathBuf,
    /// Ranker model folder (default: $CUDAPERF_RANKER_MODEL, else the model built into
    /// cudaperf).
    #[arg(long)]
    model: Option<PathBuf>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

/// Why `rank` could not rank.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A candidate could not be read.
    #[error(transparent)]
    Input(#[from] InputError),
    /// `--task` is not a task that loads.
    #[error(transparent)]
    Task(#[from] TaskArgError),
    /// A candidate holds no code to rank.
    #[error("{file}: {message}")]
    NoCode {
        /// The file, or `<stdin>`.
        file: String,
        /// Why: the extract error, or "no code block found".
        message: String,
    },
    /// The model could not be loaded, or a candidate not featurised or scored.
    #[error(transparent)]
    Ranker(Box<RankerError>),
    /// A candidate's features could not be computed.
    #[error("{file}: {source}")]
    Features {
        /// The file, or `<stdin>`.
        file: String,
        /// The ranker's error.
        source: Box<RankerError>,
    },
    /// The result could not be printed.
    #[error(transparent)]
    Output(#[from] OutputError),
}

impl From<RankerError> for Error {
    fn from(e: RankerError) -> Self {
        Error::Ranker(Box::new(e))
    }
}

/// Runs `cudaperf rank`.
pub fn run(a: Args) -> Result<ExitCode, Error> {
    input::check_stdin_once(&[a.a.clone(), a.b.clone()])?;
    let task = input::load_task(&a.task)?;
    // The environment is read here, at the edge; the library takes the folder.
    let model = a.model.clone().or_else(|| {
        std::env::var_os(cudaperf::pipeline::RANKER_MODEL_ENV)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    });
    let ranker = match &model {
        Some(dir) => TrainedRanker::load_unchecked(dir),
        None => TrainedRanker::shipped(),
    }?;
    // A reference-context model scores each file against the task's reference.
    let reference = base_features(
        &ranker,
        &task,
        &task.reference.source,
        "the task's reference",
    )
    .map_err(|source| Error::Features {
        file: "the task's reference".into(),
        source: Box::new(source),
    })?;
    let (ma, mb) = (
        score(&ranker, &task, &a.a, &reference)?,
        score(&ranker, &task, &a.b, &reference)?,
    );
    // Calibrated (the model's temperature), with the ensemble's disagreement.
    let verdict = ranker.compare_scores(&ma, &mb, None);
    let mean = |m: &[f32]| m.iter().sum::<f32>() / m.len().max(1) as f32;
    let (sa, sb) = (mean(&ma), mean(&mb));
    let p_a = f64::from(verdict.prob_faster);
    let (winner, p) = if p_a >= 0.5 {
        (&a.a, p_a)
    } else {
        (&a.b, 1.0 - p_a)
    };
    if a.json {
        let v = serde_json::json!({
            "task": task.id, "a": input::display_name(&a.a), "b": input::display_name(&a.b),
            "score_a": sa, "score_b": sb, "prob_a_faster": p_a,
            "predicted_faster": input::display_name(winner), "probability": p,
            "uncertainty": verdict.uncertainty,
            "model": model.as_ref().map_or_else(
                || cudaperf::ranker::SHIPPED_ORIGIN.to_string(),
                |m| m.display().to_string(),
            ),
        });
        println!("{}", pretty("the ranking", &v)?);
    } else {
        println!(
            "{} is predicted faster (p = {:.3}, ensemble disagreement {:.3}; scores {:.3} vs {:.3})",
            input::display_name(winner),
            p,
            verdict.uncertainty,
            sa,
            sb
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// The ranker members' scores of one candidate file, against the reference's base features.
fn score(
    ranker: &TrainedRanker,
    task: &Task,
    path: &Path,
    reference: &[f32],
) -> Result<Vec<f32>, Error> {
    let name = input::display_name(path);
    let sub = input::read_submission(path)?;
    let code = match (sub.code(), sub.candidate()) {
        (Some(code), _) => code,
        (None, Err(e)) => {
            return Err(Error::NoCode {
                file: name,
                message: e.to_string(),
            })
        }
        (None, Ok(_)) => {
            return Err(Error::NoCode {
                file: name,
                message: "no code block found".into(),
            })
        }
    };
    let features = base_features(ranker, task, code, &name).map_err(|source| Error::Features {
        file: name,
        source: Box::new(source),
    })?;
    Ok(ranker.member_scores(&ranker.input_against(&features, reference)?)?)
}

/// The base feature vector ([`TrainedRanker::base_feature_names`]) of `code`; a model with
/// launch-plan features needs the plan on the task's timed config.
fn base_features(
    ranker: &TrainedRanker,
    task: &Task,
    code: &str,
    name: &str,
) -> Result<Vec<f32>, RankerError> {
    let names = ranker.base_feature_names();
    let plan = if FeatureSet::of(names).needs_plan() {
        Some(TimedPlan::of_source(
            task,
            code,
            &PlanLimits::default(),
            name,
        )?)
    } else {
        None
    };
    let launch = plan.as_ref().map(|p| p.input(task, code));
    features_for(code, launch.as_ref(), names)
}
