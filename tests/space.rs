//! The sparse program space of the replay ablation (`examples/common/space`): sizes, the
//! share of hazard-free programs under a uniform policy, and NVRTC compiles of a sample of
//! every task's programs (all of them compile in `program_table`), for the measured spaces
//! and the supersets prepared for a re-measure.

#[path = "../examples/common/space/mod.rs"]
#[allow(dead_code)]
mod space;

use cudaperf::pipeline::Verdict;
use cudaperf::pipeline::{EvalOptions, Evaluator, Stage, Submission};
use cudaperf::task::Task;

fn root() -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Issue 21's bounds: >= 2,000 distinct programs per task, and <= 10 % of uniform samples
/// free of hazards (weighted by the knob combinations that render each program).
#[test]
fn every_task_has_2000_distinct_programs_and_a_sparse_safe_set() {
    for t in space::TASKS.iter().chain(&space::SUPERSETS) {
        let distinct = t.distinct();
        assert!(
            distinct.len() >= 2000,
            "{}: {} distinct programs",
            t.id,
            distinct.len()
        );
        let safe: usize = distinct
            .iter()
            .flat_map(|d| &d.choices)
            .filter(|c| t.hazards(c).is_empty())
            .count();
        let frac = safe as f64 / t.size() as f64;
        assert!(frac <= 0.10, "{}: {:.3} of samples hazard-free", t.id, frac);
        assert!(safe > 0, "{}: no hazard-free program", t.id);
        // A program's combinations agree on its hazards (a knob that changes nothing in the
        // source cannot be a hazard).
        for d in &distinct {
            let h = t.hazards(&d.choices[0]);
            assert!(d.choices.iter().all(|c| t.hazards(c) == h), "{}", d.hash);
        }
    }
}

/// A hazard knob changes the source: the unsafe program is a different program.
#[test]
fn every_hazard_changes_the_source() {
    for t in space::TASKS.iter().chain(&space::SUPERSETS) {
        let base = vec![0; t.knobs.len()];
        let safe = space::source_hash(&t.render(&base).unwrap());
        for (i, k) in t.knobs.iter().enumerate().filter(|(_, k)| k.hazard) {
            let mut c = base.clone();
            c[i] = 1;
            let h = space::source_hash(&t.render(&c).unwrap());
            assert_ne!(
                h, safe,
                "{}: hazard `{}` renders the safe source",
                t.id, k.name
            );
        }
    }
}

#[test]
fn a_choice_that_does_not_fit_is_an_error_naming_the_knob() {
    let t = space::task("matmul").unwrap();
    let e = t.render(&[0, 0]).unwrap_err().to_string();
    assert!(e.contains("2 knob values for 9 knobs"), "{e}");
    let mut c = vec![0; t.knobs.len()];
    c[4] = 9;
    let e = t.render(&c).unwrap_err().to_string();
    assert!(e.contains("`threads`") && e.contains("option 9"), "{e}");
}

/// Every program must compile (incorrect-by-hazard is the point, not compile errors): a
/// spread sample of each task (every 199th program, or every `CUDAPERF_SPACE_SAMPLE_STEP`th,
/// and every option of every knob with the others at their first and at their last option).
#[test]
fn a_sample_of_every_task_compiles_with_nvrtc() {
    if cudaperf::compile::nvrtc::load().is_err() {
        panic!("NVRTC is needed (pip install nvidia-cuda-nvrtc==13.*)");
    }
    let mut o = EvalOptions {
        no_gpu: true,
        ..EvalOptions::default()
    };
    // The space's kernels are this repository's own: compiled in-process (trusted).
    o.compile.isolation = cudaperf::compile::Isolation::InProcess;
    let evaluator = Evaluator::new(o).expect("evaluator");
    for t in space::TASKS.iter().chain(&space::SUPERSETS) {
        let task = Task::load(root().join("fixtures/tasks").join(t.id)).expect("task");
        let distinct = t.distinct();
        let step: usize = std::env::var("CUDAPERF_SPACE_SAMPLE_STEP")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(199)
            .max(1);
        let mut sample: Vec<(Vec<usize>, String)> = distinct
            .iter()
            .step_by(step)
            .map(|d| (d.choices[0].clone(), d.source.clone()))
            .collect();
        // Every option of every knob, once with the other knobs at their first option and
        // once at their last (the largest tiles and register blocks, every hazard unsafe).
        let first = vec![0; t.knobs.len()];
        let last: Vec<usize> = t.knobs.iter().map(|k| k.options.len() - 1).collect();
        for base in [&first, &last] {
            for (i, k) in t.knobs.iter().enumerate() {
                for o in 0..k.options.len() {
                    let mut c = base.clone();
                    c[i] = o;
                    let src = t.render(&c).unwrap();
                    sample.push((c, src));
                }
            }
        }
        let subs: Vec<Submission> = sample
            .iter()
            .map(|(_, s)| Submission::from_source(s.clone()))
            .collect();
        let evals = evaluator.evaluate_batch(&task, &subs, Stage::Compile);
        for ((c, src), e) in sample.iter().zip(&evals) {
            assert_eq!(
                e.verdict(),
                Verdict::Compiled,
                "{} {}: {:?}\n{}",
                t.id,
                t.describe(c),
                e.stages.compile.as_ref().map(|c| &c.log),
                src
            );
        }
    }
}

/// transpose's `store` and `launch` knobs (issue 21, second re-measure) put their code in the
/// kernel, and their first options (`plain`, `full`) render exactly the programs measured
/// before the knobs existed: every knob at its first option is `4a130459f88fac89`, as in the
/// 2026-12-02 table. With the persistent launch the grid hazards are in the tile counts.
#[test]
fn transpose_store_and_launch_render_their_code() {
    let t = space::superset("transpose").unwrap();
    let at = |name: &str| t.knobs.iter().position(|k| k.name == name).unwrap();
    let (store, launch) = (at("store"), at("launch"));
    assert_eq!(t.knobs[store].options[0], "plain");
    assert_eq!(t.knobs[launch].options[0], "full");
    let base = vec![0; t.knobs.len()];
    let src = t.render(&base).unwrap();
    assert_eq!(space::source_hash(&src), "4a130459f88fac89", "{src}");
    for (o, label) in t.knobs[store].options.iter().enumerate() {
        let mut c = base.clone();
        c[store] = o;
        let src = t.render(&c).unwrap();
        assert_eq!(
            src.contains("__threadfence();"),
            *label == "fenced",
            "{src}"
        );
        assert_eq!(src.contains("atomicExch(&t["), *label == "atomic", "{src}");
    }
    for (o, label) in t.knobs[launch].options.iter().enumerate() {
        let mut c = base.clone();
        c[launch] = o;
        let persistent = *label == "persistent";
        let src = t.render(&c).unwrap();
        assert_eq!(src.contains("grid=(264, 1)"), persistent, "{src}");
        assert_eq!(src.contains("b += gridDim.x"), persistent, "{src}");
        if persistent {
            c[at("grid_x")] = 1;
            c[at("grid_y")] = 1;
            let src = t.render(&c).unwrap();
            assert!(src.contains("tiles_x = N / 32,"), "{src}");
            assert!(src.contains("tiles_x * (M / 4)"), "{src}");
        }
    }
}

/// A superset renders every program of its task's measured space unchanged (the option of
/// each knob by label, the new knobs at their first option), so a re-measure's rows and the
/// committed table name the same programs by the same hashes.
#[test]
fn every_superset_renders_its_measured_space_unchanged() {
    for sup in &space::SUPERSETS {
        let t = space::task(sup.id).unwrap();
        for d in t.distinct() {
            let c = &d.choices[0];
            let in_sup: Vec<usize> = sup
                .knobs
                .iter()
                .map(|k| match t.knobs.iter().position(|m| m.name == k.name) {
                    Some(i) => k
                        .options
                        .iter()
                        .position(|o| *o == t.knobs[i].options[c[i]])
                        .unwrap(),
                    None => 0,
                })
                .collect();
            let src = sup.render(&in_sup).unwrap();
            assert_eq!(space::source_hash(&src), d.hash, "{}", t.describe(c));
        }
    }
}
