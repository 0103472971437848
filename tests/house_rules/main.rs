//! Rules of the source tree that a reviewer would otherwise check by hand.

use std::path::{Path, PathBuf};

mod paths;

/// Files under `src/` that may read environment variables, and why. Everything else takes
/// its settings from option structs filled at these edges.
const ENV_EDGES: &[(&str, &str)] = &[
    ("src/bin/", "the command line"),
    (
        "src/worker.rs",
        "a worker process's start (GPU worker settings)",
    ),
    (
        "src/sandbox/locate.rs",
        "where the worker program is ($CUDAPERF_WORKER)",
    ),
    (
        "src/exec/runner/state.rs",
        "the inbox name the harness hands its runner process (internal plumbing)",
    ),
    (
        "src/exec/executor.rs",
        "CUDA_VISIBLE_DEVICES, as the driver itself reads it",
    ),
    (
        "src/compile/nvrtc.rs",
        "locating libnvrtc and the CUDA headers on this machine",
    ),
    ("src/originals/mod.rs", "the system C compiler ($CC)"),
];

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    for entry in entries {
        let path = entry.expect("directory entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|x| x == "rs") {
            out.push(path);
        }
    }
}

/// Lines that read the environment (`std::env::var`, `env::var_os`, ...), comments aside.
fn env_reads(text: &str) -> Vec<(usize, String)> {
    text.lines()
        .enumerate()
        .filter(|(_, l)| {
            let code = l.split("//").next().unwrap_or("");
            code.contains("env::var")
        })
        .map(|(i, l)| (i + 1, l.trim().to_string()))
        .collect()
}

/// Guards the rule of issue 23: the library reads no environment variable outside its
/// edges (a setting read deep inside cannot be seen from the options, nor tested).
#[test]
fn the_environment_is_read_only_at_the_edges() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    rust_files(&root.join("src"), &mut files);
    assert!(files.len() > 50, "src/ has {} Rust files", files.len());
    let mut found = Vec::new();
    for file in &files {
        let rel = file
            .strip_prefix(root)
            .expect("under the crate")
            .to_string_lossy()
            .replace('\\', "/");
        if ENV_EDGES.iter().any(|(edge, _)| rel.starts_with(edge)) {
            continue;
        }
        let text = std::fs::read_to_string(file).expect("readable source");
        for (line, code) in env_reads(&text) {
            found.push(format!("{rel}:{line}: {code}"));
        }
    }
    assert!(
        found.is_empty(),
        "environment read outside the edges (put the setting in an options struct, read it \
         in one of {:?}):\n{}",
        ENV_EDGES.iter().map(|(e, _)| *e).collect::<Vec<_>>(),
        found.join("\n")
    );
}

#[test]
fn env_reads_are_found_and_comments_are_not() {
    let text =
        "let a = 1;\n// std::env::var(\"X\") in a comment\nlet b = std::env::var_os(\"Y\");\n";
    assert_eq!(
        env_reads(text),
        vec![(3, "let b = std::env::var_os(\"Y\");".to_string())]
    );
}

// ---------------------------------------------------------------- size of files and functions

/// Longest file under `src/`, in lines (tests included).
const MAX_FILE_LINES: usize = 700;
/// Longest function outside tests, in lines (signature to closing brace).
const MAX_FN_LINES: usize = 80;

/// Paths being rewritten in another branch (none now: the GPU side, the job secret, the
/// harness, the worker roles, the task importer). Their files and functions are measured
/// and listed by `sizes_report` but not held to the limits until that rewrite lands; then
/// they move to the lists below or meet the rules.
const IN_REWRITE: &[(&str, &str)] = &[];

/// Files allowed over [`MAX_FILE_LINES`], and why. An entry that is no longer over the limit
/// fails the test: the list only shrinks.
const LONG_FILES: &[(&str, &str)] = &[];

/// Functions allowed over [`MAX_FN_LINES`] (`file`, `name`), and why; an entry that meets the
/// rule fails the test, as for [`LONG_FILES`].
const LONG_FUNCTIONS: &[(&str, &str, &str)] = &[];

/// Public functions allowed to return `Result<_, String>` (`file`, `name`), and why.
const STRING_ERRORS: &[(&str, &str, &str)] = &[];

/// `text` with comments, string and char literals blanked (newlines kept), so that braces and
/// keywords are the code's.
fn code_only(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let blank = |out: &mut Vec<u8>, s: &[u8]| {
        out.extend(s.iter().map(|&c| if c == b'\n' { b'\n' } else { b' ' }));
    };
    let mut i = 0;
    while i < b.len() {
        let rest = &b[i..];
        let word_before = i > 0 && (b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_');
        let end = if rest.starts_with(b"//") {
            rest.iter().position(|&c| c == b'\n').unwrap_or(rest.len())
        } else if rest.starts_with(b"/*") {
            let (mut depth, mut j) = (0usize, 0usize);
            while j < rest.len() {
                if rest[j..].starts_with(b"/*") {
                    depth += 1;
                    j += 2;
                } else if rest[j..].starts_with(b"*/") {
                    depth -= 1;
                    j += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    j += 1;
                }
            }
            j
        } else if !word_before && (rest.starts_with(b"r\"") || rest.starts_with(b"r#")) {
            let hashes = rest[1..].iter().take_while(|&&c| c == b'#').count();
            if rest.get(1 + hashes) == Some(&b'"') {
                let mut close = vec![b'"'];
                close.extend(std::iter::repeat_n(b'#', hashes));
                let start = 2 + hashes;
                rest[start..]
                    .windows(close.len())
                    .position(|w| w == close.as_slice())
                    .map_or(rest.len(), |p| start + p + close.len())
            } else {
                0
            }
        } else if rest[0] == b'"' {
            let mut j = 1;
            while j < rest.len() && rest[j] != b'"' {
                j += if rest[j] == b'\\' { 2 } else { 1 };
            }
            (j + 1).min(rest.len())
        } else if rest[0] == b'\'' {
            // A char literal ('x', '\n', '\u{1F600}'), not a lifetime ('a).
            let close = if rest.get(1) == Some(&b'\\') {
                rest.get(3..)
                    .and_then(|r| r.iter().position(|&c| c == b'\''))
                    .map(|p| p + 4)
            } else {
                (1..=4).find_map(|k| {
                    let ch = rest.get(1..1 + k)?;
                    (std::str::from_utf8(ch).is_ok() && rest.get(1 + k) == Some(&b'\''))
                        .then_some(k + 2)
                })
            };
            close.unwrap_or(0)
        } else {
            0
        };
        if end == 0 {
            out.push(b[i]);
            i += 1;
        } else {
            blank(&mut out, &rest[..end]);
            i += end;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A function: its name, first line (1-based), length in lines and signature text.
#[derive(Debug)]
struct Function {
    name: String,
    line: usize,
    lines: usize,
    public: bool,
    signature: String,
}

/// The name of the function a line of code starts, if it starts one.
fn fn_start(line: &str) -> Option<(String, bool)> {
    let mut words = line.split_whitespace().peekable();
    let mut public = false;
    while let Some(w) = words.next() {
        match w {
            "pub" => public = true,
            w if w.starts_with("pub(") => {}
            "const" | "async" | "unsafe" | "extern" | "default" => {}
            w if w.starts_with('"') || w.trim_matches(' ').is_empty() => {}
            "fn" => {
                let name: String = words
                    .next()?
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                return (!name.is_empty()).then_some((name, public));
            }
            _ => return None,
        }
    }
    None
}

/// Lines (0-based) inside `#[cfg(test)] mod ... { }` blocks.
fn test_lines(code: &[&str]) -> Vec<bool> {
    let mut inside = vec![false; code.len()];
    let mut i = 0;
    while i < code.len() {
        if code[i].trim() == "#[cfg(test)]" {
            let mut j = i + 1;
            while j < code.len() && code[j].trim().is_empty() {
                j += 1;
            }
            let t = code.get(j).map_or("", |l| l.trim_start());
            if t.starts_with("mod ")
                || t.starts_with("pub mod ")
                || t.starts_with("pub(crate) mod ")
            {
                let (mut depth, mut opened) = (0i64, false);
                for (k, l) in code.iter().enumerate().skip(j) {
                    inside[k] = true;
                    for c in l.chars() {
                        match c {
                            '{' => {
                                depth += 1;
                                opened = true;
                            }
                            '}' => depth -= 1,
                            _ => {}
                        }
                    }
                    if opened && depth <= 0 {
                        i = k;
                        break;
                    }
                    if !opened && l.contains(';') {
                        break;
                    }
                }
            }
        }
        i += 1;
    }
    inside
}

/// Every function with a body outside test modules.
fn functions(text: &str) -> Vec<Function> {
    let code = code_only(text);
    let lines: Vec<&str> = code.lines().collect();
    let tests = test_lines(&lines);
    let mut out = Vec::new();
    for (i, l) in lines.iter().enumerate() {
        if tests[i] {
            continue;
        }
        let Some((name, public)) = fn_start(l) else {
            continue;
        };
        let (mut depth, mut signature, mut end) = (0i64, String::new(), None);
        'lines: for (k, l) in lines.iter().enumerate().skip(i) {
            for c in l.chars() {
                if depth == 0 {
                    match c {
                        ';' => break 'lines,
                        '{' => depth = 1,
                        c => signature.push(c),
                    }
                } else if c == '{' {
                    depth += 1;
                } else if c == '}' {
                    depth -= 1;
                    if depth == 0 {
                        end = Some(k);
                        break 'lines;
                    }
                }
            }
            if depth == 0 {
                signature.push(' ');
            }
        }
        if let Some(end) = end {
            out.push(Function {
                name,
                line: i + 1,
                lines: end - i + 1,
                public,
                signature,
            });
        }
    }
    out
}

/// Whether a signature returns `Result<_, String>`.
fn returns_string_error(signature: &str) -> bool {
    let Some(ret) = signature.split("->").nth(1) else {
        return false;
    };
    let compact: String = ret.chars().filter(|c| !c.is_whitespace()).collect();
    compact.contains("Result<") && compact.ends_with(",String>")
}

/// Files under `src/` by path relative to the crate, with their text.
fn sources() -> Vec<(String, String)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    rust_files(&root.join("src"), &mut files);
    files.sort();
    files
        .iter()
        .map(|f| {
            let rel = f
                .strip_prefix(root)
                .expect("under the crate")
                .to_string_lossy()
                .replace('\\', "/");
            (rel, std::fs::read_to_string(f).expect("readable source"))
        })
        .collect()
}

fn in_rewrite(rel: &str) -> bool {
    IN_REWRITE.iter().any(|(p, _)| rel.starts_with(p))
}

/// What the size rules find: files over the limit, functions over the limit, public
/// functions with string errors (each `path[:line] name (lines)`), whether allowed or not.
struct Findings {
    long_files: Vec<(String, usize)>,
    long_functions: Vec<(String, String, usize, usize)>,
    string_errors: Vec<(String, String, usize)>,
}

fn findings() -> Findings {
    let mut f = Findings {
        long_files: Vec::new(),
        long_functions: Vec::new(),
        string_errors: Vec::new(),
    };
    for (rel, text) in sources() {
        let n = text.lines().count();
        if n > MAX_FILE_LINES {
            f.long_files.push((rel.clone(), n));
        }
        for func in functions(&text) {
            if func.lines > MAX_FN_LINES {
                f.long_functions
                    .push((rel.clone(), func.name.clone(), func.line, func.lines));
            }
            if func.public && !rel.starts_with("src/bin/") && returns_string_error(&func.signature)
            {
                f.string_errors.push((rel.clone(), func.name, func.line));
            }
        }
    }
    f
}

/// Guards the size rules of issue 23: no file under `src/` over 700 lines, no function over
/// 80 lines outside tests, no `Result<_, String>` in a public function of the library.
/// Allowed exceptions are listed above with their reason, and the lists only shrink.
#[test]
fn files_and_functions_stay_small() {
    let f = findings();
    let mut problems = Vec::new();
    for (rel, n) in &f.long_files {
        if !in_rewrite(rel) && !LONG_FILES.iter().any(|(p, _)| p == rel) {
            problems.push(format!("{rel}: {n} lines (at most {MAX_FILE_LINES})"));
        }
    }
    for (p, _) in LONG_FILES {
        if !f.long_files.iter().any(|(rel, _)| rel == p) {
            problems.push(format!(
                "{p} is no longer over {MAX_FILE_LINES} lines: remove it from LONG_FILES"
            ));
        }
    }
    for (rel, name, line, n) in &f.long_functions {
        if !in_rewrite(rel)
            && !LONG_FUNCTIONS
                .iter()
                .any(|(p, fname, _)| p == rel && fname == name)
        {
            problems.push(format!(
                "{rel}:{line}: fn {name} has {n} lines (at most {MAX_FN_LINES})"
            ));
        }
    }
    for (p, name, _) in LONG_FUNCTIONS {
        if !f
            .long_functions
            .iter()
            .any(|(rel, fname, _, _)| rel == p && fname == name)
        {
            problems.push(format!("{p}: fn {name} is no longer over {MAX_FN_LINES} lines: remove it from LONG_FUNCTIONS"));
        }
    }
    for (rel, name, line) in &f.string_errors {
        if !in_rewrite(rel)
            && !STRING_ERRORS
                .iter()
                .any(|(p, fname, _)| p == rel && fname == name)
        {
            problems.push(format!(
                "{rel}:{line}: pub fn {name} returns Result<_, String> (use a thiserror type)"
            ));
        }
    }
    for (p, name, _) in STRING_ERRORS {
        if !f
            .string_errors
            .iter()
            .any(|(rel, fname, _)| rel == p && fname == name)
        {
            problems.push(format!("{p}: pub fn {name} no longer returns Result<_, String>: remove it from STRING_ERRORS"));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// Prints what the size rules measure, allowed or not (`cargo test --test house_rules --
/// --nocapture sizes_report`): the numbers the issue's evidence asks for.
#[test]
fn sizes_report() {
    let f = findings();
    println!("files over {MAX_FILE_LINES} lines: {}", f.long_files.len());
    for (rel, n) in &f.long_files {
        println!("  {n:5} {rel}");
    }
    println!(
        "functions over {MAX_FN_LINES} lines: {}",
        f.long_functions.len()
    );
    for (rel, name, line, n) in &f.long_functions {
        println!("  {n:5} {rel}:{line} {name}");
    }
    println!(
        "public functions returning Result<_, String>: {}",
        f.string_errors.len()
    );
    for (rel, name, line) in &f.string_errors {
        println!("        {rel}:{line} {name}");
    }
    assert!(sources().len() > 50, "the report reads the crate's sources");
}

#[test]
fn the_scanner_sees_code_not_comments_or_strings() {
    let text = r##"
/// fn in_doc() {
pub fn real(a: &str) -> Result<u32, String> {
    let s = "fn fake() { {";
    let r = r#"}"#;
    let c = '{';
    let l: &'static str = "x";
    // }
    Ok(1)
}

fn other<'a>(x: &'a str) -> std::result::Result<(), Error> { x.len(); Ok(()) }

#[cfg(test)]
mod tests {
    fn in_tests() {
    }
}
"##;
    let found = functions(text);
    let names: Vec<(&str, usize, bool)> = found
        .iter()
        .map(|f| (f.name.as_str(), f.lines, f.public))
        .collect();
    assert_eq!(names, [("real", 8, true), ("other", 1, false)]);
    assert!(returns_string_error(&found[0].signature));
    assert!(!returns_string_error(&found[1].signature));
}

/// The build order of `docs/architecture.md` ("Modules, in build order"): a file may use
/// the modules of its own layer and of the layers above it. The longest matching path
/// prefix decides a file's layer.
const LAYERS: &[(&str, u32)] = &[
    ("src/expr.rs", 1),
    ("src/verdict.rs", 1),
    ("src/analysis/", 1),
    ("src/task/", 2),
    ("src/candidate/", 2),
    ("src/timings.rs", 2),
    ("src/dataset.rs", 2),
    ("src/sandbox/", 3),
    ("src/compile/", 4),
    ("src/inputs.rs", 5),
    ("src/exec/", 5),
    ("src/worker.rs", 5),
    ("src/originals/", 5),
    ("src/task/import/", 5),
    ("src/ranker/", 6),
    ("src/pipeline/", 7),
    ("src/prompt.rs", 8),
    ("src/reward/", 8),
    ("src/rl/", 8),
    ("src/serve/", 9),
    ("src/bin/", 9),
];

/// Imports that still run against the order (`file`, module it uses, why); the list only
/// shrinks: an entry that no longer imports its module fails the test.
const BACK_EDGES: &[(&str, &str, &str)] = &[];

/// The layer of a file under `src/`, or of a top-level module (`exec` → `src/exec/`).
fn layer_of(rel: &str) -> Option<u32> {
    LAYERS
        .iter()
        .filter(|(p, _)| {
            rel.starts_with(p) || *p == format!("src/{rel}/") || *p == format!("src/{rel}.rs")
        })
        .max_by_key(|(p, _)| p.len())
        .map(|&(_, l)| l)
}

/// The `crate::<module>` paths a file's code (not its comments, strings or tests) uses.
fn crate_modules(text: &str) -> Vec<String> {
    let code = code_only(text);
    let lines: Vec<&str> = code.lines().collect();
    let tests = test_lines(&lines);
    let mut found = Vec::new();
    for (line, in_test) in lines.iter().zip(tests) {
        if in_test {
            continue;
        }
        let mut rest = *line;
        while let Some(i) = rest.find("crate::") {
            let after = &rest[i + "crate::".len()..];
            let name: String = after
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if !name.is_empty() && !found.contains(&name) {
                found.push(name);
            }
            rest = after;
        }
    }
    found
}

/// No file imports from a module below its layer in the documented order, except the
/// listed back edges (issue 23: imports point one way).
#[test]
fn imports_follow_the_documented_build_order() {
    let mut problems = Vec::new();
    let mut seen = Vec::new();
    for (rel, text) in sources() {
        let Some(own) = layer_of(&rel) else {
            continue;
        };
        for module in crate_modules(&text) {
            let Some(theirs) = layer_of(&module) else {
                continue;
            };
            if theirs <= own {
                continue;
            }
            if BACK_EDGES.iter().any(|(f, m, _)| *f == rel && *m == module) {
                seen.push((rel.clone(), module));
                continue;
            }
            problems.push(format!(
                "{rel} (layer {own}) uses crate::{module} (layer {theirs}): docs/architecture.md's order says it may only use layers 1-{own}"
            ));
        }
    }
    for (f, m, _) in BACK_EDGES {
        if !seen.iter().any(|(sf, sm)| sf == f && sm == m) {
            problems.push(format!(
                "{f} no longer uses crate::{m}: remove it from BACK_EDGES"
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    // Every top-level module of src/ has a layer.
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    for entry in std::fs::read_dir(root).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        let module = name.trim_end_matches(".rs");
        if matches!(module, "lib" | "bin") {
            continue;
        }
        assert!(
            layer_of(module).is_some(),
            "src/{name} has no layer in LAYERS"
        );
    }
}
