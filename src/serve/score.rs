//! Scoring one job (a trainer's group for one task): the only place the server and the
//! nodes call the reward pipeline.

use std::time::{Instant, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use super::api::{ItemResult, JobSpec};
use crate::exec::ExecStatus;
use crate::pipeline::report::{RewardReport, Stages};
use crate::pipeline::{Evaluation, Evaluator, Stage, Submission, Verdict};
use crate::reward::{Context, Reward, RewardError, Scored};
use crate::task::Task;

/// What a worker or node sends back for a job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobOutcome {
    /// The reward as the request named it ([`super::api::RewardSpec::name`]).
    pub reward: String,
    /// One result per completion, in order.
    pub results: Vec<ItemResult>,
    /// Wall time of the scoring, milliseconds.
    pub score_ms: f64,
    /// Stage times found in the reports, for the metrics.
    #[serde(default)]
    pub stages: StageTimes,
    /// Who scored it (`local` or the node's name).
    pub scored_by: String,
}

/// Stage latencies of one job, from its reports (milliseconds).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StageTimes {
    /// Compile stage wall times of cache misses.
    pub compile_ms: Vec<f64>,
    /// GPU job wall times.
    pub execute_ms: Vec<f64>,
    /// GPU time of the protocol's own launches, summed.
    pub gpu_ms: f64,
}

/// Milliseconds since the Unix epoch.
pub fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Milliseconds from now until `deadline_unix_ms` (0 once it has passed).
pub fn ms_until(deadline_unix_ms: u64) -> u64 {
    deadline_unix_ms.saturating_sub(unix_ms())
}

/// Scores a group: one result per submission, in the order given (the GPU stages of the
/// group run as shared jobs, see [`Reward::score_batch`]).
pub fn score_group(
    reward: &dyn Reward,
    ctx: &Context,
    subs: &[Submission],
) -> Vec<crate::reward::Result<Scored>> {
    reward.score_batch(ctx, subs)
}

/// The result of a completion that was not scored before the deadline.
pub fn timeout_item(index: usize, deadline_ms: u64) -> ItemResult {
    ItemResult {
        index,
        verdict: Verdict::Timeout,
        value: None,
        reason: Some(format!(
            "the request's deadline ({deadline_ms} ms) passed before this completion was scored"
        )),
        report: None,
        feedback: None,
    }
}

/// Every completion of a job as `unavailable`, with the same reason.
pub fn unavailable_items(n: usize, reason: &str) -> Vec<ItemResult> {
    (0..n)
        .map(|index| ItemResult {
            index,
            verdict: Verdict::Unavailable,
            value: None,
            reason: Some(reason.to_string()),
            report: None,
            feedback: None,
        })
        .collect()
}

/// Scores a job with `reward` (built from `job.reward`) on `task`.
///
/// A job whose deadline has passed is answered `timeout` without running; a panic in the
/// pipeline is caught and answered `unavailable` for the whole group (the server keeps
/// serving).
///
/// With `partial`, each completion's result is put there as soon as it is final — after
/// the stages that need no GPU when the reward reads no more, or when the GPU stages have
/// nothing to run (no code, a compile error, an invalid launch) — so a caller whose
/// deadline passes first can answer those and mark only the rest `timeout`.
pub fn run_job(
    evaluator: &Evaluator,
    task: &Task,
    job: &JobSpec,
    reward: &dyn Reward,
    deadline_ms: u64,
    scored_by: &str,
    partial: Option<&PartialResults>,
) -> JobOutcome {
    let start = Instant::now();
    let n = job.completions.len();
    let asked = job.reward.name();
    let mut outcome = JobOutcome {
        reward: asked.clone(),
        results: Vec::new(),
        score_ms: 0.0,
        stages: StageTimes::default(),
        scored_by: scored_by.to_string(),
    };
    if unix_ms() >= job.deadline_unix_ms {
        outcome.results = (0..n).map(|i| timeout_item(i, deadline_ms)).collect();
        return outcome;
    }
    let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        score_all(evaluator, task, job, reward, partial, &asked)
    }));
    match run {
        Ok((scored, needs, subs)) => {
            // Results put aside earlier are final: only their stage times are still wanted.
            let early: Vec<Option<ItemResult>> = partial.map_or_else(Vec::new, |p| {
                p.lock().unwrap_or_else(|p| p.into_inner()).clone()
            });
            for (index, r) in scored.into_iter().enumerate() {
                let item = match early.get(index).cloned().flatten() {
                    Some(item) => {
                        collect_stage_times(&report_of(&r).stages, &mut outcome.stages);
                        item
                    }
                    None => result_of(
                        task,
                        &subs,
                        index,
                        r,
                        job.report,
                        needs,
                        &asked,
                        Some(&mut outcome.stages),
                    ),
                };
                outcome.results.push(item);
            }
        }
        Err(panic) => {
            let what = panic_message(panic.as_ref());
            tracing::error!("scoring task {} panicked: {what}", task.id);
            outcome.results =
                unavailable_items(n, &format!("internal error while scoring: {what}"));
        }
    }
    outcome.score_ms = start.elapsed().as_secs_f64() * 1e3;
    outcome
}

/// A group's scoring: every completion of `job` scored with `reward`, the stage the reward
/// needs and the submissions. With `partial`, results that are final after the CPU stages
/// (the reward reads nothing a GPU would add) are put there as soon as they are.
fn score_all(
    evaluator: &Evaluator,
    task: &Task,
    job: &JobSpec,
    reward: &dyn Reward,
    partial: Option<&PartialResults>,
    asked: &str,
) -> (Vec<crate::reward::Result<Scored>>, Stage, Vec<Submission>) {
    let subs: Vec<Submission> = job
        .completions
        .iter()
        .map(|c| Submission::from_completion(c.as_str()))
        .collect();
    let ctx = Context::new(task, evaluator).at_step(job.step);
    let needs = reward.needs(&ctx);
    if let Some(partial) = partial {
        let publish = |k: usize, eval: &Evaluation| {
            if needs > Stage::Ranker && !eval.gpu_stages_moot() {
                return;
            }
            // Final already: the reward reads nothing a GPU would add.
            let r = reward.score_evaluated(&ctx, eval);
            let item = result_of(task, &subs, k, r, job.report, needs, asked, None);
            partial.lock().unwrap_or_else(|p| p.into_inner())[k] = Some(item);
        };
        evaluator.evaluate_cpu_stages_with(task, &subs, needs, &publish);
    }
    (score_group(reward, &ctx, &subs), needs, subs)
}

/// What a caught panic said (its `String` or `&str` payload).
fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "unknown panic".into())
}

/// Results put aside as they become final (see [`run_job`]), one slot per completion.
pub type PartialResults = std::sync::Mutex<Vec<Option<ItemResult>>>;

/// A completion's result with its next-turn feedback (on the code that was evaluated: line
/// numbers refer to it); adds its stage times to `times` when given.
#[allow(clippy::too_many_arguments)]
fn result_of(
    task: &Task,
    subs: &[Submission],
    index: usize,
    r: crate::reward::Result<Scored>,
    with_report: bool,
    needs: Stage,
    asked: &str,
    times: Option<&mut StageTimes>,
) -> ItemResult {
    let report = report_of(&r);
    if let Some(t) = times {
        collect_stage_times(&report.stages, t);
    }
    let code = subs[index].code().unwrap_or(subs[index].text());
    let feedback = crate::rl::feedback(task, report, code, &Default::default()).text();
    item_result(index, r, with_report, needs, asked, Some(feedback))
}

/// The report behind a result, scored or not.
fn report_of(r: &crate::reward::Result<Scored>) -> &RewardReport {
    match r {
        Ok(s) => &s.report,
        Err(RewardError::Unavailable { report, .. }) => report,
    }
}

fn collect_stage_times(stages: &Stages, out: &mut StageTimes) {
    if let Some(c) = stages.compile.as_ref().filter(|c| !c.cached()) {
        out.compile_ms.push(c.millis);
    }
    if let Some(e) = &stages.execute {
        if !matches!(e.status, ExecStatus::Unavailable { .. }) {
            out.execute_ms.push(e.millis);
        }
        if e.gpu_millis.is_finite() {
            out.gpu_ms += e.gpu_millis;
        }
    }
}

/// One completion's result: the value and verdict, or `unavailable` with the reason and
/// the partial report. Never a made-up number. `needs` is the last stage the reward
/// read ([`Reward::needs`]); stages past it do not decide the verdict. `asked` is the
/// reward as the request named it: an unavailable result names it (and the part of it
/// that could not be computed), as does its report, so the trainer reads back the name
/// it sent.
pub fn item_result(
    index: usize,
    r: crate::reward::Result<Scored>,
    with_report: bool,
    needs: Stage,
    asked: &str,
    feedback: Option<String>,
) -> ItemResult {
    let (verdict, value, reason, report) = match r {
        Ok(Scored { value, report }) if value.is_finite() => {
            let o = report.stages.outcome(needs);
            (o.verdict, Some(value), o.reason, report)
        }
        Ok(Scored { value, report }) => (
            Verdict::Unavailable,
            None,
            Some(format!("the reward `{asked}` produced {value}")),
            report,
        ),
        Err(RewardError::Unavailable {
            reward,
            stage,
            reason,
            report,
        }) => {
            let part = if reward == asked {
                String::new()
            } else {
                format!(" (its part `{reward}`)")
            };
            let reason = format!(
                "{asked}: stage `{stage:?}` is unavailable{part}: {}",
                super::request::one_line(&reason)
            );
            (Verdict::Unavailable, None, Some(reason), *report)
        }
    };
    let mut report = report;
    report.reward = asked.to_string();
    ItemResult {
        index,
        verdict,
        value,
        reason,
        report: if with_report {
            report_json(&report)
        } else {
            None
        },
        feedback,
    }
}

fn report_json(report: &RewardReport) -> Option<serde_json::Value> {
    // NaN (a partial report's value, a ranker without a model) becomes null.
    serde_json::to_value(report).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Guards the server's verdict against the report's: both come from
    /// [`Stages::outcome`]. Before, a reward that read the compile stage on stages without
    /// one was `extracted` here and `unavailable` in the report.
    #[test]
    fn panic_payloads_are_read() {
        let caught = std::panic::catch_unwind(|| panic!("boom {}", 1)).unwrap_err();
        assert_eq!(panic_message(caught.as_ref()), "boom 1");
        let caught = std::panic::catch_unwind(|| std::panic::panic_any(7u8)).unwrap_err();
        assert_eq!(panic_message(caught.as_ref()), "unknown panic");
    }

    #[test]
    fn the_server_verdict_is_the_report_verdict_without_a_compile_stage() {
        let stages = Stages {
            extract: crate::pipeline::report::ExtractStage::Extracted {
                kernels: vec!["k".into()],
                launches: 1,
            },
            ..Stages::default()
        };
        for needs in [
            Stage::Syntax,
            Stage::Compile,
            Stage::Correctness,
            Stage::Timing,
        ] {
            let report = RewardReport {
                value: 0.5,
                verdict: Verdict::of(&stages, needs),
                stages: stages.clone(),
                ..Default::default()
            };
            let scored = Ok(Scored { value: 0.5, report });
            let item = item_result(0, scored, false, needs, "r", None);
            assert_eq!(item.verdict, Verdict::of(&stages, needs), "{needs:?}");
            assert_eq!(item.value, Some(0.5));
        }
        let item = item_result(
            0,
            Ok(Scored {
                value: 0.5,
                report: RewardReport {
                    stages: stages.clone(),
                    ..Default::default()
                },
            }),
            false,
            Stage::Compile,
            "r",
            None,
        );
        assert_eq!(item.verdict, Verdict::Unavailable);
        assert_eq!(
            item.reason.as_deref(),
            Some("the compile stage did not run")
        );
        let json = serde_json::to_value(&item).unwrap();
        assert_eq!(json["verdict"], "unavailable");
    }
}
