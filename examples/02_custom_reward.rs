//! Tour 2: a reward of your own, composed with the built-in ones.
//!
//! ```text
//! cargo run --example 02_custom_reward
//! ```
//! `FewRegisters` reads the compile stage's ptxas report; `Gate` only pays it to programs
//! that compile; `Weighted` adds the structural score. No GPU needed.

use cudaperf::reward::{
    CompileReward, Context, EvalOptions, Evaluation, Evaluator, Gate, Reward, Stage,
    StructuralReward, Submission, Weighted,
};
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
        let most = e
            .stages
            .compile
            .as_ref()
            .and_then(|c| c.kernels.iter().map(|k| k.registers).max());
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
    Ok(())
}
