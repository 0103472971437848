//! Compile stage: NVRTC to a cubin, resource usage from ptxas, a content-addressed cache.
//!
//! Candidate source is untrusted. Before NVRTC sees it, `#include` directives are checked
//! against [`ALLOWED_INCLUDES`] (see [`include_guard`]), and NVRTC runs with
//! `--no-source-include` and only the CUDA include folder on its path. Because an NVRTC call
//! cannot be interrupted inside a process, untrusted compiles run in worker processes
//! ([`crate::sandbox`]) that are killed when they pass [`CompileOptions::timeout`] (template
//! bombs exist); the worker is replaced and the outcome is [`CompileOutcome::Timeout`].
//! Workers stay alive between compiles, so the ~70 ms of loading NVRTC is paid once.
//!
//! Without NVRTC the outcome is [`CompileOutcome::Unavailable`], never a panic.

pub mod cache;
pub mod include_guard;
pub mod nvrtc;
pub mod ptxas;
pub mod worker;

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use base64::Engine;
use serde::{Deserialize, Serialize};

pub use cache::{CacheEntry, CompileCache};
pub use include_guard::{check_includes, ForbiddenInclude, ALLOWED_INCLUDES};
pub use ptxas::Resources;

use crate::candidate::Candidate;
use crate::sandbox::{JobOutcome, Pool};
use crate::worker::{find_worker, Role};
use worker::{CompileJob, Compiled};

/// Where compiles run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Isolation {
    /// In worker processes when a worker executable is found, else in this process.
    #[default]
    Auto,
    /// Always in worker processes; no worker found means `Unavailable`.
    Sandboxed,
    /// In this process: fastest, but a compile cannot be stopped at its time limit. Only
    /// for trusted sources (the crate's own fixtures).
    InProcess,
}

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
    /// Persist the cache here (default: memory only).
    pub cache_dir: Option<PathBuf>,
    /// Where compiles run (default [`Isolation::Auto`]).
    pub isolation: Isolation,
    /// Worker executable (default: found by [`find_worker`]).
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
            isolation: Isolation::Auto,
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
}

/// A successfully compiled module.
#[derive(Debug, Clone, PartialEq)]
pub struct CompiledModule {
    /// The cubin.
    pub cubin: Arc<Vec<u8>>,
    /// Resource usage per kernel, named as launched.
    pub kernels: Vec<Resources>,
    /// (name expression, lowered symbol) pairs for loading kernels.
    pub lowered: Vec<(String, String)>,
    /// Trimmed log (warnings).
    pub log: String,
}

impl CompiledModule {
    /// The symbol to look up for a launch's kernel expression.
    pub fn symbol(&self, kernel: &str) -> String {
        self.lowered
            .iter()
            .find(|(e, _)| e == kernel)
            .map(|(_, l)| l.clone())
            .unwrap_or_else(|| kernel.to_string())
    }
}

/// The result of the compile stage.
#[derive(Debug, Clone, PartialEq)]
pub enum CompileOutcome {
    /// A cubin was produced.
    Compiled {
        /// The module.
        module: CompiledModule,
        /// Served from the cache.
        cached: bool,
        /// Wall time of the stage.
        millis: f64,
    },
    /// NVRTC reported errors.
    Failed {
        /// Trimmed log, errors first.
        log: String,
        /// Served from the cache.
        cached: bool,
        /// Wall time of the stage.
        millis: f64,
    },
    /// The source was refused before compiling (forbidden include, NUL byte).
    Rejected {
        /// Why.
        reason: String,
    },
    /// The compile ran past its limit and was killed.
    Timeout {
        /// The limit in milliseconds.
        limit_ms: u64,
    },
    /// The compile could not run here (no NVRTC, no worker).
    Unavailable {
        /// Why.
        reason: String,
    },
}

impl CompileOutcome {
    /// Whether a cubin was produced.
    pub fn is_compiled(&self) -> bool {
        matches!(self, CompileOutcome::Compiled { .. })
    }

    /// The module, if compiled.
    pub fn module(&self) -> Option<&CompiledModule> {
        match self {
            CompileOutcome::Compiled { module, .. } => Some(module),
            _ => None,
        }
    }

    /// The report form of this outcome.
    pub fn to_stage(&self, arch: &str, sandboxed: bool) -> CompileStage {
        let mut s = CompileStage {
            ok: false,
            status: String::new(),
            log: String::new(),
            kernels: Vec::new(),
            cached: false,
            millis: 0.0,
            arch: arch.to_string(),
            sandboxed,
            reason: None,
        };
        match self {
            CompileOutcome::Compiled {
                module,
                cached,
                millis,
            } => {
                s.ok = true;
                s.status = "compiled".into();
                s.log = module.log.clone();
                s.kernels = module.kernels.clone();
                s.cached = *cached;
                s.millis = *millis;
            }
            CompileOutcome::Failed {
                log,
                cached,
                millis,
            } => {
                s.status = "error".into();
                s.log = log.clone();
                s.cached = *cached;
                s.millis = *millis;
            }
            CompileOutcome::Rejected { reason } => {
                s.status = "rejected".into();
                s.reason = Some(reason.clone());
            }
            CompileOutcome::Timeout { limit_ms } => {
                s.status = "timeout".into();
                s.reason = Some(format!(
                    "compile exceeded its {limit_ms} ms limit and was killed"
                ));
            }
            CompileOutcome::Unavailable { reason } => {
                s.status = "unavailable".into();
                s.reason = Some(reason.clone());
            }
        }
        s
    }
}

/// `stages.compile` of a report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CompileStage {
    /// Whether a cubin was produced.
    pub ok: bool,
    /// `compiled`, `error`, `rejected`, `timeout` or `unavailable`.
    pub status: String,
    /// Trimmed compile log (errors first).
    pub log: String,
    /// Per-kernel resources from ptxas.
    pub kernels: Vec<Resources>,
    /// Served from the cache.
    pub cached: bool,
    /// Wall time of the stage in milliseconds.
    pub millis: f64,
    /// Target architecture.
    pub arch: String,
    /// Whether the compile ran in a worker process.
    pub sandboxed: bool,
    /// Why the stage did not produce a result (rejected, timeout, unavailable).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub reason: Option<String>,
}

/// Compiles candidates; cheap to share between threads.
pub struct Compiler {
    options: CompileOptions,
    cache: CompileCache,
    pool: OnceLock<Option<Pool<CompileJob, Compiled>>>,
}

impl Compiler {
    /// A compiler with these options. Nothing is loaded until the first compile.
    pub fn new(options: CompileOptions) -> Compiler {
        let cache = CompileCache::new(options.cache_dir.clone());
        Compiler {
            options,
            cache,
            pool: OnceLock::new(),
        }
    }

    /// The options.
    pub fn options(&self) -> &CompileOptions {
        &self.options
    }

    /// Whether compiles run in worker processes.
    pub fn is_sandboxed(&self) -> bool {
        self.pool().is_some()
    }

    fn pool(&self) -> Option<&Pool<CompileJob, Compiled>> {
        self.pool
            .get_or_init(|| {
                if self.options.isolation == Isolation::InProcess {
                    return None;
                }
                let command = find_worker(self.options.worker.as_deref(), Role::Compile)?;
                let mut spec = command.spec(Role::Compile);
                spec.memory_limit_bytes = self.options.memory_limit_bytes;
                Some(Pool::new(vec![spec; self.options.workers.max(1)]))
            })
            .as_ref()
    }

    /// Compiles a candidate's source, asking for the lowered names of its kernels.
    pub fn compile(&self, candidate: &Candidate) -> CompileOutcome {
        let exprs: Vec<String> = candidate
            .launches
            .iter()
            .map(|l| l.kernel.clone())
            .collect();
        self.compile_source(&candidate.source, &exprs)
    }

    /// Compiles a source; `kernel_exprs` are the kernels (as launched) to resolve.
    pub fn compile_source(&self, source: &str, kernel_exprs: &[String]) -> CompileOutcome {
        let start = Instant::now();
        if !valid_arch(&self.options.arch) {
            return CompileOutcome::Unavailable {
                reason: format!(
                    "invalid target architecture `{}` (expected sm_XX, e.g. sm_90)",
                    self.options.arch
                ),
            };
        }
        if let Err(e) = check_includes(source) {
            return CompileOutcome::Rejected {
                reason: e.to_string(),
            };
        }
        if source.contains('\0') {
            return CompileOutcome::Rejected {
                reason: "source contains a NUL byte".into(),
            };
        }
        let lib = match nvrtc::load() {
            Ok(l) => l,
            Err(reason) => return CompileOutcome::Unavailable { reason },
        };
        let mut exprs: Vec<String> = Vec::new();
        for e in kernel_exprs {
            if !exprs.contains(e) {
                exprs.push(e.clone());
            }
        }
        let flags = self.options.flags(lib.include_dir.as_deref());
        let key = cache::cache_key(source, &flags, lib.version, &exprs);
        if let Some(entry) = self.cache.get(&key) {
            return self.outcome(&entry, true, start);
        }
        if self.options.isolation == Isolation::Sandboxed && self.pool().is_none() {
            return CompileOutcome::Unavailable {
                reason: "sandboxed compiles need the `cudaperf` worker executable: set CUDAPERF_WORKER or CompileOptions::worker".into(),
            };
        }
        let raw = match self.pool() {
            Some(pool) => {
                let job = CompileJob {
                    source: source.to_string(),
                    program_name: "candidate.cu".into(),
                    flags: flags.clone(),
                    name_exprs: exprs.clone(),
                };
                let mut outcome = pool.run(&job, self.options.timeout);
                if let JobOutcome::Crashed { reason, .. } = &outcome {
                    // A worker can die of our causes too; a source that kills a fresh one
                    // again is the candidate's doing (e.g. a template bomb past RLIMIT_AS).
                    tracing::warn!("compile worker died ({reason}); retrying once");
                    outcome = pool.run(&job, self.options.timeout);
                }
                match outcome {
                    JobOutcome::Done(Compiled {
                        ok,
                        log,
                        cubin_b64,
                        lowered,
                    }) => {
                        let cubin = base64::engine::general_purpose::STANDARD
                            .decode(cubin_b64)
                            .unwrap_or_default();
                        nvrtc::NvrtcOutput {
                            ok,
                            log,
                            cubin,
                            lowered,
                        }
                    }
                    JobOutcome::Refused { reason } | JobOutcome::Unavailable { reason } => {
                        return CompileOutcome::Unavailable { reason }
                    }
                    JobOutcome::Timeout { limit } => {
                        return CompileOutcome::Timeout {
                            limit_ms: limit.as_millis() as u64,
                        }
                    }
                    JobOutcome::Crashed {
                        reason,
                        stderr_tail,
                    } => {
                        let tail = crate::sandbox::last_lines(&stderr_tail, 5, "\n");
                        return CompileOutcome::Failed {
                            log: format!(
                                "the compiler process died twice on this source: {reason}\n{tail}"
                            ),
                            cached: false,
                            millis: start.elapsed().as_secs_f64() * 1e3,
                        };
                    }
                }
            }
            None => match nvrtc::compile(source, "candidate.cu", &flags, &exprs) {
                Ok(out) => out,
                Err(reason) => return CompileOutcome::Unavailable { reason },
            },
        };
        let entry = self.entry_from(raw, lib.include_dir.as_deref());
        let entry = match self.cache.put(&key, entry.clone()) {
            Ok(e) => e,
            Err(err) => {
                tracing::warn!("compile cache write failed: {err}");
                Arc::new(entry)
            }
        };
        self.outcome(&entry, false, start)
    }

    fn entry_from(
        &self,
        raw: nvrtc::NvrtcOutput,
        include_dir: Option<&std::path::Path>,
    ) -> CacheEntry {
        let mut kernels = ptxas::parse_resources(&raw.log);
        for k in &mut kernels {
            if let Some((expr, _)) = raw.lowered.iter().find(|(_, low)| *low == k.name) {
                k.name = expr.clone();
            }
        }
        let mut log = ptxas::strip_info(&raw.log);
        if !raw.ok && log.trim().is_empty() {
            // ptxas refused the code but NVRTC logged only its info lines: say why.
            log = ptxas::explain_silent_failure(&raw.log, &kernels);
        }
        // Paths of the CUDA headers say nothing useful and reveal the host's layout.
        if let Some(dir) = include_dir {
            log = log.replace(&dir.display().to_string(), "<cuda-include>");
        }
        CacheEntry {
            ok: raw.ok,
            log,
            cubin_b64: base64::engine::general_purpose::STANDARD.encode(&raw.cubin),
            kernels,
            lowered: raw.lowered,
        }
    }

    fn outcome(&self, entry: &CacheEntry, cached: bool, start: Instant) -> CompileOutcome {
        let millis = start.elapsed().as_secs_f64() * 1e3;
        let log = ptxas::trim_log(entry.log.trim(), self.options.max_log_bytes);
        if entry.ok {
            CompileOutcome::Compiled {
                module: CompiledModule {
                    cubin: Arc::new(entry.cubin()),
                    kernels: entry.kernels.clone(),
                    lowered: entry.lowered.clone(),
                    log,
                },
                cached,
                millis,
            }
        } else {
            CompileOutcome::Failed {
                log,
                cached,
                millis,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_are_what_nvrtc_expects() {
        let o = CompileOptions {
            arch: "sm_80".into(),
            extra_flags: vec!["--use_fast_math".into()],
            ..Default::default()
        };
        let f = o.flags(Some(std::path::Path::new("/cuda/include")));
        assert_eq!(
            f,
            [
                "-arch=sm_80",
                "-std=c++17",
                "-Xptxas=-v",
                "--no-source-include",
                "-I/cuda/include",
                "--use_fast_math"
            ]
        );
        assert_eq!(CompileOptions::default().flags(None)[0], "-arch=sm_90");
    }

    #[test]
    fn arch_validation() {
        for ok in ["sm_90", "sm_90a", "sm_80", "sm_120"] {
            assert!(valid_arch(ok), "{ok}");
        }
        for bad in [
            "compute_90",
            "sm_",
            "sm_9x",
            "-arch=sm_90",
            "sm_90 -I/etc",
            "",
        ] {
            assert!(!valid_arch(bad), "{bad}");
        }
    }
}
