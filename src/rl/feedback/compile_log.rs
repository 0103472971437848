//! Reading what the compiler and the parser said: NVRTC/ptxas errors with their lines, and
//! where the code stops parsing.

use std::fmt::Write;

use crate::pipeline::report::{CompileStatus, RewardReport};

use super::text::truncate_chars;

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
pub(super) fn syntax_problem(report: &RewardReport) -> Option<(Option<u32>, String)> {
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
        .is_some_and(|c| c.status() == CompileStatus::Error);
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
pub(super) fn compile_errors(log: &str) -> Vec<(Option<u32>, String)> {
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
