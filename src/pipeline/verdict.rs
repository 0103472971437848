//! The one-word outcome of an evaluation, for reports, tables and manifests.

use serde::{Deserialize, Serialize};

pub use crate::verdict::Verdict;

use super::report::{CompileEnd, ExecStatus, Stages};
use super::Stage;

impl Verdict {
    /// The verdict of `stages` for a reward that reads up to `upto` (stages past it, which an
    /// evaluation remembered for another reward may hold, do not decide it): the verdict of
    /// [`Stages::outcome`].
    pub fn of(stages: &Stages, upto: Stage) -> Verdict {
        stages.outcome(upto).verdict
    }
}

/// A [`Verdict`] with the one-line reason it is not `correct` (`None` for `correct`, and for
/// `extracted` and `compiled`: nothing failed in the stages the reward read).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Outcome {
    /// The verdict.
    pub verdict: Verdict,
    /// The first reason it is not `correct`, on one line.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub reason: Option<String>,
}

impl Outcome {
    fn new(verdict: Verdict, reason: Option<String>) -> Outcome {
        Outcome { verdict, reason }
    }
}

impl Stages {
    /// The one place a completion's verdict is decided: the verdict of the stages a reward
    /// that reads up to `upto` saw, and the first reason it is not `correct`. Stages past
    /// `upto` (which an evaluation remembered for another reward may hold) do not decide it.
    ///
    /// A stage the reward reads that did not run is `unavailable` (never `extracted` or
    /// `compiled`, which say the reward stopped before it).
    ///
    /// ```
    /// use cudaperf::pipeline::{Stage, Verdict};
    /// use cudaperf::pipeline::report::Stages;
    /// let none = Stages::default(); // nothing extracted
    /// let o = none.outcome(Stage::Timing);
    /// assert_eq!(o.verdict, Verdict::ExtractError);
    /// ```
    pub fn outcome(&self, upto: Stage) -> Outcome {
        if !self.extract.is_ok() {
            let why = self.extract.error().map(str::to_string);
            return Outcome::new(Verdict::ExtractError, why);
        }
        if upto < Stage::Compile {
            return Outcome::new(Verdict::Extracted, None);
        }
        if let Some(failed) = self.compile_outcome() {
            return failed;
        }
        if upto < Stage::Correctness {
            return Outcome::new(Verdict::Compiled, None);
        }
        if let Some(c) = &self.correctness {
            if c.passed {
                return Outcome::new(Verdict::Correct, None);
            }
            let why = c
                .configs
                .iter()
                .find(|c| !c.passed)
                .map(|f| format!("config {}: {}", f.config, f.reasons.join("; ")));
            return Outcome::new(Verdict::Incorrect, why);
        }
        self.execute_outcome()
    }

    /// The outcome when the compile stage did not produce a module; `None` when it did.
    fn compile_outcome(&self) -> Option<Outcome> {
        let Some(c) = &self.compile else {
            let why = "the compile stage did not run".to_string();
            return Some(Outcome::new(Verdict::Unavailable, Some(why)));
        };
        match &c.end {
            CompileEnd::Compiled { .. } => None,
            CompileEnd::Unavailable { reason } => {
                Some(Outcome::new(Verdict::Unavailable, Some(reason.clone())))
            }
            CompileEnd::Error { .. } => {
                let why = first_lines(&c.log, 3);
                Some(Outcome::new(Verdict::CompileError, Some(why)))
            }
            CompileEnd::Rejected { reason } | CompileEnd::Timeout { reason } => {
                Some(Outcome::new(Verdict::CompileError, Some(reason.clone())))
            }
        }
    }

    /// The outcome of a compiled candidate with no correctness stage: what stopped the run.
    fn execute_outcome(&self) -> Outcome {
        let Some(exec) = &self.execute else {
            let why = "the GPU stages did not run".to_string();
            return Outcome::new(Verdict::Unavailable, Some(why));
        };
        let verdict = match &exec.status {
            ExecStatus::CudaError { .. } => Verdict::CudaError,
            ExecStatus::InvalidLaunch { .. } => Verdict::InvalidLaunch,
            ExecStatus::Timeout { .. } => Verdict::Timeout,
            ExecStatus::Crashed { .. } => Verdict::Crashed,
            ExecStatus::ReferenceFailed { .. } => Verdict::ReferenceFailed,
            _ => Verdict::Unavailable,
        };
        // The status as its report JSON: one line, with every field.
        let why = serde_json::to_value(&exec.status)
            .ok()
            .map(|v| v.to_string())
            .filter(|s| s != "null");
        Outcome::new(verdict, why)
    }
}

/// The first `n` lines of a log on one line.
fn first_lines(text: &str, n: usize) -> String {
    text.lines().take(n).collect::<Vec<_>>().join(" | ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::report::{
        CompileStage, CompileStatus, ExecuteStage, ExtractErrorKind, ExtractStage,
    };

    fn extracted() -> Stages {
        Stages {
            extract: ExtractStage::Extracted {
                kernels: vec!["k".into()],
                launches: 1,
            },
            ..Stages::default()
        }
    }

    fn compile(status: CompileStatus, log: &str, reason: Option<&str>) -> CompileStage {
        let reason = reason.unwrap_or_default().to_string();
        let end = match status {
            CompileStatus::Compiled => CompileEnd::Compiled {
                kernels: Vec::new(),
                cached: false,
            },
            CompileStatus::Error => CompileEnd::Error { cached: false },
            CompileStatus::Rejected => CompileEnd::Rejected { reason },
            CompileStatus::Timeout => CompileEnd::Timeout { reason },
            CompileStatus::Unavailable => CompileEnd::Unavailable { reason },
        };
        CompileStage {
            end,
            log: log.into(),
            millis: 1.0,
            arch: "sm_90".into(),
            isolation: Default::default(),
        }
    }

    /// Guards the disagreement the server's own verdict function had: a reward that reads
    /// the compile stage, on stages without one, is `unavailable` (it said `extracted`).
    #[test]
    fn a_stage_the_reward_reads_that_did_not_run_is_unavailable() {
        let s = extracted();
        assert_eq!(s.outcome(Stage::Syntax).verdict, Verdict::Extracted);
        let o = s.outcome(Stage::Compile);
        assert_eq!(o.verdict, Verdict::Unavailable);
        assert_eq!(o.reason.as_deref(), Some("the compile stage did not run"));
        let mut s = extracted();
        s.compile = Some(compile(CompileStatus::Compiled, "", None));
        assert_eq!(
            s.outcome(Stage::Ranker),
            Outcome::new(Verdict::Compiled, None)
        );
        let o = s.outcome(Stage::Correctness);
        assert_eq!(o.verdict, Verdict::Unavailable);
        assert_eq!(o.reason.as_deref(), Some("the GPU stages did not run"));
        assert_eq!(Verdict::of(&s, Stage::Timing), o.verdict);
    }

    #[test]
    fn reasons_name_the_first_failure_on_one_line() {
        let s = Stages {
            extract: ExtractStage::Failed {
                kind: ExtractErrorKind::NoCodeBlock,
                error: "the completion has no ```cuda code block".into(),
            },
            ..Stages::default()
        };
        let o = s.outcome(Stage::Timing);
        assert_eq!(o.verdict, Verdict::ExtractError);
        assert_eq!(o.reason.as_deref(), s.extract.error());

        let mut s = extracted();
        let log = "candidate.cu(3): error: x is undefined\n  x = 1;\n  ^\nmore";
        s.compile = Some(compile(CompileStatus::Error, log, None));
        let o = s.outcome(Stage::Timing);
        assert_eq!(o.verdict, Verdict::CompileError);
        assert_eq!(
            o.reason.as_deref(),
            Some("candidate.cu(3): error: x is undefined |   x = 1; |   ^")
        );
        s.compile = Some(compile(
            CompileStatus::Rejected,
            "",
            Some("forbidden include"),
        ));
        assert_eq!(
            s.outcome(Stage::Compile),
            Outcome::new(Verdict::CompileError, Some("forbidden include".into()))
        );
        s.compile = Some(compile(CompileStatus::Unavailable, "", Some("no NVRTC")));
        assert_eq!(
            s.outcome(Stage::Compile),
            Outcome::new(Verdict::Unavailable, Some("no NVRTC".into()))
        );

        let mut s = extracted();
        s.compile = Some(compile(CompileStatus::Compiled, "", None));
        s.execute = Some(ExecuteStage {
            status: ExecStatus::Timeout { limit_ms: 500 },
            device: None,
            millis: 600.0,
            gpu_millis: f64::NAN,
            job_gpu_millis: 0.0,
            job_members: 1,
        });
        let o = s.outcome(Stage::Timing);
        assert_eq!(o.verdict, Verdict::Timeout);
        assert_eq!(
            o.reason.as_deref(),
            Some(r#"{"limit_ms":500,"status":"timeout"}"#)
        );
        // Stages past what the reward read do not decide it.
        assert_eq!(s.outcome(Stage::Ranker).verdict, Verdict::Compiled);
    }

    #[test]
    fn a_verdict_compares_with_its_report_string() {
        assert!(Verdict::Correct == "correct");
        assert!(Verdict::CompileError != "correct");
        assert_eq!(
            serde_json::to_string(&Verdict::ReferenceFailed).unwrap(),
            r#""reference_failed""#
        );
    }
}
