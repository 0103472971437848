//! The scorer `s(x)`: a small MLP, as a burn module (training, batched inference on any
//! device) and as plain weights with a plain-Rust forward pass (single-candidate inference
//! without tensor overhead; tested to match burn within 1e-5).

use burn::module::{Module, Param};
use burn::nn::Linear;
use burn::tensor::activation::relu;
use burn::tensor::{Device, Tensor, TensorData};
use serde::{Deserialize, Serialize};

use super::error::{RankerError, Result};
use super::rng::SplitMix64;

/// The burn module of the scorer: `Linear → ReLU → … → Linear(…, 1)`.
///
/// Layer `i` is saved under the record path `layers.{i}.weight` (shape `[inputs, outputs]`)
/// and `layers.{i}.bias` (shape `[outputs]`).
#[derive(Module, Debug)]
pub struct ScorerNet {
    /// The dense layers; a ReLU follows each one except the last.
    pub layers: Vec<Linear>,
}

impl ScorerNet {
    /// Scores a batch: `x` is `[n, inputs]` (normalised features), the result `[n]`.
    pub fn forward(&self, x: Tensor<2>) -> Tensor<1> {
        self.forward_with_dropout(x, &mut |_, _| None)
    }

    /// Forward pass that multiplies each hidden activation `[n, width]` by the mask that
    /// `mask(n, width)` returns (if any); training uses it for dropout with the ranker's own
    /// seeded generator, so runs stay reproducible whatever the backend's RNG does.
    pub(crate) fn forward_with_dropout(
        &self,
        x: Tensor<2>,
        mask: &mut dyn FnMut(usize, usize) -> Option<Tensor<2>>,
    ) -> Tensor<1> {
        let last = self.layers.len().saturating_sub(1);
        let mut h = x;
        for (i, layer) in self.layers.iter().enumerate() {
            h = layer.forward(h);
            if i < last {
                h = relu(h);
                let [n, width] = h.dims();
                if let Some(m) = mask(n, width) {
                    h = h * m;
                }
            }
        }
        let [n, _] = h.dims();
        h.reshape([n])
    }
}

/// The burn module of an ensemble of scorers, as saved: member `m`'s layer `i` is at
/// `members.{m}.layers.{i}.weight` / `.bias`.
#[derive(Module, Debug)]
pub struct EnsembleNet {
    /// The members, in order.
    pub members: Vec<ScorerNet>,
}

/// One dense layer as plain data, weight row-major `[inputs][outputs]` (burn's row layout).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DenseLayer {
    /// Input width.
    pub inputs: usize,
    /// Output width.
    pub outputs: usize,
    /// `inputs * outputs` values; `weight[i * outputs + j]` connects input `i` to output `j`.
    pub weight: Vec<f32>,
    /// `outputs` values.
    pub bias: Vec<f32>,
}

/// The scorer's weights as plain vectors, with a forward pass that needs no tensor library.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MlpWeights {
    /// The layers in order; a ReLU follows each one except the last (whose width is 1).
    pub layers: Vec<DenseLayer>,
}

/// Layer widths `[inputs, hidden..., 1]`.
pub(crate) fn layer_dims(inputs: usize, hidden: &[usize]) -> Vec<usize> {
    let mut dims = Vec::with_capacity(hidden.len() + 2);
    dims.push(inputs);
    dims.extend_from_slice(hidden);
    dims.push(1);
    dims
}

impl MlpWeights {
    /// PyTorch/burn default initialisation (uniform in ±1/√fan_in for weights and biases),
    /// drawn from the ranker's seeded generator so that a seed fixes the model.
    pub(crate) fn init(dims: &[usize], rng: &mut SplitMix64) -> Self {
        let layers = dims
            .windows(2)
            .map(|w| {
                let (inputs, outputs) = (w[0], w[1]);
                let bound = 1.0 / (inputs as f32).sqrt();
                let mut draw = || (rng.next_f32() * 2.0 - 1.0) * bound;
                let weight = (0..inputs * outputs).map(|_| draw()).collect();
                let bias = (0..outputs).map(|_| draw()).collect();
                DenseLayer {
                    inputs,
                    outputs,
                    weight,
                    bias,
                }
            })
            .collect();
        Self { layers }
    }

    /// All-zero weights of the given widths (a skeleton for loading).
    pub(crate) fn zeros(dims: &[usize]) -> Self {
        let layers = dims
            .windows(2)
            .map(|w| DenseLayer {
                inputs: w[0],
                outputs: w[1],
                weight: vec![0.0; w[0] * w[1]],
                bias: vec![0.0; w[1]],
            })
            .collect();
        Self { layers }
    }

    /// Input width (0 for an empty model).
    pub fn inputs(&self) -> usize {
        self.layers.first().map_or(0, |l| l.inputs)
    }

    /// Widths `[inputs, hidden..., 1]`.
    pub fn dims(&self) -> Vec<usize> {
        let mut d: Vec<usize> = self.layers.iter().map(|l| l.inputs).collect();
        d.extend(self.layers.last().map(|l| l.outputs));
        d
    }

    /// Checks shapes chain, the output is one value and every weight is finite.
    pub(crate) fn check(&self) -> std::result::Result<(), String> {
        if self.layers.is_empty() {
            return Err("the model has no layers".into());
        }
        for (i, l) in self.layers.iter().enumerate() {
            if l.weight.len() != l.inputs * l.outputs || l.bias.len() != l.outputs {
                return Err(format!(
                    "layer {i}: weight has {} values and bias {}, expected {}×{} and {}",
                    l.weight.len(),
                    l.bias.len(),
                    l.inputs,
                    l.outputs,
                    l.outputs
                ));
            }
            if i > 0 && self.layers[i - 1].outputs != l.inputs {
                return Err(format!(
                    "layer {i} takes {} inputs but layer {} gives {}",
                    l.inputs,
                    i - 1,
                    self.layers[i - 1].outputs
                ));
            }
            if l.weight.iter().chain(&l.bias).any(|v| !v.is_finite()) {
                return Err(format!("layer {i} holds a NaN or infinite weight"));
            }
        }
        match self.layers.last() {
            Some(l) if l.outputs == 1 => Ok(()),
            _ => Err("the last layer must have exactly one output".into()),
        }
    }

    /// Plain-Rust forward pass of one normalised vector (length [`inputs`](Self::inputs)).
    pub fn forward(&self, x: &[f32]) -> f32 {
        self.forward_with(x, &mut Vec::new(), &mut Vec::new())
    }

    /// [`forward`](Self::forward) with caller-owned scratch buffers, so that a batch
    /// allocates nothing per row.
    pub(crate) fn forward_with(&self, x: &[f32], cur: &mut Vec<f32>, next: &mut Vec<f32>) -> f32 {
        cur.clear();
        cur.extend_from_slice(x);
        let last = self.layers.len().saturating_sub(1);
        for (li, l) in self.layers.iter().enumerate() {
            next.clear();
            next.extend_from_slice(&l.bias);
            // i-outer/j-inner walks the row-major weight contiguously (an axpy per input),
            // which the compiler vectorises; inputs zeroed by the ReLU are skipped.
            for (&xi, row) in cur.iter().zip(l.weight.chunks_exact(l.outputs)) {
                if xi == 0.0 {
                    continue;
                }
                for (o, w) in next.iter_mut().zip(row) {
                    *o += xi * w;
                }
            }
            if li < last {
                for o in next.iter_mut() {
                    *o = o.max(0.0);
                }
            }
            std::mem::swap(cur, next);
        }
        cur.first().copied().unwrap_or(0.0)
    }

    /// Builds the burn module on `device` with these weights.
    pub fn to_module(&self, device: &Device) -> ScorerNet {
        let layers = self
            .layers
            .iter()
            .map(|l| Linear {
                weight: Param::from_tensor(Tensor::from_data(
                    TensorData::new(l.weight.clone(), [l.inputs, l.outputs]),
                    device,
                )),
                bias: Some(Param::from_tensor(Tensor::from_data(
                    TensorData::new(l.bias.clone(), [l.outputs]),
                    device,
                ))),
            })
            .collect();
        ScorerNet { layers }
    }

    /// Reads the weights back from a burn module.
    pub fn from_module(net: &ScorerNet) -> Result<Self> {
        let layers = net
            .layers
            .iter()
            .map(|l| {
                let w = l.weight.val();
                let [inputs, outputs] = w.dims();
                let weight = read_vec(w)?;
                let bias = match &l.bias {
                    Some(b) => read_vec(b.val())?,
                    None => vec![0.0; outputs],
                };
                Ok(DenseLayer {
                    inputs,
                    outputs,
                    weight,
                    bias,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Self { layers })
    }
}

/// Copies a tensor's values to a `Vec<f32>` (converting the dtype if the backend differs).
pub(crate) fn read_vec<const D: usize>(t: Tensor<D>) -> Result<Vec<f32>> {
    let data = t
        .try_into_data()
        .map_err(|e| RankerError::backend("reading a tensor", e))?;
    data.try_into_vec_as::<f32>()
        .map_err(|e| RankerError::backend("converting a tensor to f32", e))
}
