//! The rewards the examples train with: the crate's presets on a GPU, and a static reward
//! (compile + launch plan + structure + ranker) that needs no GPU, so CI can run the loop.

use cudaperf::pipeline::report::ExecStatus;
use cudaperf::pipeline::report::{RewardReport, Term};
use cudaperf::pipeline::{Evaluation, Stage};
use cudaperf::reward::{presets, Context, Reward, RewardError, StructuralReward};

/// The static reward: what can be known without running the kernel.
///
/// | outcome | value |
/// |---|---|
/// | no candidate | −1 |
/// | compile error | −0.75 |
/// | invalid launch plan (checked against CUDA's limits, no GPU needed) | −0.5 |
/// | compiles and launches | 0.5 + w_struct · structural score + w_rank · (2σ(s_cand − s_ref) − 1) |
///
/// With `w_struct + w_rank ≤ 0.5` a launchable program never scores below one that is not.
/// It cannot see correctness or speed: that is what the GPU reward adds.
pub struct StaticReward {
    /// Weight of the structural score in [-1, 1].
    pub w_struct: f64,
    /// Weight of the ranker term in [-1, 1].
    pub w_rank: f64,
}

impl StaticReward {
    /// Outcome only (compiles and launches).
    pub fn outcome() -> StaticReward {
        StaticReward {
            w_struct: 0.0,
            w_rank: 0.0,
        }
    }

    /// Outcome + structure.
    pub fn with_structure() -> StaticReward {
        StaticReward {
            w_struct: 0.25,
            w_rank: 0.0,
        }
    }

    /// Outcome + structure + ranker (the default static reward).
    pub fn full() -> StaticReward {
        StaticReward {
            w_struct: 0.25,
            w_rank: 0.25,
        }
    }

    fn parts(&self, eval: &Evaluation) -> (f64, f64, f64) {
        let s = &eval.stages;
        if !s.extract.is_ok() {
            return (-1.0, 0.0, 0.0);
        }
        if !s.compile.as_ref().is_some_and(|c| c.is_compiled()) {
            return (-0.75, 0.0, 0.0);
        }
        if let Some(ExecStatus::InvalidLaunch { .. }) = s.execute.as_ref().map(|e| &e.status) {
            return (-0.5, 0.0, 0.0);
        }
        let structure = s
            .structure
            .as_ref()
            .map_or(0.0, |x| x.score.clamp(-1.0, 1.0));
        let rank = s
            .ranker
            .as_ref()
            .and_then(|r| r.scores())
            .filter(|r| r.prob_faster.is_finite())
            .map_or(0.0, |r| 2.0 * r.prob_faster - 1.0);
        (0.5, structure, rank)
    }
}

impl Reward for StaticReward {
    fn name(&self) -> String {
        "static".into()
    }
    // Correctness, so the launch plan is checked (without a GPU the run itself reports
    // `unavailable`, which this reward does not read).
    fn needs(&self, _: &Context) -> Stage {
        Stage::Correctness
    }
    fn value(&self, ctx: &Context, eval: &Evaluation) -> cudaperf::reward::Result<f64> {
        if let Some(c) = eval
            .stages
            .compile
            .as_ref()
            .filter(|c| c.status() == cudaperf::pipeline::report::CompileStatus::Unavailable)
        {
            return Err(RewardError::Unavailable {
                reward: self.name(),
                stage: Stage::Compile,
                reason: c.reason().unwrap_or_default().to_string(),
                report: Box::new(RewardReport {
                    value: f64::NAN,
                    reward: self.name(),
                    verdict: eval.verdict_at(Stage::Correctness),
                    terms: self.terms(ctx, eval),
                    stages: eval.stages.clone(),
                }),
            });
        }
        let (o, s, r) = self.parts(eval);
        Ok(o + self.w_struct * s + self.w_rank * r)
    }
    fn terms(&self, _: &Context, eval: &Evaluation) -> Vec<Term> {
        let (o, s, r) = self.parts(eval);
        vec![
            Term {
                name: "static_outcome".into(),
                weight: 1.0,
                value: o,
            },
            Term {
                name: "structure".into(),
                weight: self.w_struct,
                value: s,
            },
            Term {
                name: "ranker".into(),
                weight: self.w_rank,
                value: r,
            },
        ]
    }
}

/// A reward by name: `cudaperf`, `kevin`, `outcome_structure` (outcome ladder + speed +
/// structure, no ranker), `static`, `static_outcome`, `static_structure`.
pub fn by_name(name: &str) -> Option<Box<dyn Reward>> {
    Some(match name {
        "cudaperf" => Box::new(presets::cudaperf()),
        "kevin" => Box::new(presets::kevin()),
        "outcome_structure" => Box::new(presets::cudaperf_with(
            presets::CudaPerfWeights::default(),
            Some(Box::new(StructuralReward)),
            None,
        )),
        "static" => Box::new(StaticReward::full()),
        "static_outcome" => Box::new(StaticReward::outcome()),
        "static_structure" => Box::new(StaticReward::with_structure()),
        _ => return None,
    })
}

/// Whether a reward name needs the GPU stages.
pub fn needs_gpu(name: &str) -> bool {
    !name.starts_with("static")
}
