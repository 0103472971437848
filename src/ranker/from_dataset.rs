//! Ranking data from the crate's dataset: structural feature vectors of every timed
//! implementation, and the pairs `Dataset::pairs` keeps (ties within noise dropped).

use std::collections::HashMap;

use super::launch::{
    detailed_probes, launch_features_with, tree_for, LaunchInput, TimedPlan, LAUNCH_FEATURE_NAMES,
    LAUNCH_PREFIX,
};
use super::traffic::{traffic_features_with, TRAFFIC_FEATURE_NAMES, TRAFFIC_PREFIX};
use super::trained::check_names;
use super::{syntax_ngram_names, syntax_ngrams_of, Pair, RankerError, RankingData, Result, Sample};
use crate::analysis::{analyze, analyze_tree, Features, KernelProbe, SourceTree, FEATURE_NAMES};
use crate::candidate::PlanLimits;
use crate::dataset::Dataset;
use crate::timings::Timings;

/// Which feature groups a feature vector holds, in this order: the structural features
/// ([`FEATURE_NAMES`], always), the launch-plan features ([`LAUNCH_FEATURE_NAMES`]) if
/// `launch`, the memory-traffic features ([`TRAFFIC_FEATURE_NAMES`]) if `traffic`, then
/// `ngram_buckets` hashed syntax n-grams. A model's feature names say which groups it was
/// trained on ([`FeatureSet::of`]): a model without `launch_*` or `traffic_*` names never
/// needs a launch plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FeatureSet {
    /// Include the launch-plan features.
    pub launch: bool,
    /// Include the memory-traffic, reuse and serial-work features (they read the launch
    /// plan too).
    pub traffic: bool,
    /// Number of hashed syntax n-gram buckets (0: none).
    pub ngram_buckets: usize,
}

impl FeatureSet {
    /// The groups a model with these feature names uses.
    pub fn of(names: &[String]) -> FeatureSet {
        FeatureSet {
            launch: names.iter().any(|n| n.starts_with(LAUNCH_PREFIX)),
            traffic: names.iter().any(|n| n.starts_with(TRAFFIC_PREFIX)),
            ngram_buckets: ngram_buckets(names),
        }
    }

    /// True when `names` are exactly [`names`](Self::names) (compared without building
    /// them: this runs for every scored candidate).
    pub fn matches(&self, names: &[String]) -> bool {
        let (launch, traffic) = self.groups();
        let fixed = FEATURE_NAMES.len() + launch.len() + traffic.len();
        names.len() == fixed + self.ngram_buckets
            && names
                .iter()
                .zip(FEATURE_NAMES.iter().chain(launch).chain(traffic))
                .all(|(a, b)| a == b)
            && names[fixed..].iter().enumerate().all(|(i, n)| {
                let digits = i.checked_ilog10().unwrap_or(0) as usize + 1;
                n.strip_prefix("syntax_ngram_")
                    .is_some_and(|d| d.len() == digits.max(3) && d.parse::<usize>() == Ok(i))
            })
    }

    /// The names of the optional plan groups this set includes (launch, traffic).
    fn groups(&self) -> (&'static [&'static str], &'static [&'static str]) {
        (
            if self.launch {
                LAUNCH_FEATURE_NAMES
            } else {
                &[]
            },
            if self.traffic {
                TRAFFIC_FEATURE_NAMES
            } else {
                &[]
            },
        )
    }

    /// True when the set reads the launch plan (launch-plan or traffic features).
    pub fn needs_plan(&self) -> bool {
        self.launch || self.traffic
    }

    /// The feature names, in vector order.
    pub fn names(&self) -> Vec<String> {
        let (launch, traffic) = self.groups();
        FEATURE_NAMES
            .iter()
            .chain(launch)
            .chain(traffic)
            .map(|s| s.to_string())
            .chain(syntax_ngram_names(self.ngram_buckets))
            .collect()
    }
}

/// Feature names without launch-plan features: the structural features, then
/// `ngram_buckets` hashed syntax n-grams (see [`FeatureSet::names`]).
pub fn feature_names(ngram_buckets: usize) -> Vec<String> {
    FeatureSet {
        ngram_buckets,
        ..FeatureSet::default()
    }
    .names()
}

/// How many n-gram buckets a model's feature names ask for.
pub fn ngram_buckets(names: &[String]) -> usize {
    names
        .iter()
        .filter(|n| n.starts_with("syntax_ngram_"))
        .count()
}

/// The feature vector of a CUDA source for a model with these feature names (one parse for
/// the structural features and the n-grams). `launch` is the source's launch plan resolved
/// on its task's timed configuration ([`TimedPlan`]); it is only read, and only required,
/// when `names` include launch-plan features.
pub fn features_for(
    source: &str,
    launch: Option<&LaunchInput<'_>>,
    names: &[String],
) -> Result<Vec<f32>> {
    match SourceTree::parse(source.as_bytes()) {
        Ok(tree) => features_from(&analyze_tree(&tree), Some(&tree), launch, names),
        // Over the size cap or no tree: the analysis' own fallback (truncated or empty).
        Err(_) => features_from(&analyze(source.as_bytes()), None, launch, names),
    }
}

/// The same from features already computed for the parsed `source` (the pipeline's
/// structure stage), so the source is neither parsed nor analysed again. `source` is only
/// read for n-grams; without it they are zeros. Errors with
/// [`RankerError::FeatureMismatch`] when `names` are not a [`FeatureSet`]'s names, and with
/// [`RankerError::LaunchPlan`] when they need launch-plan features and `launch` is `None`.
pub fn features_from(
    features: &Features,
    source: Option<&SourceTree>,
    launch: Option<&LaunchInput<'_>>,
    names: &[String],
) -> Result<Vec<f32>> {
    let set = FeatureSet::of(names);
    if !set.matches(names) {
        check_names("the ranker model", names, &set.names()).map_err(|e| match e {
            RankerError::FeatureMismatch {
                model,
                detail,
                model_features,
                expected_features,
            } => RankerError::FeatureMismatch {
                model,
                detail: format!(
                    "{detail} (this build computes the structural features, then optionally the \
                 launch-plan and n-gram ones; retrain the model)"
                ),
                model_features,
                expected_features,
            },
            other => other,
        })?;
    }
    let mut v = features.to_vector();
    if set.needs_plan() {
        let input = launch.ok_or_else(|| RankerError::LaunchPlan {
            what: "the ranker input".into(),
            reason: "the model uses launch_* or traffic_* features but no resolved launch plan \
                     was given"
                .into(),
        })?;
        // The warp probe reads the same parse as the n-grams (parsed again only without it).
        let input = LaunchInput {
            tree: input.tree.or(source),
            ..*input
        };
        // One detailed warp probe per launch, shared by both groups (it is most of their cost).
        let mut parsed = None;
        let tree = tree_for(input.tree, input.source, &mut parsed);
        let probed = detailed_probes(&input, tree);
        let what = "the ranker input";
        if set.launch {
            let sectors: Vec<_> = probed
                .iter()
                .map(|k| {
                    k.as_ref()
                        .map(KernelProbe::global_sectors)
                        .unwrap_or_default()
                })
                .collect();
            let named = launch_features_with(&input, tree, features, what, &sectors)?;
            v.extend(named.into_iter().map(|(_, x)| x));
        }
        if set.traffic {
            let named = traffic_features_with(&input, features, what, &probed)?;
            v.extend(named.into_iter().map(|(_, x)| x));
        }
    }
    if set.ngram_buckets > 0 {
        v.extend(match source {
            Some(tree) => syntax_ngrams_of(tree, set.ngram_buckets),
            None => vec![0.0; set.ngram_buckets],
        });
    }
    Ok(v)
}

/// Samples for every correct, timed implementation and the pairs between them, with the
/// features of `set`. With launch-plan features every implementation's plan is resolved on
/// its task's timed configuration ([`TimedPlan::of_source`], default [`PlanLimits`]); one
/// that does not resolve is a [`RankerError::LaunchPlan`] naming it.
pub fn ranking_data(dataset: &Dataset, timings: &Timings, set: &FeatureSet) -> Result<RankingData> {
    let names = set.names();
    let pairs = dataset.pairs(timings);
    let mut index: HashMap<(String, String), usize> = HashMap::new();
    let mut samples = Vec::new();
    for p in &pairs {
        for name in [&p.faster, &p.slower] {
            let key = (p.task.clone(), name.clone());
            if index.contains_key(&key) {
                continue;
            }
            let Some(task) = dataset.task(&p.task) else {
                continue;
            };
            let Some(imp) = task.implementation(name) else {
                continue;
            };
            let what = format!("`{}/{}`", task.id, name);
            let plan = if set.needs_plan() {
                Some(TimedPlan::of_source(
                    task,
                    &imp.source,
                    &PlanLimits::default(),
                    &what,
                )?)
            } else {
                None
            };
            let input = plan.as_ref().map(|p| p.input(task, &imp.source));
            let features =
                features_for(&imp.source, input.as_ref(), &names).map_err(|e| match e {
                    RankerError::LaunchPlan { reason, .. } => {
                        RankerError::LaunchPlan { what, reason }
                    }
                    other => other,
                })?;
            index.insert(key, samples.len());
            samples.push(Sample {
                task: task.id.clone(),
                kind: task.kind.as_str().to_string(),
                name: name.clone(),
                features,
            });
        }
    }
    let pairs = pairs
        .iter()
        .filter_map(|p| {
            Some(Pair {
                fast: *index.get(&(p.task.clone(), p.faster.clone()))?,
                slow: *index.get(&(p.task.clone(), p.slower.clone()))?,
                log_ratio: p.log_ratio as f32,
                train_only: false,
            })
        })
        .collect();
    let data = RankingData {
        feature_names: names,
        samples,
        pairs,
    };
    data.validate()?;
    Ok(data)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_agrees_with_names() {
        for (launch, traffic) in [(false, false), (true, false), (true, true), (false, true)] {
            for ngram_buckets in [0, 3, 1001] {
                let set = FeatureSet {
                    launch,
                    traffic,
                    ngram_buckets,
                };
                let names = set.names();
                assert!(set.matches(&names));
                assert_eq!(FeatureSet::of(&names), set);
                let mut other = names.clone();
                other.swap(0, 1);
                assert!(!set.matches(&other));
                if ngram_buckets > 0 {
                    let mut other = names.clone();
                    let last = other.len() - 1;
                    other[last] = format!("syntax_ngram_0{}", ngram_buckets - 1);
                    assert!(!set.matches(&other));
                }
                assert!(!set.matches(&names[1..]));
            }
        }
        let mut bad = feature_names(0);
        bad[3] = "something_else".into();
        let err = features_from(&Features::default(), None, None, &bad).unwrap_err();
        assert!(matches!(err, RankerError::FeatureMismatch { .. }), "{err}");
        let ok = features_from(&Features::default(), None, None, &feature_names(2)).unwrap();
        assert_eq!(ok.len(), FEATURE_NAMES.len() + 2);
    }
}
