//! Rewards: combinators (with property tests over weights and values), presets, the
//! "incorrect never beats correct" guarantee, and the score CLI.

mod common;

use std::sync::Arc;
use std::time::Duration;

use cudaperf::compile::{CompiledModule, Isolation, Resources};
use cudaperf::pipeline::report::{
    CompileEnd, CompileStage, CompileStatus, ExtractErrorKind, ExtractStage, SyntaxStage,
};
use cudaperf::pipeline::report::{CorrectnessStage, ExecStatus, ExecuteStage, TimingStage};
use cudaperf::pipeline::{EvalOptions, Evaluation, Evaluator, Stage, Submission};
use cudaperf::reward::presets::{self, CudaPerfWeights, DhrclSchedule};
use cudaperf::reward::{
    Clip, Context, Gate, Map, Result, Reward, RewardError, RooflineReward, SpeedupReward, Staged,
    Weighted,
};
use cudaperf::task::Task;
use proptest::prelude::*;

/// A reward with a fixed value that needs only the extract stage.
struct Fixed(f64, &'static str);

impl Reward for Fixed {
    fn name(&self) -> String {
        self.1.into()
    }
    fn needs(&self, _: &Context) -> Stage {
        Stage::Extract
    }
    fn value(&self, _: &Context, _: &Evaluation) -> Result<f64> {
        Ok(self.0)
    }
}

struct Env {
    task: Task,
    evaluator: Evaluator,
}

fn env() -> &'static Env {
    static ENV: std::sync::OnceLock<Env> = std::sync::OnceLock::new();
    ENV.get_or_init(|| Env {
        task: common::vector_add(),
        evaluator: Evaluator::new(EvalOptions {
            no_gpu: true,
            ..EvalOptions::default()
        })
        .expect("evaluator"),
    })
}

fn ctx(step: u64) -> Context<'static> {
    let e = env();
    Context::new(&e.task, &e.evaluator).at_step(step)
}

/// Scores through the public `score` path (evaluation up to `needs`, here Extract only).
fn score(r: &dyn Reward, step: u64) -> f64 {
    let sub = Submission::from_completion("no code here");
    r.score(&ctx(step), &sub)
        .expect("fixed rewards always score")
        .value
}

// ---------------------------------------------------------------- combinators

#[test]
fn weighted_reports_its_terms() {
    let r = Weighted::new()
        .named("sum")
        .add(0.5, Fixed(2.0, "a"))
        .add(-1.0, Fixed(3.0, "b"));
    let s = r.score(&ctx(0), &Submission::from_completion("x")).unwrap();
    assert_eq!(s.value, -2.0);
    assert_eq!(s.report.reward, "sum");
    let terms: Vec<(String, f64, f64)> = s
        .report
        .terms
        .iter()
        .map(|t| (t.name.clone(), t.weight, t.value))
        .collect();
    assert_eq!(terms, [("a".into(), 0.5, 2.0), ("b".into(), -1.0, 3.0)]);
    assert_eq!(score(&Weighted::new(), 0), 0.0, "an empty sum is 0");
}

/// The curriculum's boundaries: each stage starts at its step; before the first, the first.
#[test]
fn staged_boundaries() {
    let r = Staged::new()
        .from_step(100, Fixed(2.0, "b"))
        .from_step(10, Fixed(1.0, "a"))
        .from_step(300, Fixed(3.0, "c"));
    for (step, want) in [
        (0, 1.0),
        (9, 1.0),
        (10, 1.0),
        (99, 1.0),
        (100, 2.0),
        (299, 2.0),
        (300, 3.0),
        (u64::MAX, 3.0),
    ] {
        assert_eq!(score(&r, step), want, "step {step}");
    }
    assert_eq!(score(&Staged::new(), 5), 0.0, "an empty curriculum is 0");
}

/// A closed gate never evaluates `then` (which would be unavailable here).
#[test]
fn closed_gate_does_not_evaluate_then() {
    let r = Gate::new(Fixed(0.0, "g"), 1.0, presets::correctness_only()).otherwise(-2.0);
    assert_eq!(score(&r, 0), -2.0);
}

proptest! {
    /// Weighted = Σ wᵢ·vᵢ for any weights and values.
    #[test]
    fn weighted_is_the_weighted_sum(parts in proptest::collection::vec((-10.0f64..10.0, -100.0f64..100.0), 0..8)) {
        let mut r = Weighted::new();
        for (w, v) in &parts {
            r = r.add(*w, Fixed(*v, "p"));
        }
        let want: f64 = parts.iter().map(|(w, v)| w * v).sum();
        prop_assert!((score(&r, 0) - want).abs() <= 1e-9 * (1.0 + want.abs()));
    }

    /// Gate = then if gate ≥ threshold, else otherwise.
    #[test]
    fn gate_selects(g in -2.0f64..2.0, t in -2.0f64..2.0, then in -5.0f64..5.0, other in -5.0f64..5.0) {
        let r = Gate::new(Fixed(g, "g"), t, Fixed(then, "t")).otherwise(other);
        prop_assert_eq!(score(&r, 0), if g >= t { then } else { other });
    }

    /// Staged picks the stage with the latest start ≤ step (the first before any start).
    #[test]
    fn staged_picks_latest_start(starts in proptest::collection::btree_set(0u64..1000, 1..6), step in 0u64..1200) {
        let starts: Vec<u64> = starts.into_iter().collect();
        let mut r = Staged::new();
        // Added in reverse to check that order of addition does not matter.
        for s in starts.iter().rev() {
            r = r.from_step(*s, Fixed(*s as f64, "s"));
        }
        let want = starts.iter().rev().find(|s| **s <= step).unwrap_or(&starts[0]);
        prop_assert_eq!(score(&r, step), *want as f64);
    }

    /// Clip clamps to [min(lo, hi), max(lo, hi)].
    #[test]
    fn clip_clamps(v in -100.0f64..100.0, lo in -10.0f64..10.0, hi in -10.0f64..10.0) {
        let got = score(&Clip::new(Fixed(v, "v"), lo, hi), 0);
        prop_assert_eq!(got, v.clamp(lo.min(hi), lo.max(hi)));
    }

    /// Map applies its function.
    #[test]
    fn map_applies(v in -100.0f64..100.0, a in -3.0f64..3.0, b in -3.0f64..3.0) {
        let r = Map::new("affine", Fixed(v, "v"), move |x| a * x + b);
        prop_assert_eq!(score(&r, 0), a * v + b);
    }

    /// Nested combinators compose like the functions they are.
    #[test]
    fn combinators_compose(v1 in -5.0f64..5.0, v2 in -5.0f64..5.0, w in -2.0f64..2.0) {
        let inner = Weighted::new().add(w, Fixed(v1, "a")).add(1.0, Map::new("sq", Fixed(v2, "b"), |x| x * x));
        let r = Clip::new(Gate::new(Fixed(v1, "g"), 0.0, inner).otherwise(-1.0), -3.0, 3.0);
        let want = if v1 >= 0.0 { (w * v1 + v2 * v2).clamp(-3.0, 3.0) } else { -1.0 };
        prop_assert!((score(&r, 0) - want).abs() < 1e-12);
    }
}

// ---------------------------------------------------------------- hand-built evaluations

/// Where a hand-built candidate got to.
#[derive(Debug, Clone, Copy)]
enum Outcome {
    NotExtracted { syntax_errors: u32 },
    CompileError { syntax_errors: u32 },
    Rejected,
    CompileTimeout,
    RuntimeFault,
    ExecTimeout,
    Incorrect { pass_rate: f64 },
    Correct { speedup: f64, implausible: bool },
}

fn syntax(errors: u32) -> SyntaxStage {
    SyntaxStage {
        ok: errors == 0,
        error_nodes: errors,
        missing_nodes: 0,
        first_error_line: (errors > 0).then_some(1),
        grammar_gaps: 0,
    }
}

fn compile_stage(status: CompileStatus) -> CompileStage {
    compile_stage_why(status, "")
}

fn compile_stage_why(status: CompileStatus, reason: &str) -> CompileStage {
    let reason = reason.to_string();
    let end = match status {
        CompileStatus::Compiled => CompileEnd::Compiled {
            kernels: vec![Resources {
                name: "vector_add".into(),
                registers: 12,
                ..Resources::default()
            }],
            cached: false,
        },
        CompileStatus::Error => CompileEnd::Error { cached: false },
        CompileStatus::Rejected => CompileEnd::Rejected { reason },
        CompileStatus::Timeout => CompileEnd::Timeout { reason },
        _ => CompileEnd::Unavailable { reason },
    };
    CompileStage {
        end,
        log: String::new(),
        millis: 30.0,
        arch: "sm_90".into(),
        isolation: Isolation::Sandboxed,
    }
}

fn execute(status: ExecStatus) -> ExecuteStage {
    ExecuteStage {
        status,
        device: None,
        millis: 1.0,
        gpu_millis: 0.5,
        job_gpu_millis: 0.5,
        job_members: 1,
    }
}

fn timing(speedup: f64, implausible: bool) -> TimingStage {
    TimingStage {
        protocol: 2,
        reference: Default::default(),
        config: "large_odd".into(),
        reference_us: 100.0,
        candidate_us: 100.0 / speedup,
        speedup,
        raw_speedup: speedup,
        ci95: [speedup * 0.99, speedup * 1.01],
        noise_floor: 0.01,
        within_noise: false,
        implausible,
        floor_us: 1.0,
        compute_floor_us: 0.0,
        unstable: false,
        reference_spread: 0.002,
        reference_calibration: 0.002,
        withheld: None,
        achieved_gbps: 1000.0,
        repetitions: 20,
        warmup: 3,
        checked_runs: 23,
        occupancy: Vec::new(),
    }
}

/// Builds the evaluation a candidate with this outcome would have.
fn evaluation(o: Outcome) -> Evaluation {
    let mut e = Evaluation::default();
    let extracted = !matches!(o, Outcome::NotExtracted { .. });
    e.stages.extract = if extracted {
        ExtractStage::Extracted {
            kernels: vec!["vector_add".into()],
            launches: 1,
        }
    } else {
        ExtractStage::Failed {
            kind: ExtractErrorKind::NoLaunchPlan,
            error: String::new(),
        }
    };
    let syntax_errors = match o {
        Outcome::NotExtracted { syntax_errors } | Outcome::CompileError { syntax_errors } => {
            syntax_errors
        }
        _ => 0,
    };
    e.stages.syntax = Some(syntax(syntax_errors));
    if !extracted {
        return e;
    }
    let compiled = !matches!(
        o,
        Outcome::CompileError { .. } | Outcome::Rejected | Outcome::CompileTimeout
    );
    e.stages.compile = Some(compile_stage(match o {
        Outcome::CompileError { .. } => CompileStatus::Error,
        Outcome::Rejected => CompileStatus::Rejected,
        Outcome::CompileTimeout => CompileStatus::Timeout,
        _ => CompileStatus::Compiled,
    }));
    if !compiled {
        return e;
    }
    e.module = Some(CompiledModule {
        cubin: Arc::new(vec![0x7f, b'E', b'L', b'F']),
        kernels: Vec::new(),
        lowered: Vec::new(),
        log: String::new(),
    });
    let correctness = |passed: bool, pass_rate: f64| CorrectnessStage {
        passed,
        pass_rate,
        configs: Vec::new(),
        seed: 1,
        protocol: 3,
        precision: String::new(),
    };
    match o {
        Outcome::RuntimeFault => {
            e.stages.execute = Some(execute(ExecStatus::CudaError {
                code: 700,
                name: "CUDA_ERROR_ILLEGAL_ADDRESS".into(),
                during: "launch vector_add".into(),
            }))
        }
        Outcome::ExecTimeout => {
            e.stages.execute = Some(execute(ExecStatus::Timeout { limit_ms: 1000 }))
        }
        Outcome::Incorrect { pass_rate } => {
            e.stages.execute = Some(execute(ExecStatus::Ok));
            e.stages.correctness = Some(correctness(false, pass_rate));
        }
        Outcome::Correct {
            speedup,
            implausible,
        } => {
            e.stages.execute = Some(execute(ExecStatus::Ok));
            e.stages.correctness = Some(correctness(true, 1.0));
            e.stages.timing = Some(timing(speedup, implausible));
        }
        _ => unreachable!(),
    }
    e
}

fn value(r: &dyn Reward, step: u64, o: Outcome) -> f64 {
    r.value(&ctx(step), &evaluation(o))
        .unwrap_or_else(|e| panic!("{} on {o:?}: {e}", r.name()))
}

/// The unified reward's ladder (DESIGN.md §4) at its documented points.
#[test]
fn cudaperf_ladder_values() {
    let r = presets::cudaperf();
    let cases = [
        (Outcome::NotExtracted { syntax_errors: 0 }, -1.0 + 0.1),
        (Outcome::NotExtracted { syntax_errors: 4 }, -1.0 + 0.1 / 5.0),
        (Outcome::CompileError { syntax_errors: 0 }, -0.75),
        (Outcome::CompileError { syntax_errors: 1 }, -1.0 + 0.1 / 2.0),
        (Outcome::Rejected, -0.75),
        (Outcome::CompileTimeout, -0.75),
        (Outcome::RuntimeFault, -0.5),
        (Outcome::ExecTimeout, -0.5),
        (Outcome::Incorrect { pass_rate: 0.0 }, -0.25),
        (Outcome::Incorrect { pass_rate: 0.5 }, -0.125),
        (
            Outcome::Correct {
                speedup: 1.0,
                implausible: false,
            },
            1.0 + 0.1 * 0.01,
        ),
        (
            Outcome::Correct {
                speedup: 2.0,
                implausible: false,
            },
            1.3 + 0.1 * 0.02,
        ),
        (
            Outcome::Correct {
                speedup: 0.25,
                implausible: false,
            },
            0.7 + 0.1 * 0.0025,
        ),
        (
            Outcome::Correct {
                speedup: 1000.0,
                implausible: false,
            },
            1.0 + 0.3 * 6.0 + 0.1,
        ),
        (
            Outcome::Correct {
                speedup: 1000.0,
                implausible: true,
            },
            1.0 + 0.1 * 0.01,
        ),
    ];
    for (o, want) in cases {
        let got = value(&r, 0, o);
        assert!((got - want).abs() < 1e-12, "{o:?}: got {got}, want {want}");
    }
}

/// The other presets at a few points.
#[test]
fn preset_values() {
    let correct2 = Outcome::Correct {
        speedup: 2.0,
        implausible: false,
    };
    let incorrect = Outcome::Incorrect { pass_rate: 0.5 };
    assert_eq!(value(&presets::correctness_only(), 0, correct2), 1.0);
    assert_eq!(value(&presets::correctness_only(), 0, incorrect), 0.0);
    assert!((value(&presets::kevin(), 0, correct2) - 2.3).abs() < 1e-12);
    assert_eq!(value(&presets::kevin(), 0, incorrect), 0.0);
    assert_eq!(value(&presets::kernelbench_fast_p(1.5), 0, correct2), 1.0);
    assert_eq!(value(&presets::kernelbench_fast_p(2.5), 0, correct2), 0.0);
    let dhrcl = presets::staged_dhrcl(DhrclSchedule::default());
    assert_eq!(
        value(&dhrcl, 0, incorrect),
        1.0,
        "step 0: syntax + compile only"
    );
    assert!((value(&dhrcl, 100, incorrect) - (0.2 + 0.8 * 0.5)).abs() < 1e-12);
    assert!((value(&dhrcl, 300, correct2) - (1.3 + 0.1 * 0.02)).abs() < 1e-12);
}

/// Presets compose with combinators like any reward.
#[test]
fn presets_compose() {
    let correct = Outcome::Correct {
        speedup: 4.0,
        implausible: false,
    };
    let r = Weighted::new()
        .add(0.5, presets::cudaperf())
        .add(0.25, Clip::new(presets::kevin(), 0.0, 2.0))
        .add(
            1.0,
            Map::new("neg_fast", presets::kernelbench_fast_p(3.0), |v| -v),
        );
    let want = 0.5 * (1.0 + 0.3 * 2.0 + 0.1 * 0.04) + 0.25 * 2.0 - 1.0;
    assert!((value(&r, 0, correct) - want).abs() < 1e-12);
    let gated = Gate::new(presets::correctness_only(), 1.0, presets::kevin());
    assert_eq!(value(&gated, 0, Outcome::Incorrect { pass_rate: 0.9 }), 0.0);
}

fn incorrect_outcomes() -> impl Strategy<Value = Outcome> {
    prop_oneof![
        (0u32..50).prop_map(|syntax_errors| Outcome::NotExtracted { syntax_errors }),
        (0u32..50).prop_map(|syntax_errors| Outcome::CompileError { syntax_errors }),
        Just(Outcome::Rejected),
        Just(Outcome::CompileTimeout),
        Just(Outcome::RuntimeFault),
        Just(Outcome::ExecTimeout),
        (0.0f64..1.0).prop_map(|pass_rate| Outcome::Incorrect { pass_rate }),
        Just(Outcome::Incorrect {
            pass_rate: 0.9999999
        }),
    ]
}

fn correct_outcomes() -> impl Strategy<Value = Outcome> {
    (prop_oneof![1e-6f64..1.0, 1.0f64..1e6], any::<bool>()).prop_map(|(speedup, implausible)| {
        Outcome::Correct {
            speedup,
            implausible,
        }
    })
}

fn preset_list(step_p: f64) -> Vec<(String, Box<dyn Reward>)> {
    vec![
        ("cudaperf".into(), Box::new(presets::cudaperf())),
        ("correctness".into(), Box::new(presets::correctness_only())),
        ("kevin".into(), Box::new(presets::kevin())),
        (
            "fast_p".into(),
            Box::new(presets::kernelbench_fast_p(step_p)),
        ),
        (
            "dhrcl".into(),
            Box::new(presets::staged_dhrcl(DhrclSchedule::default())),
        ),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// No preset, at any curriculum step, ranks an incorrect program above a correct one;
    /// the unified reward ranks it strictly below.
    #[test]
    fn presets_never_prefer_incorrect(bad in incorrect_outcomes(), good in correct_outcomes(), p in 0.0f64..5.0, step in 0u64..1000) {
        for (name, r) in preset_list(p) {
            let (b, g) = (value(&r, step, bad), value(&r, step, good));
            prop_assert!(b.is_finite() && g.is_finite(), "{}: {} {}", name, b, g);
            prop_assert!(b <= g, "{}: incorrect {:?} = {} > correct {:?} = {}", name, bad, b, good, g);
            if name == "cudaperf" {
                prop_assert!(b < g, "{}: {} !< {}", name, b, g);
            }
        }
    }

    /// The same for the unified reward with arbitrary weights (scaled by the preset), with
    /// structure and ranker terms whose raw values are arbitrary.
    #[test]
    fn cudaperf_with_any_weights_never_prefers_incorrect(
        speed in -5.0f64..5.0, structure in -5.0f64..5.0, rank in -5.0f64..5.0, syntax_credit in -1.0f64..1.0,
        roofline in -5.0f64..5.0, speed_cap_log2 in -3.0f64..12.0,
        s_val in -100.0f64..100.0, r_val in -100.0f64..100.0,
        bad in incorrect_outcomes(), good in correct_outcomes(),
    ) {
        let w = CudaPerfWeights { speed, structure, rank, syntax_credit, roofline, speed_cap_log2 };
        let r = presets::cudaperf_with(w, Some(Box::new(Fixed(s_val, "structure"))), Some(Box::new(Fixed(r_val, "ranker"))));
        let (b, g) = (value(&r, 0, bad), value(&r, 0, good));
        prop_assert!(b < g, "weights {:?}: incorrect {:?} = {} >= correct {:?} = {}", w, bad, b, good, g);
        prop_assert!(b < 0.0 && g > 0.0, "{} {}", b, g);
    }
}

// ------------------------------------------------- speed term and roofline term

fn correct(speedup: f64) -> Outcome {
    Outcome::Correct {
        speedup,
        implausible: false,
    }
}

/// The default cap orders fast kernels the earlier 8× clip scored the same (softmax_rows:
/// block=128 at 9.4× and block=512 at 16.4× in the H200 ablation); cap 3 reproduces the clip.
#[test]
fn the_default_speed_cap_orders_fast_kernels() {
    let (slow, fast) = (correct(9.4), correct(16.4));
    let r = presets::cudaperf();
    assert!(value(&r, 0, fast) > value(&r, 0, slow) + 0.2);
    let term = SpeedupReward::log2();
    assert!((value(&term, 0, correct(64.0)) - 6.0).abs() < 1e-12);
    assert!((value(&term, 0, correct(100.0)) - 6.0).abs() < 1e-12);
    let clip8 = SpeedupReward::log2_capped(3.0);
    assert_eq!(value(&clip8, 0, slow), value(&clip8, 0, fast));
    let w = CudaPerfWeights {
        speed_cap_log2: 3.0,
        roofline: 0.0,
        ..CudaPerfWeights::default()
    };
    let old = presets::cudaperf_with(w, None, None);
    assert_eq!(value(&old, 0, slow), value(&old, 0, fast));
    // The roofline term alone still orders them past any cap.
    assert!(value(&RooflineReward, 0, fast) > value(&RooflineReward, 0, slow));
}

/// Roofline: the floor over the time the awarded speedup stands for, in (0, 1]; the timing
/// stage's rules apply (an implausible time counts as the reference's); no floor is
/// unavailable, not a number.
#[test]
fn roofline_is_the_fraction_of_the_floor() {
    // timing(): reference 100 us, bytes floor 1 us.
    assert!((value(&RooflineReward, 0, correct(2.0)) - 0.02).abs() < 1e-12);
    assert_eq!(value(&RooflineReward, 0, correct(500.0)), 1.0);
    let implausible = Outcome::Correct {
        speedup: 500.0,
        implausible: true,
    };
    assert!((value(&RooflineReward, 0, implausible) - 0.01).abs() < 1e-12);
    assert_eq!(
        value(&RooflineReward, 0, Outcome::Incorrect { pass_rate: 0.5 }),
        0.0
    );
    // The compute floor binds when it is the larger one.
    let mut e = evaluation(correct(2.0));
    let t = e.stages.timing.as_mut().unwrap();
    t.compute_floor_us = 5.0;
    let v = RooflineReward.value(&ctx(0), &e).unwrap();
    assert!((v - 0.1).abs() < 1e-12, "{v}");
    // No floor at all (unknown device bandwidth): unavailable, with the config named.
    let t = e.stages.timing.as_mut().unwrap();
    t.floor_us = 0.0;
    t.compute_floor_us = 0.0;
    match RooflineReward.value(&ctx(0), &e) {
        Err(err @ RewardError::Unavailable { .. }) => {
            assert!(err.to_string().contains("large_odd"), "{err}")
        }
        other => panic!("expected unavailable, got {other:?}"),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// A faster correct kernel never scores lower on the speed terms, nor on the unified
    /// reward with any cap and non-negative speed and roofline weights.
    #[test]
    fn a_faster_correct_kernel_never_scores_lower(
        a in 1e-4f64..1e5, b in 1e-4f64..1e5, cap in -2.0f64..12.0,
        speed in 0.0f64..2.0, roofline in 0.0f64..2.0,
    ) {
        let (slow, fast) = if a <= b { (a, b) } else { (b, a) };
        let w = CudaPerfWeights { speed, roofline, speed_cap_log2: cap, ..CudaPerfWeights::default() };
        let terms: Vec<(String, Box<dyn Reward>)> = vec![
            ("speedup_log2".into(), Box::new(SpeedupReward::log2_capped(cap))),
            ("roofline".into(), Box::new(RooflineReward)),
            ("cudaperf".into(), Box::new(presets::cudaperf_with(w, None, None))),
            ("kevin".into(), Box::new(presets::kevin())),
        ];
        for (name, r) in terms {
            let (vs, vf) = (value(&*r, 0, correct(slow)), value(&*r, 0, correct(fast)));
            prop_assert!(vf >= vs, "{}: {}x = {} > {}x = {}", name, slow, vs, fast, vf);
        }
        let roof = value(&RooflineReward, 0, correct(fast));
        prop_assert!(roof > 0.0 && roof <= 1.0, "roofline {}", roof);
    }
}

// ---------------------------------------------------------------- CLI

/// `cudaperf score --json` on the vector_add reference: compile ok with registers.
#[test]
fn cli_score_json() {
    require_nvrtc!();
    let (v, out) = common::score_json(
        &common::fixture("tasks/vector_add/task.toml"),
        &common::fixture("tasks/vector_add/reference.cu"),
        &[],
        Duration::from_secs(120),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(v["stages"]["compile"]["ok"], true, "{v}");
    assert!(
        v["stages"]["compile"]["kernels"][0]["registers"]
            .as_u64()
            .unwrap_or(0)
            > 0,
        "{v}"
    );
    assert_eq!(v["stages"]["extract"]["kernels"][0], "vector_add");
}

/// Unknown presets are an error message and exit code 2, not a panic.
#[test]
fn cli_unknown_preset() {
    let mut cmd = common::cli();
    cmd.args([
        "score",
        "--task",
        "fixtures/tasks/vector_add",
        "fixtures/tasks/vector_add/reference.cu",
        "--reward",
        "best",
    ]);
    let (out, _) = common::run_limited(&mut cmd, Duration::from_secs(60));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("unknown reward `best`") && !err.contains("panicked"),
        "{err}"
    );
}

// ---------------------------------------------------------------- infrastructure failures

/// Makes `path` an executable link to `target` (a worker that was missing is installed).
#[cfg(unix)]
fn install_worker(target: &std::path::Path, path: &std::path::Path) {
    std::os::unix::fs::symlink(target, path).expect("install the worker");
}

/// A completion submitted while the compile worker could not start is unavailable; once the
/// worker is there, the *same* completion scores (the memo did not keep the failure), alone
/// and in a group, and what the candidate earned is then remembered. Guards issue 20 (a
/// passing infrastructure failure stuck in the memo until a restart).
#[cfg(unix)]
#[test]
fn a_compile_worker_that_fails_then_works_rescores_the_same_completion() {
    use cudaperf::compile::CompileOptions;
    use cudaperf::pipeline::Verdict;
    use cudaperf::reward::{CompileReward, RewardError};
    require_nvrtc!();
    let dir = tempfile::tempdir().unwrap();
    let worker = dir.path().join("compile-worker"); // not there yet
    let evaluator = Evaluator::new(EvalOptions {
        no_gpu: true,
        compile: CompileOptions {
            isolation: Isolation::Sandboxed,
            worker: Some(worker.clone()),
            workers: 1,
            ..CompileOptions::default()
        },
        ..EvalOptions::default()
    })
    .expect("an explicit worker path is accepted before it exists");
    let task = common::vector_add();
    let ctx = Context::new(&task, &evaluator);
    let reference = common::read_fixture("tasks/vector_add/reference.cu");
    let sub = Submission::from_source(reference.clone());
    let group: Vec<Submission> = (0..2)
        .map(|k| Submission::from_source(format!("{reference}\n// member {k}\n")))
        .collect();
    let unavailable = |r: &Result<cudaperf::reward::Scored>| match r {
        Err(RewardError::Unavailable {
            stage,
            reason,
            report,
            ..
        }) => {
            assert_eq!(*stage, Stage::Compile);
            assert!(reason.contains("cannot start worker"), "{reason}");
            assert_eq!(report.verdict, Verdict::Unavailable);
            assert!(report.value.is_nan());
        }
        other => panic!("expected unavailable, got {other:?}"),
    };

    unavailable(&CompileReward.score(&ctx, &sub));
    CompileReward
        .score_batch(&ctx, &group)
        .iter()
        .for_each(unavailable);
    // Asked again while still broken: still unavailable (an attempt each time, no number).
    unavailable(&CompileReward.score(&ctx, &sub));

    install_worker(&common::cudaperf_bin(), &worker);
    let s = CompileReward
        .score(&ctx, &sub)
        .expect("scored once the worker works");
    assert_eq!((s.value, s.report.verdict), (1.0, Verdict::Compiled));
    for r in CompileReward.score_batch(&ctx, &group) {
        let s = r.expect("the group scores once the worker works");
        assert_eq!((s.value, s.report.verdict), (1.0, Verdict::Compiled));
    }

    // What the candidate earned is remembered: the same stage again, not even a compile
    // cache hit (`cached` would be true).
    let again = CompileReward.score(&ctx, &sub).expect("remembered");
    assert_eq!(again.report.stages.compile, s.report.stages.compile);
    assert!(!again.report.stages.compile.as_ref().unwrap().cached());
}

/// The same for the GPU stages: a GPU worker that cannot start makes the unified reward
/// unavailable; once it starts (here the fake worker answering "correct, 2× faster"), the
/// same completion and group score. Guards issue 20.
#[cfg(unix)]
#[test]
fn a_gpu_worker_that_fails_then_works_rescores_the_same_completion() {
    use cudaperf::exec::{ExecResult, Executor};
    use cudaperf::pipeline::Verdict;
    use cudaperf::reward::RewardError;
    use cudaperf::sandbox::WorkerSpec;
    use cudaperf::sandbox::{Role, WORKER_ARG};
    require_nvrtc!();
    let python_ok = std::process::Command::new("python3")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !python_ok {
        eprintln!("SKIPPED: python3 not found (the fake GPU worker is a Python script)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let worker = dir.path().join("gpu-worker"); // not there yet
    let reply = ExecResult {
        correctness: Some(CorrectnessStage {
            passed: true,
            pass_rate: 1.0,
            configs: Vec::new(),
            seed: 1,
            protocol: 3,
            precision: String::new(),
        }),
        timing: Some(timing(2.0, false)),
        ..ExecResult::status_only(ExecStatus::Ok)
    };
    let mut o = EvalOptions::default();
    o.compile.worker = Some(common::cudaperf_bin());
    o.exec.timeout = Duration::from_secs(5);
    let evaluator = Evaluator::new(o.clone())
        .unwrap()
        .with_executor(Executor::with_workers(
            o.exec.clone(),
            vec!["0".into()],
            vec![WorkerSpec {
                program: worker.clone(),
                args: vec![WORKER_ARG.into(), Role::Gpu.as_str().into()],
                env: vec![
                    ("FAKE_MODE".into(), "reply".into()),
                    ("FAKE_REPLY".into(), serde_json::to_string(&reply).unwrap()),
                ],
                memory_limit_bytes: None,
                role: Role::Gpu.as_str().into(),
            }],
        ));
    let task = common::vector_add();
    let ctx = Context::new(&task, &evaluator);
    let reference = common::read_fixture("tasks/vector_add/reference.cu");
    let sub = Submission::from_source(reference.clone());
    let group: Vec<Submission> = (0..2)
        .map(|k| Submission::from_source(format!("{reference}\n// member {k}\n")))
        .collect();
    let reward = presets::cudaperf();
    let unavailable = |r: &Result<cudaperf::reward::Scored>| match r {
        Err(RewardError::Unavailable {
            stage,
            reason,
            report,
            ..
        }) => {
            assert_eq!(*stage, Stage::Correctness);
            assert!(reason.contains("cannot start worker"), "{reason}");
            assert_eq!(report.verdict, Verdict::Unavailable);
        }
        other => panic!("expected unavailable, got {other:?}"),
    };
    unavailable(&reward.score(&ctx, &sub));
    reward
        .score_batch(&ctx, &group)
        .iter()
        .for_each(unavailable);

    install_worker(
        &common::manifest_dir().join("tests/support/fake_worker.py"),
        &worker,
    );
    let correct = |r: Result<cudaperf::reward::Scored>| {
        let s = r.expect("scored once the GPU worker works");
        assert_eq!(s.report.verdict, Verdict::Correct);
        // 1 + 0.3 · log2(2) + the structure and ranker terms (at most 0.2 together).
        assert!(
            s.value >= 1.3 - 0.2 - 1e-9 && s.value <= 1.3 + 0.2 + 1e-9,
            "{}",
            s.value
        );
        assert_eq!(
            s.report.stages.timing.as_ref().map(|t| t.speedup),
            Some(2.0)
        );
    };
    correct(reward.score(&ctx, &sub));
    reward
        .score_batch(&ctx, &group)
        .into_iter()
        .for_each(correct);
}

// ---------------------------------------------------------------- require (custom rewards)

/// A custom reward that reads the pass rate; without `require` it would read 0 where the
/// GPU could not run.
struct MyPassRate;

impl Reward for MyPassRate {
    fn name(&self) -> String {
        "my_pass_rate".into()
    }
    fn needs(&self, _: &Context) -> Stage {
        Stage::Correctness
    }
    fn value(&self, _: &Context, e: &Evaluation) -> Result<f64> {
        cudaperf::reward::require(self, e, Stage::Correctness)?;
        Ok(e.stages.correctness.as_ref().map_or(0.0, |c| c.pass_rate))
    }
}

/// Evaluations whose stages are missing for our reasons, with the stage that is missing.
fn our_failures() -> Vec<(&'static str, Evaluation, Stage)> {
    let correct = || {
        evaluation(Outcome::Correct {
            speedup: 2.0,
            implausible: false,
        })
    };
    let mut no_compiler = correct();
    no_compiler.stages.compile = Some(compile_stage_why(
        CompileStatus::Unavailable,
        "cannot start worker `/nowhere/cudaperf`",
    ));
    no_compiler.module = None;
    no_compiler.stages.execute = None;
    no_compiler.stages.correctness = None;
    no_compiler.stages.timing = None;
    let mut no_gpu = correct();
    no_gpu.stages.execute = Some(execute(ExecStatus::Unavailable {
        reason: "worker `/nowhere/gpu` did not greet".into(),
    }));
    no_gpu.stages.correctness = None;
    no_gpu.stages.timing = None;
    let mut broken_reference = no_gpu.clone();
    broken_reference.stages.execute = Some(execute(ExecStatus::ReferenceFailed {
        reason: "reference faulted".into(),
    }));
    let mut untimed = correct();
    untimed.stages.timing = None;
    vec![
        ("no compiler", no_compiler, Stage::Compile),
        ("no GPU", no_gpu, Stage::Correctness),
        ("broken reference", broken_reference, Stage::Correctness),
        ("correct but untimed", untimed, Stage::Timing),
    ]
}

/// `require` turns every stage missing for our reasons into `Unavailable` naming that stage
/// (and `reference_failed` for a broken task), for the stage itself and every stage built
/// on it, and not for stages that do not read it; the candidate's own failures before a
/// stage are scored, not refused. Every built-in stage reward and preset, and a custom one
/// that calls it, refuses the same evaluations. Guards issue 20 (the documented custom
/// reward returned 0 with a worker that could not start).
#[test]
fn require_refuses_stages_missing_for_our_reasons() {
    use cudaperf::pipeline::Verdict;
    use cudaperf::reward::{
        require, CompileReward, CorrectReward, OutcomeLadder, PassRateReward, RewardError,
        SpeedupReward, StructuralReward,
    };
    let c = ctx(0);
    for (label, eval, missing) in our_failures() {
        for stage in [
            Stage::Syntax,
            Stage::Compile,
            Stage::Structure,
            Stage::Ranker,
            Stage::Correctness,
            Stage::Timing,
        ] {
            // Structure reads the compile stage; the ranker reads neither it nor the GPU.
            let reads = match missing {
                Stage::Compile => stage >= Stage::Compile && stage != Stage::Ranker,
                other => stage >= other,
            };
            match (reads, require(&MyPassRate, &eval, stage)) {
                (false, Ok(())) => {}
                (
                    true,
                    Err(RewardError::Unavailable {
                        stage: s,
                        report,
                        reason,
                        ..
                    }),
                ) => {
                    assert_eq!(s, missing, "{label} @ {stage:?}");
                    assert!(!reason.is_empty(), "{label}");
                    let want = if label == "broken reference" {
                        Verdict::ReferenceFailed
                    } else {
                        Verdict::Unavailable
                    };
                    assert_eq!(report.verdict, want, "{label} @ {stage:?}");
                    assert!(report.value.is_nan());
                }
                (reads, got) => panic!("{label} @ {stage:?}: reads {reads}, got {got:?}"),
            }
        }
        let rewards: Vec<Box<dyn Reward>> = vec![
            Box::new(CompileReward),
            Box::new(StructuralReward),
            Box::new(CorrectReward),
            Box::new(PassRateReward),
            Box::new(SpeedupReward::log2()),
            Box::new(OutcomeLadder::default()),
            Box::new(presets::cudaperf()),
            Box::new(presets::kevin()),
            Box::new(presets::kernelbench_fast_p(1.0)),
            Box::new(MyPassRate),
        ];
        for r in rewards {
            let reads = r.needs(&c) >= missing;
            let got = r.score_evaluated(&c, &eval);
            assert_eq!(got.is_err(), reads, "{label}: {} gave {got:?}", r.name());
        }
    }
    // An unreadable ranker model: the ranker is unavailable, nothing else is.
    let mut no_model = evaluation(Outcome::Correct {
        speedup: 2.0,
        implausible: false,
    });
    no_model.stages.ranker = Some(cudaperf::pipeline::report::RankerStage::Failed {
        model: "/nowhere/model".into(),
        error: "cannot read /nowhere/model/config.json".into(),
    });
    let err = require(&MyPassRate, &no_model, Stage::Ranker).unwrap_err();
    assert!(err.to_string().contains("`Ranker` is unavailable"), "{err}");
    assert!(require(&MyPassRate, &no_model, Stage::Timing).is_ok());
    assert!(cudaperf::reward::RankerReward
        .score_evaluated(&c, &no_model)
        .is_err());
    // The candidate's own failures are read, never refused.
    for o in [
        Outcome::NotExtracted { syntax_errors: 1 },
        Outcome::CompileError { syntax_errors: 0 },
        Outcome::CompileTimeout,
        Outcome::RuntimeFault,
        Outcome::ExecTimeout,
        Outcome::Incorrect { pass_rate: 0.5 },
    ] {
        let e = evaluation(o);
        assert!(require(&MyPassRate, &e, Stage::Timing).is_ok(), "{o:?}");
        assert!(presets::cudaperf().score_evaluated(&c, &e).is_ok(), "{o:?}");
    }
}
