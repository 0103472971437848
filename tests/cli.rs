//! The command line's handling of bad input: each case is an error that names what was wrong
//! (exit code 2, no panic), and the commands that used to read `fixtures/...` relative to the
//! current folder work from any folder.

mod common;

use std::path::Path;
use std::process::Output;
use std::time::Duration;

/// Runs `cudaperf args...` from `dir` (the crate root when `None`) with `stdin`.
fn run(dir: Option<&Path>, args: &[&str], stdin: Option<&str>, env: &[(&str, &str)]) -> Output {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let mut cmd = Command::new(common::cudaperf_bin());
    cmd.current_dir(dir.map_or_else(common::manifest_dir, Path::to_path_buf))
        .args(args)
        .envs(env.iter().copied())
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("spawn cudaperf");
    if let Some(text) = stdin {
        child
            .stdin
            .take()
            .unwrap()
            .write_all(text.as_bytes())
            .unwrap();
    }
    let start = std::time::Instant::now();
    loop {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "cudaperf {args:?} hangs"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// An error: exit code 2, the message contains every `says`, nothing panicked.
fn assert_error(o: &Output, says: &[&str]) {
    let err = stderr(o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    for s in says {
        assert!(err.contains(s), "`{s}` missing from: {err}");
    }
}

/// Negative and fractional numbers get a message that says what is expected (clap used to
/// answer "unexpected argument '-5' found").
#[test]
fn negative_numbers_say_what_is_expected() {
    let va = common::fixture("tasks/vector_add");
    let va = va.to_str().unwrap();
    for (args, says) in [
        (
            vec![
                "train-ranker",
                "--tasks",
                "t",
                "--timings",
                "x",
                "--out",
                "o",
                "--epochs",
                "-5",
            ],
            vec!["--epochs", "whole number >= 0", "-5"],
        ),
        (
            vec![
                "train-ranker",
                "--tasks",
                "t",
                "--timings",
                "x",
                "--out",
                "o",
                "--cv",
                "2.5",
            ],
            vec!["--cv", "whole number"],
        ),
        (
            vec!["score", "--task", va, "--compile-timeout", "-3", "x.cu"],
            vec!["--compile-timeout", "positive number of seconds", "-3"],
        ),
        (
            vec!["score", "--task", va, "--step", "-1", "x.cu"],
            vec!["--step", "whole number"],
        ),
        (
            vec!["measure", "--tasks", "t", "--out", "o", "--timeout", "-1"],
            vec!["--timeout", "positive"],
        ),
    ] {
        assert_error(&run(None, &args, None, &[]), &says);
    }
}

/// `train-ranker` checks its arguments before loading data or training.
#[test]
fn train_ranker_checks_arguments_first() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("a-file");
    std::fs::write(&file, b"x").unwrap();
    let out_dir = tmp.path().join("model");
    let tasks = common::fixture("tasks");
    let timings = common::fixture("timings/h200.json");
    let base = |extra: &[&str]| -> Vec<String> {
        let mut v: Vec<String> = vec![
            "train-ranker".into(),
            "--tasks".into(),
            tasks.display().to_string(),
            "--timings".into(),
            timings.display().to_string(),
        ];
        v.extend(extra.iter().map(|s| s.to_string()));
        v
    };
    let out = out_dir.display().to_string();
    let inside_file = file.join("model").display().to_string();
    for (extra, says) in [
        (
            vec!["--out", &out, "--epochs", "0"],
            vec!["--epochs must be at least 1"],
        ),
        (vec!["--out", &out, "--cv", "1"], vec!["--cv must be 0"]),
        (
            vec!["--out", &out, "--cv", "999"],
            vec!["--cv 999", "folds"],
        ),
        (vec!["--out", &inside_file], vec!["--out", "a-file"]),
        (
            vec!["--out", &out, "--plot", "curve.jpg"],
            vec!["--plot", "PNG"],
        ),
        (vec!["--out", &out, "--ngrams", "100000"], vec!["--ngrams"]),
    ] {
        let args = base(&extra);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let started = std::time::Instant::now();
        let o = run(None, &args, None, &[]);
        assert_error(&o, &says);
        // Refused before the 300 training epochs (several seconds even in release).
        assert!(
            !stderr(&o).contains("train loss") && !stderr(&o).contains("samples,"),
            "{extra:?} trained first: {}",
            stderr(&o)
        );
        assert!(started.elapsed() < Duration::from_secs(60));
    }
    let missing = base(&["--out", &out]);
    let mut missing: Vec<&str> = missing.iter().map(String::as_str).collect();
    missing[2] = "/no/such/tasks";
    assert_error(
        &run(None, &missing, None, &[]),
        &["--tasks", "/no/such/tasks"],
    );
}

/// An unusable `--cache-dir` or `--arch` is an error naming the flag, not silence.
#[test]
fn unusable_cache_dir_and_arch_are_errors() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("a-file");
    std::fs::write(&file, b"x").unwrap();
    let cache = file.join("cache");
    let task = common::fixture("tasks/vector_add");
    let cand = common::fixture("tasks/vector_add/reference.cu");
    let (task, cand) = (task.to_str().unwrap(), cand.to_str().unwrap());
    assert_error(
        &run(
            None,
            &[
                "score",
                "--task",
                task,
                cand,
                "--cache-dir",
                cache.to_str().unwrap(),
            ],
            None,
            &[],
        ),
        &["--cache-dir", "a-file"],
    );
    assert_error(
        &run(
            None,
            &["score", "--task", task, cand, "--arch", "sm_9x"],
            None,
            &[],
        ),
        &["--arch", "sm_9x"],
    );
    if common::nvrtc_available() {
        assert_error(
            &run(
                None,
                &["score", "--task", task, cand, "--arch", "sm_10"],
                None,
                &[],
            ),
            &["--arch", "sm_10", "not supported", "sm_90"],
        );
    }
}

/// `-` reads a completion from standard input (once).
#[test]
fn stdin_is_a_completion() {
    let task = common::fixture("tasks/vector_add");
    let task = task.to_str().unwrap();
    let o = run(
        None,
        &["score", "--task", task, "-", "--json"],
        Some("Sorry, no kernel today."),
        &[],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["file"], "<stdin>");
    assert_eq!(v["verdict"], "extract_error");
    assert_eq!(v["stages"]["extract"]["error_kind"], "no_code_block");
    assert_error(
        &run(None, &["score", "--task", task, "-", "-"], Some("x"), &[]),
        &["standard input", "once"],
    );
    if common::nvrtc_available() {
        let completion = format!(
            "```cuda\n{}```\n",
            common::read_fixture("tasks/vector_add/reference.cu")
        );
        let o = run(
            None,
            &["features", "-", "--task", task, "--json"],
            Some(&completion),
            &[],
        );
        assert!(o.status.success(), "{}", stderr(&o));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        assert!(v["score"].is_number(), "{v}");
    }
}

/// `rank` uses the model built into the binary, from any folder; `$CUDAPERF_RANKER_MODEL`
/// or `--model` replace it (and an unreadable one is an error naming it).
#[test]
fn rank_works_from_any_folder_with_the_embedded_model() {
    let elsewhere = tempfile::tempdir().unwrap();
    let task = common::fixture("tasks/vector_add");
    let fast = common::fixture("tasks/vector_add/vectorized_float4.cu");
    let slow = common::fixture("tasks/vector_add/strided_blocks.cu");
    let args = [
        "rank",
        "--task",
        task.to_str().unwrap(),
        fast.to_str().unwrap(),
        slow.to_str().unwrap(),
        "--json",
    ];
    let o = run(Some(elsewhere.path()), &args, None, &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["model"], "<shipped ranker>");
    assert_eq!(v["predicted_faster"], fast.to_str().unwrap(), "{v}");
    let o = run(
        Some(elsewhere.path()),
        &args,
        None,
        &[("CUDAPERF_RANKER_MODEL", "/no/such/model")],
    );
    assert_error(&o, &["/no/such/model"]);
    let shipped = common::fixture("models/ranker");
    let mut with_model = args.to_vec();
    with_model.extend(["--model", shipped.to_str().unwrap()]);
    let o = run(Some(elsewhere.path()), &with_model, None, &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    let w: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        w["score_a"], v["score_a"],
        "the folder is the embedded model"
    );
}

/// `rank` with a model that uses launch-plan features resolves each file's plan on the
/// task's timed config; a file whose plan does not resolve is an error naming it.
#[test]
fn rank_with_a_launch_feature_model() {
    use cudaperf::ranker::{ranking_data, train, FeatureSet, RankerConfig};
    let ds = cudaperf::dataset::Dataset::load(common::fixture("tasks")).unwrap();
    let t = cudaperf::timings::Timings::load(common::fixture("timings/h200.json")).unwrap();
    let set = FeatureSet {
        launch: true,
        traffic: true,
        ngram_buckets: 0,
    };
    let data = ranking_data(&ds, &t, &set).unwrap();
    let (model, _) = train(&data, &RankerConfig::new().with_epochs(5), |_| {}).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let model_dir = dir.path().join("model");
    model.save(&model_dir).unwrap();
    let task = common::fixture("tasks/histogram_256");
    let a = common::fixture("tasks/histogram_256/reference.cu");
    let b = common::fixture("tasks/histogram_256/shared_privatized.cu");
    let args = |b: &Path| {
        vec![
            "rank".to_string(),
            "--task".into(),
            task.display().to_string(),
            a.display().to_string(),
            b.display().to_string(),
            "--model".into(),
            model_dir.display().to_string(),
            "--json".into(),
        ]
    };
    let owned = args(&b);
    let o = run(
        None,
        &owned.iter().map(String::as_str).collect::<Vec<_>>(),
        None,
        &[],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(
        v["prob_a_faster"].as_f64().is_some_and(f64::is_finite),
        "{v}"
    );

    let broken = dir.path().join("broken.cu");
    let source = std::fs::read_to_string(&b).unwrap();
    std::fs::write(&broken, source.replace("block=(256)", "block=(2048)")).unwrap();
    let owned = args(&broken);
    let o = run(
        None,
        &owned.iter().map(String::as_str).collect::<Vec<_>>(),
        None,
        &[],
    );
    assert_error(&o, &["broken.cu", "launch-plan"]);
}
