//! Comparisons and input verifications, enqueued together and waited for once.

use crate::exec::driver::DevSlice;
use crate::exec::harness::{ours, Harness, InputSet, JobMemory, JobState, Run};
use crate::exec::job::{ExecJob, JobConfig};
use crate::exec::report::Mismatch;
use crate::exec::support::{Stats, StatsSlots};
use crate::exec::values::element_value;
use crate::task::Direction;

/// Comparisons and input verifications to enqueue together and wait for once.
#[derive(Default)]
pub(crate) struct Batch {
    /// Every output buffer of `got` against `want`'s.
    compares: Vec<Comparison>,
    /// (buffers, input set): every `in` buffer against that set as generated.
    verifies: Vec<(Vec<DevSlice>, InputSet)>,
}

/// One comparison of a [`Batch`].
struct Comparison {
    got: Vec<DevSlice>,
    want: Vec<DevSlice>,
    /// NaN equals NaN (run against run of the same side).
    nan_equal: bool,
    /// Bit for bit (no tolerance).
    exact: bool,
    /// The byte `got`'s outputs were poisoned with before its run.
    poison: u8,
}

/// The output poison of a run: the byte every output element holds until the kernel writes
/// it. Two patterns that differ in every byte alternate (set A with the first, its repeat
/// with the second), so an element that is never written differs from the reference on at
/// least one check whatever its valid value: 0xFF alone is a valid u8 (255) or i32 (-1).
pub(crate) const POISONS: [u8; 2] = [0xFF, 0xA5];

/// What a [`Batch`] found, entry by entry in the order they were added.
pub(crate) struct Found {
    /// Per comparison: the totals over the output buffers, and the first differing element.
    pub compares: Vec<(Stats, Option<Mismatch>)>,
    /// Per verification: elements that differ from the input set.
    pub verifies: Vec<Stats>,
}

impl Batch {
    /// Adds a comparison of `got`'s outputs (poisoned with `poison` before their run) with
    /// `want`'s; returns its index in [`Found`].
    pub fn compare(
        &mut self,
        got: Vec<DevSlice>,
        want: Vec<DevSlice>,
        nan_equal: bool,
        exact: bool,
        poison: u8,
    ) -> usize {
        self.compares.push(Comparison {
            got,
            want,
            nan_equal,
            exact,
            poison,
        });
        self.compares.len() - 1
    }

    /// Adds a verification of `bufs`' inputs against input set `set`; returns its index.
    pub fn verify(&mut self, bufs: Vec<DevSlice>, set: InputSet) -> usize {
        self.verifies.push((bufs, set));
        self.verifies.len() - 1
    }
}

impl Harness {
    /// Enqueues every entry of `batch`, waits once, and reads what each found.
    pub(crate) fn check_batch(
        &mut self,
        st: &mut JobState,
        c: &JobConfig,
        mem: &JobMemory,
        batch: &Batch,
    ) -> Run<Found> {
        let job = st.job;
        let outputs: Vec<usize> = (0..job.buffers.len())
            .filter(|&i| job.buffers[i].direction.is_output())
            .collect();
        let nc = batch.compares.len() * outputs.len();
        let need = nc + batch.verifies.len();
        let slots = match self.stats.take() {
            Some(s) if s.len() >= need => s,
            _ => ours(StatsSlots::new(&self.gpu, need.max(64)))?,
        };
        ours(slots.reset())?;
        self.clock_start()?;
        self.enqueue_compares(job, c, batch, &outputs, &slots)?;
        self.enqueue_verifies(st, c, mem, batch, nc, &slots)?;
        self.clock_stop_sync(st, "checking outputs and inputs")?;
        let stats = ours(slots.read())?;
        let compares = read_compares(job, batch, &outputs, &stats)?;
        self.stats = Some(slots);
        Ok(Found {
            compares,
            verifies: stats[nc..need].to_vec(),
        })
    }

    /// Enqueues every comparison of `batch` into the slots (those against the same buffers
    /// with the same rule share one launch per output buffer).
    fn enqueue_compares(
        &self,
        job: &ExecJob,
        c: &JobConfig,
        batch: &Batch,
        outputs: &[usize],
        slots: &StatsSlots,
    ) -> Run<()> {
        let stream = self.gpu.stream();
        // Comparisons against the same buffers with the same rule share a launch.
        let mut done = vec![false; batch.compares.len()];
        for e in 0..batch.compares.len() {
            if done[e] {
                continue;
            }
            let this = &batch.compares[e];
            let same: Vec<usize> = (e..batch.compares.len())
                .filter(|&f| {
                    let other = &batch.compares[f];
                    !done[f]
                        && other.want == this.want
                        && other.nan_equal == this.nan_equal
                        && other.exact == this.exact
                        && other.poison == this.poison
                })
                .collect();
            let tol = if this.exact {
                (0.0, 0.0)
            } else {
                (job.tolerance.atol, job.tolerance.rtol)
            };
            for (s, &i) in outputs.iter().enumerate() {
                let targets: Vec<(DevSlice, DevSlice)> = same
                    .iter()
                    .map(|&f| (batch.compares[f].got[i], slots.slot(f * outputs.len() + s)))
                    .collect();
                let b = &job.buffers[i];
                ours(self.support.compare(
                    &targets,
                    this.want[i],
                    b.dtype,
                    c.lens[i],
                    tol,
                    this.nan_equal,
                    this.poison,
                    stream,
                ))?;
            }
            for f in same {
                done[f] = true;
            }
        }
        Ok(())
    }

    /// Enqueues every verification of `batch` into the slots after the comparisons' `nc`.
    fn enqueue_verifies(
        &self,
        st: &JobState,
        c: &JobConfig,
        mem: &JobMemory,
        batch: &Batch,
        nc: usize,
        slots: &StatsSlots,
    ) -> Run<()> {
        let job = st.job;
        let stream = self.gpu.stream();
        let inputs: Vec<usize> = (0..job.buffers.len())
            .filter(|&i| job.buffers[i].direction == Direction::In && c.fills[i].is_some())
            .collect();
        // Verifications, one input set at a time (each generated before its launches).
        let mut sets: Vec<InputSet> = batch.verifies.iter().map(|v| v.1).collect();
        sets.dedup();
        for set in sets {
            self.generate(st, c, mem, set)?;
            for &i in &inputs {
                let Some(Some(pristine)) = mem.pristine.get(i) else {
                    continue;
                };
                let targets: Vec<(DevSlice, DevSlice)> = batch
                    .verifies
                    .iter()
                    .enumerate()
                    .filter(|(_, v)| v.1 == set)
                    .map(|(k, v)| (v.0[i], slots.slot(nc + k)))
                    .collect();
                let b = &job.buffers[i];
                ours(
                    self.support
                        .verify(&targets, pristine.slice(), b.dtype, c.lens[i], stream),
                )?;
            }
        }
        Ok(())
    }
}

/// Per comparison of `batch`, the totals over the output buffers and the first differing
/// element (read back from the device).
fn read_compares(
    job: &ExecJob,
    batch: &Batch,
    outputs: &[usize],
    stats: &[Stats],
) -> Run<Vec<(Stats, Option<Mismatch>)>> {
    let mut compares = Vec::with_capacity(batch.compares.len());
    for (e, Comparison { got, want, .. }) in batch.compares.iter().enumerate() {
        let mut total = Stats::default();
        let mut first = None;
        for (s, &i) in outputs.iter().enumerate() {
            let one = stats[e * outputs.len() + s];
            if first.is_none() {
                if let Some(idx) = one.first_index {
                    let b = &job.buffers[i];
                    let size = b.dtype.size_bytes() as usize;
                    let off = idx as usize * size;
                    first = Some(Mismatch {
                        buffer: b.name.clone(),
                        index: idx,
                        got: element_value(b.dtype, &ours(got[i].read(off, size))?),
                        want: element_value(b.dtype, &ours(want[i].read(off, size))?),
                    });
                }
            }
            total.merge(&one);
        }
        compares.push((total, first));
    }
    Ok(compares)
}
