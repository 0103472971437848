//! The one place that calls the CUDA driver (through cudarc's `result` layer): owning
//! types with `Drop`, and errors that say which step failed.

use std::ffi::{c_void, CString};

use cudarc::driver::{result, sys};

use super::settings::CtxSched;

mod memory;

pub use memory::{DevSlice, DeviceBuffer, IpcHandle, IpcMapping};

/// A failed driver call: the CUresult and the step.
#[derive(Debug, Clone, PartialEq, thiserror::Error, serde::Serialize, serde::Deserialize)]
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

/// The context flags of a scheduling setting; `None` leaves the driver's choice.
fn sched_flags(sched: CtxSched) -> Option<u32> {
    use sys::CUctx_flags_enum as F;
    match sched {
        CtxSched::Spin => Some(F::CU_CTX_SCHED_SPIN as u32),
        CtxSched::Yield => Some(F::CU_CTX_SCHED_YIELD as u32),
        CtxSched::Blocking => Some(F::CU_CTX_SCHED_BLOCKING_SYNC as u32),
        CtxSched::Auto => None,
    }
}

/// The primary context of device 0 and the stream every launch uses. Released when the
/// last [`Gpu`] handle and the last resource made through one are gone, so nothing can
/// outlive the context it belongs to, whatever order fields are dropped in.
struct Context {
    device: sys::CUdevice,
    stream: sys::CUstream,
}

impl Drop for Context {
    fn drop(&mut self) {
        // SAFETY: created in Gpu::open; every resource of this context held a Gpu handle,
        // so all of them are gone. The primary context is released once.
        unsafe {
            let _ = result::stream::destroy(self.stream);
            let _ = result::primary_ctx::release(self.device);
        }
    }
}

/// A handle on the device's context (cheap to clone). Buffers, modules, events and IPC
/// mappings are made through it and keep it alive.
#[derive(Clone)]
pub struct Gpu {
    ctx: std::rc::Rc<Context>,
}

impl Gpu {
    /// Initialises the driver, retains device 0's primary context (waiting for the GPU as
    /// `sched` says) and creates a stream.
    pub fn open(sched: CtxSched) -> Result<Gpu, CudaError> {
        result::init().during(|| "cuInit".into())?;
        let device = result::device::get(0).during(|| "cuDeviceGet(0)".into())?;
        if let Some(flags) = sched_flags(sched) {
            // SAFETY: device is valid; only the scheduling flags of its primary context are
            // set, before it is retained. A context already active keeps its flags.
            let _ = unsafe { sys::cuDevicePrimaryCtxSetFlags_v2(device, flags) };
        }
        // SAFETY: device is valid; the context is released by `Context::drop`.
        let ctx = unsafe { result::primary_ctx::retain(device) }
            .during(|| "cuDevicePrimaryCtxRetain".into())?;
        // SAFETY: ctx was just retained.
        if let Err(e) = unsafe { result::ctx::set_current(ctx) }.during(|| "cuCtxSetCurrent".into())
        {
            // SAFETY: retained above, released once.
            unsafe {
                let _ = result::primary_ctx::release(device);
            }
            return Err(e);
        }
        let stream = match result::stream::create(result::stream::StreamKind::NonBlocking)
            .during(|| "cuStreamCreate".into())
        {
            Ok(s) => s,
            Err(e) => {
                // SAFETY: retained above, released once.
                unsafe {
                    let _ = result::primary_ctx::release(device);
                }
                return Err(e);
            }
        };
        Ok(Gpu {
            ctx: std::rc::Rc::new(Context { device, stream }),
        })
    }

    /// The stream every launch uses.
    pub fn stream(&self) -> sys::CUstream {
        self.ctx.stream
    }

    /// An integer device attribute.
    pub fn attribute(&self, attr: sys::CUdevice_attribute) -> Result<i32, CudaError> {
        // SAFETY: the device handle is valid while the context lives.
        unsafe { result::device::get_attribute(self.ctx.device, attr) }
            .during(|| format!("cuDeviceGetAttribute({attr:?})"))
    }

    /// Device name.
    pub fn name(&self) -> String {
        result::device::get_name(self.ctx.device).unwrap_or_else(|_| "unknown".into())
    }

    /// Total device memory.
    pub fn total_memory(&self) -> u64 {
        // SAFETY: the device handle is valid.
        unsafe { result::device::total_mem(self.ctx.device) }
            .map(|b| b as u64)
            .unwrap_or(0)
    }

    /// The device's ordinal, as the VMM API's locations name it.
    fn ordinal(&self) -> i32 {
        self.ctx.device
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
        // SAFETY: the stream is valid while the context lives.
        unsafe { result::stream::synchronize(self.ctx.stream) }.during(what)
    }

    /// Loads a cubin.
    pub fn load_module(&self, cubin: &[u8], what: &str) -> Result<Module, CudaError> {
        if cubin.is_empty() {
            return Err(CudaError {
                code: -1,
                name: "EMPTY_IMAGE".into(),
                during: format!("loading {what}"),
            });
        }
        // SAFETY: cubin is a complete image produced by NVRTC; the driver copies it.
        let raw = unsafe { result::module::load_data(cubin.as_ptr() as *const c_void) }
            .during(|| format!("cuModuleLoadData ({what})"))?;
        Ok(Module {
            raw,
            _gpu: self.clone(),
        })
    }

    /// A timing-capable event.
    pub fn event(&self) -> Result<Event, CudaError> {
        let raw = result::event::create(sys::CUevent_flags::CU_EVENT_DEFAULT)
            .during(|| "cuEventCreate".into())?;
        Ok(Event {
            raw,
            _gpu: self.clone(),
        })
    }
}

/// A loaded module, unloaded on drop.
pub struct Module {
    raw: sys::CUmodule,
    _gpu: Gpu,
}

impl Module {
    /// Looks up a kernel by its (lowered) symbol. The function is valid while the module is.
    pub fn function(&self, symbol: &str) -> Result<sys::CUfunction, CudaError> {
        let name = CString::new(symbol).map_err(|_| CudaError {
            code: -1,
            name: "BAD_SYMBOL".into(),
            during: format!("kernel name `{symbol}` contains NUL"),
        })?;
        // SAFETY: the module is loaded.
        unsafe { result::module::get_function(self.raw, name) }
            .during(|| format!("cuModuleGetFunction({symbol})"))
    }
}

impl Drop for Module {
    fn drop(&mut self) {
        // SAFETY: loaded once, unloaded once; its context is alive (we hold a handle).
        unsafe {
            let _ = result::module::unload(self.raw);
        }
    }
}

/// A timing event, destroyed on drop.
pub struct Event {
    raw: sys::CUevent,
    _gpu: Gpu,
}

impl Event {
    /// Records on a stream.
    pub fn record(&self, stream: sys::CUstream) -> Result<(), CudaError> {
        // SAFETY: valid event and stream.
        unsafe { result::event::record(self.raw, stream) }.during(|| "cuEventRecord".into())
    }

    /// Milliseconds from `start` to this event (both recorded and complete).
    pub fn elapsed_since(&self, start: &Event) -> Result<f32, CudaError> {
        // SAFETY: valid events.
        unsafe { result::event::elapsed(start.raw, self.raw) }
            .during(|| "cuEventElapsedTime".into())
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        // SAFETY: created once, destroyed once; its context is alive (we hold a handle).
        unsafe {
            let _ = result::event::destroy(self.raw);
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
    // SAFETY: every pointer is to an 8-byte argument slot that lives until the call returns.
    unsafe { launch_params(f, grid, block, smem, stream, &mut ptrs, what) }
}

/// Launches `f` with one pointer per kernel parameter (for parameters wider than 8 bytes).
///
/// # Safety
/// Each pointer must point at a value laid out as the kernel's parameter at that position,
/// valid until this returns (the driver copies the values at launch).
pub unsafe fn launch_params(
    f: sys::CUfunction,
    grid: [u32; 3],
    block: [u32; 3],
    smem: u32,
    stream: sys::CUstream,
    ptrs: &mut [*mut c_void],
    what: impl FnOnce() -> String,
) -> Result<(), CudaError> {
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
    // SAFETY: the caller's contract: the pointers are the kernel's parameters.
    unsafe {
        result::launch_kernel(
            f,
            (grid[0], grid[1], grid[2]),
            (block[0], block[1], block[2]),
            smem,
            stream,
            ptrs,
        )
    }
    .during(what)
}

/// Bytes of local memory (stack frame and spills) one thread of `f` uses.
pub fn local_bytes(f: sys::CUfunction) -> Result<i32, CudaError> {
    // SAFETY: valid function.
    unsafe {
        result::function::get_function_attribute(
            f,
            sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES,
        )
    }
    .during(|| "cuFuncGetAttribute(LOCAL_SIZE_BYTES)".into())
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
