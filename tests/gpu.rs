//! GPU tests: hostile and reward-hacking candidates get their expected verdicts, all in one
//! worker pool that must survive them. They need an NVIDIA GPU and are `#[ignore]`d so CI
//! (no GPU) lists them as ignored, not passed. Run on a GPU machine with
//! `cargo test --release --test gpu -- --include-ignored --nocapture` (README).

use std::path::PathBuf;
use std::time::Duration;

use cudaperf::exec::{ExecOptions, RunArg, RunLaunch, RunnerCmd, RunnerReply};
use cudaperf::pipeline::{EvalOptions, Evaluator, Stage, Submission, Verdict};
use cudaperf::sandbox::{JobOutcome, Pool};
use cudaperf::sandbox::{Role, WorkerCommand};
use cudaperf::task::Task;

fn root() -> PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")))
}

fn worker() -> Option<PathBuf> {
    std::env::var_os("CUDAPERF_WORKER")
        .map(PathBuf::from)
        .or_else(|| Some(PathBuf::from(env!("CARGO_BIN_EXE_cudaperf"))))
}

#[derive(serde::Deserialize)]
struct Manifest {
    case: Vec<Case>,
}

#[derive(serde::Deserialize)]
struct Case {
    file: String,
    expect: Vec<String>,
}

fn evaluator(timeout_s: u64) -> Evaluator {
    evaluator_with(ExecOptions {
        timeout: Duration::from_secs(timeout_s),
        workers_per_gpu: 2,
        ..Default::default()
    })
}

fn evaluator_with(exec: ExecOptions) -> Evaluator {
    let mut opts = EvalOptions {
        exec: ExecOptions {
            worker: worker(),
            ..exec
        },
        ..Default::default()
    };
    opts.compile.worker = worker();
    Evaluator::new(opts).expect("evaluator")
}

fn task(id: &str) -> Task {
    Task::load(root().join("fixtures/tasks").join(id)).expect("task loads")
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

/// Runs every hostile and hack case as one batch through one pool and checks each verdict.
#[test]
#[ignore = "needs an NVIDIA GPU"]
fn hostile_and_hack_candidates_get_their_verdicts_in_one_pool() {
    let e = evaluator(15);
    if !gpu_or_skip(&e) {
        return;
    }
    let task = Task::load(root().join("fixtures/tasks/vector_add")).expect("vector_add task");
    let mut cases = Vec::new();
    for dir in ["hostile", "hacks"] {
        let d = root().join("fixtures").join(dir);
        let m: Manifest =
            toml::from_str(&std::fs::read_to_string(d.join("manifest.toml")).expect("manifest"))
                .expect("manifest toml");
        for c in m.case {
            let src = std::fs::read_to_string(d.join(&c.file)).expect("case file");
            cases.push((
                format!("{dir}/{}", c.file),
                c.expect,
                Submission::from_source(src),
            ));
        }
    }
    // A correct candidate last: the pool must still work after all of the above.
    cases.push((
        "tasks/vector_add/reference.cu".into(),
        vec!["correct".into()],
        Submission::from_source(task.reference.source.clone()),
    ));
    let subs: Vec<Submission> = cases.iter().map(|c| c.2.clone()).collect();
    let start = std::time::Instant::now();
    let evals = e.evaluate_batch(&task, &subs, Stage::Correctness);
    assert_eq!(evals.len(), cases.len(), "a job was lost");
    let mut failures = Vec::new();
    println!("{:<42} {:<16} {:<16} detail", "case", "expected", "verdict");
    for ((name, expect, _), ev) in cases.iter().zip(&evals) {
        let v = ev.verdict();
        let detail = ev
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
        println!(
            "{:<42} {:<16} {:<16} {} {}",
            name,
            expect.join("|"),
            v.as_str(),
            detail,
            reasons
        );
        if !expect.iter().any(|x| x == v.as_str()) {
            failures.push(format!("{name}: expected {expect:?}, got {v}"));
        }
    }
    let restarts = e.executor().map(|x| x.restarts()).unwrap_or(0);
    println!(
        "{} cases in {:.1} s, worker restarts: {restarts}",
        cases.len(),
        start.elapsed().as_secs_f64()
    );
    assert!(failures.is_empty(), "{failures:#?}");
}

#[derive(serde::Deserialize)]
struct TimingManifest {
    case: Vec<TimingCase>,
}

#[derive(serde::Deserialize)]
struct TimingCase {
    file: String,
    task: String,
    class: u32,
    expect: Vec<String>,
    max_speedup: Option<f64>,
    min_candidate_us: Option<f64>,
}

fn timing_manifest() -> (PathBuf, TimingManifest) {
    attack_manifest("fixtures/hacks/timing", &["manifest.toml"])
}

/// The attacks of the task and verdict layers (issue 19): classes 9, 10 and 12 in
/// manifest.toml, class 11 (narrow inputs) in narrow.toml.
fn integrity_manifest() -> (PathBuf, TimingManifest) {
    attack_manifest(
        "fixtures/hacks/integrity",
        &["manifest.toml", "narrow.toml"],
    )
}

/// The cases of the manifests `files` (those that exist) in folder `dir`.
fn attack_manifest(dir: &str, files: &[&str]) -> (PathBuf, TimingManifest) {
    let d = root().join(dir);
    let mut all = TimingManifest { case: Vec::new() };
    for f in files {
        let Ok(text) = std::fs::read_to_string(d.join(f)) else {
            continue;
        };
        let m: TimingManifest = toml::from_str(&text).expect("manifest toml");
        all.case.extend(m.case);
    }
    assert!(!all.case.is_empty(), "no cases in {dir}");
    (d, all)
}

/// Checks one attack's evaluation against its manifest entry; prints a table row.
fn judge(c: &TimingCase, ev: &cudaperf::pipeline::Evaluation, failures: &mut Vec<String>) {
    let v = ev.verdict();
    let timing = ev.stages.timing.as_ref();
    let detail = ev
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
        .filter(|s| !s.is_empty())
        .or_else(|| {
            ev.stages
                .execute
                .as_ref()
                .map(|x| serde_json::to_string(&x.status).unwrap_or_default())
        })
        .unwrap_or_default();
    println!(
        "{:<36} {:>5} {:<12} {:<22} {:>10.1} {:>10.1} {:>8.2} {}",
        c.file,
        c.class,
        v.as_str(),
        c.expect.join("|"),
        timing.map_or(f64::NAN, |t| t.reference_us),
        timing.map_or(f64::NAN, |t| t.candidate_us),
        timing.map_or(f64::NAN, |t| t.speedup),
        detail
    );
    if !c.expect.iter().any(|x| x == v.as_str()) {
        failures.push(format!(
            "{}: expected {:?}, got {v} ({detail})",
            c.file, c.expect
        ));
        return;
    }
    if v == Verdict::Correct {
        let Some(t) = timing else {
            failures.push(format!("{}: correct but not timed", c.file));
            return;
        };
        assert_eq!(t.protocol, cudaperf::exec::PROTOCOL_VERSION);
        if let Some(max) = c.max_speedup {
            if t.speedup > max {
                failures.push(format!("{}: speedup {} above {max}", c.file, t.speedup));
            }
        }
        if let Some(min) = c.min_candidate_us {
            if t.candidate_us < min {
                failures.push(format!(
                    "{}: candidate time {} us below {min} us: work it needed was not timed",
                    c.file, t.candidate_us
                ));
            }
        }
    }
}

fn attack_header() {
    println!(
        "{:<36} {:>5} {:<12} {:<22} {:>10} {:>10} {:>8} detail",
        "attack", "class", "verdict", "expected", "ref_us", "cand_us", "speedup"
    );
}

/// Issue 9: attacks on the timing phase, one kernel per attack class on a compute-bound
/// task (matmul) and memory-bound ones (softmax_rows, spmv_csr), each stopped by protocol
/// v2: judged incorrect or faulting, or correct with no gain beyond its honest work and
/// with the work it wanted for free inside its timed window. Each attack is its own job.
#[test]
#[ignore = "needs an NVIDIA GPU"]
fn timing_attacks_are_stopped() {
    attacks_are_stopped(timing_manifest());
}

/// Issue 19: attacks on what a job keeps between runs, on the tasks' tolerances and input
/// distributions and on the output poison, each stopped by protocol 3. Each is its own job.
#[test]
#[ignore = "needs an NVIDIA GPU"]
fn integrity_attacks_are_stopped() {
    attacks_are_stopped(integrity_manifest());
}

fn attacks_are_stopped((d, m): (PathBuf, TimingManifest)) {
    let e = evaluator_with(ExecOptions {
        timeout: Duration::from_secs(120),
        workers_per_gpu: 1,
        ..Default::default()
    });
    if !gpu_or_skip(&e) {
        return;
    }
    let mut failures = Vec::new();
    attack_header();
    for c in &m.case {
        let src = std::fs::read_to_string(d.join(&c.file)).expect("case file");
        let ev = e.evaluate(&task(&c.task), &Submission::from_source(src), Stage::Timing);
        judge(c, &ev, &mut failures);
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

/// Issue 13: the same attacks scored as GRPO groups (one group job per task, the attacks
/// beside the task's honest implementations, sharing the reference's runs): every attack
/// still gets its verdict, no member reads another's or the reference's outputs, and the
/// honest members stay correct.
#[test]
#[ignore = "needs an NVIDIA GPU"]
fn timing_attacks_are_stopped_in_group_jobs() {
    attacks_are_stopped_in_group_jobs(timing_manifest());
}

/// Issue 19: the integrity attacks as members of group jobs beside the honest
/// implementations of their tasks.
#[test]
#[ignore = "needs an NVIDIA GPU"]
fn integrity_attacks_are_stopped_in_group_jobs() {
    attacks_are_stopped_in_group_jobs(integrity_manifest());
}

fn attacks_are_stopped_in_group_jobs((d, m): (PathBuf, TimingManifest)) {
    let e = evaluator_with(ExecOptions {
        timeout: Duration::from_secs(120),
        workers_per_gpu: 1,
        ..Default::default()
    });
    if !gpu_or_skip(&e) {
        return;
    }
    let mut failures = Vec::new();
    attack_header();
    let mut ids: Vec<&str> = m.case.iter().map(|c| c.task.as_str()).collect();
    ids.sort_unstable();
    ids.dedup();
    for id in ids {
        let t = task(id);
        let cases: Vec<&TimingCase> = m.case.iter().filter(|c| c.task == id).collect();
        let mut subs: Vec<Submission> = cases
            .iter()
            .map(|c| {
                Submission::from_source(std::fs::read_to_string(d.join(&c.file)).expect("case"))
            })
            .collect();
        let honest: Vec<_> = t.all_implementations().collect();
        subs.extend(
            honest
                .iter()
                .map(|i| Submission::from_source(i.source.clone())),
        );
        let evals = e.evaluate_batch(&t, &subs, Stage::Timing);
        assert_eq!(evals.len(), subs.len(), "one result per member");
        for (c, ev) in cases.iter().zip(&evals) {
            judge(c, ev, &mut failures);
            let members = ev.stages.execute.as_ref().map_or(0, |x| x.job_members);
            assert!(members > 1, "{}: scored alone, not in a group job", c.file);
        }
        for (imp, ev) in honest.iter().zip(&evals[cases.len()..]) {
            let v = ev.verdict();
            println!(
                "{:<36} {:>5} {:<12} {:<22} {:>10.1} {:>10.1} {:>8.2}",
                imp.name,
                "-",
                v.as_str(),
                "correct",
                ev.stages
                    .timing
                    .as_ref()
                    .map_or(f64::NAN, |t| t.reference_us),
                ev.stages
                    .timing
                    .as_ref()
                    .map_or(f64::NAN, |t| t.candidate_us),
                ev.stages.timing.as_ref().map_or(f64::NAN, |t| t.speedup)
            );
            if v != Verdict::Correct {
                failures.push(format!(
                    "{id}/{}: honest implementation judged {v}",
                    imp.name
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

/// Issue 19, verdicts by cause: a kernel that hangs is a `timeout` alone and in a group job,
/// and so is a member whose runs are each under the per-run limit but together exhaust its
/// budget; the honest members of the same group job keep their own verdicts (never
/// `unavailable`: the job's deadline is not theirs to share).
#[test]
#[ignore = "needs an NVIDIA GPU"]
fn timeouts_are_the_candidates_alone_and_in_group_jobs() {
    let e = evaluator_with(ExecOptions {
        timeout: Duration::from_secs(7),
        run_timeout: Duration::from_secs(4),
        workers_per_gpu: 1,
        ..Default::default()
    });
    if !gpu_or_skip(&e) {
        return;
    }
    let t = task("vector_add");
    let read = |rel: &str| Submission::from_source(common_read(rel));
    let hang = read("fixtures/hostile/infinite_loop.cu");
    let slow = read("fixtures/hostile/slow_each_run.cu");
    let honest = read("fixtures/tasks/vector_add/vectorized_float4.cu");
    // The group first, so that no member is answered from an earlier evaluation: a hang, a
    // member whose runs each take 2 s (under the 4 s run limit) until its 7 s budget is
    // spent, and honest members.
    let group = [hang.clone(), slow, honest.clone(), honest];
    let started = std::time::Instant::now();
    let evals = e.evaluate_batch(&t, &group, Stage::Timing);
    let verdicts: Vec<Verdict> = evals.iter().map(|ev| ev.verdict()).collect();
    let status = |ev: &cudaperf::pipeline::Evaluation| {
        ev.stages
            .execute
            .as_ref()
            .map(|x| serde_json::to_string(&x.status).unwrap_or_default())
            .unwrap_or_default()
    };
    println!(
        "group [hang, slow, honest, honest]: {verdicts:?} in {:.1} s ({} | {})",
        started.elapsed().as_secs_f64(),
        status(&evals[0]),
        status(&evals[1])
    );
    assert_eq!(
        verdicts,
        [
            Verdict::Timeout,
            Verdict::Timeout,
            Verdict::Correct,
            Verdict::Correct
        ],
        "{:#?}",
        evals
            .iter()
            .map(|ev| &ev.stages.execute)
            .collect::<Vec<_>>()
    );
    for ev in &evals[..3] {
        let members = ev.stages.execute.as_ref().map_or(0, |x| x.job_members);
        assert_eq!(members, 3, "one job of the 3 distinct members");
    }
    // The slow member was stopped on its budget (7 s), not its run limit (4 s).
    assert!(status(&evals[1]).contains("7000"), "{}", status(&evals[1]));
    // And a hang alone (a source of its own: no remembered evaluation) is a timeout too.
    let alone = Submission::from_source(format!(
        "{}\n// alone\n",
        common_read("fixtures/hostile/infinite_loop.cu")
    ));
    let started = std::time::Instant::now();
    let ev = e.evaluate(&t, &alone, Stage::Timing);
    println!(
        "hang alone: {} in {:.1} s",
        ev.verdict(),
        started.elapsed().as_secs_f64()
    );
    assert_eq!(ev.verdict(), Verdict::Timeout, "{:?}", ev.stages.execute);
}

fn common_read(rel: &str) -> String {
    std::fs::read_to_string(root().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// Issue 9, isolation: a candidate kernel that knows the exact address of the reference's
/// buffer (in the reference's runner process) reads nothing of it: it faults, or it reads
/// its own memory. A positive control shows the probe does see the pattern where it lives.
#[test]
#[ignore = "needs an NVIDIA GPU"]
fn reference_memory_is_not_addressable_from_the_candidate_runner() {
    let e = evaluator(30);
    if !gpu_or_skip(&e) {
        return;
    }
    let src = r#"
extern "C" __global__ void write_pattern(float* p, unsigned long long n) {
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
         i += (unsigned long long)gridDim.x * blockDim.x) p[i] = 1234.5f;
}
extern "C" __global__ void probe(unsigned long long addr, float* own) {
    float v = *reinterpret_cast<const volatile float*>(addr);
    if (v == 1234.5f) {  // found the other side's data: make it visible in the run's time
        unsigned long long t0, t;
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
        do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); } while (t - t0 < 300000000ull);
    }
    own[0] = v;
}
"#;
    let lib = cudaperf::compile::nvrtc::load().expect("nvrtc");
    let mut flags = vec!["-arch=sm_90".to_string()];
    if let Some(dir) = &lib.include_dir {
        flags.push(format!("-I{}", dir.display()));
    }
    let out = cudaperf::compile::nvrtc::compile(src, "probe.cu", &flags, &[]).expect("compile");
    assert!(out.ok, "{}", out.log);
    let cubin_b64 = {
        use base64::Engine;
        base64::engine::general_purpose::STANDARD.encode(&out.cubin)
    };
    let spec = WorkerCommand::new(worker().expect("worker"), Role::Runner).spec(Role::Runner);
    let reference: Pool<RunnerCmd, RunnerReply> = Pool::new(vec![spec.clone()]);
    let candidate: Pool<RunnerCmd, RunnerReply> = Pool::new(vec![spec]);
    let limit = Duration::from_secs(20);
    let call = |p: &Pool<RunnerCmd, RunnerReply>, cmd: RunnerCmd| match p.run(&cmd, limit) {
        JobOutcome::Done(r) => r,
        other => panic!("runner: {other:?}"),
    };
    let n: u64 = 1 << 20;
    let mut ptrs = Vec::new();
    for p in [&reference, &candidate] {
        assert_eq!(
            call(
                p,
                RunnerCmd::Load {
                    cubin_b64: cubin_b64.clone(),
                    symbols: vec!["write_pattern".into(), "probe".into()],
                    reload_each_run: false,
                }
            ),
            RunnerReply::Loaded
        );
        match call(
            p,
            RunnerCmd::Alloc {
                bytes: vec![4 * n, 4],
                share_token: 0,
            },
        ) {
            RunnerReply::Allocated { pointers, .. } => ptrs.push(pointers),
            other => panic!("{other:?}"),
        }
    }
    let run = |p: &Pool<RunnerCmd, RunnerReply>, function: usize, args: Vec<RunArg>| {
        call(
            p,
            RunnerCmd::Run {
                launches: vec![RunLaunch {
                    function,
                    grid: [64, 1, 1],
                    block: [256, 1, 1],
                    smem: 0,
                    args,
                }],
                zero: vec![],
                used: vec![],
                scrub: false,
                flush_bytes: 0,
                flush_value: 0,
            },
        )
    };
    let target = ptrs[0][0];
    run(
        &reference,
        0,
        vec![RunArg::Buffer { index: 0 }, RunArg::Value { bits: n }],
    );
    // Positive control: in the reference's own process the address holds the pattern.
    let control = run(
        &reference,
        1,
        vec![RunArg::Value { bits: target }, RunArg::Buffer { index: 1 }],
    );
    assert!(
        matches!(control, RunnerReply::Ran { millis, .. } if millis >= 250.0),
        "control: {control:?}"
    );
    // The candidate's process, same address.
    let attack = run(
        &candidate,
        1,
        vec![RunArg::Value { bits: target }, RunArg::Buffer { index: 1 }],
    );
    println!(
        "reference buffer at {target:#x}; candidate's own buffers at {:#x?}; the candidate's read: {attack:?}",
        ptrs[1]
    );
    match attack {
        RunnerReply::Failed { error } => assert!(
            error.name.contains("ILLEGAL_ADDRESS") || error.code == 700,
            "{error:?}"
        ),
        RunnerReply::Ran { millis, .. } => {
            assert!(millis < 100.0, "read the reference's data: {millis} ms")
        }
        other => panic!("{other:?}"),
    }
}

/// Issue 9, unpredictable schedule: the same candidate scored in several jobs gets
/// different warm-up counts and numbers of checked runs, and every run is checked.
#[test]
#[ignore = "needs an NVIDIA GPU"]
fn schedules_differ_between_jobs() {
    let e = evaluator_with(ExecOptions {
        timeout: Duration::from_secs(60),
        workers_per_gpu: 1,
        ..Default::default()
    });
    if !gpu_or_skip(&e) {
        return;
    }
    let t = task("vector_add");
    let mut seen = Vec::new();
    for k in 0..6 {
        let src = format!("// job {k}\n{}", t.reference.source);
        let ev = e.evaluate(&t, &Submission::from_source(src), Stage::Timing);
        let timing = ev.stages.timing.expect("timed");
        assert_eq!(timing.protocol, cudaperf::exec::PROTOCOL_VERSION);
        assert_eq!(timing.checked_runs, timing.warmup + timing.repetitions);
        println!(
            "job {k}: warm-up {}, timed {}, checked {}, speedup {:.4} (raw {:.4}, ci {:?})",
            timing.warmup,
            timing.repetitions,
            timing.checked_runs,
            timing.speedup,
            timing.raw_speedup,
            timing.ci95
        );
        seen.push((timing.warmup, timing.checked_runs));
    }
    let warmups: std::collections::BTreeSet<_> = seen.iter().map(|s| s.0).collect();
    let checked: std::collections::BTreeSet<_> = seen.iter().map(|s| s.1).collect();
    assert!(warmups.len() >= 2 && checked.len() >= 2, "{seen:?}");
}

/// Issue 9, plausibility beyond bytes: with the compute floor raised past what the honest
/// register-blocked matmul achieves (a peak of 1 TFLOP/s), its result is implausible and
/// no speedup is awarded.
#[test]
#[ignore = "needs an NVIDIA GPU"]
fn compute_floor_withholds_implausible_speedups() {
    let e = evaluator_with(ExecOptions {
        timeout: Duration::from_secs(60),
        workers_per_gpu: 1,
        peak_tflops: 1.0,
        ..Default::default()
    });
    if !gpu_or_skip(&e) {
        return;
    }
    let t = task("matmul");
    let imp = t
        .implementations
        .iter()
        .find(|i| i.name == "register_blocked")
        .expect("register_blocked");
    let ev = e.evaluate(
        &t,
        &Submission::from_source(imp.source.clone()),
        Stage::Timing,
    );
    let timing = ev.stages.timing.expect("timed");
    println!("{timing:?}");
    assert!(
        timing.compute_floor_us > 17_000.0,
        "{}",
        timing.compute_floor_us
    );
    assert!(timing.implausible && timing.speedup == 1.0 && timing.raw_speedup > 2.0);
    assert!(timing
        .withheld
        .as_deref()
        .is_some_and(|w| w.starts_with("implausible")));
}

/// Every task's reference agrees with its original on the smallest config (the original run
/// by PyTorch here when importable, with its NumPy twin checked against it), on inputs from
/// the CPU twin of the input generator, which must write the device generator's bytes.
#[test]
#[ignore = "needs an NVIDIA GPU"]
fn originals_agree_with_references_and_the_generator_with_the_device() {
    use cudaperf::compile::{CompileOptions, Compiler, Isolation};
    use cudaperf::originals::{check_tasks, CheckOptions, GpuCheck, Tools};
    let gpu = match cudaperf::exec::DirectGpu::open() {
        Ok(g) => g,
        Err(reason) => {
            eprintln!("SKIPPED (no GPU): {reason}");
            return;
        }
    };
    let compiler = Compiler::new(CompileOptions {
        arch: gpu.arch().to_string(),
        isolation: Isolation::InProcess,
        ..Default::default()
    })
    .expect("compiler");
    let ds = cudaperf::dataset::Dataset::load(root().join("fixtures/tasks")).expect("dataset");
    let tasks: Vec<&Task> = ds.tasks.iter().collect();
    let tools = Tools::detect();
    eprintln!("tools: {tools:?}");
    let jobs = std::thread::available_parallelism().map_or(4, |n| n.get());
    let results = check_tasks(
        &tasks,
        &tools,
        &CheckOptions::default(),
        Some(&GpuCheck {
            gpu: &gpu,
            compiler: &compiler,
        }),
        None,
        None,
        jobs,
        |c| {
            eprintln!(
                "{}: passed {} {:?} {:?}",
                c.task,
                c.passed(),
                c.engine,
                c.error
            )
        },
    );
    let failed: Vec<String> = results
        .iter()
        .filter(|c| !c.passed())
        .map(|c| serde_json::to_string(c).unwrap_or_default())
        .collect();
    assert!(
        failed.is_empty(),
        "{} tasks failed:\n{}",
        failed.len(),
        failed.join("\n")
    );
    for c in &results {
        assert_eq!(c.against, "reference", "{}", c.task);
        assert!(
            !c.generator.is_empty() && !c.outputs.is_empty(),
            "{}",
            c.task
        );
    }
}
