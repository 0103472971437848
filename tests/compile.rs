//! The compile stage with the real NVRTC (no GPU needed). Tests skip, saying so, where
//! NVRTC cannot be found.

mod common;

use std::time::{Duration, Instant};

use cudaperf::candidate::Candidate;
use cudaperf::compile::{CompileOptions, CompileOutcome, Compiler, CompilerError, Isolation};
use cudaperf::pipeline::{compile_stage_of, CompileStatus};

/// Options that run compiles in sandboxed workers started from the test's worker binary.
fn sandboxed() -> CompileOptions {
    CompileOptions {
        isolation: Isolation::Sandboxed,
        worker: Some(common::cudaperf_bin()),
        workers: 1,
        ..CompileOptions::default()
    }
}

fn compile(options: CompileOptions, source: &str) -> CompileOutcome {
    let cand = Candidate::parse(source).unwrap_or_else(|e| panic!("candidate: {e}"));
    Compiler::new(options)
        .unwrap_or_else(|e| panic!("compiler: {e}"))
        .compile(&cand)
}

fn unwrap_compiled(outcome: &CompileOutcome) -> &cudaperf::compile::CompiledModule {
    outcome
        .module()
        .unwrap_or_else(|| panic!("expected Compiled, got {outcome:?}"))
}

/// The vector_add reference compiles to an sm_90 cubin with ptxas resources, in a worker.
#[test]
fn vector_add_reference_compiles_sandboxed() {
    require_nvrtc!();
    let src = common::read_fixture("tasks/vector_add/reference.cu");
    let compiler = Compiler::new(sandboxed()).expect("compiler");
    let out = compiler.compile(&Candidate::parse(&src).unwrap());
    assert!(compiler.is_sandboxed());
    let m = unwrap_compiled(&out);
    assert_eq!(&m.cubin[..4], b"\x7fELF", "a cubin is an ELF file");
    assert_eq!(m.kernels.len(), 1, "{:?}", m.kernels);
    assert_eq!(m.kernels[0].name, "vector_add");
    assert!(m.kernels[0].registers > 0, "{:?}", m.kernels[0]);
    assert_eq!(m.kernels[0].spill_store_bytes, 0);
    let stage = compile_stage_of(&out, "sm_90", Isolation::Sandboxed);
    assert!(stage.ok && stage.status == CompileStatus::Compiled && !stage.cached);
    assert_eq!(compiler.worker(), Some(common::cudaperf_bin().as_path()));
}

/// In-process compiles give the same result (used for the crate's trusted fixtures).
#[test]
fn vector_add_reference_compiles_in_process() {
    require_nvrtc!();
    let src = common::read_fixture("tasks/vector_add/reference.cu");
    let compiler = Compiler::new(CompileOptions {
        isolation: Isolation::InProcess,
        ..CompileOptions::default()
    })
    .expect("compiler");
    let out = compiler.compile(&Candidate::parse(&src).unwrap());
    assert!(!compiler.is_sandboxed());
    assert!(unwrap_compiled(&out).kernels[0].registers > 0);
}

/// A compile error keeps the error line (with its line number) in the log.
#[test]
fn compile_error_log_has_the_error_line() {
    require_nvrtc!();
    let src = "// @launch k grid=(1) block=(1)\nextern \"C\" __global__ void k(float* a) {\n  a[0] = undefined_thing;\n}\n";
    match compile(sandboxed(), src) {
        CompileOutcome::Failed { log, cached, .. } => {
            assert!(!cached);
            assert!(
                log.contains("(3): error") && log.contains("undefined_thing"),
                "log:\n{log}"
            );
        }
        other => panic!("expected Failed, got {other:?}"),
    }
}

/// A long log is trimmed to `max_log_bytes` and the error survives the trimming.
#[test]
fn long_log_is_trimmed_keeping_the_error() {
    require_nvrtc!();
    let src = common::read_fixture("bad/long_log.cu");
    let max = 600;
    let out = compile(
        CompileOptions {
            max_log_bytes: max,
            ..sandboxed()
        },
        &src,
    );
    let CompileOutcome::Failed { log, .. } = &out else {
        panic!("expected Failed, got {out:?}")
    };
    assert!(log.contains("lines omitted"), "log was not trimmed:\n{log}");
    assert!(
        log.contains("error") && log.contains("this_name_is_undefined"),
        "error lost:\n{log}"
    );
    // Kept lines fit the budget; only the short omission markers come on top.
    assert!(log.len() <= max + 160, "{} bytes:\n{log}", log.len());
    // Untrimmed, the same log is much longer.
    let full = compile(
        CompileOptions {
            max_log_bytes: 1 << 20,
            ..sandboxed()
        },
        &src,
    );
    let CompileOutcome::Failed { log: full, .. } = full else {
        panic!()
    };
    assert!(
        full.len() > 4 * max,
        "fixture log is only {} bytes",
        full.len()
    );
}

/// The second compile of the same source is a cache hit: flagged, and much faster.
#[test]
fn second_compile_is_a_fast_cache_hit() {
    require_nvrtc!();
    let src = common::read_fixture("tasks/vector_add/reference.cu");
    let cand = Candidate::parse(&src).unwrap();
    let compiler = Compiler::new(sandboxed()).expect("compiler");
    let t0 = Instant::now();
    let first = compiler.compile(&cand);
    let first_time = t0.elapsed();
    let t1 = Instant::now();
    let second = compiler.compile(&cand);
    let second_time = t1.elapsed();
    assert!(
        matches!(first, CompileOutcome::Compiled { cached: false, .. }),
        "{first:?}"
    );
    let CompileOutcome::Compiled {
        cached: true,
        millis,
        ref module,
    } = second
    else {
        panic!("expected a cache hit: {second:?}")
    };
    assert_eq!(module.kernels, unwrap_compiled(&first).kernels);
    assert!(
        second_time < Duration::from_millis(1),
        "cache hit took {second_time:?}"
    );
    assert!(
        second_time < first_time / 10,
        "cache hit {second_time:?} vs first {first_time:?}"
    );
    assert!(millis < 1.0, "reported {millis} ms");
}

/// Failures are cached too (they are deterministic).
#[test]
fn failures_are_cached() {
    require_nvrtc!();
    let src = "// @launch k grid=(1) block=(1)\nextern \"C\" __global__ void k(float* a) { a[0] = nope; }\n";
    let cand = Candidate::parse(src).unwrap();
    let compiler = Compiler::new(sandboxed()).expect("compiler");
    assert!(matches!(
        compiler.compile(&cand),
        CompileOutcome::Failed { cached: false, .. }
    ));
    assert!(matches!(
        compiler.compile(&cand),
        CompileOutcome::Failed { cached: true, .. }
    ));
}

/// A disk cache survives a new Compiler (same process).
#[test]
fn disk_cache_survives_a_new_compiler() {
    require_nvrtc!();
    let dir = tempfile::tempdir().unwrap();
    let src = common::read_fixture("tasks/vector_add/reference.cu");
    let opts = CompileOptions {
        cache_dir: Some(dir.path().to_path_buf()),
        ..sandboxed()
    };
    let first = compile(opts.clone(), &src);
    assert!(
        matches!(first, CompileOutcome::Compiled { cached: false, .. }),
        "{first:?}"
    );
    let files = std::fs::read_dir(dir.path())
        .unwrap()
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "json"))
        .count();
    assert_eq!(files, 1, "one entry on disk");
    let second = compile(opts, &src);
    let CompileOutcome::Compiled {
        cached: true,
        module,
        ..
    } = &second
    else {
        panic!("expected a disk hit: {second:?}")
    };
    assert_eq!(module.cubin, unwrap_compiled(&first).cubin);
}

/// The disk cache is shared between processes: the CLI run twice compiles once.
#[test]
fn disk_cache_is_used_from_another_process() {
    require_nvrtc!();
    let dir = tempfile::tempdir().unwrap();
    let task = common::fixture("tasks/vector_add");
    let file = common::fixture("tasks/vector_add/reference.cu");
    let cache = dir.path().to_str().unwrap().to_string();
    let args = ["--cache-dir", cache.as_str()];
    let (a, _) = common::score_json(&task, &file, &args, Duration::from_secs(60));
    let (b, _) = common::score_json(&task, &file, &args, Duration::from_secs(60));
    assert_eq!(a["stages"]["compile"]["ok"], true, "{a}");
    assert_eq!(a["stages"]["compile"]["cached"], false, "{a}");
    assert_eq!(b["stages"]["compile"]["cached"], true, "{b}");
    assert_eq!(
        a["stages"]["compile"]["kernels"],
        b["stages"]["compile"]["kernels"]
    );
}

/// `#include "/etc/passwd"` is rejected before NVRTC runs; nothing of the file leaks.
#[test]
fn forbidden_include_is_rejected_without_leaking() {
    let src = "#include \"/etc/passwd\"\n// @launch k grid=(1) block=(1)\nextern \"C\" __global__ void k(float* a) {}\n";
    let out = compile(sandboxed(), src);
    let CompileOutcome::Rejected { reason } = &out else {
        panic!("expected Rejected, got {out:?}")
    };
    assert!(
        reason.contains("/etc/passwd") && reason.contains("line 1"),
        "{reason}"
    );
    let report = format!(
        "{out:?} {}",
        serde_json::to_string(&compile_stage_of(&out, "sm_90", Isolation::Sandboxed)).unwrap()
    );
    assert!(!report.contains("root:"), "{report}");
}

/// A NUL byte is rejected (NVRTC would silently truncate the source there).
#[test]
fn nul_byte_is_rejected() {
    let src =
        "// @launch k grid=(1) block=(1)\nextern \"C\" __global__ void k(float* a) {}\n\0 garbage";
    assert!(matches!(
        compile(sandboxed(), src),
        CompileOutcome::Rejected { .. }
    ));
}

/// An invalid arch is refused when the compiler is built, before anything reaches NVRTC's
/// command line (it used to fail every candidate's compile instead).
#[test]
fn invalid_arch_is_an_error() {
    let err = Compiler::new(CompileOptions {
        arch: "sm_90 -I/etc".into(),
        ..sandboxed()
    })
    .err()
    .expect("refused");
    assert!(
        matches!(err, CompilerError::InvalidArch { .. })
            && err.to_string().contains("sm_90 -I/etc"),
        "{err}"
    );
}

/// A well-formed architecture NVRTC does not know is refused up front too (it used to make
/// every correct kernel a compile error scored as the candidate's).
#[test]
fn unsupported_arch_is_an_error() {
    require_nvrtc!();
    let err = Compiler::new(CompileOptions {
        arch: "sm_10".into(),
        ..sandboxed()
    })
    .err()
    .expect("refused");
    assert!(matches!(err, CompilerError::UnsupportedArch(_)), "{err}");
    assert!(
        err.to_string().contains("sm_90"),
        "lists what is supported: {err}"
    );
}

/// An unusable cache folder is an error when the compiler is built, naming the folder.
#[test]
fn unusable_cache_dir_is_an_error() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("a-file");
    std::fs::write(&file, b"x").unwrap();
    let err = Compiler::new(CompileOptions {
        cache_dir: Some(file.join("cache")),
        ..sandboxed()
    })
    .err()
    .expect("refused");
    assert!(matches!(err, CompilerError::CacheDir { .. }), "{err}");
    assert!(err.to_string().contains("a-file"), "{err}");
}

/// A compile past its limit is killed and reported as Timeout; the worker is replaced and
/// the next compile works. The fixture takes far longer than the limit here (see
/// fixtures/bad/manifest.toml for the measured time).
#[test]
fn slow_compile_times_out_and_the_worker_is_replaced() {
    require_nvrtc!();
    let src = common::read_fixture("bad/slow_compile.cu");
    let compiler = Compiler::new(CompileOptions {
        timeout: Duration::from_millis(1500),
        ..sandboxed()
    })
    .expect("compiler");
    let t = Instant::now();
    let out = compiler.compile(&Candidate::parse(&src).unwrap());
    let elapsed = t.elapsed();
    assert_eq!(out, CompileOutcome::Timeout { limit_ms: 1500 });
    assert!(elapsed < Duration::from_secs(10), "took {elapsed:?}");
    assert_eq!(
        compile_stage_of(&out, "sm_90", Isolation::Sandboxed).status,
        CompileStatus::Timeout
    );
    let ok = compiler.compile(
        &Candidate::parse(&common::read_fixture("tasks/vector_add/reference.cu")).unwrap(),
    );
    assert!(ok.is_compiled(), "{ok:?}");
}

/// Without NVRTC the compile stage says `unavailable` with a reason; nothing panics.
#[test]
fn missing_nvrtc_is_unavailable() {
    let mut cmd = common::cli();
    cmd.env("CUDAPERF_NVRTC", "/nonexistent/libnvrtc.so.13")
        .args([
            "score",
            "--task",
            "fixtures/tasks/vector_add",
            "fixtures/tasks/vector_add/reference.cu",
            "--json",
        ]);
    let (out, _) = common::run_limited(&mut cmd, Duration::from_secs(60));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    let v: serde_json::Value =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {stderr}"));
    let c = &v["stages"]["compile"];
    assert_eq!(c["status"], "unavailable", "{v}");
    assert_eq!(c["ok"], false);
    let reason = c["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("NVRTC not found") && reason.contains("CUDAPERF_NVRTC"),
        "{reason}"
    );
    assert!(v["value"].is_null(), "no made-up number: {v}");
}

/// Static shared memory and barriers of a shared-memory kernel are reported.
#[test]
fn shared_memory_and_barriers_are_reported() {
    require_nvrtc!();
    let src = "// @launch block_sum grid=(ceil_div(n, 256)) block=(256)\n\
        extern \"C\" __global__ void block_sum(const float* a, float* out, int n) {\n\
          __shared__ float tile[256];\n\
          __shared__ double extra[32];\n\
          int i = blockIdx.x * blockDim.x + threadIdx.x;\n\
          tile[threadIdx.x] = i < n ? a[i] : 0.0f;\n\
          if (threadIdx.x < 32) extra[threadIdx.x] = 1.0;\n\
          __syncthreads();\n\
          for (int s = 128; s > 0; s >>= 1) { if (threadIdx.x < s) tile[threadIdx.x] += tile[threadIdx.x + s]; __syncthreads(); }\n\
          if (threadIdx.x == 0) out[blockIdx.x] = tile[0] + (float)extra[blockIdx.x % 32];\n\
        }\n";
    let out = compile(sandboxed(), src);
    let k = &unwrap_compiled(&out).kernels[0];
    assert_eq!(k.name, "block_sum");
    assert_eq!(k.static_smem_bytes, 256 * 4 + 32 * 8, "{k:?}");
    assert!(k.barriers >= 1, "{k:?}");
}

/// A template kernel launched as `k<128>` compiles and its resources carry that name; the
/// lowered (mangled) symbol is known for loading.
#[test]
fn template_kernel_reports_under_its_launch_name() {
    require_nvrtc!();
    let src = "// @launch k<128> grid=(ceil_div(n, 128)) block=(128)\n\
        template <int B>\n__global__ void k(const float* a, float* c, int n) {\n\
          __shared__ float s[B];\n\
          int i = blockIdx.x * B + threadIdx.x;\n\
          s[threadIdx.x] = i < n ? a[i] : 0.f;\n\
          __syncthreads();\n\
          if (i < n) c[i] = s[B - 1 - threadIdx.x];\n\
        }\n";
    let out = compile(sandboxed(), src);
    let m = unwrap_compiled(&out);
    assert_eq!(m.kernels.len(), 1, "{:?}", m.kernels);
    assert_eq!(m.kernels[0].name, "k<128>");
    assert_eq!(m.kernels[0].static_smem_bytes, 128 * 4);
    assert!(m.symbol("k<128>").starts_with("_Z"), "{:?}", m.lowered);
}

/// Two template instantiations in one plan are reported separately.
#[test]
fn two_instantiations_are_separate_kernels() {
    require_nvrtc!();
    let src = "// @launch k<64> grid=(1) block=(64)\n// @launch k<256> grid=(1) block=(256)\n\
        template <int B>\n__global__ void k(float* a) { __shared__ float s[B]; s[threadIdx.x] = a[threadIdx.x]; __syncthreads(); a[threadIdx.x] = s[B - 1 - threadIdx.x]; }\n";
    let out = compile(sandboxed(), src);
    let mut names: Vec<(String, u32)> = unwrap_compiled(&out)
        .kernels
        .iter()
        .map(|k| (k.name.clone(), k.static_smem_bytes))
        .collect();
    names.sort();
    assert_eq!(
        names,
        [("k<256>".to_string(), 1024), ("k<64>".to_string(), 256)]
    );
}
