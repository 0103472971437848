//! `cudaperf features`: the structural features of one candidate, with or without a task.

use std::path::PathBuf;
use std::process::ExitCode;

use cudaperf::analysis::{AnalysisError, DeviceSpec, SourceTree, DEVICES};
use cudaperf::candidate::{Candidate, ResolvedLaunch, ResolvedPlan};
use cudaperf::compile::{Compiler, CompilerError};
use cudaperf::expr::Expr;
use cudaperf::pipeline::report::{LaunchOccupancy, StructureStage};
use cudaperf::pipeline::{EvalOptions, Stage, Submission};

use crate::args::{evaluator, CompileArgs, EvaluatorError};
use crate::input::{self, InputError, TaskArgError};
use crate::output::{pretty, OutputError};

/// Print the structural features of a candidate (.cu) or completion (.md).
#[derive(clap::Args)]
pub struct Args {
    /// The candidate file (`-`: standard input, a completion or CUDA source).
    file: PathBuf,
    /// Task folder: enables the launch plan check and occupancy for its largest config.
    #[arg(long)]
    task: Option<PathBuf>,
    /// Print JSON (features with spans, score, occupancy).
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    compile: CompileArgs,
}

/// Why `features` could not report.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The candidate could not be read.
    #[error(transparent)]
    Input(#[from] InputError),
    /// The file holds no code to analyse.
    #[error("{file}: {message}")]
    NoCode {
        /// The file, or `<stdin>`.
        file: String,
        /// Why: the extract error, or "no code block found".
        message: String,
    },
    /// The code could not be parsed.
    #[error("{file}: {source}")]
    Parse {
        /// The file, or `<stdin>`.
        file: String,
        /// The parser's error.
        source: AnalysisError,
    },
    /// `--task` is not a task that loads.
    #[error(transparent)]
    Task(#[from] TaskArgError),
    /// The compile flags are unusable.
    #[error(transparent)]
    Evaluator(#[from] EvaluatorError),
    /// The compiler could not be set up (no task given).
    #[error(transparent)]
    Compiler(#[from] CompilerError),
    /// The pipeline stopped before the structure stage.
    #[error("the structure stage did not run")]
    NoStructure,
    /// The result could not be printed.
    #[error(transparent)]
    Output(#[from] OutputError),
}

/// Runs `cudaperf features`.
pub fn run(a: Args) -> Result<ExitCode, Error> {
    let sub = input::read_submission(&a.file)?;
    let name = input::display_name(&a.file);
    let code = match (sub.code(), sub.candidate()) {
        (Some(code), _) => code.to_string(),
        (None, Err(e)) => {
            return Err(Error::NoCode {
                file: name,
                message: e.to_string(),
            })
        }
        (None, Ok(_)) => {
            return Err(Error::NoCode {
                file: name,
                message: "no code block found".into(),
            })
        }
    };
    let stage = match &a.task {
        Some(t) => structure_with_task(t, &sub, &a.compile)?,
        None => structure_without_task(&code, &name, &sub, &a.compile)?,
    };
    if a.json {
        println!("{}", pretty("the structure stage", &stage)?);
    } else {
        print_stage(&a.file, &stage)?;
    }
    Ok(ExitCode::SUCCESS)
}

/// The pipeline's structure stage for the task (plan check, occupancy, spills).
fn structure_with_task(
    task: &std::path::Path,
    sub: &Submission,
    compile: &CompileArgs,
) -> Result<StructureStage, Error> {
    let task = input::load_task(task)?;
    let evaluator = evaluator(EvalOptions {
        compile: compile.options(),
        no_gpu: true,
        ..Default::default()
    })?;
    let eval = evaluator.evaluate(&task, sub, Stage::Structure);
    if let Some(err) = &eval.stages.extract.error() {
        eprintln!("note: {err}");
    }
    eval.stages.structure.ok_or(Error::NoStructure)
}

/// No task: no ABI to check, no spill count; occupancy only for launches whose block size
/// and kernel resources are known without sizes.
fn structure_without_task(
    code: &str,
    name: &str,
    sub: &Submission,
    compile: &CompileArgs,
) -> Result<StructureStage, Error> {
    let tree = SourceTree::parse(code.as_bytes()).map_err(|source| Error::Parse {
        file: name.to_string(),
        source,
    })?;
    let features = cudaperf::analysis::analyze_tree(&tree);
    let occupancy = match sub.candidate() {
        Ok(cand) => occupancy_without_sizes(cand, compile)?,
        Err(_) => Vec::new(),
    };
    Ok(cudaperf::pipeline::structure_stage_from(
        &features,
        occupancy,
        &[],
    ))
}

/// Occupancy on an H200 of the launches whose block and shared memory do not depend on
/// sizes (grid and arguments are not needed for it).
fn occupancy_without_sizes(
    cand: &Candidate,
    compile: &CompileArgs,
) -> Result<Vec<LaunchOccupancy>, Error> {
    let compiler = Compiler::new(compile.options())?;
    let outcome = compiler.compile(cand);
    let Some(module) = outcome.module() else {
        return Ok(Vec::new());
    };
    let spec = DeviceSpec::by_name("H200").unwrap_or(&DEVICES[0]);
    let no_sizes = Default::default();
    let dims = |e: &[Expr]| -> Option<[u32; 3]> {
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
            Some(ResolvedLaunch {
                kernel: l.kernel.clone(),
                grid: [1, 1, 1],
                block: dims(&l.block)?,
                smem: u32::try_from(smem.max(0)).unwrap_or(u32::MAX),
                args: Vec::new(),
            })
        })
        .collect();
    let plan = ResolvedPlan {
        launches,
        scratch_lens: Vec::new(),
    };
    Ok(cudaperf::pipeline::static_occupancy(
        &plan,
        &module.kernels,
        spec,
    ))
}

/// The plain-text summary: score, global accesses, occupancy, the non-zero terms.
fn print_stage(file: &std::path::Path, stage: &StructureStage) -> Result<(), Error> {
    let t = serde_json::to_value(&stage.features.totals).map_err(|source| OutputError::Json {
        what: "the feature totals",
        source,
    })?;
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
    Ok(())
}
