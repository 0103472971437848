//! Reference context: a candidate's features next to how far they are from its task's
//! reference implementation's.
//!
//! The ranker only ever orders implementations of one task, and the reward compares every
//! candidate with that task's reference. A scorer that sees only `x` must learn what "many
//! barriers" or "a small grid" means for every kind of task at once; one that also sees
//! `x − x_ref` learns what *changing* them costs relative to a known-good kernel of the same
//! problem. On the leave-tasks-out folds this is worth about two points of pairwise accuracy
//! (docs/ranker-cv.md).
//!
//! A context model's feature names are its base names followed by the same names with the
//! [`REFERENCE_PREFIX`]; [`TrainedRanker::input_against`] builds its input from the base
//! feature vectors of the candidate and the reference.
//!
//! [`TrainedRanker::input_against`]: super::TrainedRanker::input_against

use std::collections::HashMap;

use super::data::{RankingData, Sample};
use super::error::{RankerError, Result};

/// Prefix of the reference-relative feature names: `vs_reference_{name}` is the candidate's
/// `name` minus the reference's.
pub const REFERENCE_PREFIX: &str = "vs_reference_";

/// Name of the sample that is its task's reference implementation (the crate's dataset names
/// each task's reference `reference`).
pub const REFERENCE_SAMPLE: &str = "reference";

/// The feature names of a context model on `base`: `base`, then each with [`REFERENCE_PREFIX`].
pub fn context_names(base: &[String]) -> Vec<String> {
    base.iter()
        .cloned()
        .chain(base.iter().map(|n| format!("{REFERENCE_PREFIX}{n}")))
        .collect()
}

/// The number of base features when `names` are [`context_names`] of their first half, else
/// `None` (a model without reference context).
pub fn context_base_len(names: &[String]) -> Option<usize> {
    let half = names.len() / 2;
    (half > 0
        && names.len() == 2 * half
        && names[..half].iter().zip(&names[half..]).all(|(b, c)| {
            !b.starts_with(REFERENCE_PREFIX) && c.strip_prefix(REFERENCE_PREFIX) == Some(b)
        }))
    .then_some(half)
}

/// The context input `[candidate, candidate − reference]` from two base feature vectors of
/// the same length.
pub fn with_reference(candidate: &[f32], reference: &[f32]) -> Vec<f32> {
    let mut v = Vec::with_capacity(2 * candidate.len());
    v.extend_from_slice(candidate);
    v.extend(candidate.iter().zip(reference).map(|(c, r)| c - r));
    v
}

impl RankingData {
    /// The same samples and pairs with [`context_names`]: each sample's features followed by
    /// their difference from its task's [`REFERENCE_SAMPLE`] (zero for the reference itself).
    /// Errors with [`RankerError::NoReference`] naming a task without a reference sample, and
    /// when the data already has reference-relative features.
    pub fn with_reference_context(&self) -> Result<RankingData> {
        self.validate()?;
        if self
            .feature_names
            .iter()
            .any(|n| n.starts_with(REFERENCE_PREFIX))
        {
            return Err(RankerError::config(
                "reference context",
                format!("the data already holds `{REFERENCE_PREFIX}*` features"),
            ));
        }
        let mut reference: HashMap<&str, &[f32]> = HashMap::new();
        for s in &self.samples {
            if s.name == REFERENCE_SAMPLE {
                reference.entry(s.task.as_str()).or_insert(&s.features);
            }
        }
        let samples = self
            .samples
            .iter()
            .map(|s| {
                let r = reference
                    .get(s.task.as_str())
                    .ok_or_else(|| RankerError::NoReference {
                        task: s.task.clone(),
                        name: REFERENCE_SAMPLE.into(),
                    })?;
                Ok(Sample {
                    features: with_reference(&s.features, r),
                    ..s.clone()
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(RankingData {
            feature_names: context_names(&self.feature_names),
            samples,
            pairs: self.pairs.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ranker::Pair;

    fn sample(task: &str, name: &str, f: &[f32]) -> Sample {
        Sample {
            task: task.into(),
            kind: "c2cuda".into(),
            name: name.into(),
            features: f.to_vec(),
        }
    }

    #[test]
    fn context_features_are_the_difference_from_the_tasks_reference() {
        let data = RankingData {
            feature_names: vec!["a".into(), "b".into()],
            samples: vec![
                sample("t", "fast", &[1.0, 5.0]),
                sample("t", "reference", &[2.0, 3.0]),
                sample("u", "reference", &[0.0, 0.0]),
                sample("u", "slow", &[4.0, -1.0]),
            ],
            pairs: vec![
                Pair {
                    fast: 0,
                    slow: 1,
                    log_ratio: 0.5,
                    train_only: false,
                },
                Pair {
                    fast: 2,
                    slow: 3,
                    log_ratio: 0.5,
                    train_only: false,
                },
            ],
        };
        let c = data.with_reference_context().unwrap();
        assert_eq!(
            c.feature_names,
            ["a", "b", "vs_reference_a", "vs_reference_b"]
        );
        assert_eq!(c.samples[0].features, [1.0, 5.0, -1.0, 2.0]);
        assert_eq!(c.samples[1].features, [2.0, 3.0, 0.0, 0.0]);
        assert_eq!(c.samples[3].features, [4.0, -1.0, 4.0, -1.0]);
        assert_eq!(c.pairs, data.pairs);
        assert_eq!(context_base_len(&c.feature_names), Some(2));
        assert_eq!(context_base_len(&data.feature_names), None);
        let twice = c.with_reference_context().unwrap_err();
        assert!(twice.to_string().contains("already holds"), "{twice}");

        let mut no_ref = data.clone();
        no_ref.samples[2].name = "other".into();
        let err = no_ref.with_reference_context().unwrap_err();
        assert!(
            matches!(&err, RankerError::NoReference { task, .. } if task == "u"),
            "{err}"
        );
    }

    #[test]
    fn only_a_prefixed_copy_of_the_first_half_is_a_context() {
        let n = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(context_base_len(&n(&["x", "vs_reference_x"])), Some(1));
        assert_eq!(context_base_len(&n(&["x", "vs_reference_y"])), None);
        assert_eq!(context_base_len(&n(&["x", "y"])), None);
        assert_eq!(context_base_len(&n(&[])), None);
        assert_eq!(context_base_len(&n(&["x", "vs_reference_x", "z"])), None);
    }
}
