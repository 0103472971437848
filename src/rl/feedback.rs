//! Feedback for the next turn: what went wrong or right with a candidate, in the words and
//! line numbers a policy can act on, ordered by importance and bounded in length.
//!
//! Order: a one-line summary (verdict and reward), then what stopped the program from running
//! (compile errors with their lines, the runtime fault by name, an invalid launch), then what
//! made it wrong (the first mismatch: config, buffer, index, got/want, and why), then its speed
//! (speedup with its 95 % interval, or why none was awarded, and the physical floor that
//! binds: memory traffic or arithmetic), then the structural findings that cost speed
//! (strided global accesses, bank conflicts, divergent barriers, occupancy limits, spills)
//! with the source line they point at, then notes (the learned ranker's opinion when speed
//! was not measured, stages that could not run here). Bounds guards (`row < m && col < n`)
//! and single-thread sections (`tid == 0`) are safety, never findings to remove; a syntax
//! problem is shown with its line, and with the penalty it costs where the reward applied
//! one. Items that do not fit in [`FeedbackOptions::max_chars`] are counted, not shown.
//!
//! ```
//! use cudaperf::rl::{feedback, FeedbackOptions};
//! use cudaperf::task::Task;
//! use cudaperf::RewardReport;
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let task = Task::load(concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/tasks/vector_add"))?;
//! let report = RewardReport { value: -1.0, ..Default::default() }; // nothing extracted
//! let fb = feedback(&task, &report, "", &FeedbackOptions::default());
//! assert!(fb.text().starts_with("No candidate"));
//! # Ok(()) }
//! ```

use std::fmt::{self, Write};

use serde::{Deserialize, Serialize};

use crate::analysis::{AccessClass, AccessKind, Features, KernelFeatures, Span};
use crate::exec::{ConfigCheck, ExecStatus, TimingStage};
use crate::pipeline::CompileStatus;
use crate::reward::{RewardReport, Stage, Stages, Verdict};
use crate::task::Task;

use super::safety;

/// Settings of [`feedback`]; every field has a documented default.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct FeedbackOptions {
    /// Longest text, in characters (default 1500).
    pub max_chars: usize,
    /// Compile errors shown (default 3).
    pub max_compile_errors: usize,
    /// Failing configurations shown (default 2).
    pub max_failed_configs: usize,
    /// Structural findings shown (default 5).
    pub max_findings: usize,
    /// Quote the source line under an item that points at one (default true).
    pub quote_source: bool,
}

impl Default for FeedbackOptions {
    fn default() -> Self {
        FeedbackOptions {
            max_chars: 1500,
            max_compile_errors: 3,
            max_failed_configs: 2,
            max_findings: 5,
            quote_source: true,
        }
    }
}

/// How much an item matters; items are shown in this order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Importance {
    /// The program did not run: no candidate, compile error, invalid launch, fault, timeout.
    Blocking,
    /// It ran and gave wrong results.
    Correctness,
    /// Its measured speed.
    Performance,
    /// A structural finding that costs speed.
    Structure,
    /// Context that needs no action (the ranker's opinion, stages not run here).
    Note,
}

/// One piece of feedback.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FeedbackItem {
    /// How much it matters.
    pub importance: Importance,
    /// Snake_case tag (`compile_error`, `cuda_error`, `mismatch`, `speedup`, `withheld`,
    /// `strided_access`, `bank_conflict`, `divergent_barrier`, `occupancy`, `spills`, ...).
    pub kind: String,
    /// The 1-based source line it points at, if any.
    pub line: Option<u32>,
    /// The text (without the quoted source line).
    pub message: String,
    /// The source line, trimmed, when [`FeedbackOptions::quote_source`] is set.
    pub quote: Option<String>,
    /// Order within the same importance (higher first).
    pub severity: u32,
}

/// Feedback on one candidate: a summary line and items, most important first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Feedback {
    /// The verdict of the report.
    pub verdict: Verdict,
    /// One line: verdict and reward.
    pub summary: String,
    /// Every item, in display order (the text may show fewer).
    pub items: Vec<FeedbackItem>,
    /// The length bound of [`Feedback::text`].
    pub max_chars: usize,
}

impl Feedback {
    /// The text shown to the policy: at most `max_chars` characters.
    pub fn text(&self) -> String {
        let max = self.max_chars.max(1);
        // Characters are mostly ASCII: one allocation for the whole text.
        let mut out = String::with_capacity(max.min(1 << 16) + 64);
        out.push_str(&truncate_chars(&self.summary, max));
        let mut used = out.chars().count();
        // Room kept for the "omitted" line.
        const RESERVE: usize = 40;
        let mut omitted = 0;
        for (i, item) in self.items.iter().enumerate() {
            if omitted > 0 {
                omitted += 1;
                continue;
            }
            // Rendered in place, taken back if it does not fit.
            let mark = out.len();
            out.push('\n');
            render_item_into(&mut out, item);
            let len = char_len(&out[mark..]);
            let last = i + 1 == self.items.len();
            let room = if last {
                max
            } else {
                max.saturating_sub(RESERVE)
            };
            if used + len <= room {
                used += len;
            } else {
                out.truncate(mark);
                omitted += 1;
            }
        }
        if omitted > 0 {
            let note = format!(
                "\n({omitted} more item{} omitted)",
                if omitted == 1 { "" } else { "s" }
            );
            if used + note.chars().count() <= max {
                out.push_str(&note);
            }
        }
        out
    }
}

impl fmt::Display for Feedback {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text())
    }
}

fn render_item_into(s: &mut String, item: &FeedbackItem) {
    s.push_str("- ");
    if let Some(l) = item.line {
        let _ = write!(s, "line {l}: ");
    }
    s.push_str(&item.message);
    if let Some(q) = &item.quote {
        s.push_str("\n    ");
        s.push_str(q);
    }
}

/// The lines of a source, split only as far as the furthest line asked for (most findings
/// sit in the kernel body; the rest of the file need not be scanned).
struct LineIndex<'a> {
    /// Lines found so far, and the text not yet split.
    state: std::cell::RefCell<(Vec<&'a str>, &'a str)>,
}

impl<'a> LineIndex<'a> {
    fn new(source: &'a str) -> LineIndex<'a> {
        LineIndex {
            state: std::cell::RefCell::new((Vec::new(), source)),
        }
    }

    /// Line `n` (1-based), without its line ending.
    fn line(&self, n: u32) -> Option<&'a str> {
        let want = (n as usize).checked_sub(1)?;
        let mut st = self.state.borrow_mut();
        let (lines, rest) = &mut *st;
        while lines.len() <= want && !rest.is_empty() {
            let (line, tail) = match memchr::memchr(b'\n', rest.as_bytes()) {
                Some(i) => (&rest[..i], &rest[i + 1..]),
                None => (*rest, ""),
            };
            lines.push(line.strip_suffix('\r').unwrap_or(line));
            *rest = tail;
        }
        lines.get(want).copied()
    }
}

/// Characters in `s` (bytes when ASCII, the common case: no decoding).
fn char_len(s: &str) -> usize {
    if s.is_ascii() {
        s.len()
    } else {
        s.chars().count()
    }
}

fn truncate_chars(s: &str, max: usize) -> String {
    // A string of at most `max` bytes has at most `max` characters.
    if s.len() <= max || char_len(s) <= max {
        return s.to_string();
    }
    let mut t: String = s.chars().take(max.saturating_sub(1)).collect();
    t.push('…');
    t
}

/// Why no speedup was awarded for a timed, correct candidate; `None` when one was.
///
/// The single place that reads the timing protocol's verdict fields, so a new reason (a
/// reference whose timing was unstable, a protocol that states its own reason) is one line
/// here.
pub fn withheld_reason(t: &TimingStage) -> Option<String> {
    if t.implausible {
        let floor = t.floor_us.max(t.compute_floor_us);
        return Some(format!(
            "the measured time ({}) is below the physical floor ({} {}), so the measurement cannot be trusted",
            fmt_us(t.candidate_us),
            fmt_us(floor),
            if t.compute_floor_us > t.floor_us {
                "to do the task's arithmetic at the device's peak rate"
            } else {
                "to move the bytes the kernel must read and write at full memory bandwidth"
            }
        ));
    }
    if t.unstable && t.raw_speedup > 1.0 {
        return Some(format!(
            "the reference's own timing was unusually noisy in this measurement ({:.1} % spread against {:.1} % normally), so no gain is awarded",
            100.0 * t.reference_spread,
            100.0 * t.reference_calibration
        ));
    }
    if t.within_noise {
        return Some(format!(
            "the difference from the reference is within the measurement noise (±{:.1} %), so it counts as no change",
            100.0 * t.noise_floor
        ));
    }
    None
}

/// The prompt of the next turn: the task prompt, the previous code, and the feedback on it.
pub fn next_turn_prompt(task: &Task, previous_code: &str, feedback: &Feedback) -> String {
    let mut p = task.prompt();
    if !p.ends_with('\n') {
        p.push('\n');
    }
    let _ = write!(
        p,
        "\nYour previous answer:\n```cuda\n{}\n```\n\nWhat happened when it was evaluated:\n{}\n\n{}",
        previous_code.trim_end(),
        feedback.text(),
        match feedback.verdict {
            Verdict::Correct => "Make it faster while keeping it correct on every size: address the findings above, and keep the bounds checks. Answer with one ```cuda code block in the same format.\n",
            _ => "Fix the problems above first, then make it fast. Answer with one ```cuda code block in the same format.\n",
        }
    );
    p
}

/// Feedback on a candidate from its report and source (the code that was evaluated: line
/// numbers in the report refer to it).
pub fn feedback(
    task: &Task,
    report: &RewardReport,
    source: &str,
    opts: &FeedbackOptions,
) -> Feedback {
    let s = &report.stages;
    let verdict = Verdict::of(s, Stage::Timing);
    let lines = LineIndex::new(source);
    let line_of = |n: u32| lines.line(n);
    let quote = |line: Option<u32>| -> Option<String> {
        if !opts.quote_source {
            return None;
        }
        let l = line_of(line?)?.trim();
        (!l.is_empty()).then(|| truncate_chars(l, 120))
    };
    // The text of a one-line span (an index expression), when short.
    let span_text = |sp: &Span| -> Option<String> {
        if sp.line == 0 || sp.end_line != sp.line || sp.end_column <= sp.column {
            return None;
        }
        let l = line_of(sp.line)?;
        let t = l
            .get(sp.column as usize - 1..sp.end_column as usize - 1)?
            .trim();
        (!t.is_empty() && t.chars().count() <= 60).then(|| t.to_string())
    };
    let mut items: Vec<FeedbackItem> = Vec::new();
    let mut push = |importance, kind: &str, line: Option<u32>, message: String, severity| {
        items.push(FeedbackItem {
            importance,
            kind: kind.to_string(),
            line,
            message,
            quote: quote(line),
            severity,
        });
    };
    let reward = if report.value.is_finite() {
        format!(" Reward {:.3}.", report.value)
    } else {
        String::new()
    };

    let summary = match verdict {
        Verdict::ExtractError => {
            if let Some((line, message)) = syntax_problem(report) {
                push(Importance::Blocking, "syntax_error", line, message, 500);
            }
            let why = s
                .extract
                .error
                .as_deref()
                .unwrap_or("no code block was found");
            format!("No candidate could be read: {why}.{reward}")
        }
        Verdict::CompileError => {
            let c = s.compile.as_ref();
            match c.map(|c| c.status.as_str()) {
                Some("error") => {
                    let errors = compile_errors(c.map_or("", |c| c.log.as_str()));
                    for (i, (line, msg)) in errors.iter().take(opts.max_compile_errors).enumerate()
                    {
                        push(
                            Importance::Blocking,
                            "compile_error",
                            *line,
                            msg.clone(),
                            1000 - i as u32,
                        );
                    }
                    if errors.len() > opts.max_compile_errors {
                        push(
                            Importance::Blocking,
                            "compile_error",
                            None,
                            format!(
                                "{} more compile errors not shown",
                                errors.len() - opts.max_compile_errors
                            ),
                            0,
                        );
                    }
                    if let Some((line, message)) = syntax_problem(report) {
                        // After NVRTC's own errors, which say what is wrong.
                        let severity = if errors.is_empty() { 500 } else { 100 };
                        push(
                            Importance::Blocking,
                            "syntax_error",
                            line,
                            message,
                            severity,
                        );
                    }
                    format!(
                        "Compile error ({} error{}): the kernel did not run.{reward}",
                        errors.len().max(1),
                        if errors.len() > 1 { "s" } else { "" }
                    )
                }
                Some("rejected") => format!(
                    "The source was rejected before compiling: {}.{reward}",
                    c.and_then(|c| c.reason.as_deref())
                        .unwrap_or("no reason given")
                ),
                Some("timeout") => format!(
                    "The compile did not finish: {}.{reward}",
                    c.and_then(|c| c.reason.as_deref()).unwrap_or("time limit")
                ),
                _ => format!("The kernel did not compile.{reward}"),
            }
        }
        Verdict::InvalidLaunch => {
            if let Some(ExecStatus::InvalidLaunch { reason }) =
                s.execute.as_ref().map(|e| &e.status)
            {
                push(
                    Importance::Blocking,
                    "invalid_launch",
                    launch_line(reason),
                    strip_line_prefix(reason),
                    900,
                );
            }
            format!("Invalid launch plan: the kernel did not run.{reward}")
        }
        Verdict::CudaError => {
            let (name, during) = match s.execute.as_ref().map(|e| &e.status) {
                Some(ExecStatus::CudaError { name, during, .. }) => {
                    (name.as_str(), during.as_str())
                }
                _ => ("a CUDA error", ""),
            };
            let mut m = format!("{name} during {during}");
            if let Some(hint) = fault_hint(name) {
                let _ = write!(m, ": {hint}");
            }
            push(Importance::Blocking, "cuda_error", None, m, 900);
            format!("Runtime fault: {name}.{reward}")
        }
        Verdict::Timeout => {
            let ms = match s.execute.as_ref().map(|e| &e.status) {
                Some(ExecStatus::Timeout { limit_ms }) => *limit_ms,
                _ => 0,
            };
            push(
                Importance::Blocking,
                "timeout",
                None,
                format!("the run was stopped after {ms} ms: an endless loop, or a barrier some threads of a block never reach"),
                900,
            );
            format!("Timeout: the kernel did not finish.{reward}")
        }
        Verdict::Crashed => {
            let why = match s.execute.as_ref().map(|e| &e.status) {
                Some(ExecStatus::Crashed { reason }) => reason.clone(),
                _ => String::new(),
            };
            push(
                Importance::Blocking,
                "crashed",
                None,
                format!("the process running the kernel died: {why}"),
                900,
            );
            format!("Crash: the kernel took its process down.{reward}")
        }
        Verdict::ReferenceFailed => {
            let why = match s.execute.as_ref().map(|e| &e.status) {
                Some(ExecStatus::ReferenceFailed { reason }) => reason.clone(),
                _ => String::new(),
            };
            format!("Not judged: the task's reference failed ({why}); this is not the candidate's fault.")
        }
        Verdict::Incorrect => {
            let c = s.correctness.as_ref();
            let configs = c.map_or(&[][..], |c| c.configs.as_slice());
            let failed: Vec<&ConfigCheck> = configs.iter().filter(|k| !k.passed).collect();
            for (i, k) in failed.iter().take(opts.max_failed_configs).enumerate() {
                push(
                    Importance::Correctness,
                    "mismatch",
                    None,
                    mismatch_message(task, k),
                    800 - i as u32,
                );
            }
            if failed.len() > opts.max_failed_configs {
                let names: Vec<String> = failed[opts.max_failed_configs..]
                    .iter()
                    .map(|k| format!("`{}`", k.config))
                    .collect();
                push(
                    Importance::Correctness,
                    "mismatch",
                    None,
                    format!("also wrong on {}", names.join(", ")),
                    0,
                );
            }
            format!(
                "Incorrect: {} of {} configurations passed.{reward}",
                configs.len() - failed.len(),
                configs.len()
            )
        }
        Verdict::Correct => {
            let n = s.correctness.as_ref().map_or(0, |c| c.configs.len());
            let speed = match &s.timing {
                Some(t) => match withheld_reason(t) {
                    Some(_) => "no speedup awarded".to_string(),
                    None => format!("{}× the reference's speed", fmt_ratio(t.speedup)),
                },
                None => "speed not measured".to_string(),
            };
            format!("Correct on all {n} configurations; {speed}.{reward}")
        }
        Verdict::Unavailable | Verdict::Extracted | Verdict::Compiled => {
            let compiled = s.compile.as_ref().is_some_and(|c| c.ok);
            if compiled {
                format!("Compiles; correctness and speed were not measured.{reward}")
            } else {
                format!("Not evaluated: a stage could not run here.{reward}")
            }
        }
    };

    // Speed.
    if let (Verdict::Correct, Some(t)) = (verdict, &s.timing) {
        let interval = format!(
            "95 % interval {}×–{}×",
            fmt_ratio(t.ci95[0]),
            fmt_ratio(t.ci95[1])
        );
        let times = format!(
            "{} vs {} for the reference on config `{}`",
            fmt_us(t.candidate_us),
            fmt_us(t.reference_us),
            t.config
        );
        let floor = binding_floor(task, t).map_or_else(String::new, |(what, us)| {
            format!(
                "; the {what} floor is {} ({:.0} % of the time)",
                fmt_us(us),
                100.0 * us / t.candidate_us
            )
        });
        match withheld_reason(t) {
            Some(why) => push(
                Importance::Performance,
                "withheld",
                None,
                format!(
                    "no speedup awarded: {why}. Measured {}× ({interval}), {times}",
                    fmt_ratio(t.raw_speedup)
                ),
                700,
            ),
            None if t.speedup < 1.0 => push(
                Importance::Performance,
                "slowdown",
                None,
                format!(
                    "slower than the reference: {}× ({interval}), {times}{floor}",
                    fmt_ratio(t.speedup)
                ),
                700,
            ),
            None => push(
                Importance::Performance,
                "speedup",
                None,
                format!(
                    "speedup {}× ({interval}), {times}{floor}",
                    fmt_ratio(t.speedup)
                ),
                600,
            ),
        }
    }
    if verdict == Verdict::Unavailable {
        if let Some(ExecStatus::Unavailable { reason }) = s.execute.as_ref().map(|e| &e.status) {
            push(
                Importance::Note,
                "not_measured",
                None,
                format!("correctness and speed need a GPU: {reason}"),
                0,
            );
        } else if let Some(c) = s
            .compile
            .as_ref()
            .filter(|c| c.status == CompileStatus::Unavailable)
        {
            push(
                Importance::Note,
                "not_measured",
                None,
                format!(
                    "compile stage unavailable: {}",
                    c.reason.as_deref().unwrap_or("")
                ),
                0,
            );
        }
    }

    // Structure: only for programs that compiled (otherwise the errors come first and the
    // analysis of broken code is noise).
    let compiled = s.compile.as_ref().is_some_and(|c| c.ok);
    if compiled {
        // The source from a span's start, a few lines on (a condition may span lines).
        let text_at = |line: u32, column: u32| -> Option<String> {
            let first = line_of(line)?.get(column.saturating_sub(1) as usize..)?;
            let mut t = first.to_string();
            for l in line + 1..line + 8 {
                match line_of(l) {
                    Some(next) => {
                        t.push('\n');
                        t.push_str(next);
                    }
                    None => break,
                }
            }
            Some(t)
        };
        let is_safety_check = |kernel: &KernelFeatures, branch: &Span| -> bool {
            let (Some(stmt), Some(signature)) = (
                text_at(branch.line, branch.column),
                text_at(kernel.span.line, kernel.span.column),
            ) else {
                return false;
            };
            let sizes = safety::size_names(task, &signature);
            safety::if_condition(&stmt)
                .and_then(|c| safety::classify(c, &|w| sizes.iter().any(|s| s == w)))
                .is_some()
        };
        let mut found = structural_items(s, &span_text, &is_safety_check);
        found.sort_by(|a, b| b.3.cmp(&a.3).then(a.1.cmp(&b.1)));
        let total = found.len();
        for (kind, line, msg, sev) in found.into_iter().take(opts.max_findings) {
            push(Importance::Structure, kind, line, msg, sev);
        }
        if total > opts.max_findings {
            push(
                Importance::Structure,
                "more_findings",
                None,
                format!(
                    "{} more structural findings not shown",
                    total - opts.max_findings
                ),
                0,
            );
        }
        // A prediction, shown only where nothing was measured: a measured speed (or a
        // program that does not work) must not be contradicted by it.
        let unmeasured = s.timing.is_none()
            && matches!(
                verdict,
                Verdict::Correct
                    | Verdict::Compiled
                    | Verdict::Unavailable
                    | Verdict::ReferenceFailed
            );
        if let Some(r) = s
            .ranker
            .as_ref()
            .filter(|r| unmeasured && r.error.is_none() && r.prob_faster.is_finite())
        {
            push(
                Importance::Note,
                "ranker",
                None,
                format!(
                    "speed not measured: from the code alone, the learned ranker gives it a {:.0} % chance of being faster than the reference",
                    100.0 * r.prob_faster
                ),
                0,
            );
        }
    }

    items.sort_by(|a, b| {
        a.importance
            .cmp(&b.importance)
            .then(b.severity.cmp(&a.severity))
            .then(a.line.cmp(&b.line))
    });
    Feedback {
        verdict,
        summary,
        items,
        max_chars: opts.max_chars,
    }
}

/// The physical floor that binds the timed run, `(what, µs)`: memory traffic or arithmetic,
/// whichever is larger. `None` when it is unknown: a task that declares its FLOPs (a
/// compute-bound one) timed on a device without a peak rate, or no floor at all.
fn binding_floor(task: &Task, t: &TimingStage) -> Option<(&'static str, f64)> {
    let known = |us: f64| us.is_finite() && us > 0.0;
    if !t.candidate_us.is_finite() || t.candidate_us <= 0.0 {
        return None;
    }
    if known(t.compute_floor_us) && t.compute_floor_us > t.floor_us {
        return Some(("arithmetic", t.compute_floor_us));
    }
    if task.flops.is_some() && !known(t.compute_floor_us) {
        return None;
    }
    known(t.floor_us).then_some(("memory-traffic", t.floor_us))
}

/// The outcome ladder's value when the reward includes it (an `outcome` term, or the
/// ladder itself).
fn outcome_value(report: &RewardReport) -> Option<f64> {
    report
        .terms
        .iter()
        .find(|t| t.name == "outcome")
        .map(|t| t.value)
        .or_else(|| (report.reward == "outcome").then_some(report.value))
        .filter(|v| v.is_finite())
}

/// `(line, message)` of the syntax problems of code that did not compile or extract: where
/// the parse first failed, how many problems there are, and what they cost when the reward
/// scored them below a compile error in code that parses.
fn syntax_problem(report: &RewardReport) -> Option<(Option<u32>, String)> {
    let syntax = report.stages.syntax.as_ref().filter(|x| !x.ok)?;
    let n = syntax.error_nodes + syntax.missing_nodes;
    let mut m = format!(
        "the code does not parse {}({n} syntax problem{} in all)",
        if syntax.first_error_line.is_some() {
            "from here "
        } else {
            ""
        },
        if n == 1 { "" } else { "s" }
    );
    let compile_error = report
        .stages
        .compile
        .as_ref()
        .is_some_and(|c| c.status == CompileStatus::Error);
    if let Some(v) = outcome_value(report).filter(|v| compile_error && *v < -0.75 - 1e-9) {
        let _ = write!(
            m,
            "; this costs {:.3} of reward: a compile error in code that parses scores -0.750",
            -0.75 - v
        );
    }
    Some((syntax.first_error_line, m))
}

/// `(line, message)` of each error in an NVRTC/ptxas log, in order.
fn compile_errors(log: &str) -> Vec<(Option<u32>, String)> {
    let mut out: Vec<(Option<u32>, String)> = Vec::new();
    let mut noted = false;
    for raw in log.lines() {
        let l = raw.trim();
        if l.contains("detected in the compilation") {
            continue;
        }
        // `candidate.cu(5): note #3196-D: to match this "{"` gives an error at the end of
        // the source the line it is about.
        if let Some((head, note)) = l.split_once("): note") {
            let n = head.rsplit('(').next().and_then(|n| n.parse::<u32>().ok());
            if let (Some(n), Some(last)) = (n, out.last_mut()) {
                if last.0.is_none() && !noted {
                    let text = note.split_once(": ").map_or(note, |x| x.1);
                    last.0 = Some(n);
                    last.1 = format!("{} ({text})", last.1);
                    noted = true;
                }
            }
            continue;
        }
        // `candidate.cu(12): error: ...`, `At end of source: error: ...`,
        // `ptxas error   : Entry function ... uses too much shared data ...`
        let Some(pos) = l.find("error") else { continue };
        let head = &l[..pos];
        let is_error = head.ends_with(": ")
            || head.ends_with("catastrophic ")
            || head.starts_with("ptxas")
            || head.is_empty();
        if !is_error || l[pos..].starts_with("errors") {
            continue;
        }
        let line = head
            .rfind('(')
            .and_then(|i| head[i + 1..].split(')').next())
            .and_then(|n| n.parse::<u32>().ok());
        let msg = l[pos..]
            .trim_start_matches("error")
            .trim_start_matches(|c: char| c == ':' || c.is_whitespace())
            .to_string();
        let msg = if head.starts_with("ptxas") {
            format!("ptxas: {msg}")
        } else if head.starts_with("At end of source") {
            format!("at the end of the source: {msg}")
        } else {
            msg
        };
        out.push((line, truncate_chars(&msg, 200)));
        noted = false;
    }
    out
}

/// `line 3, config ...: smem = ...` → 3 (the plan line of an invalid launch).
fn launch_line(reason: &str) -> Option<u32> {
    reason
        .strip_prefix("line ")?
        .split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}

fn strip_line_prefix(reason: &str) -> String {
    if launch_line(reason).is_some() {
        if let Some((_, rest)) = reason.split_once(", ") {
            return rest.to_string();
        }
    }
    reason.to_string()
}

fn fault_hint(name: &str) -> Option<&'static str> {
    Some(match name {
        "CUDA_ERROR_ILLEGAL_ADDRESS" => "a load or store outside its buffer; check every index against the buffer lengths, including the last partial block",
        "CUDA_ERROR_MISALIGNED_ADDRESS" => "a vector (float2/float4) or wide access at an address not aligned to its size; rows of odd length break float4 alignment",
        "CUDA_ERROR_INVALID_ADDRESS_SPACE" => "an access through a pointer into the wrong memory space or far outside any buffer",
        "CUDA_ERROR_LAUNCH_FAILED" => "the kernel trapped (assert, trap or an unrecoverable fault)",
        "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES" => "the block needs more registers than an SM can give it; use fewer threads per block or fewer registers",
        "CUDA_ERROR_ILLEGAL_INSTRUCTION" => "an illegal instruction was executed",
        "CUDA_ERROR_INVALID_VALUE" => "a launch parameter is out of range (grid, block or shared-memory size)",
        _ => return None,
    })
}

fn mismatch_message(task: &Task, k: &ConfigCheck) -> String {
    let sizes = task
        .config(&k.config)
        .map(|c| {
            let v: Vec<String> = c.sizes.iter().map(|(n, v)| format!("{n} = {v}")).collect();
            format!(" ({})", v.join(", "))
        })
        .unwrap_or_default();
    let mut m = format!("config `{}`{sizes}: ", k.config);
    if k.reasons.is_empty() {
        let _ = write!(
            m,
            "{} of {} output elements differ from the reference",
            k.mismatches, k.elements
        );
    } else {
        m.push_str(&k.reasons.join("; "));
    }
    if let Some(first) = &k.first_mismatch {
        let got = if first.got.is_nan() && k.unwritten > 0 {
            "NaN (never written)".to_string()
        } else {
            fmt_value(first.got)
        };
        let _ = write!(
            m,
            ". First wrong element: `{}`[{}] = {got}, expected {}",
            first.buffer,
            first.index,
            fmt_value(first.want)
        );
    }
    m
}

/// `(kind, line, message, severity)` of every structural finding worth reporting; a
/// divergent branch that `is_safety_check` (a bounds guard, a single-thread section) is not
/// one.
fn structural_items(
    s: &Stages,
    span_text: &dyn Fn(&Span) -> Option<String>,
    is_safety_check: &dyn Fn(&KernelFeatures, &Span) -> bool,
) -> Vec<(&'static str, Option<u32>, String, u32)> {
    let mut out: Vec<(&'static str, Option<u32>, String, u32)> = Vec::new();
    let features: Option<&Features> = s.structure.as_ref().map(|st| &st.features);
    let line = |sp: &Span| (sp.line > 0).then_some(sp.line);
    if let Some(f) = features {
        let mut divergent_branches = 0;
        for k in &f.kernels {
            // Accesses on one line with the same reason become one item.
            struct Group {
                line: Option<u32>,
                reason: String,
                in_loop: bool,
                descs: Vec<String>,
                class: AccessClass,
            }
            let mut groups: Vec<Group> = Vec::new();
            for a in &k.global_accesses.findings {
                if !matches!(a.class, AccessClass::Strided | AccessClass::Indirect) {
                    continue;
                }
                let what = match a.access {
                    AccessKind::Read => "read",
                    AccessKind::Write => "write",
                    AccessKind::ReadWrite => "read-modify-write",
                };
                let expr = span_text(&a.span).unwrap_or_else(|| a.array.clone());
                let desc = format!("{what} `{expr}`");
                let l = line(&a.span);
                match groups
                    .iter_mut()
                    .find(|g| g.line == l && g.reason == a.reason && g.class == a.class)
                {
                    Some(g) => {
                        g.in_loop |= a.in_loop;
                        if !g.descs.contains(&desc) {
                            g.descs.push(desc);
                        }
                    }
                    None => groups.push(Group {
                        line: l,
                        reason: a.reason.clone(),
                        in_loop: a.in_loop,
                        descs: vec![desc],
                        class: a.class,
                    }),
                }
            }
            for g in groups {
                let list = g.descs.join(", ");
                let reason = &g.reason;
                if g.class == AccessClass::Strided {
                    out.push((
                        "strided_access",
                        g.line,
                        format!(
                            "global {list} {} not coalesced{}: {reason}",
                            if g.descs.len() > 1 { "are" } else { "is" },
                            if g.in_loop { " (inside a loop)" } else { "" }
                        ),
                        if g.in_loop { 85 } else { 80 },
                    ));
                } else {
                    out.push((
                        "indirect_access",
                        g.line,
                        format!("global {list}: {reason}"),
                        15,
                    ));
                }
            }
            for x in &k.sync.findings {
                let (kind, sev) = match x.kind.as_str() {
                    "divergent_barrier" => ("divergent_barrier", 100),
                    "barrier_after_return" => ("barrier_after_return", 60),
                    "global_atomic_in_loop" => ("global_atomic_in_loop", 60),
                    _ => continue,
                };
                out.push((kind, line(&x.span), x.reason.clone(), sev));
            }
            for x in &k.shared.findings {
                let (kind, sev) = match x.kind.as_str() {
                    "bank_conflict" => ("bank_conflict", 65),
                    "possible_bank_conflict" => ("possible_bank_conflict", 25),
                    _ => continue,
                };
                out.push((
                    kind,
                    line(&x.span),
                    format!("shared memory: {}", x.reason),
                    sev,
                ));
            }
            for x in &k.divergence.findings {
                match x.kind.as_str() {
                    "interleaved_modulo" => {
                        out.push(("interleaved_reduction", line(&x.span), x.reason.clone(), 70))
                    }
                    // Only the first two divergent branches: many are usual and harmless.
                    "divergent_branch"
                        if divergent_branches < 2 && !is_safety_check(k, &x.span) =>
                    {
                        divergent_branches += 1;
                        out.push(("divergent_branch", line(&x.span), x.reason.clone(), 20));
                    }
                    _ => {}
                }
            }
        }
    }
    let kernel_line = |name: &str| {
        features
            .as_ref()
            .and_then(|f| f.kernels.iter().find(|k| k.name == name))
            .and_then(|k| line(&k.span))
    };
    if let Some(c) = &s.compile {
        for r in &c.kernels {
            let spill = r.spill_store_bytes + r.spill_load_bytes;
            if spill > 0 {
                out.push((
                    "spills",
                    kernel_line(&r.name),
                    format!(
                        "kernel `{}` spills registers to local memory ({} bytes stored, {} loaded; {} registers per thread)",
                        r.name, r.spill_store_bytes, r.spill_load_bytes, r.registers
                    ),
                    55,
                ));
            }
        }
    }
    if let Some(st) = &s.structure {
        for o in st.occupancy.iter().filter(|o| o.occupancy < 0.5) {
            let limit = match o.limiter.as_str() {
                "registers" => format!("registers ({} per thread)", o.registers),
                "shared_memory" => format!("shared memory ({} bytes per block)", o.shared_bytes),
                "blocks" => format!(
                    "the resident-block limit (blocks of {} threads are too small)",
                    o.block_threads
                ),
                other => other.replace('_', " "),
            };
            out.push((
                "occupancy",
                kernel_line(o.kernel.split('<').next().unwrap_or(&o.kernel)),
                format!(
                    "kernel `{}` with blocks of {} threads: theoretical occupancy {:.0} %, limited by {limit}",
                    o.kernel,
                    o.block_threads,
                    100.0 * o.occupancy
                ),
                50,
            ));
        }
    }
    // One item per (line, message), the first kept; the list is short, so no hashing.
    let mut i = 0;
    while i < out.len() {
        if out[..i].iter().any(|o| o.1 == out[i].1 && o.2 == out[i].2) {
            out.remove(i);
        } else {
            i += 1;
        }
    }
    out
}

fn fmt_ratio(x: f64) -> String {
    if !x.is_finite() {
        "?".into()
    } else if x >= 10.0 {
        format!("{x:.1}")
    } else {
        format!("{x:.3}")
    }
}

fn fmt_us(x: f64) -> String {
    if !x.is_finite() {
        "? µs".into()
    } else if x >= 1000.0 {
        format!("{:.2} ms", x / 1000.0)
    } else {
        format!("{x:.1} µs")
    }
}

fn fmt_value(x: f64) -> String {
    if x.is_nan() {
        "NaN".into()
    } else if x.is_infinite() {
        if x > 0.0 { "inf" } else { "-inf" }.into()
    } else if x == 0.0 || (1e-3..1e6).contains(&x.abs()) {
        let s = format!("{x:.6}");
        let s = s.trim_end_matches('0').trim_end_matches('.');
        s.to_string()
    } else {
        format!("{x:.4e}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_index_splits_as_far_as_asked() {
        let idx = LineIndex::new("a\r\nbb\n\nlast");
        assert_eq!(idx.line(2), Some("bb"));
        assert_eq!(idx.state.borrow().0.len(), 2, "line 3 and on not split yet");
        assert_eq!(idx.line(1), Some("a"));
        assert_eq!(idx.line(3), Some(""));
        assert_eq!(idx.line(4), Some("last"));
        assert_eq!(idx.line(5), None);
        assert_eq!(idx.line(0), None);
        assert_eq!(LineIndex::new("").line(1), None);
    }

    #[test]
    fn compile_errors_are_read_with_their_lines() {
        let log = "candidate.cu(7): error: identifier \"foo\" is undefined\n      c[i] = foo;\n             ^\n\ncandidate.cu(9): warning #177-D: variable \"x\" was declared but never referenced\nAt end of source: error: expected a \"}\"\nptxas error   : Entry function 'k' uses too much shared data (0x10018 bytes, 0xc000 max)\n2 errors detected in the compilation of \"candidate.cu\".";
        let e = compile_errors(log);
        assert_eq!(
            e,
            vec![
                (Some(7), "identifier \"foo\" is undefined".to_string()),
                (None, "at the end of the source: expected a \"}\"".to_string()),
                (
                    None,
                    "ptxas: Entry function 'k' uses too much shared data (0x10018 bytes, 0xc000 max)"
                        .to_string()
                ),
            ]
        );
    }

    #[test]
    fn text_is_bounded_and_counts_what_it_leaves_out() {
        let item = |i: u32| FeedbackItem {
            importance: Importance::Structure,
            kind: "x".into(),
            line: Some(i),
            message: "m".repeat(50),
            quote: None,
            severity: 0,
        };
        let fb = Feedback {
            verdict: Verdict::Correct,
            summary: "Correct.".into(),
            items: (1..=20).map(item).collect(),
            max_chars: 300,
        };
        let t = fb.text();
        assert!(t.chars().count() <= 300, "{}", t.chars().count());
        assert!(t.ends_with("more items omitted)"), "{t}");
        let tiny = Feedback { max_chars: 5, ..fb };
        assert!(tiny.text().chars().count() <= 5);
    }

    #[test]
    fn numbers_are_readable() {
        assert_eq!(fmt_value(0.5320000001), "0.532");
        assert_eq!(fmt_value(1e-9), "1.0000e-9");
        assert_eq!(fmt_value(f64::NAN), "NaN");
        assert_eq!(fmt_ratio(8.73618), "8.736");
        assert_eq!(fmt_ratio(12.11), "12.1");
        assert_eq!(fmt_us(4652.96), "4.65 ms");
        assert_eq!(
            launch_line("line 2, config `small_odd`: smem = 1 bytes"),
            Some(2)
        );
        assert_eq!(
            strip_line_prefix("line 2, config `small_odd`: smem"),
            "config `small_odd`: smem"
        );
    }
}
