//! Bytes of kernel arguments and of values read back: scalars in every task dtype, and the
//! half-precision conversions the host side needs.

use crate::task::DType;

pub(crate) fn arg_u64(v: u64) -> [u8; 8] {
    v.to_le_bytes()
}
pub(crate) fn arg_i32(v: i32) -> [u8; 8] {
    let mut a = [0u8; 8];
    a[..4].copy_from_slice(&v.to_le_bytes());
    a
}
pub(crate) fn arg_f64(v: f64) -> [u8; 8] {
    v.to_le_bytes()
}

fn f16_to_f32(bits: u16) -> f32 {
    let sign = ((bits >> 15) as u32) << 31;
    let exp = ((bits >> 10) & 0x1f) as u32;
    let frac = (bits & 0x3ff) as u32;
    let v = match exp {
        0 => {
            let mag = frac as f32 * 2f32.powi(-24);
            return if sign != 0 { -mag } else { mag };
        }
        0x1f => sign | 0x7f80_0000 | (frac << 13),
        e => sign | ((e + 112) << 23) | (frac << 13),
    };
    f32::from_bits(v)
}

fn f32_to_f16(v: f32) -> u16 {
    let x = v.to_bits();
    let sign = ((x >> 16) & 0x8000) as u16;
    let exp = ((x >> 23) & 0xff) as i32;
    let frac = x & 0x7f_ffff;
    if exp == 0xff {
        return sign | 0x7c00 | if frac != 0 { 0x200 } else { 0 };
    }
    let e = exp - 127 + 15;
    if e >= 0x1f {
        sign | 0x7c00
    } else if e <= 0 {
        if e < -10 {
            sign
        } else {
            let m = (frac | 0x80_0000) >> (1 - e + 13);
            sign | m as u16
        }
    } else {
        sign | ((e as u16) << 10) | ((frac >> 13) as u16)
    }
}

/// Bytes of a scalar argument of `dtype` holding `v`.
pub(crate) fn scalar_arg(dtype: DType, v: f64) -> [u8; 8] {
    let mut a = [0u8; 8];
    match dtype {
        DType::F32 => a[..4].copy_from_slice(&(v as f32).to_le_bytes()),
        DType::F64 => a.copy_from_slice(&v.to_le_bytes()),
        DType::F16 => a[..2].copy_from_slice(&f32_to_f16(v as f32).to_le_bytes()),
        DType::Bf16 => a[..2].copy_from_slice(&(((v as f32).to_bits() >> 16) as u16).to_le_bytes()),
        DType::I32 => a[..4].copy_from_slice(&(v as i32).to_le_bytes()),
        DType::I64 => a.copy_from_slice(&(v as i64).to_le_bytes()),
        DType::U8 => a[0] = v as u8,
    }
    a
}

/// An element read back from the device, as f64.
pub(crate) fn element_value(dtype: DType, bytes: &[u8]) -> f64 {
    let b = |n: usize| -> Vec<u8> {
        bytes
            .iter()
            .copied()
            .chain(std::iter::repeat(0))
            .take(n)
            .collect()
    };
    match dtype {
        DType::F32 => f32::from_le_bytes(b(4).try_into().unwrap_or([0; 4])) as f64,
        DType::F64 => f64::from_le_bytes(b(8).try_into().unwrap_or([0; 8])),
        DType::F16 => f16_to_f32(u16::from_le_bytes(b(2).try_into().unwrap_or([0; 2]))) as f64,
        DType::Bf16 => {
            f32::from_bits((u16::from_le_bytes(b(2).try_into().unwrap_or([0; 2])) as u32) << 16)
                as f64
        }
        DType::I32 => i32::from_le_bytes(b(4).try_into().unwrap_or([0; 4])) as f64,
        DType::I64 => i64::from_le_bytes(b(8).try_into().unwrap_or([0; 8])) as f64,
        DType::U8 => b(1)[0] as f64,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn half_conversions_round_trip() {
        for v in [0.0f32, 1.0, -2.5, 65504.0, 0.000061035156, 1e-7] {
            let back = f16_to_f32(f32_to_f16(v));
            assert!((back - v).abs() <= v.abs() * 1e-3 + 1e-7, "{v} -> {back}");
        }
        assert!(f16_to_f32(0xFFFF).is_nan());
    }

    #[test]
    fn scalar_args_have_the_right_bytes() {
        assert_eq!(&scalar_arg(DType::I32, 7.0)[..4], &7i32.to_le_bytes());
        assert_eq!(&scalar_arg(DType::F32, 0.5)[..4], &0.5f32.to_le_bytes());
        assert_eq!(scalar_arg(DType::I64, -3.0), (-3i64).to_le_bytes());
        assert_eq!(element_value(DType::Bf16, &[0x80, 0x3f]), 1.0);
        assert_eq!(element_value(DType::U8, &[200]), 200.0);
    }
}
