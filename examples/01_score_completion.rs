//! Tour 1: score an LLM completion for a task with the unified reward and print the report.
//!
//! ```text
//! cargo run --example 01_score_completion
//! ```
//! Without a GPU the GPU stages report `unavailable` and the reward says so instead of
//! inventing a number; the CPU stages (extract, syntax, compile, structure, ranker) still run.

use cudaperf::pipeline::{EvalOptions, Evaluator, Submission};
use cudaperf::reward::{presets, Context, Reward};
use cudaperf::task::Task;

const COMPLETION: &str = r#"Here is a version that lets each thread move four floats at once.

```cuda
// @launch add4 grid=(ceil_div(ceil_div(n, 4), 256)) block=(256)
extern "C" __global__ void add4(const float* __restrict__ a, const float* __restrict__ b,
                                float* __restrict__ c, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int base = 4 * i;
    if (base + 3 < n) {
        float4 x = reinterpret_cast<const float4*>(a)[i];
        float4 y = reinterpret_cast<const float4*>(b)[i];
        reinterpret_cast<float4*>(c)[i] = make_float4(x.x + y.x, x.y + y.y, x.z + y.z, x.w + y.w);
    } else {
        for (int j = base; j < n; ++j) c[j] = a[j] + b[j];
    }
}
```
"#;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let task = Task::load(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/fixtures/tasks/vector_add"
    ))?;
    let evaluator = Evaluator::new(EvalOptions::default())?;
    let ctx = Context::new(&task, &evaluator);
    let sub = Submission::from_completion(COMPLETION);
    match presets::cudaperf().score(&ctx, &sub) {
        Ok(scored) => {
            println!("reward {:.4}", scored.value);
            println!("{}", serde_json::to_string_pretty(&scored.report)?);
        }
        Err(e) => {
            let report = e.report();
            println!("no reward ({}): {e}", report.verdict);
            println!(
                "what ran: {}",
                serde_json::to_string_pretty(&report.stages)?
            );
        }
    }
    Ok(())
}
