//! Ready-made rewards, each built only from the stage rewards and combinators.

use super::stages::{SpeedupScale, DEFAULT_SPEED_CAP_LOG2};
use super::{
    Clip, CompileReward, CorrectReward, Gate, Map, OutcomeLadder, PassRateReward, RankerReward,
    Reward, RooflineReward, SpeedupReward, Staged, StructuralReward, SyntaxReward, Weighted,
};

/// Weights of the unified reward (DESIGN.md §4), and the cap of its speed term.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CudaPerfWeights {
    /// Weight of `clip(log2(speedup), −1, speed_cap_log2)` (default 0.3).
    pub speed: f64,
    /// Weight of the structural score in [-1, 1] (default 0.1).
    pub structure: f64,
    /// Weight of the ranker term 2σ(s_cand − s_ref) − 1 (default 0.1).
    pub rank: f64,
    /// Syntax credit for programs that do not compile (default 0.1).
    pub syntax_credit: f64,
    /// Weight of the roofline term, the fraction of the task's physical floor reached, in
    /// (0, 1] (default 0.1; see [`RooflineReward`]). It keeps ordering kernels past the
    /// speed term's cap and is comparable across tasks.
    pub roofline: f64,
    /// Upper clip of the log2-speedup term (default [`DEFAULT_SPEED_CAP_LOG2`] = 6, i.e.
    /// 64×; 3 is the earlier 8× clip). Values below −1 count as −1.
    pub speed_cap_log2: f64,
}

impl Default for CudaPerfWeights {
    fn default() -> Self {
        CudaPerfWeights {
            speed: 0.3,
            structure: 0.1,
            rank: 0.1,
            syntax_credit: 0.1,
            roofline: 0.1,
            speed_cap_log2: DEFAULT_SPEED_CAP_LOG2,
        }
    }
}

impl CudaPerfWeights {
    /// The smallest value a correct program can get: `1 − speed_loss − |structure| − |rank|
    /// − roofline_loss`, where the speed term `clip(log2(speedup), −1, cap)` can cost
    /// `speed` (at −1) for a positive weight and `cap·|speed|` (at the cap) for a negative
    /// one, and the roofline term (in (0, 1]) costs nothing for a positive weight and up to
    /// `|roofline|` for a negative one. Must stay above 0, the most an incorrect program can
    /// get.
    pub fn correct_floor(&self) -> f64 {
        1.0 - self.speed_loss() - self.structure.abs() - self.rank.abs() - self.roofline_loss()
    }

    /// The speed term's cap as used: NaN and values below −1 count as −1.
    pub fn cap(&self) -> f64 {
        if self.speed_cap_log2.is_nan() {
            -1.0
        } else {
            self.speed_cap_log2.max(-1.0)
        }
    }

    /// The most the speed term can subtract from a correct program.
    fn speed_loss(&self) -> f64 {
        // The term ranges over [−1, cap] (the cap is at least −1).
        if self.speed >= 0.0 {
            self.speed
        } else {
            self.cap().max(0.0) * -self.speed
        }
    }

    /// The most the roofline term can subtract from a correct program.
    fn roofline_loss(&self) -> f64 {
        (-self.roofline).max(0.0)
    }
}

/// The unified CudaPerf reward:
/// ```text
/// outcome ladder (−1 … 1; see OutcomeLadder)
///   + [correct] · ( w_speed · clip(log2(speedup), −1, cap)      cap = 6 by default
///                 + w_roofline · floor_us / t_cand              in (0, 1]
///                 + w_struct · structural_score
///                 + w_rank · (2σ(s_cand − s_ref) − 1) )
/// ```
/// The ranker term reads the evaluator's ranker model (the shipped one by default, see
/// `EvalOptions::ranker_model`); use [`cudaperf_with`] to leave it out or change weights.
/// Weights whose losses add up to 0.95 or more would let a correct program score at or
/// below an incorrect one; they are scaled down so that cannot happen.
pub fn cudaperf() -> Weighted {
    cudaperf_with(
        CudaPerfWeights::default(),
        Some(Box::new(StructuralReward)),
        Some(Box::new(RankerReward)),
    )
}

/// The unified reward with explicit weights and optional structure and ranker terms (a
/// zero roofline weight leaves the roofline term out).
pub fn cudaperf_with(
    weights: CudaPerfWeights,
    structure: Option<Box<dyn Reward>>,
    ranker: Option<Box<dyn Reward>>,
) -> Weighted {
    let mut w = weights;
    let extra = w.speed_loss()
        + w.roofline_loss()
        + if structure.is_some() {
            w.structure.abs()
        } else {
            0.0
        }
        + if ranker.is_some() { w.rank.abs() } else { 0.0 };
    if extra >= 0.95 {
        let k = 0.95 / extra;
        w.speed *= k;
        w.structure *= k;
        w.rank *= k;
        w.roofline *= k;
    }
    let mut r = Weighted::new()
        .named("cudaperf")
        .add(
            1.0,
            OutcomeLadder {
                syntax_credit: w.syntax_credit,
            },
        )
        .add(
            w.speed,
            Gate::new(CorrectReward, 1.0, SpeedupReward::log2_capped(w.cap())),
        );
    if w.roofline != 0.0 {
        r = r.add(w.roofline, Gate::new(CorrectReward, 1.0, RooflineReward));
    }
    if let Some(s) = structure {
        r = r.add(
            w.structure,
            Gate::new(CorrectReward, 1.0, Clip::new(s, -1.0, 1.0)),
        );
    }
    if let Some(k) = ranker {
        r = r.add(
            w.rank,
            Gate::new(CorrectReward, 1.0, Clip::new(k, -1.0, 1.0)),
        );
    }
    r
}

/// 1 if correct on every configuration, else 0.
pub fn correctness_only() -> CorrectReward {
    CorrectReward
}

/// Kevin-32B (Baronio et al., 2025): `0.3 · correct + correct · t_ref / t_cand`.
pub fn kevin() -> Weighted {
    Weighted::new().named("kevin").add(0.3, CorrectReward).add(
        1.0,
        Gate::new(
            CorrectReward,
            1.0,
            SpeedupReward {
                scale: SpeedupScale::Ratio,
            },
        ),
    )
}

/// KernelBench's fast_p as a reward: 1 if correct and speedup > p, else 0.
pub fn kernelbench_fast_p(p: f64) -> Gate {
    Gate::new(
        CorrectReward,
        1.0,
        Map::new(format!("fast_{p}"), SpeedupReward::ratio(), move |s| {
            if s > p {
                1.0
            } else {
                0.0
            }
        }),
    )
}

/// Step boundaries of [`staged_dhrcl`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DhrclSchedule {
    /// First step of the execution stage (default 100).
    pub execution_from: u64,
    /// First step of the pass-rate-and-speed stage (default 300).
    pub performance_from: u64,
}

impl Default for DhrclSchedule {
    fn default() -> Self {
        DhrclSchedule {
            execution_from: 100,
            performance_from: 300,
        }
    }
}

/// A DHRCL-style curriculum:
/// * steps `[0, execution_from)`: `0.5 · syntax + 0.5 · compile` (no GPU needed);
/// * steps `[execution_from, performance_from)`: `0.2 · compile + 0.8 · pass_rate`;
/// * afterwards: the unified [`cudaperf`] reward.
pub fn staged_dhrcl(schedule: DhrclSchedule) -> Staged {
    Staged::new()
        .from_step(
            0,
            Weighted::new()
                .named("dhrcl_syntax")
                .add(0.5, SyntaxReward)
                .add(0.5, CompileReward),
        )
        .from_step(
            schedule.execution_from,
            Weighted::new()
                .named("dhrcl_execution")
                .add(0.2, CompileReward)
                .add(0.8, PassRateReward),
        )
        .from_step(schedule.performance_from, cudaperf())
}
