//! Statistics of timing samples (medians, bootstrap intervals, the noise floor, spreads)
//! and the per-job schedule of the timing protocol.

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::job::TimingOptions;
use super::secret::{domain, JobSecret};

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

/// Relative spread of a sample: median absolute deviation / median (0 when empty).
pub fn rel_mad(xs: &[f64]) -> f64 {
    let m = median(xs);
    if !(m.is_finite() && m > 0.0) {
        return 0.0;
    }
    let dev: Vec<f64> = xs.iter().map(|x| (x - m).abs()).collect();
    median(&dev) / m
}

/// What the timing loop measured, for [`award`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Measured {
    /// Median reference time, µs.
    pub reference_us: f64,
    /// Median candidate time, µs.
    pub candidate_us: f64,
    /// The noise floor (relative).
    pub noise_floor: f64,
    /// The time the ABI's bytes need at the device's bandwidth, µs (0: unknown).
    pub floor_us: f64,
    /// The time the task's FLOPs need at the device's peak, µs (0: not declared).
    pub compute_floor_us: f64,
    /// The reference's relative spread in this job.
    pub reference_spread: f64,
    /// The reference's relative spread when it ran alone.
    pub reference_calibration: f64,
    /// Spread above `unstable_factor` × calibration + 0.005 is unstable.
    pub unstable_factor: f64,
}

/// The speedup a measurement earns, and why less is awarded when it is.
#[derive(Debug, Clone, PartialEq)]
pub struct Award {
    /// Awarded speedup.
    pub speedup: f64,
    /// Measured ratio.
    pub raw_speedup: f64,
    /// Inside the noise floor: reported as 1.0.
    pub within_noise: bool,
    /// Faster than a physical floor: 1.0, nothing earned.
    pub implausible: bool,
    /// The reference's spread was far above its calibration: at most 1.0.
    pub unstable: bool,
    /// Why less than measured is awarded.
    pub withheld: Option<String>,
}

/// The rules of protocol v2: a time below either physical floor earns nothing (1.0); an
/// unstable reference withholds any gain but keeps a loss; a ratio inside the noise floor
/// is 1.0.
pub fn award(m: &Measured) -> Award {
    let raw = m.reference_us / m.candidate_us;
    let floor = m.floor_us.max(m.compute_floor_us);
    let implausible = floor > 0.0 && m.candidate_us < floor;
    let unstable = m.reference_spread > m.unstable_factor * m.reference_calibration + 0.005;
    // Within the noise when the ratio lies in [1/(1+n), 1+n]: a band in log space, so that a
    // floor past 100 % (a very noisy reference) cannot swallow a many-fold slowdown.
    let within_noise = raw > 0.0 && raw.ln().abs() <= m.noise_floor.max(0.0).ln_1p();
    let (speedup, withheld) = if implausible {
        (
            1.0,
            Some(format!(
                "implausible: {:.1} µs is below the physical floor of {floor:.1} µs (bytes: {:.1} µs, FLOPs: {:.1} µs)",
                m.candidate_us, m.floor_us, m.compute_floor_us
            )),
        )
    } else if unstable && raw > 1.0 {
        (
            1.0,
            Some(format!(
                "unstable: the reference's timing spread was {:.1} % in this job against {:.1} % when it ran alone",
                m.reference_spread * 100.0,
                m.reference_calibration * 100.0
            )),
        )
    } else if within_noise && !unstable {
        // An unstable reference rounds no slowdown up to parity either.
        (1.0, None)
    } else {
        (raw, None)
    };
    Award {
        speedup,
        raw_speedup: raw,
        within_noise,
        implausible,
        unstable,
        withheld,
    }
}

/// The timing loop's counts for one job, drawn from its secret: a candidate that counts
/// its launches cannot tell warm-up from timed runs or where a batch ends (and every run is
/// checked anyway).
#[derive(Debug, Clone)]
pub struct Schedule {
    /// Warm-up runs per side.
    pub warmup: u32,
    /// Fewest timed runs before the interval may stop the loop.
    pub min_reps: u32,
    /// Most timed runs.
    pub max_reps: u32,
    rng: SmallRng,
}

impl Schedule {
    /// The schedule of the job with this secret.
    pub fn new(secret: JobSecret, opts: &TimingOptions) -> Schedule {
        let mut rng = SmallRng::seed_from_u64(secret.derive(domain::SCHEDULE, 0));
        let w = opts.warmup.max(1);
        let warmup = rng.random_range((w / 2).max(1)..=(w * 3 / 2).max(1));
        let m = opts.min_reps.max(2);
        let min_reps = rng.random_range(m..=(m * 3 / 2).max(m));
        Schedule {
            warmup,
            min_reps,
            max_reps: opts.max_reps.max(min_reps),
            rng,
        }
    }

    /// Runs per side in the next batch (between two host reads of the checks): 4 to 12.
    pub fn next_batch(&mut self) -> u32 {
        self.rng.random_range(4..=12)
    }
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

    fn measured(reference_us: f64, candidate_us: f64) -> Measured {
        Measured {
            reference_us,
            candidate_us,
            noise_floor: 0.01,
            floor_us: 10.0,
            compute_floor_us: 0.0,
            reference_spread: 0.004,
            reference_calibration: 0.004,
            unstable_factor: 3.0,
        }
    }

    #[test]
    fn awards_follow_the_rules() {
        // Plain gain and plain loss.
        let a = award(&measured(200.0, 100.0));
        assert_eq!((a.speedup, a.withheld.is_none()), (2.0, true));
        assert_eq!(award(&measured(100.0, 200.0)).speedup, 0.5);
        // Inside the noise floor.
        let a = award(&measured(100.0, 99.5));
        assert!(a.within_noise && a.speedup == 1.0 && a.withheld.is_none());
        // Below the bandwidth floor, and below a compute floor.
        let a = award(&measured(200.0, 5.0));
        assert!(a.implausible && a.speedup == 1.0);
        assert!(a.withheld.as_deref().unwrap().starts_with("implausible"));
        let mut m = measured(3000.0, 15.0);
        m.compute_floor_us = 17.4;
        let a = award(&m);
        assert!(a.implausible && a.raw_speedup == 200.0 && a.speedup == 1.0);
        // Unstable reference: a gain is withheld, a loss stands.
        let mut m = measured(200.0, 100.0);
        m.reference_spread = 0.05;
        let a = award(&m);
        assert!(a.unstable && a.speedup == 1.0);
        assert!(a.withheld.as_deref().unwrap().contains("5.0 %"));
        m.reference_us = 50.0;
        let a = award(&m);
        assert!(a.unstable && a.speedup == 0.5 && a.withheld.is_none());
    }

    /// Seen on the H200 against a PyTorch-eager reference: 7 timed runs of a kernel 300x
    /// slower than the reference left a noise floor of 124 %, and the linear band
    /// |raw - 1| <= floor called the 0.003x ratio "within noise" (speedup 1.0). The band is
    /// symmetric in log space, and an unstable reference rounds no slowdown up to parity.
    #[test]
    fn a_huge_noise_floor_does_not_round_a_slowdown_up_to_parity() {
        let mut m = measured(292.0, 95_866.0);
        m.noise_floor = 1.237;
        let a = award(&m);
        assert!(!a.within_noise, "{a:?}");
        assert!((a.speedup - 292.0 / 95_866.0).abs() < 1e-12);
        // Inside [1/(1+n), 1+n] it is still parity...
        let mut m = measured(100.0, 180.0);
        m.noise_floor = 1.0;
        assert!(award(&m).within_noise && award(&m).speedup == 1.0);
        // ...unless the reference was unstable: then the slowdown counts.
        m.reference_spread = 0.5;
        let a = award(&m);
        assert!(a.unstable && a.within_noise && (a.speedup - 100.0 / 180.0).abs() < 1e-12);
    }

    #[test]
    fn spreads() {
        assert_eq!(rel_mad(&[10.0, 10.0, 10.0]), 0.0);
        assert!((rel_mad(&[9.0, 10.0, 11.0]) - 0.1).abs() < 1e-12);
        assert_eq!(rel_mad(&[]), 0.0);
    }

    #[test]
    fn schedules_vary_with_the_secret_and_stay_in_range() {
        let o = TimingOptions::default();
        let mut warmups = std::collections::BTreeSet::new();
        let mut mins = std::collections::BTreeSet::new();
        for secret in 0..200u64 {
            let mut s = Schedule::new(JobSecret(secret), &o);
            assert!((2..=6).contains(&s.warmup), "{}", s.warmup);
            assert!((10..=15).contains(&s.min_reps), "{}", s.min_reps);
            for _ in 0..20 {
                assert!((4..=12).contains(&s.next_batch()));
            }
            warmups.insert(s.warmup);
            mins.insert(s.min_reps);
        }
        assert!(
            warmups.len() >= 4 && mins.len() >= 5,
            "{warmups:?} {mins:?}"
        );
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
