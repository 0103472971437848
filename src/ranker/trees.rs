//! Gradient-boosted regression trees trained on the same pairwise loss as the MLP: each
//! ensemble member's score is the mean of its MLP and its trees.
//!
//! Why both: the MLP is smooth in every feature at once; trees cut on one feature at a time
//! and so learn thresholds the MLP blurs ("a grid below the SM count", "a reference-relative
//! barrier count above zero"). On the leave-tasks-out folds their mistakes overlap only in
//! part, and the mean orders more held-out pairs than either (docs/ranker-cv.md).
//!
//! Boosting is RankNet's: round `r` fits a tree to the Newton step of
//! `Σ_pairs w · CE(t, σ(F(fast) − F(slow)))` (the MLP's soft targets `t` and weights `w`),
//! per sample `g_i = Σ ± w (σ(d) − t)`, `h_i = Σ w σ(d)(1 − σ(d))`; a leaf's value is
//! `−η · G / (H + λ)`. Splits are searched over at most [`BINS`] quantile cuts of each
//! feature on the training samples, on a seeded [`RankerConfig::tree_colsample`] share of the
//! features per tree, depth-first to [`RankerConfig::tree_depth`], with at least
//! [`RankerConfig::tree_min_samples`] samples per leaf. Everything is seeded: the same data
//! and seed give the same trees.
//!
//! [`RankerConfig::tree_colsample`]: super::RankerConfig::tree_colsample
//! [`RankerConfig::tree_depth`]: super::RankerConfig::tree_depth
//! [`RankerConfig::tree_min_samples`]: super::RankerConfig::tree_min_samples

use serde::{Deserialize, Serialize};

use super::config::RankerConfig;
use super::rng::SplitMix64;

/// Most split candidates per feature (quantile cuts of the training values).
pub const BINS: usize = 32;

/// One regression tree, stored as parallel arrays (compact in JSON). Node 0 is the root;
/// node `i` is a leaf when `feature[i] < 0`, with output `value[i]`; otherwise inputs with
/// `x[feature[i]] <= value[i]` go to `left[i]`, the others to `right[i]`. Children always
/// have larger indices than their parent, so scoring ends.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct Tree {
    /// Split feature per node, −1 for a leaf.
    pub feature: Vec<i32>,
    /// Threshold of a split, output of a leaf.
    pub value: Vec<f32>,
    /// Left child per node (0 for a leaf).
    pub left: Vec<u32>,
    /// Right child per node (0 for a leaf).
    pub right: Vec<u32>,
}

impl Tree {
    /// The tree's output for a normalised input.
    pub fn score(&self, x: &[f32]) -> f32 {
        let mut i = 0usize;
        // `check` guarantees children grow, so this walks at most `len` nodes.
        while let Some(&f) = self.feature.get(i) {
            let Ok(f) = usize::try_from(f) else {
                return self.value[i];
            };
            let go_left = x.get(f).is_some_and(|&v| v <= self.value[i]);
            i = if go_left { self.left[i] } else { self.right[i] } as usize;
        }
        0.0
    }

    fn check(&self, dim: usize) -> Result<(), String> {
        let n = self.feature.len();
        if n == 0 || self.value.len() != n || self.left.len() != n || self.right.len() != n {
            return Err(format!(
                "{} features, {} values, {} left and {} right children: all must be one per node (and at least one node)",
                n,
                self.value.len(),
                self.left.len(),
                self.right.len()
            ));
        }
        for i in 0..n {
            if !self.value[i].is_finite() {
                return Err(format!("node {i} has value {}", self.value[i]));
            }
            if self.feature[i] < 0 {
                continue;
            }
            if self.feature[i] as usize >= dim {
                return Err(format!(
                    "node {i} splits on feature {}, the model has {dim}",
                    self.feature[i]
                ));
            }
            for c in [self.left[i], self.right[i]] {
                if c as usize <= i || c as usize >= n {
                    return Err(format!(
                        "node {i} has child {c}: children must come after their parent and exist ({n} nodes)"
                    ));
                }
            }
        }
        Ok(())
    }
}

/// One member's boosted trees: its tree score is the sum of theirs, and the member scores
/// the mean of its MLP's score and this one.
///
/// Boosting is RankNet's: round `r` fits a tree to the Newton step of the MLP's pairwise
/// loss (same soft targets and pair weights) at the current scores; a leaf's value is
/// `−η · G / (H + λ)`. Splits are searched over at most [`BINS`] quantile cuts of each
/// feature on the member's training samples, on a seeded share of the features per tree
/// (`RankerConfig::tree_colsample`), depth-first to `tree_depth`, with at least
/// `tree_min_samples` samples a leaf. The same data and seed give the same trees.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct BoostedTrees {
    /// The trees, in boosting order.
    pub trees: Vec<Tree>,
}

impl BoostedTrees {
    /// The summed output of the trees for a normalised input.
    pub fn score(&self, x: &[f32]) -> f32 {
        self.trees.iter().map(|t| t.score(x)).sum()
    }

    /// Checks every tree against an input width of `dim`.
    pub(crate) fn check(&self, dim: usize) -> Result<(), String> {
        self.trees
            .iter()
            .enumerate()
            .try_for_each(|(k, t)| t.check(dim).map_err(|e| format!("tree {k}: {e}")))
    }

    /// Boosts `config.trees` trees on `pairs` (`(fast, slow, target, weight)`, indices into
    /// the rows of `normed`, `dim` values each), seeded with `seed`.
    pub(crate) fn fit(
        normed: &[f32],
        dim: usize,
        pairs: &[(usize, usize, f32, f32)],
        config: &RankerConfig,
        seed: u64,
    ) -> BoostedTrees {
        let mut rows: Vec<usize> = pairs.iter().flat_map(|p| [p.0, p.1]).collect();
        rows.sort_unstable();
        rows.dedup();
        if rows.is_empty() || dim == 0 {
            return BoostedTrees::default();
        }
        // Local indices: pair ends and bins refer to positions in `rows`.
        let local = |i: usize| rows.binary_search(&i).unwrap_or(0);
        let pairs: Vec<(usize, usize, f64, f64)> = pairs
            .iter()
            .map(|&(f, s, t, w)| (local(f), local(s), f64::from(t), f64::from(w)))
            .collect();
        let x = |r: usize, j: usize| normed[rows[r] * dim + j];
        let cuts: Vec<Vec<f32>> = (0..dim)
            .map(|j| quantile_cuts((0..rows.len()).map(|r| x(r, j)).collect()))
            .collect();
        // bins[j][r]: how many cuts of feature j lie below row r's value.
        let bins: Vec<Vec<u8>> = cuts
            .iter()
            .enumerate()
            .map(|(j, c)| {
                (0..rows.len())
                    .map(|r| c.partition_point(|&cut| cut < x(r, j)) as u8)
                    .collect()
            })
            .collect();
        let mut rng = SplitMix64::new(seed ^ 0x7e3e_b005);
        let mut score = vec![0.0f64; rows.len()];
        let mut grown = Grower {
            bins: &bins,
            cuts: &cuts,
            config,
            g: vec![0.0; rows.len()],
            h: vec![0.0; rows.len()],
            features: Vec::new(),
        };
        let mut trees = Vec::with_capacity(config.trees);
        for _ in 0..config.trees {
            grown.g.iter_mut().for_each(|v| *v = 0.0);
            grown.h.iter_mut().for_each(|v| *v = 0.0);
            for &(f, s, t, w) in &pairs {
                let p = sigmoid(score[f] - score[s]);
                let g = w * (p - t);
                let h = w * (p * (1.0 - p)).max(1e-6);
                grown.g[f] += g;
                grown.g[s] -= g;
                grown.h[f] += h;
                grown.h[s] += h;
            }
            grown.features = (0..dim).collect();
            rng.shuffle(&mut grown.features);
            let keep = ((config.tree_colsample * dim as f64).ceil() as usize).clamp(1, dim);
            grown.features.truncate(keep);
            let mut tree = Tree::default();
            grown.grow(&mut tree, (0..rows.len()).collect(), 0, &mut score);
            trees.push(tree);
        }
        BoostedTrees { trees }
    }
}

/// A member's score of a normalised input `x` from its MLP's score `mlp`: the mean of the
/// MLP's and its trees' (the MLP's alone for a member without trees).
/// The estimate term of a member's score ([`RankerConfig::estimate_weight`]): `(index of
/// the estimate in the normalised row, −w · its standard deviation)`, so that the term is
/// `coefficient · z = −w · (e − mean)`; `None` when `w` is 0 or the features lack it.
///
/// [`RankerConfig::estimate_weight`]: super::RankerConfig::estimate_weight
pub(crate) fn estimate_term(
    names: &[String],
    normalizer: &super::Normalizer,
    weight: f32,
) -> Option<(usize, f32)> {
    if weight == 0.0 {
        return None;
    }
    let i = names
        .iter()
        .position(|n| n == super::traffic::ESTIMATE_FEATURE)?;
    Some((i, -weight * normalizer.std.get(i).copied()?))
}

/// `term`'s value on the normalised row `x` (0 without a term).
pub(crate) fn estimate_value(term: Option<(usize, f32)>, x: &[f32]) -> f32 {
    term.and_then(|(i, c)| x.get(i).map(|z| c * z))
        .unwrap_or(0.0)
}

pub(crate) fn member_score(mlp: f32, trees: Option<&BoostedTrees>, x: &[f32]) -> f32 {
    match trees {
        Some(t) => 0.5 * (mlp + t.score(x)),
        None => mlp,
    }
}

fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

/// At most `BINS − 1` cut points between the distinct values (midpoints, at quantiles when
/// there are more distinct values than bins).
fn quantile_cuts(mut v: Vec<f32>) -> Vec<f32> {
    v.sort_by(f32::total_cmp);
    v.dedup();
    if v.len() < 2 {
        return Vec::new();
    }
    let gaps = v.len() - 1;
    // Every midpoint when they are few, else BINS − 1 of them at evenly spaced ranks.
    let mut cuts: Vec<f32> = if gaps < BINS {
        (0..gaps).map(|i| 0.5 * (v[i] + v[i + 1])).collect()
    } else {
        (1..BINS)
            .map(|q| {
                let i = q * gaps / BINS;
                0.5 * (v[i] + v[i + 1])
            })
            .collect()
    };
    cuts.dedup();
    cuts
}

/// One round's tree growth: the per-row gradients, the features this tree may split on.
struct Grower<'a> {
    bins: &'a [Vec<u8>],
    cuts: &'a [Vec<f32>],
    config: &'a RankerConfig,
    g: Vec<f64>,
    h: Vec<f64>,
    features: Vec<usize>,
}

impl Grower<'_> {
    /// Appends the subtree of `rows` at `depth` to `tree` (its root at the current end) and
    /// adds its leaves' values to `score`.
    fn grow(&self, tree: &mut Tree, rows: Vec<usize>, depth: usize, score: &mut [f64]) {
        let node = tree.feature.len();
        tree.feature.push(-1);
        tree.value.push(0.0);
        tree.left.push(0);
        tree.right.push(0);
        let lambda = self.config.tree_lambda;
        let (g, h) = rows
            .iter()
            .fold((0.0, 0.0), |(g, h), &r| (g + self.g[r], h + self.h[r]));
        let min = self.config.tree_min_samples.max(1);
        let split = (depth < self.config.tree_depth && rows.len() >= 2 * min)
            .then(|| self.best_split(&rows, g, h, min))
            .flatten();
        let Some((feature, bin)) = split else {
            let v = -self.config.tree_learning_rate * g / (h + lambda);
            tree.value[node] = v as f32;
            for &r in &rows {
                score[r] += f64::from(v as f32);
            }
            return;
        };
        let (left, right): (Vec<usize>, Vec<usize>) = rows
            .into_iter()
            .partition(|&r| usize::from(self.bins[feature][r]) <= bin);
        tree.feature[node] = feature as i32;
        tree.value[node] = self.cuts[feature][bin];
        tree.left[node] = tree.feature.len() as u32;
        self.grow(tree, left, depth + 1, score);
        tree.right[node] = tree.feature.len() as u32;
        self.grow(tree, right, depth + 1, score);
    }

    /// The split (feature, last bin on the left) of largest gain, if any gains.
    fn best_split(&self, rows: &[usize], g: f64, h: f64, min: usize) -> Option<(usize, usize)> {
        let lambda = self.config.tree_lambda;
        let parent = g * g / (h + lambda);
        let mut best: Option<(f64, usize, usize)> = None;
        let mut hist = [(0.0f64, 0.0f64, 0usize); BINS];
        for &j in &self.features {
            let cuts = self.cuts[j].len();
            if cuts == 0 {
                continue;
            }
            hist[..=cuts].iter_mut().for_each(|b| *b = (0.0, 0.0, 0));
            for &r in rows {
                let b = &mut hist[usize::from(self.bins[j][r])];
                b.0 += self.g[r];
                b.1 += self.h[r];
                b.2 += 1;
            }
            let (mut gl, mut hl, mut nl) = (0.0, 0.0, 0usize);
            for (b, &(bg, bh, bn)) in hist[..cuts].iter().enumerate() {
                gl += bg;
                hl += bh;
                nl += bn;
                let nr = rows.len() - nl;
                if nl < min || nr < min {
                    continue;
                }
                let (gr, hr) = (g - gl, h - hl);
                let gain = gl * gl / (hl + lambda) + gr * gr / (hr + lambda) - parent;
                if gain > 1e-12 && best.is_none_or(|(bg, _, _)| gain > bg) {
                    best = Some((gain, j, b));
                }
            }
        }
        best.map(|(_, j, b)| (j, b))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuts_separate_distinct_values_and_stay_few() {
        assert!(quantile_cuts(vec![1.0, 1.0]).is_empty());
        assert_eq!(quantile_cuts(vec![0.0, 1.0, 3.0]), [0.5, 2.0]);
        let many = quantile_cuts((0..1000).map(|i| i as f32).collect());
        assert_eq!(many.len(), BINS - 1);
        assert!(many.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn trees_learn_a_threshold_that_orders_pairs() {
        // Faster when feature 1 is below 0.3, whatever the noise in feature 0.
        let n = 200;
        let mut rng = SplitMix64::new(3);
        let normed: Vec<f32> = (0..n)
            .flat_map(|_| [rng.next_f32(), rng.next_f32()])
            .collect();
        let fast_of = |i: usize| normed[i * 2 + 1] < 0.3;
        let mut pairs = Vec::new();
        for a in 0..n {
            for b in (a + 1..n).step_by(7) {
                match (fast_of(a), fast_of(b)) {
                    (true, false) => pairs.push((a, b, 0.95, 1.0)),
                    (false, true) => pairs.push((b, a, 0.95, 1.0)),
                    _ => {}
                }
            }
        }
        let config = RankerConfig::new().with_trees(50);
        let trees = BoostedTrees::fit(&normed, 2, &pairs, &config, 1);
        assert_eq!(trees.trees.len(), 50);
        trees.check(2).unwrap();
        let right = pairs
            .iter()
            .filter(|p| {
                trees.score(&normed[p.0 * 2..p.0 * 2 + 2])
                    > trees.score(&normed[p.1 * 2..p.1 * 2 + 2])
            })
            .count();
        assert_eq!(right, pairs.len(), "every pair ordered by the threshold");
        // The first split is on the decisive feature, near its threshold.
        let t = &trees.trees[0];
        assert_eq!(t.feature[0], 1);
        assert!((t.value[0] - 0.3).abs() < 0.05, "{}", t.value[0]);
        // Same seed, same trees; another seed draws other features.
        assert_eq!(BoostedTrees::fit(&normed, 2, &pairs, &config, 1), trees);
    }

    #[test]
    fn malformed_trees_are_rejected() {
        let leaf = Tree {
            feature: vec![-1],
            value: vec![0.5],
            left: vec![0],
            right: vec![0],
        };
        assert!(leaf.check(1).is_ok());
        assert_eq!(leaf.score(&[9.0]), 0.5);
        let cycle = Tree {
            feature: vec![0, -1],
            value: vec![0.0, 1.0],
            left: vec![0, 0],
            right: vec![1, 0],
        };
        assert!(cycle
            .check(1)
            .unwrap_err()
            .contains("children must come after"));
        let wide = Tree {
            feature: vec![3, -1, -1],
            value: vec![0.0, 1.0, 2.0],
            left: vec![1, 0, 0],
            right: vec![2, 0, 0],
        };
        assert!(wide.check(2).unwrap_err().contains("feature 3"));
        let nan = Tree {
            value: vec![f32::NAN],
            ..leaf.clone()
        };
        assert!(nan.check(1).is_err());
        assert!(Tree::default().check(1).is_err());
    }
}
