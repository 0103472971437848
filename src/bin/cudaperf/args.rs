//! What several commands share on the command line: number parsers with messages that say
//! what is expected, and the compile options (`--arch`, `--cache-dir`, ...).

use std::path::PathBuf;
use std::time::Duration;

use cudaperf::compile::{CompileOptions, CompilerError, Isolation};
use cudaperf::pipeline::{EvalError, EvalOptions, Evaluator};

/// A flag value that is not the kind of number the flag takes.
#[derive(Debug, thiserror::Error)]
#[error("must be {expected}, got `{got}`")]
pub struct NumberError {
    /// What the flag takes, e.g. "a whole number >= 0".
    expected: &'static str,
    /// The text given.
    got: String,
}

/// A count: a whole number >= 0, with a message that says so for `-3` or `2.5`.
pub fn count(text: &str) -> Result<usize, NumberError> {
    text.trim().parse::<usize>().map_err(|_| NumberError {
        expected: "a whole number >= 0",
        got: text.to_string(),
    })
}

/// A training step or seed: a whole number >= 0.
pub fn whole(text: &str) -> Result<u64, NumberError> {
    text.trim().parse::<u64>().map_err(|_| NumberError {
        expected: "a whole number >= 0",
        got: text.to_string(),
    })
}

/// A time limit: a positive, finite number of seconds.
pub fn seconds(text: &str) -> Result<f64, NumberError> {
    match text.trim().parse::<f64>() {
        Ok(v) if v > 0.0 && v.is_finite() && v <= 1e6 => Ok(v),
        _ => Err(NumberError {
            expected: "a positive number of seconds (at most 1000000)",
            got: text.to_string(),
        }),
    }
}

/// A duration flag that the library takes as a number: positive and finite, else an error
/// naming the flag.
#[cfg(feature = "serve")]
#[derive(Debug, thiserror::Error)]
#[error("--{flag} must be a positive number of seconds")]
pub struct DurationError {
    /// The flag, without its dashes.
    pub flag: &'static str,
}

/// `value` seconds as a duration, or an error naming `--flag`.
#[cfg(feature = "serve")]
pub fn duration(flag: &'static str, value: f64) -> Result<Duration, DurationError> {
    if value > 0.0 && value.is_finite() {
        Ok(Duration::from_secs_f64(value))
    } else {
        Err(DurationError { flag })
    }
}

/// The compile flags of every command that compiles.
#[derive(clap::Args, Clone)]
pub struct CompileArgs {
    /// Target architecture for NVRTC (sm_XX).
    #[arg(long, default_value = "sm_90")]
    pub arch: String,
    /// Persist compiled cubins here (content-addressed; safe to share between processes).
    #[arg(long)]
    pub cache_dir: Option<PathBuf>,
    /// Compile time limit in seconds (compiles run in killable worker processes).
    #[arg(long, default_value_t = 30.0, value_parser = seconds)]
    pub compile_timeout: f64,
    /// Compile inside this process (trusted sources only: no time limit can be enforced).
    #[arg(long)]
    pub in_process: bool,
}

impl CompileArgs {
    /// The options; `--arch` and `--cache-dir` are checked when the evaluator is built
    /// ([`evaluator`]).
    pub fn options(&self) -> CompileOptions {
        CompileOptions {
            arch: self.arch.clone(),
            cache_dir: self.cache_dir.clone(),
            timeout: Duration::from_secs_f64(self.compile_timeout),
            isolation: if self.in_process {
                Isolation::InProcess
            } else {
                Isolation::Sandboxed
            },
            ..Default::default()
        }
    }
}

/// Options the evaluator could not be built with.
#[derive(Debug, thiserror::Error)]
pub enum EvaluatorError {
    /// An architecture NVRTC does not know or does not support.
    #[error("--arch: {0}")]
    Arch(EvalError),
    /// A cache folder that cannot be created or written.
    #[error("--cache-dir: {0}")]
    CacheDir(EvalError),
    /// Anything else (no compile worker, for one).
    #[error(transparent)]
    Other(EvalError),
}

/// `$CUDAPERF_RANKER_MODEL`, when set and not empty: the ranker model folder of every
/// evaluator this program builds (the library reads no environment variable).
pub fn ranker_model_from_env() -> Option<std::path::PathBuf> {
    std::env::var_os(cudaperf::pipeline::RANKER_MODEL_ENV)
        .filter(|v| !v.is_empty())
        .map(std::path::PathBuf::from)
}

/// The evaluator for these options (the ranker model from `$CUDAPERF_RANKER_MODEL` unless
/// they name one); unusable options (an architecture NVRTC does not know, a cache folder
/// that cannot be written, no worker) are an error naming the flag.
pub fn evaluator(mut options: EvalOptions) -> Result<Evaluator, EvaluatorError> {
    options.ranker_model = options.ranker_model.or_else(ranker_model_from_env);
    Evaluator::new(options).map_err(|e| match &e {
        EvalError::Compiler(
            CompilerError::InvalidArch { .. } | CompilerError::UnsupportedArch(_),
        ) => EvaluatorError::Arch(e),
        EvalError::Compiler(CompilerError::CacheDir { .. }) => EvaluatorError::CacheDir(e),
        _ => EvaluatorError::Other(e),
    })
}

/// The task buffer cap (`--max-buffer-gib`).
#[derive(clap::Args, Clone, Debug)]
pub struct LimitArgs {
    /// Largest total of buffer bytes one task config may need, GiB (default: a quarter of
    /// the smallest visible GPU's memory; 8 GiB where there is no GPU).
    #[arg(long, value_name = "GIB")]
    pub max_buffer_gib: Option<f64>,
}

/// `--max-buffer-gib` is not a usable size.
#[derive(Debug, thiserror::Error)]
#[error("--max-buffer-gib: {0}")]
pub struct LimitArgError(#[from] cudaperf::task::LimitError);

impl LimitArgs {
    /// The limits tasks are loaded with.
    pub fn limits(&self) -> Result<cudaperf::task::TaskLimits, LimitArgError> {
        use cudaperf::task::TaskLimits;
        Ok(match self.max_buffer_gib {
            Some(g) => TaskLimits::from_gib(g)?,
            None => cudaperf::exec::task_limits_for_this_machine(),
        })
    }
}
