//! The versioned JSON-lines protocol between a [`super::Pool`] and its worker processes.
//!
//! A worker announces itself with one line before anything else, then answers one request
//! line with one response line, in order:
//! ```text
//! < {"hello":{"protocol":2,"role":"compile","version":"0.1.0","pid":4242}}
//! > {"id":1,"job":{...}}
//! < {"id":1,"restart":false,"result":{...}}
//! > {"id":2,"job":"not what this role understands"}
//! < {"id":2,"restart":false,"error":"bad request: unknown variant ..."}
//! ```
//! The pool checks the greeting before its first job: a program that is not a worker, a
//! worker of another role, or one built from another version of the protocol is refused
//! with a reason (never mistaken for a candidate's failure). A response with
//! `restart: true` tells the pool the worker's state is unusable (a sticky CUDA error); the
//! pool replaces it before the slot's next job. What a job and a result are is up to the
//! role: the sandbox only moves them.

use serde::{Deserialize, Serialize};

/// The protocol spoken by this build. Bumped whenever a message changes shape.
pub const PROTOCOL_VERSION: u32 = 2;

/// The first line a worker writes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Greeting {
    /// The worker's self-description.
    pub hello: Hello,
}

/// A worker's self-description.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hello {
    /// [`PROTOCOL_VERSION`] of the worker's build.
    pub protocol: u32,
    /// The role it serves (which jobs it understands).
    pub role: String,
    /// The crate version of the worker's build.
    pub version: String,
    /// Its process id.
    pub pid: u32,
}

impl Hello {
    /// This process's greeting for `role`.
    pub fn for_role(role: &str) -> Hello {
        Hello {
            protocol: PROTOCOL_VERSION,
            role: role.to_string(),
            version: env!("CARGO_PKG_VERSION").to_string(),
            pid: std::process::id(),
        }
    }
}

/// One request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Request<J> {
    /// Matches the response to the request.
    pub id: u64,
    /// What to do.
    pub job: J,
}

/// One response: `result` when the job ran, `error` when the request could not be served
/// (malformed, or the worker cannot do this kind of work here).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Response<R> {
    /// The request's id (0 when the request line could not be read at all).
    pub id: u64,
    /// Replace this worker before its next job.
    #[serde(default)]
    pub restart: bool,
    /// The job's result.
    #[serde(default = "none", skip_serializing_if = "Option::is_none")]
    pub result: Option<R>,
    /// Why there is no result.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

fn none<R>() -> Option<R> {
    None
}
