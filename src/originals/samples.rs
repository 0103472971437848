//! Reference values sampled on a GPU ([`Samples`]), kept in a file so that originals can be
//! checked where there is no GPU; doubles are written so that they read back bit for bit.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Reference values sampled on a GPU, to check originals against where there is none.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Samples {
    /// The device they were computed on.
    pub device: String,
    /// Input set seed.
    pub seed: u64,
    /// Per task.
    pub tasks: BTreeMap<String, TaskSamples>,
}

impl Samples {
    /// Adds `newer`'s tasks to these samples (replacing a task both have) when both were
    /// taken with the same seed on the same device; otherwise `newer` alone, since samples
    /// of different input sets cannot be mixed.
    pub fn update(self, mut newer: Samples) -> Samples {
        if self.seed != newer.seed || self.device != newer.device {
            return newer;
        }
        let mut merged = self;
        merged.tasks.append(&mut newer.tasks);
        merged
    }
}

/// Sampled reference values per output buffer (by name): (element index, value).
pub type BufferSamples = BTreeMap<String, Vec<(u64, Option<Exact>)>>;

/// One task's sampled reference outputs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskSamples {
    /// The config (the smallest).
    pub config: String,
    /// Per output buffer: (element index, value; `None` where it is not finite, in files
    /// written before non-finite values were recorded as such).
    pub buffers: BufferSamples,
    /// Per input regime of the task (by name): the same, on the regime's inputs.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub regimes: BTreeMap<String, RegimeSamples>,
}

/// One input regime's sampled reference outputs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RegimeSamples {
    /// The config (the smallest the regime applies to).
    pub config: String,
    /// Per output buffer: (element index, value; NaN and infinities included).
    pub buffers: BufferSamples,
}

/// A double written as its shortest round-trip decimal text (`"0.02524677477777004"`), so
/// that it reads back bit for bit (JSON numbers go through a parser that may round).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Exact(pub f64);

impl Serialize for Exact {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format!("{:?}", self.0))
    }
}

impl<'de> Deserialize<'de> for Exact {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Exact, D::Error> {
        let text = String::deserialize(d)?;
        text.parse::<f64>()
            .map(Exact)
            .map_err(|e| serde::de::Error::custom(format!("`{text}` is not a number: {e}")))
    }
}
