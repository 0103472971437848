//! The JSON shapes of `cudaperf serve`: requests, per-completion results, errors.
//!
//! `POST /v1/score` answers a [`ScoreResponse`] with one [`ItemResult`] per completion, in
//! the order of the request. A request body:
//!
//! ```json
//! {"task": "vector_add", "completions": ["```cuda\n...```"], "step": 120,
//!  "reward": {"preset": "cudaperf", "weights": {"speed": 0.5}}, "deadline_ms": 30000}
//! ```
//!
//! `task` is a task id from the server's tasks folder or an inline task
//! `{"toml": "...", "reference": "...", "original": "...", "files": {...}}`; `reward` is a
//! preset name (`"kevin"`) or `{"preset", "weights"}`; `step`, `reward` (default
//! `cudaperf`), `deadline_ms` (default: the server's) and `report` (default `true`; `false`
//! leaves the per-stage report out) are optional.
//!
//! Every error is a status code with a one-line `{"error": "..."}` that names the field.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::pipeline::Verdict;

/// A task given in the request body instead of by id: the `task.toml` text and the files
/// it names.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InlineTask {
    /// The `task.toml` text.
    pub toml: String,
    /// The reference implementation (the file the TOML's `reference` names).
    pub reference: String,
    /// The original program shown to the policy (the TOML's `original`; empty if left out).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub original: Option<String>,
    /// Other files the TOML names (its `implementations`), by name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub files: BTreeMap<String, String>,
}

/// Which task a request is for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskRef {
    /// A task of the server's (and every node's) tasks folder.
    Id(String),
    /// A task carried by the request.
    Inline(InlineTask),
}

/// Weights of the `cudaperf` preset (see `presets::CudaPerfWeights`); a field left out
/// keeps its default, a weight of 0 leaves the structure or ranker term out.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Weights {
    /// Weight of `clip(log2(speedup), −1, speed_cap_log2)` (default 0.3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub speed: Option<f64>,
    /// Upper clip of the log2-speedup term (default 6, i.e. 64×).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub speed_cap_log2: Option<f64>,
    /// Weight of the roofline term, the fraction of the physical floor reached (default 0.1;
    /// 0 leaves it out).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub roofline: Option<f64>,
    /// Weight of the structural score (default 0.1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub structure: Option<f64>,
    /// Weight of the ranker term (default 0.1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rank: Option<f64>,
    /// Fade the ranker term by the ensemble's disagreement: `ShrunkRankerReward` with this
    /// scale (e.g. 0.15; finite and > 0), `(2p − 1) · max(0, 1 − uncertainty / scale)`.
    /// Absent: the plain term.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rank_uncertainty_scale: Option<f64>,
    /// Syntax credit for programs that do not compile (default 0.1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub syntax_credit: Option<f64>,
}

/// A reward by preset name, with optional weights (`cudaperf` only).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RewardSpec {
    /// `cudaperf`, `correctness`, `kevin`, `fast_p:<p>` or `dhrcl`.
    pub preset: String,
    /// Weights of the `cudaperf` preset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weights: Option<Weights>,
}

impl RewardSpec {
    /// The name a result reports: the preset as the request spelled it (`dhrcl`,
    /// `fast_p:1.5`), not the name of the combinator that implements it.
    pub fn name(&self) -> String {
        self.preset.clone()
    }
}

impl Default for RewardSpec {
    fn default() -> Self {
        RewardSpec {
            preset: "cudaperf".into(),
            weights: None,
        }
    }
}

/// One scoring job: a trainer's group for one task, as it travels to a worker or node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobSpec {
    /// The task.
    pub task: TaskRef,
    /// The completions, in the order of the request.
    pub completions: Vec<String>,
    /// The reward.
    pub reward: RewardSpec,
    /// Training step (for curricula).
    pub step: u64,
    /// Whether results carry the per-stage report.
    pub report: bool,
    /// When the requester stops waiting (milliseconds since the Unix epoch); work not
    /// started by then is answered `timeout` without running.
    pub deadline_unix_ms: u64,
}

/// What happened to one completion.
///
/// `verdict` is one of `correct`, `incorrect`, `extract_error`, `compile_error`,
/// `invalid_launch`, `cuda_error`, `timeout`, `crashed`, `reference_failed`,
/// `unavailable` (the evaluation verdicts of `reward::Verdict`), or `compiled` when the
/// reward did not need the GPU stages (`extracted` when it did not even compile).
/// `value` is `null` whenever no reward could be
/// computed (`unavailable`, or `timeout` when the request's deadline passed first), and
/// `reason` says why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ItemResult {
    /// Position in the request's `completions`.
    pub index: usize,
    /// The verdict (see above), as [`crate::pipeline::report::Stages::outcome`] decides it.
    pub verdict: Verdict,
    /// The reward, or `null` when none could be computed.
    pub value: Option<f64>,
    /// Why there is no value, or why the verdict is not `correct`.
    #[serde(default)]
    pub reason: Option<String>,
    /// The reward report (`RewardReport`; partial for `unavailable`), unless the request
    /// asked for none.
    #[serde(default)]
    pub report: Option<serde_json::Value>,
    /// Feedback text for the policy's next turn ([`crate::rl::feedback`] on the report and
    /// the code that was evaluated); null when the completion was not scored (deadline,
    /// internal error).
    #[serde(default)]
    pub feedback: Option<String>,
}

/// Where the time of a request went, in milliseconds.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Timing {
    /// Waiting for a worker or node.
    pub queue_ms: f64,
    /// Scoring the group.
    pub score_ms: f64,
    /// From the request's arrival to the answer.
    pub total_ms: f64,
}

/// The answer to `POST /v1/score`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScoreResponse {
    /// The task id (inline tasks: `<id>@<content hash>`).
    pub task: String,
    /// The reward as the request named it (its preset, e.g. `dhrcl`).
    pub reward: String,
    /// The training step.
    pub step: u64,
    /// One result per completion, in the order of the request.
    pub results: Vec<ItemResult>,
    /// Where the time went.
    pub timing: Timing,
    /// The node that scored it (queue mode), or `local`.
    pub scored_by: String,
}

/// A task as `GET /v1/tasks` lists it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskSummary {
    /// Task id.
    pub id: String,
    /// `c2cuda` or `torch2cuda`.
    pub kind: String,
    /// Short title.
    pub title: String,
    /// Names of the input configurations.
    pub configs: Vec<String>,
}

/// A task as `GET /v1/tasks/{id}` shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskDetail {
    /// The summary fields.
    #[serde(flatten)]
    pub summary: TaskSummary,
    /// The RL prompt (`Task::prompt`).
    pub prompt: String,
    /// The original program.
    pub original: String,
    /// The kernel signature every default launch has.
    pub signature: String,
}

/// The body of every error answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorBody {
    /// One line: what was wrong and where.
    pub error: String,
}
