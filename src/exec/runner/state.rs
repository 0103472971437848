//! The runner process's side: its context, module and buffers, and the handler that serves
//! the harness's commands.

use base64::Engine;
use cudarc::driver::sys;

use super::scrub::Scrubber;
use super::{arg_bytes, RunLaunch, RunnerCmd, RunnerReply, ZeroRange};
use crate::exec::driver::{self, CudaError, DeviceBuffer, Event, Gpu, Module};
use crate::exec::settings::{CtxSched, GpuSettings};
use crate::sandbox::{Handled, Handler};

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
        let inbox = std::env::var(crate::exec::fdpass::INBOX_ENV).ok()?;
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
            crate::exec::fdpass::send_fds(&inbox, token, &borrowed)
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
