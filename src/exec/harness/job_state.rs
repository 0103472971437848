//! A job in progress: its members, what each has spent of its time limits, and what stops
//! a member alone or the whole job.

use std::time::{Duration, Instant};

use super::{Fault, Run};
use crate::exec::job::ExecJob;
use crate::exec::report::{ConfigCheck, ExecStatus, TimingStage};
use crate::exec::runner::RunnerFault;

/// What happened to one member so far.
pub(crate) struct Member {
    /// Set once the member failed in a way that stops it (its fault, timeout, crash).
    pub stopped: Option<ExecStatus>,
    /// Its per-config checks.
    pub checks: Vec<ConfigCheck>,
    /// Its timing, once measured.
    pub timing: Option<TimingStage>,
    /// GPU time of its own runs, ms.
    pub gpu_ms: f64,
    /// Wall time of its runner's calls so far (load, allocation, runs): its own budget.
    pub spent: Duration,
    /// The config its buffers' slack was last zeroed for.
    pub slack_zeroed: Option<usize>,
}

impl Member {
    pub fn active(&self) -> bool {
        self.stopped.is_none()
    }

    pub fn passed_so_far(&self) -> bool {
        self.active() && self.checks.iter().all(|c| c.passed)
    }
}

/// Where a job's wall time went (`$CUDAPERF_TRACE_JOBS`: a file that gets one JSON line per
/// job). Host-side figures only; they change nothing in the job.
#[derive(Debug, Default, serde::Serialize)]
pub(crate) struct JobTrace {
    pub members: usize,
    pub wall_ms: f64,
    pub load_ms: f64,
    pub alloc_ms: f64,
    pub check_ms: f64,
    pub time_ms: f64,
    pub reset_ms: f64,
    /// Runner runs: how many, the host wall time of their calls, their GPU time.
    pub runs: u32,
    pub run_call_ms: f64,
    pub run_gpu_ms: f64,
    /// Members whose module keeps data and is reloaded before every run; how many reloads
    /// that took and their wall time in the runners.
    pub reloaded_members: usize,
    pub reloads: u32,
    pub reload_ms: f64,
    /// The harness's waits for its own GPU work, and that work's GPU time.
    pub syncs: u32,
    pub sync_wait_ms: f64,
    pub harness_gpu_ms: f64,
}

/// A job in progress: its deadline, its members, and the GPU time it used.
///
/// Time limits are by cause: one runner call of a member may take `run_limit`, and all of a
/// member's calls together `member_budget`; a member past either is a `timeout` and is
/// stopped alone. The job's own `deadline` (reference, harness work and every member's
/// budget, with headroom) only binds when something of ours is stuck, which is `unavailable`.
pub(crate) struct JobState<'a> {
    pub job: &'a ExecJob,
    pub(super) deadline: Instant,
    pub(super) run_limit: Duration,
    pub(super) member_budget: Duration,
    pub members: Vec<Member>,
    /// GPU time of every run of every side, ms.
    pub runs_ms: f64,
    /// GPU time of the harness's own launches (inputs, poison, checks), ms.
    pub harness_ms: f64,
    pub(super) flush_counter: u32,
    pub trace: JobTrace,
}

/// How long a member's next runner call may take, and the status if it runs out.
pub(crate) struct MemberLimit {
    /// The limit of the call.
    pub limit: Duration,
    /// What the member gets when the call runs past `limit` (`None`: the job's deadline is
    /// what binds, so a call past it is ours).
    pub on_timeout: Option<ExecStatus>,
}

impl MemberLimit {
    /// The limit of a member's call: its per-run limit, what is left of its budget, and
    /// what is left of the job's deadline, whichever is least. `None` when its budget is
    /// already spent.
    pub fn of(
        run_limit: Duration,
        budget: Duration,
        spent: Duration,
        job_left: Duration,
    ) -> Option<MemberLimit> {
        let left = budget.saturating_sub(spent);
        if left.is_zero() {
            return None;
        }
        let own = run_limit.min(left);
        Some(if job_left < own {
            MemberLimit {
                limit: job_left,
                on_timeout: None,
            }
        } else {
            MemberLimit {
                limit: own,
                on_timeout: Some(ExecStatus::Timeout {
                    limit_ms: if run_limit <= left { run_limit } else { budget }.as_millis() as u64,
                }),
            }
        })
    }
}

impl<'a> JobState<'a> {
    /// A job starting now: its limits (defaults where the job gives none) and fresh members.
    pub(super) fn start(job: &'a ExecJob) -> JobState<'a> {
        let n = job.candidates.len();
        let deadline_ms = if job.deadline_ms > 0 {
            job.deadline_ms
        } else {
            600_000
        };
        let member_budget = Duration::from_millis(if job.member_budget_ms > 0 {
            job.member_budget_ms
        } else {
            deadline_ms
        });
        let run_limit = if job.run_limit_ms > 0 {
            Duration::from_millis(job.run_limit_ms)
        } else {
            member_budget
        };
        JobState {
            job,
            deadline: Instant::now() + Duration::from_millis(deadline_ms),
            run_limit,
            member_budget,
            members: (0..n)
                .map(|_| Member {
                    stopped: None,
                    checks: Vec::new(),
                    timing: None,
                    gpu_ms: 0.0,
                    spent: Duration::ZERO,
                    slack_zeroed: None,
                })
                .collect(),
            runs_ms: 0.0,
            harness_ms: 0.0,
            flush_counter: (job.secret.0 >> 32) as u32,
            trace: JobTrace {
                members: n,
                ..Default::default()
            },
        }
    }
}

impl JobState<'_> {
    /// The limit of member `i`'s next runner call; `Ok(None)` when its budget is spent (it is
    /// stopped as a `timeout` then), `Err` when the job's deadline has passed (ours).
    pub fn member_limit(&mut self, i: usize) -> Run<Option<MemberLimit>> {
        let job_left = self.deadline.saturating_duration_since(Instant::now());
        if job_left.is_zero() {
            return Err(self.deadline_passed());
        }
        let spent = self.members.get(i).map_or(Duration::ZERO, |m| m.spent);
        match MemberLimit::of(self.run_limit, self.member_budget, spent, job_left) {
            Some(l) => Ok(Some(l)),
            None => {
                let limit_ms = self.member_budget.as_millis() as u64;
                self.stop(i, ExecStatus::Timeout { limit_ms });
                Ok(None)
            }
        }
    }

    /// Adds the wall time of a runner call to member `i`'s budget.
    pub fn charge(&mut self, i: usize, took: Duration) {
        if let Some(m) = self.members.get_mut(i) {
            m.spent += took;
        }
    }

    /// What member `i`'s failed call comes to: its own fault stops it, ours fails the job.
    pub fn member_failed(&mut self, i: usize, f: RunnerFault, limit: &MemberLimit) -> Run<()> {
        let status = match f {
            RunnerFault::Timeout(_) => match &limit.on_timeout {
                Some(s) => s.clone(),
                None => return Err(self.deadline_passed()),
            },
            other => member_status(other)?,
        };
        self.stop(i, status);
        Ok(())
    }

    pub(super) fn deadline_passed(&self) -> Fault {
        Fault::Ours(
            format!(
                "the job's {} ms ran out (each member may take {} ms per run and {} ms in all)",
                self.job.deadline_ms,
                self.run_limit.as_millis(),
                self.member_budget.as_millis()
            ),
            false,
        )
    }

    /// Per member, the limit of its next runner call (`None`: stopped, or stopped now because
    /// its budget is spent); `Err` when the job's deadline has passed.
    pub fn active_limits(&mut self) -> Run<Vec<Option<MemberLimit>>> {
        let job = self.job;
        let mut limits = Vec::with_capacity(job.candidates.len());
        for i in 0..job.candidates.len() {
            limits.push(if self.members[i].active() {
                self.member_limit(i)?
            } else {
                None
            });
        }
        Ok(limits)
    }

    /// Members still running.
    pub fn active(&self) -> Vec<usize> {
        (0..self.members.len())
            .filter(|&i| self.members[i].active())
            .collect()
    }

    /// Stops member `i` with `status` (its own failure).
    pub fn stop(&mut self, i: usize, status: ExecStatus) {
        if let Some(m) = self.members.get_mut(i) {
            if m.stopped.is_none() {
                m.stopped = Some(status);
            }
        }
    }
}

/// A member's failure other than a timeout (timeouts depend on which limit bound: see
/// [`JobState::member_failed`]).
fn member_status(f: RunnerFault) -> Result<ExecStatus, Fault> {
    match f {
        RunnerFault::Unavailable(r) => Err(Fault::Ours(r, false)),
        RunnerFault::Cuda(e) => Ok(ExecStatus::CudaError {
            code: e.code,
            name: e.name,
            during: e.during,
        }),
        RunnerFault::Timeout(d) => Ok(ExecStatus::Timeout {
            limit_ms: d.as_millis() as u64,
        }),
        RunnerFault::Crashed(r) => Ok(ExecStatus::Crashed { reason: r }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: fn(u64) -> Duration = Duration::from_secs;

    fn timeout_ms(l: &MemberLimit) -> Option<u64> {
        match l.on_timeout {
            Some(ExecStatus::Timeout { limit_ms }) => Some(limit_ms),
            _ => None,
        }
    }

    #[test]
    fn a_hang_is_the_members_timeout_at_its_run_limit() {
        // Fresh member, plenty of job time: one run may take the run limit, and running
        // past it is the member's own timeout.
        let l = MemberLimit::of(S(10), S(60), S(0), S(600)).unwrap();
        assert_eq!(l.limit, S(10));
        assert_eq!(timeout_ms(&l), Some(10_000));
    }

    #[test]
    fn a_slow_member_is_stopped_on_its_own_budget() {
        // 55 s of its 60 s spent: its next run may take 5 s, and past that it is a timeout
        // of its budget; once spent, there is no next call.
        let l = MemberLimit::of(S(10), S(60), S(55), S(600)).unwrap();
        assert_eq!(l.limit, S(5));
        assert_eq!(timeout_ms(&l), Some(60_000));
        assert!(MemberLimit::of(S(10), S(60), S(60), S(600)).is_none());
        assert!(MemberLimit::of(S(10), S(60), S(61), S(600)).is_none());
    }

    #[test]
    fn only_the_jobs_deadline_binding_makes_a_timeout_ours() {
        // 3 s left of the job: the call is limited to them, and a call past them is not
        // the member's fault.
        let l = MemberLimit::of(S(10), S(60), S(0), S(3)).unwrap();
        assert_eq!(l.limit, S(3));
        assert!(l.on_timeout.is_none());
    }

    #[test]
    fn a_jobs_deadline_covers_every_members_budget_and_the_reference() {
        // With every member spending its whole budget one after another, the reference and
        // the harness still have a budget's worth of time and the headroom left.
        for members in [1usize, 2, 16] {
            let budget = 60_000u64;
            let deadline = ExecJob::deadline_for(members, budget);
            assert!(
                deadline >= members as u64 * budget + budget + crate::exec::job::JOB_HEADROOM_MS
            );
        }
        assert_eq!(ExecJob::deadline_for(1, u64::MAX), u64::MAX);
    }
}
