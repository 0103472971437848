//! The one place that talks to NVRTC (through cudarc's `sys`/`result` layers).
//!
//! cudarc opens `libnvrtc` by name and panics if it is missing, so this module finds the
//! library first (explicit path, CUDA toolkit, loader path, the `nvidia-cuda-nvrtc` PyPI
//! wheel), opens it by full path and keeps it open: glibc then hands cudarc the same
//! library when it asks for `libnvrtc.so.13` by name. Absence becomes a reason string that
//! the compile stage reports as `Unavailable`, never a panic.

use std::ffi::{c_char, CString};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use cudarc::nvrtc::{result, sys};

/// A located and opened NVRTC.
#[derive(Debug, Clone)]
pub struct NvrtcLib {
    /// The shared library that was opened.
    pub path: PathBuf,
    /// The CUDA include folder used for the allowed headers, if one was found.
    pub include_dir: Option<PathBuf>,
    /// NVRTC version (major, minor).
    pub version: (i32, i32),
}

/// Library file names tried in each folder, newest first.
const LIB_NAMES: &[&str] = &["libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"];

fn python_site_dirs() -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let mut roots: Vec<PathBuf> = Vec::new();
    if let Some(v) = std::env::var_os("VIRTUAL_ENV") {
        roots.push(PathBuf::from(v).join("lib"));
    }
    if let Some(h) = &home {
        roots.push(h.join(".local/lib"));
        if let Ok(rd) = std::fs::read_dir(h.join(".pyenv/versions")) {
            roots.extend(rd.flatten().map(|e| e.path().join("lib")));
        }
    }
    roots.push(PathBuf::from("/usr/local/lib"));
    roots.push(PathBuf::from("/usr/lib"));
    roots.push(PathBuf::from("/opt/conda/lib"));
    for root in roots {
        let Ok(rd) = std::fs::read_dir(&root) else {
            continue;
        };
        for e in rd.flatten() {
            let name = e.file_name();
            if name.to_string_lossy().starts_with("python3") {
                dirs.push(e.path().join("site-packages"));
                dirs.push(e.path().join("dist-packages"));
            }
        }
    }
    dirs
}

/// Candidate library paths in the order they are tried.
fn candidate_paths() -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Some(p) = std::env::var_os("CUDAPERF_NVRTC") {
        let p = PathBuf::from(p);
        if p.is_dir() {
            out.extend(LIB_NAMES.iter().map(|n| p.join(n)));
        } else {
            out.push(p);
        }
        return out; // An explicit choice is not second-guessed.
    }
    let mut toolkit_dirs: Vec<PathBuf> = ["CUDA_HOME", "CUDA_PATH"]
        .iter()
        .filter_map(std::env::var_os)
        .map(|v| PathBuf::from(v).join("lib64"))
        .collect();
    toolkit_dirs.push(PathBuf::from("/usr/local/cuda/lib64"));
    for d in toolkit_dirs {
        out.extend(LIB_NAMES.iter().map(|n| d.join(n)));
    }
    if let Some(ld) = std::env::var_os("LD_LIBRARY_PATH") {
        for d in std::env::split_paths(&ld) {
            out.extend(LIB_NAMES.iter().map(|n| d.join(n)));
        }
    }
    for site in python_site_dirs() {
        out.push(site.join("nvidia/cu13/lib/libnvrtc.so.13"));
        out.push(site.join("nvidia/cuda_nvrtc/lib/libnvrtc.so.12"));
    }
    out
}

/// The include folder that belongs to a library folder (`lib64` → `include`).
fn include_dir_for(lib: &Path) -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("CUDAPERF_CUDA_INCLUDE") {
        return Some(PathBuf::from(p));
    }
    let parent = lib.parent()?.parent()?;
    let inc = parent.join("include");
    inc.join("cuda_fp16.h").exists().then_some(inc)
}

/// Why NVRTC could not be used. None of these is the candidate's fault: the compile stage
/// reports them as `unavailable`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum NvrtcError {
    /// No NVRTC library was found or could be opened.
    #[error("NVRTC not found: set CUDAPERF_NVRTC to libnvrtc.so, install a CUDA toolkit, or `pip install \"nvidia-cuda-nvrtc==13.*\"`{}", tried_suffix(.tried))]
    NotFound {
        /// Libraries that exist but could not be opened, with the reason.
        tried: Vec<String>,
    },
    /// An NVRTC call failed for a reason that is not the source's.
    #[error("{call} failed: {code}")]
    Call {
        /// The NVRTC function.
        call: &'static str,
        /// NVRTC's result code.
        code: String,
    },
    /// NVRTC refused the compile options (ours, e.g. an architecture it does not know).
    #[error("NVRTC refused the compile options {flags:?}: {log}")]
    InvalidOption {
        /// The options.
        flags: Vec<String>,
        /// NVRTC's log, first line.
        log: String,
    },
    /// The target architecture is not one this NVRTC compiles for.
    #[error("architecture `{arch}` is not supported by NVRTC {version} (it supports {supported})")]
    UnsupportedArch {
        /// The requested architecture.
        arch: String,
        /// NVRTC's version, `major.minor`.
        version: String,
        /// The supported ones, `sm_XX` comma-separated.
        supported: String,
    },
    /// A string handed to NVRTC contains a NUL byte.
    #[error("the {what} contains a NUL byte")]
    NulByte {
        /// What (`source`, `program name`, `compile flag`).
        what: &'static str,
    },
}

/// For callers that carry reasons as text (the GPU worker's support kernels).
impl From<NvrtcError> for String {
    fn from(e: NvrtcError) -> String {
        e.to_string()
    }
}

fn tried_suffix(tried: &[String]) -> String {
    if tried.is_empty() {
        String::new()
    } else {
        format!(" (failed to open: {})", tried.join("; "))
    }
}

static LOADED: OnceLock<Result<NvrtcLib, NvrtcError>> = OnceLock::new();

/// Finds and opens NVRTC once per process. The error says where it looked.
pub fn load() -> Result<&'static NvrtcLib, NvrtcError> {
    LOADED
        .get_or_init(load_uncached)
        .as_ref()
        .map_err(Clone::clone)
}

fn load_uncached() -> Result<NvrtcLib, NvrtcError> {
    let candidates = candidate_paths();
    let mut tried = Vec::new();
    for path in &candidates {
        if !path.exists() {
            continue;
        }
        // SAFETY: loading NVRTC runs its initialisers only; the handle is leaked on purpose
        // so that cudarc's by-name lookup finds this very library for the process lifetime.
        match unsafe { libloading::Library::new(path) } {
            Ok(lib) => {
                std::mem::forget(lib);
                // SAFETY: only tries to open the library by name; no NVRTC call is made.
                if !unsafe { sys::is_culib_present() } {
                    tried.push(format!(
                        "{} (opened, but cudarc could not find it by name)",
                        path.display()
                    ));
                    continue;
                }
                let version = nvrtc_version()?;
                return Ok(NvrtcLib {
                    path: path.clone(),
                    include_dir: include_dir_for(path),
                    version,
                });
            }
            Err(e) => tried.push(format!("{}: {e}", path.display())),
        }
    }
    // Last resort: whatever the system loader finds by name.
    // SAFETY: only tries to open the library by name; no NVRTC call is made.
    if unsafe { sys::is_culib_present() } {
        let version = nvrtc_version()?;
        return Ok(NvrtcLib {
            path: PathBuf::from("libnvrtc (system loader path)"),
            include_dir: Path::new("/usr/local/cuda/include/cuda_fp16.h")
                .exists()
                .then(|| PathBuf::from("/usr/local/cuda/include")),
            version,
        });
    }
    Err(NvrtcError::NotFound { tried })
}

fn call_error(call: &'static str) -> impl Fn(result::NvrtcError) -> NvrtcError {
    move |e| NvrtcError::Call {
        call,
        code: format!("{:?}", e.0),
    }
}

fn nvrtc_version() -> Result<(i32, i32), NvrtcError> {
    let (mut major, mut minor) = (0, 0);
    // SAFETY: plain out-parameters.
    unsafe { sys::nvrtcVersion(&mut major, &mut minor) }
        .result()
        .map_err(call_error("nvrtcVersion"))?;
    Ok((major, minor))
}

/// The `sm_XX` numbers (e.g. 90) the loaded NVRTC can compile for.
pub fn supported_archs() -> Result<Vec<i32>, NvrtcError> {
    load()?;
    let mut n: std::ffi::c_int = 0;
    // SAFETY: out-parameter.
    unsafe { sys::nvrtcGetNumSupportedArchs(&mut n) }
        .result()
        .map_err(call_error("nvrtcGetNumSupportedArchs"))?;
    let mut archs = vec![0 as std::ffi::c_int; n.max(0) as usize];
    if !archs.is_empty() {
        // SAFETY: the buffer holds the number of entries NVRTC just reported.
        unsafe { sys::nvrtcGetSupportedArchs(archs.as_mut_ptr()) }
            .result()
            .map_err(call_error("nvrtcGetSupportedArchs"))?;
    }
    Ok(archs)
}

/// Checks that the loaded NVRTC compiles for `arch` (`sm_90`, `sm_90a`).
pub fn check_arch(arch: &str) -> Result<(), NvrtcError> {
    let lib = load()?;
    let number: Option<i32> = arch
        .strip_prefix("sm_")
        .map(|n| n.trim_end_matches('a'))
        .and_then(|n| n.parse().ok());
    let supported = supported_archs()?;
    if number.is_some_and(|n| supported.contains(&n)) {
        return Ok(());
    }
    Err(NvrtcError::UnsupportedArch {
        arch: arch.to_string(),
        version: format!("{}.{}", lib.version.0, lib.version.1),
        supported: supported
            .iter()
            .map(|a| format!("sm_{a}"))
            .collect::<Vec<_>>()
            .join(", "),
    })
}

/// What one NVRTC compile produced.
#[derive(Debug, Clone)]
pub struct NvrtcOutput {
    /// Whether NVRTC succeeded.
    pub ok: bool,
    /// The program log (errors, warnings, ptxas info).
    pub log: String,
    /// The cubin (empty on failure).
    pub cubin: Vec<u8>,
    /// (name expression, lowered name) for each kernel asked for.
    pub lowered: Vec<(String, String)>,
}

/// Frees the program on every path.
struct Program(sys::nvrtcProgram);

impl Drop for Program {
    fn drop(&mut self) {
        // SAFETY: created by create_program, destroyed once here.
        let _ = unsafe { result::destroy_program(self.0) };
    }
}

fn c_chars_to_string(v: Vec<c_char>) -> String {
    let bytes: Vec<u8> = v
        .into_iter()
        .take_while(|&c| c != 0)
        .map(|c| c as u8)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// Compiles `source` with `flags`; `name_exprs` are kernel names (possibly templates) whose
/// lowered names are wanted. Infrastructure failures are `Err`; compile errors are
/// `Ok(NvrtcOutput { ok: false, .. })`.
pub fn compile(
    source: &str,
    program_name: &str,
    flags: &[String],
    name_exprs: &[String],
) -> Result<NvrtcOutput, NvrtcError> {
    load()?;
    let src = CString::new(source).map_err(|_| NvrtcError::NulByte { what: "source" })?;
    let name = CString::new(program_name).map_err(|_| NvrtcError::NulByte {
        what: "program name",
    })?;
    let prog = Program(
        result::create_program(&src, Some(&name)).map_err(call_error("nvrtcCreateProgram"))?,
    );
    let exprs: Vec<CString> = name_exprs
        .iter()
        .filter_map(|n| CString::new(n.as_str()).ok())
        .collect();
    let mut added = Vec::new();
    for (e, text) in exprs.iter().zip(name_exprs) {
        // SAFETY: prog is live; e outlives the call.
        if unsafe { sys::nvrtcAddNameExpression(prog.0, e.as_ptr()) }
            .result()
            .is_ok()
        {
            added.push((e, text));
        }
    }
    if flags.iter().any(|f| f.contains('\0')) {
        return Err(NvrtcError::NulByte {
            what: "compile flag",
        });
    }
    // SAFETY: prog is live; flags are NUL-free (checked above, cudarc unwraps CString::new).
    let compiled = unsafe { result::compile_program(prog.0, flags) };
    // SAFETY: prog is live.
    let log = unsafe { result::get_program_log(prog.0) }
        .map(c_chars_to_string)
        .unwrap_or_default();
    match compiled.map_err(|e| e.0) {
        Ok(()) => {}
        // The source's errors; running out of memory is a template bomb's doing (workers
        // run under an address-space limit far above what a real kernel needs).
        Err(sys::nvrtcResult::NVRTC_ERROR_COMPILATION)
        | Err(sys::nvrtcResult::NVRTC_ERROR_OUT_OF_MEMORY) => {
            return Ok(NvrtcOutput {
                ok: false,
                log,
                cubin: Vec::new(),
                lowered: Vec::new(),
            })
        }
        Err(sys::nvrtcResult::NVRTC_ERROR_INVALID_OPTION) => {
            return Err(NvrtcError::InvalidOption {
                flags: flags.to_vec(),
                log: log.lines().next().unwrap_or("").trim().to_string(),
            })
        }
        Err(code) => {
            return Err(NvrtcError::Call {
                call: "nvrtcCompileProgram",
                code: format!("{code:?}"),
            })
        }
    }
    let cubin = cubin_of(&prog)?;
    let lowered = lowered_names(&prog, added);
    Ok(NvrtcOutput {
        ok: true,
        log,
        cubin,
        lowered,
    })
}

/// The cubin of a compiled program.
fn cubin_of(prog: &Program) -> Result<Vec<u8>, NvrtcError> {
    let mut size = 0usize;
    // SAFETY: prog compiled; out-parameter.
    unsafe { sys::nvrtcGetCUBINSize(prog.0, &mut size) }
        .result()
        .map_err(call_error("nvrtcGetCUBINSize"))?;
    let mut cubin = vec![0u8; size];
    // SAFETY: buffer has the size NVRTC reported.
    unsafe { sys::nvrtcGetCUBIN(prog.0, cubin.as_mut_ptr() as *mut c_char) }
        .result()
        .map_err(call_error("nvrtcGetCUBIN"))?;
    Ok(cubin)
}

/// The lowered (mangled) names of the name expressions added before compiling, as
/// (expression, lowered name); an expression NVRTC has no name for is left out.
fn lowered_names(prog: &Program, added: Vec<(&CString, &String)>) -> Vec<(String, String)> {
    let mut lowered = Vec::new();
    for (e, text) in added {
        let mut ptr: *const c_char = std::ptr::null();
        // SAFETY: prog compiled, e was added before compiling; NVRTC owns the returned string.
        if unsafe { sys::nvrtcGetLoweredName(prog.0, e.as_ptr(), &mut ptr) }
            .result()
            .is_ok()
            && !ptr.is_null()
        {
            // SAFETY: NUL-terminated string valid while prog lives.
            let s = unsafe { std::ffi::CStr::from_ptr(ptr) }
                .to_string_lossy()
                .into_owned();
            lowered.push((text.clone(), s));
        }
    }
    lowered
}
