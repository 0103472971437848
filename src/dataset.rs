//! The task dataset: loading, deterministic splits, and timed pairs for the ranker.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::task::{Implementation, Task, TaskError, TaskKind, TaskLimits};
use crate::timings::Timings;
use crate::verdict::Verdict;

/// Why a dataset could not be loaded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DatasetError {
    /// The folder could not be read.
    #[error("cannot read dataset folder {path}: {source}")]
    Io {
        /// The folder.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// A task failed to load.
    #[error(transparent)]
    Task(#[from] TaskError),
    /// Two folders declare the same id, or the folder holds no task.
    #[error("{0}")]
    Invalid(String),
}

/// All tasks under one folder (each in `<dir>/<id>/task.toml`), sorted by id.
#[derive(Debug, Clone)]
pub struct Dataset {
    /// The folder.
    pub root: PathBuf,
    /// The tasks.
    pub tasks: Vec<Task>,
}

/// A timed pair of correct implementations of one task: `faster` beat `slower`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Pair {
    /// Task id.
    pub task: String,
    /// Faster implementation's name.
    pub faster: String,
    /// Slower implementation's name.
    pub slower: String,
    /// ln(t_slower / t_faster) > 0.
    pub log_ratio: f64,
}

/// Counts for `cudaperf dataset stats`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DatasetStats {
    /// Tasks.
    pub tasks: usize,
    /// Implementations, reference included.
    pub implementations: usize,
    /// Input configurations over all tasks.
    pub configs: usize,
    /// Timed pairs outside the noise (0 without a timings file).
    pub pairs: usize,
    /// Tasks per kind.
    pub by_kind: KindCounts,
}

/// Tasks per kind.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct KindCounts {
    /// C → CUDA tasks.
    pub c2cuda: usize,
    /// PyTorch → CUDA tasks.
    pub torch2cuda: usize,
}

impl Dataset {
    /// Loads and validates every task folder under `dir` (with the default buffer cap,
    /// [`TaskLimits::default`]).
    pub fn load(dir: impl AsRef<Path>) -> Result<Dataset, DatasetError> {
        Dataset::load_with(dir, &TaskLimits::default())
    }

    /// [`Dataset::load`] with a buffer cap of the caller's (full-size problems need one that
    /// follows the device: [`crate::exec::task_limits_for_this_machine`]).
    pub fn load_with(dir: impl AsRef<Path>, limits: &TaskLimits) -> Result<Dataset, DatasetError> {
        let dir = dir.as_ref();
        let entries = std::fs::read_dir(dir).map_err(|source| DatasetError::Io {
            path: dir.to_path_buf(),
            source,
        })?;
        let mut folders: Vec<PathBuf> = entries
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.join("task.toml").is_file())
            .collect();
        folders.sort();
        let mut tasks = Vec::with_capacity(folders.len());
        for f in folders {
            tasks.push(Task::load_with(&f, limits)?);
        }
        if tasks.is_empty() {
            return Err(DatasetError::Invalid(format!(
                "no task folders (with task.toml) in {}",
                dir.display()
            )));
        }
        for w in tasks.windows(2) {
            if w[0].id == w[1].id {
                return Err(DatasetError::Invalid(format!(
                    "task id `{}` appears twice",
                    w[0].id
                )));
            }
        }
        Ok(Dataset {
            root: dir.to_path_buf(),
            tasks,
        })
    }

    /// Finds a task by id.
    pub fn task(&self, id: &str) -> Option<&Task> {
        self.tasks.iter().find(|t| t.id == id)
    }

    /// Every (task, implementation), reference included.
    pub fn implementations(&self) -> impl Iterator<Item = (&Task, &Implementation)> {
        self.tasks
            .iter()
            .flat_map(|t| t.all_implementations().map(move |i| (t, i)))
    }

    /// Whether a task id falls in the test split: a hash of (seed, id) decides, so the
    /// split never changes when tasks are added.
    pub fn is_test(id: &str, test_fraction: f64, seed: u64) -> bool {
        let h = Sha256::new()
            .chain_update(seed.to_le_bytes())
            .chain_update(id.as_bytes())
            .finalize();
        let x = u64::from_le_bytes(h[..8].try_into().unwrap_or([0; 8]));
        (x as f64 / u64::MAX as f64) < test_fraction
    }

    /// (train, test) tasks.
    pub fn split(&self, test_fraction: f64, seed: u64) -> (Vec<&Task>, Vec<&Task>) {
        self.tasks
            .iter()
            .partition(|t| !Dataset::is_test(&t.id, test_fraction, seed))
    }

    /// Timed pairs: every two correct implementations of a task whose time ratio is
    /// outside both runs' noise floors. Ratios come from each implementation's speedup over
    /// the reference measured in the same interleaved run, so clock drift cancels.
    pub fn pairs(&self, timings: &Timings) -> Vec<Pair> {
        let mut out = Vec::new();
        for task in &self.tasks {
            let Some(tt) = timings.tasks.get(&task.id) else {
                continue;
            };
            let timed: Vec<(&str, f64, f64)> = task
                .all_implementations()
                .filter_map(|i| {
                    let t = tt.implementations.get(&i.name)?;
                    if t.verdict != Verdict::Correct {
                        return None;
                    }
                    Some((
                        i.name.as_str(),
                        t.raw_speedup?,
                        t.noise_floor.unwrap_or(0.01),
                    ))
                })
                .filter(|(_, s, _)| *s > 0.0 && s.is_finite())
                .collect();
            for (i, a) in timed.iter().enumerate() {
                for b in &timed[i + 1..] {
                    // t_a / t_b = speedup_b / speedup_a.
                    let log_ratio = (b.1 / a.1).ln();
                    let noise = (1.0 + a.2.max(b.2)).ln();
                    if log_ratio.abs() <= noise {
                        continue;
                    }
                    let (faster, slower) = if log_ratio < 0.0 {
                        (a.0, b.0)
                    } else {
                        (b.0, a.0)
                    };
                    out.push(Pair {
                        task: task.id.clone(),
                        faster: faster.to_string(),
                        slower: slower.to_string(),
                        log_ratio: log_ratio.abs(),
                    });
                }
            }
        }
        out
    }

    /// Counts; `pairs` needs timings.
    pub fn stats(&self, timings: Option<&Timings>) -> DatasetStats {
        let mut by_kind = KindCounts::default();
        for t in &self.tasks {
            match t.kind {
                TaskKind::C2cuda => by_kind.c2cuda += 1,
                TaskKind::Torch2cuda => by_kind.torch2cuda += 1,
            }
        }
        DatasetStats {
            tasks: self.tasks.len(),
            implementations: self.implementations().count(),
            configs: self.tasks.iter().map(|t| t.configs.len()).sum(),
            pairs: timings.map_or(0, |t| self.pairs(t).len()),
            by_kind,
        }
    }

    /// Tasks by kind, for reports.
    pub fn by_kind(&self) -> BTreeMap<TaskKind, Vec<&Task>> {
        let mut m: BTreeMap<TaskKind, Vec<&Task>> = BTreeMap::new();
        for t in &self.tasks {
            m.entry(t.kind).or_default().push(t);
        }
        m
    }
}
