//! The JSON-lines protocol between the parent and `cudaperf worker`.
//!
//! One request per line on the worker's stdin, one response per line on its stdout:
//! ```text
//! > {"id":1,"job":{"type":"compile","source":"...","program_name":"candidate.cu","flags":["-arch=sm_90"],"name_exprs":["k"]}}
//! < {"id":1,"restart":false,"result":{"type":"compiled","ok":true,"log":"...","cubin_b64":"...","lowered":[["k","k"]]}}
//! ```
//! A response with `restart: true` tells the parent the worker's state is unusable (a sticky
//! CUDA error); the parent replaces it before the next job.

use serde::{Deserialize, Serialize};

use crate::exec::{ExecJob, ExecResult};

/// One request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Request {
    /// Matches the response to the request.
    pub id: u64,
    /// What to do.
    pub job: Job,
}

/// Work a worker can do.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Job {
    /// Compile with NVRTC.
    Compile(CompileJob),
    /// Run a candidate on the GPU (load, check, time).
    Execute(Box<ExecJob>),
    /// Answer at once (health check).
    Ping,
    /// Diagnostic: sleep, then answer (tests the parent's timeout handling).
    Sleep {
        /// Milliseconds.
        ms: u64,
    },
    /// Diagnostic: exit with a code without answering (tests crash handling).
    Exit {
        /// Exit code.
        code: i32,
    },
}

/// An NVRTC compile request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CompileJob {
    /// CUDA source (already checked against the include allowlist).
    pub source: String,
    /// Name used in diagnostics.
    pub program_name: String,
    /// NVRTC options.
    pub flags: Vec<String>,
    /// Kernel name expressions whose lowered names are wanted.
    pub name_exprs: Vec<String>,
}

/// A worker's answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum JobResult {
    /// NVRTC ran.
    Compiled {
        /// Whether it succeeded.
        ok: bool,
        /// The program log.
        log: String,
        /// The cubin, base64.
        cubin_b64: String,
        /// (name expression, lowered name).
        lowered: Vec<(String, String)>,
    },
    /// A GPU job ran (whatever its verdict).
    Executed(Box<ExecResult>),
    /// Answer to `Ping` and `Sleep`.
    Pong,
    /// The job could not be run at all (NVRTC or CUDA missing, bad request).
    Error {
        /// Why.
        message: String,
    },
}

/// One response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Response {
    /// The request's id.
    pub id: u64,
    /// Replace this worker before its next job.
    #[serde(default)]
    pub restart: bool,
    /// The result.
    pub result: JobResult,
}
