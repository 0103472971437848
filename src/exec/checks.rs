//! Correctness on one configuration, for every member of a job at once: the reference runs
//! once per input set and every member is compared with that run's outputs.
//!
//! 1. set A: inputs generated into the reference and every member, outputs poisoned, all
//!    run; each member's outputs compared, its inputs verified, its outputs saved;
//! 2. set A again, members only, on fresh poison: must agree with their first run (races,
//!    first-call-only work) and with the reference;
//! 3. set B: must match again, and a member's output must change when the reference's does.

use super::driver::DevSlice;
use super::harness::{
    ours, ConfigMemory, ConfigPlans, Harness, JobState, Run, SidePlan, SideRun, Who,
};
use super::job::JobConfig;
use super::report::{ConfigCheck, Mismatch};
use super::support::{Stats, StatsSlots};
use super::timing::{derive_seed, domain};
use super::values::element_value;
use crate::task::Direction;

fn random_inputs(c: &JobConfig) -> bool {
    c.fills.iter().flatten().any(|f| f.random)
}

impl Harness {
    /// Compares every output of `got` with `want`, buffer by buffer (waits).
    pub(crate) fn compare_outputs(
        &self,
        st: &mut JobState,
        c: &JobConfig,
        slots: &StatsSlots,
        (got, want): (&[DevSlice], &[DevSlice]),
        nan_equal: bool,
        exact: bool,
    ) -> Run<(Stats, Option<Mismatch>)> {
        let job = st.job;
        let tol = if exact {
            (0.0, 0.0)
        } else {
            (job.tolerance.atol, job.tolerance.rtol)
        };
        let outputs: Vec<usize> = (0..job.buffers.len())
            .filter(|&i| job.buffers[i].direction.is_output())
            .collect();
        ours(slots.reset())?;
        self.clock_start()?;
        for (s, &i) in outputs.iter().enumerate() {
            let b = &job.buffers[i];
            ours(self.support.compare(
                got[i],
                want[i],
                b.dtype,
                c.lens[i],
                tol,
                nan_equal,
                slots.slot(s),
                self.gpu.stream(),
            ))?;
        }
        self.clock_stop_sync(st, "comparing outputs")?;
        let stats = ours(slots.read())?;
        let mut total = Stats::default();
        let mut first = None;
        for (s, &i) in outputs.iter().enumerate() {
            let one = stats[s];
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
        Ok((total, first))
    }

    /// Enqueues the verification of a member's `in` buffers against input set `seed`.
    pub(crate) fn enqueue_verify(
        &self,
        st: &JobState,
        c: &JobConfig,
        bufs: &[DevSlice],
        seed: u64,
        slot: DevSlice,
    ) -> Run<()> {
        for (i, b) in st.job.buffers.iter().enumerate() {
            if let (Direction::In, Some(f)) = (b.direction, &c.fills[i]) {
                ours(self.support.verify(
                    bufs[i],
                    b.dtype,
                    c.lens[i],
                    super::harness::buffer_seed(seed, i),
                    f,
                    slot,
                    self.gpu.stream(),
                ))?;
            }
        }
        Ok(())
    }

    /// Enqueues the comparison of a member's outputs with the reference's into one slot.
    pub(crate) fn enqueue_compare(
        &self,
        st: &JobState,
        c: &JobConfig,
        (got, want): (&[DevSlice], &[DevSlice]),
        slot: DevSlice,
    ) -> Run<()> {
        for (i, b) in st.job.buffers.iter().enumerate() {
            if b.direction.is_output() {
                ours(self.support.compare(
                    got[i],
                    want[i],
                    b.dtype,
                    c.lens[i],
                    (st.job.tolerance.atol, st.job.tolerance.rtol),
                    false,
                    slot,
                    self.gpu.stream(),
                ))?;
            }
        }
        Ok(())
    }

    /// Whether a member's `in` buffers differ from input set `seed` (waits).
    fn inputs_modified(
        &self,
        st: &mut JobState,
        c: &JobConfig,
        slots: &StatsSlots,
        bufs: &[DevSlice],
        seed: u64,
    ) -> Run<bool> {
        ours(slots.reset())?;
        self.clock_start()?;
        self.enqueue_verify(st, c, bufs, seed, slots.slot(0))?;
        self.clock_stop_sync(st, "verifying inputs")?;
        Ok(ours(slots.read())?[0].mismatches > 0)
    }

    /// Runs every active member once; returns the members that ran.
    fn run_members(&mut self, st: &mut JobState, plans: &[SidePlan]) -> Run<Vec<usize>> {
        let mut ran = Vec::new();
        for i in st.active() {
            if let SideRun::Ok(_) = self.run(st, Who::Member(i), &plans[i], false)? {
                ran.push(i);
            }
        }
        Ok(ran)
    }

    /// Checks every active member on config `k`; appends a [`ConfigCheck`] to each.
    pub(crate) fn check_config(
        &mut self,
        st: &mut JobState,
        k: usize,
        c: &JobConfig,
        mem: &ConfigMemory,
        plans: &ConfigPlans,
    ) -> Run<()> {
        let job = st.job;
        let slots = self.slots(job.buffers.len().max(1))?;
        let mut checks: Vec<ConfigCheck> = (0..job.candidates.len())
            .map(|_| ConfigCheck {
                config: c.name.clone(),
                passed: false,
                max_abs_err: 0.0,
                max_rel_err: 0.0,
                mismatches: 0,
                elements: job
                    .buffers
                    .iter()
                    .zip(&c.lens)
                    .filter(|(b, _)| b.direction.is_output())
                    .map(|(_, n)| *n)
                    .sum(),
                first_mismatch: None,
                unwritten: 0,
                inputs_modified: false,
                nondeterministic: false,
                input_independent: false,
                timed_run_mismatch: false,
                reasons: Vec::new(),
            })
            .collect();
        let reference = mem.reference.slices();
        let seed_a = derive_seed(job.seed, domain::SET_A, k as u64);
        let seed_b = derive_seed(job.seed, domain::SET_B, k as u64);
        let members_of =
            |st: &JobState| -> Vec<Who> { st.active().into_iter().map(Who::Member).collect() };

        // Set A: the reference once, every member once.
        let mut sides = vec![Who::Reference];
        sides.extend(members_of(st));
        self.prepare(st, c, mem, &sides, seed_a)?;
        self.run(st, Who::Reference, &plans.reference, false)?;
        let mut again_ref = vec![0u64; job.candidates.len()];
        for i in self.run_members(st, &plans.members)? {
            let Some(side) = mem.side(Who::Member(i)) else {
                continue;
            };
            let own = side.slices();
            let (s, first) =
                self.compare_outputs(st, c, &slots, (&own, &reference), false, false)?;
            let ch = &mut checks[i];
            ch.mismatches = s.mismatches;
            ch.unwritten = s.unwritten;
            ch.max_abs_err = s.max_abs;
            ch.max_rel_err = s.max_rel;
            ch.first_mismatch = first;
            ch.inputs_modified = self.inputs_modified(st, c, &slots, &own, seed_a)?;
            for (saved, live) in side.saved_slices().iter().zip(&own) {
                if saved != live {
                    ours(saved.copy_from(*live, self.gpu.stream()))?;
                }
            }
        }
        // Set A again, members only, on fresh poison: races and first-call-only work.
        let members = members_of(st);
        self.prepare(st, c, mem, &members, seed_a)?;
        for i in self.run_members(st, &plans.members)? {
            let Some(side) = mem.side(Who::Member(i)) else {
                continue;
            };
            let own = side.slices();
            let (again, _) =
                self.compare_outputs(st, c, &slots, (&own, &side.saved_slices()), true, false)?;
            checks[i].nondeterministic = again.mismatches > 0;
            let (r, _) = self.compare_outputs(st, c, &slots, (&own, &reference), false, false)?;
            again_ref[i] = r.mismatches;
            checks[i].inputs_modified |= self.inputs_modified(st, c, &slots, &own, seed_a)?;
        }
        // Set B: must match again, and must change when the reference changes.
        let mut b_mismatches = vec![0u64; job.candidates.len()];
        if random_inputs(c) {
            let mut sides = vec![Who::Reference];
            sides.extend(members_of(st));
            self.prepare(st, c, mem, &sides, seed_b)?;
            self.run(st, Who::Reference, &plans.reference, false)?;
            for i in self.run_members(st, &plans.members)? {
                let Some(side) = mem.side(Who::Member(i)) else {
                    continue;
                };
                let own = side.slices();
                let saved = side.saved_slices();
                let (sb, fb) =
                    self.compare_outputs(st, c, &slots, (&own, &reference), false, false)?;
                let ch = &mut checks[i];
                b_mismatches[i] = sb.mismatches;
                ch.unwritten = ch.unwritten.max(sb.unwritten);
                ch.max_abs_err = ch.max_abs_err.max(sb.max_abs);
                ch.max_rel_err = ch.max_rel_err.max(sb.max_rel);
                if ch.first_mismatch.is_none() {
                    ch.first_mismatch = fb;
                }
                checks[i].inputs_modified |= self.inputs_modified(st, c, &slots, &own, seed_b)?;
                let (same, _) = self.compare_outputs(st, c, &slots, (&own, &saved), true, true)?;
                let (changed, _) =
                    self.compare_outputs(st, c, &slots, (&reference, &saved), true, false)?;
                checks[i].input_independent = same.mismatches == 0 && changed.mismatches > 0;
            }
        }
        for i in st.active() {
            let mut ch = checks[i].clone();
            if ch.mismatches > 0 || b_mismatches[i] > 0 {
                ch.mismatches = ch.mismatches.max(b_mismatches[i]);
                ch.reasons.push(format!(
                    "{} of {} output elements differ from the reference",
                    ch.mismatches, ch.elements
                ));
            }
            if ch.unwritten > 0 {
                ch.reasons.push(format!(
                    "{} output elements were never written",
                    ch.unwritten
                ));
            }
            if ch.inputs_modified {
                ch.reasons
                    .push("the candidate modified an input buffer".into());
            }
            if ch.nondeterministic || (ch.mismatches == 0 && again_ref[i] > 0) {
                ch.nondeterministic = true;
                ch.reasons.push("a second run on the same inputs gave a different result (race or first-call-only work)".into());
            }
            if ch.input_independent {
                ch.reasons
                    .push("the output did not change when the inputs did".into());
            }
            ch.passed = ch.reasons.is_empty();
            st.members[i].checks.push(ch);
        }
        Ok(())
    }
}
