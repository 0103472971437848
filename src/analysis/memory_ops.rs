//! Memory-instruction vocabulary: element sizes, vector types, cached/async loads.

/// Size in bytes of a scalar or CUDA vector type named `name`, if known.
///
/// Qualifiers (`const`, `volatile`, `unsigned`, `__restrict__`) are ignored so
/// that `const unsigned int` and `volatile float` resolve.
pub(crate) fn type_bytes(name: &str) -> Option<u32> {
    let base = base_type(name);
    let scalar = match base.as_str() {
        "char" | "signed char" | "unsigned char" | "int8_t" | "uint8_t" | "bool" | "uchar" => 1,
        "short" | "unsigned short" | "int16_t" | "uint16_t" | "half" | "__half" | "ushort"
        | "__nv_bfloat16" | "nv_bfloat16" | "bfloat16" => 2,
        "int" | "unsigned" | "unsigned int" | "float" | "int32_t" | "uint32_t" | "uint"
        | "half2" | "__half2" | "__nv_bfloat162" | "nv_bfloat162" => 4,
        "long" | "unsigned long" | "long long" | "unsigned long long" | "double" | "int64_t"
        | "uint64_t" | "size_t" | "ptrdiff_t" | "long int" => 8,
        _ => 0,
    };
    if scalar > 0 {
        return Some(scalar);
    }
    let (elem, width) = split_vector(&base)?;
    Some(type_bytes(elem)? * width)
}

/// Whether `name` is a CUDA vector type (`float4`, `int2`, `half2`, `uchar4`, ...).
pub(crate) fn is_vector_type(name: &str) -> bool {
    let base = base_type(name);
    matches!(
        base.as_str(),
        "half2" | "__half2" | "__nv_bfloat162" | "nv_bfloat162"
    ) || split_vector(&base).is_some()
}

/// Whether `name` is a reduced-precision floating type.
pub(crate) fn is_reduced_precision_type(name: &str) -> bool {
    matches!(
        base_type(name).as_str(),
        "half"
            | "__half"
            | "half2"
            | "__half2"
            | "__nv_bfloat16"
            | "nv_bfloat16"
            | "__nv_bfloat162"
            | "nv_bfloat162"
            | "bfloat16"
            | "__nv_fp8_e4m3"
            | "__nv_fp8_e5m2"
    )
}

/// Whether `name` is a floating-point (data) type, scalar or vector.
pub(crate) fn is_float_type(name: &str) -> bool {
    let base = base_type(name);
    base.starts_with("float") || base.starts_with("double") || is_reduced_precision_type(&base)
}

/// Read-only / cache-hinted load intrinsics.
pub(crate) fn is_ldg(name: &str) -> bool {
    matches!(
        name,
        "__ldg" | "__ldcg" | "__ldca" | "__ldcs" | "__ldlu" | "__ldcv"
    )
}

/// Asynchronous global→shared copies.
pub(crate) fn is_async_copy(name: &str) -> bool {
    matches!(
        name,
        "__pipeline_memcpy_async" | "memcpy_async" | "cp_async"
    )
}

/// Drops qualifiers and namespace prefixes, normalising spaces.
fn base_type(name: &str) -> String {
    let words: Vec<&str> = name
        .split_whitespace()
        .filter(|w| {
            !matches!(
                *w,
                "const" | "volatile" | "__restrict__" | "restrict" | "signed" | "struct" | "*"
            )
        })
        .collect();
    let joined = words.join(" ");
    match joined.rsplit_once("::") {
        Some((_, tail)) => tail.to_string(),
        None => joined,
    }
}

/// `float4` → (`float`, 4); `uchar2` → (`unsigned char`, 2).
fn split_vector(base: &str) -> Option<(&'static str, u32)> {
    let width = match base.as_bytes().last()? {
        b'1' => 1,
        b'2' => 2,
        b'3' => 3,
        b'4' => 4,
        _ => return None,
    };
    let stem = base.get(..base.len() - 1)?;
    let elem = match stem {
        "float" => "float",
        "double" => "double",
        "int" => "int",
        "uint" => "unsigned int",
        "short" => "short",
        "ushort" => "unsigned short",
        "char" => "char",
        "uchar" => "unsigned char",
        "long" => "long",
        "ulong" => "unsigned long",
        "longlong" => "long long",
        "ulonglong" => "unsigned long long",
        _ => return None,
    };
    Some((elem, width))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_of_scalars_and_vectors() {
        assert_eq!(type_bytes("float"), Some(4));
        assert_eq!(type_bytes("const float"), Some(4));
        assert_eq!(type_bytes("float4"), Some(16));
        assert_eq!(type_bytes("half2"), Some(4));
        assert_eq!(type_bytes("double2"), Some(16));
        assert_eq!(type_bytes("unsigned int"), Some(4));
        assert_eq!(type_bytes("MyStruct"), None);
        assert!(is_vector_type("float4") && is_vector_type("__half2"));
        assert!(!is_vector_type("float") && !is_vector_type("int32"));
        assert!(is_async_copy("__pipeline_memcpy_async"));
    }
}
