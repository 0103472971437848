//! Tasks: what a candidate must compute, on which inputs, within which tolerance.
//!
//! A task is a folder `fixtures/tasks/<id>/` with a `task.toml` (format in
//! `docs/task-format.md`), the original program, a reference implementation and the known
//! implementations. [`Task::load`] reads and validates it; every error names the file and
//! the field.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::expr::Expr;

mod contract;
mod format;
pub mod import;
mod limits;
mod validate;

pub use contract::{Precision, PrecisionContract, ProbeBits, Regime};
pub use format::{
    Bound, BufferParam, DType, Direction, Distribution, Implementation, InputConfig, Param,
    SpecialValue, TaskKind, Tolerance,
};
pub use limits::{LimitError, TaskLimits};

/// A validated task.
#[derive(Debug, Clone)]
pub struct Task {
    /// Unique id, equal to the folder name.
    pub id: String,
    /// Kind of original program.
    pub kind: TaskKind,
    /// Short human title.
    pub title: String,
    /// The task folder.
    pub dir: PathBuf,
    /// File name of the original program.
    pub original_file: String,
    /// Text of the original program (shown to the policy).
    pub original: String,
    /// The kernel ABI, in order.
    pub params: Vec<Param>,
    /// Input configurations.
    pub configs: Vec<InputConfig>,
    /// Distribution per input buffer (defaults filled in).
    pub inputs: BTreeMap<String, Distribution>,
    /// Tolerance for output comparison.
    pub tolerance: Tolerance,
    /// The reference implementation.
    pub reference: Implementation,
    /// The other known implementations.
    pub implementations: Vec<Implementation>,
    /// Floating-point operations one run must do, as an expression over the sizes
    /// (`flops = "2 * m * n * k"`), for compute-bound tasks: with it a timing result faster
    /// than FLOPs / the device's peak is `implausible`, like one faster than the bytes the
    /// ABI must move allow. `None` when the task does not declare it.
    pub flops: Option<Expr>,
    /// File name of the NumPy twin of a torch2cuda original (`numpy_twin =
    /// "original_numpy.py"`): a `forward(*inputs)` function with the module's semantics, run
    /// where PyTorch is not importable (see `originals`).
    pub numpy_twin: Option<String>,
    /// The least bytes one run must move through device memory, as an expression over the
    /// sizes (`min_bytes`), for tasks that need less than every ABI byte once (a triangular
    /// matrix read through a square buffer). `None`: the ABI's bytes.
    pub min_bytes: Option<Expr>,
    /// What arithmetic the results must match (`[precision]`).
    pub precision: PrecisionContract,
    /// Other input regimes checked on every job (`[[regimes]]`).
    pub regimes: Vec<Regime>,
}

/// Why a task could not be loaded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TaskError {
    /// A file could not be read.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// `task.toml` is not valid TOML or has the wrong shape.
    #[error("{path}: {message}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// The parser's message (with line and column).
        message: String,
    },
    /// A field has an invalid value.
    #[error("{path}: field `{field}`: {message}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// The field, e.g. `params[2].dtype`.
        field: String,
        /// What is wrong.
        message: String,
    },
}

/// Why a buffer's size could not be computed for a configuration.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum SizeError {
    /// The length expression could not be evaluated.
    #[error("buffer `{buffer}`: {source}")]
    Expr {
        /// The buffer.
        buffer: String,
        /// The expression error.
        source: crate::expr::ExprError,
    },
    /// The length is negative.
    #[error("buffer `{buffer}` has negative length {len} (len = {expr})")]
    Negative {
        /// The buffer.
        buffer: String,
        /// The value.
        len: i64,
        /// The expression.
        expr: String,
    },
    /// The byte count does not fit in 64 bits.
    #[error("buffer `{buffer}` size overflows")]
    Overflow {
        /// The buffer.
        buffer: String,
    },
}

impl Task {
    /// Loads a task from its folder or its `task.toml`, with default limits.
    pub fn load(path: impl AsRef<Path>) -> Result<Task, TaskError> {
        Task::load_with(path, &TaskLimits::default())
    }

    /// Loads a task with explicit limits.
    pub fn load_with(path: impl AsRef<Path>, limits: &TaskLimits) -> Result<Task, TaskError> {
        let path = path.as_ref();
        let toml_path = if path.is_dir() {
            path.join("task.toml")
        } else {
            path.to_path_buf()
        };
        let dir = toml_path
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_else(|| PathBuf::from("."));
        let text = std::fs::read_to_string(&toml_path).map_err(|source| TaskError::Io {
            path: toml_path.clone(),
            source,
        })?;
        Task::from_toml_str(&text, &toml_path, &dir, limits)
    }

    /// Parses and validates task TOML text; `toml_path` is used in messages and `dir` to
    /// find the files it names.
    pub fn from_toml_str(
        text: &str,
        toml_path: &Path,
        dir: &Path,
        limits: &TaskLimits,
    ) -> Result<Task, TaskError> {
        Task::from_toml_with(text, toml_path, dir, limits, &|field, name| {
            validate::read_task_file(dir, toml_path, field, name)
        })
    }

    /// Parses and validates task TOML text whose files (original, reference,
    /// implementations) are given as text, keyed by the names the TOML uses, instead of
    /// being read from a folder; the id of a task built this way is not checked against a
    /// folder name. Messages name `task.toml` and the field, as [`Task::load`]'s do; a file
    /// the TOML names but `files` lacks is reported on that field.
    ///
    /// ```
    /// use std::collections::BTreeMap;
    /// use cudaperf::task::{Task, TaskLimits};
    /// let toml = r#"
    /// id = "scale"
    /// kind = "c2cuda"
    /// original = "original.c"
    /// reference = "reference.cu"
    /// [[params]]
    /// name = "y"
    /// kind = "buffer"
    /// direction = "out"
    /// dtype = "f32"
    /// len = "n"
    /// [[configs]]
    /// name = "small"
    /// sizes = { n = 1024 }
    /// "#;
    /// let files = BTreeMap::from([
    ///     ("original.c".to_string(), "void scale(float* y, int n);".to_string()),
    ///     ("reference.cu".to_string(), "// @launch k grid=(1) block=(1)".to_string()),
    /// ]);
    /// let task = Task::from_toml_and_files(toml, &files, &TaskLimits::default())?;
    /// assert_eq!(task.id, "scale");
    /// # Ok::<(), cudaperf::task::TaskError>(())
    /// ```
    pub fn from_toml_and_files(
        text: &str,
        files: &BTreeMap<String, String>,
        limits: &TaskLimits,
    ) -> Result<Task, TaskError> {
        let toml_path = Path::new("task.toml");
        Task::from_toml_with(text, toml_path, Path::new(""), limits, &|field, name| {
            validate::check_task_file_name(toml_path, field, name)?;
            match files.get(name) {
                Some(text) => Ok((PathBuf::from(name), text.clone())),
                None => Err(TaskError::Invalid {
                    path: toml_path.to_path_buf(),
                    field: field.to_string(),
                    message: format!("file `{name}` was not provided"),
                }),
            }
        })
    }

    /// The validation behind [`Task::from_toml_str`] and [`Task::from_toml_and_files`];
    /// `read(field, name)` gives a named file's path and text.
    fn from_toml_with(
        text: &str,
        toml_path: &Path,
        dir: &Path,
        limits: &TaskLimits,
        read: &validate::FileReader,
    ) -> Result<Task, TaskError> {
        validate::task(text, toml_path, dir, limits, read)
    }

    /// True when the task names its PyTorch original as its reference (`reference =
    /// "original.py"`, as `cudaperf tasks import` writes): there is no CUDA reference, and the
    /// reference side is the module itself (docs/pytorch-tasks.md).
    pub fn torch_reference(&self) -> bool {
        self.kind == TaskKind::Torch2cuda
            && self.reference.path.file_name().and_then(|f| f.to_str())
                == Some(self.original_file.as_str())
    }

    /// The ABI's buffer parameters, in order.
    pub fn buffers(&self) -> impl Iterator<Item = BufferParam<'_>> {
        self.params.iter().filter_map(|p| match p {
            Param::Buffer {
                name,
                direction,
                dtype,
                len,
                shape,
            } => Some(BufferParam {
                name,
                direction: *direction,
                dtype: *dtype,
                len,
                shape,
            }),
            Param::Scalar { .. } => None,
        })
    }

    /// Element count of each buffer for a config, in ABI order (name, dtype, len).
    pub fn buffer_lens(&self, config: &InputConfig) -> Result<Vec<(&str, DType, u64)>, SizeError> {
        let mut out = Vec::new();
        for p in &self.params {
            if let Param::Buffer {
                name, dtype, len, ..
            } = p
            {
                let n = len
                    .eval_int(&config.sizes)
                    .map_err(|source| SizeError::Expr {
                        buffer: name.clone(),
                        source,
                    })?;
                if n < 0 {
                    return Err(SizeError::Negative {
                        buffer: name.clone(),
                        len: n,
                        expr: len.to_string(),
                    });
                }
                out.push((name.as_str(), *dtype, n as u64));
            }
        }
        Ok(out)
    }

    /// Total bytes of all ABI buffers for a config.
    pub fn buffer_bytes(&self, config: &InputConfig) -> Result<u64, SizeError> {
        self.buffer_lens(config)?
            .iter()
            .try_fold(0u64, |acc, (name, dtype, n)| {
                n.checked_mul(dtype.size_bytes())
                    .and_then(|b| acc.checked_add(b))
                    .ok_or_else(|| SizeError::Overflow {
                        buffer: name.to_string(),
                    })
            })
    }

    /// Finds a config by name.
    pub fn config(&self, name: &str) -> Option<&InputConfig> {
        self.configs.iter().find(|c| c.name == name)
    }

    /// The reference followed by the known implementations.
    pub fn all_implementations(&self) -> impl Iterator<Item = &Implementation> {
        std::iter::once(&self.reference).chain(self.implementations.iter())
    }

    /// Finds an implementation (or the reference) by name.
    pub fn implementation(&self, name: &str) -> Option<&Implementation> {
        self.all_implementations().find(|i| i.name == name)
    }

    /// The C++ signature a kernel with the default arguments must have, e.g.
    /// `(const float* a, const float* b, float* c, int n)`.
    pub fn signature(&self) -> String {
        let parts: Vec<String> = self
            .params
            .iter()
            .map(|p| match p {
                Param::Buffer {
                    name,
                    direction,
                    dtype,
                    ..
                } => {
                    let c = if *direction == Direction::In {
                        "const "
                    } else {
                        ""
                    };
                    format!("{c}{}* {name}", dtype.cuda_type())
                }
                Param::Scalar { name, dtype, .. } => format!("{} {name}", dtype.cuda_type()),
            })
            .collect();
        format!("({})", parts.join(", "))
    }
}

/// The one rule that picks the timed configuration: the position in `configs` (indices into
/// `task.configs`) of the config whose ABI buffers hold the most bytes, the first on ties.
/// Timing and static occupancy both use it.
pub fn timing_config(task: &Task, configs: &[usize]) -> usize {
    let mut best = 0;
    let mut largest = 0u64;
    for (k, &ci) in configs.iter().enumerate() {
        let bytes = task
            .configs
            .get(ci)
            .and_then(|c| task.buffer_bytes(c).ok())
            .unwrap_or(0);
        if bytes > largest {
            largest = bytes;
            best = k;
        }
    }
    best
}
