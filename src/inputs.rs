//! The CPU twin of the device input generator (`exec/support.cu`): the same numbers for the
//! same seed, so that a task's original program can be run on exactly the inputs the
//! reference sees on the GPU (`originals`), and so that a test can hold the device to it.
//!
//! Element `i` of a buffer depends only on `(seed, i)` through a 64-bit hash (splitmix64's
//! finaliser), which is why any element can be generated on its own on either side. The
//! uniform, integer, arange and constant modes are exact twins. The normal mode goes through
//! `log`, `sqrt` and `cospi` in double precision, where CUDA's `log` and `cospi` may differ
//! from the host's by an ulp of a double; after rounding to the buffer's type that changes an
//! element with a probability of about 2^-29 for `f32` (the GPU test counts such elements).
//!
//! ```
//! use cudaperf::exec::Fill;
//! use cudaperf::inputs::fill_bytes;
//! use cudaperf::task::DType;
//! let ramp = Fill::new(3, 1.0, 0.5, false);
//! let bytes = fill_bytes(DType::F32, 3, 42, &ramp);
//! let v: Vec<f32> = bytes.chunks(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect();
//! assert_eq!(v, [1.0, 1.5, 2.0]);
//! ```

use crate::exec::{ConfigValues, Fill, ValuesError};
use crate::task::{DType, InputConfig, Regime, Task};

pub use crate::exec::secret::{buffer_seed, mix64};

/// A uniform double in [0, 1) for element `i`, stream `stream`.
fn u01(seed: u64, i: u64, stream: u64) -> f64 {
    let h = mix64(seed ^ mix64(i.wrapping_mul(2).wrapping_add(stream)));
    (h >> 11) as f64 * (1.0 / 9_007_199_254_740_992.0)
}

/// cos(pi x) for x in [0, 2], reduced exactly to a quarter period first (as CUDA's `cospi`
/// does) so that the zeros and signs fall where the device's do.
fn cospi(x: f64) -> f64 {
    // x - k/2 is exact for doubles in [0, 2].
    let k = (x * 2.0).round();
    let r = x - k * 0.5; // in [-0.25, 0.25]
    let t = std::f64::consts::PI * r;
    match (k as i64).rem_euclid(4) {
        0 => t.cos(),
        1 => -t.sin(),
        2 => -t.cos(),
        _ => t.sin(),
    }
}

/// The smallest normal value of a float type (denormals are a fraction of it).
fn min_normal(dtype: DType) -> f64 {
    match dtype {
        DType::F64 => f64::MIN_POSITIVE,
        DType::F16 => 6.103_515_625e-5, // 2^-14
        _ => f32::MIN_POSITIVE as f64,  // f32 and bf16: 2^-126
    }
}

/// The special value element `i` takes instead of its drawn one, if any (`Fill::special`).
fn special_value(i: u64, seed: u64, f: &Fill, dtype: DType) -> Option<f64> {
    if f.special == 0 || u01(seed, i, 2) >= f.special_rate {
        return None;
    }
    let chosen = mix64(seed ^ mix64(i.wrapping_mul(2).wrapping_add(3)));
    let k = chosen % u64::from(f.special.count_ones());
    let bit = (0..32)
        .map(|b| 1u32 << b)
        .filter(|b| f.special & b != 0)
        .nth(k as usize)
        .unwrap_or(1);
    let sign = if chosen >> 63 == 1 { -1.0 } else { 1.0 };
    Some(match bit {
        1 => f64::NAN,
        2 => f64::INFINITY,
        4 => f64::NEG_INFINITY,
        8 => -0.0,
        _ => sign * (0.25 + 0.5 * u01(seed, i, 3)) * min_normal(dtype),
    })
}

/// The value (in double precision, before conversion to the buffer's type) of element `i`
/// of a buffer of `n` elements of `dtype`.
pub fn fill_value(i: u64, n: u64, seed: u64, f: &Fill, dtype: DType) -> f64 {
    if let Some(v) = special_value(i, seed, f, dtype) {
        return v;
    }
    let (a, b) = (f.a, f.b);
    match f.mode {
        0 => a + (b - a) * u01(seed, i, 0),
        1 => {
            let (u1, u2) = (u01(seed, i, 0), u01(seed, i, 1));
            a + b * (-2.0 * (1.0 - u1).ln()).sqrt() * cospi(2.0 * u2)
        }
        2 => {
            let (lo, hi) = (a.ceil(), b.ceil());
            let span = if hi > lo { (hi - lo) as u64 } else { 1 };
            lo + (mix64(seed ^ mix64(i)) % span) as f64
        }
        3 => a + i as f64 * b,
        5 => {
            let base = a + i as f64 * b;
            if i == 0 || i + 1 >= n {
                base
            } else {
                base + (u01(seed, i, 0) * (b + 1.0)).floor()
            }
        }
        _ => a,
    }
}

/// Appends `v` converted as the device's `from_double<T>` does; a NaN (only special values
/// are NaN) as the type's quiet NaN, as the device's `typed_nan<T>` writes it.
fn push_as(out: &mut Vec<u8>, dtype: DType, v: f64) {
    if v.is_nan() {
        match dtype {
            DType::F32 => return out.extend_from_slice(&0x7FC0_0000u32.to_le_bytes()),
            DType::F64 => return out.extend_from_slice(&0x7FF8_0000_0000_0000u64.to_le_bytes()),
            DType::F16 => return out.extend_from_slice(&0x7E00u16.to_le_bytes()),
            DType::Bf16 => return out.extend_from_slice(&0x7FC0u16.to_le_bytes()),
            _ => {}
        }
    }
    match dtype {
        DType::F32 => out.extend_from_slice(&(v as f32).to_le_bytes()),
        DType::F64 => out.extend_from_slice(&v.to_le_bytes()),
        DType::F16 => out.extend_from_slice(&half::f16::from_f32(v as f32).to_le_bytes()),
        DType::Bf16 => out.extend_from_slice(&half::bf16::from_f32(v as f32).to_le_bytes()),
        DType::I32 => out.extend_from_slice(&(v as i32).to_le_bytes()),
        DType::I64 => out.extend_from_slice(&(v as i64).to_le_bytes()),
        // cvt.rzi to 32 bits, then the low byte, as the device's (unsigned char) cast does.
        DType::U8 => out.push((v as i64) as u8),
    }
}

/// The bytes `support.cu`'s `fill` writes into a buffer of `n` elements of `dtype`.
pub fn fill_bytes(dtype: DType, n: u64, seed: u64, f: &Fill) -> Vec<u8> {
    let mut out = Vec::with_capacity((n * dtype.size_bytes()) as usize);
    for i in 0..n {
        push_as(&mut out, dtype, fill_value(i, n, seed, f, dtype));
    }
    out
}

/// One input set of a config on the host: per ABI buffer, its bytes for `in` / `inout`
/// buffers and `None` for `out` buffers, as the harness writes them for input set `seed`.
#[derive(Debug, Clone, PartialEq)]
pub struct HostInputs {
    /// The config's evaluated values (lengths, scalars, fills).
    pub values: ConfigValues,
    /// Per buffer, in ABI order.
    pub buffers: Vec<Option<Vec<u8>>>,
}

impl HostInputs {
    /// Generates input set `seed` of `cfg`; the error names what could not be evaluated.
    pub fn generate(task: &Task, cfg: &InputConfig, seed: u64) -> Result<HostInputs, ValuesError> {
        HostInputs::generate_with(task, cfg, None, seed)
    }

    /// Generates input set `seed` of `cfg` from the distributions of `regime` (the main ones
    /// where it gives none, or with `None`).
    pub fn generate_with(
        task: &Task,
        cfg: &InputConfig,
        regime: Option<&Regime>,
        seed: u64,
    ) -> Result<HostInputs, ValuesError> {
        let mut values = ConfigValues::of(task, cfg)?;
        if regime.is_some() {
            values.fills = crate::exec::fills_of(task, cfg, regime)?;
        }
        let dtypes: Vec<DType> = task.buffers().map(|b| b.dtype).collect();
        let buffers = values
            .fills
            .iter()
            .zip(&values.lens)
            .zip(&dtypes)
            .enumerate()
            .map(|(i, ((f, &n), &d))| {
                f.as_ref()
                    .map(|f| fill_bytes(d, n, buffer_seed(seed, i), f))
            })
            .collect();
        Ok(HostInputs { values, buffers })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cospi_agrees_with_cos_and_is_exact_at_quarters() {
        for k in 0..=2000 {
            let x = k as f64 / 1000.0;
            let want = (std::f64::consts::PI * x).cos();
            assert!((cospi(x) - want).abs() < 1e-15, "{x}");
        }
        assert_eq!(cospi(0.5), 0.0);
        assert_eq!(cospi(1.0), -1.0);
        assert_eq!(cospi(1.5), 0.0);
    }

    #[test]
    fn modes_give_values_in_their_ranges() {
        let uni = Fill::new(0, -2.0, 3.0, true);
        let int = Fill::new(2, 5.0, 9.0, true);
        let nrm = Fill::new(1, 1.0, 2.0, true);
        let value = |i: u64, seed: u64, f: &Fill| fill_value(i, 100_000, seed, f, DType::F64);
        let mut sum = 0.0;
        for i in 0..100_000u64 {
            let u = value(i, 7, &uni);
            assert!((-2.0..3.0).contains(&u));
            let k = value(i, 7, &int);
            assert!((5.0..9.0).contains(&k) && k.fract() == 0.0);
            sum += value(i, 7, &nrm);
        }
        let mean = sum / 100_000.0;
        assert!((mean - 1.0).abs() < 0.05, "normal mean {mean}");
        // A different seed gives different values; the same seed the same.
        assert_ne!(value(1, 7, &uni), value(1, 8, &uni));
        assert_eq!(value(1, 7, &uni), value(1, 7, &uni));
    }

    #[test]
    fn conversions_round_like_the_device() {
        let c = Fill::new(4, 1.0 / 3.0, 0.0, false);
        assert_eq!(
            fill_bytes(DType::F16, 1, 0, &c),
            half::f16::from_f32(1.0 / 3.0).to_le_bytes()
        );
        assert_eq!(
            fill_bytes(DType::I32, 1, 0, &Fill { a: -2.7, ..c }),
            (-2i32).to_le_bytes()
        );
        assert_eq!(fill_bytes(DType::U8, 1, 0, &Fill { a: 255.0, ..c }), [255]);
    }

    #[test]
    fn ragged_offsets_are_monotone_with_varied_and_empty_steps() {
        let n = 10_001u64; // 10000 rows of 8 entries on average
        let f = Fill::new(5, 0.0, 8.0, true);
        let v: Vec<f64> = (0..n)
            .map(|i| fill_value(i, n, 3, &f, DType::I32))
            .collect();
        assert_eq!(v[0], 0.0);
        assert_eq!(v[n as usize - 1], 80_000.0);
        let lens: Vec<f64> = v.windows(2).map(|w| w[1] - w[0]).collect();
        assert!(lens
            .iter()
            .all(|&l| (0.0..=16.0).contains(&l) && l.fract() == 0.0));
        assert!(lens.contains(&0.0), "empty rows occur");
        assert!(lens.iter().any(|&l| l >= 15.0), "long rows occur");
    }

    #[test]
    fn special_values_appear_at_their_rate_and_only_those_chosen() {
        let mut f = Fill::new(0, -1.0, 1.0, true);
        f.special = 1 | 8 | 16; // NaN, -0.0, denormals
        f.special_rate = 0.1;
        let n = 100_000u64;
        let bytes = fill_bytes(DType::F32, n, 5, &f);
        let v: Vec<f32> = bytes
            .chunks(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect();
        let nan = v.iter().filter(|x| x.is_nan()).count();
        let neg_zero = v
            .iter()
            .filter(|x| **x == 0.0 && x.is_sign_negative())
            .count();
        let denormal = v.iter().filter(|x| x.is_subnormal()).count();
        assert!(v.iter().all(|x| !x.is_infinite()));
        for count in [nan, neg_zero, denormal] {
            assert!(
                (2_800..3_900).contains(&count),
                "{nan} {neg_zero} {denormal}"
            );
        }
        let h = fill_bytes(DType::F16, 1000, 5, &f);
        let halves: Vec<half::f16> = h
            .chunks(2)
            .map(|c| half::f16::from_le_bytes(c.try_into().unwrap()))
            .collect();
        assert!(
            halves
                .iter()
                .any(|x| x.to_f32() != 0.0 && x.to_f32().abs() < 6.1e-5),
            "f16 denormals are f16's"
        );
    }
}
