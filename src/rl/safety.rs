//! Branch conditions that are there for safety, not speed: bounds guards (`row < m && col <
//! n`, `i >= n`) and single-thread sections (`tid == 0`, `(threadIdx.x & 31) == 0`).
//!
//! The analysis reports some of them as divergent branches (an index built with `/` or `%`
//! is not monotone in `threadIdx.x`, so it cannot prove only the last warp splits; a
//! `tid == 0` section does split its warp). Feedback must not present them as findings to
//! address: a kernel without them reads past its buffers on sizes that are not a multiple
//! of the block, or races on its block's result.

use crate::task::{Param, Task};

/// Why a thread-dependent branch is a safety check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Safety {
    /// Indices tested against the problem's sizes.
    BoundsGuard,
    /// One thread (or lane) elected by an equality with a constant.
    SingleThread,
}

/// What a branch condition is: `Some` when every comparison in it (through parentheses, `&&`
/// and `||`) is an index tested against a size (`is_size` names the sizes), or a thread
/// index tested for equality with an integer constant. `i < 4096` (a constant bound) and
/// `v > best` (data) are not safety checks.
pub(crate) fn classify(cond: &str, is_size: &dyn Fn(&str) -> bool) -> Option<Safety> {
    let cond = strip_parens(cond.trim());
    if cond.is_empty() {
        return None;
    }
    let parts = split_top(cond, &["&&", "||"]);
    if parts.len() > 1 {
        let mut kind = Safety::SingleThread;
        for p in parts {
            if classify(p, is_size)? == Safety::BoundsGuard {
                kind = Safety::BoundsGuard;
            }
        }
        return Some(kind);
    }
    let (left, op, right) = comparison(cond)?;
    match op {
        "<" | "<=" | ">" | ">=" => {
            let (l, r) = (is_size_expr(left, is_size), is_size_expr(right, is_size));
            (l != r && has_identifier(if l { right } else { left })).then_some(Safety::BoundsGuard)
        }
        "==" | "!=" => {
            let (l, r) = (is_int_literal(left), is_int_literal(right));
            (l != r && has_identifier(if l { right } else { left })).then_some(Safety::SingleThread)
        }
        _ => None,
    }
}

/// The condition of an `if` statement whose text starts at `text` (`if (cond) ...`).
pub(crate) fn if_condition(text: &str) -> Option<&str> {
    let rest = text.trim_start().strip_prefix("if")?;
    let rest = rest.trim_start();
    let rest = rest.strip_prefix("constexpr").map_or(rest, str::trim_start);
    if !rest.starts_with('(') {
        return None;
    }
    let mut depth = 0usize;
    for (i, c) in rest.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => {
                depth -= 1;
                if depth == 0 {
                    return Some(&rest[1..i]);
                }
            }
            _ => {}
        }
    }
    None
}

/// The names that stand for problem sizes in a candidate for `task`: the task's integer
/// scalars and config sizes, and the integer scalar parameters of the kernel whose
/// signature starts at `signature` (a candidate may name them its own way).
pub(crate) fn size_names(task: &Task, signature: &str) -> Vec<String> {
    let mut names: Vec<String> = task
        .params
        .iter()
        .filter_map(|p| match p {
            Param::Scalar { name, dtype, .. } if !dtype.is_float() => Some(name.clone()),
            _ => None,
        })
        .collect();
    for c in &task.configs {
        names.extend(c.sizes.keys().cloned());
    }
    names.extend(integer_params(signature));
    names.sort();
    names.dedup();
    names
}

/// Integer scalar parameters of the first parameter list in `signature`.
fn integer_params(signature: &str) -> Vec<String> {
    let Some(open) = signature.find('(') else {
        return Vec::new();
    };
    let Some(len) = signature[open..].find(')') else {
        return Vec::new();
    };
    signature[open + 1..open + len]
        .split(',')
        .filter(|p| !p.contains('*') && !p.contains('&') && !p.contains('['))
        .filter_map(|p| {
            let words = identifiers(p);
            let (name, types) = words.split_last()?;
            types
                .iter()
                .any(|t| INTEGER_TYPES.contains(t))
                .then(|| name.to_string())
        })
        .collect()
}

const INTEGER_TYPES: [&str; 13] = [
    "int",
    "long",
    "short",
    "unsigned",
    "signed",
    "size_t",
    "int32_t",
    "int64_t",
    "uint32_t",
    "uint64_t",
    "ptrdiff_t",
    "unsigned_int",
    "uint",
];

/// Words allowed in a size expression besides the sizes: casts and qualifiers.
const CAST_WORDS: [&str; 14] = [
    "int",
    "long",
    "short",
    "unsigned",
    "signed",
    "size_t",
    "int32_t",
    "int64_t",
    "uint32_t",
    "uint64_t",
    "ptrdiff_t",
    "const",
    "static_cast",
    "uint",
];

/// Sizes, integer literals, casts and arithmetic only, with at least one size.
fn is_size_expr(e: &str, is_size: &dyn Fn(&str) -> bool) -> bool {
    let mut any_size = false;
    for w in identifiers(e) {
        if is_size(w) {
            any_size = true;
        } else if !CAST_WORDS.contains(&w) {
            return false;
        }
    }
    let arithmetic = e.chars().all(|c| {
        c.is_ascii_alphanumeric() || c == '_' || c.is_whitespace() || "+-*/%()<>".contains(c)
    });
    any_size && arithmetic
}

fn is_int_literal(e: &str) -> bool {
    let e = strip_parens(e.trim());
    let digits = e.trim_end_matches(['u', 'U', 'l', 'L']);
    !digits.is_empty()
        && (digits.chars().all(|c| c.is_ascii_digit())
            || digits
                .strip_prefix("0x")
                .is_some_and(|h| !h.is_empty() && h.chars().all(|c| c.is_ascii_hexdigit())))
}

fn has_identifier(e: &str) -> bool {
    !identifiers(e).is_empty()
}

/// The identifiers of `e`, in order (number suffixes such as `2u` are not identifiers).
fn identifiers(e: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = None;
    for (i, c) in e.char_indices().chain(std::iter::once((e.len(), ' '))) {
        let word = c.is_ascii_alphanumeric() || c == '_';
        match (start, word) {
            (None, true) => start = Some(i),
            (Some(s), false) => {
                let w = &e[s..i];
                if !w.starts_with(|c: char| c.is_ascii_digit()) {
                    out.push(w);
                }
                start = None;
            }
            _ => {}
        }
    }
    out
}

/// `e` without parentheses around the whole of it.
fn strip_parens(mut e: &str) -> &str {
    while e.starts_with('(') && e.ends_with(')') && enclosing(e) {
        e = e[1..e.len() - 1].trim();
    }
    e
}

/// Whether the opening parenthesis of `e` closes at its last character.
fn enclosing(e: &str) -> bool {
    let mut depth = 0i32;
    for (i, c) in e.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => {
                depth -= 1;
                if depth == 0 {
                    return i == e.len() - 1;
                }
            }
            _ => {}
        }
    }
    false
}

/// `e` split at the operators `ops` outside parentheses and brackets.
fn split_top<'a>(e: &'a str, ops: &[&str]) -> Vec<&'a str> {
    let bytes = e.as_bytes();
    let (mut depth, mut last, mut out) = (0i32, 0usize, Vec::new());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'(' | b'[' => depth += 1,
            b')' | b']' => depth -= 1,
            _ if depth == 0 => {
                if let Some(op) = ops.iter().find(|op| e[i..].starts_with(**op)) {
                    out.push(e[last..i].trim());
                    i += op.len();
                    last = i;
                    continue;
                }
            }
            _ => {}
        }
        i += 1;
    }
    out.push(e[last..].trim());
    out
}

/// The one comparison at the top level of `e`: (left, operator, right).
fn comparison(e: &str) -> Option<(&str, &'static str, &str)> {
    let bytes = e.as_bytes();
    let mut depth = 0i32;
    let mut found: Option<(usize, &'static str)> = None;
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        match c {
            b'(' | b'[' => depth += 1,
            b')' | b']' => depth -= 1,
            b'<' | b'>' | b'=' | b'!' if depth == 0 => {
                let next = bytes.get(i + 1).copied();
                let op: Option<&'static str> = match (c, next) {
                    // Shifts and `->` are not comparisons.
                    (b'<', Some(b'<')) | (b'>', Some(b'>')) => {
                        i += 2;
                        continue;
                    }
                    (b'>', _) if i > 0 && bytes[i - 1] == b'-' => None,
                    (b'<', Some(b'=')) => Some("<="),
                    (b'>', Some(b'=')) => Some(">="),
                    (b'=', Some(b'=')) => Some("=="),
                    (b'!', Some(b'=')) => Some("!="),
                    (b'<', _) => Some("<"),
                    (b'>', _) => Some(">"),
                    _ => None,
                };
                if let Some(op) = op {
                    if found.is_some() {
                        return None; // a chain such as `a < b == c`
                    }
                    found = Some((i, op));
                    i += op.len();
                    continue;
                }
            }
            _ => {}
        }
        i += 1;
    }
    let (at, op) = found?;
    Some((e[..at].trim(), op, e[at + op.len()..].trim()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sizes(w: &str) -> bool {
        ["m", "n", "k", "rows", "cols", "n4"].contains(&w)
    }

    /// Table of conditions seen in candidates and fixtures: guards and single-thread
    /// sections are safety; constant bounds, data comparisons and reduction strides are not.
    #[test]
    fn safety_checks_are_recognised() {
        use Safety::*;
        for (cond, want) in [
            ("row < m && col < n", Some(BoundsGuard)),
            ("(row < m) && (col < n)", Some(BoundsGuard)),
            ("row >= m || col >= n", Some(BoundsGuard)),
            ("idx < (long long)m * n", Some(BoundsGuard)),
            ("t * 16 + tx < k", Some(BoundsGuard)),
            ("m > row", Some(BoundsGuard)),
            ("i < n4", Some(BoundsGuard)),
            ("tid == 0", Some(SingleThread)),
            ("threadIdx.x == 0", Some(SingleThread)),
            ("(threadIdx.x & 31) == 0", Some(SingleThread)),
            ("lane == 31", Some(SingleThread)),
            ("0 == tid", Some(SingleThread)),
            ("i < n && i == 0", Some(BoundsGuard)),
            ("i < n && i < 4096", None),
            ("i < 4096", None),
            ("v > best", None),
            ("ov < best || (ov == best && oi < bi)", None),
            ("tid < s", None),
            ("x == 0.0f", None),
            ("(x >> 2) < n", Some(BoundsGuard)),
            ("a[i] < n", Some(BoundsGuard)),
            ("i < n == true", None),
            ("", None),
            ("flag", None),
        ] {
            assert_eq!(classify(cond, &sizes), want, "{cond}");
        }
    }

    #[test]
    fn conditions_and_sizes_are_read_from_source() {
        assert_eq!(
            if_condition("if (row < m && (col < n)) { c[0] = 1; }"),
            Some("row < m && (col < n)")
        );
        assert_eq!(if_condition("if(tid==0) x = 1;"), Some("tid==0"));
        assert_eq!(if_condition("for (;;) {}"), None);
        assert_eq!(if_condition("if (unbalanced"), None);
        assert_eq!(
            integer_params(
                "extern \"C\" __global__ void k(const float* a, float* c, const int rows, unsigned long long n, float alpha) {"
            ),
            vec!["rows".to_string(), "n".to_string()]
        );
    }
}
