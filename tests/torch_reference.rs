//! The PyTorch reference without a GPU: the Python runner greets in the runner protocol and
//! says why it cannot serve on a machine without CUDA (or without PyTorch); its forward/copy
//! logic passes its own test on the CPU; a job whose reference is a task's PyTorch original
//! carries the original and every buffer's shape per config, and no CUDA module. The GPU
//! side (imported problems scored against eager) is in tests/gpu.rs.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use cudaperf::exec::{runner_script, RUNNER_SOURCE};
use cudaperf::exec::{
    ExecJob, JobParts, JobReference, RunnerCmd, RunnerReply, TorchMode, TorchReference,
};
use cudaperf::sandbox::protocol::PROTOCOL_VERSION;
use cudaperf::sandbox::{JobOutcome, Pool, WorkerSpec};
use cudaperf::task::Task;

mod common;

use common::{manifest_dir as root, torch_python as python};

fn has_torch(python: &Path) -> bool {
    Command::new(python)
        .args(["-c", "import torch"])
        .output()
        .is_ok_and(|o| o.status.success())
}

fn runner_pool(python: &Path) -> Pool<RunnerCmd, RunnerReply> {
    Pool::new(vec![WorkerSpec {
        program: python.to_path_buf(),
        args: vec![
            runner_script().unwrap().display().to_string(),
            "--protocol".into(),
            PROTOCOL_VERSION.to_string(),
            "--version".into(),
            env!("CARGO_PKG_VERSION").into(),
        ],
        env: Vec::new(),
        memory_limit_bytes: None,
        role: "torch_runner".into(),
    }])
}

/// The runner's own CPU test: outputs written in ABI order (an `inout` buffer both read and
/// written), each config's shapes, a bf16 buffer viewed through bytes, and the original's
/// failures (wrong output count, an exception at import, a shape past the buffer) named.
#[test]
fn the_runner_computes_and_copies_outputs_on_the_cpu() {
    let py = python();
    if !has_torch(&py) {
        eprintln!(
            "skipped: `{} -c 'import torch'` fails (set CUDAPERF_TORCH_PYTHON)",
            py.display()
        );
        return;
    }
    let out = Command::new(&py)
        .arg(runner_script().unwrap())
        .arg("--self-test")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(v["self_test"], "ok");
    assert_eq!(v["errors"].as_array().unwrap().len(), 3);
}

/// The runner greets like a crate worker (so the pool accepts it), and on a machine without
/// a usable CUDA device, or with no PyTorch at all, it refuses with the reason: the pool
/// reports that as a refusal, which the harness turns into `unavailable` (ours), never into
/// a broken reference or a score.
#[test]
fn the_runner_greets_and_says_why_it_cannot_serve_here() {
    let pool = runner_pool(Path::new("python3"));
    let outcome = pool.run(
        &RunnerCmd::Alloc {
            bytes: vec![16],
            share_token: 0,
        },
        Duration::from_secs(120),
    );
    let JobOutcome::Refused { reason } = outcome else {
        panic!("expected a refusal with a reason, got {outcome:?}");
    };
    let torch = has_torch(Path::new("python3"));
    if torch {
        // PyTorch is there; this machine has no GPU it can use (else the test is moot).
        if reason.contains("sees no CUDA device") {
            assert!(reason.contains("PyTorch"), "{reason}");
        }
    } else {
        assert!(reason.contains("PyTorch cannot be imported"), "{reason}");
    }
    // A command the runner does not serve (a CUDA module) is refused by name, not a crash.
    let outcome = pool.run(
        &RunnerCmd::Load {
            cubin_b64: String::new(),
            symbols: Vec::new(),
            reload_each_run: false,
        },
        Duration::from_secs(60),
    );
    let JobOutcome::Refused { reason } = outcome else {
        panic!("{outcome:?}");
    };
    assert!(reason.contains("does not run `load` jobs"), "{reason}");
}

/// A runner that is not Python at all is unavailable with the program named.
#[test]
fn a_missing_interpreter_is_unavailable_naming_it() {
    let pool = runner_pool(Path::new("/nonexistent/python3"));
    let outcome = pool.run(&RunnerCmd::Reset, Duration::from_secs(10));
    let JobOutcome::Unavailable { reason } = outcome else {
        panic!("{outcome:?}");
    };
    assert!(reason.contains("/nonexistent/python3"), "{reason}");
}

/// A job against a task's PyTorch original: the original's text and mode, no CUDA module,
/// no reference launches, and each buffer's shape evaluated per config (the ABI's `shape`
/// where the task gives one).
#[test]
fn a_job_with_a_torch_reference_carries_the_original_and_the_shapes() {
    let task = Task::load(root().join("fixtures/tasks/add_layernorm")).unwrap();
    let reference = TorchReference {
        source: task.original.clone(),
        mode: TorchMode::Eager,
    };
    let configs: Vec<usize> = (0..task.configs.len()).collect();
    let job = ExecJob::build(JobParts {
        task: &task,
        configs: &configs,
        reference: JobReference::Torch(&reference),
        candidates: &[],
        timing_config: configs.len() - 1,
        seed: 7,
        timing: None,
        max_device_bytes: 0,
        bandwidth_gbps: 0.0,
        peak_tflops: 0.0,
        deadline_ms: 0,
        run_limit_ms: 0,
        member_budget_ms: 0,
    })
    .unwrap();
    assert_eq!(job.torch_reference.as_ref(), Some(&reference));
    assert!(job.reference.cubin_b64.is_empty() && job.reference.symbols.is_empty());
    for (c, cfg) in job.configs.iter().zip(&task.configs) {
        assert!(c.reference.launches.is_empty());
        let rows = cfg.sizes["rows"] as u64;
        let cols = cfg.sizes["cols"] as u64;
        assert_eq!(c.shapes.len(), job.buffers.len());
        assert_eq!(c.shapes[0], vec![rows, cols], "x in {}", c.name);
        assert_eq!(c.shapes[2], vec![cols], "gamma in {}", c.name);
        for (shape, len) in c.shapes.iter().zip(&c.lens) {
            assert_eq!(shape.iter().product::<u64>(), *len);
        }
    }
    // It travels to the worker and back unchanged.
    let text = serde_json::to_string(&job).unwrap();
    assert_eq!(serde_json::from_str::<ExecJob>(&text).unwrap(), job);
}

/// The script the crate writes is the one it ships.
#[test]
fn the_runner_script_is_the_shipped_one() {
    let path = runner_script().unwrap();
    assert_eq!(std::fs::read_to_string(path).unwrap(), RUNNER_SOURCE);
    assert!(RUNNER_SOURCE.contains("\"role\": \"torch_runner\""));
}
