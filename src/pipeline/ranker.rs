//! Stage 5, ranker: the learned pairwise score of the candidate against the task's
//! reference, from the structure stage's features (no second parse or analysis).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};

use crate::analysis::{Features, SourceTree};
use crate::ranker::{features_for, features_from, sigmoid, TrainedRanker, SHIPPED_ORIGIN};
use crate::task::Task;

use super::report::RankerStage;

/// Environment variable naming a ranker model folder that replaces the shipped model (when
/// `EvalOptions::ranker_model` is not set).
pub const RANKER_MODEL_ENV: &str = "CUDAPERF_RANKER_MODEL";

/// Where the model comes from: the explicit folder, else `$CUDAPERF_RANKER_MODEL`, else the
/// model embedded in the library.
fn model_source(explicit: Option<&PathBuf>) -> Option<PathBuf> {
    explicit.cloned().or_else(|| {
        std::env::var_os(RANKER_MODEL_ENV)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    })
}

/// The ranker stage's state: the model (loaded on first use) and the reference scores.
pub(crate) struct RankerState {
    source: Option<PathBuf>,
    origin: String,
    model: OnceLock<Result<Arc<TrainedRanker>, String>>,
    reference_scores: Mutex<HashMap<String, f32>>,
}

impl RankerState {
    pub fn new(explicit: Option<&PathBuf>) -> RankerState {
        let source = model_source(explicit);
        RankerState {
            origin: source
                .as_ref()
                .map_or_else(|| SHIPPED_ORIGIN.to_string(), |p| p.display().to_string()),
            source,
            model: OnceLock::new(),
            reference_scores: Mutex::new(HashMap::new()),
        }
    }

    /// Uses this model instead of loading one.
    pub fn with_model(ranker: TrainedRanker) -> RankerState {
        let model = OnceLock::new();
        let _ = model.set(Ok(Arc::new(ranker)));
        RankerState {
            source: None,
            origin: "in-memory model".into(),
            model,
            reference_scores: Mutex::new(HashMap::new()),
        }
    }

    /// How the model is named in reports.
    pub fn origin(&self) -> String {
        self.origin.clone()
    }

    /// The model, loaded on first use; `Err` says why there is none (an unreadable model
    /// makes the stage unavailable, never a made-up score).
    pub fn model(&self) -> Result<&Arc<TrainedRanker>, String> {
        self.model
            .get_or_init(|| {
                let loaded = match &self.source {
                    Some(dir) => TrainedRanker::load_unchecked(dir),
                    None => TrainedRanker::shipped(),
                };
                loaded.map(Arc::new).map_err(|e| e.to_string())
            })
            .as_ref()
            .map_err(Clone::clone)
    }

    /// The ranker stage for a candidate whose structure stage produced `features` from
    /// `tree`.
    pub fn run(&self, task: &Task, features: &Features, tree: Option<&SourceTree>) -> RankerStage {
        self.score(task, features, tree)
            .unwrap_or_else(|e| RankerStage {
                candidate_score: f64::NAN,
                reference_score: f64::NAN,
                prob_faster: f64::NAN,
                model: self.origin(),
                error: Some(e),
            })
    }

    fn score(
        &self,
        task: &Task,
        features: &Features,
        tree: Option<&SourceTree>,
    ) -> Result<RankerStage, String> {
        let ranker = self.model()?;
        let names = ranker.feature_names();
        let cand = features_from(features, tree, names)
            .and_then(|f| ranker.score(&f))
            .map_err(|e| e.to_string())?;
        let cached = self
            .reference_scores
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&task.id)
            .copied();
        let reference = match cached {
            Some(r) => r,
            None => {
                let r = features_for(&task.reference.source, names)
                    .and_then(|f| ranker.score(&f))
                    .map_err(|e| format!("the task's reference: {e}"))?;
                self.reference_scores
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(task.id.clone(), r);
                r
            }
        };
        Ok(RankerStage {
            candidate_score: f64::from(cand),
            reference_score: f64::from(reference),
            prob_faster: f64::from(sigmoid(cand - reference)),
            model: self.origin(),
            error: None,
        })
    }
}
