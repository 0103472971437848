//! The precision probe: whether a member's outputs follow a change in the low-order bits of
//! the inputs as the reference's do.

use super::batch::{Batch, Found, POISONS};
use crate::exec::harness::{
    ours, ConfigPlans, Harness, InputSet, JobMemory, JobState, Run, SideRun, Who,
};
use crate::exec::job::JobConfig;
use crate::exec::report::{PrecisionProbe, PRECISION_PROBE_LIMIT};

impl Harness {
    /// The precision probe for `members`, right after they and the reference ran `base`
    /// (whose probed inputs carry the first draw of their low-order bits): one more run on a
    /// set that differs from `base` only in those bits of every probed input (the bits the
    /// task's contract keeps and coarser formats round away), then how each member's outputs
    /// moved compared with the reference's. Rounding one of two equally weighted operands
    /// leaves a ratio of about 0.7, rounding all of them 1.0. The probe run is checked like
    /// any other. Returns each member's probe.
    pub(super) fn probe_precision(
        &mut self,
        st: &mut JobState,
        c: &JobConfig,
        mem: &JobMemory,
        plans: &ConfigPlans,
        members: &[usize],
        base: InputSet,
    ) -> Run<Vec<(usize, Vec<PrecisionProbe>)>> {
        let job = st.job;
        let poison = POISONS[0];
        let reference = mem.reference.slices();
        let outputs: Vec<usize> = (0..job.buffers.len())
            .filter(|&i| job.buffers[i].direction.is_output())
            .collect();
        self.save_base_outputs(st, c, mem, members, &outputs)?;
        let changed = InputSet {
            probe: Some(true),
            ..base
        };
        let mut sides = vec![Who::Reference];
        sides.extend(members.iter().map(|&i| Who::Member(i)));
        self.prepare(st, c, mem, &sides, changed, poison)?;
        self.run(st, Who::Reference, &plans.reference, false)?;
        let mut ran = Vec::new();
        for &i in members {
            if let SideRun::Ok(_) = self.run(st, Who::Member(i), &plans.members[i], false)? {
                ran.push(i);
            }
        }
        let mut batch = Batch::default();
        let entries: Vec<(usize, usize)> = ran
            .iter()
            .filter_map(|&i| {
                let live = mem.side(Who::Member(i))?.slices();
                Some((
                    batch.compare(live.clone(), reference.clone(), false, false, poison),
                    batch.verify(live, changed),
                ))
            })
            .collect();
        let found = self.check_batch(st, c, mem, &batch)?;
        let bytes = self.probe_sums(st, c, mem, &ran, &outputs)?;
        let inputs = (0..job.buffers.len())
            .filter(|&j| c.probes.get(j).is_some_and(Option::is_some))
            .map(|j| job.buffers[j].name.as_str())
            .collect::<Vec<_>>()
            .join(", ");
        Ok(probes_of(&ran, entries, &found, &bytes, &inputs))
    }

    /// Keeps the base set's outputs of the reference and of `members` (harness-owned copies).
    fn save_base_outputs(
        &self,
        st: &JobState,
        c: &JobConfig,
        mem: &JobMemory,
        members: &[usize],
        outputs: &[usize],
    ) -> Run<()> {
        let job = st.job;
        let stream = self.gpu.stream();
        let reference = mem.reference.slices();
        // Keep the base set's outputs of every side.
        for &o in outputs {
            let bytes = job.buffer_bytes(c, o);
            if let Some(Some(saved)) = mem.reference_saved.get(o) {
                ours(
                    saved
                        .slice()
                        .prefix(bytes)
                        .copy_from(reference[o].prefix(bytes), stream),
                )?;
            }
            for &i in members {
                if let Some(side) = mem.side(Who::Member(i)) {
                    let (live, saved) = (side.slices(), side.saved_slices());
                    ours(
                        saved[o]
                            .prefix(bytes)
                            .copy_from(live[o].prefix(bytes), stream),
                    )?;
                }
            }
        }
        Ok(())
    }

    /// How the outputs of each member in `ran` moved between the base set and the changed
    /// one, compared with the reference's: per member, 24 bytes (error, moved, scale).
    fn probe_sums(
        &self,
        st: &mut JobState,
        c: &JobConfig,
        mem: &JobMemory,
        ran: &[usize],
        outputs: &[usize],
    ) -> Run<Vec<u8>> {
        let job = st.job;
        let stream = self.gpu.stream();
        let reference = mem.reference.slices();
        let sums = ours(
            self.gpu
                .alloc(24 * ran.len().max(1), "precision probe sums"),
        )?;
        self.clock_start()?;
        ours(sums.slice().memset(0, stream))?;
        for (slot, &i) in ran.iter().enumerate() {
            let Some(side) = mem.side(Who::Member(i)) else {
                continue;
            };
            let (live, saved) = (side.slices(), side.saved_slices());
            for &o in outputs {
                let Some(Some(ref_saved)) = mem.reference_saved.get(o) else {
                    continue;
                };
                ours(self.support.sensitivity(
                    (live[o], saved[o]),
                    (reference[o], ref_saved.slice()),
                    job.buffers[o].dtype,
                    c.lens[o],
                    sums.slice().past(24 * slot as u64).prefix(24),
                    stream,
                ))?;
            }
        }
        self.clock_stop_sync(st, "measuring the precision probe")?;
        let bytes = ours(sums.slice().read(0, 24 * ran.len()))?;
        Ok(bytes)
    }
}

/// Each probed member's [`PrecisionProbe`] from its sums and its checks.
fn probes_of(
    ran: &[usize],
    entries: Vec<(usize, usize)>,
    found: &Found,
    bytes: &[u8],
    inputs: &str,
) -> Vec<(usize, Vec<PrecisionProbe>)> {
    ran.iter()
        .zip(entries)
        .enumerate()
        .map(|(slot, (&i, (cmp, ver)))| {
            let at = |w: usize| {
                let b = &bytes[24 * slot + 8 * w..24 * slot + 8 * w + 8];
                f64::from_le_bytes(b.try_into().unwrap_or([0; 8]))
            };
            let (err, moved, scale) = (at(0), at(1), at(2));
            // Judged only when the reference's outputs moved visibly (2^-16 of their
            // scale): otherwise these outputs do not depend on those bits.
            let judged = moved > 0.0 && moved >= scale * 2f64.powi(-32);
            let ratio = if judged {
                (err / moved).sqrt()
            } else {
                f64::NAN
            };
            let within = found.compares[cmp].0.mismatches == 0
                && found.compares[cmp].0.unwritten == 0
                && found.verifies[ver].mismatches == 0;
            let probe = PrecisionProbe {
                input: inputs.to_string(),
                ratio,
                judged,
                passed: within && (!judged || ratio <= PRECISION_PROBE_LIMIT),
            };
            (i, vec![probe])
        })
        .collect()
}
