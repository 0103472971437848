//! Settings of the GPU worker processes (the harness and its runners), given to them at
//! start: the library reads no environment variable here (the worker's start does, see
//! `crate::worker`).

use std::path::PathBuf;

/// How a host thread waits for the GPU: the scheduling flag of the CUDA contexts. Every
/// GPU-side wait of the protocol is a host round trip between processes, so this is a
/// latency knob, not a correctness one. Default: the driver's choice.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum CtxSched {
    /// The driver's choice (`auto`).
    #[default]
    Auto,
    /// Spin while waiting (`spin`).
    Spin,
    /// Yield the CPU while waiting (`yield`).
    Yield,
    /// Block on a synchronisation primitive (`blocking`).
    Blocking,
}

impl CtxSched {
    /// The setting a name stands for: `spin`, `yield`, `blocking`; anything else (`auto`,
    /// empty) is the driver's choice, as it always was for `$CUDAPERF_CTX_SCHED`.
    pub fn from_name(name: &str) -> CtxSched {
        match name {
            "spin" => CtxSched::Spin,
            "yield" => CtxSched::Yield,
            "blocking" => CtxSched::Blocking,
            _ => CtxSched::Auto,
        }
    }
}

/// What a GPU worker process is started with; every field has a documented default.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GpuSettings {
    /// How the contexts of the harness and its runners wait for the GPU (default: the
    /// driver's choice; the worker's start reads `$CUDAPERF_CTX_SCHED`).
    pub ctx_sched: CtxSched,
    /// A file the harness appends one JSON line per job to, saying where the job's wall
    /// time went (default: none; the worker's start reads `$CUDAPERF_TRACE_JOBS`).
    pub trace_jobs: Option<PathBuf>,
    /// The Python interpreter that runs a PyTorch reference (default: `python3` on `PATH`;
    /// the worker's start reads `$CUDAPERF_TORCH_PYTHON`). It needs PyTorch with CUDA.
    pub torch_python: Option<PathBuf>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scheduling_names_and_the_driver_default() {
        assert_eq!(CtxSched::from_name("spin"), CtxSched::Spin);
        assert_eq!(CtxSched::from_name("yield"), CtxSched::Yield);
        assert_eq!(CtxSched::from_name("blocking"), CtxSched::Blocking);
        for other in ["auto", "", "SPIN", "fast"] {
            assert_eq!(CtxSched::from_name(other), CtxSched::Auto, "{other}");
        }
        assert_eq!(GpuSettings::default().ctx_sched, CtxSched::Auto);
    }
}
