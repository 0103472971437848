//! Synthetic ranking data for examples, tests and benchmarks (no real timings involved).

use super::data::{Pair, RankingData, Sample};
use super::rng::SplitMix64;

/// `tasks` tasks with `impls` implementations each and `dims` features, where feature 0
/// alone decides speed: `ln t = task_offset − 1.5 · x₀` with `x₀ ∈ [−1, 1]` (up to a 20×
/// spread inside a task). The other features are noise on scales from 0.01 to 100, so
/// normalisation matters. Tasks alternate between kinds `c2cuda` and `torch2cuda`; every
/// two implementations of a task form a pair. Deterministic in `seed`.
pub fn decisive_feature(tasks: usize, impls: usize, dims: usize, seed: u64) -> RankingData {
    let dims = dims.max(1);
    let mut rng = SplitMix64::new(seed);
    let mut samples = Vec::with_capacity(tasks * impls);
    let mut log_times = Vec::with_capacity(tasks * impls);
    let mut pairs = Vec::new();
    for t in 0..tasks {
        let task = format!("task_{t:03}");
        let kind = if t % 2 == 0 { "c2cuda" } else { "torch2cuda" };
        let offset = rng.next_f32() * 6.0 - 3.0;
        let first = samples.len();
        for i in 0..impls {
            let features: Vec<f32> = (0..dims)
                .map(|d| {
                    let scale = [1.0, 0.01, 100.0][d % 3];
                    (rng.next_f32() * 2.0 - 1.0) * scale
                })
                .collect();
            log_times.push(offset - 1.5 * features[0]);
            samples.push(Sample {
                task: task.clone(),
                kind: kind.into(),
                name: format!("impl_{i}"),
                features,
            });
        }
        for a in first..samples.len() {
            for b in a + 1..samples.len() {
                let (fast, slow) = if log_times[a] <= log_times[b] {
                    (a, b)
                } else {
                    (b, a)
                };
                pairs.push(Pair {
                    fast,
                    slow,
                    log_ratio: log_times[slow] - log_times[fast],
                    train_only: false,
                });
            }
        }
    }
    RankingData {
        feature_names: (0..dims).map(|d| format!("f{d}")).collect(),
        samples,
        pairs,
    }
}
