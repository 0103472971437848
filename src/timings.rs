//! Measured timings of the dataset's implementations (`fixtures/timings/<gpu>.json`),
//! written by `cudaperf measure` on a real GPU and read by the dataset's `pairs()`.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::verdict::Verdict;

/// One implementation's measurement against its task's reference.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ImplTiming {
    /// Verdict (`correct` for every usable entry), as
    /// [`crate::pipeline::report::Stages::outcome`] decides it.
    pub verdict: Verdict,
    /// Why it is not correct, if so.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub reason: Option<String>,
    /// Median time of this implementation, microseconds.
    pub time_us: Option<f64>,
    /// Median time of the reference in the same interleaved run, microseconds.
    pub reference_us: Option<f64>,
    /// median(reference) / median(this), before noise rules.
    pub raw_speedup: Option<f64>,
    /// Bootstrap 95 % interval of that ratio.
    pub ci95: Option<[f64; 2]>,
    /// Relative noise floor of the run.
    pub noise_floor: Option<f64>,
    /// Config timed.
    pub config: Option<String>,
}

/// All implementations of one task.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TaskTimings {
    /// By implementation name (`reference` included).
    pub implementations: BTreeMap<String, ImplTiming>,
}

/// A timings file.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Timings {
    /// GPU name.
    pub device: String,
    /// Driver version (cuDriverGetVersion).
    pub driver: i32,
    /// UTC date of the run (YYYY-MM-DD).
    pub date: String,
    /// The command that produced the file.
    pub command: String,
    /// cudaperf version.
    pub cudaperf_version: String,
    /// By task id.
    pub tasks: BTreeMap<String, TaskTimings>,
}

/// Why a timings file could not be read.
#[derive(Debug, thiserror::Error)]
pub enum TimingsError {
    /// The file could not be read.
    #[error("cannot read timings {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// The file is not valid timings JSON.
    #[error("invalid timings file {path}: {message}")]
    Parse {
        /// The file.
        path: String,
        /// The parser's message.
        message: String,
    },
}

impl Timings {
    /// Reads a timings file.
    pub fn load(path: impl AsRef<Path>) -> Result<Timings, TimingsError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|source| TimingsError::Io {
            path: path.display().to_string(),
            source,
        })?;
        serde_json::from_str(&text).map_err(|e| TimingsError::Parse {
            path: path.display().to_string(),
            message: e.to_string(),
        })
    }
}
