//! Turning a `POST /v1/score` body into a job, or into a one-line error that names the
//! field. Nothing here touches the evaluator.

use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;

use super::api::{InlineTask, JobSpec, RewardSpec, TaskRef};
use super::reward_spec::build_reward;
use super::score::unix_ms;
use super::tasks::{TaskRefError, TaskStore};
use crate::reward::Reward;
use crate::task::Task;

/// Request limits of the server.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Limits {
    /// Largest request body in bytes (default 8 MiB).
    pub max_body_bytes: usize,
    /// Most completions in one request (default 64).
    pub max_completions: usize,
    /// Jobs that may wait for a worker or node before requests get `429` (default 64).
    pub queue_len: usize,
    /// Deadline of a request that gives none (default 10 min).
    pub default_deadline: Duration,
    /// Longest deadline a request may ask for (default 1 h).
    pub max_deadline: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_body_bytes: 8 << 20,
            max_completions: 64,
            queue_len: 64,
            default_deadline: Duration::from_secs(600),
            max_deadline: Duration::from_secs(3600),
        }
    }
}

/// A request that can be scored.
pub(crate) struct ParsedRequest {
    pub job: JobSpec,
    pub task: Arc<Task>,
    pub reward: Box<dyn Reward>,
    pub deadline: Duration,
}

/// What was wrong with a request, and the status it answers.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{message}")]
pub struct BadRequest {
    /// HTTP status (400, 404).
    pub status: u16,
    /// One line naming the field.
    pub message: String,
}

fn bad(message: impl Into<String>) -> BadRequest {
    BadRequest {
        status: 400,
        message: one_line(&message.into()),
    }
}

/// Joins a multi-line message (a TOML parser's, with its source excerpt) into one line.
pub(crate) fn one_line(message: &str) -> String {
    message
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && *l != "|")
        .collect::<Vec<_>>()
        .join("; ")
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRequest {
    task: serde_json::Value,
    completions: Vec<String>,
    #[serde(default)]
    step: u64,
    #[serde(default)]
    reward: serde_json::Value,
    #[serde(default)]
    deadline_ms: Option<u64>,
    #[serde(default = "yes")]
    report: bool,
}

fn yes() -> bool {
    true
}

/// Deserialises with the path of the failing field in the message.
fn typed<'de, T: Deserialize<'de>, D: serde::Deserializer<'de, Error = serde_json::Error>>(
    de: D,
    prefix: &str,
) -> Result<T, BadRequest> {
    serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        if inner.is_syntax() || inner.is_eof() {
            return bad(format!("malformed JSON: {inner}"));
        }
        let field = match (prefix, path.as_str()) {
            (p, ".") => p.to_string(),
            ("", q) => q.to_string(),
            (p, q) => format!("{p}.{q}"),
        };
        if field.is_empty() {
            bad(format!("request body: {inner}"))
        } else {
            bad(format!("field `{field}`: {inner}"))
        }
    })
}

fn kind_of(v: &serde_json::Value) -> &'static str {
    match v {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "an array",
        serde_json::Value::Object(_) => "an object",
    }
}

/// The body is a JSON object (a struct also deserialises from an array).
fn check_object(body: &[u8]) -> Result<(), BadRequest> {
    if body.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{') {
        return Ok(());
    }
    Err(match serde_json::from_slice::<serde_json::Value>(body) {
        Ok(v) => bad(format!(
            "request body: expected a JSON object {{\"task\", \"completions\", ...}}, got {}",
            kind_of(&v)
        )),
        Err(e) => bad(format!("malformed JSON: {e}")),
    })
}

/// Field `task`: a task id or an inline task.
fn task_ref(v: serde_json::Value) -> Result<TaskRef, BadRequest> {
    match v {
        serde_json::Value::String(id) => Ok(TaskRef::Id(id)),
        v @ serde_json::Value::Object(_) => Ok(TaskRef::Inline(typed::<InlineTask, _>(v, "task")?)),
        other => Err(bad(format!(
            "field `task`: expected a task id (string) or an inline task {{\"toml\", \"reference\", \"original\"}}, got {}",
            kind_of(&other)
        ))),
    }
}

/// Field `reward`: absent (the default preset), a preset name or `{preset, weights}`.
fn reward_spec(v: serde_json::Value) -> Result<RewardSpec, BadRequest> {
    match v {
        serde_json::Value::Null => Ok(RewardSpec::default()),
        serde_json::Value::String(preset) => Ok(RewardSpec {
            preset,
            weights: None,
        }),
        v @ serde_json::Value::Object(_) => typed::<RewardSpec, _>(v, "reward"),
        other => Err(bad(format!(
            "field `reward`: expected a preset name (string) or {{\"preset\", \"weights\"}}, got {}",
            kind_of(&other)
        ))),
    }
}

/// Field `completions`: at least one, at most the server's limit.
fn check_completions(n: usize, limits: &Limits) -> Result<(), BadRequest> {
    if n == 0 {
        return Err(bad(
            "field `completions`: at least one completion is needed",
        ));
    }
    if n > limits.max_completions {
        return Err(bad(format!(
            "field `completions`: {n} completions, more than this server's limit of {}",
            limits.max_completions
        )));
    }
    Ok(())
}

/// Field `deadline_ms`: the server's default when absent, else within 1 ms and its limit.
fn deadline(ms: Option<u64>, limits: &Limits) -> Result<Duration, BadRequest> {
    match ms {
        None => Ok(limits.default_deadline),
        Some(0) => Err(bad("field `deadline_ms`: must be at least 1")),
        Some(ms) if Duration::from_millis(ms) > limits.max_deadline => Err(bad(format!(
            "field `deadline_ms`: {ms} is more than this server's limit of {} ms",
            limits.max_deadline.as_millis()
        ))),
        Some(ms) => Ok(Duration::from_millis(ms)),
    }
}

/// Parses and validates a score request.
pub(crate) fn parse(
    body: &[u8],
    limits: &Limits,
    tasks: &TaskStore,
) -> Result<ParsedRequest, BadRequest> {
    check_object(body)?;
    let raw: RawRequest = typed(&mut serde_json::Deserializer::from_slice(body), "")?;
    let task_ref = task_ref(raw.task)?;
    let reward = reward_spec(raw.reward)?;
    check_completions(raw.completions.len(), limits)?;
    let deadline = deadline(raw.deadline_ms, limits)?;
    let built = build_reward(&reward).map_err(|e| bad(e.to_string()))?;
    let task = tasks.resolve(&task_ref).map_err(|e| match e {
        TaskRefError::Unknown { .. } => BadRequest {
            status: 404,
            message: one_line(&e.to_string()),
        },
        TaskRefError::Invalid(_) => bad(e.to_string()),
    })?;
    Ok(ParsedRequest {
        job: JobSpec {
            task: task_ref,
            completions: raw.completions,
            reward,
            step: raw.step,
            report: raw.report,
            deadline_unix_ms: unix_ms() + deadline.as_millis() as u64,
        },
        task,
        reward: built,
        deadline,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store() -> TaskStore {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/tasks");
        TaskStore::load(Some(&dir)).unwrap()
    }

    fn err(body: &str) -> BadRequest {
        match parse(body.as_bytes(), &Limits::default(), &store()) {
            Ok(_) => panic!("accepted: {body}"),
            Err(e) => e,
        }
    }

    /// Each bad body gets a 4xx whose one-line message names the field.
    #[test]
    fn bad_bodies_name_the_field() {
        let cases: &[(&str, u16, &str)] = &[
            ("{", 400, "malformed JSON"),
            ("[1,2]", 400, "request body: expected a JSON object"),
            ("", 400, "malformed JSON"),
            (r#"{"completions": ["x"]}"#, 400, "missing field `task`"),
            (
                r#"{"task": "vector_add"}"#,
                400,
                "missing field `completions`",
            ),
            (
                r#"{"task": 3, "completions": ["x"]}"#,
                400,
                "field `task`: expected a task id",
            ),
            (
                r#"{"task": "vector_add", "completions": ["x", 2]}"#,
                400,
                "field `completions[1]`",
            ),
            (
                r#"{"task": "vector_add", "completions": []}"#,
                400,
                "field `completions`: at least one",
            ),
            (
                r#"{"task": "vector_add", "completions": ["x"], "step": -1}"#,
                400,
                "field `step`",
            ),
            (
                r#"{"task": "vector_add", "completions": ["x"], "stpe": 1}"#,
                400,
                "unknown field `stpe`",
            ),
            (
                r#"{"task": "vector_add", "completions": ["x"], "reward": "kevni"}"#,
                400,
                "field `reward.preset`: unknown reward `kevni`",
            ),
            (
                r#"{"task": "vector_add", "completions": ["x"], "reward": {"preset": "cudaperf", "weights": {"sped": 1}}}"#,
                400,
                "field `reward.weights.sped`: unknown field `sped`",
            ),
            (
                r#"{"task": "vector_add", "completions": ["x"], "reward": {"preset": "cudaperf", "weights": {"speed": "a"}}}"#,
                400,
                "field `reward.weights.speed`",
            ),
            (
                r#"{"task": "vector_add", "completions": ["x"], "deadline_ms": 0}"#,
                400,
                "field `deadline_ms`",
            ),
            (
                r#"{"task": "no_such_task", "completions": ["x"]}"#,
                404,
                "unknown task `no_such_task`",
            ),
            (
                r#"{"task": {"toml": "id = 1", "reference": ""}, "completions": ["x"]}"#,
                400,
                "field `task`: inline task: task.toml",
            ),
            (
                r#"{"task": {"toml": "", "referense": ""}, "completions": ["x"]}"#,
                400,
                "field `task.referense`",
            ),
        ];
        for (body, status, says) in cases {
            let e = err(body);
            assert_eq!(e.status, *status, "{body}: {e}");
            assert!(e.message.contains(says), "{body}: `{e}` lacks `{says}`");
            assert!(!e.message.contains('\n'), "{body}: not one line: {e}");
        }
    }

    #[test]
    fn too_many_completions_is_refused() {
        let limits = Limits {
            max_completions: 2,
            ..Default::default()
        };
        let body = r#"{"task": "vector_add", "completions": ["a", "b", "c"]}"#;
        let e = parse(body.as_bytes(), &limits, &store()).err().unwrap();
        assert!(e.message.contains("limit of 2"), "{e}");
    }

    #[test]
    fn a_good_request_keeps_order_and_defaults() {
        let body = r#"{"task": "vector_add", "completions": ["a", "b"], "step": 7}"#;
        let p = parse(body.as_bytes(), &Limits::default(), &store()).unwrap();
        assert_eq!(p.job.completions, ["a", "b"]);
        assert_eq!(p.job.step, 7);
        assert_eq!(p.job.reward.preset, "cudaperf");
        assert!(p.job.report);
        assert_eq!(p.task.id, "vector_add");
        assert_eq!(p.deadline, Limits::default().default_deadline);
    }

    #[test]
    fn inline_task_loads_under_its_own_id() {
        let dir =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/tasks/vector_add");
        let toml = std::fs::read_to_string(dir.join("task.toml")).unwrap();
        // Keep only the reference: the inline body carries no other implementations.
        let toml: String = toml
            .lines()
            .filter(|l| !l.starts_with("implementations"))
            .collect::<Vec<_>>()
            .join("\n");
        let body = serde_json::json!({
            "task": {"toml": toml, "reference": std::fs::read_to_string(dir.join("reference.cu")).unwrap(),
                     "original": "void f();"},
            "completions": ["x"],
        });
        let s = store();
        let p = parse(body.to_string().as_bytes(), &Limits::default(), &s).unwrap();
        assert!(p.task.id.starts_with("vector_add@"), "{}", p.task.id);
        assert_eq!(p.task.original, "void f();");
        // The same content is the same task.
        let q = parse(body.to_string().as_bytes(), &Limits::default(), &s).unwrap();
        assert!(Arc::ptr_eq(&p.task, &q.task));
    }
}
