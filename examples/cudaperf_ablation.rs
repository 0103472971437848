//! CudaPerf's online-stage claim, tested: the same GRPO loop and seeds under outcome-only
//! (`kevin`), outcome + structure (`outcome_structure`) and the full unified reward
//! (`cudaperf`); per variant the correctness rate, fast₁, the geometric-mean speedup over
//! the references and the fraction of tasks whose final program reaches the dataset's best,
//! per task and overall, on the training tasks and on tasks held out from training (the
//! policy is shared across a family's tasks).
//!
//! ```text
//! cargo run --release --example cudaperf_ablation -- --seeds 3 --out runs/ablation   # GPU
//! cargo run --example cudaperf_ablation -- --seeds 2 --steps 8 --out runs/ablation-cpu  # no GPU: static variants
//! ```
//! Without a GPU the variants are the static analogues (`static_outcome`: compiles and
//! launches; `static_structure`: + structural score; `static`: + ranker), which cannot see
//! correctness or speed: that table measures what a static reward optimises, not speed.
//! All runs share one evaluator and every program of the training tasks is evaluated once
//! before the first run, so a program is compiled and measured once and every variant sees
//! the same measurement of it. Writes `ablation.md`, `ablation.json` and
//! `curves.png` to `--out`.

#[path = "common/mod.rs"]
mod common;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::Parser;
use common::programs::{self, Expect};
use common::rollout::{self, LoopConfig, TaskEval};
use cudaperf::rl::{AdvantageOptions, EpisodeOptions, Estimator, TurnGrouping};
use serde::Serialize;

#[derive(Parser, Debug)]
#[command(about = "Reward ablation of the GRPO loop (CudaPerf's online stage)")]
struct Args {
    /// Seeds per variant (default 3; replay: 20).
    #[arg(long)]
    seeds: Option<u64>,
    /// Training steps per run (default 20; replay: 40).
    #[arg(long)]
    steps: Option<usize>,
    /// Episodes per group.
    #[arg(long, default_value_t = 8)]
    group: usize,
    /// Turns per episode.
    #[arg(long, default_value_t = 2)]
    turns: usize,
    /// Variants (comma-separated reward names; default: kevin,outcome_structure,cudaperf
    /// with a GPU, static_outcome,static_structure,static without).
    #[arg(long, value_delimiter = ',')]
    variants: Vec<String>,
    /// Advantage estimator.
    #[arg(long, default_value = "grpo")]
    estimator: String,
    /// Adam learning rate.
    #[arg(long, default_value_t = 0.003)]
    lr: f64,
    /// Replay: policy-gradient step on the knob logits.
    #[arg(long, default_value_t = 1.0)]
    lr_replay: f64,
    /// KL coefficient.
    #[arg(long, default_value_t = 0.05)]
    kl: f64,
    /// Sampled episodes per task in each final evaluation.
    #[arg(long, default_value_t = 4)]
    eval_samples: usize,
    /// Output folder.
    #[arg(long, default_value = "runs/ablation")]
    out: PathBuf,
    /// Wall-clock budget, seconds: 80 % for evaluating every training program once and then
    /// training (split evenly over the runs), the rest for the final evaluations.
    #[arg(long, default_value_t = 240)]
    budget_s: u64,
    /// Fixtures folder.
    #[arg(long)]
    fixtures: Option<PathBuf>,
    /// Replay a measured program table (`program_table`) instead of evaluating: arms
    /// outcome, structure, ranker, both, structure_ungated, shuffled_structure, kevin_pooled,
    /// random (`--variants` picks some), paired seeds, no GPU needed.
    #[arg(long)]
    table: Option<PathBuf>,
    /// Replay: tasks of the table to use (default all).
    #[arg(long, value_delimiter = ',')]
    tasks: Vec<String>,
}

fn main() {
    common::setup::serve_as_worker_if_asked();
    if let Err(e) = run(Args::parse()) {
        eprintln!("error: {e}");
        std::process::exit(2);
    }
}

/// One (variant, seed) run.
#[derive(Serialize)]
struct Run {
    variant: String,
    seed: u64,
    steps_run: usize,
    seconds: f64,
    reward_first: Option<f64>,
    reward_last: Option<f64>,
    history: Vec<rollout::StepLog>,
    evals: Vec<TaskEval>,
    /// Per task: whether the greedy final program reaches the dataset's best (GPU only).
    reached: BTreeMap<String, Option<bool>>,
    /// Per task: the generator's intended correctness risk of the greedy final program.
    risk: BTreeMap<String, Option<String>>,
}

fn run(args: Args) -> Result<(), String> {
    let fixtures = common::setup::fixtures_root(args.fixtures.as_deref())?;
    if let Some(table) = &args.table {
        return replay(&args, table, &fixtures);
    }
    let seeds = args.seeds.unwrap_or(3);
    let steps = args.steps.unwrap_or(20);
    let gpu = common::setup::gpu_present();
    let variants: Vec<String> = if args.variants.is_empty() {
        if gpu {
            vec![
                "kevin".into(),
                "outcome_structure".into(),
                "cudaperf".into(),
            ]
        } else {
            vec![
                "static_outcome".into(),
                "static_structure".into(),
                "static".into(),
            ]
        }
    } else {
        args.variants.clone()
    };
    let needs_gpu = variants.iter().any(|v| common::rewards::needs_gpu(v));
    if needs_gpu && !gpu {
        return Err("these variants need a GPU and none was found (default static variants run without one)".into());
    }
    if needs_gpu && variants.iter().any(|v| !common::rewards::needs_gpu(v)) {
        return Err("do not mix static and GPU variants in one table".into());
    }
    let rewards: Vec<Box<dyn cudaperf::reward::Reward>> = variants
        .iter()
        .map(|v| common::rewards::by_name(v).ok_or_else(|| format!("unknown reward `{v}`")))
        .collect::<Result<_, _>>()?;
    let estimator = Estimator::parse(&args.estimator).ok_or("unknown estimator")?;
    let train_ids: Vec<String> = programs::TASKS
        .iter()
        .filter(|t| !t.held_out)
        .map(|t| t.id.to_string())
        .collect();
    let held_ids: Vec<String> = programs::TASKS
        .iter()
        .filter(|t| t.held_out)
        .map(|t| t.id.to_string())
        .collect();
    let train_envs = rollout::load_tasks(&fixtures, &train_ids)?;
    let mut all_envs = rollout::load_tasks(&fixtures, &train_ids)?;
    all_envs.extend(rollout::load_tasks(&fixtures, &held_ids)?);
    let evaluator = common::setup::evaluator(&fixtures, needs_gpu, None);
    std::fs::create_dir_all(&args.out).map_err(|e| e.to_string())?;
    let mode = if needs_gpu {
        "GPU (measured correctness and speedups)"
    } else {
        "CPU (static rewards: no correctness or speed)"
    };
    println!(
        "ablation [{mode}]: variants {}, {} seeds, {} steps, G = {}, {} turns, budget {} s",
        variants.join(","),
        seeds,
        steps,
        args.group,
        args.turns,
        args.budget_s
    );

    // The dataset's best per task, measured once by this evaluator (any GPU reward: the
    // speedup is in the timing stage, whatever the reward).
    let mut dataset = BTreeMap::new();
    for env in &all_envs {
        if let Some(d) = rollout::dataset_best(env, &fixtures, &evaluator, rewards[0].as_ref()) {
            dataset.insert(env.task.id.clone(), d);
        }
    }

    let start = Instant::now();
    // Every program of the training tasks is evaluated once before any run, so that no run
    // pays for the first measurements (the first would otherwise get fewer steps within its
    // share of the budget) and every variant sees the same measurement of a program.
    let mut prewarmed = 0;
    for env in &train_envs {
        let mut seen = std::collections::HashSet::new();
        let subs: Vec<cudaperf::pipeline::Submission> = env
            .spec
            .family
            .all_choices()
            .iter()
            .filter_map(|c| programs::render(env.spec.id, c).ok())
            .map(|p| p.completion())
            .filter(|c| seen.insert(c.clone()))
            .map(cudaperf::pipeline::Submission::from_completion)
            .collect();
        prewarmed += subs.len();
        let upto = rewards
            .iter()
            .map(|r| r.needs(&cudaperf::reward::Context::new(&env.task, &evaluator)))
            .max()
            .unwrap_or(cudaperf::pipeline::Stage::Correctness);
        let _ = evaluator.evaluate_batch(&env.task, &subs, upto);
    }
    let prewarm_s = start.elapsed().as_secs_f64();
    println!("evaluated the {prewarmed} programs of the training tasks once in {prewarm_s:.0} s");
    let n_runs = variants.len() * seeds as usize;
    let train_budget = Duration::from_secs(args.budget_s)
        .mul_f64(0.8)
        .saturating_sub(start.elapsed());
    let train_start = Instant::now();
    let mut runs: Vec<Run> = Vec::new();
    let mut k = 0;
    for seed in 0..seeds {
        for (variant, reward) in variants.iter().zip(&rewards) {
            k += 1;
            let deadline = train_start + train_budget.mul_f64(k as f64 / n_runs as f64);
            let cfg = LoopConfig {
                steps,
                group: args.group,
                turns: args.turns,
                episode: EpisodeOptions {
                    gamma: 0.4,
                    grouping: TurnGrouping::PerTurn,
                    advantage: AdvantageOptions::with_estimator(estimator),
                    noise_aware: false,
                    ..EpisodeOptions::default()
                },
                policy: common::policy::PolicyConfig {
                    lr: args.lr,
                    kl_coef: args.kl,
                    ..Default::default()
                },
                seed,
            };
            let t0 = Instant::now();
            let trained = rollout::train(
                &cfg,
                &train_envs,
                &evaluator,
                reward.as_ref(),
                Some(deadline),
                |_| {},
            )?;
            let evals = rollout::evaluate(
                &trained.policy,
                &all_envs,
                &evaluator,
                reward.as_ref(),
                args.turns,
                args.eval_samples,
                seed,
            );
            let h = &trained.history;
            let w = (h.len() / 5).max(1);
            let mut reached = BTreeMap::new();
            let mut risk = BTreeMap::new();
            for (env, ev) in all_envs.iter().zip(&evals) {
                let last = ev.greedy.last();
                reached.insert(
                    env.task.id.clone(),
                    match (last, dataset.get(&env.task.id)) {
                        (Some(t), Some(d)) => rollout::reaches(t, d),
                        _ => None,
                    },
                );
                let r = last
                    .and_then(|t| knobs_of(env.spec.family, &t.knobs))
                    .and_then(|c| programs::render(env.spec.id, &c).ok())
                    .and_then(|p| match p.expect {
                        Expect::Runs { risk } => risk.map(String::from),
                        _ => None,
                    });
                risk.insert(env.task.id.clone(), r);
            }
            let run = Run {
                variant: variant.clone(),
                seed,
                steps_run: h.len(),
                seconds: t0.elapsed().as_secs_f64(),
                reward_first: rollout::mean(
                    &h.iter().take(w).map(|s| s.reward_mean).collect::<Vec<_>>(),
                ),
                reward_last: rollout::mean(
                    &h.iter()
                        .rev()
                        .take(w)
                        .map(|s| s.reward_mean)
                        .collect::<Vec<_>>(),
                ),
                history: trained.history,
                evals,
                reached,
                risk,
            };
            println!(
                "{variant:>18} seed {seed}: {} steps in {:.0} s, reward {:.3} -> {:.3}",
                run.steps_run,
                run.seconds,
                run.reward_first.unwrap_or(f64::NAN),
                run.reward_last.unwrap_or(f64::NAN)
            );
            runs.push(run);
        }
    }

    let md = table(
        &variants,
        &runs,
        &all_envs,
        &dataset,
        needs_gpu,
        seeds,
        steps,
        &args,
        mode,
        start.elapsed().as_secs_f64(),
    );
    println!("\n{md}");
    std::fs::write(args.out.join("ablation.md"), &md).map_err(|e| e.to_string())?;
    let json = serde_json::json!({"mode": mode, "gpu": needs_gpu, "command": std::env::args().collect::<Vec<_>>(), "variants": variants, "dataset_best": dataset, "runs": runs});
    std::fs::write(
        args.out.join("ablation.json"),
        serde_json::to_string_pretty(&json).map_err(|e| e.to_string())?,
    )
    .map_err(|e| e.to_string())?;
    curves(&args.out.join("curves.png"), &variants, &runs, needs_gpu)?;
    println!(
        "wrote {}/{{ablation.md, ablation.json, curves.png}}",
        args.out.display()
    );
    Ok(())
}

/// Knob indices back from `name=option ...`.
fn knobs_of(family: programs::Family, described: &str) -> Option<Vec<usize>> {
    family
        .knobs()
        .iter()
        .zip(described.split_whitespace())
        .map(|(k, kv)| {
            let (_, v) = kv.split_once('=')?;
            k.options.iter().position(|o| *o == v)
        })
        .collect()
}

fn mean_sd(v: &[f64]) -> String {
    match v.len() {
        0 => "-".into(),
        1 => format!("{:.3}", v[0]),
        n => {
            let m = v.iter().sum::<f64>() / n as f64;
            let sd = (v.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (n - 1) as f64).sqrt();
            format!("{m:.3} ± {sd:.3}")
        }
    }
}

fn pct_sd(v: &[f64]) -> String {
    match v.len() {
        0 => "-".into(),
        1 => format!("{:.0} %", 100.0 * v[0]),
        n => {
            let m = v.iter().sum::<f64>() / n as f64;
            let sd = (v.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (n - 1) as f64).sqrt();
            format!("{:.0} ± {:.0} %", 100.0 * m, 100.0 * sd)
        }
    }
}

/// Per-run numbers over a set of tasks (`held_out` selects the split).
struct Split {
    correct: f64,
    fast1: f64,
    geomean: f64,
    reached: Option<f64>,
    compile: f64,
    structure: Option<f64>,
    risky: f64,
}

fn split(run: &Run, held_out: bool) -> Option<Split> {
    let ev: Vec<&TaskEval> = run
        .evals
        .iter()
        .filter(|e| e.held_out == held_out)
        .collect();
    if ev.is_empty() {
        return None;
    }
    let n = ev.len() as f64;
    let greedy: Vec<Option<&rollout::TurnSummary>> = ev.iter().map(|e| e.greedy.last()).collect();
    let correct = ev
        .iter()
        .filter_map(|e| e.sampled.correct_rate)
        .sum::<f64>()
        / n;
    let fast1 = greedy
        .iter()
        .filter(|t| t.and_then(|t| t.speedup).is_some_and(|s| s > 1.0))
        .count() as f64
        / n;
    // Incorrect programs count as the reference (1×): a deployment falls back to it.
    let speeds: Vec<f64> = greedy
        .iter()
        .map(|t| t.and_then(|t| t.speedup).unwrap_or(1.0))
        .collect();
    let geomean = rollout::geomean(&speeds).unwrap_or(f64::NAN);
    let reached: Vec<bool> = ev
        .iter()
        .filter_map(|e| run.reached.get(&e.task).copied().flatten())
        .collect();
    let structure: Vec<f64> = greedy
        .iter()
        .filter_map(|t| t.and_then(|t| t.structure))
        .collect();
    Some(Split {
        correct,
        fast1,
        geomean,
        reached: (!reached.is_empty())
            .then(|| reached.iter().filter(|r| **r).count() as f64 / reached.len() as f64),
        compile: ev.iter().map(|e| e.sampled.compile_rate).sum::<f64>() / n,
        structure: rollout::mean(&structure),
        risky: ev
            .iter()
            .filter(|e| run.risk.get(&e.task).is_some_and(|r| r.is_some()))
            .count() as f64
            / n,
    })
}

#[allow(clippy::too_many_arguments)]
fn table(
    variants: &[String],
    runs: &[Run],
    envs: &[rollout::TaskEnv],
    dataset: &BTreeMap<String, rollout::DatasetBest>,
    gpu: bool,
    seeds: u64,
    steps: usize,
    args: &Args,
    mode: &str,
    seconds: f64,
) -> String {
    let mut md = format!(
        "# Reward ablation — {mode}\n\nCommand: `{}`\n\n{} seeds per variant, up to {} steps, G = {}, {} turns, lr {}, KL {}; {:.0} s in all. Every program of the training tasks was evaluated once before the runs (one shared evaluator: every variant sees the same measurement of a program). Final evaluation per run: the greedy episode and {} sampled episodes per task; numbers are mean ± sd over seeds.\n\n",
        std::env::args().collect::<Vec<_>>().join(" "),
        seeds, steps, args.group, args.turns, args.lr, args.kl, seconds, args.eval_samples
    );
    for (held, title) in [
        (
            false,
            "Training tasks (vector_add, softmax_rows, transpose, matmul, max_reduce, stencil_1d)",
        ),
        (
            true,
            "Held-out tasks (saxpy, sum_dim, dot_product: same families, never trained on)",
        ),
    ] {
        md.push_str(&format!("## {title}\n\n"));
        if gpu {
            md.push_str("| reward | correct (sampled, last turn) | fast₁ (greedy) | geomean speedup (greedy; incorrect = 1×) | reaches dataset best | greedy program with an intended race/unwritten tail |\n|---|---|---|---|---|---|\n");
        } else {
            md.push_str("| reward | compiles + launches (sampled) | structural score (greedy) | greedy program with an intended race/unwritten tail (invisible without a GPU) |\n|---|---|---|---|\n");
        }
        for v in variants {
            let s: Vec<Split> = runs
                .iter()
                .filter(|r| &r.variant == v)
                .filter_map(|r| split(r, held))
                .collect();
            let col = |f: &dyn Fn(&Split) -> Option<f64>| -> Vec<f64> {
                s.iter().filter_map(f).collect()
            };
            if gpu {
                md.push_str(&format!(
                    "| `{v}` | {} | {} | {} | {} | {} |\n",
                    pct_sd(&col(&|x| Some(x.correct))),
                    pct_sd(&col(&|x| Some(x.fast1))),
                    mean_sd(&col(&|x| Some(x.geomean))),
                    pct_sd(&col(&|x| x.reached)),
                    pct_sd(&col(&|x| Some(x.risky))),
                ));
            } else {
                md.push_str(&format!(
                    "| `{v}` | {} | {} | {} |\n",
                    pct_sd(&col(&|x| Some(x.compile))),
                    mean_sd(&col(&|x| x.structure)),
                    pct_sd(&col(&|x| Some(x.risky))),
                ));
            }
        }
        md.push('\n');
    }
    md.push_str(
        "## Per task (greedy final program; per seed)\n\n| task | dataset best (speedup now) |",
    );
    for v in variants {
        md.push_str(&format!(" `{v}` |"));
    }
    md.push_str("\n|---|---|");
    for _ in variants {
        md.push_str("---|");
    }
    md.push('\n');
    for env in envs {
        let d = dataset.get(&env.task.id);
        md.push_str(&format!(
            "| {}{} | {} |",
            env.task.id,
            if env.spec.held_out { " (held out)" } else { "" },
            d.map_or("-".into(), |d| format!(
                "{} ({})",
                d.name,
                d.speedup_now.map_or("-".into(), |s| format!("{s:.2}x"))
            ))
        ));
        for v in variants {
            let cells: Vec<String> = runs
                .iter()
                .filter(|r| &r.variant == v)
                .map(|r| {
                    let t = r
                        .evals
                        .iter()
                        .find(|e| e.task == env.task.id)
                        .and_then(|e| e.greedy.last());
                    match t {
                        Some(t) if gpu => match t.speedup {
                            Some(s) => format!(
                                "{s:.2}x{}",
                                if r.reached.get(&env.task.id).copied().flatten() == Some(true) {
                                    "*"
                                } else {
                                    ""
                                }
                            ),
                            None => t.verdict.clone(),
                        },
                        Some(t) => format!("{} {:.2}", t.verdict, t.structure.unwrap_or(f64::NAN)),
                        None => "-".into(),
                    }
                })
                .collect();
            md.push_str(&format!(" {} |", cells.join(", ")));
        }
        md.push('\n');
    }
    if gpu {
        md.push_str("\n`*`: reaches the dataset's best implementation measured in the same run (the program's 95 % speedup interval reaches the best's). fast₁: correct and faster than the reference.\n");
    } else {
        md.push_str("\nCells: verdict of the greedy program (`not_run`: compiled and launchable, not run without a GPU) and its structural score.\n");
    }
    md
}

fn curves(
    path: &std::path::Path,
    variants: &[String],
    runs: &[Run],
    gpu: bool,
) -> Result<(), String> {
    let avg = |v: &str, f: &dyn Fn(&rollout::StepLog) -> Option<f64>| -> Vec<(f64, f64)> {
        let rs: Vec<&Run> = runs.iter().filter(|r| r.variant == v).collect();
        let n = rs.iter().map(|r| r.history.len()).min().unwrap_or(0);
        (0..n)
            .filter_map(|i| {
                let vals: Vec<f64> = rs.iter().filter_map(|r| f(&r.history[i])).collect();
                rollout::mean(&vals).map(|m| (i as f64, m))
            })
            .collect()
    };
    let series = |f: &dyn Fn(&rollout::StepLog) -> Option<f64>| -> Vec<common::plot::Series> {
        variants.iter().map(|v| (v.clone(), avg(v, f))).collect()
    };
    let mut panels = vec![(
        "mean reward (own reward, mean over seeds)".to_string(),
        "reward".to_string(),
        series(&|s| Some(s.reward_mean)),
    )];
    if gpu {
        panels.push((
            "correct samples".into(),
            "fraction".into(),
            series(&|s| s.correct_rate),
        ));
        panels.push((
            "geomean speedup of correct samples".into(),
            "speedup".into(),
            series(&|s| s.geomean_speedup),
        ));
    } else {
        panels.push((
            "compiles + launches".into(),
            "fraction".into(),
            series(&|s| Some(s.compile_rate)),
        ));
        panels.push((
            "mean structural score".into(),
            "score".into(),
            series(&|s| s.structure_mean),
        ));
    }
    common::plot::plot(path, &panels)
}

/// `--table`: the replayed ablation (issue 21) on a measured program table.
fn replay(
    args: &Args,
    table_path: &std::path::Path,
    fixtures: &std::path::Path,
) -> Result<(), String> {
    use common::replay::{Arm, ReplayConfig};
    let start = Instant::now();
    let rows = common::table::read(table_path)?;
    print!(
        "sparsity of {} (uniform policy over knob combinations):\n{}",
        table_path.display(),
        common::table::sparsity_text(&common::table::sparsity(&rows))
    );
    if rows.iter().any(|r| r.synthetic) {
        println!("NOTE: this table's GPU columns are synthetic (a bookkeeping fixture): its outcome means nothing");
    }
    let arms: Vec<Arm> = if args.variants.is_empty() {
        Arm::ALL.to_vec()
    } else {
        args.variants
            .iter()
            .map(|v| {
                Arm::parse(v).ok_or_else(|| {
                    format!(
                        "--variants: no arm `{v}` (arms: {})",
                        Arm::ALL.map(|a| a.name()).join(", ")
                    )
                })
            })
            .collect::<Result<_, _>>()?
    };
    let cfg = ReplayConfig {
        steps: args.steps.unwrap_or(40),
        group: args.group,
        turns: args.turns.clamp(1, 2),
        seeds: (0..args.seeds.unwrap_or(20)).collect(),
        lr: args.lr_replay,
        arms,
        ..ReplayConfig::default()
    };
    let tasks = common::replay::load_tasks(rows, fixtures, &args.tasks)?;
    let evaluator = common::setup::evaluator(fixtures, false, None);
    let summary = common::replay_report::run_all(&tasks, &evaluator, &cfg);
    let name = table_path.display().to_string();
    common::replay_report::write(&summary, &args.out, &name)?;
    println!("{}", common::replay_report::markdown(&summary, &name));
    println!(
        "{} runs in {:.1} s; wrote {}/ablation.md, ablation.json, curves.png",
        summary.runs.len(),
        start.elapsed().as_secs_f64(),
        args.out.display()
    );
    Ok(())
}
