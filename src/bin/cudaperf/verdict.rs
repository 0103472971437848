//! The one-line reason an evaluation is not correct, for the plain-text lines of `score`
//! and `measure` and the `reason` of a timings file.
//!
//! The library owns this decision (`Stages::outcome`, one verdict authority for the report,
//! the server, the CLI and the feedback).

use cudaperf::pipeline::report::Stages;
use cudaperf::pipeline::Stage;

/// The first stage that failed and why, in one line, as the library's one verdict
/// authority (`Stages::outcome`) words it; `not run` when nothing failed and nothing ran.
pub fn first_reason(stages: &Stages) -> String {
    stages
        .outcome(Stage::Timing)
        .reason
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
