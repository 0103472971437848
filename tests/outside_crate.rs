//! The README's "Use it from a trainer" program, run as written from an outside crate
//! (`tests/outside-crate`, cudaperf by path with `default-features = false`): it builds, it
//! serves as its own sandbox worker (`EvalOptions::self_worker` + `run_if_requested`), and it
//! scores a group with one result per completion.
//!
//! The crate is built with its own target folder (`target/outside-crate`): `cargo test`
//! holds the build lock of `target/debug` while tests run. A cold build compiles the
//! dependencies once more (about 6 minutes on 2 cores); later runs only relink.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

/// The ```rust block of the README section "Use it from a trainer".
fn readme_program() -> String {
    let readme = std::fs::read_to_string(common::manifest_dir().join("README.md")).unwrap();
    let section = readme
        .split("## Use it from a trainer")
        .nth(1)
        .expect("README has a `Use it from a trainer` section");
    let block = section
        .split("```rust\n")
        .nth(1)
        .and_then(|b| b.split("\n```").next())
        .expect("the section has a ```rust block");
    block.to_string()
}

fn write_completion(dir: &Path, name: &str, body: &str) -> std::path::PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, body).unwrap();
    path
}

#[test]
fn readme_trainer_runs_from_an_outside_crate_as_its_own_worker() {
    let root = common::manifest_dir();
    let crate_dir = root.join("tests/outside-crate");
    let main_rs = std::fs::read_to_string(crate_dir.join("src/main.rs")).unwrap();
    assert_eq!(
        readme_program().trim(),
        main_rs.trim(),
        "README's trainer program and tests/outside-crate/src/main.rs must be the same text"
    );

    let target = root.join("target/outside-crate");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let start = Instant::now();
    let mut build = std::process::Command::new(cargo);
    build
        .args(["build", "--locked", "--manifest-path"])
        .arg(crate_dir.join("Cargo.toml"))
        .arg("--target-dir")
        .arg(&target)
        .env_remove("CARGO_TARGET_DIR");
    let (out, _) = common::run_limited(&mut build, Duration::from_secs(60 * 60));
    assert!(
        out.status.success(),
        "building the outside crate failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!(
        "outside crate built in {:.1} s",
        start.elapsed().as_secs_f64()
    );
    let exe = target.join("debug/trainer");
    assert!(exe.is_file(), "{}", exe.display());

    if !common::nvrtc_available() {
        eprintln!("SKIPPED the scoring half: NVRTC not found");
        return;
    }
    // Completions as a policy writes them; run from an unrelated folder, with the worker
    // variable pointing at a program that is no worker: only the trainer itself can compile.
    let tmp = tempfile::tempdir().unwrap();
    let fenced = |rel: &str| {
        format!(
            "Here you go.\n\n```cuda\n{}```\n",
            common::read_fixture(rel)
        )
    };
    let files = [
        write_completion(
            tmp.path(),
            "good.md",
            &fenced("tasks/vector_add/vectorized_float4.cu"),
        ),
        write_completion(tmp.path(), "broken.md", &fenced("bad/unbalanced_braces.cu")),
        write_completion(tmp.path(), "prose.md", "I would use shared memory here."),
    ];
    let mut run = std::process::Command::new(&exe);
    run.current_dir(tmp.path())
        .arg(common::fixture("tasks/vector_add"))
        .args(&files)
        .env("CUDAPERF_WORKER", "/bin/false")
        .env_remove("CUDAPERF_RANKER_MODEL");
    let (out, took) = common::run_limited(&mut run, Duration::from_secs(300));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    eprintln!("scored 3 completions in {:.2} s", took.as_secs_f64());
    let lines: Vec<(String, serde_json::Value)> = stdout
        .lines()
        .map(|l| {
            let mut parts = l.splitn(3, ' ');
            let _index = parts.next();
            let value = parts.next().unwrap_or_default().to_string();
            let report = serde_json::from_str(parts.next().unwrap_or("null")).unwrap();
            (value, report)
        })
        .collect();
    assert_eq!(lines.len(), 3, "one result per completion:\n{stdout}");

    // The good kernel compiled in a sandboxed worker — the trainer's own executable, since
    // CUDAPERF_WORKER is /bin/false and no `cudaperf` binary is near it.
    let (value, report) = &lines[0];
    let compile = &report["stages"]["compile"];
    assert_eq!(compile["status"], "compiled", "{report}");
    assert_eq!(compile["isolation"], "sandboxed", "{report}");
    // The ranker stage used the model embedded in the library.
    assert_eq!(
        report["stages"]["ranker"]["model"], "<shipped ranker>",
        "{report}"
    );
    assert!(report["stages"]["ranker"]["error"].is_null(), "{report}");
    match value.as_str() {
        // No GPU here: no number, and the report says why.
        "none" => {
            assert_eq!(report["verdict"], "unavailable", "{report}");
            assert_eq!(report["stages"]["execute"]["status"], "unavailable");
        }
        v => {
            let v: f64 = v.parse().unwrap();
            assert!(v > 0.0 && report["verdict"] == "correct", "{v} {report}");
        }
    }
    // The candidate's own failures are scored: a compile error, no code at all.
    let (value, report) = &lines[1];
    assert_eq!(report["verdict"], "compile_error", "{report}");
    assert!(value.parse::<f64>().is_ok_and(|v| v <= -0.75), "{value}");
    let (value, report) = &lines[2];
    assert_eq!(report["verdict"], "extract_error", "{report}");
    assert_eq!(value, "-1");
}
