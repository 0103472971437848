//! One function per verdict: each pushes the items that explain it and returns the summary
//! line.

use std::fmt::Write;

use crate::exec::{ConfigCheck, ExecStatus, TimingStage};
use crate::pipeline::report::CompileStatus;
use crate::pipeline::Verdict;
use crate::task::Task;

use super::compile_log::{compile_errors, syntax_problem};
use super::kind::{priority, ItemKind};
use super::text::{fmt_ratio, fmt_us, fmt_value};
use super::{withheld_reason, Facts, Importance, Items};

/// No candidate: where the code stops parsing, if it does, and why nothing was extracted.
pub(super) fn extract_error(f: &Facts, out: &mut Items) -> String {
    if let Some((line, message)) = syntax_problem(f.report) {
        let (i, k, p) = (
            Importance::Blocking,
            ItemKind::SyntaxError,
            priority::SYNTAX_ALONE,
        );
        out.push(i, k, line, message, p);
    }
    let why = f.report.stages.extract.error();
    let why = why.unwrap_or("no code block was found");
    format!("No candidate could be read: {why}.{}", f.reward)
}

/// NVRTC's errors with their lines (then where the code stops parsing), or why the source
/// was rejected or its compile stopped.
pub(super) fn compile_error(f: &Facts, out: &mut Items) -> String {
    let c = f.report.stages.compile.as_ref();
    let reward = &f.reward;
    match c.map(|c| c.status()) {
        Some(CompileStatus::Error) => compiler_errors(f, c.map_or("", |c| c.log.as_str()), out),
        Some(CompileStatus::Rejected) => format!(
            "The source was rejected before compiling: {}.{reward}",
            c.and_then(|c| c.reason()).unwrap_or("no reason given")
        ),
        Some(CompileStatus::Timeout) => format!(
            "The compile did not finish: {}.{reward}",
            c.and_then(|c| c.reason()).unwrap_or("time limit")
        ),
        Some(CompileStatus::Compiled | CompileStatus::Unavailable) | None => {
            format!("The kernel did not compile.{reward}")
        }
    }
}

/// The errors of a compile log, the first [`super::FeedbackOptions::max_compile_errors`]
/// shown, then the syntax problem.
fn compiler_errors(f: &Facts, log: &str, out: &mut Items) -> String {
    let errors = compile_errors(log);
    let max = f.opts.max_compile_errors;
    let blocking = Importance::Blocking;
    for (i, (line, msg)) in errors.iter().take(max).enumerate() {
        let p = priority::FIRST_COMPILE_ERROR - i as u32;
        out.push(blocking, ItemKind::CompileError, *line, msg.clone(), p);
    }
    if errors.len() > max {
        let m = format!("{} more compile errors not shown", errors.len() - max);
        out.push(blocking, ItemKind::CompileError, None, m, priority::LAST);
    }
    if let Some((line, message)) = syntax_problem(f.report) {
        // After NVRTC's own errors, which say what is wrong.
        let p = if errors.is_empty() {
            priority::SYNTAX_ALONE
        } else {
            priority::SYNTAX_AFTER_COMPILE_ERRORS
        };
        out.push(blocking, ItemKind::SyntaxError, line, message, p);
    }
    format!(
        "Compile error ({} error{}): the kernel did not run.{}",
        errors.len().max(1),
        if errors.len() > 1 { "s" } else { "" },
        f.reward
    )
}

/// The run's status, when the execute stage has one.
fn exec_status<'a>(f: &Facts<'a>) -> Option<&'a ExecStatus> {
    f.report.stages.execute.as_ref().map(|e| &e.status)
}

/// The plan line and why the launch is invalid.
pub(super) fn invalid_launch(f: &Facts, out: &mut Items) -> String {
    if let Some(ExecStatus::InvalidLaunch { reason }) = exec_status(f) {
        let (line, message) = (launch_line(reason), strip_line_prefix(reason));
        let k = ItemKind::InvalidLaunch;
        out.push(
            Importance::Blocking,
            k,
            line,
            message,
            priority::RUN_STOPPED,
        );
    }
    format!("Invalid launch plan: the kernel did not run.{}", f.reward)
}

/// The CUDA error by name, with what it usually means.
pub(super) fn cuda_error(f: &Facts, out: &mut Items) -> String {
    let (name, during) = match exec_status(f) {
        Some(ExecStatus::CudaError { name, during, .. }) => (name.as_str(), during.as_str()),
        _ => ("a CUDA error", ""),
    };
    let mut m = format!("{name} during {during}");
    if let Some(hint) = fault_hint(name) {
        let _ = write!(m, ": {hint}");
    }
    let k = ItemKind::CudaError;
    out.push(Importance::Blocking, k, None, m, priority::RUN_STOPPED);
    format!("Runtime fault: {name}.{}", f.reward)
}

/// The time limit the run was stopped at, and the usual causes.
pub(super) fn timeout(f: &Facts, out: &mut Items) -> String {
    let ms = match exec_status(f) {
        Some(ExecStatus::Timeout { limit_ms }) => *limit_ms,
        _ => 0,
    };
    let m = format!("the run was stopped after {ms} ms: an endless loop, or a barrier some threads of a block never reach");
    let k = ItemKind::Timeout;
    out.push(Importance::Blocking, k, None, m, priority::RUN_STOPPED);
    format!("Timeout: the kernel did not finish.{}", f.reward)
}

/// Why the process running the kernel died.
pub(super) fn crashed(f: &Facts, out: &mut Items) -> String {
    let why = match exec_status(f) {
        Some(ExecStatus::Crashed { reason }) => reason.clone(),
        _ => String::new(),
    };
    let m = format!("the process running the kernel died: {why}");
    let k = ItemKind::Crashed;
    out.push(Importance::Blocking, k, None, m, priority::RUN_STOPPED);
    format!("Crash: the kernel took its process down.{}", f.reward)
}

/// Not the candidate's fault: the summary says so, with the reference's failure.
pub(super) fn reference_failed(f: &Facts) -> String {
    let why = match exec_status(f) {
        Some(ExecStatus::ReferenceFailed { reason }) => reason.clone(),
        _ => String::new(),
    };
    format!("Not judged: the task's reference failed ({why}); this is not the candidate's fault.")
}

/// The first failing configurations, each with its first wrong element.
pub(super) fn incorrect(f: &Facts, out: &mut Items) -> String {
    let c = f.report.stages.correctness.as_ref();
    let configs = c.map_or(&[][..], |c| c.configs.as_slice());
    let failed: Vec<&ConfigCheck> = configs.iter().filter(|k| !k.passed).collect();
    let max = f.opts.max_failed_configs;
    let (i, k) = (Importance::Correctness, ItemKind::Mismatch);
    for (n, check) in failed.iter().take(max).enumerate() {
        let m = mismatch_message(f.task, check);
        out.push(i, k, None, m, priority::FIRST_MISMATCH - n as u32);
    }
    if failed.len() > max {
        let names: Vec<String> = failed[max..]
            .iter()
            .map(|k| format!("`{}`", k.config))
            .collect();
        let m = format!("also wrong on {}", names.join(", "));
        out.push(i, k, None, m, priority::LAST);
    }
    format!(
        "Incorrect: {} of {} configurations passed.{}",
        configs.len() - failed.len(),
        configs.len(),
        f.reward
    )
}

/// The speed: the speedup with its interval and the floor that binds, or why none was
/// awarded.
pub(super) fn correct(f: &Facts, out: &mut Items) -> String {
    let s = &f.report.stages;
    let n = s.correctness.as_ref().map_or(0, |c| c.configs.len());
    let speed = match &s.timing {
        Some(t) => match withheld_reason(t) {
            Some(_) => "no speedup awarded".to_string(),
            None => format!("{}× the reference's speed", fmt_ratio(t.speedup)),
        },
        None => "speed not measured".to_string(),
    };
    if let Some(t) = &s.timing {
        speed_item(f.task, t, out);
    }
    format!("Correct on all {n} configurations; {speed}.{}", f.reward)
}

/// The one item on a correct candidate's measured speed.
fn speed_item(task: &Task, t: &TimingStage, out: &mut Items) {
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
    let (kind, message, p) = match withheld_reason(t) {
        Some(why) => (
            ItemKind::Withheld,
            format!(
                "no speedup awarded: {why}. Measured {}× ({interval}), {times}",
                fmt_ratio(t.raw_speedup)
            ),
            priority::SPEED_PROBLEM,
        ),
        None if t.speedup < 1.0 => (
            ItemKind::Slowdown,
            format!(
                "slower than the reference: {}× ({interval}), {times}{floor}",
                fmt_ratio(t.speedup)
            ),
            priority::SPEED_PROBLEM,
        ),
        None => (
            ItemKind::Speedup,
            format!(
                "speedup {}× ({interval}), {times}{floor}",
                fmt_ratio(t.speedup)
            ),
            priority::SPEEDUP,
        ),
    };
    out.push(Importance::Performance, kind, None, message, p);
}

/// Nothing failed, but not every stage ran: the reward stopped early, or a stage could not
/// run here (then a note says which and why).
pub(super) fn not_run(f: &Facts, verdict: Verdict, out: &mut Items) -> String {
    let s = &f.report.stages;
    if verdict == Verdict::Unavailable {
        let compile_unavailable = s
            .compile
            .as_ref()
            .filter(|c| c.status() == CompileStatus::Unavailable);
        let note = match (exec_status(f), compile_unavailable) {
            (Some(ExecStatus::Unavailable { reason }), _) => {
                Some(format!("correctness and speed need a GPU: {reason}"))
            }
            (_, Some(c)) => Some(format!(
                "compile stage unavailable: {}",
                c.reason().unwrap_or("")
            )),
            _ => None,
        };
        if let Some(m) = note {
            let k = ItemKind::NotMeasured;
            out.push(Importance::Note, k, None, m, priority::LAST);
        }
    }
    if s.compile.as_ref().is_some_and(|c| c.is_compiled()) {
        format!(
            "Compiles; correctness and speed were not measured.{}",
            f.reward
        )
    } else {
        format!("Not evaluated: a stage could not run here.{}", f.reward)
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

/// `line 3, config ...: smem = ...` → 3 (the plan line of an invalid launch).
pub(super) fn launch_line(reason: &str) -> Option<u32> {
    reason
        .strip_prefix("line ")?
        .split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}

pub(super) fn strip_line_prefix(reason: &str) -> String {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn launch_lines_are_read_from_the_reason() {
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
