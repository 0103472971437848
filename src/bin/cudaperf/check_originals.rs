//! `cudaperf dataset check-originals` and `cudaperf dataset torch-eager`.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use cudaperf::compile::{CompileOptions, Compiler, Isolation};
use cudaperf::dataset::Dataset;
use cudaperf::exec::DirectGpu;
use cudaperf::originals::{
    self, BufferCompare, CheckOptions, GpuCheck, Samples, TaskCheck, Tools, TwinCheck,
};
use cudaperf::task::{Task, TaskKind};

/// `cudaperf dataset check-originals`.
#[derive(clap::Args)]
pub struct Args {
    /// Folder of task folders (the crate's: fixtures/tasks).
    #[arg(long)]
    pub tasks: PathBuf,
    /// Only these task ids (comma-separated).
    #[arg(long)]
    pub only: Option<String>,
    /// Run the references on this machine's GPU and compare.
    #[arg(long)]
    pub gpu: bool,
    /// Reference values sampled on a GPU (written by --write-samples).
    #[arg(long, conflicts_with = "gpu")]
    pub samples: Option<PathBuf>,
    /// With --gpu: write sampled reference values here (an existing samples file of the same
    /// seed and device is updated: tasks not checked now are kept).
    #[arg(long, requires = "gpu")]
    pub write_samples: Option<PathBuf>,
    /// Input set seed (default: the samples' seed, else a fixed one).
    #[arg(long, value_parser = super::whole)]
    pub seed: Option<u64>,
    /// Time limit of one original run, seconds.
    #[arg(long, default_value_t = 120.0, value_parser = super::seconds)]
    pub limit: f64,
    /// Originals run in parallel (default: the number of cores).
    #[arg(long, value_parser = super::count)]
    pub jobs: Option<usize>,
    /// Write every task's result as JSON here.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

/// The tasks of `--only` (each loaded from its folder; every one named must load), else
/// the whole dataset.
fn chosen(dir: &std::path::Path, only: &Option<String>) -> Result<Vec<Task>, String> {
    let Some(list) = only else {
        return Ok(Dataset::load(dir).map_err(|e| e.to_string())?.tasks);
    };
    list.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|id| Task::load(dir.join(id)).map_err(|e| format!("--only {id}: {e}")))
        .collect()
}

/// What failed in one input set's comparisons, as "buffer: ..." parts.
fn mismatches(
    outputs: &[BufferCompare],
    twin_vs_torch: &[BufferCompare],
    generator: &[TwinCheck],
) -> Vec<String> {
    let mut parts = Vec::new();
    for b in outputs.iter().filter(|b| !b.clean()) {
        parts.push(format!(
            "{}: {}/{} differ, first {:?}, max abs {:.3e}",
            b.buffer, b.mismatches, b.elements, b.first, b.max_abs
        ));
    }
    for b in twin_vs_torch.iter().filter(|b| !b.clean()) {
        parts.push(format!(
            "numpy twin vs torch {}: {}/{} differ, first {:?}",
            b.buffer, b.mismatches, b.elements, b.first
        ));
    }
    for g in generator.iter().filter(|g| g.differing > 0) {
        parts.push(format!(
            "generator {}: {}/{} elements differ from the device's",
            g.buffer, g.differing, g.elements
        ));
    }
    parts
}

fn line(c: &TaskCheck) -> String {
    let engine = c.engine.map_or("-".to_string(), |e| e.to_string());
    let regimes = if c.regimes.is_empty() {
        String::new()
    } else {
        let compared = c.regimes.iter().filter(|r| r.against != "nothing").count();
        format!("; regimes: {} ran, {compared} compared", c.regimes.len())
    };
    let verdict = if let Some(e) = &c.error {
        format!("ERROR {}", e.lines().next().unwrap_or(""))
    } else if !c.passed() {
        let mut parts = mismatches(&c.outputs, &c.twin_vs_torch, &c.generator);
        for r in c.regimes.iter().filter(|r| !r.passed()) {
            let what = match &r.error {
                Some(e) => e.lines().next().unwrap_or("").to_string(),
                None => mismatches(&r.outputs, &r.twin_vs_torch, &r.generator).join("; "),
            };
            parts.push(format!("regime `{}` on `{}`: {what}", r.regime, r.config));
        }
        format!("MISMATCH {}", parts.join("; "))
    } else if c.against == "nothing" {
        format!("ran{regimes} (nothing to compare with here: give --gpu or --samples)")
    } else {
        let all = || {
            c.outputs
                .iter()
                .chain(c.regimes.iter().flat_map(|r| &r.outputs))
        };
        let worst = all().map(|b| b.max_abs).fold(0.0f64, f64::max);
        let n: u64 = all().map(|b| b.elements).sum();
        format!("ok ({n} elements, max abs diff {worst:.2e}{regimes})")
    };
    format!(
        "{:<28} {:<12} {:<6} {:>7.2}s vs {:<9} {verdict}",
        c.task, c.config, engine, c.seconds, c.against
    )
}

pub fn run(a: Args) -> Result<ExitCode, String> {
    let owned = chosen(&a.tasks, &a.only)?;
    let tasks: Vec<&Task> = owned.iter().collect();
    let tools = Tools::detect();
    let samples = match &a.samples {
        Some(p) => Some(
            serde_json::from_str::<Samples>(
                &std::fs::read_to_string(p)
                    .map_err(|e| format!("cannot read {}: {e}", p.display()))?,
            )
            .map_err(|e| format!("{}: not a samples file: {e}", p.display()))?,
        ),
        None => None,
    };
    let mut opts = CheckOptions {
        limit: Duration::from_secs_f64(a.limit),
        ..Default::default()
    };
    if let Some(s) = a.seed {
        opts.seed = s;
    }
    if let (Some(s), Some(seed)) = (&samples, a.seed) {
        if s.seed != seed {
            return Err(format!(
                "--seed {seed} differs from the samples' seed {}",
                s.seed
            ));
        }
    }
    let device = if a.gpu {
        Some(DirectGpu::open().map_err(|e| format!("--gpu: {e}"))?)
    } else {
        None
    };
    let compiler = match &device {
        Some(d) => Some(
            Compiler::new(CompileOptions {
                arch: d.arch().to_string(),
                isolation: Isolation::InProcess, // the dataset's own references
                ..Default::default()
            })
            .map_err(|e| e.to_string())?,
        ),
        None => None,
    };
    let gpu = match (&device, &compiler) {
        (Some(gpu), Some(compiler)) => Some(GpuCheck { gpu, compiler }),
        _ => None,
    };
    println!(
        "# check-originals: {} tasks; C compiler {}, python3+numpy {}, torch {}; {}",
        tasks.len(),
        tools.cc.as_deref().unwrap_or("none"),
        if tools.python.is_some() { "yes" } else { "no" },
        if tools.torch { "yes" } else { "no" },
        match (&device, &samples) {
            (Some(d), _) => format!("references on {}", d.name()),
            (None, Some(s)) => format!("against reference samples from {}", s.device),
            (None, None) => "no reference to compare with (originals only)".into(),
        }
    );
    let jobs = a
        .jobs
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(2, |n| n.get()));
    let mut record = Samples {
        device: device
            .as_ref()
            .map(|d| d.name().to_string())
            .unwrap_or_default(),
        ..Default::default()
    };
    let results = originals::check_tasks(
        &tasks,
        &tools,
        &opts,
        gpu.as_ref(),
        samples.as_ref(),
        a.write_samples.as_ref().map(|_| &mut record),
        jobs,
        |c| println!("{}", line(c)),
    );
    let failed: Vec<&str> = results
        .iter()
        .filter(|c| !c.passed())
        .map(|c| c.task.as_str())
        .collect();
    println!(
        "{} of {} tasks passed{}",
        results.len() - failed.len(),
        results.len(),
        if failed.is_empty() {
            String::new()
        } else {
            format!("; failed: {}", failed.join(", "))
        }
    );
    if let Some(p) = &a.json {
        let text = serde_json::to_string_pretty(&results).map_err(|e| e.to_string())?;
        std::fs::write(p, text).map_err(|e| format!("cannot write {}: {e}", p.display()))?;
    }
    if let Some(p) = &a.write_samples {
        // An existing file for the same seed keeps the tasks not checked now (`--only`).
        if let Some(old) = std::fs::read_to_string(p)
            .ok()
            .and_then(|t| serde_json::from_str::<Samples>(&t).ok())
        {
            record = old.update(record);
        }
        let text = serde_json::to_string(&record).map_err(|e| e.to_string())?;
        std::fs::write(p, text).map_err(|e| format!("cannot write {}: {e}", p.display()))?;
    }
    Ok(if failed.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

pub fn torch_eager(
    tasks: PathBuf,
    only: Option<String>,
    timings: Option<PathBuf>,
    runs: usize,
    out: Option<PathBuf>,
) -> Result<ExitCode, String> {
    let owned = chosen(&tasks, &only)?;
    let timings = match &timings {
        Some(p) => Some(cudaperf::timings::Timings::load(p).map_err(|e| e.to_string())?),
        None => None,
    };
    let mut rows = Vec::new();
    let mut failures = 0;
    println!(
        "{:<28} {:<12} {:>12} {:>14} {:>8}",
        "task", "config", "eager_us", "reference_us", "ref/eager"
    );
    let torch: Vec<&Task> = owned
        .iter()
        .filter(|t| t.kind == TaskKind::Torch2cuda)
        .collect();
    let items: Vec<_> = torch
        .iter()
        .map(|t| {
            let all: Vec<usize> = (0..t.configs.len()).collect();
            (*t, &t.configs[cudaperf::pipeline::timing_config(t, &all)])
        })
        .collect();
    // 2 x the H200's 60 MiB L2, as the timing protocol flushes; 20 s per module at most.
    let limit = Duration::from_secs(60 + 20 * items.len() as u64);
    let results =
        originals::torch_eager_ms(&items, runs, 128 << 20, limit).map_err(|e| e.to_string())?;
    for ((t, cfg), r) in items.iter().zip(results) {
        let reference = timings
            .as_ref()
            .and_then(|tm| tm.tasks.get(&t.id))
            .and_then(|tt| tt.implementations.get("reference"))
            .and_then(|r| r.time_us);
        match r {
            Ok(v) => {
                let eager_us = v["median_ms"].as_f64().unwrap_or(f64::NAN) * 1000.0;
                println!(
                    "{:<28} {:<12} {:>12.1} {:>14} {:>8}",
                    t.id,
                    cfg.name,
                    eager_us,
                    reference.map_or("-".into(), |r| format!("{r:.1}")),
                    reference.map_or("-".into(), |r| format!("{:.2}", r / eager_us)),
                );
                rows.push(serde_json::json!({
                    "task": t.id, "config": cfg.name, "eager_us": eager_us,
                    "eager_min_us": v["min_ms"].as_f64().map(|m| m * 1000.0),
                    "runs": v["runs"], "device": v["device"], "torch": v["torch"],
                    "reference_us": reference,
                }));
            }
            Err(e) => {
                failures += 1;
                println!("{:<28} {:<12} ERROR {e}", t.id, cfg.name);
            }
        }
    }
    if let Some(p) = &out {
        let text = serde_json::to_string_pretty(&rows).map_err(|e| e.to_string())?;
        std::fs::write(p, text).map_err(|e| format!("cannot write {}: {e}", p.display()))?;
    }
    Ok(if failures == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
