//! Element-wise comparison on the host, with the device compare kernel's rule:
//! `|got - want| <= atol + rtol * |want|`; NaN matches NaN; infinities must be equal.

use crate::task::{DType, Tolerance};

/// Element `i` of a little-endian buffer of `dtype`, as a double.
pub fn element_f64(dtype: DType, bytes: &[u8], i: usize) -> f64 {
    let at = |w: usize| &bytes[i * w..(i + 1) * w];
    match dtype {
        DType::F32 => f32::from_le_bytes(at(4).try_into().unwrap_or([0; 4])) as f64,
        DType::F64 => f64::from_le_bytes(at(8).try_into().unwrap_or([0; 8])),
        DType::F16 => half::f16::from_le_bytes(at(2).try_into().unwrap_or([0; 2])).to_f64(),
        DType::Bf16 => half::bf16::from_le_bytes(at(2).try_into().unwrap_or([0; 2])).to_f64(),
        DType::I32 => i32::from_le_bytes(at(4).try_into().unwrap_or([0; 4])) as f64,
        DType::I64 => i64::from_le_bytes(at(8).try_into().unwrap_or([0; 8])) as f64,
        DType::U8 => bytes[i] as f64,
    }
}

/// Whether `got` matches `want` under `tol`.
pub(crate) fn matches(got: f64, want: f64, tol: &Tolerance) -> bool {
    if got.is_nan() || want.is_nan() {
        got.is_nan() && want.is_nan()
    } else if got.is_infinite() || want.is_infinite() {
        got == want
    } else {
        (got - want).abs() <= tol.atol + tol.rtol * want.abs()
    }
}

/// How one buffer compared.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct BufferCompare {
    /// The buffer.
    pub buffer: String,
    /// Elements compared.
    pub elements: u64,
    /// Elements outside the tolerance.
    pub mismatches: u64,
    /// The first of them: (index, got, want).
    pub first: Option<(u64, f64, f64)>,
    /// Largest |got - want| over finite pairs.
    pub max_abs: f64,
    /// Largest |got - want| / |want| over finite pairs with want != 0.
    pub max_rel: f64,
}

impl BufferCompare {
    /// No element outside the tolerance.
    pub fn clean(&self) -> bool {
        self.mismatches == 0
    }

    pub(crate) fn empty(buffer: &str) -> BufferCompare {
        BufferCompare {
            buffer: buffer.to_string(),
            elements: 0,
            mismatches: 0,
            first: None,
            max_abs: 0.0,
            max_rel: 0.0,
        }
    }

    pub(crate) fn add(&mut self, i: u64, g: f64, w: f64, tol: &Tolerance) {
        if g.is_finite() && w.is_finite() {
            let d = (g - w).abs();
            self.max_abs = self.max_abs.max(d);
            if w != 0.0 {
                self.max_rel = self.max_rel.max(d / w.abs());
            }
        }
        if !matches(g, w, tol) {
            self.mismatches += 1;
            if self.first.is_none() {
                self.first = Some((i, g, w));
            }
        }
    }
}

/// Compares two whole buffers of `dtype` (lengths must agree; extra bytes are ignored).
pub fn compare(
    buffer: &str,
    dtype: DType,
    got: &[u8],
    want: &[u8],
    tol: &Tolerance,
) -> BufferCompare {
    let w = dtype.size_bytes() as usize;
    let n = got.len().min(want.len()) / w;
    let mut c = BufferCompare {
        elements: n as u64,
        ..BufferCompare::empty(buffer)
    };
    for i in 0..n {
        c.add(
            i as u64,
            element_f64(dtype, got, i),
            element_f64(dtype, want, i),
            tol,
        );
    }
    c
}
