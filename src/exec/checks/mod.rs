//! Correctness on one configuration, for every member of a job at once: the reference runs
//! once per input set and every member is compared with that run's outputs.
//!
//! 1. set A: inputs generated into the reference and every member, outputs poisoned, all
//!    run; each member's outputs compared, its inputs verified, its outputs saved;
//! 2. set A again, members only, on fresh poison: must agree with their first run (races,
//!    first-call-only work) and with the reference;
//! 3. set B: must match again, and a member's output must change when the reference's does.
//!
//! The comparisons of a step are enqueued together ([`Batch`]) and waited for once; those
//! against the same outputs share one launch per buffer.

mod batch;
mod probe;

use super::driver::DevSlice;
use super::harness::{
    ours, ConfigPlans, Harness, InputSet, JobMemory, JobState, Run, SidePlan, SideRun, Who,
};
use super::job::{ExecJob, JobConfig};
use super::report::{ConfigCheck, RegimeCheck, PRECISION_PROBE_LIMIT};
use super::secret::domain;

pub(crate) use batch::{Batch, Found, POISONS};

/// A member that ran: its index, its buffers, and the saved copies of its outputs.
type RanMember = (usize, Vec<DevSlice>, Vec<DevSlice>);

fn random_inputs(c: &JobConfig) -> bool {
    c.fills.iter().flatten().any(|f| f.random)
}

impl Harness {
    /// Runs every active member once; returns those that ran, with their buffers (live and
    /// saved copies).
    fn run_members(
        &mut self,
        st: &mut JobState,
        plans: &[SidePlan],
        mem: &JobMemory,
    ) -> Run<Vec<RanMember>> {
        let mut ran = Vec::new();
        for i in st.active() {
            if let SideRun::Ok(_) = self.run(st, Who::Member(i), &plans[i], false)? {
                if let Some(side) = mem.side(Who::Member(i)) {
                    ran.push((i, side.slices(), side.saved_slices()));
                }
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
        mem: &JobMemory,
        plans: &ConfigPlans,
    ) -> Run<()> {
        let job = st.job;
        let mut checks = blank_checks(job, c);
        let seed_a = job.secret.derive(domain::SET_A, k as u64);
        let seed_b = job.secret.derive(domain::SET_B, k as u64);
        // On the timed config, set B is also the precision probe's base set (its probed
        // inputs carry the first draw of their low-order bits): the probe then needs one run.
        let probing = k == job.timing_config && c.probes.iter().any(Option::is_some);
        let set_a = InputSet::main(seed_a);
        let set_b = InputSet {
            probe: probing.then_some(false),
            ..InputSet::main(seed_b)
        };
        // Set A: the reference once, every member once.
        self.check_set_a(st, c, mem, plans, set_a, &mut checks)?;
        let again_ref = self.check_set_a_again(st, c, mem, plans, set_a, &mut checks)?;
        let b_mismatches = self.check_set_b(st, c, mem, plans, set_b, &mut checks)?;
        // The precision probe, on the timed config (where lower precision would pay): the
        // members clean so far, against set B.
        if probing && random_inputs(c) {
            let clean = clean_members(st, &checks, &b_mismatches);
            if !clean.is_empty() {
                for (i, p) in self.probe_precision(st, c, mem, plans, &clean, set_b)? {
                    checks[i].precision = p;
                }
            }
        }
        self.check_regimes(st, k, c, mem, plans, &mut checks)?;
        for i in st.active() {
            let mut ch = checks[i].clone();
            add_reasons(&mut ch, b_mismatches[i], again_ref[i]);
            ch.passed = ch.reasons.is_empty();
            st.members[i].checks.push(ch);
        }
        Ok(())
    }

    /// Set A: the reference once, every member once; each member's outputs compared, its
    /// inputs verified, its outputs saved.
    fn check_set_a(
        &mut self,
        st: &mut JobState,
        c: &JobConfig,
        mem: &JobMemory,
        plans: &ConfigPlans,
        set_a: InputSet,
        checks: &mut [ConfigCheck],
    ) -> Run<()> {
        let job = st.job;
        let reference = mem.reference.slices();
        let [first_poison, _] = POISONS;
        let mut sides = vec![Who::Reference];
        sides.extend(members_of(st));
        self.prepare(st, c, mem, &sides, set_a, first_poison)?;
        self.run(st, Who::Reference, &plans.reference, false)?;
        let ran = self.run_members(st, &plans.members, mem)?;
        let mut batch = Batch::default();
        let entries: Vec<(usize, usize)> = ran
            .iter()
            .map(|(_, live, _)| {
                (
                    batch.compare(live.clone(), reference.clone(), false, false, first_poison),
                    batch.verify(live.clone(), set_a),
                )
            })
            .collect();
        let found = self.check_batch(st, c, mem, &batch)?;
        for ((i, live, saved), (cmp, ver)) in ran.iter().zip(entries) {
            let (s, first) = &found.compares[cmp];
            let ch = &mut checks[*i];
            ch.mismatches = s.mismatches;
            ch.unwritten = s.unwritten;
            ch.max_abs_err = s.max_abs;
            ch.max_rel_err = s.max_rel;
            ch.first_mismatch = first.clone();
            ch.inputs_modified = found.verifies[ver].mismatches > 0;
            for (b, (saved, live)) in saved.iter().zip(live).enumerate() {
                if saved != live {
                    let bytes = job.buffer_bytes(c, b);
                    ours(
                        saved
                            .prefix(bytes)
                            .copy_from(live.prefix(bytes), self.gpu.stream()),
                    )?;
                }
            }
        }
        Ok(())
    }

    /// Set A again, members only, on the other poison; per member, its mismatches against
    /// the reference on this run (beyond the unwritten elements).
    fn check_set_a_again(
        &mut self,
        st: &mut JobState,
        c: &JobConfig,
        mem: &JobMemory,
        plans: &ConfigPlans,
        set_a: InputSet,
        checks: &mut [ConfigCheck],
    ) -> Run<Vec<u64>> {
        let job = st.job;
        let reference = mem.reference.slices();
        let [_, second_poison] = POISONS;
        let mut again_ref = vec![0u64; job.candidates.len()];
        // Set A again, members only, on the other poison: races, first-call-only work, and
        // elements left unwritten because the first poison happened to be their value.
        let members = members_of(st);
        self.prepare(st, c, mem, &members, set_a, second_poison)?;
        let ran = self.run_members(st, &plans.members, mem)?;
        let mut batch = Batch::default();
        let entries: Vec<[usize; 3]> = ran
            .iter()
            .map(|(_, live, saved)| {
                [
                    batch.compare(live.clone(), saved.clone(), true, false, second_poison),
                    batch.compare(live.clone(), reference.clone(), false, false, second_poison),
                    batch.verify(live.clone(), set_a),
                ]
            })
            .collect();
        let found = self.check_batch(st, c, mem, &batch)?;
        for ((i, _, _), [again, vs_ref, ver]) in ran.iter().zip(entries) {
            // Elements still holding this run's poison were never written: that is reported
            // as such, not as a race.
            let (again, vs_ref) = (&found.compares[again].0, &found.compares[vs_ref].0);
            checks[*i].nondeterministic = again.mismatches > again.unwritten;
            checks[*i].unwritten = checks[*i].unwritten.max(vs_ref.unwritten);
            again_ref[*i] = vs_ref.mismatches.saturating_sub(vs_ref.unwritten);
            checks[*i].inputs_modified |= found.verifies[ver].mismatches > 0;
        }
        Ok(again_ref)
    }

    /// Set B (only with random inputs); per member, its mismatches against the reference.
    fn check_set_b(
        &mut self,
        st: &mut JobState,
        c: &JobConfig,
        mem: &JobMemory,
        plans: &ConfigPlans,
        set_b: InputSet,
        checks: &mut [ConfigCheck],
    ) -> Run<Vec<u64>> {
        let job = st.job;
        let reference = mem.reference.slices();
        let [first_poison, _] = POISONS;
        // Set B: must match again, and must change when the reference changes.
        let mut b_mismatches = vec![0u64; job.candidates.len()];
        if random_inputs(c) {
            let mut sides = vec![Who::Reference];
            sides.extend(members_of(st));
            self.prepare(st, c, mem, &sides, set_b, first_poison)?;
            self.run(st, Who::Reference, &plans.reference, false)?;
            let ran = self.run_members(st, &plans.members, mem)?;
            let mut batch = Batch::default();
            let entries: Vec<[usize; 4]> = ran
                .iter()
                .map(|(_, live, saved)| {
                    [
                        batch.compare(live.clone(), reference.clone(), false, false, first_poison),
                        batch.compare(live.clone(), saved.clone(), true, true, first_poison),
                        batch.compare(reference.clone(), saved.clone(), true, false, first_poison),
                        batch.verify(live.clone(), set_b),
                    ]
                })
                .collect();
            let found = self.check_batch(st, c, mem, &batch)?;
            for ((i, _, _), [vs_ref, same, changed, ver]) in ran.iter().zip(entries) {
                let (sb, fb) = &found.compares[vs_ref];
                let ch = &mut checks[*i];
                b_mismatches[*i] = sb.mismatches;
                ch.unwritten = ch.unwritten.max(sb.unwritten);
                ch.max_abs_err = ch.max_abs_err.max(sb.max_abs);
                ch.max_rel_err = ch.max_rel_err.max(sb.max_rel);
                if ch.first_mismatch.is_none() {
                    ch.first_mismatch = fb.clone();
                }
                ch.inputs_modified |= found.verifies[ver].mismatches > 0;
                ch.input_independent = found.compares[same].0.mismatches == 0
                    && found.compares[changed].0.mismatches > 0;
            }
        }
        Ok(b_mismatches)
    }

    /// The task's other input regimes of config `k`: once each, every side, checked like
    /// set A.
    fn check_regimes(
        &mut self,
        st: &mut JobState,
        k: usize,
        c: &JobConfig,
        mem: &JobMemory,
        plans: &ConfigPlans,
        checks: &mut [ConfigCheck],
    ) -> Run<()> {
        let job = st.job;
        let reference = mem.reference.slices();
        let [first_poison, _] = POISONS;
        // The task's other input regimes: once each, every side, checked like set A.
        for (r, regime) in c.regimes.iter().enumerate() {
            let set = InputSet {
                seed: job
                    .secret
                    .derive(domain::REGIME, ((k as u64) << 16) | r as u64),
                regime: Some(r),
                probe: None,
            };
            let mut sides = vec![Who::Reference];
            sides.extend(members_of(st));
            self.prepare(st, c, mem, &sides, set, first_poison)?;
            self.run(st, Who::Reference, &plans.reference, false)?;
            let ran = self.run_members(st, &plans.members, mem)?;
            let mut batch = Batch::default();
            let entries: Vec<(usize, usize)> = ran
                .iter()
                .map(|(_, live, _)| {
                    (
                        batch.compare(live.clone(), reference.clone(), false, false, first_poison),
                        batch.verify(live.clone(), set),
                    )
                })
                .collect();
            let found = self.check_batch(st, c, mem, &batch)?;
            for ((i, _, _), (cmp, ver)) in ran.iter().zip(entries) {
                let (stats, first) = &found.compares[cmp];
                let ch = &mut checks[*i];
                ch.inputs_modified |= found.verifies[ver].mismatches > 0;
                ch.regimes.push(RegimeCheck {
                    name: regime.name.clone(),
                    passed: stats.mismatches == 0 && stats.unwritten == 0,
                    mismatches: stats.mismatches.max(stats.unwritten),
                    first_mismatch: first.clone(),
                });
            }
        }
        Ok(())
    }
}

/// The members still running.
fn members_of(st: &JobState) -> Vec<Who> {
    st.active().into_iter().map(Who::Member).collect()
}

/// A config's check of every member before anything ran.
fn blank_checks(job: &ExecJob, c: &JobConfig) -> Vec<ConfigCheck> {
    (0..job.candidates.len())
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
            regimes: Vec::new(),
            precision: Vec::new(),
        })
        .collect()
}

/// The active members clean so far (the precision probe's candidates).
fn clean_members(st: &JobState, checks: &[ConfigCheck], b_mismatches: &[u64]) -> Vec<usize> {
    st.active()
        .into_iter()
        .filter(|&i| {
            let ch = &checks[i];
            ch.mismatches == 0
                && b_mismatches[i] == 0
                && ch.unwritten == 0
                && !ch.nondeterministic
                && !ch.inputs_modified
        })
        .collect()
}

/// Adds the reasons of `ch`'s failures (set B's mismatches and the repeat's against the
/// reference given apart).
fn add_reasons(ch: &mut ConfigCheck, b_mismatches: u64, again_ref: u64) {
    for r in ch.regimes.iter().filter(|r| !r.passed) {
        ch.reasons.push(match &r.first_mismatch {
            Some(m) => format!(
                "on input regime `{}`, {} output elements differ from the reference (first: {}[{}] = {}, want {})",
                r.name, r.mismatches, m.buffer, m.index, m.got, m.want
            ),
            None => format!(
                "on input regime `{}`, {} output elements differ from the reference",
                r.name, r.mismatches
            ),
        });
    }
    for p in ch.precision.iter().filter(|p| !p.passed) {
        ch.reasons.push(if p.judged && p.ratio > PRECISION_PROBE_LIMIT {
            format!(
                "the outputs did not follow a change in the low-order bits of the inputs ({}) as the reference's did (|Δout − Δref| = {:.2} |Δref|): the task asks for the precision of its contract, and TF32/FP16/BF16 arithmetic rounds those bits away",
                p.input, p.ratio
            )
        } else {
            format!(
                "on the precision probe's inputs ({}), outputs differ from the reference or an input was modified",
                p.input
            )
        });
    }
    if ch.mismatches > 0 || b_mismatches > 0 {
        ch.mismatches = ch.mismatches.max(b_mismatches);
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
    if ch.nondeterministic || (ch.mismatches == 0 && again_ref > 0) {
        ch.nondeterministic = true;
        ch.reasons.push("a second run on the same inputs gave a different result (race or first-call-only work)".into());
    }
    if ch.input_independent {
        ch.reasons
            .push("the output did not change when the inputs did".into());
    }
}
