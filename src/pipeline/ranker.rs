//! Stage 5, ranker: the learned pairwise score of the candidate against the task's
//! reference, from the structure stage's features (no second parse or analysis) and, for a
//! model with launch-plan features, the extract stage's plan on the task's timed
//! configuration (resolved here only when the extract stage did not time that one).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};

use crate::analysis::{Features, SourceTree};
use crate::candidate::{Candidate, PlanLimits};
use crate::ranker::{
    features_for, features_from, FeatureSet, LaunchInput, TimedPlan, TrainedRanker, SHIPPED_ORIGIN,
};
use crate::task::Task;

use super::error::NoRanker;
use super::extract::Plan;
use super::report::{RankerScores, RankerStage};

/// What the ranker stage reads of a candidate besides its structure features: the
/// ABI-checked candidate and its plan from the extract stage (either may be missing when
/// that stage failed; only a model with launch-plan features needs them).
#[derive(Clone, Copy)]
pub(crate) struct RankerInput<'a> {
    pub features: &'a Features,
    pub tree: Option<&'a SourceTree>,
    pub candidate: Option<&'a Candidate>,
    pub plan: Option<&'a Plan>,
    pub limits: &'a PlanLimits,
}

/// Environment variable naming a ranker model folder that replaces the shipped model. The
/// library does not read it: the command line (and so `cudaperf serve` and `cudaperf node`)
/// puts it in `EvalOptions::ranker_model` when that is not given.
pub const RANKER_MODEL_ENV: &str = "CUDAPERF_RANKER_MODEL";

/// What the stage keeps of a task's reference.
#[derive(Clone)]
struct ReferenceScores {
    features: Vec<f32>,
    members: Vec<f32>,
}

/// The ranker stage's state: the model (loaded on first use) and the reference scores.
pub(crate) struct RankerState {
    source: Option<PathBuf>,
    origin: String,
    model: OnceLock<Result<Arc<TrainedRanker>, NoRanker>>,
    /// A task's reference, by task id: its base features (a reference-context model scores
    /// candidates against them) and each member's score of it.
    reference_scores: Mutex<HashMap<String, ReferenceScores>>,
}

impl RankerState {
    pub fn new(explicit: Option<&PathBuf>) -> RankerState {
        // The explicit folder, else the model embedded in the library.
        let source = explicit.cloned();
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
    pub fn model(&self) -> Result<&Arc<TrainedRanker>, NoRanker> {
        self.model
            .get_or_init(|| {
                let loaded = match &self.source {
                    Some(dir) => TrainedRanker::load_unchecked(dir),
                    None => TrainedRanker::shipped(),
                };
                loaded.map(Arc::new).map_err(|e| NoRanker {
                    reason: e.to_string(),
                })
            })
            .as_ref()
            .map_err(Clone::clone)
    }

    /// The ranker stage for a candidate whose structure stage produced `input.features` from
    /// `input.tree`.
    pub fn run(&self, task: &Task, input: &RankerInput<'_>) -> RankerStage {
        if task.torch_reference() {
            // The ranker compares CUDA with CUDA; a Python reference has no features.
            return RankerStage::NotApplicable {
                model: self.origin(),
                reason: format!(
                    "task `{}` has a PyTorch reference, no CUDA one to compare with",
                    task.id
                ),
            };
        }
        match self.score(task, input) {
            Ok(scores) => RankerStage::Scored(scores),
            Err(error) => RankerStage::Failed {
                model: self.origin(),
                error,
            },
        }
    }

    fn score(&self, task: &Task, input: &RankerInput<'_>) -> Result<RankerScores, String> {
        let ranker = self.model().map_err(|e| e.reason)?;
        let names = ranker.base_feature_names();
        let launch = FeatureSet::of(names).needs_plan();
        let source = input.candidate.map_or("", |c| c.source.as_str());
        let timed = if launch {
            Some(candidate_plan(task, input)?)
        } else {
            None
        };
        let cand_features = features_from(
            input.features,
            input.tree,
            timed.as_ref().map(|t| t.input(task, source)).as_ref(),
            names,
        )
        .map_err(|e| e.to_string())?;
        let cached = self
            .reference_scores
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&task.id)
            .cloned();
        let reference = match cached {
            Some(r) => r,
            None => {
                let what = "the task's reference";
                let plan = if launch {
                    Some(
                        TimedPlan::of_source(task, &task.reference.source, input.limits, what)
                            .map_err(|e| e.to_string())?,
                    )
                } else {
                    None
                };
                let r = features_for(
                    &task.reference.source,
                    plan.as_ref()
                        .map(|p| p.input(task, &task.reference.source))
                        .as_ref(),
                    names,
                )
                .and_then(|f| {
                    let members = ranker.member_scores(&ranker.input_against(&f, &f)?)?;
                    Ok(ReferenceScores {
                        features: f,
                        members,
                    })
                })
                .map_err(|e| format!("{what}: {e}"))?;
                self.reference_scores
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(task.id.clone(), r.clone());
                r
            }
        };
        let cand_input = ranker
            .input_against(&cand_features, &reference.features)
            .map_err(|e| e.to_string())?;
        let cand = ranker
            .member_scores(&cand_input)
            .map_err(|e| e.to_string())?;
        let reference = reference.members;
        let verdict = ranker.compare_scores(&cand, &reference, Some(&cand_input));
        let mean = |v: &[f32]| f64::from(v.iter().sum::<f32>()) / v.len().max(1) as f64;
        Ok(RankerScores {
            candidate_score: mean(&cand),
            reference_score: mean(&reference),
            prob_faster: f64::from(verdict.prob_faster),
            model: self.origin(),
            uncertainty: Some(f64::from(verdict.uncertainty)),
            out_of_range: Some(f64::from(verdict.out_of_range)),
        })
    }
}

/// A plan on the task's timed configuration (over all of its configs), borrowed from the
/// extract stage when it resolved that configuration, else resolved here.
enum CandidatePlan<'a> {
    Borrowed(usize, &'a crate::candidate::ResolvedPlan),
    Owned(TimedPlan),
}

impl CandidatePlan<'_> {
    fn input<'t>(&'t self, task: &'t Task, source: &'t str) -> LaunchInput<'t> {
        match self {
            CandidatePlan::Borrowed(config, plan) => LaunchInput {
                task,
                config: &task.configs[*config],
                plan,
                source,
                tree: None,
            },
            CandidatePlan::Owned(t) => t.input(task, source),
        }
    }
}

fn candidate_plan<'a>(task: &Task, input: &RankerInput<'a>) -> Result<CandidatePlan<'a>, String> {
    let what = "the candidate";
    let timed = TimedPlan::timed_config(task)
        .ok_or_else(|| format!("launch-plan features: task `{}` has no config", task.id))?;
    if let Some(plan) = input.plan {
        if plan.configs.get(plan.timed) == Some(&timed) {
            if let Some(p) = plan.timed_plan() {
                return Ok(CandidatePlan::Borrowed(timed, p));
            }
        }
    }
    let candidate = input.candidate.ok_or_else(|| {
        format!("launch-plan features of {what}: no launch plan (the extract stage failed)")
    })?;
    TimedPlan::of_checked(task, candidate, input.limits, what)
        .map(CandidatePlan::Owned)
        .map_err(|e| e.to_string())
}
