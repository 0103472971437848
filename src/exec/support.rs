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

/// The loaded harness kernels.
pub(crate) struct Support {
    fill: HashMap<DType, sys::CUfunction>,
    compare: HashMap<DType, sys::CUfunction>,
    verify: HashMap<DType, sys::CUfunction>,
    max_blocks: u32,
    // Last: the functions above belong to it.
    _module: Module,
}

/// The first visible GPU, what it is, and the harness kernels compiled for its architecture
/// (`sm_XY`, also returned): what the harness and [`super::DirectGpu`] start from. The error
/// says why there is no GPU.
pub(crate) fn open_gpu() -> Result<(Gpu, DeviceInfo, i32, Support, String), String> {
    if !super::driver::driver_present() {
        return Err("libcuda not found: no NVIDIA driver on this machine".into());
    }
    let gpu = Gpu::open().map_err(|e| format!("no usable GPU: {e}"))?;
    let (info, max_warps_per_sm) = super::device::describe(&gpu)?;
    let arch = format!(
        "sm_{}{}",
        info.compute_capability.0, info.compute_capability.1
    );
    let support = Support::load(&gpu, &arch, info.sms)?;
    Ok((gpu, info, max_warps_per_sm, support, arch))
}

impl Support {
    /// Compiles and loads the harness kernels for `arch` (e.g. `sm_90`).
    pub fn load(gpu: &Gpu, arch: &str, sms: i32) -> Result<Support, String> {
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
        let module = gpu
            .load_module(&out.cubin, "harness kernels")
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
            fill: table("fill")?,
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
        ];
        self.launch(self.fill[&dtype], n, args, stream, || {
            format!("filling inputs ({dtype})")
        })
    }

    /// Compares `n` elements of `got` with `want` into a statistics slot.
    #[allow(clippy::too_many_arguments)]
    pub fn compare(
        &self,
        got: DevSlice,
        want: DevSlice,
        dtype: DType,
        n: u64,
        (atol, rtol): (f64, f64),
        nan_equal: bool,
        slot: DevSlice,
        stream: sys::CUstream,
    ) -> Result<(), CudaError> {
        let args = vec![
            arg_u64(got.ptr),
            arg_u64(want.ptr),
            arg_u64(n),
            arg_f64(atol),
            arg_f64(rtol),
            arg_i32(nan_equal as i32),
            arg_u64(slot.ptr),
        ];
        self.launch(self.compare[&dtype], n, args, stream, || {
            format!("comparing outputs ({dtype})")
        })
    }

    /// Counts elements of `buf` that differ from what `fill` writes for `seed`.
    #[allow(clippy::too_many_arguments)]
    pub fn verify(
        &self,
        buf: DevSlice,
        dtype: DType,
        n: u64,
        seed: u64,
        f: &Fill,
        slot: DevSlice,
        stream: sys::CUstream,
    ) -> Result<(), CudaError> {
        let args = vec![
            arg_u64(buf.ptr),
            arg_u64(n),
            arg_u64(seed),
            arg_i32(f.mode),
            arg_f64(f.a),
            arg_f64(f.b),
            arg_u64(slot.ptr),
        ];
        self.launch(self.verify[&dtype], n, args, stream, || {
            format!("verifying inputs ({dtype})")
        })
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
