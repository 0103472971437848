//! `cudaperf tasks`: what tasks there are to score against.

use std::path::PathBuf;
use std::process::ExitCode;

use cudaperf::dataset::{Dataset, DatasetError};
use cudaperf::task::Task;

use crate::args::{LimitArgError, LimitArgs};
use crate::output::{pretty, OutputError};

/// The tasks shipped with the crate (the folder this binary was built from).
const CRATE_TASKS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/tasks");

/// List the tasks and what they are.
#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(clap::Subcommand)]
enum Command {
    /// One line per task: name, family (c2cuda or torch2cuda), buffer dtypes, number of
    /// input configs.
    List(ListArgs),
    /// Import KernelBench-layout problems (`class Model(nn.Module)`, `get_inputs()`,
    /// `get_init_inputs()`) as task folders; needs python3 with PyTorch (CPU is enough).
    Import(ImportArgs),
}

/// `cudaperf tasks import`.
#[derive(clap::Args)]
struct ImportArgs {
    /// Problem files (.py), or folders whose .py files are all imported.
    #[arg(required = true)]
    problems: Vec<PathBuf>,
    /// Folder the task folders are written into (one per problem, named by its id).
    #[arg(long, default_value = ".")]
    out: PathBuf,
    /// Python interpreter with PyTorch.
    #[arg(long, default_value = "python3")]
    python: PathBuf,
    #[command(flatten)]
    limits: LimitArgs,
}

/// `cudaperf tasks list`.
#[derive(clap::Args)]
struct ListArgs {
    /// Folder of task folders (default: the crate's fixtures/tasks).
    #[arg(long)]
    tasks: Option<PathBuf>,
    /// Print JSON: a list of {"name", "family", "dtypes", "configs", "title"}.
    #[arg(long)]
    json: bool,
}

/// Why the tasks could not be listed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No `--tasks` and the crate's folder is not there (an installed binary).
    #[error(
        "no --tasks given and {CRATE_TASKS} does not exist: give --tasks <folder of task folders>"
    )]
    NoDefault,
    /// The folder does not load.
    #[error(transparent)]
    Dataset(#[from] DatasetError),
    /// The list could not be printed.
    #[error(transparent)]
    Output(#[from] OutputError),
    /// `--max-buffer-gib` is unusable.
    #[error(transparent)]
    Limits(#[from] LimitArgError),
    /// A folder of problems could not be read.
    #[error("{path}: {source}")]
    ReadDir {
        /// The folder.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
}

/// One task in the list.
#[derive(serde::Serialize)]
struct Entry<'a> {
    name: &'a str,
    family: &'static str,
    dtypes: Vec<&'static str>,
    configs: usize,
    title: &'a str,
}

impl<'a> Entry<'a> {
    fn of(t: &'a Task) -> Entry<'a> {
        let mut dtypes: Vec<&'static str> = Vec::new();
        for b in t.buffers() {
            if !dtypes.contains(&b.dtype.as_str()) {
                dtypes.push(b.dtype.as_str());
            }
        }
        Entry {
            name: &t.id,
            family: t.kind.as_str(),
            dtypes,
            configs: t.configs.len(),
            title: &t.title,
        }
    }
}

/// Runs `cudaperf tasks ...`.
pub fn run(a: Args) -> Result<ExitCode, Error> {
    match a.command {
        Command::List(l) => list(l),
        Command::Import(i) => import(i),
    }
}

/// The .py files named, folders expanded (sorted).
fn problem_files(problems: &[PathBuf]) -> Result<Vec<PathBuf>, Error> {
    let mut files = Vec::new();
    for p in problems {
        if !p.is_dir() {
            files.push(p.clone());
            continue;
        }
        let entries = std::fs::read_dir(p).map_err(|source| Error::ReadDir {
            path: p.clone(),
            source,
        })?;
        let mut in_dir: Vec<PathBuf> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|f| f.is_file() && f.extension().is_some_and(|e| e == "py"))
            .collect();
        in_dir.sort();
        files.extend(in_dir);
    }
    Ok(files)
}

/// One line per problem; exit 1 when any was refused.
fn import(a: ImportArgs) -> Result<ExitCode, Error> {
    use cudaperf::task::import::{import_problems, ImportOptions};
    let options = ImportOptions {
        python: a.python,
        limits: a.limits.limits()?,
        ..Default::default()
    };
    let files = problem_files(&a.problems)?;
    // One probe process for all of them: PyTorch is imported once.
    let results = import_problems(&files, &a.out, &options);
    let mut failed = 0;
    for (file, r) in files.iter().zip(&results) {
        match r {
            Ok(task) => {
                let configs: Vec<&str> = task.configs.iter().map(|c| c.name.as_str()).collect();
                println!(
                    "{}: imported as {} ({} params, configs {})",
                    file.display(),
                    task.dir.display(),
                    task.params.len(),
                    configs.join(", ")
                )
            }
            Err(e) => {
                failed += 1;
                eprintln!("error: {e}");
            }
        }
    }
    println!("{} imported, {failed} refused", results.len() - failed);
    Ok(if failed > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

fn list(a: ListArgs) -> Result<ExitCode, Error> {
    let dir = match a.tasks {
        Some(d) => d,
        None if std::path::Path::new(CRATE_TASKS).is_dir() => PathBuf::from(CRATE_TASKS),
        None => return Err(Error::NoDefault),
    };
    let ds = Dataset::load(&dir)?;
    let entries: Vec<Entry> = ds.tasks.iter().map(Entry::of).collect();
    if a.json {
        println!("{}", pretty("the task list", &entries)?);
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "{:<28} {:<11} {:<14} {:>7}",
        "name", "family", "dtype", "configs"
    );
    for e in &entries {
        println!(
            "{:<28} {:<11} {:<14} {:>7}",
            e.name,
            e.family,
            e.dtypes.join(","),
            e.configs
        );
    }
    eprintln!("{} tasks in {}", entries.len(), dir.display());
    Ok(ExitCode::SUCCESS)
}
