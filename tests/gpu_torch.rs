//! GPU tests of the PyTorch reference: candidates checked and timed against a task's
//! PyTorch original (eager, and `torch.compile` where it works), imported KernelBench-layout
//! problems scored against eager with honest kernels, and a broken original reported as the
//! reference's failure. They need an NVIDIA GPU and a Python with PyTorch built for CUDA
//! (`$CUDAPERF_TORCH_PYTHON`, else `python3`), and are `#[ignore]`d so that CI lists them as
//! ignored. Run on a GPU machine with
//! `cargo test --release --test gpu_torch -- --include-ignored --test-threads=1 --nocapture`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use cudaperf::exec::{ExecOptions, ReferenceKind, TorchMode};
use cudaperf::pipeline::{EvalOptions, Evaluation, Evaluator, Stage, Submission, Verdict};
use cudaperf::task::import::{import_problems, ImportOptions};
use cudaperf::task::{Task, TaskLimits};

mod common;

use common::{manifest_dir as root, torch_python as python};

fn worker() -> Option<PathBuf> {
    Some(common::cudaperf_bin())
}

fn evaluator(torch: Option<TorchMode>) -> Evaluator {
    let mut opts = EvalOptions {
        exec: ExecOptions {
            worker: worker(),
            timeout: Duration::from_secs(120),
            torch_reference: torch,
            ..Default::default()
        },
        ..Default::default()
    };
    opts.compile.worker = worker();
    Evaluator::new(opts).expect("evaluator")
}

fn gpu_or_skip(e: &Evaluator) -> bool {
    match e.executor() {
        Ok(_) => true,
        Err(reason) => {
            eprintln!("SKIPPED (no GPU): {reason}");
            false
        }
    }
}

fn why(ev: &Evaluation) -> String {
    let status = ev
        .stages
        .execute
        .as_ref()
        .map(|x| serde_json::to_string(&x.status).unwrap_or_default())
        .unwrap_or_default();
    let reasons = ev
        .stages
        .correctness
        .as_ref()
        .map(|c| {
            c.configs
                .iter()
                .flat_map(|k| k.reasons.clone())
                .take(2)
                .collect::<Vec<_>>()
                .join("; ")
        })
        .unwrap_or_default();
    format!("{status} {reasons}")
}

fn line(name: &str, ev: &Evaluation) {
    match &ev.stages.timing {
        Some(t) => println!(
            "{name:<28} {:<10} ref {:<13} ref_us {:>10.1} cand_us {:>10.1} speedup {:>7.3} [{:.3}, {:.3}]",
            ev.verdict().as_str(),
            t.reference.as_str(),
            t.reference_us,
            t.candidate_us,
            t.speedup,
            t.ci95[0],
            t.ci95[1]
        ),
        None => println!("{name:<28} {:<10} {}", ev.verdict().as_str(), why(ev)),
    }
}

/// A torch2cuda task with both references: its implementation is correct against the
/// PyTorch original (eager and compiled) as against the CUDA reference, the report says
/// which one ran, a wrong kernel is incorrect against PyTorch too, and a c2cuda task has
/// no PyTorch reference (unavailable, naming why).
#[test]
#[ignore = "needs an NVIDIA GPU and PyTorch"]
fn candidates_are_checked_and_timed_against_the_pytorch_original() {
    let cuda = evaluator(None);
    if !gpu_or_skip(&cuda) {
        return;
    }
    let task = Task::load(root().join("fixtures/tasks/add_layernorm")).unwrap();
    let imp = Submission::from_source(task.implementations[0].source.clone());
    let ev = cuda.evaluate(&task, &imp, Stage::Timing);
    line("add_layernorm vs cuda", &ev);
    assert_eq!(ev.verdict(), Verdict::Correct, "{}", why(&ev));
    assert_eq!(ev.stages.timing.unwrap().reference, ReferenceKind::Cuda);

    let eager = evaluator(Some(TorchMode::Eager));
    let ev = eager.evaluate(&task, &imp, Stage::Timing);
    line("add_layernorm vs eager", &ev);
    assert_eq!(ev.verdict(), Verdict::Correct, "{}", why(&ev));
    let t = ev.stages.timing.clone().unwrap();
    assert_eq!(t.reference, ReferenceKind::TorchEager);
    assert!(t.reference_us > 0.0 && t.speedup > 0.0, "{t:?}");

    // The residual add without the normalisation: wrong against any reference.
    let wrong = Submission::from_source(
        r#"// @launch add_only grid=(rows) block=(256)
extern "C" __global__ void add_only(const float* x, const float* res, const float* gamma, const float* beta, float* y, int rows, int cols, float eps) {
    for (int c = threadIdx.x; c < cols; c += blockDim.x) {
        size_t i = (size_t)blockIdx.x * cols + c;
        y[i] = x[i] + res[i];
    }
}
"#
        .to_string(),
    );
    let ev = eager.evaluate(&task, &wrong, Stage::Timing);
    line("add only vs eager", &ev);
    assert_eq!(ev.verdict(), Verdict::Incorrect, "{}", why(&ev));

    let compiled = evaluator(Some(TorchMode::Compile));
    let ev = compiled.evaluate(&task, &imp, Stage::Timing);
    line("add_layernorm vs compile", &ev);
    match ev.verdict() {
        Verdict::Correct => assert_eq!(
            ev.stages.timing.unwrap().reference,
            ReferenceKind::TorchCompile
        ),
        // torch.compile needs Triton and a C compiler; where it cannot run that is ours.
        Verdict::Unavailable => eprintln!("torch.compile unavailable here: {}", why(&ev)),
        other => panic!("{other}: {}", why(&ev)),
    }

    let vector_add = Task::load(root().join("fixtures/tasks/vector_add")).unwrap();
    let ev = eager.evaluate(
        &vector_add,
        &Submission::from_source(vector_add.reference.source.clone()),
        Stage::Correctness,
    );
    assert_eq!(ev.verdict(), Verdict::Unavailable, "{}", why(&ev));
    assert!(why(&ev).contains("has no PyTorch original"), "{}", why(&ev));
}

/// Imported KernelBench-layout problems (no CUDA reference, no task.toml written by hand)
/// scored against PyTorch eager with the honest kernels of fixtures/pytorch/kernels.
#[test]
#[ignore = "needs an NVIDIA GPU and PyTorch"]
fn imported_problems_are_scored_against_eager() {
    let e = evaluator(None);
    if !gpu_or_skip(&e) {
        return;
    }
    let out = tempdir("imported");
    let kernels = root().join("fixtures/pytorch/kernels");
    let mut problems = Vec::new();
    for entry in std::fs::read_dir(root().join("fixtures/pytorch")).unwrap() {
        let p = entry.unwrap().path();
        let stem = p.file_stem().unwrap().to_string_lossy().to_lowercase();
        if p.extension().is_some_and(|x| x == "py")
            && stem != "19_relu"
            && kernels.join(format!("{stem}.cu")).exists()
        {
            problems.push(p);
        }
    }
    problems.sort();
    assert!(!problems.is_empty(), "no kernels in {}", kernels.display());
    let opts = ImportOptions {
        python: python(),
        limits: TaskLimits::from_gib(32.0).unwrap(),
        ..Default::default()
    };
    let results = import_problems(&problems, &out, &opts);
    let mut failures = Vec::new();
    for (p, r) in problems.iter().zip(results) {
        let task = match r {
            Ok(t) => t,
            Err(err) => {
                failures.push(format!("{}: import: {err}", p.display()));
                continue;
            }
        };
        let src = std::fs::read_to_string(kernels.join(format!("{}.cu", task.id))).unwrap();
        let ev = e.evaluate(&task, &Submission::from_source(src), Stage::Timing);
        line(&task.id, &ev);
        match (ev.verdict(), &ev.stages.timing) {
            (Verdict::Correct, Some(t)) if t.reference == ReferenceKind::TorchEager => {}
            _ => failures.push(format!("{}: {} {}", task.id, ev.verdict(), why(&ev))),
        }
    }
    let _ = std::fs::remove_dir_all(&out);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// An original that raises in forward, or returns the wrong number of elements, is the
/// reference's failure (`reference_failed`, naming the cause), not the candidate's.
#[test]
#[ignore = "needs an NVIDIA GPU and PyTorch"]
fn a_broken_original_is_the_references_failure() {
    let e = evaluator(Some(TorchMode::Eager));
    if !gpu_or_skip(&e) {
        return;
    }
    let src = root().join("fixtures/tasks/add_layernorm");
    for (name, body, expect) in [
        (
            "raises",
            "raise RuntimeError('broken on purpose')",
            "broken on purpose",
        ),
        (
            "half_output",
            "return (x + res)[:, :1]",
            "elements returned",
        ),
    ] {
        // The folder must be named after the task's id.
        let dir = tempdir(name).join("add_layernorm");
        std::fs::create_dir_all(&dir).unwrap();
        copy_dir(&src, &dir);
        let original = std::fs::read_to_string(dir.join("original.py")).unwrap();
        let patched = original.replacen("h = x + res", &format!("{body}\n        h = x + res"), 1);
        assert_ne!(patched, original);
        std::fs::write(dir.join("original.py"), patched).unwrap();
        let task = Task::load(&dir).unwrap();
        let ev = e.evaluate(
            &task,
            &Submission::from_source(task.implementations[0].source.clone()),
            Stage::Correctness,
        );
        println!("{name}: {} {}", ev.verdict(), why(&ev));
        assert_eq!(ev.verdict(), Verdict::ReferenceFailed, "{}", why(&ev));
        assert!(why(&ev).contains(expect), "{}", why(&ev));
        let _ = std::fs::remove_dir_all(dir.parent().unwrap());
    }
}

fn tempdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("cudaperf-gpu-torch-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn copy_dir(from: &Path, to: &Path) {
    for entry in std::fs::read_dir(from).unwrap() {
        let p = entry.unwrap().path();
        if p.is_file() {
            std::fs::copy(&p, to.join(p.file_name().unwrap())).unwrap();
        }
    }
}
