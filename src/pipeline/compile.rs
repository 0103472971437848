//! Stage 3, compile: NVRTC to a cubin in a sandboxed worker (see [`crate::compile`]), as
//! the report's `stages.compile`.

use crate::candidate::Candidate;
use crate::compile::{CompileOutcome, CompiledModule, Compiler, Isolation};

use super::report::{CompileEnd, CompileStage};

/// The report form of a compile outcome.
pub fn stage_of(outcome: &CompileOutcome, arch: &str, isolation: Isolation) -> CompileStage {
    let (end, log, millis) = match outcome {
        CompileOutcome::Compiled {
            module,
            cached,
            millis,
        } => (
            CompileEnd::Compiled {
                kernels: module.kernels.clone(),
                cached: *cached,
            },
            module.log.clone(),
            *millis,
        ),
        CompileOutcome::Failed {
            log,
            cached,
            millis,
        } => (CompileEnd::Error { cached: *cached }, log.clone(), *millis),
        CompileOutcome::Rejected { reason } => (
            CompileEnd::Rejected {
                reason: reason.clone(),
            },
            String::new(),
            0.0,
        ),
        CompileOutcome::Timeout { limit_ms } => (
            CompileEnd::Timeout {
                reason: format!("compile exceeded its {limit_ms} ms limit and was killed"),
            },
            String::new(),
            0.0,
        ),
        CompileOutcome::Unavailable { reason } => (
            CompileEnd::Unavailable {
                reason: reason.clone(),
            },
            String::new(),
            0.0,
        ),
    };
    CompileStage {
        end,
        log,
        millis,
        arch: arch.to_string(),
        isolation,
    }
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
