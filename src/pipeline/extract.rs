//! Stage 1, extract: the code block of a completion, its launch plan, the ABI check against
//! the task, and the plan evaluated for every configuration the GPU stages will run — once,
//! here, for every later stage (static occupancy, the GPU job).

use std::sync::{Arc, OnceLock};

use crate::analysis::{AnalysisError, SourceTree};
use crate::candidate::{
    extract_code, Candidate, CandidateError, PlanLimits, ResolvedPlan, MAX_SOURCE_BYTES,
};
use crate::task::Task;

use super::report::{ExtractErrorKind, ExtractStage};

/// What a policy produced: the raw text and, if it could be read, the candidate.
///
/// Inputs over the size caps ([`crate::candidate::MAX_COMPLETION_BYTES`] for completions,
/// [`MAX_SOURCE_BYTES`] for code) are refused here, before anything parses them: the
/// extract stage then reports `too_large` and no later stage runs.
///
/// The code is parsed with tree-sitter-cuda once, when a stage first needs it (in the
/// evaluator's threads, not the caller's); that one tree serves the launch plan's kernel and
/// ABI checks, the syntax stage, the structure analysis and the ranker.
#[derive(Debug, Clone)]
pub struct Submission {
    text: String,
    code: Option<String>,
    tree: OnceLock<Result<Arc<SourceTree>, AnalysisError>>,
    parsed: OnceLock<Result<Candidate, CandidateError>>,
}

fn too_large(code: &str) -> Option<CandidateError> {
    (code.len() > MAX_SOURCE_BYTES).then_some(CandidateError::TooLarge {
        what: "source",
        bytes: code.len(),
        limit: MAX_SOURCE_BYTES,
    })
}

impl Submission {
    /// The submission of `code`, or of the reason there is none.
    fn of(text: String, code: Result<String, CandidateError>) -> Submission {
        let parsed = OnceLock::new();
        let code = match code.and_then(|c| too_large(&c).map_or(Ok(c), Err)) {
            Ok(c) => Some(c),
            Err(e) => {
                let _ = parsed.set(Err(e));
                None
            }
        };
        Submission {
            text,
            code,
            tree: OnceLock::new(),
            parsed,
        }
    }

    /// From an LLM completion (markdown with a fenced code block).
    pub fn from_completion(text: impl Into<String>) -> Submission {
        let text = text.into();
        let code = extract_code(&text);
        Submission::of(text, code)
    }

    /// From CUDA source (a `.cu` file in the candidate format).
    pub fn from_source(source: impl Into<String>) -> Submission {
        let text = source.into();
        Submission::of(text.clone(), Ok(text))
    }

    /// The raw text.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// The extracted code, if a code block was found (and it is within the size cap).
    pub fn code(&self) -> Option<&str> {
        self.code.as_deref()
    }

    /// The code's syntax tree, parsed on first use; `None` without code.
    pub(crate) fn tree(&self) -> Option<&Result<Arc<SourceTree>, AnalysisError>> {
        let code = self.code.as_deref()?;
        Some(
            self.tree
                .get_or_init(|| SourceTree::parse(code.as_bytes()).map(Arc::new)),
        )
    }

    /// The parsed candidate (before the task's ABI check).
    pub fn candidate(&self) -> Result<&Candidate, &CandidateError> {
        self.parsed
            .get_or_init(|| {
                let code = self.code.clone().unwrap_or_default();
                let tree = self.tree().and_then(|t| t.as_ref().ok()).cloned();
                Candidate::with_tree(code, tree)
            })
            .as_ref()
    }
}

impl From<Candidate> for Submission {
    fn from(c: Candidate) -> Submission {
        let tree = OnceLock::new();
        if let Some(t) = c.tree() {
            let _ = tree.set(Ok(Arc::clone(t)));
        }
        Submission {
            text: c.source.clone(),
            code: Some(c.source.clone()),
            tree,
            parsed: OnceLock::from(Ok(c)),
        }
    }
}

/// The launch plan of a candidate evaluated for the configurations the GPU stages run.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// Indices into `task.configs` of the configurations to check ([`select_configs`]).
    pub configs: Vec<usize>,
    /// Index into [`Plan::configs`] of the configuration that is timed and whose plan gives
    /// the static occupancy ([`timing_config`]).
    pub timed: usize,
    /// The plan for each entry of `configs`, or the first configuration it fails for (an
    /// invalid launch, reported by the GPU stage, which then runs nothing).
    pub resolved: Result<Vec<ResolvedPlan>, CandidateError>,
}

impl Plan {
    /// Evaluates `candidate`'s plan for `configs` (the candidate must have passed its ABI
    /// check).
    pub fn resolve(
        candidate: &Candidate,
        task: &Task,
        configs: Vec<usize>,
        limits: &PlanLimits,
    ) -> Plan {
        let timed = timing_config(task, &configs);
        let resolved = configs
            .iter()
            .map(|&i| candidate.resolve(task, &task.configs[i], limits))
            .collect();
        Plan {
            configs,
            timed,
            resolved,
        }
    }

    /// The plan of the timed configuration, if the plan is valid.
    pub fn timed_plan(&self) -> Option<&ResolvedPlan> {
        self.resolved.as_ref().ok()?.get(self.timed)
    }
}

/// Indices of the configs to check: all, or `max_configs` spread evenly over the list
/// (first and last included).
pub fn select_configs(task: &Task, max_configs: Option<usize>) -> Vec<usize> {
    let n = task.configs.len();
    match max_configs {
        Some(m) if m > 0 && m < n => (0..m)
            .map(|i| i * (n - 1) / (m - 1).max(1))
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect(),
        _ => (0..n).collect(),
    }
}

use crate::task::timing_config;

/// The typed kind of a candidate error, as reported in `stages.extract.error_kind`.
pub fn error_kind(e: &CandidateError) -> ExtractErrorKind {
    match e {
        CandidateError::NoCodeBlock => ExtractErrorKind::NoCodeBlock,
        CandidateError::NoLaunchPlan => ExtractErrorKind::NoLaunchPlan,
        CandidateError::UnknownKernel { .. } => ExtractErrorKind::UnknownKernel,
        CandidateError::AbiMismatch { .. } => ExtractErrorKind::AbiMismatch,
        CandidateError::BadDirective { .. } => ExtractErrorKind::BadDirective,
        CandidateError::Expr { .. } => ExtractErrorKind::Expression,
        CandidateError::InvalidLaunch { .. } => ExtractErrorKind::InvalidLaunch,
        CandidateError::TooLarge { .. } => ExtractErrorKind::TooLarge,
    }
}

/// What the extract stage leaves for the later ones.
pub(crate) struct Extracted {
    pub stage: ExtractStage,
    pub candidate: Option<Candidate>,
    pub plan: Option<Plan>,
}

/// Runs the extract stage: ABI check, then the plan for `configs`.
pub(crate) fn run(
    task: &Task,
    sub: &Submission,
    configs: Vec<usize>,
    limits: &PlanLimits,
) -> Extracted {
    let checked = sub
        .candidate()
        .cloned()
        .map_err(Clone::clone)
        .and_then(|mut c| {
            c.check_abi(task)?;
            Ok(c)
        });
    match checked {
        Ok(c) => Extracted {
            stage: ExtractStage::Extracted {
                kernels: c.kernel_names(),
                launches: c.launches.len(),
            },
            plan: Some(Plan::resolve(&c, task, configs, limits)),
            candidate: Some(c),
        },
        Err(e) => Extracted {
            stage: ExtractStage::Failed {
                kind: error_kind(&e),
                error: e.to_string(),
            },
            candidate: None,
            plan: None,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The code is parsed once: the candidate's kernel and ABI checks and the syntax stage
    /// (`Submission::tree`) read the same tree.
    #[test]
    fn one_parse_serves_the_candidate_and_the_syntax_stage() {
        let src = "// @launch k grid=(1) block=(32)\n\
                   extern \"C\" __global__ void k(float* y, int n) { y[0] = 1.f; }\n";
        for sub in [
            Submission::from_source(src),
            Submission::from_completion(format!("```cuda\n{src}```\n")),
        ] {
            let candidate = sub.candidate().expect("parses");
            let tree = sub.tree().expect("code").as_ref().expect("tree");
            assert!(Arc::ptr_eq(candidate.tree().expect("candidate tree"), tree));
            assert_eq!(candidate.kernels()[0].params, ["float* y", "int n"]);
        }
        let no_code = Submission::from_completion("no code here");
        assert!(no_code.tree().is_none());
        assert!(matches!(
            no_code.candidate(),
            Err(CandidateError::NoCodeBlock)
        ));
    }
}
