//! Running a task's original program — the C function of a `c2cuda` task, the PyTorch module
//! (or its NumPy twin) of a `torch2cuda` task — on the inputs the reference sees, so that a
//! reference can be held to what the original computes (`cudaperf dataset check-originals`).
//!
//! The inputs come from the CPU twin of the device generator ([`crate::inputs`]); the
//! original runs in a child process (the system C compiler builds a driver around
//! `original.c`; `python3` runs the module through a small driver script) under a time limit,
//! and its `out` / `inout` buffers come back as bytes, ready for [`compare`] with the
//! reference's. Conventions an original must follow are in `docs/task-format.md`.

mod c;
mod check;
mod compare;
mod python;
mod samples;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

pub use check::{
    check_task, check_tasks, finish, prepare, smallest_config_of, BufferSamples, CheckOptions,
    Exact, GpuCheck, Prepared, RegimeCheck, RegimeSamples, Samples, TaskCheck, TaskSamples,
    TwinCheck,
};
pub use compare::{compare, element_f64, BufferCompare};
pub use python::torch_eager_ms;

use crate::inputs::HostInputs;
use crate::task::{InputConfig, Task, TaskKind};

/// What runs an original.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Engine {
    /// `original.c` compiled with the system C compiler.
    C,
    /// `original.py` run with PyTorch.
    Torch,
    /// The task's NumPy twin of `original.py`.
    Numpy,
}

impl std::fmt::Display for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Engine::C => "c",
            Engine::Torch => "torch",
            Engine::Numpy => "numpy",
        })
    }
}

/// Why an original could not be run.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum OriginalError {
    /// A tool (C compiler, python3) is missing.
    #[error("{tool} is not available: {reason}")]
    Missing {
        /// The tool.
        tool: String,
        /// Why.
        reason: String,
    },
    /// The task has no NumPy twin and PyTorch is not importable.
    #[error("task `{task}`: PyTorch is not importable and the task names no numpy_twin")]
    NoTwin {
        /// The task.
        task: String,
    },
    /// The original did not compile.
    #[error("task `{task}`: {file} did not compile:\n{log}")]
    Compile {
        /// The task.
        task: String,
        /// The file.
        file: String,
        /// The compiler's output (tail).
        log: String,
    },
    /// The original failed while running.
    #[error("task `{task}`: the {engine} original failed on config `{config}`: {reason}")]
    Run {
        /// The task.
        task: String,
        /// The engine.
        engine: Engine,
        /// The config.
        config: String,
        /// What happened (exit status and the tail of its output).
        reason: String,
    },
    /// The original ran past its time limit.
    #[error("task `{task}`: the {engine} original ran past {seconds} s on config `{config}`")]
    Timeout {
        /// The task.
        task: String,
        /// The engine.
        engine: Engine,
        /// The config.
        config: String,
        /// The limit.
        seconds: f64,
    },
    /// Its output files were missing or of the wrong size.
    #[error("task `{task}`: output `{buffer}`: {reason}")]
    Output {
        /// The task.
        task: String,
        /// The buffer.
        buffer: String,
        /// What is wrong.
        reason: String,
    },
    /// A file of the run could not be written or read.
    #[error("{path}: {reason}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        reason: String,
    },
}

/// The outputs of one run of an original.
#[derive(Debug, Clone, PartialEq)]
pub struct OriginalOutputs {
    /// What ran it.
    pub engine: Engine,
    /// Per ABI buffer: the bytes after the run for `out` / `inout` buffers, `None` for `in`.
    pub buffers: Vec<Option<Vec<u8>>>,
    /// Wall time of the run (compile excluded), seconds.
    pub seconds: f64,
}

/// The tools found on this machine.
#[derive(Debug, Clone)]
pub struct Tools {
    /// The C compiler (`$CC`, else `cc`), if it runs.
    pub cc: Option<String>,
    /// `python3` with NumPy, if it runs.
    pub python: Option<String>,
    /// Whether `import torch` works in that Python.
    pub torch: bool,
}

impl Tools {
    /// Looks for the tools (runs each once).
    pub fn detect() -> Tools {
        let runs = |cmd: &str, args: &[&str]| {
            Command::new(cmd)
                .args(args)
                .output()
                .map(|o| o.status.success())
                .unwrap_or(false)
        };
        let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
        let cc = runs(&cc, &["--version"]).then_some(cc);
        let py = "python3".to_string();
        let python = runs(&py, &["-c", "import numpy"]).then_some(py);
        let torch = python
            .as_deref()
            .is_some_and(|p| runs(p, &["-c", "import torch"]));
        Tools { cc, python, torch }
    }

    /// The engine that runs `task`'s original here: C for c2cuda; PyTorch when importable,
    /// else the NumPy twin, for torch2cuda.
    pub fn engine_for(&self, task: &Task) -> Engine {
        match task.kind {
            TaskKind::C2cuda => Engine::C,
            TaskKind::Torch2cuda if self.torch => Engine::Torch,
            TaskKind::Torch2cuda => Engine::Numpy,
        }
    }
}

/// The config the originals run on: the one with the fewest buffer bytes.
pub fn smallest_config(task: &Task) -> Option<&InputConfig> {
    task.configs
        .iter()
        .min_by_key(|c| task.buffer_bytes(c).unwrap_or(u64::MAX))
}

/// Runs `task`'s original on `inputs` (config `cfg`) with `engine`, within `limit`.
pub fn run_original(
    task: &Task,
    cfg: &InputConfig,
    inputs: &HostInputs,
    engine: Engine,
    tools: &Tools,
    limit: Duration,
) -> Result<OriginalOutputs, OriginalError> {
    let dir = ScratchDir::new(&task.id)?;
    match engine {
        Engine::C => c::run(task, cfg, inputs, tools, dir.path(), limit),
        Engine::Torch | Engine::Numpy => {
            python::run(task, cfg, inputs, engine, tools, dir.path(), limit)
        }
    }
}

/// A folder under the system temp dir, removed on drop.
pub(crate) struct ScratchDir(PathBuf);

impl ScratchDir {
    pub(crate) fn new(tag: &str) -> Result<ScratchDir, OriginalError> {
        use std::sync::atomic::{AtomicU64, Ordering};
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let p = std::env::temp_dir().join(format!(
            "cudaperf-original-{tag}-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&p).map_err(|e| io_error(&p, e))?;
        Ok(ScratchDir(p))
    }

    pub(crate) fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub(crate) fn io_error(path: &Path, e: impl std::fmt::Display) -> OriginalError {
    OriginalError::Io {
        path: path.to_path_buf(),
        reason: e.to_string(),
    }
}

/// How a child process ended.
pub(crate) enum Ended {
    /// It exited; status success, and its stdout+stderr tail.
    Exited(bool, String),
    /// It ran past the limit and was killed.
    TimedOut,
}

/// Runs `cmd` with a wall-clock limit; keeps the last 4 KiB of its output.
pub(crate) fn run_limited(cmd: Command, limit: Duration) -> Result<(Ended, f64), String> {
    run_limited_keep(cmd, limit, 4096)
}

/// The same, keeping all of its output.
pub(crate) fn run_limited_full(cmd: Command, limit: Duration) -> Result<(Ended, f64), String> {
    run_limited_keep(cmd, limit, usize::MAX)
}

fn run_limited_keep(
    mut cmd: Command,
    limit: Duration,
    keep: usize,
) -> Result<(Ended, f64), String> {
    use std::io::Read;
    let out_path = std::env::temp_dir().join(format!(
        "cudaperf-original-log-{}-{:?}",
        std::process::id(),
        std::thread::current().id()
    ));
    let log = std::fs::File::create(&out_path).map_err(|e| e.to_string())?;
    let log2 = log.try_clone().map_err(|e| e.to_string())?;
    cmd.stdout(log)
        .stderr(log2)
        .stdin(std::process::Stdio::null());
    let start = Instant::now();
    let mut child = cmd.spawn().map_err(|e| e.to_string())?;
    let ended = loop {
        match child.try_wait().map_err(|e| e.to_string())? {
            Some(status) => break Some(status.success()),
            None if start.elapsed() > limit => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            None => std::thread::sleep(Duration::from_millis(5)),
        }
    };
    let secs = start.elapsed().as_secs_f64();
    let mut text = String::new();
    if let Ok(mut f) = std::fs::File::open(&out_path) {
        let mut bytes = Vec::new();
        let _ = f.read_to_end(&mut bytes);
        let tail = &bytes[bytes.len().saturating_sub(keep)..];
        text = String::from_utf8_lossy(tail).into_owned();
    }
    let _ = std::fs::remove_file(&out_path);
    Ok((
        match ended {
            Some(ok) => Ended::Exited(ok, text),
            None => Ended::TimedOut,
        },
        secs,
    ))
}

/// Reads the output files `out_{i}.bin` the drivers write, checking their sizes.
pub(crate) fn read_outputs(
    task: &Task,
    inputs: &HostInputs,
    dir: &Path,
) -> Result<Vec<Option<Vec<u8>>>, OriginalError> {
    let mut out = Vec::new();
    for (i, b) in task.buffers().enumerate() {
        let (name, dtype) = (b.name, b.dtype);
        if !b.direction.is_output() {
            out.push(None);
            continue;
        }
        let path = dir.join(format!("out_{i}.bin"));
        let bytes = std::fs::read(&path).map_err(|e| OriginalError::Output {
            task: task.id.clone(),
            buffer: name.to_string(),
            reason: format!("{}: {e}", path.display()),
        })?;
        let want = inputs.values.lens[i] * dtype.size_bytes();
        if bytes.len() as u64 != want {
            return Err(OriginalError::Output {
                task: task.id.clone(),
                buffer: name.to_string(),
                reason: format!(
                    "{} bytes written, the config's buffer has {want} ({} elements of {dtype})",
                    bytes.len(),
                    inputs.values.lens[i]
                ),
            });
        }
        out.push(Some(bytes));
    }
    Ok(out)
}

/// Writes the `in` / `inout` buffers as `in_{i}.bin`.
pub(crate) fn write_inputs(inputs: &HostInputs, dir: &Path) -> Result<(), OriginalError> {
    for (i, b) in inputs.buffers.iter().enumerate() {
        if let Some(bytes) = b {
            let p = dir.join(format!("in_{i}.bin"));
            std::fs::write(&p, bytes).map_err(|e| io_error(&p, e))?;
        }
    }
    Ok(())
}
