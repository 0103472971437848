//! `matmul`: C (m × n) = A (m × k) · B (k × n), row-major.

use super::{fill, unroll, Expect, Knob};

#[rustfmt::skip]
pub const KNOBS: &[Knob] = &[
    Knob { name: "style", options: &["naive", "naive_row_threads", "smem_tiled", "register_blocked"] },
    Knob { name: "tile", options: &["8", "16", "32"] },
    Knob { name: "regs", options: &["2", "4"] },
    Knob { name: "unroll", options: &["no", "yes"] },
];

const PARAMS: &str = "const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ c, int m, int n, int k";

pub fn render(ch: &[usize]) -> (String, Expect) {
    let style = ch[0];
    let t = [8, 16, 32][ch[1]];
    let r = [2, 4][ch[2]];
    let unrolled = ch[3] == 1;
    let src = match style {
        0 | 1 => {
            // One thread per element of C. Style 1 puts threadIdx.x along the rows, so the
            // lanes of a warp read A and write C with a stride of a whole row.
            let (row, col, grid) = if style == 0 {
                (
                    "blockIdx.y * T + threadIdx.y",
                    "blockIdx.x * T + threadIdx.x",
                    format!("ceil_div(n, {t}), ceil_div(m, {t})"),
                )
            } else {
                (
                    "blockIdx.x * T + threadIdx.x",
                    "blockIdx.y * T + threadIdx.y",
                    format!("ceil_div(m, {t}), ceil_div(n, {t})"),
                )
            };
            fill(
                r#"// @launch matmul_k grid=($GRID$) block=($T$, $T$)
#define T $T$
extern "C" __global__ void matmul_k($PARAMS$) {
    int row = $ROW$;
    int col = $COL$;
    if (row < m && col < n) {
        float acc = 0.0f;
$UNROLL$        for (int p = 0; p < k; ++p) acc += a[row * k + p] * b[p * n + col];
        c[row * n + col] = acc;
    }
}
"#,
                &[
                    ("GRID", grid),
                    ("T", t.to_string()),
                    ("PARAMS", PARAMS.to_string()),
                    ("ROW", row.to_string()),
                    ("COL", col.to_string()),
                    (
                        "UNROLL",
                        if unrolled {
                            "        #pragma unroll 4\n".into()
                        } else {
                            String::new()
                        },
                    ),
                ],
            )
        }
        2 => fill(
            r#"// @launch matmul_k grid=(ceil_div(n, $T$), ceil_div(m, $T$)) block=($T$, $T$)
#define T $T$
extern "C" __global__ void matmul_k($PARAMS$) {
    __shared__ float As[T][T];
    __shared__ float Bs[T][T];
    int tx = threadIdx.x, ty = threadIdx.y;
    int row = blockIdx.y * T + ty;
    int col = blockIdx.x * T + tx;
    float acc = 0.0f;
    for (int k0 = 0; k0 < k; k0 += T) {
        As[ty][tx] = (row < m && k0 + tx < k) ? a[row * k + k0 + tx] : 0.0f;
        Bs[ty][tx] = (k0 + ty < k && col < n) ? b[(k0 + ty) * n + col] : 0.0f;
        __syncthreads();
$UNROLL$        for (int p = 0; p < T; ++p) acc += As[ty][p] * Bs[p][tx];
        __syncthreads();
    }
    if (row < m && col < n) c[row * n + col] = acc;
}
"#,
            &[
                ("T", t.to_string()),
                ("PARAMS", PARAMS.to_string()),
                ("UNROLL", unroll(unrolled, "        ")),
            ],
        ),
        _ => {
            // BT × BT threads compute a (BT·R) × (BT·R) tile of C, R × R outputs each (rows
            // ty + BT·i, columns tx + BT·j), from (BT·R) × BT and BT × (BT·R) tiles of A and B
            // in shared memory; __launch_bounds__ caps registers so 1024-thread blocks launch.
            let tm = t * r;
            fill(
                r#"// @launch matmul_k grid=(ceil_div(n, $TM$), ceil_div(m, $TM$)) block=($THREADS$)
#define BT $T$
#define R $R$
#define TM $TM$
extern "C" __global__ void __launch_bounds__($THREADS$) matmul_k($PARAMS$) {
    __shared__ float As[TM][BT];
    __shared__ float Bs[BT][TM];
    int tid = threadIdx.x;
    int tx = tid % BT, ty = tid / BT;
    int row0 = blockIdx.y * TM, col0 = blockIdx.x * TM;
    float acc[R][R];
    #pragma unroll
    for (int i = 0; i < R; ++i)
        #pragma unroll
        for (int j = 0; j < R; ++j) acc[i][j] = 0.0f;
    for (int k0 = 0; k0 < k; k0 += BT) {
        #pragma unroll
        for (int l = 0; l < R; ++l) {
            int e = tid + BT * BT * l;
            int ar = e / BT, ac = e % BT;
            As[ar][ac] = (row0 + ar < m && k0 + ac < k) ? a[(row0 + ar) * k + k0 + ac] : 0.0f;
            int br = e / TM, bc = e % TM;
            Bs[br][bc] = (k0 + br < k && col0 + bc < n) ? b[(k0 + br) * n + col0 + bc] : 0.0f;
        }
        __syncthreads();
$UNROLL$        for (int p = 0; p < BT; ++p) {
            float av[R], bv[R];
            #pragma unroll
            for (int i = 0; i < R; ++i) av[i] = As[ty + BT * i][p];
            #pragma unroll
            for (int j = 0; j < R; ++j) bv[j] = Bs[p][tx + BT * j];
            #pragma unroll
            for (int i = 0; i < R; ++i)
                #pragma unroll
                for (int j = 0; j < R; ++j) acc[i][j] += av[i] * bv[j];
        }
        __syncthreads();
    }
    #pragma unroll
    for (int i = 0; i < R; ++i) {
        int rr = row0 + ty + BT * i;
        #pragma unroll
        for (int j = 0; j < R; ++j) {
            int cc = col0 + tx + BT * j;
            if (rr < m && cc < n) c[rr * n + cc] = acc[i][j];
        }
    }
}
"#,
                &[
                    ("T", t.to_string()),
                    ("R", r.to_string()),
                    ("TM", tm.to_string()),
                    ("THREADS", (t * t).to_string()),
                    ("PARAMS", PARAMS.to_string()),
                    ("UNROLL", unroll(unrolled, "        ")),
                ],
            )
        }
    };
    (src, Expect::Runs { risk: None })
}
