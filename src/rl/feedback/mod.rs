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
//! use cudaperf::pipeline::report::RewardReport;
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let task = Task::load(concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/tasks/vector_add"))?;
//! let report = RewardReport { value: -1.0, ..Default::default() }; // nothing extracted
//! let fb = feedback(&task, &report, "", &FeedbackOptions::default());
//! assert!(fb.text().starts_with("No candidate"));
//! # Ok(()) }
//! ```

use std::fmt::{self, Write};

use serde::{Deserialize, Serialize};

use crate::exec::TimingStage;
use crate::pipeline::report::RewardReport;
use crate::pipeline::{Stage, Verdict};
use crate::task::Task;

mod compile_log;
mod kind;
mod structure;
mod text;
mod verdicts;

pub use kind::{priority, ItemKind};

use text::{char_len, fmt_us, render_item_into, truncate_chars, LineIndex};

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
    /// What it is about (serialised as its snake_case name: `compile_error`, `cuda_error`,
    /// `mismatch`, `speedup`, `withheld`, `strided_access`, `bank_conflict`, ...).
    pub kind: ItemKind,
    /// The 1-based source line it points at, if any.
    pub line: Option<u32>,
    /// The text (without the quoted source line).
    pub message: String,
    /// The source line, trimmed, when [`FeedbackOptions::quote_source`] is set.
    pub quote: Option<String>,
    /// Order within the same importance (higher first; see [`priority`]).
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

/// What every part of the feedback reads: the task, the report and the options.
struct Facts<'a> {
    task: &'a Task,
    report: &'a RewardReport,
    opts: &'a FeedbackOptions,
    /// ` Reward 0.123.` when the report has a value, for the summary line.
    reward: String,
}

/// The items found so far, each with its source line quoted when asked.
struct Items<'a> {
    items: Vec<FeedbackItem>,
    lines: &'a LineIndex<'a>,
    quote_source: bool,
}

impl Items<'_> {
    fn push(
        &mut self,
        importance: Importance,
        kind: ItemKind,
        line: Option<u32>,
        message: String,
        severity: u32,
    ) {
        let quote = self.quote(line);
        self.items.push(FeedbackItem {
            importance,
            kind,
            line,
            message,
            quote,
            severity,
        });
    }

    /// Line `line` of the source, trimmed and shortened, when quoting is on.
    fn quote(&self, line: Option<u32>) -> Option<String> {
        if !self.quote_source {
            return None;
        }
        let l = self.lines.line(line?)?.trim();
        (!l.is_empty()).then(|| truncate_chars(l, 120))
    }

    /// The items in display order: importance, then severity (higher first), then line.
    fn sorted(mut self) -> Vec<FeedbackItem> {
        self.items.sort_by(|a, b| {
            a.importance
                .cmp(&b.importance)
                .then(b.severity.cmp(&a.severity))
                .then(a.line.cmp(&b.line))
        });
        self.items
    }
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
    let verdict = report.stages.outcome(Stage::Timing).verdict;
    let lines = LineIndex::new(source);
    let mut items = Items {
        items: Vec::new(),
        lines: &lines,
        quote_source: opts.quote_source,
    };
    let facts = Facts {
        task,
        report,
        opts,
        reward: if report.value.is_finite() {
            format!(" Reward {:.3}.", report.value)
        } else {
            String::new()
        },
    };
    let summary = match verdict {
        Verdict::ExtractError => verdicts::extract_error(&facts, &mut items),
        Verdict::CompileError => verdicts::compile_error(&facts, &mut items),
        Verdict::InvalidLaunch => verdicts::invalid_launch(&facts, &mut items),
        Verdict::CudaError => verdicts::cuda_error(&facts, &mut items),
        Verdict::Timeout => verdicts::timeout(&facts, &mut items),
        Verdict::Crashed => verdicts::crashed(&facts, &mut items),
        Verdict::ReferenceFailed => verdicts::reference_failed(&facts),
        Verdict::Incorrect => verdicts::incorrect(&facts, &mut items),
        Verdict::Correct => verdicts::correct(&facts, &mut items),
        Verdict::Unavailable | Verdict::Extracted | Verdict::Compiled => {
            verdicts::not_run(&facts, verdict, &mut items)
        }
    };
    // Structure: only for programs that compiled (otherwise the errors come first and the
    // analysis of broken code is noise).
    if report
        .stages
        .compile
        .as_ref()
        .is_some_and(|c| c.is_compiled())
    {
        structure::findings(&facts, &lines, &mut items);
        structure::ranker_note(&facts, verdict, &mut items);
    }
    Feedback {
        verdict,
        summary,
        items: items.sorted(),
        max_chars: opts.max_chars,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_bounded_and_counts_what_it_leaves_out() {
        let item = |i: u32| FeedbackItem {
            importance: Importance::Structure,
            kind: ItemKind::Occupancy,
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
    fn kinds_serialise_as_their_names() {
        for kind in [
            ItemKind::CompileError,
            ItemKind::GlobalAtomicInLoop,
            ItemKind::Ranker,
        ] {
            let json = serde_json::to_string(&kind).unwrap();
            assert_eq!(json, format!("\"{kind}\""));
            assert!(kind == kind.as_str());
        }
    }
}
