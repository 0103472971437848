//! One public path per item (issue 23): a `pub use` may only re-export an item whose own
//! module is private, and no item is re-exported publicly from two places. rustdoc lists a
//! "Re-exports" section exactly where this fails.

use std::collections::BTreeMap;

use super::{code_only, sources, test_lines};

/// The module path of a source file (`src/pipeline/report/mod.rs` → `pipeline::report`).
fn module_of(rel: &str) -> String {
    let p = rel.trim_start_matches("src/").trim_end_matches(".rs");
    let p = p.trim_end_matches("/mod").trim_end_matches("lib");
    p.trim_end_matches('/').replace('/', "::")
}

/// A file's code outside its tests, on one line per statement's worth of text.
fn code_outside_tests(text: &str) -> String {
    let code = code_only(text);
    let lines: Vec<&str> = code.lines().collect();
    let tests = test_lines(&lines);
    lines
        .iter()
        .zip(tests)
        .filter(|(_, t)| !t)
        .map(|(l, _)| *l)
        .collect::<Vec<_>>()
        .join("\n")
}

/// `mod` declarations: (child, declared exactly `pub`).
fn child_modules(code: &str) -> Vec<(String, bool)> {
    let mut out = Vec::new();
    for line in code.lines() {
        let t = line.trim();
        let (public, rest) = if let Some(r) = t.strip_prefix("pub mod ") {
            (true, r)
        } else if let Some(r) = t.strip_prefix("mod ") {
            (false, r)
        } else if let Some(r) = t.strip_prefix("pub(crate) mod ") {
            (false, r)
        } else {
            continue;
        };
        if let Some(name) = rest.strip_suffix(';') {
            out.push((name.trim().to_string(), public));
        }
    }
    out
}

/// Every path a `use` tree names (`a::{b, c::{d as e}}` → `a::b`, `a::c::d`).
fn expand(tree: &str) -> Vec<String> {
    let tree = tree.trim();
    match tree.find('{') {
        None => {
            let path = tree.split(" as ").next().unwrap_or(tree).trim();
            vec![path.to_string()]
        }
        Some(open) => {
            let prefix = tree[..open].trim_end_matches("::").trim();
            let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
            let (mut parts, mut depth, mut cur) = (Vec::new(), 0, String::new());
            for c in inner.chars() {
                match c {
                    '{' => depth += 1,
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        parts.push(std::mem::take(&mut cur));
                        continue;
                    }
                    _ => {}
                }
                cur.push(c);
            }
            parts.push(cur);
            parts
                .iter()
                .filter(|p| !p.trim().is_empty())
                .flat_map(|p| expand(p))
                .map(|p| match p.as_str() {
                    "self" => prefix.to_string(),
                    _ if prefix.is_empty() => p,
                    _ => format!("{prefix}::{p}"),
                })
                .collect()
        }
    }
}

/// The `pub use` statements of a file's code (exactly `pub`, not `pub(crate)`).
fn public_uses(code: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = code;
    while let Some(i) = rest.find("pub use ") {
        let before = &rest[..i];
        let at_line_start = before
            .rsplit('\n')
            .next()
            .is_none_or(|l| l.trim().is_empty());
        let after = &rest[i + "pub use ".len()..];
        let end = after.find(';').unwrap_or(after.len());
        if at_line_start {
            out.push(
                after[..end]
                    .split_whitespace()
                    .collect::<Vec<_>>()
                    .join(" "),
            );
        }
        rest = &after[end..];
    }
    out
}

/// The absolute module path of `path`'s parent as seen from module `from`, or `None` for a
/// path into another crate.
fn source_module(from: &str, path: &str, modules: &BTreeMap<String, bool>) -> Option<String> {
    let segs: Vec<&str> = path.split("::").collect();
    let mut base: Vec<String> = if from.is_empty() {
        Vec::new()
    } else {
        from.split("::").map(str::to_string).collect()
    };
    let mut i = 0;
    match segs.first().copied() {
        Some("crate") => {
            base.clear();
            i = 1;
        }
        Some("self") => i = 1,
        _ => {}
    }
    while segs.get(i) == Some(&"super") {
        base.pop();
        i += 1;
    }
    let mut abs = base;
    abs.extend(
        segs[i..segs.len().saturating_sub(1)]
            .iter()
            .map(|s| s.to_string()),
    );
    let joined = abs.join("::");
    (joined.is_empty() || modules.contains_key(&joined)).then_some(joined)
}

/// Whether every module on the way to `module` is declared `pub`.
fn reachable(module: &str, modules: &BTreeMap<String, bool>) -> bool {
    let mut path = String::new();
    for seg in module.split("::").filter(|s| !s.is_empty()) {
        if !path.is_empty() {
            path.push_str("::");
        }
        path.push_str(seg);
        if modules.get(&path) != Some(&true) {
            return false;
        }
    }
    true
}

#[test]
fn every_public_item_has_one_public_path() {
    let files: Vec<(String, String)> = sources()
        .into_iter()
        .filter(|(rel, _)| !rel.starts_with("src/bin/"))
        .map(|(rel, text)| (module_of(&rel), code_outside_tests(&text)))
        .collect();
    let mut modules = BTreeMap::from([(String::new(), true)]);
    for (module, code) in &files {
        for (child, public) in child_modules(code) {
            let path = if module.is_empty() {
                child
            } else {
                format!("{module}::{child}")
            };
            modules.insert(path, public);
        }
    }
    assert!(modules.len() > 40, "{} modules found", modules.len());
    let mut problems = Vec::new();
    let mut exported: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (module, code) in &files {
        for tree in public_uses(code) {
            for path in expand(&tree) {
                let Some(source) = source_module(module, &path, &modules) else {
                    continue; // another crate's item
                };
                let item = path.rsplit("::").next().unwrap_or(&path).to_string();
                if reachable(&source, &modules) && &source != module {
                    problems.push(format!(
                        "`{module}` re-exports `{path}`, which is public at `{source}::{item}` already: make `{source}` private or drop the re-export"
                    ));
                }
                if reachable(module, &modules) {
                    exported
                        .entry(format!("{source}::{item}"))
                        .or_default()
                        .push(module.clone());
                }
            }
        }
    }
    for (item, by) in &exported {
        if by.len() > 1 {
            problems.push(format!("`{item}` is re-exported by {by:?}: keep one"));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn use_trees_and_paths_resolve() {
    assert_eq!(
        expand("report::{A, b::{C as D, self}}"),
        ["report::A", "report::b::C", "report::b"]
    );
    let modules = BTreeMap::from([
        ("exec".to_string(), true),
        ("exec::report".to_string(), false),
        ("pipeline".to_string(), true),
        ("pipeline::report".to_string(), true),
    ]);
    assert_eq!(
        source_module("pipeline::report", "crate::exec::report::X", &modules).as_deref(),
        Some("exec::report")
    );
    assert_eq!(
        source_module("pipeline::report", "super::Verdict", &modules).as_deref(),
        Some("pipeline")
    );
    assert_eq!(
        source_module("pipeline", "serde::Serialize", &modules),
        None
    );
    assert!(!reachable("exec::report", &modules) && reachable("pipeline::report", &modules));
    assert_eq!(module_of("src/pipeline/report/mod.rs"), "pipeline::report");
    assert_eq!(module_of("src/lib.rs"), "");
    assert_eq!(module_of("src/exec/timing.rs"), "exec::timing");
}
