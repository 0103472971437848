//! The `cudaperf` command line: score candidates, run workers, and more (`cudaperf --help`).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use cudaperf::compile::{CompileOptions, Isolation};
use cudaperf::reward::{presets, Context, EvalOptions, Evaluator, Reward, RewardError, Submission};
use cudaperf::task::Task;

#[derive(Parser)]
#[command(name = "cudaperf", version, about = "Rewards for RL of CUDA-kernel-writing models")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(clap::Args, Clone)]
struct CompileArgs {
    /// Target architecture for NVRTC (sm_XX).
    #[arg(long, default_value = "sm_90")]
    arch: String,
    /// Persist compiled cubins here (content-addressed; safe to share between processes).
    #[arg(long)]
    cache_dir: Option<PathBuf>,
    /// Compile time limit in seconds (compiles run in killable worker processes).
    #[arg(long, default_value_t = 30.0)]
    compile_timeout: f64,
    /// Compile inside this process (trusted sources only: no time limit can be enforced).
    #[arg(long)]
    in_process: bool,
}

impl CompileArgs {
    fn options(&self) -> Result<CompileOptions, String> {
        if !cudaperf::compile::valid_arch(&self.arch) {
            return Err(format!("--arch `{}` is not an sm_XX architecture (e.g. sm_90)", self.arch));
        }
        if !(self.compile_timeout > 0.0 && self.compile_timeout.is_finite()) {
            return Err("--compile-timeout must be a positive number of seconds".into());
        }
        Ok(CompileOptions {
            arch: self.arch.clone(),
            cache_dir: self.cache_dir.clone(),
            timeout: std::time::Duration::from_secs_f64(self.compile_timeout),
            isolation: if self.in_process { Isolation::InProcess } else { Isolation::Auto },
            ..Default::default()
        })
    }
}

#[derive(Subcommand)]
enum Command {
    /// Score candidate files (.cu in the candidate format, or .md/.txt LLM completions).
    Score {
        /// The task folder or its task.toml.
        #[arg(long)]
        task: PathBuf,
        /// Candidate files.
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// Reward preset: cudaperf, correctness, kevin, fast_p:<p>, dhrcl.
        #[arg(long, default_value = "cudaperf")]
        reward: String,
        /// Training step (for the dhrcl curriculum).
        #[arg(long, default_value_t = 0)]
        step: u64,
        /// Print the full JSON report.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        compile: CompileArgs,
    },
    /// Run as a sandbox worker (JSON lines on stdin/stdout); started by the library.
    Worker,
    /// Time every implementation of every task on the GPU against its reference.
    Measure {
        /// Folder of task folders.
        #[arg(long, default_value = "fixtures/tasks")]
        tasks: PathBuf,
        /// Output timings file (e.g. fixtures/timings/h200.json).
        #[arg(long)]
        out: PathBuf,
        /// Only these task ids (comma-separated).
        #[arg(long, value_delimiter = ',')]
        only: Vec<String>,
        /// GPU workers per visible GPU.
        #[arg(long, default_value_t = 1)]
        workers_per_gpu: usize,
        /// Time limit per implementation, seconds.
        #[arg(long, default_value_t = 120.0)]
        timeout: f64,
        #[command(flatten)]
        compile: CompileArgs,
    },
}

fn preset(name: &str) -> Result<Box<dyn Reward>, String> {
    Ok(match name {
        "cudaperf" => Box::new(presets::cudaperf()),
        "correctness" => Box::new(presets::correctness_only()),
        "kevin" => Box::new(presets::kevin()),
        "dhrcl" => Box::new(presets::staged_dhrcl(Default::default())),
        other => match other.strip_prefix("fast_p:").map(str::parse::<f64>) {
            Some(Ok(p)) => Box::new(presets::kernelbench_fast_p(p)),
            _ => return Err(format!("unknown reward `{other}` (expected cudaperf, correctness, kevin, fast_p:<p>, dhrcl)")),
        },
    })
}

fn read_submission(path: &PathBuf) -> Result<Submission, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let text = String::from_utf8_lossy(&bytes).into_owned();
    let is_source = matches!(path.extension().and_then(|e| e.to_str()), Some("cu" | "cuh" | "cpp" | "cc"));
    Ok(if is_source { Submission::from_source(text) } else { Submission::from_completion(text) })
}

fn score(task: PathBuf, files: Vec<PathBuf>, reward: String, step: u64, json: bool, compile: CompileArgs) -> Result<ExitCode, String> {
    let task = Task::load(&task).map_err(|e| e.to_string())?;
    let reward = preset(&reward)?;
    let evaluator = Evaluator::new(EvalOptions {
        compile: compile.options()?,
        ..Default::default()
    });
    let ctx = Context::new(&task, &evaluator).at_step(step);
    let subs = files.iter().map(read_submission).collect::<Result<Vec<_>, _>>()?;
    let mut outputs = Vec::new();
    for (file, sub) in files.iter().zip(&subs) {
        let (value, mut report, error) = match reward.score(&ctx, sub) {
            Ok(s) => (Some(s.value), serde_json::to_value(&s.report).map_err(|e| e.to_string())?, None),
            Err(e) => {
                let partial = match &e {
                    RewardError::Unavailable { report, .. } => serde_json::to_value(report).map_err(|e| e.to_string())?,
                    _ => serde_json::Value::Object(Default::default()),
                };
                (None, partial, Some(e.to_string()))
            }
        };
        if let Some(obj) = report.as_object_mut() {
            obj.insert("file".into(), file.display().to_string().into());
            obj.insert("value".into(), value.map_or(serde_json::Value::Null, Into::into));
            if let Some(e) = &error {
                obj.insert("error".into(), e.clone().into());
            }
        }
        if !json {
            let stages = &report["stages"];
            println!(
                "{}: value {} | extract {} | compile {} | {}",
                file.display(),
                value.map_or("n/a".to_string(), |v| format!("{v:.4}")),
                stages["extract"]["ok"],
                stages["compile"]["status"],
                error.as_deref().unwrap_or(""),
            );
        }
        outputs.push(report);
    }
    if json {
        let out = if outputs.len() == 1 { outputs.remove(0) } else { serde_json::Value::Array(outputs) };
        println!("{}", serde_json::to_string_pretty(&out).map_err(|e| e.to_string())?);
    }
    Ok(ExitCode::SUCCESS)
}

/// Today's UTC date as YYYY-MM-DD (civil-from-days, no date crate needed).
fn today() -> String {
    let days = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs() / 86400).unwrap_or(0) as i64;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}")
}

fn load_tasks(dir: &PathBuf, only: &[String]) -> Result<Vec<Task>, String> {
    let mut tasks = Vec::new();
    let entries = std::fs::read_dir(dir).map_err(|e| format!("cannot read {}: {e}", dir.display()))?;
    let mut dirs: Vec<PathBuf> = entries.flatten().map(|e| e.path()).filter(|p| p.join("task.toml").is_file()).collect();
    dirs.sort();
    for d in dirs {
        let id = d.file_name().and_then(|n| n.to_str()).unwrap_or_default().to_string();
        if !only.is_empty() && !only.contains(&id) {
            continue;
        }
        tasks.push(Task::load(&d).map_err(|e| e.to_string())?);
    }
    if tasks.is_empty() {
        return Err(format!("no tasks found in {}", dir.display()));
    }
    Ok(tasks)
}

fn measure(dir: PathBuf, out: PathBuf, only: Vec<String>, workers_per_gpu: usize, timeout: f64, compile: CompileArgs) -> Result<ExitCode, String> {
    use cudaperf::reward::Stage;
    use cudaperf::timings::{ImplTiming, TaskTimings, Timings};
    let tasks = load_tasks(&dir, &only)?;
    let evaluator = Evaluator::new(EvalOptions {
        compile: compile.options()?,
        exec: cudaperf::exec::ExecOptions {
            workers_per_gpu,
            timeout: std::time::Duration::from_secs_f64(timeout.max(1.0)),
            ..Default::default()
        },
        ..Default::default()
    });
    evaluator.executor()?;
    let total: usize = tasks.iter().map(|t| t.all_implementations().count()).sum();
    let bar = indicatif::ProgressBar::new(total as u64);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {pos}/{len} {msg}")
            .map_err(|e| e.to_string())?,
    );
    let mut timings = Timings {
        date: today(),
        command: std::env::args().collect::<Vec<_>>().join(" "),
        cudaperf_version: env!("CARGO_PKG_VERSION").into(),
        ..Default::default()
    };
    let mut failures = 0;
    for task in &tasks {
        bar.set_message(task.id.clone());
        let impls: Vec<_> = task.all_implementations().collect();
        let subs: Vec<Submission> = impls.iter().map(|i| Submission::from_source(i.source.clone())).collect();
        let evals = evaluator.evaluate_batch(task, &subs, Stage::Timing);
        let mut tt = TaskTimings::default();
        for (imp, e) in impls.iter().zip(&evals) {
            let verdict = e.verdict();
            if let Some(d) = e.stages.execute.as_ref().and_then(|x| x.device.as_ref()) {
                timings.device = d.name.clone();
                timings.driver = d.driver_version;
            }
            let reason = match verdict {
                cudaperf::reward::Verdict::Correct => None,
                _ => Some(first_reason(e)),
            };
            let t = e.stages.timing.as_ref();
            if verdict != cudaperf::reward::Verdict::Correct || t.is_none() {
                failures += 1;
            }
            bar.println(format!(
                "{:<28} {:<36} {:<10} {}",
                task.id,
                imp.name,
                verdict.as_str(),
                t.map_or_else(|| reason.clone().unwrap_or_default(), |t| format!("{:>10.1} us  ref {:>10.1} us  x{:.3}", t.candidate_us, t.reference_us, t.raw_speedup))
            ));
            tt.implementations.insert(
                imp.name.clone(),
                ImplTiming {
                    verdict: verdict.as_str().into(),
                    reason,
                    time_us: t.map(|t| t.candidate_us),
                    reference_us: t.map(|t| t.reference_us),
                    raw_speedup: t.map(|t| t.raw_speedup),
                    ci95: t.map(|t| t.ci95),
                    noise_floor: t.map(|t| t.noise_floor),
                    config: t.map(|t| t.config.clone()),
                },
            );
            bar.inc(1);
        }
        timings.tasks.insert(task.id.clone(), tt);
    }
    bar.finish_and_clear();
    if let Some(parent) = out.parent() {
        std::fs::create_dir_all(parent).map_err(|e| format!("cannot create {}: {e}", parent.display()))?;
    }
    let text = serde_json::to_string_pretty(&timings).map_err(|e| e.to_string())?;
    std::fs::write(&out, text + "\n").map_err(|e| format!("cannot write {}: {e}", out.display()))?;
    eprintln!("measured {total} implementations of {} tasks on {}: {failures} not correct or not timed; wrote {}", tasks.len(), timings.device, out.display());
    Ok(if failures == 0 { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

/// The first human-readable reason an evaluation is not correct.
fn first_reason(e: &cudaperf::reward::Evaluation) -> String {
    if let Some(err) = &e.stages.extract.error {
        return err.clone();
    }
    if let Some(c) = e.stages.compile.as_ref().filter(|c| !c.ok) {
        return c.reason.clone().unwrap_or_else(|| c.log.lines().take(3).collect::<Vec<_>>().join(" "));
    }
    if let Some(c) = &e.stages.correctness {
        if let Some(f) = c.configs.iter().find(|c| !c.passed) {
            return format!("config {}: {}", f.config, f.reasons.join("; "));
        }
    }
    e.stages.execute.as_ref().map(|x| format!("{:?}", x.status)).unwrap_or_else(|| "not run".into())
}

fn main() -> ExitCode {
    cudaperf::sandbox::run_if_requested();
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_env("CUDAPERF_LOG"))
        .with_writer(std::io::stderr)
        .init();
    let result = match cli.command {
        Command::Worker => return ExitCode::from(cudaperf::sandbox::worker_main() as u8),
        Command::Score {
            task,
            files,
            reward,
            step,
            json,
            compile,
        } => score(task, files, reward, step, json, compile),
        Command::Measure {
            tasks,
            out,
            only,
            workers_per_gpu,
            timeout,
            compile,
        } => measure(tasks, out, only, workers_per_gpu, timeout, compile),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}
