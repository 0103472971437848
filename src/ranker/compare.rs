//! The leave-tasks-out comparison that `cudaperf train-ranker --cv K` and the
//! `cudaperf_ranker` example print: the learned ranker with and without launch-plan features
//! and the hand-weighted structural score, all on the same folds and pairs.

use std::collections::HashMap;
use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use super::config::RankerConfig;
use super::context::{context_base_len, REFERENCE_PREFIX};
use super::data::RankingData;
use super::error::Result;
use super::eval::{cross_validate, cross_validate_scorer, CvReport, PairAccuracy};
use super::from_dataset::FeatureSet;
use super::launch::LAUNCH_PREFIX;
use super::traffic::TRAFFIC_PREFIX;
use crate::analysis::{analyze, structural_score};
use crate::dataset::Dataset;

/// Cross-validation reports of several scorers on the same folds and pairs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CvComparison {
    /// The learned ranker on all of the data's features.
    pub learned: CvReport,
    /// The learned ranker on the same data without its launch-plan and traffic features
    /// (`None` when the data has none).
    pub without_launch: Option<CvReport>,
    /// The hand-weighted structural score (nothing trained).
    pub hand_weighted: CvReport,
}

impl CvComparison {
    /// The reports in table order.
    pub fn reports(&self) -> Vec<&CvReport> {
        std::iter::once(&self.learned)
            .chain(&self.without_launch)
            .chain(std::iter::once(&self.hand_weighted))
            .collect()
    }

    /// The markdown table of [`cv_table`].
    pub fn table(&self) -> String {
        cv_table(&self.reports())
    }
}

/// The hand-weighted structural score ([`structural_score`] without compile or occupancy
/// input) of every implementation of the dataset, by (task id, implementation name).
pub fn hand_weighted_scores(dataset: &Dataset) -> HashMap<(String, String), f64> {
    dataset
        .implementations()
        .map(|(task, imp)| {
            let f = analyze(imp.source.as_bytes());
            (
                (task.id.clone(), imp.name.clone()),
                structural_score(&f, None, None).value,
            )
        })
        .collect()
}

/// What a ranker trained on `names` is called in the table.
fn ranker_name(names: &[String]) -> String {
    let set = FeatureSet::of(names);
    let mut name = "learned ranker: structural".to_string();
    if set.launch {
        name.push_str(" + launch plan");
    }
    if set.traffic {
        name.push_str(" + traffic");
    }
    if set.ngram_buckets > 0 {
        name.push_str(&format!(" + {} n-grams", set.ngram_buckets));
    }
    if context_base_len(names).is_some() {
        name.push_str(", against the reference");
    }
    name
}

/// Leave-tasks-out `k_folds`-fold cross-validation of the learned ranker on `data` (built
/// from `dataset`), of the same ranker without `data`'s launch-plan features when it has
/// some, and of the hand-weighted structural score; all three use the folds of
/// `config.seed` and the same pairs.
pub fn compare_on_folds(
    dataset: &Dataset,
    data: &RankingData,
    k_folds: usize,
    config: &RankerConfig,
) -> Result<CvComparison> {
    let mut learned = cross_validate(data, k_folds, config)?;
    learned.scorer = ranker_name(&data.feature_names);
    let without_launch = if FeatureSet::of(&data.feature_names).needs_plan() {
        // A feature goes with its reference-relative copy.
        let plain = data.select_features(|n| {
            let n = n.strip_prefix(REFERENCE_PREFIX).unwrap_or(n);
            !n.starts_with(LAUNCH_PREFIX) && !n.starts_with(TRAFFIC_PREFIX)
        });
        let mut r = cross_validate(&plain, k_folds, config)?;
        r.scorer = ranker_name(&plain.feature_names);
        Some(r)
    } else {
        None
    };
    let hand = hand_weighted_scores(dataset);
    let hand_weighted = cross_validate_scorer(
        data,
        k_folds,
        config,
        "hand-weighted structural score",
        |s| {
            hand.get(&(s.task.clone(), s.name.clone()))
                .copied()
                .unwrap_or(0.0)
        },
    )?;
    Ok(CvComparison {
        learned,
        without_launch,
        hand_weighted,
    })
}

/// A markdown table of pooled pairwise accuracy, one row per report (all pairs, c2cuda,
/// torch2cuda, pairs at least 2x apart, closer pairs), then a chance row.
pub fn cv_table(reports: &[&CvReport]) -> String {
    let pct = |a: &PairAccuracy| {
        a.accuracy.map_or("-".to_string(), |x| {
            format!("{:.1} % ({} pairs)", 100.0 * x, a.pairs)
        })
    };
    let mut out = String::new();
    out.push_str("| scorer | all pairs | c2cuda | torch2cuda | >= 2x apart | < 2x apart |\n");
    out.push_str("|---|---|---|---|---|---|\n");
    for r in reports {
        let k = |name: &str| r.accuracy.by_kind.get(name).map_or("-".to_string(), pct);
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} |",
            r.scorer,
            pct(&r.accuracy.overall),
            k("c2cuda"),
            k("torch2cuda"),
            pct(&r.accuracy.ratio_at_least_2x),
            pct(&r.accuracy.ratio_below_2x)
        );
    }
    out.push_str("| chance | 50 % | | | | |\n");
    out
}
