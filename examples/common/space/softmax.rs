//! `softmax_rows` (y = softmax(x) per row, rows × cols): one row per block of B threads,
//! three passes over the row (max, sum of exponentials, write) in chunks of B·V elements
//! (V-wide loads when the row is aligned), block reductions by warp shuffles and one
//! shared-memory step; optionally the exponentials are staged in `y` by the sum pass.
//!
//! Speed knobs besides the launch shape and the loop shape: `layout` (`coalesced`: a chunk's
//! B·V elements are spread over the threads V at a time, so a warp reads consecutive
//! addresses; `segmented`: each thread walks its own contiguous share of the row, so a
//! warp's loads are `full / B` floats apart) and `precision` (`float`: `expf`; `double`:
//! the exponentials in double precision, `exp((double)...)`).
//!
//! Hazards, each wrong on `small_odd` (1000 × 1000: 1000 is not a multiple of any chunk):
//! * `barrier`: no `__syncthreads()` between publishing the warps' partials and reading them;
//! * `warp_reduce`: `__shfl_down_sync` instead of a butterfly: only lane 0 holds the total,
//!   but every lane uses its own value as the row's max and sum;
//! * `tail`: the max and sum passes assume cols is a multiple of the chunk (no remainder);
//! * `last_col`: the write pass stops one element early (`< cols - 1`).

use super::{fill, pragma, Knob};

#[rustfmt::skip]
pub const KNOBS: &[Knob] = &[
    Knob { name: "barrier", options: &["sync", "missing"], hazard: true },
    Knob { name: "warp_reduce", options: &["xor", "down"], hazard: true },
    Knob { name: "tail", options: &["handled", "assumed"], hazard: true },
    Knob { name: "last_col", options: &["cols", "cols-1"], hazard: true },
    Knob { name: "block", options: &["64", "128", "256", "512", "1024"], hazard: false },
    Knob { name: "vector", options: &["1", "2"], hazard: false },
    Knob { name: "unroll", options: &["1", "2", "4"], hazard: false },
    Knob { name: "stage", options: &["recompute", "in_y"], hazard: false },
    Knob { name: "layout", options: &["coalesced", "segmented"], hazard: false },
    Knob { name: "precision", options: &["float", "double"], hazard: false },
];

/// The label of knob `i`'s chosen option (`render` reads options by label, so that a
/// subset of a knob's options renders the same sources).
fn opt(c: &[usize], i: usize) -> &'static str {
    KNOBS[i].options[c[i]]
}

const TEMPLATE: &str = r#"// Row softmax: $B$ threads, one row per block, chunks of $B$ x $V$ elements.
// @launch softmax grid=(rows) block=($B$)
__device__ __forceinline__ float warp_max(float v) {
    #pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, $SHFL$(0xffffffffu, v, o));
    return v;
}

__device__ __forceinline__ float warp_sum(float v) {
    #pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += $SHFL$(0xffffffffu, v, o);
    return v;
}

extern "C" __global__ void softmax(const float* __restrict__ x, float* __restrict__ y,
                                   int rows, int cols) {
    __shared__ float red[32];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int span = $B$ * $V$;
    const int full = cols / span * span;
$SEG$$ALIGNED$
    {
        const int row = blockIdx.x;
        const float* xr = x + (size_t)row * cols;
        float* yr = y + (size_t)row * cols;
        float m = __int_as_float(0xff800000);
$MAXLOOP$        m = warp_max(m);
        if (lane == 0) red[warp] = m;
$BARRIER$        m = warp_max(lane < $NW$ ? red[lane] : __int_as_float(0xff800000));
        __syncthreads();  // red is reused by the next reduction
        float s = 0.0f;
$SUMLOOP$        s = warp_sum(s);
        if (lane == 0) red[warp] = s;
$BARRIER$        s = warp_sum(lane < $NW$ ? red[lane] : 0.0f);
        __syncthreads();
        const float inv = 1.0f / s;
$WRITELOOP$    }
}
"#;

/// A pass over the row: chunks of `B·V` (loads of V when `aligned`), then the remainder
/// below `limit` unless `tail` is false. `body` uses `v` (the element) and `jj` (its index).
/// `segmented`: thread `tid` takes elements `tid·seg + base/B ..` (its own contiguous share
/// of the `full` part) instead of `base + tid·V ..`.
fn pass(
    b: usize,
    v: usize,
    unroll: usize,
    body: &str,
    tail: bool,
    limit: &str,
    segmented: bool,
) -> String {
    let load = match v {
        1 => format!("            {{ const int jj = j; const float v = xr[jj]; {body} }}\n"),
        _ => {
            let (ty, lanes) = if v == 4 {
                ("float4", "{q.x, q.y, q.z, q.w}")
            } else {
                ("float2", "{q.x, q.y}")
            };
            format!(
                "            float e[{v}];\n            if (aligned) {{\n                const {ty} q = *reinterpret_cast<const {ty}*>(xr + j);\n                const float w[{v}] = {lanes};\n                #pragma unroll\n                for (int u = 0; u < {v}; ++u) e[u] = w[u];\n            }} else {{\n                #pragma unroll\n                for (int u = 0; u < {v}; ++u) e[u] = xr[j + u];\n            }}\n            #pragma unroll\n            for (int u = 0; u < {v}; ++u) {{ const int jj = j + u; const float v = e[u]; {body} }}\n"
            )
        }
    };
    let index = if segmented {
        format!("tid * seg + base / {b}")
    } else {
        format!("base + tid * {v}")
    };
    let mut s = format!(
        "        {}\n        for (int base = 0; base < full; base += span) {{\n            const int j = {index};\n{load}        }}\n",
        pragma(unroll)
    );
    if tail {
        s += &format!(
            "        for (int jj = full + tid; jj < {limit}; jj += {b}) {{ const float v = xr[jj]; {body} }}\n",
            b = "blockDim.x"
        );
    }
    s
}

/// Renders a checked choice.
pub fn render(c: &[usize]) -> String {
    let num = |i: usize| -> usize { opt(c, i).parse().unwrap_or(1) };
    let (b, v, unroll) = (num(4), num(5), num(6));
    let staged = opt(c, 7) == "in_y";
    let segmented = opt(c, 8) == "segmented";
    let exp = if opt(c, 9) == "double" {
        "(float)exp((double)v - (double)m)"
    } else {
        "expf(v - m)"
    };
    let tail = c[2] == 0;
    let sum_body = if staged {
        format!("const float ex = {exp}; s += ex; yr[jj] = ex;")
    } else {
        format!("s += {exp};")
    };
    let write_body = if staged {
        "yr[jj] = yr[jj] * inv;".to_string()
    } else {
        format!("yr[jj] = {exp} * inv;")
    };
    let write_limit = if c[3] == 1 { "cols - 1" } else { "cols" };
    fill(
        TEMPLATE,
        &[
            (
                "MAXLOOP",
                pass(b, v, unroll, "m = fmaxf(m, v);", tail, "cols", segmented),
            ),
            (
                "SUMLOOP",
                pass(b, v, unroll, &sum_body, tail, "cols", segmented),
            ),
            (
                "WRITELOOP",
                pass(b, v, unroll, &write_body, true, write_limit, segmented),
            ),
            (
                "BARRIER",
                if c[0] == 1 {
                    String::new()
                } else {
                    "        __syncthreads();\n".into()
                },
            ),
            (
                "SHFL",
                if c[1] == 1 {
                    "__shfl_down_sync"
                } else {
                    "__shfl_xor_sync"
                }
                .into(),
            ),
            (
                "SEG",
                if segmented {
                    format!("    const int seg = full / {b};  // this thread's contiguous share of the chunks\n")
                } else {
                    String::new()
                },
            ),
            (
                "ALIGNED",
                if v > 1 {
                    format!("    const bool aligned = (cols % {v}) == 0;  // rows start {}-byte aligned", 4 * v)
                } else {
                    "    // one element per load: no alignment to check".into()
                },
            ),
            ("B", b.to_string()),
            ("V", v.to_string()),
            ("NW", (b / 32).to_string()),
        ],
    )
}
