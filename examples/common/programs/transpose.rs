//! `transpose`: t (N × M) = aᵀ for a (M × N), row-major.

use super::{fill, unroll, Expect, Knob};

#[rustfmt::skip]
pub const KNOBS: &[Knob] = &[
    Knob { name: "tile", options: &["16", "32", "64"] },
    Knob { name: "smem", options: &["none", "tiled", "tiled_padded"] },
    Knob { name: "rows_per_thread", options: &["1", "4"] },
    Knob { name: "sync", options: &["barrier", "none"] },
];

pub fn render(c: &[usize]) -> (String, Expect) {
    let tile = [16, 32, 64][c[0]];
    let smem = c[1];
    let rpt = [1, 4][c[2]];
    let missing_barrier = c[3] == 1 && smem > 0;
    let unrolled = rpt > 1;
    let by = tile / rpt;
    let pragma = unroll(unrolled, "    ");
    let body = if smem == 0 {
        // Reads a row of a (coalesced), writes down a column of t (stride M).
        format!(
            "    int c = blockIdx.x * TILE + threadIdx.x;\n    int r0 = blockIdx.y * TILE + threadIdx.y;\n{pragma}    for (int k = 0; k < TILE; k += BY) {{\n        int r = r0 + k;\n        if (r < M && c < N) t[c * M + r] = a[r * N + c];\n    }}\n"
        )
    } else {
        let pad = if smem == 2 { " + 1" } else { "" };
        let barrier = if missing_barrier {
            "    // (no barrier: the tile is read before every warp has written its part)\n"
        } else {
            "    __syncthreads();\n"
        };
        format!(
            "    __shared__ float tile[TILE][TILE{pad}];\n    int tx = threadIdx.x, ty = threadIdx.y;\n    int c = blockIdx.x * TILE + tx;\n    int r0 = blockIdx.y * TILE + ty;\n{pragma}    for (int k = 0; k < TILE; k += BY) {{\n        int r = r0 + k;\n        if (r < M && c < N) tile[ty + k][tx] = a[r * N + c];\n    }}\n{barrier}    int oc = blockIdx.y * TILE + tx;\n    int orow0 = blockIdx.x * TILE + ty;\n{pragma}    for (int k = 0; k < TILE; k += BY) {{\n        int orow = orow0 + k;\n        if (orow < N && oc < M) t[orow * M + oc] = tile[tx][ty + k];\n    }}\n"
        )
    };
    let src = fill(
        r#"// @launch transpose_k grid=(ceil_div(N, $TILE$), ceil_div(M, $TILE$)) block=($TILE$, $BY$)
#define TILE $TILE$
#define BY $BY$
extern "C" __global__ void transpose_k(const float* __restrict__ a, float* __restrict__ t, int M, int N) {
$BODY$}
"#,
        &[
            ("TILE", tile.to_string()),
            ("BY", by.to_string()),
            ("BODY", body),
        ],
    );
    let expect = if tile * by > 1024 {
        Expect::InvalidLaunch("threads")
    } else {
        Expect::Runs {
            risk: missing_barrier
                .then_some("no __syncthreads() between writing the shared tile and reading it"),
        }
    };
    (src, expect)
}
