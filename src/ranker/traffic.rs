//! Memory-traffic, reuse and serial-work features: what a launch plan costs in bytes,
//! barriers and serial steps, from the resolved plan and the warp probe's loop trip counts
//! ([`WarpProbe::run_detailed`]), plus an analytical time estimate the model corrects.
//!
//! The source and launch features see *how* a kernel indexes memory; they cannot see how
//! much it moves. Two kernels with the same coalesced loop differ by 256× when one block
//! sweeps the whole input per histogram bin; a tree reduction's eight barriers per 256
//! elements and a one-block Blelloch pass of hundreds of barriers look like one
//! `__syncthreads` in a loop. Here the probe runs each launch's index arithmetic with the
//! real sizes, counts each access's loop trips on lane 0 of the middle block, and compares
//! the addresses with the next block's (the same address: every block re-reads it).
//!
//! Per launch `l` (grid `B` blocks of `T` threads, `threads = B·T`), with the H200 as the
//! reference device ([`H200`]):
//!
//! * requested bytes `R_l = Σ_a threads · trips_a · bytes_a · sectors_a / ideal_a` over the
//!   probed global accesses (a scattered warp pays whole sectors);
//! * unique bytes `U_l = Σ` over the buffers those accesses touch of `len · bytes`;
//! * redundant bytes `max(0, R_l − U_l)`: re-reads, from L2 while `U_l` fits in L2, from DRAM
//!   for the part that does not (`miss = max(0, 1 − L2 / U_l)`);
//! * DRAM bytes `D_l = min(R_l, U_l) + redundant · miss` (`U_l` when the probe saw no access);
//! * reuse working set per SM: resident threads × the bytes each thread sweeps in loops over
//!   a buffer it sweeps more than once (a row kept for a second pass), against L1 and, over
//!   the active SMs, against L2;
//! * shared-memory wavefronts: `threads / 32 · Σ trips · bank degree` over shared accesses;
//! * barriers: `B · barriers per thread` (the probe's `__syncthreads` count with trips);
//! * serial work: barriers of launches that cannot fill the SMs, and blocks of launches that
//!   spin on global memory (an inter-block chain or decoupled look-back).
//!
//! Time estimate (µs): `Σ_l max(M_l, C_l) + L2 re-reads / L2 bw + shared wavefronts /
//! (active SMs · clock) + waves · barriers · 0.1 µs + chain blocks · 0.5 µs + 2.5 µs per
//! launch`, where
//!
//! * memory time `M_l = D_l / bw_l` with `bw_l = min(DRAM bandwidth, active SMs · per-SM
//!   bandwidth, resident threads · bytes each keeps in flight / DRAM latency)`: a one-block
//!   pass streams at one SM's rate, and a grid of a few thousand threads that each walk a
//!   column cannot keep enough loads in flight to stream at all (Little's law, 0.5 µs
//!   latency; each global access of the thread counts once, a load in a loop once per
//!   iteration a `#pragma unroll N` unrolls — unless the kernel stores in a loop through
//!   pointers that are not all `__restrict__`, which orders each load after the last store,
//!   or runs a device fence in a loop; each device fence adds a round trip shared by the
//!   loads between two fences);
//! * compute time `C_l = threads · slots / (active SMs · 128 lanes · clock)`, with slots the
//!   loop-weighted FLOPs (doubled in a kernel that uses `double`) plus each special
//!   function's cost (4 for `__expf`, 16 for `expf`, 48 for `powf`, ~128 for an FP64
//!   `exp`/`cos`; [`special_function_cost`](crate::analysis::special_function_cost)).
//!
//! The constants are round public figures, not fitted: the estimate is an input the model
//! corrects, not a prediction.
//!
//! | name | value |
//! |---|---|
//! | `traffic_dram_bytes_per_element` | `ln(1 + Σ D_l / N)` |
//! | `traffic_redundant_reads` | `ln(1 + Σ redundant / Σ U_l)` |
//! | `traffic_block_invariant_reads` | `ln(1 + Σ R_l of block-invariant accesses / Σ U_l)`: data every block re-reads |
//! | `traffic_reuse_set_l1` | `ln(1 + max_l reuse set per SM / L1)` |
//! | `traffic_reuse_set_l2` | `ln(1 + max_l reuse set over active SMs / L2)` |
//! | `traffic_shared_wavefronts_per_element` | `ln(1 + Σ wavefronts / N)` |
//! | `traffic_bank_conflict_excess` | `ln(1 + Σ conflict wavefronts beyond 1 / N)` |
//! | `traffic_barriers_per_element` | `ln(1 + 256 · Σ B_l · barriers_l / N)` (barriers per 256 elements) |
//! | `traffic_serial_barriers` | `ln(1 + Σ_{B_l < SMs} barriers_l)`: barrier chain of one-block / small passes |
//! | `traffic_chain_blocks` | `ln(1 + Σ_{l spins} B_l)`: blocks in an inter-block chain |
//! | `traffic_unknown_trips` | `ln(1 + loops whose trip count is unknown)`: how much the probe missed |
//! | `traffic_memory_time_us` | `ln(1 + Σ M_l in µs)` |
//! | `traffic_compute_time_us` | `ln(1 + Σ C_l in µs)` |
//! | `traffic_estimated_time_us` | `ln(estimate in µs)` |
//!
//! Every value is finite.
//!
//! [`WarpProbe::run_detailed`]: crate::analysis::WarpProbe::run_detailed

use super::error::Result;
use super::launch::{detailed_probes, ln1p, param_lens, tree_for, LaunchInput};
use crate::analysis::{Features, KernelFeatures, KernelProbe, MemorySpace};
use crate::candidate::{ResolvedArg, ResolvedLaunch};

/// Prefix of every traffic feature name.
pub const TRAFFIC_PREFIX: &str = "traffic_";

/// The analytical time estimate's feature (`ln(1 + t̂)`, t̂ in µs), which
/// [`RankerConfig::estimate_weight`](super::RankerConfig::estimate_weight) adds back to
/// the model's score.
pub const ESTIMATE_FEATURE: &str = "traffic_estimated_time_us";

/// Names of the traffic features, in the order [`traffic_features`] returns them.
pub const TRAFFIC_FEATURE_NAMES: &[&str] = &[
    "traffic_dram_bytes_per_element",
    "traffic_redundant_reads",
    "traffic_block_invariant_reads",
    "traffic_reuse_set_l1",
    "traffic_reuse_set_l2",
    "traffic_shared_wavefronts_per_element",
    "traffic_bank_conflict_excess",
    "traffic_barriers_per_element",
    "traffic_serial_barriers",
    "traffic_chain_blocks",
    "traffic_unknown_trips",
    "traffic_memory_time_us",
    "traffic_compute_time_us",
    "traffic_estimated_time_us",
];

/// The reference device of the estimate: round public figures of an NVIDIA H200.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Device {
    /// Streaming multiprocessors.
    pub sms: f64,
    /// Sustained DRAM bandwidth, bytes/s.
    pub dram_bw: f64,
    /// DRAM bandwidth one SM can pull alone, bytes/s.
    pub sm_bw: f64,
    /// L2 bandwidth, bytes/s.
    pub l2_bw: f64,
    /// L2 capacity, bytes.
    pub l2_bytes: f64,
    /// L1 / shared capacity per SM, bytes.
    pub l1_bytes: f64,
    /// Shared memory per SM available to blocks, bytes.
    pub smem_bytes: f64,
    /// Resident threads per SM.
    pub threads_per_sm: f64,
    /// Resident blocks per SM.
    pub blocks_per_sm: f64,
    /// SM clock, Hz (one shared-memory wavefront per cycle).
    pub clock: f64,
    /// Seconds per launch.
    pub launch_s: f64,
    /// Seconds per barrier on a block's critical path.
    pub barrier_s: f64,
    /// Seconds per block of an inter-block chain.
    pub chain_s: f64,
    /// DRAM latency under load, seconds: with `B` bytes in flight a launch streams at most
    /// `B / latency` (Little's law).
    pub dram_latency_s: f64,
    /// FP32 lanes per SM (issue slots per cycle for the compute estimate).
    pub fp32_lanes: f64,
}

/// NVIDIA H200 (SXM): 132 SMs, 4.8 TB/s HBM3e (4.0 sustained), 50 MB L2, 256 KB L1 per SM.
pub const H200: Device = Device {
    sms: 132.0,
    dram_bw: 4.0e12,
    sm_bw: 60e9,
    l2_bw: 10e12,
    l2_bytes: 50e6,
    l1_bytes: 256.0 * 1024.0,
    smem_bytes: 228.0 * 1024.0,
    threads_per_sm: 2048.0,
    blocks_per_sm: 32.0,
    clock: 1.7e9,
    launch_s: 2.5e-6,
    barrier_s: 0.1e-6,
    chain_s: 0.5e-6,
    dram_latency_s: 0.5e-6,
    fp32_lanes: 128.0,
};

/// Totals over a plan's launches.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct Totals {
    dram: f64,
    unique: f64,
    redundant: f64,
    invariant: f64,
    reuse_l1: f64,
    reuse_l2: f64,
    wavefronts: f64,
    conflict_excess: f64,
    barriers: f64,
    serial_barriers: f64,
    chain_blocks: f64,
    unknown_trips: f64,
    memory_seconds: f64,
    compute_seconds: f64,
    seconds: f64,
}

/// The traffic features of `input` with the structure analysis' `features` of the same
/// source, as `(name, value)` pairs in [`TRAFFIC_FEATURE_NAMES`] order. `what` names the
/// source in errors.
pub fn traffic_features_named(
    input: &LaunchInput<'_>,
    features: &Features,
    what: &str,
) -> Result<Vec<(&'static str, f32)>> {
    let mut parsed = None;
    let probed = detailed_probes(input, tree_for(input.tree, input.source, &mut parsed));
    traffic_features_with(input, features, what, &probed)
}

/// [`traffic_features_named`] from the launches' detailed probes ([`detailed_probes`], one
/// per launch in plan order).
pub(crate) fn traffic_features_with(
    input: &LaunchInput<'_>,
    features: &Features,
    what: &str,
    probed: &[Option<KernelProbe>],
) -> Result<Vec<(&'static str, f32)>> {
    let LaunchInput {
        task, config, plan, ..
    } = *input;
    let lens = param_lens(task, config, what)?;
    let n = lens.iter().copied().max().unwrap_or(0).max(1) as f64;
    let nothing_probed = KernelProbe::default();
    let mut t = Totals::default();
    for (li, l) in plan.launches.iter().enumerate() {
        let base = l.kernel.split('<').next().unwrap_or(&l.kernel).trim();
        let kernel = features.kernels.iter().find(|k| k.name == base);
        let kp = probed
            .get(li)
            .and_then(Option::as_ref)
            .unwrap_or(&nothing_probed);
        let arg_len = |i: usize| -> f64 {
            match l.args.get(i) {
                Some(ResolvedArg::Param { index }) => lens.get(*index).copied().unwrap_or(0) as f64,
                Some(ResolvedArg::Scratch { index }) => {
                    plan.scratch_lens.get(*index).copied().unwrap_or(0) as f64
                }
                _ => 0.0,
            }
        };
        t.add_launch(l, kernel, kp, &arg_len, &H200);
    }
    Ok(t.named(n))
}

/// A launch's shape on the device: blocks, threads, and how many fit on the SMs.
struct LaunchShape {
    blocks: f64,
    threads: f64,
    /// Blocks resident per SM.
    bps: f64,
    active_sms: f64,
    resident_threads: f64,
}

impl LaunchShape {
    fn of(l: &ResolvedLaunch, kernel: Option<&KernelFeatures>, d: &Device) -> LaunchShape {
        let blocks = l
            .grid
            .iter()
            .map(|&g| f64::from(g))
            .product::<f64>()
            .max(1.0);
        let block = l
            .block
            .iter()
            .map(|&b| f64::from(b))
            .product::<f64>()
            .max(1.0);
        // Occupancy from the block size and shared memory (registers are not known here).
        let smem = kernel.map_or(0.0, |k| k.shared.static_bytes as f64) + f64::from(l.smem);
        let mut bps = (d.threads_per_sm / block)
            .floor()
            .clamp(1.0, d.blocks_per_sm);
        if smem > 0.0 {
            bps = bps.min((d.smem_bytes / smem).floor().max(1.0));
        }
        LaunchShape {
            blocks,
            threads: blocks * block,
            bps,
            active_sms: blocks.min(d.sms),
            resident_threads: bps.min((blocks / d.sms).ceil()) * block,
        }
    }
}

/// The probed accesses of one launch, summed.
#[derive(Default)]
struct Tally {
    requested: f64,
    invariant: f64,
    wavefronts: f64,
    excess: f64,
    /// Each global array once: (parameter, bytes).
    unique_arrays: Vec<(usize, f64)>,
    /// Arrays swept in loops: (array, loop accesses, bytes).
    sweeps: Vec<(usize, usize, f64)>,
}

impl Tally {
    fn of(kp: &KernelProbe, s: &LaunchShape, arg_len: &dyn Fn(usize) -> f64) -> Tally {
        let mut t = Tally::default();
        let threads = s.threads;
        for a in &kp.accesses {
            let bytes = f64::from(a.elem_bytes);
            match a.space {
                MemorySpace::Global => {
                    let waste = f64::from(a.probe.sectors) / f64::from(a.probe.ideal.max(1));
                    let r = threads * a.trips * bytes * waste.max(1.0);
                    t.requested += r;
                    if a.block_invariant && s.blocks > 1.0 {
                        t.invariant += r;
                    }
                    if !t.unique_arrays.iter().any(|&(i, _)| i == a.array) {
                        t.unique_arrays.push((a.array, arg_len(a.array) * bytes));
                    }
                    if a.trips > 1.0 {
                        match t.sweeps.iter_mut().find(|s| s.0 == a.array) {
                            Some(s) => {
                                s.1 += 1;
                                s.2 = s.2.max(a.trips * bytes);
                            }
                            None => t.sweeps.push((a.array, 1, a.trips * bytes)),
                        }
                    }
                }
                MemorySpace::Shared => {
                    let deg = f64::from(a.bank_degree.max(1));
                    t.wavefronts += threads / 32.0 * a.trips * deg;
                    t.excess += threads / 32.0 * a.trips * (deg - 1.0);
                }
            }
        }
        t
    }
}

impl Totals {
    /// Adds launch `l` of `kernel` (its analysis, if found), probed as `kp`; `arg_len(i)`
    /// is the element count of its `i`-th argument.
    fn add_launch(
        &mut self,
        l: &ResolvedLaunch,
        kernel: Option<&KernelFeatures>,
        kp: &KernelProbe,
        arg_len: &dyn Fn(usize) -> f64,
        d: &Device,
    ) {
        let s = LaunchShape::of(l, kernel, d);
        let a = Tally::of(kp, &s, arg_len);
        let requested = a.requested;
        let mut unique: f64 = a.unique_arrays.iter().map(|&(_, b)| b).sum();
        let dram = if kp.accesses.iter().any(|a| a.space == MemorySpace::Global) {
            let redundant = (requested - unique).max(0.0);
            let miss = if unique > 0.0 {
                (1.0 - d.l2_bytes / unique).max(0.0)
            } else {
                0.0
            };
            self.redundant += redundant;
            self.seconds += redundant * (1.0 - miss) / d.l2_bw;
            requested.min(unique) + redundant * miss
        } else {
            // Nothing probed: one pass over the largest buffer it is handed (4-byte elements).
            unique = (0..l.args.len()).map(arg_len).fold(0.0, f64::max) * 4.0;
            unique
        };
        // Bytes a thread sweeps more than once (a row kept for its second pass).
        let reuse_per_thread: f64 = a.sweeps.iter().filter(|s| s.1 > 1).map(|s| s.2).sum();
        let reuse_sm = s.resident_threads * reuse_per_thread;
        self.reuse_l1 = self.reuse_l1.max(reuse_sm / d.l1_bytes);
        self.reuse_l2 = self.reuse_l2.max(reuse_sm * s.active_sms / d.l2_bytes);
        self.dram += dram;
        self.unique += unique;
        self.invariant += a.invariant;
        self.wavefronts += a.wavefronts;
        self.conflict_excess += a.excess;
        self.barriers += s.blocks * kp.barriers;
        if s.blocks < d.sms {
            self.serial_barriers += kp.barriers;
        }
        let spins = kp.spin_waits > 0;
        if spins {
            self.chain_blocks += s.blocks;
        }
        self.unknown_trips += f64::from(kp.unknown_trips);

        let (memory, compute) = times(dram, &s, kernel, kp, d);
        self.memory_seconds += memory;
        self.compute_seconds += compute;
        let waves = (s.blocks / (s.active_sms * s.bps)).ceil();
        self.seconds += memory.max(compute)
            + a.wavefronts / (s.active_sms * d.clock)
            + waves * kp.barriers * d.barrier_s
            + if spins { s.blocks * d.chain_s } else { 0.0 }
            + d.launch_s;
    }

    /// The features, in [`TRAFFIC_FEATURE_NAMES`] order, for a problem of `n` elements.
    fn named(&self, n: f64) -> Vec<(&'static str, f32)> {
        let t = self;
        let unique = t.unique.max(1.0);
        vec![
            ("traffic_dram_bytes_per_element", ln1p(t.dram / n)),
            ("traffic_redundant_reads", ln1p(t.redundant / unique)),
            ("traffic_block_invariant_reads", ln1p(t.invariant / unique)),
            ("traffic_reuse_set_l1", ln1p(t.reuse_l1)),
            ("traffic_reuse_set_l2", ln1p(t.reuse_l2)),
            (
                "traffic_shared_wavefronts_per_element",
                ln1p(t.wavefronts / n),
            ),
            ("traffic_bank_conflict_excess", ln1p(t.conflict_excess / n)),
            ("traffic_barriers_per_element", ln1p(256.0 * t.barriers / n)),
            ("traffic_serial_barriers", ln1p(t.serial_barriers)),
            ("traffic_chain_blocks", ln1p(t.chain_blocks)),
            ("traffic_unknown_trips", ln1p(t.unknown_trips)),
            ("traffic_memory_time_us", ln1p(t.memory_seconds * 1e6)),
            ("traffic_compute_time_us", ln1p(t.compute_seconds * 1e6)),
            ("traffic_estimated_time_us", ln1p(t.seconds * 1e6)),
        ]
    }
}

/// A launch's memory and compute times (seconds): `dram` bytes over the smallest of DRAM
/// bandwidth, the active SMs' share and what the resident threads keep in flight (one of
/// each global access, Little's law); issue slots per thread on the active SMs' lanes.
fn times(
    dram: f64,
    s: &LaunchShape,
    kernel: Option<&KernelFeatures>,
    kp: &KernelProbe,
    d: &Device,
) -> (f64, f64) {
    let per_thread = bytes_in_flight(kp, kernel);
    let resident = s.threads.min(s.active_sms * s.resident_threads);
    let mut bw = d.dram_bw.min(s.active_sms * d.sm_bw);
    if per_thread > 0.0 {
        bw = bw.min(resident * per_thread / d.dram_latency_s);
    }
    let compute =
        s.threads * kernel.map_or(0.0, compute_slots) / (s.active_sms * d.fp32_lanes * d.clock);
    (dram / bw, compute)
}

/// Bytes one thread of `kp` keeps in flight: each global access once, and a load inside a
/// loop once for each iteration the compiler unrolls (`AccessDetail::unroll`: their loads
/// can be issued together) — unless the kernel stores in a loop through a pointer the
/// compiler must assume aliases the loaded one (not every pointer `__restrict__`): then
/// each iteration's load waits for the last iteration's store, which needs the value it
/// loaded (a running sum written per row).
///
/// A device fence (`__threadfence`) waits until the thread's earlier writes are
/// acknowledged, a second round trip before the next load can issue: the bytes count once
/// per `1 + min(1, fences / loads)` round trips (a fence after every store of a copy loop
/// halves them, one after the loop costs nothing), and a fence inside a loop keeps its
/// iterations apart, so they are not unrolled into flight together.
fn bytes_in_flight(kp: &KernelProbe, kernel: Option<&KernelFeatures>) -> f64 {
    let global = || {
        kp.accesses
            .iter()
            .filter(|a| a.space == MemorySpace::Global)
    };
    let may_alias =
        kernel.is_none_or(|k| k.memory_ops.restrict_params < k.memory_ops.pointer_params);
    let fenced_loop = kp.fences > 1.0;
    let store_orders_loads = may_alias && global().any(|a| a.store && a.trips > 1.0);
    let pipelined = !(fenced_loop || store_orders_loads);
    let loads: f64 = global()
        .filter(|a| !a.store)
        .map(|a| a.trips.max(1.0))
        .sum();
    let round_trips = 1.0 + (kp.fences / loads.max(1.0)).min(1.0);
    let bytes: f64 = global()
        .map(|a| {
            let unroll = if pipelined && !a.store { a.unroll } else { 1.0 };
            f64::from(a.elem_bytes) * unroll.max(1.0)
        })
        .sum();
    bytes / round_trips
}

/// FP32-lane issue slots one thread of `k` spends: its loop-weighted FLOPs (twice for a
/// kernel that uses `double`: FP64 runs at half rate), the special functions' extra cost,
/// and the unsuffixed math calls at the float cost, or at an FP64 routine's (~128 slots)
/// in a kernel that uses `double`.
fn compute_slots(k: &KernelFeatures) -> f64 {
    let c = &k.compute;
    let fp64 = c.fp64_mentions > 0;
    c.weighted_flops * if fp64 { 2.0 } else { 1.0 }
        + c.weighted_special_cost
        + c.weighted_unsuffixed_math * if fp64 { 128.0 } else { 16.0 }
}

/// The traffic feature vector, one value per entry of [`TRAFFIC_FEATURE_NAMES`].
pub fn traffic_features(
    input: &LaunchInput<'_>,
    features: &Features,
    what: &str,
) -> Result<Vec<f32>> {
    Ok(traffic_features_named(input, features, what)?
        .into_iter()
        .map(|(_, v)| v)
        .collect())
}
