//! Combinators: build rewards from rewards.

use super::{Context, Evaluation, Result, Reward, Stage, Term};

/// Σ wᵢ · rᵢ.
pub struct Weighted {
    name: String,
    parts: Vec<(f64, Box<dyn Reward>)>,
}

impl Default for Weighted {
    fn default() -> Self {
        Weighted::new()
    }
}

impl Weighted {
    /// An empty sum named `weighted`.
    pub fn new() -> Weighted {
        Weighted {
            name: "weighted".into(),
            parts: Vec::new(),
        }
    }

    /// Renames the sum (shown in reports).
    pub fn named(mut self, name: impl Into<String>) -> Weighted {
        self.name = name.into();
        self
    }

    /// Adds `weight · reward`.
    pub fn add(mut self, weight: f64, reward: impl Reward + 'static) -> Weighted {
        self.parts.push((weight, Box::new(reward)));
        self
    }
}

impl Reward for Weighted {
    fn name(&self) -> String {
        self.name.clone()
    }
    fn needs(&self, ctx: &Context) -> Stage {
        self.parts
            .iter()
            .map(|(_, r)| r.needs(ctx))
            .max()
            .unwrap_or(Stage::Extract)
    }
    fn value(&self, ctx: &Context, eval: &Evaluation) -> Result<f64> {
        let mut sum = 0.0;
        for (w, r) in &self.parts {
            if *w != 0.0 {
                sum += w * r.value(ctx, eval)?;
            }
        }
        Ok(sum)
    }
    fn terms(&self, ctx: &Context, eval: &Evaluation) -> Vec<Term> {
        self.parts
            .iter()
            .filter_map(|(w, r)| {
                let value = if *w == 0.0 {
                    0.0
                } else {
                    r.value(ctx, eval).ok()?
                };
                Some(Term {
                    name: r.name(),
                    weight: *w,
                    value,
                })
            })
            .collect()
    }
}

/// `then` if `gate ≥ threshold`, else `otherwise` (default 0). `then` is not evaluated
/// when the gate is closed.
pub struct Gate {
    gate: Box<dyn Reward>,
    threshold: f64,
    then: Box<dyn Reward>,
    otherwise: f64,
}

impl Gate {
    /// `then` only when `gate` reaches `threshold`; 0 otherwise.
    pub fn new(gate: impl Reward + 'static, threshold: f64, then: impl Reward + 'static) -> Gate {
        Gate {
            gate: Box::new(gate),
            threshold,
            then: Box::new(then),
            otherwise: 0.0,
        }
    }

    /// The value when the gate is closed (default 0).
    pub fn otherwise(mut self, value: f64) -> Gate {
        self.otherwise = value;
        self
    }
}

impl Reward for Gate {
    fn name(&self) -> String {
        format!("{}|{}", self.gate.name(), self.then.name())
    }
    fn needs(&self, ctx: &Context) -> Stage {
        self.gate.needs(ctx).max(self.then.needs(ctx))
    }
    fn value(&self, ctx: &Context, eval: &Evaluation) -> Result<f64> {
        if self.gate.value(ctx, eval)? >= self.threshold {
            self.then.value(ctx, eval)
        } else {
            Ok(self.otherwise)
        }
    }
}

/// A curriculum: the reward whose starting step is the latest one ≤ the current step
/// (DHRCL-style: syntax first, then execution, then pass rate and structure).
pub struct Staged {
    stages: Vec<(u64, Box<dyn Reward>)>,
}

impl Default for Staged {
    fn default() -> Self {
        Staged::new()
    }
}

impl Staged {
    /// An empty curriculum.
    pub fn new() -> Staged {
        Staged { stages: Vec::new() }
    }

    /// Uses `reward` from training step `from_step` on.
    pub fn from_step(mut self, from_step: u64, reward: impl Reward + 'static) -> Staged {
        self.stages.push((from_step, Box::new(reward)));
        self.stages.sort_by_key(|(s, _)| *s);
        self
    }

    fn current(&self, step: u64) -> Option<&dyn Reward> {
        self.stages
            .iter()
            .rev()
            .find(|(s, _)| *s <= step)
            .or_else(|| self.stages.first())
            .map(|(_, r)| r.as_ref())
    }
}

impl Reward for Staged {
    fn name(&self) -> String {
        "staged".into()
    }
    fn needs(&self, ctx: &Context) -> Stage {
        self.current(ctx.step)
            .map_or(Stage::Extract, |r| r.needs(ctx))
    }
    fn value(&self, ctx: &Context, eval: &Evaluation) -> Result<f64> {
        self.current(ctx.step)
            .map_or(Ok(0.0), |r| r.value(ctx, eval))
    }
    fn terms(&self, ctx: &Context, eval: &Evaluation) -> Vec<Term> {
        self.current(ctx.step)
            .map(|r| {
                let mut t = r.terms(ctx, eval);
                if t.is_empty() {
                    if let Ok(v) = r.value(ctx, eval) {
                        t.push(Term {
                            name: r.name(),
                            weight: 1.0,
                            value: v,
                        });
                    }
                }
                t
            })
            .unwrap_or_default()
    }
}

/// Clamps a reward to `[lo, hi]`.
pub struct Clip {
    inner: Box<dyn Reward>,
    lo: f64,
    hi: f64,
}

impl Clip {
    /// `clamp(inner, lo, hi)`.
    pub fn new(inner: impl Reward + 'static, lo: f64, hi: f64) -> Clip {
        Clip {
            inner: Box::new(inner),
            lo: lo.min(hi),
            hi: hi.max(lo),
        }
    }
}

impl Reward for Clip {
    fn name(&self) -> String {
        format!("clip({})", self.inner.name())
    }
    fn needs(&self, ctx: &Context) -> Stage {
        self.inner.needs(ctx)
    }
    fn value(&self, ctx: &Context, eval: &Evaluation) -> Result<f64> {
        Ok(self.inner.value(ctx, eval)?.clamp(self.lo, self.hi))
    }
    fn terms(&self, ctx: &Context, eval: &Evaluation) -> Vec<Term> {
        self.inner.terms(ctx, eval)
    }
}

/// Applies any `f64 → f64` to a reward.
pub struct Map {
    name: String,
    inner: Box<dyn Reward>,
    f: Box<dyn Fn(f64) -> f64 + Send + Sync>,
}

impl Map {
    /// `f(inner)`, reported as `name`.
    pub fn new(
        name: impl Into<String>,
        inner: impl Reward + 'static,
        f: impl Fn(f64) -> f64 + Send + Sync + 'static,
    ) -> Map {
        Map {
            name: name.into(),
            inner: Box::new(inner),
            f: Box::new(f),
        }
    }
}

impl Reward for Map {
    fn name(&self) -> String {
        self.name.clone()
    }
    fn needs(&self, ctx: &Context) -> Stage {
        self.inner.needs(ctx)
    }
    fn value(&self, ctx: &Context, eval: &Evaluation) -> Result<f64> {
        Ok((self.f)(self.inner.value(ctx, eval)?))
    }
}
