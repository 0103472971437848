//! The harness's GPU work of a job: generating input sets, preparing every side for a run,
//! and one run of a side in its runner.

use std::time::{Duration, Instant};

use super::memory::{InputSet, JobMemory, SideMemory};
use super::plans::SidePlan;
use super::{ms_since, ours, Fault, Harness, JobState, Run, Who};
use crate::exec::driver::DevSlice;
use crate::exec::job::{ExecJob, JobConfig};
use crate::exec::runner::{RunnerClient, RunnerFault};
use crate::exec::secret::{buffer_seed, derive_seed, domain};
use crate::task::Direction;

/// What a runner call for one side came to.
pub(crate) enum SideRun<T> {
    /// It answered.
    Ok(T),
    /// The member failed by its own doing and is stopped now.
    MemberStopped,
}

impl Harness {
    /// The runner of the job's reference: the CUDA reference's, or the PyTorch runner
    /// (started here the first time; a runner that cannot start is ours).
    pub(super) fn reference_runner(&mut self, job: &ExecJob) -> Run<&mut RunnerClient> {
        if job.torch_reference.is_none() {
            return Ok(&mut self.reference);
        }
        if self.torch.is_none() {
            let r = RunnerClient::torch(&self.torch_python)
                .map_err(|reason| Fault::Ours(reason, false))?;
            self.torch = Some(r);
        }
        self.torch
            .as_mut()
            .ok_or_else(|| Fault::Ours("no PyTorch runner".into(), false))
    }

    /// Time left for the next call of the reference or the harness; `Err` once the job's
    /// deadline has passed.
    pub fn limit(&self, st: &JobState) -> Run<Duration> {
        let left = st.deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(st.deadline_passed());
        }
        Ok(left)
    }

    /// Records the harness clock's start (the harness's own GPU work is timed).
    pub fn clock_start(&self) -> Run<()> {
        ours(self.clock.0.record(self.gpu.stream()))
    }

    /// Stops the harness clock and waits for the stream; adds the span to the job.
    pub fn clock_stop_sync(&self, st: &mut JobState, what: &str) -> Run<()> {
        ours(self.clock.1.record(self.gpu.stream()))?;
        let t = Instant::now();
        ours(self.gpu.sync(|| format!("synchronize after {what}")))?;
        st.trace.syncs += 1;
        st.trace.sync_wait_ms += ms_since(t);
        st.harness_ms += f64::from(ours(self.clock.1.elapsed_since(&self.clock.0))?);
        Ok(())
    }

    /// Makes `mem`'s generated inputs hold input set `set` (enqueued).
    pub fn generate(
        &self,
        st: &JobState,
        c: &JobConfig,
        mem: &JobMemory,
        set: InputSet,
    ) -> Run<()> {
        if mem.pristine_set.get() == Some(set) {
            return Ok(());
        }
        let fills = match set.regime {
            Some(r) => c.regimes.get(r).map_or(&c.fills, |r| &r.fills),
            None => &c.fills,
        };
        for (i, b) in st.job.buffers.iter().enumerate() {
            if let (Some(Some(f)), Some(Some(dst))) = (fills.get(i), mem.pristine.get(i)) {
                let seed = buffer_seed(set.seed, i);
                let stream = self.gpu.stream();
                ours(
                    self.support
                        .fill(dst.slice(), b.dtype, c.lens[i], seed, f, stream),
                )?;
                if let (Some(changed), Some(Some(bits))) = (set.probe, c.probes.get(i)) {
                    let draw = u64::from(changed);
                    let seed = derive_seed(seed, domain::PROBE, draw);
                    ours(self.support.perturb(
                        dst.slice(),
                        b.dtype,
                        c.lens[i],
                        seed,
                        *bits,
                        stream,
                    ))?;
                }
            }
        }
        mem.pristine_set.set(Some(set));
        Ok(())
    }

    /// Writes input set `set` into the sides and fills their outputs with the `poison`
    /// byte; waits. The set is generated once and copied into every side.
    pub fn prepare(
        &self,
        st: &mut JobState,
        c: &JobConfig,
        mem: &JobMemory,
        sides: &[Who],
        set: InputSet,
        poison: u8,
    ) -> Run<()> {
        let stream = self.gpu.stream();
        self.clock_start()?;
        self.generate(st, c, mem, set)?;
        let bufs: Vec<Vec<DevSlice>> = sides
            .iter()
            .filter_map(|&who| mem.side(who).map(SideMemory::slices))
            .collect();
        for (i, b) in st.job.buffers.iter().enumerate() {
            match (&mem.pristine[i], b.direction) {
                (Some(src), _) => {
                    let dsts: Vec<DevSlice> = bufs.iter().map(|s| s[i]).collect();
                    ours(self.support.copy_to(
                        src.slice(),
                        &dsts,
                        st.job.buffer_bytes(c, i),
                        stream,
                    ))?;
                }
                (None, Direction::Out) => {
                    for s in &bufs {
                        ours(
                            s[i].prefix(st.job.buffer_bytes(c, i))
                                .memset(poison, stream),
                        )?;
                    }
                }
                (None, _) => {}
            }
        }
        self.clock_stop_sync(st, "preparing inputs")
    }

    /// One run of a side's plan in its runner; its milliseconds, or the member stopped.
    pub fn run(
        &mut self,
        st: &mut JobState,
        who: Who,
        plan: &SidePlan,
        flush: bool,
    ) -> Run<SideRun<f64>> {
        if let Who::Member(i) = who {
            if !st.members[i].active() {
                return Ok(SideRun::MemberStopped);
            }
        }
        let flush_bytes = if flush {
            2 * self.info.l2_bytes.max(0) as u64
        } else {
            0
        };
        st.flush_counter = st.flush_counter.wrapping_mul(2_654_435_761).wrapping_add(1);
        let flush = (flush_bytes, st.flush_counter);
        let t = Instant::now();
        let out = self.run_side(st, who, plan, flush);
        st.trace.runs += 1;
        st.trace.run_call_ms += ms_since(t);
        out
    }

    fn run_side(
        &mut self,
        st: &mut JobState,
        who: Who,
        plan: &SidePlan,
        flush: (u64, u32),
    ) -> Run<SideRun<f64>> {
        match who {
            Who::Reference => {
                let limit = self.limit(st)?;
                let job = st.job;
                let ms = match &job.torch_reference {
                    Some(_) => {
                        let shapes = job
                            .configs
                            .get(plan.config)
                            .map(|c| c.shapes.clone())
                            .unwrap_or_default();
                        self.reference_runner(job)?.run_torch(shapes, flush, limit)
                    }
                    None => self
                        .reference
                        .run(
                            plan.launches.clone(),
                            (plan.zero.clone(), plan.used.clone(), false),
                            flush,
                            limit,
                        )
                        .map(|(ms, _)| ms),
                }
                .map_err(|f| reference_fault("the reference failed", f))?;
                st.runs_ms += ms;
                Ok(SideRun::Ok(ms))
            }
            Who::Member(i) => {
                let Some(limit) = st.member_limit(i)? else {
                    return Ok(SideRun::MemberStopped);
                };
                // The slack past what the config uses is zeroed before its first run and
                // before every run of the timed config: state kept between the untimed runs
                // of one config serves nothing that counts.
                let used = if plan.timed || st.members[i].slack_zeroed != Some(plan.config) {
                    st.members[i].slack_zeroed = Some(plan.config);
                    plan.used.clone()
                } else {
                    Vec::new()
                };
                let t = Instant::now();
                let out = self.runners[i].run(
                    plan.launches.clone(),
                    (plan.zero.clone(), used, true),
                    flush,
                    limit.limit,
                );
                st.charge(i, t.elapsed());
                match out {
                    Ok((ms, reload_ms)) => {
                        if reload_ms > 0.0 {
                            st.trace.reloads += 1;
                            st.trace.reload_ms += reload_ms;
                        }
                        st.runs_ms += ms;
                        st.members[i].gpu_ms += ms;
                        Ok(SideRun::Ok(ms))
                    }
                    Err(f) => {
                        st.member_failed(i, f, &limit)?;
                        Ok(SideRun::MemberStopped)
                    }
                }
            }
        }
    }
}

/// A reference runner's failure: the reference's (the task is broken, `reference_failed`)
/// unless no runner could serve it at all (not started, wrong protocol, PyTorch or its GPU
/// missing), which is ours (`unavailable`).
pub(super) fn reference_fault(what: &str, f: RunnerFault) -> Fault {
    match f {
        RunnerFault::Unavailable(reason) => Fault::Ours(format!("{what}: {reason}"), false),
        other => Fault::Reference(format!("{what}: {other}")),
    }
}
