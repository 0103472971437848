//! The ABI check: a candidate's plan against its task. Every name in the plan is a size of
//! the task, every launch argument an ABI parameter, a scratch buffer or a size, and each
//! launched kernel takes as many parameters as the launch passes, pointers where buffers go.
//! The kernels' parameter lists come from the candidate's syntax tree
//! ([`crate::analysis::SourceTree::kernel_signatures`]).

use super::{Candidate, CandidateError, Launch, LaunchArg, Scratch};
use crate::analysis::KernelSignature;
use crate::expr::Expr;
use crate::task::{Param, Task};

/// What a launch passes, in order: a description of each argument and whether it is a
/// pointer (a buffer).
type PassedArgs = Vec<(String, bool)>;

/// Size names of the task's first config (the ones scratch lengths and `args` may use).
fn first_config_sizes(task: &Task) -> Vec<String> {
    task.configs
        .first()
        .map(|c| c.sizes.keys().cloned().collect())
        .unwrap_or_default()
}

/// Scratch buffers do not shadow task parameters and their lengths use known sizes.
fn check_scratch(task: &Task, scratch: &[Scratch]) -> Result<(), CandidateError> {
    let sizes = first_config_sizes(task);
    for s in scratch {
        if task.params.iter().any(|p| p.name() == s.name) {
            return Err(CandidateError::BadDirective {
                line: s.line,
                message: format!(
                    "scratch buffer `{}` has the name of a task parameter",
                    s.name
                ),
            });
        }
        s.len
            .check_names(sizes.iter().map(String::as_str))
            .map_err(|source| CandidateError::Expr {
                line: s.line,
                source,
            })?;
    }
    Ok(())
}

/// Grid, block and smem expressions use only sizes every config defines.
fn check_dims(task: &Task, launch: &Launch) -> Result<(), CandidateError> {
    let exprs = launch
        .grid
        .iter()
        .chain(&launch.block)
        .chain(launch.smem.iter());
    for e in exprs {
        for cfg in &task.configs {
            e.check_names(cfg.sizes.keys().map(String::as_str))
                .map_err(|source| CandidateError::Expr {
                    line: launch.line,
                    source,
                })?;
        }
    }
    Ok(())
}

fn mismatch(launch: &Launch, detail: String) -> CandidateError {
    CandidateError::AbiMismatch {
        kernel: launch.kernel.clone(),
        line: launch.line,
        detail,
    }
}

/// Resolves one bare `args` name: an ABI parameter, a scratch buffer (rewritten to
/// [`LaunchArg::Scratch`]) or a size expression (rewritten to [`LaunchArg::Int`]).
fn resolve_name(
    task: &Task,
    launch: &Launch,
    scratch: &[Scratch],
    arg: &mut LaunchArg,
) -> Result<(String, bool), CandidateError> {
    let LaunchArg::Param(name) = arg else {
        return Ok(("an integer expression".into(), false));
    };
    let name = name.clone();
    if let Some(p) = task.params.iter().find(|p| p.name() == name) {
        return Ok((name, matches!(p, Param::Buffer { .. })));
    }
    if scratch.iter().any(|s| s.name == name) {
        *arg = LaunchArg::Scratch(name.clone());
        return Ok((name, true));
    }
    let e = Expr::parse(&name).map_err(|source| CandidateError::Expr {
        line: launch.line,
        source,
    })?;
    let sizes = first_config_sizes(task);
    if e.check_names(sizes.iter().map(String::as_str)).is_err() {
        return Err(mismatch(
            launch,
            format!(
                "argument `{name}` is neither a task parameter ({}), a scratch buffer, nor a size",
                task.params
                    .iter()
                    .map(|p| p.name())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ));
    }
    *arg = LaunchArg::Int(e);
    Ok((name, false))
}

/// What `launch` passes: the task's ABI in order, or its explicit `args` with their bare
/// names resolved.
fn passed_args(
    task: &Task,
    launch: &mut Launch,
    scratch: &[Scratch],
) -> Result<PassedArgs, CandidateError> {
    let Some(mut args) = launch.args.take() else {
        return Ok(task
            .params
            .iter()
            .map(|p| (p.name().to_string(), matches!(p, Param::Buffer { .. })))
            .collect());
    };
    let passed = args
        .iter_mut()
        .map(|a| resolve_name(task, launch, scratch, a))
        .collect::<Result<Vec<_>, _>>();
    launch.args = Some(args);
    passed
}

/// The kernel's parameters take what the launch passes: as many, pointers where buffers go.
fn match_params(
    launch: &Launch,
    kernel: &KernelSignature,
    passed: &PassedArgs,
) -> Result<(), CandidateError> {
    let params: Vec<&String> = kernel
        .params
        .iter()
        .filter(|p| p.trim() != "void")
        .collect();
    if params.len() != passed.len() {
        return Err(mismatch(
            launch,
            format!(
                "the kernel takes {} parameters but the launch passes {} ({})",
                params.len(),
                passed.len(),
                passed
                    .iter()
                    .map(|(n, _)| n.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ));
    }
    for (i, (p, (name, is_ptr))) in params.iter().zip(passed).enumerate() {
        let kernel_ptr = p.contains('*') || p.contains('[');
        if kernel_ptr != *is_ptr {
            return Err(mismatch(
                launch,
                format!(
                    "parameter {} (`{p}`) is {} but receives `{name}`, which is {}",
                    i + 1,
                    if kernel_ptr { "a pointer" } else { "a value" },
                    if *is_ptr { "a buffer" } else { "a value" }
                ),
            ));
        }
    }
    Ok(())
}

impl Candidate {
    /// Checks every launch against the task: argument names resolve, counts match the
    /// kernel's parameter list, and pointers go to pointer parameters.
    pub fn check_abi(&mut self, task: &Task) -> Result<(), CandidateError> {
        check_scratch(task, &self.scratch)?;
        for launch in &self.launches {
            check_dims(task, launch)?;
        }
        let kernels = self.kernels();
        for launch in &mut self.launches {
            let passed = passed_args(task, launch, &self.scratch)?;
            // A kernel the tree does not show (templates or macros we cannot read): the
            // compiler will tell.
            if let Some(k) = kernels.iter().find(|k| k.name == launch.base_name()) {
                match_params(launch, k, &passed)?;
            }
        }
        Ok(())
    }
}
