//! Saving and loading a trained ranker (format: see [`TrainedRanker::save`]).

use std::fs;
use std::path::{Path, PathBuf};

use burn::module::Module;
use burn::store::ModuleRecord;
use burn::tensor::{Bytes, Device};
use serde::{Deserialize, Serialize};

use super::config::RankerConfig;
use super::error::{RankerError, Result};
use super::model::{layer_dims, MlpWeights};
use super::normalize::Normalizer;
use super::trained::{check_names, TrainedRanker, TrainingSummary};

/// Value of the `format` field of `ranker.json`.
pub const MODEL_FORMAT: &str = "cudaperf-ranker";
/// Version of the model directory layout this crate writes and reads.
pub const MODEL_FORMAT_VERSION: u32 = 1;
/// Name of the metadata file inside a model directory.
pub const METADATA_FILE: &str = "ranker.json";
/// Name of the weights file inside a model directory.
pub const WEIGHTS_FILE: &str = "weights.bpk";

#[derive(Debug, Serialize, Deserialize)]
struct Metadata {
    format: String,
    format_version: u32,
    crate_version: String,
    weights_file: String,
    feature_names: Vec<String>,
    normalizer: Normalizer,
    layer_dims: Vec<usize>,
    config: RankerConfig,
    training: TrainingSummary,
}

impl TrainedRanker {
    /// Saves the model into directory `dir` (created if missing; existing model files are
    /// replaced).
    ///
    ///
    /// The model is a directory with two files:
    ///
    /// * `ranker.json` — metadata, written last:
    ///   ```json
    ///   {
    ///     "format": "cudaperf-ranker",
    ///     "format_version": 1,
    ///     "crate_version": "0.1.0",
    ///     "weights_file": "weights.bpk",
    ///     "feature_names": ["coalesced_loads", "..."],
    ///     "normalizer": { "mean": [0.5, "..."], "std": [1.2, "..."] },
    ///     "layer_dims": [42, 64, 32, 1],
    ///     "config": { "hidden": [64, 32], "learning_rate": 0.003, "seed": 42, "...": "..." },
    ///     "training": { "epochs_run": 57, "best_epoch": 27, "train_tasks": ["..."], "...": "..." }
    ///   }
    ///   ```
    /// * `weights.bpk` — the scorer's parameters written by burn's recorder (burnpack), one
    ///   tensor per path `layers.{i}.weight` (`[inputs, outputs]`, f32) and `layers.{i}.bias`
    ///   (`[outputs]`).
    ///
    /// Loading checks the format and version, that the feature names, normalisation and layer
    /// shapes agree, that every weight is finite and, with [`TrainedRanker::load`], that the
    /// feature names equal the caller's.
    pub fn save(&self, dir: impl AsRef<Path>) -> Result<()> {
        let dir = dir.as_ref();
        fs::create_dir_all(dir).map_err(|source| RankerError::Io {
            action: "create directory",
            path: dir.to_path_buf(),
            source,
        })?;
        let weights_path = dir.join(WEIGHTS_FILE);
        self.weights
            .to_module(&Device::default())
            .save_file(&weights_path)
            .map_err(|e| RankerError::Record {
                path: weights_path.clone(),
                message: e.to_string(),
            })?;
        let meta = Metadata {
            format: MODEL_FORMAT.into(),
            format_version: MODEL_FORMAT_VERSION,
            crate_version: env!("CARGO_PKG_VERSION").into(),
            weights_file: WEIGHTS_FILE.into(),
            feature_names: self.feature_names.clone(),
            normalizer: self.normalizer.clone(),
            layer_dims: self.weights.dims(),
            config: self.config.clone(),
            training: self.summary.clone(),
        };
        let meta_path = dir.join(METADATA_FILE);
        let json = serde_json::to_string_pretty(&meta).map_err(|source| RankerError::Json {
            path: meta_path.clone(),
            source,
        })?;
        fs::write(&meta_path, json).map_err(|source| RankerError::Io {
            action: "write",
            path: meta_path,
            source,
        })
    }

    /// Loads the model in `dir` and checks that it was trained on exactly
    /// `expected_features` (same names, same order); otherwise
    /// [`RankerError::FeatureMismatch`] says which position differs.
    pub fn load(dir: impl AsRef<Path>, expected_features: &[String]) -> Result<Self> {
        let dir = dir.as_ref();
        let ranker = Self::load_unchecked(dir)?;
        check_names(
            &format!("ranker model at {}", dir.display()),
            &ranker.feature_names,
            expected_features,
        )?;
        Ok(ranker)
    }

    /// Loads the model in `dir` whatever features it was trained on (for inspection; use
    /// [`load`](Self::load) before scoring).
    pub fn load_unchecked(dir: impl AsRef<Path>) -> Result<Self> {
        let dir = dir.as_ref();
        let meta_path = dir.join(METADATA_FILE);
        let text = fs::read_to_string(&meta_path).map_err(|source| RankerError::Io {
            action: "read",
            path: meta_path.clone(),
            source,
        })?;
        let meta = parse_metadata(&text, &meta_path)?;
        let weights_path = dir.join(&meta.weights_file);
        let bytes = match fs::read(&weights_path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(RankerError::InvalidModel {
                    path: weights_path,
                    reason: "the weights file is missing".into(),
                })
            }
            Err(source) => {
                return Err(RankerError::Io {
                    action: "read",
                    path: weights_path,
                    source,
                })
            }
        };
        from_parts(meta, &bytes, &weights_path)
    }

    /// Loads a model from the contents of its two files (`ranker.json` and the weights),
    /// e.g. a model embedded in a binary with `include_bytes!`. `origin` names it in errors.
    pub fn from_bytes(metadata_json: &str, weights: &[u8], origin: &str) -> Result<Self> {
        let meta_path = Path::new(origin).join(METADATA_FILE);
        let meta = parse_metadata(metadata_json, &meta_path)?;
        let weights_path = Path::new(origin).join(&meta.weights_file);
        from_parts(meta, weights, &weights_path)
    }

    /// The model shipped with the crate (`fixtures/models/ranker`, trained on the H200 timings
    /// of the dataset), embedded in the library: it needs no file at run time.
    pub fn shipped() -> Result<Self> {
        Self::from_bytes(SHIPPED_METADATA, SHIPPED_WEIGHTS, SHIPPED_ORIGIN)
    }
}

/// `ranker.json` of the shipped model.
const SHIPPED_METADATA: &str = include_str!("../../fixtures/models/ranker/ranker.json");
/// `weights.bpk` of the shipped model.
const SHIPPED_WEIGHTS: &[u8] = include_bytes!("../../fixtures/models/ranker/weights.bpk");
/// How the shipped model is named in reports and errors.
pub const SHIPPED_ORIGIN: &str = "<shipped ranker>";

fn parse_metadata(text: &str, meta_path: &Path) -> Result<Metadata> {
    let meta: Metadata = serde_json::from_str(text).map_err(|source| RankerError::Json {
        path: meta_path.to_path_buf(),
        source,
    })?;
    let invalid = |reason: String| RankerError::InvalidModel {
        path: meta_path.to_path_buf(),
        reason,
    };
    if meta.format != MODEL_FORMAT {
        return Err(invalid(format!(
            "`format` is `{}`, expected `{MODEL_FORMAT}`",
            meta.format
        )));
    }
    if meta.format_version != MODEL_FORMAT_VERSION {
        return Err(invalid(format!(
            "`format_version` is {}, this version of cudaperf reads {MODEL_FORMAT_VERSION}",
            meta.format_version
        )));
    }
    let dim = meta.feature_names.len();
    if dim == 0 {
        return Err(invalid("`feature_names` is empty".into()));
    }
    if meta.normalizer.dim() != dim || !meta.normalizer.is_valid() {
        return Err(invalid(format!(
            "`normalizer` must hold {dim} finite means and {dim} finite positive deviations \
             (one per feature name)"
        )));
    }
    let dims = layer_dims(dim, &meta.config.hidden);
    if meta.layer_dims != dims {
        return Err(invalid(format!(
            "`layer_dims` is {:?}, but {dim} features and `config.hidden` {:?} give {dims:?}",
            meta.layer_dims, meta.config.hidden
        )));
    }
    meta.config
        .validate()
        .map_err(|e| invalid(format!("`config`: {e}")))?;
    if meta.weights_file.is_empty()
        || Path::new(&meta.weights_file).components().count() != 1
        || meta.weights_file.starts_with('.')
    {
        return Err(invalid(format!(
            "`weights_file` `{}` must be a plain file name inside the model folder",
            meta.weights_file
        )));
    }
    Ok(meta)
}

fn from_parts(meta: Metadata, weights: &[u8], weights_path: &Path) -> Result<TrainedRanker> {
    let dims = layer_dims(meta.feature_names.len(), &meta.config.hidden);
    let weights = read_weights(weights, weights_path, &dims)?;
    Ok(TrainedRanker {
        feature_names: meta.feature_names,
        normalizer: meta.normalizer,
        weights,
        config: meta.config,
        summary: meta.training,
    })
}

/// Reads burnpack weights into a module of the expected shape and checks them.
fn read_weights(bytes: &[u8], path: &Path, dims: &[usize]) -> Result<MlpWeights> {
    let path: PathBuf = path.to_path_buf();
    let device = Device::default();
    let record = ModuleRecord::from_bytes(Bytes::from_bytes_vec(bytes.to_vec())).map_err(|e| {
        RankerError::Record {
            path: path.clone(),
            message: e.to_string(),
        }
    })?;
    // Zero skeleton of the right shape: the record replaces every tensor, and burn's
    // validation rejects missing, unused or mis-shaped tensors.
    let skeleton = MlpWeights::zeros(dims).to_module(&device);
    let net = skeleton
        .try_load_record(record)
        .map_err(|e| RankerError::Record {
            path: path.clone(),
            message: e.to_string(),
        })?;
    let weights = MlpWeights::from_module(&net)?;
    if weights.dims() != dims {
        return Err(RankerError::InvalidModel {
            path,
            reason: format!(
                "weights have layer widths {:?}, metadata says {dims:?}",
                weights.dims()
            ),
        });
    }
    weights
        .check()
        .map_err(|reason| RankerError::InvalidModel { path, reason })?;
    Ok(weights)
}
