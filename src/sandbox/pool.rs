//! A pool of worker processes that run untrusted jobs with a wall-clock limit.
//!
//! Each slot owns at most one child process speaking JSON lines (see
//! [`super::protocol`]); a new worker must greet with the right protocol version and role
//! before it gets a job. A job that outlives its limit gets its worker killed; a worker that
//! exits, closes its pipe, prints garbage or asks to be restarted is replaced before the
//! slot's next job. Every job gets an outcome, and the outcome says whose failure it was:
//! a worker that cannot start or does not speak the protocol is [`JobOutcome::Unavailable`]
//! (ours), one that dies or hangs during a job is [`JobOutcome::Crashed`] or
//! [`JobOutcome::Timeout`] (the job's, unless the caller knows better).

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read, Write};
use std::marker::PhantomData;
use std::path::PathBuf;
use std::process::{Child, ChildStderr, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use serde::de::DeserializeOwned;
use serde::Serialize;

use super::protocol::{Greeting, Request, Response, PROTOCOL_VERSION};

/// How to start one worker.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkerSpec {
    /// The executable.
    pub program: PathBuf,
    /// Its arguments (`["worker"]` for the `cudaperf` binary).
    pub args: Vec<String>,
    /// Extra environment (e.g. `CUDA_VISIBLE_DEVICES`).
    pub env: Vec<(String, String)>,
    /// Address-space limit (RLIMIT_AS) in bytes; for compile workers only, since the
    /// CUDA driver reserves large virtual ranges.
    pub memory_limit_bytes: Option<u64>,
    /// The role the worker must announce in its greeting.
    pub role: String,
}

/// The longest a new worker may take to greet (less when the job's limit is shorter).
const HELLO_TIMEOUT: Duration = Duration::from_secs(30);

/// What happened to one job.
#[derive(Debug, Clone, PartialEq)]
pub enum JobOutcome<R> {
    /// The worker answered.
    Done(R),
    /// The worker answered that it cannot serve this job (a malformed request, or a
    /// capability missing here, such as NVRTC).
    Refused {
        /// The worker's reason.
        reason: String,
    },
    /// The job ran past its limit; the worker was killed.
    Timeout {
        /// The limit that was exceeded.
        limit: Duration,
    },
    /// The worker died or broke the protocol while running the job.
    Crashed {
        /// Exit status or the protocol problem.
        reason: String,
        /// The last lines the worker wrote to stderr.
        stderr_tail: String,
    },
    /// No usable worker: the program could not be started, or it did not greet with this
    /// build's protocol version and the expected role. Never the job's fault.
    Unavailable {
        /// What went wrong, naming the program.
        reason: String,
    },
}

const STDERR_KEEP_BYTES: usize = 4096;

/// The last `n` lines of a worker's stderr tail, joined with `sep`, for error messages.
pub fn last_lines(text: &str, n: usize, sep: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join(sep)
}

/// The worker's stdout as lines on a channel, read by a thread; `None` once it ends.
fn read_lines(stdout: ChildStdout) -> Receiver<Option<String>> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut reader = BufReader::new(stdout);
        loop {
            let mut line = String::new();
            // A worker's line is bounded by what it chooses to print; cap it anyway.
            match reader.by_ref().take(64 << 20).read_line(&mut line) {
                Ok(0) | Err(_) => {
                    let _ = tx.send(None);
                    return;
                }
                Ok(_) => {
                    if tx.send(Some(line)).is_err() {
                        return;
                    }
                }
            }
        }
    });
    rx
}

/// The last [`STDERR_KEEP_BYTES`] of the worker's stderr, drained by a thread.
fn keep_stderr_tail(stderr: ChildStderr) -> Arc<Mutex<VecDeque<u8>>> {
    let tail = Arc::new(Mutex::new(VecDeque::with_capacity(STDERR_KEEP_BYTES)));
    let tail2 = Arc::clone(&tail);
    std::thread::spawn(move || {
        // Drain stderr continuously so a printf flood never blocks the worker.
        let mut stderr = stderr;
        let mut buf = [0u8; 8192];
        while let Ok(n) = stderr.read(&mut buf) {
            if n == 0 {
                break;
            }
            if let Ok(mut t) = tail2.lock() {
                t.extend(&buf[..n]);
                let excess = t.len().saturating_sub(STDERR_KEEP_BYTES);
                t.drain(..excess);
            }
        }
    });
    tail
}

/// A running worker process.
struct Worker {
    child: Child,
    stdin: ChildStdin,
    lines: Receiver<Option<String>>,
    stderr: Arc<Mutex<VecDeque<u8>>>,
    next_id: u64,
}

impl Worker {
    /// Starts a worker and waits (at most `wait`) for its greeting; `Err` says why it is
    /// unusable.
    fn start(spec: &WorkerSpec, wait: Duration) -> Result<Worker, String> {
        let program = spec.program.display();
        let mut w =
            Worker::spawn(spec).map_err(|e| format!("cannot start worker `{program}`: {e}"))?;
        let fail = |w: Worker, what: String| -> String {
            let tail = last_lines(&w.kill(), 3, " | ");
            if tail.is_empty() {
                format!("worker `{program}` {what}")
            } else {
                format!("worker `{program}` {what}; stderr: {tail}")
            }
        };
        let wait = wait.min(HELLO_TIMEOUT);
        match w.lines.recv_timeout(wait) {
            Ok(Some(line)) => match serde_json::from_str::<Greeting>(&line) {
                Ok(g) if g.hello.protocol != PROTOCOL_VERSION => Err(fail(
                    w,
                    format!(
                        "speaks protocol {} (version {}), this build speaks {PROTOCOL_VERSION} (version {}): rebuild or point to a matching worker",
                        g.hello.protocol,
                        g.hello.version,
                        env!("CARGO_PKG_VERSION")
                    ),
                )),
                Ok(g) if g.hello.role != spec.role => Err(fail(
                    w,
                    format!(
                        "announced role `{}`, expected `{}`",
                        g.hello.role, spec.role
                    ),
                )),
                Ok(_) => {
                    w.next_id = 1;
                    Ok(w)
                }
                Err(_) => {
                    let snippet: String = line.trim().chars().take(120).collect();
                    Err(fail(
                        w,
                        format!("is not a cudaperf worker (its first line was `{snippet}`)"),
                    ))
                }
            },
            Ok(None) | Err(RecvTimeoutError::Disconnected) => {
                let reason = w.exit_reason();
                Err(fail(w, format!("ended before greeting ({reason})")))
            }
            Err(RecvTimeoutError::Timeout) => Err(fail(
                w,
                format!("did not greet within {} ms", wait.as_millis()),
            )),
        }
    }

    fn spawn(spec: &WorkerSpec) -> std::io::Result<Worker> {
        let mut cmd = Command::new(&spec.program);
        cmd.args(&spec.args)
            .envs(spec.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        #[cfg(unix)]
        {
            use std::os::unix::process::CommandExt;
            let limit = spec.memory_limit_bytes;
            // SAFETY: only async-signal-safe calls (setrlimit, setpgid) between fork and exec.
            unsafe {
                cmd.pre_exec(move || {
                    // Own process group: a kill reaches anything the worker started.
                    libc::setpgid(0, 0);
                    if let Some(bytes) = limit {
                        let lim = libc::rlimit {
                            rlim_cur: bytes as libc::rlim_t,
                            rlim_max: bytes as libc::rlim_t,
                        };
                        libc::setrlimit(libc::RLIMIT_AS, &lim);
                    }
                    Ok(())
                });
            }
        }
        let mut child = cmd.spawn()?;
        let stdin = child
            .stdin
            .take()
            .ok_or_else(|| std::io::Error::other("no stdin pipe"))?;
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| std::io::Error::other("no stdout pipe"))?;
        let stderr = child
            .stderr
            .take()
            .ok_or_else(|| std::io::Error::other("no stderr pipe"))?;
        let rx = read_lines(stdout);
        let tail = keep_stderr_tail(stderr);
        Ok(Worker {
            child,
            stdin,
            lines: rx,
            stderr: tail,
            next_id: 1,
        })
    }

    fn stderr_tail(&self) -> String {
        let bytes: Vec<u8> = self
            .stderr
            .lock()
            .map(|t| t.iter().copied().collect())
            .unwrap_or_default();
        String::from_utf8_lossy(&bytes).into_owned()
    }

    fn kill(mut self) -> String {
        #[cfg(unix)]
        // SAFETY: signalling our own child's process group.
        unsafe {
            libc::kill(-(self.child.id() as i32), libc::SIGKILL);
        }
        let _ = self.child.kill();
        let status = self
            .child
            .wait()
            .map(|s| s.to_string())
            .unwrap_or_else(|e| e.to_string());
        // Give the stderr thread a moment to collect the last words.
        std::thread::sleep(Duration::from_millis(20));
        let _ = status;
        self.stderr_tail()
    }

    fn exit_reason(&mut self) -> String {
        let deadline = Instant::now() + Duration::from_millis(500);
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return format!("worker exited: {status}");
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        "worker closed its output".into()
    }
}

struct Slot {
    spec: WorkerSpec,
    worker: Option<Worker>,
    restarts: u64,
}

/// A pool of worker processes for jobs `J` with results `R`; `run` may be called from many
/// threads at once.
pub struct Pool<J, R> {
    slots: Vec<Mutex<Slot>>,
    free: Mutex<Vec<usize>>,
    ready: Condvar,
    _jobs: PhantomData<fn(&J) -> R>,
}

/// Counters for monitoring.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PoolStats {
    /// Slots in the pool.
    pub workers: usize,
    /// Workers replaced after a timeout, crash or sticky error, over the pool's life.
    pub restarts: u64,
}

impl<J: Serialize + Sync, R: DeserializeOwned + Send> Pool<J, R> {
    /// A pool with one slot per spec. Workers start lazily, on a slot's first job.
    pub fn new(specs: Vec<WorkerSpec>) -> Pool<J, R> {
        let n = specs.len();
        Pool {
            slots: specs
                .into_iter()
                .map(|spec| {
                    Mutex::new(Slot {
                        spec,
                        worker: None,
                        restarts: 0,
                    })
                })
                .collect(),
            free: Mutex::new((0..n).rev().collect()),
            ready: Condvar::new(),
            _jobs: PhantomData,
        }
    }

    /// Number of slots.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// Whether the pool has no slots.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// Restart counters.
    pub fn stats(&self) -> PoolStats {
        PoolStats {
            workers: self.slots.len(),
            restarts: self
                .slots
                .iter()
                .map(|s| s.lock().map(|s| s.restarts).unwrap_or(0))
                .sum(),
        }
    }

    fn acquire(&self) -> usize {
        let mut free = self.free.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            if let Some(i) = free.pop() {
                return i;
            }
            free = self.ready.wait(free).unwrap_or_else(|p| p.into_inner());
        }
    }

    fn release(&self, i: usize) {
        self.free.lock().unwrap_or_else(|p| p.into_inner()).push(i);
        self.ready.notify_one();
    }

    /// Runs one job on the next free worker, waiting for one if all are busy.
    pub fn run(&self, job: &J, limit: Duration) -> JobOutcome<R> {
        let i = self.acquire();
        let outcome = {
            let mut slot = self.slots[i].lock().unwrap_or_else(|p| p.into_inner());
            run_on_slot(&mut slot, job, limit)
        };
        self.release(i);
        outcome
    }

    /// Runs jobs concurrently on all slots; outcomes come back in input order.
    pub fn run_all(&self, jobs: &[J], limit: Duration) -> Vec<JobOutcome<R>> {
        let next = Mutex::new(0usize);
        let results: Mutex<Vec<Option<JobOutcome<R>>>> =
            Mutex::new((0..jobs.len()).map(|_| None).collect());
        std::thread::scope(|s| {
            for _ in 0..self.slots.len().min(jobs.len()) {
                s.spawn(|| loop {
                    let k = {
                        let mut n = next.lock().unwrap_or_else(|p| p.into_inner());
                        let k = *n;
                        *n += 1;
                        k
                    };
                    if k >= jobs.len() {
                        return;
                    }
                    let out = self.run(&jobs[k], limit);
                    results.lock().unwrap_or_else(|p| p.into_inner())[k] = Some(out);
                });
            }
        });
        results
            .into_inner()
            .unwrap_or_else(|p| p.into_inner())
            .into_iter()
            .map(|o| {
                o.unwrap_or(JobOutcome::Crashed {
                    reason: "job was not run (internal error)".into(),
                    stderr_tail: String::new(),
                })
            })
            .collect()
    }
}

fn run_on_slot<J: Serialize, R: DeserializeOwned>(
    slot: &mut Slot,
    job: &J,
    limit: Duration,
) -> JobOutcome<R> {
    if slot.worker.is_none() {
        match Worker::start(&slot.spec, limit) {
            Ok(w) => slot.worker = Some(w),
            Err(reason) => return JobOutcome::Unavailable { reason },
        }
    }
    let Some(worker) = slot.worker.as_mut() else {
        return JobOutcome::Unavailable {
            reason: "worker missing (internal error)".into(),
        };
    };
    let id = worker.next_id;
    worker.next_id += 1;
    let request = Request { id, job };
    let mut line = match serde_json::to_string(&request) {
        Ok(l) => l,
        Err(e) => {
            return JobOutcome::Crashed {
                reason: format!("cannot encode job: {e}"),
                stderr_tail: String::new(),
            }
        }
    };
    line.push('\n');
    let deadline = Instant::now() + limit;
    let write_ok = worker
        .stdin
        .write_all(line.as_bytes())
        .and_then(|_| worker.stdin.flush())
        .is_ok();
    if !write_ok {
        let reason = worker.exit_reason();
        return crash(slot, reason);
    }
    await_answer(slot, id, deadline, limit)
}

/// Waits until `deadline` for the worker's answer to job `id` (answers to jobs that already
/// timed out are skipped); a worker that ends, breaks the protocol or does not answer in
/// time is stopped.
fn await_answer<R: DeserializeOwned>(
    slot: &mut Slot,
    id: u64,
    deadline: Instant,
    limit: Duration,
) -> JobOutcome<R> {
    loop {
        let now = Instant::now();
        let Some(worker) = slot.worker.as_mut() else {
            break JobOutcome::Unavailable {
                reason: "worker missing (internal error)".into(),
            };
        };
        match worker
            .lines
            .recv_timeout(deadline.saturating_duration_since(now))
        {
            Ok(Some(text)) => match serde_json::from_str::<Response<R>>(&text) {
                Ok(resp) if resp.id == id => break answered(slot, resp),
                Ok(_) => continue, // A stale answer to a job that already timed out.
                Err(e) => {
                    let snippet: String = text.chars().take(200).collect();
                    break crash(slot, format!("worker broke the protocol ({e}): {snippet}"));
                }
            },
            Ok(None) => {
                let reason = worker.exit_reason();
                break crash(slot, reason);
            }
            Err(RecvTimeoutError::Timeout) => {
                if let Some(w) = slot.worker.take() {
                    w.kill();
                }
                slot.restarts += 1;
                break JobOutcome::Timeout { limit };
            }
            Err(RecvTimeoutError::Disconnected) => {
                let reason = worker.exit_reason();
                break crash(slot, reason);
            }
        }
    }
}

/// The outcome of the worker's answer; a worker that asks for it is restarted.
fn answered<R>(slot: &mut Slot, resp: Response<R>) -> JobOutcome<R> {
    if resp.restart {
        // The worker's state (e.g. its CUDA context) is unusable.
        if let Some(w) = slot.worker.take() {
            w.kill();
        }
        slot.restarts += 1;
    }
    match (resp.result, resp.error) {
        (Some(r), _) => JobOutcome::Done(r),
        (None, Some(reason)) => JobOutcome::Refused { reason },
        (None, None) => JobOutcome::Refused {
            reason: "the worker answered with neither a result nor an error".into(),
        },
    }
}

fn crash<R>(slot: &mut Slot, reason: String) -> JobOutcome<R> {
    let stderr_tail = slot.worker.take().map(Worker::kill).unwrap_or_default();
    slot.restarts += 1;
    JobOutcome::Crashed {
        reason,
        stderr_tail,
    }
}

impl<J, R> Drop for Pool<J, R> {
    fn drop(&mut self) {
        for s in &self.slots {
            if let Ok(mut s) = s.lock() {
                if let Some(w) = s.worker.take() {
                    w.kill();
                }
            }
        }
    }
}
