//! Ranking data from the crate's dataset: structural feature vectors of every timed
//! implementation, and the pairs `Dataset::pairs` keeps (ties within noise dropped).

use std::collections::HashMap;

use super::{syntax_ngram_names, syntax_ngrams_of, Pair, RankerError, RankingData, Result, Sample};
use crate::analysis::{analyze, analyze_tree, Features, SourceTree, FEATURE_NAMES};
use crate::dataset::Dataset;
use crate::timings::Timings;

/// Feature names: the structural features, then `ngram_buckets` hashed syntax n-grams.
pub fn feature_names(ngram_buckets: usize) -> Vec<String> {
    FEATURE_NAMES
        .iter()
        .map(|s| s.to_string())
        .chain(syntax_ngram_names(ngram_buckets))
        .collect()
}

/// How many n-gram buckets a model's feature names ask for.
pub fn ngram_buckets(names: &[String]) -> usize {
    names
        .iter()
        .filter(|n| n.starts_with("syntax_ngram_"))
        .count()
}

/// The feature vector of a CUDA source for a model with these feature names (one parse for
/// the structural features and the n-grams).
pub fn features_for(source: &str, names: &[String]) -> Result<Vec<f32>> {
    match SourceTree::parse(source.as_bytes()) {
        Ok(tree) => features_from(&analyze_tree(&tree), Some(&tree), names),
        // Over the size cap or no tree: the analysis' own fallback (truncated or empty).
        Err(_) => features_from(&analyze(source.as_bytes()), None, names),
    }
}

/// The same from features already computed for the parsed `source` (the pipeline's
/// structure stage), so the source is neither parsed nor analysed again. `source` is only
/// read for n-grams; without it they are zeros.
pub fn features_from(
    features: &Features,
    source: Option<&SourceTree>,
    names: &[String],
) -> Result<Vec<f32>> {
    let buckets = ngram_buckets(names);
    let mut v = features.to_vector();
    if buckets > 0 {
        v.extend(match source {
            Some(tree) => syntax_ngrams_of(tree, buckets),
            None => vec![0.0; buckets],
        });
    }
    if v.len() != names.len() {
        return Err(RankerError::FeatureMismatch {
            model: "the ranker model".into(),
            detail: format!(
                "it expects {} features but this build of the analysis computes {} (retrain the model)",
                names.len(),
                v.len()
            ),
            model_features: names.to_vec(),
            expected_features: feature_names(0),
        });
    }
    Ok(v)
}

/// Samples for every correct, timed implementation and the pairs between them.
pub fn ranking_data(
    dataset: &Dataset,
    timings: &Timings,
    ngram_buckets: usize,
) -> Result<RankingData> {
    let names = feature_names(ngram_buckets);
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
            index.insert(key, samples.len());
            samples.push(Sample {
                task: task.id.clone(),
                kind: task.kind.as_str().to_string(),
                name: name.clone(),
                features: features_for(&imp.source, &names)?,
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
