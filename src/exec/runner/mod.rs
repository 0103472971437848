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

mod client;
mod scrub;
mod state;

use serde::{Deserialize, Serialize};

use super::driver::{CudaError, DeviceBuffer};

pub(crate) use client::{BufferShare, RunnerClient, RunnerFault};
pub use state::RunnerHandler;

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
    /// Builds a PyTorch reference's module (PyTorch runners only, [`crate::exec::TorchReference`]).
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
