//! Per-dimension standardisation, fitted on the training samples and saved with the model.

use serde::{Deserialize, Serialize};

/// Standard deviations below this are treated as a constant feature (scale 1), so that a
/// dimension that never varies in training maps to 0 instead of exploding.
const MIN_STD: f64 = 1e-6;

/// `x' = (clamp(x, min, max) - mean) / std` per dimension.
///
/// The clamp to the training range keeps a model from extrapolating: a feature value far
/// outside what training saw (a pattern rare in the data, such as a tree reduction with
/// eight barriers per 256 elements) scores like the most extreme value seen, not like a
/// point 38 standard deviations out on a line the model never fitted there.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Normalizer {
    /// Mean of each dimension over the training samples.
    pub mean: Vec<f32>,
    /// Population standard deviation of each dimension (1 for constant dimensions).
    pub std: Vec<f32>,
    /// Smallest value of each dimension in training (empty in models saved before the
    /// clamp existed: no clamp).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub min: Vec<f32>,
    /// Largest value of each dimension in training (empty: no clamp).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub max: Vec<f32>,
}

impl Normalizer {
    /// Fits mean and standard deviation on `rows` (each of length `dim`), accumulating in
    /// f64. With no rows it is the identity.
    pub fn fit<'a>(rows: impl IntoIterator<Item = &'a [f32]>, dim: usize) -> Self {
        let mut n = 0usize;
        let mut sum = vec![0f64; dim];
        let mut sq = vec![0f64; dim];
        let mut min = vec![f32::INFINITY; dim];
        let mut max = vec![f32::NEG_INFINITY; dim];
        for row in rows {
            n += 1;
            for ((s, q), &x) in sum.iter_mut().zip(sq.iter_mut()).zip(row) {
                *s += f64::from(x);
                *q += f64::from(x) * f64::from(x);
            }
            for ((lo, hi), &x) in min.iter_mut().zip(max.iter_mut()).zip(row) {
                *lo = lo.min(x);
                *hi = hi.max(x);
            }
        }
        if n == 0 {
            return Self::identity(dim);
        }
        let n = n as f64;
        let mean: Vec<f64> = sum.iter().map(|s| s / n).collect();
        let std = sq
            .iter()
            .zip(&mean)
            .map(|(q, m)| {
                let sd = (q / n - m * m).max(0.0).sqrt();
                if sd < MIN_STD {
                    1.0
                } else {
                    sd as f32
                }
            })
            .collect();
        Self {
            mean: mean.iter().map(|&m| m as f32).collect(),
            std,
            min,
            max,
        }
    }

    /// Mean 0, std 1: leaves vectors unchanged.
    pub fn identity(dim: usize) -> Self {
        Self {
            mean: vec![0.0; dim],
            std: vec![1.0; dim],
            min: Vec::new(),
            max: Vec::new(),
        }
    }

    /// Number of dimensions.
    pub fn dim(&self) -> usize {
        self.mean.len()
    }

    /// Writes the normalised `x` into `out` (both of length [`dim`](Self::dim)).
    pub fn apply_into(&self, x: &[f32], out: &mut [f32]) {
        for (((o, &v), &m), &s) in out.iter_mut().zip(x).zip(&self.mean).zip(&self.std) {
            *o = (v - m) / s;
        }
        if self.min.len() == out.len() && self.max.len() == out.len() {
            for (((o, &v), (&lo, &hi)), (&m, &s)) in out
                .iter_mut()
                .zip(x)
                .zip(self.min.iter().zip(&self.max))
                .zip(self.mean.iter().zip(&self.std))
            {
                *o = (v.clamp(lo, hi) - m) / s;
            }
        }
    }

    /// How far outside the training range `x` lies: the largest distance of a dimension
    /// beyond `[min, max]`, in standard deviations (0 inside the range, and for models
    /// without a saved range).
    pub fn out_of_range(&self, x: &[f32]) -> f32 {
        x.iter()
            .zip(self.min.iter().zip(&self.max))
            .zip(&self.std)
            .map(|((&v, (&lo, &hi)), &s)| ((lo - v).max(v - hi).max(0.0)) / s)
            .fold(0.0, f32::max)
    }

    /// Returns the normalised `x`.
    pub fn apply(&self, x: &[f32]) -> Vec<f32> {
        let mut out = vec![0.0; x.len().min(self.dim())];
        self.apply_into(x, &mut out);
        out
    }

    /// True when the statistics are usable (finite means, finite positive deviations).
    pub(crate) fn is_valid(&self) -> bool {
        self.mean.len() == self.std.len()
            && (self.min.is_empty() || self.min.len() == self.mean.len())
            && (self.max.is_empty() || self.max.len() == self.mean.len())
            && self.min.iter().zip(&self.max).all(|(lo, hi)| lo <= hi)
            && self.mean.iter().all(|m| m.is_finite())
            && self.std.iter().all(|s| s.is_finite() && *s > 0.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn standardises_and_keeps_constant_dimensions_finite() {
        let rows: Vec<Vec<f32>> = vec![vec![1.0, 5.0], vec![3.0, 5.0]];
        let n = Normalizer::fit(rows.iter().map(Vec::as_slice), 2);
        assert_eq!(n.mean, vec![2.0, 5.0]);
        assert_eq!(n.std, vec![1.0, 1.0]);
        assert_eq!(n.apply(&[3.0, 5.0]), vec![1.0, 0.0]);
        assert!(n.is_valid());
        // Outside the training range: clamped to it, and the distance is reported.
        assert_eq!(n.apply(&[40.0, 5.0]), vec![1.0, 0.0]);
        assert_eq!(n.out_of_range(&[40.0, 5.0]), 37.0);
        assert_eq!(n.out_of_range(&[2.0, 5.0]), 0.0);
    }
}
