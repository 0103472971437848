//! The worker side of a GPU job: inputs generated on the device, reference and candidate
//! run on one stream, every output compared on the device, then interleaved timing.
//!
//! A candidate can write anywhere in the context, so nothing it could have touched is
//! trusted afterwards. Order per config (input set A, then B):
//! 1. fill inputs from the seed;
//! 2. candidate run (outputs poisoned with 0xFF bytes = NaN / -1, inout restored, scratch zeroed);
//! 3. the pristine input copies regenerated from the seed and compared with the inputs
//!    (modified inputs fail and are restored);
//! 4. reference run, same preparation — after the candidate, so its outputs cannot have been
//!    forged; then outputs compared with tolerance and unwritten (still poisoned) elements counted;
//! 5. a second candidate run on fresh poison, and the reference again, must agree (races,
//!    first-call-only tricks);
//! 6. input set B: the candidate must match again, and its output must change when the
//!    reference's does.
//!
//! Reference output buffers are overwritten with poison before they are freed.

use std::collections::HashMap;
use std::time::Instant;

use base64::Engine;
use cudarc::driver::sys::{self, CUdevice_attribute as Attr};

use super::driver::{self, CudaError, DeviceBuffer, Event, Gpu, Module};
use super::job::{ExecJob, JobConfig, JobModule, JobParam, TimingOptions};
use super::report::*;
use super::timing;
use crate::candidate::{ResolvedArg, ResolvedPlan};
use crate::task::{DType, Direction};

const SUPPORT_SOURCE: &str = include_str!("support.cu");

/// Per-worker GPU state: the context and the harness kernels, created on first use.
#[derive(Default)]
pub struct WorkerState {
    gpu: Option<Result<Harness, String>>,
}

struct Harness {
    gpu: Gpu,
    _support: Module,
    fill: HashMap<DType, sys::CUfunction>,
    compare: HashMap<DType, sys::CUfunction>,
    stats: DeviceBuffer,
    flush: Option<DeviceBuffer>,
    info: DeviceInfo,
    max_warps_per_sm: i32,
}

/// Why a job stopped early.
enum Fault {
    Candidate(CudaError),
    Reference(CudaError),
    Invalid(String),
    Harness(CudaError),
}

type Run<T> = Result<T, Fault>;

fn cand<T>(r: Result<T, CudaError>) -> Run<T> {
    r.map_err(Fault::Candidate)
}
fn harness<T>(r: Result<T, CudaError>) -> Run<T> {
    r.map_err(Fault::Harness)
}

/// Datasheet memory bandwidth, GB/s, by device name (the floor must be a true upper bound
/// on speed, so datasheet peaks rather than measured copies).
fn table_bandwidth(name: &str) -> Option<f64> {
    let n = name.to_ascii_uppercase();
    let table: [(&str, f64); 9] = [
        ("H200", 4800.0),
        ("H100 PCIE", 2000.0),
        ("H100", 3350.0),
        ("A100-SXM4-80GB", 2039.0),
        ("A100 80GB PCIE", 1935.0),
        ("A100", 1555.0),
        ("L40", 864.0),
        ("RTX 4090", 1008.0),
        ("B200", 8000.0),
    ];
    table.iter().find(|(k, _)| n.contains(k)).map(|(_, v)| *v)
}

impl Harness {
    fn open() -> Result<Harness, String> {
        if !driver::driver_present() {
            return Err("libcuda not found: no NVIDIA driver on this machine".into());
        }
        let gpu = Gpu::open().map_err(|e| format!("no usable GPU: {e}"))?;
        let attr = |a| gpu.attribute(a).map_err(|e| e.to_string());
        let major = attr(Attr::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?;
        let minor = attr(Attr::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?;
        let sms = attr(Attr::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?;
        let l2 = attr(Attr::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE)?;
        let max_threads = attr(Attr::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR)?;
        let lib = crate::compile::nvrtc::load()?;
        let mut flags = vec![format!("-arch=sm_{major}{minor}"), "-std=c++17".to_string()];
        if let Some(dir) = &lib.include_dir {
            flags.push(format!("-I{}", dir.display()));
        }
        let out =
            crate::compile::nvrtc::compile(SUPPORT_SOURCE, "cudaperf_support.cu", &flags, &[])?;
        if !out.ok {
            return Err(format!("harness kernels failed to compile: {}", out.log));
        }
        let support = Module::load(&out.cubin, "harness kernels").map_err(|e| e.to_string())?;
        let mut fill = HashMap::new();
        let mut compare = HashMap::new();
        for d in DType::ALL {
            fill.insert(
                d,
                support
                    .function(&format!("fill_{}", d.as_str()))
                    .map_err(|e| e.to_string())?,
            );
            compare.insert(
                d,
                support
                    .function(&format!("compare_{}", d.as_str()))
                    .map_err(|e| e.to_string())?,
            );
        }
        let stats = DeviceBuffer::alloc(48, "comparison statistics").map_err(|e| e.to_string())?;
        let flush = DeviceBuffer::alloc(
            (2 * l2.max(1) as usize).next_multiple_of(4),
            "L2 flush buffer",
        )
        .ok();
        let name = gpu.name();
        let info = DeviceInfo {
            bandwidth_gbps: table_bandwidth(&name).unwrap_or(0.0),
            name,
            compute_capability: (major, minor),
            driver_version: Gpu::driver_version(),
            sms,
            l2_bytes: l2 as i64,
            memory_bytes: gpu.total_memory(),
        };
        Ok(Harness {
            gpu,
            _support: support,
            fill,
            compare,
            stats,
            flush,
            info,
            max_warps_per_sm: (max_threads / 32).max(1),
        })
    }

    fn grid_for(&self, n: u64) -> u32 {
        (n.div_ceil(256)).clamp(1, (self.info.sms.max(1) as u64) * 16) as u32
    }

    fn fill(
        &self,
        buf: &DeviceBuffer,
        dtype: DType,
        n: u64,
        seed: u64,
        f: &super::job::Fill,
    ) -> Result<(), CudaError> {
        if n == 0 {
            return Ok(());
        }
        let mut args = vec![
            arg_u64(buf.ptr),
            arg_u64(n),
            arg_u64(seed),
            arg_i32(f.mode),
            arg_f64(f.a),
            arg_f64(f.b),
        ];
        driver::launch(
            self.fill[&dtype],
            [self.grid_for(n), 1, 1],
            [256, 1, 1],
            0,
            self.gpu.stream,
            &mut args,
            || format!("filling inputs ({dtype})"),
        )
    }

    /// Compares `n` elements; returns the statistics.
    #[allow(clippy::too_many_arguments)]
    fn compare(
        &self,
        got: &DeviceBuffer,
        want: &DeviceBuffer,
        dtype: DType,
        n: u64,
        atol: f64,
        rtol: f64,
        nan_equal: bool,
    ) -> Result<Stats, CudaError> {
        let mut init = [0u8; 48];
        init[16..24].copy_from_slice(&u64::MAX.to_le_bytes());
        self.gpu.sync(|| "synchronize before compare".into())?;
        self.stats.write(&init)?;
        if n > 0 {
            let mut args = vec![
                arg_u64(got.ptr),
                arg_u64(want.ptr),
                arg_u64(n),
                arg_f64(atol),
                arg_f64(rtol),
                arg_i32(nan_equal as i32),
                arg_u64(self.stats.ptr),
            ];
            driver::launch(
                self.compare[&dtype],
                [self.grid_for(n), 1, 1],
                [256, 1, 1],
                0,
                self.gpu.stream,
                &mut args,
                || format!("comparing outputs ({dtype})"),
            )?;
        }
        self.gpu.sync(|| "synchronize after compare".into())?;
        let raw = self.stats.read(0, 48)?;
        let word =
            |i: usize| u64::from_le_bytes(raw[i * 8..i * 8 + 8].try_into().unwrap_or([0; 8]));
        Ok(Stats {
            mismatches: word(0),
            unwritten: word(1),
            first_index: (word(2) != u64::MAX).then(|| word(2)),
            max_abs: f64::from_bits(word(3)),
            max_rel: f64::from_bits(word(4)),
        })
    }
}

struct Stats {
    mismatches: u64,
    unwritten: u64,
    first_index: Option<u64>,
    max_abs: f64,
    max_rel: f64,
}

fn arg_u64(v: u64) -> [u8; 8] {
    v.to_le_bytes()
}
fn arg_i32(v: i32) -> [u8; 8] {
    let mut a = [0u8; 8];
    a[..4].copy_from_slice(&v.to_le_bytes());
    a
}
fn arg_f64(v: f64) -> [u8; 8] {
    v.to_le_bytes()
}

fn f16_to_f32(bits: u16) -> f32 {
    let sign = ((bits >> 15) as u32) << 31;
    let exp = ((bits >> 10) & 0x1f) as u32;
    let frac = (bits & 0x3ff) as u32;
    let v = match exp {
        0 => {
            let mag = frac as f32 * 2f32.powi(-24);
            return if sign != 0 { -mag } else { mag };
        }
        0x1f => sign | 0x7f80_0000 | (frac << 13),
        e => sign | ((e + 112) << 23) | (frac << 13),
    };
    f32::from_bits(v)
}

fn f32_to_f16(v: f32) -> u16 {
    let x = v.to_bits();
    let sign = ((x >> 16) & 0x8000) as u16;
    let exp = ((x >> 23) & 0xff) as i32;
    let frac = x & 0x7f_ffff;
    if exp == 0xff {
        return sign | 0x7c00 | if frac != 0 { 0x200 } else { 0 };
    }
    let e = exp - 127 + 15;
    if e >= 0x1f {
        sign | 0x7c00
    } else if e <= 0 {
        if e < -10 {
            sign
        } else {
            let m = (frac | 0x80_0000) >> (1 - e + 13);
            sign | m as u16
        }
    } else {
        sign | ((e as u16) << 10) | ((frac >> 13) as u16)
    }
}

/// Bytes of a scalar argument of `dtype` holding `v`.
fn scalar_arg(dtype: DType, v: f64) -> [u8; 8] {
    let mut a = [0u8; 8];
    match dtype {
        DType::F32 => a[..4].copy_from_slice(&(v as f32).to_le_bytes()),
        DType::F64 => a.copy_from_slice(&v.to_le_bytes()),
        DType::F16 => a[..2].copy_from_slice(&f32_to_f16(v as f32).to_le_bytes()),
        DType::Bf16 => a[..2].copy_from_slice(&(((v as f32).to_bits() >> 16) as u16).to_le_bytes()),
        DType::I32 => a[..4].copy_from_slice(&(v as i32).to_le_bytes()),
        DType::I64 => a.copy_from_slice(&(v as i64).to_le_bytes()),
        DType::U8 => a[0] = v as u8,
    }
    a
}

/// An element read back from the device, as f64.
fn element_value(dtype: DType, bytes: &[u8]) -> f64 {
    let b = |n: usize| -> Vec<u8> {
        bytes
            .iter()
            .copied()
            .chain(std::iter::repeat(0))
            .take(n)
            .collect()
    };
    match dtype {
        DType::F32 => f32::from_le_bytes(b(4).try_into().unwrap_or([0; 4])) as f64,
        DType::F64 => f64::from_le_bytes(b(8).try_into().unwrap_or([0; 8])),
        DType::F16 => f16_to_f32(u16::from_le_bytes(b(2).try_into().unwrap_or([0; 2]))) as f64,
        DType::Bf16 => {
            f32::from_bits((u16::from_le_bytes(b(2).try_into().unwrap_or([0; 2])) as u32) << 16)
                as f64
        }
        DType::I32 => i32::from_le_bytes(b(4).try_into().unwrap_or([0; 4])) as f64,
        DType::I64 => i64::from_le_bytes(b(8).try_into().unwrap_or([0; 8])) as f64,
        DType::U8 => b(1)[0] as f64,
    }
}

/// One side's loaded kernels.
struct Side {
    _module: Module,
    functions: Vec<sys::CUfunction>,
}

impl Side {
    fn load(m: &JobModule, what: &str) -> Result<Side, CudaError> {
        let cubin = base64::engine::general_purpose::STANDARD
            .decode(&m.cubin_b64)
            .unwrap_or_default();
        let module = Module::load(&cubin, what)?;
        let functions = m
            .symbols
            .iter()
            .map(|(_, sym)| module.function(sym))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Side {
            _module: module,
            functions,
        })
    }
}

/// Device memory of one config.
struct ConfigBuffers {
    /// Per ABI buffer: the input (in) — shared by both sides.
    input: Vec<Option<DeviceBuffer>>,
    /// Pristine copy of each in/inout buffer.
    pristine: Vec<Option<DeviceBuffer>>,
    /// Outputs (out/inout) per side.
    out_ref: Vec<Option<DeviceBuffer>>,
    out_cand: Vec<Option<DeviceBuffer>>,
    saved: Vec<Option<DeviceBuffer>>,
    scratch_ref: Vec<DeviceBuffer>,
    scratch_cand: Vec<DeviceBuffer>,
}

impl Drop for ConfigBuffers {
    fn drop(&mut self) {
        // Reference results must not be readable by whatever allocates this memory next.
        for b in self
            .out_ref
            .iter()
            .flatten()
            .chain(self.saved.iter().flatten())
        {
            // SAFETY: synchronous memset of owned memory; errors after a sticky fault are moot.
            unsafe {
                let _ = sys::cuMemsetD8_v2(b.ptr, 0xFF, b.bytes);
            }
        }
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Who {
    Reference,
    Candidate,
}

impl WorkerState {
    /// Runs a job; the flag asks the parent to restart this worker.
    pub fn execute(&mut self, job: &ExecJob) -> (ExecResult, bool) {
        let start = Instant::now();
        let h = match self.gpu.get_or_insert_with(Harness::open) {
            Ok(h) => h,
            Err(reason) => {
                return (
                    ExecResult::status_only(ExecStatus::Unavailable {
                        reason: reason.clone(),
                    }),
                    false,
                )
            }
        };
        let mut gpu_ms = 0.0;
        let outcome = run_job(h, job, &mut gpu_ms);
        let device = Some(h.info.clone());
        let (status, correctness, timing, restart) = match outcome {
            Ok((c, t)) => (ExecStatus::Ok, Some(c), t, false),
            Err(Fault::Candidate(e)) => (
                ExecStatus::CudaError {
                    code: e.code,
                    name: e.name,
                    during: e.during,
                },
                None,
                None,
                true,
            ),
            Err(Fault::Reference(e)) => (
                ExecStatus::ReferenceFailed {
                    reason: e.to_string(),
                },
                None,
                None,
                true,
            ),
            Err(Fault::Harness(e)) => (
                ExecStatus::Unavailable {
                    reason: format!("harness failure: {e}"),
                },
                None,
                None,
                true,
            ),
            Err(Fault::Invalid(reason)) => {
                (ExecStatus::InvalidLaunch { reason }, None, None, false)
            }
        };
        if restart {
            // The context may be poisoned; nothing more runs in this process.
            self.gpu = None;
        }
        (
            ExecResult {
                status,
                correctness,
                timing,
                device,
                millis: start.elapsed().as_secs_f64() * 1e3,
                gpu_millis: gpu_ms,
            },
            restart,
        )
    }
}

fn config_bytes(job: &ExecJob, c: &JobConfig) -> u64 {
    let mut total = 0u64;
    for (b, n) in job.buffers.iter().zip(&c.lens) {
        let bytes = n * b.dtype.size_bytes();
        total += match b.direction {
            Direction::In => 2 * bytes,
            Direction::Out => 3 * bytes,
            Direction::Inout => 4 * bytes,
        };
    }
    let scratch = |plan: &ResolvedPlan, dtypes: &[DType]| -> u64 {
        plan.scratch_lens
            .iter()
            .zip(dtypes)
            .map(|(n, d)| n * d.size_bytes())
            .sum()
    };
    total
        + scratch(&c.reference, &job.reference.scratch)
        + scratch(&c.candidate, &job.candidate.scratch)
}

fn alloc_config(job: &ExecJob, c: &JobConfig) -> Result<ConfigBuffers, CudaError> {
    let mut bufs = ConfigBuffers {
        input: Vec::new(),
        pristine: Vec::new(),
        out_ref: Vec::new(),
        out_cand: Vec::new(),
        saved: Vec::new(),
        scratch_ref: Vec::new(),
        scratch_cand: Vec::new(),
    };
    for (b, &n) in job.buffers.iter().zip(&c.lens) {
        let bytes = (n * b.dtype.size_bytes()) as usize;
        let alloc = |wanted: bool, what: &str| -> Result<Option<DeviceBuffer>, CudaError> {
            wanted
                .then(|| DeviceBuffer::alloc(bytes, &format!("{what} `{}`", b.name)))
                .transpose()
        };
        let (input, output) = (b.direction.is_input(), b.direction.is_output());
        bufs.input
            .push(alloc(b.direction == Direction::In, "input")?);
        bufs.pristine.push(alloc(input, "pristine copy of")?);
        bufs.out_ref.push(alloc(output, "reference output")?);
        bufs.out_cand.push(alloc(output, "candidate output")?);
        bufs.saved.push(alloc(output, "saved output")?);
    }
    let scratch = |plan: &ResolvedPlan,
                   dtypes: &[DType],
                   what: &str|
     -> Result<Vec<DeviceBuffer>, CudaError> {
        plan.scratch_lens
            .iter()
            .zip(dtypes)
            .map(|(n, d)| DeviceBuffer::alloc((n * d.size_bytes()) as usize, what))
            .collect()
    };
    bufs.scratch_ref = scratch(&c.reference, &job.reference.scratch, "reference scratch")?;
    bufs.scratch_cand = scratch(&c.candidate, &job.candidate.scratch, "candidate scratch")?;
    Ok(bufs)
}

/// Fills the inputs of a config with `seed` (in buffers and the pristine copies).
fn fill_inputs(
    h: &Harness,
    job: &ExecJob,
    c: &JobConfig,
    bufs: &ConfigBuffers,
    seed: u64,
    copy_to_inputs: bool,
) -> Result<(), CudaError> {
    for (i, b) in job.buffers.iter().enumerate() {
        let Some(f) = &c.fills[i] else { continue };
        let Some(pristine) = &bufs.pristine[i] else {
            continue;
        };
        // Each buffer gets its own stream of numbers.
        let s = seed ^ (0x9E37_79B9_7F4A_7C15u64.wrapping_mul(i as u64 + 1));
        h.fill(pristine, b.dtype, c.lens[i], s, f)?;
        if let (true, Some(input)) = (copy_to_inputs, &bufs.input[i]) {
            input.copy_from(pristine, h.gpu.stream)?;
        }
    }
    Ok(())
}

/// Poisons outputs, restores inout buffers and zeroes scratch for one side.
fn prepare(h: &Harness, job: &ExecJob, bufs: &ConfigBuffers, who: Who) -> Result<(), CudaError> {
    let (outs, scratch) = match who {
        Who::Reference => (&bufs.out_ref, &bufs.scratch_ref),
        Who::Candidate => (&bufs.out_cand, &bufs.scratch_cand),
    };
    for (i, b) in job.buffers.iter().enumerate() {
        let Some(o) = &outs[i] else { continue };
        match b.direction {
            Direction::Inout => {
                o.copy_from(bufs.pristine[i].as_ref().unwrap_or(o), h.gpu.stream)?
            }
            _ => o.memset(0xFF, h.gpu.stream)?,
        }
    }
    for s in scratch {
        s.memset(0, h.gpu.stream)?;
    }
    Ok(())
}

/// Launches one side's plan (no synchronisation).
fn launch_plan(
    h: &Harness,
    job: &ExecJob,
    c: &JobConfig,
    bufs: &ConfigBuffers,
    side: &Side,
    who: Who,
) -> Result<(), CudaError> {
    let (plan, outs, scratch) = match who {
        Who::Reference => (&c.reference, &bufs.out_ref, &bufs.scratch_ref),
        Who::Candidate => (&c.candidate, &bufs.out_cand, &bufs.scratch_cand),
    };
    for (li, l) in plan.launches.iter().enumerate() {
        let mut args: Vec<[u8; 8]> = Vec::with_capacity(l.args.len());
        for a in &l.args {
            args.push(match a {
                ResolvedArg::Param { index } => match job.params.get(*index) {
                    Some(JobParam::Buffer { buffer }) => {
                        let buf = outs[*buffer].as_ref().or(bufs.input[*buffer].as_ref());
                        arg_u64(buf.map_or(0, |b| b.ptr))
                    }
                    Some(JobParam::Scalar { dtype }) => scalar_arg(*dtype, c.scalars[*index]),
                    None => arg_u64(0),
                },
                ResolvedArg::Scratch { index } => arg_u64(scratch.get(*index).map_or(0, |b| b.ptr)),
                ResolvedArg::Int { value } => arg_i32(*value),
            });
        }
        let f = *side.functions.get(li).ok_or_else(|| CudaError {
            code: -1,
            name: "NO_FUNCTION".into(),
            during: format!("launch {li}"),
        })?;
        driver::launch(f, l.grid, l.block, l.smem, h.gpu.stream, &mut args, || {
            format!("launch of `{}` (config `{}`)", l.kernel, c.name)
        })?;
    }
    Ok(())
}

fn run_side(
    h: &Harness,
    job: &ExecJob,
    c: &JobConfig,
    bufs: &ConfigBuffers,
    side: &Side,
    who: Who,
) -> Result<(), CudaError> {
    prepare(h, job, bufs, who)?;
    launch_plan(h, job, c, bufs, side, who)?;
    h.gpu.sync(|| {
        format!(
            "synchronize after the {} plan (config `{}`)",
            if who == Who::Reference {
                "reference"
            } else {
                "candidate"
            },
            c.name
        )
    })
}

/// Compares every output of the candidate with `want` (per buffer).
fn compare_outputs(
    h: &Harness,
    job: &ExecJob,
    c: &JobConfig,
    got: &[Option<DeviceBuffer>],
    want: &[Option<DeviceBuffer>],
    nan_equal: bool,
    exact: bool,
) -> Result<(Stats, Option<Mismatch>), CudaError> {
    let mut total = Stats {
        mismatches: 0,
        unwritten: 0,
        first_index: None,
        max_abs: 0.0,
        max_rel: 0.0,
    };
    let mut first = None;
    for (i, b) in job.buffers.iter().enumerate() {
        let (Some(g), Some(w)) = (&got[i], &want[i]) else {
            continue;
        };
        let (atol, rtol) = if exact {
            (0.0, 0.0)
        } else {
            (job.tolerance.atol, job.tolerance.rtol)
        };
        let s = h.compare(g, w, b.dtype, c.lens[i], atol, rtol, nan_equal)?;
        if first.is_none() {
            if let Some(idx) = s.first_index {
                let size = b.dtype.size_bytes() as usize;
                let off = idx as usize * size;
                first = Some(Mismatch {
                    buffer: b.name.clone(),
                    index: idx,
                    got: element_value(b.dtype, &g.read(off, size)?),
                    want: element_value(b.dtype, &w.read(off, size)?),
                });
            }
        }
        total.mismatches += s.mismatches;
        total.unwritten += s.unwritten;
        total.max_abs = total.max_abs.max(s.max_abs);
        total.max_rel = total.max_rel.max(s.max_rel);
    }
    Ok((total, first))
}

fn copy_outputs(
    h: &Harness,
    from: &[Option<DeviceBuffer>],
    to: &[Option<DeviceBuffer>],
) -> Result<(), CudaError> {
    for (f, t) in from.iter().zip(to) {
        if let (Some(f), Some(t)) = (f, t) {
            t.copy_from(f, h.gpu.stream)?;
        }
    }
    Ok(())
}

fn inputs_modified(
    h: &Harness,
    job: &ExecJob,
    c: &JobConfig,
    bufs: &ConfigBuffers,
    seed: u64,
) -> Result<bool, CudaError> {
    // A candidate can write anywhere in the context, the pristine copies included, so they
    // are regenerated from the seed (our kernel, after the candidate finished) before the
    // comparison rather than trusted.
    fill_inputs(h, job, c, bufs, seed, false)?;
    let mut modified = false;
    for (i, _) in job.buffers.iter().enumerate() {
        if let (Some(input), Some(pristine)) = (&bufs.input[i], &bufs.pristine[i]) {
            let s = h.compare(
                input,
                pristine,
                DType::U8,
                input.bytes as u64,
                0.0,
                0.0,
                true,
            )?;
            if s.mismatches > 0 {
                // Restore, so later runs see the real inputs.
                input.copy_from(pristine, h.gpu.stream)?;
                modified = true;
            }
        }
    }
    Ok(modified)
}

/// The seed of the second input set.
fn seed_b(seed: u64) -> u64 {
    seed.wrapping_mul(0x2545_F491_4F6C_DD1D).wrapping_add(1)
}

/// Candidate first, then the inputs verified, then the reference: the reference writes its
/// outputs after the candidate has finished, so a candidate that writes out of bounds into
/// the reference's buffers cannot make them agree with it. Returns whether inputs changed.
fn candidate_then_reference(
    h: &Harness,
    job: &ExecJob,
    c: &JobConfig,
    bufs: &ConfigBuffers,
    sides: (&Side, &Side),
    seed: u64,
) -> Run<bool> {
    let (reference, candidate) = sides;
    cand(run_side(h, job, c, bufs, candidate, Who::Candidate))?;
    let modified = harness(inputs_modified(h, job, c, bufs, seed))?;
    run_side(h, job, c, bufs, reference, Who::Reference).map_err(Fault::Reference)?;
    Ok(modified)
}

fn check_config(
    h: &Harness,
    job: &ExecJob,
    c: &JobConfig,
    bufs: &ConfigBuffers,
    sides: (&Side, &Side),
    gpu_ms: &mut f64,
) -> Run<ConfigCheck> {
    let mut check = ConfigCheck {
        config: c.name.clone(),
        passed: false,
        max_abs_err: 0.0,
        max_rel_err: 0.0,
        mismatches: 0,
        elements: job
            .buffers
            .iter()
            .zip(&c.lens)
            .filter(|(b, _)| b.direction.is_output())
            .map(|(_, n)| *n)
            .sum(),
        first_mismatch: None,
        unwritten: 0,
        inputs_modified: false,
        nondeterministic: false,
        input_independent: false,
        timed_run_mismatch: false,
        reasons: Vec::new(),
    };
    let cmp =
        |got: &[Option<DeviceBuffer>],
         want: &[Option<DeviceBuffer>],
         nan_equal: bool,
         exact: bool| { harness(compare_outputs(h, job, c, got, want, nan_equal, exact)) };
    let t = Instant::now();
    // Input set A.
    harness(fill_inputs(h, job, c, bufs, job.seed, true))?;
    check.inputs_modified = candidate_then_reference(h, job, c, bufs, sides, job.seed)?;
    let (s, first) = cmp(&bufs.out_cand, &bufs.out_ref, false, false)?;
    check.mismatches = s.mismatches;
    check.unwritten = s.unwritten;
    check.max_abs_err = s.max_abs;
    check.max_rel_err = s.max_rel;
    check.first_mismatch = first;
    // Second run on fresh poison: races and first-call-only work show up here. The
    // reference runs again after it, so the comparison with it cannot be forged.
    harness(copy_outputs(h, &bufs.out_cand, &bufs.saved))?;
    check.inputs_modified |= candidate_then_reference(h, job, c, bufs, sides, job.seed)?;
    let (again, _) = cmp(&bufs.out_cand, &bufs.saved, true, false)?;
    check.nondeterministic = again.mismatches > 0;
    let (again_ref, _) = cmp(&bufs.out_cand, &bufs.out_ref, false, false)?;
    // Input set B: must still match, and must change when the reference changes.
    let random_inputs = c.fills.iter().flatten().any(|f| f.random);
    let mut b_mismatches = 0;
    if random_inputs {
        harness(fill_inputs(h, job, c, bufs, seed_b(job.seed), true))?;
        if candidate_then_reference(h, job, c, bufs, sides, seed_b(job.seed))? {
            check.inputs_modified = true;
        }
        let (sb, fb) = cmp(&bufs.out_cand, &bufs.out_ref, false, false)?;
        b_mismatches = sb.mismatches;
        check.unwritten = check.unwritten.max(sb.unwritten);
        check.max_abs_err = check.max_abs_err.max(sb.max_abs);
        check.max_rel_err = check.max_rel_err.max(sb.max_rel);
        if check.first_mismatch.is_none() {
            check.first_mismatch = fb;
        }
        let (same_cand, _) = cmp(&bufs.out_cand, &bufs.saved, true, true)?;
        let (ref_changed, _) = cmp(&bufs.out_ref, &bufs.saved, true, false)?;
        check.input_independent = same_cand.mismatches == 0 && ref_changed.mismatches > 0;
    }
    *gpu_ms += t.elapsed().as_secs_f64() * 1e3;
    if check.mismatches > 0 || b_mismatches > 0 {
        check.mismatches = check.mismatches.max(b_mismatches);
        check.reasons.push(format!(
            "{} of {} output elements differ from the reference",
            check.mismatches, check.elements
        ));
    }
    if check.unwritten > 0 {
        check.reasons.push(format!(
            "{} output elements were never written",
            check.unwritten
        ));
    }
    if check.inputs_modified {
        check
            .reasons
            .push("the candidate modified an input buffer".into());
    }
    // A second run that disagrees with the first, or fails where the first passed.
    if check.nondeterministic || (check.mismatches == 0 && again_ref.mismatches > 0) {
        check.nondeterministic = true;
        check.reasons.push("a second run on the same inputs gave a different result (race or first-call-only work)".into());
    }
    if check.input_independent {
        check
            .reasons
            .push("the output did not change when the inputs did".into());
    }
    check.passed = check.reasons.is_empty();
    Ok(check)
}

fn run_job(
    h: &Harness,
    job: &ExecJob,
    gpu_ms: &mut f64,
) -> Run<(CorrectnessStage, Option<TimingStage>)> {
    if job.params.len() != job.configs.first().map_or(0, |c| c.scalars.len()) {
        return Err(Fault::Invalid(
            "job parameters and config scalars disagree".into(),
        ));
    }
    let reference = Side::load(&job.reference, "reference").map_err(Fault::Reference)?;
    let candidate = cand(Side::load(&job.candidate, "candidate"))?;
    let cap = if job.max_device_bytes > 0 {
        job.max_device_bytes
    } else {
        h.gpu.free_memory() / 10 * 9
    };
    let mut checks = Vec::new();
    let mut timing_stage = None;
    for (k, c) in job.configs.iter().enumerate() {
        let need = config_bytes(job, c);
        if need > cap {
            return Err(Fault::Invalid(format!(
                "config `{}` needs {need} bytes of device memory (buffers, copies and scratch), more than the cap of {cap}",
                c.name
            )));
        }
        let bufs = harness(alloc_config(job, c))?;
        let check = check_config(h, job, c, &bufs, (&reference, &candidate), gpu_ms)?;
        checks.push(check);
        if k == job.timing_config {
            if let Some(opts) = &job.timing {
                if checks.iter().all(|c| c.passed) {
                    let t = time_config(h, job, c, &bufs, (&reference, &candidate), opts, gpu_ms)?;
                    if t.1 {
                        if let Some(last) = checks.last_mut() {
                            last.timed_run_mismatch = true;
                            last.passed = false;
                            last.reasons.push(
                                "the output of the last timed run differs from the reference"
                                    .into(),
                            );
                        }
                    } else {
                        timing_stage = Some(t.0);
                    }
                }
            }
        }
    }
    // A config timed before a later one failed must not award a speedup.
    let passed = checks.iter().filter(|c| c.passed).count();
    if passed < checks.len() {
        timing_stage = None;
    }
    Ok((
        CorrectnessStage {
            passed: passed == checks.len() && !checks.is_empty(),
            pass_rate: if checks.is_empty() {
                0.0
            } else {
                passed as f64 / checks.len() as f64
            },
            configs: checks,
            seed: job.seed,
        },
        timing_stage,
    ))
}

/// Interleaved timing; returns the stage and whether the last timed output was wrong.
fn time_config(
    h: &Harness,
    job: &ExecJob,
    c: &JobConfig,
    bufs: &ConfigBuffers,
    sides: (&Side, &Side),
    opts: &TimingOptions,
    gpu_ms: &mut f64,
) -> Run<(TimingStage, bool)> {
    let (reference, candidate) = sides;
    let stream = h.gpu.stream;
    // Events for a batch of repetitions: one host synchronisation per batch, not per run.
    const BATCH: u32 = 8;
    let ev: Vec<Event> = (0..4 * BATCH)
        .map(|_| Event::new())
        .collect::<Result<_, _>>()
        .map_err(Fault::Harness)?;
    let flush = |rep: u32| -> Result<(), CudaError> {
        if let (true, Some(f)) = (opts.flush_l2, &h.flush) {
            // SAFETY: owned buffer; words = bytes / 4.
            unsafe {
                sys::cuMemsetD32Async(f.ptr, rep.wrapping_mul(2654435761), f.bytes / 4, stream)
            }
            .result()
            .map_err(|e| CudaError {
                code: e.0 as i32,
                name: format!("{:?}", e.0),
                during: "L2 flush".into(),
            })?;
        }
        Ok(())
    };
    let one = |who: Who, side: &Side, e0: &Event, e1: &Event, rep: u32| -> Run<()> {
        let wrap = |r: Result<(), CudaError>| {
            if who == Who::Reference {
                r.map_err(Fault::Reference)
            } else {
                r.map_err(Fault::Candidate)
            }
        };
        // Poisoned before every timed run too: a candidate that skips work once its output
        // looks done leaves NaN behind, which the last-run check catches.
        wrap(prepare(h, job, bufs, who))?;
        harness(flush(rep))?;
        harness(e0.record(stream))?;
        wrap(launch_plan(h, job, c, bufs, side, who))?;
        harness(e1.record(stream))
    };
    let mut ref_us = Vec::new();
    let mut cand_us = Vec::new();
    let mut spent_ms = 0.0;
    let total_reps = opts.warmup + opts.max_reps.max(opts.min_reps);
    let mut rep = 0;
    'outer: while rep < total_reps {
        let batch = BATCH.min(total_reps - rep);
        for b in 0..batch {
            let e = &ev[(4 * b) as usize..(4 * b + 4) as usize];
            let r = rep + b;
            // Alternate the order so drift and cache state favour neither side.
            if r % 2 == 0 {
                one(Who::Reference, reference, &e[0], &e[1], r)?;
                one(Who::Candidate, candidate, &e[2], &e[3], r)?;
            } else {
                one(Who::Candidate, candidate, &e[2], &e[3], r)?;
                one(Who::Reference, reference, &e[0], &e[1], r)?;
            }
        }
        h.gpu
            .sync(|| "synchronize after timed runs".into())
            .map_err(Fault::Candidate)?;
        for b in 0..batch {
            let e = &ev[(4 * b) as usize..(4 * b + 4) as usize];
            let r_us = harness(e[1].elapsed_since(&e[0]))? as f64 * 1e3;
            let k_us = harness(e[3].elapsed_since(&e[2]))? as f64 * 1e3;
            spent_ms += (r_us + k_us) / 1e3;
            if rep + b >= opts.warmup {
                ref_us.push(r_us);
                cand_us.push(k_us);
            }
        }
        rep += batch;
        if ref_us.len() as u32 >= opts.min_reps && spent_ms >= opts.budget_ms {
            break 'outer;
        }
    }
    *gpu_ms += spent_ms;
    // The last timed run's outputs are still in place: check them too, against a reference
    // run made after it, on inputs verified after it.
    let random = c.fills.iter().flatten().any(|f| f.random);
    let seed = if random { seed_b(job.seed) } else { job.seed };
    let modified = harness(inputs_modified(h, job, c, bufs, seed))?;
    run_side(h, job, c, bufs, reference, Who::Reference).map_err(Fault::Reference)?;
    let (last, _) = harness(compare_outputs(
        h,
        job,
        c,
        &bufs.out_cand,
        &bufs.out_ref,
        false,
        false,
    ))?;
    let ref_med = timing::median(&ref_us);
    let cand_med = timing::median(&cand_us);
    let raw = ref_med / cand_med;
    let seed = job.seed ^ 0xA5A5;
    let ci95 = timing::ratio_ci(&ref_us, &cand_us, opts.bootstrap as usize, seed);
    let noise = timing::noise_floor(&ref_us, opts.bootstrap as usize, seed, opts.min_noise_floor);
    let bandwidth = if job.bandwidth_gbps > 0.0 {
        job.bandwidth_gbps
    } else {
        h.info.bandwidth_gbps
    };
    let bytes = job.abi_bytes(job.timing_config) as f64;
    let floor_us = if bandwidth > 0.0 {
        bytes / (bandwidth * 1e3)
    } else {
        0.0
    };
    let implausible = floor_us > 0.0 && cand_med < floor_us;
    let within_noise = (raw - 1.0).abs() <= noise;
    let speedup = if implausible {
        0.0
    } else if within_noise {
        1.0
    } else {
        raw
    };
    let mut occupancy = Vec::new();
    for (l, f) in c.candidate.launches.iter().zip(&candidate.functions) {
        let threads = l.block.iter().product::<u32>();
        if let Ok(blocks) = driver::occupancy_blocks(*f, threads, l.smem) {
            let warps = blocks as f64 * (threads.div_ceil(32)) as f64;
            occupancy.push(KernelOccupancy {
                kernel: l.kernel.clone(),
                block_threads: threads,
                blocks_per_sm: blocks,
                occupancy: (warps / h.max_warps_per_sm as f64).min(1.0),
            });
        }
    }
    Ok((
        TimingStage {
            config: c.name.clone(),
            reference_us: ref_med,
            candidate_us: cand_med,
            speedup,
            raw_speedup: raw,
            ci95,
            noise_floor: noise,
            within_noise,
            implausible,
            floor_us,
            achieved_gbps: if cand_med > 0.0 {
                bytes / (cand_med * 1e3)
            } else {
                0.0
            },
            repetitions: ref_us.len() as u32,
            occupancy,
        },
        last.mismatches > 0 || last.unwritten > 0 || modified,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn half_conversions_round_trip() {
        for v in [0.0f32, 1.0, -2.5, 65504.0, 0.000061035156, 1e-7] {
            let back = f16_to_f32(f32_to_f16(v));
            assert!((back - v).abs() <= v.abs() * 1e-3 + 1e-7, "{v} -> {back}");
        }
        assert!(f16_to_f32(0xFFFF).is_nan());
    }

    #[test]
    fn scalar_args_have_the_right_bytes() {
        assert_eq!(&scalar_arg(DType::I32, 7.0)[..4], &7i32.to_le_bytes());
        assert_eq!(&scalar_arg(DType::F32, 0.5)[..4], &0.5f32.to_le_bytes());
        assert_eq!(scalar_arg(DType::I64, -3.0), (-3i64).to_le_bytes());
        assert_eq!(element_value(DType::Bf16, &[0x80, 0x3f]), 1.0);
        assert_eq!(element_value(DType::U8, &[200]), 200.0);
    }

    #[test]
    fn bandwidth_table() {
        assert_eq!(table_bandwidth("NVIDIA H200"), Some(4800.0));
        assert_eq!(table_bandwidth("NVIDIA H100 PCIe"), Some(2000.0));
        assert_eq!(table_bandwidth("NVIDIA H100 80GB HBM3"), Some(3350.0));
        assert_eq!(table_bandwidth("Mystery GPU"), None);
    }
}
