//! Code shared by the RL examples (`grpo`, `cudaperf_ablation`) and `tests/rl.rs`, included
//! with `#[path]`: the kernel-program generator, the burn policy over it, the GRPO loop.
#![allow(dead_code)]

pub mod programs;
