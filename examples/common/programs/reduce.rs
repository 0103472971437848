//! Full reductions: `max_reduce` (out[0] = max x) and `dot_product` (out[0] = Σ a·b).

use super::{fill, unroll, Expect, Knob};

#[rustfmt::skip]
pub const KNOBS: &[Knob] = &[
    Knob { name: "items", options: &["1", "8"] },
    Knob { name: "vector", options: &["1", "4"] },
    Knob { name: "reduce", options: &["interleaved", "sequential", "shuffle"] },
    Knob { name: "sync", options: &["safe", "warp_unsafe"] },
    Knob { name: "final", options: &["two_pass", "atomic"] },
];

struct Op {
    /// Inputs of the first kernel.
    params: &'static str,
    /// Their names, for `args=(...)`.
    args: &'static str,
    ident: &'static str,
    /// `COMB(a, b)` with `@1` and `@2` for the operands.
    comb: &'static str,
    /// The value of vector index `v` (with `V`-wide loads).
    load_vec: &'static str,
    /// The value of element `i`.
    load_one: &'static str,
}

fn op(task: &str, vec: usize) -> Op {
    let dot = task == "dot_product";
    let load_vec = match (dot, vec) {
        (false, 1) => "x[v]",
        (false, _) => "max4(reinterpret_cast<const float4*>(x)[v])",
        (true, 1) => "a[v] * b[v]",
        (true, _) => {
            "dot4(reinterpret_cast<const float4*>(a)[v], reinterpret_cast<const float4*>(b)[v])"
        }
    };
    if dot {
        Op {
            params: "const float* __restrict__ a, const float* __restrict__ b",
            args: "a, b",
            ident: "0.0f",
            comb: "((@1) + (@2))",
            load_vec,
            load_one: "a[i] * b[i]",
        }
    } else {
        Op {
            params: "const float* __restrict__ x",
            args: "x",
            ident: "NEG_INF",
            comb: "fmaxf(@1, @2)",
            load_vec,
            load_one: "x[i]",
        }
    }
}

pub fn render(task: &str, c: &[usize]) -> (String, Expect) {
    let block = 256;
    let items = [1, 8][c[0]];
    let vec = [1, 4][c[1]];
    let style = c[2];
    let unsafe_warp = c[3] == 1 && style != 2;
    let atomic = c[4] == 1;
    let dot = task == "dot_product";
    let o = op(task, vec);
    let comb = |a: &str, b: &str| o.comb.replace("@1", a).replace("@2", b);
    let per_block = block * items * vec;
    let grid = format!("ceil_div(n, {per_block})");

    // Per-thread partial over ITEMS vectors, block-interleaved (coalesced).
    let mut body = format!(
        "    int tid = threadIdx.x;\n    int nv = n / {vec};\n    int base = blockIdx.x * (BLOCK * ITEMS) + tid;\n    float acc = {ident};\n{pragma}    for (int k = 0; k < ITEMS; ++k) {{\n        int v = base + k * BLOCK;\n        if (v < nv) acc = {upd};\n    }}\n",
        ident = o.ident,
        pragma = unroll(items > 1, "    "),
        upd = comb("acc", o.load_vec),
    );
    if vec > 1 {
        body += &format!(
            "    if (blockIdx.x == 0 && tid < n - nv * {vec}) {{\n        int i = nv * {vec} + tid;\n        acc = {};\n    }}\n",
            comb("acc", o.load_one)
        );
    }
    // Block reduction; the result ends in `acc` of thread 0.
    match style {
        0 => {
            body += "    __shared__ float s[BLOCK];\n    s[tid] = acc;\n    __syncthreads();\n";
            if unsafe_warp {
                body += &format!(
                    "    for (int st = 1; st < 32; st *= 2) {{  // no barrier inside a warp: a race\n        if (tid % (2 * st) == 0) s[tid] = {};\n    }}\n    __syncthreads();\n    for (int st = 32; st < BLOCK; st *= 2) {{\n        if (tid % (2 * st) == 0) s[tid] = {};\n        __syncthreads();\n    }}\n",
                    comb("s[tid]", "s[tid + st]"),
                    comb("s[tid]", "s[tid + st]")
                );
            } else {
                body += &format!(
                    "    for (int st = 1; st < BLOCK; st *= 2) {{\n        if (tid % (2 * st) == 0) s[tid] = {};\n        __syncthreads();\n    }}\n",
                    comb("s[tid]", "s[tid + st]")
                );
            }
            body += "    acc = s[0];\n";
        }
        1 => {
            body += "    __shared__ float s[BLOCK];\n    s[tid] = acc;\n    __syncthreads();\n";
            if unsafe_warp {
                body += &format!(
                    "    for (int st = BLOCK / 2; st > 32; st >>= 1) {{\n        if (tid < st) s[tid] = {};\n        __syncthreads();\n    }}\n    if (tid < 32) {{  // warp-synchronous, without volatile or __syncwarp()\n",
                    comb("s[tid]", "s[tid + st]")
                );
                for w in [32, 16, 8, 4, 2, 1] {
                    body += &format!(
                        "        s[tid] = {};\n",
                        comb("s[tid]", &format!("s[tid + {w}]"))
                    );
                }
                body += "    }\n    __syncthreads();\n";
            } else {
                body += &format!(
                    "    for (int st = BLOCK / 2; st > 0; st >>= 1) {{\n        if (tid < st) s[tid] = {};\n        __syncthreads();\n    }}\n",
                    comb("s[tid]", "s[tid + st]")
                );
            }
            body += "    acc = s[0];\n";
        }
        _ => {
            body += &format!(
                "    __shared__ float ws[BLOCK / 32];\n    acc = warp_reduce(acc);\n    if ((tid & 31) == 0) ws[tid >> 5] = acc;\n    __syncthreads();\n    if (tid < 32) acc = warp_reduce(tid < BLOCK / 32 ? ws[tid] : {});\n",
                o.ident
            );
        }
    }
    // Combine the blocks.
    let (scratch, result, second, second_kernel) = if atomic {
        if dot {
            (
                "// @scratch total f32 (1)".to_string(),
                "    if (tid == 0) atomicAdd(total, acc);\n",
                "// @launch reduce_final grid=(1) block=(1) args=(total, out)".to_string(),
                "extern \"C\" __global__ void reduce_final(const float* total, float* out) {\n    out[0] = total[0];\n}\n".to_string(),
            )
        } else {
            (
                "// @scratch total i32 (1)".to_string(),
                "    if (tid == 0) atomicMax(reinterpret_cast<unsigned*>(total), float_to_ordered(acc));\n",
                "// @launch reduce_final grid=(1) block=(1) args=(total, out)".to_string(),
                "extern \"C\" __global__ void reduce_final(const int* total, float* out) {\n    out[0] = ordered_to_float(*reinterpret_cast<const unsigned*>(total));\n}\n".to_string(),
            )
        }
    } else {
        (
            format!("// @scratch total f32 ({grid})"),
            "    if (tid == 0) total[blockIdx.x] = acc;\n",
            format!("// @launch reduce_final grid=(1) block=(1024) args=(total, out, {grid})"),
            format!(
                "extern \"C\" __global__ void reduce_final(const float* __restrict__ total, float* __restrict__ out, int m) {{\n    __shared__ float ws[32];\n    int tid = threadIdx.x;\n    float v = {ident};\n    for (int i = tid; i < m; i += 1024) v = {c1};\n    v = warp_reduce(v);\n    if ((tid & 31) == 0) ws[tid >> 5] = v;\n    __syncthreads();\n    if (tid < 32) {{\n        v = warp_reduce(ws[tid]);\n        if (tid == 0) out[0] = v;\n    }}\n}}\n",
                ident = o.ident,
                c1 = comb("v", "total[i]")
            ),
        )
    };
    body += result;
    let total_ty = if atomic && !dot { "int*" } else { "float*" };
    let helpers = fill(
        r#"#define NEG_INF __int_as_float(0xff800000)
__device__ __forceinline__ float warp_reduce(float v) {
    #pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = $COMB$;
    return v;
}
__device__ __forceinline__ float max4(float4 q) { return fmaxf(fmaxf(q.x, q.y), fmaxf(q.z, q.w)); }
__device__ __forceinline__ float dot4(float4 p, float4 q) { return p.x * q.x + p.y * q.y + p.z * q.z + p.w * q.w; }
__device__ __forceinline__ unsigned float_to_ordered(float f) {
    unsigned u = __float_as_uint(f);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
__device__ __forceinline__ float ordered_to_float(unsigned k) {
    return __uint_as_float((k & 0x80000000u) ? (k & 0x7FFFFFFFu) : ~k);
}
"#,
        &[("COMB", comb("v", "__shfl_xor_sync(0xffffffffu, v, o)"))],
    );
    let src = fill(
        r#"$SCRATCH$
// @launch reduce_block grid=($GRID$) block=($BLOCK$) args=($ARGS$, total, n)
$SECOND$
#define BLOCK $BLOCK$
#define ITEMS $ITEMS$
$HELPERS$extern "C" __global__ void reduce_block($PARAMS$, $TOTAL_TY$ total, int n) {
$BODY$}

$SECOND_KERNEL$"#,
        &[
            ("SCRATCH", scratch),
            ("GRID", grid),
            ("BLOCK", block.to_string()),
            ("ARGS", o.args.to_string()),
            ("SECOND", second),
            ("ITEMS", items.to_string()),
            ("HELPERS", helpers),
            ("PARAMS", o.params.to_string()),
            ("TOTAL_TY", total_ty.to_string()),
            ("BODY", body),
            ("SECOND_KERNEL", second_kernel),
        ],
    );
    let expect = Expect::Runs {
        risk: unsafe_warp
            .then_some("tree reduction steps inside a warp without a barrier: a data race"),
    };
    (src, expect)
}
