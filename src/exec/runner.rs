//! One side of a GPU job, in a process of its own: the `runner` worker role.
//!
//! The harness (the `gpu` worker) starts a runner for the reference and one per member of a
//! group. A runner holds one module and the buffers of one job in its own CUDA context,
//! which has its own address space: a kernel running there can reach nothing the other
//! sides, the harness or an earlier candidate owns, whatever addresses it tries. The
//! harness maps the runner's buffers into its own context (shareable VMM memory whose file
//! descriptors the runner sends to the harness's inbox, or legacy CUDA IPC handles; the
//! direction is one-way: the runner is never given a handle), writes fresh inputs and
//! poison into them, and compares outputs there. The runner only times what the harness
//! asks for: an L2 flush (untimed), then, between two events on its stream, the zeroing of
//! the plan's scratch buffers and the plan's launches.

use std::time::Duration;

use base64::Engine;
use cudarc::driver::sys;
use serde::{Deserialize, Serialize};

use super::driver::{self, CudaError, DeviceBuffer, Event, Gpu, IpcHandle, Module};
use super::fdpass::FdInbox;
use super::settings::{CtxSched, GpuSettings};
use crate::sandbox::{Handled, Handler, JobOutcome, Pool, WorkerSpec};

/// One kernel argument of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum RunArg {
    /// The address of the runner's buffer with this index.
    Buffer {
        /// Index into the last `Alloc`.
        index: usize,
    },
    /// A value, as the 8 little-endian bytes of a kernel argument slot.
    Value {
        /// The bytes, as one integer.
        bits: u64,
    },
}

/// One launch of a run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunLaunch {
    /// Index into the loaded module's functions.
    pub function: usize,
    /// Grid.
    pub grid: [u32; 3],
    /// Block.
    pub block: [u32; 3],
    /// Dynamic shared memory, bytes.
    pub smem: u32,
    /// Arguments.
    pub args: Vec<RunArg>,
}

/// The start of one buffer, zeroed inside a run's timed window (a buffer is allocated for
/// the job's largest configuration; a run zeroes what its configuration uses).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ZeroRange {
    /// Index into the last `Alloc`.
    pub buffer: usize,
    /// Bytes from the buffer's start (clamped to its size).
    pub bytes: u64,
}

/// What a runner is asked to do.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum RunnerCmd {
    /// Loads a module, replacing (and unloading) the previous one: a fresh module has fresh
    /// `__device__` globals.
    Load {
        /// The cubin, base64.
        cubin_b64: String,
        /// The symbols to look up, in launch order.
        symbols: Vec<String>,
        /// Load the module afresh before every run after the first, so that data its kernels
        /// leave in the module (`__device__` variables) cannot serve a later run.
        #[serde(default)]
        reload_each_run: bool,
    },
    /// Frees every buffer (scrubbed first) and allocates these. With a `share_token`, and a
    /// harness inbox in the runner's environment, the buffers are shareable (VMM API) and
    /// their file descriptors go to the inbox marked with the token; otherwise the answer
    /// carries legacy CUDA IPC handles.
    Alloc {
        /// Bytes per buffer.
        bytes: Vec<u64>,
        /// Nonzero: share through the inbox (the number marks this request's descriptors).
        #[serde(default)]
        share_token: u64,
    },
    /// One run: the module reloaded (when loaded with `reload_each_run`) and every buffer
    /// zeroed past what this run uses (untimed), L2 flush (untimed), start event, `zero`
    /// ranges zeroed, the launches, end event, synchronise. Answers with the time between
    /// the events.
    Run {
        /// The launches, in order.
        launches: Vec<RunLaunch>,
        /// What to zero inside the timed window (scratch).
        zero: Vec<ZeroRange>,
        /// Per buffer of the last `Alloc`, the bytes this run's configuration uses; the rest
        /// of each buffer's mapping is zeroed before the run, so nothing a kernel leaves
        /// there can serve a later run (empty: nothing zeroed).
        #[serde(default)]
        used: Vec<u64>,
        /// Overwrite the context's shared memory and the loaded kernels' local memory before
        /// the run (untimed), so nothing an earlier run left there can be read.
        #[serde(default)]
        scrub: bool,
        /// Bytes of the L2 flush before the start event (0: none).
        flush_bytes: u64,
        /// The word the flush writes (different each time, so it cannot be skipped).
        flush_value: u32,
    },
    /// Driver occupancy (blocks per multiprocessor) for launch shapes of loaded functions.
    Occupancy {
        /// (function, threads per block, dynamic shared memory).
        queries: Vec<(usize, u32, u32)>,
    },
    /// Frees every buffer and unloads the module.
    Reset,
    /// Builds a PyTorch reference's module (PyTorch runners only, [`super::torch`]).
    LoadTorch {
        /// The original's source.
        source: String,
        /// Eager or compiled.
        mode: super::torch::TorchMode,
        /// The ABI's buffers, in order (forward takes the `in`/`inout` ones and returns the
        /// `out`/`inout` ones).
        buffers: Vec<super::JobBuffer>,
    },
    /// One run of a PyTorch reference (PyTorch runners only): untimed L2 flush, the forward
    /// between two events, its outputs copied into the output buffers (untimed).
    RunTorch {
        /// Per buffer of the last `Alloc`, the tensor shape of this run's configuration.
        shapes: Vec<Vec<u64>>,
        /// Bytes of the L2 flush before the start event (0: none).
        flush_bytes: u64,
        /// The word the flush writes.
        flush_value: u32,
    },
}

/// A runner's answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum RunnerReply {
    /// The module is loaded.
    Loaded,
    /// The buffers exist: their file descriptors went to the inbox (`shared`), or here is
    /// one IPC handle (base64) per buffer.
    Allocated {
        /// Legacy IPC handles, in the order asked (empty when `shared`).
        handles: Vec<String>,
        /// The descriptors of the buffers, in the order asked, went to the harness's inbox.
        #[serde(default)]
        shared: bool,
        /// The buffers' addresses in the runner's own address space (for tests of the
        /// isolation: they mean nothing in any other process).
        pointers: Vec<u64>,
    },
    /// A run finished.
    Ran {
        /// Milliseconds between the start and end events.
        millis: f64,
        /// Wall milliseconds spent reloading the module before the run (0: not reloaded).
        #[serde(default)]
        reload_ms: f64,
    },
    /// A CUDA call failed; the runner asks to be replaced.
    Failed {
        /// The failure.
        error: CudaError,
    },
    /// Blocks per multiprocessor per query (`None` where the driver refused).
    Occupancy {
        /// Answers.
        blocks: Vec<Option<i32>>,
    },
    /// Everything freed.
    Reset,
}

/// A launch's arguments as the driver takes them: buffer indices become those buffers'
/// addresses (0 for an index out of range), values pass as they are.
pub(crate) fn arg_bytes(args: &[RunArg], buffers: &[DeviceBuffer]) -> Vec<[u8; 8]> {
    args.iter()
        .map(|a| match a {
            RunArg::Buffer { index } => buffers.get(*index).map_or(0u64, |b| b.ptr).to_le_bytes(),
            RunArg::Value { bits } => bits.to_le_bytes(),
        })
        .collect()
}

/// The runner process's state. Every resource holds a handle on the context, so the context
/// outlives them whatever the order; [`Drop`] scrubs the buffers before they are freed.
struct RunnerState {
    gpu: Gpu,
    module: Option<Module>,
    functions: Vec<sys::CUfunction>,
    /// What the module was loaded from, when it is reloaded before every run.
    image: Option<(Vec<u8>, Vec<String>)>,
    /// The largest local memory (stack frame and spills) of the loaded kernels, bytes.
    local_frame: u32,
    /// The scrub kernels, built at the first run that asks for them.
    scrubber: Option<Result<Scrubber, String>>,
    /// Runs since the module was (re)loaded.
    runs_since_load: u32,
    buffers: Vec<DeviceBuffer>,
    flush: Option<DeviceBuffer>,
    events: Option<(Event, Event)>,
}

impl RunnerState {
    fn open(sched: CtxSched) -> Result<RunnerState, String> {
        if !driver::driver_present() {
            return Err("libcuda not found: no NVIDIA driver on this machine".into());
        }
        let gpu = Gpu::open(sched).map_err(|e| format!("no usable GPU: {e}"))?;
        Ok(RunnerState {
            gpu,
            module: None,
            functions: Vec::new(),
            image: None,
            local_frame: 0,
            scrubber: None,
            runs_since_load: 0,
            buffers: Vec::new(),
            flush: None,
            events: None,
        })
    }

    fn free_buffers(&mut self) {
        for b in &self.buffers {
            b.scrub();
        }
        self.buffers.clear();
    }

    fn unload(&mut self) {
        self.functions.clear();
        self.module = None;
        self.image = None;
    }

    fn load(
        &mut self,
        cubin_b64: &str,
        symbols: &[String],
        reload_each_run: bool,
    ) -> Result<(), CudaError> {
        self.unload();
        let cubin = base64::engine::general_purpose::STANDARD
            .decode(cubin_b64)
            .unwrap_or_default();
        self.load_image(&cubin, symbols)?;
        if reload_each_run {
            self.image = Some((cubin, symbols.to_vec()));
        }
        Ok(())
    }

    fn load_image(&mut self, cubin: &[u8], symbols: &[String]) -> Result<(), CudaError> {
        self.functions.clear();
        self.module = None;
        let module = self.gpu.load_module(cubin, "kernels")?;
        self.functions = symbols
            .iter()
            .map(|s| module.function(s))
            .collect::<Result<_, _>>()?;
        self.local_frame = self
            .functions
            .iter()
            .map(|&f| driver::local_bytes(f).unwrap_or(0).max(0) as u32)
            .max()
            .unwrap_or(0);
        self.module = Some(module);
        self.runs_since_load = 0;
        Ok(())
    }

    /// Loads the module afresh when it keeps data and has run since it was loaded; the
    /// wall milliseconds that took (0 when not needed).
    fn refresh_module(&mut self) -> Result<f64, CudaError> {
        if self.runs_since_load == 0 {
            return Ok(0.0);
        }
        let Some((cubin, symbols)) = self.image.take() else {
            return Ok(0.0);
        };
        let t = std::time::Instant::now();
        let loaded = self.load_image(&cubin, &symbols);
        self.image = Some((cubin, symbols));
        loaded?;
        Ok(t.elapsed().as_secs_f64() * 1e3)
    }

    /// Shareable buffers whose descriptors went to the harness's inbox; `None` when this
    /// runner cannot share that way (no inbox, or the driver refused shareable memory), and
    /// `Some(Err)` when the descriptors could not be sent (ours, not the kernels').
    fn alloc_shared(&mut self, bytes: &[u64], token: u64) -> Option<Result<(), String>> {
        let inbox = std::env::var(super::fdpass::INBOX_ENV).ok()?;
        self.free_buffers();
        for (i, &b) in bytes.iter().enumerate() {
            match self.gpu.alloc_shared(b as usize, &format!("buffer {i}")) {
                Ok(buf) => self.buffers.push(buf),
                Err(_) => {
                    self.free_buffers();
                    return None;
                }
            }
        }
        let fds = match self
            .buffers
            .iter()
            .map(DeviceBuffer::export_fd)
            .collect::<Result<Vec<_>, _>>()
        {
            Ok(fds) => fds,
            Err(_) => {
                self.free_buffers();
                return None;
            }
        };
        let borrowed: Vec<std::os::fd::BorrowedFd> =
            fds.iter().map(std::os::fd::AsFd::as_fd).collect();
        Some(
            super::fdpass::send_fds(&inbox, token, &borrowed)
                .map_err(|e| format!("cannot send buffer descriptors to the harness: {e}")),
        )
    }

    fn alloc(&mut self, bytes: &[u64]) -> Result<(Vec<String>, Vec<u64>), CudaError> {
        self.free_buffers();
        let mut handles = Vec::with_capacity(bytes.len());
        for (i, &b) in bytes.iter().enumerate() {
            let buf = self.gpu.alloc(b as usize, &format!("buffer {i}"))?;
            handles.push(base64::engine::general_purpose::STANDARD.encode(buf.ipc_handle()?));
            self.buffers.push(buf);
        }
        Ok((handles, self.buffers.iter().map(|b| b.ptr).collect()))
    }

    /// The scrub kernels for this context (built once; `Err` says why they cannot be).
    fn scrubber(&mut self) -> Result<&Scrubber, String> {
        let gpu = &self.gpu;
        self.scrubber
            .get_or_insert_with(|| Scrubber::new(gpu))
            .as_ref()
            .map_err(Clone::clone)
    }

    #[allow(clippy::too_many_arguments)]
    fn run(
        &mut self,
        launches: &[RunLaunch],
        zero: &[ZeroRange],
        used: &[u64],
        scrub: bool,
        flush_bytes: u64,
        flush_value: u32,
    ) -> Result<(f64, f64), RunFailure> {
        // Nothing a kernel left behind in an earlier run may serve this one: the module's
        // data starts as loaded, what lies past this configuration's bytes is zeroed, and
        // so are the context's shared memory and the kernels' local memory.
        let reload_ms = self.refresh_module()?;
        self.runs_since_load += 1;
        let stream = self.gpu.stream();
        for (b, &u) in self.buffers.iter().zip(used) {
            b.mapped().past(u).memset(0, stream)?;
        }
        if scrub {
            let frame = self.local_frame;
            self.scrubber()
                .map_err(RunFailure::Ours)?
                .scrub(frame, stream)?;
        }
        if flush_bytes > 0
            && self
                .flush
                .as_ref()
                .is_none_or(|f| f.bytes as u64 != flush_bytes)
        {
            self.flush = None;
            self.flush = Some(self.gpu.alloc(flush_bytes as usize, "L2 flush buffer")?);
        }
        if self.events.is_none() {
            self.events = Some((self.gpu.event()?, self.gpu.event()?));
        }
        let (e0, e1) = self.events.as_ref().ok_or_else(|| CudaError {
            code: -1,
            name: "NO_EVENTS".into(),
            during: "timing events".into(),
        })?;
        if let Some(f) = &self.flush {
            f.slice().memset_words(flush_value, stream)?;
        }
        e0.record(stream)?;
        for z in zero {
            if let Some(b) = self.buffers.get(z.buffer) {
                b.slice().prefix(z.bytes).memset(0, stream)?;
            }
        }
        for (k, l) in launches.iter().enumerate() {
            let f = *self.functions.get(l.function).ok_or_else(|| CudaError {
                code: -1,
                name: "NO_FUNCTION".into(),
                during: format!("launch {k}: no function {}", l.function),
            })?;
            let mut args = arg_bytes(&l.args, &self.buffers);
            driver::launch(f, l.grid, l.block, l.smem, stream, &mut args, || {
                format!("launch {k} of the plan")
            })?;
        }
        e1.record(stream)?;
        self.gpu.sync(|| "synchronize after the plan".into())?;
        Ok((f64::from(e1.elapsed_since(e0)?), reload_ms))
    }
}

impl Drop for RunnerState {
    fn drop(&mut self) {
        self.free_buffers();
    }
}

/// Why a run failed: a CUDA call (the kernels' doing, unless proven otherwise) or ours (the
/// scrub kernels could not be built).
enum RunFailure {
    Cuda(CudaError),
    Ours(String),
}

impl From<CudaError> for RunFailure {
    fn from(e: CudaError) -> Self {
        RunFailure::Cuda(e)
    }
}

/// The scrub kernels (`scrub.cu`) of one runner's context, compiled for its device.
struct Scrubber {
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

const SCRUB_SOURCE: &str = include_str!("scrub.cu");

impl Scrubber {
    fn new(gpu: &Gpu) -> Result<Scrubber, String> {
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
    fn scrub(&self, frame: u32, stream: sys::CUstream) -> Result<(), CudaError> {
        let words = self.shared_bytes / 4;
        driver::launch(
            self.shared,
            [2 * self.sms, 1, 1],
            [1024, 1, 1],
            self.shared_bytes,
            stream,
            &mut [super::values::arg_i32(words as i32)],
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
                &mut [super::values::arg_u64(self.sink.ptr)],
                || "scrubbing local memory".into(),
            )?;
        }
        Ok(())
    }
}

/// Serves [`RunnerCmd`]s (the `runner` worker role).
#[derive(Default)]
pub struct RunnerHandler {
    state: Option<Result<RunnerState, String>>,
    sched: CtxSched,
}

impl RunnerHandler {
    /// A runner whose context waits for the GPU as `settings` say (its trace file is the
    /// harness's business).
    pub fn new(settings: &GpuSettings) -> RunnerHandler {
        RunnerHandler {
            state: None,
            sched: settings.ctx_sched,
        }
    }
}

impl Handler for RunnerHandler {
    type Job = RunnerCmd;
    type Reply = RunnerReply;

    fn handle(&mut self, cmd: RunnerCmd) -> Handled<RunnerReply> {
        let sched = self.sched;
        let state = match self.state.get_or_insert_with(|| RunnerState::open(sched)) {
            Ok(s) => s,
            Err(reason) => return Handled::refused(reason.clone()),
        };
        let failed = |error: CudaError| Handled {
            reply: Ok(RunnerReply::Failed { error }),
            restart: true,
        };
        match cmd {
            RunnerCmd::Load {
                cubin_b64,
                symbols,
                reload_each_run,
            } => match state.load(&cubin_b64, &symbols, reload_each_run) {
                Ok(()) => Handled::ok(RunnerReply::Loaded),
                Err(e) => failed(e),
            },
            RunnerCmd::Alloc { bytes, share_token } => {
                let shared = (share_token != 0)
                    .then(|| state.alloc_shared(&bytes, share_token))
                    .flatten();
                match shared {
                    Some(Ok(())) => Handled::ok(RunnerReply::Allocated {
                        handles: Vec::new(),
                        shared: true,
                        pointers: state.buffers.iter().map(|b| b.ptr).collect(),
                    }),
                    Some(Err(reason)) => Handled::refused(reason),
                    None => match state.alloc(&bytes) {
                        Ok((handles, pointers)) => Handled::ok(RunnerReply::Allocated {
                            handles,
                            shared: false,
                            pointers,
                        }),
                        Err(e) => failed(e),
                    },
                }
            }
            RunnerCmd::Run {
                launches,
                zero,
                used,
                scrub,
                flush_bytes,
                flush_value,
            } => match state.run(&launches, &zero, &used, scrub, flush_bytes, flush_value) {
                Ok((millis, reload_ms)) => Handled::ok(RunnerReply::Ran { millis, reload_ms }),
                Err(RunFailure::Cuda(e)) => failed(e),
                Err(RunFailure::Ours(reason)) => Handled::refused(reason),
            },
            RunnerCmd::Occupancy { queries } => Handled::ok(RunnerReply::Occupancy {
                blocks: queries
                    .iter()
                    .map(|&(f, threads, smem)| {
                        state
                            .functions
                            .get(f)
                            .and_then(|&f| driver::occupancy_blocks(f, threads, smem).ok())
                    })
                    .collect(),
            }),
            RunnerCmd::Reset => {
                state.free_buffers();
                state.unload();
                Handled::ok(RunnerReply::Reset)
            }
            RunnerCmd::LoadTorch { .. } | RunnerCmd::RunTorch { .. } => Handled::refused(
                "this runner runs CUDA modules; a PyTorch reference runs in the Python runner",
            ),
        }
    }
}

/// Why a runner command did not succeed, and whose failure that is.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum RunnerFault {
    /// A CUDA call failed in the runner (a fault of the kernels it runs).
    Cuda(CudaError),
    /// The command ran past its limit; the runner was killed.
    Timeout(Duration),
    /// The runner died during the command.
    Crashed(String),
    /// No usable runner (could not start, wrong protocol, no GPU): ours.
    Unavailable(String),
}

impl std::fmt::Display for RunnerFault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RunnerFault::Cuda(e) => write!(f, "{e}"),
            RunnerFault::Timeout(d) => write!(f, "no answer within {} ms", d.as_millis()),
            RunnerFault::Crashed(r) => write!(f, "the runner died: {r}"),
            RunnerFault::Unavailable(r) => write!(f, "no runner: {r}"),
        }
    }
}

/// The harness's handle on one runner process.
pub(crate) struct RunnerClient {
    pool: Pool<RunnerCmd, RunnerReply>,
    /// Where the runner sends its buffers' descriptors (`None`: legacy CUDA IPC only).
    inbox: Option<FdInbox>,
    /// The module loaded now (a hash of the cubin), to skip reloading a trusted one.
    pub loaded: Option<u64>,
}

/// How the harness maps one of a runner's buffers.
pub(crate) enum BufferShare {
    /// A shareable buffer's file descriptor (the VMM API: full-speed access).
    Fd(std::os::fd::OwnedFd),
    /// A legacy CUDA IPC handle.
    Ipc(IpcHandle),
}

impl RunnerClient {
    /// A runner started from this executable, in its own process.
    pub fn new(what: &str) -> Result<RunnerClient, String> {
        let exe = std::env::current_exe()
            .map_err(|e| format!("cannot find this executable to start the {what} runner: {e}"))?;
        let mut spec: WorkerSpec =
            crate::worker::WorkerCommand::new(exe, crate::worker::Role::Runner)
                .spec(crate::worker::Role::Runner);
        // Without an inbox the runner's buffers are mapped through legacy CUDA IPC (slower
        // for the harness's own kernels, the same for the runner's).
        // Every function is loaded with its module, not at its first launch (which would
        // fall in a timed window, and a module that keeps data is reloaded before each run).
        spec.env
            .push(("CUDA_MODULE_LOADING".to_string(), "EAGER".to_string()));
        let inbox = FdInbox::new().ok();
        if let Some(inbox) = &inbox {
            spec.env.push((
                super::fdpass::INBOX_ENV.to_string(),
                inbox.name().to_string(),
            ));
        }
        Ok(RunnerClient {
            pool: Pool::new(vec![spec]),
            inbox,
            loaded: None,
        })
    }

    /// A PyTorch reference runner: `python` running the crate's `torch_runner.py`. Its
    /// buffers are mapped through legacy CUDA IPC (the harness's own kernels are a little
    /// slower on them; the forward is not).
    pub fn torch(python: &std::path::Path) -> Result<RunnerClient, String> {
        let script = super::torch::runner_script()
            .map_err(|e| format!("cannot write the PyTorch runner script: {e}"))?;
        let spec = WorkerSpec {
            program: python.to_path_buf(),
            args: vec![
                script.display().to_string(),
                "--protocol".into(),
                crate::sandbox::protocol::PROTOCOL_VERSION.to_string(),
                "--version".into(),
                env!("CARGO_PKG_VERSION").into(),
            ],
            env: vec![("PYTHONDONTWRITEBYTECODE".into(), "1".into())],
            memory_limit_bytes: None,
            role: "torch_runner".into(),
        };
        Ok(RunnerClient {
            pool: Pool::new(vec![spec]),
            inbox: None,
            loaded: None,
        })
    }

    /// Builds a PyTorch reference's module (`key` identifies it; loaded once per key).
    pub fn load_torch(
        &mut self,
        reference: &super::torch::TorchReference,
        buffers: Vec<super::JobBuffer>,
        key: u64,
        limit: Duration,
    ) -> Result<(), RunnerFault> {
        if self.loaded == Some(key) {
            return Ok(());
        }
        let cmd = RunnerCmd::LoadTorch {
            source: reference.source.clone(),
            mode: reference.mode,
            buffers,
        };
        match self.call(&cmd, limit)? {
            RunnerReply::Loaded => {
                self.loaded = Some(key);
                Ok(())
            }
            other => Err(Self::unexpected(other)),
        }
    }

    /// One timed run of a PyTorch reference; its milliseconds.
    pub fn run_torch(
        &mut self,
        shapes: Vec<Vec<u64>>,
        flush: (u64, u32),
        limit: Duration,
    ) -> Result<f64, RunnerFault> {
        let cmd = RunnerCmd::RunTorch {
            shapes,
            flush_bytes: flush.0,
            flush_value: flush.1,
        };
        match self.call(&cmd, limit)? {
            RunnerReply::Ran { millis, .. } => Ok(millis),
            other => Err(Self::unexpected(other)),
        }
    }

    /// Frees the runner's buffers and module (its process stays).
    pub fn reset(&mut self, limit: Duration) -> Result<(), RunnerFault> {
        self.loaded = None;
        match self.call(&RunnerCmd::Reset, limit)? {
            RunnerReply::Reset => Ok(()),
            other => Err(Self::unexpected(other)),
        }
    }

    fn call(&mut self, cmd: &RunnerCmd, limit: Duration) -> Result<RunnerReply, RunnerFault> {
        let out = self.pool.run(cmd, limit);
        if !matches!(out, JobOutcome::Done(_)) {
            self.loaded = None;
        }
        match out {
            JobOutcome::Done(RunnerReply::Failed { error }) => {
                self.loaded = None;
                Err(RunnerFault::Cuda(error))
            }
            JobOutcome::Done(r) => Ok(r),
            JobOutcome::Refused { reason } | JobOutcome::Unavailable { reason } => {
                Err(RunnerFault::Unavailable(reason))
            }
            JobOutcome::Timeout { limit } => Err(RunnerFault::Timeout(limit)),
            JobOutcome::Crashed {
                reason,
                stderr_tail,
            } => {
                let tail = crate::sandbox::last_lines(&stderr_tail, 3, " | ");
                Err(RunnerFault::Crashed(if tail.is_empty() {
                    reason
                } else {
                    format!("{reason}; stderr: {tail}")
                }))
            }
        }
    }

    fn unexpected(reply: RunnerReply) -> RunnerFault {
        RunnerFault::Unavailable(format!("runner answered out of turn: {reply:?}"))
    }

    /// Loads a module (`key` identifies it; `None` forces a load); with `reload_each_run`
    /// the runner loads it afresh before every run after the first.
    pub fn load(
        &mut self,
        cubin_b64: &str,
        symbols: Vec<String>,
        key: Option<u64>,
        reload_each_run: bool,
        limit: Duration,
    ) -> Result<(), RunnerFault> {
        if key.is_some() && self.loaded == key {
            return Ok(());
        }
        let cmd = RunnerCmd::Load {
            cubin_b64: cubin_b64.to_string(),
            symbols,
            reload_each_run,
        };
        match self.call(&cmd, limit)? {
            RunnerReply::Loaded => {
                self.loaded = key;
                Ok(())
            }
            other => Err(Self::unexpected(other)),
        }
    }

    /// Allocates buffers; returns how to map each, in order.
    pub fn alloc(
        &mut self,
        bytes: Vec<u64>,
        limit: Duration,
    ) -> Result<Vec<BufferShare>, RunnerFault> {
        let count = bytes.len();
        // A nonzero number marks this request's descriptors (0: do not share).
        let share_token = self
            .inbox
            .as_ref()
            .map_or(0, |_| super::executor::fresh_secret() | 1);
        match self.call(&RunnerCmd::Alloc { bytes, share_token }, limit)? {
            RunnerReply::Allocated { shared: true, .. } => {
                let inbox = self
                    .inbox
                    .as_ref()
                    .filter(|_| share_token != 0)
                    .ok_or_else(|| {
                        RunnerFault::Unavailable("runner shared buffers nobody asked for".into())
                    })?;
                let fds = inbox
                    .receive(share_token, count, limit.min(Duration::from_secs(10)))
                    .map_err(|e| {
                        RunnerFault::Unavailable(format!(
                            "the runner's buffer descriptors did not arrive: {e}"
                        ))
                    })?;
                Ok(fds.into_iter().map(BufferShare::Fd).collect())
            }
            RunnerReply::Allocated { handles, .. } => handles
                .iter()
                .map(|h| {
                    base64::engine::general_purpose::STANDARD
                        .decode(h)
                        .ok()
                        .and_then(|v| IpcHandle::try_from(v.as_slice()).ok())
                        .map(BufferShare::Ipc)
                        .ok_or_else(|| {
                            RunnerFault::Unavailable("runner sent a malformed IPC handle".into())
                        })
                })
                .collect(),
            other => Err(Self::unexpected(other)),
        }
    }

    /// One timed run; returns its milliseconds and those of reloading the module first.
    /// With `scrub` the runner first overwrites what an earlier run could have left in the
    /// context's shared and local memory.
    pub fn run(
        &mut self,
        launches: Vec<RunLaunch>,
        (zero, used, scrub): (Vec<ZeroRange>, Vec<u64>, bool),
        flush: (u64, u32),
        limit: Duration,
    ) -> Result<(f64, f64), RunnerFault> {
        let cmd = RunnerCmd::Run {
            launches,
            zero,
            used,
            scrub,
            flush_bytes: flush.0,
            flush_value: flush.1,
        };
        match self.call(&cmd, limit)? {
            RunnerReply::Ran { millis, reload_ms } => Ok((millis, reload_ms)),
            other => Err(Self::unexpected(other)),
        }
    }

    /// Driver occupancy per query.
    pub fn occupancy(
        &mut self,
        queries: Vec<(usize, u32, u32)>,
        limit: Duration,
    ) -> Result<Vec<Option<i32>>, RunnerFault> {
        match self.call(&RunnerCmd::Occupancy { queries }, limit)? {
            RunnerReply::Occupancy { blocks } => Ok(blocks),
            other => Err(Self::unexpected(other)),
        }
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
