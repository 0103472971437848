//! Multi-turn episodes: what a rollout loop produces and a trainer consumes.

use serde::{Deserialize, Serialize};

use super::advantage::{self, AdvantageOptions, DroppedGroup, UnscoredPolicy};
use super::feedback::{feedback, next_turn_prompt, FeedbackOptions};
use super::{Result, RlError};
use crate::candidate::extract_code;
use crate::pipeline::report::RewardReport;
use crate::reward::Scored;
use crate::task::Task;

/// One turn: what the policy wrote, the report of its evaluation, and the reward used for
/// training (the report's value unless the trainer shapes it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Turn {
    /// The completion (markdown with a code block, or bare CUDA source).
    pub completion: String,
    /// The evaluation.
    pub report: RewardReport,
    /// The reward of this turn.
    pub reward: f64,
}

impl Turn {
    /// A turn whose reward is the report's value.
    pub fn new(completion: impl Into<String>, report: RewardReport) -> Turn {
        Turn {
            completion: completion.into(),
            reward: report.value,
            report,
        }
    }

    /// A turn from a scored submission.
    pub fn from_scored(completion: impl Into<String>, scored: Scored) -> Turn {
        Turn::new(completion, scored.report)
    }

    /// The code of the completion: its fenced code block, or the whole text when it has none
    /// (a bare `.cu` source).
    pub fn code(&self) -> String {
        extract_code(&self.completion).unwrap_or_else(|_| self.completion.clone())
    }
}

/// A multi-turn episode on one task.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Episode {
    /// Task id.
    pub task: String,
    /// The turns, in order.
    pub turns: Vec<Turn>,
}

impl Episode {
    /// An empty episode for task `task`.
    pub fn new(task: impl Into<String>) -> Episode {
        Episode {
            task: task.into(),
            turns: Vec::new(),
        }
    }

    /// Appends a turn.
    pub fn push(&mut self, turn: Turn) {
        self.turns.push(turn);
    }

    /// Per-turn rewards.
    pub fn rewards(&self) -> Vec<f64> {
        self.turns.iter().map(|t| t.reward).collect()
    }

    /// Discounted returns of the turns (see [`advantage::discounted_returns`]).
    pub fn returns(&self, gamma: f64) -> Result<Vec<f64>> {
        advantage::discounted_returns(&self.rewards(), gamma)
    }

    /// The last turn.
    pub fn last(&self) -> Option<&Turn> {
        self.turns.last()
    }

    /// The turn with the highest reward (the first of equals); unscored turns (NaN) are not
    /// candidates.
    pub fn best(&self) -> Option<&Turn> {
        self.turns
            .iter()
            .filter(|t| !t.reward.is_nan())
            .fold(None, |best: Option<&Turn>, t| match best {
                Some(b) if b.reward >= t.reward => Some(b),
                _ => Some(t),
            })
    }

    /// The prompt of the next turn: the task prompt, the last turn's code and the feedback
    /// on it; `None` before the first turn.
    pub fn next_prompt(&self, task: &Task, opts: &FeedbackOptions) -> Option<String> {
        let last = self.last()?;
        let code = last.code();
        let fb = feedback(task, &last.report, &code, opts);
        Some(next_turn_prompt(task, &code, &fb))
    }
}

/// Which returns are compared with each other when advantages are computed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TurnGrouping {
    /// Turn `t` of every episode against turn `t` of the others (same depth of refinement).
    #[default]
    PerTurn,
    /// Every turn of every episode in one group (Kevin-32B normalises across the group's
    /// turns this way).
    Pooled,
}

/// Settings of [`episode_advantages`].
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct EpisodeOptions {
    /// Discount of later turns' rewards (default 0.4, Kevin-32B's value).
    pub gamma: f64,
    /// How returns are grouped (default [`TurnGrouping::PerTurn`]).
    pub grouping: TurnGrouping,
    /// Estimator and zero-variance handling.
    pub advantage: AdvantageOptions,
    /// Equalise the speed terms of turns whose speedup intervals overlap, within each
    /// comparison group, before returns are computed (default false; see
    /// [`advantage::noise_aware_rewards`]).
    pub noise_aware: bool,
    /// What to do with turns that could not be scored (reward NaN: their report was
    /// `unavailable`). Default [`UnscoredPolicy::SkipMember`]: a turn whose return is unknown
    /// (it, or a later turn it is credited for, is unscored) gets no advantage and the rest
    /// of its comparison group is compared among itself.
    #[serde(default)]
    pub unscored: UnscoredPolicy,
}

impl Default for EpisodeOptions {
    fn default() -> Self {
        EpisodeOptions {
            gamma: 0.4,
            grouping: TurnGrouping::PerTurn,
            advantage: AdvantageOptions::default(),
            noise_aware: false,
            unscored: UnscoredPolicy::SkipMember,
        }
    }
}

/// Advantages of a group of episodes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EpisodeAdvantages {
    /// The per-turn rewards used (after the noise-aware adjustment, if any); NaN for an
    /// unscored turn.
    pub rewards: Vec<Vec<f64>>,
    /// Discounted returns per episode and turn; NaN where unknown (the turn, or a later turn
    /// of its episode that it is credited for, is unscored).
    pub returns: Vec<Vec<f64>>,
    /// Advantage per episode and turn; `None` where the return is unknown or the comparison
    /// group was dropped (no gradient from that turn).
    pub per_episode: Vec<Vec<Option<f64>>>,
    /// Comparison groups formed.
    pub groups: usize,
    /// Comparison groups dropped for zero variance.
    pub dropped_groups: usize,
    /// `[episode, turn]` of every turn without a reward, in order.
    #[serde(default)]
    pub unscored_turns: Vec<[usize; 2]>,
    /// `[episode, turn]` of every turn left without an advantage because its return is
    /// unknown (the unscored turns, and with γ > 0 the turns before them in their episode).
    #[serde(default)]
    pub skipped_turns: Vec<[usize; 2]>,
    /// Comparison groups dropped because of unscored members ([`UnscoredPolicy::SkipGroup`],
    /// or too few scored members left).
    #[serde(default)]
    pub unscored_groups: usize,
}

/// Discounted returns with unscored turns: `G_t` is NaN when any reward it sums is (every
/// reward from `t` on, or only `r_t` when γ = 0).
fn returns_with_unscored(rewards: &[f64], gamma: f64) -> Result<Vec<f64>> {
    if !(0.0..=1.0).contains(&gamma) {
        return Err(RlError::Gamma(gamma));
    }
    if let Some(index) = rewards.iter().position(|r| r.is_infinite()) {
        return Err(RlError::NonFinite {
            index,
            value: rewards[index],
        });
    }
    let mut out = vec![0.0; rewards.len()];
    let mut next = 0.0;
    for (t, r) in rewards.iter().enumerate().rev() {
        // 0 · NaN is NaN: with γ = 0 a turn is credited only for itself.
        next = if gamma == 0.0 { *r } else { r + gamma * next };
        out[t] = next;
    }
    Ok(out)
}

/// Advantages of a group of episodes of one task: per-turn rewards (optionally noise-aware)
/// → discounted returns → advantages within each comparison group. Turns that could not be
/// scored are handled by [`EpisodeOptions::unscored`] and listed in the result.
pub fn episode_advantages(group: &[Episode], opts: &EpisodeOptions) -> Result<EpisodeAdvantages> {
    if group.is_empty() {
        return Err(RlError::EmptyGroup);
    }
    if let Some(episode) = group.iter().position(|e| e.turns.is_empty()) {
        return Err(RlError::EmptyEpisode { episode });
    }
    let sets = comparison_sets(group, opts.grouping);
    let mut rewards: Vec<Vec<f64>> = group.iter().map(Episode::rewards).collect();
    let unscored_turns = nan_positions(&rewards);
    if let (UnscoredPolicy::Error, Some(&[e, t])) = (opts.unscored, unscored_turns.first()) {
        return Err(RlError::NonFinite {
            index: t,
            value: rewards[e][t],
        });
    }
    if opts.noise_aware {
        noise_aware(group, &sets, &mut rewards)?;
    }
    let returns: Vec<Vec<f64>> = rewards
        .iter()
        .map(|r| returns_with_unscored(r, opts.gamma))
        .collect::<Result<_>>()?;
    let skipped_turns = nan_positions(&returns);
    let mut per_episode: Vec<Vec<Option<f64>>> =
        group.iter().map(|e| vec![None; e.turns.len()]).collect();
    let (mut dropped_groups, mut unscored_groups) = (0, 0);
    for set in &sets {
        let values: Vec<f64> = set.iter().map(|&(e, t)| returns[e][t]).collect();
        let g = advantage::scored_advantages(&values, &opts.advantage, opts.unscored)?;
        match g.dropped {
            Some(DroppedGroup::ZeroVariance) => dropped_groups += 1,
            Some(DroppedGroup::Unscored | DroppedGroup::TooFewScored) => unscored_groups += 1,
            None => {}
        }
        for (&(e, t), v) in set.iter().zip(g.advantages) {
            per_episode[e][t] = v;
        }
    }
    Ok(EpisodeAdvantages {
        rewards,
        returns,
        per_episode,
        groups: sets.len(),
        dropped_groups,
        unscored_turns,
        skipped_turns,
        unscored_groups,
    })
}

/// The comparison groups of a group of episodes, as lists of (episode, turn).
fn comparison_sets(group: &[Episode], grouping: TurnGrouping) -> Vec<Vec<(usize, usize)>> {
    let max_turns = group.iter().map(|e| e.turns.len()).max().unwrap_or(0);
    match grouping {
        TurnGrouping::PerTurn => (0..max_turns)
            .map(|t| {
                (0..group.len())
                    .filter(|&e| t < group[e].turns.len())
                    .map(|e| (e, t))
                    .collect()
            })
            .collect(),
        TurnGrouping::Pooled => vec![group
            .iter()
            .enumerate()
            .flat_map(|(e, ep)| (0..ep.turns.len()).map(move |t| (e, t)))
            .collect()],
    }
}

/// The (episode, turn) of every NaN in per-episode values.
fn nan_positions(values: &[Vec<f64>]) -> Vec<[usize; 2]> {
    values
        .iter()
        .enumerate()
        .flat_map(|(e, r)| (0..r.len()).filter(|&t| r[t].is_nan()).map(move |t| [e, t]))
        .collect()
}

/// Replaces each turn's reward by its noise-aware value within its comparison group.
fn noise_aware(
    group: &[Episode],
    sets: &[Vec<(usize, usize)>],
    rewards: &mut [Vec<f64>],
) -> Result<()> {
    for set in sets {
        let reports: Vec<&RewardReport> = set
            .iter()
            .map(|&(e, t)| &group[e].turns[t].report)
            .collect();
        let adjusted = advantage::noise_aware_rewards(reports.iter().copied())?;
        for (&(e, t), (new, r)) in set.iter().zip(adjusted.iter().zip(&reports)) {
            rewards[e][t] += new - r.value;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rl::advantage::UnscoredPolicy;

    fn episode(rewards: &[f64]) -> Episode {
        let mut e = Episode::new("t");
        for &r in rewards {
            e.push(Turn::new(
                "x",
                RewardReport {
                    value: r,
                    ..Default::default()
                },
            ));
        }
        e
    }

    /// Two episodes, γ = 0.5: returns [0 + 0.5·1, 1] = [0.5, 1] and [2 + 0.5·0, 0] = [2, 0].
    /// Per turn, Dr. GRPO: turn 0 mean 1.25 → [-0.75, 0.75]; turn 1 mean 0.5 → [0.5, -0.5].
    #[test]
    fn per_turn_returns_and_advantages_by_hand() {
        let group = [episode(&[0.0, 1.0]), episode(&[2.0, 0.0])];
        let opts = EpisodeOptions {
            gamma: 0.5,
            advantage: AdvantageOptions::with_estimator(advantage::Estimator::DrGrpo),
            ..Default::default()
        };
        let a = episode_advantages(&group, &opts).unwrap();
        assert_eq!(a.returns, vec![vec![0.5, 1.0], vec![2.0, 0.0]]);
        assert_eq!(
            a.per_episode,
            vec![vec![Some(-0.75), Some(0.5)], vec![Some(0.75), Some(-0.5)]]
        );
        assert_eq!((a.groups, a.dropped_groups), (2, 0));
    }

    /// Pooled: the four returns [0.5, 1, 2, 0] share one mean 0.875.
    #[test]
    fn pooled_grouping_by_hand() {
        let group = [episode(&[0.0, 1.0]), episode(&[2.0, 0.0])];
        let opts = EpisodeOptions {
            gamma: 0.5,
            grouping: TurnGrouping::Pooled,
            advantage: AdvantageOptions::with_estimator(advantage::Estimator::DrGrpo),
            ..Default::default()
        };
        let a = episode_advantages(&group, &opts).unwrap();
        assert_eq!(
            a.per_episode,
            vec![
                vec![Some(-0.375), Some(0.125)],
                vec![Some(1.125), Some(-0.875)]
            ]
        );
    }

    /// A turn where every episode got the same return is dropped; the other turn is kept.
    /// Episodes of different lengths: turn 1 only compares the episodes that have one.
    #[test]
    fn zero_variance_turns_are_dropped_and_lengths_may_differ() {
        let group = [episode(&[1.0, 0.0]), episode(&[1.0, 0.0]), episode(&[1.0])];
        let opts = EpisodeOptions {
            gamma: 0.0,
            ..Default::default()
        };
        let a = episode_advantages(&group, &opts).unwrap();
        assert_eq!(a.dropped_groups, 2);
        assert!(a.per_episode.iter().flatten().all(Option::is_none));
        let mixed = [episode(&[1.0, 0.0]), episode(&[1.0, 2.0]), episode(&[1.0])];
        let a = episode_advantages(&mixed, &opts).unwrap();
        assert_eq!(a.dropped_groups, 1);
        assert_eq!(a.per_episode[2], vec![None]);
        assert!(a.per_episode[0][1].unwrap() < 0.0 && a.per_episode[1][1].unwrap() > 0.0);
    }

    /// Episode 1's second turn is unscored. γ = 0.5: returns [0.5, 1], [NaN, NaN], [2, 0]
    /// (its first turn is credited for the unscored one, so its return is unknown too).
    /// Skip member, Dr. GRPO: turn 0 compares [0.5, 2] (mean 1.25), turn 1 [1, 0] (mean
    /// 0.5); episode 1 gets no advantage. Skip group: both turn groups are dropped.
    #[test]
    fn unscored_turns_are_skipped_and_reported() {
        let group = [
            episode(&[0.0, 1.0]),
            episode(&[1.0, f64::NAN]),
            episode(&[2.0, 0.0]),
        ];
        let opts = EpisodeOptions {
            gamma: 0.5,
            advantage: AdvantageOptions::with_estimator(advantage::Estimator::DrGrpo),
            ..Default::default()
        };
        let a = episode_advantages(&group, &opts).unwrap();
        assert_eq!(a.unscored_turns, vec![[1, 1]]);
        assert_eq!(a.skipped_turns, vec![[1, 0], [1, 1]]);
        assert!(a.returns[1].iter().all(|r| r.is_nan()));
        assert_eq!(
            a.per_episode,
            vec![
                vec![Some(-0.75), Some(0.5)],
                vec![None, None],
                vec![Some(0.75), Some(-0.5)]
            ]
        );
        assert_eq!((a.groups, a.dropped_groups, a.unscored_groups), (2, 0, 0));
        // γ = 0: a turn is credited only for itself, so episode 1's first turn still counts.
        let a = episode_advantages(&group, &EpisodeOptions { gamma: 0.0, ..opts }).unwrap();
        assert_eq!(a.skipped_turns, vec![[1, 1]]);
        assert_eq!(a.per_episode[1], vec![Some(0.0), None]); // turn 0: [0, 1, 2], mean 1
        let skip_group = EpisodeOptions {
            unscored: UnscoredPolicy::SkipGroup,
            ..opts
        };
        let a = episode_advantages(&group, &skip_group).unwrap();
        assert!(a.per_episode.iter().flatten().all(Option::is_none));
        assert_eq!(a.unscored_groups, 2);
        let strict = EpisodeOptions {
            unscored: UnscoredPolicy::Error,
            ..opts
        };
        assert!(matches!(
            episode_advantages(&group, &strict),
            Err(RlError::NonFinite { index: 1, .. })
        ));
        // The best turn is a scored one.
        assert_eq!(group[1].best().map(|t| t.reward), Some(1.0));
    }

    #[test]
    fn empty_inputs_are_errors() {
        let opts = EpisodeOptions::default();
        assert_eq!(episode_advantages(&[], &opts), Err(RlError::EmptyGroup));
        assert_eq!(
            episode_advantages(&[episode(&[1.0]), Episode::new("t")], &opts),
            Err(RlError::EmptyEpisode { episode: 1 })
        );
    }

    #[test]
    fn best_turn_and_code() {
        let e = episode(&[0.5, 2.0, 2.0]);
        assert_eq!(e.best().map(|t| t.reward), Some(2.0));
        let t = Turn::new("Here:\n```cuda\nint x;\n```\n", RewardReport::default());
        assert_eq!(t.code().trim(), "int x;");
        assert_eq!(
            Turn::new("int y;", RewardReport::default()).code(),
            "int y;"
        );
    }
}
