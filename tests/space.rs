//! The sparse program space of the replay ablation (`examples/common/space`): sizes, the
//! share of hazard-free programs under a uniform policy, and NVRTC compiles of a sample of
//! every task's programs (all of them compile in `program_table`).

#[path = "../examples/common/space/mod.rs"]
#[allow(dead_code)]
mod space;

use cudaperf::reward::Verdict;
use cudaperf::reward::{EvalOptions, Evaluator, Stage, Submission};
use cudaperf::task::Task;

fn root() -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Issue 21's bounds: >= 2,000 distinct programs per task, and <= 10 % of uniform samples
/// free of hazards (weighted by the knob combinations that render each program).
#[test]
fn every_task_has_2000_distinct_programs_and_a_sparse_safe_set() {
    for t in &space::TASKS {
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
    for t in &space::TASKS {
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
/// spread sample of each task (every 199th program, and every speed option at its extremes).
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
    for t in &space::TASKS {
        let task = Task::load(root().join("fixtures/tasks").join(t.id)).expect("task");
        let distinct = t.distinct();
        let mut sample: Vec<&space::Distinct> = distinct.iter().step_by(199).collect();
        // The largest tiles and register blocks (last options) with every hazard unsafe.
        let last: Vec<usize> = t.knobs.iter().map(|k| k.options.len() - 1).collect();
        let last_src = t.render(&last).unwrap();
        let extra = distinct.iter().find(|d| d.source == last_src).unwrap();
        sample.push(extra);
        let subs: Vec<Submission> = sample
            .iter()
            .map(|d| Submission::from_source(d.source.clone()))
            .collect();
        let evals = evaluator.evaluate_batch(&task, &subs, Stage::Compile);
        for (d, e) in sample.iter().zip(&evals) {
            assert_eq!(
                e.verdict(),
                Verdict::Compiled,
                "{} {}: {:?}\n{}",
                t.id,
                t.describe(&d.choices[0]),
                e.stages.compile.as_ref().map(|c| &c.log),
                d.source
            );
        }
    }
}
