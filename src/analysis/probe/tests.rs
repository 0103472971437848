use super::*;

fn probe(src: &str, grid: [u32; 3], block: [u32; 3], args: &[ProbeArg]) -> Vec<AccessProbe> {
    let tree = SourceTree::parse(src.as_bytes()).expect("parses");
    WarpProbe::new(&tree).run("k", grid, block, args)
}

/// The detailed probe of kernel `k` in `src`, one warp-sized block on a one-block grid.
fn one_warp_detailed(src: &str, args: &[ProbeArg]) -> KernelProbe {
    let tree = SourceTree::parse(src.as_bytes()).expect("parses");
    WarpProbe::new(&tree)
        .run_detailed("k", [1, 1, 1], [32, 1, 1], args)
        .expect("kernel k probed")
}

#[test]
fn one_thread_per_element_is_coalesced() {
    let p = probe(
            "extern \"C\" __global__ void k(const float* a, float* b, int n) {\n  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i < n) b[i] = 2.0f * a[i];\n}\n",
            [100, 1, 1],
            [256, 1, 1],
            &[ProbeArg::Buffer, ProbeArg::Buffer, ProbeArg::Int(25600)],
        );
    assert_eq!(p.len(), 2, "{p:?}");
    assert!(
        p.iter()
            .all(|a| a.lanes == 8 && a.sectors == 1 && a.ideal == 1),
        "{p:?}"
    );
}

#[test]
fn channel_fastest_mapping_is_seen_through_div_and_mod() {
    // The batchnorm2d_inference slow variant: i % c picks the channel, planes hw apart.
    let src = "extern \"C\" __global__ void k(const float* x, float* y, int n, int c, int hw) {\n  size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;\n  size_t total = (size_t)n * c * hw;\n  if (i >= total) return;\n  int ch = (int)(i % c);\n  size_t rest = i / c;\n  size_t img = rest / hw, s = rest % hw;\n  size_t off = (img * c + ch) * (size_t)hw + s;\n  y[off] = x[off];\n}\n";
    let p = probe(
        src,
        [1000, 1, 1],
        [256, 1, 1],
        &[
            ProbeArg::Buffer,
            ProbeArg::Buffer,
            ProbeArg::Int(8),
            ProbeArg::Int(64),
            ProbeArg::Int(4096),
        ],
    );
    assert_eq!(p.len(), 2, "{p:?}");
    assert!(p.iter().all(|a| a.sectors == 8 && a.ideal == 1), "{p:?}");
}

#[test]
fn deep_nesting_is_cut_off() {
    let deep = format!(
        "__global__ void k(float* y) {{ y[{}threadIdx.x{}] = 1.0f; {}{} }}",
        "(".repeat(20_000),
        ")".repeat(20_000),
        "{".repeat(5_000),
        "}".repeat(5_000)
    );
    let p = probe(&deep, [1, 1, 1], [32, 1, 1], &[ProbeArg::Buffer]);
    assert!(p.is_empty(), "{p:?}");
}

#[test]
fn unknown_indices_and_loops_do_not_panic() {
    let src = "__global__ void k(const int* idx, float* y, int n) {\n  for (int j = threadIdx.x; j < n; j += blockDim.x) { y[idx[j]] = 1.0f; while (n) { n--; } }\n}\n";
    let p = probe(
        src,
        [1, 1, 1],
        [128, 1, 1],
        &[ProbeArg::Buffer, ProbeArg::Buffer, ProbeArg::Int(1000)],
    );
    // idx[j] is known (coalesced); y[idx[j]] is not.
    assert_eq!(p.len(), 1, "{p:?}");
    assert_eq!(p[0].sectors, 1);
}

// Guards the trip counts the traffic features multiply by: a block-stride loop over n
// runs n / blockDim times on lane 0, a halving tree log2(blockDim) times, and a
// `__syncthreads` inside the tree counts once per level.
#[test]
fn loop_trip_counts_and_barriers_are_counted() {
    let src = "__global__ void k(const float* x, float* y, int n) {\n  __shared__ float s[256];\n  float acc = 0.0f;\n  for (int i = threadIdx.x; i < n; i += blockDim.x) acc += x[i];\n  s[threadIdx.x] = acc;\n  __syncthreads();\n  for (int h = blockDim.x / 2; h > 0; h >>= 1) {\n    if (threadIdx.x < h) s[threadIdx.x] += s[threadIdx.x + h];\n    __syncthreads();\n  }\n  if (threadIdx.x == 0) y[blockIdx.x] = s[0];\n}\n";
    let tree = SourceTree::parse(src.as_bytes()).unwrap();
    let k = WarpProbe::new(&tree)
        .run_detailed(
            "k",
            [4, 1, 1],
            [256, 1, 1],
            &[ProbeArg::Buffer, ProbeArg::Buffer, ProbeArg::Int(1 << 20)],
        )
        .unwrap();
    let global: Vec<&AccessDetail> = k
        .accesses
        .iter()
        .filter(|a| a.space == MemorySpace::Global)
        .collect();
    // x[i]: (2^20) / 256 = 4096 trips, and every block reads the same first addresses.
    assert!(global
        .iter()
        .any(|a| a.trips == 4096.0 && a.block_invariant));
    // 1 barrier after the store + 8 tree levels.
    assert_eq!(k.barriers, 9.0);
    let shared: Vec<&AccessDetail> = k
        .accesses
        .iter()
        .filter(|a| a.space == MemorySpace::Shared)
        .collect();
    assert!(!shared.is_empty());
    assert!(shared.iter().all(|a| a.bank_degree == 1), "{shared:?}");
    assert_eq!(k.spin_waits, 0);
}

// Guards the bank-degree estimate: a column walk of an unpadded 32×32 tile puts all 32
// lanes in one bank, the padded [32][33] tile spreads them.
#[test]
fn column_walk_of_an_unpadded_tile_conflicts_32_ways() {
    let src = |cols: u32| {
        format!(
                "__global__ void t(const float* x, float* y) {{\n  __shared__ float tile[32][{cols}];\n  tile[threadIdx.x][threadIdx.y] = x[threadIdx.x];\n  y[threadIdx.x] = tile[threadIdx.y][threadIdx.x];\n}}\n"
            )
    };
    for (cols, degree) in [(32, 32), (33, 1)] {
        let text = src(cols);
        let tree = SourceTree::parse(text.as_bytes()).unwrap();
        let k = WarpProbe::new(&tree)
            .run_detailed(
                "t",
                [1, 1, 1],
                [32, 8, 1],
                &[ProbeArg::Buffer, ProbeArg::Buffer],
            )
            .unwrap();
        let worst = k
            .accesses
            .iter()
            .filter(|a| a.space == MemorySpace::Shared)
            .map(|a| a.bank_degree)
            .max();
        assert_eq!(worst, Some(degree), "tile[32][{cols}]: {k:?}");
    }
}

// Guards trip extrapolation on conditions whose moving side is an expression: a loop that
// walks rows two at a time with `r + 1 < rows` (and its mirror `rows > r + 1`) runs
// (rows - 1) / 2 times, not once.
#[test]
fn trips_of_a_condition_on_an_expression_are_extrapolated() {
    for cond in ["r + 1 < rows", "rows > r + 1", "(r + 1 < rows)"] {
        let src = format!(
            "__global__ void k(const float* a, float* y, int rows) {{\n  float s = 0.0f;\n  int r = 0;\n  for (; {cond}; r += 2) s += a[r * 32 + threadIdx.x];\n  y[threadIdx.x] = s;\n}}\n"
        );
        let k = one_warp_detailed(
            &src,
            &[ProbeArg::Buffer, ProbeArg::Buffer, ProbeArg::Int(8193)],
        );
        assert_eq!(k.unknown_trips, 0, "{cond}: {k:?}");
        assert!(
            k.accesses.iter().any(|a| a.array == 0 && a.trips == 4096.0),
            "{cond}: {k:?}"
        );
    }
}

// Guards the choice of block: row_variance's reference runs 257 rows on 2 blocks of 256, so
// the middle block is the last one, where only lane 0 has a row. Probed there, the kernel
// seemed to read nothing, and its one-thread-per-row walk (32 sectors a warp, a row's
// stride apart) was estimated as a coalesced pass; block 0 sees the scattered walk.
#[test]
fn a_partial_middle_block_falls_back_to_block_zero() {
    let src = "extern \"C\" __global__ void k(const float* a, float* v, int rows, int cols) {\n  int r = blockIdx.x * blockDim.x + threadIdx.x;\n  if (r < rows) {\n    const float* ar = a + (size_t)r * cols;\n    float s = 0.0f;\n    for (int c = 0; c < cols; ++c) s += ar[c];\n    v[r] = s;\n  }\n}\n";
    let tree = SourceTree::parse(src.as_bytes()).expect("parses");
    let args = [
        ProbeArg::Buffer,
        ProbeArg::Buffer,
        ProbeArg::Int(257),
        ProbeArg::Int(262_147),
    ];
    let k = WarpProbe::new(&tree)
        .run_detailed("k", [2, 1, 1], [256, 1, 1], &args)
        .expect("kernel found");
    let row = k
        .accesses
        .iter()
        .find(|a| a.array == 0)
        .expect("the row walk is seen");
    assert_eq!((row.probe.lanes, row.probe.sectors), (8, 8), "{row:?}");
    assert_eq!(row.trips, 262_147.0);
    // A grid whose middle block is full still probes the middle block: same sectors.
    let full = WarpProbe::new(&tree).run(
        "k",
        [4, 1, 1],
        [256, 1, 1],
        &[
            ProbeArg::Buffer,
            ProbeArg::Buffer,
            ProbeArg::Int(1024),
            ProbeArg::Int(4),
        ],
    );
    assert!(full.iter().all(|a| a.lanes == 8), "{full:?}");
}

// Guards what the probe reads for memory parallelism: each access's unroll factor from the
// `#pragma unroll` before its loop (its count, the trips for a bare one, 1 for `unroll 1`
// and without a pragma, capped by the trips) and which accesses are stores.
#[test]
fn unroll_pragmas_and_stores_are_read_per_access() {
    let src = "__global__ void k(const float* x, float* y, int n) {\n\
               float s = 0.0f;\n\
               #pragma unroll 4\n\
               for (int i = 0; i < n; ++i) s += x[i * 32 + threadIdx.x];\n\
               #pragma unroll 1\n\
               for (int i = 0; i < n; ++i) s += x[i * 64 + threadIdx.x];\n\
               #pragma unroll\n\
               for (int i = 0; i < 8; ++i) s += x[i * 128 + threadIdx.x];\n\
               for (int i = 0; i < n; ++i) s += x[i * 256 + threadIdx.x];\n\
               #pragma unroll 16\n\
               for (int i = 0; i < 2; ++i) y[i * 32 + threadIdx.x] += s;\n\
               y[threadIdx.x] = s;\n\
               }\n";
    let k = one_warp_detailed(
        src,
        &[ProbeArg::Buffer, ProbeArg::Buffer, ProbeArg::Int(100)],
    );
    let got: Vec<(f64, f64, bool)> = k
        .accesses
        .iter()
        .map(|a| (a.trips, a.unroll, a.store))
        .collect();
    assert_eq!(
        got,
        [
            (100.0, 4.0, false),
            (100.0, 1.0, false),
            (8.0, 8.0, false),
            (100.0, 1.0, false),
            (2.0, 2.0, true),
            (1.0, 1.0, true),
        ]
    );
}
