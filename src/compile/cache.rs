//! Content-addressed compile cache: in memory, and optionally on disk.
//!
//! Key = SHA-256 of (source, flags, arch, NVRTC version, kernel name expressions). Disk
//! entries are written to a temporary file and renamed into place, so concurrent processes
//! sharing a cache folder never see a half-written entry.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use base64::Engine;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::ptxas::Resources;

/// What a compile produced, success or failure (both are deterministic, so both are cached).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CacheEntry {
    /// Whether NVRTC succeeded.
    pub ok: bool,
    /// The full program log (ptxas info lines removed).
    pub log: String,
    /// The cubin, base64 (empty on failure).
    pub cubin_b64: String,
    /// Resource usage per kernel, named as launched.
    pub kernels: Vec<Resources>,
    /// (name expression, lowered name).
    pub lowered: Vec<(String, String)>,
}

impl CacheEntry {
    /// The cubin bytes.
    pub fn cubin(&self) -> Vec<u8> {
        base64::engine::general_purpose::STANDARD
            .decode(&self.cubin_b64)
            .unwrap_or_default()
    }
}

/// Hashes the parts of a compile that determine its result.
pub fn cache_key(
    source: &str,
    flags: &[String],
    nvrtc_version: (i32, i32),
    name_exprs: &[String],
) -> String {
    let mut h = Sha256::new();
    for part in [source.as_bytes(), b"\0flags\0"] {
        h.update(part);
    }
    for f in flags {
        h.update(f.as_bytes());
        h.update(b"\0");
    }
    h.update(format!("nvrtc {}.{}\0", nvrtc_version.0, nvrtc_version.1).as_bytes());
    for n in name_exprs {
        h.update(n.as_bytes());
        h.update(b"\0");
    }
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// Most entries kept in memory; beyond it the map is cleared (a GRPO step reuses few).
const MEMORY_ENTRIES: usize = 4096;

/// The cache.
#[derive(Debug, Default)]
pub struct CompileCache {
    memory: Mutex<HashMap<String, Arc<CacheEntry>>>,
    dir: Option<PathBuf>,
}

impl CompileCache {
    /// A cache that also persists to `dir` when given.
    pub fn new(dir: Option<PathBuf>) -> CompileCache {
        CompileCache {
            memory: Mutex::new(HashMap::new()),
            dir,
        }
    }

    fn path(dir: &Path, key: &str) -> PathBuf {
        dir.join(format!("{key}.json"))
    }

    /// Looks up a key in memory, then on disk.
    pub fn get(&self, key: &str) -> Option<Arc<CacheEntry>> {
        if let Some(e) = self.memory.lock().ok()?.get(key) {
            return Some(Arc::clone(e));
        }
        let dir = self.dir.as_ref()?;
        let text = std::fs::read_to_string(Self::path(dir, key)).ok()?;
        // A corrupt entry is a miss, not an error: it will be rewritten.
        let entry: CacheEntry = serde_json::from_str(&text).ok()?;
        let entry = Arc::new(entry);
        self.remember(key, Arc::clone(&entry));
        Some(entry)
    }

    fn remember(&self, key: &str, entry: Arc<CacheEntry>) {
        if let Ok(mut m) = self.memory.lock() {
            if m.len() >= MEMORY_ENTRIES {
                m.clear();
            }
            m.insert(key.to_string(), entry);
        }
    }

    /// Stores an entry. Disk errors are returned but the memory copy is kept regardless.
    pub fn put(&self, key: &str, entry: CacheEntry) -> std::io::Result<Arc<CacheEntry>> {
        let entry = Arc::new(entry);
        self.remember(key, Arc::clone(&entry));
        if let Some(dir) = &self.dir {
            std::fs::create_dir_all(dir)?;
            let tmp = dir.join(format!(
                ".{key}.{}.{:?}.tmp",
                std::process::id(),
                std::thread::current().id()
            ));
            let text = serde_json::to_string(&*entry).map_err(std::io::Error::other)?;
            std::fs::write(&tmp, text)?;
            std::fs::rename(&tmp, Self::path(dir, key))?;
        }
        Ok(entry)
    }
}
