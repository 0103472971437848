//! Include allowlist: candidate source is untrusted even at compile time.
//!
//! NVRTC would happily `#include "/etc/passwd"` and print its lines in the error log. Before
//! NVRTC sees a source, every preprocessor directive that can pull in a file is checked
//! against an allowlist of CUDA headers. The scan works on the source the way the
//! preprocessor sees it: backslash-newlines are spliced and comments removed first (both
//! happen before directives are recognised), and the digraph `%:` counts as `#`.

/// Headers a candidate may include (resolved in the CUDA include folder next to NVRTC).
pub const ALLOWED_INCLUDES: &[&str] = &[
    "cuda_fp16.h",
    "cuda_bf16.h",
    "mma.h",
    "cooperative_groups.h",
    "cooperative_groups/reduce.h",
    "cuda_pipeline.h",
];

/// A forbidden directive found in a candidate.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {message}")]
pub struct ForbiddenInclude {
    /// Line in the original source (1-based).
    pub line: usize,
    /// What was rejected and why.
    pub message: String,
}

/// Splices lines and blanks out comments, keeping a map back to original line numbers.
fn preprocess_view(source: &str) -> Vec<(usize, String)> {
    // Phase 2: splice backslash-newline, remembering where each logical line starts.
    let mut logical: Vec<(usize, String)> = Vec::new();
    let mut cur = String::new();
    let mut start_line = 1;
    for (i, raw) in source.split('\n').enumerate() {
        let raw = raw.strip_suffix('\r').unwrap_or(raw);
        if cur.is_empty() {
            start_line = i + 1;
        }
        if let Some(body) = raw.strip_suffix('\\') {
            cur.push_str(body);
        } else {
            cur.push_str(raw);
            logical.push((start_line, std::mem::take(&mut cur)));
        }
    }
    if !cur.is_empty() {
        logical.push((start_line, cur));
    }
    // Phase 3: comments become a space; block comments may span logical lines.
    let mut out = Vec::with_capacity(logical.len());
    let mut in_block = false;
    for (line, text) in logical {
        let mut clean = String::with_capacity(text.len());
        let b = text.as_bytes();
        let mut i = 0;
        let mut in_str: Option<u8> = None;
        while i < b.len() {
            if in_block {
                if b[i] == b'*' && b.get(i + 1) == Some(&b'/') {
                    in_block = false;
                    clean.push(' ');
                    i += 2;
                } else {
                    i += 1;
                }
                continue;
            }
            if let Some(q) = in_str {
                clean.push(b[i] as char);
                if b[i] == b'\\' && i + 1 < b.len() {
                    clean.push(b[i + 1] as char);
                    i += 2;
                    continue;
                }
                if b[i] == q {
                    in_str = None;
                }
                i += 1;
                continue;
            }
            match (b[i], b.get(i + 1)) {
                (b'/', Some(b'/')) => break,
                (b'/', Some(b'*')) => {
                    in_block = true;
                    i += 2;
                }
                (q @ (b'"' | b'\''), _) => {
                    in_str = Some(q);
                    clean.push(q as char);
                    i += 1;
                }
                (c, _) => {
                    // Non-ASCII bytes cannot start a directive; keep a placeholder.
                    clean.push(if c.is_ascii() { c as char } else { '?' });
                    i += 1;
                }
            }
        }
        out.push((line, clean));
    }
    out
}

/// Checks every directive that can read a file; returns the first forbidden one.
pub fn check_includes(source: &str) -> Result<(), ForbiddenInclude> {
    allowed_includes_of(source).map(|_| ())
}

/// The allowlisted headers a source names (in `#include` or `__has_include`), each once, in
/// order; the first forbidden directive is an error.
pub fn allowed_includes_of(source: &str) -> Result<Vec<&'static str>, ForbiddenInclude> {
    let mut found = Vec::new();
    for (line, text) in preprocess_view(source) {
        let t = text.trim_start();
        let rest = if let Some(r) = t.strip_prefix('#') {
            r
        } else if let Some(r) = t.strip_prefix("%:") {
            r
        } else {
            if text.contains("__has_include") {
                check_has_include(line, &text, &mut found)?;
            }
            continue;
        };
        let rest = rest.trim_start();
        let directive: String = rest
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        let operand = rest[directive.len()..].trim();
        match directive.as_str() {
            "include" => check_operand(line, "#include", operand, &mut found)?,
            "include_next" | "import" | "embed" => {
                return Err(ForbiddenInclude {
                    line,
                    message: format!("#{directive} is not allowed in candidates"),
                })
            }
            _ => {
                if rest.contains("__has_include") {
                    check_has_include(line, rest, &mut found)?;
                }
            }
        }
    }
    Ok(found)
}

/// Checks one include operand; an allowed header is added to `found` (once).
fn check_operand(
    line: usize,
    what: &str,
    operand: &str,
    found: &mut Vec<&'static str>,
) -> Result<(), ForbiddenInclude> {
    let name = if let Some(r) = operand.strip_prefix('<') {
        r.split_once('>')
    } else if let Some(r) = operand.strip_prefix('"') {
        r.split_once('"')
    } else {
        None
    };
    let allowed = |n: &str| ALLOWED_INCLUDES.iter().copied().find(|a| *a == n.trim());
    match name {
        Some((n, tail)) if tail.trim().is_empty() && allowed(n).is_some() => {
            if let Some(header) = allowed(n).filter(|h| !found.contains(h)) {
                found.push(header);
            }
            Ok(())
        }
        Some((n, _)) => Err(ForbiddenInclude {
            line,
            message: format!(
                "{what} `{}` is not allowed: candidates may include only {}",
                n.trim(),
                ALLOWED_INCLUDES.join(", ")
            ),
        }),
        None => Err(ForbiddenInclude {
            line,
            message: format!(
                "{what} with a computed or malformed operand `{operand}` is not allowed"
            ),
        }),
    }
}

fn check_has_include(
    line: usize,
    text: &str,
    found: &mut Vec<&'static str>,
) -> Result<(), ForbiddenInclude> {
    let mut rest = text;
    while let Some(pos) = rest.find("__has_include") {
        let after = rest[pos + "__has_include".len()..].trim_start();
        let after = after.strip_prefix("_next").unwrap_or(after).trim_start();
        let inner = after
            .strip_prefix('(')
            .and_then(|a| a.split_once(')'))
            .map(|(i, _)| i.trim());
        match inner {
            Some(i) => check_operand(line, "__has_include", i, found)?,
            None => {
                return Err(ForbiddenInclude {
                    line,
                    message: "malformed __has_include".into(),
                })
            }
        }
        rest = &rest[pos + 1..];
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each case guards one way of smuggling a host file into the compile log.
    #[test]
    fn rejects_host_files_in_every_spelling() {
        let bad = [
            "#include \"/etc/passwd\"\n",
            "#include </etc/passwd>\n",
            "#include \"../../secret.h\"\n",
            "  #  include <stdio.h>\n",
            "#inc\\\nlude \"/etc/passwd\"\n",
            "#/* comment */include \"/etc/passwd\"\n",
            "%:include \"/etc/passwd\"\n",
            "#define F \"/etc/passwd\"\n#include F\n",
            "#include_next <cuda_fp16.h>\n",
            "#embed \"/etc/passwd\"\n",
            "#if __has_include(\"/etc/shadow\")\n#endif\n",
            "#include \"cuda_fp16.h\" \"/etc/passwd\"\n",
            // The CUDA headers' own internals resolve from the include folder now that
            // quoted includes are searched there: a candidate still cannot name them.
            "#include \"mma.hpp\"\n",
            "#include <crt/mma.h>\n",
            "#include \"crt/host_defines.h\"\n",
            "#include \"cooperative_groups/details/info.h\"\n",
            "#include \"../include/cuda_fp16.h\"\n",
            "#include <nv/target>\n",
        ];
        for src in bad {
            assert!(check_includes(src).is_err(), "accepted: {src:?}");
        }
    }

    #[test]
    fn accepts_allowed_headers_and_lookalikes_in_comments_and_strings() {
        let good = [
            "#include <cuda_fp16.h>\n#include \"mma.h\"\n",
            "// #include \"/etc/passwd\"\n",
            "/* #include </etc/passwd>\n */ int x;\n",
            "const char* s = \"#include </etc/passwd>\";\n",
            "#include <cooperative_groups.h>\n#include <cooperative_groups/reduce.h>\n",
            "#pragma unroll\n#define N 4\n",
        ];
        for src in good {
            assert!(check_includes(src).is_ok(), "rejected: {src:?}");
        }
    }

    #[test]
    fn lists_the_allowed_headers_a_source_names() {
        let src = "#include <mma.h>\n#include \"cuda_fp16.h\"\n#include <mma.h>\n#if __has_include(<cuda_bf16.h>)\n#endif\n";
        assert_eq!(
            allowed_includes_of(src).unwrap(),
            ["mma.h", "cuda_fp16.h", "cuda_bf16.h"]
        );
        assert!(allowed_includes_of("int x;\n").unwrap().is_empty());
    }

    #[test]
    fn reports_the_original_line() {
        let e = check_includes("int a;\n\n#include <stdlib.h>\n").unwrap_err();
        assert_eq!(e.line, 3);
        assert!(e.message.contains("stdlib.h"));
    }
}
