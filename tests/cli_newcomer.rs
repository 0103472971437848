//! The newcomer's path through the command line, on the real binary: `tasks list`, the
//! reason on every plain-text `score` line, `score -` with CUDA source or a completion, and
//! a one-line error for a `--task` that is not a task.

mod common;

use std::path::Path;
use std::process::Output;

use cudaperf::task::Task;

/// Runs `cudaperf args...` from the crate root, with `stdin` when given.
fn run(args: &[&str], stdin: Option<&str>) -> Output {
    use std::io::Write;
    use std::process::Stdio;
    let mut child = common::cli()
        .args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn cudaperf");
    if let Some(text) = stdin {
        // A failed write (the program exited first) shows in the output checks.
        let _ = child.stdin.take().unwrap().write_all(text.as_bytes());
    }
    child.wait_with_output().expect("cudaperf runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The JSON report `score --json` prints for one file.
fn score_json(task: &Path, file: &Path) -> serde_json::Value {
    let o = run(
        &[
            "score",
            "--task",
            task.to_str().unwrap(),
            file.to_str().unwrap(),
            "--json",
        ],
        None,
    );
    assert!(o.status.success(), "{}", text(&o.stderr));
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(&o.stdout)))
}

/// `tasks list` shows every task of the crate's folder with its family, buffer dtypes and
/// number of configs, as the tasks themselves say; `--json` gives the same as a list.
#[test]
fn tasks_list_shows_every_task() {
    let ds = cudaperf::dataset::Dataset::load(common::fixture("tasks")).unwrap();
    let o = run(&["tasks", "list"], None);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let out = text(&o.stdout);
    let lines: Vec<&str> = out.lines().collect();
    assert!(
        lines[0].contains("name") && lines[0].contains("family") && lines[0].contains("configs"),
        "{out}"
    );
    assert_eq!(lines.len(), ds.tasks.len() + 1, "{out}");
    let o = run(&["tasks", "list", "--json"], None);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let listed = v.as_array().expect("a list");
    assert_eq!(listed.len(), ds.tasks.len());
    for (entry, task) in listed.iter().zip(&ds.tasks) {
        assert_eq!(entry["name"], task.id.as_str());
        assert_eq!(entry["family"], task.kind.as_str());
        assert_eq!(entry["configs"], task.configs.len());
        for b in task.buffers() {
            let dtypes = entry["dtypes"].as_array().unwrap();
            assert!(dtypes.iter().any(|d| d == b.dtype.as_str()), "{entry}");
        }
        let line = lines
            .iter()
            .find(|l| l.split_whitespace().next() == Some(task.id.as_str()))
            .unwrap_or_else(|| panic!("{} missing from the plain list", task.id));
        assert!(line.contains(task.kind.as_str()), "{line}");
        assert!(line.ends_with(&task.configs.len().to_string()), "{line}");
    }
    // Another folder, given explicitly: one task.
    let tmp = tempfile::tempdir().unwrap();
    copy_task(
        &common::fixture("tasks/vector_add"),
        &tmp.path().join("vector_add"),
    );
    let o = run(
        &["tasks", "list", "--tasks", tmp.path().to_str().unwrap()],
        None,
    );
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_eq!(text(&o.stdout).lines().count(), 2, "{}", text(&o.stdout));
}

fn copy_task(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap().flatten() {
        if e.path().is_file() {
            std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
        }
    }
}

/// Extract errors (an empty file, a 5 MB file, a kernel of another task's ABI): the plain
/// line carries the reason the JSON report gives, on one line.
#[test]
fn plain_score_line_carries_the_reason() {
    let tmp = tempfile::tempdir().unwrap();
    let empty = tmp.path().join("empty.cu");
    std::fs::write(&empty, "").unwrap();
    let huge = tmp.path().join("huge.cu");
    std::fs::write(&huge, "// padding\n".repeat(500_000)).unwrap();
    let vector_add = common::fixture("tasks/vector_add");
    let matmul = common::fixture("tasks/matmul");
    let other_abi = common::fixture("tasks/vector_add/reference.cu");
    for (task, file) in [
        (&vector_add, &empty),
        (&vector_add, &huge),
        (&matmul, &other_abi),
    ] {
        let report = score_json(task, file);
        assert_eq!(report["verdict"], "extract_error", "{report}");
        let reason = report["stages"]["extract"]["error"]
            .as_str()
            .expect("an extract error")
            .to_string();
        let o = run(
            &[
                "score",
                "--task",
                task.to_str().unwrap(),
                file.to_str().unwrap(),
            ],
            None,
        );
        assert!(o.status.success(), "{}", text(&o.stderr));
        let out = text(&o.stdout);
        assert_eq!(out.lines().count(), 1, "{out}");
        let first = reason.lines().next().unwrap();
        assert!(
            out.contains("extract_error") && out.contains("reason: ") && out.contains(first),
            "{file:?}: `{first}` missing from: {out}"
        );
    }
}

/// `score -` takes CUDA source as it is, a completion by its fenced block, and prose as a
/// completion without code.
#[test]
fn score_stdin_takes_source_or_a_completion() {
    let task = common::fixture("tasks/vector_add");
    let task = task.to_str().unwrap();
    let source = common::read_fixture("tasks/vector_add/reference.cu");
    let completion = format!("Here is my kernel.\n\n```cuda\n{source}```\n");
    let args = ["score", "--task", task, "-", "--json"];
    for input in [&source, &completion] {
        let o = run(&args, Some(input));
        assert!(o.status.success(), "{}", text(&o.stderr));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(v["file"], "<stdin>");
        assert_eq!(v["stages"]["extract"]["ok"], true, "{v}");
        assert_eq!(v["stages"]["extract"]["kernels"][0], "vector_add", "{v}");
    }
    let o = run(&args, Some("I could not write this kernel."));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["stages"]["extract"]["error_kind"], "no_code_block", "{v}");
}

/// A `.cu` (or any file that is not a task.toml) given as `--task`: exit code 2 and one
/// line that names the file and says what a task is, for every command that takes a task.
#[test]
fn a_candidate_as_task_is_a_one_line_error() {
    let cu = common::fixture("tasks/vector_add/reference.cu");
    let cu = cu.to_str().unwrap();
    for args in [
        vec!["score", "--task", cu, cu],
        vec!["features", cu, "--task", cu],
        vec!["rank", "--task", cu, cu, cu],
    ] {
        let o = run(&args, None);
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
        assert!(
            err.contains(cu) && err.contains("not a task") && err.contains("task.toml"),
            "{args:?}: {err}"
        );
    }
    // The folder and its task.toml still load.
    let dir = common::fixture("tasks/vector_add");
    assert!(Task::load(&dir).is_ok());
    let toml = dir.join("task.toml");
    let o = run(
        &["features", cu, "--task", toml.to_str().unwrap(), "--json"],
        None,
    );
    assert!(
        !text(&o.stderr).contains("not a task"),
        "{}",
        text(&o.stderr)
    );
}
