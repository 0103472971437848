//! Originals against references, on this machine: every task's original (C compiled with the
//! system compiler, or the NumPy twin of the PyTorch module) runs on the inputs the CPU twin
//! of the device generator gives for the smallest config, and matches the reference values
//! sampled on the H200 (`fixtures/originals/h200-samples.json`, written by `cudaperf dataset
//! check-originals --gpu --write-samples`). The full comparison with the reference and the
//! generator's with the device's run in `tests/gpu.rs`.

mod common;

use std::time::Duration;

use cudaperf::dataset::Dataset;
use cudaperf::inputs::{fill_bytes, HostInputs};
use cudaperf::originals::{
    check_tasks, run_original, CheckOptions, Engine, OriginalError, Samples, Tools,
};
use cudaperf::task::{Param, Task, TaskKind};

fn samples() -> Option<Samples> {
    let p = common::fixture("originals/h200-samples.json");
    let text = std::fs::read_to_string(&p).ok()?;
    Some(serde_json::from_str(&text).expect("samples file parses"))
}

#[test]
fn every_original_runs_and_matches_the_sampled_references() {
    let tools = Tools::detect();
    if tools.cc.is_none() || tools.python.is_none() {
        panic!("this test needs a C compiler and python3 with numpy (.ci/run installs them): {tools:?}");
    }
    let ds = Dataset::load(common::fixture("tasks")).expect("dataset loads");
    let tasks: Vec<&Task> = ds.tasks.iter().collect();
    let samples = samples();
    let results = check_tasks(
        &tasks,
        &tools,
        &CheckOptions::default(),
        None,
        samples.as_ref(),
        None,
        2,
        |_| {},
    );
    assert_eq!(results.len(), tasks.len());
    let mut failed = Vec::new();
    let mut compared = 0;
    let mut regimes_compared = 0;
    for (r, t) in results.iter().zip(&tasks) {
        if !r.passed() {
            failed.push(format!(
                "{}: {:?} {:?} {:?}",
                r.task,
                r.error,
                r.outputs,
                r.regimes.iter().filter(|g| !g.passed()).collect::<Vec<_>>()
            ));
        }
        // Every input regime ran the original on the smallest config it applies to, and was
        // compared with the reference samples wherever the samples cover it.
        assert_eq!(r.regimes.len(), t.regimes.len(), "{}", t.id);
        for (g, regime) in r.regimes.iter().zip(&t.regimes) {
            assert_eq!(g.regime, regime.name);
            let smallest = cudaperf::originals::smallest_config_of(t, regime).expect("a config");
            assert_eq!(g.config, smallest.name, "{}/{}", t.id, regime.name);
            let sampled = samples
                .as_ref()
                .and_then(|s| s.tasks.get(&t.id))
                .is_some_and(|s| s.regimes.contains_key(&regime.name));
            if g.error.is_none() {
                assert_eq!(g.against == "samples", sampled, "{}/{}", t.id, regime.name);
            }
            regimes_compared += usize::from(g.against == "samples");
        }
        if r.against == "samples" {
            compared += 1;
            assert!(
                r.outputs.iter().all(|b| b.elements > 0),
                "{}: no samples compared",
                r.task
            );
        }
    }
    assert!(
        failed.is_empty(),
        "originals that failed:\n{}",
        failed.join("\n")
    );
    println!("{regimes_compared} input regimes compared with reference samples");
    if let Some(s) = &samples {
        // Every task the samples cover was compared with them (a task added since has none).
        let covered = tasks.iter().filter(|t| s.tasks.contains_key(&t.id)).count();
        assert_eq!(compared, covered);
        assert!(
            covered * 10 >= tasks.len() * 9,
            "samples cover {covered} of {} tasks",
            tasks.len()
        );
    }
}

#[test]
fn torch_tasks_have_shapes_and_a_numpy_twin() {
    let ds = Dataset::load(common::fixture("tasks")).expect("dataset loads");
    for t in ds.tasks.iter().filter(|t| t.kind == TaskKind::Torch2cuda) {
        assert!(t.numpy_twin.is_some(), "{}: no numpy_twin", t.id);
        for p in &t.params {
            if let Param::Buffer { name, shape, .. } = p {
                assert!(!shape.is_empty(), "{}: buffer `{name}` has no shape", t.id);
            }
        }
    }
}

#[test]
fn host_inputs_follow_the_task_distributions() {
    let task = common::vector_add();
    let cfg = &task.configs[0];
    let inputs = HostInputs::generate(&task, cfg, 99).expect("inputs");
    let n = inputs.values.lens[0];
    let a = inputs.buffers[0].as_ref().expect("a is an input");
    assert_eq!(a.len() as u64, n * 4);
    assert!(inputs.buffers[2].is_none(), "c is an output");
    let f = inputs.values.fills[0].expect("fill of a");
    assert_eq!(
        a,
        &fill_bytes(
            cudaperf::task::DType::F32,
            n,
            cudaperf::inputs::buffer_seed(99, 0),
            &f
        )
    );
    // The two inputs of one set differ, and another seed gives other numbers.
    assert_ne!(inputs.buffers[0], inputs.buffers[1]);
    let other = HostInputs::generate(&task, cfg, 100).expect("inputs");
    assert_ne!(inputs.buffers[0], other.buffers[0]);
}

/// A one-buffer task in a temp folder whose original is `original` (C or Python).
fn scratch_task(
    kind: &str,
    original: (&str, &str),
    twin: Option<&str>,
) -> (tempfile::TempDir, Task) {
    scratch_task_with(kind, original, twin, "")
}

/// [`scratch_task`] with `extra` appended to its task.toml (regimes, more configs).
fn scratch_task_with(
    kind: &str,
    original: (&str, &str),
    twin: Option<&str>,
    extra: &str,
) -> (tempfile::TempDir, Task) {
    let dir = tempfile::Builder::new()
        .prefix("orig")
        .tempdir()
        .expect("tempdir");
    let task_dir = dir.path().join("twice");
    std::fs::create_dir(&task_dir).unwrap();
    std::fs::write(task_dir.join(original.0), original.1).unwrap();
    std::fs::write(
        task_dir.join("reference.cu"),
        "// @launch twice grid=(ceil_div(n, 256)) block=(256)\nextern \"C\" __global__ void twice(const float* x, float* y, int n) { int i = blockIdx.x * 256 + threadIdx.x; if (i < n) y[i] = 2.0f * x[i]; }\n",
    )
    .unwrap();
    let twin_line = match twin {
        Some(t) => {
            std::fs::write(task_dir.join("twin.py"), t).unwrap();
            "numpy_twin = \"twin.py\"\n"
        }
        None => "",
    };
    let toml = format!(
        "id = \"twice\"\nkind = \"{kind}\"\noriginal = \"{}\"\nreference = \"reference.cu\"\n{twin_line}\n\
         [[params]]\nname = \"x\"\nkind = \"buffer\"\ndirection = \"in\"\ndtype = \"f32\"\nlen = \"n\"\nshape = [\"n\"]\n\
         [[params]]\nname = \"y\"\nkind = \"buffer\"\ndirection = \"out\"\ndtype = \"f32\"\nlen = \"n\"\nshape = [\"n\"]\n\
         [[params]]\nname = \"n\"\nkind = \"scalar\"\ndtype = \"i32\"\nvalue = \"n\"\n\
         [[configs]]\nname = \"small\"\nsizes = {{ n = 1001 }}\n{extra}",
        original.0
    );
    std::fs::write(task_dir.join("task.toml"), toml).unwrap();
    let task = Task::load(&task_dir).expect("scratch task loads");
    (dir, task)
}

fn run(
    task: &Task,
    engine: Engine,
    limit_s: u64,
) -> Result<cudaperf::originals::OriginalOutputs, OriginalError> {
    let inputs = HostInputs::generate(task, &task.configs[0], 5).unwrap();
    run_original(
        task,
        &task.configs[0],
        &inputs,
        engine,
        &Tools::detect(),
        Duration::from_secs(limit_s),
    )
}

#[test]
fn a_c_original_computes_on_the_twin_inputs() {
    let (_d, task) = scratch_task(
        "c2cuda",
        ("original.c", "void twice(const float* x, float* y, int n) { for (int i = 0; i < n; ++i) y[i] = 2.0f * x[i]; }\n"),
        None,
    );
    let out = run(&task, Engine::C, 60).expect("runs");
    let inputs = HostInputs::generate(&task, &task.configs[0], 5).unwrap();
    let x = inputs.buffers[0].as_ref().unwrap();
    let y = out.buffers[1].as_ref().unwrap();
    for i in [0usize, 500, 1000] {
        let xv = f32::from_le_bytes(x[4 * i..4 * i + 4].try_into().unwrap());
        let yv = f32::from_le_bytes(y[4 * i..4 * i + 4].try_into().unwrap());
        assert_eq!(yv, 2.0 * xv);
    }
}

#[test]
fn broken_originals_give_errors_that_name_them() {
    let (_d, task) = scratch_task(
        "c2cuda",
        (
            "original.c",
            "void twice(const float* x, float* y, int n) { y[0] = ; }\n",
        ),
        None,
    );
    match run(&task, Engine::C, 60) {
        Err(e @ OriginalError::Compile { .. }) => {
            assert!(e.to_string().contains("original.c"), "{e}")
        }
        other => panic!("expected a compile error, got {other:?}"),
    }
    let (_d, task) = scratch_task(
        "c2cuda",
        (
            "original.c",
            "void twice(const float* x, float* y, int n) { volatile int k = 1; while (k) {} }\n",
        ),
        None,
    );
    match run(&task, Engine::C, 1) {
        Err(e @ OriginalError::Timeout { .. }) => {
            assert!(e.to_string().contains("past 1 s"), "{e}")
        }
        other => panic!("expected a timeout, got {other:?}"),
    }
    let (_d, task) = scratch_task(
        "torch2cuda",
        ("original.py", "import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return 2 * x\n"),
        Some("def forward(x):\n    return 2 * x, x\n"),
    );
    match run(&task, Engine::Numpy, 60) {
        Err(e @ OriginalError::Run { .. }) => {
            assert!(e.to_string().contains("forward returned 2 outputs"), "{e}")
        }
        other => panic!("expected a run error, got {other:?}"),
    }
    let (_d, task) = scratch_task("torch2cuda", ("original.py", "class Model: pass\n"), None);
    match run(&task, Engine::Numpy, 60) {
        Err(e @ OriginalError::NoTwin { .. }) => {
            assert!(e.to_string().contains("numpy_twin"), "{e}")
        }
        other => panic!("expected no twin, got {other:?}"),
    }
}

/// A C original that doubles `x` but aborts on an element above 100, with two regimes: one
/// within its domain (x = 3 everywhere, on a second, larger config only) and one outside it.
fn regime_task() -> (tempfile::TempDir, Task) {
    scratch_task_with(
        "c2cuda",
        (
            "original.c",
            "#include <stdlib.h>\nvoid twice(const float* x, float* y, int n) { for (int i = 0; i < n; ++i) { if (x[i] > 100.0f) abort(); y[i] = 2.0f * x[i]; } }\n",
        ),
        None,
        "[[configs]]\nname = \"big\"\nsizes = { n = 5003 }\n\
         [[regimes]]\nname = \"threes\"\nwhy = \"a constant input\"\nconfigs = [\"big\"]\n\
         [regimes.inputs.x]\ndist = \"constant\"\nvalue = 3.0\n\
         [[regimes]]\nname = \"huge\"\nwhy = \"outside the original's domain\"\n\
         [regimes.inputs.x]\ndist = \"uniform\"\nlow = 1000.0\nhigh = 2000.0\n",
    )
}

/// Guards the originals' regime runs (issue 19): each regime's inputs reach the original on
/// the smallest config the regime applies to, and an original that fails on a regime's
/// inputs fails the task with the regime named.
#[test]
fn originals_run_on_every_input_regime() {
    let tools = Tools::detect();
    if tools.cc.is_none() {
        panic!("this test needs a C compiler: {tools:?}");
    }
    let (_d, task) = regime_task();
    let c =
        cudaperf::originals::check_task(&task, &tools, &CheckOptions::default(), None, None, None);
    assert!(c.error.is_none(), "{c:?}");
    assert_eq!(c.config, "small");
    assert_eq!(c.regimes.len(), 2);
    let (threes, huge) = (&c.regimes[0], &c.regimes[1]);
    assert_eq!(
        (threes.regime.as_str(), threes.config.as_str()),
        ("threes", "big")
    );
    assert!(threes.passed(), "{threes:?}");
    assert_eq!(
        (huge.regime.as_str(), huge.config.as_str()),
        ("huge", "small")
    );
    let e = huge
        .error
        .as_deref()
        .expect("the original aborts on the huge regime");
    assert!(e.contains("non-zero exit") && e.contains("`small`"), "{e}");
    assert!(!c.passed());
    // The inputs the original saw are the regime's: on `big`, x = 3, so y = 6.
    let regime = &task.regimes[0];
    let cfg = cudaperf::originals::smallest_config_of(&task, regime).unwrap();
    let inputs = HostInputs::generate_with(&task, cfg, Some(regime), 1).unwrap();
    let out = run_original(
        &task,
        cfg,
        &inputs,
        Engine::C,
        &tools,
        Duration::from_secs(60),
    )
    .expect("runs");
    let y = out.buffers[1].as_ref().unwrap();
    assert_eq!(y.len(), 5003 * 4);
    assert!(y
        .chunks(4)
        .all(|c| f32::from_le_bytes(c.try_into().unwrap()) == 6.0));
}

/// Guards regime samples (issue 19): a regime's outputs are compared with the reference
/// values sampled for that regime, NaN and infinities included, and a samples file without
/// regimes (written before them) still reads, leaving the regimes uncompared.
#[test]
fn regime_outputs_are_compared_with_their_samples() {
    use cudaperf::originals::{Exact, RegimeSamples, TaskSamples};
    let tools = Tools::detect();
    if tools.cc.is_none() {
        panic!("this test needs a C compiler: {tools:?}");
    }
    let (_d, task) = regime_task();
    let opts = CheckOptions::default();
    let with = |want: f64| {
        let main = HostInputs::generate(&task, &task.configs[0], opts.seed).unwrap();
        let x0 = f32::from_le_bytes(main.buffers[0].as_ref().unwrap()[..4].try_into().unwrap());
        let mut s = Samples {
            device: "NVIDIA H200".into(),
            seed: opts.seed,
            ..Default::default()
        };
        s.tasks.insert(
            "twice".into(),
            TaskSamples {
                config: "small".into(),
                buffers: [("y".to_string(), vec![(0, Some(Exact(2.0 * f64::from(x0))))])].into(),
                regimes: [(
                    "threes".to_string(),
                    RegimeSamples {
                        config: "big".into(),
                        buffers: [("y".to_string(), vec![(7, Some(Exact(want)))])].into(),
                    },
                )]
                .into(),
            },
        );
        s
    };
    let good = with(6.0);
    let c = cudaperf::originals::check_task(&task, &tools, &opts, None, Some(&good), None);
    assert_eq!(c.against, "samples");
    assert!(
        c.outputs.iter().all(|b| b.clean() && b.elements == 1),
        "{c:?}"
    );
    assert_eq!(c.regimes[0].against, "samples");
    assert!(c.regimes[0].passed(), "{:?}", c.regimes[0]);
    assert_eq!(c.regimes[1].against, "nothing", "no samples for `huge`");
    for wrong in [6.5, f64::NAN, f64::INFINITY] {
        let c =
            cudaperf::originals::check_task(&task, &tools, &opts, None, Some(&with(wrong)), None);
        let r = &c.regimes[0];
        assert_eq!(r.outputs[0].mismatches, 1, "want {wrong}: {r:?}");
    }
    // Non-finite samples round-trip through the file format.
    let text = serde_json::to_string(&with(f64::NEG_INFINITY)).unwrap();
    let back: Samples = serde_json::from_str(&text).unwrap();
    let v = back.tasks["twice"].regimes["threes"].buffers["y"][0]
        .1
        .unwrap()
        .0;
    assert_eq!(v, f64::NEG_INFINITY);
    // An old file: no `regimes` key.
    let old = r#"{"device":"d","seed":1,"tasks":{"t":{"config":"c","buffers":{"y":[[0,"1.5"],[1,null]]}}}}"#;
    let s: Samples = serde_json::from_str(old).expect("old samples read");
    assert!(s.tasks["t"].regimes.is_empty());
}

#[test]
fn shapes_must_hold_their_buffers() {
    let (_d, task) = scratch_task(
        "torch2cuda",
        ("original.py", "class Model: pass\n"),
        Some("def forward(x):\n    return 2 * x\n"),
    );
    let toml = std::fs::read_to_string(task.dir.join("task.toml")).unwrap();
    let bad = toml.replacen("shape = [\"n\"]", "shape = [\"n\", \"2\"]", 1);
    let err = Task::from_toml_str(
        &bad,
        &task.dir.join("task.toml"),
        &task.dir,
        &Default::default(),
    )
    .expect_err("a shape of 2n elements for a buffer of n");
    let msg = err.to_string();
    assert!(
        msg.contains("params[0].shape") && msg.contains("1001"),
        "{msg}"
    );
    let c_twin = toml.replace("kind = \"torch2cuda\"", "kind = \"c2cuda\"");
    let err = Task::from_toml_str(
        &c_twin,
        &task.dir.join("task.toml"),
        &task.dir,
        &Default::default(),
    )
    .expect_err("c2cuda with a numpy twin");
    assert!(err.to_string().contains("numpy_twin"), "{err}");
}

#[test]
fn samples_update_keeps_other_tasks_of_the_same_input_set() {
    use cudaperf::originals::{Exact, TaskSamples};
    let one = |task: &str, v: f64| {
        let mut s = Samples {
            device: "NVIDIA H200".into(),
            seed: 7,
            ..Default::default()
        };
        s.tasks.insert(
            task.into(),
            TaskSamples {
                config: "small".into(),
                buffers: [("y".to_string(), vec![(0, Some(Exact(v)))])].into(),
                regimes: Default::default(),
            },
        );
        s
    };
    let mut old = one("a", 1.0);
    old.tasks.extend(one("b", 2.0).tasks);
    let merged = old.clone().update(one("b", 3.0));
    assert_eq!(merged.tasks.len(), 2);
    assert_eq!(merged.tasks["a"], old.tasks["a"]);
    assert_eq!(merged.tasks["b"].buffers["y"][0].1, Some(Exact(3.0)));
    // Another seed: the new samples alone.
    let other = Samples {
        seed: 8,
        ..one("c", 4.0)
    };
    let replaced = old.update(other.clone());
    assert_eq!(replaced, other);
}

/// Guards the originals checker's reference run (issue 19): the last input written before
/// the reference's launch must be on the device when the kernel reads it. `cuMemcpyHtoD`
/// from pageable memory may return with its DMA still in flight on the legacy stream, which
/// the harness's non-blocking stream does not wait for; the gather reference once read stale
/// indices that way (256,769 of 257,000 outputs wrong, then right on a re-run). Every config
/// (the smallest as in that failure, the largest with a 268 MB index buffer), five input
/// sets each, checked element by element against the gather on the CPU.
#[test]
#[ignore = "needs an NVIDIA GPU"]
fn the_reference_run_reads_the_inputs_it_was_given() {
    use cudaperf::candidate::{Candidate, PlanLimits};
    use cudaperf::compile::{CompileOptions, CompileOutcome, Compiler, Isolation};
    use cudaperf::exec::{DirectGpu, ExecJob, JobParts, JobReference, JobSide};
    let gpu = match DirectGpu::open() {
        Ok(g) => g,
        Err(reason) => {
            eprintln!("SKIPPED (no GPU): {reason}");
            return;
        }
    };
    let task = Task::load(common::fixture("tasks/gather_dim1_i64")).expect("task");
    let compiler = Compiler::new(CompileOptions {
        arch: gpu.arch().to_string(),
        isolation: Isolation::InProcess,
        ..Default::default()
    })
    .expect("compiler");
    let cand = Candidate::parse(&task.reference.source).expect("reference parses");
    let CompileOutcome::Compiled { module, .. } = compiler.compile(&cand) else {
        panic!("the reference does not compile")
    };
    for (ci, seed) in (0..task.configs.len()).flat_map(|c| (1..=5u64).map(move |s| (c, s))) {
        let cfg = &task.configs[ci];
        let plans = [cand
            .resolve(&task, cfg, &PlanLimits::default())
            .expect("plan")];
        let (rows, cols, k) = (cfg.sizes["rows"], cfg.sizes["cols"], cfg.sizes["k"]);
        let job = ExecJob::build(JobParts {
            task: &task,
            configs: &[ci],
            reference: JobReference::Cuda(JobSide {
                candidate: &cand,
                module: &module,
                plans: &plans,
            }),
            candidates: &[],
            timing_config: 0,
            seed,
            timing: None,
            max_device_bytes: u64::MAX,
            bandwidth_gbps: 0.0,
            peak_tflops: 0.0,
            deadline_ms: 0,
            run_limit_ms: 0,
            member_budget_ms: 0,
        })
        .expect("job");
        let inputs = HostInputs::generate(&task, cfg, seed).expect("inputs");
        let out = gpu.run_reference(&job, 0, &inputs.buffers).expect("runs");
        let x = inputs.buffers[0].as_ref().unwrap();
        let index = inputs.buffers[1].as_ref().unwrap();
        let y = &out[2];
        let mut wrong = 0u64;
        for i in 0..(rows * k) as usize {
            let r = i / k as usize;
            let at = i64::from_le_bytes(index[8 * i..8 * i + 8].try_into().unwrap()) as usize;
            let want = &x[4 * (r * cols as usize + at)..][..4];
            wrong += u64::from(&y[4 * i..4 * i + 4] != want);
        }
        assert_eq!(
            wrong,
            0,
            "{} seed {seed}: {wrong} of {} gathered values are wrong",
            cfg.name,
            rows * k
        );
    }
}

/// The values of input `name` of `task`'s regime `regime` on the smallest config it applies
/// to, as the CPU twin of the device generator gives them (as doubles).
fn regime_values(task: &Task, regime: &str, name: &str) -> Vec<f64> {
    let r = task
        .regimes
        .iter()
        .find(|r| r.name == regime)
        .unwrap_or_else(|| panic!("{}: no regime `{regime}`", task.id));
    let cfg = cudaperf::originals::smallest_config_of(task, r).expect("a config");
    let inputs = HostInputs::generate_with(task, cfg, Some(r), 7).expect("inputs");
    let (i, b) = task
        .buffers()
        .enumerate()
        .find(|(_, b)| b.name == name)
        .expect("buffer");
    let bytes = inputs.buffers[i].as_ref().expect("an input");
    let n = bytes.len() / b.dtype.size_bytes() as usize;
    (0..n)
        .map(|k| cudaperf::originals::element_f64(b.dtype, bytes, k))
        .collect()
}

/// Guards the dataset's input regimes (issue 19): each one contradicts the narrow
/// assumption it names, on the inputs the device will generate (a regime whose
/// distribution does not do what its `why` says would check nothing).
#[test]
fn regimes_contradict_the_assumptions_they_name() {
    let ds = Dataset::load(common::fixture("tasks")).expect("dataset loads");
    let task = |id: &str| ds.tasks.iter().find(|t| t.id == id).expect("task");
    // CSR rows of varied length, empty ones included, the same total.
    let spmv = task("spmv_csr");
    let ptr = regime_values(spmv, "ragged_rows", "row_ptr");
    let lens: Vec<f64> = ptr.windows(2).map(|w| w[1] - w[0]).collect();
    let k = 7.0;
    assert_eq!(ptr[0], 0.0);
    assert_eq!(*ptr.last().unwrap(), k * lens.len() as f64);
    assert!(lens.iter().all(|&l| (0.0..=2.0 * k).contains(&l)));
    assert!(
        lens.contains(&0.0) && lens.contains(&(2.0 * k)),
        "empty and double rows"
    );
    // Runs of exactly 1024 equal values.
    let a = regime_values(task("run_position_equal_neighbours"), "long_runs", "a");
    assert!(a.iter().enumerate().all(|(i, &v)| v == (i / 1024) as f64));
    // Collatz starts past 10^6, radix keys with the sign bit, mask bytes above 1, text
    // bytes past 127, prefix sums that go down.
    let x = regime_values(task("collatz_steps"), "full_range", "x");
    assert!(x.iter().all(|&v| v >= 1.0) && x.iter().filter(|&&v| v > 1e9).count() > x.len() / 3);
    let keys = regime_values(task("radix_digit_histograms"), "full_range", "keys");
    assert!(keys.iter().filter(|&&v| v < 0.0).count() > keys.len() / 3);
    let mask = regime_values(task("masked_fill_u8"), "mask_bytes", "mask");
    assert!(mask.contains(&2.0) && mask.contains(&0.0));
    let text = regime_values(task("vigenere_cipher"), "all_bytes", "text");
    assert!(text.iter().any(|&c| c >= 128.0) && text.iter().any(|&c| c < 32.0));
    let xs = regime_values(task("exclusive_scan_i32"), "signed_values", "x");
    assert!(xs.contains(&-31.0) && xs.contains(&31.0));
    // Special values reach float inputs.
    let m = regime_values(task("masked_fill_u8"), "special_values", "x");
    assert!(m.iter().any(|v| v.is_nan()) && m.contains(&f64::NEG_INFINITY));
    assert!(m.iter().any(|&v| v == 0.0 && v.is_sign_negative()));
    assert!(m
        .iter()
        .any(|&v| v != 0.0 && v.abs() < f64::from(f32::MIN_POSITIVE)));
}
