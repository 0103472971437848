//! A job's device memory: every side's buffers, allocated once per job at their largest size
//! over the configs and mapped into the harness's context, and the harness's own copies.

use std::time::{Duration, Instant};

use super::job_state::MemberLimit;
use super::plans::side_bytes;
use super::run::reference_fault;
use super::{ours, Harness, JobState, Run, Who};
use crate::exec::driver::{DevSlice, DeviceBuffer, IpcMapping};
use crate::exec::job::{ExecJob, JobConfig};
use crate::exec::runner::{BufferShare, RunnerFault};

/// One side's buffers of one configuration, mapped here.
pub(crate) struct SideMemory {
    /// Per ABI buffer, the runner's buffer.
    pub mapped: Vec<IpcMapping>,
    /// Per ABI buffer, a harness-owned copy of this side's output (members' outputs only).
    pub saved: Vec<Option<DeviceBuffer>>,
}

impl SideMemory {
    pub fn slices(&self) -> Vec<DevSlice> {
        self.mapped.iter().map(IpcMapping::slice).collect()
    }

    /// The saved copies (the live buffer where there is none: inputs).
    pub fn saved_slices(&self) -> Vec<DevSlice> {
        self.saved
            .iter()
            .zip(&self.mapped)
            .map(|(s, m)| s.as_ref().map_or(m.slice(), DeviceBuffer::slice))
            .collect()
    }
}

impl Drop for JobMemory {
    fn drop(&mut self) {
        for s in self.reference_saved.iter().flatten() {
            s.scrub();
        }
    }
}

impl Drop for SideMemory {
    fn drop(&mut self) {
        for s in self.saved.iter().flatten() {
            s.scrub();
        }
        // The mappings close before the runner frees the memory behind them.
        self.mapped.clear();
    }
}

/// One input set: the values every side of a run is given. Every element derives from the
/// job's secret through `seed`; the regime and the probe choose which distributions and which
/// low-order bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct InputSet {
    pub seed: u64,
    /// The config's regime that fills it (`None`: the main distributions).
    pub regime: Option<usize>,
    /// The precision probe: `None` off; `Some(false)` its base set (every probed input with
    /// the first draw of its low-order bits); `Some(true)` every probed input with the second.
    pub probe: Option<bool>,
}

impl InputSet {
    /// The main distributions' set `seed`.
    pub fn main(seed: u64) -> InputSet {
        InputSet {
            seed,
            regime: None,
            probe: None,
        }
    }
}

/// A job's device memory, as the harness sees it (each config uses the start of every buffer).
pub(crate) struct JobMemory {
    pub reference: SideMemory,
    /// Per ABI buffer, a harness-owned copy of the reference's output (the precision probe
    /// compares two runs of each side).
    pub reference_saved: Vec<Option<DeviceBuffer>>,
    /// Per member (`None` for members no longer running).
    pub members: Vec<Option<SideMemory>>,
    /// Per ABI buffer with a fill, the input set generated once here (harness-owned, out of
    /// every runner's reach): sides get copies of it, and their inputs are verified against it.
    pub pristine: Vec<Option<DeviceBuffer>>,
    /// The input set `pristine` holds now.
    pub pristine_set: std::cell::Cell<Option<InputSet>>,
}

impl JobMemory {
    pub fn side(&self, who: Who) -> Option<&SideMemory> {
        match who {
            Who::Reference => Some(&self.reference),
            Who::Member(i) => self.members.get(i).and_then(Option::as_ref),
        }
    }
}

/// Bytes of every buffer of a job, each at its largest over the configs (what is allocated
/// once for the whole job).
pub(crate) struct JobSizes {
    /// The reference's ABI buffers, then its scratch.
    pub reference: Vec<u64>,
    /// Per member, its ABI buffers, then its scratch.
    pub members: Vec<Vec<u64>>,
    /// Per ABI buffer, the harness's generated copy (0: the buffer is not generated).
    pub generated: Vec<u64>,
    /// Per ABI buffer, the harness's saved copy of a member's output (0: not an output).
    pub saved: Vec<u64>,
}

impl JobSizes {
    pub fn new(job: &ExecJob) -> JobSizes {
        let most = |per: &dyn Fn(&JobConfig) -> Vec<u64>| -> Vec<u64> {
            let mut out: Vec<u64> = Vec::new();
            for c in &job.configs {
                let v = per(c);
                if out.len() < v.len() {
                    out.resize(v.len(), 0);
                }
                for (o, x) in out.iter_mut().zip(v) {
                    *o = (*o).max(x);
                }
            }
            out
        };
        let abi = |c: &JobConfig, keep: &dyn Fn(usize) -> bool| -> Vec<u64> {
            (0..job.buffers.len())
                .map(|i| if keep(i) { job.buffer_bytes(c, i) } else { 0 })
                .collect()
        };
        JobSizes {
            reference: most(&|c| side_bytes(job, c, &c.reference, &job.reference.scratch)),
            members: (0..job.candidates.len())
                .map(|i| {
                    most(&|c| side_bytes(job, c, &c.candidates[i], &job.candidates[i].scratch))
                })
                .collect(),
            generated: most(&|c| abi(c, &|i| c.fills[i].is_some())),
            saved: most(&|c| abi(c, &|i| job.buffers[i].direction.is_output())),
        }
    }
}

/// A member runner's allocation: its buffers' shares, and the wall time it took.
type Alloc = (Result<Vec<BufferShare>, RunnerFault>, Duration);

impl Harness {
    pub(super) fn alloc_job(&mut self, st: &mut JobState, sizes: &JobSizes) -> Run<JobMemory> {
        let job = st.job;
        let limit = self.limit(st)?;
        let handles = self
            .reference_runner(job)?
            .alloc(sizes.reference.clone(), limit)
            .map_err(|f| reference_fault("the reference's buffers", f))?;
        let reference = self.map_side(job, &handles, &sizes.reference, "reference", None)?;
        // The members' runners allocate in parallel (each a process round trip and a few
        // large cuMemAllocs); the harness then maps their buffers one by one.
        let limits = st.active_limits()?;
        let allocs = self.alloc_parallel(sizes, &limits);
        let mut members = Vec::new();
        for (i, (a, limit)) in allocs.into_iter().zip(&limits).enumerate() {
            match (a, limit) {
                (Some((Ok(handles), took)), _) => {
                    st.charge(i, took);
                    members.push(Some(self.map_side(
                        job,
                        &handles,
                        &sizes.members[i],
                        "candidate",
                        Some(&sizes.saved),
                    )?))
                }
                (Some((Err(f), took)), Some(limit)) => {
                    st.charge(i, took);
                    st.member_failed(i, f, limit)?;
                    members.push(None);
                }
                _ => members.push(None),
            }
        }
        let (pristine, reference_saved) = self.alloc_copies(job, sizes)?;
        Ok(JobMemory {
            reference,
            reference_saved,
            members,
            pristine,
            pristine_set: std::cell::Cell::new(None),
        })
    }

    /// Each member with a limit allocates its buffers in its runner, all in parallel (each
    /// a process round trip and a few large cuMemAllocs).
    fn alloc_parallel(
        &mut self,
        sizes: &JobSizes,
        limits: &[Option<MemberLimit>],
    ) -> Vec<Option<Alloc>> {
        std::thread::scope(|s| {
            let handles: Vec<_> = self
                .runners
                .iter_mut()
                .zip(&sizes.members)
                .zip(limits)
                .map(|((r, cb), l)| {
                    l.as_ref().map(|l| {
                        let limit = l.limit;
                        s.spawn(move || {
                            let t = Instant::now();
                            (r.alloc(cb.clone(), limit), t.elapsed())
                        })
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.map(|h| {
                        h.join().unwrap_or_else(|_| {
                            (
                                Err(RunnerFault::Unavailable(
                                    "an allocating thread panicked".into(),
                                )),
                                Duration::ZERO,
                            )
                        })
                    })
                })
                .collect()
        })
    }

    /// The harness-owned buffers of a job: the generated inputs, and the saved copies of the
    /// reference's outputs (only when a config has a precision probe).
    #[allow(clippy::type_complexity)]
    fn alloc_copies(
        &self,
        job: &ExecJob,
        sizes: &JobSizes,
    ) -> Run<(Vec<Option<DeviceBuffer>>, Vec<Option<DeviceBuffer>>)> {
        let pristine = job
            .buffers
            .iter()
            .zip(&sizes.generated)
            .map(|(b, &bytes)| {
                (bytes > 0)
                    .then(|| {
                        ours(
                            self.gpu
                                .alloc(bytes as usize, &format!("generated inputs `{}`", b.name)),
                        )
                    })
                    .transpose()
            })
            .collect::<Run<Vec<_>>>()?;
        let reference_saved = job
            .buffers
            .iter()
            .zip(&sizes.saved)
            .map(|(b, &bytes)| {
                (bytes > 0
                    && job
                        .configs
                        .iter()
                        .any(|c| c.probes.iter().any(Option::is_some)))
                .then(|| {
                    ours(self.gpu.alloc(
                        bytes as usize,
                        &format!("saved reference output `{}`", b.name),
                    ))
                })
                .transpose()
            })
            .collect::<Run<Vec<_>>>()?;
        Ok((pristine, reference_saved))
    }

    /// Maps a side's buffers here; `saved` gives the bytes of the harness-owned copy of
    /// each output (members only).
    fn map_side(
        &self,
        job: &ExecJob,
        handles: &[BufferShare],
        bytes: &[u64],
        who: &str,
        saved: Option<&[u64]>,
    ) -> Run<SideMemory> {
        let mut mapped = Vec::new();
        let mut copies = Vec::new();
        for (i, ((h, b), buf)) in handles.iter().zip(bytes).zip(&job.buffers).enumerate() {
            let what = format!("{who} buffer `{}`", buf.name);
            mapped.push(ours(match h {
                BufferShare::Fd(fd) => self.gpu.import_shared(fd, *b as usize, &what),
                BufferShare::Ipc(h) => self.gpu.open_ipc(h, *b as usize, &what),
            })?);
            let keep = saved.and_then(|s| s.get(i)).copied().unwrap_or(0);
            copies.push(if keep > 0 {
                Some(ours(self.gpu.alloc(
                    keep as usize,
                    &format!("saved output `{}`", buf.name),
                ))?)
            } else {
                None
            });
        }
        Ok(SideMemory {
            mapped,
            saved: copies,
        })
    }
}
