//! The harness's own kernels (`support.cu`): input generation, output comparison and input
//! verification, run in the harness's context on memory it owns or has mapped from a
//! runner. Trusted code; never loaded where a candidate runs.

use std::collections::HashMap;

use cudarc::driver::sys;

use super::driver::{self, CudaError, DevSlice, DeviceBuffer, Gpu, Module};
use super::job::Fill;
use super::report::DeviceInfo;
use super::values::{arg_f64, arg_i32, arg_u64};
use crate::task::DType;

const SUPPORT_SOURCE: &str = include_str!("support.cu");

/// Bytes of one statistics slot (`struct CompareStats` in support.cu).
pub(crate) const STATS_BYTES: usize = 48;

/// What a comparison or verification found.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub(crate) struct Stats {
    /// Elements outside tolerance (or, for a verification, not bit-identical).
    pub mismatches: u64,
    /// Output elements still holding the poison value.
    pub unwritten: u64,
    /// The first differing index.
    pub first_index: Option<u64>,
    /// Largest absolute difference.
    pub max_abs: f64,
    /// Largest relative difference.
    pub max_rel: f64,
}

impl Stats {
    /// Adds another buffer's statistics.
    pub fn merge(&mut self, o: &Stats) {
        self.mismatches += o.mismatches;
        self.unwritten += o.unwritten;
        self.first_index = match (self.first_index, o.first_index) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        self.max_abs = self.max_abs.max(o.max_abs);
        self.max_rel = self.max_rel.max(o.max_rel);
    }

    /// Whether anything was found.
    pub fn clean(&self) -> bool {
        self.mismatches == 0 && self.unwritten == 0
    }

    fn parse(raw: &[u8]) -> Stats {
        let word = |i: usize| {
            raw.get(i * 8..i * 8 + 8)
                .and_then(|b| b.try_into().ok())
                .map(u64::from_le_bytes)
                .unwrap_or(0)
        };
        Stats {
            mismatches: word(0),
            unwritten: word(1),
            first_index: (word(2) != u64::MAX).then(|| word(2)),
            max_abs: f64::from_bits(word(3)),
            max_rel: f64::from_bits(word(4)),
        }
    }
}

/// Device-side statistics slots, one per check in flight, read back together.
pub(crate) struct StatsSlots {
    buf: DeviceBuffer,
    slots: usize,
}

impl StatsSlots {
    /// `slots` slots.
    pub fn new(gpu: &Gpu, slots: usize) -> Result<StatsSlots, CudaError> {
        Ok(StatsSlots {
            buf: gpu.alloc(slots.max(1) * STATS_BYTES, "comparison statistics")?,
            slots: slots.max(1),
        })
    }

    /// Resets every slot (synchronous; call with the stream idle).
    pub fn reset(&self) -> Result<(), CudaError> {
        let mut init = vec![0u8; self.slots * STATS_BYTES];
        for s in 0..self.slots {
            init[s * STATS_BYTES + 16..s * STATS_BYTES + 24]
                .copy_from_slice(&u64::MAX.to_le_bytes());
        }
        self.buf.slice().write(&init)
    }

    /// How many slots there are.
    pub fn len(&self) -> usize {
        self.slots
    }

    /// Slot `i`'s device range.
    pub fn slot(&self, i: usize) -> DevSlice {
        let i = i.min(self.slots - 1);
        DevSlice {
            ptr: self.buf.ptr + (i * STATS_BYTES) as u64,
            bytes: STATS_BYTES,
        }
    }

    /// Reads every slot (synchronous; call after the checks finished).
    pub fn read(&self) -> Result<Vec<Stats>, CudaError> {
        let raw = self.buf.slice().read(0, self.slots * STATS_BYTES)?;
        Ok(raw.chunks(STATS_BYTES).map(Stats::parse).collect())
    }
}

/// Buffers one launch of a fan kernel works on (`MAX_TARGETS` in support.cu).
pub(crate) const MAX_TARGETS: usize = 32;

/// `struct Targets` of support.cu: the buffers of one launch, each with its statistics slot.
#[repr(C)]
#[derive(Clone, Copy)]
struct TargetsArg {
    ptr: [u64; MAX_TARGETS],
    slot: [u64; MAX_TARGETS],
    count: i32,
}

impl TargetsArg {
    /// At most [`MAX_TARGETS`] (buffer, slot) pairs.
    fn new(targets: impl Iterator<Item = (DevSlice, Option<DevSlice>)>) -> TargetsArg {
        let mut t = TargetsArg {
            ptr: [0; MAX_TARGETS],
            slot: [0; MAX_TARGETS],
            count: 0,
        };
        for (k, (buf, slot)) in targets.take(MAX_TARGETS).enumerate() {
            t.ptr[k] = buf.ptr;
            t.slot[k] = slot.map_or(0, |s| s.ptr);
            t.count = k as i32 + 1;
        }
        t
    }
}

/// 16-byte chunks in `n` elements of `dtype` (the work items of compare and verify).
fn chunks(n: u64, dtype: DType) -> u64 {
    (n * dtype.size_bytes()).div_ceil(16)
}

/// The loaded harness kernels.
pub(crate) struct Support {
    copy: sys::CUfunction,
    fill: HashMap<DType, sys::CUfunction>,
    sensitivity: HashMap<DType, sys::CUfunction>,
    perturb_f32: sys::CUfunction,
    perturb_f64: sys::CUfunction,
    compare: HashMap<DType, sys::CUfunction>,
    verify: HashMap<DType, sys::CUfunction>,
    max_blocks: u32,
    // Last: the functions above belong to it.
    _module: Module,
}

/// The first visible GPU, what it is, and the harness kernels compiled for its architecture
/// (`sm_XY`, also returned): what the harness and [`super::DirectGpu`] start from. The error
/// says why there is no GPU.
pub(crate) fn open_gpu(
    sched: super::CtxSched,
) -> Result<(Gpu, DeviceInfo, i32, Support, String), String> {
    if !super::driver::driver_present() {
        return Err("libcuda not found: no NVIDIA driver on this machine".into());
    }
    let gpu = Gpu::open(sched).map_err(|e| format!("no usable GPU: {e}"))?;
    let (info, max_warps_per_sm) = super::device::describe(&gpu)?;
    let arch = format!(
        "sm_{}{}",
        info.compute_capability.0, info.compute_capability.1
    );
    let support = Support::load(&gpu, &arch, info.sms)?;
    Ok((gpu, info, max_warps_per_sm, support, arch))
}

impl Support {
    /// The harness kernels compiled for `arch` (e.g. `sm_90`): the cubin.
    fn compile(arch: &str) -> Result<Vec<u8>, String> {
        let lib = crate::compile::nvrtc::load()?;
        let mut flags = vec![format!("-arch={arch}"), "-std=c++17".to_string()];
        if let Some(dir) = &lib.include_dir {
            flags.push(format!("-I{}", dir.display()));
        }
        let out =
            crate::compile::nvrtc::compile(SUPPORT_SOURCE, "cudaperf_support.cu", &flags, &[])?;
        if !out.ok {
            return Err(format!("harness kernels failed to compile: {}", out.log));
        }
        Ok(out.cubin)
    }

    /// Compiles and loads the harness kernels for `arch` (e.g. `sm_90`).
    pub(crate) fn load(gpu: &Gpu, arch: &str, sms: i32) -> Result<Support, String> {
        let cubin = Support::compile(arch)?;
        let module = gpu
            .load_module(&cubin, "harness kernels")
            .map_err(|e| e.to_string())?;
        let table = |prefix: &str| -> Result<HashMap<DType, sys::CUfunction>, String> {
            DType::ALL
                .into_iter()
                .map(|d| {
                    module
                        .function(&format!("{prefix}_{}", d.as_str()))
                        .map(|f| (d, f))
                        .map_err(|e| e.to_string())
                })
                .collect()
        };
        Ok(Support {
            copy: module.function("copy_fanout").map_err(|e| e.to_string())?,
            fill: table("fill")?,
            sensitivity: table("sensitivity")?,
            perturb_f32: module.function("perturb_f32").map_err(|e| e.to_string())?,
            perturb_f64: module.function("perturb_f64").map_err(|e| e.to_string())?,
            compare: table("compare")?,
            verify: table("verify")?,
            max_blocks: (sms.max(1) as u32) * 16,
            _module: module,
        })
    }

    fn grid(&self, n: u64) -> [u32; 3] {
        [
            n.div_ceil(256).clamp(1, self.max_blocks as u64) as u32,
            1,
            1,
        ]
    }

    /// Writes `n` elements generated from `seed` into `dst`.
    pub fn fill(
        &self,
        dst: DevSlice,
        dtype: DType,
        n: u64,
        seed: u64,
        f: &Fill,
        stream: sys::CUstream,
    ) -> Result<(), CudaError> {
        let args = vec![
            arg_u64(dst.ptr),
            arg_u64(n),
            arg_u64(seed),
            arg_i32(f.mode),
            arg_f64(f.a),
            arg_f64(f.b),
            arg_i32(f.special as i32),
            arg_f64(f.special_rate),
        ];
        self.launch(self.fill[&dtype], n, args, stream, || {
            format!("filling inputs ({dtype})")
        })
    }

    /// Replaces mantissa bits `[lo, hi)` of every normal element of `dst` (f32 or f64) with
    /// bits drawn from `seed` and sets bit 0 (the precision probe).
    pub fn perturb(
        &self,
        dst: DevSlice,
        dtype: DType,
        n: u64,
        seed: u64,
        bits: crate::task::ProbeBits,
        stream: sys::CUstream,
    ) -> Result<(), CudaError> {
        let f = match dtype {
            DType::F32 => self.perturb_f32,
            DType::F64 => self.perturb_f64,
            _ => return Ok(()),
        };
        let args = vec![
            arg_u64(dst.ptr),
            arg_u64(n),
            arg_u64(seed),
            arg_i32(bits.lo as i32),
            arg_i32(bits.hi as i32),
        ];
        self.launch(f, n, args, stream, || {
            format!("perturbing inputs ({dtype})")
        })
    }

    /// Accumulates into the three doubles at `out` how the member's outputs `c1` (on the
    /// changed inputs) and `c0` followed the reference's `r1` and `r0`: Σ(Δc−Δr)², Σ(Δr)²,
    /// Σr0², over `n` elements.
    #[allow(clippy::too_many_arguments)]
    pub fn sensitivity(
        &self,
        (c1, c0): (DevSlice, DevSlice),
        (r1, r0): (DevSlice, DevSlice),
        dtype: DType,
        n: u64,
        out: DevSlice,
        stream: sys::CUstream,
    ) -> Result<(), CudaError> {
        let args = vec![
            arg_u64(c1.ptr),
            arg_u64(c0.ptr),
            arg_u64(r1.ptr),
            arg_u64(r0.ptr),
            arg_u64(n),
            arg_u64(out.ptr),
        ];
        self.launch(self.sensitivity[&dtype], n, args, stream, || {
            format!("measuring the precision probe ({dtype})")
        })
    }

    /// Writes the first `bytes` of `src` into every buffer of `dsts` (one launch per
    /// [`MAX_TARGETS`]: `src` is read once from DRAM per launch).
    pub fn copy_to(
        &self,
        src: DevSlice,
        dsts: &[DevSlice],
        bytes: u64,
        stream: sys::CUstream,
    ) -> Result<(), CudaError> {
        for group in dsts.chunks(MAX_TARGETS) {
            let targets = TargetsArg::new(group.iter().map(|d| (*d, None)));
            self.launch_fan(
                self.copy,
                &targets,
                bytes.div_ceil(16),
                vec![arg_u64(src.ptr), arg_u64(bytes)],
                stream,
                || "copying inputs".to_string(),
            )?;
        }
        Ok(())
    }

    /// Compares `n` elements of every `got` buffer with `want`, each into its statistics
    /// slot (`(buffer, slot)` pairs); `poison` is the byte the `got` buffers were poisoned
    /// with before their run (an element still all `poison` was never written).
    #[allow(clippy::too_many_arguments)]
    pub fn compare(
        &self,
        got: &[(DevSlice, DevSlice)],
        want: DevSlice,
        dtype: DType,
        n: u64,
        (atol, rtol): (f64, f64),
        nan_equal: bool,
        poison: u8,
        stream: sys::CUstream,
    ) -> Result<(), CudaError> {
        for group in got.chunks(MAX_TARGETS) {
            let targets = TargetsArg::new(group.iter().map(|&(b, s)| (b, Some(s))));
            self.launch_fan(
                self.compare[&dtype],
                &targets,
                chunks(n, dtype),
                vec![
                    arg_u64(want.ptr),
                    arg_u64(n),
                    arg_f64(atol),
                    arg_f64(rtol),
                    arg_i32(nan_equal as i32),
                    arg_i32(i32::from(poison)),
                ],
                stream,
                || format!("comparing outputs ({dtype})"),
            )?;
        }
        Ok(())
    }

    /// Counts the elements of every buffer that differ (bit for bit) from `pristine`, each
    /// into its statistics slot (`(buffer, slot)` pairs).
    pub fn verify(
        &self,
        bufs: &[(DevSlice, DevSlice)],
        pristine: DevSlice,
        dtype: DType,
        n: u64,
        stream: sys::CUstream,
    ) -> Result<(), CudaError> {
        for group in bufs.chunks(MAX_TARGETS) {
            let targets = TargetsArg::new(group.iter().map(|&(b, s)| (b, Some(s))));
            self.launch_fan(
                self.verify[&dtype],
                &targets,
                chunks(n, dtype),
                vec![arg_u64(pristine.ptr), arg_u64(n)],
                stream,
                || format!("verifying inputs ({dtype})"),
            )?;
        }
        Ok(())
    }

    /// Launches a kernel that takes a [`TargetsArg`] first: `items` work items (16-byte
    /// chunks) per target, its blocks dealt round-robin over the targets.
    fn launch_fan(
        &self,
        function: sys::CUfunction,
        targets: &TargetsArg,
        items: u64,
        mut rest: Vec<[u8; 8]>,
        stream: sys::CUstream,
        what: impl FnOnce() -> String,
    ) -> Result<(), CudaError> {
        let count = targets.count.max(1) as u32;
        if targets.count == 0 || items == 0 {
            return Ok(());
        }
        let per_target = (self.max_blocks / count).max(1);
        let parts = items.div_ceil(256).clamp(1, u64::from(per_target)) as u32;
        let mut first = *targets;
        let mut ptrs: Vec<*mut std::ffi::c_void> =
            vec![(&mut first as *mut TargetsArg).cast::<std::ffi::c_void>()];
        ptrs.extend(
            rest.iter_mut()
                .map(|a| a.as_mut_ptr().cast::<std::ffi::c_void>()),
        );
        // SAFETY: the first parameter of every fan kernel is `Targets` (same layout as
        // `TargetsArg`), the rest are 8-byte slots in the kernel's order; all outlive the call.
        unsafe {
            driver::launch_params(
                function,
                [parts * count, 1, 1],
                [256, 1, 1],
                0,
                stream,
                &mut ptrs,
                what,
            )
        }
    }

    /// Launches a harness kernel over `n` elements (nothing for none).
    fn launch(
        &self,
        function: sys::CUfunction,
        n: u64,
        mut args: Vec<[u8; 8]>,
        stream: sys::CUstream,
        what: impl FnOnce() -> String,
    ) -> Result<(), CudaError> {
        if n == 0 {
            return Ok(());
        }
        driver::launch(
            function,
            self.grid(n),
            [256, 1, 1],
            0,
            stream,
            &mut args,
            what,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The harness kernels compile (NVRTC needs no GPU), and the fan kernels' first
    /// parameter has the layout of `TargetsArg`.
    #[test]
    fn harness_kernels_compile_for_hopper() {
        let cubin = Support::compile("sm_90").expect("support.cu compiles with NVRTC");
        assert!(cubin.len() > 1000, "a cubin of {} bytes", cubin.len());
        assert_eq!(std::mem::size_of::<TargetsArg>(), 8 * 2 * MAX_TARGETS + 8);
        let source_max = SUPPORT_SOURCE
            .lines()
            .find_map(|l| l.strip_prefix("#define MAX_TARGETS "))
            .and_then(|v| v.trim().parse::<usize>().ok());
        assert_eq!(source_max, Some(MAX_TARGETS));
    }

    #[test]
    fn targets_take_at_most_the_maximum() {
        let slices = (0..40u64).map(|k| {
            (
                DevSlice {
                    ptr: 0x1000 * (k + 1),
                    bytes: 16,
                },
                Some(DevSlice {
                    ptr: 0x10 * k,
                    bytes: STATS_BYTES,
                }),
            )
        });
        let t = TargetsArg::new(slices);
        assert_eq!(t.count as usize, MAX_TARGETS);
        assert_eq!(t.ptr[31], 0x1000 * 32);
        assert_eq!(t.slot[1], 0x10);
        assert_eq!(chunks(5, DType::F32), 2);
        assert_eq!(chunks(4, DType::F32), 1);
    }
}
