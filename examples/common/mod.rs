//! Code shared by the RL examples (`grpo`, `cudaperf_ablation`) and `tests/rl.rs`, included
//! with `#[path]`: the kernel-program generator, the burn policy over it, the rewards, the
//! GRPO loop, run setup and plots. Example code, not library API: a trainer's policy is an
//! LLM, and it would reuse `cudaperf::rl` (feedback, advantages, episodes), not this.
#![allow(dead_code)]

pub mod plot;
pub mod policy;
pub mod programs;
pub mod replay;
pub mod replay_report;
pub mod rewards;
pub mod rollout;
pub mod setup;
pub mod space;
pub mod table;
