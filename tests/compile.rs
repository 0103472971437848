//! The compile stage with the real NVRTC (no GPU needed). Tests skip, saying so, where
//! NVRTC cannot be found.

mod common;

use std::time::{Duration, Instant};

use cudaperf::candidate::Candidate;
use cudaperf::compile::{CompileOptions, CompileOutcome, Compiler, CompilerError, Isolation};
use cudaperf::pipeline::compile_stage_of;
use cudaperf::pipeline::report::CompileStatus;

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
    assert!(stage.is_compiled() && stage.status() == CompileStatus::Compiled && !stage.cached());
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
        compile_stage_of(&out, "sm_90", Isolation::Sandboxed).status(),
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

/// One tile of C = A·B on tensor cores through WMMA: `$frag` is the operand type of the
/// fragments, `$shape` the M, N, K of one MMA, `$convert` turns a float into `$frag`.
fn wmma_kernel(includes: &str, frag: &str, shape: &str, convert: &str) -> String {
    format!(
        "// @launch wmma_tile grid=(1) block=(32)\n\
         {includes}\n\
         using namespace nvcuda;\n\
         extern \"C\" __global__ void wmma_tile(const float* a, const float* b, float* c, int m, int n, int k) {{\n\
           __shared__ float sa[16 * 16], sb[16 * 16];\n\
           for (int i = threadIdx.x; i < 256; i += 32) {{ sa[i] = a[i]; sb[i] = b[i]; }}\n\
           __syncwarp();\n\
           wmma::fragment<wmma::matrix_a, {shape}, {frag}, wmma::row_major> fa;\n\
           wmma::fragment<wmma::matrix_b, {shape}, {frag}, wmma::row_major> fb;\n\
           wmma::fragment<wmma::accumulator, {shape}, float> fc;\n\
           wmma::fill_fragment(fc, 0.0f);\n\
           __shared__ {storage} ta[16 * 16], tb[16 * 16];\n\
           for (int i = threadIdx.x; i < 256; i += 32) {{ ta[i] = {convert}(sa[i]); tb[i] = {convert}(sb[i]); }}\n\
           __syncwarp();\n\
           wmma::load_matrix_sync(fa, ta, 16);\n\
           wmma::load_matrix_sync(fb, tb, 16);\n\
           wmma::mma_sync(fc, fa, fb, fc);\n\
           wmma::store_matrix_sync(c, fc, 16, wmma::mem_row_major);\n\
         }}\n",
        storage = if frag == "wmma::precision::tf32" { "float" } else { frag },
    )
}

/// Tensor-core kernels compile under the include sandbox: `mma.h` pulls `crt/mma.h`, which
/// includes `"mma.hpp"` by a quoted relative path — blocked by `--no-source-include`, it
/// made every WMMA kernel a compile error scored as the candidate's (issue 19). fp16, bf16
/// and tf32 fragments, each to an sm_90 cubin with resources, in a sandboxed worker.
#[test]
fn wmma_kernels_compile_for_fp16_bf16_and_tf32() {
    require_nvrtc!();
    let compiler = Compiler::new(sandboxed()).expect("compiler");
    let cases = [
        (
            "#include <mma.h>\n#include <cuda_fp16.h>",
            "half",
            "16, 16, 16",
            "__float2half",
        ),
        (
            "#include <cuda_bf16.h>\n#include \"mma.h\"",
            "__nv_bfloat16",
            "16, 16, 16",
            "__float2bfloat16",
        ),
        (
            "#include <mma.h>",
            "wmma::precision::tf32",
            "16, 16, 8",
            "wmma::__float_to_tf32",
        ),
    ];
    for (includes, frag, shape, convert) in cases {
        let src = wmma_kernel(includes, frag, shape, convert);
        let out = compiler.compile(&Candidate::parse(&src).unwrap());
        let m = out
            .module()
            .unwrap_or_else(|| panic!("{frag}: expected Compiled, got {out:?}\n{src}"));
        assert_eq!(&m.cubin[..4], b"\x7fELF", "{frag}: a cubin");
        assert_eq!(m.kernels.len(), 1, "{frag}: {:?}", m.kernels);
        assert_eq!(m.kernels[0].name, "wmma_tile");
        assert!(m.kernels[0].registers > 0, "{frag}: {:?}", m.kernels[0]);
    }
}

/// Every allowlisted header compiles on its own where this installation has it; one that
/// cannot compile here is reported `unavailable` below, never the candidate's error.
#[test]
fn allowlisted_headers_compile_or_are_unavailable() {
    require_nvrtc!();
    let compiler = Compiler::new(sandboxed()).expect("compiler");
    for header in cudaperf::compile::ALLOWED_INCLUDES {
        let src = format!(
            "#include <{header}>\n// @launch k grid=(1) block=(1)\nextern \"C\" __global__ void k(float* a) {{ a[0] = 1.0f; }}\n"
        );
        match compiler.compile(&Candidate::parse(&src).unwrap()) {
            CompileOutcome::Compiled { .. } => {}
            CompileOutcome::Unavailable { reason } => {
                assert!(reason.contains(header), "{header}: {reason}");
                eprintln!("NOTE: <{header}> cannot compile with this CUDA installation: {reason}");
            }
            other => panic!("<{header}> alone must never be the candidate's failure: {other:?}"),
        }
    }
    // The headers of the WMMA kernels are there on every supported installation.
    for header in ["cuda_fp16.h", "cuda_bf16.h", "mma.h", "cuda_pipeline.h"] {
        let src = format!(
            "#include <{header}>\n// @launch k grid=(1) block=(1)\nextern \"C\" __global__ void k(float* a) {{ a[0] = 1.0f; }}\n"
        );
        let out = compiler.compile(&Candidate::parse(&src).unwrap());
        assert!(out.is_compiled(), "<{header}>: {out:?}");
    }
}

/// Quoted includes are searched in the CUDA include folder, never in the working folder:
/// files named like allowed headers in the CLI's working folder are not read (each would
/// stop the compile with its `#error`).
#[test]
fn headers_in_the_working_folder_are_not_read() {
    require_nvrtc!();
    let tmp = tempfile::tempdir().unwrap();
    for h in ["cuda_fp16.h", "mma.h", "mma.hpp", "vector_types.h"] {
        std::fs::write(
            tmp.path().join(h),
            "#error LEAKED_FROM_THE_WORKING_FOLDER\n",
        )
        .unwrap();
    }
    let file = tmp.path().join("cand.cu");
    std::fs::write(
        &file,
        format!(
            "{}\n#include \"cuda_fp16.h\"\n",
            wmma_kernel("#include \"mma.h\"", "half", "16, 16, 16", "__float2half")
        ),
    )
    .unwrap();
    let mut cmd = std::process::Command::new(common::cudaperf_bin());
    cmd.current_dir(tmp.path())
        .arg("score")
        .arg("--task")
        .arg(common::fixture("tasks/matmul"))
        .arg(&file)
        .arg("--json");
    let (out, _) = common::run_limited(&mut cmd, Duration::from_secs(60));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!stdout.contains("LEAKED"), "{stdout}");
    let v: serde_json::Value = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("{e}: {stdout} {}", String::from_utf8_lossy(&out.stderr)));
    assert_eq!(v["stages"]["compile"]["ok"], true, "{v}");
}

/// An allowed header the installation cannot compile (here: an include folder holding
/// `mma.h` without the `crt/` it needs) makes the stage `unavailable`, not the candidate's
/// compile error; a candidate's own error with the same folder is still its own.
#[test]
fn a_broken_header_installation_is_unavailable_not_the_candidates_error() {
    require_nvrtc!();
    let lib = cudaperf::compile::nvrtc::load().unwrap();
    let Some(real) = &lib.include_dir else {
        eprintln!("SKIPPED: no CUDA include folder next to NVRTC");
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    for h in [
        "cuda_fp16.h",
        "cuda_fp16.hpp",
        "vector_types.h",
        "vector_functions.h",
        "mma.h",
    ] {
        if real.join(h).exists() {
            std::fs::copy(real.join(h), tmp.path().join(h)).unwrap();
        }
    }
    let run = |src: &str| {
        let file = tmp.path().join("cand.cu");
        std::fs::write(&file, src).unwrap();
        let mut cmd = common::cli();
        cmd.env("CUDAPERF_CUDA_INCLUDE", tmp.path())
            .arg("score")
            .arg("--task")
            .arg(common::fixture("tasks/matmul"))
            .arg(&file)
            .arg("--json");
        let (out, _) = common::run_limited(&mut cmd, Duration::from_secs(60));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
        v
    };
    let wmma = run(&wmma_kernel(
        "#include <mma.h>",
        "half",
        "16, 16, 16",
        "__float2half",
    ));
    let c = &wmma["stages"]["compile"];
    assert_eq!(c["status"], "unavailable", "{wmma}");
    assert!(
        c["reason"].as_str().unwrap_or_default().contains("<mma.h>"),
        "{wmma}"
    );
    assert!(wmma["value"].is_null(), "no made-up number: {wmma}");
    let own_error = run("#include <mma.h>\n// @launch matmul grid=(1) block=(1)\nextern \"C\" __global__ void matmul(const float* a, const float* b, float* c, int m, int n, int k) { c[0] = nope; }\n");
    // mma.h is still broken, so even this cannot be blamed on the candidate...
    assert_eq!(own_error["stages"]["compile"]["status"], "unavailable");
    let plain = run("#include <cuda_fp16.h>\n// @launch matmul grid=(1) block=(1)\nextern \"C\" __global__ void matmul(const float* a, const float* b, float* c, int m, int n, int k) { c[0] = nope; }\n");
    // ...while with a header that works the error is the candidate's.
    assert_eq!(plain["stages"]["compile"]["status"], "error", "{plain}");
}
