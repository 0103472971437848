//! `transpose` (t = aᵀ, a is M × N): a TY × TX tile staged in shared memory by a TX × BY
//! block (RPT rows per thread), written back along M.
//!
//! Hazards, each wrong on the task's odd configs (1000 × 1537, 100003 × 67, 7001 × 9007):
//! * `barrier`: no `__syncthreads()` between staging the tile and reading it transposed;
//! * `grid_x`, `grid_y`: the grid is `N / TX` (`M / TY`) blocks (with the persistent
//!   launch: that many tiles), assuming the size is a multiple of the tile: the last
//!   columns (rows) of `a` are never copied;
//! * `last_row`: the store guard is `< M - 1` (an inclusive bound written as exclusive): the
//!   last row of `a` is never copied.
//!
//! Speed knobs: the block `shape` (TX × BY threads, at least two warps, so that a missing
//! barrier is a race between warps), rows per thread, tile padding, unrolling,
//! `orientation`: `tiled` reads `a` along its rows and writes `t` along M (both coalesced);
//! `inverted` stages the tile by columns of `a` and writes `t` along N (the tile used the
//! wrong way round: both strided, still a transpose through shared memory). The superset
//! of the 2026-12-07 re-measure ([`SUPERSET`]) added `store`: `plain`; `fenced` (a `__threadfence()` after every store: each waits until its write is
//! visible device-wide, so a warp has one store in flight instead of several); `atomic`
//! (`atomicExch`: the L2 performs a read-modify-write, so the lines of `t` are read from
//! DRAM before they are written, a third more traffic); and `launch`: `full` (one block per
//! tile) or `persistent` (264 blocks, two per SM of a 132-SM H100/H200, walk the tiles: too
//! few warps resident to keep enough loads in flight to cover DRAM latency).

use super::{fill, pragma, Knob};

/// The measured space (docs/rl/table, 2,304 programs): the options the 2026-12-07
/// re-measure of [`SUPERSET`] picked (tools/gpu/rl-select.py, on an H100): one block shape,
/// and the slow `store` and `launch` options that make the near-best share 1 in 2,304.
#[rustfmt::skip]
pub const KNOBS: &[Knob] = &[
    Knob { name: "barrier", options: &["sync", "missing"], hazard: true },
    Knob { name: "grid_x", options: &["ceil", "floor"], hazard: true },
    Knob { name: "grid_y", options: &["ceil", "floor"], hazard: true },
    Knob { name: "last_row", options: &["M", "M-1"], hazard: true },
    Knob { name: "shape", options: &["64x4"], hazard: false },
    Knob { name: "rows_per_thread", options: &["1", "2", "4"], hazard: false },
    Knob { name: "pad", options: &["0", "1"], hazard: false },
    Knob { name: "unroll", options: &["none", "full"], hazard: false },
    Knob { name: "orientation", options: &["tiled", "inverted"], hazard: false },
    Knob { name: "store", options: &["plain", "fenced", "atomic"], hazard: false },
    Knob { name: "launch", options: &["full", "persistent"], hazard: false },
];

/// The superset of the 2026-12-07 re-measure (`program_table --superset`,
/// tools/gpu/rl-table2.sh): the 2026-12-02 space plus `store` and `launch` (13,824
/// programs, 864 hazard-free). `KNOBS` is this list narrowed to the picked options
/// (tools/gpu/rl-narrow.py).
#[rustfmt::skip]
pub const SUPERSET: &[Knob] = &[
    Knob { name: "barrier", options: &["sync", "missing"], hazard: true },
    Knob { name: "grid_x", options: &["ceil", "floor"], hazard: true },
    Knob { name: "grid_y", options: &["ceil", "floor"], hazard: true },
    Knob { name: "last_row", options: &["M", "M-1"], hazard: true },
    Knob { name: "shape", options: &["32x4", "64x4", "8x8", "8x16"], hazard: false },
    Knob { name: "rows_per_thread", options: &["1", "2", "4"], hazard: false },
    Knob { name: "pad", options: &["0", "1"], hazard: false },
    Knob { name: "unroll", options: &["none", "2", "full"], hazard: false },
    Knob { name: "orientation", options: &["tiled", "inverted"], hazard: false },
    Knob { name: "store", options: &["plain", "fenced", "atomic"], hazard: false },
    Knob { name: "launch", options: &["full", "persistent"], hazard: false },
];

/// The label of knob `name`'s chosen option (`render` reads options by label, so that a
/// subset of a knob's options renders the same sources), or the superset's first option
/// when `knobs` has no such knob.
fn opt(knobs: &[Knob], c: &[usize], name: &str) -> &'static str {
    match knobs.iter().position(|k| k.name == name) {
        Some(i) => knobs[i].options[c[i]],
        None => SUPERSET
            .iter()
            .find(|k| k.name == name)
            .map_or("", |k| k.options[0]),
    }
}

const TEMPLATE: &str = r#"// Transpose: $TY$ x $TX$ tile, $TX$ x $BY$ threads, $RPT$ rows per thread.
// @launch transpose_tile grid=($GRIDX$, $GRIDY$) block=($TX$, $BY$)
extern "C" __global__ void transpose_tile(const float* __restrict__ a, float* __restrict__ t,
                                          int M, int N) {
    __shared__ float tile[$TY$][$TX$ + $PAD$];
    const int tx = threadIdx.x, ty = threadIdx.y;
$BLOCKS$}
"#;

/// `launch=full`: one block per tile.
const FULL: &str = r#"    const int r0 = blockIdx.y * $TY$, c0 = blockIdx.x * $TX$;
    const int tid = ty * $TX$ + tx;
$BODY$"#;

/// `launch=persistent`: a grid of 264 blocks walks the tiles.
const PERSISTENT: &str = r#"    const int tid = ty * $TX$ + tx;
    const int tiles_x = $TILESX$, tiles = tiles_x * $TILESY$;
    for (int b = blockIdx.x; b < tiles; b += gridDim.x) {
    const int r0 = b / tiles_x * $TY$, c0 = b % tiles_x * $TX$;
$BODY$    __syncthreads();  // the next tile is staged over this one
    }
"#;

/// Blocks of the persistent launch: two per SM of a 132-SM H100/H200.
const PERSISTENT_BLOCKS: usize = 264;

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
        if (gr < N && gc < $MLIMIT$) $STORE$
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
        if (gr < N && gc < $MLIMIT$) $STORE$
    }
"#;

/// The store of `value` to `t` (the `store` knob, option label `store`).
fn store(store: &str, value: &str) -> String {
    let dst = "t[(size_t)gr * M + gc]";
    match store {
        "fenced" => format!("{{ {dst} = {value}; __threadfence(); }}"),
        "atomic" => format!("atomicExch(&{dst}, {value});"),
        _ => format!("{dst} = {value};"),
    }
}

/// `size / tile` blocks or tiles: rounded up, or (the `grid_*` hazards) down.
fn count(size: &str, tile: usize, floor: bool, device: bool) -> String {
    match (floor, device) {
        (true, _) => format!("{size} / {tile}"),
        (false, false) => format!("ceil_div({size}, {tile})"),
        (false, true) => format!("({size} + {tile} - 1) / {tile}"),
    }
}

/// Renders a checked choice of the measured space.
pub fn render(c: &[usize]) -> String {
    render_with(KNOBS, c)
}

/// Renders a checked choice of the superset.
pub fn render_superset(c: &[usize]) -> String {
    render_with(SUPERSET, c)
}

fn render_with(knobs: &[Knob], c: &[usize]) -> String {
    let opt = |name| opt(knobs, c, name);
    let (tx, by) = opt("shape")
        .split_once('x')
        .map(|(x, y)| (x.parse().unwrap_or(32), y.parse().unwrap_or(4)))
        .unwrap_or((32usize, 4usize));
    let rpt: usize = opt("rows_per_thread").parse().unwrap_or(1);
    let ty = by * rpt;
    let unroll = match opt("unroll") {
        "none" => 1,
        "2" => 2,
        _ => 0,
    };
    let (body, value) = if opt("orientation") == "inverted" {
        (INVERTED, "tile[oc][tx]")
    } else {
        (TILED, "tile[oc][orow]")
    };
    let persistent = opt("launch") == "persistent";
    let (blocks, gx, gy) = if persistent {
        (PERSISTENT, PERSISTENT_BLOCKS.to_string(), "1".to_string())
    } else {
        let (fx, fy) = (c[1] == 1, c[2] == 1);
        (FULL, count("N", tx, fx, false), count("M", ty, fy, false))
    };
    let template = TEMPLATE.replace("$BLOCKS$", blocks).replace("$BODY$", body);
    fill(
        &template,
        &[
            ("GRIDX", gx),
            ("GRIDY", gy),
            ("TILESX", count("N", tx, c[1] == 1, true)),
            ("TILESY", format!("({})", count("M", ty, c[2] == 1, true))),
            ("STORE", store(opt("store"), value)),
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
            ("PAD", opt("pad").into()),
        ],
    )
}
