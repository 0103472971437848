//! Candidates: CUDA source plus the launch plan written in its structured comments.
//!
//! ```text
//! // @launch row_softmax grid=(rows) block=(256) smem=(256*4)
//! // @scratch partial f32 (rows*8)
//! extern "C" __global__ void row_softmax(const float* x, float* y, int rows, int cols) { ... }
//! ```
//! [`Candidate::from_completion`] pulls the code out of an LLM completion,
//! [`Candidate::parse`] reads the plan, [`Candidate::check_abi`] matches it against a task and
//! [`Candidate::resolve`] evaluates it for one input configuration.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use crate::expr::{Expr, ExprError};
use crate::task::{DType, InputConfig, Param, Task};

/// Why a completion or source is not a usable candidate.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum CandidateError {
    /// The completion has no fenced code block.
    #[error("no code block found: put the CUDA source in a ```cuda fenced block")]
    NoCodeBlock,
    /// The source has no `// @launch` line.
    #[error(
        "no launch plan: add a line `// @launch KERNEL grid=(...) block=(...)` above the kernel"
    )]
    NoLaunchPlan,
    /// A launch names a kernel the source does not define.
    #[error("line {line}: @launch names kernel `{name}`, but the source defines no __global__ function of that name (found: {available})")]
    UnknownKernel {
        /// The kernel name in the launch line.
        name: String,
        /// Line of the launch directive (1-based).
        line: usize,
        /// The `__global__` functions found, comma-separated.
        available: String,
    },
    /// The kernel's parameters do not fit the task's ABI or the launch's `args`.
    #[error("line {line}: kernel `{kernel}` does not match the task ABI: {detail}")]
    AbiMismatch {
        /// The kernel.
        kernel: String,
        /// Line of the launch directive.
        line: usize,
        /// What differs.
        detail: String,
    },
    /// A `@launch` or `@scratch` line is malformed.
    #[error("line {line}: {message}")]
    BadDirective {
        /// Line (1-based).
        line: usize,
        /// What is wrong.
        message: String,
    },
    /// An expression in the plan could not be evaluated for a config.
    #[error("line {line}: {source}")]
    Expr {
        /// Line (1-based).
        line: usize,
        /// The expression error.
        source: ExprError,
    },
    /// The evaluated launch is outside what CUDA allows or what the limits allow.
    #[error("line {line}, config `{config}`: {message}")]
    InvalidLaunch {
        /// Line (1-based).
        line: usize,
        /// The config it was evaluated for.
        config: String,
        /// What is out of range.
        message: String,
    },
    /// The completion or source is larger than the size cap; nothing was parsed.
    #[error("the {what} is {bytes} bytes, more than the {limit}-byte limit")]
    TooLarge {
        /// `completion` or `source`.
        what: &'static str,
        /// Its size.
        bytes: usize,
        /// The cap ([`MAX_SOURCE_BYTES`] or [`MAX_COMPLETION_BYTES`]).
        limit: usize,
    },
}

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

/// A candidate implementation: source and launch plan.
#[derive(Debug, Clone, PartialEq)]
pub struct Candidate {
    /// The CUDA source.
    pub source: String,
    /// Launches, run in order on one stream.
    pub launches: Vec<Launch>,
    /// Scratch buffers, zeroed before each run.
    pub scratch: Vec<Scratch>,
}

/// A launch evaluated for one config.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResolvedLaunch {
    /// Kernel name as written.
    pub kernel: String,
    /// Grid (x, y, z).
    pub grid: [u32; 3],
    /// Block (x, y, z).
    pub block: [u32; 3],
    /// Dynamic shared memory in bytes.
    pub smem: u32,
    /// Arguments in kernel order.
    pub args: Vec<ResolvedArg>,
}

/// An argument evaluated for one config.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ResolvedArg {
    /// An ABI parameter by index into `task.params`.
    Param {
        /// Index into the task's params.
        index: usize,
    },
    /// A scratch buffer by index into `candidate.scratch`.
    Scratch {
        /// Index into the candidate's scratch list.
        index: usize,
    },
    /// An integer passed as `int`.
    Int {
        /// The value.
        value: i32,
    },
}

/// A launch plan evaluated for one config.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResolvedPlan {
    /// Launches in order.
    pub launches: Vec<ResolvedLaunch>,
    /// Element count of each scratch buffer.
    pub scratch_lens: Vec<u64>,
}

/// Limits for evaluated launch plans.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PlanLimits {
    /// Largest dynamic shared memory request in bytes (default 227 KiB, the sm_90 maximum).
    pub max_smem_bytes: u32,
    /// Largest total scratch bytes (default 4 GiB).
    pub max_scratch_bytes: u64,
    /// Largest number of launches in a plan (default 64).
    pub max_launches: usize,
    /// Largest number of blocks in one launch (default 2^31): grids beyond it cannot
    /// finish in any sensible time.
    pub max_blocks: u64,
}

impl Default for PlanLimits {
    fn default() -> Self {
        PlanLimits {
            max_smem_bytes: 227 * 1024,
            max_scratch_bytes: 4 << 30,
            max_launches: 64,
            max_blocks: 1 << 31,
        }
    }
}

/// Kinds of fence info strings accepted as CUDA code.
const CODE_FENCES: [&str; 7] = ["cuda", "cu", "cpp", "c++", "cxx", "c", ""];

/// Extracts fenced code blocks (info string, body) from markdown-ish text. An unclosed
/// final fence runs to the end of the text (completions get truncated).
pub fn code_blocks(text: &str) -> Vec<(String, String)> {
    let mut blocks = Vec::new();
    let mut current: Option<(String, String)> = None;
    for line in text.lines() {
        let trimmed = line.trim_start();
        if let Some(rest) = trimmed.strip_prefix("```") {
            match current.take() {
                Some(block) => blocks.push(block),
                None => current = Some((rest.trim().to_ascii_lowercase(), String::new())),
            }
            continue;
        }
        if let Some((_, body)) = current.as_mut() {
            body.push_str(line);
            body.push('\n');
        }
    }
    if let Some(block) = current {
        blocks.push(block);
    }
    blocks
}

/// Names of the `__global__` functions defined in `source` (best effort, text level).
pub fn global_function_names(source: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut rest = source;
    while let Some(pos) = rest.find("__global__") {
        rest = &rest[pos + "__global__".len()..];
        let mut head = rest;
        // Skip `__launch_bounds__(...)` so the next '(' is the parameter list.
        let mut name = None;
        while let Some(paren) = head.find('(') {
            let before = &head[..paren];
            if before.contains(';') || before.contains('{') {
                break;
            }
            let ident: String = before
                .trim_end()
                .chars()
                .rev()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect();
            if ident == "__launch_bounds__" {
                match head[paren..].find(')') {
                    Some(close) => head = &head[paren + close + 1..],
                    None => break,
                }
                continue;
            }
            if !ident.is_empty() {
                name = Some(ident);
            }
            break;
        }
        if let Some(n) = name {
            names.push(n);
        }
    }
    names
}

/// The parameter list of a `__global__` function named `name`, split at top-level commas.
pub(crate) fn kernel_params(source: &str, name: &str) -> Option<Vec<String>> {
    let mut search = source;
    while let Some(g) = search.find("__global__") {
        let after = &search[g..];
        let mut offset = 0;
        while let Some(pos) = after[offset..].find(name) {
            let start = offset + pos;
            let prev_ok = after[..start]
                .chars()
                .last()
                .is_none_or(|c| !(c.is_ascii_alphanumeric() || c == '_'));
            let tail = after[start + name.len()..].trim_start();
            if prev_ok && (tail.starts_with('(') || tail.starts_with('<')) {
                let open = after[start..].find('(')? + start;
                let mut depth = 0i32;
                let mut params = Vec::new();
                let mut cur = String::new();
                for c in after[open..].chars() {
                    match c {
                        '(' | '<' | '[' => {
                            depth += 1;
                            if depth > 1 {
                                cur.push(c);
                            }
                        }
                        ')' | '>' | ']' => {
                            depth -= 1;
                            if depth == 0 {
                                if !cur.trim().is_empty() {
                                    params.push(cur.trim().to_string());
                                }
                                return Some(params);
                            }
                            cur.push(c);
                        }
                        ',' if depth == 1 => {
                            params.push(std::mem::take(&mut cur).trim().to_string())
                        }
                        _ => cur.push(c),
                    }
                }
                return None;
            }
            offset = start + name.len();
            if after[..offset].contains('{') {
                break;
            }
        }
        search = &search[g + "__global__".len()..];
    }
    None
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

fn parse_launch(line: usize, text: &str) -> Result<Launch, CandidateError> {
    let text = text.trim();
    // The kernel token may carry template arguments with spaces: `reduce<256, 4>`.
    let mut depth = 0;
    let mut end = text.len();
    for (i, c) in text.char_indices() {
        match c {
            '<' => depth += 1,
            '>' => depth -= 1,
            c if c.is_whitespace() && depth == 0 => {
                end = i;
                break;
            }
            _ => {}
        }
    }
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
            "args" => {
                let list = split_commas(&value)
                    .into_iter()
                    .map(|a| {
                        let is_name = a.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                            && a.chars().next().is_some_and(|c| !c.is_ascii_digit());
                        if is_name {
                            // Resolved against the ABI and scratch list in check_abi.
                            Ok(LaunchArg::Param(a))
                        } else {
                            Expr::parse(&a)
                                .map(LaunchArg::Int)
                                .map_err(|source| CandidateError::Expr { line, source })
                        }
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                args = Some(list);
            }
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

/// Bytes of source accepted; larger inputs are rejected before any parsing (the syntax
/// tree of 5 MB of CUDA takes about 20 s and 730 MB to build).
pub const MAX_SOURCE_BYTES: usize = 1 << 20;

/// Bytes of LLM completion accepted (the code block and the prose around it).
pub const MAX_COMPLETION_BYTES: usize = 2 << 20;

impl Candidate {
    /// Parses the launch plan from a CUDA source.
    pub fn parse(source: &str) -> Result<Candidate, CandidateError> {
        if source.len() > MAX_SOURCE_BYTES {
            return Err(CandidateError::TooLarge {
                what: "source",
                bytes: source.len(),
                limit: MAX_SOURCE_BYTES,
            });
        }
        let mut launches = Vec::new();
        let mut scratch: Vec<Scratch> = Vec::new();
        for (i, raw) in source.lines().enumerate() {
            let line = i + 1;
            let t = raw.trim_start();
            let Some(comment) = t.strip_prefix("//") else {
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
        let defined = global_function_names(source);
        for l in &launches {
            if !defined.iter().any(|d| d == l.base_name()) {
                return Err(CandidateError::UnknownKernel {
                    name: l.kernel.clone(),
                    line: l.line,
                    available: if defined.is_empty() {
                        "none".into()
                    } else {
                        defined.join(", ")
                    },
                });
            }
        }
        Ok(Candidate {
            source: source.to_string(),
            launches,
            scratch,
        })
    }

    /// Extracts the code from an LLM completion and parses it. Fences ```cuda, ```cu,
    /// ```cpp, ```c++, ```c and bare ``` are accepted; the last block that defines a
    /// `__global__` function wins, else the largest block.
    pub fn from_completion(text: &str) -> Result<Candidate, CandidateError> {
        Candidate::parse(&extract_code(text)?)
    }

    /// Names of the kernels launched, without template arguments, deduplicated in order.
    pub fn kernel_names(&self) -> Vec<String> {
        let mut seen = BTreeSet::new();
        self.launches
            .iter()
            .filter(|l| seen.insert(l.base_name().to_string()))
            .map(|l| l.base_name().to_string())
            .collect()
    }

    /// Checks every launch against the task: argument names resolve, counts match the
    /// kernel's parameter list, and pointers go to pointer parameters.
    pub fn check_abi(&mut self, task: &Task) -> Result<(), CandidateError> {
        let scratch_names: Vec<&str> = self.scratch.iter().map(|s| s.name.as_str()).collect();
        for s in &self.scratch {
            if task.params.iter().any(|p| p.name() == s.name) {
                return Err(CandidateError::BadDirective {
                    line: s.line,
                    message: format!(
                        "scratch buffer `{}` has the name of a task parameter",
                        s.name
                    ),
                });
            }
            let sizes: Vec<&str> = task
                .configs
                .first()
                .map(|c| c.sizes.keys().map(String::as_str).collect())
                .unwrap_or_default();
            s.len
                .check_names(sizes.iter().copied())
                .map_err(|source| CandidateError::Expr {
                    line: s.line,
                    source,
                })?;
        }
        for launch in &self.launches {
            let exprs = launch
                .grid
                .iter()
                .chain(&launch.block)
                .chain(launch.smem.iter());
            for e in exprs {
                for cfg in &task.configs {
                    e.check_names(cfg.sizes.keys().map(String::as_str))
                        .map_err(|source| CandidateError::Expr {
                            line: launch.line,
                            source,
                        })?;
                }
            }
        }
        for launch in &mut self.launches {
            let mismatch = |detail: String| CandidateError::AbiMismatch {
                kernel: launch.kernel.clone(),
                line: launch.line,
                detail,
            };
            // Resolve bare names: ABI parameter, scratch buffer, or a size used as an int.
            let mut kinds: Vec<(String, bool)> = Vec::new(); // (description, is_pointer)
            match launch.args.as_mut() {
                None => {
                    for p in &task.params {
                        kinds.push((p.name().to_string(), matches!(p, Param::Buffer { .. })));
                    }
                }
                Some(args) => {
                    for a in args.iter_mut() {
                        if let LaunchArg::Param(name) = a {
                            if let Some(p) = task.params.iter().find(|p| p.name() == name) {
                                kinds.push((name.clone(), matches!(p, Param::Buffer { .. })));
                            } else if scratch_names.contains(&name.as_str()) {
                                let n = name.clone();
                                *a = LaunchArg::Scratch(n.clone());
                                kinds.push((n, true));
                            } else {
                                let e =
                                    Expr::parse(name).map_err(|source| CandidateError::Expr {
                                        line: launch.line,
                                        source,
                                    })?;
                                let sizes = task
                                    .configs
                                    .first()
                                    .map(|c| c.sizes.keys().cloned().collect::<Vec<_>>())
                                    .unwrap_or_default();
                                if e.check_names(sizes.iter().map(String::as_str)).is_err() {
                                    return Err(mismatch(format!(
                                        "argument `{name}` is neither a task parameter ({}), a scratch buffer, nor a size",
                                        task.params.iter().map(|p| p.name()).collect::<Vec<_>>().join(", ")
                                    )));
                                }
                                kinds.push((name.clone(), false));
                                *a = LaunchArg::Int(e);
                            }
                        } else {
                            kinds.push(("an integer expression".into(), false));
                        }
                    }
                }
            }
            let Some(params) = kernel_params(&self.source, launch.base_name()) else {
                continue; // Templates or macros we cannot read: the compiler will tell.
            };
            let params: Vec<&String> = params.iter().filter(|p| p.trim() != "void").collect();
            if params.len() != kinds.len() {
                return Err(mismatch(format!(
                    "the kernel takes {} parameters but the launch passes {} ({})",
                    params.len(),
                    kinds.len(),
                    kinds
                        .iter()
                        .map(|(n, _)| n.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                )));
            }
            for (i, (p, (name, is_ptr))) in params.iter().zip(&kinds).enumerate() {
                let kernel_ptr = p.contains('*') || p.contains('[');
                if kernel_ptr != *is_ptr {
                    return Err(mismatch(format!(
                        "parameter {} (`{p}`) is {} but receives `{name}`, which is {}",
                        i + 1,
                        if kernel_ptr { "a pointer" } else { "a value" },
                        if *is_ptr { "a buffer" } else { "a value" }
                    )));
                }
            }
        }
        Ok(())
    }

    /// Evaluates the plan for one config and checks CUDA's launch limits.
    pub fn resolve(
        &self,
        task: &Task,
        config: &InputConfig,
        limits: &PlanLimits,
    ) -> Result<ResolvedPlan, CandidateError> {
        if self.launches.len() > limits.max_launches {
            return Err(CandidateError::InvalidLaunch {
                line: self.launches[limits.max_launches].line,
                config: config.name.clone(),
                message: format!(
                    "{} launches, more than the limit of {}",
                    self.launches.len(),
                    limits.max_launches
                ),
            });
        }
        let mut scratch_lens = Vec::new();
        let mut scratch_bytes = 0u64;
        for s in &self.scratch {
            let n = s
                .len
                .eval_int(&config.sizes)
                .map_err(|source| CandidateError::Expr {
                    line: s.line,
                    source,
                })?;
            let invalid = |message: String| CandidateError::InvalidLaunch {
                line: s.line,
                config: config.name.clone(),
                message,
            };
            if n < 0 {
                return Err(invalid(format!(
                    "scratch `{}` has negative length {n}",
                    s.name
                )));
            }
            scratch_bytes =
                scratch_bytes.saturating_add((n as u64).saturating_mul(s.dtype.size_bytes()));
            if scratch_bytes > limits.max_scratch_bytes {
                return Err(invalid(format!(
                    "scratch buffers need more than {} bytes",
                    limits.max_scratch_bytes
                )));
            }
            scratch_lens.push(n as u64);
        }
        let mut launches = Vec::new();
        for l in &self.launches {
            let eval = |e: &Expr| {
                e.eval_int(&config.sizes)
                    .map_err(|source| CandidateError::Expr {
                        line: l.line,
                        source,
                    })
            };
            let invalid = |message: String| CandidateError::InvalidLaunch {
                line: l.line,
                config: config.name.clone(),
                message,
            };
            let dims =
                |exprs: &[Expr], what: &str, max: [i64; 3]| -> Result<[u32; 3], CandidateError> {
                    let mut out = [1u32; 3];
                    for (i, e) in exprs.iter().enumerate() {
                        let v = eval(e)?;
                        if v < 1 || v > max[i] {
                            return Err(invalid(format!(
                                "{what}.{} = {v} (from `{e}`) is outside 1..={}",
                                ["x", "y", "z"][i],
                                max[i]
                            )));
                        }
                        out[i] = v as u32;
                    }
                    Ok(out)
                };
            let grid = dims(&l.grid, "grid", [i32::MAX as i64, 65535, 65535])?;
            let block = dims(&l.block, "block", [1024, 1024, 64])?;
            let blocks = grid.iter().map(|&g| g as u64).product::<u64>();
            if blocks > limits.max_blocks {
                return Err(invalid(format!(
                    "grid has {blocks} blocks, more than the limit of {}",
                    limits.max_blocks
                )));
            }
            let threads = block.iter().map(|&b| b as u64).product::<u64>();
            if threads > 1024 {
                return Err(invalid(format!(
                    "block has {threads} threads, more than 1024"
                )));
            }
            let smem = match &l.smem {
                Some(e) => {
                    let v = eval(e)?;
                    if v < 0 || v > limits.max_smem_bytes as i64 {
                        return Err(invalid(format!(
                            "smem = {v} bytes (from `{e}`) is outside 0..={}",
                            limits.max_smem_bytes
                        )));
                    }
                    v as u32
                }
                None => 0,
            };
            let args = match &l.args {
                None => (0..task.params.len())
                    .map(|index| ResolvedArg::Param { index })
                    .collect(),
                Some(args) => args
                    .iter()
                    .map(|a| match a {
                        LaunchArg::Param(name) => task
                            .params
                            .iter()
                            .position(|p| p.name() == name)
                            .map(|index| ResolvedArg::Param { index })
                            .ok_or_else(|| {
                                invalid(format!("unknown argument `{name}` (run check_abi first)"))
                            }),
                        LaunchArg::Scratch(name) => self
                            .scratch
                            .iter()
                            .position(|s| &s.name == name)
                            .map(|index| ResolvedArg::Scratch { index })
                            .ok_or_else(|| invalid(format!("unknown scratch buffer `{name}`"))),
                        LaunchArg::Int(e) => {
                            let v = eval(e)?;
                            i32::try_from(v)
                                .map(|value| ResolvedArg::Int { value })
                                .map_err(|_| {
                                    invalid(format!("argument `{e}` = {v} does not fit in an int"))
                                })
                        }
                    })
                    .collect::<Result<Vec<_>, _>>()?,
            };
            launches.push(ResolvedLaunch {
                kernel: l.kernel.clone(),
                grid,
                block,
                smem,
                args,
            });
        }
        Ok(ResolvedPlan {
            launches,
            scratch_lens,
        })
    }
}

/// Picks the code block of a completion (see [`Candidate::from_completion`]). Completions
/// over [`MAX_COMPLETION_BYTES`] are refused before they are scanned.
pub fn extract_code(text: &str) -> Result<String, CandidateError> {
    if text.len() > MAX_COMPLETION_BYTES {
        return Err(CandidateError::TooLarge {
            what: "completion",
            bytes: text.len(),
            limit: MAX_COMPLETION_BYTES,
        });
    }
    let blocks: Vec<(String, String)> = code_blocks(text)
        .into_iter()
        .filter(|(info, _)| CODE_FENCES.contains(&info.split_whitespace().next().unwrap_or("")))
        .collect();
    if let Some((_, body)) = blocks.iter().rev().find(|(_, b)| b.contains("__global__")) {
        return Ok(body.clone());
    }
    blocks
        .into_iter()
        .max_by_key(|(_, b)| b.len())
        .map(|(_, b)| b)
        .filter(|b| !b.trim().is_empty())
        .ok_or(CandidateError::NoCodeBlock)
}
