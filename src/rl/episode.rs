//! Multi-turn episodes: what a rollout loop produces and a trainer consumes.

use serde::{Deserialize, Serialize};

use super::advantage::{self, AdvantageOptions};
use super::feedback::{feedback, next_turn_prompt, FeedbackOptions};
use super::{Result, RlError};
use crate::candidate::extract_code;
use crate::reward::{RewardReport, Scored};
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

    /// The turn with the highest reward (the first of equals).
    pub fn best(&self) -> Option<&Turn> {
        self.turns
            .iter()
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
}

impl Default for EpisodeOptions {
    fn default() -> Self {
        EpisodeOptions {
            gamma: 0.4,
            grouping: TurnGrouping::PerTurn,
            advantage: AdvantageOptions::default(),
            noise_aware: false,
        }
    }
}

/// Advantages of a group of episodes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EpisodeAdvantages {
    /// The per-turn rewards used (after the noise-aware adjustment, if any).
    pub rewards: Vec<Vec<f64>>,
    /// Discounted returns per episode and turn.
    pub returns: Vec<Vec<f64>>,
    /// Advantage per episode and turn; `None` where the comparison group had zero variance
    /// and was dropped (no gradient from that turn).
    pub per_episode: Vec<Vec<Option<f64>>>,
    /// Comparison groups formed.
    pub groups: usize,
    /// Comparison groups dropped for zero variance.
    pub dropped_groups: usize,
}

/// Advantages of a group of episodes of one task: per-turn rewards (optionally noise-aware)
/// → discounted returns → advantages within each comparison group.
pub fn episode_advantages(group: &[Episode], opts: &EpisodeOptions) -> Result<EpisodeAdvantages> {
    if group.is_empty() {
        return Err(RlError::EmptyGroup);
    }
    if let Some(episode) = group.iter().position(|e| e.turns.is_empty()) {
        return Err(RlError::EmptyEpisode { episode });
    }
    // Comparison groups as lists of (episode, turn).
    let max_turns = group.iter().map(|e| e.turns.len()).max().unwrap_or(0);
    let sets: Vec<Vec<(usize, usize)>> = match opts.grouping {
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
    };

    let mut rewards: Vec<Vec<f64>> = group.iter().map(Episode::rewards).collect();
    if opts.noise_aware {
        for set in &sets {
            let reports: Vec<&RewardReport> = set
                .iter()
                .map(|&(e, t)| &group[e].turns[t].report)
                .collect();
            let adjusted = advantage::noise_aware_rewards(reports.iter().copied())?;
            for (&(e, t), (new, r)) in set.iter().zip(adjusted.iter().zip(&reports)) {
                rewards[e][t] += new - r.value;
            }
        }
    }
    let returns: Vec<Vec<f64>> = rewards
        .iter()
        .map(|r| advantage::discounted_returns(r, opts.gamma))
        .collect::<Result<_>>()?;
    let mut per_episode: Vec<Vec<Option<f64>>> =
        group.iter().map(|e| vec![None; e.turns.len()]).collect();
    let mut dropped_groups = 0;
    for set in &sets {
        let values: Vec<f64> = set.iter().map(|&(e, t)| returns[e][t]).collect();
        match advantage::advantages(&values, &opts.advantage)? {
            Some(a) => {
                for (&(e, t), v) in set.iter().zip(a) {
                    per_episode[e][t] = Some(v);
                }
            }
            None => dropped_groups += 1,
        }
    }
    Ok(EpisodeAdvantages {
        rewards,
        returns,
        per_episode,
        groups: sets.len(),
        dropped_groups,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

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
