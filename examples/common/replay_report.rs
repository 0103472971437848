//! Runs every arm × seed × task of a replayed ablation and summarises it: per arm the
//! primary metric (samples until a correct program ≥ 0.9 × the table's best), the area
//! under the best-so-far curve, the final greedy geomean speedup and the hazard rate, with
//! paired bootstrap intervals against outcome-only (Bonferroni-adjusted intervals,
//! Holm-adjusted p-values). Writes `ablation.md`, `ablation.json` and `curves.png`.

use std::collections::BTreeMap;
use std::path::Path;

use cudaperf::pipeline::Evaluator;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;

use super::replay::{run_one, Arm, ReplayConfig, ReplayTask, RunResult};

/// Per-seed values of one arm (each averaged over the tasks).
#[derive(Debug, Clone, Serialize)]
pub struct SeedValues {
    /// Samples to a near-best program, mean over tasks; a run that never gets there counts
    /// as budget + 1 (censored).
    pub primary: f64,
    /// Area under best-so-far / best.
    pub auc: f64,
    /// Geomean over tasks of the greedy program's speedup.
    pub greedy: f64,
    /// Hazard rate of the last quarter.
    pub hazard: f64,
}

/// A paired comparison with outcome-only on one metric.
#[derive(Debug, Clone, Serialize)]
pub struct Comparison {
    /// Metric name.
    pub metric: &'static str,
    /// Mean over seeds of (arm − outcome).
    pub diff: f64,
    /// Bootstrap interval of the mean difference at level 1 − 0.05/m (Bonferroni over the
    /// m arms compared).
    pub ci: [f64; 2],
    /// Bootstrap two-sided p-value, Holm-adjusted over the arms.
    pub p_holm: f64,
}

/// One arm's summary.
#[derive(Debug, Clone, Serialize)]
pub struct ArmSummary {
    /// Arm.
    pub arm: Arm,
    /// Runs (seeds × tasks).
    pub runs: usize,
    /// Fraction of runs that reached a near-best program.
    pub reached: f64,
    /// Mean over seeds of the per-seed values.
    pub mean: SeedValues,
    /// Per seed, in seed order.
    pub seeds: Vec<SeedValues>,
    /// Against outcome-only (empty for outcome-only itself).
    pub vs_outcome: Vec<Comparison>,
}

/// The whole replay.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    /// Settings.
    pub config: ReplayConfig,
    /// Samples per run.
    pub samples_per_run: usize,
    /// Per task: programs, combinations, best speedup.
    pub tasks: Vec<(String, usize, usize, f64)>,
    /// Per arm.
    pub arms: Vec<ArmSummary>,
    /// Every run.
    pub runs: Vec<RunResult>,
}

/// A metric's name and how to read it from a seed's values.
type Metric = (&'static str, fn(&SeedValues) -> f64);

/// Runs every arm × seed × task.
pub fn run_all(tasks: &[ReplayTask], evaluator: &Evaluator, cfg: &ReplayConfig) -> Summary {
    let mut runs = Vec::new();
    for &arm in &cfg.arms {
        for &seed in &cfg.seeds {
            for t in tasks {
                runs.push(run_one(t, evaluator, arm, seed, cfg));
            }
        }
    }
    let budget = cfg.steps * cfg.group * cfg.turns;
    let per_seed = |arm: Arm| -> Vec<SeedValues> {
        cfg.seeds
            .iter()
            .map(|&seed| {
                let rs: Vec<&RunResult> = runs
                    .iter()
                    .filter(|r| r.arm == arm && r.seed == seed)
                    .collect();
                let n = rs.len().max(1) as f64;
                SeedValues {
                    primary: rs
                        .iter()
                        .map(|r| r.samples_to_near_best.unwrap_or(budget + 1) as f64)
                        .sum::<f64>()
                        / n,
                    auc: rs.iter().map(|r| r.auc).sum::<f64>() / n,
                    greedy: (rs.iter().map(|r| r.greedy_speedup.ln()).sum::<f64>() / n).exp(),
                    hazard: rs.iter().map(|r| r.hazard_rate).sum::<f64>() / n,
                }
            })
            .collect()
    };
    let base = per_seed(Arm::Outcome);
    let compared: Vec<Arm> = cfg
        .arms
        .iter()
        .copied()
        .filter(|a| *a != Arm::Outcome)
        .collect();
    let m = compared.len().max(1);
    let metrics: [Metric; 4] = [
        ("samples_to_near_best", |v| v.primary),
        ("auc", |v| v.auc),
        ("log_greedy_speedup", |v| v.greedy.ln()),
        ("hazard_rate", |v| v.hazard),
    ];
    let mut arms: Vec<ArmSummary> = cfg
        .arms
        .iter()
        .map(|&arm| {
            let seeds = per_seed(arm);
            let n = seeds.len().max(1) as f64;
            let mean = SeedValues {
                primary: seeds.iter().map(|v| v.primary).sum::<f64>() / n,
                auc: seeds.iter().map(|v| v.auc).sum::<f64>() / n,
                greedy: (seeds.iter().map(|v| v.greedy.ln()).sum::<f64>() / n).exp(),
                hazard: seeds.iter().map(|v| v.hazard).sum::<f64>() / n,
            };
            let rs: Vec<&RunResult> = runs.iter().filter(|r| r.arm == arm).collect();
            let vs_outcome = if arm == Arm::Outcome || !cfg.arms.contains(&Arm::Outcome) {
                Vec::new()
            } else {
                metrics
                    .iter()
                    .map(|(name, f)| {
                        let d: Vec<f64> =
                            seeds.iter().zip(&base).map(|(a, b)| f(a) - f(b)).collect();
                        let (ci, p) = paired_bootstrap(&d, 0.05 / m as f64);
                        Comparison {
                            metric: name,
                            diff: d.iter().sum::<f64>() / d.len().max(1) as f64,
                            ci,
                            p_holm: p,
                        }
                    })
                    .collect()
            };
            ArmSummary {
                arm,
                runs: rs.len(),
                reached: rs
                    .iter()
                    .filter(|r| r.samples_to_near_best.is_some())
                    .count() as f64
                    / rs.len().max(1) as f64,
                mean,
                seeds,
                vs_outcome,
            }
        })
        .collect();
    // Holm over the compared arms, per metric.
    for k in 0..metrics.len() {
        let mut ps: Vec<(usize, f64)> = arms
            .iter()
            .enumerate()
            .filter(|(_, a)| !a.vs_outcome.is_empty())
            .map(|(i, a)| (i, a.vs_outcome[k].p_holm))
            .collect();
        ps.sort_by(|a, b| a.1.total_cmp(&b.1));
        let mut running: f64 = 0.0;
        let len = ps.len();
        for (rank, (i, p)) in ps.into_iter().enumerate() {
            running = running.max(((len - rank) as f64 * p).min(1.0));
            arms[i].vs_outcome[k].p_holm = running;
        }
    }
    Summary {
        config: cfg.clone(),
        samples_per_run: budget,
        tasks: tasks
            .iter()
            .map(|t| {
                (
                    t.space.id.to_string(),
                    t.rows.len(),
                    t.combinations(),
                    t.best,
                )
            })
            .collect(),
        arms,
        runs,
    }
}

/// Bootstrap interval of the mean of `d` at level 1 − `alpha`, and the two-sided p-value
/// of "mean = 0" (2 × the smaller tail of the resampled means around 0).
pub fn paired_bootstrap(d: &[f64], alpha: f64) -> ([f64; 2], f64) {
    if d.is_empty() {
        return ([f64::NAN, f64::NAN], f64::NAN);
    }
    let mut rng = SmallRng::seed_from_u64(0xb007);
    let b = 4000;
    let mut means: Vec<f64> = (0..b)
        .map(|_| {
            (0..d.len())
                .map(|_| d[rng.random_range(0..d.len())])
                .sum::<f64>()
                / d.len() as f64
        })
        .collect();
    means.sort_by(f64::total_cmp);
    let q = |p: f64| means[((p * b as f64) as usize).min(b - 1)];
    let le = means.iter().filter(|&&m| m <= 0.0).count() as f64 / b as f64;
    let ge = means.iter().filter(|&&m| m >= 0.0).count() as f64 / b as f64;
    (
        [q(alpha / 2.0), q(1.0 - alpha / 2.0)],
        (2.0 * le.min(ge)).min(1.0),
    )
}

/// The summary as a Markdown table.
pub fn markdown(s: &Summary, table: &str) -> String {
    let c = &s.config;
    let mut out = format!(
        "# Replayed ablation\n\nTable `{table}`; {} steps × G = {} × {} turns = {} samples per run; {} paired seeds; lr {}; γ {}.\n\n",
        c.steps, c.group, c.turns, s.samples_per_run, c.seeds.len(), c.lr, c.gamma
    );
    out += "| task | programs | combinations | best speedup |\n|---|---:|---:|---:|\n";
    for (t, p, k, b) in &s.tasks {
        out += &format!("| {t} | {p} | {k} | {b:.2}× |\n");
    }
    out += "\nPrimary: samples until a correct program ≥ 0.9 × the table's best (mean over tasks; never = budget + 1). Differences are arm − outcome, mean over seeds, with paired bootstrap intervals (Bonferroni-adjusted) and Holm-adjusted p-values.\n\n";
    out += "| arm | reached | samples to ≥0.9× best | Δ [CI] (p) | AUC | Δ [CI] (p) | greedy geomean | Δ log [CI] (p) | hazard rate | Δ [CI] (p) |\n|---|---:|---:|---|---:|---|---:|---|---:|---|\n";
    for a in &s.arms {
        let cmp = |k: usize| {
            a.vs_outcome.get(k).map_or("—".to_string(), |x| {
                format!(
                    "{:+.3} [{:+.3}, {:+.3}] ({:.3})",
                    x.diff, x.ci[0], x.ci[1], x.p_holm
                )
            })
        };
        out += &format!(
            "| {} | {:.0}% | {:.1} | {} | {:.3} | {} | {:.2}× | {} | {:.3} | {} |\n",
            a.arm.name(),
            100.0 * a.reached,
            a.mean.primary,
            cmp(0),
            a.mean.auc,
            cmp(1),
            a.mean.greedy,
            cmp(2),
            a.mean.hazard,
            cmp(3)
        );
    }
    out
}

/// Writes `ablation.md`, `ablation.json` and `curves.png` to `dir`.
pub fn write(s: &Summary, dir: &Path, table: &str) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    std::fs::write(dir.join("ablation.md"), markdown(s, table))
        .map_err(|e| format!("{}: {e}", dir.display()))?;
    let json = serde_json::to_string(s).map_err(|e| e.to_string())?;
    std::fs::write(dir.join("ablation.json"), json)
        .map_err(|e| format!("{}: {e}", dir.display()))?;
    // Mean best-so-far curve per arm (over seeds and tasks), per step (G × turns samples).
    let mut series = Vec::new();
    let mut by: BTreeMap<&str, Vec<&RunResult>> = BTreeMap::new();
    for r in &s.runs {
        by.entry(r.arm.name()).or_default().push(r);
    }
    for a in &s.arms {
        let rs = &by[a.arm.name()];
        let pts = (0..s.config.steps)
            .map(|i| {
                let m = rs.iter().map(|r| r.curve[i]).sum::<f64>() / rs.len() as f64;
                ((i + 1) as f64, m)
            })
            .collect();
        series.push((a.arm.name().to_string(), pts));
    }
    super::plot::plot(
        &dir.join("curves.png"),
        &[(
            format!(
                "best so far / best, {} seeds x {} tasks",
                s.config.seeds.len(),
                s.tasks.len()
            ),
            format!(
                "best so far / best ({} samples a step)",
                s.config.group * s.config.turns
            ),
            series,
        )],
    )
}
