use super::*;
use crate::pipeline::report::Term;

fn close(a: &[f64], b: &[f64]) {
    assert_eq!(a.len(), b.len(), "{a:?} vs {b:?}");
    for (x, y) in a.iter().zip(b) {
        assert!((x - y).abs() < 1e-9, "{a:?} vs {b:?}");
    }
}

/// Rewards [1, 2, 3, 6]: mean 3, deviations [-2, -1, 0, 3], sum of squares 14,
/// sample std sqrt(14/3) = 2.160247.
#[test]
fn grpo_by_hand() {
    let a = grpo(&[1.0, 2.0, 3.0, 6.0], 0.0).unwrap();
    let s = (14.0f64 / 3.0).sqrt();
    close(&a, &[-2.0 / s, -1.0 / s, 0.0, 3.0 / s]);
    // eps is added to the std, not to the variance.
    let a = grpo(&[0.0, 2.0], 1.0).unwrap(); // std = sqrt(2)
    let d = 2f64.sqrt() + 1.0;
    close(&a, &[-1.0 / d, 1.0 / d]);
    // A group of one has no spread: advantage 0, not NaN.
    close(&grpo(&[5.0], 1e-4).unwrap(), &[0.0]);
    close(&grpo(&[5.0], 0.0).unwrap(), &[0.0]);
}

#[test]
fn dr_grpo_by_hand() {
    close(
        &dr_grpo(&[1.0, 2.0, 3.0, 6.0]).unwrap(),
        &[-2.0, -1.0, 0.0, 3.0],
    );
}

/// RLOO of [1, 2, 3, 6]: baselines (2+3+6)/3 = 11/3, (1+3+6)/3 = 10/3, 3, 2.
#[test]
fn rloo_by_hand() {
    close(
        &rloo(&[1.0, 2.0, 3.0, 6.0]).unwrap(),
        &[1.0 - 11.0 / 3.0, 2.0 - 10.0 / 3.0, 0.0, 4.0],
    );
    assert_eq!(
        rloo(&[1.0]),
        Err(RlError::GroupTooSmall {
            estimator: "rloo",
            needed: 2,
            len: 1
        })
    );
}

/// Kevin's γ = 0.4 on rewards [-0.75, 0.5, 2.0]:
/// G2 = 2, G1 = 0.5 + 0.4·2 = 1.3, G0 = -0.75 + 0.4·1.3 = -0.23.
#[test]
fn discounted_returns_by_hand() {
    close(
        &discounted_returns(&[-0.75, 0.5, 2.0], 0.4).unwrap(),
        &[-0.23, 1.3, 2.0],
    );
    close(&discounted_returns(&[1.0, 2.0], 0.0).unwrap(), &[1.0, 2.0]);
    close(&discounted_returns(&[1.0, 2.0], 1.0).unwrap(), &[3.0, 2.0]);
    assert_eq!(discounted_returns(&[1.0], 1.5), Err(RlError::Gamma(1.5)));
    assert!(discounted_returns(&[1.0], f64::NAN).is_err());
}

#[test]
fn zero_variance_groups_are_dropped_only_when_asked() {
    let opts = AdvantageOptions::default();
    assert_eq!(advantages(&[0.3, 0.3, 0.3], &opts).unwrap(), None);
    let keep = AdvantageOptions {
        drop_zero_variance: false,
        ..opts
    };
    assert_eq!(
        advantages(&[0.3, 0.3, 0.3], &keep).unwrap(),
        Some(vec![0.0; 3])
    );
    // Within the tolerance counts as equal.
    let tol = AdvantageOptions {
        zero_variance_tol: 0.01,
        ..opts
    };
    assert_eq!(advantages(&[0.3, 0.305], &tol).unwrap(), None);
    assert!(advantages(&[0.3, 0.4], &opts).unwrap().is_some());
}

#[test]
fn bad_input_is_an_error_not_a_panic() {
    let opts = AdvantageOptions::default();
    assert_eq!(advantages(&[], &opts), Err(RlError::EmptyGroup));
    assert!(matches!(
        advantages(&[1.0, f64::NAN], &opts),
        Err(RlError::NonFinite { index: 1, value }) if value.is_nan()
    ));
    assert!(matches!(
        advantages(&[1.0, f64::INFINITY], &opts),
        Err(RlError::NonFinite { index: 1, .. })
    ));
    let bad = AdvantageOptions { eps: -1.0, ..opts };
    assert!(matches!(
        advantages(&[1.0, 2.0], &bad),
        Err(RlError::Option { name: "eps", .. })
    ));
}

/// Intervals [1.8, 1.95] and [1.9, 2.2] overlap → both get (0.9 + 1.1)/2 = 1.0;
/// [3.9, 4.1] stands alone; an untimed sample keeps its value. A chain a–b–c where a
/// and c do not overlap still forms one cluster.
#[test]
fn overlapping_intervals_share_their_mean() {
    let v = equalize_overlapping(
        &[0.9, 1.1, 2.0, 0.0],
        &[Some([1.8, 1.95]), Some([1.9, 2.2]), Some([3.9, 4.1]), None],
    );
    close(&v, &[1.0, 1.0, 2.0, 0.0]);
    let chain = equalize_overlapping(
        &[0.0, 0.3, 0.6],
        &[Some([1.0, 1.1]), Some([1.05, 1.2]), Some([1.15, 1.3])],
    );
    close(&chain, &[0.3, 0.3, 0.3]);
    // Touching endpoints overlap (closed intervals); a reversed interval is ignored.
    let t = equalize_overlapping(
        &[1.0, 3.0, 5.0],
        &[Some([1.0, 2.0]), Some([2.0, 3.0]), Some([9.0, 8.0])],
    );
    close(&t, &[2.0, 2.0, 5.0]);
}

fn report(value: f64, speed_term: f64, ci: Option<[f64; 2]>, implausible: bool) -> RewardReport {
    let timing = ci.map(|c| {
        serde_json::from_value(serde_json::json!({
            "config": "large", "reference_us": 100.0, "candidate_us": 50.0,
            "speedup": 2.0, "raw_speedup": 2.0, "ci95": c, "noise_floor": 0.005,
            "within_noise": false, "implausible": implausible, "floor_us": 10.0,
            "achieved_gbps": 1.0, "repetitions": 20, "occupancy": []
        }))
        .expect("timing stage")
    });
    RewardReport {
        value,
        reward: "cudaperf".into(),
        verdict: crate::pipeline::Verdict::Correct,
        terms: vec![
            Term {
                name: "outcome".into(),
                weight: 1.0,
                value: 1.0,
            },
            Term {
                name: "correct|speedup_log2".into(),
                weight: 0.3,
                value: speed_term,
            },
        ],
        stages: crate::pipeline::report::Stages {
            timing,
            ..Default::default()
        },
    }
}

/// Two correct candidates at 1.95× and 2.05× with overlapping intervals: speed terms
/// 0.3·log2(1.95) = 0.28904 and 0.3·log2(2.05) = 0.31068 become their mean 0.29986, so
/// their rewards (1 + term + 0.1 structure) tie and GRPO gives them the same advantage.
/// The 4× candidate and the incorrect one (no timing) are unchanged.
#[test]
fn noise_aware_rewards_by_hand() {
    let (l1, l2, l4) = (1.95f64.log2(), 2.05f64.log2(), 2.0);
    let reports = [
        report(1.0 + 0.3 * l1 + 0.1, l1, Some([1.90, 2.01]), false),
        report(1.0 + 0.3 * l2 + 0.1, l2, Some([2.00, 2.10]), false),
        report(1.0 + 0.3 * l4 + 0.1, l4, Some([3.95, 4.05]), false),
        report(-0.1, 0.0, None, false),
    ];
    let r = noise_aware_rewards(&reports).unwrap();
    let m = 0.3 * (l1 + l2) / 2.0;
    close(&r, &[1.1 + m, 1.1 + m, 1.0 + 0.3 * l4 + 0.1, -0.1]);
    let a = grpo(&r, 1e-4).unwrap();
    assert!((a[0] - a[1]).abs() < 1e-12);
    // Implausible timing is left alone (its speed term is already neutral).
    let imp = [
        report(1.0, 0.0, Some([1.0, 3.0]), true),
        report(1.3, 1.0, Some([2.0, 2.1]), false),
    ];
    close(&noise_aware_rewards(&imp).unwrap(), &[1.0, 1.3]);
    // An unscored report stays unscored (and out of every cluster); an infinite one is
    // an error.
    let unscored = [
        report(f64::NAN, l1, Some([1.90, 2.01]), false),
        report(1.0 + 0.3 * l2, l2, Some([2.00, 2.10]), false),
    ];
    let r = noise_aware_rewards(&unscored).unwrap();
    assert!(r[0].is_nan());
    close(&r[1..], &[1.0 + 0.3 * l2]);
    assert!(matches!(
        noise_aware_rewards(&[report(f64::INFINITY, 0.0, None, false)]),
        Err(RlError::NonFinite { index: 0, .. })
    ));
}

/// [1, NaN, 3, 6] with the unscored member skipped is [1, 3, 6] by hand: mean 10/3,
/// Dr. GRPO [-7/3, -1/3, 8/3]; RLOO baselines (3+6)/2, (1+6)/2, (1+3)/2.
#[test]
fn scored_subset_by_hand() {
    let r = [1.0, f64::NAN, 3.0, 6.0];
    let dr = AdvantageOptions::with_estimator(Estimator::DrGrpo);
    let g = scored_advantages(&r, &dr, UnscoredPolicy::SkipMember).unwrap();
    assert_eq!(g.unscored, vec![1]);
    assert_eq!(g.dropped, None);
    assert_eq!(g.advantages[1], None);
    let got: Vec<f64> = g.advantages.iter().flatten().copied().collect();
    close(&got, &[-7.0 / 3.0, -1.0 / 3.0, 8.0 / 3.0]);
    let rl = AdvantageOptions::with_estimator(Estimator::Rloo);
    let g = scored_advantages(&r, &rl, UnscoredPolicy::SkipMember).unwrap();
    let got: Vec<f64> = g.advantages.iter().flatten().copied().collect();
    close(&got, &[1.0 - 4.5, 3.0 - 3.5, 6.0 - 2.0]);
    // GRPO over the subset equals GRPO of the subset.
    let opts = AdvantageOptions::default();
    let g = scored_advantages(&r, &opts, UnscoredPolicy::SkipMember).unwrap();
    let got: Vec<f64> = g.advantages.iter().flatten().copied().collect();
    close(&got, &grpo(&[1.0, 3.0, 6.0], opts.eps).unwrap());
    // A fully scored group is the plain estimator.
    let g = scored_advantages(&[1.0, 2.0], &dr, UnscoredPolicy::Error).unwrap();
    assert_eq!(g.advantages, vec![Some(-0.5), Some(0.5)]);
}

#[test]
fn unscored_policies_and_dropped_groups() {
    let opts = AdvantageOptions::default();
    let r = [1.0, f64::NAN, 3.0];
    let g = scored_advantages(&r, &opts, UnscoredPolicy::SkipGroup).unwrap();
    assert_eq!(
        (g.advantages, g.unscored, g.dropped),
        (vec![None; 3], vec![1], Some(DroppedGroup::Unscored))
    );
    assert!(matches!(
        scored_advantages(&r, &opts, UnscoredPolicy::Error),
        Err(RlError::NonFinite { index: 1, value }) if value.is_nan()
    ));
    // The scored members tie: zero variance, dropped.
    let g = scored_advantages(&[2.0, f64::NAN, 2.0], &opts, UnscoredPolicy::SkipMember).unwrap();
    assert_eq!(g.dropped, Some(DroppedGroup::ZeroVariance));
    // Nobody scored, or one member for RLOO: too few.
    let g = scored_advantages(&[f64::NAN; 3], &opts, UnscoredPolicy::SkipMember).unwrap();
    assert_eq!(g.dropped, Some(DroppedGroup::TooFewScored));
    let rl = AdvantageOptions::with_estimator(Estimator::Rloo);
    let g = scored_advantages(&[f64::NAN, 1.0], &rl, UnscoredPolicy::SkipMember).unwrap();
    assert_eq!(g.dropped, Some(DroppedGroup::TooFewScored));
    // Infinity is never "unscored", and an empty group is an error.
    for p in [UnscoredPolicy::SkipMember, UnscoredPolicy::SkipGroup] {
        assert!(matches!(
            scored_advantages(&[1.0, f64::INFINITY], &opts, p),
            Err(RlError::NonFinite { index: 1, .. })
        ));
        assert_eq!(scored_advantages(&[], &opts, p), Err(RlError::EmptyGroup));
    }
}

#[test]
fn estimator_names_round_trip() {
    for e in [Estimator::Grpo, Estimator::DrGrpo, Estimator::Rloo] {
        assert_eq!(Estimator::parse(e.as_str()), Some(e));
    }
    assert_eq!(Estimator::parse("Dr-GRPO"), Some(Estimator::DrGrpo));
    assert_eq!(Estimator::parse("ppo"), None);
}
