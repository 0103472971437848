//! Per-dimension standardisation, fitted on the training samples and saved with the model.

use serde::{Deserialize, Serialize};

/// Standard deviations below this are treated as a constant feature (scale 1), so that a
/// dimension that never varies in training maps to 0 instead of exploding.
const MIN_STD: f64 = 1e-6;

/// `x' = (x - mean) / std` per dimension.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Normalizer {
    /// Mean of each dimension over the training samples.
    pub mean: Vec<f32>,
    /// Population standard deviation of each dimension (1 for constant dimensions).
    pub std: Vec<f32>,
}

impl Normalizer {
    /// Fits mean and standard deviation on `rows` (each of length `dim`), accumulating in
    /// f64. With no rows it is the identity.
    pub fn fit<'a>(rows: impl IntoIterator<Item = &'a [f32]>, dim: usize) -> Self {
        let mut n = 0usize;
        let mut sum = vec![0f64; dim];
        let mut sq = vec![0f64; dim];
        for row in rows {
            n += 1;
            for ((s, q), &x) in sum.iter_mut().zip(sq.iter_mut()).zip(row) {
                *s += f64::from(x);
                *q += f64::from(x) * f64::from(x);
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
        }
    }

    /// Mean 0, std 1: leaves vectors unchanged.
    pub fn identity(dim: usize) -> Self {
        Self {
            mean: vec![0.0; dim],
            std: vec![1.0; dim],
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
    }
}
