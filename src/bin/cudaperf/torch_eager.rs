//! `cudaperf dataset torch-eager`: PyTorch-eager time of the torch2cuda originals on this
//! machine's GPU, next to the reference's time from a timings file.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use cudaperf::originals::{self, OriginalError};
use cudaperf::task::{InputConfig, Task, TaskKind};
use cudaperf::timings::{Timings, TimingsError};

use crate::args::count;
use crate::check_originals::{self, chosen};
use crate::output::{pretty, write_text, OutputError};

/// `cudaperf dataset torch-eager`.
#[derive(clap::Args)]
pub struct Args {
    /// Folder of task folders (the crate's: fixtures/tasks).
    #[arg(long)]
    tasks: PathBuf,
    /// Only these task ids (comma-separated).
    #[arg(long)]
    only: Option<String>,
    /// Timings from `cudaperf measure` for the reference column.
    #[arg(long)]
    timings: Option<PathBuf>,
    /// Timed runs per task (after 5 warm-ups).
    #[arg(long, default_value_t = 30, value_parser = count)]
    runs: usize,
    /// Write the table as JSON here.
    #[arg(long)]
    out: Option<PathBuf>,
}

/// Why `torch-eager` could not time.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The tasks do not load.
    #[error(transparent)]
    Tasks(#[from] check_originals::Error),
    /// The timings do not load.
    #[error(transparent)]
    Timings(#[from] TimingsError),
    /// The PyTorch driver could not run.
    #[error(transparent)]
    Original(#[from] OriginalError),
    /// The table could not be written.
    #[error(transparent)]
    Output(#[from] OutputError),
}

/// Runs `cudaperf dataset torch-eager`; exits 1 when a task could not be timed.
pub fn run(a: Args) -> Result<ExitCode, Error> {
    let owned = chosen(&a.tasks, &a.only)?;
    let timings = a.timings.as_ref().map(Timings::load).transpose()?;
    println!(
        "{:<28} {:<12} {:>12} {:>14} {:>8}",
        "task", "config", "eager_us", "reference_us", "ref/eager"
    );
    let items: Vec<(&Task, &InputConfig)> = owned
        .iter()
        .filter(|t| t.kind == TaskKind::Torch2cuda)
        .map(|t| {
            let all: Vec<usize> = (0..t.configs.len()).collect();
            (t, &t.configs[cudaperf::task::timing_config(t, &all)])
        })
        .collect();
    // 2 x the H200's 60 MiB L2, as the timing protocol flushes; 20 s per module at most.
    let limit = Duration::from_secs(60 + 20 * items.len() as u64);
    let results = originals::torch_eager_ms(&items, a.runs, 128 << 20, limit)?;
    let mut rows = Vec::new();
    let mut failures = 0;
    for ((t, cfg), r) in items.iter().zip(results) {
        let reference = timings
            .as_ref()
            .and_then(|tm| tm.tasks.get(&t.id))
            .and_then(|tt| tt.implementations.get("reference"))
            .and_then(|r| r.time_us);
        match r {
            Ok(v) => rows.push(row(t, cfg, &v, reference)),
            Err(e) => {
                failures += 1;
                println!("{:<28} {:<12} ERROR {e}", t.id, cfg.name);
            }
        }
    }
    if let Some(p) = &a.out {
        write_text(p, pretty("the table", &rows)?)?;
    }
    Ok(if failures == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// Prints one task's line and gives its JSON row.
fn row(
    t: &Task,
    cfg: &InputConfig,
    v: &serde_json::Value,
    reference: Option<f64>,
) -> serde_json::Value {
    let eager_us = v["median_ms"].as_f64().unwrap_or(f64::NAN) * 1000.0;
    println!(
        "{:<28} {:<12} {:>12.1} {:>14} {:>8}",
        t.id,
        cfg.name,
        eager_us,
        reference.map_or("-".into(), |r| format!("{r:.1}")),
        reference.map_or("-".into(), |r| format!("{:.2}", r / eager_us)),
    );
    serde_json::json!({
        "task": t.id, "config": cfg.name, "eager_us": eager_us,
        "eager_min_us": v["min_ms"].as_f64().map(|m| m * 1000.0),
        "runs": v["runs"], "device": v["device"], "torch": v["torch"],
        "reference_us": reference,
    })
}
