//! Failure injection: every way the worker pools can fail on our side must end in
//! `Unavailable` (no number), and only what the candidate itself caused is scored.
//!
//! Each pool is driven through all of its failure paths with fake workers
//! (`tests/support/fake_worker.py`: no worker, one that cannot start, garbage or a wrong
//! greeting, a wrong protocol version or role, silence, a crash on every job, a hang on every
//! job, a crash on the first job only, NVRTC missing in the worker) and with the candidate's
//! own failures (a compile error, a source that kills or hangs the compiler, a CUDA error,
//! a timeout or wrong results on the GPU). The GPU pool is injected through
//! `Executor::with_workers`, so none of this needs a GPU. The property is then checked for
//! every preset and for random weights, thresholds and curriculum steps.

mod common;

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use cudaperf::compile::{CompileOptions, Isolation};
use cudaperf::exec::{ExecOptions, ExecResult, Executor};
use cudaperf::pipeline::report::CompileStatus;
use cudaperf::pipeline::report::{ConfigCheck, CorrectnessStage, ExecStatus, TimingStage};
use cudaperf::pipeline::{EvalOptions, Evaluation, Evaluator, Stage, Submission, Verdict};
use cudaperf::reward::presets::{self, CudaPerfWeights, DhrclSchedule};
use cudaperf::reward::{CompileReward, Context, Reward, RewardError, StructuralReward};
use cudaperf::sandbox::WorkerSpec;
use cudaperf::sandbox::{Role, WORKER_ARG};
use cudaperf::task::Task;
use proptest::prelude::*;

/// What is wrong with the compile pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CompileFault {
    Healthy,
    /// The worker program does not exist.
    NotFound,
    /// It exits before greeting.
    ExitBeforeGreeting,
    /// Its first line is not a greeting.
    Garbage,
    /// It greets with another protocol version.
    WrongProtocol,
    /// It greets as another role.
    WrongRole,
    /// It never says anything.
    Silent,
    /// It dies on every job (the canary dies too).
    CrashAlways,
    /// It hangs on every job (the canary hangs too).
    HangAlways,
    /// The first worker dies on its first job; the retry works.
    CrashOnce,
    /// NVRTC cannot be loaded in the worker (it refuses jobs).
    NvrtcMissing,
    /// Healthy, but sources with the marker kill the compiler (the candidate's doing).
    CandidateCrash,
    /// Healthy, but sources with the marker hang the compiler (the candidate's doing).
    CandidateHang,
}

impl CompileFault {
    const ALL: [CompileFault; 13] = [
        CompileFault::Healthy,
        CompileFault::NotFound,
        CompileFault::ExitBeforeGreeting,
        CompileFault::Garbage,
        CompileFault::WrongProtocol,
        CompileFault::WrongRole,
        CompileFault::Silent,
        CompileFault::CrashAlways,
        CompileFault::HangAlways,
        CompileFault::CrashOnce,
        CompileFault::NvrtcMissing,
        CompileFault::CandidateCrash,
        CompileFault::CandidateHang,
    ];

    /// Ours, not the candidate's.
    fn is_infrastructure(self) -> bool {
        !matches!(
            self,
            CompileFault::Healthy
                | CompileFault::CrashOnce
                | CompileFault::CandidateCrash
                | CompileFault::CandidateHang
        )
    }
}

/// What the GPU pool does with a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum GpuFault {
    /// No GPU here (the real executor): unavailable.
    NoGpu,
    NotFound,
    ExitBeforeGreeting,
    Garbage,
    WrongProtocol,
    WrongRole,
    Silent,
    CrashAlways,
    HangAlways,
    /// The worker answers that the task's reference failed (not the candidate's fault).
    ReferenceFailed,
    /// The worker answers: the candidate's kernel faulted.
    CandidateCudaError,
    /// The worker answers: the candidate's runs exhausted the job's time.
    CandidateTimeout,
    /// The worker answers: wrong results on one of two configs.
    CandidateIncorrect,
    /// The worker answers: correct and timed.
    CandidateCorrect,
}

impl GpuFault {
    const ALL: [GpuFault; 14] = [
        GpuFault::NoGpu,
        GpuFault::NotFound,
        GpuFault::ExitBeforeGreeting,
        GpuFault::Garbage,
        GpuFault::WrongProtocol,
        GpuFault::WrongRole,
        GpuFault::Silent,
        GpuFault::CrashAlways,
        GpuFault::HangAlways,
        GpuFault::ReferenceFailed,
        GpuFault::CandidateCudaError,
        GpuFault::CandidateTimeout,
        GpuFault::CandidateIncorrect,
        GpuFault::CandidateCorrect,
    ];

    fn is_infrastructure(self) -> bool {
        !matches!(
            self,
            GpuFault::CandidateCudaError
                | GpuFault::CandidateTimeout
                | GpuFault::CandidateIncorrect
                | GpuFault::CandidateCorrect
        )
    }
}

/// Submissions that reach different stages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cand {
    /// Compiles.
    Good,
    /// NVRTC rejects it.
    CompileError,
    /// No code block at all.
    NoCode,
    /// Compiles with a healthy compiler; kills or hangs the marker-sensitive fakes.
    Marker,
}

impl Cand {
    const ALL: [Cand; 4] = [Cand::Good, Cand::CompileError, Cand::NoCode, Cand::Marker];

    fn submission(self) -> Submission {
        let reference = common::read_fixture("tasks/vector_add/reference.cu");
        match self {
            Cand::Good => Submission::from_source(reference),
            Cand::CompileError => {
                Submission::from_source(common::read_fixture("bad/unbalanced_braces.cu"))
            }
            Cand::NoCode => Submission::from_completion("I could not write this kernel."),
            Cand::Marker => {
                Submission::from_source(format!("// CUDAPERF_FAKE_MARKER\n{reference}"))
            }
        }
    }
}

fn python() -> Option<PathBuf> {
    let ok = std::process::Command::new("python3")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    ok.then(|| PathBuf::from("python3"))
}

/// A shell wrapper that starts the fake worker in `mode` (pools start a program with fixed
/// arguments, so the mode travels in the wrapper's environment).
fn fake(dir: &Path, name: &str, mode: &str, extra_env: &[(&str, String)]) -> PathBuf {
    let script = common::manifest_dir().join("tests/support/fake_worker.py");
    let mut text = String::from("#!/bin/sh\n");
    text.push_str(&format!("export FAKE_MODE='{mode}'\n"));
    text.push_str(&format!(
        "export FAKE_REAL='{}'\n",
        common::cudaperf_bin().display()
    ));
    for (k, v) in extra_env {
        text.push_str(&format!("export {k}='{}'\n", v.replace('\'', "'\\''")));
    }
    text.push_str(&format!("exec python3 '{}' \"$@\"\n", script.display()));
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    path
}

/// The worker program for a compile fault (`tag` keeps per-evaluator state apart).
fn compile_worker(dir: &Path, fault: CompileFault, tag: &str) -> PathBuf {
    let name = format!("compile-{fault:?}-{tag}");
    match fault {
        CompileFault::Healthy => common::cudaperf_bin(),
        CompileFault::NotFound => dir.join("no-such-worker"),
        CompileFault::ExitBeforeGreeting => fake(dir, &name, "exit_before_greeting", &[]),
        CompileFault::Garbage => fake(dir, &name, "garbage", &[]),
        CompileFault::WrongProtocol => fake(dir, &name, "wrong_protocol", &[]),
        CompileFault::WrongRole => fake(dir, &name, "wrong_role", &[]),
        CompileFault::Silent => fake(dir, &name, "silent", &[]),
        CompileFault::CrashAlways => fake(dir, &name, "crash_always", &[]),
        CompileFault::HangAlways => fake(dir, &name, "hang_always", &[]),
        CompileFault::CrashOnce => fake(
            dir,
            &name,
            "crash_once",
            &[(
                "FAKE_STATE",
                dir.join(format!("{name}.state")).display().to_string(),
            )],
        ),
        CompileFault::NvrtcMissing => {
            // The real worker, without NVRTC: it greets, then refuses every job. The loader
            // path goes too, or NVRTC's last resort (the system loader) would find it there.
            let path = dir.join(&name);
            std::fs::write(
                &path,
                format!(
                    "#!/bin/sh\nexport CUDAPERF_NVRTC=/nonexistent/libnvrtc.so.13\nunset LD_LIBRARY_PATH\nexec '{}' \"$@\"\n",
                    common::cudaperf_bin().display()
                ),
            )
            .unwrap();
            #[cfg(unix)]
            {
                use std::os::unix::fs::PermissionsExt;
                std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
            }
            path
        }
        CompileFault::CandidateCrash => fake(dir, &name, "crash_on_marker", &[]),
        CompileFault::CandidateHang => fake(dir, &name, "hang_on_marker", &[]),
    }
}

fn correctness(passed: bool, pass_rate: f64) -> CorrectnessStage {
    let check = |name: &str, passed: bool| ConfigCheck {
        config: name.into(),
        passed,
        max_abs_err: if passed { 0.0 } else { 3.0 },
        max_rel_err: if passed { 0.0 } else { 1.0 },
        mismatches: if passed { 0 } else { 17 },
        elements: 1000,
        first_mismatch: None,
        unwritten: 0,
        inputs_modified: false,
        nondeterministic: false,
        input_independent: false,
        timed_run_mismatch: false,
        reasons: if passed {
            Vec::new()
        } else {
            vec!["17 elements outside tolerance".into()]
        },
        regimes: Vec::new(),
        precision: Vec::new(),
    };
    CorrectnessStage {
        passed,
        pass_rate,
        configs: vec![check("small", true), check("large", passed)],
        seed: 7,
        protocol: 3,
        precision: String::new(),
    }
}

fn timing() -> TimingStage {
    TimingStage {
        protocol: 2,
        reference: Default::default(),
        config: "large".into(),
        reference_us: 200.0,
        candidate_us: 100.0,
        speedup: 2.0,
        raw_speedup: 2.0,
        ci95: [1.98, 2.02],
        noise_floor: 0.005,
        within_noise: false,
        implausible: false,
        floor_us: 10.0,
        compute_floor_us: 0.0,
        unstable: false,
        reference_spread: 0.002,
        reference_calibration: 0.002,
        withheld: None,
        achieved_gbps: 1000.0,
        repetitions: 20,
        warmup: 4,
        checked_runs: 24,
        occupancy: Vec::new(),
    }
}

/// What a fake GPU worker answers for a fault, as the protocol's JSON.
fn gpu_reply(fault: GpuFault) -> Option<String> {
    let r = match fault {
        GpuFault::ReferenceFailed => ExecResult::status_only(ExecStatus::ReferenceFailed {
            reason: "reference faulted".into(),
        }),
        GpuFault::CandidateCudaError => ExecResult::status_only(ExecStatus::CudaError {
            code: 700,
            name: "CUDA_ERROR_ILLEGAL_ADDRESS".into(),
            during: "launch vector_add (config large)".into(),
        }),
        GpuFault::CandidateTimeout => {
            ExecResult::status_only(ExecStatus::Timeout { limit_ms: 1000 })
        }
        GpuFault::CandidateIncorrect => ExecResult {
            correctness: Some(correctness(false, 0.5)),
            ..ExecResult::status_only(ExecStatus::Ok)
        },
        GpuFault::CandidateCorrect => ExecResult {
            correctness: Some(correctness(true, 1.0)),
            timing: Some(timing()),
            ..ExecResult::status_only(ExecStatus::Ok)
        },
        _ => return None,
    };
    Some(serde_json::to_string(&r).unwrap())
}

/// The `gpu` worker program for a fault (`None`: the real executor, no GPU here).
fn gpu_worker(dir: &Path, fault: GpuFault) -> Option<PathBuf> {
    let name = format!("gpu-{fault:?}");
    Some(match fault {
        GpuFault::NoGpu => return None,
        GpuFault::NotFound => dir.join("no-such-gpu-worker"),
        GpuFault::ExitBeforeGreeting => fake(dir, &name, "exit_before_greeting", &[]),
        GpuFault::Garbage => fake(dir, &name, "garbage", &[]),
        GpuFault::WrongProtocol => fake(dir, &name, "wrong_protocol", &[]),
        GpuFault::WrongRole => fake(dir, &name, "wrong_role", &[]),
        GpuFault::Silent => fake(dir, &name, "silent", &[]),
        GpuFault::CrashAlways => fake(dir, &name, "crash_always", &[]),
        GpuFault::HangAlways => fake(dir, &name, "hang_always", &[]),
        other => fake(
            dir,
            &name,
            "reply",
            &[("FAKE_REPLY", gpu_reply(other).expect("a reply"))],
        ),
    })
}

/// The limit every pool works under here: fake workers must greet within it, the real
/// compile worker must compile `vector_add` within it, and the hanging faults wait it out.
/// A slow start on a loaded machine (a 2-core machine shared with compilers) must not miss
/// it, so it is generous: a larger limit makes this test slower, never wrong.
/// `CUDAPERF_TEST_POOL_LIMIT_S` sets it (seconds).
fn pool_limit() -> Duration {
    const DEFAULT_S: f64 = 10.0;
    let secs = std::env::var("CUDAPERF_TEST_POOL_LIMIT_S")
        .ok()
        .and_then(|v| v.trim().parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s > 0.0)
        .unwrap_or(DEFAULT_S);
    Duration::from_secs_f64(secs)
}

fn options(compile_worker: PathBuf, compile_timeout: Duration) -> EvalOptions {
    let mut o = EvalOptions {
        compile: CompileOptions {
            isolation: Isolation::Sandboxed,
            worker: Some(compile_worker),
            timeout: compile_timeout,
            workers: 1,
            ..CompileOptions::default()
        },
        ..EvalOptions::default()
    };
    o.exec.timeout = pool_limit();
    o
}

/// A submission and the evaluation of its one run through the pipeline. Each `evaluate` is
/// an attempt of its own (an infrastructure failure is not remembered), so the checks read
/// this run instead of waiting on the faults' limits again.
struct Run {
    sub: Submission,
    eval: OnceLock<Evaluation>,
}

impl Run {
    fn new(sub: Submission) -> Run {
        Run {
            sub,
            eval: OnceLock::new(),
        }
    }

    fn eval(&self) -> &Evaluation {
        self.eval.get().expect("evaluated when the world was built")
    }
}

/// One evaluator per (compile fault, candidate) and per (GPU fault, candidate), each run
/// to the last stage once; rewards then read those evaluations.
struct World {
    task: Task,
    compile: Vec<(CompileFault, Cand, Evaluator, Run)>,
    gpu: Vec<(GpuFault, Cand, Evaluator, Run)>,
    _dir: tempfile::TempDir,
}

fn world() -> Option<&'static World> {
    static WORLD: OnceLock<Option<World>> = OnceLock::new();
    WORLD
        .get_or_init(|| {
            if !common::nvrtc_available() {
                eprintln!("SKIPPED: NVRTC not found");
                return None;
            }
            python()?;
            let dir = tempfile::tempdir().unwrap();
            let task = common::vector_add();
            let mut compile = Vec::new();
            for fault in CompileFault::ALL {
                for cand in Cand::ALL {
                    let worker = compile_worker(dir.path(), fault, &format!("{cand:?}"));
                    let e = Evaluator::new(options(worker, pool_limit()))
                        .unwrap_or_else(|e| panic!("{fault:?}: {e}"));
                    compile.push((fault, cand, e, Run::new(cand.submission())));
                }
            }
            let mut gpu = Vec::new();
            for fault in GpuFault::ALL {
                for cand in [Cand::Good, Cand::CompileError] {
                    let o = options(common::cudaperf_bin(), Duration::from_secs(60));
                    let e = Evaluator::new(o.clone()).unwrap();
                    let e = match gpu_worker(dir.path(), fault) {
                        None => e,
                        Some(program) => e.with_executor(Executor::with_workers(
                            ExecOptions {
                                timeout: pool_limit(),
                                ..o.exec.clone()
                            },
                            vec!["0".into()],
                            vec![WorkerSpec {
                                program,
                                args: vec![WORKER_ARG.into(), Role::Gpu.as_str().into()],
                                env: Vec::new(),
                                memory_limit_bytes: None,
                                role: Role::Gpu.as_str().into(),
                            }],
                        )),
                    };
                    gpu.push((fault, cand, e, Run::new(cand.submission())));
                }
            }
            // Run every pipeline to its end, several at a time (the slow faults wait on
            // limits; at most a few real compilers run at once).
            let jobs: Vec<(&Evaluator, &Run)> = compile
                .iter()
                .map(|(_, _, e, s)| (e, s))
                .chain(gpu.iter().map(|(_, _, e, s)| (e, s)))
                .collect();
            let next = std::sync::atomic::AtomicUsize::new(0);
            std::thread::scope(|s| {
                for _ in 0..8 {
                    s.spawn(|| loop {
                        let k = next.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        let Some((e, run)) = jobs.get(k) else { return };
                        let _ = run.eval.set(e.evaluate(&task, &run.sub, Stage::Timing));
                    });
                }
            });
            Some(World {
                task,
                compile,
                gpu,
                _dir: dir,
            })
        })
        .as_ref()
}

/// The rewards checked, built from proptest's choices.
fn rewards(w: CudaPerfWeights, p: f64, step: u64) -> Vec<(String, Box<dyn Reward>)> {
    vec![
        ("cudaperf".into(), Box::new(presets::cudaperf())),
        (
            format!("cudaperf_with {w:?}"),
            Box::new(presets::cudaperf_with(
                w,
                Some(Box::new(StructuralReward)),
                Some(Box::new(cudaperf::reward::RankerReward)),
            )),
        ),
        (
            "correctness_only".into(),
            Box::new(presets::correctness_only()),
        ),
        ("kevin".into(), Box::new(presets::kevin())),
        (
            format!("fast_p({p})"),
            Box::new(presets::kernelbench_fast_p(p)),
        ),
        (
            format!("dhrcl@{step}"),
            Box::new(presets::staged_dhrcl(DhrclSchedule::default())),
        ),
        ("compile".into(), Box::new(CompileReward)),
        ("structure".into(), Box::new(StructuralReward)),
    ]
}

/// Checks one scored result against the property; `Err` says what is wrong.
fn check(
    label: &str,
    infra: bool,
    reaches_stage: bool,
    result: &Result<cudaperf::reward::Scored, RewardError>,
) -> Result<(), String> {
    match (infra && reaches_stage, result) {
        (true, Ok(s)) => Err(format!(
            "{label}: our failure gave a number {} (verdict {})",
            s.value, s.report.verdict
        )),
        (true, Err(e)) => {
            let v = e.report().verdict;
            if v.is_candidate_outcome() {
                return Err(format!(
                    "{label}: unavailable, but the verdict blames the candidate: {v}"
                ));
            }
            let line = e.to_string();
            if line.contains('\n') || line.len() > 600 {
                return Err(format!("{label}: the error is not one line: {line:?}"));
            }
            Ok(())
        }
        (false, Ok(s)) if !s.value.is_finite() => Err(format!("{label}: value {}", s.value)),
        (false, Ok(s)) if !s.report.verdict.is_candidate_outcome() => Err(format!(
            "{label}: a number {} with verdict {}",
            s.value, s.report.verdict
        )),
        (false, _) => Ok(()),
    }
}

/// The candidate's own failures are scored, with the ladder's values.
#[test]
fn candidate_failures_are_scored() {
    let Some(w) = world() else { return };
    let cudaperf = presets::cudaperf();
    let find_c = |f: CompileFault, c: Cand| {
        let (_, _, e, sub) = w
            .compile
            .iter()
            .find(|(ff, cc, ..)| *ff == f && *cc == c)
            .unwrap();
        cudaperf.score_evaluated(&Context::new(&w.task, e), sub.eval())
    };
    // NVRTC's errors, a source that kills the compiler twice (while a fresh one compiles a
    // trivial kernel), a source that outlives the compile limit: −0.75.
    for (f, c) in [
        (CompileFault::Healthy, Cand::CompileError),
        (CompileFault::CrashOnce, Cand::CompileError),
        (CompileFault::CandidateCrash, Cand::Marker),
        (CompileFault::CandidateHang, Cand::Marker),
    ] {
        let s = find_c(f, c).unwrap_or_else(|e| panic!("{f:?}/{c:?}: {e}"));
        assert!(
            (-1.0..=-0.75).contains(&s.value) && s.report.verdict == Verdict::CompileError,
            "{f:?}/{c:?}: {} {}",
            s.value,
            s.report.verdict
        );
    }
    let hang = find_c(CompileFault::CandidateHang, Cand::Marker).unwrap();
    assert_eq!(
        hang.report.stages.compile.as_ref().unwrap().status(),
        CompileStatus::Timeout
    );
    // The worker that died once: the retry compiled the candidate.
    let once = w
        .compile
        .iter()
        .find(|(f, c, ..)| *f == CompileFault::CrashOnce && *c == Cand::Good)
        .unwrap();
    let eval = once.3.eval();
    assert!(
        eval.stages.compile.as_ref().unwrap().is_compiled(),
        "{:?}",
        eval.stages.compile
    );
    // On the GPU: a fault or a timeout is −0.5; wrong results on half the configs −0.125;
    // correct and 2× faster above 1.
    for (f, lo, hi, verdict) in [
        (GpuFault::CandidateCudaError, -0.5, -0.5, Verdict::CudaError),
        (GpuFault::CandidateTimeout, -0.5, -0.5, Verdict::Timeout),
        (
            GpuFault::CandidateIncorrect,
            -0.125,
            -0.125,
            Verdict::Incorrect,
        ),
        (GpuFault::CandidateCorrect, 1.0, 1.6, Verdict::Correct),
    ] {
        let (_, _, e, sub) = w
            .gpu
            .iter()
            .find(|(ff, c, ..)| *ff == f && *c == Cand::Good)
            .unwrap();
        let s = cudaperf
            .score_evaluated(&Context::new(&w.task, e), sub.eval())
            .unwrap_or_else(|e| panic!("{f:?}: {e}"));
        assert!(
            s.value >= lo - 1e-9 && s.value <= hi + 1e-9 && s.report.verdict == verdict,
            "{f:?}: {} {}",
            s.value,
            s.report.verdict
        );
    }
}

/// Every compile fault that is ours reports `unavailable` in the compile stage, with a
/// reason that names what went wrong.
#[test]
fn compile_infrastructure_faults_are_unavailable_with_a_reason() {
    let Some(w) = world() else { return };
    for (fault, cand, _, sub) in &w.compile {
        if !fault.is_infrastructure() || *cand == Cand::NoCode {
            continue;
        }
        let eval = sub.eval();
        let c = eval.stages.compile.as_ref().expect("compile stage");
        let reason = c.reason().unwrap_or_default().to_string();
        assert_eq!(
            c.status(),
            CompileStatus::Unavailable,
            "{fault:?}/{cand:?}: {c:?}"
        );
        assert!(!reason.is_empty(), "{fault:?}: no reason");
        let expect = match fault {
            CompileFault::NotFound => "cannot start",
            CompileFault::ExitBeforeGreeting => "ended before greeting",
            CompileFault::Garbage => "is not a cudaperf worker",
            CompileFault::WrongProtocol => "protocol",
            CompileFault::WrongRole => "role",
            CompileFault::Silent => "did not greet",
            CompileFault::CrashAlways => "also crashed",
            CompileFault::HangAlways => "also ran past",
            CompileFault::NvrtcMissing => "NVRTC not found",
            _ => "",
        };
        assert!(
            reason.contains(expect),
            "{fault:?}: `{reason}` lacks `{expect}`"
        );
        assert_eq!(eval.verdict(), Verdict::Unavailable, "{fault:?}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// No infrastructure failure of either pool ever yields a number, for any preset and
    /// any weights, thresholds or curriculum step; every outcome the candidate caused does.
    #[test]
    fn no_infrastructure_failure_yields_a_reward(
        speed in -0.5f64..0.5, structure in -0.3f64..0.3, rank in -0.3f64..0.3,
        p in 0.0f64..4.0, step in 0u64..1000,
        pick in 0usize..1000,
    ) {
        let Some(w) = world() else { return Ok(()) };
        let weights = CudaPerfWeights { speed, structure, rank, syntax_credit: 0.1, ..CudaPerfWeights::default() };
        let n = w.compile.len() + w.gpu.len();
        // Every (fault, candidate) pair with all rewards, plus the picked one again with the
        // random parameters (the sweep below covers the space every run).
        for k in [pick % n] {
            let (label, infra, reaches, e, sub) = if k < w.compile.len() {
                let (f, c, e, sub) = &w.compile[k];
                (format!("compile {f:?}/{c:?}"), f.is_infrastructure(), *c != Cand::NoCode, e, sub)
            } else {
                let (f, c, e, sub) = &w.gpu[k - w.compile.len()];
                (format!("gpu {f:?}/{c:?}"), f.is_infrastructure(), *c == Cand::Good, e, sub)
            };
            let ctx = Context::new(&w.task, e).at_step(step);
            for (name, r) in rewards(weights, p, step) {
                // A reward that reads only stages before the failing pool cannot be hurt by it.
                let needs = r.needs(&ctx);
                let gpu_pool = k >= w.compile.len();
                let depends = if gpu_pool { needs >= Stage::Correctness } else { needs >= Stage::Compile };
                let result = r.score_evaluated(&ctx, sub.eval());
                if let Err(msg) = check(&format!("{label} {name}"), infra, reaches && depends, &result) {
                    return Err(TestCaseError::fail(msg));
                }
            }
        }
    }
}

/// The whole space, every run: each (fault, candidate) pair against every reward.
#[test]
fn sweep_of_every_fault_and_candidate() {
    let Some(w) = world() else { return };
    let mut failures = Vec::new();
    let n = w.compile.len() + w.gpu.len();
    for k in 0..n {
        let (label, infra, reaches, e, sub) = if k < w.compile.len() {
            let (f, c, e, sub) = &w.compile[k];
            (
                format!("compile {f:?}/{c:?}"),
                f.is_infrastructure(),
                *c != Cand::NoCode,
                e,
                sub,
            )
        } else {
            let (f, c, e, sub) = &w.gpu[k - w.compile.len()];
            (
                format!("gpu {f:?}/{c:?}"),
                f.is_infrastructure(),
                *c == Cand::Good,
                e,
                sub,
            )
        };
        for step in [0, 150, 500] {
            let ctx = Context::new(&w.task, e).at_step(step);
            for (name, r) in rewards(CudaPerfWeights::default(), 1.0, step) {
                let needs = r.needs(&ctx);
                let depends = if k >= w.compile.len() {
                    needs >= Stage::Correctness
                } else {
                    needs >= Stage::Compile
                };
                if let Err(m) = check(
                    &format!("{label} {name}@{step}"),
                    infra,
                    reaches && depends,
                    &r.score_evaluated(&ctx, sub.eval()),
                ) {
                    failures.push(m);
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Sandboxed compiles with no worker anywhere: building the evaluator is a typed error
/// (never a silent compile of untrusted code in this process). Checked in a copy of this
/// test binary placed where there is no `cudaperf` beside it.
#[test]
fn no_worker_found_is_a_typed_error() {
    const INNER: &str = "CUDAPERF_TEST_NO_WORKER_INNER";
    if std::env::var_os(INNER).is_some() {
        let err = Evaluator::new(EvalOptions::default())
            .err()
            .expect("no worker: refused");
        assert!(
            matches!(
                err,
                cudaperf::pipeline::EvalError::Compiler(
                    cudaperf::compile::CompilerError::NoWorker(_)
                )
            ),
            "{err}"
        );
        let text = err.to_string();
        assert!(
            text.contains("CUDAPERF_WORKER") && text.contains("InProcess"),
            "{text}"
        );
        // Opting in is explicit.
        let ok = Evaluator::new(EvalOptions {
            compile: CompileOptions {
                isolation: Isolation::InProcess,
                ..CompileOptions::default()
            },
            ..EvalOptions::default()
        });
        assert!(ok.is_ok());
        return;
    }
    let exe = std::env::current_exe().unwrap();
    // Beside the target folder (same file system, so a hard link is enough), and not
    // named `cudaperf`.
    let dir =
        tempfile::tempdir_in(exe.parent().unwrap().parent().unwrap().parent().unwrap()).unwrap();
    let copy = dir.path().join("lonely").join("failure_injection_copy");
    std::fs::create_dir_all(copy.parent().unwrap()).unwrap();
    if std::fs::hard_link(&exe, &copy).is_err() {
        std::fs::copy(&exe, &copy).unwrap();
    }
    let out = std::process::Command::new(&copy)
        .args(["--exact", "no_worker_found_is_a_typed_error", "--nocapture"])
        .env(INNER, "1")
        .env_remove("CUDAPERF_WORKER")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("1 passed"));
}
