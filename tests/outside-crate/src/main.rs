use cudaperf::reward::{presets, Context, Reward};
use cudaperf::pipeline::{EvalOptions, Evaluator, Submission};
use cudaperf::task::Task;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The sandbox's workers are this program: when a pool starts it as one, this call serves
    // the pool's jobs and exits; otherwise it returns at once.
    cudaperf::worker::run_if_requested();

    let mut args = std::env::args().skip(1);
    let task = Task::load(args.next().ok_or("usage: trainer TASK_DIR COMPLETION...")?)?;
    // Share one evaluator: it holds the compile cache, the worker pools and the ranker.
    let evaluator = Evaluator::new(EvalOptions::self_worker()?)?;
    let reward = presets::cudaperf();

    // One GRPO group: a submission per completion of the policy.
    let completions = args.map(std::fs::read_to_string).collect::<Result<Vec<_>, _>>()?;
    let group: Vec<Submission> = completions.into_iter().map(Submission::from_completion).collect();
    let ctx = Context::new(&task, &evaluator).at_step(0);

    // One result per completion: a value and its report, or why there is none (no GPU here,
    // a worker that would not start...), never a made-up number.
    for (i, result) in reward.score_batch(&ctx, &group).into_iter().enumerate() {
        match result {
            Ok(scored) => println!("{i} {} {}", scored.value, serde_json::to_string(&scored.report)?),
            Err(e) => println!("{i} none {}", serde_json::to_string(e.report())?),
        }
    }
    Ok(())
}
