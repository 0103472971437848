//! Launch-plan features: what the resolved `// @launch` plan does on the task's timed
//! configuration (the one [`timing_config`] picks over all of the task's configs).
//!
//! The source features cannot see a launch shape that starves the GPU or multiplies passes:
//! one block per SM over a large array, one block per histogram bin, a scan done as `log n`
//! global passes, an atomic per element on one global address. These features describe the
//! plan itself, against the problem size and a reference device ([`REFERENCE_SMS`], the
//! H200's 132 SMs):
//!
//! * `N`, the problem size: the element count of the task's largest ABI buffer on the timed
//!   configuration (at least 1). Every task reads or writes its largest buffer in full, so
//!   `N` is the work a launch plan must cover; unlike a byte count it does not depend on the
//!   dtype, and unlike the sum of buffers it does not count a matmul's operands twice.
//! * For each launch `l`: `blocks_l` (grid product), `threads_l = blocks_l × block product`,
//!   and `elems_l`, the element count of the largest buffer (ABI or scratch) passed to it
//!   that its kernel reads or writes (at least 1): the data the launch sweeps. A kernel
//!   parameter counts as accessed when the structure analysis found a global load or store
//!   through it; when the kernel, its parameter names or its accesses cannot be read (or
//!   it touches none of its buffers, e.g. atomics only), every buffer passed counts. So a
//!   launch that only zeroes a small output does not count the input it is also handed.
//!
//! | name | value |
//! |---|---|
//! | `launch_count` | `ln(1 + launches)` |
//! | `launch_elements` | `ln(1 + N)` |
//! | `launch_threads_per_element` | `ln(Σ threads_l / N)` (negative when threads loop over elements) |
//! | `launch_passes` | `ln(1 + Σ elems_l / N)`: passes over the data (a `log n`-pass scan is large) |
//! | `launch_max_elements_per_thread` | `ln(1 + max_l elems_l / threads_l)`: serial work per thread of the most serial launch |
//! | `launch_max_blocks_per_sm` | `ln(max_l blocks_l / 132)`: the largest grid against the SM count |
//! | `launch_min_blocks_per_sm` | `ln(min_l blocks_l / 132)`: the smallest grid (one block: `ln(1/132) ≈ −4.9`) |
//! | `launch_small_grids` | `ln(1 + #{l : blocks_l < 132})`: launches that cannot fill the SMs |
//! | `launch_small_grid_work` | `ln(1 + Σ_{blocks_l < 132} elems_l / N)`: the data those launches sweep (a one-block pass over the whole array is `ln 2`; zeroing 256 bins is ~0) |
//! | `launch_global_atomics_per_element` | `ln(1 + Σ_l threads_l × (a_l + g_l × max(1, elems_l / threads_l)) / N)` with `g_l` the kernel's global atomics inside loops on shared addresses, `a_l` its other global atomics |
//! | `launch_shared_atomics_per_element` | `ln(1 + Σ_l threads_l × s_l × max(1, elems_l / threads_l) / N)`, `s_l` the kernel's shared-memory atomics |
//! | `launch_block_threads` | `ln(threads per block)` of the launch with the most threads |
//! | `launch_max_smem_kib` | `ln(1 + largest dynamic shared memory request in KiB)` |
//! | `launch_sector_excess_mean` | mean over the probed global accesses of `ln(sectors / fewest sectors)` for the probed lanes (0: every access coalesced) |
//! | `launch_sector_excess_max` | the largest of them (`ln 8 ≈ 2.08`: 8 four-byte lanes in 8 sectors instead of 1) |
//!
//! The sector counts come from [`WarpProbe`]: the kernel's integer index arithmetic run for
//! the first 8 lanes of a warp of the middle block with the launch's real grid, block and
//! scalar arguments, which sees through the `%` and `/` of multi-dimensional thread mappings
//! that the symbolic access classes leave `unknown`.
//!
//! Atomic counts are the structure analysis' static counts ([`SyncFeatures`]) of the launched
//! kernel (its `__device__` callees inlined), taken as executed once per thread, and once per
//! element the thread handles when they sit in the per-element path (shared atomics, global
//! atomics in loops): an upper estimate of the atomic traffic per element. A launch whose
//! kernel the analysis did not find (macros, templates it cannot read) counts no atomics.
//! Every value is finite.
//!
//! [`SyncFeatures`]: crate::analysis::SyncFeatures

use super::error::{RankerError, Result};
use crate::analysis::{
    AccessProbe, Features, KernelFeatures, KernelProbe, ProbeArg, SourceTree, WarpProbe,
};
use crate::candidate::{Candidate, PlanLimits, ResolvedArg, ResolvedLaunch, ResolvedPlan};
use crate::task::timing_config;
use crate::task::{InputConfig, Param, Task};

/// SM count of the reference device (NVIDIA H200) against which grids are measured.
pub const REFERENCE_SMS: u32 = 132;

/// Prefix of every launch-plan feature name.
pub const LAUNCH_PREFIX: &str = "launch_";

/// Names of the launch-plan features, in the order [`launch_features`] returns them.
pub const LAUNCH_FEATURE_NAMES: &[&str] = &[
    "launch_count",
    "launch_elements",
    "launch_threads_per_element",
    "launch_passes",
    "launch_max_elements_per_thread",
    "launch_max_blocks_per_sm",
    "launch_min_blocks_per_sm",
    "launch_small_grids",
    "launch_small_grid_work",
    "launch_global_atomics_per_element",
    "launch_shared_atomics_per_element",
    "launch_block_threads",
    "launch_max_smem_kib",
    "launch_sector_excess_mean",
    "launch_sector_excess_max",
];

/// A launch plan resolved on one of its task's configurations: what [`launch_features`]
/// reads.
#[derive(Debug, Clone, Copy)]
pub struct LaunchInput<'a> {
    /// The task (its ABI buffers give the problem size).
    pub task: &'a Task,
    /// The configuration the plan was resolved for (the timed one).
    pub config: &'a InputConfig,
    /// The resolved plan.
    pub plan: &'a ResolvedPlan,
    /// The CUDA source the plan belongs to (its kernels' parameter names tell which of the
    /// buffers passed each launch reads or writes).
    pub source: &'a str,
    /// `source` already parsed (the pipeline's syntax stage), so the warp probe does not
    /// parse it again; `None`: parsed here.
    pub tree: Option<&'a SourceTree>,
}

/// A launch plan resolved on its task's timed configuration, owned.
#[derive(Debug, Clone, PartialEq)]
pub struct TimedPlan {
    /// Index into `task.configs` of the timed configuration.
    pub config: usize,
    /// The plan on that configuration.
    pub plan: ResolvedPlan,
}

impl TimedPlan {
    /// The index into `task.configs` of the configuration that is timed: [`timing_config`]
    /// over all of the task's configs (`None` when the task has none).
    pub fn timed_config(task: &Task) -> Option<usize> {
        let all: Vec<usize> = (0..task.configs.len()).collect();
        (!all.is_empty()).then(|| all[timing_config(task, &all)])
    }

    /// Parses `source` (CUDA in the candidate format, with `// @launch` lines), checks it
    /// against the task's ABI and resolves its plan on the timed configuration. `what` names
    /// the source in errors.
    pub fn of_source(task: &Task, source: &str, limits: &PlanLimits, what: &str) -> Result<Self> {
        let mut candidate = Candidate::parse(source).map_err(|e| launch_error(what, e))?;
        candidate
            .check_abi(task)
            .map_err(|e| launch_error(what, e))?;
        Self::of_checked(task, &candidate, limits, what)
    }

    /// The same for a parsed candidate that already passed `check_abi` against `task` (which
    /// resolves its argument names; the pipeline's extract stage does it).
    pub fn of_checked(
        task: &Task,
        candidate: &Candidate,
        limits: &PlanLimits,
        what: &str,
    ) -> Result<Self> {
        let config = Self::timed_config(task)
            .ok_or_else(|| launch_error(what, format!("task `{}` has no config", task.id)))?;
        let plan = candidate
            .resolve(task, &task.configs[config], limits)
            .map_err(|e| launch_error(what, e))?;
        Ok(TimedPlan { config, plan })
    }

    /// The plan with its task, configuration and source, for [`launch_features`].
    pub fn input<'a>(&'a self, task: &'a Task, source: &'a str) -> LaunchInput<'a> {
        LaunchInput {
            task,
            config: &task.configs[self.config],
            plan: &self.plan,
            source,
            tree: None,
        }
    }
}

pub(crate) fn launch_error(what: &str, reason: impl std::fmt::Display) -> RankerError {
    RankerError::LaunchPlan {
        what: what.to_owned(),
        reason: reason.to_string(),
    }
}

/// Element count of every ABI parameter of `task` on `config` (0 for scalars).
pub(crate) fn param_lens(task: &Task, config: &InputConfig, what: &str) -> Result<Vec<u64>> {
    let mut lens = vec![0u64; task.params.len()];
    for (i, p) in task.params.iter().enumerate() {
        if let Param::Buffer { name, len, .. } = p {
            let n = len.eval_int(&config.sizes).map_err(|e| {
                launch_error(
                    what,
                    format!("buffer `{name}` on config `{}`: {e}", config.name),
                )
            })?;
            lens[i] = u64::try_from(n).unwrap_or(0);
        }
    }
    Ok(lens)
}

/// A launch's arguments as the warp probe sees them (buffers, integer scalars, others).
pub(crate) fn probe_args(task: &Task, config: &InputConfig, l: &ResolvedLaunch) -> Vec<ProbeArg> {
    l.args
        .iter()
        .map(|a| match *a {
            ResolvedArg::Param { index } => match task.params.get(index) {
                Some(Param::Buffer { .. }) => ProbeArg::Buffer,
                Some(Param::Scalar { dtype, value, .. }) if !dtype.is_float() => value
                    .eval_int(&config.sizes)
                    .map_or(ProbeArg::Other, ProbeArg::Int),
                _ => ProbeArg::Other,
            },
            ResolvedArg::Scratch { .. } => ProbeArg::Buffer,
            ResolvedArg::Int { value } => ProbeArg::Int(i64::from(value)),
        })
        .collect()
}

/// `ln(x)` of a positive ratio, clamped so that it stays finite (NaN gives 0).
pub(crate) fn ln_ratio(x: f64) -> f32 {
    if x.is_nan() {
        return 0.0;
    }
    x.clamp(1e-30, 1e30).ln() as f32
}

/// `ln(1 + x)` of a non-negative quantity, clamped so that it stays finite (NaN gives 0).
pub(crate) fn ln1p(x: f64) -> f32 {
    if x.is_nan() {
        return 0.0;
    }
    x.clamp(0.0, 1e30).ln_1p() as f32
}

/// The given tree when it is of `source`, else `source` parsed into `slot` (`None` when it
/// does not parse): the launch and traffic features share this fallback.
pub(crate) fn tree_for<'a>(
    tree: Option<&'a SourceTree>,
    source: &str,
    slot: &'a mut Option<SourceTree>,
) -> Option<&'a SourceTree> {
    match tree {
        Some(t) if t.text() == source => Some(t),
        _ => {
            *slot = SourceTree::parse(source.as_bytes()).ok();
            slot.as_ref()
        }
    }
}

/// The launch-plan features of `input` with the structure analysis' `features` of the same
/// source (for its kernels' atomics), as `(name, value)` pairs in
/// [`LAUNCH_FEATURE_NAMES`] order. `what` names the source in errors.
pub fn launch_features_named(
    input: &LaunchInput<'_>,
    features: &Features,
    what: &str,
) -> Result<Vec<(&'static str, f32)>> {
    let mut parsed = None;
    let tree = tree_for(input.tree, input.source, &mut parsed);
    let probe = tree.map(WarpProbe::new);
    let sectors: Vec<Vec<AccessProbe>> = input
        .plan
        .launches
        .iter()
        .map(|l| {
            probe.as_ref().map_or_else(Vec::new, |p| {
                let args = probe_args(input.task, input.config, l);
                p.run(&l.kernel, l.grid, l.block, &args)
            })
        })
        .collect();
    launch_features_with(input, tree, features, what, &sectors)
}

/// The detailed warp probe of every launch of `input`'s plan on `tree`, in plan order
/// (`None` where the kernel is not found or takes other parameters). The launch and traffic
/// features of one candidate share it: the sector probe is its
/// [`KernelProbe::global_sectors`], because the detailed probe follows the same path (its
/// trip simulation restores every variable) and only adds trip counts and a neighbouring
/// block's lane.
pub(crate) fn detailed_probes(
    input: &LaunchInput<'_>,
    tree: Option<&SourceTree>,
) -> Vec<Option<KernelProbe>> {
    let probe = tree.map(WarpProbe::new);
    input
        .plan
        .launches
        .iter()
        .map(|l| {
            probe.as_ref().and_then(|p| {
                p.run_detailed(
                    &l.kernel,
                    l.grid,
                    l.block,
                    &probe_args(input.task, input.config, l),
                )
            })
        })
        .collect()
}

/// [`launch_features_named`] from `input`'s source parsed as `tree` and the sectors each
/// launch's warp touches (one list per launch, in plan order; empty where nothing was probed).
pub(crate) fn launch_features_with(
    input: &LaunchInput<'_>,
    tree: Option<&SourceTree>,
    features: &Features,
    what: &str,
    sectors: &[Vec<AccessProbe>],
) -> Result<Vec<(&'static str, f32)>> {
    let LaunchInput {
        task, config, plan, ..
    } = *input;
    if plan.launches.is_empty() {
        return Err(launch_error(what, "the plan has no launch"));
    }
    let param_lens = param_lens(task, config, what)?;
    let n = param_lens.iter().copied().max().unwrap_or(0).max(1) as f64;
    let mut sums = PlanSums::new();
    for (li, l) in plan.launches.iter().enumerate() {
        // Sectors a warp's global accesses touch over the fewest they could (concrete probe).
        if let Some(s) = sectors.get(li) {
            sums.add_probe(s);
        }
        let base = l.kernel.split('<').next().unwrap_or(&l.kernel).trim();
        let kernel = features.kernels.iter().find(|k| k.name == base);
        let accessed = kernel.and_then(|k| accessed_params(tree, k, l.args.len()));
        let swept = Swept {
            param_lens: &param_lens,
            scratch_lens: &plan.scratch_lens,
            accessed: accessed.as_deref(),
        };
        let elems = swept.elements(l).ok_or_else(|| {
            launch_error(
                what,
                format!(
                    "launch {} (`{}`): an argument is out of range",
                    li + 1,
                    l.kernel
                ),
            )
        })?;
        sums.add_launch(l, elems, n, kernel);
    }
    Ok(sums.named(plan.launches.len(), n))
}

/// What one launch's arguments hold: the element counts of the ABI buffers and of the
/// scratch buffers, and which of its parameters the kernel reads or writes (if known).
struct Swept<'a> {
    param_lens: &'a [u64],
    scratch_lens: &'a [u64],
    accessed: Option<&'a [bool]>,
}

impl Swept<'_> {
    /// `elems_l` of the module docs: the largest buffer passed that the kernel accesses
    /// (every buffer passed when that is not known or none is), at least 1; `None` when an
    /// argument is out of range.
    fn elements(&self, l: &ResolvedLaunch) -> Option<f64> {
        let (mut elems, mut touched) = (0u64, 0u64);
        for (ai, a) in l.args.iter().enumerate() {
            let len = match *a {
                ResolvedArg::Param { index } => self.param_lens.get(index).copied(),
                ResolvedArg::Scratch { index } => self.scratch_lens.get(index).copied(),
                ResolvedArg::Int { .. } => Some(0),
            }?;
            elems = elems.max(len);
            if self.accessed.is_some_and(|a| a[ai]) {
                touched = touched.max(len);
            }
        }
        if touched > 0 {
            elems = touched;
        }
        Some(elems.max(1) as f64)
    }
}

/// The sums and extremes over a plan's launches that the features are made of.
struct PlanSums {
    threads: f64,
    passes: f64,
    max_serial: f64,
    max_blocks: f64,
    min_blocks: f64,
    small: u32,
    small_work: f64,
    global_atomics: f64,
    shared_atomics: f64,
    widest_threads: f64,
    widest_block: f64,
    max_smem: u32,
    excess_sum: f64,
    excess_n: usize,
    excess_max: f64,
}

impl PlanSums {
    fn new() -> PlanSums {
        PlanSums {
            threads: 0.0,
            passes: 0.0,
            max_serial: 0.0,
            max_blocks: 0.0,
            min_blocks: f64::INFINITY,
            small: 0,
            small_work: 0.0,
            global_atomics: 0.0,
            shared_atomics: 0.0,
            widest_threads: 0.0,
            widest_block: 1.0,
            max_smem: 0,
            excess_sum: 0.0,
            excess_n: 0,
            excess_max: 0.0,
        }
    }

    /// The probed global accesses of one launch.
    fn add_probe(&mut self, accesses: &[AccessProbe]) {
        for a in accesses {
            let e = (f64::from(a.sectors) / f64::from(a.ideal.max(1)))
                .max(1.0)
                .ln();
            self.excess_sum += e;
            self.excess_n += 1;
            self.excess_max = self.excess_max.max(e);
        }
    }

    /// One launch sweeping `elems` elements of a problem of `n`, running `kernel` (its
    /// atomics; `None` when the analysis did not find it).
    fn add_launch(
        &mut self,
        l: &ResolvedLaunch,
        elems: f64,
        n: f64,
        kernel: Option<&KernelFeatures>,
    ) {
        let sms = f64::from(REFERENCE_SMS);
        let blocks = l.grid.iter().map(|&g| f64::from(g)).product::<f64>();
        let block = l.block.iter().map(|&b| f64::from(b)).product::<f64>();
        let threads = blocks * block;
        let per_thread = elems / threads;
        self.threads += threads;
        self.passes += elems / n;
        self.max_serial = self.max_serial.max(per_thread);
        self.max_blocks = self.max_blocks.max(blocks);
        self.min_blocks = self.min_blocks.min(blocks);
        if blocks < sms {
            self.small += 1;
            self.small_work += elems / n;
        }
        if threads > self.widest_threads {
            self.widest_threads = threads;
            self.widest_block = block;
        }
        self.max_smem = self.max_smem.max(l.smem);
        if let Some(k) = kernel {
            let s = &k.sync;
            let repeat = per_thread.max(1.0);
            let looped = f64::from(s.atomics_global_in_loops);
            let once = f64::from(s.atomics_global.saturating_sub(s.atomics_global_in_loops));
            self.global_atomics += threads * (once + looped * repeat);
            self.shared_atomics += threads * f64::from(s.atomics_shared) * repeat;
        }
    }

    /// The features, in [`LAUNCH_FEATURE_NAMES`] order, of a plan of `launches` launches
    /// over a problem of `n` elements.
    fn named(&self, launches: usize, n: f64) -> Vec<(&'static str, f32)> {
        let sms = f64::from(REFERENCE_SMS);
        let PlanSums {
            threads: threads_sum,
            passes,
            max_serial,
            max_blocks,
            min_blocks,
            small,
            small_work,
            global_atomics,
            shared_atomics,
            widest_block,
            max_smem,
            excess_sum,
            excess_n,
            excess_max,
            ..
        } = *self;
        vec![
            ("launch_count", ln1p(launches as f64)),
            ("launch_elements", ln1p(n)),
            ("launch_threads_per_element", ln_ratio(threads_sum / n)),
            ("launch_passes", ln1p(passes)),
            ("launch_max_elements_per_thread", ln1p(max_serial)),
            ("launch_max_blocks_per_sm", ln_ratio(max_blocks / sms)),
            ("launch_min_blocks_per_sm", ln_ratio(min_blocks / sms)),
            ("launch_small_grids", ln1p(f64::from(small))),
            ("launch_small_grid_work", ln1p(small_work)),
            (
                "launch_global_atomics_per_element",
                ln1p(global_atomics / n),
            ),
            (
                "launch_shared_atomics_per_element",
                ln1p(shared_atomics / n),
            ),
            ("launch_block_threads", ln_ratio(widest_block)),
            ("launch_max_smem_kib", ln1p(f64::from(max_smem) / 1024.0)),
            (
                "launch_sector_excess_mean",
                if excess_n > 0 {
                    (excess_sum / excess_n as f64) as f32
                } else {
                    0.0
                },
            ),
            ("launch_sector_excess_max", excess_max as f32),
        ]
    }
}

/// Which of a kernel's `args` parameters (by position) it loads from or stores to, from the
/// analysis' global-access findings; `None` when the parameter list cannot be read, does not
/// match the launch, or the findings were capped (not every access is listed). The
/// parameter list is read from the source's syntax tree (`None` without one).
pub(crate) fn accessed_params(
    tree: Option<&SourceTree>,
    kernel: &KernelFeatures,
    args: usize,
) -> Option<Vec<bool>> {
    let g = &kernel.global_accesses;
    let listed = g.coalesced + g.strided + g.uniform + g.indirect + g.unknown;
    if g.findings.len() < listed as usize {
        return None;
    }
    let params: Vec<String> = tree?
        .kernel_signatures()
        .into_iter()
        .find(|k| k.name == kernel.name)?
        .params
        .into_iter()
        .filter(|p| p.trim() != "void")
        .collect();
    if params.len() != args {
        return None;
    }
    Some(
        params
            .iter()
            .map(|p| {
                let decl = p.split('[').next().unwrap_or(p);
                let name = decl
                    .rsplit(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                    .find(|s| !s.is_empty())
                    .unwrap_or("");
                !name.is_empty() && g.findings.iter().any(|f| f.array == name)
            })
            .collect(),
    )
}

/// The launch-plan feature vector, one value per entry of [`LAUNCH_FEATURE_NAMES`].
pub fn launch_features(
    input: &LaunchInput<'_>,
    features: &Features,
    what: &str,
) -> Result<Vec<f32>> {
    Ok(launch_features_named(input, features, what)?
        .into_iter()
        .map(|(_, v)| v)
        .collect())
}
