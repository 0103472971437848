//! The policy: a burn MLP from a state (task family, turn, features of the previous turn's
//! report, the previous program's knobs) to one categorical distribution per knob of the
//! family; a program is one draw per knob. Trained with a PPO-style clipped objective and an
//! exact KL term to the initial policy, with Adam.

use burn::module::{Module, Param};
use burn::nn::Linear;
use burn::optim::{AdamConfig, GradientsParams, ModuleOptimizer};
use burn::tensor::activation::{log_softmax, relu};
use burn::tensor::{Device, Tensor, TensorData};
use cudaperf::pipeline::report::RewardReport;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::programs::Family;

/// Report features given to the policy at turn 2 (see [`report_features`]).
pub const REPORT_FEATURES: usize = 14;

/// Where each family's knob heads sit in the policy's output.
#[derive(Debug, Clone)]
pub struct Layout {
    /// Per family (in `Family::ALL` order): `(start, options)` of each knob head.
    pub heads: Vec<Vec<(usize, usize)>>,
    /// Total logits.
    pub total: usize,
    /// Largest number of options of one family (the width of the previous-action input).
    pub max_family_options: usize,
}

impl Layout {
    /// The layout of every family's knob table.
    pub fn new() -> Layout {
        let mut heads = Vec::new();
        let mut start = 0;
        let mut max_family_options = 0;
        for f in Family::ALL {
            let mut h = Vec::new();
            let mut fam = 0;
            for k in f.knobs() {
                h.push((start, k.options.len()));
                start += k.options.len();
                fam += k.options.len();
            }
            max_family_options = max_family_options.max(fam);
            heads.push(h);
        }
        Layout {
            heads,
            total: start,
            max_family_options,
        }
    }

    /// Width of a state vector.
    pub fn input_dim(&self) -> usize {
        Family::ALL.len() + 1 + REPORT_FEATURES + self.max_family_options
    }
}

/// What the policy sees before writing a program.
#[derive(Debug, Clone, PartialEq)]
pub struct State {
    /// The task's family.
    pub family: Family,
    /// 0 for the first turn.
    pub turn: usize,
    /// Features of the previous turn's report (zeros at turn 0).
    pub report: [f32; REPORT_FEATURES],
    /// The previous program's knob choices.
    pub prev: Option<Vec<usize>>,
}

impl State {
    /// The first turn of a task of `family`.
    pub fn first(family: Family) -> State {
        State {
            family,
            turn: 0,
            report: [0.0; REPORT_FEATURES],
            prev: None,
        }
    }

    /// The next turn after `choice` was scored with `report`.
    pub fn after(&self, choice: &[usize], report: &RewardReport) -> State {
        State {
            family: self.family,
            turn: self.turn + 1,
            report: report_features(report),
            prev: Some(choice.to_vec()),
        }
    }

    /// The input vector.
    pub fn encode(&self, layout: &Layout) -> Vec<f32> {
        let mut v = vec![0.0f32; layout.input_dim()];
        v[self.family.index()] = 1.0;
        v[Family::ALL.len()] = self.turn as f32;
        let r0 = Family::ALL.len() + 1;
        v[r0..r0 + REPORT_FEATURES].copy_from_slice(&self.report);
        if let Some(prev) = &self.prev {
            let mut at = r0 + REPORT_FEATURES;
            for (k, &o) in self.family.knobs().iter().zip(prev) {
                v[at + o] = 1.0;
                at += k.options.len();
            }
        }
        v
    }
}

/// The features of a report the policy conditions turn 2 on, each in about [-1, 1]:
/// did not compile, did not run, incorrect, correct, pass rate, clipped log2 speedup / 3,
/// structural score, ranker term, strided-access fraction, bank conflicts, static occupancy,
/// divergent barriers or interleaved reductions, spills, reward / 3.
pub fn report_features(r: &RewardReport) -> [f32; REPORT_FEATURES] {
    let s = &r.stages;
    let mut f = [0.0f32; REPORT_FEATURES];
    let compiled = s.extract.is_ok() && s.compile.as_ref().is_some_and(|c| c.is_compiled());
    let status = s.execute.as_ref().map(|e| e.status.name()).unwrap_or("");
    f[0] = f32::from(!compiled);
    f[1] = f32::from(
        compiled
            && matches!(
                status,
                "invalid_launch" | "cuda_error" | "timeout" | "crashed"
            ),
    );
    if let Some(c) = &s.correctness {
        f[2] = f32::from(!c.passed);
        f[3] = f32::from(c.passed);
        f[4] = if c.pass_rate.is_finite() {
            c.pass_rate as f32
        } else {
            0.0
        };
    }
    if let Some(t) = &s.timing {
        if t.speedup > 0.0 && t.speedup.is_finite() {
            f[5] = (t.speedup.log2().clamp(-3.0, 3.0) / 3.0) as f32;
        }
    }
    if let Some(st) = &s.structure {
        f[6] = st.score as f32;
        let g = &st.features.totals.global_accesses;
        let n = f64::from(g.coalesced + g.strided + g.uniform + g.indirect + g.unknown);
        if n > 0.0 {
            f[8] = (f64::from(g.strided) / n) as f32;
        }
        f[9] = f32::from(st.features.totals.shared.bank_conflicts > 0);
        f[10] = st
            .occupancy
            .iter()
            .map(|o| o.occupancy)
            .reduce(f64::min)
            .unwrap_or(0.0) as f32;
        f[11] = f32::from(
            st.features.totals.sync.divergent_barriers
                + st.features.totals.divergence.interleaved_modulo
                > 0,
        );
    }
    if let Some(k) = s.ranker.as_ref().and_then(|k| k.scores()) {
        if k.prob_faster.is_finite() {
            f[7] = (2.0 * k.prob_faster - 1.0) as f32;
        }
    }
    if let Some(c) = &s.compile {
        f[12] = f32::from(c.kernels().iter().any(|k| k.spill_store_bytes > 0));
    }
    if r.value.is_finite() {
        f[13] = (r.value.clamp(-1.0, 3.0) / 3.0) as f32;
    }
    f
}

/// The burn module: `Linear → ReLU → … → Linear` (logits of every knob head).
#[derive(Module, Debug)]
pub struct PolicyNet {
    /// Dense layers; a ReLU follows each but the last.
    pub layers: Vec<Linear>,
}

impl PolicyNet {
    /// `[batch, input] → [batch, logits]`.
    pub fn forward(&self, x: Tensor<2>) -> Tensor<2> {
        let last = self.layers.len() - 1;
        let mut h = x;
        for (i, l) in self.layers.iter().enumerate() {
            h = l.forward(h);
            if i < last {
                h = relu(h);
            }
        }
        h
    }
}

/// Plain weights of the MLP, for sampling and for the frozen reference (no tensors).
#[derive(Debug, Clone)]
struct PlainMlp {
    /// `(inputs, outputs, weight [inputs × outputs] row-major, bias)`.
    layers: Vec<(usize, usize, Vec<f32>, Vec<f32>)>,
}

impl PlainMlp {
    fn forward(&self, x: &[f32]) -> Vec<f32> {
        let mut cur = x.to_vec();
        let last = self.layers.len() - 1;
        for (li, (i, o, w, b)) in self.layers.iter().enumerate() {
            let mut next = b.clone();
            for (xi, row) in cur.iter().zip(w.chunks_exact(*o)).take(*i) {
                if *xi != 0.0 {
                    for (n, wv) in next.iter_mut().zip(row) {
                        *n += xi * wv;
                    }
                }
            }
            if li < last {
                next.iter_mut().for_each(|v| *v = v.max(0.0));
            }
            cur = next;
        }
        cur
    }

    fn from_net(net: &PolicyNet) -> PlainMlp {
        let read = |t: Tensor<1>| -> Vec<f32> {
            t.into_data().try_into_vec_as::<f32>().unwrap_or_default()
        };
        PlainMlp {
            layers: net
                .layers
                .iter()
                .map(|l| {
                    let w = l.weight.val();
                    let [i, o] = w.dims();
                    let wv = read(w.reshape([i * o]));
                    let bv = l.bias.as_ref().map_or(vec![0.0; o], |b| read(b.val()));
                    (i, o, wv, bv)
                })
                .collect(),
        }
    }
}

/// Hyper-parameters of the policy and its update.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PolicyConfig {
    /// Hidden width (two hidden layers).
    pub hidden: usize,
    /// Adam learning rate.
    pub lr: f64,
    /// PPO clip ε.
    pub clip: f64,
    /// Weight of KL(π ‖ π_initial).
    pub kl_coef: f64,
    /// Gradient steps per batch (the first is on-policy, ratio 1).
    pub ppo_epochs: usize,
    /// Seed of the initial weights.
    pub seed: u64,
}

impl Default for PolicyConfig {
    fn default() -> Self {
        PolicyConfig {
            hidden: 64,
            lr: 0.003,
            clip: 0.2,
            kl_coef: 0.05,
            ppo_epochs: 4,
            seed: 0,
        }
    }
}

/// One sampled decision with what the update needs.
#[derive(Debug, Clone)]
pub struct Sample {
    /// The state.
    pub state: State,
    /// The knob choices.
    pub action: Vec<usize>,
    /// log π_old(action | state).
    pub old_logp: f64,
    /// Its advantage.
    pub advantage: f64,
}

/// What one update did.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct UpdateStats {
    /// Clipped surrogate loss of the last epoch.
    pub policy_loss: f64,
    /// Mean KL(π ‖ π_initial) over the batch's states after the update.
    pub kl: f64,
    /// Fraction of samples whose ratio left [1 − ε, 1 + ε] in the last epoch.
    pub clip_fraction: f64,
}

/// The policy with its optimizer and frozen initial copy.
pub struct Policy {
    net: PolicyNet,
    plain: PlainMlp,
    reference: PlainMlp,
    optim: ModuleOptimizer,
    device: Device,
    /// The head layout.
    pub layout: Layout,
    /// Its configuration.
    pub config: PolicyConfig,
}

impl Policy {
    /// A seeded policy whose first distribution is nearly uniform (the last layer starts at
    /// 1 % of the usual scale).
    pub fn new(config: PolicyConfig) -> Policy {
        let layout = Layout::new();
        let device = Device::default().autodiff();
        let mut rng = SmallRng::seed_from_u64(config.seed ^ 0x9E37_79B9_7F4A_7C15);
        let dims = [
            layout.input_dim(),
            config.hidden,
            config.hidden,
            layout.total,
        ];
        let layers = dims
            .windows(2)
            .enumerate()
            .map(|(li, w)| {
                let (i, o) = (w[0], w[1]);
                let scale = if li == dims.len() - 2 { 0.01 } else { 1.0 };
                let bound = scale / (i as f32).sqrt();
                let wv: Vec<f32> = (0..i * o)
                    .map(|_| rng.random_range(-bound..bound))
                    .collect();
                let bv: Vec<f32> = (0..o).map(|_| rng.random_range(-bound..bound)).collect();
                Linear {
                    weight: Param::from_tensor(Tensor::from_data(
                        TensorData::new(wv, [i, o]),
                        &device,
                    )),
                    bias: Some(Param::from_tensor(Tensor::from_data(
                        TensorData::new(bv, [o]),
                        &device,
                    ))),
                }
            })
            .collect();
        let net = PolicyNet { layers };
        let plain = PlainMlp::from_net(&net);
        Policy {
            reference: plain.clone(),
            plain,
            net,
            optim: AdamConfig::new().init(),
            device,
            layout,
            config,
        }
    }

    fn head_log_probs(&self, logits: &[f32], family: Family) -> Vec<Vec<f64>> {
        self.layout.heads[family.index()]
            .iter()
            .map(|&(start, len)| {
                let z = &logits[start..start + len];
                let m = z.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
                let lse = m + z.iter().map(|&v| (v as f64 - m).exp()).sum::<f64>().ln();
                z.iter().map(|&v| v as f64 - lse).collect()
            })
            .collect()
    }

    /// Log-probabilities of every option of every knob of the state's family.
    pub fn distribution(&self, state: &State) -> Vec<Vec<f64>> {
        let logits = self.plain.forward(&state.encode(&self.layout));
        self.head_log_probs(&logits, state.family)
    }

    /// Draws a program (one option per knob); returns it with its log-probability.
    pub fn sample(&self, state: &State, rng: &mut SmallRng) -> (Vec<usize>, f64) {
        let dist = self.distribution(state);
        let mut logp = 0.0;
        let choice = dist
            .iter()
            .map(|lp| {
                let u: f64 = rng.random();
                let mut acc = 0.0;
                let mut pick = lp.len() - 1;
                for (o, l) in lp.iter().enumerate() {
                    acc += l.exp();
                    if u < acc {
                        pick = o;
                        break;
                    }
                }
                logp += lp[pick];
                pick
            })
            .collect();
        (choice, logp)
    }

    /// The most likely program.
    pub fn greedy(&self, state: &State) -> (Vec<usize>, f64) {
        let dist = self.distribution(state);
        let mut logp = 0.0;
        let choice = dist
            .iter()
            .map(|lp| {
                let (o, l) = lp
                    .iter()
                    .enumerate()
                    .fold(
                        (0, f64::NEG_INFINITY),
                        |b, (o, &l)| if l > b.1 { (o, l) } else { b },
                    );
                logp += l;
                o
            })
            .collect();
        (choice, logp)
    }

    /// Mean exact KL(π ‖ π_initial) over `states`.
    pub fn kl_to_initial(&self, states: &[&State]) -> f64 {
        if states.is_empty() {
            return 0.0;
        }
        let mut total = 0.0;
        for s in states {
            let x = s.encode(&self.layout);
            let p = self.head_log_probs(&self.plain.forward(&x), s.family);
            let q = self.head_log_probs(&self.reference.forward(&x), s.family);
            for (lp, lq) in p.iter().zip(&q) {
                total += lp
                    .iter()
                    .zip(lq)
                    .map(|(a, b)| a.exp() * (a - b))
                    .sum::<f64>();
            }
        }
        total / states.len() as f64
    }

    /// PPO-style update on a batch: `ppo_epochs` Adam steps on
    /// `−mean(min(r·A, clip(r, 1 − ε, 1 + ε)·A)) + β · mean KL(π ‖ π_initial)`,
    /// `r = exp(log π(a|s) − log π_old(a|s))`, the KL exact over every knob of the family.
    pub fn update(&mut self, batch: &[Sample]) -> UpdateStats {
        let b = batch.len();
        if b == 0 {
            return UpdateStats::default();
        }
        let dim = self.layout.input_dim();
        let x: Vec<f32> = batch
            .iter()
            .flat_map(|s| s.state.encode(&self.layout))
            .collect();
        let old: Vec<f32> = batch.iter().map(|s| s.old_logp as f32).collect();
        let adv: Vec<f32> = batch.iter().map(|s| s.advantage as f32).collect();
        // Per head: the action one-hot and the family mask (rows of other families are 0),
        // and the reference log-probabilities (constants).
        let ref_logits: Vec<Vec<f32>> = batch
            .iter()
            .map(|s| self.reference.forward(&s.state.encode(&self.layout)))
            .collect();
        struct Head {
            start: usize,
            len: usize,
            action: Vec<f32>,
            mask: Vec<f32>,
            ref_logp: Vec<f32>,
        }
        let mut heads: Vec<Head> = Vec::new();
        for f in Family::ALL {
            if !batch.iter().any(|s| s.state.family == f) {
                continue;
            }
            for (k, &(start, len)) in self.layout.heads[f.index()].iter().enumerate() {
                let mut h = Head {
                    start,
                    len,
                    action: vec![0.0; b * len],
                    mask: vec![0.0; b * len],
                    ref_logp: vec![0.0; b * len],
                };
                for (r, s) in batch.iter().enumerate() {
                    if s.state.family != f {
                        continue;
                    }
                    h.action[r * len + s.action[k]] = 1.0;
                    let z = &ref_logits[r][start..start + len];
                    let m = z.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                    let lse = m + z.iter().map(|v| (v - m).exp()).sum::<f32>().ln();
                    for (o, zo) in z.iter().enumerate() {
                        h.mask[r * len + o] = 1.0;
                        h.ref_logp[r * len + o] = zo - lse;
                    }
                }
                heads.push(h);
            }
        }
        let d = &self.device;
        let t2 = |v: &[f32], cols: usize| {
            Tensor::<2>::from_data(TensorData::new(v.to_vec(), [b, cols]), d)
        };
        let xt = t2(&x, dim);
        let old_t = Tensor::<1>::from_data(TensorData::new(old, [b]), d);
        let adv_t = Tensor::<1>::from_data(TensorData::new(adv, [b]), d);
        let eps = self.config.clip;
        let mut stats = UpdateStats::default();
        for _ in 0..self.config.ppo_epochs.max(1) {
            let logits = self.net.forward(xt.clone());
            let mut logp = Tensor::<1>::zeros([b], d);
            let mut kl = Tensor::<1>::zeros([b], d);
            for h in &heads {
                let lp = log_softmax(logits.clone().narrow(1, h.start, h.len), 1);
                let a = t2(&h.action, h.len);
                let m = t2(&h.mask, h.len);
                let r = t2(&h.ref_logp, h.len);
                logp = logp + (lp.clone() * a).sum_dim(1).reshape([b]);
                let p = lp.clone().exp();
                kl = kl + (p * (lp - r) * m).sum_dim(1).reshape([b]);
            }
            let ratio = (logp - old_t.clone()).exp();
            let unclipped = ratio.clone() * adv_t.clone();
            let clipped = ratio.clone().clamp(1.0 - eps, 1.0 + eps) * adv_t.clone();
            let surrogate = unclipped.min_pair(clipped).mean().neg();
            let kl_mean = kl.mean();
            let loss = surrogate.clone() + kl_mean.mul_scalar(self.config.kl_coef);
            let ratios: Vec<f32> = ratio
                .into_data()
                .try_into_vec_as::<f32>()
                .unwrap_or_default();
            stats.clip_fraction = ratios
                .iter()
                .filter(|r| (**r as f64 - 1.0).abs() > eps)
                .count() as f64
                / b as f64;
            stats.policy_loss = surrogate
                .into_data()
                .try_into_vec_as::<f32>()
                .ok()
                .and_then(|v| v.first().copied())
                .unwrap_or(f32::NAN) as f64;
            let grads = GradientsParams::from_grads(loss.backward(), &self.net);
            let net = std::mem::replace(&mut self.net, PolicyNet { layers: Vec::new() });
            self.net = self.optim.step(self.config.lr, net, grads);
        }
        self.plain = PlainMlp::from_net(&self.net);
        let states: Vec<&State> = batch.iter().map(|s| &s.state).collect();
        stats.kl = self.kl_to_initial(&states);
        stats
    }
}
