//! Stage 3, compile: NVRTC to a cubin in a sandboxed worker (see [`crate::compile`]), as
//! the report's `stages.compile`.

use crate::candidate::Candidate;
use crate::compile::{CompileOutcome, CompiledModule, Compiler, Isolation};

use super::report::{CompileStage, CompileStatus};

/// The report form of a compile outcome.
pub fn stage_of(outcome: &CompileOutcome, arch: &str, isolation: Isolation) -> CompileStage {
    let mut s = CompileStage {
        ok: false,
        status: CompileStatus::Unavailable,
        log: String::new(),
        kernels: Vec::new(),
        cached: false,
        millis: 0.0,
        arch: arch.to_string(),
        sandboxed: isolation == Isolation::Sandboxed,
        isolation,
        reason: None,
    };
    match outcome {
        CompileOutcome::Compiled {
            module,
            cached,
            millis,
        } => {
            s.ok = true;
            s.status = CompileStatus::Compiled;
            s.log = module.log.clone();
            s.kernels = module.kernels.clone();
            s.cached = *cached;
            s.millis = *millis;
        }
        CompileOutcome::Failed {
            log,
            cached,
            millis,
        } => {
            s.status = CompileStatus::Error;
            s.log = log.clone();
            s.cached = *cached;
            s.millis = *millis;
        }
        CompileOutcome::Rejected { reason } => {
            s.status = CompileStatus::Rejected;
            s.reason = Some(reason.clone());
        }
        CompileOutcome::Timeout { limit_ms } => {
            s.status = CompileStatus::Timeout;
            s.reason = Some(format!(
                "compile exceeded its {limit_ms} ms limit and was killed"
            ));
        }
        CompileOutcome::Unavailable { reason } => {
            s.status = CompileStatus::Unavailable;
            s.reason = Some(reason.clone());
        }
    }
    s
}

/// Compiles the candidate: the stage and, on success, the module.
pub(crate) fn run(
    compiler: &Compiler,
    candidate: &Candidate,
) -> (CompileStage, Option<CompiledModule>) {
    let outcome = compiler.compile(candidate);
    let stage = stage_of(&outcome, &compiler.options().arch, compiler.isolation());
    let module = match outcome {
        CompileOutcome::Compiled { module, .. } => Some(module),
        _ => None,
    };
    (stage, module)
}
