//! The launch plan's directives: the `// @launch` and `// @scratch` comment lines of a
//! candidate's source, read line by line (they are our format, not C).

use super::CandidateError;
use crate::expr::Expr;
use crate::task::DType;

/// One argument of a launch with explicit `args=(...)`.
#[derive(Debug, Clone, PartialEq)]
pub enum LaunchArg {
    /// A task ABI parameter, by name.
    Param(String),
    /// A scratch buffer, by name.
    Scratch(String),
    /// An integer expression passed as `int`.
    Int(Expr),
}

/// One `// @launch` line.
#[derive(Debug, Clone, PartialEq)]
pub struct Launch {
    /// Kernel name as written (may include template arguments: `reduce<256>`).
    pub kernel: String,
    /// Grid dimensions (1 to 3).
    pub grid: Vec<Expr>,
    /// Block dimensions (1 to 3).
    pub block: Vec<Expr>,
    /// Dynamic shared memory bytes.
    pub smem: Option<Expr>,
    /// Explicit arguments; `None` means the task ABI in order.
    pub args: Option<Vec<LaunchArg>>,
    /// Line of the directive (1-based).
    pub line: usize,
}

impl Launch {
    /// The kernel's base name, without template arguments.
    pub fn base_name(&self) -> &str {
        self.kernel.split('<').next().unwrap_or(&self.kernel).trim()
    }
}

/// One `// @scratch NAME DTYPE (LEN)` line.
#[derive(Debug, Clone, PartialEq)]
pub struct Scratch {
    /// Buffer name.
    pub name: String,
    /// Element type.
    pub dtype: DType,
    /// Element count.
    pub len: Expr,
    /// Line of the directive (1-based).
    pub line: usize,
}

/// Splits `key=(value) key=(value)` with balanced parentheses.
fn split_keyed(line: usize, text: &str) -> Result<Vec<(String, String)>, CandidateError> {
    let bad = |message: String| CandidateError::BadDirective { line, message };
    let mut out = Vec::new();
    let mut rest = text.trim();
    while !rest.is_empty() {
        let eq = rest
            .find('=')
            .ok_or_else(|| bad(format!("expected `key=(...)`, found `{rest}`")))?;
        let key = rest[..eq].trim().to_string();
        let after = rest[eq + 1..].trim_start();
        if !after.starts_with('(') {
            return Err(bad(format!(
                "`{key}=` must be followed by a parenthesised value"
            )));
        }
        let mut depth = 0;
        let mut end = None;
        for (i, c) in after.char_indices() {
            match c {
                '(' => depth += 1,
                ')' => {
                    depth -= 1;
                    if depth == 0 {
                        end = Some(i);
                        break;
                    }
                }
                _ => {}
            }
        }
        let end = end.ok_or_else(|| bad(format!("unbalanced parentheses after `{key}=`")))?;
        out.push((key, after[1..end].to_string()));
        rest = after[end + 1..].trim_start();
    }
    Ok(out)
}

/// Splits at top-level commas.
fn split_commas(text: &str) -> Vec<String> {
    let mut parts = Vec::new();
    let mut depth = 0;
    let mut cur = String::new();
    for c in text.chars() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(std::mem::take(&mut cur).trim().to_string());
                continue;
            }
            _ => {}
        }
        cur.push(c);
    }
    if !cur.trim().is_empty() || !parts.is_empty() {
        parts.push(cur.trim().to_string());
    }
    parts
}

fn parse_dims(line: usize, key: &str, text: &str) -> Result<Vec<Expr>, CandidateError> {
    let parts = split_commas(text);
    if parts.is_empty() || parts.len() > 3 {
        return Err(CandidateError::BadDirective {
            line,
            message: format!("`{key}` needs 1 to 3 dimensions, found {}", parts.len()),
        });
    }
    parts
        .iter()
        .map(|p| Expr::parse(p).map_err(|source| CandidateError::Expr { line, source }))
        .collect()
}

/// The arguments of `args=(...)`: bare names (resolved against the ABI and the scratch list
/// by `check_abi`) or integer expressions.
fn parse_args(line: usize, value: &str) -> Result<Vec<LaunchArg>, CandidateError> {
    split_commas(value)
        .into_iter()
        .map(|a| {
            let is_name = a.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                && a.chars().next().is_some_and(|c| !c.is_ascii_digit());
            if is_name {
                Ok(LaunchArg::Param(a))
            } else {
                Expr::parse(&a)
                    .map(LaunchArg::Int)
                    .map_err(|source| CandidateError::Expr { line, source })
            }
        })
        .collect()
}

/// The end of the kernel token of a launch line; the token may carry template arguments with
/// spaces (`reduce<256, 4>`).
fn kernel_token_end(text: &str) -> usize {
    let mut depth = 0;
    for (i, c) in text.char_indices() {
        match c {
            '<' => depth += 1,
            '>' => depth -= 1,
            c if c.is_whitespace() && depth == 0 => return i,
            _ => {}
        }
    }
    text.len()
}

fn parse_launch(line: usize, text: &str) -> Result<Launch, CandidateError> {
    let text = text.trim();
    let end = kernel_token_end(text);
    let kernel = text[..end].trim().to_string();
    let base = kernel.split('<').next().unwrap_or("");
    if base.is_empty()
        || !base
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
    {
        return Err(CandidateError::BadDirective {
            line,
            message: format!("`{kernel}` is not a kernel name"),
        });
    }
    let (mut grid, mut block, mut smem, mut args) = (None, None, None, None);
    for (key, value) in split_keyed(line, &text[end..])? {
        match key.as_str() {
            "grid" => grid = Some(parse_dims(line, "grid", &value)?),
            "block" => block = Some(parse_dims(line, "block", &value)?),
            "smem" => {
                smem = Some(
                    Expr::parse(&value).map_err(|source| CandidateError::Expr { line, source })?,
                )
            }
            "args" => args = Some(parse_args(line, &value)?),
            other => {
                return Err(CandidateError::BadDirective {
                    line,
                    message: format!(
                        "unknown launch option `{other}` (expected grid, block, smem, args)"
                    ),
                })
            }
        }
    }
    let name = kernel.clone();
    let missing = |what: &str| CandidateError::BadDirective {
        line,
        message: format!("@launch {name} has no {what}=(...)"),
    };
    Ok(Launch {
        kernel,
        grid: grid.ok_or_else(|| missing("grid"))?,
        block: block.ok_or_else(|| missing("block"))?,
        smem,
        args,
        line,
    })
}

fn parse_scratch(line: usize, text: &str) -> Result<Scratch, CandidateError> {
    let bad = |message: String| CandidateError::BadDirective { line, message };
    let text = text.trim();
    let mut it = text.splitn(3, char::is_whitespace);
    let name = it.next().unwrap_or("").to_string();
    let dtype_text = it.next().unwrap_or("");
    let len_text = it.next().unwrap_or("").trim();
    if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return Err(bad(format!(
            "@scratch needs `NAME DTYPE (LEN)`, found `{text}`"
        )));
    }
    let dtype = DType::parse(dtype_text)
        .ok_or_else(|| bad(format!("@scratch {name}: unknown dtype `{dtype_text}`")))?;
    let inner = len_text
        .strip_prefix('(')
        .and_then(|s| s.strip_suffix(')'))
        .ok_or_else(|| {
            bad(format!(
                "@scratch {name}: the length must be in parentheses, found `{len_text}`"
            ))
        })?;
    let len = Expr::parse(inner).map_err(|source| CandidateError::Expr { line, source })?;
    Ok(Scratch {
        name,
        dtype,
        len,
        line,
    })
}

/// Reads every `// @launch` and `// @scratch` line of `source`, in order. A scratch name
/// declared twice is an error; a source without a launch is [`CandidateError::NoLaunchPlan`].
pub(crate) fn read(source: &str) -> Result<(Vec<Launch>, Vec<Scratch>), CandidateError> {
    let mut launches = Vec::new();
    let mut scratch: Vec<Scratch> = Vec::new();
    for (i, raw) in source.lines().enumerate() {
        let line = i + 1;
        let Some(comment) = raw.trim_start().strip_prefix("//") else {
            continue;
        };
        let comment = comment.trim_start();
        if let Some(rest) = comment.strip_prefix("@launch") {
            launches.push(parse_launch(line, rest)?);
        } else if let Some(rest) = comment.strip_prefix("@scratch") {
            let s = parse_scratch(line, rest)?;
            if scratch.iter().any(|o| o.name == s.name) {
                return Err(CandidateError::BadDirective {
                    line,
                    message: format!("scratch buffer `{}` declared twice", s.name),
                });
            }
            scratch.push(s);
        }
    }
    if launches.is_empty() {
        return Err(CandidateError::NoLaunchPlan);
    }
    Ok((launches, scratch))
}
