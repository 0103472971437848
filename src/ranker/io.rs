//! Saving and loading a trained ranker (format: see [`TrainedRanker::save`]).

use std::fs;
use std::path::{Path, PathBuf};

use burn::module::Module;
use burn::store::ModuleRecord;
use burn::tensor::{Bytes, Device};
use serde::{Deserialize, Serialize};

use super::config::RankerConfig;
use super::error::{RankerError, Result};
use super::model::{layer_dims, EnsembleNet, MlpWeights};
use super::normalize::Normalizer;
use super::trained::{check_names, TrainedRanker, TrainingSummary};
use super::trees::BoostedTrees;

/// Value of the `format` field of `ranker.json`.
pub const MODEL_FORMAT: &str = "cudaperf-ranker";
/// Version of the model directory layout this crate writes (4: `config.estimate_weight`
/// adds the analytical estimate to every member's score). Versions 1 (a single scorer, no
/// training range, no temperature), 2 (MLP members only) and 3 (members with boosted trees,
/// in [`TREES_FILE`]; no estimate term) are still read.
pub const MODEL_FORMAT_VERSION: u32 = 4;

/// Oldest layout version this crate reads.
const OLDEST_FORMAT_VERSION: u32 = 1;
/// Name of the metadata file inside a model directory.
pub const METADATA_FILE: &str = "ranker.json";
/// Name of the weights file inside a model directory.
pub const WEIGHTS_FILE: &str = "weights.bpk";
/// Name of the boosted-trees file inside a model directory (models with `config.trees > 0`).
pub const TREES_FILE: &str = "trees.json";

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
    /// Ensemble members in the weights file (1: the file holds one scorer, as in version 1).
    #[serde(default = "one_member")]
    members: usize,
    /// The members' boosted trees (version 3, `config.trees > 0`): a JSON array of one
    /// [`BoostedTrees`] per member.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    trees_file: Option<String>,
}

fn one_member() -> usize {
    1
}

/// Values of configuration fields that version 1 files lack: what those models were
/// trained with (hard targets, one member, no calibration).
const LEGACY_CONFIG: &[(&str, f64)] = &[
    ("soft_target_scale", 0.0),
    ("min_pair_weight", 0.0),
    ("ensemble", 1.0),
    ("min_epochs", 0.0),
    // Versions 1 and 2: no trees (the other tree fields then do nothing).
    ("trees", 0.0),
    ("tree_depth", 4.0),
    ("tree_learning_rate", 0.05),
    ("tree_min_samples", 10.0),
    ("tree_colsample", 0.8),
    ("tree_lambda", 1.0),
    // Versions 1 to 3: the learned score alone.
    ("estimate_weight", 0.0),
];

/// Integer fields among [`LEGACY_CONFIG`] (JSON numbers written as floats there).
const LEGACY_INTEGERS: &[&str] = &[
    "ensemble",
    "min_epochs",
    "trees",
    "tree_depth",
    "tree_min_samples",
];

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
    ///     "training": { "epochs_run": 57, "best_epoch": 27, "train_tasks": ["..."],
    ///                   "members": [{ "seed": 1042, "best_epoch": 31, "...": "..." }],
    ///                   "temperature": 1.3, "...": "..." },
    ///     "members": 5,
    ///     "trees_file": "trees.json"
    ///   }
    ///   ```
    /// * `weights.bpk` — the scorer's parameters written by burn's recorder (burnpack), one
    ///   tensor per path `layers.{i}.weight` (`[inputs, outputs]`, f32) and `layers.{i}.bias`
    ///   (`[outputs]`); for an ensemble (`members` > 1) `members.{m}.layers.{i}.weight` and
    ///   `members.{m}.layers.{i}.bias`.
    ///
    /// * `trees.json` — only when `config.trees > 0`: a JSON array with one object per
    ///   member, `{"trees": [{"feature": [..], "value": [..], "left": [..], "right": [..]}, ..]}`
    ///   ([`Tree`](super::Tree)'s layout; thresholds on the normalised features). A member's
    ///   score is the mean of its MLP's and the sum of its trees'.
    ///
    /// Version 1 files (one scorer, no `normalizer.min`/`max`, no temperature, a config
    /// without the soft-target and ensemble fields) load as a one-member ensemble with
    /// `T = 1`, scoring exactly as before.
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
        let device = Device::default();
        let saved = if self.members.is_empty() {
            self.weights.to_module(&device).save_file(&weights_path)
        } else {
            EnsembleNet {
                members: self.members().map(|m| m.to_module(&device)).collect(),
            }
            .save_file(&weights_path)
        };
        saved.map_err(|e| RankerError::Record {
            path: weights_path.clone(),
            message: e.to_string(),
        })?;
        let trees_file = if self.trees.is_empty() {
            None
        } else {
            let path = dir.join(TREES_FILE);
            let json = serde_json::to_string(&self.trees).map_err(|source| RankerError::Json {
                path: path.clone(),
                source,
            })?;
            fs::write(&path, json).map_err(|source| RankerError::Io {
                action: "write",
                path,
                source,
            })?;
            Some(TREES_FILE.to_string())
        };
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
            members: self.ensemble_size(),
            trees_file,
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
        let text = read_text(&meta_path)?;
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
        let trees = match &meta.trees_file {
            Some(name) => {
                let path = dir.join(name);
                Some((read_text(&path)?, path))
            }
            None => None,
        };
        from_parts(
            meta,
            &bytes,
            &weights_path,
            trees.as_ref().map(|(t, p)| (t.as_str(), p.as_path())),
        )
    }

    /// Loads a model from the contents of its files (`ranker.json`, the weights and, for a
    /// model with trees, `trees.json`), e.g. a model embedded in a binary with
    /// `include_bytes!`. `origin` names it in errors.
    pub fn from_bytes(
        metadata_json: &str,
        weights: &[u8],
        trees_json: Option<&str>,
        origin: &str,
    ) -> Result<Self> {
        let meta_path = Path::new(origin).join(METADATA_FILE);
        let meta = parse_metadata(metadata_json, &meta_path)?;
        let weights_path = Path::new(origin).join(&meta.weights_file);
        let trees_path = Path::new(origin).join(meta.trees_file.as_deref().unwrap_or(TREES_FILE));
        from_parts(
            meta,
            weights,
            &weights_path,
            trees_json.map(|t| (t, trees_path.as_path())),
        )
    }

    /// The model shipped with the crate (`fixtures/models/ranker`, trained on the H200 timings
    /// of the dataset), embedded in the library: it needs no file at run time.
    pub fn shipped() -> Result<Self> {
        Self::from_bytes(
            SHIPPED_METADATA,
            SHIPPED_WEIGHTS,
            Some(SHIPPED_TREES),
            SHIPPED_ORIGIN,
        )
    }
}

/// `ranker.json` of the shipped model.
const SHIPPED_METADATA: &str = include_str!("../../fixtures/models/ranker/ranker.json");
/// `weights.bpk` of the shipped model.
const SHIPPED_WEIGHTS: &[u8] = include_bytes!("../../fixtures/models/ranker/weights.bpk");
/// `trees.json` of the shipped model.
const SHIPPED_TREES: &str = include_str!("../../fixtures/models/ranker/trees.json");
/// How the shipped model is named in reports and errors.
pub const SHIPPED_ORIGIN: &str = "<shipped ranker>";

/// A model file's text; an error names the file.
fn read_text(path: &Path) -> Result<String> {
    fs::read_to_string(path).map_err(|source| RankerError::Io {
        action: "read",
        path: path.to_path_buf(),
        source,
    })
}

fn parse_metadata(text: &str, meta_path: &Path) -> Result<Metadata> {
    let json_error = |source| RankerError::Json {
        path: meta_path.to_path_buf(),
        source,
    };
    let mut value: serde_json::Value = serde_json::from_str(text).map_err(json_error)?;
    if let Some(config) = value.get_mut("config").and_then(|c| c.as_object_mut()) {
        fill_legacy_config(config);
    }
    let meta: Metadata = serde_json::from_value(value).map_err(json_error)?;
    check_metadata(&meta).map_err(|reason| RankerError::InvalidModel {
        path: meta_path.to_path_buf(),
        reason,
    })?;
    Ok(meta)
}

/// Fills in the `config` keys of models written before they existed, with the values those
/// models were trained with.
fn fill_legacy_config(config: &mut serde_json::Map<String, serde_json::Value>) {
    for (key, legacy) in LEGACY_CONFIG {
        if !config.contains_key(*key) {
            config.insert((*key).into(), serde_json::json!(legacy));
        }
    }
    config
        .entry("calibrate")
        .or_insert(serde_json::json!(false));
    for &key in LEGACY_INTEGERS {
        if let Some(e) = config.get_mut(key).filter(|e| e.is_f64()) {
            *e = serde_json::json!(e.as_f64().unwrap_or(0.0) as u64);
        }
    }
}

/// What is wrong with a model's metadata, if anything (the reason of
/// [`RankerError::InvalidModel`]).
fn check_metadata(meta: &Metadata) -> std::result::Result<(), String> {
    if meta.format != MODEL_FORMAT {
        return Err(format!(
            "`format` is `{}`, expected `{MODEL_FORMAT}`",
            meta.format
        ));
    }
    if !(OLDEST_FORMAT_VERSION..=MODEL_FORMAT_VERSION).contains(&meta.format_version) {
        return Err(format!(
            "`format_version` is {}, this version of cudaperf reads \
             {OLDEST_FORMAT_VERSION} to {MODEL_FORMAT_VERSION}",
            meta.format_version
        ));
    }
    if meta.members == 0 || meta.members > 64 {
        return Err(format!("`members` is {}, must be 1 to 64", meta.members));
    }
    if !(meta.training.temperature.is_finite() && meta.training.temperature > 0.0) {
        return Err(format!(
            "`training.temperature` is {}, must be finite and > 0",
            meta.training.temperature
        ));
    }
    let dim = meta.feature_names.len();
    if dim == 0 {
        return Err("`feature_names` is empty".into());
    }
    if meta.normalizer.dim() != dim || !meta.normalizer.is_valid() {
        return Err(format!(
            "`normalizer` must hold {dim} finite means and {dim} finite positive deviations \
             (one per feature name)"
        ));
    }
    let dims = layer_dims(dim, &meta.config.hidden);
    if meta.layer_dims != dims {
        return Err(format!(
            "`layer_dims` is {:?}, but {dim} features and `config.hidden` {:?} give {dims:?}",
            meta.layer_dims, meta.config.hidden
        ));
    }
    meta.config
        .validate()
        .map_err(|e| format!("`config`: {e}"))?;
    let plain =
        |f: &str| !f.is_empty() && Path::new(f).components().count() == 1 && !f.starts_with('.');
    if !plain(&meta.weights_file) {
        return Err(format!(
            "`weights_file` `{}` must be a plain file name inside the model folder",
            meta.weights_file
        ));
    }
    match (&meta.trees_file, meta.config.trees) {
        (Some(f), _) if !plain(f) => {
            return Err(format!(
                "`trees_file` `{f}` must be a plain file name inside the model folder"
            ))
        }
        (Some(_), 0) => return Err("`trees_file` is set but `config.trees` is 0".into()),
        (None, n) if n > 0 => {
            return Err(format!(
                "`config.trees` is {n} but no `trees_file` is named"
            ))
        }
        _ => {}
    }
    Ok(())
}

fn from_parts(
    meta: Metadata,
    weights: &[u8],
    weights_path: &Path,
    trees: Option<(&str, &Path)>,
) -> Result<TrainedRanker> {
    let dims = layer_dims(meta.feature_names.len(), &meta.config.hidden);
    let trees = match (&meta.trees_file, trees) {
        (None, _) => Vec::new(),
        (Some(_), None) => {
            return Err(RankerError::InvalidModel {
                path: weights_path.with_file_name(TREES_FILE),
                reason: "the model has boosted trees but their file was not given".into(),
            })
        }
        (Some(_), Some((text, path))) => {
            read_trees(text, path, meta.members, meta.config.trees, dims[0])?
        }
    };
    let mut members = read_weights(weights, weights_path, &dims, meta.members)?.into_iter();
    let first = members.next().ok_or_else(|| RankerError::InvalidModel {
        path: weights_path.to_path_buf(),
        reason: "the weights file holds no scorer".into(),
    })?;
    Ok(TrainedRanker {
        feature_names: meta.feature_names,
        normalizer: meta.normalizer,
        weights: first,
        config: meta.config,
        temperature: meta.training.temperature,
        summary: meta.training,
        members: members.collect(),
        trees,
    })
}

/// Parses and checks the members' trees: one [`BoostedTrees`] per member, each with
/// `count` trees on `dim` inputs.
fn read_trees(
    text: &str,
    path: &Path,
    members: usize,
    count: usize,
    dim: usize,
) -> Result<Vec<BoostedTrees>> {
    let trees: Vec<BoostedTrees> =
        serde_json::from_str(text).map_err(|source| RankerError::Json {
            path: path.to_path_buf(),
            source,
        })?;
    let invalid = |reason: String| RankerError::InvalidModel {
        path: path.to_path_buf(),
        reason,
    };
    if trees.len() != members {
        return Err(invalid(format!(
            "{} members' trees, the metadata says {members} members",
            trees.len()
        )));
    }
    for (m, t) in trees.iter().enumerate() {
        if t.trees.len() != count {
            return Err(invalid(format!(
                "member {m} has {} trees, `config.trees` is {count}",
                t.trees.len()
            )));
        }
        t.check(dim)
            .map_err(|e| invalid(format!("member {m}: {e}")))?;
    }
    Ok(trees)
}

/// Reads burnpack weights (one scorer, or an ensemble of `members`) into modules of the
/// expected shape and checks them.
fn read_weights(
    bytes: &[u8],
    path: &Path,
    dims: &[usize],
    members: usize,
) -> Result<Vec<MlpWeights>> {
    let path: PathBuf = path.to_path_buf();
    let device = Device::default();
    let record = ModuleRecord::from_bytes(Bytes::from_bytes_vec(bytes.to_vec())).map_err(|e| {
        RankerError::Record {
            path: path.clone(),
            message: e.to_string(),
        }
    })?;
    let record_error = |e: String| RankerError::Record {
        path: path.clone(),
        message: e,
    };
    // Zero skeletons of the right shape: the record replaces every tensor, and burn's
    // validation rejects missing, unused or mis-shaped tensors.
    let nets = if members == 1 {
        let skeleton = MlpWeights::zeros(dims).to_module(&device);
        vec![skeleton
            .try_load_record(record)
            .map_err(|e| record_error(e.to_string()))?]
    } else {
        let skeleton = EnsembleNet {
            members: (0..members)
                .map(|_| MlpWeights::zeros(dims).to_module(&device))
                .collect(),
        };
        skeleton
            .try_load_record(record)
            .map_err(|e| record_error(e.to_string()))?
            .members
    };
    nets.iter()
        .enumerate()
        .map(|(m, net)| {
            let weights = MlpWeights::from_module(net)?;
            if weights.dims() != dims {
                return Err(RankerError::InvalidModel {
                    path: path.clone(),
                    reason: format!(
                        "member {m}: weights have layer widths {:?}, metadata says {dims:?}",
                        weights.dims()
                    ),
                });
            }
            weights
                .check()
                .map_err(|reason| RankerError::InvalidModel {
                    path: path.clone(),
                    reason: format!("member {m}: {reason}"),
                })?;
            Ok(weights)
        })
        .collect()
}
