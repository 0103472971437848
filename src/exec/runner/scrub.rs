//! The scrub kernels a runner runs before its buffers are freed and between members' runs.

use cudarc::driver::sys;

use crate::exec::driver::{self, CudaError, DeviceBuffer, Gpu, Module};

/// The scrub kernels (`scrub.cu`) of one runner's context, compiled for its device.
pub(super) struct Scrubber {
    shared: sys::CUfunction,
    /// (local bytes per thread it overwrites, kernel), smallest first.
    local: Vec<(u32, sys::CUfunction)>,
    sms: u32,
    threads_per_sm: u32,
    shared_bytes: u32,
    sink: DeviceBuffer,
    // Last: the functions above belong to it.
    _module: Module,
}

const SCRUB_SOURCE: &str = include_str!("../scrub.cu");

impl Scrubber {
    pub(super) fn new(gpu: &Gpu) -> Result<Scrubber, String> {
        use sys::CUdevice_attribute as A;
        let attr = |a: A| gpu.attribute(a).map_err(|e| e.to_string());
        let arch = format!(
            "sm_{}{}",
            attr(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?,
            attr(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?
        );
        let lib = crate::compile::nvrtc::load().map_err(|e| e.to_string())?;
        let mut flags = vec![format!("-arch={arch}")];
        if let Some(dir) = &lib.include_dir {
            flags.push(format!("-I{}", dir.display()));
        }
        let out = crate::compile::nvrtc::compile(SCRUB_SOURCE, "cudaperf_scrub.cu", &flags, &[])
            .map_err(|e| e.to_string())?;
        if !out.ok {
            return Err(format!(
                "the runner's scrub kernels failed to compile: {}",
                out.log
            ));
        }
        let module = gpu
            .load_module(&out.cubin, "scrub kernels")
            .map_err(|e| e.to_string())?;
        let f = |n: &str| module.function(n).map_err(|e| e.to_string());
        let local = vec![
            (1 << 10, f("scrub_local_1k")?),
            (4 << 10, f("scrub_local_4k")?),
            (16 << 10, f("scrub_local_16k")?),
            (64 << 10, f("scrub_local_64k")?),
        ];
        Ok(Scrubber {
            shared: f("scrub_shared")?,
            local,
            sms: attr(A::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?.max(1) as u32,
            threads_per_sm: attr(A::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR)?.max(32)
                as u32,
            shared_bytes: attr(A::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)?.max(0)
                as u32,
            sink: gpu.alloc(4, "scrub sink").map_err(|e| e.to_string())?,
            _module: module,
        })
    }

    /// Overwrites every SM's shared memory and, when the candidate's kernels use local
    /// memory (`frame` bytes per thread), every thread slot's first `frame` bytes of it:
    /// blocks enough to occupy every SM twice over.
    pub(super) fn scrub(&self, frame: u32, stream: sys::CUstream) -> Result<(), CudaError> {
        let words = self.shared_bytes / 4;
        driver::launch(
            self.shared,
            [2 * self.sms, 1, 1],
            [1024, 1, 1],
            self.shared_bytes,
            stream,
            &mut [crate::exec::values::arg_i32(words as i32)],
            || "scrubbing shared memory".into(),
        )?;
        if frame > 0 {
            // The smallest kernel that covers the frame (the largest when none does:
            // frames past 64 KiB per thread are not covered, see docs/threat-model.md).
            let (_, f) = self
                .local
                .iter()
                .find(|(bytes, _)| *bytes >= frame)
                .or(self.local.last())
                .copied()
                .ok_or_else(|| CudaError {
                    code: -1,
                    name: "NO_SCRUBBER".into(),
                    during: "scrubbing local memory".into(),
                })?;
            let blocks = 2 * self.sms * (self.threads_per_sm / 256).max(1);
            driver::launch(
                f,
                [blocks, 1, 1],
                [256, 1, 1],
                0,
                stream,
                &mut [crate::exec::values::arg_u64(self.sink.ptr)],
                || "scrubbing local memory".into(),
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The scrub kernels compile with NVRTC (no GPU needed), one local-memory kernel per
    /// frame size, each with the stack frame it claims.
    #[test]
    fn scrub_kernels_compile_for_hopper() {
        let lib = crate::compile::nvrtc::load().expect("NVRTC");
        let mut flags = vec!["-arch=sm_90".to_string(), "-Xptxas=-v".to_string()];
        if let Some(dir) = &lib.include_dir {
            flags.push(format!("-I{}", dir.display()));
        }
        let out = crate::compile::nvrtc::compile(SCRUB_SOURCE, "scrub.cu", &flags, &[])
            .expect("NVRTC runs");
        assert!(out.ok, "{}", out.log);
        for (kernel, frame) in [
            ("scrub_local_1k", 1024),
            ("scrub_local_4k", 4096),
            ("scrub_local_16k", 16384),
            ("scrub_local_64k", 65536),
        ] {
            let line = out
                .log
                .lines()
                .skip_while(|l| !l.contains(kernel))
                .find(|l| l.contains("stack frame"))
                .unwrap_or_else(|| panic!("no frame line for {kernel} in {}", out.log));
            assert!(
                line.contains(&format!("{frame} bytes stack frame")),
                "{line}"
            );
        }
    }
}
