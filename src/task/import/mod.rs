//! Importing problems written as PyTorch modules in the KernelBench layout
//! (`class Model(nn.Module)`, `get_inputs()`, `get_init_inputs()`) as task folders
//! (`cudaperf tasks import`).
//!
//! A shipped Python probe (`probe.py`, run with `python3` and PyTorch) loads the problem, finds
//! every tensor's shape at the file's sizes and at smaller odd ones (a forward on the meta
//! device: no memory, so full-size problems import on a laptop), and runs one real forward on
//! the CPU on the smallest config to refuse what the task format cannot express. The crate
//! then names the sizes, writes `task.toml` and `original.py` (the problem unchanged plus a
//! wrapper in the crate's convention) into a fresh folder, validates it with
//! [`Task::load_with`], and only then moves it into place: a problem that cannot be imported
//! leaves nothing behind. The reference of an imported task is its PyTorch original
//! ([`Task::torch_reference`]). Details in `docs/pytorch-tasks.md`.
//!
//! ```no_run
//! use cudaperf::task::import::{import_problem, ImportOptions};
//! let task = import_problem("problems/19_ReLU.py".as_ref(), "tasks".as_ref(), &ImportOptions::default())?;
//! println!("{} with {} configs", task.id, task.configs.len());
//! # Ok::<(), cudaperf::task::import::ImportError>(())
//! ```

mod build;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use super::{Task, TaskError, TaskLimits};
use crate::originals::{run_limited_full, Ended};

/// The probe script, shipped in the crate.
const PROBE: &str = include_str!("probe.py");

/// How problems are imported; every field has a documented default.
#[derive(Debug, Clone, PartialEq)]
pub struct ImportOptions {
    /// The Python interpreter with PyTorch (default `python3`).
    pub python: PathBuf,
    /// The buffer cap the written task is validated against (default
    /// [`TaskLimits::default`]; the CLI uses [`crate::exec::task_limits_for_this_machine`] or
    /// `--max-buffer-gib`).
    pub limits: TaskLimits,
    /// Most elements (all tensors together) of the config the CPU trial forward runs on
    /// (default 2^26).
    pub max_trial_elements: u64,
    /// Time limit of the probe (default 300 s).
    pub timeout: Duration,
}

impl Default for ImportOptions {
    fn default() -> Self {
        ImportOptions {
            python: PathBuf::from("python3"),
            limits: TaskLimits::default(),
            max_trial_elements: 1 << 26,
            timeout: Duration::from_secs(300),
        }
    }
}

/// Why a problem was not imported; each message is one line naming the problem file.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ImportError {
    /// A file or folder could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file or folder.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// PyTorch (or the interpreter) is not available: nothing can be imported here.
    #[error("{problem}: cannot import without PyTorch: {reason}")]
    NoTorch {
        /// The problem file.
        problem: PathBuf,
        /// What failed (the interpreter, or `import torch`).
        reason: String,
    },
    /// The problem cannot be expressed as a task (the reason says what it does).
    #[error("{problem}: {reason}")]
    Refused {
        /// The problem file.
        problem: PathBuf,
        /// Why, in one line.
        reason: String,
    },
    /// The task folder already exists (imports never overwrite).
    #[error("{problem}: the task folder {dir} already exists")]
    Exists {
        /// The problem file.
        problem: PathBuf,
        /// The folder.
        dir: PathBuf,
    },
    /// The written task does not validate (e.g. its file-size config is over the buffer cap).
    #[error("{problem}: {source}")]
    Invalid {
        /// The problem file.
        problem: PathBuf,
        /// The loader's error.
        source: TaskError,
    },
}

impl ImportError {
    /// True when PyTorch is missing (not the problem's fault).
    pub fn is_no_torch(&self) -> bool {
        matches!(self, ImportError::NoTorch { .. })
    }
}

/// The task id of a problem file: its stem in lower case, other characters as `_`
/// (`19_ReLU.py` → `19_relu`).
pub fn task_id(problem: &Path) -> String {
    let stem = problem
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or("problem");
    let id: String = stem
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '_'
            }
        })
        .collect();
    if id.is_empty() {
        "problem".into()
    } else {
        id
    }
}

/// A problem file and what its import came to.
pub type Imported = (PathBuf, Result<Task, ImportError>);

/// Imports one problem file into `out/<id>/` and returns the loaded task.
pub fn import_problem(
    problem: &Path,
    out: &Path,
    options: &ImportOptions,
) -> Result<Task, ImportError> {
    import_problems(&[problem.to_path_buf()], out, options)
        .pop()
        .unwrap_or_else(|| {
            Err(ImportError::Refused {
                problem: problem.to_path_buf(),
                reason: "no result".into(),
            })
        })
}

/// Imports every `*.py` file of a folder (sorted by name); one result per file. A file that
/// fails does not stop the others.
pub fn import_folder(
    dir: &Path,
    out: &Path,
    options: &ImportOptions,
) -> Result<Vec<Imported>, ImportError> {
    let io = |source| ImportError::Io {
        path: dir.to_path_buf(),
        source,
    };
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(io)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file() && p.extension().is_some_and(|e| e == "py"))
        .collect();
    files.sort();
    let results = import_problems(&files, out, options);
    Ok(files.into_iter().zip(results).collect())
}

/// Imports problem files into `out/<id>/`, one result per file, in order. One Python
/// process probes them all (importing PyTorch is the slow part); a file that fails does not
/// stop the others.
pub fn import_problems(
    problems: &[PathBuf],
    out: &Path,
    options: &ImportOptions,
) -> Vec<Result<Task, ImportError>> {
    // What can be refused without Python first: unreadable files, taken ids.
    let mut ids: Vec<String> = Vec::new();
    let prepared: Vec<Result<(String, String), ImportError>> = problems
        .iter()
        .map(|problem| {
            let source = std::fs::read_to_string(problem).map_err(|source| ImportError::Io {
                path: problem.clone(),
                source,
            })?;
            let id = task_id(problem);
            let dest = out.join(&id);
            if dest.exists() || ids.contains(&id) {
                return Err(ImportError::Exists {
                    problem: problem.clone(),
                    dir: dest,
                });
            }
            ids.push(id.clone());
            Ok((id, source))
        })
        .collect();
    let to_probe: Vec<&Path> = (problems.iter().zip(&prepared))
        .filter(|(_, p)| p.is_ok())
        .map(|(f, _)| f.as_path())
        .collect();
    let mut probes = run_probes(&to_probe, options).into_iter();
    problems
        .iter()
        .zip(prepared)
        .map(|(problem, prepared)| {
            let (id, source) = prepared?;
            let probe = probes.next().unwrap_or_else(|| {
                Err(ImportError::Refused {
                    problem: problem.clone(),
                    reason: "the probe gave no result".into(),
                })
            })?;
            write_task(problem, &id, &source, &probe, out, options)
        })
        .collect()
}

/// Writes, validates and moves one task folder into place.
fn write_task(
    problem: &Path,
    id: &str,
    source: &str,
    probe: &build::Probe,
    out: &Path,
    options: &ImportOptions,
) -> Result<Task, ImportError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| ImportError::Io { path, source }
    };
    let invalid = |source| ImportError::Invalid {
        problem: problem.to_path_buf(),
        source,
    };
    let name = problem
        .file_name()
        .and_then(|s| s.to_str())
        .unwrap_or("problem.py");
    let files =
        build::task_files(probe, id, name, source).map_err(|reason| ImportError::Refused {
            problem: problem.to_path_buf(),
            reason,
        })?;
    // The loader checks the folder name against the id, so the text is validated with its
    // files in memory first, and loaded from the folder after the rename.
    let named = BTreeMap::from([("original.py".to_string(), files.original.clone())]);
    Task::from_toml_and_files(&files.toml, &named, &options.limits).map_err(invalid)?;
    std::fs::create_dir_all(out).map_err(io(out))?;
    // Written beside its destination, then renamed: never half a task in place.
    let staging = out.join(format!(".{id}.import-{}", std::process::id()));
    let dest = out.join(id);
    let _ = std::fs::remove_dir_all(&staging);
    let written = (|| {
        std::fs::create_dir(&staging).map_err(io(&staging))?;
        let toml = staging.join("task.toml");
        std::fs::write(&toml, &files.toml).map_err(io(&toml))?;
        let original = staging.join("original.py");
        std::fs::write(&original, &files.original).map_err(io(&original))?;
        std::fs::rename(&staging, &dest).map_err(io(&dest))
    })();
    if let Err(e) = written {
        let _ = std::fs::remove_dir_all(&staging);
        return Err(e);
    }
    Task::load_with(&dest, &options.limits).map_err(invalid)
}

/// Runs the probe on problems in one Python process; one result per problem, in order.
fn run_probes(
    problems: &[&Path],
    options: &ImportOptions,
) -> Vec<Result<build::Probe, ImportError>> {
    if problems.is_empty() {
        return Vec::new();
    }
    let every = |e: &dyn Fn(PathBuf) -> ImportError| -> Vec<Result<build::Probe, ImportError>> {
        problems.iter().map(|p| Err(e(p.to_path_buf()))).collect()
    };
    let script = std::env::temp_dir().join(format!(
        "cudaperf-import-probe-{}-{:?}.py",
        std::process::id(),
        std::thread::current().id()
    ));
    if let Err(e) = std::fs::write(&script, PROBE) {
        let reason = format!("{}: {e}", script.display());
        return every(&|problem| ImportError::NoTorch {
            problem,
            reason: reason.clone(),
        });
    }
    let mut cmd = Command::new(&options.python);
    cmd.arg(&script)
        .arg(options.max_trial_elements.to_string())
        .args(problems)
        // The probe needs no GPU; keeping it off one avoids starting a CUDA context.
        .env("CUDA_VISIBLE_DEVICES", "");
    let limit = options.timeout * problems.len() as u32;
    let ran = run_limited_full(cmd, limit);
    let _ = std::fs::remove_file(&script);
    let text = match ran {
        Err(e) => {
            let reason = format!("cannot run {}: {e}", options.python.display());
            return every(&|problem| ImportError::NoTorch {
                problem,
                reason: reason.clone(),
            });
        }
        Ok((Ended::TimedOut, _)) => {
            let reason = format!(
                "the probe ran past {} s for {} problems (get_inputs() or a forward too slow on the CPU)",
                limit.as_secs(),
                problems.len()
            );
            return every(&|problem| ImportError::Refused {
                problem,
                reason: reason.clone(),
            });
        }
        Ok((Ended::Exited(_, text), _)) => text,
    };
    probe_results(problems, &text)
}

/// One result per problem from the probe's output: its JSON line by index, or why the probe
/// gave none.
fn probe_results(problems: &[&Path], text: &str) -> Vec<Result<build::Probe, ImportError>> {
    let mut lines: BTreeMap<usize, serde_json::Value> = BTreeMap::new();
    for line in text.lines().filter(|l| l.starts_with('{')) {
        if let Ok(v) = serde_json::from_str::<serde_json::Value>(line) {
            if let Some(i) = v["index"].as_u64() {
                lines.insert(i as usize, v);
            }
        }
    }
    let last = text.lines().last().unwrap_or("(no output)").to_string();
    problems
        .iter()
        .enumerate()
        .map(|(i, problem)| {
            let problem = problem.to_path_buf();
            let Some(value) = lines.remove(&i) else {
                return Err(ImportError::Refused {
                    problem,
                    reason: format!("the probe stopped before this problem (a problem ended the interpreter?): {last}"),
                });
            };
            if value["ok"] != serde_json::Value::Bool(true) {
                let reason = value["reason"].as_str().unwrap_or("unknown").to_string();
                return Err(if value["missing_torch"] == serde_json::Value::Bool(true) {
                    ImportError::NoTorch { problem, reason }
                } else {
                    ImportError::Refused { problem, reason }
                });
            }
            serde_json::from_value(value).map_err(|e| ImportError::Refused {
                problem,
                reason: format!("the probe's result: {e}"),
            })
        })
        .collect()
}
