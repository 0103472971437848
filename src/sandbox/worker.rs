//! The worker side: a loop that greets its pool, reads requests and answers them through a
//! [`Handler`]. Which handler serves which role is decided by the program (for cudaperf:
//! [`crate::worker`]); the sandbox does not know what the jobs are.

use std::io::{BufRead, Write};

use serde::de::DeserializeOwned;
use serde::Serialize;

use super::protocol::{Greeting, Hello, Request, Response};

/// What a handler made of one job.
#[derive(Debug, Clone, PartialEq)]
pub struct Handled<R> {
    /// The result, or why the job could not be served here.
    pub reply: Result<R, String>,
    /// This worker's state is unusable; the pool should replace it.
    pub restart: bool,
}

impl<R> Handled<R> {
    /// A result; the worker stays.
    pub fn ok(reply: R) -> Handled<R> {
        Handled {
            reply: Ok(reply),
            restart: false,
        }
    }

    /// A refusal with a reason; the worker stays.
    pub fn refused(reason: impl Into<String>) -> Handled<R> {
        Handled {
            reply: Err(reason.into()),
            restart: false,
        }
    }
}

/// Serves one role's jobs.
pub trait Handler {
    /// A request's job.
    type Job: DeserializeOwned;
    /// A job's result.
    type Reply: Serialize;
    /// Runs one job.
    fn handle(&mut self, job: Self::Job) -> Handled<Self::Reply>;
}

/// Runs a worker of `role` on stdin/stdout until its input closes; returns the exit code.
///
/// Device-side `printf` writes to file descriptor 1, which would corrupt the protocol, so
/// the protocol moves to a duplicate of stdout and fd 1 is pointed at stderr (which the
/// pool drains and caps).
pub fn run<H: Handler>(role: &str, handler: &mut H) -> i32 {
    exit_with_parent();
    let proto = protocol_output();
    let stdin = std::io::stdin();
    match serve(role, stdin.lock(), proto, handler) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("cudaperf worker ({role}): {e}");
            1
        }
    }
}

/// A worker must not outlive the process that started it (a GPU worker killed at its time
/// limit must take its runners with it, even while one is stuck in a hung kernel): a thread
/// watches the parent and ends this process at once when it is gone.
#[cfg(unix)]
fn exit_with_parent() {
    // SAFETY: getppid cannot fail.
    let parent = unsafe { libc::getppid() };
    let _ = std::thread::Builder::new()
        .name("parent-watch".into())
        .spawn(move || loop {
            std::thread::sleep(std::time::Duration::from_millis(200));
            // SAFETY: getppid cannot fail; _exit ends the process without running
            // destructors, which could block on a device that is still busy.
            unsafe {
                if libc::getppid() != parent {
                    libc::_exit(3);
                }
            }
        });
}

#[cfg(not(unix))]
fn exit_with_parent() {}

#[cfg(unix)]
fn protocol_output() -> Box<dyn Write> {
    use std::os::fd::FromRawFd;
    // SAFETY: dup/dup2 on this process's standard descriptors; the duplicate is owned by
    // the returned File and closed once.
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

fn write_line(output: &mut impl Write, value: &impl Serialize) -> std::io::Result<()> {
    let mut text = serde_json::to_string(value).map_err(std::io::Error::other)?;
    text.push('\n');
    output.write_all(text.as_bytes())?;
    output.flush()
}

/// Greets, then serves requests from `input` until it closes. Lines that are not requests
/// get an `error` response (the worker does not die on them); blank lines are skipped.
pub fn serve<H: Handler>(
    role: &str,
    input: impl BufRead,
    mut output: impl Write,
    handler: &mut H,
) -> std::io::Result<()> {
    write_line(
        &mut output,
        &Greeting {
            hello: Hello::for_role(role),
        },
    )?;
    for line in input.lines() {
        let line = line?;
        if line.trim().is_empty() {
            continue;
        }
        let response = match serde_json::from_str::<Request<H::Job>>(&line) {
            Ok(req) => {
                let handled = handler.handle(req.job);
                let (result, error) = match handled.reply {
                    Ok(r) => (Some(r), None),
                    Err(e) => (None, Some(e)),
                };
                Response {
                    id: req.id,
                    restart: handled.restart,
                    result,
                    error,
                }
            }
            Err(e) => Response {
                // Recover the id when the envelope is fine and only the job is not.
                id: serde_json::from_str::<serde_json::Value>(&line)
                    .ok()
                    .and_then(|v| v.get("id").and_then(|i| i.as_u64()))
                    .unwrap_or(0),
                restart: false,
                result: None,
                error: Some(format!("bad request for a `{role}` worker: {e}")),
            },
        };
        write_line(&mut output, &response)?;
    }
    Ok(())
}
