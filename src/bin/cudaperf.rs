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
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}
