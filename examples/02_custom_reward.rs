//! Tour 2: a reward of your own, composed with the built-in ones.
//!
//! ```text
//! cargo run --example 02_custom_reward
//! ```
//! `FewRegisters` reads the compile stage's ptxas report; `Gate` only pays it to programs
//! that compile; `Weighted` adds the structural score. No GPU needed.
//!
//! `require` comes first in `value`: when the compile stage could not run here (no NVRTC,
//! a compile worker that cannot start), there are no registers to read, and the reward is
//! an error that says so, never a value computed from nothing. The last lines show it with a
//! worker that does not exist.

use cudaperf::pipeline::{EvalOptions, Evaluation, Evaluator, Stage, Submission};
use cudaperf::reward::{require, CompileReward, Context, Gate, Reward, StructuralReward, Weighted};
use cudaperf::task::Task;

/// 1 − (most registers per thread of any kernel) / 255.
struct FewRegisters;

impl Reward for FewRegisters {
    fn name(&self) -> String {
        "few_registers".into()
    }
    fn needs(&self, _: &Context) -> Stage {
        Stage::Compile
    }
    fn value(&self, _: &Context, e: &Evaluation) -> cudaperf::reward::Result<f64> {
        // The compile stage could not run here: an error, not 0 registers.
        require(self, e, Stage::Compile)?;
        let most = e
            .stages
            .compile
            .as_ref()
            .and_then(|c| c.kernels().iter().map(|k| k.registers).max());
        Ok(most.map_or(0.0, |r| 1.0 - f64::from(r.min(255)) / 255.0))
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let task = Task::load(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/fixtures/tasks/transpose"
    ))?;
    let evaluator = Evaluator::new(EvalOptions {
        no_gpu: true,
        ..Default::default()
    })?;
    let reward = Weighted::new()
        .named("lean_and_tidy")
        .add(0.5, Gate::new(CompileReward, 1.0, FewRegisters))
        .add(0.5, StructuralReward);
    let ctx = Context::new(&task, &evaluator);
    let group: Vec<Submission> = task
        .all_implementations()
        .map(|i| Submission::from_source(i.source.clone()))
        .collect();
    // One result per submission: one that cannot be scored here does not fail the group.
    for (imp, scored) in task
        .all_implementations()
        .zip(reward.score_batch(&ctx, &group))
    {
        let scored = match scored {
            Ok(s) => s,
            Err(e) => {
                println!("{:<28} no reward: {e}", imp.name);
                continue;
            }
        };
        let terms: Vec<String> = scored
            .report
            .terms
            .iter()
            .map(|t| format!("{} {:.3}", t.name, t.value))
            .collect();
        println!(
            "{:<28} {:>7.4}   ({})",
            imp.name,
            scored.value,
            terms.join(", ")
        );
    }

    // A compile worker that cannot start: no number, the reason instead.
    let mut broken = EvalOptions {
        no_gpu: true,
        ..Default::default()
    };
    broken.compile.worker = Some("/nonexistent/cudaperf".into());
    let broken = Evaluator::new(broken)?;
    match FewRegisters.score(&Context::new(&task, &broken), &group[0]) {
        Ok(s) => return Err(format!("a made-up value {} without a compiler", s.value).into()),
        Err(e) => println!("without a compile worker: {e}"),
    }
    Ok(())
}
