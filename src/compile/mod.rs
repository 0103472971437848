//! Compile stage: NVRTC to a cubin, resource usage from ptxas, a content-addressed cache.
//!
//! Candidate source is untrusted. Before NVRTC sees it, `#include` directives are checked
//! against [`ALLOWED_INCLUDES`] (see [`check_includes`]), and NVRTC searches only the CUDA
//! include folder (see [`Invocation`]): a host file outside it cannot be read into a compile,
//! and the CUDA headers' own relative includes (`crt/mma.h` → `"mma.hpp"`) resolve the way
//! they do under nvcc. An allowlisted header that this installation cannot compile is ours,
//! never the candidate's: the outcome is [`CompileOutcome::Unavailable`]. Because an NVRTC call
//! cannot be interrupted inside a process, untrusted compiles run in worker processes
//! ([`crate::sandbox`]) that are killed when they pass [`CompileOptions::timeout`] (template
//! bombs exist); the worker is replaced and the outcome is [`CompileOutcome::Timeout`].
//! Workers stay alive between compiles, so the ~70 ms of loading NVRTC is paid once.
//!
//! Without NVRTC the outcome is [`CompileOutcome::Unavailable`], never a panic.

mod cache;
mod include_guard;
pub mod nvrtc;
mod options;
mod ptxas;
pub mod worker;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

use base64::Engine;
use serde::{Deserialize, Serialize};

pub use cache::{cache_key, CacheEntry, CompileCache};
pub use include_guard::{allowed_includes_of, check_includes, ForbiddenInclude, ALLOWED_INCLUDES};
pub use options::{valid_arch, CompileOptions, Invocation, PROGRAM_FILE};
pub use ptxas::{
    explain_silent_failure, parse_resources, strip_info, trim_log, Resources, MAX_STATIC_SMEM_BYTES,
};

use crate::candidate::Candidate;
use crate::sandbox::Role;
use crate::sandbox::{JobOutcome, Pool};
use worker::{CompileJob, Compiled};

/// Where compiles run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Isolation {
    /// In worker processes with a time and memory limit (the default). A [`Compiler`] is
    /// not built when no worker executable is found: untrusted source is never compiled in
    /// this process behind the caller's back.
    #[default]
    Sandboxed,
    /// In this process: fastest, but a compile cannot be stopped at its time limit. Only
    /// for trusted sources (the crate's own fixtures), and only when asked for.
    InProcess,
}

/// Why a [`Compiler`] cannot be built with these options.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CompilerError {
    /// `CompileOptions::arch` is not of the form `sm_XX`.
    #[error("invalid target architecture `{arch}` (expected sm_XX, e.g. sm_90)")]
    InvalidArch {
        /// The value given.
        arch: String,
    },
    /// The NVRTC found here cannot compile for the architecture.
    #[error(transparent)]
    UnsupportedArch(nvrtc::NvrtcError),
    /// Sandboxed compiles need a worker executable and none was found.
    #[error("no compile worker: {0}; set CompileOptions::worker or CUDAPERF_WORKER, serve as your own worker (EvalOptions::self_worker and cudaperf::worker::run_if_requested), or opt into Isolation::InProcess for trusted sources")]
    NoWorker(crate::sandbox::WorkerNotFound),
    /// The cache folder cannot be created or written.
    #[error("compile cache folder {}: {source}", path.display())]
    CacheDir {
        /// The folder.
        path: PathBuf,
        /// What failed.
        source: std::io::Error,
    },
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
}

/// Compiles candidates; cheap to share between threads.
pub struct Compiler {
    options: CompileOptions,
    cache: CompileCache,
    /// The worker pool (sandboxed compiles), `None` for in-process compiles.
    pool: Option<Pool<CompileJob, Compiled>>,
    worker: Option<PathBuf>,
    /// Allowlisted headers checked on their own: `Some(problem)` where one does not compile.
    headers: Mutex<HashMap<&'static str, Option<String>>>,
    /// How candidates are handed to NVRTC, found once (it looks at the include folder).
    invocation: OnceLock<Invocation>,
}

/// A kernel every working NVRTC compiles: run after a compile ends in a way that might be
/// ours rather than the candidate's (a worker that died twice, a timeout), to tell them
/// apart.
const CANARY: &str =
    "extern \"C\" __global__ void cudaperf_canary(float* x) { x[threadIdx.x] = 1.0f; }\n";

impl Compiler {
    /// A compiler with these options. Nothing is started until the first compile, but the
    /// options are checked now: the architecture (against the NVRTC found here, if any), the
    /// cache folder (created and written once), and, for sandboxed compiles, that a worker
    /// executable exists.
    pub fn new(options: CompileOptions) -> Result<Compiler, CompilerError> {
        if !valid_arch(&options.arch) {
            return Err(CompilerError::InvalidArch {
                arch: options.arch.clone(),
            });
        }
        // Without NVRTC the check is left to the compile, which reports `unavailable`.
        if nvrtc::load().is_ok() {
            nvrtc::check_arch(&options.arch).map_err(CompilerError::UnsupportedArch)?;
        }
        if let Some(dir) = &options.cache_dir {
            CompileCache::check_dir(dir).map_err(|source| CompilerError::CacheDir {
                path: dir.clone(),
                source,
            })?;
        }
        let (pool, worker) = match options.isolation {
            Isolation::InProcess => (None, None),
            Isolation::Sandboxed => {
                let command =
                    crate::sandbox::locate_worker(options.worker.as_deref(), Role::Compile)
                        .map_err(CompilerError::NoWorker)?;
                let mut spec = command.spec(Role::Compile);
                spec.memory_limit_bytes = options.memory_limit_bytes;
                let worker = Some(command.program.clone());
                (Some(Pool::new(vec![spec; options.workers.max(1)])), worker)
            }
        };
        Ok(Compiler {
            cache: CompileCache::new(options.cache_dir.clone()),
            options,
            pool,
            worker,
            headers: Mutex::new(HashMap::new()),
            invocation: OnceLock::new(),
        })
    }

    /// The options.
    pub fn options(&self) -> &CompileOptions {
        &self.options
    }

    /// Where compiles run.
    pub fn isolation(&self) -> Isolation {
        self.options.isolation
    }

    /// Whether compiles run in worker processes.
    pub fn is_sandboxed(&self) -> bool {
        self.pool.is_some()
    }

    /// The worker executable (sandboxed compiles).
    pub fn worker(&self) -> Option<&std::path::Path> {
        self.worker.as_deref()
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
        let headers = match allowed_includes_of(source) {
            Ok(h) => h,
            Err(e) => {
                return CompileOutcome::Rejected {
                    reason: e.to_string(),
                }
            }
        };
        if source.contains('\0') {
            return CompileOutcome::Rejected {
                reason: "source contains a NUL byte".into(),
            };
        }
        let lib = match nvrtc::load() {
            Ok(l) => l,
            Err(e) => {
                return CompileOutcome::Unavailable {
                    reason: e.to_string(),
                }
            }
        };
        let mut exprs: Vec<String> = Vec::new();
        for e in kernel_exprs {
            if !exprs.contains(e) {
                exprs.push(e.clone());
            }
        }
        let invocation = self
            .invocation
            .get_or_init(|| self.options.invocation(lib.include_dir.as_deref()));
        let key = cache::cache_key(source, &invocation.key_parts(), lib.version, &exprs);
        let entry = match self.cache.get(&key) {
            Some(entry) => (entry, true),
            None => {
                let include_dir = lib.include_dir.as_deref();
                match self.compile_fresh(source, invocation, &exprs, &key, include_dir, start) {
                    Ok(entry) => (entry, false),
                    Err(outcome) => return outcome,
                }
            }
        };
        let (entry, cached) = entry;
        if !entry.ok {
            // A failure inside an allowlisted header that fails on its own too is this
            // installation's (missing or broken CUDA headers), not the candidate's.
            for header in headers {
                if let Some(problem) = self.header_problem(header, invocation, lib) {
                    return CompileOutcome::Unavailable {
                        reason: format!(
                            "the allowed header <{header}> does not compile with this CUDA installation ({problem}); install the CUDA headers that match NVRTC (a CUDA toolkit, or the nvidia-cuda-runtime and nvidia-cuda-crt wheels) or point CUDAPERF_CUDA_INCLUDE at them"
                        ),
                    };
                }
            }
        }
        self.outcome(&entry, cached, start)
    }

    /// Compiles `source` (in a worker when there is a pool) and stores the result under
    /// `key`; `Err` is the outcome when the compile could not run.
    fn compile_fresh(
        &self,
        source: &str,
        invocation: &Invocation,
        exprs: &[String],
        key: &str,
        include_dir: Option<&std::path::Path>,
        start: Instant,
    ) -> Result<Arc<CacheEntry>, CompileOutcome> {
        let raw = match &self.pool {
            Some(pool) => self.compile_in_worker(pool, source, invocation, exprs, start)?,
            None => nvrtc::compile(source, &invocation.program_name, &invocation.flags, exprs)
                .map_err(|e| CompileOutcome::Unavailable {
                    reason: e.to_string(),
                })?,
        };
        let entry = self.entry_from(raw, invocation, include_dir);
        Ok(match self.cache.put(key, entry.clone()) {
            Ok(e) => e,
            Err(err) => {
                tracing::warn!("compile cache write failed: {err}");
                Arc::new(entry)
            }
        })
    }

    /// Why `#include <header>` alone does not compile here, or `None` when it does. Checked
    /// once per header and compiler; a check that cannot run is not remembered and blames
    /// nobody (`None`).
    fn header_problem(
        &self,
        header: &'static str,
        invocation: &Invocation,
        lib: &nvrtc::NvrtcLib,
    ) -> Option<String> {
        if let Some(known) = self.headers.lock().ok()?.get(header) {
            return known.clone();
        }
        let source = format!("#include <{header}>\n");
        let out = match &self.pool {
            Some(pool) => {
                let job = CompileJob {
                    source,
                    program_name: invocation.program_name.clone(),
                    flags: invocation.flags.clone(),
                    name_exprs: Vec::new(),
                };
                match pool.run(&job, self.options.timeout) {
                    JobOutcome::Done(c) => decode(c).ok()?,
                    _ => return None,
                }
            }
            None => {
                nvrtc::compile(&source, &invocation.program_name, &invocation.flags, &[]).ok()?
            }
        };
        let problem = (!out.ok).then(|| {
            let log = clean_log(&out.log, invocation, lib.include_dir.as_deref());
            log.lines()
                .find(|l| l.contains("error"))
                .unwrap_or("no error line in the log")
                .trim()
                .to_string()
        });
        if let Ok(mut known) = self.headers.lock() {
            known.insert(header, problem.clone());
        }
        problem
    }

    /// One compile on the pool. `Err` is the stage's final outcome: the candidate's (a
    /// timeout, a source that kills the compiler) or ours (`Unavailable`).
    fn compile_in_worker(
        &self,
        pool: &Pool<CompileJob, Compiled>,
        source: &str,
        invocation: &Invocation,
        exprs: &[String],
        start: Instant,
    ) -> Result<nvrtc::NvrtcOutput, CompileOutcome> {
        let job = CompileJob {
            source: source.to_string(),
            program_name: invocation.program_name.clone(),
            flags: invocation.flags.clone(),
            name_exprs: exprs.to_vec(),
        };
        let mut outcome = pool.run(&job, self.options.timeout);
        if let JobOutcome::Crashed { reason, .. } = &outcome {
            // A worker can die of our causes too; a source that kills a fresh one again is
            // the candidate's doing (e.g. a template bomb past RLIMIT_AS) — if a fresh worker
            // still compiles a trivial kernel (checked below).
            tracing::warn!("compile worker died ({reason}); retrying once");
            outcome = pool.run(&job, self.options.timeout);
        }
        match outcome {
            JobOutcome::Done(c) => decode(c),
            JobOutcome::Refused { reason } | JobOutcome::Unavailable { reason } => {
                Err(CompileOutcome::Unavailable { reason })
            }
            JobOutcome::Timeout { limit } => {
                self.canary(pool, "the compile ran past its time limit")?;
                Err(CompileOutcome::Timeout {
                    limit_ms: limit.as_millis() as u64,
                })
            }
            JobOutcome::Crashed {
                reason,
                stderr_tail,
            } => {
                self.canary(pool, "the compile worker died twice on this source")?;
                let tail = crate::sandbox::last_lines(&stderr_tail, 5, "\n");
                Err(CompileOutcome::Failed {
                    log: format!(
                        "the compiler process died twice on this source: {reason}\n{tail}"
                    ),
                    cached: false,
                    millis: start.elapsed().as_secs_f64() * 1e3,
                })
            }
        }
    }

    /// Compiles [`CANARY`] on the pool: `Ok` when the workers are healthy (so a failure just
    /// seen was the candidate's), else `Unavailable` saying what `what` could not be blamed
    /// on.
    fn canary(&self, pool: &Pool<CompileJob, Compiled>, what: &str) -> Result<(), CompileOutcome> {
        let lib = nvrtc::load().map_err(|e| CompileOutcome::Unavailable {
            reason: e.to_string(),
        })?;
        let invocation = self.options.invocation(lib.include_dir.as_deref());
        let job = CompileJob {
            source: CANARY.into(),
            program_name: invocation.program_name,
            flags: invocation.flags,
            name_exprs: Vec::new(),
        };
        let broken = |how: String| {
            CompileOutcome::Unavailable {
            reason: format!(
                "{what}, but the compile workers are broken too (a trivial kernel {how}), so it is not the candidate's failure"
            ),
        }
        };
        match pool.run(&job, self.options.timeout) {
            JobOutcome::Done(c) => match decode(c) {
                Ok(out) if out.ok => Ok(()),
                Ok(out) => Err(broken(format!(
                    "failed to compile: {}",
                    out.log.lines().next().unwrap_or("")
                ))),
                Err(CompileOutcome::Unavailable { reason }) => Err(broken(reason)),
                Err(_) => Err(broken("gave an unreadable answer".into())),
            },
            JobOutcome::Timeout { limit } => {
                Err(broken(format!("also ran past {} ms", limit.as_millis())))
            }
            JobOutcome::Crashed { reason, .. } => Err(broken(format!("also crashed: {reason}"))),
            JobOutcome::Refused { reason } | JobOutcome::Unavailable { reason } => {
                Err(CompileOutcome::Unavailable { reason })
            }
        }
    }

    fn entry_from(
        &self,
        raw: nvrtc::NvrtcOutput,
        invocation: &Invocation,
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
        let log = clean_log(&log, invocation, include_dir);
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
            // `CompileCache::get` and `decode` only let valid entries through; a cubin that
            // still does not decode is ours, never the candidate's.
            let cubin = match entry.cubin() {
                Ok(c) if !c.is_empty() => c,
                _ => {
                    return CompileOutcome::Unavailable {
                        reason: "a compile cache entry holds no valid cubin".into(),
                    }
                }
            };
            CompileOutcome::Compiled {
                module: CompiledModule {
                    cubin: Arc::new(cubin),
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

/// A compile log as reports show it: the candidate's lines as `candidate.cu(7)`, and the
/// paths of the CUDA headers (which say nothing useful and reveal the host's layout) as
/// `<cuda-include>`.
fn clean_log(log: &str, invocation: &Invocation, include_dir: Option<&std::path::Path>) -> String {
    let log = log.replace(&invocation.program_name, PROGRAM_FILE);
    match include_dir {
        Some(dir) => log.replace(&dir.display().to_string(), "<cuda-include>"),
        None => log,
    }
}

/// A worker's answer as NVRTC output; a cubin that does not decode, or a success without
/// one, is a broken worker (ours), never the candidate's.
fn decode(c: Compiled) -> Result<nvrtc::NvrtcOutput, CompileOutcome> {
    let cubin = base64::engine::general_purpose::STANDARD
        .decode(c.cubin_b64)
        .map_err(|e| CompileOutcome::Unavailable {
            reason: format!("the compile worker returned an undecodable cubin: {e}"),
        })?;
    if c.ok && cubin.is_empty() {
        return Err(CompileOutcome::Unavailable {
            reason: "the compile worker reported success without a cubin".into(),
        });
    }
    Ok(nvrtc::NvrtcOutput {
        ok: c.ok,
        log: c.log,
        cubin,
        lowered: c.lowered,
    })
}

#[cfg(test)]
mod tests;
