//! Values of the probe's interpreter: integer arithmetic that never panics, conversions to
//! a declared type, and the comparison a loop condition makes.

use super::super::memory_ops::type_bytes;
use super::flat::FlatNode;
use super::Val;

/// The comparison of a loop condition (`i < n` of `(i < n)`), if it is a binary expression.
pub(super) fn comparison(cond: FlatNode<'_>) -> Option<FlatNode<'_>> {
    let c = if cond.kind_str() == "parenthesized_expression" {
        cond.named_child(0)?
    } else {
        cond
    };
    (c.kind_str() == "binary_expression").then_some(c)
}

pub(super) fn is_integer_type(ty: &str) -> bool {
    // Most declarations say `int` or `float`: no copy of the text for those.
    if ty.contains("const") || ty.contains("unsigned") {
        let t = ty.replace("const", "").replace("unsigned", "");
        return is_plain_integer_type(t.trim());
    }
    is_plain_integer_type(ty.trim())
}

fn is_plain_integer_type(t: &str) -> bool {
    matches!(
        t,
        "int"
            | "long"
            | "long long"
            | "size_t"
            | "short"
            | "char"
            | ""
            | "int64_t"
            | "uint64_t"
            | "int32_t"
            | "uint32_t"
            | "ptrdiff_t"
            | "long int"
            | "auto"
    )
}

/// A value seen as another type: pointer casts change the element size.
pub(super) fn retype(v: Val, ty: &str) -> Val {
    let t = ty.trim();
    match v {
        Val::Ptr {
            param,
            offset,
            elem,
        } if t.ends_with('*') => {
            let base = t
                .trim_end_matches('*')
                .replace("const", "")
                .replace("__restrict__", "");
            match type_bytes(base.trim()) {
                Some(e) if e > 0 => {
                    let bytes = offset.saturating_mul(i64::from(elem));
                    if bytes % i64::from(e) == 0 {
                        Val::Ptr {
                            param,
                            offset: bytes / i64::from(e),
                            elem: e,
                        }
                    } else {
                        Val::Unknown
                    }
                }
                _ => v,
            }
        }
        Val::Int(_) if t.contains("float") || t.contains("double") => Val::Unknown,
        Val::Int(x)
            if t.contains("int")
                && !t.contains("64")
                && !t.contains("long")
                && !t.contains("size_t") =>
        {
            if t.contains("unsigned") {
                Val::Int(i64::from(x as u32))
            } else {
                Val::Int(i64::from(x as i32))
            }
        }
        _ => v,
    }
}

pub(super) fn binary(op: &str, a: Val, b: Val) -> Val {
    match (a, b) {
        (Val::Int(x), Val::Int(y)) => Val::Int(match op {
            "+" => x.wrapping_add(y),
            "-" => x.wrapping_sub(y),
            "*" => x.wrapping_mul(y),
            "/" if y != 0 => x.wrapping_div(y),
            "%" if y != 0 => x.wrapping_rem(y),
            "<<" if (0..63).contains(&y) => x.wrapping_shl(y as u32),
            ">>" if (0..63).contains(&y) => x.wrapping_shr(y as u32),
            "&" => x & y,
            "|" => x | y,
            "^" => x ^ y,
            "<" => i64::from(x < y),
            "<=" => i64::from(x <= y),
            ">" => i64::from(x > y),
            ">=" => i64::from(x >= y),
            "==" => i64::from(x == y),
            "!=" => i64::from(x != y),
            "&&" => i64::from(x != 0 && y != 0),
            "||" => i64::from(x != 0 || y != 0),
            _ => return Val::Unknown,
        }),
        (
            Val::Ptr {
                param,
                offset,
                elem,
            },
            Val::Int(y),
        ) if op == "+" || op == "-" => Val::Ptr {
            param,
            offset: if op == "+" {
                offset.wrapping_add(y)
            } else {
                offset.wrapping_sub(y)
            },
            elem,
        },
        (
            Val::Int(x),
            Val::Ptr {
                param,
                offset,
                elem,
            },
        ) if op == "+" => Val::Ptr {
            param,
            offset: offset.wrapping_add(x),
            elem,
        },
        _ => Val::Unknown,
    }
}
