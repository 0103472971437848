//! GPU-stage behaviour that needs no GPU: report serialisation, job building, plan limits
//! caught before any device, and `Unavailable` (never a number) without a driver.

mod common;

use cudaperf::candidate::Candidate;
use cudaperf::compile::{CompileOptions, Compiler, Isolation};
use cudaperf::exec::{ExecJob, ExecResult, JobParts, JobReference, JobSide};
use cudaperf::pipeline::report::{
    ConfigCheck, CorrectnessStage, ExecStatus, Mismatch, TimingStage,
};
use cudaperf::pipeline::{EvalOptions, Evaluator, Stage, Submission, Verdict};
use cudaperf::reward::{presets, Context, CorrectReward, Reward, RewardError};
use cudaperf::task::Task;

/// Guards the bug seen on the H200: an unwritten (NaN) output made the worker's answer
/// unparsable (`null` for an f64). NaN must survive the protocol as NaN.
#[test]
fn exec_result_with_nan_round_trips_through_json() {
    let check = ConfigCheck {
        config: "small".into(),
        passed: false,
        max_abs_err: f64::NAN,
        max_rel_err: 0.5,
        mismatches: 3,
        elements: 10,
        first_mismatch: Some(Mismatch {
            buffer: "c".into(),
            index: 7,
            got: f64::NAN,
            want: 1.5,
        }),
        unwritten: 3,
        inputs_modified: false,
        nondeterministic: false,
        input_independent: false,
        timed_run_mismatch: false,
        reasons: vec!["3 output elements were never written".into()],
        regimes: Vec::new(),
        precision: Vec::new(),
    };
    let r = ExecResult {
        status: ExecStatus::Ok,
        correctness: Some(CorrectnessStage {
            passed: false,
            pass_rate: 0.0,
            configs: vec![check],
            seed: 9,
            protocol: 3,
            precision: "f32".into(),
        }),
        timing: Some(TimingStage {
            protocol: 2,
            reference: Default::default(),
            config: "large".into(),
            reference_us: f64::NAN,
            candidate_us: 1.0,
            speedup: 1.0,
            raw_speedup: f64::NAN,
            ci95: [f64::NAN, 2.0],
            noise_floor: 0.01,
            within_noise: true,
            implausible: false,
            floor_us: 0.5,
            compute_floor_us: 0.0,
            unstable: false,
            reference_spread: 0.01,
            reference_calibration: 0.004,
            withheld: None,
            achieved_gbps: 3.0,
            repetitions: 20,
            warmup: 3,
            checked_runs: 23,
            occupancy: vec![],
        }),
        device: None,
        millis: 1.0,
        gpu_millis: 0.5,
        job_gpu_millis: 3.0,
        job_members: 4,
    };
    let text = serde_json::to_string(&r).expect("serialise");
    let back: ExecResult = serde_json::from_str(&text).expect("parse back");
    let c = &back.correctness.as_ref().expect("correctness").configs[0];
    assert!(c.max_abs_err.is_nan() && c.first_mismatch.as_ref().expect("mismatch").got.is_nan());
    let t = back.timing.expect("timing");
    assert!(t.reference_us.is_nan() && t.ci95[0].is_nan() && t.ci95[1] == 2.0);
    // Status names are the documented snake_case tags.
    let s = serde_json::to_value(ExecStatus::CudaError {
        code: 700,
        name: "CUDA_ERROR_ILLEGAL_ADDRESS".into(),
        during: "sync".into(),
    })
    .expect("json");
    assert_eq!(s["status"], "cuda_error");
    assert_eq!(s["code"], 700);
}

/// Reports written by protocol v1 (no `protocol` field, none of v2's timing fields) still
/// parse, and say they are v1, so a trainer can refuse their timings.
#[test]
fn v1_reports_parse_as_protocol_1() {
    let v1 = r#"{"config":"large","reference_us":181.8,"candidate_us":143.6,"speedup":1.266,
        "raw_speedup":1.266,"ci95":[1.265,1.267],"noise_floor":0.005,"within_noise":false,
        "implausible":false,"floor_us":40.1,"achieved_gbps":1400.0,"repetitions":200,"occupancy":[]}"#;
    let t: TimingStage = serde_json::from_str(v1).expect("v1 timing parses");
    assert_eq!(t.protocol, 1);
    assert!(!t.unstable && t.withheld.is_none() && t.compute_floor_us == 0.0);
    let c: CorrectnessStage =
        serde_json::from_str(r#"{"passed":true,"pass_rate":1.0,"configs":[],"seed":3}"#)
            .expect("v1 correctness parses");
    assert_eq!(c.protocol, 1);
    assert_eq!(cudaperf::exec::PROTOCOL_VERSION, 3);
}

/// The job a worker receives has every expression evaluated: lengths, scalars, fills,
/// plans; the physical floor counts each ABI byte once.
#[test]
fn job_building_evaluates_everything() {
    require_nvrtc!();
    let task = common::vector_add();
    let compiler = Compiler::new(CompileOptions {
        isolation: Isolation::InProcess,
        ..Default::default()
    })
    .expect("compiler");
    let mut reference = Candidate::parse(&task.reference.source).expect("reference");
    reference.check_abi(&task).expect("abi");
    let module = compiler
        .compile(&reference)
        .module()
        .cloned()
        .expect("compiled");
    let configs: Vec<usize> = (0..task.configs.len()).collect();
    // The pipeline resolves each plan once and picks the timed config by one rule.
    let plan =
        cudaperf::pipeline::Plan::resolve(&reference, &task, configs.clone(), &Default::default());
    let plans = plan.resolved.clone().expect("plans");
    let side = JobSide {
        candidate: &reference,
        module: &module,
        plans: &plans,
    };
    let job = ExecJob::build(JobParts {
        task: &task,
        configs: &configs,
        reference: JobReference::Cuda(side),
        candidates: &[side, side],
        timing_config: plan.timed,
        seed: 42,
        timing: None,
        max_device_bytes: 0,
        bandwidth_gbps: 0.0,
        peak_tflops: 0.0,
        deadline_ms: 60_000,
        run_limit_ms: 30_000,
        member_budget_ms: 30_000,
    })
    .expect("job");
    assert_eq!(job.flops, 0.0, "vector_add declares no flops");
    assert_eq!(job.buffers.len(), 3);
    let last = job.configs.last().expect("config");
    let n = task.configs.last().expect("config").sizes["n"];
    assert_eq!(last.lens, vec![n as u64; 3]);
    assert_eq!(last.scalars[3], n as f64);
    assert!(last.fills[0].is_some() && last.fills[2].is_none());
    // A group of two: one module and one plan per member, in order.
    assert_eq!(job.candidates.len(), 2);
    assert_eq!(last.candidates.len(), 2);
    assert_eq!(
        last.candidates[1].launches[0].grid[0] as i64,
        (n + 255) / 256
    );
    assert_eq!(job.timing_config, job.configs.len() - 1);
    assert_eq!(job.abi_bytes(job.timing_config), 3 * 4 * n as u64);
    // The worker protocol carries the job as JSON.
    let back: ExecJob =
        serde_json::from_str(&serde_json::to_string(&job).expect("json")).expect("parse");
    assert_eq!(back, job);
}

fn cpu_evaluator() -> Evaluator {
    Evaluator::new(EvalOptions {
        no_gpu: true,
        ..Default::default()
    })
    .expect("evaluator")
}

/// Without a GPU the GPU stages say so; rewards that need them return `Unavailable` with
/// the partial report instead of a number.
#[test]
fn gpu_stages_are_unavailable_without_a_gpu() {
    require_nvrtc!();
    let task = common::vector_add();
    let e = cpu_evaluator();
    let sub = Submission::from_source(task.reference.source.clone());
    let eval = e.evaluate(&task, &sub, Stage::Timing);
    let exec = eval.stages.execute.as_ref().expect("execute stage");
    assert!(
        matches!(&exec.status, ExecStatus::Unavailable { reason } if !reason.is_empty()),
        "{:?}",
        exec.status
    );
    assert!(eval.stages.correctness.is_none() && eval.stages.timing.is_none());
    assert_eq!(eval.verdict(), Verdict::Unavailable);
    let ctx = Context::new(&task, &e);
    for r in [
        Box::new(CorrectReward) as Box<dyn Reward>,
        Box::new(presets::cudaperf()),
    ] {
        match r.score(&ctx, &sub) {
            Err(RewardError::Unavailable { report, .. }) => {
                assert!(report
                    .stages
                    .compile
                    .as_ref()
                    .is_some_and(|c| c.is_compiled()))
            }
            other => panic!("expected Unavailable, got {other:?}"),
        }
    }
}

/// An absurd grid is an invalid launch even on a machine without a GPU (the plan is
/// checked before any device is needed), and it scores as a runtime fault.
#[test]
fn invalid_launch_is_found_without_a_gpu() {
    require_nvrtc!();
    let task = common::vector_add();
    let e = cpu_evaluator();
    let sub = Submission::from_source(common::read_fixture("hostile/absurd_grid.cu"));
    let eval = e.evaluate(&task, &sub, Stage::Correctness);
    assert_eq!(
        eval.verdict(),
        Verdict::InvalidLaunch,
        "{:?}",
        eval.stages.execute
    );
    let v = presets::cudaperf()
        .score(&Context::new(&task, &e), &sub)
        .expect("scored")
        .value;
    assert_eq!(v, -0.5);
}

/// Several groups scored together come back in order, each as `evaluate_batch` scores it
/// alone: compiled, and the GPU stages `Unavailable` here (a compile error stays one).
#[test]
fn groups_scored_together_match_groups_scored_alone() {
    require_nvrtc!();
    let vector_add = common::vector_add();
    let softmax = Task::load(common::fixture("tasks/softmax_rows")).expect("task");
    let subs = |t: &Task| {
        vec![
            Submission::from_source(t.reference.source.clone()),
            Submission::from_source(t.reference.source.replacen('{', "{ int broken = ;", 1)),
            Submission::from_source(format!("// copy\n{}", t.reference.source)),
        ]
    };
    let (a, b) = (subs(&vector_add), subs(&softmax));
    let together = cpu_evaluator().evaluate_groups(
        &[(&vector_add, &a), (&softmax, &b), (&vector_add, &b[..1])],
        Stage::Timing,
    );
    assert_eq!(
        together.iter().map(Vec::len).collect::<Vec<_>>(),
        vec![3, 3, 1]
    );
    let alone = cpu_evaluator();
    for (evals, (task, group)) in together.iter().zip([
        (&vector_add, &a[..]),
        (&softmax, &b[..]),
        (&vector_add, &b[..1]),
    ]) {
        let want = alone.evaluate_batch(task, group, Stage::Timing);
        for (got, want) in evals.iter().zip(&want) {
            assert_eq!(got.verdict(), want.verdict(), "{}", task.id);
            assert_eq!(
                got.stages.compile.as_ref().map(|c| c.is_compiled()),
                want.stages.compile.as_ref().map(|c| c.is_compiled())
            );
        }
    }
    assert_eq!(together[0][0].verdict(), Verdict::Unavailable);
    assert_eq!(together[0][1].verdict(), Verdict::CompileError);
    // softmax's reference submitted to vector_add's group-of-one: its own verdict.
    assert_ne!(together[2][0].verdict(), Verdict::Correct);
}

/// What a candidate's module can keep between runs is read from its cubin before it runs
/// (real NVRTC output): `__device__` data, also a function's `static __device__`, makes the
/// runner reload the module before every run; the device heap is refused; a module with
/// neither (shared memory only lives for a launch) is loaded once.
#[test]
fn module_state_is_read_from_real_cubins() {
    require_nvrtc!();
    use cudaperf::exec::cubin::inspect;
    let compiler = Compiler::new(CompileOptions {
        isolation: Isolation::InProcess,
        ..Default::default()
    })
    .expect("compiler");
    // A vector_add-shaped kernel with `decl` before it and `body` inside it.
    let cubin = |decl: &str, body: &str| {
        let src = format!(
            "// @launch k grid=(1) block=(256)\n{decl}\nextern \"C\" __global__ void k(const float* a, const float* b, float* c, int n) {{ {body} }}"
        );
        let c = Candidate::parse(&src).expect("parses");
        compiler
            .compile(&c)
            .module()
            .unwrap_or_else(|| panic!("compiles: {src}"))
            .cubin
            .clone()
    };
    let table = cubin(
        "__device__ float table[1024];",
        "int i = threadIdx.x; if (i < n) { c[i] = a[i] + table[i]; table[i] = c[i]; }",
    );
    let s = inspect(&table).expect("readable");
    assert!(s.keeps_data() && !s.uses_heap(), "{s:?}");
    assert!(
        s.writable_sections
            .iter()
            .any(|(n, b)| n == ".nv.global" && *b >= 4096),
        "{s:?}"
    );
    let init = cubin(
        "__device__ int calls = 3;",
        "if (threadIdx.x == 0) c[0] = (float)atomicAdd(&calls, 1);",
    );
    assert!(inspect(&init).expect("readable").keeps_data());
    let local_static = cubin(
        "",
        "static __device__ int seen; if (threadIdx.x == 0) { c[0] = (float)seen; seen = 1; }",
    );
    assert!(inspect(&local_static).expect("readable").keeps_data());
    let heap = cubin(
        "",
        "float* p = (float*)malloc(16); if (p) { p[0] = a[0]; c[0] = p[0]; free(p); }",
    );
    let s = inspect(&heap).expect("readable");
    assert_eq!(s.heap_calls, ["malloc", "free"], "{s:?}");
    let plain = cubin("", "__shared__ float s[256]; int i = threadIdx.x; s[i] = i < n ? a[i] : 0.0f; __syncthreads(); if (i < n) c[i] = s[255 - i] + b[i];");
    let s = inspect(&plain).expect("readable");
    assert!(!s.keeps_data() && !s.uses_heap(), "{s:?}");
}
