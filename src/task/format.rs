//! The task format: the types a `task.toml` describes (ABI parameters, configurations,
//! input distributions, tolerance) and its raw TOML shape before validation.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::expr::{Expr, Sizes};

use super::{PrecisionContract, Regime};

/// A buffer parameter of a task's ABI, borrowed ([`Task::buffers`](super::Task::buffers)).
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
    pub(super) fn parse(s: &str) -> Option<Direction> {
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

    pub(super) fn bounds(&self) -> Vec<&Bound> {
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
    pub(super) fn check(&self, dtype: DType) -> Result<(), String> {
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

/// `task.toml` as written, before validation.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTask {
    pub(super) id: String,
    pub(super) kind: String,
    #[serde(default)]
    pub(super) title: String,
    pub(super) original: String,
    pub(super) reference: String,
    #[serde(default)]
    pub(super) implementations: Vec<String>,
    #[serde(default)]
    pub(super) tolerance: Option<Tolerance>,
    #[serde(default)]
    pub(super) params: Vec<RawParam>,
    #[serde(default)]
    pub(super) configs: Vec<InputConfig>,
    #[serde(default)]
    pub(super) inputs: BTreeMap<String, Distribution>,
    #[serde(default)]
    pub(super) flops: Option<String>,
    #[serde(default)]
    pub(super) numpy_twin: Option<String>,
    #[serde(default)]
    pub(super) min_bytes: Option<String>,
    #[serde(default)]
    pub(super) precision: PrecisionContract,
    #[serde(default)]
    pub(super) regimes: Vec<Regime>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawParam {
    pub(super) name: String,
    pub(super) kind: String,
    #[serde(default)]
    pub(super) direction: Option<String>,
    pub(super) dtype: String,
    #[serde(default)]
    pub(super) len: Option<String>,
    #[serde(default)]
    pub(super) value: Option<String>,
    #[serde(default)]
    pub(super) shape: Option<Vec<String>>,
}
