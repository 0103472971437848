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
//! let ramp = Fill { mode: 3, a: 1.0, b: 0.5, random: false };
//! let bytes = fill_bytes(DType::F32, 3, 42, &ramp);
//! let v: Vec<f32> = bytes.chunks(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect();
//! assert_eq!(v, [1.0, 1.5, 2.0]);
//! ```

use crate::exec::{ConfigValues, Fill};
use crate::task::{DType, InputConfig, Task};

/// splitmix64's finaliser (with its increment), as `mix64` in `support.cu`.
pub fn mix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

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

/// The value (in double precision, before conversion to the buffer's type) of element `i`.
pub fn fill_value(i: u64, seed: u64, f: &Fill) -> f64 {
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
        _ => a,
    }
}

/// Appends `v` converted as the device's `from_double<T>` does.
fn push_as(out: &mut Vec<u8>, dtype: DType, v: f64) {
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
        push_as(&mut out, dtype, fill_value(i, seed, f));
    }
    out
}

/// The seed of buffer `index` within input set `seed` (the harness's rule).
pub fn buffer_seed(seed: u64, index: usize) -> u64 {
    crate::exec::buffer_seed(seed, index)
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
    pub fn generate(task: &Task, cfg: &InputConfig, seed: u64) -> Result<HostInputs, String> {
        let values = ConfigValues::of(task, cfg)?;
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
    fn mix64_matches_splitmix64_reference_values() {
        // splitmix64 seeded with 0 yields these first outputs (state += golden gamma each).
        assert_eq!(mix64(0), 0xE220_A839_7B1D_CDAF);
        assert_eq!(mix64(0x9E37_79B9_7F4A_7C15), 0x6E78_9E6A_A1B9_65F4);
    }

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
        let uni = Fill {
            mode: 0,
            a: -2.0,
            b: 3.0,
            random: true,
        };
        let int = Fill {
            mode: 2,
            a: 5.0,
            b: 9.0,
            random: true,
        };
        let nrm = Fill {
            mode: 1,
            a: 1.0,
            b: 2.0,
            random: true,
        };
        let mut sum = 0.0;
        for i in 0..100_000u64 {
            let u = fill_value(i, 7, &uni);
            assert!((-2.0..3.0).contains(&u));
            let k = fill_value(i, 7, &int);
            assert!((5.0..9.0).contains(&k) && k.fract() == 0.0);
            sum += fill_value(i, 7, &nrm);
        }
        let mean = sum / 100_000.0;
        assert!((mean - 1.0).abs() < 0.05, "normal mean {mean}");
        // A different seed gives different values; the same seed the same.
        assert_ne!(fill_value(1, 7, &uni), fill_value(1, 8, &uni));
        assert_eq!(fill_value(1, 7, &uni), fill_value(1, 7, &uni));
    }

    #[test]
    fn conversions_round_like_the_device() {
        let c = Fill {
            mode: 4,
            a: 1.0 / 3.0,
            b: 0.0,
            random: false,
        };
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
}
