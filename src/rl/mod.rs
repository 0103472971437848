//! The RL side: feedback for the next turn, advantages, and multi-turn episodes.
//!
//! CudaPerf's online phase is multi-turn: the policy writes a kernel, gets execution
//! feedback, and refines it. This module holds the parts every trainer writes by hand
//! otherwise:
//!
//! * [`feedback()`]: the text a policy reads after a turn — compile errors with line numbers
//!   (and the first syntax problem with what it cost), the runtime fault by name, the first
//!   mismatch, the speedup with its 95 % interval (or why none was awarded) and the floor
//!   that binds, and the structural findings with their source lines (never a bounds guard
//!   or a single-thread section) — ordered by importance and bounded in length; it never
//!   contradicts a measurement. [`next_turn_prompt`] puts it after the task prompt and the
//!   previous code.
//! * advantages ([`grpo`], [`dr_grpo`], [`rloo`], [`advantages`]): GRPO, Dr. GRPO and RLOO advantages of a group, discounted multi-turn
//!   returns, dropping zero-variance groups (DAPO's dynamic sampling), and
//!   [`noise_aware_rewards`], which gives candidates whose speedup intervals overlap the same
//!   speed term, so timing noise cannot create advantage; [`scored_advantages`] for groups
//!   with members that could not be scored (reward NaN), with an [`UnscoredPolicy`].
//! * [`Episode`]: turns of completion + report + reward, shared by a loop and a trainer;
//!   [`episode_advantages`] turns a group of episodes into per-turn advantages, skipping
//!   (and listing) the turns whose return is unknown because a turn was not scored.
//!
//! ```
//! use cudaperf::rl::{self, Episode, Turn};
//! use cudaperf::pipeline::report::RewardReport;
//!
//! // A group of two 2-turn episodes with their per-turn rewards.
//! let mut group = Vec::new();
//! for rewards in [[-0.75, 1.2], [1.0, 1.1]] {
//!     let mut e = Episode::new("vector_add");
//!     for r in rewards {
//!         e.push(Turn::new("```cuda\n...\n```", RewardReport { value: r, ..Default::default() }));
//!     }
//!     group.push(e);
//! }
//! // Kevin's discounted returns (γ = 0.4), then GRPO over the group at each turn.
//! let opts = cudaperf::rl::EpisodeOptions::default();
//! let adv = cudaperf::rl::episode_advantages(&group, &opts)?;
//! assert_eq!(adv.per_episode.len(), 2);
//! assert!(adv.per_episode[0][0].unwrap() < 0.0); // the episode that started with a compile error
//! let r = rl::discounted_returns(&[-0.75, 1.2], 0.4)?;
//! assert!((r[0] - (-0.75 + 0.4 * 1.2)).abs() < 1e-12);
//! # Ok::<(), cudaperf::rl::RlError>(())
//! ```
//!
//! A two-turn GRPO group with a policy of your own (an LLM behind `policy`):
//!
//! ```no_run
//! use cudaperf::reward::{presets, Context, Reward};
//! use cudaperf::pipeline::{EvalOptions, Evaluator, Submission};
//! use cudaperf::rl::{self, Episode, EpisodeOptions, FeedbackOptions, Turn};
//! use cudaperf::task::Task;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let policy = |_prompt: &str| String::from("```cuda\n...\n```");
//! let task = Task::load("fixtures/tasks/transpose")?;
//! let evaluator = Evaluator::new(EvalOptions::default())?;
//! let ctx = Context::new(&task, &evaluator);
//! let reward = presets::cudaperf();
//! let mut group: Vec<Episode> = (0..8).map(|_| Episode::new(&task.id)).collect();
//! for _turn in 0..2 {
//!     // Turn 1 sees the task prompt; turn 2 the prompt, its previous code and the feedback.
//!     let prompts: Vec<String> = group
//!         .iter()
//!         .map(|e| e.next_prompt(&task, &FeedbackOptions::default()).unwrap_or_else(|| task.prompt()))
//!         .collect();
//!     let completions: Vec<String> = prompts.iter().map(|p| policy(p)).collect();
//!     let subs: Vec<Submission> = completions.iter().map(Submission::from_completion).collect();
//!     for ((e, c), s) in group.iter_mut().zip(completions).zip(reward.score_batch(&ctx, &subs)) {
//!         // A completion that could not be scored here keeps its partial report (value NaN).
//!         e.push(Turn::new(c, s.map_or_else(|e| e.report().clone(), |s| s.report)));
//!     }
//! }
//! let adv = rl::episode_advantages(&group, &EpisodeOptions::default())?;
//! // adv.per_episode[e][t]: the advantage of turn t of episode e (None: group dropped, or
//! // the turn's return is unknown; those turns are in adv.skipped_turns).
//! # let _ = adv;
//! # Ok(()) }
//! ```

mod advantage;
mod episode;
mod feedback;
mod safety;

pub use advantage::{
    advantages, discounted_returns, dr_grpo, equalize_overlapping, grpo, is_zero_variance,
    noise_aware_rewards, noise_aware_rewards_with, rloo, scored_advantages, AdvantageOptions,
    DroppedGroup, Estimator, GroupAdvantages, SpeedTermSelector, UnscoredPolicy,
};
pub use episode::{
    episode_advantages, Episode, EpisodeAdvantages, EpisodeOptions, Turn, TurnGrouping,
};
pub use feedback::{
    feedback, next_turn_prompt, priority, withheld_reason, Feedback, FeedbackItem, FeedbackOptions,
    Importance, ItemKind,
};

/// Why an RL computation could not be done. User input never panics; it ends here.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum RlError {
    /// A group with no rewards.
    #[error("empty group: advantages need at least one reward")]
    EmptyGroup,
    /// The estimator needs more samples per group.
    #[error("{estimator} needs at least {needed} samples per group, the group has {len}")]
    GroupTooSmall {
        /// The estimator.
        estimator: &'static str,
        /// Samples it needs.
        needed: usize,
        /// Samples given.
        len: usize,
    },
    /// A reward is NaN or infinite (an `Unavailable` reward turned into a number?).
    #[error("reward {index} of the group is {value}: rewards must be finite")]
    NonFinite {
        /// Position in the group.
        index: usize,
        /// The value.
        value: f64,
    },
    /// A discount factor outside [0, 1].
    #[error("gamma = {0} is outside [0, 1]")]
    Gamma(f64),
    /// An option that makes no sense (negative epsilon, ...).
    #[error("invalid option `{name}`: {reason}")]
    Option {
        /// The option.
        name: &'static str,
        /// Why.
        reason: String,
    },
    /// An episode without turns in a group.
    #[error("episode {episode} of the group has no turns")]
    EmptyEpisode {
        /// Position in the group.
        episode: usize,
    },
}

/// Result alias for this module.
pub type Result<T> = std::result::Result<T, RlError>;
