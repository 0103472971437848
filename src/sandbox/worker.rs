//! The worker side: `cudaperf worker`, or any program that calls [`run_if_requested`].

use std::io::{BufRead, Write};

use base64::Engine;

use super::protocol::{Job, JobResult, Request, Response};
use crate::compile::nvrtc;

/// The first argument that makes a program act as a worker (see [`run_if_requested`]).
pub const WORKER_ARG: &str = "__cudaperf_worker";

/// Turns this process into a worker if it was started as one, and never returns then.
///
/// Call it first thing in `main` of a program that links cudaperf, then point
/// `WorkerSpec::program` at `std::env::current_exe()` with args `[WORKER_ARG]`:
/// ```no_run
/// // First thing in `main`:
/// cudaperf::sandbox::run_if_requested();
/// // ... the trainer ...
/// ```
pub fn run_if_requested() {
    if std::env::args().nth(1).as_deref() == Some(WORKER_ARG) {
        std::process::exit(main());
    }
}

/// Runs the worker loop on stdin/stdout; returns the process exit code.
///
/// Device-side `printf` writes to file descriptor 1, which would corrupt the protocol, so
/// the protocol moves to a duplicate of stdout and fd 1 is pointed at stderr (which the
/// parent drains and caps).
pub fn main() -> i32 {
    let proto = protocol_output();
    let stdin = std::io::stdin();
    match serve(stdin.lock(), proto) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("cudaperf worker: {e}");
            1
        }
    }
}

#[cfg(unix)]
fn protocol_output() -> Box<dyn Write> {
    use std::os::fd::FromRawFd;
    // SAFETY: dup/dup2 on the standard descriptors of this process.
    unsafe {
        let fd = libc::dup(1);
        if fd >= 0 && libc::dup2(2, 1) >= 0 {
            return Box::new(std::fs::File::from_raw_fd(fd));
        }
    }
    Box::new(std::io::stdout())
}

#[cfg(not(unix))]
fn protocol_output() -> Box<dyn Write> {
    Box::new(std::io::stdout())
}

/// Serves requests until the input closes.
pub fn serve(input: impl BufRead, mut output: impl Write) -> std::io::Result<()> {
    let mut state = crate::exec::WorkerState::default();
    for line in input.lines() {
        let line = line?;
        if line.trim().is_empty() {
            continue;
        }
        let (id, result, restart) = match serde_json::from_str::<Request>(&line) {
            Ok(req) => {
                let (result, restart) = handle(req.job, &mut state);
                (req.id, result, restart)
            }
            Err(e) => (
                0,
                JobResult::Error {
                    message: format!("bad request: {e}"),
                },
                false,
            ),
        };
        let resp = Response {
            id,
            restart,
            result,
        };
        let mut text = serde_json::to_string(&resp).map_err(std::io::Error::other)?;
        text.push('\n');
        output.write_all(text.as_bytes())?;
        output.flush()?;
    }
    Ok(())
}

fn handle(job: Job, state: &mut crate::exec::WorkerState) -> (JobResult, bool) {
    match job {
        Job::Ping => (JobResult::Pong, false),
        Job::Sleep { ms } => {
            std::thread::sleep(std::time::Duration::from_millis(ms));
            (JobResult::Pong, false)
        }
        Job::Exit { code } => std::process::exit(code),
        Job::Compile(c) => {
            match nvrtc::compile(&c.source, &c.program_name, &c.flags, &c.name_exprs) {
                Ok(out) => (
                    JobResult::Compiled {
                        ok: out.ok,
                        log: out.log,
                        cubin_b64: base64::engine::general_purpose::STANDARD.encode(&out.cubin),
                        lowered: out.lowered,
                    },
                    false,
                ),
                Err(message) => (JobResult::Error { message }, false),
            }
        }
        Job::Execute(job) => {
            let (result, restart) = state.execute(&job);
            (JobResult::Executed(Box::new(result)), restart)
        }
    }
}
