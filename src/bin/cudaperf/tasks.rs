//! `cudaperf tasks`: what tasks there are to score against.

use std::path::PathBuf;
use std::process::ExitCode;

use cudaperf::dataset::{Dataset, DatasetError};
use cudaperf::task::Task;

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
    }
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
