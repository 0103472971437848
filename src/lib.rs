//! # cudaperf
//!
//! Rewards for reinforcement learning of models that write CUDA kernels: execution
//! correctness on several input configurations, speedup measured on a real GPU, structural
//! features of the code, and a learned pairwise ranker, joined into one reward — each also
//! usable on its own, and composable.
//!
//! ```no_run
//! use cudaperf::reward::{presets, Context, EvalOptions, Evaluator, Reward, Submission};
//! use cudaperf::task::Task;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let task = Task::load("fixtures/tasks/vector_add")?;
//! let evaluator = Evaluator::new(EvalOptions::default());
//! let reward = presets::cudaperf();
//! let group = vec![Submission::from_completion("```cuda\n...\n```")];
//! let scored = reward.score_batch(&Context::new(&task, &evaluator), &group)?;
//! println!("{}", serde_json::to_string_pretty(&scored[0].report)?);
//! # Ok(()) }
//! ```
//!
//! Pipeline (cheapest first; each stage short-circuits the rest): [`candidate`] extraction →
//! [`syntax`] → [`compile`] (NVRTC) → structure → [`exec`] (GPU correctness and timing,
//! in [`sandbox`] workers) → ranker → [`reward`] combination.
//!
//! For RL trainers, [`rl`] turns reports into next-turn feedback and groups of rewards into
//! advantages (GRPO, Dr. GRPO, RLOO, multi-turn returns, noise-aware speed terms), and holds
//! the multi-turn [`rl::Episode`] type; `examples/grpo.rs` is a reference GRPO loop on it.
#![deny(missing_docs)]

pub mod analysis;
pub mod candidate;
pub mod compile;
pub mod dataset;
pub mod exec;
pub mod expr;
mod prompt;
pub mod ranker;
pub mod reward;
pub mod rl;
pub mod sandbox;
#[cfg(feature = "serve")]
pub mod serve;
pub mod syntax;
pub mod task;
pub mod timings;
pub mod worker;

pub use candidate::{Candidate, CandidateError};
pub use reward::{Reward, RewardReport, Scored, Submission};
pub use task::{Task, TaskError};
