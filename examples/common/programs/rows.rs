//! Row reductions: `softmax_rows` (y = softmax(x) per row: max, sum of exponentials,
//! normalise) and `sum_dim` (y[r] = Σ_j x[r, j]).

use super::{fill, Expect, Knob};

#[rustfmt::skip]
pub const KNOBS: &[Knob] = &[
    Knob { name: "style", options: &["thread_per_row", "warp_per_row", "block_per_row"] },
    Knob { name: "block", options: &["128", "256", "512"] },
    Knob { name: "vector", options: &["1", "4"] },
    Knob { name: "sync", options: &["safe", "warp_unsafe"] },
];

#[derive(Clone, Copy, PartialEq)]
enum Style {
    Thread,
    Warp,
    Block,
}

/// A loop over the row `xr` from `start` in steps of `stride` that applies `update` (a
/// statement using `v`) to each element; with float4 loads when the row length allows.
fn row_loop(start: &str, stride: &str, vector: bool, unroll: bool, update: &str) -> String {
    let pragma = if unroll { "    #pragma unroll 4\n" } else { "" };
    let scalar = format!(
        "{pragma}    for (int j = {start}; j < cols; j += {stride}) {{\n        float v = xr[j];\n        {update}\n    }}\n"
    );
    if !vector {
        return scalar;
    }
    let parts: String = ["x", "y", "z", "w"]
        .iter()
        .map(|c| format!("            {{ float v = q.{c}; {update} }}\n"))
        .collect();
    format!(
        "    if ((cols & 3) == 0) {{  // rows start 16-byte aligned: float4 loads\n        const float4* xr4 = reinterpret_cast<const float4*>(xr);\n{pragma2}        for (int j = {start}; j < cols / 4; j += {stride}) {{\n            float4 q = xr4[j];\n{parts}        }}\n    }} else {{\n{scalar_indented}    }}\n",
        pragma2 = if unroll { "        #pragma unroll 4\n" } else { "" },
        scalar_indented = scalar
            .lines()
            .map(|l| format!("    {l}\n"))
            .collect::<String>()
    )
}

/// Combines the per-thread `var` across the threads that share a row, with `comb` (`@1`, `@2`
/// for the operands).
fn combine(style: Style, block: usize, unsafe_warp: bool, var: &str, comb: &str) -> String {
    let c = |a: &str, b: &str| comb.replace("@1", a).replace("@2", b);
    match style {
        Style::Thread => String::new(),
        Style::Warp => format!(
            "    #pragma unroll\n    for (int o = 16; o > 0; o >>= 1) {var} = {};\n",
            c(var, &format!("__shfl_xor_sync(0xffffffffu, {var}, o)"))
        ),
        Style::Block => {
            let mut s = format!("    red[tid] = {var};\n    __syncthreads();\n");
            if unsafe_warp {
                s += &format!(
                    "    for (int s = {half}; s > 32; s >>= 1) {{\n        if (tid < s) red[tid] = {};\n        __syncthreads();\n    }}\n    if (tid < 32) {{  // warp-synchronous, without volatile or __syncwarp()\n",
                    c("red[tid]", "red[tid + s]"),
                    half = block / 2
                );
                for o in [32, 16, 8, 4, 2, 1] {
                    s += &format!(
                        "        red[tid] = {};\n",
                        c("red[tid]", &format!("red[tid + {o}]"))
                    );
                }
                s += "    }\n    __syncthreads();\n";
            } else {
                s += &format!(
                    "    for (int s = {half}; s > 0; s >>= 1) {{\n        if (tid < s) red[tid] = {};\n        __syncthreads();\n    }}\n",
                    c("red[tid]", "red[tid + s]"),
                    half = block / 2
                );
            }
            s += &format!("    {var} = red[0];\n    __syncthreads();\n");
            s
        }
    }
}

pub fn render(task: &str, c: &[usize]) -> (String, Expect) {
    let style = [Style::Thread, Style::Warp, Style::Block][c[0]];
    let block = [128, 256, 512][c[1]];
    let vector = c[2] == 1;
    let unsafe_warp = c[3] == 1 && style == Style::Block;
    let unroll = false;
    let (start, stride, grid, row) = match style {
        Style::Thread => (
            "0",
            "1",
            format!("ceil_div(rows, {block})"),
            "int row = blockIdx.x * blockDim.x + threadIdx.x;\n    if (row >= rows) return;",
        ),
        Style::Warp => (
            "lane",
            "32",
            format!("ceil_div(rows, {})", block / 32),
            "int row = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;\n    int lane = threadIdx.x & 31;\n    if (row >= rows) return;  // uniform across the warp",
        ),
        Style::Block => (
            "tid",
            "BLOCK",
            "rows".to_string(),
            "int row = blockIdx.x;\n    int tid = threadIdx.x;\n    __shared__ float red[BLOCK];",
        ),
    };
    let softmax = task == "softmax_rows";
    let mut body = String::new();
    if softmax {
        body += "    float m = -__int_as_float(0x7f800000);\n";
        body += &row_loop(start, stride, vector, unroll, "m = fmaxf(m, v);");
        body += &combine(style, block, unsafe_warp, "m", "fmaxf(@1, @2)");
        body += "    float s = 0.0f;\n";
        body += &row_loop(start, stride, vector, unroll, "s += expf(v - m);");
        body += &combine(style, block, unsafe_warp, "s", "@1 + @2");
        body += "    float inv = 1.0f / s;\n    float* yr = y + (size_t)row * cols;\n";
        // The write pass.
        let pragma = if unroll { "    #pragma unroll 4\n" } else { "" };
        let scalar = format!(
            "{pragma}    for (int j = {start}; j < cols; j += {stride}) yr[j] = expf(xr[j] - m) * inv;\n"
        );
        if vector {
            body += &format!(
                "    if ((cols & 3) == 0) {{\n        const float4* xr4 = reinterpret_cast<const float4*>(xr);\n        float4* yr4 = reinterpret_cast<float4*>(yr);\n{p2}        for (int j = {start}; j < cols / 4; j += {stride}) {{\n            float4 q = xr4[j];\n            yr4[j] = make_float4(expf(q.x - m) * inv, expf(q.y - m) * inv, expf(q.z - m) * inv, expf(q.w - m) * inv);\n        }}\n    }} else {{\n    {scalar}    }}\n",
                p2 = if unroll { "        #pragma unroll 4\n" } else { "" }
            );
        } else {
            body += &scalar;
        }
    } else {
        body += "    float s = 0.0f;\n";
        body += &row_loop(start, stride, vector, unroll, "s += v;");
        body += &combine(style, block, unsafe_warp, "s", "@1 + @2");
        body += match style {
            Style::Thread => "    y[row] = s;\n",
            Style::Warp => "    if (lane == 0) y[row] = s;\n",
            Style::Block => "    if (tid == 0) y[row] = s;\n",
        };
    }
    let out_param = "float* __restrict__ y";
    let src = fill(
        r#"// @launch rowwise grid=($GRID$) block=($BLOCK$)
#define BLOCK $BLOCK$
extern "C" __global__ void rowwise(const float* __restrict__ x, $OUT$, int rows, int cols) {
    $ROW$
    const float* xr = x + (size_t)row * cols;
$BODY$}
"#,
        &[
            ("GRID", grid),
            ("BLOCK", block.to_string()),
            ("OUT", out_param.to_string()),
            ("ROW", row.to_string()),
            ("BODY", body),
        ],
    );
    let expect = Expect::Runs {
        risk: unsafe_warp.then_some(
            "warp-synchronous tree reduction without volatile or __syncwarp(): a data race",
        ),
    };
    (src, expect)
}
