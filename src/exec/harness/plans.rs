//! Each side's plan in runner form: launches with their arguments, the ranges to zero, and
//! the bytes of each buffer a config uses.

use crate::candidate::{ResolvedArg, ResolvedPlan};
use crate::exec::job::{ExecJob, JobConfig, JobParam};
use crate::exec::runner::{RunArg, RunLaunch, ZeroRange};
use crate::exec::values::{arg_i32, scalar_arg};
use crate::task::DType;

/// The kernel launches of one side's plan, for its runner (`nb` ABI buffers come first in
/// the runner's allocation, scratch buffers after them).
pub(crate) fn runner_launches(job: &ExecJob, c: &JobConfig, plan: &ResolvedPlan) -> Vec<RunLaunch> {
    let nb = job.buffers.len();
    plan.launches
        .iter()
        .enumerate()
        .map(|(li, l)| RunLaunch {
            function: li,
            grid: l.grid,
            block: l.block,
            smem: l.smem,
            args: l
                .args
                .iter()
                .map(|a| match a {
                    ResolvedArg::Param { index } => match job.params.get(*index) {
                        Some(JobParam::Buffer { buffer }) => RunArg::Buffer { index: *buffer },
                        Some(JobParam::Scalar { dtype }) => RunArg::Value {
                            bits: u64::from_le_bytes(scalar_arg(
                                *dtype,
                                c.scalars.get(*index).copied().unwrap_or(0.0),
                            )),
                        },
                        None => RunArg::Value { bits: 0 },
                    },
                    ResolvedArg::Scratch { index } => RunArg::Buffer { index: nb + index },
                    ResolvedArg::Int { value } => RunArg::Value {
                        bits: u64::from_le_bytes(arg_i32(*value)),
                    },
                })
                .collect(),
        })
        .collect()
}

/// A side's plan in runner form: launches, the buffers to zero in the timed window, and the
/// bytes of each buffer the config uses (the runner zeroes the rest before the run; empty
/// for the trusted reference).
pub(crate) struct SidePlan {
    pub launches: Vec<RunLaunch>,
    pub zero: Vec<ZeroRange>,
    pub used: Vec<u64>,
    /// The config (index into the job's) and whether it is the timed one.
    pub config: usize,
    pub timed: bool,
}

/// The runner launches of every side of one config, built once for its checks and timing.
pub(crate) struct ConfigPlans {
    pub reference: SidePlan,
    pub members: Vec<SidePlan>,
}

impl ConfigPlans {
    pub fn new(job: &ExecJob, k: usize, c: &JobConfig) -> ConfigPlans {
        let side = |plan: &ResolvedPlan, scratch: &[DType]| SidePlan {
            config: k,
            timed: k == job.timing_config,
            ..SidePlan::new(job, c, plan, scratch)
        };
        let mut reference = side(&c.reference, &job.reference.scratch);
        reference.used.clear();
        ConfigPlans {
            reference,
            members: c
                .candidates
                .iter()
                .zip(&job.candidates)
                .map(|(p, m)| side(p, &m.scratch))
                .collect(),
        }
    }
}

impl SidePlan {
    pub fn new(job: &ExecJob, c: &JobConfig, plan: &ResolvedPlan, scratch: &[DType]) -> SidePlan {
        let nb = job.buffers.len();
        SidePlan {
            launches: runner_launches(job, c, plan),
            zero: plan
                .scratch_lens
                .iter()
                .zip(scratch)
                .enumerate()
                .map(|(k, (n, d))| ZeroRange {
                    buffer: nb + k,
                    bytes: n * d.size_bytes(),
                })
                .collect(),
            used: side_bytes(job, c, plan, scratch),
            config: 0,
            timed: false,
        }
    }
}

/// Bytes of each buffer a side's runner holds: the ABI buffers, then its scratch.
pub(crate) fn side_bytes(
    job: &ExecJob,
    c: &JobConfig,
    plan: &ResolvedPlan,
    scratch: &[DType],
) -> Vec<u64> {
    job.buffers
        .iter()
        .zip(&c.lens)
        .map(|(b, n)| n * b.dtype.size_bytes())
        .chain(
            plan.scratch_lens
                .iter()
                .zip(scratch)
                .map(|(n, d)| n * d.size_bytes()),
        )
        .collect()
}
