//! The shipped dataset: every task loads, every implementation compiles with the real NVRTC,
//! the counts meet the dataset's targets, pairs come from the committed H200 timings, and
//! prompts/exports are well formed.

mod common;

use std::collections::BTreeSet;

use cudaperf::candidate::Candidate;
use cudaperf::compile::{CompileOptions, CompileOutcome, Compiler, Isolation};
use cudaperf::dataset::Dataset;
use cudaperf::task::TaskKind;
use cudaperf::timings::Timings;

fn dataset() -> Dataset {
    Dataset::load(common::fixture("tasks")).expect("dataset loads")
}

fn timings() -> Timings {
    Timings::load(common::fixture("timings/h200.json")).expect("timings load")
}

/// Guards the dataset targets: >= 130 tasks (>= 80 c2cuda, >= 50 torch2cuda), >= 3 configs
/// per task (one of them with an odd size) and a reference plus >= 4 implementations.
#[test]
fn counts_meet_the_targets() {
    let ds = dataset();
    let s = ds.stats(Some(&timings()));
    println!("{s:?}");
    assert!(s.tasks >= 130, "{s:?}");
    assert!(
        s.by_kind.c2cuda >= 80 && s.by_kind.torch2cuda >= 50,
        "{s:?}"
    );
    assert!(s.implementations >= 650 && s.configs >= 390, "{s:?}");
    assert!(s.pairs >= 500, "{s:?}");
    for t in &ds.tasks {
        assert!(
            t.configs.len() >= 3,
            "{}: {} configs",
            t.id,
            t.configs.len()
        );
        assert!(
            t.configs
                .iter()
                .any(|c| c.sizes.values().any(|&v| v % 2 == 1 && v > 1)),
            "{}: no config with an odd size",
            t.id
        );
        assert!(
            t.implementations.len() >= 4,
            "{}: reference + {} implementations",
            t.id,
            t.implementations.len()
        );
    }
}

/// Every file in a task folder is one the task names: nothing left behind by its authors.
#[test]
fn task_folders_hold_only_their_files() {
    let ds = dataset();
    for t in &ds.tasks {
        let mut named: BTreeSet<String> = ["task.toml".to_string(), t.original_file.clone()].into();
        named.extend(t.numpy_twin.clone());
        for i in t.all_implementations() {
            if let Some(f) = i.path.file_name().and_then(|f| f.to_str()) {
                named.insert(f.to_string());
            }
        }
        for e in std::fs::read_dir(&t.dir).expect("task folder") {
            let name = e.expect("entry").file_name().to_string_lossy().into_owned();
            assert!(
                named.contains(&name),
                "{}: `{name}` is not named by task.toml",
                t.id
            );
        }
    }
}

/// Every implementation (reference included) parses, fits its task's ABI, resolves for every
/// config within CUDA's limits, and compiles for sm_90 with zero failures.
#[test]
fn every_implementation_compiles_with_nvrtc() {
    require_nvrtc!();
    let ds = dataset();
    let compiler = Compiler::new(CompileOptions {
        isolation: Isolation::InProcess, // the crate's own trusted sources
        ..Default::default()
    })
    .expect("compiler");
    let mut failures = Vec::new();
    let mut compiled = 0;
    for (task, imp) in ds.implementations() {
        let mut cand = match Candidate::parse(&imp.source) {
            Ok(c) => c,
            Err(e) => {
                failures.push(format!("{}/{}: {e}", task.id, imp.name));
                continue;
            }
        };
        if let Err(e) = cand.check_abi(task) {
            failures.push(format!("{}/{}: {e}", task.id, imp.name));
            continue;
        }
        for cfg in &task.configs {
            if let Err(e) = cand.resolve(task, cfg, &Default::default()) {
                failures.push(format!("{}/{}: {e}", task.id, imp.name));
            }
        }
        match compiler.compile(&cand) {
            CompileOutcome::Compiled { module, .. } => {
                compiled += 1;
                assert!(
                    module.kernels.iter().all(|k| k.registers > 0),
                    "{}/{}: {:?}",
                    task.id,
                    imp.name,
                    module.kernels
                );
            }
            other => failures.push(format!(
                "{}/{}: {:?}",
                task.id,
                imp.name,
                cudaperf::pipeline::compile_stage_of(&other, "sm_90", Isolation::InProcess)
            )),
        }
    }
    println!("compiled {compiled} implementations");
    assert!(failures.is_empty(), "{failures:#?}");
}

/// Pairs: same task, faster first, ratio outside noise; the committed timings show every
/// implementation correct on the H200, and the targets for fast and slow variants hold.
#[test]
fn pairs_and_timing_targets() {
    let ds = dataset();
    let t = timings();
    assert!(t.device.contains("H200"), "{}", t.device);
    let mut fast_tasks = 0;
    let mut slow_tasks = 0;
    for task in &ds.tasks {
        let tt = t
            .tasks
            .get(&task.id)
            .unwrap_or_else(|| panic!("{} missing from timings", task.id));
        for imp in task.all_implementations() {
            let e = tt
                .implementations
                .get(&imp.name)
                .unwrap_or_else(|| panic!("{}/{} not timed", task.id, imp.name));
            assert_eq!(
                e.verdict, "correct",
                "{}/{}: {:?}",
                task.id, imp.name, e.reason
            );
        }
        let speedups: Vec<f64> = tt
            .implementations
            .iter()
            .filter(|(n, _)| *n != "reference")
            .filter_map(|(_, e)| e.raw_speedup)
            .collect();
        fast_tasks += speedups.iter().any(|&s| s >= 2.0) as usize;
        slow_tasks += speedups.iter().any(|&s| s < 0.95) as usize;
    }
    assert!(
        fast_tasks * 10 >= ds.tasks.len() * 3,
        "{fast_tasks} tasks with a >= 2x implementation"
    );
    assert_eq!(
        slow_tasks,
        ds.tasks.len(),
        "every task has an implementation slower than its reference"
    );
    for p in ds.pairs(&t) {
        assert!(p.log_ratio > 0.0 && p.faster != p.slower);
        let e = &t.tasks[&p.task].implementations;
        let (f, s) = (
            e[&p.faster].raw_speedup.unwrap(),
            e[&p.slower].raw_speedup.unwrap(),
        );
        assert!(f > s, "{p:?}");
    }
}

/// The split is by task id, deterministic, disjoint and complete.
#[test]
fn split_is_deterministic_by_task() {
    let ds = dataset();
    let (train, test) = ds.split(0.2, 0);
    let (train2, test2) = ds.split(0.2, 0);
    let ids = |v: &[&cudaperf::task::Task]| v.iter().map(|t| t.id.clone()).collect::<BTreeSet<_>>();
    assert_eq!(ids(&train), ids(&train2));
    assert_eq!(ids(&test), ids(&test2));
    assert!(ids(&train).is_disjoint(&ids(&test)));
    assert_eq!(train.len() + test.len(), ds.tasks.len());
    assert!(!test.is_empty() && !train.is_empty());
}

/// The prompt carries the original program, the ABI, every config and the @launch format.
#[test]
fn prompts_are_complete() {
    let ds = dataset();
    for t in &ds.tasks {
        let p = t.prompt();
        assert!(p.contains(t.original.trim()), "{}", t.id);
        assert!(p.contains("// @launch KERNEL grid="), "{}", t.id);
        assert!(p.contains(&t.signature()), "{}", t.id);
        for c in &t.configs {
            for (k, v) in &c.sizes {
                assert!(p.contains(&format!("{k} = {v}")), "{}: size {k}", t.id);
            }
        }
        let lang = if t.kind == TaskKind::C2cuda {
            "```c\n"
        } else {
            "```python\n"
        };
        assert!(p.contains(lang), "{}", t.id);
    }
}

/// `cudaperf dataset export --format jsonl` writes one {"id","kind","prompt"} per task, and
/// `dataset stats --json` has the documented integer fields. Run from an unrelated folder:
/// nothing depends on the current directory.
#[test]
fn cli_export_and_stats() {
    let elsewhere = tempfile::tempdir().unwrap();
    let tasks = common::fixture("tasks");
    let timings = common::fixture("timings/h200.json");
    let out = common::cli()
        .current_dir(elsewhere.path())
        .args(["dataset", "export", "--format", "jsonl", "--tasks"])
        .arg(&tasks)
        .output()
        .expect("run cli");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).expect("utf8");
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).expect("json line"))
        .collect();
    assert_eq!(lines.len(), dataset().tasks.len());
    for l in &lines {
        assert!(l["id"].is_string() && l["prompt"].as_str().is_some_and(|p| p.len() > 200));
        assert!(matches!(l["kind"].as_str(), Some("c2cuda" | "torch2cuda")));
    }
    let out = common::cli()
        .current_dir(elsewhere.path())
        .args(["dataset", "stats", "--json", "--tasks"])
        .arg(&tasks)
        .arg("--timings")
        .arg(&timings)
        .output()
        .expect("run cli");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("stats json");
    for k in ["tasks", "implementations", "configs", "pairs"] {
        assert!(v[k].as_u64().is_some(), "{k}: {v}");
    }
    assert!(v["pairs"].as_u64().unwrap_or(0) > 200, "{v}");
    assert!(
        v["by_kind"]["c2cuda"].as_u64().is_some() && v["by_kind"]["torch2cuda"].as_u64().is_some()
    );
    let bad = common::cli()
        .args(["dataset", "export", "--format", "csv", "--tasks"])
        .arg(&tasks)
        .output()
        .expect("run cli");
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("unknown format"));
}

/// Bytes one run of `task` on `cfg` must move, as the harness's floor counts them
/// (`ExecJob::floor_bytes`): the task's `min_bytes` where it declares them, else every ABI
/// byte once (an `inout` buffer read and written).
fn floor_bytes(task: &cudaperf::task::Task, cfg: &cudaperf::task::InputConfig) -> f64 {
    match &task.min_bytes {
        Some(e) => e.eval_f64(&cfg.sizes).expect("min_bytes evaluates"),
        None => abi_bytes(task, cfg),
    }
}

/// Every ABI byte once, an `inout` buffer's twice (`ExecJob::abi_bytes`).
fn abi_bytes(task: &cudaperf::task::Task, cfg: &cudaperf::task::InputConfig) -> f64 {
    use cudaperf::task::Direction;
    let lens = task.buffer_lens(cfg).expect("lengths");
    task.buffers()
        .zip(&lens)
        .map(|(b, (_, dtype, n))| {
            let bytes = (n * dtype.size_bytes()) as f64;
            if b.direction == Direction::Inout {
                2.0 * bytes
            } else {
                bytes
            }
        })
        .sum()
}

/// Guards the floors against the measurements (issue 19): no committed H200 time of any
/// implementation is under its task's bytes floor (min_bytes or the ABI's bytes, at the
/// H200's datasheet bandwidth, the harness's table) or its FLOPs floor (at the table's peak
/// rate) on the config it was timed on. A floor above a measured honest time would make
/// that implementation `implausible` (tril_matvec's full-matrix floor once withheld a
/// kernel that reads only the triangle); a declared `min_bytes` must also stay at or under
/// the ABI's bytes, which every run can move.
#[test]
fn no_timing_is_under_its_floor() {
    let ds = dataset();
    let t = timings();
    let bandwidth = cudaperf::exec::table_bandwidth(&t.device).expect("the H200 in the table");
    let peak = cudaperf::exec::table_peak_tflops(&t.device).expect("the H200 in the table");
    let mut under = Vec::new();
    let mut checked = 0;
    for task in &ds.tasks {
        let Some(tt) = t.tasks.get(&task.id) else {
            continue;
        };
        if let Some(e) = &task.min_bytes {
            for cfg in &task.configs {
                let declared = e.eval_f64(&cfg.sizes).expect("min_bytes evaluates");
                let abi = abi_bytes(task, cfg);
                assert!(
                    declared > 0.0 && declared <= abi,
                    "{}: min_bytes {declared} on `{}` is not within (0, {abi}] (the ABI's bytes)",
                    task.id,
                    cfg.name
                );
            }
        }
        for (name, e) in &tt.implementations {
            let (Some(us), Some(cfg)) = (e.time_us, e.config.as_deref()) else {
                continue;
            };
            let cfg = task
                .config(cfg)
                .unwrap_or_else(|| panic!("{}/{name}: timed on unknown config `{cfg}`", task.id));
            let bytes_us = floor_bytes(task, cfg) / (bandwidth * 1e3);
            let flops_us = task.flops.as_ref().map_or(0.0, |f| {
                f.eval_f64(&cfg.sizes).expect("flops evaluates") / (peak * 1e6)
            });
            checked += 1;
            if us < bytes_us || us < flops_us {
                under.push(format!(
                    "{}/{name} on `{}`: {us:.1} us, floors {bytes_us:.1} us (bytes), {flops_us:.1} us (flops)",
                    task.id, cfg.name
                ));
            }
        }
    }
    assert!(checked >= 650, "{checked} timings checked");
    assert!(
        under.is_empty(),
        "times under their floors:\n{}",
        under.join("\n")
    );
}
