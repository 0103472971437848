//! Structural findings that cost speed (strided accesses, bank conflicts, divergent
//! barriers, low occupancy, spills) with the line they point at, and the learned ranker's
//! opinion where speed was not measured.

use crate::analysis::{AccessClass, AccessKind, Features, KernelFeatures, Span};
use crate::pipeline::report::{RankerStage, Stages};
use crate::pipeline::Verdict;

use super::kind::{priority, ItemKind};
use super::text::LineIndex;
use super::{Facts, Importance, Items};
use crate::rl::safety;

/// `(kind, line, message, severity)` of one finding.
type Finding = (ItemKind, Option<u32>, String, u32);

/// The structural findings of a compiled candidate, most severe first; the first
/// [`super::FeedbackOptions::max_findings`] shown, the rest counted.
pub(super) fn findings(f: &Facts, lines: &LineIndex, out: &mut Items) {
    let span_text = |sp: &Span| span_text(lines, sp);
    let is_safety_check = |k: &KernelFeatures, branch: &Span| is_safety_check(f, lines, k, branch);
    let mut found = structural_items(&f.report.stages, &span_text, &is_safety_check);
    found.sort_by(|a, b| b.3.cmp(&a.3).then(a.1.cmp(&b.1)));
    let total = found.len();
    let max = f.opts.max_findings;
    for (kind, line, msg, sev) in found.into_iter().take(max) {
        out.push(Importance::Structure, kind, line, msg, sev);
    }
    if total > max {
        let m = format!("{} more structural findings not shown", total - max);
        let k = ItemKind::MoreFindings;
        out.push(Importance::Structure, k, None, m, priority::LAST);
    }
}

/// The ranker's prediction, shown only where nothing was measured: a measured speed (or a
/// program that does not work) must not be contradicted by it.
pub(super) fn ranker_note(f: &Facts, verdict: Verdict, out: &mut Items) {
    let s = &f.report.stages;
    let unmeasured = s.timing.is_none()
        && matches!(
            verdict,
            Verdict::Correct | Verdict::Compiled | Verdict::Unavailable | Verdict::ReferenceFailed
        );
    if let Some(r) = s
        .ranker
        .as_ref()
        .and_then(RankerStage::scores)
        .filter(|r| unmeasured && r.prob_faster.is_finite())
    {
        let m = format!(
            "speed not measured: from the code alone, the learned ranker gives it a {:.0} % chance of being faster than the reference",
            100.0 * r.prob_faster
        );
        out.push(Importance::Note, ItemKind::Ranker, None, m, priority::LAST);
    }
}

/// The text of a one-line span (an index expression), when short.
fn span_text(lines: &LineIndex, sp: &Span) -> Option<String> {
    if sp.line == 0 || sp.end_line != sp.line || sp.end_column <= sp.column {
        return None;
    }
    let l = lines.line(sp.line)?;
    let t = l
        .get(sp.column as usize - 1..sp.end_column as usize - 1)?
        .trim();
    (!t.is_empty() && t.chars().count() <= 60).then(|| t.to_string())
}

/// The source from a span's start, a few lines on (a condition may span lines).
fn text_at(lines: &LineIndex, line: u32, column: u32) -> Option<String> {
    let first = lines.line(line)?.get(column.saturating_sub(1) as usize..)?;
    let mut t = first.to_string();
    for l in line + 1..line + 8 {
        match lines.line(l) {
            Some(next) => {
                t.push('\n');
                t.push_str(next);
            }
            None => break,
        }
    }
    Some(t)
}

/// Whether a divergent branch is a bounds guard or a single-thread section: safety, never
/// a finding to remove.
fn is_safety_check(f: &Facts, lines: &LineIndex, kernel: &KernelFeatures, branch: &Span) -> bool {
    let (Some(stmt), Some(signature)) = (
        text_at(lines, branch.line, branch.column),
        text_at(lines, kernel.span.line, kernel.span.column),
    ) else {
        return false;
    };
    let sizes = safety::size_names(f.task, &signature);
    safety::if_condition(&stmt)
        .and_then(|c| safety::classify(c, &|w| sizes.iter().any(|s| s == w)))
        .is_some()
}

/// `(kind, line, message, severity)` of every structural finding worth reporting; a
/// divergent branch that `is_safety_check` (a bounds guard, a single-thread section) is not
/// one. One item per (line, message), the first kept.
fn structural_items(
    s: &Stages,
    span_text: &dyn Fn(&Span) -> Option<String>,
    is_safety_check: &dyn Fn(&KernelFeatures, &Span) -> bool,
) -> Vec<Finding> {
    let mut out: Vec<Finding> = Vec::new();
    let features: Option<&Features> = s.structure.as_ref().map(|st| &st.features);
    // Divergent branches shown so far, in every kernel.
    let mut divergent_branches = 0;
    for k in features.iter().flat_map(|f| &f.kernels) {
        global_access_items(k, span_text, &mut out);
        sync_and_shared_items(k, &mut out);
        divergence_items(k, is_safety_check, &mut divergent_branches, &mut out);
    }
    let kernel_line = |name: &str| {
        features
            .and_then(|f| f.kernels.iter().find(|k| k.name == name))
            .and_then(|k| line_of(&k.span))
    };
    spill_items(s, &kernel_line, &mut out);
    occupancy_items(s, &kernel_line, &mut out);
    // The list is short, so no hashing.
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

/// The line a span starts on, when known.
fn line_of(sp: &Span) -> Option<u32> {
    (sp.line > 0).then_some(sp.line)
}

/// Strided and indirect global accesses; accesses on one line with the same reason become
/// one item.
fn global_access_items(
    k: &KernelFeatures,
    span_text: &dyn Fn(&Span) -> Option<String>,
    out: &mut Vec<Finding>,
) {
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
        let l = line_of(&a.span);
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
            let message = format!(
                "global {list} {} not coalesced{}: {reason}",
                if g.descs.len() > 1 { "are" } else { "is" },
                if g.in_loop { " (inside a loop)" } else { "" }
            );
            let p = if g.in_loop {
                priority::STRIDED_IN_LOOP
            } else {
                priority::STRIDED
            };
            out.push((ItemKind::StridedAccess, g.line, message, p));
        } else {
            let message = format!("global {list}: {reason}");
            out.push((
                ItemKind::IndirectAccess,
                g.line,
                message,
                priority::INDIRECT_ACCESS,
            ));
        }
    }
}

/// Barrier hazards, global atomics in loops, and shared-memory bank conflicts.
fn sync_and_shared_items(k: &KernelFeatures, out: &mut Vec<Finding>) {
    for x in &k.sync.findings {
        let (kind, p) = match x.kind.as_str() {
            "divergent_barrier" => (ItemKind::DivergentBarrier, priority::DIVERGENT_BARRIER),
            "barrier_after_return" => (ItemKind::BarrierAfterReturn, priority::SYNC_HAZARD),
            "global_atomic_in_loop" => (ItemKind::GlobalAtomicInLoop, priority::SYNC_HAZARD),
            _ => continue,
        };
        out.push((kind, line_of(&x.span), x.reason.clone(), p));
    }
    for x in &k.shared.findings {
        let (kind, p) = match x.kind.as_str() {
            "bank_conflict" => (ItemKind::BankConflict, priority::BANK_CONFLICT),
            "possible_bank_conflict" => (
                ItemKind::PossibleBankConflict,
                priority::POSSIBLE_BANK_CONFLICT,
            ),
            _ => continue,
        };
        let message = format!("shared memory: {}", x.reason);
        out.push((kind, line_of(&x.span), message, p));
    }
}

/// Interleaved reductions, and divergent branches that are not safety checks while fewer
/// than two have been shown (`shown` counts them over every kernel: many are usual and
/// harmless).
fn divergence_items(
    k: &KernelFeatures,
    is_safety_check: &dyn Fn(&KernelFeatures, &Span) -> bool,
    shown: &mut usize,
    out: &mut Vec<Finding>,
) {
    for x in &k.divergence.findings {
        let line = line_of(&x.span);
        match x.kind.as_str() {
            "interleaved_modulo" => {
                let p = priority::INTERLEAVED_REDUCTION;
                out.push((ItemKind::InterleavedReduction, line, x.reason.clone(), p));
            }
            "divergent_branch" if *shown < 2 && !is_safety_check(k, &x.span) => {
                *shown += 1;
                let p = priority::DIVERGENT_BRANCH;
                out.push((ItemKind::DivergentBranch, line, x.reason.clone(), p));
            }
            _ => {}
        }
    }
}

/// Kernels that spill registers to local memory.
fn spill_items(s: &Stages, kernel_line: &dyn Fn(&str) -> Option<u32>, out: &mut Vec<Finding>) {
    for r in s.compile.iter().flat_map(|c| c.kernels()) {
        if r.spill_store_bytes + r.spill_load_bytes == 0 {
            continue;
        }
        let message = format!(
            "kernel `{}` spills registers to local memory ({} bytes stored, {} loaded; {} registers per thread)",
            r.name, r.spill_store_bytes, r.spill_load_bytes, r.registers
        );
        out.push((
            ItemKind::Spills,
            kernel_line(&r.name),
            message,
            priority::SPILLS,
        ));
    }
}

/// Launches whose theoretical occupancy is below one half, with what limits it.
fn occupancy_items(s: &Stages, kernel_line: &dyn Fn(&str) -> Option<u32>, out: &mut Vec<Finding>) {
    let Some(st) = &s.structure else { return };
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
        let message = format!(
            "kernel `{}` with blocks of {} threads: theoretical occupancy {:.0} %, limited by {limit}",
            o.kernel,
            o.block_threads,
            100.0 * o.occupancy
        );
        let line = kernel_line(o.kernel.split('<').next().unwrap_or(&o.kernel));
        out.push((ItemKind::Occupancy, line, message, priority::LOW_OCCUPANCY));
    }
}
