//! Statistics of timing samples: medians, bootstrap intervals, the noise floor.

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// Median of a sample (NaN when empty).
pub fn median(xs: &[f64]) -> f64 {
    if xs.is_empty() {
        return f64::NAN;
    }
    let mut v = xs.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        0.5 * (v[n / 2 - 1] + v[n / 2])
    }
}

fn resample(xs: &[f64], rng: &mut SmallRng, buf: &mut Vec<f64>) {
    buf.clear();
    buf.extend((0..xs.len()).map(|_| xs[rng.random_range(0..xs.len())]));
}

/// Bootstrap 95 % interval of median(num)/median(den), `iters` resamples.
pub fn ratio_ci(num: &[f64], den: &[f64], iters: usize, seed: u64) -> [f64; 2] {
    if num.is_empty() || den.is_empty() || iters == 0 {
        return [f64::NAN, f64::NAN];
    }
    let mut rng = SmallRng::seed_from_u64(seed);
    let (mut a, mut b) = (Vec::new(), Vec::new());
    let mut ratios: Vec<f64> = (0..iters)
        .map(|_| {
            resample(num, &mut rng, &mut a);
            resample(den, &mut rng, &mut b);
            median(&a) / median(&b)
        })
        .collect();
    ratios.sort_by(|x, y| x.total_cmp(y));
    let at =
        |q: f64| ratios[((q * (ratios.len() - 1) as f64).round() as usize).min(ratios.len() - 1)];
    [at(0.025), at(0.975)]
}

/// The noise floor from a reference-vs-reference comparison: the half-width of the 95 %
/// interval of median(even samples)/median(odd samples), at least `min_floor`.
pub fn noise_floor(reference: &[f64], iters: usize, seed: u64, min_floor: f64) -> f64 {
    let even: Vec<f64> = reference.iter().step_by(2).copied().collect();
    let odd: Vec<f64> = reference.iter().skip(1).step_by(2).copied().collect();
    if even.len() < 2 || odd.len() < 2 {
        return min_floor.max(0.05);
    }
    let [lo, hi] = ratio_ci(&even, &odd, iters, seed);
    (1.0 - lo).abs().max((hi - 1.0).abs()).max(min_floor)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert!(median(&[]).is_nan());
    }

    #[test]
    fn interval_contains_true_ratio_and_is_deterministic() {
        let mut rng = SmallRng::seed_from_u64(7);
        let r: Vec<f64> = (0..100)
            .map(|_| 100.0 + rng.random_range(-2.0..2.0))
            .collect();
        let c: Vec<f64> = (0..100)
            .map(|_| 50.0 + rng.random_range(-1.0..1.0))
            .collect();
        let ci = ratio_ci(&r, &c, 1000, 1);
        assert!(ci[0] < 2.0 && 2.0 < ci[1], "{ci:?}");
        assert!(ci[1] - ci[0] < 0.1, "{ci:?}");
        assert_eq!(ci, ratio_ci(&r, &c, 1000, 1));
    }

    #[test]
    fn noise_floor_tracks_spread() {
        let mut rng = SmallRng::seed_from_u64(3);
        let quiet: Vec<f64> = (0..100)
            .map(|_| 100.0 + rng.random_range(-0.1..0.1))
            .collect();
        let noisy: Vec<f64> = (0..100)
            .map(|_| 100.0 + rng.random_range(-20.0..20.0))
            .collect();
        let q = noise_floor(&quiet, 1000, 1, 0.001);
        let n = noise_floor(&noisy, 1000, 1, 0.001);
        assert!(q < 0.01, "{q}");
        assert!(n > q * 5.0, "{n} vs {q}");
    }
}
