//! `matmul` (C = A·B, row-major, m × k by k × n): shared-memory tiles of A (stored k-major)
//! and B, a register block of RM × RN outputs per thread.
//!
//! Hazards, each wrong on `small_odd` (257 × 383 × 511) whatever the tile:
//! * `barrier`: no `__syncthreads()` between staging the tiles and reading them (other
//!   warps' elements are read before they are written);
//! * `grid_m`, `grid_n`: the grid is `m / BM` (`n / BN`) blocks, assuming the size is a
//!   multiple of the tile: the last rows (columns) are never written;
//! * `k_tail`: `k / TK` tiles along k, assuming k is a multiple of TK: the last products
//!   are left out.

use super::{fill, Knob};

#[rustfmt::skip]
pub const KNOBS: &[Knob] = &[
    Knob { name: "barrier", options: &["sync", "missing"], hazard: true },
    Knob { name: "grid_m", options: &["ceil", "floor"], hazard: true },
    Knob { name: "grid_n", options: &["ceil", "floor"], hazard: true },
    Knob { name: "k_tail", options: &["ceil", "floor"], hazard: true },
    Knob { name: "threads", options: &["8x8", "16x16", "16x8", "8x16"], hazard: false },
    Knob { name: "reg_m", options: &["1", "2", "4", "8"], hazard: false },
    Knob { name: "reg_n", options: &["1", "2", "4", "8"], hazard: false },
    Knob { name: "tile_k", options: &["8", "16"], hazard: false },
    Knob { name: "pad", options: &["0", "1"], hazard: false },
];

const TEMPLATE: &str = r#"// GEMM: $BM$ x $BN$ block tile, $RM$ x $RN$ outputs per thread, k in steps of $TK$.
// @launch gemm grid=($GRIDX$, $GRIDY$) block=($TX$, $TY$)
extern "C" __global__ void gemm(const float* __restrict__ a, const float* __restrict__ b,
                                float* __restrict__ c, int m, int n, int k) {
    __shared__ float as[$TK$][$BM$ + $PAD$];  // the A tile, k-major
    __shared__ float bs[$TK$][$BN$ + $PAD$];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int tid = ty * $TX$ + tx;
    const int row0 = blockIdx.y * $BM$, col0 = blockIdx.x * $BN$;
    float acc[$RM$][$RN$];
    #pragma unroll
    for (int i = 0; i < $RM$; ++i) {
        #pragma unroll
        for (int j = 0; j < $RN$; ++j) acc[i][j] = 0.0f;
    }
    const int tiles = $TILES$;
    for (int t = 0; t < tiles; ++t) {
        const int k0 = t * $TK$;
        for (int e = tid; e < $BM$ * $TK$; e += $THREADS$) {
            const int r = e / $TK$, kk = e % $TK$;
            const int gr = row0 + r, gk = k0 + kk;
            as[kk][r] = (gr < m && gk < k) ? a[gr * k + gk] : 0.0f;
        }
        for (int e = tid; e < $TK$ * $BN$; e += $THREADS$) {
            const int kk = e / $BN$, cc = e % $BN$;
            const int gk = k0 + kk, gc = col0 + cc;
            bs[kk][cc] = (gk < k && gc < n) ? b[gk * n + gc] : 0.0f;
        }
$BARRIER$        #pragma unroll
        for (int kk = 0; kk < $TK$; ++kk) {
            float ra[$RM$], rb[$RN$];
            #pragma unroll
            for (int i = 0; i < $RM$; ++i) ra[i] = as[kk][ty + i * $TY$];
            #pragma unroll
            for (int j = 0; j < $RN$; ++j) rb[j] = bs[kk][tx + j * $TX$];
            #pragma unroll
            for (int i = 0; i < $RM$; ++i) {
                #pragma unroll
                for (int j = 0; j < $RN$; ++j) acc[i][j] += ra[i] * rb[j];
            }
        }
        __syncthreads();  // the tiles are overwritten next
    }
    #pragma unroll
    for (int i = 0; i < $RM$; ++i) {
        #pragma unroll
        for (int j = 0; j < $RN$; ++j) {
            const int r = row0 + ty + i * $TY$, cc = col0 + tx + j * $TX$;
            if (r < m && cc < n) c[r * n + cc] = acc[i][j];
        }
    }
}
"#;

/// Renders a checked choice.
pub fn render(c: &[usize]) -> String {
    let (tx, ty) = [(8, 8), (16, 16), (16, 8), (8, 16)][c[4]];
    let rm = [1, 2, 4, 8][c[5]];
    let rn = [1, 2, 4, 8][c[6]];
    let tk = [8, 16][c[7]];
    let (bm, bn) = (ty * rm, tx * rn);
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
            ("GRIDX", grid("n", bn, c[2] == 1)),
            ("GRIDY", grid("m", bm, c[1] == 1)),
            (
                "TILES",
                if c[3] == 1 {
                    format!("k / {tk}")
                } else {
                    format!("(k + {tk} - 1) / {tk}")
                },
            ),
            (
                "BARRIER",
                if c[0] == 1 {
                    String::new()
                } else {
                    "        __syncthreads();\n".into()
                },
            ),
            ("BM", bm.to_string()),
            ("BN", bn.to_string()),
            ("RM", rm.to_string()),
            ("RN", rn.to_string()),
            ("TK", tk.to_string()),
            ("TX", tx.to_string()),
            ("TY", ty.to_string()),
            ("THREADS", (tx * ty).to_string()),
            ("PAD", c[8].to_string()),
        ],
    )
}
