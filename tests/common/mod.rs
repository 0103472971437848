//! Helpers shared by the integration tests.
//!
//! Paths are found at run time, so the test binaries also work when copied to another
//! machine: fixtures through `CARGO_MANIFEST_DIR` (run-time first, then compile-time), the
//! worker through `CUDAPERF_WORKER` (then the `cudaperf` binary cargo built).
#![allow(dead_code)]

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use cudaperf::task::{Task, TaskLimits};

/// The crate root.
pub fn manifest_dir() -> PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")))
}

/// A path under `fixtures/`.
pub fn fixture(rel: &str) -> PathBuf {
    manifest_dir().join("fixtures").join(rel)
}

/// The `cudaperf` binary (also the sandbox worker).
pub fn cudaperf_bin() -> PathBuf {
    std::env::var_os("CUDAPERF_WORKER")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_cudaperf")))
}

/// The Python with PyTorch the tests use: `$CUDAPERF_TORCH_PYTHON`, else `python3`.
pub fn torch_python() -> PathBuf {
    std::env::var_os("CUDAPERF_TORCH_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("python3"))
}

/// A `cudaperf` command run from the crate root.
pub fn cli() -> Command {
    let mut c = Command::new(cudaperf_bin());
    c.current_dir(manifest_dir());
    c
}

/// Whether NVRTC can be loaded in this process.
pub fn nvrtc_available() -> bool {
    cudaperf::compile::nvrtc::load().is_ok()
}

/// Skips (returns early from) a test when NVRTC is missing, saying so on stderr.
#[macro_export]
macro_rules! require_nvrtc {
    () => {
        if !$crate::common::nvrtc_available() {
            eprintln!(
                "SKIPPED: NVRTC not found ({:?})",
                cudaperf::compile::nvrtc::load().err()
            );
            return;
        }
    };
}

/// The vector_add fixture task.
pub fn vector_add() -> Task {
    Task::load(fixture("tasks/vector_add")).expect("vector_add task loads")
}

/// Reads a fixture file as text.
pub fn read_fixture(rel: &str) -> String {
    std::fs::read_to_string(fixture(rel)).unwrap_or_else(|e| panic!("read {rel}: {e}"))
}

/// Runs a command, killing it if it takes longer than `limit`; panics on timeout.
pub fn run_limited(cmd: &mut Command, limit: Duration) -> (Output, Duration) {
    let start = Instant::now();
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {cmd:?}: {e}"));
    // Drain the pipes on threads so a chatty child never blocks on a full pipe.
    let mut out = child.stdout.take().expect("stdout");
    let mut err = child.stderr.take().expect("stderr");
    let t_out = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = out.read_to_end(&mut v);
        v
    });
    let t_err = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = err.read_to_end(&mut v);
        v
    });
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break s;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{cmd:?} ran longer than {limit:?} (hang?)");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let elapsed = start.elapsed();
    let stdout = t_out.join().unwrap_or_default();
    let stderr = t_err.join().unwrap_or_default();
    (
        Output {
            status,
            stdout,
            stderr,
        },
        elapsed,
    )
}

/// Runs `cudaperf score --json` on one file with a task; returns the parsed report.
pub fn score_json(
    task: &Path,
    file: &Path,
    extra: &[&str],
    limit: Duration,
) -> (serde_json::Value, Output) {
    let mut cmd = cli();
    cmd.arg("score")
        .arg("--task")
        .arg(task)
        .arg(file)
        .arg("--json")
        .args(extra);
    let (out, _) = run_limited(&mut cmd, limit);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let v: serde_json::Value = serde_json::from_str(&stdout).unwrap_or_else(|e| {
        panic!(
            "score output is not JSON ({e}); status {:?}\nstdout:\n{stdout}\nstderr:\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (v, out)
}

/// A minimal valid task.toml (vector add) with `{extra}` appended; the folder is `id`.
pub const BASE_TASK: &str = r#"id = "t"
kind = "c2cuda"
original = "original.c"
reference = "reference.cu"

[[params]]
name = "a"
kind = "buffer"
direction = "in"
dtype = "f32"
len = "n"

[[params]]
name = "c"
kind = "buffer"
direction = "out"
dtype = "f32"
len = "n"

[[params]]
name = "n"
kind = "scalar"
dtype = "i32"
value = "n"

[[configs]]
name = "small"
sizes = { n = 1000 }
"#;

/// A reference that fits [`BASE_TASK`].
pub const BASE_REFERENCE: &str = "// @launch k grid=(ceil_div(n, 256)) block=(256)\n\
extern \"C\" __global__ void k(const float* a, float* c, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) c[i] = a[i]; }\n";

/// Writes a task folder `<tmp>/t/` with `task.toml` = `toml` and the usual files
/// (`original.c`, `reference.cu`) unless `omit` names them.
pub fn write_task(toml: &str, omit: &[&str]) -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("t");
    std::fs::create_dir(&dir).expect("mkdir");
    std::fs::write(dir.join("task.toml"), toml).expect("write toml");
    for (name, text) in [
        ("original.c", "void f(void) {}\n"),
        ("reference.cu", BASE_REFERENCE),
    ] {
        if !omit.contains(&name) {
            std::fs::write(dir.join(name), text).expect("write file");
        }
    }
    (tmp, dir)
}

/// Loads a task folder written by [`write_task`].
pub fn load_task(dir: &Path, limits: &TaskLimits) -> Result<Task, cudaperf::task::TaskError> {
    Task::load_with(dir, limits)
}
