//! What a compile worker does: one NVRTC call per job, in a process the pool can kill.

use base64::Engine;
use serde::{Deserialize, Serialize};

use super::nvrtc;
use crate::sandbox::{Handled, Handler};

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

/// What NVRTC produced.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Compiled {
    /// Whether it succeeded.
    pub ok: bool,
    /// The program log.
    pub log: String,
    /// The cubin, base64.
    pub cubin_b64: String,
    /// (name expression, lowered name).
    pub lowered: Vec<(String, String)>,
}

/// Serves [`CompileJob`]s; refuses them (with the reason) where NVRTC cannot be loaded.
#[derive(Debug, Default)]
pub struct CompileHandler;

impl Handler for CompileHandler {
    type Job = CompileJob;
    type Reply = Compiled;

    fn handle(&mut self, c: CompileJob) -> Handled<Compiled> {
        match nvrtc::compile(&c.source, &c.program_name, &c.flags, &c.name_exprs) {
            Ok(out) => Handled::ok(Compiled {
                ok: out.ok,
                log: out.log,
                cubin_b64: base64::engine::general_purpose::STANDARD.encode(&out.cubin),
                lowered: out.lowered,
            }),
            Err(e) => Handled::refused(e.to_string()),
        }
    }
}
