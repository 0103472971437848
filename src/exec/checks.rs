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

use super::driver::DevSlice;
use super::harness::{
    ours, ConfigPlans, Harness, InputSet, JobMemory, JobState, Run, SidePlan, SideRun, Who,
};
use super::job::JobConfig;
use super::report::{ConfigCheck, Mismatch, PrecisionProbe, RegimeCheck, PRECISION_PROBE_LIMIT};
use super::support::{Stats, StatsSlots};
use super::timing::{derive_seed, domain};
use super::values::element_value;
use crate::task::Direction;

/// A member that ran: its index, its buffers, and the saved copies of its outputs.
type RanMember = (usize, Vec<DevSlice>, Vec<DevSlice>);

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

fn random_inputs(c: &JobConfig) -> bool {
    c.fills.iter().flatten().any(|f| f.random)
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
        let stream = self.gpu.stream();
        let outputs: Vec<usize> = (0..job.buffers.len())
            .filter(|&i| job.buffers[i].direction.is_output())
            .collect();
        let inputs: Vec<usize> = (0..job.buffers.len())
            .filter(|&i| job.buffers[i].direction == Direction::In && c.fills[i].is_some())
            .collect();
        let nc = batch.compares.len() * outputs.len();
        let need = nc + batch.verifies.len();
        let slots = match self.stats.take() {
            Some(s) if s.len() >= need => s,
            _ => ours(StatsSlots::new(&self.gpu, need.max(64)))?,
        };
        ours(slots.reset())?;
        self.clock_start()?;
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
        self.clock_stop_sync(st, "checking outputs and inputs")?;
        let stats = ours(slots.read())?;
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
        self.stats = Some(slots);
        Ok(Found {
            compares,
            verifies: stats[nc..need].to_vec(),
        })
    }

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
                regimes: Vec::new(),
                precision: Vec::new(),
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
        let [first_poison, second_poison] = POISONS;
        // On the timed config, set B is also the precision probe's base set (its probed
        // inputs carry the first draw of their low-order bits): the probe then needs one run.
        let probing = k == job.timing_config && c.probes.iter().any(Option::is_some);
        let set_a = InputSet::main(seed_a);
        let set_b = InputSet {
            probe: probing.then_some(false),
            ..InputSet::main(seed_b)
        };
        self.prepare(st, c, mem, &sides, set_a, first_poison)?;
        self.run(st, Who::Reference, &plans.reference, false)?;
        let mut again_ref = vec![0u64; job.candidates.len()];
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
        // The precision probe, on the timed config (where lower precision would pay): the
        // members clean so far, against set B.
        if probing && random_inputs(c) {
            let clean: Vec<usize> = st
                .active()
                .into_iter()
                .filter(|&i| {
                    let ch = &checks[i];
                    ch.mismatches == 0
                        && b_mismatches[i] == 0
                        && ch.unwritten == 0
                        && !ch.nondeterministic
                        && !ch.inputs_modified
                })
                .collect();
            if !clean.is_empty() {
                for (i, p) in self.probe_precision(st, c, mem, plans, &clean, set_b)? {
                    checks[i].precision = p;
                }
            }
        }
        // The task's other input regimes: once each, every side, checked like set A.
        for (r, regime) in c.regimes.iter().enumerate() {
            let set = InputSet {
                seed: derive_seed(job.seed, domain::REGIME, ((k as u64) << 16) | r as u64),
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
        for i in st.active() {
            let mut ch = checks[i].clone();
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

    /// The precision probe for `members`, right after they and the reference ran `base`
    /// (whose probed inputs carry the first draw of their low-order bits): one more run on a
    /// set that differs from `base` only in those bits of every probed input (the bits the
    /// task's contract keeps and coarser formats round away), then how each member's outputs
    /// moved compared with the reference's. Rounding one of two equally weighted operands
    /// leaves a ratio of about 0.7, rounding all of them 1.0. The probe run is checked like
    /// any other. Returns each member's probe.
    fn probe_precision(
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
        let stream = self.gpu.stream();
        let reference = mem.reference.slices();
        let outputs: Vec<usize> = (0..job.buffers.len())
            .filter(|&i| job.buffers[i].direction.is_output())
            .collect();
        // Keep the base set's outputs of every side.
        for &o in &outputs {
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
            for &o in &outputs {
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
        let inputs = (0..job.buffers.len())
            .filter(|&j| c.probes.get(j).is_some_and(Option::is_some))
            .map(|j| job.buffers[j].name.as_str())
            .collect::<Vec<_>>()
            .join(", ");
        Ok(ran
            .iter()
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
                    input: inputs.clone(),
                    ratio,
                    judged,
                    passed: within && (!judged || ratio <= PRECISION_PROBE_LIMIT),
                };
                (i, vec![probe])
            })
            .collect())
    }
}
