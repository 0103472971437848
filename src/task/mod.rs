//! Tasks: what a candidate must compute, on which inputs, within which tolerance.
//!
//! A task is a folder `fixtures/tasks/<id>/` with a `task.toml` (format in
//! `docs/task-format.md`), the original program, a reference implementation and the known
//! implementations. [`Task::load`] reads and validates it; every error names the file and
//! the field.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::expr::{Expr, Sizes};

mod contract;
pub mod import;
mod limits;

pub use contract::{Precision, PrecisionContract, ProbeBits, Regime};
pub use limits::{LimitError, TaskLimits};

/// A buffer parameter of a task's ABI, borrowed ([`Task::buffers`]).
#[derive(Debug, Clone, Copy)]
pub struct BufferParam<'a> {
    /// Parameter name.
    pub name: &'a str,
    /// Data direction.
    pub direction: Direction,
    /// Element type.
    pub dtype: DType,
    /// Element count.
    pub len: &'a Expr,
    /// Tensor shape the original sees (empty: flat).
    pub shape: &'a [Expr],
}

/// Where the original program of a task comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TaskKind {
    /// The original is a C function.
    C2cuda,
    /// The original is a PyTorch module's forward.
    Torch2cuda,
}

impl TaskKind {
    /// The name used in task files (`c2cuda`, `torch2cuda`).
    pub fn as_str(self) -> &'static str {
        match self {
            TaskKind::C2cuda => "c2cuda",
            TaskKind::Torch2cuda => "torch2cuda",
        }
    }
}

impl fmt::Display for TaskKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Element type of a buffer or scalar.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DType {
    /// 32-bit float.
    F32,
    /// 64-bit float.
    F64,
    /// IEEE half.
    F16,
    /// bfloat16.
    Bf16,
    /// 32-bit signed integer.
    I32,
    /// 64-bit signed integer.
    I64,
    /// Unsigned byte.
    U8,
}

impl DType {
    /// All dtypes, in the order of the docs.
    pub const ALL: [DType; 7] = [
        DType::F32,
        DType::F64,
        DType::F16,
        DType::Bf16,
        DType::I32,
        DType::I64,
        DType::U8,
    ];

    /// Parses the name used in task files.
    pub fn parse(s: &str) -> Option<DType> {
        DType::ALL.into_iter().find(|d| d.as_str() == s)
    }

    /// The name used in task files.
    pub fn as_str(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F64 => "f64",
            DType::F16 => "f16",
            DType::Bf16 => "bf16",
            DType::I32 => "i32",
            DType::I64 => "i64",
            DType::U8 => "u8",
        }
    }

    /// Bytes per element.
    pub fn size_bytes(self) -> u64 {
        match self {
            DType::F64 | DType::I64 => 8,
            DType::F32 | DType::I32 => 4,
            DType::F16 | DType::Bf16 => 2,
            DType::U8 => 1,
        }
    }

    /// Whether the type is a floating-point type.
    pub fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::F64 | DType::F16 | DType::Bf16)
    }

    /// The C++ type a kernel parameter of this dtype has (pointer element or scalar).
    pub fn cuda_type(self) -> &'static str {
        match self {
            DType::F32 => "float",
            DType::F64 => "double",
            DType::F16 => "__half",
            DType::Bf16 => "__nv_bfloat16",
            DType::I32 => "int",
            DType::I64 => "long long",
            DType::U8 => "unsigned char",
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Data direction of a buffer parameter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Direction {
    /// Read only: filled with inputs, must be left unchanged.
    In,
    /// Written: poisoned before each run and compared with the reference.
    Out,
    /// Read and written: filled with inputs, restored before each run, compared.
    Inout,
}

impl Direction {
    fn parse(s: &str) -> Option<Direction> {
        match s {
            "in" => Some(Direction::In),
            "out" => Some(Direction::Out),
            "inout" => Some(Direction::Inout),
            _ => None,
        }
    }

    /// Whether the buffer receives input data.
    pub fn is_input(self) -> bool {
        matches!(self, Direction::In | Direction::Inout)
    }

    /// Whether the buffer is compared against the reference.
    pub fn is_output(self) -> bool {
        matches!(self, Direction::Out | Direction::Inout)
    }
}

/// One kernel parameter of the task's ABI.
#[derive(Debug, Clone, PartialEq)]
pub enum Param {
    /// A device pointer to `len` elements.
    Buffer {
        /// Parameter name.
        name: String,
        /// Data direction.
        direction: Direction,
        /// Element type.
        dtype: DType,
        /// Element count as an expression over the config sizes.
        len: Expr,
        /// The tensor shape the original program sees (`shape = ["rows", "cols"]`), outermost
        /// first; its product equals `len` in every config. Empty: a flat array of `len`.
        shape: Vec<Expr>,
    },
    /// A value passed by value.
    Scalar {
        /// Parameter name.
        name: String,
        /// Type.
        dtype: DType,
        /// Value as an expression over the config sizes.
        value: Expr,
    },
}

impl Param {
    /// The parameter's name.
    pub fn name(&self) -> &str {
        match self {
            Param::Buffer { name, .. } | Param::Scalar { name, .. } => name,
        }
    }

    /// The parameter's dtype.
    pub fn dtype(&self) -> DType {
        match self {
            Param::Buffer { dtype, .. } | Param::Scalar { dtype, .. } => *dtype,
        }
    }
}

/// One input configuration: named integer sizes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InputConfig {
    /// Config name, unique within the task.
    pub name: String,
    /// The sizes.
    pub sizes: Sizes,
}

/// A bound that is either a number or an expression over sizes (`high = "n"`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Bound {
    /// A literal.
    Num(f64),
    /// An expression over the config sizes.
    Expr(String),
}

impl Bound {
    /// Evaluates the bound for a config.
    pub fn eval(&self, sizes: &Sizes) -> Result<f64, crate::expr::ExprError> {
        match self {
            Bound::Num(v) => Ok(*v),
            Bound::Expr(e) => Expr::parse(e)?.eval_f64(sizes),
        }
    }
}

/// How an input buffer is filled. Random distributions use a per-call seed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "dist", rename_all = "snake_case", deny_unknown_fields)]
pub enum Distribution {
    /// Uniform in `[low, high)`.
    Uniform {
        /// Lower bound.
        low: Bound,
        /// Upper bound (exclusive).
        high: Bound,
    },
    /// Normal with the given mean and standard deviation.
    Normal {
        /// Mean.
        mean: Bound,
        /// Standard deviation.
        std: Bound,
    },
    /// Integers uniform in `[low, high)`.
    IntRange {
        /// Lower bound.
        low: Bound,
        /// Upper bound (exclusive).
        high: Bound,
    },
    /// Element `i` is `start + i * step` (deterministic: CSR row pointers, offsets).
    Arange {
        /// First value.
        start: Bound,
        /// Increment.
        step: Bound,
    },
    /// Every element equals `value`.
    Constant {
        /// The value.
        value: Bound,
    },
    /// A non-decreasing sequence of irregular steps, for offsets such as CSR row pointers
    /// with rows of varied length: element 0 is `start`, the last is `start + (n-1)*step`,
    /// and each element in between is `start + i*step` plus a random integer in
    /// `[0, step]`, so consecutive differences (row lengths) range over `[0, 2*step]`, empty
    /// rows included.
    Ragged {
        /// First value.
        start: Bound,
        /// Mean increment (an integer >= 0).
        step: Bound,
    },
    /// Values of `base` with special floating-point values mixed in at `rate`: NaN, ±Inf,
    /// -0.0, denormals. Only for float buffers of tasks whose original defines what these do.
    Special {
        /// The distribution of the other elements.
        base: Box<Distribution>,
        /// Which special values appear.
        values: Vec<SpecialValue>,
        /// Fraction of elements replaced, in (0, 1].
        rate: f64,
    },
}

/// A special floating-point value an input regime may mix in ([`Distribution::Special`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum SpecialValue {
    /// A quiet NaN.
    #[serde(rename = "nan")]
    Nan,
    /// +Inf.
    #[serde(rename = "inf")]
    Inf,
    /// -Inf.
    #[serde(rename = "-inf")]
    NegInf,
    /// Negative zero.
    #[serde(rename = "-0")]
    NegZero,
    /// A subnormal of the buffer's type, of either sign.
    #[serde(rename = "denormal")]
    Denormal,
}

impl SpecialValue {
    /// Its bit in [`crate::exec::Fill::special`] (the input generator's encoding).
    pub fn bit(self) -> u32 {
        match self {
            SpecialValue::Nan => 1,
            SpecialValue::Inf => 2,
            SpecialValue::NegInf => 4,
            SpecialValue::NegZero => 8,
            SpecialValue::Denormal => 16,
        }
    }
}

impl Distribution {
    /// The default for a dtype: floats uniform in [-1, 1), bytes [0, 256), other integers [0, 100).
    pub fn default_for(dtype: DType) -> Distribution {
        match dtype {
            d if d.is_float() => Distribution::Uniform {
                low: Bound::Num(-1.0),
                high: Bound::Num(1.0),
            },
            DType::U8 => Distribution::IntRange {
                low: Bound::Num(0.0),
                high: Bound::Num(256.0),
            },
            _ => Distribution::IntRange {
                low: Bound::Num(0.0),
                high: Bound::Num(100.0),
            },
        }
    }

    /// Whether the values differ between two input sets (false for `arange` and `constant`).
    pub fn is_random(&self) -> bool {
        match self {
            Distribution::Uniform { .. }
            | Distribution::Normal { .. }
            | Distribution::IntRange { .. }
            | Distribution::Ragged { .. }
            | Distribution::Special { .. } => true,
            Distribution::Arange { .. } | Distribution::Constant { .. } => false,
        }
    }

    fn bounds(&self) -> Vec<&Bound> {
        match self {
            Distribution::Uniform { low, high } | Distribution::IntRange { low, high } => {
                vec![low, high]
            }
            Distribution::Normal { mean, std } => vec![mean, std],
            Distribution::Arange { start, step } | Distribution::Ragged { start, step } => {
                vec![start, step]
            }
            Distribution::Constant { value } => vec![value],
            Distribution::Special { base, .. } => base.bounds(),
        }
    }

    /// What is wrong with this distribution for a buffer of `dtype`, if anything.
    fn check(&self, dtype: DType) -> Result<(), String> {
        match self {
            Distribution::Special { base, values, rate } => {
                if !dtype.is_float() {
                    return Err(format!("special values need a float buffer, not {dtype}"));
                }
                if values.is_empty() {
                    return Err("`values` lists no special value".into());
                }
                if !(rate.is_finite() && *rate > 0.0 && *rate <= 1.0) {
                    return Err(format!("`rate` is {rate}; it must be in (0, 1]"));
                }
                if matches!(**base, Distribution::Special { .. }) {
                    return Err("`base` cannot itself be `special`".into());
                }
                base.check(dtype)
            }
            _ => Ok(()),
        }
    }
}

/// Element-wise tolerance: `|got - want| <= atol + rtol * |want|`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Tolerance {
    /// Absolute tolerance.
    pub atol: f64,
    /// Relative tolerance.
    pub rtol: f64,
}

impl Default for Tolerance {
    fn default() -> Self {
        Tolerance {
            atol: 1e-5,
            rtol: 1e-5,
        }
    }
}

/// A CUDA source file of the task (reference or known implementation).
#[derive(Debug, Clone, PartialEq)]
pub struct Implementation {
    /// File stem, e.g. `shared_tiled`; the reference is named `reference`.
    pub name: String,
    /// Path of the file.
    pub path: PathBuf,
    /// Its text.
    pub source: String,
}

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

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTask {
    id: String,
    kind: String,
    #[serde(default)]
    title: String,
    original: String,
    reference: String,
    #[serde(default)]
    implementations: Vec<String>,
    #[serde(default)]
    tolerance: Option<Tolerance>,
    #[serde(default)]
    params: Vec<RawParam>,
    #[serde(default)]
    configs: Vec<InputConfig>,
    #[serde(default)]
    inputs: BTreeMap<String, Distribution>,
    #[serde(default)]
    flops: Option<String>,
    #[serde(default)]
    numpy_twin: Option<String>,
    #[serde(default)]
    min_bytes: Option<String>,
    #[serde(default)]
    precision: PrecisionContract,
    #[serde(default)]
    regimes: Vec<Regime>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawParam {
    name: String,
    kind: String,
    #[serde(default)]
    direction: Option<String>,
    dtype: String,
    #[serde(default)]
    len: Option<String>,
    #[serde(default)]
    value: Option<String>,
    #[serde(default)]
    shape: Option<Vec<String>>,
}

fn is_identifier(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Gives a task file's path and text from `(field, name)`.
type FileReader<'a> = dyn Fn(&str, &str) -> Result<(PathBuf, String), TaskError> + 'a;

/// A file named by a task must be a plain relative name inside the task folder.
fn check_task_file_name(toml: &Path, field: &str, name: &str) -> Result<(), TaskError> {
    let rel = Path::new(name);
    if name.is_empty()
        || rel.is_absolute()
        || rel
            .components()
            .any(|c| !matches!(c, std::path::Component::Normal(_)))
    {
        return Err(TaskError::Invalid {
            path: toml.to_path_buf(),
            field: field.to_string(),
            message: format!("`{name}` must be a file name inside the task folder"),
        });
    }
    Ok(())
}

/// Reads a file that must stay inside the task folder.
fn read_task_file(
    dir: &Path,
    toml: &Path,
    field: &str,
    name: &str,
) -> Result<(PathBuf, String), TaskError> {
    let invalid = |message: String| TaskError::Invalid {
        path: toml.to_path_buf(),
        field: field.to_string(),
        message,
    };
    check_task_file_name(toml, field, name)?;
    let path = dir.join(name);
    match std::fs::read(&path) {
        Ok(bytes) => String::from_utf8(bytes)
            .map(|s| (path.clone(), s))
            .map_err(|_| invalid(format!("{} is not UTF-8 text", path.display()))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            Err(invalid(format!("file {} does not exist", path.display())))
        }
        Err(source) => Err(TaskError::Io { path, source }),
    }
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
            read_task_file(dir, toml_path, field, name)
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
            check_task_file_name(toml_path, field, name)?;
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
        read: &FileReader,
    ) -> Result<Task, TaskError> {
        let raw: RawTask = toml::from_str(text).map_err(|e| TaskError::Parse {
            path: toml_path.to_path_buf(),
            message: e.to_string(),
        })?;
        let invalid = |field: String, message: String| TaskError::Invalid {
            path: toml_path.to_path_buf(),
            field,
            message,
        };

        if raw.id.is_empty()
            || !raw
                .id
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        {
            return Err(invalid(
                "id".into(),
                format!("`{}` must match [a-z0-9_]+", raw.id),
            ));
        }
        if let Some(folder) = dir.file_name().and_then(|f| f.to_str()) {
            if folder != raw.id && dir.join("task.toml") == toml_path {
                return Err(invalid(
                    "id".into(),
                    format!("`{}` differs from the folder name `{folder}`", raw.id),
                ));
            }
        }
        let kind = match raw.kind.as_str() {
            "c2cuda" => TaskKind::C2cuda,
            "torch2cuda" => TaskKind::Torch2cuda,
            other => {
                return Err(invalid(
                    "kind".into(),
                    format!("unknown kind `{other}` (expected c2cuda or torch2cuda)"),
                ))
            }
        };
        if raw.reference == raw.original && kind != TaskKind::Torch2cuda {
            return Err(invalid(
                "reference".into(),
                "only a torch2cuda task can name its original as the reference (a PyTorch reference)".into(),
            ));
        }

        // Configs first: expressions are checked against their size names.
        if raw.configs.is_empty() {
            return Err(invalid(
                "configs".into(),
                "at least one [[configs]] entry is required".into(),
            ));
        }
        let mut seen = BTreeSet::new();
        for (i, c) in raw.configs.iter().enumerate() {
            if !seen.insert(c.name.as_str()) {
                return Err(invalid(
                    format!("configs[{i}].name"),
                    format!("duplicate config name `{}`", c.name),
                ));
            }
            if c.sizes.is_empty() {
                return Err(invalid(
                    format!("configs[{i}].sizes"),
                    "no sizes given".into(),
                ));
            }
            for (name, v) in &c.sizes {
                if !is_identifier(name) {
                    return Err(invalid(
                        format!("configs[{i}].sizes.{name}"),
                        "size names must be identifiers".into(),
                    ));
                }
                if *v < 0 {
                    return Err(invalid(
                        format!("configs[{i}].sizes.{name}"),
                        format!("size {v} is negative"),
                    ));
                }
            }
        }

        let mut params = Vec::with_capacity(raw.params.len());
        let mut names = BTreeSet::new();
        for (i, p) in raw.params.into_iter().enumerate() {
            let field = |f: &str| format!("params[{i}].{f}");
            if !is_identifier(&p.name) {
                return Err(invalid(
                    field("name"),
                    format!("`{}` is not an identifier", p.name),
                ));
            }
            if !names.insert(p.name.clone()) {
                return Err(invalid(
                    field("name"),
                    format!("duplicate parameter name `{}`", p.name),
                ));
            }
            let dtype = DType::parse(&p.dtype).ok_or_else(|| {
                invalid(
                    field("dtype"),
                    format!(
                        "unknown dtype `{}` (expected one of f32, f64, f16, bf16, i32, i64, u8)",
                        p.dtype
                    ),
                )
            })?;
            let parse_expr = |f: &str, text: &str| -> Result<Expr, TaskError> {
                let e = Expr::parse(text).map_err(|e| invalid(field(f), e.to_string()))?;
                for (ci, c) in raw.configs.iter().enumerate() {
                    e.check_names(c.sizes.keys().map(String::as_str))
                        .map_err(|err| {
                            invalid(
                                field(f),
                                format!("{err} in config `{}` (configs[{ci}])", c.name),
                            )
                        })?;
                }
                Ok(e)
            };
            let param = match p.kind.as_str() {
                "buffer" => {
                    let dir_text = p.direction.as_deref().ok_or_else(|| {
                        invalid(
                            field("direction"),
                            "buffers need a direction (in, out, inout)".into(),
                        )
                    })?;
                    let direction = Direction::parse(dir_text).ok_or_else(|| {
                        invalid(
                            field("direction"),
                            format!("unknown direction `{dir_text}` (expected in, out or inout)"),
                        )
                    })?;
                    let len_text = p.len.as_deref().ok_or_else(|| {
                        invalid(field("len"), "buffers need a length expression".into())
                    })?;
                    let len = parse_expr("len", len_text)?;
                    let mut shape = Vec::new();
                    for (k, d) in p.shape.iter().flatten().enumerate() {
                        shape.push(parse_expr(&format!("shape[{k}]"), d)?);
                    }
                    if !shape.is_empty() {
                        for c in &raw.configs {
                            let n = len.eval_int(&c.sizes).unwrap_or(-1);
                            let dims: Result<Vec<i64>, _> =
                                shape.iter().map(|d| d.eval_int(&c.sizes)).collect();
                            let dims = dims.map_err(|e| invalid(field("shape"), e.to_string()))?;
                            let product = dims.iter().try_fold(1i64, |a, &d| a.checked_mul(d));
                            if dims.iter().any(|&d| d < 0) || product != Some(n) {
                                return Err(invalid(
                                    field("shape"),
                                    format!(
                                        "shape {dims:?} does not hold len = {n} elements in config `{}`",
                                        c.name
                                    ),
                                ));
                            }
                        }
                    }
                    Param::Buffer {
                        name: p.name,
                        direction,
                        dtype,
                        len,
                        shape,
                    }
                }
                "scalar" => {
                    if p.shape.is_some() {
                        return Err(invalid(field("shape"), "only buffers have a shape".into()));
                    }
                    let value_text = p.value.as_deref().ok_or_else(|| {
                        invalid(field("value"), "scalars need a value expression".into())
                    })?;
                    Param::Scalar {
                        name: p.name,
                        dtype,
                        value: parse_expr("value", value_text)?,
                    }
                }
                other => {
                    return Err(invalid(
                        field("kind"),
                        format!("unknown parameter kind `{other}` (expected buffer or scalar)"),
                    ))
                }
            };
            params.push(param);
        }
        if !params
            .iter()
            .any(|p| matches!(p, Param::Buffer { direction, .. } if direction.is_output()))
        {
            return Err(invalid(
                "params".into(),
                "the ABI has no out or inout buffer, so nothing can be checked".into(),
            ));
        }

        // Distributions: only for input buffers; defaults filled in.
        let check_inputs = |prefix: &str,
                            given: &BTreeMap<String, Distribution>,
                            configs: &[&InputConfig]|
         -> Result<(), TaskError> {
            for (name, dist) in given {
                let field = format!("{prefix}.{name}");
                let dtype = match params.iter().find(|p| p.name() == name) {
                    Some(Param::Buffer {
                        direction, dtype, ..
                    }) if direction.is_input() => *dtype,
                    Some(_) => {
                        return Err(invalid(field, format!("`{name}` is not an input buffer")))
                    }
                    None => return Err(invalid(field, format!("no parameter named `{name}`"))),
                };
                dist.check(dtype).map_err(|m| invalid(field.clone(), m))?;
                for b in dist.bounds() {
                    for c in configs {
                        b.eval(&c.sizes).map_err(|e| {
                            invalid(field.clone(), format!("{e} in config `{}`", c.name))
                        })?;
                    }
                }
            }
            Ok(())
        };
        let all_configs: Vec<&InputConfig> = raw.configs.iter().collect();
        check_inputs("inputs", &raw.inputs, &all_configs)?;
        let mut inputs = raw.inputs.clone();
        for p in &params {
            if let Param::Buffer {
                name,
                direction,
                dtype,
                ..
            } = p
            {
                if direction.is_input() && !inputs.contains_key(name) {
                    inputs.insert(name.clone(), Distribution::default_for(*dtype));
                }
            }
        }

        let tolerance = raw.tolerance.unwrap_or_default();
        let valid = |x: f64| x.is_finite() && x >= 0.0;
        if !(valid(tolerance.atol) && valid(tolerance.rtol)) {
            return Err(invalid(
                "tolerance".into(),
                "atol and rtol must be finite and >= 0".into(),
            ));
        }

        // A count over the sizes that must be finite and >= 0 in every config.
        let count = |field: &str, text: &Option<String>| -> Result<Option<Expr>, TaskError> {
            let Some(text) = text else { return Ok(None) };
            let e = Expr::parse(text).map_err(|e| invalid(field.into(), e.to_string()))?;
            for (ci, c) in raw.configs.iter().enumerate() {
                let v = e.eval_f64(&c.sizes).map_err(|err| {
                    invalid(
                        field.into(),
                        format!("{err} in config `{}` (configs[{ci}])", c.name),
                    )
                })?;
                if !(v.is_finite() && v >= 0.0) {
                    return Err(invalid(
                        field.into(),
                        format!(
                            "evaluates to {v} in config `{}` (configs[{ci}]); it must be a finite count >= 0",
                            c.name
                        ),
                    ));
                }
            }
            Ok(Some(e))
        };
        let flops = count("flops", &raw.flops)?;
        let min_bytes = count("min_bytes", &raw.min_bytes)?;

        // The precision contract: lowering it below an input's own type needs a reason.
        let precision = raw.precision.clone();
        if let Some(p) = precision.operands {
            let lowered = params.iter().any(|param| {
                matches!(param, Param::Buffer { direction, dtype, .. }
                    if direction.is_input() && Precision::of(*dtype).is_some_and(|own| p > own))
            });
            if lowered && precision.reason.trim().is_empty() {
                return Err(invalid(
                    "precision.reason".into(),
                    format!("`operands = \"{p}\"` allows less precision than the inputs' types: say why in `reason`"),
                ));
            }
        }

        // Input regimes: unique names, known configs, valid distributions.
        let mut regime_names = BTreeSet::new();
        for (ri, r) in raw.regimes.iter().enumerate() {
            let field = |f: &str| format!("regimes[{ri}].{f}");
            if !is_identifier(&r.name) || !regime_names.insert(r.name.as_str()) {
                return Err(invalid(
                    field("name"),
                    format!(
                        "`{}` must be an identifier, unique among the regimes",
                        r.name
                    ),
                ));
            }
            if r.inputs.is_empty() {
                return Err(invalid(
                    field("inputs"),
                    "a regime replaces the distribution of at least one input".into(),
                ));
            }
            for name in &r.configs {
                if !raw.configs.iter().any(|c| &c.name == name) {
                    return Err(invalid(
                        field("configs"),
                        format!("no config named `{name}`"),
                    ));
                }
            }
            let configs: Vec<&InputConfig> = raw
                .configs
                .iter()
                .filter(|c| r.applies_to(&c.name))
                .collect();
            check_inputs(&field("inputs"), &r.inputs, &configs)?;
        }

        let (_, original) = read("original", &raw.original)?;
        let numpy_twin = match &raw.numpy_twin {
            None => None,
            Some(f) if kind == TaskKind::Torch2cuda => {
                read("numpy_twin", f)?;
                Some(f.clone())
            }
            Some(_) => {
                return Err(invalid(
                    "numpy_twin".into(),
                    "only torch2cuda tasks have a NumPy twin of their original".into(),
                ))
            }
        };
        let load_impl = |field: String, file: &str| -> Result<Implementation, TaskError> {
            let (path, source) = read(&field, file)?;
            let name = Path::new(file)
                .file_stem()
                .and_then(|s| s.to_str())
                .unwrap_or(file)
                .to_string();
            Ok(Implementation { name, path, source })
        };
        let reference = load_impl("reference".into(), &raw.reference)?;
        let mut implementations = Vec::new();
        let mut impl_names = BTreeSet::from([reference.name.clone()]);
        for (i, f) in raw.implementations.iter().enumerate() {
            let imp = load_impl(format!("implementations[{i}]"), f)?;
            if !impl_names.insert(imp.name.clone()) {
                return Err(invalid(
                    format!("implementations[{i}]"),
                    format!("duplicate implementation name `{}`", imp.name),
                ));
            }
            implementations.push(imp);
        }

        let task = Task {
            id: raw.id,
            kind,
            title: raw.title,
            dir: dir.to_path_buf(),
            original_file: raw.original,
            original,
            params,
            configs: raw.configs,
            inputs,
            tolerance,
            reference,
            implementations,
            flops,
            numpy_twin,
            min_bytes,
            precision,
            regimes: raw.regimes,
        };
        for (ci, c) in task.configs.iter().enumerate() {
            let bytes = task.buffer_bytes(c).map_err(|m| {
                invalid(
                    format!("configs[{ci}]"),
                    format!("config `{}`: {m}", c.name),
                )
            })?;
            if bytes > limits.max_buffer_bytes {
                return Err(invalid(
                    format!("configs[{ci}]"),
                    limits.over_cap(&c.name, bytes),
                ));
            }
        }
        Ok(task)
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
