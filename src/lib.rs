//! # cudaperf
//!
//! Rewards for reinforcement learning of models that write CUDA kernels: execution
//! correctness on several input configurations, speedup measured on a real GPU, structural
//! features of the code, and a learned pairwise ranker, joined into one reward — each also
//! usable on its own, and composable.
//!
//! ```no_run
//! use cudaperf::reward::{presets, Context, Reward};
//! use cudaperf::pipeline::{EvalOptions, Evaluator, Submission};
//! use cudaperf::task::Task;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let task = Task::load("fixtures/tasks/vector_add")?;
//! let evaluator = Evaluator::new(EvalOptions::default())?;
//! let reward = presets::cudaperf();
//! let group = vec![Submission::from_completion("```cuda\n...\n```")];
//! // One result per completion: a value with its report, or why there is none.
//! for result in reward.score_batch(&Context::new(&task, &evaluator), &group) {
//!     match result {
//!         Ok(scored) => println!("{} {}", scored.value, scored.report.verdict),
//!         Err(e) => println!("no reward: {e}"),
//!     }
//! }
//! # Ok(()) }
//! ```
//!
//! For RL trainers, [`rl`] turns reports into next-turn feedback and groups of rewards into
//! advantages (GRPO, Dr. GRPO, RLOO, multi-turn returns, noise-aware speed terms), and holds
//! the multi-turn [`rl::Episode`] type; `examples/grpo.rs` is a reference GRPO loop on it.
//!
//! The [`pipeline`] runs the stages in order (cheapest first; each short-circuits the
//! rest): extract ([`candidate`]) → syntax → compile ([`compile`], NVRTC) → structure
//! ([`analysis`]) → ranker ([`ranker`]) → correctness and timing ([`exec`], in [`sandbox`]
//! workers); [`reward`] turns its report into numbers.
//!
//! Cargo features: `cli` (default) builds the `cudaperf` command line and what only it
//! needs (clap, indicatif, tracing-subscriber, plotters); a trainer can link the library
//! with `default-features = false`. `serve` (default) adds [`serve`]: the HTTP reward
//! server and the Redis Streams queue behind `cudaperf serve` / `cudaperf node`. `tch`
//! switches the ranker's burn backend to libtorch.
#![deny(missing_docs)]

pub mod analysis;
pub mod candidate;
pub mod compile;
pub mod dataset;
pub mod exec;
pub mod expr;
pub mod inputs;
pub mod originals;
pub mod pipeline;
mod prompt;
pub mod ranker;
pub mod reward;
pub mod rl;
pub mod sandbox;
#[cfg(feature = "serve")]
pub mod serve;
pub mod task;
pub mod timings;
mod verdict;
pub mod worker;
