//! The reference GRPO loop: groups of multi-turn episodes per task, rewards through
//! `score_batch`, advantages from `cudaperf::rl`, a PPO-style update of the burn policy.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use cudaperf::pipeline::report::RewardReport;
use cudaperf::pipeline::{Evaluator, Stage, Submission};
use cudaperf::reward::{Context, Reward};
use cudaperf::rl::{self, Episode, EpisodeOptions, Turn};
use cudaperf::task::Task;
use rand::rngs::SmallRng;
use rand::SeedableRng;
use serde::Serialize;

use super::policy::{Policy, PolicyConfig, Sample, State};
use super::programs::{self, TaskSpec};

/// A task with its generator spec.
pub struct TaskEnv {
    /// The task.
    pub task: Task,
    /// Its family and split.
    pub spec: &'static TaskSpec,
}

/// Loads tasks by id from `<fixtures>/tasks/<id>`.
pub fn load_tasks(fixtures: &Path, ids: &[String]) -> Result<Vec<TaskEnv>, String> {
    ids.iter()
        .map(|id| {
            let spec = programs::spec(id).ok_or_else(|| {
                let known: Vec<&str> = programs::TASKS.iter().map(|t| t.id).collect();
                format!(
                    "no program generator for task `{id}` (known: {})",
                    known.join(", ")
                )
            })?;
            let task = Task::load(fixtures.join("tasks").join(id)).map_err(|e| e.to_string())?;
            Ok(TaskEnv { task, spec })
        })
        .collect()
}

/// Settings of the loop.
#[derive(Debug, Clone, Copy)]
pub struct LoopConfig {
    /// Training steps (one group per task per step).
    pub steps: usize,
    /// Episodes per group.
    pub group: usize,
    /// Turns per episode (2: the second conditions on the first's report).
    pub turns: usize,
    /// Returns, grouping, estimator, zero-variance groups, noise-aware speed terms.
    pub episode: EpisodeOptions,
    /// Policy and update.
    pub policy: PolicyConfig,
    /// Seed of sampling.
    pub seed: u64,
}

/// One step's numbers (a JSON line of the log).
#[derive(Debug, Clone, Serialize)]
pub struct StepLog {
    /// 0-based step.
    pub step: usize,
    /// Seconds since the loop started.
    pub elapsed_s: f64,
    /// Mean reward over every turn of every episode.
    pub reward_mean: f64,
    /// Mean reward per turn index.
    pub reward_mean_turn: Vec<f64>,
    /// Largest reward.
    pub reward_max: f64,
    /// Correct turns / turns (None without GPU stages).
    pub correct_rate: Option<f64>,
    /// Turns that compiled with a valid launch plan / turns.
    pub compile_rate: f64,
    /// Geometric mean speedup of the correct, timed turns (None when there are none).
    pub geomean_speedup: Option<f64>,
    /// Mean structural score of the compiled turns.
    pub structure_mean: Option<f64>,
    /// KL(π ‖ π_initial) after the update.
    pub kl: f64,
    /// Clipped surrogate loss.
    pub policy_loss: f64,
    /// Fraction of clipped ratios in the last PPO epoch.
    pub clip_fraction: f64,
    /// Comparison groups (tasks × turns) and how many were dropped for zero variance.
    pub groups: usize,
    /// Dropped groups.
    pub dropped_groups: usize,
    /// Samples in the update.
    pub samples: usize,
    /// Distinct programs evaluated so far.
    pub distinct_programs: usize,
}

/// Numbers over a set of reports.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Metrics {
    /// Reports.
    pub n: usize,
    /// Mean value.
    pub reward_mean: f64,
    /// Largest value.
    pub reward_max: f64,
    /// Correct / n (None without GPU stages).
    pub correct_rate: Option<f64>,
    /// Compiled with a valid plan / n.
    pub compile_rate: f64,
    /// Geometric mean speedup of the correct, timed reports.
    pub geomean_speedup: Option<f64>,
    /// Mean structural score of compiled reports.
    pub structure_mean: Option<f64>,
}

/// `extract_error`, `compile_error`, `invalid_launch`, `cuda_error`, `timeout`, `crashed`,
/// `incorrect`, `correct`, `not_run` (GPU stages unavailable), `reference_failed`.
pub fn verdict(r: &RewardReport) -> &'static str {
    let s = &r.stages;
    if !s.extract.is_ok() {
        return "extract_error";
    }
    if !s.compile.as_ref().is_some_and(|c| c.is_compiled()) {
        return "compile_error";
    }
    if let Some(c) = &s.correctness {
        return if c.passed { "correct" } else { "incorrect" };
    }
    match s.execute.as_ref().map(|e| e.status.name()) {
        Some("invalid_launch") => "invalid_launch",
        Some("cuda_error") => "cuda_error",
        Some("timeout") => "timeout",
        Some("crashed") => "crashed",
        Some("reference_failed") => "reference_failed",
        _ => "not_run",
    }
}

/// The speedup a report awards (None unless correct and timed; withheld speedups count 1).
pub fn speedup(r: &RewardReport) -> Option<f64> {
    let t = r.stages.timing.as_ref()?;
    if !r.stages.correctness.as_ref().is_some_and(|c| c.passed) {
        return None;
    }
    Some(if t.implausible || t.speedup.is_nan() || t.speedup <= 0.0 {
        1.0
    } else {
        t.speedup
    })
}

/// Metrics of a set of reports.
pub fn metrics<'a>(reports: impl IntoIterator<Item = &'a RewardReport>) -> Metrics {
    let reports: Vec<&RewardReport> = reports.into_iter().collect();
    let n = reports.len();
    if n == 0 {
        return Metrics::default();
    }
    let values: Vec<f64> = reports
        .iter()
        .map(|r| r.value)
        .filter(|v| v.is_finite())
        .collect();
    let measured = reports.iter().any(|r| r.stages.correctness.is_some());
    let correct = reports.iter().filter(|r| verdict(r) == "correct").count();
    let launchable = reports
        .iter()
        .filter(|r| {
            !matches!(
                verdict(r),
                "extract_error" | "compile_error" | "invalid_launch"
            )
        })
        .count();
    let speeds: Vec<f64> = reports.iter().filter_map(|r| speedup(r)).collect();
    let structure: Vec<f64> = reports
        .iter()
        .filter(|r| r.stages.compile.as_ref().is_some_and(|c| c.is_compiled()))
        .filter_map(|r| r.stages.structure.as_ref().map(|s| s.score))
        .collect();
    Metrics {
        n,
        reward_mean: mean(&values).unwrap_or(f64::NAN),
        reward_max: values.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        correct_rate: measured.then(|| correct as f64 / n as f64),
        compile_rate: launchable as f64 / n as f64,
        geomean_speedup: geomean(&speeds),
        structure_mean: mean(&structure),
    }
}

/// Mean, None when empty.
pub fn mean(v: &[f64]) -> Option<f64> {
    (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
}

/// Geometric mean of positive values, None when empty.
pub fn geomean(v: &[f64]) -> Option<f64> {
    let pos: Vec<f64> = v
        .iter()
        .copied()
        .filter(|x| *x > 0.0 && x.is_finite())
        .collect();
    (!pos.is_empty()).then(|| (pos.iter().map(|x| x.ln()).sum::<f64>() / pos.len() as f64).exp())
}

/// A group of episodes with what the update needs.
pub struct Rollout {
    /// The episodes (complete ones only).
    pub episodes: Vec<Episode>,
    /// Per episode, per turn: state, choice, log-probability.
    pub steps: Vec<Vec<(State, Vec<usize>, f64)>>,
}

/// How a rollout picks programs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pick {
    /// Sample from the policy.
    Sample,
    /// The most likely program.
    Greedy,
}

/// Scores completions with `score_batch`: one report per completion, `None` where its
/// reward could not be computed here (the others still count).
fn score(ctx: &Context, reward: &dyn Reward, completions: &[String]) -> Vec<Option<RewardReport>> {
    let subs: Vec<Submission> = completions
        .iter()
        .map(Submission::from_completion)
        .collect();
    reward
        .score_batch(ctx, &subs)
        .into_iter()
        .map(|r| r.ok().map(|s| s.report))
        .collect()
}

/// Runs `group` episodes of `turns` turns on one task.
#[allow(clippy::too_many_arguments)]
pub fn rollout(
    policy: &Policy,
    env: &TaskEnv,
    ctx: &Context,
    reward: &dyn Reward,
    group: usize,
    turns: usize,
    pick: Pick,
    rng: &mut SmallRng,
) -> Rollout {
    rollout_tasks(
        policy,
        std::slice::from_ref(env),
        std::slice::from_ref(ctx),
        reward,
        group,
        turns,
        pick,
        rng,
    )
    .pop()
    .unwrap_or(Rollout {
        episodes: Vec::new(),
        steps: Vec::new(),
    })
}

/// A turn's policy input, knob choice and its log-probability.
type Step = (State, Vec<usize>, f64);

/// Runs `group` episodes of `turns` turns on every task (`ctxs[i]` is `envs[i]`'s
/// context, all on one evaluator). Each turn scores every task's group in one
/// `Evaluator::evaluate_groups` call, so one task's compiles overlap another's GPU work.
#[allow(clippy::too_many_arguments)]
pub fn rollout_tasks(
    policy: &Policy,
    envs: &[TaskEnv],
    ctxs: &[Context],
    reward: &dyn Reward,
    group: usize,
    turns: usize,
    pick: Pick,
    rng: &mut SmallRng,
) -> Vec<Rollout> {
    let n = envs.len();
    let mut states: Vec<Vec<State>> = envs
        .iter()
        .map(|env| vec![State::first(env.spec.family); group])
        .collect();
    let mut episodes: Vec<Vec<Option<Episode>>> = envs
        .iter()
        .map(|env| {
            (0..group)
                .map(|_| Some(Episode::new(&env.task.id)))
                .collect()
        })
        .collect();
    let mut steps: Vec<Vec<Vec<Step>>> = vec![vec![Vec::new(); group]; n];
    for _ in 0..turns.max(1) {
        let picks: Vec<Vec<(Vec<usize>, f64)>> = states
            .iter()
            .map(|ss| {
                ss.iter()
                    .map(|s| match pick {
                        Pick::Sample => policy.sample(s, rng),
                        Pick::Greedy => policy.greedy(s),
                    })
                    .collect()
            })
            .collect();
        let completions: Vec<Vec<String>> = envs
            .iter()
            .zip(&picks)
            .map(|(env, ps)| {
                ps.iter()
                    .map(|(c, _)| {
                        programs::render(env.spec.id, c)
                            .map(|p| p.completion())
                            .unwrap_or_else(|e| format!("(generator error: {e})"))
                    })
                    .collect()
            })
            .collect();
        let reports = score_tasks(ctxs, reward, &completions);
        for k in 0..n {
            for i in 0..group {
                let Some(ep) = episodes[k][i].as_mut() else {
                    continue;
                };
                match &reports[k][i] {
                    Some(r) => {
                        ep.push(Turn::new(completions[k][i].clone(), r.clone()));
                        steps[k][i].push((
                            states[k][i].clone(),
                            picks[k][i].0.clone(),
                            picks[k][i].1,
                        ));
                        states[k][i] = states[k][i].after(&picks[k][i].0, r);
                    }
                    None => episodes[k][i] = None,
                }
            }
        }
    }
    episodes
        .into_iter()
        .zip(steps)
        .map(|(eps, st)| {
            let (episodes, steps): (Vec<Episode>, Vec<_>) = eps
                .into_iter()
                .zip(st)
                .filter_map(|(e, s)| e.map(|e| (e, s)))
                .unzip();
            Rollout { episodes, steps }
        })
        .collect()
}

/// Scores every task's completions: one `evaluate_groups` call for all tasks (the stages
/// the reward needs), then the reward on each evaluation, as `Reward::score_batch` would.
fn score_tasks(
    ctxs: &[Context],
    reward: &dyn Reward,
    completions: &[Vec<String>],
) -> Vec<Vec<Option<RewardReport>>> {
    let Some(first) = ctxs.first() else {
        return Vec::new();
    };
    let subs: Vec<Vec<Submission>> = completions
        .iter()
        .map(|cs| cs.iter().map(Submission::from_completion).collect())
        .collect();
    let upto = ctxs
        .iter()
        .map(|c| reward.needs(c))
        .max()
        .unwrap_or(Stage::Correctness);
    let groups: Vec<(&Task, &[Submission])> = ctxs
        .iter()
        .zip(&subs)
        .map(|(c, s)| (c.task, s.as_slice()))
        .collect();
    let evals = first.evaluator.evaluate_groups(&groups, upto);
    ctxs.iter()
        .zip(evals)
        .map(|(ctx, es)| {
            es.iter()
                .map(|e| match reward.score_evaluated(ctx, e) {
                    Ok(s) => Some(s.report),
                    Err(err) => {
                        if std::env::var_os("GRPO_DEBUG").is_some() {
                            eprintln!("{}: {err}", ctx.task.id);
                        }
                        None
                    }
                })
                .collect()
        })
        .collect()
}

/// The best program seen for a task.
#[derive(Debug, Clone, Serialize)]
pub struct Best {
    /// Reward.
    pub reward: f64,
    /// Knobs.
    pub knobs: String,
    /// Verdict.
    pub verdict: String,
    /// Speedup when correct and timed.
    pub speedup: Option<f64>,
    /// Source.
    #[serde(skip)]
    pub source: String,
}

/// What a run produced.
pub struct Trained {
    /// The final policy.
    pub policy: Policy,
    /// One entry per step.
    pub history: Vec<StepLog>,
    /// Best program per task (by reward).
    pub best: BTreeMap<String, Best>,
    /// One next-turn prompt per task from the last step (the text an LLM policy would read).
    pub sample_prompts: BTreeMap<String, String>,
}

/// Trains a fresh policy on `envs` for `cfg.steps` steps or until `deadline`.
pub fn train(
    cfg: &LoopConfig,
    envs: &[TaskEnv],
    evaluator: &Evaluator,
    reward: &dyn Reward,
    deadline: Option<Instant>,
    mut on_step: impl FnMut(&StepLog),
) -> Result<Trained, String> {
    let start = Instant::now();
    let mut policy = Policy::new(PolicyConfig {
        seed: cfg.seed,
        ..cfg.policy
    });
    let mut rng = SmallRng::seed_from_u64(cfg.seed);
    let mut history = Vec::new();
    let mut best: BTreeMap<String, Best> = BTreeMap::new();
    let mut sample_prompts = BTreeMap::new();
    let mut distinct = std::collections::HashSet::new();
    for step in 0..cfg.steps {
        if deadline.is_some_and(|d| Instant::now() >= d) {
            break;
        }
        let mut batch: Vec<Sample> = Vec::new();
        let mut reports: Vec<RewardReport> = Vec::new();
        let mut per_turn: Vec<Vec<f64>> = vec![Vec::new(); cfg.turns.max(1)];
        let (mut groups, mut dropped) = (0, 0);
        let ctxs: Vec<Context> = envs
            .iter()
            .map(|env| Context::new(&env.task, evaluator).at_step(step as u64))
            .collect();
        let rollouts = rollout_tasks(
            &policy,
            envs,
            &ctxs,
            reward,
            cfg.group,
            cfg.turns,
            Pick::Sample,
            &mut rng,
        );
        for (env, r) in envs.iter().zip(rollouts) {
            if r.episodes.is_empty() {
                continue;
            }
            let adv =
                rl::episode_advantages(&r.episodes, &cfg.episode).map_err(|e| e.to_string())?;
            groups += adv.groups;
            dropped += adv.dropped_groups;
            for (e, ep) in r.episodes.iter().enumerate() {
                for (t, turn) in ep.turns.iter().enumerate() {
                    let (state, choice, logp) = &r.steps[e][t];
                    distinct.insert((env.task.id.clone(), turn.code()));
                    per_turn[t].push(turn.reward);
                    reports.push(turn.report.clone());
                    let b = best
                        .get(&env.task.id)
                        .map_or(f64::NEG_INFINITY, |b| b.reward);
                    if turn.reward > b {
                        best.insert(
                            env.task.id.clone(),
                            Best {
                                reward: turn.reward,
                                knobs: programs::describe(env.spec.family, choice),
                                verdict: verdict(&turn.report).into(),
                                speedup: speedup(&turn.report),
                                source: turn.code(),
                            },
                        );
                    }
                    if let Some(a) = adv.per_episode[e][t] {
                        batch.push(Sample {
                            state: state.clone(),
                            action: choice.clone(),
                            old_logp: *logp,
                            advantage: a,
                        });
                    }
                }
            }
            // The prompt an LLM policy would read next (kept from the latest step).
            if let Some(p) = r.episodes[0].next_prompt(&env.task, &rl::FeedbackOptions::default()) {
                sample_prompts.insert(env.task.id.clone(), p);
            }
        }
        let stats = policy.update(&batch);
        let m = metrics(&reports);
        let log = StepLog {
            step,
            elapsed_s: start.elapsed().as_secs_f64(),
            reward_mean: m.reward_mean,
            reward_mean_turn: per_turn
                .iter()
                .map(|v| mean(v).unwrap_or(f64::NAN))
                .collect(),
            reward_max: m.reward_max,
            correct_rate: m.correct_rate,
            compile_rate: m.compile_rate,
            geomean_speedup: m.geomean_speedup,
            structure_mean: m.structure_mean,
            kl: stats.kl,
            policy_loss: stats.policy_loss,
            clip_fraction: stats.clip_fraction,
            groups,
            dropped_groups: dropped,
            samples: batch.len(),
            distinct_programs: distinct.len(),
        };
        on_step(&log);
        history.push(log);
    }
    Ok(Trained {
        policy,
        history,
        best,
        sample_prompts,
    })
}

/// One turn of an evaluation episode.
#[derive(Debug, Clone, Serialize)]
pub struct TurnSummary {
    /// Knobs.
    pub knobs: String,
    /// Reward.
    pub reward: f64,
    /// Verdict.
    pub verdict: String,
    /// Speedup (correct and timed).
    pub speedup: Option<f64>,
    /// Its 95 % interval.
    pub ci95: Option<[f64; 2]>,
    /// Structural score.
    pub structure: Option<f64>,
}

impl TurnSummary {
    fn of(env: &TaskEnv, choice: &[usize], r: &RewardReport) -> TurnSummary {
        TurnSummary {
            knobs: programs::describe(env.spec.family, choice),
            reward: r.value,
            verdict: verdict(r).into(),
            speedup: speedup(r),
            ci95: r
                .stages
                .timing
                .as_ref()
                .filter(|_| speedup(r).is_some())
                .map(|t| t.ci95),
            structure: r.stages.structure.as_ref().map(|s| s.score),
        }
    }
}

/// The final policy on one task.
#[derive(Debug, Clone, Serialize)]
pub struct TaskEval {
    /// Task id.
    pub task: String,
    /// Held out from training.
    pub held_out: bool,
    /// The greedy episode, turn by turn.
    pub greedy: Vec<TurnSummary>,
    /// Metrics of the last turn of `samples` sampled episodes.
    pub sampled: Metrics,
    /// The source of the greedy episode's last program.
    #[serde(skip)]
    pub greedy_source: String,
}

/// Evaluates a policy: the greedy episode and `samples` sampled episodes per task.
pub fn evaluate(
    policy: &Policy,
    envs: &[TaskEnv],
    evaluator: &Evaluator,
    reward: &dyn Reward,
    turns: usize,
    samples: usize,
    seed: u64,
) -> Vec<TaskEval> {
    let mut rng = SmallRng::seed_from_u64(seed ^ 0xE7A1);
    envs.iter()
        .map(|env| {
            let ctx = Context::new(&env.task, evaluator).at_step(u64::MAX);
            let g = rollout(policy, env, &ctx, reward, 1, turns, Pick::Greedy, &mut rng);
            let greedy: Vec<TurnSummary> = match (g.episodes.first(), g.steps.first()) {
                (Some(ep), Some(st)) => ep
                    .turns
                    .iter()
                    .zip(st)
                    .map(|(t, (_, c, _))| TurnSummary::of(env, c, &t.report))
                    .collect(),
                _ => Vec::new(),
            };
            let greedy_source = g
                .episodes
                .first()
                .and_then(|e| e.last())
                .map(|t| t.code())
                .unwrap_or_default();
            let s = rollout(
                policy,
                env,
                &ctx,
                reward,
                samples,
                turns,
                Pick::Sample,
                &mut rng,
            );
            let last: Vec<&RewardReport> = s
                .episodes
                .iter()
                .filter_map(|e| e.last())
                .map(|t| &t.report)
                .collect();
            TaskEval {
                task: env.task.id.clone(),
                held_out: env.spec.held_out,
                greedy,
                sampled: metrics(last),
                greedy_source,
            }
        })
        .collect()
}

/// The dataset's fastest implementation of a task (by the committed H200 timings) and, on a
/// GPU, its speedup measured now by the same evaluator.
#[derive(Debug, Clone, Serialize)]
pub struct DatasetBest {
    /// Implementation name.
    pub name: String,
    /// Its speedup in `fixtures/timings/h200.json`.
    pub h200_json_speedup: Option<f64>,
    /// Measured now (None without a GPU).
    pub speedup_now: Option<f64>,
    /// Its 95 % interval now.
    pub ci95_now: Option<[f64; 2]>,
}

/// See [`DatasetBest`].
pub fn dataset_best(
    env: &TaskEnv,
    fixtures: &Path,
    evaluator: &Evaluator,
    reward: &dyn Reward,
) -> Option<DatasetBest> {
    let timings = cudaperf::timings::Timings::load(fixtures.join("timings/h200.json")).ok()?;
    let t = timings.tasks.get(&env.task.id)?;
    let (name, s) = t
        .implementations
        .iter()
        .filter(|(_, m)| m.verdict == "correct")
        .filter_map(|(n, m)| Some((n.clone(), m.raw_speedup?)))
        .max_by(|a, b| a.1.total_cmp(&b.1))?;
    let imp = env.task.implementation(&name)?;
    let ctx = Context::new(&env.task, evaluator);
    let now = reward
        .score(&ctx, &Submission::from_source(imp.source.clone()))
        .ok()
        .map(|s| s.report);
    Some(DatasetBest {
        name,
        h200_json_speedup: Some(s),
        speedup_now: now.as_ref().and_then(speedup),
        ci95_now: now
            .as_ref()
            .and_then(|r| r.stages.timing.as_ref().map(|t| t.ci95)),
    })
}

/// Whether a found program matches or beats the dataset's best measured now: its speedup
/// interval reaches the best's (upper bound ≥ the best's lower bound). None without timings.
pub fn reaches(found: &TurnSummary, best: &DatasetBest) -> Option<bool> {
    let f = found.ci95?;
    let b = best.ci95_now?;
    Some(found.verdict == "correct" && f[1] >= b[0])
}

/// Seconds left before `deadline`.
pub fn left(deadline: Option<Instant>) -> Option<Duration> {
    deadline.map(|d| d.saturating_duration_since(Instant::now()))
}
