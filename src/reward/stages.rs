//! Each pipeline stage as a reward of its own.

use super::{
    require, unavailable_error, CompileStatus, Context, Evaluation, Result, Reward, Stage,
    StageUnavailable, TimingStage,
};

/// 1 / (1 + syntax problems) when a code block exists, else 0. Range [0, 1].
pub struct SyntaxReward;

impl Reward for SyntaxReward {
    fn name(&self) -> String {
        "syntax".into()
    }
    fn needs(&self, _: &Context) -> Stage {
        Stage::Syntax
    }
    fn value(&self, _: &Context, eval: &Evaluation) -> Result<f64> {
        require(self, eval, Stage::Syntax)?;
        Ok(eval.stages.syntax.as_ref().map_or(0.0, |s| {
            1.0 / (1.0 + f64::from(s.error_nodes + s.missing_nodes))
        }))
    }
}

/// 1 if the candidate compiled, else 0 (errors, rejected includes, timeouts).
/// Unavailable without NVRTC.
pub struct CompileReward;

impl Reward for CompileReward {
    fn name(&self) -> String {
        "compile".into()
    }
    fn needs(&self, _: &Context) -> Stage {
        Stage::Compile
    }
    fn value(&self, _: &Context, eval: &Evaluation) -> Result<f64> {
        require(self, eval, Stage::Compile)?;
        Ok(match &eval.stages.compile {
            Some(c) if c.is_compiled() => 1.0,
            // A compile error, or no candidate to compile.
            _ => 0.0,
        })
    }
}

/// Where the candidate got to, for rewards that need the GPU stages.
pub(crate) enum Progress {
    /// Stopped before execution (no candidate, compile failure) or faulted at run time.
    Failed,
    /// Ran; correctness known.
    Checked { passed: bool, pass_rate: f64 },
}

/// Reads the execute/correctness stages; `Err` when they could not run here.
pub(crate) fn progress(reward: &dyn Reward, eval: &Evaluation) -> Result<Progress> {
    require(reward, eval, Stage::Correctness)?;
    Ok(match &eval.stages.correctness {
        Some(c) if eval.module.is_some() => Progress::Checked {
            passed: c.passed,
            pass_rate: c.pass_rate,
        },
        // No candidate, a compile error, or a fault at run time.
        _ => Progress::Failed,
    })
}

/// 1 if every configuration matched the reference (and every anti-hacking check passed), else 0.
pub struct CorrectReward;

impl Reward for CorrectReward {
    fn name(&self) -> String {
        "correct".into()
    }
    fn needs(&self, _: &Context) -> Stage {
        Stage::Correctness
    }
    fn value(&self, _: &Context, eval: &Evaluation) -> Result<f64> {
        Ok(match progress(self, eval)? {
            Progress::Checked { passed: true, .. } => 1.0,
            _ => 0.0,
        })
    }
}

/// Fraction of configurations that passed (0 when the candidate did not run).
pub struct PassRateReward;

impl Reward for PassRateReward {
    fn name(&self) -> String {
        "pass_rate".into()
    }
    fn needs(&self, _: &Context) -> Stage {
        Stage::Correctness
    }
    fn value(&self, _: &Context, eval: &Evaluation) -> Result<f64> {
        Ok(match progress(self, eval)? {
            Progress::Checked { pass_rate, .. } => pass_rate,
            Progress::Failed => 0.0,
        })
    }
}

/// How a speedup becomes a reward.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum SpeedupScale {
    /// `clip(log2(speedup), lo, hi)` (the CudaPerf term; default lo = −1,
    /// hi = [`DEFAULT_SPEED_CAP_LOG2`]).
    Log2Clipped {
        /// Lower clip.
        lo: f64,
        /// Upper clip.
        hi: f64,
    },
    /// The plain ratio `t_ref / t_cand` (Kevin-style).
    Ratio,
}

/// The measured speedup of a correct candidate; 0 for incorrect ones (use it under a
/// [`super::Gate`] on correctness). Within-noise speedups count as 1.0 and implausible ones
/// (faster than the memory floor) as none.
pub struct SpeedupReward {
    /// The scale.
    pub scale: SpeedupScale,
}

/// Default upper clip of the log-speedup term: 2^6 = 64×. Honest kernels of the dataset
/// reach 10–50× their references; a cap of 8× (the earlier default) scored a 9.4× and a
/// 16.4× kernel the same, so the speed term stopped ordering fast kernels.
pub const DEFAULT_SPEED_CAP_LOG2: f64 = 6.0;

impl SpeedupReward {
    /// `clip(log2(speedup), −1, DEFAULT_SPEED_CAP_LOG2)`.
    pub fn log2() -> SpeedupReward {
        SpeedupReward::log2_capped(DEFAULT_SPEED_CAP_LOG2)
    }

    /// `clip(log2(speedup), −1, cap)`: a cap of 3 is the earlier 8× clip. A cap below −1
    /// is raised to −1 (the term is then constant).
    pub fn log2_capped(cap: f64) -> SpeedupReward {
        let hi = if cap.is_nan() { -1.0 } else { cap.max(-1.0) };
        SpeedupReward {
            scale: SpeedupScale::Log2Clipped { lo: -1.0, hi },
        }
    }

    /// The plain ratio.
    pub fn ratio() -> SpeedupReward {
        SpeedupReward {
            scale: SpeedupScale::Ratio,
        }
    }
}

impl Reward for SpeedupReward {
    fn name(&self) -> String {
        match self.scale {
            SpeedupScale::Log2Clipped { .. } => "speedup_log2".into(),
            SpeedupScale::Ratio => "speedup".into(),
        }
    }
    fn needs(&self, _: &Context) -> Stage {
        Stage::Timing
    }
    fn value(&self, _: &Context, eval: &Evaluation) -> Result<f64> {
        require(self, eval, Stage::Timing)?;
        let t = match (progress(self, eval)?, &eval.stages.timing) {
            (Progress::Checked { passed: true, .. }, Some(t)) => t,
            _ => return Ok(0.0),
        };
        let s = if t.implausible { 1.0 } else { t.speedup };
        Ok(match self.scale {
            SpeedupScale::Log2Clipped { lo, hi } => {
                if s > 0.0 {
                    s.log2().clamp(lo, hi)
                } else {
                    lo
                }
            }
            SpeedupScale::Ratio => s,
        })
    }
}

/// The fraction of the task's physical floor a correct candidate reaches:
/// `floor / t_cand` in (0, 1], where `floor` is the larger of the bytes floor (bytes the
/// ABI must move / device bandwidth) and the compute floor (the task's FLOPs / peak rate),
/// and `t_cand` is the time the awarded speedup stands for (`reference_us / speedup`), so
/// the noise, plausibility and stability rules of the timing stage apply unchanged and a
/// faster correct kernel never scores lower. Bounded by construction and comparable across
/// tasks: 1 is a kernel at the roofline, whatever its reference. 0 for incorrect candidates
/// (use it under a [`crate::reward::Gate`] on correctness, as the unified reward does).
///
/// A timing without a floor (a device whose bandwidth is unknown) has no roofline: the
/// reward is then unavailable rather than a made-up number.
pub struct RooflineReward;

impl RooflineReward {
    /// The roofline fraction of a timing: `None` when the timing has no floor or no time.
    pub fn fraction(t: &TimingStage) -> Option<f64> {
        let floor = t.floor_us.max(t.compute_floor_us);
        let speedup = if t.implausible { 1.0 } else { t.speedup };
        let usable = floor > 0.0 && floor.is_finite() && t.reference_us > 0.0 && speedup > 0.0;
        if !usable {
            return None;
        }
        let t_cand = t.reference_us / speedup;
        Some((floor / t_cand).clamp(f64::MIN_POSITIVE, 1.0))
    }
}

impl Reward for RooflineReward {
    fn name(&self) -> String {
        "roofline".into()
    }
    fn needs(&self, _: &Context) -> Stage {
        Stage::Timing
    }
    fn value(&self, _: &Context, eval: &Evaluation) -> Result<f64> {
        require(self, eval, Stage::Timing)?;
        let t = match (progress(self, eval)?, &eval.stages.timing) {
            (Progress::Checked { passed: true, .. }, Some(t)) => t,
            _ => return Ok(0.0),
        };
        RooflineReward::fraction(t).ok_or_else(|| {
            unavailable_error(
                &self.name(),
                StageUnavailable {
                    stage: Stage::Timing,
                    reason: format!(
                        "the timing of config `{}` has no physical floor (floor {} us, \
                         compute floor {} us, reference {} us): the device's bandwidth is unknown",
                        t.config, t.floor_us, t.compute_floor_us, t.reference_us
                    ),
                },
                eval,
            )
        })
    }
}

/// The outcome ladder of the unified reward (DESIGN.md §4):
///
/// | outcome | value |
/// |---|---|
/// | not extracted, or compile error with syntax errors | −1.0 + `syntax_credit` / (1 + syntax problems) (credit only when there is code) |
/// | compile error (clean syntax), rejected include, compile timeout | −0.75 |
/// | runtime fault, timeout, invalid launch | −0.5 |
/// | incorrect | −0.25 + 0.25 · pass_rate (< 0) |
/// | correct | 1.0 |
///
/// tree-sitter-cuda misreads some valid CUDA, so syntax errors only count when NVRTC agrees.
pub struct OutcomeLadder {
    /// Credit scale for fewer syntax errors (default 0.1).
    pub syntax_credit: f64,
}

impl Default for OutcomeLadder {
    fn default() -> Self {
        OutcomeLadder { syntax_credit: 0.1 }
    }
}

impl Reward for OutcomeLadder {
    fn name(&self) -> String {
        "outcome".into()
    }
    fn needs(&self, _: &Context) -> Stage {
        Stage::Correctness
    }
    fn value(&self, _: &Context, eval: &Evaluation) -> Result<f64> {
        let syntax_floor = || {
            -1.0 + eval.stages.syntax.as_ref().map_or(0.0, |s| {
                self.syntax_credit.clamp(0.0, 0.2)
                    / (1.0 + f64::from(s.error_nodes + s.missing_nodes))
            })
        };
        if !eval.stages.extract.is_ok() {
            return Ok(syntax_floor());
        }
        if let Some(c) = &eval.stages.compile {
            if !c.is_compiled() && c.status() != CompileStatus::Unavailable {
                let syntax_clean = eval.stages.syntax.as_ref().is_none_or(|s| s.ok);
                return Ok(if c.status() == CompileStatus::Error && !syntax_clean {
                    syntax_floor()
                } else {
                    -0.75
                });
            }
        }
        Ok(match progress(self, eval)? {
            Progress::Failed => -0.5,
            Progress::Checked { passed: true, .. } => 1.0,
            Progress::Checked { pass_rate, .. } => -0.25 + 0.25 * pass_rate.clamp(0.0, 0.999),
        })
    }
}
