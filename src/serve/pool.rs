//! The in-process backend: a bounded queue of jobs and a few blocking threads that score
//! them through one shared [`Evaluator`], off the async reactor.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use super::api::JobSpec;
use super::metrics::Metrics;
use super::score::{run_job, JobOutcome, PartialResults};
use crate::pipeline::Evaluator;
use crate::reward::Reward;
use crate::task::Task;

/// One accepted job and where its answer goes.
pub(crate) struct LocalJob {
    pub task: Arc<Task>,
    pub spec: JobSpec,
    pub reward: Box<dyn Reward>,
    pub deadline_ms: u64,
    pub enqueued: Instant,
    pub reply: oneshot::Sender<(JobOutcome, f64)>,
    /// Results that are final before the whole group is (see [`run_job`]); what the
    /// requester answers if its deadline passes first.
    pub partial: Arc<PartialResults>,
}

/// Why a job was not accepted.
pub(crate) enum Rejected {
    /// Every queue slot is taken.
    Full,
    /// The pool is shutting down.
    Closed,
}

/// Worker threads behind a bounded queue.
pub(crate) struct LocalPool {
    tx: Mutex<Option<SyncSender<LocalJob>>>,
    threads: Mutex<Vec<std::thread::JoinHandle<()>>>,
    /// Jobs accepted and not yet answered (waiting + running).
    depth: Arc<AtomicUsize>,
    workers: usize,
}

impl LocalPool {
    /// `workers` threads (at least 1) and room for `queue_len` waiting jobs.
    pub fn new(
        evaluator: Arc<Evaluator>,
        workers: usize,
        queue_len: usize,
        metrics: Arc<Metrics>,
    ) -> LocalPool {
        let (tx, rx) = sync_channel::<LocalJob>(queue_len.max(1));
        let rx = Arc::new(Mutex::new(rx));
        let depth = Arc::new(AtomicUsize::new(0));
        let workers = workers.max(1);
        let threads = (0..workers)
            .map(|i| {
                let (rx, ev, depth, metrics) = (
                    Arc::clone(&rx),
                    Arc::clone(&evaluator),
                    Arc::clone(&depth),
                    Arc::clone(&metrics),
                );
                std::thread::Builder::new()
                    .name(format!("cudaperf-score-{i}"))
                    .spawn(move || worker_loop(&rx, &ev, &depth, &metrics))
                    .expect("spawning a scoring thread")
            })
            .collect();
        LocalPool {
            tx: Mutex::new(Some(tx)),
            threads: Mutex::new(threads),
            depth,
            workers,
        }
    }

    /// Queues a job without waiting.
    pub fn try_submit(&self, job: LocalJob) -> Result<(), Rejected> {
        let guard = self.tx.lock().unwrap_or_else(|p| p.into_inner());
        let Some(tx) = guard.as_ref() else {
            return Err(Rejected::Closed);
        };
        self.depth.fetch_add(1, Ordering::SeqCst);
        match tx.try_send(job) {
            Ok(()) => Ok(()),
            Err(e) => {
                self.depth.fetch_sub(1, Ordering::SeqCst);
                Err(match e {
                    TrySendError::Full(_) => Rejected::Full,
                    TrySendError::Disconnected(_) => Rejected::Closed,
                })
            }
        }
    }

    /// Jobs accepted and not yet answered.
    pub fn depth(&self) -> usize {
        self.depth.load(Ordering::SeqCst)
    }

    /// Worker threads.
    pub fn workers(&self) -> usize {
        self.workers
    }

    /// Stops taking jobs; the threads finish what is queued, then end. Waits for them up
    /// to `within`; returns whether they all ended (a thread still scoring is left to the
    /// process's exit).
    pub fn close(&self, within: Duration) -> bool {
        self.tx.lock().unwrap_or_else(|p| p.into_inner()).take();
        let threads = std::mem::take(&mut *self.threads.lock().unwrap_or_else(|p| p.into_inner()));
        let end = Instant::now() + within;
        while threads.iter().any(|t| !t.is_finished()) {
            if Instant::now() >= end {
                return false;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        for t in threads {
            let _ = t.join();
        }
        true
    }
}

fn worker_loop(
    rx: &Mutex<Receiver<LocalJob>>,
    evaluator: &Evaluator,
    depth: &AtomicUsize,
    metrics: &Metrics,
) {
    loop {
        let job = {
            let rx = rx.lock().unwrap_or_else(|p| p.into_inner());
            match rx.recv() {
                Ok(j) => j,
                Err(_) => return,
            }
        };
        if job.reply.is_closed() {
            // Its requester is gone (client disconnected, or closed at shutdown): a job
            // not started is not worth a scoring thread.
            depth.fetch_sub(1, Ordering::SeqCst);
            continue;
        }
        let waited = job.enqueued.elapsed().as_secs_f64();
        metrics.queue_wait.observe(waited);
        let outcome = run_job(
            evaluator,
            &job.task,
            &job.spec,
            job.reward.as_ref(),
            job.deadline_ms,
            "local",
            Some(&job.partial),
        );
        depth.fetch_sub(1, Ordering::SeqCst);
        // The requester may have given up (deadline); its answer is then dropped, while
        // the work done stays in the evaluator's memo and compile cache.
        let _ = job.reply.send((outcome, waited * 1e3));
    }
}
