//! Structural-analysis tests: every test asserts a specific classification.

use std::path::PathBuf;

use cudaperf::analysis::{
    analyze, occupancy, structural_score, try_analyze, AccessClass, AccessKind, AnalysisError,
    DeviceSpec, Features, KernelFeatures, Limiter, FEATURE_NAMES, MAX_SOURCE_BYTES,
};
use proptest::prelude::*;

fn fixture_dir() -> PathBuf {
    let root = std::env::var("CARGO_MANIFEST_DIR")
        .unwrap_or_else(|_| env!("CARGO_MANIFEST_DIR").to_string());
    PathBuf::from(root).join("fixtures").join("kernels")
}

fn fixture_source(name: &str) -> Vec<u8> {
    let path = fixture_dir().join(format!("{name}.cu"));
    std::fs::read(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

fn fixture(name: &str) -> Features {
    let f = analyze(&fixture_source(name));
    assert_eq!(f.syntax.error_nodes, 0, "{name} should parse cleanly");
    assert_eq!(f.kernels.len(), 1, "{name} has one kernel");
    f
}

fn kernel(f: &Features) -> &KernelFeatures {
    &f.kernels[0]
}

fn one(src: &str) -> KernelFeatures {
    let f = analyze(src.as_bytes());
    assert_eq!(f.kernels.len(), 1, "expected one kernel in:\n{src}");
    f.kernels.into_iter().next().unwrap()
}

/// Classes of the global accesses of `array`, in source order.
fn classes(k: &KernelFeatures, array: &str) -> Vec<(AccessKind, AccessClass)> {
    k.global_accesses
        .findings
        .iter()
        .filter(|a| a.array == array)
        .map(|a| (a.access, a.class))
        .collect()
}

// ---- transpose -------------------------------------------------------------

#[test]
fn naive_transpose_writes_strided_reads_coalesced() {
    let f = fixture("transpose_naive");
    let k = kernel(&f);
    assert_eq!(
        classes(k, "in"),
        vec![(AccessKind::Read, AccessClass::Coalesced)]
    );
    assert_eq!(
        classes(k, "out"),
        vec![(AccessKind::Write, AccessClass::Strided)]
    );
    let w = k
        .global_accesses
        .findings
        .iter()
        .find(|a| a.array == "out")
        .unwrap();
    assert_eq!(
        (w.span.line, w.span.column),
        (10, 9),
        "points at out[x * height + y]"
    );
    assert_eq!(k.shared.arrays, 0);
}

#[test]
fn shared_transpose_is_coalesced_but_bank_conflicted() {
    let f = fixture("transpose_shared");
    let k = kernel(&f);
    assert_eq!(k.global_accesses.coalesced, 2);
    assert_eq!(k.global_accesses.strided, 0);
    assert_eq!(k.shared.static_bytes, 32 * 32 * 4);
    assert_eq!(k.shared.bank_conflicts, 1);
    assert_eq!(k.shared.padded_arrays, 0);
    assert_eq!(k.sync.syncthreads, 1);
    let c = k
        .shared
        .findings
        .iter()
        .find(|f| f.kind == "bank_conflict")
        .unwrap();
    assert_eq!(
        c.span.line, 19,
        "the column read tile[threadIdx.x][threadIdx.y]"
    );
    assert!(c.reason.starts_with("32-way"), "{}", c.reason);
}

#[test]
fn padded_transpose_has_no_bank_conflict() {
    let f = fixture("transpose_padded");
    let k = kernel(&f);
    assert_eq!(k.global_accesses.coalesced, 2);
    assert_eq!(k.shared.bank_conflicts, 0);
    assert_eq!(k.shared.padded_arrays, 1);
    assert_eq!(k.shared.static_bytes, 32 * 33 * 4);
}

#[test]
fn column_major_write_is_judged_by_the_threadidx_x_stride() {
    // col comes from threadIdx.y / blockIdx, row from threadIdx.x: consecutive
    // lanes write consecutive elements, so this column-wise write is coalesced.
    let k = one(r#"
__global__ void t(const float* in, float* out, int rows, int cols) {
    int row = blockIdx.x * blockDim.x + threadIdx.x;
    int col = blockIdx.y * blockDim.y + threadIdx.y;
    out[col * rows + row] = in[row * cols + col];
}"#);
    assert_eq!(
        classes(&k, "out"),
        vec![(AccessKind::Write, AccessClass::Coalesced)]
    );
    assert_eq!(
        classes(&k, "in"),
        vec![(AccessKind::Read, AccessClass::Strided)]
    );
}

// ---- reductions --------------------------------------------------------------

#[test]
fn interleaved_reduction_is_flagged() {
    let f = fixture("reduce_interleaved");
    let k = kernel(&f);
    assert_eq!(k.divergence.interleaved_modulo, 1);
    let d = k
        .divergence
        .findings
        .iter()
        .find(|d| d.kind == "interleaved_modulo")
        .unwrap();
    assert_eq!(d.span.line, 11);
    assert_eq!(k.shared.dynamic_arrays, 1);
    assert_eq!(k.sync.syncthreads, 2);
    assert_eq!(
        k.sync.divergent_barriers, 0,
        "the loop barrier is outside the if"
    );
}

#[test]
fn sequential_reduction_is_not_interleaved() {
    let f = fixture("reduce_sequential");
    let k = kernel(&f);
    assert_eq!(k.divergence.interleaved_modulo, 0);
    assert_eq!(
        k.divergence.bounds_checks, 1,
        "`tid < s` splits threads contiguously"
    );
    assert_eq!(k.shared.bank_conflicts, 0);
    assert_eq!(k.shared.accesses_in_loops, 2);
}

#[test]
fn shuffle_reduction_counts_shuffles_through_device_functions() {
    let f = fixture("reduce_shuffle");
    let k = kernel(&f);
    assert_eq!(k.device_functions, vec!["warp_reduce_sum".to_string()]);
    assert_eq!(k.sync.shuffles, 2, "two inlined calls of warp_reduce_sum");
    assert_eq!(k.loops.grid_stride, 1);
    assert_eq!(k.loops.unrolled, 2);
    assert_eq!(k.loops.constant_trip, 2, "offset = 16, 8, 4, 2, 1");
    assert_eq!(k.divergence.warp_uniform_branches, 1, "`warp == 0`");
    assert_eq!(k.sync.atomics_global, 1);
    assert_eq!(k.global_accesses.coalesced, 1);
}

// ---- matmul ------------------------------------------------------------------

#[test]
fn naive_matmul_reads_a_row_uniformly_and_b_coalesced() {
    let f = fixture("matmul_naive");
    let k = kernel(&f);
    assert_eq!(
        classes(&k.clone(), "A"),
        vec![(AccessKind::Read, AccessClass::Uniform)]
    );
    assert_eq!(
        classes(k, "B"),
        vec![(AccessKind::Read, AccessClass::Coalesced)]
    );
    assert_eq!(
        classes(k, "C"),
        vec![(AccessKind::Write, AccessClass::Coalesced)]
    );
    assert_eq!(k.shared.arrays, 0);
    assert_eq!(k.loops.loops, 1);
}

#[test]
fn tiled_matmul_reuses_shared_memory() {
    let f = fixture("matmul_tiled");
    let k = kernel(&f);
    assert_eq!(k.shared.arrays, 2);
    assert_eq!(k.shared.static_bytes, 2 * 32 * 32 * 4);
    assert_eq!(k.shared.accesses_in_loops, 4);
    assert_eq!(
        k.shared.bank_conflicts, 0,
        "As[ty][k] broadcasts, Bs[k][tx] is unit stride"
    );
    assert_eq!(k.sync.syncthreads, 2);
    assert_eq!(k.global_accesses.coalesced, 3);
    assert_eq!(k.loops.max_nesting, 2);
    assert_eq!((k.loops.unrolled, k.loops.constant_trip), (1, 1));
    assert_eq!(k.compute.fma, 1);
    let naive = fixture("matmul_naive");
    assert!(k.arithmetic_intensity > 10.0 * naive.kernels[0].arithmetic_intensity);
}

// ---- histograms ----------------------------------------------------------------

#[test]
fn global_histogram_uses_contended_global_atomics() {
    let f = fixture("histogram_global");
    let k = kernel(&f);
    assert_eq!((k.sync.atomics_global, k.sync.atomics_shared), (1, 0));
    assert_eq!(k.sync.atomics_global_in_loops, 1);
    assert_eq!(
        k.loops.grid_stride, 1,
        "while-loop form of the grid-stride loop"
    );
}

#[test]
fn shared_histogram_privatises_atomics() {
    let f = fixture("histogram_shared");
    let k = kernel(&f);
    assert_eq!((k.sync.atomics_global, k.sync.atomics_shared), (1, 1));
    assert_eq!(
        k.sync.atomics_global_in_loops, 0,
        "hist[b] is distinct per thread"
    );
    assert_eq!(k.shared.static_bytes, 256 * 4);
}

// ---- vectors, barriers, gathers --------------------------------------------------

#[test]
fn float4_saxpy_is_vectorised_grid_stride_and_coalesced() {
    let f = fixture("saxpy_float4");
    let k = kernel(&f);
    assert_eq!(k.global_accesses.coalesced, 3);
    assert_eq!(k.global_accesses.vector_accesses, 3);
    assert_eq!(k.global_accesses.findings[0].bytes, 16);
    assert!(k.memory_ops.vector_types >= 2);
    assert_eq!(k.loops.grid_stride, 1);
    assert_eq!(k.memory_ops.restrict_params, 2);
    assert_eq!(k.memory_ops.const_params, 1);
}

#[test]
fn barrier_inside_thread_dependent_branch_is_flagged() {
    let f = fixture("divergent_barrier");
    let k = kernel(&f);
    assert_eq!(k.sync.divergent_barriers, 1);
    let b = k
        .sync
        .findings
        .iter()
        .find(|b| b.kind == "divergent_barrier")
        .unwrap();
    assert_eq!(b.span.line, 8);
    assert!(b.reason.contains("line 6"), "{}", b.reason);
    let fixed = fixture("barrier_fixed");
    assert_eq!(fixed.kernels[0].sync.divergent_barriers, 0);
    assert_eq!(fixed.kernels[0].sync.syncthreads, 2);
}

#[test]
fn barrier_after_thread_dependent_return_is_flagged() {
    let k = one(r#"
__global__ void k(float* a, int n) {
    __shared__ float s[256];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    s[threadIdx.x] = a[i];
    __syncthreads();
    a[i] = s[255 - threadIdx.x];
}"#);
    assert_eq!(k.sync.barriers_after_divergent_return, 1);
    assert_eq!(k.sync.divergent_barriers, 0);
}

#[test]
fn gather_is_indirect() {
    let f = fixture("gather");
    let k = kernel(&f);
    assert_eq!(
        classes(k, "x"),
        vec![(AccessKind::Read, AccessClass::Indirect)]
    );
    assert_eq!(
        classes(k, "idx"),
        vec![(AccessKind::Read, AccessClass::Coalesced)]
    );
    assert_eq!(
        classes(k, "y"),
        vec![(AccessKind::Write, AccessClass::Coalesced)]
    );
}

#[test]
fn layernorm_combines_vectors_ldg_shuffles() {
    let f = fixture("layernorm");
    let k = kernel(&f);
    assert_eq!(
        k.device_functions,
        vec!["block_sum".to_string(), "warp_sum".to_string()]
    );
    assert_eq!(k.memory_ops.ldg, 2);
    assert_eq!(k.sync.shuffles, 4);
    assert_eq!(k.sync.syncthreads, 6);
    assert_eq!(k.global_accesses.strided + k.global_accesses.unknown, 0);
    assert_eq!(k.global_accesses.vector_accesses, 6);
    assert_eq!(k.compute.special_functions, 1);
}

// ---- index tracking ------------------------------------------------------------

#[test]
fn index_tracking_through_locals_and_constants() {
    let k = one(r#"
#define N 64
const int PAD = 1;
__global__ void k(const float* a, float* b, const int* idx, int m) {
    constexpr int W = N + PAD;
    int tid = threadIdx.x;
    int gid = blockIdx.x * blockDim.x + tid;
    int lane = tid & 31;
    float v = a[gid];          // coalesced
    v += a[tid * N + 3];       // strided by 64
    v += a[tid * m];           // strided by a run-time factor
    v += a[blockIdx.x];        // uniform
    v += a[lane];              // coalesced
    v += a[tid / 32];          // uniform (per warp)
    v += a[idx[gid]];          // indirect
    v += a[tid * tid];         // unknown
    b[gid * W] = v;            // strided by 65
}"#);
    let got: Vec<(AccessClass, Option<i64>)> = k
        .global_accesses
        .findings
        .iter()
        .filter(|a| a.array != "idx")
        .map(|a| (a.class, a.stride))
        .collect();
    use AccessClass::*;
    assert_eq!(
        got,
        vec![
            (Coalesced, Some(1)),
            (Strided, Some(64)),
            (Strided, None),
            (Uniform, Some(0)),
            (Coalesced, Some(1)),
            (Uniform, Some(0)),
            (Indirect, None),
            (Unknown, None),
            (Strided, Some(65)),
        ]
    );
}

#[test]
fn pointer_aliases_and_grid_stride_variable() {
    let k = one(r#"
__global__ void k(const float* __restrict__ x, float* y, int n, int ld) {
    const float* row = x + blockIdx.x * ld;
    int stride = blockDim.x * gridDim.x;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        y[i] = row[i] * 2.0f + __ldg(&x[i]);
    }
}"#);
    assert_eq!(k.loops.grid_stride, 1);
    assert_eq!(k.global_accesses.coalesced, 3);
    assert_eq!(k.memory_ops.ldg, 1);
    assert!(k.compute.arith_ops_in_loops >= 2);
}

#[test]
fn shared_declarations_and_conflicts() {
    let k = one(r#"
#define T 16
template <int BS>
__global__ void k(float* out) {
    __shared__ double d[T][T];
    __shared__ float s[2 * T * 32];
    __shared__ float t[BS];
    extern __shared__ float dyn[];
    s[threadIdx.x * 2] = 1.0f;                  // 2-way
    d[threadIdx.x][0] = 1.0;                    // 16 doubles apart: 16-way per half-warp
    out[threadIdx.x] = s[threadIdx.x] + dyn[threadIdx.x] + t[threadIdx.x] + d[0][threadIdx.x];
}"#);
    assert_eq!(k.shared.arrays, 4);
    assert_eq!(k.shared.static_bytes, 16 * 16 * 8 + 2 * 16 * 32 * 4);
    assert_eq!(k.shared.unresolved_sizes, 1);
    assert_eq!(k.shared.dynamic_arrays, 1);
    assert_eq!(k.shared.bank_conflicts, 2);
    let reasons: Vec<&str> = k
        .shared
        .findings
        .iter()
        .filter(|f| f.kind == "bank_conflict")
        .map(|f| f.reason.as_str())
        .collect();
    assert!(
        reasons[0].starts_with("2-way") && reasons[1].starts_with("16-way"),
        "{reasons:?}"
    );
}

#[test]
fn warp_primitives_math_and_tensor_cores() {
    let k = one(r#"
#include <mma.h>
using namespace nvcuda;
__global__ void k(const half* a, float* out) {
    wmma::fragment<wmma::matrix_a, 16, 16, 16, half, wmma::row_major> fa;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    wmma::mma_sync(acc, fa, fa, acc);
    unsigned m = __ballot_sync(0xffffffff, threadIdx.x > 3);
    bool any = __any_sync(0xffffffff, m != 0);
    __syncwarp();
    float x = __half2float(a[threadIdx.x]);
    x = __expf(x) + sqrtf(x) + __fmaf_rn(x, x, 1.0f);
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0}, {%1}, {%2}, {%3};" : "=f"(x) : "r"(m), "r"(m), "f"(x));
    out[threadIdx.x] = x;
}"#);
    assert_eq!(k.sync.votes, 2);
    assert_eq!(k.sync.syncwarp, 1);
    assert_eq!(k.compute.special_functions, 2);
    assert_eq!(k.compute.fma, 1);
    assert!(
        k.compute.tensor_core >= 3,
        "two fragments, mma_sync, asm mma: {}",
        k.compute.tensor_core
    );
    assert!(
        k.compute.reduced_precision >= 2,
        "half parameter and __half2float"
    );
}

#[test]
fn spans_are_one_based_and_kernels_are_separate() {
    let f = analyze(b"__global__ void a(float* p) { p[threadIdx.x] = 0; }\n__global__ void b(float* p) { p[threadIdx.x * 2] = 0; }\n");
    assert_eq!(f.kernels.len(), 2);
    assert_eq!(f.totals.kernels, 2);
    assert_eq!((f.kernels[0].span.line, f.kernels[0].span.column), (1, 1));
    assert_eq!(f.kernels[1].span.line, 2);
    let a = &f.kernels[0].global_accesses.findings[0];
    assert_eq!((a.span.line, a.span.column), (1, 31));
    assert_eq!(
        (
            f.totals.global_accesses.coalesced,
            f.totals.global_accesses.strided
        ),
        (1, 1)
    );
    assert!(f.totals.global_accesses.findings.is_empty());
}

#[test]
fn features_serialise_with_stable_snake_case_names() {
    let f = fixture("transpose_shared");
    let json = serde_json::to_value(&f).unwrap();
    for key in ["kernels", "totals", "syntax"] {
        assert!(json.get(key).is_some(), "{key}");
    }
    let k = &json["kernels"][0];
    for key in [
        "name",
        "span",
        "global_accesses",
        "shared",
        "sync",
        "loops",
        "divergence",
        "memory_ops",
        "compute",
        "arithmetic_intensity",
    ] {
        assert!(k.get(key).is_some(), "{key}");
    }
    assert_eq!(k["global_accesses"]["findings"][0]["class"], "coalesced");
    assert_eq!(k["shared"]["bank_conflicts"], 1);
    assert_eq!(json["syntax"]["error_nodes"], 0);
    let back: Features = serde_json::from_value(json).unwrap();
    assert_eq!(back, f);
}

// ---- malformed input -------------------------------------------------------------

#[test]
fn partial_and_unbalanced_code_still_yields_features() {
    let f =
        analyze(b"__global__ void k(float* a) { int i = threadIdx.x; a[i] = 1.0f; if (i < 3) {");
    assert!(f.syntax.error_nodes + f.syntax.missing_nodes > 0);
    let f = analyze(b"__global__ void k(float* a) { a[threadIdx.x] = 1; }}}}) ]");
    assert!(f.syntax.error_nodes > 0);
    assert_eq!(f.kernels.len(), 1, "the well-formed kernel is still found");
    assert_eq!(f.totals.global_accesses.coalesced, 1);
    let f = analyze(b"");
    assert!(f.kernels.is_empty());
    assert!(structural_score(&f, None, None).value < -0.99);
}

#[test]
fn non_utf8_bytes_are_decoded_lossily() {
    let mut src = fixture_source("saxpy_scalar");
    src.splice(0..0, [0xff, 0xfe, 0x80, b'\n']);
    src.extend_from_slice(&[0xc3, 0x28, 0xa0, 0xa1]);
    let f = analyze(&src);
    assert_eq!(f.kernels.len(), 1);
    assert_eq!(f.kernels[0].global_accesses.coalesced, 3);
}

#[test]
fn huge_input_is_truncated_or_refused() {
    let unit = fixture_source("matmul_tiled");
    let mut big = Vec::with_capacity(10 << 20);
    while big.len() < 10 << 20 {
        big.extend_from_slice(&unit);
    }
    assert!(matches!(
        try_analyze(&big),
        Err(AnalysisError::TooLarge {
            max: MAX_SOURCE_BYTES,
            ..
        })
    ));
    let f = analyze(&big);
    assert!(f.syntax.truncated);
    assert!(!f.kernels.is_empty());
}

#[test]
fn deep_nesting_does_not_overflow_the_stack() {
    let mut src = String::from("__global__ void k(float* a) { a[");
    src.push_str(&"(".repeat(50_000));
    src.push_str("threadIdx.x");
    src.push_str(&")".repeat(50_000));
    src.push_str("] = 0; }");
    let f = analyze(src.as_bytes());
    assert!(f.kernels.len() <= 1);
    let braces = "{".repeat(20_000) + &"}".repeat(20_000);
    let f = analyze(format!("__global__ void k() {braces}").as_bytes());
    assert!(f.kernels.len() <= 1);
}

#[test]
fn extreme_constants_do_not_overflow() {
    let f = analyze(
        br#"
#define BIG 9223372036854775807
__global__ void k(float* a) {
    int t = threadIdx.x * -9223372036854775807 - 1;
    for (long i = -9223372036854775807 - 1; i != 0; i -= -1) { a[t % -1] = a[t / -1]; }
    for (long j = 0; j < BIG; j += -9223372036854775807 - 1) { a[(t & BIG) << 62] = 1; }
    a[threadIdx.x % BIG] = a[(threadIdx.x * BIG) * BIG];
}"#,
    );
    assert_eq!(f.kernels.len(), 1);
}

#[test]
fn recursive_device_functions_terminate() {
    let f = analyze(
        br#"
__device__ float f(float x);
__device__ float g(float x) { return f(x) + g(x); }
__device__ float f(float x) { return g(x) * 2.0f; }
__global__ void k(float* a) { a[threadIdx.x] = f(a[threadIdx.x]); }
"#,
    );
    assert_eq!(f.kernels.len(), 1);
}

// ---- vector and score --------------------------------------------------------------

#[test]
fn feature_vector_matches_names() {
    let f = fixture("layernorm");
    let v = f.to_vector();
    assert_eq!(v.len(), FEATURE_NAMES.len());
    assert!(v.iter().all(|x| x.is_finite()));
    let mut names = FEATURE_NAMES.to_vec();
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), FEATURE_NAMES.len(), "names are unique");
    let pos = |n: &str| FEATURE_NAMES.iter().position(|x| *x == n).unwrap();
    assert_eq!(
        v[pos("global_coalesced_ratio")],
        12.0 / 14.0,
        "two uniform stores of mean/rstd"
    );
    assert!((v[pos("sync_shuffles")] - (5.0f32).ln()).abs() < 1e-6);
    assert_eq!(Features::default().to_vector().len(), FEATURE_NAMES.len());
}

/// Each case guards one pair of the reward's ranking: the good variant must score higher.
macro_rules! score_pairs {
    ($($test:ident: $good:literal > $bad:literal;)*) => {$(
        #[test]
        fn $test() {
            let good = structural_score(&fixture($good), None, None);
            let bad = structural_score(&fixture($bad), None, None);
            assert!(good.value > bad.value, "{} {:.3} <= {} {:.3}", $good, good.value, $bad, bad.value);
            assert!((-1.0..=1.0).contains(&good.value) && (-1.0..=1.0).contains(&bad.value));
        }
    )*};
}

score_pairs! {
    score_shared_transpose_beats_naive: "transpose_shared" > "transpose_naive";
    score_padded_transpose_beats_unpadded: "transpose_padded" > "transpose_shared";
    score_sequential_reduction_beats_interleaved: "reduce_sequential" > "reduce_interleaved";
    score_shuffle_reduction_beats_sequential: "reduce_shuffle" > "reduce_sequential";
    score_tiled_matmul_beats_naive: "matmul_tiled" > "matmul_naive";
    score_shared_histogram_beats_global: "histogram_shared" > "histogram_global";
    score_float4_saxpy_beats_scalar: "saxpy_float4" > "saxpy_scalar";
    score_fixed_barrier_beats_divergent: "barrier_fixed" > "divergent_barrier";
}

#[test]
fn score_terms_explain_the_value() {
    let f = fixture("transpose_shared");
    let s = structural_score(&f, Some(1.0), Some(0));
    let sum: f64 = s.terms.iter().map(|t| t.contribution).sum();
    assert!((s.value - sum.tanh()).abs() < 1e-12);
    let bank = s.term("bank_conflicts").unwrap();
    assert_eq!((bank.weight, bank.contribution), (-0.4, -0.4));
    assert_eq!(s.term("occupancy").unwrap().contribution, 0.4);
    let spilled = structural_score(&f, Some(1.0), Some(2048));
    assert!(spilled.value < s.value);
}

#[test]
fn occupancy_known_values() {
    let h100 = DeviceSpec::by_name("H100").unwrap();
    let o = occupancy(h100, 32, 0, 0, 256).unwrap();
    assert_eq!(o.occupancy, 1.0);
    let o = occupancy(h100, 64, 0, 0, 256).unwrap();
    assert_eq!((o.occupancy, o.limiter), (0.5, Limiter::Registers));
    let a100 = DeviceSpec::by_name("a100").unwrap();
    let o = occupancy(a100, 32, 0, 100 * 1024, 256).unwrap();
    assert_eq!(
        (o.active_blocks_per_sm, o.limiter),
        (1, Limiter::SharedMemory)
    );
}

// ---- properties --------------------------------------------------------------------

fn check_invariants(f: &Features) {
    assert_eq!(f.to_vector().len(), FEATURE_NAMES.len());
    assert!(f.to_vector().iter().all(|x| x.is_finite()));
    let s = structural_score(f, None, None);
    assert!((-1.0..=1.0).contains(&s.value));
    assert_eq!(f.totals.kernels as usize, f.kernels.len());
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..4096)) {
        check_invariants(&analyze(&bytes));
    }

    #[test]
    fn random_cuda_tokens_never_panic(toks in proptest::collection::vec(
        prop::sample::select(vec!["__global__", "void", "k", "(", ")", "{", "}", "[", "]", "float*",
            "a", "threadIdx.x", "*", "+", "=", ";", "__syncthreads()", "if", "for", "__shared__",
            "int", "i", "<", "32", "atomicAdd(", ",", "&", "#define", "\n", "return"]), 0..300)) {
        check_invariants(&analyze(toks.join(" ").as_bytes()));
    }

    #[test]
    fn mutated_fixtures_never_panic(
        which in 0usize..6,
        edits in proptest::collection::vec((any::<prop::sample::Index>(), 0u8..3, any::<u8>()), 1..24),
    ) {
        let names = ["matmul_tiled", "layernorm", "reduce_shuffle", "transpose_shared", "histogram_shared", "saxpy_float4"];
        let mut src = fixture_source(names[which]);
        for (at, op, byte) in edits {
            let i = at.index(src.len().max(1));
            match op {
                0 if !src.is_empty() => { src.remove(i.min(src.len() - 1)); }
                1 => src.insert(i.min(src.len()), byte),
                _ if !src.is_empty() => { let j = i.min(src.len() - 1); src[j] = byte; }
                _ => {}
            }
        }
        check_invariants(&analyze(&src));
    }
}
