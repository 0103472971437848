//! The `cudaperf` command line: score candidates, run workers, and more (`cudaperf --help`).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use cudaperf::compile::{CompileOptions, Isolation};
use cudaperf::reward::{presets, Context, EvalOptions, Evaluator, Reward, RewardError, Submission};
use cudaperf::task::Task;

#[path = "cudaperf/check_originals.rs"]
mod check_originals;

/// A count: a whole number >= 0, with a message that says so for `-3` or `2.5`.
fn count(text: &str) -> Result<usize, String> {
    text.trim()
        .parse::<usize>()
        .map_err(|_| format!("must be a whole number >= 0, got `{text}`"))
}

/// A training step or seed: a whole number >= 0.
fn whole(text: &str) -> Result<u64, String> {
    text.trim()
        .parse::<u64>()
        .map_err(|_| format!("must be a whole number >= 0, got `{text}`"))
}

/// A time limit: a positive, finite number of seconds.
fn seconds(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(v) if v > 0.0 && v.is_finite() && v <= 1e6 => Ok(v),
        _ => Err(format!(
            "must be a positive number of seconds (at most 1000000), got `{text}`"
        )),
    }
}

#[derive(Parser)]
#[command(
    name = "cudaperf",
    version,
    about = "Rewards for RL of CUDA-kernel-writing models"
)]
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
    #[arg(long, default_value_t = 30.0, value_parser = seconds)]
    compile_timeout: f64,
    /// Compile inside this process (trusted sources only: no time limit can be enforced).
    #[arg(long)]
    in_process: bool,
}

impl CompileArgs {
    /// The options; `--arch` and `--cache-dir` are checked when the evaluator is built
    /// ([`evaluator`]).
    fn options(&self) -> CompileOptions {
        CompileOptions {
            arch: self.arch.clone(),
            cache_dir: self.cache_dir.clone(),
            timeout: std::time::Duration::from_secs_f64(self.compile_timeout),
            isolation: if self.in_process {
                Isolation::InProcess
            } else {
                Isolation::Sandboxed
            },
            ..Default::default()
        }
    }
}

/// The evaluator for these options; unusable options (an architecture NVRTC does not know,
/// a cache folder that cannot be written, no worker) are an error naming the flag.
fn evaluator(options: EvalOptions) -> Result<Evaluator, String> {
    use cudaperf::compile::CompilerError;
    use cudaperf::reward::EvalError;
    Evaluator::new(options).map_err(|e| match &e {
        EvalError::Compiler(
            CompilerError::InvalidArch { .. } | CompilerError::UnsupportedArch(_),
        ) => {
            format!("--arch: {e}")
        }
        EvalError::Compiler(CompilerError::CacheDir { .. }) => format!("--cache-dir: {e}"),
        _ => e.to_string(),
    })
}

#[derive(Subcommand)]
enum Command {
    /// Score candidate files (.cu in the candidate format, or .md/.txt LLM completions).
    #[command(allow_negative_numbers = true)]
    Score {
        /// The task folder or its task.toml.
        #[arg(long)]
        task: PathBuf,
        /// Candidate files; `-` reads one completion from standard input.
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// Reward preset: cudaperf, correctness, kevin, fast_p:<p>, dhrcl.
        #[arg(long, default_value = "cudaperf")]
        reward: String,
        /// Training step (for the dhrcl curriculum).
        #[arg(long, default_value_t = 0, value_parser = whole)]
        step: u64,
        /// Print the full JSON report.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        compile: CompileArgs,
    },
    /// Serve rewards over HTTP/JSON (POST /v1/score, GET /v1/tasks, /healthz, /metrics).
    #[cfg(feature = "serve")]
    Serve(Box<ServeArgs>),
    /// Consume scoring jobs from the Redis queue that `serve --queue` feeds.
    #[cfg(feature = "serve")]
    Node(Box<NodeArgs>),
    /// Print the structural features of a candidate (.cu) or completion (.md).
    #[command(allow_negative_numbers = true)]
    Features {
        /// The candidate file (`-`: a completion from standard input).
        file: PathBuf,
        /// Task folder: enables the launch plan check and occupancy for its largest config.
        #[arg(long)]
        task: Option<PathBuf>,
        /// Print JSON (features with spans, score, occupancy).
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        compile: CompileArgs,
    },
    /// Dataset statistics and RL prompt export.
    Dataset {
        #[command(subcommand)]
        command: DatasetCommand,
    },
    /// Train the pairwise ranker on the dataset's timed pairs (and cross-validate it).
    #[command(allow_negative_numbers = true)]
    TrainRanker {
        /// Folder of task folders (the crate's: fixtures/tasks).
        #[arg(long)]
        tasks: PathBuf,
        /// Timings from `cudaperf measure` (the crate's: fixtures/timings/h200.json).
        #[arg(long)]
        timings: PathBuf,
        /// Output model folder.
        #[arg(long)]
        out: PathBuf,
        /// PNG plot of the training curve (default: <out>/training.png).
        #[arg(long)]
        plot: Option<PathBuf>,
        /// Leave-tasks-out folds for the cross-validation report (0: skip it; else 2 or more).
        #[arg(long, default_value_t = 5, value_parser = count)]
        cv: usize,
        /// Hashed syntax n-gram buckets added to the structural features (0: none).
        #[arg(long, default_value_t = 0, value_parser = count)]
        ngrams: usize,
        /// Include the launch-plan features (`launch_*`: each implementation's `// @launch`
        /// plan resolved on its task's timed config — launches, blocks per SM against the
        /// H200's 132 SMs, passes over the data, serial elements per thread, atomics per
        /// element). On by default for new models; `--launch-features false` trains on the
        /// source features only. The cross-validation report shows the ranker with and
        /// without them either way.
        #[arg(long, default_value_t = true, action = clap::ArgAction::Set, value_name = "BOOL")]
        launch_features: bool,
        /// Training epochs (maximum; early stopping may end sooner; at least 1).
        #[arg(long, default_value_t = 300, value_parser = count)]
        epochs: usize,
        /// Random seed.
        #[arg(long, default_value_t = 42, value_parser = whole)]
        seed: u64,
        /// Also write the cross-validation report as JSON here.
        #[arg(long)]
        report: Option<PathBuf>,
    },
    /// Predict which of two candidates is faster, with the probability.
    Rank {
        /// The task folder.
        #[arg(long)]
        task: PathBuf,
        /// First candidate.
        a: PathBuf,
        /// Second candidate.
        b: PathBuf,
        /// Ranker model folder (default: $CUDAPERF_RANKER_MODEL, else the model built into
        /// cudaperf).
        #[arg(long)]
        model: Option<PathBuf>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Time every implementation of every task on the GPU against its reference.
    #[command(allow_negative_numbers = true)]
    Measure {
        /// Folder of task folders (the crate's: fixtures/tasks).
        #[arg(long)]
        tasks: PathBuf,
        /// Output timings file (e.g. fixtures/timings/h200.json).
        #[arg(long)]
        out: PathBuf,
        /// Only these task ids (comma-separated).
        #[arg(long, value_delimiter = ',')]
        only: Vec<String>,
        /// GPU workers per visible GPU (at least 1).
        #[arg(long, default_value_t = 1, value_parser = count)]
        workers_per_gpu: usize,
        /// Time budget of each implementation's job (all its runs), seconds.
        #[arg(long, default_value_t = 300.0, value_parser = seconds)]
        timeout: f64,
        /// Longest single run of an implementation, seconds (the dataset's slowest runs
        /// take about 9 s on an H200).
        #[arg(long, default_value_t = 30.0, value_parser = seconds)]
        run_timeout: f64,
        #[command(flatten)]
        compile: CompileArgs,
    },
}

/// Where the Redis queue is and how it behaves (`serve --queue` and `node`).
#[cfg(feature = "serve")]
#[derive(clap::Args, Clone)]
struct QueueArgs {
    /// Key prefix of the streams and results in Redis.
    #[arg(long, default_value = "cudaperf")]
    queue_prefix: String,
    /// Seconds a job may sit with a node that stopped renewing its claim before another
    /// node takes it over.
    #[arg(long, default_value_t = 60.0)]
    visibility_timeout: f64,
    /// Seconds results are kept in Redis.
    #[arg(long, default_value_t = 3600.0)]
    result_ttl: f64,
    /// Deliveries after which a job is answered `crashed` instead of run again.
    #[arg(long, default_value_t = 3)]
    max_deliveries: usize,
}

#[cfg(feature = "serve")]
impl QueueArgs {
    fn config(&self, url: &str) -> Result<cudaperf::serve::QueueConfig, String> {
        let secs = |name: &str, v: f64| {
            if v > 0.0 && v.is_finite() {
                Ok(std::time::Duration::from_secs_f64(v))
            } else {
                Err(format!("--{name} must be a positive number of seconds"))
            }
        };
        Ok(cudaperf::serve::QueueConfig {
            url: url.to_string(),
            prefix: self.queue_prefix.clone(),
            visibility_timeout: secs("visibility-timeout", self.visibility_timeout)?,
            result_ttl: secs("result-ttl", self.result_ttl)?,
            max_deliveries: self.max_deliveries.max(1),
        })
    }
}

#[cfg(feature = "serve")]
fn eval_options(compile: &CompileArgs, no_gpu: bool) -> Result<EvalOptions, String> {
    Ok(EvalOptions {
        compile: compile.options(),
        no_gpu,
        ..Default::default()
    })
}

#[cfg(feature = "serve")]
#[derive(clap::Args)]
struct ServeArgs {
    /// Address to bind.
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    /// Port (0: any free port; the bound address is printed on stdout).
    #[arg(long, default_value_t = 8000)]
    port: u16,
    /// Tasks folder served by id (without it, requests carry inline tasks).
    #[arg(long)]
    tasks: Option<PathBuf>,
    /// Scoring threads (each scores one group at a time).
    #[arg(long, default_value_t = 2)]
    workers: usize,
    /// Jobs that may wait before requests are refused with 429.
    #[arg(long, default_value_t = 64)]
    queue_len: usize,
    /// Most completions in one request.
    #[arg(long, default_value_t = 64)]
    max_completions: usize,
    /// Largest request body in bytes.
    #[arg(long, default_value_t = 8 << 20)]
    max_body_bytes: usize,
    /// Deadline of a request that gives none, seconds.
    #[arg(long, default_value_t = 600.0)]
    deadline: f64,
    /// Longest deadline a request may ask for, seconds.
    #[arg(long, default_value_t = 3600.0)]
    max_deadline: f64,
    /// Put jobs on this Redis queue (redis://host:port) for `cudaperf node`s instead of
    /// scoring in this process.
    #[arg(long)]
    queue: Option<String>,
    #[command(flatten)]
    queue_args: QueueArgs,
    /// Seconds a client may take to send a request's head or body, and a kept-alive
    /// connection may wait for its next request.
    #[arg(long, default_value_t = 30.0)]
    read_timeout: f64,
    /// Seconds requests in flight may take to finish after SIGTERM (a second signal exits
    /// at once).
    #[arg(long, default_value_t = 30.0)]
    shutdown_grace: f64,
    /// Skip the GPU stages even when a GPU is present.
    #[arg(long)]
    no_gpu: bool,
    #[command(flatten)]
    compile: CompileArgs,
}

#[cfg(feature = "serve")]
#[derive(clap::Args)]
struct NodeArgs {
    /// The Redis queue (redis://host:port) that `cudaperf serve --queue` feeds.
    #[arg(long)]
    queue: String,
    #[command(flatten)]
    queue_args: QueueArgs,
    /// Consumer name (default: <hostname>-<pid>).
    #[arg(long)]
    name: Option<String>,
    /// Tasks folder for jobs that name a task by id (the server's); required unless
    /// --inline-only.
    #[arg(long)]
    tasks: Option<PathBuf>,
    /// Start without --tasks: every job carries an inline task.
    #[arg(long)]
    inline_only: bool,
    /// Jobs scored at once.
    #[arg(long, default_value_t = 1)]
    concurrency: usize,
    /// Skip the GPU stages even when a GPU is present.
    #[arg(long)]
    no_gpu: bool,
    #[command(flatten)]
    compile: CompileArgs,
}

#[cfg(feature = "serve")]
fn serve(a: ServeArgs) -> Result<ExitCode, String> {
    let secs = |name: &str, v: f64| {
        if v > 0.0 && v.is_finite() {
            Ok(std::time::Duration::from_secs_f64(v))
        } else {
            Err(format!("--{name} must be a positive number of seconds"))
        }
    };
    let config = cudaperf::serve::ServeConfig {
        host: a.host,
        port: a.port,
        tasks_dir: a.tasks,
        eval: eval_options(&a.compile, a.no_gpu)?,
        workers: a.workers.max(1),
        limits: cudaperf::serve::Limits {
            max_body_bytes: a.max_body_bytes,
            max_completions: a.max_completions.max(1),
            queue_len: a.queue_len.max(1),
            default_deadline: secs("deadline", a.deadline)?,
            max_deadline: secs("max-deadline", a.max_deadline)?,
        },
        queue: match &a.queue {
            Some(url) => Some(a.queue_args.config(url)?),
            None => None,
        },
        read_timeout: secs("read-timeout", a.read_timeout)?,
        shutdown_grace: secs("shutdown-grace", a.shutdown_grace)?,
    };
    cudaperf::serve::run_server(config).map_err(|e| e.to_string())?;
    Ok(ExitCode::SUCCESS)
}

#[cfg(feature = "serve")]
fn node(a: NodeArgs) -> Result<ExitCode, String> {
    let config = cudaperf::serve::NodeConfig {
        queue: a.queue_args.config(&a.queue)?,
        name: a.name,
        tasks_dir: a.tasks,
        inline_only: a.inline_only,
        eval: eval_options(&a.compile, a.no_gpu)?,
        concurrency: a.concurrency.max(1),
    };
    cudaperf::serve::run_node(config).map_err(|e| e.to_string())?;
    Ok(ExitCode::SUCCESS)
}

#[derive(Subcommand)]
enum DatasetCommand {
    /// Tasks by kind, implementations, configs, timed pairs.
    Stats {
        /// Folder of task folders (the crate's: fixtures/tasks).
        #[arg(long)]
        tasks: PathBuf,
        /// Timings file for the pair count (none: pairs are not counted).
        #[arg(long)]
        timings: Option<PathBuf>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Write one RL prompt per task.
    Export {
        /// Folder of task folders (the crate's: fixtures/tasks).
        #[arg(long)]
        tasks: PathBuf,
        /// Output format (jsonl: {"id", "kind", "prompt"} per line).
        #[arg(long, default_value = "jsonl")]
        format: String,
        /// Only the train or test split (deterministic by task id), or all.
        #[arg(long, default_value = "all")]
        split: String,
        /// Output file (default: standard output).
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// Run every task's original (C with the system compiler; PyTorch, or the task's NumPy
    /// twin where PyTorch is not importable) on the smallest config's inputs, from the CPU
    /// twin of the device input generator; with --gpu, compare with the reference run on the
    /// same inputs here, and the generator with the device's; with --samples, compare with
    /// reference values sampled on a GPU earlier. Exits 1 when a task fails.
    CheckOriginals(check_originals::Args),
    /// PyTorch-eager time of every torch2cuda task's original on its timed config (this
    /// machine's GPU; needs python3 with torch), next to the reference's from a timings file.
    TorchEager {
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

/// Most bytes read from one candidate file or standard input; the extract stage refuses
/// anything over its own (smaller) caps with a clear error, without reading gigabytes first.
const MAX_INPUT_BYTES: u64 = 64 << 20;

fn is_stdin(path: &std::path::Path) -> bool {
    path.as_os_str() == "-"
}

fn read_submission(path: &PathBuf) -> Result<Submission, String> {
    use std::io::Read;
    let mut bytes = Vec::new();
    let read = if is_stdin(path) {
        std::io::stdin()
            .lock()
            .take(MAX_INPUT_BYTES + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| format!("cannot read standard input: {e}"))
    } else {
        std::fs::File::open(path)
            .and_then(|f| f.take(MAX_INPUT_BYTES + 1).read_to_end(&mut bytes))
            .map_err(|e| format!("cannot read {}: {e}", path.display()))
    };
    read?;
    if bytes.len() as u64 > MAX_INPUT_BYTES {
        return Err(format!(
            "{}: more than {MAX_INPUT_BYTES} bytes; candidates are a few KiB",
            display_name(path)
        ));
    }
    let text = String::from_utf8_lossy(&bytes).into_owned();
    if is_stdin(path) {
        return Ok(Submission::from_completion(text));
    }
    let is_source = matches!(
        path.extension().and_then(|e| e.to_str()),
        Some("cu" | "cuh" | "cpp" | "cc")
    );
    Ok(if is_source {
        Submission::from_source(text)
    } else {
        Submission::from_completion(text)
    })
}

/// How a candidate path is named in output.
fn display_name(path: &std::path::Path) -> String {
    if is_stdin(path) {
        "<stdin>".into()
    } else {
        path.display().to_string()
    }
}

/// At most one `-` among the candidate files (standard input can be read once).
fn check_stdin_once(files: &[PathBuf]) -> Result<(), String> {
    if files.iter().filter(|f| is_stdin(f)).count() > 1 {
        return Err("`-` (standard input) may be given only once".into());
    }
    Ok(())
}

fn score(
    task: PathBuf,
    files: Vec<PathBuf>,
    reward: String,
    step: u64,
    json: bool,
    compile: CompileArgs,
) -> Result<ExitCode, String> {
    check_stdin_once(&files)?;
    let task = Task::load(&task).map_err(|e| e.to_string())?;
    let reward = preset(&reward)?;
    let subs = files
        .iter()
        .map(read_submission)
        .collect::<Result<Vec<_>, _>>()?;
    let evaluator = evaluator(EvalOptions {
        compile: compile.options(),
        ..Default::default()
    })?;
    let ctx = Context::new(&task, &evaluator).at_step(step);
    let mut outputs = Vec::new();
    for (file, sub) in files.iter().zip(&subs) {
        let (value, mut report, error) = match reward.score(&ctx, sub) {
            Ok(s) => (
                Some(s.value),
                serde_json::to_value(&s.report).map_err(|e| e.to_string())?,
                None,
            ),
            Err(e) => {
                let partial = match &e {
                    RewardError::Unavailable { report, .. } => {
                        serde_json::to_value(report).map_err(|e| e.to_string())?
                    }
                    _ => serde_json::Value::Object(Default::default()),
                };
                (None, partial, Some(e.to_string()))
            }
        };
        if let Some(obj) = report.as_object_mut() {
            obj.insert("file".into(), display_name(file).into());
            obj.insert(
                "value".into(),
                value.map_or(serde_json::Value::Null, Into::into),
            );
            if let Some(e) = &error {
                obj.insert("error".into(), e.clone().into());
            }
        }
        if !json {
            let stages = &report["stages"];
            println!(
                "{}: value {} | {} | extract {} | compile {} | {}",
                display_name(file),
                value.map_or("n/a".to_string(), |v| format!("{v:.4}")),
                report["verdict"].as_str().unwrap_or("?"),
                stages["extract"]["ok"],
                stages["compile"]["status"],
                error.as_deref().unwrap_or(""),
            );
        }
        outputs.push(report);
    }
    if json {
        let out = if outputs.len() == 1 {
            outputs.remove(0)
        } else {
            serde_json::Value::Array(outputs)
        };
        println!(
            "{}",
            serde_json::to_string_pretty(&out).map_err(|e| e.to_string())?
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn features(
    file: PathBuf,
    task: Option<PathBuf>,
    json: bool,
    compile: CompileArgs,
) -> Result<ExitCode, String> {
    use cudaperf::reward::{Stage, StructureStage};
    let sub = read_submission(&file)?;
    let code = match (sub.code(), sub.candidate()) {
        (Some(code), _) => code.to_string(),
        (None, Err(e)) => return Err(format!("{}: {e}", display_name(&file))),
        (None, Ok(_)) => return Err(format!("{}: no code block found", display_name(&file))),
    };
    let stage: StructureStage = match task {
        Some(t) => {
            let task = Task::load(&t).map_err(|e| e.to_string())?;
            let evaluator = evaluator(EvalOptions {
                compile: compile.options(),
                no_gpu: true,
                ..Default::default()
            })?;
            let eval = evaluator.evaluate(&task, &sub, Stage::Structure);
            if let Some(err) = &eval.stages.extract.error {
                eprintln!("note: {err}");
            }
            eval.stages
                .structure
                .ok_or("the structure stage did not run")?
        }
        None => {
            // No task: no ABI to check; occupancy only for launches whose block size and
            // kernel resources are known without sizes.
            let tree = cudaperf::analysis::SourceTree::parse(code.as_bytes())
                .map_err(|e| format!("{}: {e}", display_name(&file)))?;
            let features = cudaperf::analysis::analyze_tree(&tree);
            let mut occupancy = Vec::new();
            if let Ok(cand) = sub.candidate() {
                let compiler = cudaperf::compile::Compiler::new(compile.options())
                    .map_err(|e| e.to_string())?;
                if let Some(module) = compiler.compile(cand).module() {
                    let spec = cudaperf::analysis::DeviceSpec::by_name("H200")
                        .unwrap_or(&cudaperf::analysis::DEVICES[0]);
                    let no_sizes = Default::default();
                    let dims = |e: &[cudaperf::expr::Expr]| -> Option<[u32; 3]> {
                        let mut d = [1u32; 3];
                        for (i, x) in e.iter().enumerate().take(3) {
                            d[i] = u32::try_from(x.eval_int(&no_sizes).ok()?).ok()?.min(4096);
                        }
                        Some(d)
                    };
                    let launches = cand
                        .launches
                        .iter()
                        .filter_map(|l| {
                            let smem = l
                                .smem
                                .as_ref()
                                .map_or(Some(0), |e| e.eval_int(&no_sizes).ok())?;
                            Some(cudaperf::candidate::ResolvedLaunch {
                                kernel: l.kernel.clone(),
                                grid: [1, 1, 1],
                                block: dims(&l.block)?,
                                smem: u32::try_from(smem.max(0)).unwrap_or(u32::MAX),
                                args: Vec::new(),
                            })
                        })
                        .collect();
                    let plan = cudaperf::candidate::ResolvedPlan {
                        launches,
                        scratch_lens: Vec::new(),
                    };
                    occupancy = cudaperf::pipeline::static_occupancy(&plan, &module.kernels, spec);
                }
            }
            // Without a task there is no spill count either (as before).
            cudaperf::pipeline::structure_stage_from(&features, occupancy, &[])
        }
    };
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&stage).map_err(|e| e.to_string())?
        );
    } else {
        let t = serde_json::to_value(&stage.features.totals).map_err(|e| e.to_string())?;
        println!("{}: structural score {:.3}", file.display(), stage.score);
        println!("  global accesses: {}", t["global_accesses"]);
        for o in &stage.occupancy {
            println!(
                "  occupancy {}: {:.0}% ({} threads, {} registers, limited by {})",
                o.kernel,
                100.0 * o.occupancy,
                o.block_threads,
                o.registers,
                o.limiter
            );
        }
        for term in stage.terms.iter().filter(|t| t.value != 0.0) {
            println!("  {:<32} {:+.3}", term.name, term.value);
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn dataset(command: DatasetCommand) -> Result<ExitCode, String> {
    use cudaperf::dataset::Dataset;
    match command {
        DatasetCommand::Stats {
            tasks,
            timings,
            json,
        } => {
            let ds = Dataset::load(&tasks).map_err(|e| e.to_string())?;
            let path = timings;
            let t = match &path {
                Some(p) => Some(cudaperf::timings::Timings::load(p).map_err(|e| e.to_string())?),
                None => None,
            };
            let s = ds.stats(t.as_ref());
            if json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&s).map_err(|e| e.to_string())?
                );
            } else {
                println!(
                    "tasks: {} (c2cuda {}, torch2cuda {})",
                    s.tasks, s.by_kind.c2cuda, s.by_kind.torch2cuda
                );
                println!(
                    "implementations: {} (reference included)",
                    s.implementations
                );
                println!("configs: {}", s.configs);
                match &path {
                    Some(p) => println!(
                        "pairs: {} (from {}, ties within noise dropped)",
                        s.pairs,
                        p.display()
                    ),
                    None => println!("pairs: not counted (give --timings, e.g. fixtures/timings/h200.json, written by `cudaperf measure` on a GPU)"),
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        DatasetCommand::Export {
            tasks,
            format,
            split,
            out,
        } => {
            if format != "jsonl" {
                return Err(format!("unknown format `{format}` (expected jsonl)"));
            }
            let ds = Dataset::load(&tasks).map_err(|e| e.to_string())?;
            let (train, test) = ds.split(0.2, 0);
            let chosen: Vec<&Task> = match split.as_str() {
                "all" => ds.tasks.iter().collect(),
                "train" => train,
                "test" => test,
                other => {
                    return Err(format!(
                        "unknown split `{other}` (expected all, train or test)"
                    ))
                }
            };
            let mut text = String::new();
            for t in chosen {
                let line =
                    serde_json::json!({"id": t.id, "kind": t.kind.as_str(), "prompt": t.prompt()});
                text.push_str(&line.to_string());
                text.push('\n');
            }
            match out {
                Some(p) => std::fs::write(&p, text)
                    .map_err(|e| format!("cannot write {}: {e}", p.display()))?,
                None => print!("{text}"),
            }
            Ok(ExitCode::SUCCESS)
        }
        DatasetCommand::CheckOriginals(args) => check_originals::run(args),
        DatasetCommand::TorchEager {
            tasks,
            only,
            timings,
            runs,
            out,
        } => check_originals::torch_eager(tasks, only, timings, runs, out),
    }
}

#[allow(clippy::too_many_arguments)]
fn train_ranker(
    tasks: PathBuf,
    timings: PathBuf,
    out: PathBuf,
    plot: Option<PathBuf>,
    cv: usize,
    ngrams: usize,
    launch_features: bool,
    epochs: usize,
    seed: u64,
    report: Option<PathBuf>,
) -> Result<ExitCode, String> {
    use cudaperf::ranker::{self, FeatureSet, RankerConfig, LAUNCH_PREFIX};
    // Every argument is checked before the (long) training starts.
    if epochs == 0 {
        return Err("--epochs must be at least 1".into());
    }
    if cv == 1 {
        return Err("--cv must be 0 (no cross-validation) or at least 2 folds".into());
    }
    if ngrams > 4096 {
        return Err(format!("--ngrams {ngrams}: at most 4096 buckets"));
    }
    let png = plot.unwrap_or_else(|| out.join("training.png"));
    if png.extension().and_then(|e| e.to_str()) != Some("png") {
        return Err(format!(
            "--plot {}: the curve is a PNG file (*.png)",
            png.display()
        ));
    }
    check_writable_dir(&out).map_err(|e| format!("--out {}: {e}", out.display()))?;
    for (flag, file) in [("--plot", Some(&png)), ("--report", report.as_ref())] {
        if let Some(f) = file {
            check_output_file(f).map_err(|e| format!("{flag} {}: {e}", f.display()))?;
        }
    }
    let config = RankerConfig::new().with_epochs(epochs).with_seed(seed);
    config.validate().map_err(|e| e.to_string())?;
    let ds = cudaperf::dataset::Dataset::load(&tasks).map_err(|e| format!("--tasks: {e}"))?;
    let t = cudaperf::timings::Timings::load(&timings).map_err(|e| format!("--timings: {e}"))?;
    // The data with launch-plan features (the cross-validation compares with and without
    // them); without the flag a plan that does not resolve only drops that comparison.
    let with_launch = ranker::ranking_data(
        &ds,
        &t,
        &FeatureSet {
            launch: true,
            traffic: true,
            ngram_buckets: ngrams,
        },
    );
    let (data, full) = match (with_launch, launch_features) {
        (Ok(full), true) => (full.clone(), Some(full)),
        (Ok(full), false) => (
            full.select_features(|n| {
                !n.starts_with(LAUNCH_PREFIX) && !n.starts_with(ranker::TRAFFIC_PREFIX)
            }),
            Some(full),
        ),
        (Err(e), true) => return Err(e.to_string()),
        (Err(e), false) => {
            eprintln!("launch-plan features unavailable, compared without them: {e}");
            let plain = FeatureSet {
                launch: false,
                traffic: false,
                ngram_buckets: ngrams,
            };
            (
                ranker::ranking_data(&ds, &t, &plain).map_err(|e| e.to_string())?,
                None,
            )
        }
    };
    if cv > data.tasks().len() {
        return Err(format!(
            "--cv {cv}: only {} tasks have timed pairs, so at most {} folds",
            data.tasks().len(),
            data.tasks().len()
        ));
    }
    eprintln!(
        "{} samples, {} pairs, {} features, {} tasks (timings: {} on {}, {})",
        data.samples.len(),
        data.pairs.len(),
        data.feature_names.len(),
        data.tasks().len(),
        timings.display(),
        t.device,
        t.date
    );
    let bar = indicatif::ProgressBar::new(epochs as u64);
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{elapsed_precise} [{bar:30}] epoch {pos}/{len} {msg}",
        )
        .map_err(|e| e.to_string())?,
    );
    let (model, history) = ranker::train(&data, &config, |s| {
        bar.set_position(s.epoch as u64);
        let line = format!(
            "epoch {:>3}: train loss {:.4} acc {:.3} | val loss {} acc {}{}",
            s.epoch,
            s.train_loss,
            s.train_accuracy,
            s.val_loss.map_or("-".into(), |v| format!("{v:.4}")),
            s.val_accuracy.map_or("-".into(), |v| format!("{v:.3}")),
            if s.is_best { " *" } else { "" }
        );
        bar.set_message(line.clone());
        bar.suspend(|| eprintln!("{line}"));
    })
    .map_err(|e| e.to_string())?;
    bar.finish_and_clear();
    model.save(&out).map_err(|e| e.to_string())?;
    ranker::plot_history(&history, &png).map_err(|e| e.to_string())?;
    eprintln!(
        "trained in {:.1} s ({} epochs, best {}); model in {}, curve in {}",
        history.seconds,
        history.epochs.len(),
        history.best_epoch,
        out.display(),
        png.display()
    );
    if cv >= 2 {
        let compared = ranker::compare_on_folds(&ds, full.as_ref().unwrap_or(&data), cv, &config)
            .map_err(|e| e.to_string())?;
        println!("leave-tasks-out {cv}-fold pairwise accuracy (chance 50 %):");
        print!("{}", compared.table());
        if let Some(p) = report {
            write_json(&p, &compared)?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn rank(
    task: PathBuf,
    a: PathBuf,
    b: PathBuf,
    model: Option<PathBuf>,
    json: bool,
) -> Result<ExitCode, String> {
    use cudaperf::ranker::{features_for, FeatureSet, TimedPlan, TrainedRanker};
    check_stdin_once(&[a.clone(), b.clone()])?;
    let task = Task::load(&task).map_err(|e| e.to_string())?;
    let model = model.or_else(|| {
        std::env::var_os(cudaperf::pipeline::RANKER_MODEL_ENV)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    });
    let ranker = match &model {
        Some(dir) => TrainedRanker::load_unchecked(dir),
        None => TrainedRanker::shipped(),
    }
    .map_err(|e| e.to_string())?;
    let score = |p: &PathBuf| -> Result<Vec<f32>, String> {
        let sub = read_submission(p)?;
        let code = match (sub.code(), sub.candidate()) {
            (Some(code), _) => code,
            (None, Err(e)) => return Err(format!("{}: {e}", display_name(p))),
            (None, Ok(_)) => return Err(format!("{}: no code block found", display_name(p))),
        };
        // A model with launch-plan features needs the plan on the task's timed config.
        let plan = if FeatureSet::of(ranker.feature_names()).needs_plan() {
            let what = display_name(p);
            let limits = cudaperf::candidate::PlanLimits::default();
            Some(TimedPlan::of_source(&task, code, &limits, &what).map_err(|e| e.to_string())?)
        } else {
            None
        };
        let input = plan.as_ref().map(|p| p.input(&task, code));
        let f = features_for(code, input.as_ref(), ranker.feature_names())
            .map_err(|e| format!("{}: {e}", display_name(p)))?;
        ranker.member_scores(&f).map_err(|e| e.to_string())
    };
    let (ma, mb) = (score(&a)?, score(&b)?);
    let verdict = ranker.compare_scores(&ma, &mb, None);
    let mean = |m: &[f32]| m.iter().sum::<f32>() / m.len().max(1) as f32;
    let (sa, sb) = (mean(&ma), mean(&mb));
    let p_a = f64::from(verdict.prob_faster);
    let (winner, p) = if p_a >= 0.5 {
        (&a, p_a)
    } else {
        (&b, 1.0 - p_a)
    };
    if json {
        let v = serde_json::json!({
            "task": task.id, "a": display_name(&a), "b": display_name(&b),
            "score_a": sa, "score_b": sb, "prob_a_faster": p_a,
            "predicted_faster": display_name(winner), "probability": p,
            "uncertainty": verdict.uncertainty,
            "model": model.as_ref().map_or_else(|| cudaperf::ranker::SHIPPED_ORIGIN.to_string(), |m| m.display().to_string()),
        });
        println!(
            "{}",
            serde_json::to_string_pretty(&v).map_err(|e| e.to_string())?
        );
    } else {
        println!(
            "{} is predicted faster (p = {:.3}, ensemble disagreement {:.3}; scores {:.3} vs {:.3})",
            display_name(winner),
            p,
            verdict.uncertainty,
            sa,
            sb
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// Today's UTC date as YYYY-MM-DD (civil-from-days, no date crate needed).
fn today() -> String {
    let days = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() / 86400)
        .unwrap_or(0) as i64;
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
    let entries =
        std::fs::read_dir(dir).map_err(|e| format!("cannot read {}: {e}", dir.display()))?;
    let mut dirs: Vec<PathBuf> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.join("task.toml").is_file())
        .collect();
    dirs.sort();
    for d in dirs {
        let id = d
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default()
            .to_string();
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

fn measure(
    dir: PathBuf,
    out: PathBuf,
    only: Vec<String>,
    workers_per_gpu: usize,
    (timeout, run_timeout): (f64, f64),
    compile: CompileArgs,
) -> Result<ExitCode, String> {
    use cudaperf::reward::Stage;
    use cudaperf::timings::{ImplTiming, TaskTimings, Timings};
    if workers_per_gpu == 0 {
        return Err("--workers-per-gpu must be at least 1".into());
    }
    let tasks = load_tasks(&dir, &only)?;
    let evaluator = evaluator(EvalOptions {
        compile: compile.options(),
        exec: cudaperf::exec::ExecOptions {
            workers_per_gpu,
            timeout: std::time::Duration::from_secs_f64(timeout.max(1.0)),
            run_timeout: std::time::Duration::from_secs_f64(run_timeout.max(1.0)),
            ..Default::default()
        },
        ..Default::default()
    })?;
    evaluator.executor().map_err(|e| e.to_string())?;
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
        let subs: Vec<Submission> = impls
            .iter()
            .map(|i| Submission::from_source(i.source.clone()))
            .collect();
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
            let line = format!(
                "{:<28} {:<36} {:<10} {}",
                task.id,
                imp.name,
                verdict.as_str(),
                t.map_or_else(
                    || reason.clone().unwrap_or_default(),
                    |t| format!(
                        "{:>10.1} us  ref {:>10.1} us  x{:.3}",
                        t.candidate_us, t.reference_us, t.raw_speedup
                    )
                )
            );
            // println on a hidden bar (not a terminal) prints nothing; suspend always runs.
            bar.suspend(|| eprintln!("{line}"));
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
        // Written after every task: a run cut short keeps what it measured.
        write_json(&out, &timings)?;
    }
    bar.finish_and_clear();
    eprintln!("measured {total} implementations of {} tasks on {}: {failures} not correct or not timed; wrote {}", tasks.len(), timings.device, out.display());
    Ok(if failures == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// Creates `dir` if needed and checks that files can be written in it.
fn check_writable_dir(dir: &std::path::Path) -> std::io::Result<()> {
    if dir.exists() && !dir.is_dir() {
        return Err(std::io::Error::other("exists and is not a folder"));
    }
    std::fs::create_dir_all(dir)?;
    let probe = dir.join(format!(".cudaperf-write-check.{}", std::process::id()));
    std::fs::write(&probe, b"")?;
    std::fs::remove_file(&probe)
}

/// Checks that `file` can be written (its folder is created if needed).
fn check_output_file(file: &std::path::Path) -> std::io::Result<()> {
    if file.is_dir() {
        return Err(std::io::Error::other("is a folder"));
    }
    match file.parent().filter(|p| !p.as_os_str().is_empty()) {
        Some(parent) => check_writable_dir(parent),
        None => check_writable_dir(std::path::Path::new(".")),
    }
}

fn write_json(out: &std::path::Path, value: &impl serde::Serialize) -> Result<(), String> {
    if let Some(parent) = out.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)
            .map_err(|e| format!("cannot create {}: {e}", parent.display()))?;
    }
    let text = serde_json::to_string_pretty(value).map_err(|e| e.to_string())?;
    let tmp = out.with_extension("json.tmp");
    std::fs::write(&tmp, text + "\n")
        .map_err(|e| format!("cannot write {}: {e}", tmp.display()))?;
    std::fs::rename(&tmp, out).map_err(|e| format!("cannot write {}: {e}", out.display()))
}

/// The first human-readable reason an evaluation is not correct.
fn first_reason(e: &cudaperf::reward::Evaluation) -> String {
    if let Some(err) = &e.stages.extract.error {
        return err.clone();
    }
    if let Some(c) = e.stages.compile.as_ref().filter(|c| !c.ok) {
        return c
            .reason
            .clone()
            .unwrap_or_else(|| c.log.lines().take(3).collect::<Vec<_>>().join(" "));
    }
    if let Some(c) = &e.stages.correctness {
        if let Some(f) = c.configs.iter().find(|c| !c.passed) {
            return format!("config {}: {}", f.config, f.reasons.join("; "));
        }
    }
    e.stages
        .execute
        .as_ref()
        .map(|x| format!("{:?}", x.status))
        .unwrap_or_else(|| "not run".into())
}

fn main() -> ExitCode {
    // Pools start workers as `cudaperf __cudaperf_worker <role>`; nothing else runs then.
    cudaperf::worker::run_if_requested();
    // Die quietly on a closed pipe (`cudaperf score ... | head`) like other Unix tools.
    #[cfg(unix)]
    // SAFETY: restoring the default disposition of SIGPIPE before any thread starts.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    let cli = Cli::parse();
    // Colour codes only on a terminal: logs sent to a file or a pipe stay plain text.
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_env("CUDAPERF_LOG"))
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr)
        .init();
    let result = match cli.command {
        #[cfg(feature = "serve")]
        Command::Serve(a) => serve(*a),
        #[cfg(feature = "serve")]
        Command::Node(a) => node(*a),
        Command::Score {
            task,
            files,
            reward,
            step,
            json,
            compile,
        } => score(task, files, reward, step, json, compile),
        Command::TrainRanker {
            tasks,
            timings,
            out,
            plot,
            cv,
            ngrams,
            launch_features,
            epochs,
            seed,
            report,
        } => train_ranker(
            tasks,
            timings,
            out,
            plot,
            cv,
            ngrams,
            launch_features,
            epochs,
            seed,
            report,
        ),
        Command::Rank {
            task,
            a,
            b,
            model,
            json,
        } => rank(task, a, b, model, json),
        Command::Features {
            file,
            task,
            json,
            compile,
        } => features(file, task, json, compile),
        Command::Dataset { command } => dataset(command),
        Command::Measure {
            tasks,
            out,
            only,
            workers_per_gpu,
            timeout,
            run_timeout,
            compile,
        } => measure(
            tasks,
            out,
            only,
            workers_per_gpu,
            (timeout, run_timeout),
            compile,
        ),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}
