//! The JSON shapes of the stages that are enums in Rust: the report's field names and
//! values stay what they always were (`ok` flags, `status` words, `null` scores), while
//! the types say which outcome a stage had.

use serde::{Deserialize, Serialize};

use super::{
    CompileEnd, CompileStage, CompileStatus, ExtractErrorKind, ExtractStage, Isolation,
    RankerScores, RankerStage, Resources,
};

/// A stage's JSON that names no outcome it can have.
#[derive(Debug, thiserror::Error)]
#[error("{stage}: {what}")]
pub struct BadStage {
    stage: &'static str,
    what: String,
}

fn bad(stage: &'static str, what: impl Into<String>) -> BadStage {
    BadStage {
        stage,
        what: what.into(),
    }
}

/// `stages.extract` in JSON.
#[derive(Serialize, Deserialize)]
pub struct ExtractWire {
    ok: bool,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    error_kind: Option<ExtractErrorKind>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    error: Option<String>,
    #[serde(default)]
    kernels: Vec<String>,
    #[serde(default)]
    launches: usize,
}

impl From<ExtractStage> for ExtractWire {
    fn from(s: ExtractStage) -> ExtractWire {
        let (ok, error_kind, error, kernels, launches) = match s {
            ExtractStage::NotRun => (false, None, None, Vec::new(), 0),
            ExtractStage::Extracted { kernels, launches } => (true, None, None, kernels, launches),
            ExtractStage::Failed { kind, error } => (false, Some(kind), Some(error), Vec::new(), 0),
        };
        ExtractWire {
            ok,
            error_kind,
            error,
            kernels,
            launches,
        }
    }
}

impl TryFrom<ExtractWire> for ExtractStage {
    type Error = BadStage;
    fn try_from(w: ExtractWire) -> Result<ExtractStage, BadStage> {
        Ok(match (w.ok, w.error_kind, w.error) {
            (true, None, None) => ExtractStage::Extracted {
                kernels: w.kernels,
                launches: w.launches,
            },
            (true, ..) => return Err(bad("stages.extract", "`ok` is true but an error is set")),
            (false, Some(kind), error) => ExtractStage::Failed {
                kind,
                error: error.unwrap_or_default(),
            },
            (false, None, None) => ExtractStage::NotRun,
            (false, None, Some(_)) => {
                return Err(bad("stages.extract", "an error without its `error_kind`"))
            }
        })
    }
}

/// `stages.compile` in JSON.
#[derive(Serialize, Deserialize)]
pub struct CompileWire {
    ok: bool,
    status: CompileStatus,
    #[serde(default)]
    log: String,
    #[serde(default)]
    kernels: Vec<Resources>,
    #[serde(default)]
    cached: bool,
    #[serde(default)]
    millis: f64,
    #[serde(default)]
    arch: String,
    /// Repeats `isolation` (written for readers older than it).
    #[serde(default = "yes")]
    sandboxed: bool,
    #[serde(default)]
    isolation: Isolation,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    reason: Option<String>,
}

fn yes() -> bool {
    true
}

impl From<CompileStage> for CompileWire {
    fn from(s: CompileStage) -> CompileWire {
        let status = s.status();
        let (kernels, cached, reason) = match s.end {
            CompileEnd::Compiled { kernels, cached } => (kernels, cached, None),
            CompileEnd::Error { cached } => (Vec::new(), cached, None),
            CompileEnd::Rejected { reason }
            | CompileEnd::Timeout { reason }
            | CompileEnd::Unavailable { reason } => (Vec::new(), false, Some(reason)),
        };
        CompileWire {
            ok: status == CompileStatus::Compiled,
            status,
            log: s.log,
            kernels,
            cached,
            millis: s.millis,
            arch: s.arch,
            sandboxed: s.isolation == Isolation::Sandboxed,
            isolation: s.isolation,
            reason,
        }
    }
}

impl TryFrom<CompileWire> for CompileStage {
    type Error = BadStage;
    fn try_from(w: CompileWire) -> Result<CompileStage, BadStage> {
        if w.ok != (w.status == CompileStatus::Compiled) {
            return Err(bad(
                "stages.compile",
                format!("`ok` is {} but `status` is `{}`", w.ok, w.status),
            ));
        }
        let reason = w.reason.unwrap_or_default();
        let end = match w.status {
            CompileStatus::Compiled => CompileEnd::Compiled {
                kernels: w.kernels,
                cached: w.cached,
            },
            CompileStatus::Error => CompileEnd::Error { cached: w.cached },
            CompileStatus::Rejected => CompileEnd::Rejected { reason },
            CompileStatus::Timeout => CompileEnd::Timeout { reason },
            CompileStatus::Unavailable => CompileEnd::Unavailable { reason },
        };
        Ok(CompileStage {
            end,
            log: w.log,
            millis: w.millis,
            arch: w.arch,
            isolation: w.isolation,
        })
    }
}

/// `stages.ranker` in JSON.
#[derive(Serialize, Deserialize)]
pub struct RankerWire {
    candidate_score: Option<f64>,
    reference_score: Option<f64>,
    prob_faster: Option<f64>,
    #[serde(default)]
    model: String,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    error: Option<String>,
    /// `false` for a task the ranker does not apply to (absent otherwise).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    applicable: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    uncertainty: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    out_of_range: Option<f64>,
}

impl RankerWire {
    fn unscored(model: String, error: String, applicable: Option<bool>) -> RankerWire {
        RankerWire {
            candidate_score: None,
            reference_score: None,
            prob_faster: None,
            model,
            error: Some(error),
            applicable,
            uncertainty: None,
            out_of_range: None,
        }
    }
}

impl From<RankerStage> for RankerWire {
    fn from(s: RankerStage) -> RankerWire {
        match s {
            RankerStage::Scored(r) => RankerWire {
                candidate_score: Some(r.candidate_score),
                reference_score: Some(r.reference_score),
                prob_faster: Some(r.prob_faster),
                model: r.model,
                error: None,
                applicable: None,
                uncertainty: r.uncertainty,
                out_of_range: r.out_of_range,
            },
            RankerStage::NotApplicable { model, reason } => {
                RankerWire::unscored(model, reason, Some(false))
            }
            RankerStage::Failed { model, error } => RankerWire::unscored(model, error, None),
        }
    }
}

impl TryFrom<RankerWire> for RankerStage {
    type Error = BadStage;
    fn try_from(w: RankerWire) -> Result<RankerStage, BadStage> {
        let scores = (w.candidate_score, w.reference_score, w.prob_faster);
        Ok(match (w.error, w.applicable, scores) {
            (Some(reason), Some(false), _) => RankerStage::NotApplicable {
                model: w.model,
                reason,
            },
            (Some(error), _, _) => RankerStage::Failed {
                model: w.model,
                error,
            },
            (None, _, (Some(candidate_score), Some(reference_score), Some(prob_faster))) => {
                RankerStage::Scored(RankerScores {
                    candidate_score,
                    reference_score,
                    prob_faster,
                    model: w.model,
                    uncertainty: w.uncertainty,
                    out_of_range: w.out_of_range,
                })
            }
            (None, ..) => return Err(bad("stages.ranker", "no scores and no error")),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::Stages;
    use super::*;

    /// Guards the schema: each outcome is written exactly as the flag-and-string structs
    /// wrote it, and reads back as the same outcome.
    #[test]
    fn stage_enums_keep_the_report_json() {
        let cases = [
            r#"{"ok":true,"kernels":["k"],"launches":2}"#,
            r#"{"ok":false,"error_kind":"no_code_block","error":"no block","kernels":[],"launches":0}"#,
            r#"{"ok":false,"kernels":[],"launches":0}"#,
        ];
        for json in cases {
            let s: ExtractStage = serde_json::from_str(json).expect(json);
            assert_eq!(serde_json::to_string(&s).unwrap(), json);
        }
        let compiled = r#"{"ok":true,"status":"compiled","log":"ptxas info","kernels":[{"name":"k","registers":8,"spill_store_bytes":0,"spill_load_bytes":0,"static_smem_bytes":0,"stack_bytes":0,"barriers":0}],"cached":true,"millis":3.5,"arch":"sm_90","sandboxed":true,"isolation":"sandboxed"}"#;
        let timeout = r#"{"ok":false,"status":"timeout","log":"","kernels":[],"cached":false,"millis":0.0,"arch":"sm_90","sandboxed":false,"isolation":"in_process","reason":"killed"}"#;
        for json in [compiled, timeout] {
            let s: CompileStage = serde_json::from_str(json).expect(json);
            assert_eq!(serde_json::to_string(&s).unwrap(), json);
        }
        let s: CompileStage = serde_json::from_str(timeout).unwrap();
        assert_eq!(s.reason(), Some("killed"));
        assert!(!s.is_compiled() && s.kernels().is_empty());
        let scored = r#"{"candidate_score":1.5,"reference_score":0.5,"prob_faster":0.75,"model":"m","uncertainty":0.1,"out_of_range":0.0}"#;
        let failed = r#"{"candidate_score":null,"reference_score":null,"prob_faster":null,"model":"m","error":"no model"}"#;
        let not_applicable = r#"{"candidate_score":null,"reference_score":null,"prob_faster":null,"model":"m","error":"PyTorch reference","applicable":false}"#;
        for json in [scored, failed, not_applicable] {
            let s: RankerStage = serde_json::from_str(json).expect(json);
            assert_eq!(serde_json::to_string(&s).unwrap(), json);
        }
        assert!(matches!(
            serde_json::from_str::<RankerStage>(not_applicable).unwrap(),
            RankerStage::NotApplicable { .. }
        ));
        // A whole default report still reads back.
        let stages: Stages =
            serde_json::from_str(&serde_json::to_string(&Stages::default()).unwrap())
                .expect("default stages");
        assert_eq!(stages, Stages::default());
    }

    #[test]
    fn contradictory_stage_json_is_refused_with_the_stage_named() {
        let e = serde_json::from_str::<CompileStage>(
            r#"{"ok":true,"status":"error","log":"","kernels":[],"cached":false,"millis":0,"arch":"sm_90","sandboxed":true}"#,
        )
        .unwrap_err();
        assert!(e.to_string().contains("stages.compile"), "{e}");
        let e = serde_json::from_str::<RankerStage>(
            r#"{"candidate_score":null,"reference_score":null,"prob_faster":null,"model":"m"}"#,
        )
        .unwrap_err();
        assert!(e.to_string().contains("stages.ranker"), "{e}");
        let e = serde_json::from_str::<ExtractStage>(
            r#"{"ok":false,"error":"x","kernels":[],"launches":0}"#,
        )
        .unwrap_err();
        assert!(e.to_string().contains("error_kind"), "{e}");
    }
}
