//! Rewards by preset name, like the CLI's `--reward`, with optional weights.

use super::api::{RewardSpec, Weights};
use crate::reward::{presets, RankerReward, Reward, ShrunkRankerReward, StructuralReward};

/// The preset names a request may use.
pub const PRESET_NAMES: &str = presets::NAMES;

/// A reward spec that names no preset, or has bad weights: the field and what is wrong.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("field `{field}`: {message}")]
pub struct SpecError {
    /// The field, e.g. `reward.weights.speed`.
    pub field: String,
    /// What is wrong.
    pub message: String,
}

fn err(field: &str, message: String) -> SpecError {
    SpecError {
        field: field.into(),
        message,
    }
}

/// Builds the reward a spec names; weights are taken only by `cudaperf`.
///
/// ```
/// use cudaperf::serve::{build_reward, RewardSpec};
/// let r = build_reward(&RewardSpec { preset: "fast_p:1.5".into(), weights: None })?;
/// assert!(r.name().contains("1.5"));
/// assert!(build_reward(&RewardSpec { preset: "nope".into(), weights: None }).is_err());
/// # Ok::<(), cudaperf::serve::SpecError>(())
/// ```
pub fn build_reward(spec: &RewardSpec) -> Result<Box<dyn Reward>, SpecError> {
    if spec.weights.is_some() && spec.preset != "cudaperf" {
        return Err(err(
            "reward.weights",
            format!(
                "only the cudaperf preset takes weights (got preset `{}`)",
                spec.preset
            ),
        ));
    }
    match (spec.preset.as_str(), &spec.weights) {
        ("cudaperf", Some(w)) => Ok(Box::new(cudaperf_weighted(w)?)),
        (name, _) => presets::by_name(name).map_err(|e| err("reward.preset", e.to_string())),
    }
}

fn cudaperf_weighted(w: &Weights) -> Result<crate::reward::Weighted, SpecError> {
    let d = presets::CudaPerfWeights::default();
    let pick = |name: &str, v: Option<f64>, default: f64| match v {
        Some(x) if !x.is_finite() => Err(err(
            &format!("reward.weights.{name}"),
            format!("{x} is not a finite number"),
        )),
        Some(x) => Ok(x),
        None => Ok(default),
    };
    let weights = presets::CudaPerfWeights {
        speed: pick("speed", w.speed, d.speed)?,
        structure: pick("structure", w.structure, d.structure)?,
        rank: pick("rank", w.rank, d.rank)?,
        syntax_credit: pick("syntax_credit", w.syntax_credit, d.syntax_credit)?,
        roofline: pick("roofline", w.roofline, d.roofline)?,
        speed_cap_log2: pick("speed_cap_log2", w.speed_cap_log2, d.speed_cap_log2)?,
    };
    if weights.speed_cap_log2 < 0.0 {
        return Err(err(
            "reward.weights.speed_cap_log2",
            format!(
                "{} is below 0: the cap of the log2-speedup term must be at least 0 (1×)",
                weights.speed_cap_log2
            ),
        ));
    }
    let structure: Option<Box<dyn Reward>> =
        (weights.structure != 0.0).then(|| Box::new(StructuralReward) as Box<dyn Reward>);
    let ranker = ranker_term(weights.rank, w.rank_uncertainty_scale)?;
    Ok(presets::cudaperf_with(weights, structure, ranker))
}

/// The ranker term of a weighted `cudaperf`: none at weight 0, shrunk by the ensemble's
/// disagreement when `uncertainty_scale` is given.
fn ranker_term(
    weight: f64,
    uncertainty_scale: Option<f64>,
) -> Result<Option<Box<dyn Reward>>, SpecError> {
    if weight == 0.0 {
        return Ok(None);
    }
    let Some(scale) = uncertainty_scale else {
        return Ok(Some(Box::new(RankerReward)));
    };
    let shrunk = ShrunkRankerReward::new(scale).ok_or_else(|| {
        err(
            "reward.weights.rank_uncertainty_scale",
            format!("{scale} must be a finite number > 0 (e.g. 0.15)"),
        )
    })?;
    Ok(Some(Box::new(shrunk)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(preset: &str, weights: Option<Weights>) -> RewardSpec {
        RewardSpec {
            preset: preset.into(),
            weights,
        }
    }

    #[test]
    fn every_documented_preset_builds() {
        for name in [
            "cudaperf",
            "correctness",
            "kevin",
            "dhrcl",
            "fast_p:0",
            "fast_p:2",
        ] {
            assert!(build_reward(&spec(name, None)).is_ok(), "{name}");
        }
    }

    #[test]
    fn unknown_preset_lists_the_valid_ones() {
        let e = build_reward(&spec("kevni", None)).err().unwrap();
        assert_eq!(e.field, "reward.preset");
        assert!(e.to_string().contains("kevni"), "{e}");
        assert!(e.to_string().contains(PRESET_NAMES), "{e}");
        let e = build_reward(&spec("fast_p:-1", None)).err().unwrap();
        assert!(e.to_string().contains("p >= 0"), "{e}");
    }

    #[test]
    fn weights_only_for_cudaperf_and_finite() {
        let w = Weights {
            speed: Some(0.5),
            ..Default::default()
        };
        assert!(build_reward(&spec("cudaperf", Some(w))).is_ok());
        let e = build_reward(&spec("kevin", Some(w))).err().unwrap();
        assert_eq!(e.field, "reward.weights");
        let bad = Weights {
            rank: Some(f64::INFINITY),
            ..Default::default()
        };
        let e = build_reward(&spec("cudaperf", Some(bad))).err().unwrap();
        assert_eq!(e.field, "reward.weights.rank");
    }

    #[test]
    fn rank_uncertainty_scale_picks_the_shrunk_ranker_term() {
        let shrunk = Weights {
            rank_uncertainty_scale: Some(0.15),
            ..Default::default()
        };
        assert!(build_reward(&spec("cudaperf", Some(shrunk))).is_ok());
        let name = |w: f64, s: Option<f64>| ranker_term(w, s).unwrap().map(|r| r.name());
        assert_eq!(name(0.1, Some(0.15)).unwrap(), "ranker_shrunk(0.15)");
        assert_eq!(name(0.1, None).unwrap(), "ranker");
        assert_eq!(name(0.0, Some(0.15)), None);
        for bad in [0.0, -1.0, f64::NAN] {
            let w = Weights {
                rank_uncertainty_scale: Some(bad),
                ..Default::default()
            };
            let e = build_reward(&spec("cudaperf", Some(w))).err().unwrap();
            assert_eq!(e.field, "reward.weights.rank_uncertainty_scale", "{bad}");
            assert!(e.to_string().contains("> 0"), "{e}");
        }
        let json = r#"{"preset": "cudaperf", "weights": {"rank_uncertainty_scale": 0.2}}"#;
        let s: RewardSpec = serde_json::from_str(json).unwrap();
        assert_eq!(s.weights.unwrap().rank_uncertainty_scale, Some(0.2));
        assert!(build_reward(&s).is_ok());
    }
}
