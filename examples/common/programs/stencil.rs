//! `stencil_1d`: 7-point weighted stencil (radius 3), the three elements at each end copied.

use super::{fill, unroll, Expect, Knob};

#[rustfmt::skip]
pub const KNOBS: &[Knob] = &[
    Knob { name: "block", options: &["128", "256", "1024"] },
    Knob { name: "items", options: &["1", "4", "16"] },
    Knob { name: "smem", options: &["global", "shared_tile"] },
    Knob { name: "sync", options: &["barrier", "none"] },
];

pub fn render(c: &[usize]) -> (String, Expect) {
    let block = [128, 256, 1024][c[0]];
    let items = [1, 4, 16][c[1]];
    let shared = c[2] == 1;
    let missing_barrier = shared && c[3] == 1;
    let unrolled = items > 1;
    let tile = block * items;
    let pragma = unroll(unrolled, "    ");
    let pragma_in = unroll(true, "                ");
    let (stage, read) = if shared {
        let barrier = if missing_barrier {
            "    // (no barrier: neighbours staged by other warps may not be there yet)\n"
        } else {
            "    __syncthreads();\n"
        };
        (
            format!(
                "    __shared__ float s[TILE + 6];\n    int t = threadIdx.x;\n{pragma}    for (int k = 0; k < ITEMS; ++k) {{\n        int i = base + t + k * BLOCK;\n        s[t + k * BLOCK + 3] = i < n ? in[i] : 0.0f;\n    }}\n    if (t < 3) {{\n        int l = base - 3 + t;\n        s[t] = l >= 0 ? in[l] : 0.0f;\n        int r = base + TILE + t;\n        s[TILE + 3 + t] = r < n ? in[r] : 0.0f;\n    }}\n{barrier}"
            ),
            ("s[lt + 3]", "s[lt + j]"),
        )
    } else {
        (
            "    int t = threadIdx.x;\n".to_string(),
            ("in[i]", "in[i - 3 + j]"),
        )
    };
    let src = fill(
        r#"// @launch stencil_k grid=(ceil_div(n, $TILE$)) block=($BLOCK$)
#define BLOCK $BLOCK$
#define ITEMS $ITEMS$
#define TILE $TILE$
extern "C" __global__ void stencil_k(const float* __restrict__ in, float* __restrict__ out, int n) {
    const float w[7] = {0.05f, 0.1f, 0.15f, 0.4f, 0.15f, 0.1f, 0.05f};
    int base = blockIdx.x * TILE;
$STAGE$$PRAGMA$    for (int k = 0; k < ITEMS; ++k) {
        int lt = t + k * BLOCK;
        int i = base + lt;
        if (i < n) {
            if (i < 3 || i >= n - 3) {
                out[i] = $CENTER$;
            } else {
                float acc = 0.0f;
$PRAGMA_IN$                for (int j = 0; j < 7; ++j) acc += w[j] * $TAP$;
                out[i] = acc;
            }
        }
    }
}
"#,
        &[
            ("BLOCK", block.to_string()),
            ("ITEMS", items.to_string()),
            ("TILE", tile.to_string()),
            ("STAGE", stage),
            ("PRAGMA", pragma),
            ("PRAGMA_IN", pragma_in),
            ("CENTER", read.0.to_string()),
            ("TAP", read.1.to_string()),
        ],
    );
    let expect = if shared && (tile + 6) * 4 > 48 * 1024 {
        Expect::CompileError("too much shared data")
    } else {
        Expect::Runs {
            risk: missing_barrier
                .then_some("no __syncthreads() between staging the tile and reading neighbours"),
        }
    };
    (src, expect)
}
