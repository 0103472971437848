//! The tasks a server or node knows: a tasks folder loaded at start, plus inline tasks
//! validated by the crate's task loader and remembered by content.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::{Arc, Mutex};

use sha2::{Digest, Sha256};

use super::api::{InlineTask, TaskDetail, TaskRef, TaskSummary};
use super::ServeError;
use crate::task::{Task, TaskError, TaskLimits};

/// Inline tasks remembered before the cache is cleared.
const INLINE_ENTRIES: usize = 256;

/// Why a request's task could not be used.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum TaskRefError {
    /// No task with this id in the tasks folder.
    #[error(
        "field `task`: unknown task `{id}` ({known} tasks are served; GET /v1/tasks lists them)"
    )]
    Unknown {
        /// The id asked for.
        id: String,
        /// How many tasks there are.
        known: usize,
    },
    /// The inline task does not load.
    #[error("field `task`: inline task: {0}")]
    Invalid(String),
}

/// Tasks by id, and inline tasks by content.
pub struct TaskStore {
    by_id: BTreeMap<String, Arc<Task>>,
    inline: Mutex<HashMap<String, Arc<Task>>>,
}

impl TaskStore {
    /// Loads every task folder under `dir` (none when `dir` is `None`: inline tasks only).
    pub fn load(dir: Option<&Path>) -> Result<TaskStore, ServeError> {
        let mut by_id = BTreeMap::new();
        if let Some(dir) = dir {
            let ds = crate::dataset::Dataset::load(dir)
                .map_err(|e| ServeError::Tasks(format!("{}: {e}", dir.display())))?;
            for t in ds.tasks {
                by_id.insert(t.id.clone(), Arc::new(t));
            }
        }
        Ok(TaskStore {
            by_id,
            inline: Mutex::new(HashMap::new()),
        })
    }

    /// A task of the folder.
    pub fn get(&self, id: &str) -> Option<Arc<Task>> {
        self.by_id.get(id).cloned()
    }

    /// Number of folder tasks.
    pub fn len(&self) -> usize {
        self.by_id.len()
    }

    /// Whether the folder had no tasks.
    pub fn is_empty(&self) -> bool {
        self.by_id.is_empty()
    }

    /// The task a request names or carries.
    pub fn resolve(&self, r: &TaskRef) -> Result<Arc<Task>, TaskRefError> {
        match r {
            TaskRef::Id(id) => self.get(id).ok_or_else(|| TaskRefError::Unknown {
                id: id.clone(),
                known: self.by_id.len(),
            }),
            TaskRef::Inline(inline) => self.inline(inline),
        }
    }

    fn inline(&self, inline: &InlineTask) -> Result<Arc<Task>, TaskRefError> {
        let key = content_hash(inline);
        if let Some(t) = self
            .inline
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&key)
        {
            return Ok(Arc::clone(t));
        }
        let mut task = load_inline(inline).map_err(|e| TaskRefError::Invalid(e.to_string()))?;
        // The evaluator remembers results and references by task id: an inline task gets
        // an id of its own, so it never collides with a folder task or another inline one.
        task.id = format!("{}@{}", task.id, &key[..12]);
        let task = Arc::new(task);
        let mut cache = self.inline.lock().unwrap_or_else(|p| p.into_inner());
        if cache.len() >= INLINE_ENTRIES {
            cache.clear();
        }
        cache.insert(key, Arc::clone(&task));
        Ok(task)
    }

    /// Every folder task, summarised.
    pub fn summaries(&self) -> Vec<TaskSummary> {
        self.by_id.values().map(|t| summary(t)).collect()
    }

    /// One folder task with its prompt.
    pub fn detail(&self, id: &str) -> Option<TaskDetail> {
        self.by_id.get(id).map(|t| TaskDetail {
            summary: summary(t),
            prompt: t.prompt(),
            original: t.original.clone(),
            signature: t.signature(),
        })
    }
}

fn summary(t: &Task) -> TaskSummary {
    TaskSummary {
        id: t.id.clone(),
        kind: t.kind.as_str().into(),
        title: t.title.clone(),
        configs: t.configs.iter().map(|c| c.name.clone()).collect(),
    }
}

fn content_hash(inline: &InlineTask) -> String {
    let mut h = Sha256::new();
    // serde_json of a struct with a BTreeMap is deterministic.
    h.update(serde_json::to_vec(inline).unwrap_or_default());
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// The file names the TOML gives for `original` and `reference` (when it parses).
#[derive(serde::Deserialize)]
struct FileNames {
    original: Option<String>,
    reference: Option<String>,
}

/// Validates an inline task with the crate's loader ([`Task::from_toml_and_files`]).
pub fn load_inline(inline: &InlineTask) -> Result<Task, TaskError> {
    let mut files = inline.files.clone();
    // When the TOML does not parse, the loader below says where.
    if let Ok(names) = toml::from_str::<FileNames>(&inline.toml) {
        if let Some(r) = names.reference {
            files.insert(r, inline.reference.clone());
        }
        if let Some(o) = names.original {
            files.insert(o, inline.original.clone().unwrap_or_default());
        }
    }
    Task::from_toml_and_files(&inline.toml, &files, &TaskLimits::default())
}
