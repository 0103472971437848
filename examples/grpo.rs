//! The reference GRPO loop, end to end on this crate's reward.
//!
//! A burn policy over a space of kernel programs (`examples/common/programs`: block size,
//! elements per thread, vector width, shared-memory tiling with or without padding, reduction
//! style, synchronisation, unrolling — some combinations wrong or slow) writes CUDA for six
//! fixture tasks of different kinds. Each step: a group of `G` two-turn episodes per task (turn
//! 2 sees the features of turn 1's report), rewards through `score_batch`, advantages from
//! `cudaperf::rl` (discounted returns, GRPO per turn, zero-variance groups dropped), a
//! PPO-style clipped update with a KL term to the initial policy, Adam.
//!
//! ```text
//! cargo run --release --example grpo -- --steps 20 --out runs/grpo            # GPU: full reward
//! cargo run --example grpo -- --reward static --steps 12 --out runs/grpo-cpu  # no GPU: static reward
//! ```
//! With a GPU (`--reward auto`, the default) it trains on `cudaperf()` (measured speedups);
//! without one on the static reward (compile + launch plan + structure + ranker). Writes
//! `steps.jsonl` (one JSON line per step), `curve.png`, `summary.json`, `summary.md` (the
//! final greedy programs against the dataset's best implementations), `best/<task>.cu` and
//! `prompts/<task>.txt` (a next-turn prompt built by `cudaperf::rl`). `--budget-s` bounds the
//! wall-clock time; the final evaluation runs after it.

#[path = "common/mod.rs"]
mod common;

use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::Parser;
use common::programs;
use common::rollout::{self, LoopConfig, StepLog};
use cudaperf::rl::{AdvantageOptions, EpisodeOptions, Estimator, TurnGrouping};

#[derive(Parser, Debug)]
#[command(about = "Reference GRPO loop on the cudaperf reward")]
struct Args {
    /// Training steps (one group per task per step).
    #[arg(long, default_value_t = 30)]
    steps: usize,
    /// Episodes per group.
    #[arg(long, default_value_t = 8)]
    group: usize,
    /// Turns per episode.
    #[arg(long, default_value_t = 2)]
    turns: usize,
    /// Training tasks (comma-separated; default the six training tasks of the generator).
    #[arg(long, value_delimiter = ',')]
    tasks: Vec<String>,
    /// Reward: auto (cudaperf with a GPU, static without), cudaperf, kevin,
    /// outcome_structure, static, static_outcome, static_structure.
    #[arg(long, default_value = "auto")]
    reward: String,
    /// Advantage estimator: grpo, dr_grpo, rloo.
    #[arg(long, default_value = "grpo")]
    estimator: String,
    /// Discount of turn 2's reward in turn 1's return (Kevin-32B: 0.4).
    #[arg(long, default_value_t = 0.4)]
    gamma: f64,
    /// Equalise the speed terms of samples whose speedup intervals overlap.
    #[arg(long)]
    noise_aware: bool,
    /// Adam learning rate.
    #[arg(long, default_value_t = 0.003)]
    lr: f64,
    /// PPO clip ε.
    #[arg(long, default_value_t = 0.2)]
    clip: f64,
    /// KL coefficient (to the initial policy).
    #[arg(long, default_value_t = 0.05)]
    kl: f64,
    /// Gradient steps per batch.
    #[arg(long, default_value_t = 4)]
    ppo_epochs: usize,
    /// Seed.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Output folder.
    #[arg(long, default_value = "runs/grpo")]
    out: PathBuf,
    /// Wall-clock budget for training, seconds (the final evaluation runs after it).
    #[arg(long, default_value_t = 240)]
    budget_s: u64,
    /// Sampled episodes per task in the final evaluation.
    #[arg(long, default_value_t = 8)]
    eval_samples: usize,
    /// Fixtures folder (default ./fixtures, then $CARGO_MANIFEST_DIR/fixtures).
    #[arg(long)]
    fixtures: Option<PathBuf>,
}

fn main() {
    common::setup::serve_as_worker_if_asked();
    if let Err(e) = run(Args::parse()) {
        eprintln!("error: {e}");
        std::process::exit(2);
    }
}

fn run(args: Args) -> Result<(), String> {
    let fixtures = common::setup::fixtures_root(args.fixtures.as_deref())?;
    let gpu = common::setup::gpu_present();
    let reward_name = match args.reward.as_str() {
        "auto" if gpu => "cudaperf".to_string(),
        "auto" => "static".to_string(),
        r => r.to_string(),
    };
    let needs_gpu = common::rewards::needs_gpu(&reward_name);
    if needs_gpu && !gpu {
        return Err(format!(
            "reward `{reward_name}` needs a GPU and none was found (use --reward static)"
        ));
    }
    let reward = common::rewards::by_name(&reward_name)
        .ok_or_else(|| format!("unknown reward `{reward_name}`"))?;
    let estimator = Estimator::parse(&args.estimator)
        .ok_or_else(|| format!("unknown estimator `{}`", args.estimator))?;
    let train_ids: Vec<String> = if args.tasks.is_empty() {
        programs::TASKS
            .iter()
            .filter(|t| !t.held_out)
            .map(|t| t.id.to_string())
            .collect()
    } else {
        args.tasks.clone()
    };
    let held_ids: Vec<String> = programs::TASKS
        .iter()
        .filter(|t| t.held_out && !train_ids.iter().any(|x| x == t.id))
        .map(|t| t.id.to_string())
        .collect();
    let train_envs = rollout::load_tasks(&fixtures, &train_ids)?;
    let held_envs = rollout::load_tasks(&fixtures, &held_ids)?;
    let evaluator = common::setup::evaluator(&fixtures, needs_gpu, None);
    let cfg = LoopConfig {
        steps: args.steps,
        group: args.group,
        turns: args.turns,
        episode: EpisodeOptions {
            gamma: args.gamma,
            grouping: TurnGrouping::PerTurn,
            advantage: AdvantageOptions::with_estimator(estimator),
            noise_aware: args.noise_aware,
            ..EpisodeOptions::default()
        },
        policy: common::policy::PolicyConfig {
            lr: args.lr,
            clip: args.clip,
            kl_coef: args.kl,
            ppo_epochs: args.ppo_epochs,
            ..Default::default()
        },
        seed: args.seed,
    };
    std::fs::create_dir_all(args.out.join("best")).map_err(|e| e.to_string())?;
    std::fs::create_dir_all(args.out.join("prompts")).map_err(|e| e.to_string())?;
    let mut log = std::fs::File::create(args.out.join("steps.jsonl")).map_err(|e| e.to_string())?;
    let mode = if needs_gpu {
        "GPU (measured speedups)"
    } else {
        "CPU (static reward: no correctness or speed)"
    };
    println!(
        "grpo: reward `{reward_name}` [{mode}], tasks {}, G = {}, {} turns, {} steps, estimator {}, gamma {}, budget {} s",
        train_ids.join(","), cfg.group, cfg.turns, cfg.steps, estimator.as_str(), cfg.episode.gamma, args.budget_s
    );
    let start = Instant::now();
    let deadline = Some(start + Duration::from_secs(args.budget_s));
    let trained = rollout::train(
        &cfg,
        &train_envs,
        &evaluator,
        reward.as_ref(),
        deadline,
        |s: &StepLog| {
            let _ = writeln!(log, "{}", serde_json::to_string(s).unwrap_or_default());
            let _ = log.flush();
            println!(
            "step {:>3} {:>6.1}s  reward mean {:>7.3} (turns {})  max {:>6.3}  compile {:.2}  correct {}  geomean {}  kl {:.4}  dropped {}/{}  programs {}",
            s.step,
            s.elapsed_s,
            s.reward_mean,
            s.reward_mean_turn.iter().map(|v| format!("{v:.3}")).collect::<Vec<_>>().join("/"),
            s.reward_max,
            s.compile_rate,
            s.correct_rate.map_or("-".into(), |v| format!("{v:.2}")),
            s.geomean_speedup.map_or("-".into(), |v| format!("{v:.3}x")),
            s.kl,
            s.dropped_groups,
            s.groups,
            s.distinct_programs
        );
        },
    )?;
    let train_s = start.elapsed().as_secs_f64();
    let h = &trained.history;
    let k = (h.len() / 5).max(1);
    let first = rollout::mean(&h.iter().take(k).map(|s| s.reward_mean).collect::<Vec<_>>());
    let last = rollout::mean(
        &h.iter()
            .rev()
            .take(k)
            .map(|s| s.reward_mean)
            .collect::<Vec<_>>(),
    );
    common::plot::plot_run(&args.out.join("curve.png"), h, &reward_name)?;

    // Final evaluation: greedy episode and sampled episodes per task, train and held out.
    let mut all_envs = train_envs;
    all_envs.extend(held_envs);
    let evals = rollout::evaluate(
        &trained.policy,
        &all_envs,
        &evaluator,
        reward.as_ref(),
        cfg.turns,
        args.eval_samples,
        args.seed,
    );
    let mut md = String::new();
    md.push_str(&format!(
        "# GRPO run — reward `{reward_name}`, {mode}\n\nCommand: `{}`\n\n{} steps in {:.0} s (budget {} s), G = {}, {} turns, estimator {}, gamma {}, lr {}, clip {}, KL {}, seed {}.\nMean reward: first {k} step(s) {:.3}, last {k} step(s) {:.3}.\n\n",
        std::env::args().collect::<Vec<_>>().join(" "),
        h.len(), train_s, args.budget_s, cfg.group, cfg.turns, estimator.as_str(), cfg.episode.gamma, args.lr, args.clip, args.kl, args.seed,
        first.unwrap_or(f64::NAN), last.unwrap_or(f64::NAN)
    ));
    md.push_str("| task | split | final greedy program (turn 2) | verdict | reward | speedup | sampled: correct / compiles | best seen (reward, speedup) | dataset best (H200 json / now) | reaches it |\n|---|---|---|---|---|---|---|---|---|---|\n");
    let mut rows = Vec::new();
    for (env, ev) in all_envs.iter().zip(&evals) {
        let last_turn = ev.greedy.last();
        let best = trained.best.get(&env.task.id);
        let ds = if needs_gpu {
            rollout::dataset_best(env, &fixtures, &evaluator, reward.as_ref())
        } else {
            rollout::dataset_best(env, &fixtures, &evaluator, reward.as_ref()).map(|mut d| {
                d.speedup_now = None;
                d.ci95_now = None;
                d
            })
        };
        let reached = match (last_turn, &ds) {
            (Some(t), Some(d)) => rollout::reaches(t, d),
            _ => None,
        };
        let fmt_x = |v: Option<f64>| v.map_or("-".to_string(), |x| format!("{x:.3}x"));
        md.push_str(&format!(
            "| {} | {} | `{}` | {} | {:.3} | {} | {} / {:.2} | {} | {} | {} |\n",
            env.task.id,
            if env.spec.held_out {
                "held out"
            } else {
                "train"
            },
            last_turn.map_or("-", |t| t.knobs.as_str()),
            last_turn.map_or("-", |t| t.verdict.as_str()),
            last_turn.map_or(f64::NAN, |t| t.reward),
            fmt_x(last_turn.and_then(|t| t.speedup)),
            ev.sampled
                .correct_rate
                .map_or("-".into(), |v| format!("{v:.2}")),
            ev.sampled.compile_rate,
            best.map_or("-".into(), |b| format!(
                "{:.3}, {}",
                b.reward,
                fmt_x(b.speedup)
            )),
            ds.as_ref().map_or("-".into(), |d| format!(
                "{} ({} / {})",
                d.name,
                fmt_x(d.h200_json_speedup),
                fmt_x(d.speedup_now)
            )),
            reached.map_or("-", |r| if r { "yes" } else { "no" }),
        ));
        if let Some(b) = best {
            let _ = std::fs::write(
                args.out.join("best").join(format!("{}.cu", env.task.id)),
                format!(
                    "// best program seen for {} during training: {} (reward {:.3}, {})\n{}",
                    env.task.id, b.knobs, b.reward, b.verdict, b.source
                ),
            );
        }
        if let Some(p) = trained.sample_prompts.get(&env.task.id) {
            let _ = std::fs::write(
                args.out
                    .join("prompts")
                    .join(format!("{}.txt", env.task.id)),
                p,
            );
        }
        rows.push(serde_json::json!({"task": env.task.id, "held_out": env.spec.held_out, "final": ev, "best_seen": best, "dataset_best": ds, "reaches_dataset_best": reached}));
    }
    let summary = serde_json::json!({
        "reward": reward_name,
        "mode": mode,
        "gpu": needs_gpu,
        "command": std::env::args().collect::<Vec<_>>(),
        "steps_run": h.len(),
        "train_seconds": train_s,
        "reward_mean_first": first,
        "reward_mean_last": last,
        "window": k,
        "tasks": rows,
    });
    std::fs::write(
        args.out.join("summary.json"),
        serde_json::to_string_pretty(&summary).map_err(|e| e.to_string())?,
    )
    .map_err(|e| e.to_string())?;
    std::fs::write(args.out.join("summary.md"), &md).map_err(|e| e.to_string())?;
    println!("\n{md}");
    println!(
        "wrote {}/{{steps.jsonl, curve.png, summary.json, summary.md, best/, prompts/}}",
        args.out.display()
    );
    Ok(())
}
