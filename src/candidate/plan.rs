//! The launch plan evaluated for one input configuration, within CUDA's launch limits and
//! ours ([`PlanLimits`]).

use serde::{Deserialize, Serialize};

use super::{Candidate, CandidateError, Launch, LaunchArg, Scratch};
use crate::expr::Expr;
use crate::task::{InputConfig, Task};

/// A launch evaluated for one config.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResolvedLaunch {
    /// Kernel name as written.
    pub kernel: String,
    /// Grid (x, y, z).
    pub grid: [u32; 3],
    /// Block (x, y, z).
    pub block: [u32; 3],
    /// Dynamic shared memory in bytes.
    pub smem: u32,
    /// Arguments in kernel order.
    pub args: Vec<ResolvedArg>,
}

/// An argument evaluated for one config.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ResolvedArg {
    /// An ABI parameter by index into `task.params`.
    Param {
        /// Index into the task's params.
        index: usize,
    },
    /// A scratch buffer by index into `candidate.scratch`.
    Scratch {
        /// Index into the candidate's scratch list.
        index: usize,
    },
    /// An integer passed as `int`.
    Int {
        /// The value.
        value: i32,
    },
}

/// A launch plan evaluated for one config.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResolvedPlan {
    /// Launches in order.
    pub launches: Vec<ResolvedLaunch>,
    /// Element count of each scratch buffer.
    pub scratch_lens: Vec<u64>,
}

/// Limits for evaluated launch plans.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PlanLimits {
    /// Largest dynamic shared memory request in bytes (default 227 KiB, the sm_90 maximum).
    pub max_smem_bytes: u32,
    /// Largest total scratch bytes (default 4 GiB).
    pub max_scratch_bytes: u64,
    /// Largest number of launches in a plan (default 64).
    pub max_launches: usize,
    /// Largest number of blocks in one launch (default 2^31): grids beyond it cannot
    /// finish in any sensible time.
    pub max_blocks: u64,
}

impl Default for PlanLimits {
    fn default() -> Self {
        PlanLimits {
            max_smem_bytes: 227 * 1024,
            max_scratch_bytes: 4 << 30,
            max_launches: 64,
            max_blocks: 1 << 31,
        }
    }
}

/// Largest grid and block dimensions CUDA allows, x, y, z.
const MAX_GRID: [i64; 3] = [i32::MAX as i64, 65535, 65535];
const MAX_BLOCK: [i64; 3] = [1024, 1024, 64];
/// Largest number of threads in one block.
const MAX_BLOCK_THREADS: u64 = 1024;

/// One config's view of the plan: the sizes to evaluate with and the errors to name.
struct Eval<'a> {
    task: &'a Task,
    config: &'a InputConfig,
    limits: &'a PlanLimits,
}

impl Eval<'_> {
    fn invalid(&self, line: usize, message: String) -> CandidateError {
        CandidateError::InvalidLaunch {
            line,
            config: self.config.name.clone(),
            message,
        }
    }

    fn int(&self, line: usize, e: &Expr) -> Result<i64, CandidateError> {
        e.eval_int(&self.config.sizes)
            .map_err(|source| CandidateError::Expr { line, source })
    }

    /// Element counts of the scratch buffers, within the byte limit.
    fn scratch_lens(&self, scratch: &[Scratch]) -> Result<Vec<u64>, CandidateError> {
        let mut lens = Vec::new();
        let mut bytes = 0u64;
        for s in scratch {
            let n = self.int(s.line, &s.len)?;
            if n < 0 {
                return Err(self.invalid(
                    s.line,
                    format!("scratch `{}` has negative length {n}", s.name),
                ));
            }
            bytes = bytes.saturating_add((n as u64).saturating_mul(s.dtype.size_bytes()));
            if bytes > self.limits.max_scratch_bytes {
                return Err(self.invalid(
                    s.line,
                    format!(
                        "scratch buffers need more than {} bytes",
                        self.limits.max_scratch_bytes
                    ),
                ));
            }
            lens.push(n as u64);
        }
        Ok(lens)
    }

    /// Grid or block dimensions, each within `1..=max`.
    fn dims(
        &self,
        line: usize,
        exprs: &[Expr],
        what: &str,
        max: [i64; 3],
    ) -> Result<[u32; 3], CandidateError> {
        let mut out = [1u32; 3];
        for (i, e) in exprs.iter().enumerate() {
            let v = self.int(line, e)?;
            if v < 1 || v > max[i] {
                return Err(self.invalid(
                    line,
                    format!(
                        "{what}.{} = {v} (from `{e}`) is outside 1..={}",
                        ["x", "y", "z"][i],
                        max[i]
                    ),
                ));
            }
            out[i] = v as u32;
        }
        Ok(out)
    }

    /// The dynamic shared memory of a launch, within the limit.
    fn smem(&self, l: &Launch) -> Result<u32, CandidateError> {
        let Some(e) = &l.smem else {
            return Ok(0);
        };
        let v = self.int(l.line, e)?;
        if v < 0 || v > i64::from(self.limits.max_smem_bytes) {
            return Err(self.invalid(
                l.line,
                format!(
                    "smem = {v} bytes (from `{e}`) is outside 0..={}",
                    self.limits.max_smem_bytes
                ),
            ));
        }
        Ok(v as u32)
    }

    /// One explicit argument of a launch.
    fn arg(
        &self,
        l: &Launch,
        scratch: &[Scratch],
        a: &LaunchArg,
    ) -> Result<ResolvedArg, CandidateError> {
        match a {
            LaunchArg::Param(name) => self
                .task
                .params
                .iter()
                .position(|p| p.name() == name)
                .map(|index| ResolvedArg::Param { index })
                .ok_or_else(|| {
                    self.invalid(
                        l.line,
                        format!("unknown argument `{name}` (run check_abi first)"),
                    )
                }),
            LaunchArg::Scratch(name) => scratch
                .iter()
                .position(|s| &s.name == name)
                .map(|index| ResolvedArg::Scratch { index })
                .ok_or_else(|| self.invalid(l.line, format!("unknown scratch buffer `{name}`"))),
            LaunchArg::Int(e) => {
                let v = self.int(l.line, e)?;
                i32::try_from(v)
                    .map(|value| ResolvedArg::Int { value })
                    .map_err(|_| {
                        self.invalid(
                            l.line,
                            format!("argument `{e}` = {v} does not fit in an int"),
                        )
                    })
            }
        }
    }

    /// One launch: its dimensions within CUDA's limits and ours, its arguments.
    fn launch(&self, l: &Launch, scratch: &[Scratch]) -> Result<ResolvedLaunch, CandidateError> {
        let grid = self.dims(l.line, &l.grid, "grid", MAX_GRID)?;
        let block = self.dims(l.line, &l.block, "block", MAX_BLOCK)?;
        let blocks = grid.iter().map(|&g| g as u64).product::<u64>();
        if blocks > self.limits.max_blocks {
            return Err(self.invalid(
                l.line,
                format!(
                    "grid has {blocks} blocks, more than the limit of {}",
                    self.limits.max_blocks
                ),
            ));
        }
        let threads = block.iter().map(|&b| b as u64).product::<u64>();
        if threads > MAX_BLOCK_THREADS {
            return Err(self.invalid(
                l.line,
                format!("block has {threads} threads, more than {MAX_BLOCK_THREADS}"),
            ));
        }
        let smem = self.smem(l)?;
        let args = match &l.args {
            None => (0..self.task.params.len())
                .map(|index| ResolvedArg::Param { index })
                .collect(),
            Some(args) => args
                .iter()
                .map(|a| self.arg(l, scratch, a))
                .collect::<Result<Vec<_>, _>>()?,
        };
        Ok(ResolvedLaunch {
            kernel: l.kernel.clone(),
            grid,
            block,
            smem,
            args,
        })
    }
}

impl Candidate {
    /// Evaluates the plan for one config and checks CUDA's launch limits.
    pub fn resolve(
        &self,
        task: &Task,
        config: &InputConfig,
        limits: &PlanLimits,
    ) -> Result<ResolvedPlan, CandidateError> {
        let eval = Eval {
            task,
            config,
            limits,
        };
        if self.launches.len() > limits.max_launches {
            return Err(eval.invalid(
                self.launches[limits.max_launches].line,
                format!(
                    "{} launches, more than the limit of {}",
                    self.launches.len(),
                    limits.max_launches
                ),
            ));
        }
        let scratch_lens = eval.scratch_lens(&self.scratch)?;
        let launches = self
            .launches
            .iter()
            .map(|l| eval.launch(l, &self.scratch))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(ResolvedPlan {
            launches,
            scratch_lens,
        })
    }
}
