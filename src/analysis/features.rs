//! The serialisable feature types produced by [`analyze`](super::analyze).
//!
//! Every type here derives `Serialize`/`Deserialize`; field names are the JSON
//! keys and are part of the crate's stable interface (snake_case, never renamed
//! without a version bump). Counts are `u32`, byte totals `u64`, estimates `f64`.

use serde::{Deserialize, Serialize};

/// A source region, 1-based (line and column of the first and last byte).
///
/// JSON: `{"line", "column", "end_line", "end_column"}`. Columns count bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Span {
    /// First line, 1-based.
    pub line: u32,
    /// First column (byte), 1-based.
    pub column: u32,
    /// Last line, 1-based.
    pub end_line: u32,
    /// Column (byte) just past the end, 1-based.
    pub end_column: u32,
}

/// One notable construct with where it is and why it matters.
///
/// JSON: `{"kind", "span", "reason"}`; `kind` is a snake_case tag such as
/// `bank_conflict`, `divergent_barrier`, `grid_stride_loop`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Finding {
    /// Snake_case tag naming what was found.
    pub kind: String,
    /// Where it was found.
    pub span: Span,
    /// A short human-readable explanation, suitable for feedback.
    pub reason: String,
}

/// How consecutive `threadIdx.x` values map onto the elements of an access.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AccessClass {
    /// Unit stride in `threadIdx.x`: neighbouring threads touch neighbouring elements.
    Coalesced,
    /// `threadIdx.x` multiplied by a non-unit (constant or run-time) factor.
    Strided,
    /// No `threadIdx.x` dependence: every lane of a warp reads the same element.
    Uniform,
    /// The index was itself loaded from memory (gather/scatter).
    Indirect,
    /// The index could not be classified (non-linear, opaque call, ...).
    Unknown,
}

/// Whether an access reads, writes or does both (`+=`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AccessKind {
    /// A load.
    Read,
    /// A store.
    Write,
    /// A compound assignment: load then store.
    ReadWrite,
}

/// One classified global-memory access.
///
/// JSON: `{"span", "array", "access", "class", "stride", "in_loop", "bytes", "reason"}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AccessFinding {
    /// The subscript (or dereference) expression.
    pub span: Span,
    /// The kernel parameter the pointer derives from.
    pub array: String,
    /// Read, write or both.
    pub access: AccessKind,
    /// The classification.
    pub class: AccessClass,
    /// Element stride between consecutive `threadIdx.x` when known.
    pub stride: Option<i64>,
    /// Whether the access sits inside a loop body.
    pub in_loop: bool,
    /// Bytes moved per thread by this access (element size, vector width included).
    pub bytes: u32,
    /// Why it was classified so.
    pub reason: String,
}

/// Global-memory accesses of pointer parameters, by class.
///
/// JSON: `{"coalesced", "strided", "uniform", "indirect", "unknown", "in_loops",
/// "vector_accesses", "findings"}` (`findings` omitted in totals).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GlobalAccesses {
    /// Unit-stride accesses.
    pub coalesced: u32,
    /// Non-unit-stride accesses.
    pub strided: u32,
    /// Warp-uniform (broadcast) accesses.
    pub uniform: u32,
    /// Index loaded from memory.
    pub indirect: u32,
    /// Unclassifiable accesses.
    pub unknown: u32,
    /// Accesses inside loop bodies.
    pub in_loops: u32,
    /// Accesses through a vector type (`float4`, `half2`, ...).
    pub vector_accesses: u32,
    /// One entry per access.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub findings: Vec<AccessFinding>,
}

/// Shared-memory declarations and use.
///
/// JSON: `{"arrays", "static_bytes", "unresolved_sizes", "dynamic_arrays", "reads",
/// "writes", "accesses_in_loops", "bank_conflicts", "possible_bank_conflicts",
/// "padded_arrays", "findings"}`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SharedMemory {
    /// Number of `__shared__` declarations.
    pub arrays: u32,
    /// Statically declared bytes (arrays whose size evaluated to a constant).
    pub static_bytes: u64,
    /// Static arrays whose size could not be evaluated (template parameters, ...).
    pub unresolved_sizes: u32,
    /// `extern __shared__` (dynamic) arrays.
    pub dynamic_arrays: u32,
    /// Loads from shared memory.
    pub reads: u32,
    /// Stores to shared memory.
    pub writes: u32,
    /// Shared accesses inside loop bodies (data reuse).
    pub accesses_in_loops: u32,
    /// Accesses whose constant `threadIdx.x` stride maps several lanes to one bank.
    pub bank_conflicts: u32,
    /// Accesses whose `threadIdx.x` stride is a run-time value (may conflict).
    pub possible_bank_conflicts: u32,
    /// 2-D arrays whose row length is padded to an odd size (`[32][33]`).
    pub padded_arrays: u32,
    /// Declarations, conflicts, padding.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub findings: Vec<Finding>,
}

/// Barriers, warp-level primitives and atomics.
///
/// JSON: `{"syncthreads", "divergent_barriers", "barriers_after_divergent_return",
/// "syncwarp", "shuffles", "votes", "atomics_global", "atomics_shared",
/// "atomics_global_in_loops", "findings"}`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SyncFeatures {
    /// `__syncthreads()` (and `_count/_and/_or`) calls.
    pub syncthreads: u32,
    /// Barriers under a thread-dependent condition (deadlock / undefined behaviour).
    pub divergent_barriers: u32,
    /// Barriers reached after a thread-dependent early `return`.
    pub barriers_after_divergent_return: u32,
    /// `__syncwarp()` calls.
    pub syncwarp: u32,
    /// `__shfl_*_sync` (and cooperative-groups `shfl*`) calls.
    pub shuffles: u32,
    /// `__ballot_sync`, `__any_sync`, `__all_sync`, `__match_*_sync`.
    pub votes: u32,
    /// Atomics on global memory (or an unresolved address).
    pub atomics_global: u32,
    /// Atomics on shared memory.
    pub atomics_shared: u32,
    /// Global atomics inside loop bodies on addresses threads may share
    /// (data-dependent or uniform index): contention in hot loops.
    pub atomics_global_in_loops: u32,
    /// Barriers, atomics, divergent barriers.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub findings: Vec<Finding>,
}

/// Loop structure.
///
/// JSON: `{"loops", "max_nesting", "unrolled", "grid_stride", "constant_trip", "findings"}`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LoopFeatures {
    /// `for`, `while` and `do` loops.
    pub loops: u32,
    /// Deepest loop nesting (device functions inlined at their call).
    pub max_nesting: u32,
    /// Loops preceded by `#pragma unroll`.
    pub unrolled: u32,
    /// Grid-stride loops (index starts thread-dependent, steps by `blockDim*gridDim`).
    pub grid_stride: u32,
    /// Loops whose trip count is a compile-time constant.
    pub constant_trip: u32,
    /// One entry per loop.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub findings: Vec<Finding>,
}

/// Thread-dependent control flow.
///
/// JSON: `{"divergent_branches", "warp_uniform_branches", "bounds_checks",
/// "interleaved_modulo", "findings"}`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DivergenceFeatures {
    /// Branches whose condition varies within a warp.
    pub divergent_branches: u32,
    /// Thread-dependent branches that are uniform per warp (`warp_id == 0`, `tid < 64`).
    pub warp_uniform_branches: u32,
    /// Bounds checks `i < n` against a run-time size (at most one warp diverges).
    pub bounds_checks: u32,
    /// The interleaved-reduction test `tid % (2*s) == 0` (highly divergent).
    pub interleaved_modulo: u32,
    /// One entry per thread-dependent branch.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub findings: Vec<Finding>,
}

/// Memory-instruction choices.
///
/// JSON: `{"vector_types", "ldg", "restrict_params", "const_params", "pointer_params",
/// "async_copies", "findings"}`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct MemoryOps {
    /// Mentions of vector types (`float4`, `half2`, `int4`, ...).
    pub vector_types: u32,
    /// `__ldg` (and `__ldcg`/`__ldca`/`__ldcs`) calls.
    pub ldg: u32,
    /// Pointer parameters marked `__restrict__`.
    pub restrict_params: u32,
    /// Pointer parameters to `const` data.
    pub const_params: u32,
    /// Pointer parameters.
    pub pointer_params: u32,
    /// Asynchronous copies (`cp.async`, `__pipeline_memcpy_async`, `memcpy_async`).
    pub async_copies: u32,
    /// Vector types, `__ldg`, async copies.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub findings: Vec<Finding>,
}

/// Arithmetic.
///
/// JSON: `{"arith_ops_in_loops", "special_functions", "fma", "reduced_precision",
/// "tensor_core", "weighted_flops", "weighted_global_bytes", "findings"}`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ComputeFeatures {
    /// Arithmetic operators on data values inside loop bodies (unweighted).
    pub arith_ops_in_loops: u32,
    /// Calls of `expf`, `__expf`, `sqrtf`, `rsqrtf`, `sinf`, `tanhf`, ...
    pub special_functions: u32,
    /// `fma`, `fmaf`, `__fmaf_rn`, `__hfma`, ...
    pub fma: u32,
    /// Mentions of `half`, `__half`, `half2`, `__nv_bfloat16`, and half intrinsics.
    pub reduced_precision: u32,
    /// Tensor-core use: `wmma::` names, `mma_sync`, `mma`/`wgmma`/`ldmatrix` in inline asm.
    pub tensor_core: u32,
    /// Floating-point operations, each weighted by the constant trip counts of its loops.
    pub weighted_flops: f64,
    /// Global bytes, weighted the same way.
    pub weighted_global_bytes: f64,
    /// Issue cost of the special-function calls beyond the one FLOP each counts in
    /// `weighted_flops`, in FP32-lane slots and loop-weighted like it: about 4 for an SFU
    /// intrinsic (`__expf`), 16 for an accurate `expf`, 24 for `sinf`, 48 for `powf`
    /// ([`special_function_cost`](crate::analysis::special_function_cost)). Calls of the
    /// unsuffixed names (`exp`, `cos`, `pow`) are in `weighted_unsuffixed_math` instead.
    #[serde(default)]
    pub weighted_special_cost: f64,
    /// Loop-weighted calls of unsuffixed math names (`exp`, `cos`, `pow`, `sqrt`): the
    /// float overload on a float and a long FP64 routine on a `double`, so what they cost
    /// depends on `fp64_mentions`.
    #[serde(default)]
    pub weighted_unsuffixed_math: f64,
    /// Mentions of the `double` type.
    #[serde(default)]
    pub fp64_mentions: u32,
    /// Special functions, FMAs, tensor cores, reduced precision.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub findings: Vec<Finding>,
}

/// Everything known about one `__global__` function (its device callees inlined).
///
/// JSON: `{"name", "span", "device_functions", "global_accesses", "shared", "sync",
/// "loops", "divergence", "memory_ops", "compute", "arithmetic_intensity"}`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct KernelFeatures {
    /// The kernel's name.
    pub name: String,
    /// The whole function definition.
    pub span: Span,
    /// `__device__` functions reached from the kernel (inlined into its features).
    pub device_functions: Vec<String>,
    /// Global-memory accesses.
    pub global_accesses: GlobalAccesses,
    /// Shared memory.
    pub shared: SharedMemory,
    /// Synchronisation, warp primitives, atomics.
    pub sync: SyncFeatures,
    /// Loops.
    pub loops: LoopFeatures,
    /// Divergence.
    pub divergence: DivergenceFeatures,
    /// Memory-instruction choices.
    pub memory_ops: MemoryOps,
    /// Arithmetic.
    pub compute: ComputeFeatures,
    /// `weighted_flops / weighted_global_bytes` (0 when no global bytes), see
    /// [`ComputeFeatures`]: FLOPs count `+ - * /` and compound assignments whose
    /// operand is a data value (loaded, floating-point or a call result), an FMA
    /// counting 2; each operation and each global access is weighted by the product
    /// of the constant trip counts of its enclosing loops (unknown trip counts weigh 1),
    /// so a 32-iteration shared-memory inner loop counts 32 times its loads from
    /// global memory in the tile loop around it.
    pub arithmetic_intensity: f64,
}

/// Counts summed over all kernels of a candidate (findings omitted).
///
/// JSON: `{"kernels", "global_accesses", "shared", "sync", "loops", "divergence",
/// "memory_ops", "compute", "arithmetic_intensity"}`; `loops.max_nesting` is the
/// maximum, `arithmetic_intensity` the ratio of the summed weighted FLOPs and bytes.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Totals {
    /// Number of `__global__` functions.
    pub kernels: u32,
    /// Summed global accesses.
    pub global_accesses: GlobalAccesses,
    /// Summed shared memory.
    pub shared: SharedMemory,
    /// Summed synchronisation.
    pub sync: SyncFeatures,
    /// Summed loops (`max_nesting` is a maximum).
    pub loops: LoopFeatures,
    /// Summed divergence.
    pub divergence: DivergenceFeatures,
    /// Summed memory operations.
    pub memory_ops: MemoryOps,
    /// Summed arithmetic.
    pub compute: ComputeFeatures,
    /// Summed weighted FLOPs over summed weighted global bytes.
    pub arithmetic_intensity: f64,
}

/// Parse-level health: a graded signal for the reward's syntax stage.
///
/// JSON: `{"error_nodes", "missing_nodes", "grammar_gaps", "truncated", "parse_failed"}`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SyntaxFeatures {
    /// tree-sitter `ERROR` nodes.
    pub error_nodes: u32,
    /// tree-sitter `MISSING` nodes (tokens the parser had to invent).
    pub missing_nodes: u32,
    /// Error and missing nodes moved out of the two counts above by
    /// [`SyntaxFeatures::attribute_to_grammar`]: the code compiled, so they were the
    /// grammar's.
    #[serde(default)]
    pub grammar_gaps: u32,
    /// The input exceeded the size cap or the analysis budget and was cut short.
    pub truncated: bool,
    /// The parser produced no tree at all.
    pub parse_failed: bool,
}

impl SyntaxFeatures {
    /// Moves the error and missing nodes to [`SyntaxFeatures::grammar_gaps`]: for code that
    /// NVRTC compiled, whatever tree-sitter-cuda could not parse is a gap of the grammar,
    /// never a syntax error of the code (and must not cost it structure score).
    pub fn attribute_to_grammar(&mut self) {
        self.grammar_gaps = self
            .grammar_gaps
            .saturating_add(self.error_nodes)
            .saturating_add(self.missing_nodes);
        self.error_nodes = 0;
        self.missing_nodes = 0;
    }
}

/// Structural features of one candidate source file.
///
/// JSON: `{"kernels": [KernelFeatures...], "totals": Totals, "syntax": SyntaxFeatures}`.
/// See each type for its keys; `findings` arrays are omitted when empty.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Features {
    /// One entry per `__global__` function, in source order.
    pub kernels: Vec<KernelFeatures>,
    /// Sums over `kernels`.
    pub totals: Totals,
    /// Parse health.
    pub syntax: SyntaxFeatures,
}

impl Features {
    /// Recomputes [`Features::totals`] from [`Features::kernels`].
    pub fn recompute_totals(&mut self) {
        let mut t = Totals {
            kernels: u32::try_from(self.kernels.len()).unwrap_or(u32::MAX),
            ..Totals::default()
        };
        for k in &self.kernels {
            let (g, a) = (&mut t.global_accesses, &k.global_accesses);
            g.coalesced += a.coalesced;
            g.strided += a.strided;
            g.uniform += a.uniform;
            g.indirect += a.indirect;
            g.unknown += a.unknown;
            g.in_loops += a.in_loops;
            g.vector_accesses += a.vector_accesses;
            let (s, b) = (&mut t.shared, &k.shared);
            s.arrays += b.arrays;
            s.static_bytes = s.static_bytes.saturating_add(b.static_bytes);
            s.unresolved_sizes += b.unresolved_sizes;
            s.dynamic_arrays += b.dynamic_arrays;
            s.reads += b.reads;
            s.writes += b.writes;
            s.accesses_in_loops += b.accesses_in_loops;
            s.bank_conflicts += b.bank_conflicts;
            s.possible_bank_conflicts += b.possible_bank_conflicts;
            s.padded_arrays += b.padded_arrays;
            let (y, c) = (&mut t.sync, &k.sync);
            y.syncthreads += c.syncthreads;
            y.divergent_barriers += c.divergent_barriers;
            y.barriers_after_divergent_return += c.barriers_after_divergent_return;
            y.syncwarp += c.syncwarp;
            y.shuffles += c.shuffles;
            y.votes += c.votes;
            y.atomics_global += c.atomics_global;
            y.atomics_shared += c.atomics_shared;
            y.atomics_global_in_loops += c.atomics_global_in_loops;
            let (l, d) = (&mut t.loops, &k.loops);
            l.loops += d.loops;
            l.max_nesting = l.max_nesting.max(d.max_nesting);
            l.unrolled += d.unrolled;
            l.grid_stride += d.grid_stride;
            l.constant_trip += d.constant_trip;
            let (v, e) = (&mut t.divergence, &k.divergence);
            v.divergent_branches += e.divergent_branches;
            v.warp_uniform_branches += e.warp_uniform_branches;
            v.bounds_checks += e.bounds_checks;
            v.interleaved_modulo += e.interleaved_modulo;
            let (m, f) = (&mut t.memory_ops, &k.memory_ops);
            m.vector_types += f.vector_types;
            m.ldg += f.ldg;
            m.restrict_params += f.restrict_params;
            m.const_params += f.const_params;
            m.pointer_params += f.pointer_params;
            m.async_copies += f.async_copies;
            let (c, h) = (&mut t.compute, &k.compute);
            c.arith_ops_in_loops += h.arith_ops_in_loops;
            c.special_functions += h.special_functions;
            c.fma += h.fma;
            c.reduced_precision += h.reduced_precision;
            c.tensor_core += h.tensor_core;
            c.weighted_flops += h.weighted_flops;
            c.weighted_global_bytes += h.weighted_global_bytes;
            c.weighted_special_cost += h.weighted_special_cost;
            c.weighted_unsuffixed_math += h.weighted_unsuffixed_math;
            c.fp64_mentions += h.fp64_mentions;
        }
        t.arithmetic_intensity =
            intensity(t.compute.weighted_flops, t.compute.weighted_global_bytes);
        self.totals = t;
    }
}

/// FLOPs per byte, 0 when no bytes move (a kernel without global traffic has no
/// meaningful intensity; the score treats 0 as "unknown", not "bad").
pub(crate) fn intensity(flops: f64, bytes: f64) -> f64 {
    if bytes > 0.0 && flops.is_finite() {
        flops / bytes
    } else {
        0.0
    }
}
