//! The replayed ablation (issue 21): GRPO on a per-task factorised categorical policy over
//! the space's knobs, with rewards computed by the crate's presets from the measured program
//! table (`Evaluation::from_stages` of each row; the speedup drawn from the row's 95 %
//! interval at every sample), so that many paired seeds cost no GPU time.
//!
//! One run = one (arm, seed, task): `steps` steps of `group` two-turn episodes. Turn 1 samples
//! every knob from the policy; turn 2 (the refinement) keeps each of turn 1's knobs with
//! probability 1/2 and samples the others again. Returns are discounted (γ = 0.4, Kevin's),
//! advantages are GRPO's, compared per turn (Kevin: pooled over both turns), and the policy
//! gradient updates only the knobs a turn sampled. Random search samples the same number of
//! programs uniformly.

use std::collections::HashMap;

use cudaperf::pipeline::{Evaluation, Evaluator};
use cudaperf::reward::{
    presets::{self, CudaPerfWeights},
    Clip, Context, RankerReward, Reward, StructuralReward, Weighted,
};
use cudaperf::rl::{self as advantage, AdvantageOptions, Estimator};
use cudaperf::task::Task;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;

use super::space::{self, SpaceTask};
use super::table::{self, Row};

/// An arm of the ablation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Arm {
    /// The unified reward's outcome ladder and speed term, nothing else.
    Outcome,
    /// + structural score, gated on correctness.
    Structure,
    /// + ranker term, gated on correctness.
    Ranker,
    /// + both: the unified reward (`presets::cudaperf`).
    Both,
    /// + structural score for every program (not gated).
    StructureUngated,
    /// + structural scores shuffled across the task's programs (gated): a control.
    ShuffledStructure,
    /// `presets::kevin`, advantages pooled over both turns of the group.
    KevinPooled,
    /// Uniform random search, the same number of samples.
    Random,
}

impl Arm {
    /// Every arm, the baseline first.
    pub const ALL: [Arm; 8] = [
        Arm::Outcome,
        Arm::Structure,
        Arm::Ranker,
        Arm::Both,
        Arm::StructureUngated,
        Arm::ShuffledStructure,
        Arm::KevinPooled,
        Arm::Random,
    ];

    /// snake_case name.
    pub fn name(self) -> &'static str {
        match self {
            Arm::Outcome => "outcome",
            Arm::Structure => "structure",
            Arm::Ranker => "ranker",
            Arm::Both => "both",
            Arm::StructureUngated => "structure_ungated",
            Arm::ShuffledStructure => "shuffled_structure",
            Arm::KevinPooled => "kevin_pooled",
            Arm::Random => "random",
        }
    }

    /// The arm called `name`.
    pub fn parse(name: &str) -> Option<Arm> {
        Arm::ALL.into_iter().find(|a| a.name() == name)
    }

    /// The arm's reward (`None` for random search).
    pub fn reward(self) -> Option<Box<dyn Reward>> {
        let w = CudaPerfWeights::default();
        let outcome = || presets::cudaperf_with(w, None, None);
        Some(match self {
            Arm::Outcome => Box::new(outcome().named("outcome")),
            Arm::Structure | Arm::ShuffledStructure => Box::new(
                presets::cudaperf_with(w, Some(Box::new(StructuralReward)), None)
                    .named("outcome_structure"),
            ),
            Arm::Ranker => Box::new(
                presets::cudaperf_with(w, None, Some(Box::new(RankerReward)))
                    .named("outcome_ranker"),
            ),
            Arm::Both => Box::new(presets::cudaperf()),
            Arm::StructureUngated => Box::new(
                Weighted::new()
                    .named("structure_ungated")
                    .add(1.0, outcome())
                    .add(w.structure, Clip::new(StructuralReward, -1.0, 1.0)),
            ),
            Arm::KevinPooled => Box::new(presets::kevin()),
            Arm::Random => return None,
        })
    }
}

/// Settings of a replay.
#[derive(Debug, Clone, Serialize)]
pub struct ReplayConfig {
    /// Training steps per run.
    pub steps: usize,
    /// Episodes per group.
    pub group: usize,
    /// Turns per episode (1 or 2).
    pub turns: usize,
    /// Seeds (the same for every arm).
    pub seeds: Vec<u64>,
    /// Policy-gradient step size on the logits.
    pub lr: f64,
    /// Discount of the second turn's reward in the first turn's return.
    pub gamma: f64,
    /// Arms.
    pub arms: Vec<Arm>,
}

impl Default for ReplayConfig {
    fn default() -> Self {
        ReplayConfig {
            steps: 40,
            group: 8,
            turns: 2,
            seeds: (0..20).collect(),
            lr: 1.0,
            gamma: 0.4,
            arms: Arm::ALL.to_vec(),
        }
    }
}

/// One task of the replay: the table's rows and a lookup from knob combination to row.
pub struct ReplayTask {
    /// The space's task.
    pub space: &'static SpaceTask,
    /// The fixture task (for the rewards' context).
    pub task: Task,
    /// Rows of this task.
    pub rows: Vec<Row>,
    /// Per knob: the options the table covers (the policy samples only these).
    pub options: Vec<Vec<usize>>,
    /// Row index of every covered combination, by [`combo_key`].
    lookup: HashMap<Vec<usize>, usize>,
    /// The best true speedup of a correct row.
    pub best: f64,
    /// Structure scores shuffled across rows (the control arm's).
    shuffled: Vec<Option<f64>>,
}

impl ReplayTask {
    /// Builds a task's replay from its rows; the rows must cover every combination of the
    /// options they use (a full product), and at least one must be correct.
    pub fn new(
        space: &'static SpaceTask,
        task: Task,
        rows: Vec<Row>,
    ) -> Result<ReplayTask, String> {
        let k = space.knobs.len();
        let mut options: Vec<Vec<usize>> = vec![Vec::new(); k];
        for r in &rows {
            space
                .check(&r.knobs)
                .map_err(|e| format!("table row {}: {e}", r.hash))?;
            for (i, &v) in r.knobs.iter().enumerate() {
                if !options[i].contains(&v) {
                    options[i].push(v);
                }
            }
        }
        options.iter_mut().for_each(|o| o.sort());
        let by_hash: HashMap<&str, usize> = rows
            .iter()
            .enumerate()
            .map(|(i, r)| (r.hash.as_str(), i))
            .collect();
        let mut lookup = HashMap::new();
        let mut combo = vec![0usize; k];
        let total: usize = options.iter().map(Vec::len).product();
        for mut n in 0..total {
            for i in (0..k).rev() {
                combo[i] = options[i][n % options[i].len()];
                n /= options[i].len();
            }
            let src = space.render(&combo).map_err(|e| e.to_string())?;
            let h = space::source_hash(&src);
            let at = by_hash.get(h.as_str()).ok_or_else(|| {
                format!(
                    "the table has no row for {} {} (hash {h}): measure it (program_table --resume)",
                    space.id,
                    space.describe(&combo)
                )
            })?;
            lookup.insert(combo.clone(), *at);
        }
        let best = table::best_speedup(&rows)
            .ok_or_else(|| format!("the table has no correct program of {}", space.id))?;
        // A fixed permutation (not the run's seed): every seed sees the same control.
        let mut shuffled: Vec<Option<f64>> = rows.iter().map(|r| r.structure).collect();
        let mut rng = SmallRng::seed_from_u64(0x5eed_0f5c);
        for i in (1..shuffled.len()).rev() {
            let j = rng.random_range(0..=i);
            shuffled.swap(i, j);
        }
        Ok(ReplayTask {
            space,
            task,
            rows,
            options,
            lookup,
            best,
            shuffled,
        })
    }

    /// Knob combinations covered.
    pub fn combinations(&self) -> usize {
        self.lookup.len()
    }

    /// The row of a combination (knob values, not option positions).
    pub fn row_of(&self, combo: &[usize]) -> Option<usize> {
        self.lookup.get(combo).copied()
    }

    /// Whether row `i` is correct and within 0.9× of the best (true speedup).
    pub fn near_best(&self, i: usize) -> bool {
        let r = &self.rows[i];
        r.correct() && r.speedup.is_some_and(|s| s >= 0.9 * self.best)
    }
}

/// Per-run outcome.
#[derive(Debug, Clone, Serialize)]
pub struct RunResult {
    /// Arm.
    pub arm: Arm,
    /// Seed.
    pub seed: u64,
    /// Task id.
    pub task: String,
    /// Programs sampled.
    pub samples: usize,
    /// 1-based index of the first sample that is correct and ≥ 0.9 × best (None: never).
    pub samples_to_near_best: Option<usize>,
    /// Mean over samples of best-so-far / best (true speedups; 0 before a correct sample).
    pub auc: f64,
    /// True speedup of the greedy (per-knob argmax) program; 1.0 when it is incorrect (an
    /// incorrect kernel is not deployed: the reference stays). Random search: the best
    /// correct program it sampled.
    pub greedy_speedup: f64,
    /// The greedy program is correct.
    pub greedy_correct: bool,
    /// Table hash of the final program (the greedy one; random search: the best correct
    /// one it found, `None` when it found none).
    pub final_hash: Option<String>,
    /// Fraction of the last quarter's samples with a hazard knob set.
    pub hazard_rate: f64,
    /// Best-so-far / best after every step (the curve).
    pub curve: Vec<f64>,
    /// Mean reward per step.
    pub reward_mean: Vec<f64>,
}

fn softmax(logits: &[f64]) -> Vec<f64> {
    let m = logits.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    let e: Vec<f64> = logits.iter().map(|l| (l - m).exp()).collect();
    let s: f64 = e.iter().sum();
    e.into_iter().map(|x| x / s).collect()
}

fn sample(p: &[f64], rng: &mut SmallRng) -> usize {
    let u: f64 = rng.random();
    let mut acc = 0.0;
    for (i, &x) in p.iter().enumerate() {
        acc += x;
        if u < acc {
            return i;
        }
    }
    p.len() - 1
}

fn normal(rng: &mut SmallRng) -> f64 {
    let u1: f64 = rng.random::<f64>().max(1e-300);
    let u2: f64 = rng.random();
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

/// Scores rows with one reward, drawing each correct row's speedup from its interval.
pub struct Scorer<'a> {
    reward: &'a dyn Reward,
    evals: Vec<Evaluation>,
    medians: Vec<Option<f64>>,
    times: Vec<f64>,
    sigmas: Vec<f64>,
}

impl<'a> Scorer<'a> {
    /// A scorer of `t`'s rows; `shuffled` swaps in the control's structure scores.
    pub fn new(t: &ReplayTask, reward: &'a dyn Reward, shuffled: bool) -> Scorer<'a> {
        let evals = t
            .rows
            .iter()
            .enumerate()
            .map(|(i, r)| {
                let mut e = r.evaluation();
                if shuffled {
                    if let (Some(s), Some(v)) = (&mut e.stages.structure, t.shuffled[i]) {
                        s.score = v;
                    }
                }
                e
            })
            .collect();
        let medians = t
            .rows
            .iter()
            .map(|r| {
                r.stages
                    .timing
                    .as_ref()
                    .filter(|t| !t.within_noise && !t.implausible && t.speedup > 0.0)
                    .map(|t| t.speedup)
            })
            .collect();
        let sigmas = t
            .rows
            .iter()
            .map(|r| match r.ci95 {
                // The interval of a log-normal ratio: ±1.96 σ in log space.
                Some([lo, hi]) if lo > 0.0 && hi > lo => (hi / lo).ln() / 3.92,
                _ => 0.0,
            })
            .collect();
        let times = t
            .rows
            .iter()
            .map(|r| {
                r.stages
                    .timing
                    .as_ref()
                    .map_or(f64::NAN, |t| t.candidate_us)
            })
            .collect();
        Scorer {
            reward,
            evals,
            medians,
            times,
            sigmas,
        }
    }

    /// The reward of row `i` under a fresh draw of its timing noise.
    pub fn score(&mut self, ctx: &Context, i: usize, rng: &mut SmallRng) -> f64 {
        if let (Some(m), Some(t)) = (self.medians[i], self.evals[i].stages.timing.as_mut()) {
            // One draw moves the speedup and the candidate's time together (the roofline term
            // reads the time).
            let f = (self.sigmas[i] * normal(rng)).exp();
            t.speedup = m * f;
            t.candidate_us = self.times[i] / f;
        }
        // A row the reward cannot score (a stage unavailable when it was measured) earns
        // nothing: the ladder's floor, never a number above a real failure.
        match self.reward.value(ctx, &self.evals[i]) {
            Ok(v) => v,
            Err(e) => {
                if std::env::var_os("REPLAY_DEBUG").is_some() {
                    eprintln!("row {i}: {e}");
                }
                -1.0
            }
        }
    }
}

/// One turn's sample: the option position of every knob, which knobs the turn sampled
/// (turn 2 keeps some of turn 1's), and the row it rendered.
type Sampled = (Vec<usize>, Vec<bool>, usize);

/// Runs one (arm, seed, task).
pub fn run_one(
    t: &ReplayTask,
    evaluator: &Evaluator,
    arm: Arm,
    seed: u64,
    cfg: &ReplayConfig,
) -> RunResult {
    let ctx = Context::new(&t.task, evaluator);
    let reward = arm.reward();
    let mut scorer = reward
        .as_deref()
        .map(|r| Scorer::new(t, r, arm == Arm::ShuffledStructure));
    // Sampling and noise streams depend on the seed and task only: arms are paired.
    let task_salt = t
        .space
        .id
        .bytes()
        .fold(0u64, |h, b| h.wrapping_mul(31).wrapping_add(b as u64));
    let mut rng = SmallRng::seed_from_u64(seed ^ task_salt.rotate_left(17));
    let mut noise = SmallRng::seed_from_u64(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ task_salt);
    let k = t.options.len();
    let mut logits: Vec<Vec<f64>> = t.options.iter().map(|o| vec![0.0; o.len()]).collect();
    let per_step = cfg.group * cfg.turns;
    let budget = cfg.steps * per_step;
    let mut samples = 0usize;
    let mut first_hit = None;
    let mut best_so_far = 0.0f64;
    let mut best_row: Option<usize> = None;
    let mut auc_sum = 0.0;
    let mut curve = Vec::with_capacity(cfg.steps);
    let mut reward_mean = Vec::with_capacity(cfg.steps);
    let mut late = (0usize, 0usize);
    let late_from = cfg.steps - cfg.steps / 4;
    let adv_opts = AdvantageOptions::with_estimator(Estimator::Grpo);
    for step in 0..cfg.steps {
        // (positions of the options per knob, which knobs were sampled, row) per turn.
        let mut turns: Vec<Vec<Sampled>> = Vec::with_capacity(cfg.group);
        let probs: Vec<Vec<f64>> = logits.iter().map(|l| softmax(l)).collect();
        let uniform: Vec<Vec<f64>> = t
            .options
            .iter()
            .map(|o| vec![1.0 / o.len() as f64; o.len()])
            .collect();
        let p = if arm == Arm::Random { &uniform } else { &probs };
        for _ in 0..cfg.group {
            let mut ep = Vec::with_capacity(cfg.turns);
            let mut pos: Vec<usize> = (0..k).map(|i| sample(&p[i], &mut rng)).collect();
            let mut fresh = vec![true; k];
            for turn in 0..cfg.turns {
                if turn > 0 {
                    for i in 0..k {
                        fresh[i] = rng.random::<f64>() < 0.5;
                        if fresh[i] {
                            pos[i] = sample(&p[i], &mut rng);
                        }
                    }
                }
                let combo: Vec<usize> = (0..k).map(|i| t.options[i][pos[i]]).collect();
                let row = t
                    .row_of(&combo)
                    .expect("every covered combination has a row");
                samples += 1;
                let r = &t.rows[row];
                if r.correct() {
                    if let Some(s) = r.speedup {
                        if s > best_so_far {
                            best_so_far = s;
                            best_row = Some(row);
                        }
                    }
                }
                if first_hit.is_none() && t.near_best(row) {
                    first_hit = Some(samples);
                }
                auc_sum += (best_so_far / t.best).min(1.0);
                if step >= late_from {
                    late.0 += 1;
                    late.1 += !r.hazards.is_empty() as usize;
                }
                ep.push((pos.clone(), fresh.clone(), row));
            }
            turns.push(ep);
        }
        curve.push((best_so_far / t.best).min(1.0));
        let Some(scorer) = scorer.as_mut() else {
            reward_mean.push(f64::NAN);
            continue;
        };
        let rewards: Vec<Vec<f64>> = turns
            .iter()
            .map(|ep| {
                ep.iter()
                    .map(|(_, _, row)| scorer.score(&ctx, *row, &mut noise))
                    .collect()
            })
            .collect();
        reward_mean.push(rewards.iter().flatten().sum::<f64>() / per_step as f64);
        if std::env::var_os("REPLAY_DEBUG").is_some() {
            eprintln!("step {step}: rewards {rewards:?}");
        }
        // Discounted returns per episode.
        let returns: Vec<Vec<f64>> = rewards
            .iter()
            .map(|r| advantage::discounted_returns(r, cfg.gamma).unwrap_or_else(|_| r.clone()))
            .collect();
        // Advantages: per turn (GRPO arms) or pooled over every turn (Kevin).
        let mut adv = vec![vec![0.0; cfg.turns]; cfg.group];
        if arm == Arm::KevinPooled {
            let flat: Vec<f64> = returns.iter().flatten().copied().collect();
            if let Ok(Some(a)) = advantage::advantages(&flat, &adv_opts) {
                for (e, row) in adv.iter_mut().enumerate() {
                    for (turn, x) in row.iter_mut().enumerate() {
                        *x = a[e * cfg.turns + turn];
                    }
                }
            }
        } else {
            for turn in 0..cfg.turns {
                let col: Vec<f64> = returns.iter().map(|r| r[turn]).collect();
                if let Ok(Some(a)) = advantage::advantages(&col, &adv_opts) {
                    for (e, x) in a.into_iter().enumerate() {
                        adv[e][turn] = x;
                    }
                }
            }
        }
        // Policy gradient of log π over the knobs each turn sampled.
        let scale = cfg.lr / per_step as f64;
        for (ep, a_ep) in turns.iter().zip(&adv) {
            for ((pos, fresh, _), &a) in ep.iter().zip(a_ep) {
                if a == 0.0 {
                    continue;
                }
                for i in 0..k {
                    if !fresh[i] {
                        continue;
                    }
                    for (o, l) in logits[i].iter_mut().enumerate() {
                        let ind = if o == pos[i] { 1.0 } else { 0.0 };
                        *l += scale * a * (ind - probs[i][o]);
                    }
                }
            }
        }
    }
    let greedy: Vec<usize> = (0..k)
        .map(|i| {
            let l = &logits[i];
            let j = (0..l.len())
                .max_by(|&a, &b| l[a].total_cmp(&l[b]))
                .unwrap_or(0);
            t.options[i][j]
        })
        .collect();
    let g = &t.rows[t.row_of(&greedy).expect("greedy combination covered")];
    // Random search has no policy: its final program is the best correct one it found.
    // The final program, for re-measuring on the GPU (`program_table --only`).
    let final_hash = if arm == Arm::Random {
        best_row.map(|r| t.rows[r].hash.clone())
    } else {
        Some(g.hash.clone())
    };
    let (greedy_speedup, greedy_correct) = if arm == Arm::Random {
        (
            if best_so_far > 0.0 { best_so_far } else { 1.0 },
            best_so_far > 0.0,
        )
    } else if g.correct() {
        (g.speedup.unwrap_or(1.0), true)
    } else {
        (1.0, false)
    };
    RunResult {
        arm,
        seed,
        task: t.space.id.to_string(),
        samples,
        samples_to_near_best: first_hit,
        auc: auc_sum / budget.max(1) as f64,
        greedy_speedup,
        greedy_correct,
        final_hash,
        hazard_rate: late.1 as f64 / late.0.max(1) as f64,
        curve,
        reward_mean,
    }
}

/// The replay tasks of a table's rows (only `ids` when given), each with its fixture task.
pub fn load_tasks(
    rows: Vec<Row>,
    fixtures: &std::path::Path,
    ids: &[String],
) -> Result<Vec<ReplayTask>, String> {
    let mut by: std::collections::BTreeMap<String, Vec<Row>> = Default::default();
    for r in rows {
        by.entry(r.task.clone()).or_default().push(r);
    }
    for id in ids {
        if !by.contains_key(id) {
            return Err(format!("--tasks: the table has no rows of `{id}`"));
        }
    }
    by.into_iter()
        .filter(|(id, _)| ids.is_empty() || ids.contains(id))
        .map(|(id, rows)| {
            let space = space::task(&id).ok_or_else(|| {
                format!("the table has rows of `{id}`, which the space does not know")
            })?;
            let task = Task::load(fixtures.join("tasks").join(&id))
                .map_err(|e| format!("task {id}: {e}"))?;
            ReplayTask::new(space, task, rows)
        })
        .collect()
}
