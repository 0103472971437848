//! Concrete coalescing probe: runs a kernel's integer index arithmetic for the first lanes
//! of one warp ([`PROBE_LANES`]), with the launch's real grid, block and scalar arguments, and counts the 32-byte
//! sectors each global access of the warp touches.
//!
//! The symbolic classification ([`super::accesses`]) decides from the `threadIdx.x`
//! coefficient of an index and gives up on `%`, `/` of run-time values and multi-dimensional
//! index arithmetic (`(i / c / hw * c + i % c) * hw + ...`): exactly how uncoalesced thread
//! mappings are usually written. Here those are plain numbers. Only straight-line integer
//! code is followed: the first iteration of a loop, the branch a known condition takes,
//! both statements of an unknown one; data loaded from memory is unknown, and an access
//! whose index is unknown on any lane is not counted.

mod flat;
mod lane;
mod values;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use tree_sitter::Node;

use super::memory_ops::type_bytes;
use super::node::NodeExt;
use super::parse::{parameters, text, Program};
use super::symbolic::declared_name;
use super::SourceTree;
use flat::FlatTree;
use lane::Lane;

/// A kernel argument's value for the probe.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ProbeArg {
    /// A device buffer (global memory); its element size comes from the parameter's type.
    Buffer,
    /// An integer scalar.
    Int(i64),
    /// Anything else (a floating-point scalar).
    Other,
}

/// One global access of the probed warp.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AccessProbe {
    /// Lanes whose address was known.
    pub lanes: u32,
    /// Distinct 32-byte sectors those lanes touch.
    pub sectors: u32,
    /// The fewest sectors those lanes could touch (contiguous addresses).
    pub ideal: u32,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Val {
    Int(i64),
    /// A pointer into buffer `param` at element `offset` of `elem` bytes.
    Ptr {
        param: usize,
        offset: i64,
        elem: u32,
    },
    /// A 2-D shared array: indexing it once gives a row pointer of `row` elements.
    Rows {
        param: usize,
        row: i64,
        elem: u32,
    },
    Unknown,
}

/// Parameter numbers from this one on name `__shared__` arrays, not kernel buffers.
const SHARED_BASE: usize = 1 << 20;

/// Header iterations simulated before a loop's trip count is extrapolated (additive steps).
const TRIP_SIMULATION: usize = 32;

/// Trip counts above this are cut (a loop over a 2^40-element range is still finite).
const MAX_TRIPS: f64 = 1e12;

const MAX_STEPS: usize = 4000;

/// Iterations in flight of a loop without `#pragma unroll`: one. nvcc often unrolls such a
/// loop by 4, but not always (register pressure, a manual unroll already there), and an
/// estimate that assumed 4 ordered the measured program table worse (81 against 86 %), so
/// only what the source says is counted.
const DEFAULT_UNROLL: f64 = 1.0;

/// Deepest nesting of expressions and statements followed (hostile sources nest thousands
/// of parentheses; the probe must not overflow the stack).
const MAX_DEPTH: usize = 64;

/// Lanes probed: the first 8 of the warp. For 4-byte elements they span one sector when
/// coalesced and 8 when scattered, the same 8× ratio the full warp shows (4 against 32), at a
/// quarter of the cost (each lane is interpreted separately: about 25 µs for a 100-line
/// kernel).
const PROBE_LANES: i64 = 8;

/// The kernels of one parsed source, found once, to probe launch by launch.
pub struct WarpProbe<'t> {
    src: &'t str,
    prog: Program<'t>,
    /// Kernel bodies copied for the interpreter, by the definition's start byte: a plan that
    /// launches one kernel several times copies it once.
    bodies: Mutex<Vec<(usize, Arc<FlatTree<'t>>)>>,
}

impl<'t> WarpProbe<'t> {
    /// Finds the functions of `tree`.
    pub fn new(tree: &'t SourceTree) -> WarpProbe<'t> {
        // The text the tree was parsed from (grammar gaps blanked), as the analysis reads.
        WarpProbe {
            src: tree.parsed_text(),
            prog: Program::of(tree),
            bodies: Mutex::new(Vec::new()),
        }
    }

    /// The flat copy of `def`'s body, made on first use (`None` without a body).
    fn body(&self, def: Node<'t>) -> Option<Arc<FlatTree<'t>>> {
        let mut bodies = self.bodies.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, b)) = bodies.iter().find(|(at, _)| *at == def.start_byte()) {
            return Some(Arc::clone(b));
        }
        let flat = Arc::new(FlatTree::new(def.field("body")?, self.src));
        bodies.push((def.start_byte(), Arc::clone(&flat)));
        Some(flat)
    }

    /// The probe of kernel `kernel` (template arguments ignored), detailed or not.
    fn probe(
        &self,
        kernel: &str,
        grid: [u32; 3],
        block: [u32; 3],
        args: &[ProbeArg],
        detailed: bool,
    ) -> Option<KernelProbe> {
        let base = kernel.split('<').next().unwrap_or(kernel).trim();
        let def = self.prog.functions.get(base).map(|f| f.node)?;
        self.probe_kernel(def, grid, block, args, detailed)
    }

    /// Probes kernel `kernel` launched with `grid` × `block` and these arguments (in
    /// parameter order): lanes 0..8 of the first warp of the block in the middle of the
    /// grid. One entry per global access reached with a known address on at least half the
    /// lanes; none when the kernel is not found or takes other parameters.
    pub fn run(
        &self,
        kernel: &str,
        grid: [u32; 3],
        block: [u32; 3],
        args: &[ProbeArg],
    ) -> Vec<AccessProbe> {
        self.probe(kernel, grid, block, args, false)
            .map(|k| k.global_sectors())
            .unwrap_or_default()
    }

    /// The same probe with what the ranker's traffic features need: every global and shared
    /// access with its loop trip count, element size and whether a neighbouring block reads
    /// the same address, and the thread's barrier count. `None` when the kernel is not
    /// found or takes other parameters.
    pub fn run_detailed(
        &self,
        kernel: &str,
        grid: [u32; 3],
        block: [u32; 3],
        args: &[ProbeArg],
    ) -> Option<KernelProbe> {
        self.probe(kernel, grid, block, args, true)
    }
}

/// Which memory an access goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemorySpace {
    /// A kernel buffer (global memory).
    Global,
    /// A `__shared__` array.
    Shared,
}

/// One access of the probed warp with its repetition and reuse.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AccessDetail {
    /// Global or shared.
    pub space: MemorySpace,
    /// Parameter index of the buffer (global accesses), or the shared array's number.
    pub array: usize,
    /// Bytes per lane and execution.
    pub elem_bytes: u32,
    /// Lanes, sectors, ideal sectors (for shared accesses: 32-byte spans of the lanes).
    pub probe: AccessProbe,
    /// Product of the trip counts of the loops around the access on lane 0 (1 outside
    /// loops; a loop whose trip count is unknown counts once).
    pub trips: f64,
    /// Lane 0 of the next block along x (y when the grid has one column) reads the same
    /// address: the blocks re-read the same data.
    pub block_invariant: bool,
    /// Iterations of the innermost loop around the access that the compiler unrolls (1
    /// outside loops): how many of its loads one thread can have in flight when nothing
    /// orders them. Lane 0's.
    pub unroll: f64,
    /// The access writes the element (an assignment's or an increment's target; a compound
    /// assignment `a[i] += v` also reads it).
    pub store: bool,
    /// Shared accesses: lanes of a full warp that fall in one bank for different words
    /// (1 = conflict-free), from the word stride between lanes 0 and 1 (`gcd(stride, 32)`),
    /// or the probed lanes' own worst bank when the stride is not constant. 1 for global.
    pub bank_degree: u32,
}

/// What one probed thread of a kernel does.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct KernelProbe {
    /// The accesses reached with known addresses on at least half the probed lanes.
    pub accesses: Vec<AccessDetail>,
    /// `__syncthreads` executed by lane 0, each weighted by its loops' trip counts.
    pub barriers: f64,
    /// Device- or system-scope fences (`__threadfence`, `__threadfence_system`) executed by
    /// lane 0, weighted the same way: each waits until the thread's earlier writes are
    /// visible to the device.
    pub fences: f64,
    /// `while`/`do` loops waiting on global memory or an atomic (inter-block chains).
    pub spin_waits: u32,
    /// Loops whose trip count is unknown on lane 0.
    pub unknown_trips: u32,
}

impl KernelProbe {
    /// The sectors of its global accesses: what [`WarpProbe::run`] returns for the same
    /// launch (the detailed probe follows the same path; its trip simulation restores every
    /// variable).
    pub fn global_sectors(&self) -> Vec<AccessProbe> {
        self.accesses
            .iter()
            .filter(|a| a.space == MemorySpace::Global)
            .map(|a| a.probe)
            .collect()
    }
}

struct LaneRun {
    seen: BTreeMap<usize, (usize, i64, u32)>,
    trips: BTreeMap<usize, f64>,
    stores: BTreeSet<usize>,
    unrolled: BTreeMap<usize, f64>,
    barriers: f64,
    fences: f64,
    spin_waits: u32,
    unknown_trips: u32,
}

impl<'t> WarpProbe<'t> {
    fn probe_kernel(
        &self,
        def: Node<'t>,
        grid: [u32; 3],
        block: [u32; 3],
        args: &[ProbeArg],
        detailed: bool,
    ) -> Option<KernelProbe> {
        let src = self.src;
        let params = parameters(def);
        if params.len() != args.len() {
            return None;
        }
        let flat = self.body(def)?;
        let body = flat.root();
        let mut bound: HashMap<&str, Val> = HashMap::new();
        for (i, (p, a)) in params.iter().zip(args).enumerate() {
            let ty = p.field("type").map_or("", |t| text(t, src));
            let Some(d) = p.field("declarator") else {
                continue;
            };
            let Some(name) = declared_name(d, src) else {
                continue;
            };
            let v = match a {
                ProbeArg::Buffer => Val::Ptr {
                    param: i,
                    offset: 0,
                    elem: type_bytes(ty).filter(|&e| e > 0).unwrap_or(4),
                },
                ProbeArg::Int(x) => Val::Int(*x),
                ProbeArg::Other => Val::Unknown,
            };
            bound.insert(name, v);
        }
        let g = grid.map(i64::from);
        let b = block.map(i64::from);
        let mut bid = [g[0] / 2, g[1] / 2, g[2] / 2];
        // Trip counts are read from lane 0 only: the other lanes give addresses.
        let run = |tid: [i64; 3], bid: [i64; 3], count_trips: bool| {
            let mut l = Lane {
                vars: bound.clone(),
                tid,
                bid,
                bdim: b,
                gdim: g,
                seen: BTreeMap::new(),
                trips: BTreeMap::new(),
                stores: BTreeSet::new(),
                store_target: None,
                unrolled: BTreeMap::new(),
                unroll: 1.0,
                unrolls: &self.prog.unrolls,
                text: src,
                mult: 1.0,
                barriers: 0.0,
                fences: 0.0,
                spin_waits: 0,
                unknown_trips: 0,
                shared_arrays: 0,
                count_trips,
                steps: 0,
                depth: 0,
                returned: false,
            };
            l.exec(body);
            LaneRun {
                seen: l.seen,
                trips: l.trips,
                stores: l.stores,
                unrolled: l.unrolled,
                barriers: l.barriers,
                fences: l.fences,
                spin_waits: l.spin_waits,
                unknown_trips: l.unknown_trips,
            }
        };
        let lanes = PROBE_LANES.min(b[0] * b[1] * b[2]).max(1);
        let probe_block = |bid: [i64; 3]| {
            let mut per_access: BTreeMap<usize, Vec<(usize, i64, u32)>> = BTreeMap::new();
            let mut first = None;
            for lane in 0..lanes {
                let tid = [lane % b[0], (lane / b[0]) % b[1], lane / (b[0] * b[1])];
                let r = run(tid, bid, detailed && lane == 0);
                for (k, v) in &r.seen {
                    per_access.entry(*k).or_default().push(*v);
                }
                if lane == 0 {
                    first = Some(r);
                }
            }
            (per_access, first)
        };
        let seen_enough = |per_access: &BTreeMap<usize, Vec<_>>| {
            per_access.values().any(|v| v.len() as i64 * 2 >= lanes)
        };
        let (mut per_access, mut first) = probe_block(bid);
        // The middle block of a small grid is often its last, partial one (2 blocks for 257
        // rows: lanes 1.. of block 1 are past the end and skip every access): then block 0.
        if !seen_enough(&per_access) && bid != [0, 0, 0] {
            let (p0, f0) = probe_block([0, 0, 0]);
            if seen_enough(&p0) {
                (per_access, first, bid) = (p0, f0, [0, 0, 0]);
            }
        }
        let first = first?;
        // Lane 0 of the neighbouring block: the same address there means the blocks share it.
        let next = if !detailed {
            None
        } else if g[0] > 1 {
            Some([(bid[0] + 1) % g[0], bid[1], bid[2]])
        } else if g[1] > 1 {
            Some([bid[0], (bid[1] + 1) % g[1], bid[2]])
        } else {
            None
        };
        let neighbour = next.map(|nb| run([0, 0, 0], nb, false).seen);
        let accesses = per_access
            .into_iter()
            .filter(|(_, v)| v.len() as i64 * 2 >= lanes)
            .map(|(node, v)| {
                let (param, addr0, elem) = v[0];
                let elem = elem.max(1);
                let mut sectors: Vec<(usize, i64)> =
                    v.iter().map(|&(p, a, _)| (p, a.div_euclid(32))).collect();
                sectors.sort_unstable();
                sectors.dedup();
                let bytes = v.len() as u32 * elem;
                let shared = param >= SHARED_BASE;
                let bank_degree = if shared { bank_degree(&v) } else { 1 };
                AccessDetail {
                    space: if shared {
                        MemorySpace::Shared
                    } else {
                        MemorySpace::Global
                    },
                    array: if shared { param - SHARED_BASE } else { param },
                    elem_bytes: elem,
                    probe: AccessProbe {
                        lanes: v.len() as u32,
                        sectors: sectors.len() as u32,
                        ideal: bytes.div_ceil(32).max(1),
                    },
                    trips: first.trips.get(&node).copied().unwrap_or(1.0),
                    block_invariant: neighbour
                        .as_ref()
                        .and_then(|n| n.get(&node))
                        .is_some_and(|&(p, a, _)| p == param && a == addr0),
                    store: first.stores.contains(&node),
                    unroll: first.unrolled.get(&node).copied().unwrap_or(1.0),
                    bank_degree,
                }
            })
            .collect();
        Some(KernelProbe {
            accesses,
            barriers: first.barriers,
            fences: first.fences,
            spin_waits: first.spin_waits,
            unknown_trips: first.unknown_trips,
        })
    }
}

/// Lanes of a full warp that hit one bank with different 4-byte words: `gcd(stride, 32)`
/// for a constant word stride between the probed lanes (0: a broadcast, 1), else the worst
/// bank among the probed lanes.
fn bank_degree(lanes: &[(usize, i64, u32)]) -> u32 {
    let words: Vec<i64> = lanes.iter().map(|&(_, a, _)| a.div_euclid(4)).collect();
    let stride = words.get(1).zip(words.first()).map(|(b, a)| b - a);
    let constant = stride.is_some_and(|s| words.windows(2).all(|w| w[1] - w[0] == s));
    match stride {
        Some(0) if constant => 1,
        Some(s) if constant => {
            let (mut a, mut b) = (s.unsigned_abs(), 32u64);
            while b != 0 {
                (a, b) = (b, a % b);
            }
            a.clamp(1, 32) as u32
        }
        _ => {
            let mut per_bank: BTreeMap<i64, Vec<i64>> = BTreeMap::new();
            for w in words {
                let e = per_bank.entry(w.rem_euclid(32)).or_default();
                if !e.contains(&w) {
                    e.push(w);
                }
            }
            per_bank.values().map(|v| v.len() as u32).max().unwrap_or(1)
        }
    }
}

#[cfg(test)]
mod tests;
