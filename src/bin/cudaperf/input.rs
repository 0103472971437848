//! Reading what the user points at: candidate files (or standard input), a task, a folder of
//! tasks. Every error names the file and what was wrong with it.

use std::io::Read;
use std::path::{Path, PathBuf};

use cudaperf::pipeline::Submission;
use cudaperf::task::{Task, TaskError};

/// Most bytes read from one candidate file or standard input; the extract stage refuses
/// anything over its own (smaller) caps with a clear error, without reading gigabytes first.
const MAX_INPUT_BYTES: u64 = 64 << 20;

/// A candidate that could not be read.
#[derive(Debug, thiserror::Error)]
pub enum InputError {
    /// Standard input could not be read.
    #[error("cannot read standard input: {0}")]
    Stdin(std::io::Error),
    /// A candidate file could not be opened or read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// More than [`MAX_INPUT_BYTES`].
    #[error("{name}: more than {MAX_INPUT_BYTES} bytes; candidates are a few KiB")]
    TooLarge {
        /// The file, or `<stdin>`.
        name: String,
    },
    /// `-` given twice.
    #[error("`-` (standard input) may be given only once")]
    StdinTwice,
}

/// A `--task` that is not a task, or a task that does not load.
#[derive(Debug, thiserror::Error)]
pub enum TaskArgError {
    /// A file that is not a `task.toml` (a candidate `.cu` given by mistake, for one).
    #[error(
        "--task {0}: not a task; a task is a folder holding a task.toml (its ABI, configs and \
         reference; see docs/task-format.md), given as the folder or its task.toml"
    )]
    NotATask(PathBuf),
    /// The task does not load.
    #[error(transparent)]
    Load(#[from] TaskError),
    /// A folder of tasks that cannot be read.
    #[error("cannot read {path}: {source}")]
    ReadDir {
        /// The folder.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// A folder of tasks without any task (or none of `--only`).
    #[error("no tasks found in {0}")]
    NoTasks(PathBuf),
}

/// Whether `path` is `-` (standard input).
pub fn is_stdin(path: &Path) -> bool {
    path.as_os_str() == "-"
}

/// How a candidate path is named in output.
pub fn display_name(path: &Path) -> String {
    if is_stdin(path) {
        "<stdin>".into()
    } else {
        path.display().to_string()
    }
}

/// At most one `-` among the candidate files (standard input can be read once).
pub fn check_stdin_once(files: &[PathBuf]) -> Result<(), InputError> {
    if files.iter().filter(|f| is_stdin(f)).count() > 1 {
        return Err(InputError::StdinTwice);
    }
    Ok(())
}

/// Reads a candidate: `.cu`, `.cuh`, `.cpp` and `.cc` files are CUDA source, other files
/// completions; standard input is whichever [`stdin_is_source`] says.
pub fn read_submission(path: &Path) -> Result<Submission, InputError> {
    let mut bytes = Vec::new();
    if is_stdin(path) {
        std::io::stdin()
            .lock()
            .take(MAX_INPUT_BYTES + 1)
            .read_to_end(&mut bytes)
            .map_err(InputError::Stdin)?;
    } else {
        std::fs::File::open(path)
            .and_then(|f| f.take(MAX_INPUT_BYTES + 1).read_to_end(&mut bytes))
            .map_err(|source| InputError::Read {
                path: path.to_path_buf(),
                source,
            })?;
    }
    if bytes.len() as u64 > MAX_INPUT_BYTES {
        return Err(InputError::TooLarge {
            name: display_name(path),
        });
    }
    let text = String::from_utf8_lossy(&bytes).into_owned();
    let is_source = if is_stdin(path) {
        stdin_is_source(&text)
    } else {
        matches!(
            path.extension().and_then(|e| e.to_str()),
            Some("cu" | "cuh" | "cpp" | "cc")
        )
    };
    Ok(if is_source {
        Submission::from_source(text)
    } else {
        Submission::from_completion(text)
    })
}

/// Text on standard input is CUDA source when it has no fenced block (```` ``` ````) and
/// defines a kernel or a launch plan; anything else is a completion, so that prose without
/// code is reported as "no code block found".
pub fn stdin_is_source(text: &str) -> bool {
    let fenced = text.lines().any(|l| l.trim_start().starts_with("```"));
    let cuda = text.contains("__global__") || text.lines().any(|l| l.contains("// @launch"));
    !fenced && cuda
}

/// Loads the task of `--task`: its folder or its `task.toml`. Any other file is refused in
/// one line that says what a task is (a TOML parser's message about a `.cu` helps nobody).
pub fn load_task(path: &Path) -> Result<Task, TaskArgError> {
    load_task_with(path, &cudaperf::task::TaskLimits::default())
}

/// [`load_task`] with an explicit buffer cap (`--max-buffer-gib`).
pub fn load_task_with(
    path: &Path,
    limits: &cudaperf::task::TaskLimits,
) -> Result<Task, TaskArgError> {
    if path.is_file() && path.extension().and_then(|e| e.to_str()) != Some("toml") {
        return Err(TaskArgError::NotATask(path.to_path_buf()));
    }
    Ok(Task::load_with(path, limits)?)
}

/// The tasks in `dir` (each a folder with a `task.toml`), sorted by folder name; with
/// `only`, just those ids.
pub fn load_tasks(dir: &Path, only: &[String]) -> Result<Vec<Task>, TaskArgError> {
    let entries = std::fs::read_dir(dir).map_err(|source| TaskArgError::ReadDir {
        path: dir.to_path_buf(),
        source,
    })?;
    let mut dirs: Vec<PathBuf> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.join("task.toml").is_file())
        .collect();
    dirs.sort();
    let mut tasks = Vec::new();
    for d in dirs {
        let id = d.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        if !only.is_empty() && !only.iter().any(|o| o == id) {
            continue;
        }
        tasks.push(Task::load(&d)?);
    }
    if tasks.is_empty() {
        return Err(TaskArgError::NoTasks(dir.to_path_buf()));
    }
    Ok(tasks)
}

#[cfg(test)]
mod tests {
    use super::stdin_is_source;

    /// Standard input: fenced text and prose are completions, bare kernels are source.
    #[test]
    fn stdin_kind_is_detected() {
        assert!(stdin_is_source(
            "// @launch k grid=(1) block=(1)\nextern \"C\" __global__ void k() {}\n"
        ));
        assert!(!stdin_is_source(
            "Here:\n```cuda\nextern \"C\" __global__ void k() {}\n```\n"
        ));
        assert!(!stdin_is_source("Sorry, no kernel today."));
    }
}
