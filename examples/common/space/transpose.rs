//! `transpose` (t = aᵀ, a is M × N): a TY × TX tile staged in shared memory by a TX × BY
//! block (RPT rows per thread), written back along M.
//!
//! Hazards, each wrong on the task's odd configs (1000 × 1537, 100003 × 67, 7001 × 9007):
//! * `barrier`: no `__syncthreads()` between staging the tile and reading it transposed;
//! * `grid_x`, `grid_y`: the grid is `N / TX` (`M / TY`) blocks, assuming the size is a
//!   multiple of the tile: the last columns (rows) of `a` are never copied;
//! * `last_row`: the store guard is `< M - 1` (an inclusive bound written as exclusive): the
//!   last row of `a` is never copied.
//!
//! Speed knobs: the block `shape` (TX × BY threads, at least two warps, so that a missing
//! barrier is a race between warps), rows per thread, tile padding, unrolling, and
//! `orientation`: `tiled` reads `a` along its rows and writes `t` along M (both coalesced);
//! `inverted` stages the tile by columns of `a` and writes `t` along N (the tile used the
//! wrong way round: both strided, still a transpose through shared memory).

use super::{fill, pragma, Knob};

#[rustfmt::skip]
pub const KNOBS: &[Knob] = &[
    Knob { name: "barrier", options: &["sync", "missing"], hazard: true },
    Knob { name: "grid_x", options: &["ceil", "floor"], hazard: true },
    Knob { name: "grid_y", options: &["ceil", "floor"], hazard: true },
    Knob { name: "last_row", options: &["M", "M-1"], hazard: true },
    Knob { name: "shape", options: &["32x4", "64x4", "8x8", "8x16"], hazard: false },
    Knob { name: "rows_per_thread", options: &["1", "2", "4"], hazard: false },
    Knob { name: "pad", options: &["0", "1"], hazard: false },
    Knob { name: "unroll", options: &["none", "2", "full"], hazard: false },
    Knob { name: "orientation", options: &["tiled", "inverted"], hazard: false },
];

/// The label of knob `i`'s chosen option (`render` reads options by label, so that a
/// subset of a knob's options renders the same sources).
fn opt(c: &[usize], i: usize) -> &'static str {
    KNOBS[i].options[c[i]]
}

const TEMPLATE: &str = r#"// Transpose: $TY$ x $TX$ tile, $TX$ x $BY$ threads, $RPT$ rows per thread.
// @launch transpose_tile grid=($GRIDX$, $GRIDY$) block=($TX$, $BY$)
extern "C" __global__ void transpose_tile(const float* __restrict__ a, float* __restrict__ t,
                                          int M, int N) {
    __shared__ float tile[$TY$][$TX$ + $PAD$];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int r0 = blockIdx.y * $TY$, c0 = blockIdx.x * $TX$;
    const int tid = ty * $TX$ + tx;
$BODY$}
"#;

/// Tiled: rows of `a` in (coalesced), `t` out along M (coalesced).
const TILED: &str = r#"    $UNROLL$
    for (int i = 0; i < $RPT$; ++i) {
        const int r = r0 + ty + i * $BY$, c = c0 + tx;
        if (r < M && c < N) tile[ty + i * $BY$][tx] = a[(size_t)r * N + c];
    }
$BARRIER$    const int oc = tid % $TY$;  // along M: coalesced writes
    $UNROLL$
    for (int i = 0; i < $RPT$; ++i) {
        const int orow = tid / $TY$ + i * ($TX$ / $RPT$);
        const int gr = c0 + orow, gc = r0 + oc;
        if (gr < N && gc < $MLIMIT$) t[(size_t)gr * M + gc] = tile[oc][orow];
    }
"#;

/// Inverted: columns of `a` in (strided), `t` out along N (strided).
const INVERTED: &str = r#"    const int ir = tid % $TY$;  // along M: strided reads
    $UNROLL$
    for (int i = 0; i < $RPT$; ++i) {
        const int jc = tid / $TY$ + i * ($TX$ / $RPT$);
        const int r = r0 + ir, c = c0 + jc;
        if (r < M && c < N) tile[ir][jc] = a[(size_t)r * N + c];
    }
$BARRIER$    $UNROLL$
    for (int i = 0; i < $RPT$; ++i) {
        const int oc = ty + i * $BY$;  // along N: strided writes
        const int gr = c0 + tx, gc = r0 + oc;
        if (gr < N && gc < $MLIMIT$) t[(size_t)gr * M + gc] = tile[oc][tx];
    }
"#;

/// Renders a checked choice.
pub fn render(c: &[usize]) -> String {
    let (tx, by) = opt(c, 4)
        .split_once('x')
        .map(|(x, y)| (x.parse().unwrap_or(32), y.parse().unwrap_or(4)))
        .unwrap_or((32usize, 4usize));
    let rpt: usize = opt(c, 5).parse().unwrap_or(1);
    let ty = by * rpt;
    let unroll = match opt(c, 7) {
        "none" => 1,
        "2" => 2,
        _ => 0,
    };
    let body = if opt(c, 8) == "inverted" {
        INVERTED
    } else {
        TILED
    };
    let grid = |size: &str, tile: usize, floor: bool| {
        if floor {
            format!("{size} / {tile}")
        } else {
            format!("ceil_div({size}, {tile})")
        }
    };
    let template = TEMPLATE.replace("$BODY$", body);
    fill(
        &template,
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
            ("UNROLL", pragma(unroll)),
            ("TX", tx.to_string()),
            ("TY", ty.to_string()),
            ("BY", by.to_string()),
            ("RPT", rpt.to_string()),
            ("PAD", opt(c, 6).into()),
        ],
    )
}
