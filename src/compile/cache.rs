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
    pub fn cubin(&self) -> Result<Vec<u8>, base64::DecodeError> {
        base64::engine::general_purpose::STANDARD.decode(&self.cubin_b64)
    }

    /// Whether the entry can be used: a success carries a cubin that decodes.
    pub fn is_valid(&self) -> bool {
        !self.ok || self.cubin().is_ok_and(|c| !c.is_empty())
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

    /// Creates `dir` if needed and checks that this process can write to it.
    pub fn check_dir(dir: &Path) -> std::io::Result<()> {
        std::fs::create_dir_all(dir)?;
        if !dir.is_dir() {
            return Err(std::io::Error::other("not a folder"));
        }
        let probe = dir.join(format!(".write-check.{}", std::process::id()));
        std::fs::write(&probe, b"")?;
        std::fs::remove_file(&probe)
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
        let path = Self::path(dir, key);
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
            Err(e) => {
                tracing::warn!(
                    "compile cache entry {} cannot be read ({e}); compiling again",
                    path.display()
                );
                return None;
            }
        };
        // A corrupt entry is a miss, never a result: the source is compiled again and the
        // entry rewritten. Nothing read from the cache can make up a compile outcome.
        let entry: CacheEntry = match serde_json::from_str(&text) {
            Ok(e) => e,
            Err(e) => {
                tracing::warn!(
                    "compile cache entry {} is corrupt ({e}); compiling again",
                    path.display()
                );
                return None;
            }
        };
        if !entry.is_valid() {
            tracing::warn!(
                "compile cache entry {} has no valid cubin; compiling again",
                path.display()
            );
            return None;
        }
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
