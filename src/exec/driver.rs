//! The one place that calls the CUDA driver (through cudarc's `result` layer): owning
//! types with `Drop`, and errors that say which step failed.

use std::ffi::{c_void, CString};

use cudarc::driver::{result, sys};

/// A failed driver call: the CUresult and the step.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{name} ({code}) during {during}")]
pub struct CudaError {
    /// CUresult value.
    pub code: i32,
    /// CUresult name.
    pub name: String,
    /// The step that failed.
    pub during: String,
}

/// Adds the step to a driver error.
pub trait Step<T> {
    /// Names the step.
    fn during(self, what: impl FnOnce() -> String) -> Result<T, CudaError>;
}

impl<T> Step<T> for Result<T, result::DriverError> {
    fn during(self, what: impl FnOnce() -> String) -> Result<T, CudaError> {
        self.map_err(|e| CudaError {
            code: e.0 as i32,
            name: e
                .error_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_else(|_| format!("CUresult {}", e.0 as i32)),
            during: what(),
        })
    }
}

impl<T> Step<T> for Result<T, CudaError> {
    fn during(self, _what: impl FnOnce() -> String) -> Result<T, CudaError> {
        self
    }
}

/// Whether libcuda can be loaded (cudarc panics on first use otherwise).
pub fn driver_present() -> bool {
    // SAFETY: only tries to dlopen the library.
    unsafe { sys::is_culib_present() }
}

/// The device, its primary context and one stream.
pub struct Gpu {
    /// The device handle.
    pub device: sys::CUdevice,
    ctx: sys::CUcontext,
    /// The stream every launch uses.
    pub stream: sys::CUstream,
}

impl Gpu {
    /// Initialises the driver, retains device 0's primary context and creates a stream.
    pub fn open() -> Result<Gpu, CudaError> {
        result::init().during(|| "cuInit".into())?;
        let device = result::device::get(0).during(|| "cuDeviceGet(0)".into())?;
        // SAFETY: device is valid; the context is released in Drop.
        let ctx = unsafe { result::primary_ctx::retain(device) }
            .during(|| "cuDevicePrimaryCtxRetain".into())?;
        // SAFETY: ctx was just retained.
        unsafe { result::ctx::set_current(ctx) }.during(|| "cuCtxSetCurrent".into())?;
        let stream = result::stream::create(result::stream::StreamKind::NonBlocking)
            .during(|| "cuStreamCreate".into())?;
        Ok(Gpu {
            device,
            ctx,
            stream,
        })
    }

    /// An integer device attribute.
    pub fn attribute(&self, attr: sys::CUdevice_attribute) -> Result<i32, CudaError> {
        // SAFETY: device is valid.
        unsafe { result::device::get_attribute(self.device, attr) }
            .during(|| format!("cuDeviceGetAttribute({attr:?})"))
    }

    /// Device name.
    pub fn name(&self) -> String {
        result::device::get_name(self.device).unwrap_or_else(|_| "unknown".into())
    }

    /// Total device memory.
    pub fn total_memory(&self) -> u64 {
        // SAFETY: device is valid.
        unsafe { result::device::total_mem(self.device) }
            .map(|b| b as u64)
            .unwrap_or(0)
    }

    /// Free device memory now.
    pub fn free_memory(&self) -> u64 {
        result::mem_get_info()
            .map(|(free, _)| free as u64)
            .unwrap_or(0)
    }

    /// Driver version (e.g. 13000).
    pub fn driver_version() -> i32 {
        let mut v = 0;
        // SAFETY: out-parameter.
        let _ = unsafe { sys::cuDriverGetVersion(&mut v) };
        v
    }

    /// Waits for the stream.
    pub fn sync(&self, what: impl FnOnce() -> String) -> Result<(), CudaError> {
        // SAFETY: stream is valid.
        unsafe { result::stream::synchronize(self.stream) }.during(what)
    }
}

impl Drop for Gpu {
    fn drop(&mut self) {
        // SAFETY: created in open(); the primary context is released once.
        unsafe {
            let _ = result::stream::destroy(self.stream);
            let _ = result::primary_ctx::release(self.device);
        }
        let _ = self.ctx;
    }
}

/// Device memory, freed on drop.
pub struct DeviceBuffer {
    /// Device address.
    pub ptr: sys::CUdeviceptr,
    /// Size in bytes.
    pub bytes: usize,
}

impl DeviceBuffer {
    /// Allocates `bytes` (at least 1, so every buffer has a distinct address).
    pub fn alloc(bytes: usize, what: &str) -> Result<DeviceBuffer, CudaError> {
        // SAFETY: plain allocation; freed in Drop.
        let ptr = unsafe { result::malloc_sync(bytes.max(1)) }
            .during(|| format!("allocating {bytes} bytes for {what}"))?;
        Ok(DeviceBuffer { ptr, bytes })
    }

    /// Fills every byte with `value` on `stream`.
    pub fn memset(&self, value: u8, stream: sys::CUstream) -> Result<(), CudaError> {
        // SAFETY: ptr owns `bytes` bytes.
        unsafe { sys::cuMemsetD8Async(self.ptr, value, self.bytes, stream) }
            .result()
            .during(|| "cuMemsetD8Async".into())
    }

    /// Copies all of `src` into this buffer on `stream` (sizes must match).
    pub fn copy_from(&self, src: &DeviceBuffer, stream: sys::CUstream) -> Result<(), CudaError> {
        if src.bytes != self.bytes {
            return Err(CudaError {
                code: -1,
                name: "SIZE_MISMATCH".into(),
                during: format!("copy of {} bytes into {}", src.bytes, self.bytes),
            });
        }
        if self.bytes == 0 {
            return Ok(());
        }
        // SAFETY: both own `bytes` bytes.
        unsafe { result::memcpy_dtod_async(self.ptr, src.ptr, self.bytes, stream) }
            .during(|| "cuMemcpyDtoDAsync".into())
    }

    /// Reads `len` bytes at `offset` to the host (synchronous).
    pub fn read(&self, offset: usize, len: usize) -> Result<Vec<u8>, CudaError> {
        let mut out = vec![0u8; len];
        if len == 0 || offset + len > self.bytes {
            return Ok(out);
        }
        // SAFETY: range checked above.
        unsafe { result::memcpy_dtoh_sync(&mut out, self.ptr + offset as u64) }
            .during(|| "cuMemcpyDtoH".into())?;
        Ok(out)
    }

    /// Writes host bytes at offset 0 (synchronous).
    pub fn write(&self, data: &[u8]) -> Result<(), CudaError> {
        if data.is_empty() || data.len() > self.bytes {
            return Ok(());
        }
        // SAFETY: size checked above.
        unsafe { result::memcpy_htod_sync(self.ptr, data) }.during(|| "cuMemcpyHtoD".into())
    }
}

impl Drop for DeviceBuffer {
    fn drop(&mut self) {
        // SAFETY: allocated by malloc_sync, freed once. Errors after a sticky fault are moot.
        unsafe {
            let _ = result::free_sync(self.ptr);
        }
    }
}

/// A loaded module, unloaded on drop.
pub struct Module(sys::CUmodule);

impl Module {
    /// Loads a cubin.
    pub fn load(cubin: &[u8], what: &str) -> Result<Module, CudaError> {
        if cubin.is_empty() {
            return Err(CudaError {
                code: -1,
                name: "EMPTY_IMAGE".into(),
                during: format!("loading {what}"),
            });
        }
        // SAFETY: cubin is a complete image produced by NVRTC; the driver copies it.
        unsafe { result::module::load_data(cubin.as_ptr() as *const c_void) }
            .map(Module)
            .during(|| format!("cuModuleLoadData ({what})"))
    }

    /// Looks up a kernel by its (lowered) symbol.
    pub fn function(&self, symbol: &str) -> Result<sys::CUfunction, CudaError> {
        let name = CString::new(symbol).map_err(|_| CudaError {
            code: -1,
            name: "BAD_SYMBOL".into(),
            during: format!("kernel name `{symbol}` contains NUL"),
        })?;
        // SAFETY: module is loaded.
        unsafe { result::module::get_function(self.0, name) }
            .during(|| format!("cuModuleGetFunction({symbol})"))
    }
}

impl Drop for Module {
    fn drop(&mut self) {
        // SAFETY: loaded once, unloaded once.
        unsafe {
            let _ = result::module::unload(self.0);
        }
    }
}

/// A timing event, destroyed on drop.
pub struct Event(pub sys::CUevent);

impl Event {
    /// A timing-capable event.
    pub fn new() -> Result<Event, CudaError> {
        result::event::create(sys::CUevent_flags::CU_EVENT_DEFAULT)
            .map(Event)
            .during(|| "cuEventCreate".into())
    }

    /// Records on a stream.
    pub fn record(&self, stream: sys::CUstream) -> Result<(), CudaError> {
        // SAFETY: valid event and stream.
        unsafe { result::event::record(self.0, stream) }.during(|| "cuEventRecord".into())
    }

    /// Milliseconds from `start` to this event (both recorded and complete).
    pub fn elapsed_since(&self, start: &Event) -> Result<f32, CudaError> {
        // SAFETY: valid events.
        unsafe { result::event::elapsed(start.0, self.0) }.during(|| "cuEventElapsedTime".into())
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        // SAFETY: created once, destroyed once.
        unsafe {
            let _ = result::event::destroy(self.0);
        }
    }
}

/// Launches `f` with argument storage `args` (each entry the bytes of one argument).
pub fn launch(
    f: sys::CUfunction,
    grid: [u32; 3],
    block: [u32; 3],
    smem: u32,
    stream: sys::CUstream,
    args: &mut [[u8; 8]],
    what: impl FnOnce() -> String,
) -> Result<(), CudaError> {
    let mut ptrs: Vec<*mut c_void> = args
        .iter_mut()
        .map(|a| a.as_mut_ptr() as *mut c_void)
        .collect();
    if smem > 48 * 1024 {
        // SAFETY: valid function; the driver checks the value against the device limit.
        unsafe {
            sys::cuFuncSetAttribute(
                f,
                sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                smem as i32,
            )
        }
        .result()
        .during(|| {
            format!(
                "{} (setting {smem} bytes of dynamic shared memory)",
                "cuFuncSetAttribute"
            )
        })?;
    }
    // SAFETY: args hold values of the kernel's parameter sizes (little-endian, padded to 8
    // bytes); the driver copies them at launch.
    unsafe {
        result::launch_kernel(
            f,
            (grid[0], grid[1], grid[2]),
            (block[0], block[1], block[2]),
            smem,
            stream,
            &mut ptrs,
        )
    }
    .during(what)
}

/// Blocks per multiprocessor the driver reports for a launch shape.
pub fn occupancy_blocks(
    f: sys::CUfunction,
    block_threads: u32,
    smem: u32,
) -> Result<i32, CudaError> {
    // SAFETY: valid function.
    unsafe {
        result::occupancy::max_active_block_per_multiprocessor(
            f,
            block_threads as i32,
            smem as usize,
        )
    }
    .during(|| "cuOccupancyMaxActiveBlocksPerMultiprocessor".into())
}
