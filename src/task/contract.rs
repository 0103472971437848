//! What a task promises beyond its ABI and its main input distribution: the precision its
//! results must have, the other input regimes its semantics define, and the least work its
//! computation needs (its floors). Correctness checks every part on every job; a kernel that
//! meets the tolerance only on the main distribution, or only with lower-precision
//! arithmetic than the task allows, is incorrect.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{DType, Distribution};

/// A floating-point format a computation may round its inputs to, from the most precise.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Precision {
    /// IEEE double (52 mantissa bits).
    F64,
    /// IEEE single (23 mantissa bits).
    F32,
    /// TensorFloat-32, the tensor cores' float mode (10 mantissa bits, f32's range).
    Tf32,
    /// IEEE half (10 mantissa bits, a narrow range).
    F16,
    /// bfloat16 (7 mantissa bits, f32's range).
    Bf16,
}

impl Precision {
    /// The name used in task files and reports.
    pub fn as_str(self) -> &'static str {
        match self {
            Precision::F64 => "f64",
            Precision::F32 => "f32",
            Precision::Tf32 => "tf32",
            Precision::F16 => "f16",
            Precision::Bf16 => "bf16",
        }
    }

    /// The precision of a buffer type (`None` for integers).
    pub fn of(dtype: DType) -> Option<Precision> {
        match dtype {
            DType::F64 => Some(Precision::F64),
            DType::F32 => Some(Precision::F32),
            DType::F16 => Some(Precision::F16),
            DType::Bf16 => Some(Precision::Bf16),
            _ => None,
        }
    }
}

impl std::fmt::Display for Precision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Mantissa bits `[lo, hi)` of a float input that the precision probe changes: bits a
/// computation at the contract's precision keeps, and the next coarser format rounds off.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProbeBits {
    /// Lowest bit changed.
    pub lo: u32,
    /// One past the highest bit changed.
    pub hi: u32,
}

/// The task's precision contract (`[precision]` in task.toml).
///
/// By default every floating-point input must be used at its own precision: an `f32` input
/// rounded to TF32, FP16 or BF16 (as tensor cores do) is judged incorrect, however loose the
/// tolerance. A task that accepts lower precision says so, with the reason, and the report
/// shows it.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PrecisionContract {
    /// The least precision inputs may be rounded to (`None`: each input's own type).
    #[serde(default)]
    pub operands: Option<Precision>,
    /// Why lower precision is acceptable (required with `operands` below an input's type).
    #[serde(default)]
    pub reason: String,
}

impl PrecisionContract {
    /// The precision an input of `dtype` must keep (`None`: not a float).
    pub fn required(&self, dtype: DType) -> Option<Precision> {
        let own = Precision::of(dtype)?;
        Some(self.operands.map_or(own, |p| p.max(own)))
    }

    /// The bits the probe changes in an input of `dtype`, or `None` when there is nothing
    /// to probe (an integer or half-precision input, or a contract that allows 16-bit
    /// formats). Bit 0 is set on both input sets, so the rounding of the coarser format sees
    /// the same sticky bit and rounds both alike.
    pub fn probe_bits(&self, dtype: DType) -> Option<ProbeBits> {
        let required = self.required(dtype)?;
        match (dtype, required) {
            // Bits 0..12 of an f32: kept by f32, rounded off by TF32, FP16 and BF16 (their
            // round bit is 12 or higher, which stays as generated).
            (DType::F32, Precision::F32) => Some(ProbeBits { lo: 1, hi: 12 }),
            // Bits 13 and 14: kept by TF32, rounded off by BF16 (round bit 15).
            (DType::F32, Precision::Tf32) => Some(ProbeBits { lo: 13, hi: 15 }),
            // Bits 1..28 of an f64: kept by f64, rounded off by f32 (round bit 28).
            (DType::F64, Precision::F64) => Some(ProbeBits { lo: 1, hi: 28 }),
            // Bits 29..41: kept by f32, rounded off by TF32 (round bit 41).
            (DType::F64, Precision::F32) => Some(ProbeBits { lo: 29, hi: 41 }),
            (DType::F64, Precision::Tf32) => Some(ProbeBits { lo: 42, hi: 44 }),
            _ => None,
        }
    }

    /// One line for prompts and reports.
    pub fn describe(&self) -> String {
        match self.operands {
            None => {
                "floating-point inputs are used at their own precision (no TF32/FP16/BF16 rounding)"
                    .into()
            }
            Some(p) => format!(
                "floating-point inputs may be rounded to {p} or finer{}",
                if self.reason.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", self.reason)
                }
            ),
        }
    }
}

/// An input regime (`[[regimes]]`): other distributions for some inputs, on which every job
/// also checks correctness, once per config it runs on (timing keeps the main
/// distribution).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Regime {
    /// Name, unique within the task (`full_range`, `ragged_rows`, `special_values`...).
    pub name: String,
    /// What in the task's semantics this regime exercises.
    #[serde(default)]
    pub why: String,
    /// The configs it runs on (empty: the timed config, where a kernel that is wrong in
    /// general would earn its speed; its bounds must evaluate on every config).
    #[serde(default)]
    pub configs: Vec<String>,
    /// Distributions replacing the main ones, per input buffer (the others keep theirs).
    #[serde(default)]
    pub inputs: BTreeMap<String, Distribution>,
}

impl Regime {
    /// Whether config `name` is one the regime can run on (all configs when it lists none;
    /// a job then runs it on the timed one).
    pub fn applies_to(&self, config: &str) -> bool {
        self.configs.is_empty() || self.configs.iter().any(|c| c == config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probes_follow_the_contract() {
        let default = PrecisionContract::default();
        assert_eq!(default.required(DType::F32), Some(Precision::F32));
        assert_eq!(default.required(DType::I32), None);
        assert_eq!(
            default.probe_bits(DType::F32),
            Some(ProbeBits { lo: 1, hi: 12 })
        );
        assert_eq!(default.probe_bits(DType::F16), None);
        let tf32 = PrecisionContract {
            operands: Some(Precision::Tf32),
            reason: "tensor cores".into(),
        };
        assert_eq!(
            tf32.probe_bits(DType::F32),
            Some(ProbeBits { lo: 13, hi: 15 })
        );
        let half = PrecisionContract {
            operands: Some(Precision::F16),
            reason: "tensor cores".into(),
        };
        assert_eq!(half.probe_bits(DType::F32), None);
        // A contract never asks more of an input than its own type holds.
        assert_eq!(half.required(DType::Bf16), Some(Precision::Bf16));
        assert_eq!(tf32.required(DType::F64), Some(Precision::Tf32));
    }

    #[test]
    fn probe_bits_sit_below_the_format_they_require_and_above_the_next() {
        // The round bit of f32 -> TF32/FP16 is bit 12, of f32 -> BF16 bit 15, of f64 -> f32
        // bit 28: the probe never touches a round bit, so the coarser format rounds both
        // input sets alike and its output cannot follow the change.
        let c = PrecisionContract::default();
        let f32 = c.probe_bits(DType::F32).unwrap();
        assert!(f32.hi <= 12);
        let f64 = c.probe_bits(DType::F64).unwrap();
        assert!(f64.hi <= 28);
    }
}
