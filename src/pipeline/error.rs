//! Typed errors of the pipeline.

use crate::compile::CompilerError;
use crate::exec::GpuUnavailable;

/// Why an [`Evaluator`](super::Evaluator) cannot be built with these options.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EvalError {
    /// The compile stage's options are unusable (architecture, cache folder, no worker).
    #[error(transparent)]
    Compiler(#[from] CompilerError),
    /// [`EvalOptions::self_worker`](super::EvalOptions::self_worker) could not find this
    /// program's executable.
    #[error("cannot serve as our own worker: the current executable is unknown: {0}")]
    CurrentExe(std::io::Error),
}

/// Why the evaluator has no GPU executor.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum NoExecutor {
    /// `EvalOptions::no_gpu` is set.
    #[error("GPU stages are disabled (no_gpu)")]
    Disabled,
    /// No GPU, driver or worker here.
    #[error(transparent)]
    Unavailable(#[from] GpuUnavailable),
}

/// Why the evaluator has no ranker model: the model folder, or the model embedded in the
/// library, could not be loaded (the reason names the folder and what was wrong).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{reason}")]
pub struct NoRanker {
    /// Why, as the ranker's loader said it.
    pub reason: String,
}
