//! Hostile and broken candidates (fixtures/bad/) through the CLI: each ends in the outcome
//! its manifest names, within a wall-clock limit, without a panic or a leak.

mod common;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Manifest {
    files: BTreeMap<String, Case>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Case {
    /// A sub-tree the report must contain.
    expect: toml::Value,
    /// Dotted path → substring of that string value.
    #[serde(default)]
    contains: BTreeMap<String, String>,
    /// Dotted paths that must be null (stages that must not run).
    #[serde(default)]
    null: Vec<String>,
    /// Extra CLI arguments.
    #[serde(default)]
    args: Vec<String>,
    /// Wall-clock limit in seconds.
    #[serde(default)]
    limit_s: Option<u64>,
    /// Generate the file with this many bytes instead of reading it.
    #[serde(default)]
    generate_bytes: Option<usize>,
}

fn manifest() -> Manifest {
    let text = common::read_fixture("bad/manifest.toml");
    toml::from_str(&text).unwrap_or_else(|e| panic!("fixtures/bad/manifest.toml: {e}"))
}

/// Where `want` is not contained in `got`, as "path: want X, got Y" lines.
fn subset_errors(path: &str, want: &Value, got: &Value, out: &mut Vec<String>) {
    match (want, got) {
        (Value::Object(w), Value::Object(g)) => {
            for (k, wv) in w {
                let p = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}.{k}")
                };
                subset_errors(&p, wv, g.get(k).unwrap_or(&Value::Null), out);
            }
        }
        _ if want == got => {}
        _ => out.push(format!("{path}: want {want}, got {got}")),
    }
}

fn at<'a>(v: &'a Value, dotted: &str) -> &'a Value {
    dotted
        .split('.')
        .fold(v, |v, k| v.get(k).unwrap_or(&Value::Null))
}

/// A valid vector_add kernel padded with comment lines to `bytes`.
fn generate(bytes: usize, dir: &std::path::Path, name: &str) -> PathBuf {
    let mut s = common::read_fixture("tasks/vector_add/reference.cu");
    let line =
        "// padding padding padding padding padding padding padding padding padding padding\n";
    while s.len() + line.len() <= bytes {
        s.push_str(line);
    }
    while s.len() < bytes {
        s.push('\n');
    }
    let path = dir.join(name);
    std::fs::write(&path, s).unwrap();
    path
}

/// Every file in fixtures/bad has a manifest entry (and every entry a file).
#[test]
fn manifest_lists_every_file() {
    let m = manifest();
    let dir = common::fixture("bad");
    let mut on_disk: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n != "manifest.toml")
        .collect();
    on_disk.sort();
    let listed: Vec<String> = m
        .files
        .iter()
        .filter(|(_, c)| c.generate_bytes.is_none())
        .map(|(n, _)| n.clone())
        .collect();
    assert_eq!(on_disk, listed);
}

/// Each bad file gives its expected outcome through `cudaperf score --json`.
#[test]
fn bad_candidates_get_their_expected_outcome() {
    let m = manifest();
    let task = common::fixture("tasks/vector_add");
    let tmp = tempfile::tempdir().unwrap();
    let nvrtc = common::nvrtc_available();
    let mut failures = Vec::new();
    for (name, case) in &m.files {
        let needs_nvrtc = matches!(
            at(
                &serde_json::to_value(&case.expect).unwrap(),
                "stages.compile.status"
            )
            .as_str(),
            Some("error" | "timeout")
        );
        if needs_nvrtc && !nvrtc {
            eprintln!("SKIPPED {name}: needs NVRTC");
            continue;
        }
        let file = match case.generate_bytes {
            Some(n) => generate(n, tmp.path(), name),
            None => common::fixture(&format!("bad/{name}")),
        };
        let limit = Duration::from_secs(case.limit_s.unwrap_or(60));
        let args: Vec<&str> = case.args.iter().map(String::as_str).collect();
        let (report, out) = common::score_json(&task, &file, &args, limit);
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        let mut errs = Vec::new();
        if !out.status.success() {
            errs.push(format!("exit status {:?}", out.status));
        }
        for bad in ["root:", "panicked"] {
            if stdout.contains(bad) || stderr.contains(bad) {
                errs.push(format!("output contains `{bad}`"));
            }
        }
        subset_errors(
            "",
            &serde_json::to_value(&case.expect).unwrap(),
            &report,
            &mut errs,
        );
        for path in &case.null {
            if !at(&report, path).is_null() {
                errs.push(format!(
                    "{path} should be null (not run), got {}",
                    at(&report, path)
                ));
            }
        }
        for (path, sub) in &case.contains {
            let v = at(&report, path);
            if !v.as_str().is_some_and(|s| s.contains(sub.as_str())) {
                errs.push(format!("{path} = {v} does not contain `{sub}`"));
            }
        }
        println!(
            "{name}: {} (value {})",
            if errs.is_empty() { "ok" } else { "FAILED" },
            report["value"]
        );
        if !errs.is_empty() {
            failures.push(format!("{name}:\n  {}", errs.join("\n  ")));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
