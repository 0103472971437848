//! Rules of the source tree that a reviewer would otherwise check by hand.

use std::path::{Path, PathBuf};

/// Files under `src/` that may read environment variables, and why. Everything else takes
/// its settings from option structs filled at these edges.
const ENV_EDGES: &[(&str, &str)] = &[
    ("src/bin/", "the command line"),
    (
        "src/worker.rs",
        "a worker process's start (GPU worker settings)",
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
