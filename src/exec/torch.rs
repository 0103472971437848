//! The PyTorch reference: a task's original module run as the reference side of a GPU job,
//! in a Python runner process of its own (`torch_runner.py`, embedded in the crate).
//!
//! The harness treats that runner like the CUDA reference's: the runner allocates the
//! buffers (legacy CUDA IPC handles into PyTorch's context), the harness writes fresh
//! inputs and poison into them, every run's outputs are compared there, and the timed runs
//! interleave with the candidates' under the same protocol. Only what one run is differs:
//! the module's forward on tensors over the input buffers, timed between two CUDA events on
//! PyTorch's stream, its outputs copied into the output buffers after the end event.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// How the PyTorch reference runs its forward.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TorchMode {
    /// PyTorch eager: what the field reports speedups against.
    #[default]
    Eager,
    /// `torch.compile(model)` (default options); compiled at the first call, which falls in
    /// an untimed correctness run.
    Compile,
}

impl TorchMode {
    /// `eager` or `compile`.
    pub fn as_str(self) -> &'static str {
        match self {
            TorchMode::Eager => "eager",
            TorchMode::Compile => "compile",
        }
    }
}

/// Which reference a job times and checks candidates against.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReferenceKind {
    /// The task's CUDA reference (`reference.cu`).
    #[default]
    Cuda,
    /// The task's PyTorch original, eager.
    TorchEager,
    /// The task's PyTorch original through `torch.compile`.
    TorchCompile,
}

impl ReferenceKind {
    /// The PyTorch mode, for the PyTorch kinds.
    pub fn torch_mode(self) -> Option<TorchMode> {
        match self {
            ReferenceKind::Cuda => None,
            ReferenceKind::TorchEager => Some(TorchMode::Eager),
            ReferenceKind::TorchCompile => Some(TorchMode::Compile),
        }
    }

    /// The name used in reports and on the command line (`cuda`, `torch_eager`,
    /// `torch_compile`).
    pub fn as_str(self) -> &'static str {
        match self {
            ReferenceKind::Cuda => "cuda",
            ReferenceKind::TorchEager => "torch_eager",
            ReferenceKind::TorchCompile => "torch_compile",
        }
    }

    /// Parses [`ReferenceKind::as_str`]'s names (`-` accepted for `_`).
    pub fn parse(name: &str) -> Option<ReferenceKind> {
        match name.replace('-', "_").as_str() {
            "cuda" => Some(ReferenceKind::Cuda),
            "torch_eager" | "eager" => Some(ReferenceKind::TorchEager),
            "torch_compile" | "compile" => Some(ReferenceKind::TorchCompile),
            _ => None,
        }
    }
}

impl From<TorchMode> for ReferenceKind {
    fn from(m: TorchMode) -> ReferenceKind {
        match m {
            TorchMode::Eager => ReferenceKind::TorchEager,
            TorchMode::Compile => ReferenceKind::TorchCompile,
        }
    }
}

/// A PyTorch reference as a job carries it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TorchReference {
    /// The original's source (`Model()` without arguments; `forward` takes the ABI's
    /// `in`/`inout` buffers in order and returns its `out`/`inout` buffers in order).
    pub source: String,
    /// Eager or compiled.
    pub mode: TorchMode,
}

/// The runner script, as shipped in the crate.
pub const RUNNER_SOURCE: &str = include_str!("torch_runner.py");

/// Writes the runner script where a Python interpreter can run it (once per content, in
/// the temporary directory; a concurrent writer writes the same bytes) and returns its path.
pub fn runner_script() -> std::io::Result<PathBuf> {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    RUNNER_SOURCE.hash(&mut h);
    let dir = std::env::temp_dir();
    let path = dir.join(format!("cudaperf-torch-runner-{:016x}.py", h.finish()));
    if std::fs::read_to_string(&path).is_ok_and(|s| s == RUNNER_SOURCE) {
        return Ok(path);
    }
    let tmp = dir.join(format!(
        "cudaperf-torch-runner-{}-{:016x}.tmp",
        std::process::id(),
        h.finish()
    ));
    std::fs::write(&tmp, RUNNER_SOURCE)?;
    std::fs::rename(&tmp, &path)?;
    Ok(path)
}

/// The interpreter that runs the PyTorch reference when none is set (`python3` on `PATH`).
pub fn default_python() -> &'static Path {
    Path::new("python3")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reference_kinds_round_trip_their_names() {
        for k in [
            ReferenceKind::Cuda,
            ReferenceKind::TorchEager,
            ReferenceKind::TorchCompile,
        ] {
            assert_eq!(ReferenceKind::parse(k.as_str()), Some(k));
            let json = serde_json::to_string(&k).unwrap();
            assert_eq!(json, format!("\"{}\"", k.as_str()));
        }
        assert_eq!(
            ReferenceKind::parse("torch-eager"),
            Some(ReferenceKind::TorchEager)
        );
        assert_eq!(ReferenceKind::parse("numpy"), None);
    }

    #[test]
    fn the_runner_script_is_written_once_with_its_content() {
        let a = runner_script().unwrap();
        let b = runner_script().unwrap();
        assert_eq!(a, b);
        assert_eq!(std::fs::read_to_string(a).unwrap(), RUNNER_SOURCE);
    }
}
