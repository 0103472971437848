//! `cudaperf dataset check-originals`: run every task's original on the CPU and compare it
//! with the reference (on this GPU, or from samples taken on one earlier).

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use cudaperf::compile::{CompileOptions, Compiler, CompilerError, Isolation};
use cudaperf::dataset::{Dataset, DatasetError};
use cudaperf::exec::DirectGpu;
use cudaperf::originals::{
    self, BufferCompare, CheckOptions, GpuCheck, Samples, TaskCheck, Tools, TwinCheck,
};
use cudaperf::task::{Task, TaskError};

use crate::args::{count, seconds, whole};
use crate::output::{pretty, write_text, OutputError};

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
    #[arg(long, value_parser = whole)]
    pub seed: Option<u64>,
    /// Time limit of one original run, seconds.
    #[arg(long, default_value_t = 120.0, value_parser = seconds)]
    pub limit: f64,
    /// Originals run in parallel (default: the number of cores).
    #[arg(long, value_parser = count)]
    pub jobs: Option<usize>,
    /// Write every task's result as JSON here.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

/// Why `check-originals` (or `torch-eager`) could not check.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The dataset does not load.
    #[error(transparent)]
    Dataset(#[from] DatasetError),
    /// A task of `--only` does not load.
    #[error("--only {id}: {source}")]
    Only {
        /// The task id.
        id: String,
        /// Why.
        source: TaskError,
    },
    /// The samples file cannot be read.
    #[error("cannot read {path}: {source}")]
    ReadSamples {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The samples file is not one.
    #[error("{path}: not a samples file: {source}")]
    NotSamples {
        /// The file.
        path: PathBuf,
        /// The parser's error.
        source: serde_json::Error,
    },
    /// `--seed` disagrees with the samples.
    #[error("--seed {given} differs from the samples' seed {samples}")]
    SeedMismatch {
        /// `--seed`.
        given: u64,
        /// The samples' seed.
        samples: u64,
    },
    /// No usable GPU for `--gpu`.
    #[error("--gpu: {0}")]
    Gpu(#[from] cudaperf::exec::DirectGpuError),
    /// The compiler for the references could not be set up.
    #[error(transparent)]
    Compiler(#[from] CompilerError),
    /// A result could not be written.
    #[error(transparent)]
    Output(#[from] OutputError),
}

/// The tasks of `--only` (each loaded from its folder; every one named must load), else
/// the whole dataset.
pub fn chosen(dir: &Path, only: &Option<String>) -> Result<Vec<Task>, Error> {
    let Some(list) = only else {
        return Ok(Dataset::load(dir)?.tasks);
    };
    list.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|id| {
            Task::load(dir.join(id)).map_err(|source| Error::Only {
                id: id.to_string(),
                source,
            })
        })
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

/// Runs `cudaperf dataset check-originals`; exits 1 when a task fails.
pub fn run(a: Args) -> Result<ExitCode, Error> {
    let owned = chosen(&a.tasks, &a.only)?;
    let tasks: Vec<&Task> = owned.iter().collect();
    let tools = Tools::detect();
    let samples = a.samples.as_deref().map(load_samples).transpose()?;
    let mut opts = CheckOptions {
        limit: Duration::from_secs_f64(a.limit),
        ..Default::default()
    };
    if let Some(s) = a.seed {
        opts.seed = s;
    }
    if let (Some(s), Some(seed)) = (&samples, a.seed) {
        if s.seed != seed {
            return Err(Error::SeedMismatch {
                given: seed,
                samples: s.seed,
            });
        }
    }
    let device = if a.gpu {
        Some(DirectGpu::open()?)
    } else {
        None
    };
    let compiler = match &device {
        Some(d) => Some(Compiler::new(CompileOptions {
            arch: d.arch().to_string(),
            isolation: Isolation::InProcess, // the dataset's own references
            ..Default::default()
        })?),
        None => None,
    };
    let gpu = match (&device, &compiler) {
        (Some(gpu), Some(compiler)) => Some(GpuCheck { gpu, compiler }),
        _ => None,
    };
    print_header(tasks.len(), &tools, device.as_ref(), samples.as_ref());
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
    let failed = print_summary(&results);
    if let Some(p) = &a.json {
        write_text(p, pretty("the results", &results)?)?;
    }
    if let Some(p) = &a.write_samples {
        write_samples(p, record)?;
    }
    Ok(if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// Reads a samples file written by `--write-samples`.
fn load_samples(path: &Path) -> Result<Samples, Error> {
    let text = std::fs::read_to_string(path).map_err(|source| Error::ReadSamples {
        path: path.to_path_buf(),
        source,
    })?;
    serde_json::from_str(&text).map_err(|source| Error::NotSamples {
        path: path.to_path_buf(),
        source,
    })
}

/// The first line: what this machine can run and what the originals are compared with.
fn print_header(
    tasks: usize,
    tools: &Tools,
    device: Option<&DirectGpu>,
    samples: Option<&Samples>,
) {
    println!(
        "# check-originals: {} tasks; C compiler {}, python3+numpy {}, torch {}; {}",
        tasks,
        tools.cc.as_deref().unwrap_or("none"),
        if tools.python.is_some() { "yes" } else { "no" },
        if tools.torch { "yes" } else { "no" },
        match (device, samples) {
            (Some(d), _) => format!("references on {}", d.name()),
            (None, Some(s)) => format!("against reference samples from {}", s.device),
            (None, None) => "no reference to compare with (originals only)".into(),
        }
    );
}

/// The last line: how many passed, which failed; gives the number that failed.
fn print_summary(results: &[TaskCheck]) -> usize {
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
    failed.len()
}

/// Writes the sampled reference values; an existing file for the same seed keeps the tasks
/// not checked now (`--only`).
fn write_samples(path: &Path, mut record: Samples) -> Result<(), Error> {
    if let Some(old) = std::fs::read_to_string(path)
        .ok()
        .and_then(|t| serde_json::from_str::<Samples>(&t).ok())
    {
        record = old.update(record);
    }
    let text = serde_json::to_string(&record).map_err(|source| OutputError::Json {
        what: "the samples",
        source,
    })?;
    Ok(write_text(path, text)?)
}
