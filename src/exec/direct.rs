//! Trusted in-process GPU work for dataset maintenance (`cudaperf dataset check-originals
//! --gpu`): a task's own reference run on inputs given by the host, and the device input
//! generator's bytes for a seed (to hold [`crate::inputs`] to them). Candidates never run
//! here: they run in sandboxed runner processes under the timing protocol.

use super::driver::{self, Gpu};
use super::harness::{runner_launches, side_bytes};
use super::job::{ExecJob, Fill};
use super::runner::arg_bytes;
use super::support::Support;
use crate::task::DType;

/// A GPU opened in this process, with the harness's support kernels loaded.
pub struct DirectGpu {
    gpu: Gpu,
    support: Support,
    arch: String,
    name: String,
}

/// Why a direct GPU call failed (no device, a driver call, a reference that does not run),
/// in words that name the step.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct DirectGpuError(pub String);

impl DirectGpu {
    /// Opens the first visible GPU, its context waiting as the driver chooses; the error says
    /// why there is none.
    pub fn open() -> Result<DirectGpu, DirectGpuError> {
        DirectGpu::open_with(super::CtxSched::Auto)
    }

    /// Opens the first visible GPU, its context waiting for the GPU as `sched` says.
    pub fn open_with(sched: super::CtxSched) -> Result<DirectGpu, DirectGpuError> {
        let (gpu, info, _, support, arch) =
            super::support::open_gpu(sched).map_err(DirectGpuError)?;
        Ok(DirectGpu {
            gpu,
            support,
            arch,
            name: info.name,
        })
    }

    /// The NVRTC architecture of the device (`sm_90` on an H200).
    pub fn arch(&self) -> &str {
        &self.arch
    }

    /// The device's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The bytes the harness's fill kernel writes for `n` elements of `dtype` (read back).
    pub fn device_fill(
        &self,
        dtype: DType,
        n: u64,
        seed: u64,
        fill: &Fill,
    ) -> Result<Vec<u8>, DirectGpuError> {
        self.fill_bytes(dtype, n, seed, fill)
            .map_err(DirectGpuError)
    }

    fn fill_bytes(&self, dtype: DType, n: u64, seed: u64, fill: &Fill) -> Result<Vec<u8>, String> {
        let bytes = (n * dtype.size_bytes()) as usize;
        let buf = self
            .gpu
            .alloc(bytes, "generated inputs")
            .map_err(|e| e.to_string())?;
        self.support
            .fill(buf.slice(), dtype, n, seed, fill, self.gpu.stream())
            .map_err(|e| e.to_string())?;
        self.gpu
            .sync(|| "filling inputs".into())
            .map_err(|e| e.to_string())?;
        buf.slice().read(0, bytes).map_err(|e| e.to_string())
    }

    /// Runs the job's reference once on config `config` with these inputs (per ABI buffer:
    /// bytes for `in` / `inout`, `None` for `out`, which start poisoned as in the protocol);
    /// returns every ABI buffer's bytes afterwards.
    pub fn run_reference(
        &self,
        job: &ExecJob,
        config: usize,
        inputs: &[Option<Vec<u8>>],
    ) -> Result<Vec<Vec<u8>>, DirectGpuError> {
        self.run_reference_bytes(job, config, inputs)
            .map_err(DirectGpuError)
    }

    fn run_reference_bytes(
        &self,
        job: &ExecJob,
        config: usize,
        inputs: &[Option<Vec<u8>>],
    ) -> Result<Vec<Vec<u8>>, String> {
        let c = job
            .configs
            .get(config)
            .ok_or_else(|| format!("config index {config} out of range"))?;
        let e = |e: super::CudaError| e.to_string();
        let cubin = {
            use base64::Engine;
            base64::engine::general_purpose::STANDARD
                .decode(&job.reference.cubin_b64)
                .map_err(|e| format!("reference cubin: {e}"))?
        };
        let module = self.gpu.load_module(&cubin, "reference").map_err(e)?;
        let functions = job
            .reference
            .symbols
            .iter()
            .map(|(_, s)| module.function(s))
            .collect::<Result<Vec<_>, _>>()
            .map_err(e)?;
        let sizes = side_bytes(job, c, &c.reference, &job.reference.scratch);
        let mut buffers = Vec::with_capacity(sizes.len());
        for (i, &b) in sizes.iter().enumerate() {
            let buf = self
                .gpu
                .alloc(b as usize, &format!("buffer {i}"))
                .map_err(e)?;
            match inputs.get(i) {
                Some(Some(data)) => {
                    if data.len() as u64 != b {
                        return Err(format!(
                            "input buffer {i}: {} bytes given, the config needs {b}",
                            data.len()
                        ));
                    }
                    buf.slice().write(data).map_err(e)?;
                }
                // Outputs poisoned as the protocol does; scratch zeroed.
                Some(None) => buf.slice().memset(0xFF, self.gpu.stream()).map_err(e)?,
                None => buf.slice().memset(0, self.gpu.stream()).map_err(e)?,
            }
            buffers.push(buf);
        }
        for (k, l) in runner_launches(job, c, &c.reference).iter().enumerate() {
            let f = *functions
                .get(l.function)
                .ok_or_else(|| format!("launch {k}: no function {}", l.function))?;
            let mut args = arg_bytes(&l.args, &buffers);
            driver::launch(
                f,
                l.grid,
                l.block,
                l.smem,
                self.gpu.stream(),
                &mut args,
                || format!("reference launch {k}"),
            )
            .map_err(e)?;
        }
        self.gpu
            .sync(|| "running the reference".into())
            .map_err(e)?;
        buffers
            .iter()
            .take(job.buffers.len())
            .map(|b| b.slice().read(0, b.bytes).map_err(e))
            .collect()
    }
}
