//! Compile settings and the NVRTC invocation they give (program name and flags).

use std::path::PathBuf;
use std::time::Duration;

use super::Isolation;

/// Compile settings. Every field has a documented default.
#[derive(Debug, Clone, PartialEq)]
pub struct CompileOptions {
    /// Target architecture, `sm_XX` (default `sm_90`). A cubin, not PTX, so an older driver
    /// never meets a newer PTX version.
    pub arch: String,
    /// Extra NVRTC flags from the operator (never from candidates). Default none.
    pub extra_flags: Vec<String>,
    /// Longest log kept in reports, in bytes (default 4096); error lines are kept first.
    pub max_log_bytes: usize,
    /// Wall-clock limit per compile (default 30 s). Enforced only when sandboxed.
    pub timeout: Duration,
    /// Persist the cache here (default: memory only). It must be a folder this process can
    /// create and write; [`Compiler::new`](super::Compiler::new) checks.
    pub cache_dir: Option<PathBuf>,
    /// Where compiles run (default [`Isolation::Sandboxed`]).
    pub isolation: Isolation,
    /// Worker executable (default: found by [`crate::sandbox::find_worker`]).
    pub worker: Option<PathBuf>,
    /// Compile workers (default: one per core).
    pub workers: usize,
    /// Address-space limit per compile worker (default 8 GiB).
    pub memory_limit_bytes: Option<u64>,
}

impl Default for CompileOptions {
    fn default() -> Self {
        CompileOptions {
            arch: "sm_90".into(),
            extra_flags: Vec::new(),
            max_log_bytes: 4096,
            timeout: Duration::from_secs(30),
            cache_dir: None,
            isolation: Isolation::Sandboxed,
            worker: None,
            workers: std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(2),
            memory_limit_bytes: Some(8 << 30),
        }
    }
}

/// Checks an arch string such as `sm_90` or `sm_90a`.
pub fn valid_arch(arch: &str) -> bool {
    arch.strip_prefix("sm_").is_some_and(|n| {
        let digits = n.strip_suffix('a').unwrap_or(n);
        !digits.is_empty() && digits.len() <= 3 && digits.chars().all(|c| c.is_ascii_digit())
    })
}

impl CompileOptions {
    /// The NVRTC flags for these options.
    pub fn flags(&self, include_dir: Option<&std::path::Path>) -> Vec<String> {
        let mut f = vec![
            format!("-arch={}", self.arch),
            "-std=c++17".to_string(),
            "-Xptxas=-v".to_string(),
            "--no-source-include".to_string(),
        ];
        if let Some(dir) = include_dir {
            f.push(format!("-I{}", dir.display()));
        }
        f.extend(self.extra_flags.iter().cloned());
        f
    }

    /// How a candidate is handed to NVRTC: a program name and flags that only make sense
    /// together.
    ///
    /// NVRTC searches a quoted `#include` first in the folder of the file that contains it.
    /// For the in-memory candidate that folder is the one of its program name, so a bare
    /// `candidate.cu` would let `#include "cuda_fp16.h"` read a file of that name from the
    /// process's working folder. [`CompileOptions::flags`] turns the search off with
    /// `--no-source-include`, which also breaks the CUDA headers' own relative includes
    /// (`crt/mma.h` includes `"mma.hpp"`, `cooperative_groups/reduce.h` includes
    /// `"details/info.h"`): every WMMA kernel failed to compile. Here the candidate is named
    /// as a file *inside* the CUDA include folder instead, so the folder of every file NVRTC
    /// reads is inside that folder: the headers resolve as under nvcc, and the only files a
    /// candidate can reach are the allowlisted headers ([`check_includes`](super::check_includes)) and what they
    /// include. `cccl/` (where CUDA 13 keeps `<nv/target>`) is searched too when present.
    /// Without an include folder the flags are [`CompileOptions::flags`] (nothing to find).
    pub fn invocation(&self, include_dir: Option<&std::path::Path>) -> Invocation {
        let Some(dir) = include_dir else {
            return Invocation {
                program_name: PROGRAM_FILE.to_string(),
                flags: self.flags(None),
            };
        };
        let mut flags: Vec<String> = self
            .flags(Some(dir))
            .into_iter()
            .filter(|f| f != "--no-source-include")
            .collect();
        let cccl = dir.join("cccl");
        if cccl.is_dir() {
            // Right after `-I<dir>`, before the operator's flags.
            let at = flags
                .iter()
                .position(|f| f.starts_with("-I"))
                .map_or(flags.len(), |i| i + 1);
            flags.insert(at, format!("-I{}", cccl.display()));
        }
        Invocation {
            program_name: dir.join(PROGRAM_FILE).display().to_string(),
            flags,
        }
    }
}

/// The file name a candidate is compiled under (its compile log says `candidate.cu(7): ...`).
pub const PROGRAM_FILE: &str = "candidate.cu";

/// A program name and the NVRTC flags that go with it ([`CompileOptions::invocation`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invocation {
    /// The name NVRTC gives the source; its folder is searched for quoted includes.
    pub program_name: String,
    /// The flags.
    pub flags: Vec<String>,
}

impl Invocation {
    /// The inputs of a compile that decide its result, for the cache key: the flags and the
    /// program name (it decides where quoted includes are looked up).
    pub(super) fn key_parts(&self) -> Vec<String> {
        let mut parts = self.flags.clone();
        parts.push(format!("program={}", self.program_name));
        parts
    }
}
