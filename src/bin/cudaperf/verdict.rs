//! The one-line reason an evaluation is not correct, for the plain-text lines of `score`
//! and `measure` and the `reason` of a timings file.
//!
//! The library is to own this decision (one verdict authority for the report, the server,
//! the CLI and the feedback); when it does, [`first_reason`]'s body becomes one call to it.

use cudaperf::reward::Stages;

/// The first stage that failed and why, in one line: the extract error, the compile
/// reason (or the first lines of its log), the first failing config, else the GPU run's
/// status (`not run` when there was none).
pub fn first_reason(stages: &Stages) -> String {
    if let Some(err) = &stages.extract.error {
        return err.clone();
    }
    if let Some(c) = stages.compile.as_ref().filter(|c| !c.ok) {
        return c
            .reason
            .clone()
            .unwrap_or_else(|| c.log.lines().take(3).collect::<Vec<_>>().join(" "));
    }
    if let Some(c) = &stages.correctness {
        if let Some(f) = c.configs.iter().find(|c| !c.passed) {
            return format!("config {}: {}", f.config, f.reasons.join("; "));
        }
    }
    stages
        .execute
        .as_ref()
        .map(|x| format!("{:?}", x.status))
        .unwrap_or_else(|| "not run".into())
}

/// `text` on one line: line breaks inside a message (an ABI error listing parameters, a
/// compile log) become `; `.
pub fn one_line(text: &str) -> String {
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    lines.join("; ")
}
