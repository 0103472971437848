//! Compile stage: NVRTC to a cubin, resource usage from ptxas, a content-addressed cache.
//!
//! Candidate source is untrusted. Before NVRTC sees it, `#include` directives are checked
//! against [`ALLOWED_INCLUDES`] (see [`include_guard`]), and NVRTC searches only the CUDA
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

pub mod cache;
pub mod include_guard;
pub mod nvrtc;
pub mod ptxas;
pub mod worker;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use base64::Engine;
use serde::{Deserialize, Serialize};

pub use cache::{CacheEntry, CompileCache};
pub use include_guard::{allowed_includes_of, check_includes, ForbiddenInclude, ALLOWED_INCLUDES};
pub use ptxas::Resources;

use crate::candidate::Candidate;
use crate::sandbox::{JobOutcome, Pool};
use crate::worker::Role;
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
    NoWorker(crate::worker::WorkerNotFound),
    /// The cache folder cannot be created or written.
    #[error("compile cache folder {}: {source}", path.display())]
    CacheDir {
        /// The folder.
        path: PathBuf,
        /// What failed.
        source: std::io::Error,
    },
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
    /// Persist the cache here (default: memory only). It must be a folder this process can
    /// create and write; [`Compiler::new`] checks.
    pub cache_dir: Option<PathBuf>,
    /// Where compiles run (default [`Isolation::Sandboxed`]).
    pub isolation: Isolation,
    /// Worker executable (default: found by [`crate::worker::find_worker`]).
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
    /// candidate can reach are the allowlisted headers ([`check_includes`]) and what they
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
    fn key_parts(&self) -> Vec<String> {
        let mut parts = self.flags.clone();
        parts.push(format!("program={}", self.program_name));
        parts
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
                    crate::worker::locate_worker(options.worker.as_deref(), Role::Compile)
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
                let raw = match &self.pool {
                    Some(pool) => {
                        match self.compile_in_worker(pool, source, invocation, &exprs, start) {
                            Ok(raw) => raw,
                            Err(outcome) => return outcome,
                        }
                    }
                    None => match nvrtc::compile(
                        source,
                        &invocation.program_name,
                        &invocation.flags,
                        &exprs,
                    ) {
                        Ok(out) => out,
                        Err(e) => {
                            return CompileOutcome::Unavailable {
                                reason: e.to_string(),
                            }
                        }
                    },
                };
                let entry = self.entry_from(raw, invocation, lib.include_dir.as_deref());
                let entry = match self.cache.put(&key, entry.clone()) {
                    Ok(e) => e,
                    Err(err) => {
                        tracing::warn!("compile cache write failed: {err}");
                        Arc::new(entry)
                    }
                };
                (entry, false)
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

    /// Guards the include sandbox: with an include folder the candidate is named inside it
    /// (so quoted includes are searched there, never in the working folder), and without
    /// one the source-folder search stays off.
    #[test]
    fn invocation_names_the_candidate_inside_the_include_folder() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let o = CompileOptions {
            extra_flags: vec!["--use_fast_math".into()],
            ..Default::default()
        };
        let inc = format!("-I{}", dir.display());
        let inv = o.invocation(Some(dir));
        assert_eq!(
            inv.program_name,
            dir.join("candidate.cu").display().to_string()
        );
        assert_eq!(
            inv.flags,
            [
                "-arch=sm_90",
                "-std=c++17",
                "-Xptxas=-v",
                &inc,
                "--use_fast_math"
            ]
        );
        std::fs::create_dir(dir.join("cccl")).unwrap();
        let cccl = format!("-I{}", dir.join("cccl").display());
        assert_eq!(
            o.invocation(Some(dir)).flags,
            [
                "-arch=sm_90",
                "-std=c++17",
                "-Xptxas=-v",
                &inc,
                &cccl,
                "--use_fast_math"
            ]
        );
        let bare = o.invocation(None);
        assert_eq!(bare.program_name, "candidate.cu");
        assert!(bare.flags.iter().any(|f| f == "--no-source-include"));
        assert_ne!(inv.key_parts(), bare.key_parts());
    }

    #[test]
    fn logs_name_the_candidate_and_hide_the_include_folder() {
        let o = CompileOptions::default();
        let dir = std::path::Path::new("/opt/cuda/include");
        let inv = o.invocation(Some(dir));
        let log =
            "/opt/cuda/include/candidate.cu(3): error: x\n/opt/cuda/include/crt/mma.h(9): note";
        assert_eq!(
            clean_log(log, &inv, Some(dir)),
            "candidate.cu(3): error: x\n<cuda-include>/crt/mma.h(9): note"
        );
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
