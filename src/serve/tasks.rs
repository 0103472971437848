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
    limits: TaskLimits,
}

impl TaskStore {
    /// Loads every task folder under `dir` (none when `dir` is `None`: inline tasks only)
    /// with the default buffer cap.
    pub fn load(dir: Option<&Path>) -> Result<TaskStore, ServeError> {
        TaskStore::load_with(dir, TaskLimits::default())
    }

    /// [`TaskStore::load`] with the buffer cap every folder and inline task is validated
    /// against (`cudaperf serve` and `node` use [`crate::exec::task_limits_for_this_machine`] or
    /// `--max-buffer-gib`).
    pub fn load_with(dir: Option<&Path>, limits: TaskLimits) -> Result<TaskStore, ServeError> {
        let mut by_id = BTreeMap::new();
        if let Some(dir) = dir {
            let ds = crate::dataset::Dataset::load_with(dir, &limits)
                .map_err(|e| ServeError::Tasks(format!("{}: {e}", dir.display())))?;
            for t in ds.tasks {
                by_id.insert(t.id.clone(), Arc::new(t));
            }
        }
        Ok(TaskStore {
            by_id,
            inline: Mutex::new(HashMap::new()),
            limits,
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
        let mut task = load_inline_with(inline, &self.limits)
            .map_err(|e| TaskRefError::Invalid(e.to_string()))?;
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

/// Validates an inline task with the crate's loader ([`Task::from_toml_and_files`]) and the
/// default buffer cap.
pub fn load_inline(inline: &InlineTask) -> Result<Task, TaskError> {
    load_inline_with(inline, &TaskLimits::default())
}

/// [`load_inline`] with a buffer cap.
pub fn load_inline_with(inline: &InlineTask, limits: &TaskLimits) -> Result<Task, TaskError> {
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
    Task::from_toml_and_files(&inline.toml, &files, limits)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A full-size task (12 GiB of buffers): refused by the default 8 GiB cap with the
    /// config named, served when the store is given the device's cap, folder and inline
    /// alike (`cudaperf serve` and `node` pass `--max-buffer-gib` or the device's quarter).
    #[test]
    fn a_full_size_task_loads_under_the_cap_the_store_is_given() {
        let toml = "id = \"big\"\nkind = \"c2cuda\"\noriginal = \"original.c\"\nreference = \"reference.cu\"\n\
            [tolerance]\natol = 1e-5\nrtol = 1e-5\n\
            [[params]]\nname = \"x\"\nkind = \"buffer\"\ndirection = \"in\"\ndtype = \"f32\"\nlen = \"n\"\n\
            [[params]]\nname = \"y\"\nkind = \"buffer\"\ndirection = \"out\"\ndtype = \"f32\"\nlen = \"n\"\n\
            [[params]]\nname = \"n\"\nkind = \"scalar\"\ndtype = \"i64\"\nvalue = \"n\"\n\
            [[configs]]\nname = \"full\"\nsizes = { n = 1610612736 }\n";
        let reference = "// @launch copy grid=(ceil_div(n, 256)) block=(256)\n\
            extern \"C\" __global__ void copy(const float* x, float* y, long long n) {\n\
            long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = x[i]; }\n";
        let original = "void big(const float* x, float* y, long long n) { for (long long i = 0; i < n; i++) y[i] = x[i]; }\n";
        let root = std::env::temp_dir().join(format!("cudaperf-store-cap-{}", std::process::id()));
        let dir = root.join("big");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("task.toml"), toml).unwrap();
        std::fs::write(dir.join("reference.cu"), reference).unwrap();
        std::fs::write(dir.join("original.c"), original).unwrap();

        let refused = TaskStore::load(Some(&root))
            .err()
            .expect("over the default cap");
        let text = refused.to_string();
        assert!(
            text.contains("config `full`") && text.contains("8.00 GiB"),
            "{text}"
        );
        let store = TaskStore::load_with(Some(&root), TaskLimits::from_gib(16.0).unwrap()).unwrap();
        assert!(store.get("big").is_some());

        let inline = InlineTask {
            toml: toml.to_string(),
            reference: reference.to_string(),
            original: Some(original.to_string()),
            files: BTreeMap::new(),
        };
        assert!(load_inline(&inline).is_err());
        assert!(store.resolve(&TaskRef::Inline(inline)).is_ok());
        let _ = std::fs::remove_dir_all(&root);
    }
}
