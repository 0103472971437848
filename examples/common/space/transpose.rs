//! `transpose` (t = aᵀ, a is M × N): a TY × TX tile staged in shared memory by a TX × BY
//! block (RPT rows per thread), written back along M.
//!
//! Hazards, each wrong on the task's odd configs (1000 × 1537, 100003 × 67, 7001 × 9007):
//! * `barrier`: no `__syncthreads()` between staging the tile and reading it transposed;
//! * `grid_x`, `grid_y`: the grid is `N / TX` (`M / TY`) blocks, assuming the size is a
//!   multiple of the tile: the last columns (rows) of `a` are never copied;
//! * `last_row`: the store guard is `< M - 1` (an inclusive bound written as exclusive): the
//!   last row of `a` is never copied.

use super::{fill, pragma, Knob};

#[rustfmt::skip]
pub const KNOBS: &[Knob] = &[
    Knob { name: "barrier", options: &["sync", "missing"], hazard: true },
    Knob { name: "grid_x", options: &["ceil", "floor"], hazard: true },
    Knob { name: "grid_y", options: &["ceil", "floor"], hazard: true },
    Knob { name: "last_row", options: &["M", "M-1"], hazard: true },
    Knob { name: "tile_x", options: &["16", "32", "64"], hazard: false },
    Knob { name: "block_y", options: &["4", "8", "16"], hazard: false },
    Knob { name: "rows_per_thread", options: &["1", "2", "4"], hazard: false },
    Knob { name: "pad", options: &["0", "1"], hazard: false },
    Knob { name: "unroll", options: &["none", "2", "full"], hazard: false },
];

const TEMPLATE: &str = r#"// Transpose: $TY$ x $TX$ tile, $TX$ x $BY$ threads, $RPT$ rows per thread.
// @launch transpose_tile grid=($GRIDX$, $GRIDY$) block=($TX$, $BY$)
extern "C" __global__ void transpose_tile(const float* __restrict__ a, float* __restrict__ t,
                                          int M, int N) {
    __shared__ float tile[$TY$][$TX$ + $PAD$];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int r0 = blockIdx.y * $TY$, c0 = blockIdx.x * $TX$;
    $UNROLL$
    for (int i = 0; i < $RPT$; ++i) {
        const int r = r0 + ty + i * $BY$, c = c0 + tx;
        if (r < M && c < N) tile[ty + i * $BY$][tx] = a[(size_t)r * N + c];
    }
$BARRIER$    const int tid = ty * $TX$ + tx;
    const int oc = tid % $TY$;  // along M: coalesced writes
    $UNROLL$
    for (int i = 0; i < $RPT$; ++i) {
        const int orow = tid / $TY$ + i * ($TX$ / $RPT$);
        const int gr = c0 + orow, gc = r0 + oc;
        if (gr < N && gc < $MLIMIT$) t[(size_t)gr * M + gc] = tile[oc][orow];
    }
}
"#;

/// Renders a checked choice.
pub fn render(c: &[usize]) -> String {
    let tx = [16, 32, 64][c[4]];
    let by = [4, 8, 16][c[5]];
    let rpt = [1, 2, 4][c[6]];
    let ty = by * rpt;
    let grid = |size: &str, tile: usize, floor: bool| {
        if floor {
            format!("{size} / {tile}")
        } else {
            format!("ceil_div({size}, {tile})")
        }
    };
    fill(
        TEMPLATE,
        &[
            ("GRIDX", grid("N", tx, c[1] == 1)),
            ("GRIDY", grid("M", ty, c[2] == 1)),
            ("MLIMIT", if c[3] == 1 { "M - 1" } else { "M" }.into()),
            (
                "BARRIER",
                if c[0] == 1 {
                    String::new()
                } else {
                    "    __syncthreads();\n".into()
                },
            ),
            ("UNROLL", pragma([1, 2, 0][c[8]])),
            ("TX", tx.to_string()),
            ("TY", ty.to_string()),
            ("BY", by.to_string()),
            ("RPT", rpt.to_string()),
            ("PAD", c[7].to_string()),
        ],
    )
}
