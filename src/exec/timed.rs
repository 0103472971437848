//! The timing phase for every member of a job that passed every configuration.
//!
//! Per run: fresh inputs (derived from the job's secret) into the reference and every
//! member, outputs poisoned; the reference and the members in an order drawn per run, each
//! in its own runner (L2 flush, start event, scratch zeroing, the plan, end event); every
//! member's outputs compared with that run's reference outputs and its inputs verified.
//! The reference is timed once per run for the whole group, so its runs are shared. Warm-up
//! count, minimum count and batch boundaries come from the secret; the loop stops once
//! every member's speedup interval is within the target, or at the limits.

use rand::seq::SliceRandom;
use rand::SeedableRng;

use super::checks::{Batch, Found, POISONS};
use super::harness::{
    ConfigPlans, Harness, InputSet, JobMemory, JobState, Run, SidePlan, SideRun, Who,
};
use super::job::{ExecJob, JobConfig, TimingOptions};
use super::report::{KernelOccupancy, TimingStage, PROTOCOL_VERSION};
use super::secret::domain;
use super::support::Stats;
use super::timing::{self, Schedule};
use super::torch::ReferenceKind;

impl Harness {
    /// The reference's relative spread when it runs alone (cached per build and config).
    fn calibrate(
        &mut self,
        st: &mut JobState,
        c: &JobConfig,
        mem: &JobMemory,
        plan: &SidePlan,
        opts: &TimingOptions,
        key: (u64, String),
    ) -> Run<f64> {
        if let Some(v) = self.calibration.get(&key) {
            return Ok(*v);
        }
        let mut times = Vec::new();
        for i in 0..opts.calibration_runs.max(3) {
            let seed = st.job.secret.derive(domain::CALIBRATION, u64::from(i));
            self.prepare(
                st,
                c,
                mem,
                &[Who::Reference],
                InputSet::main(seed),
                POISONS[0],
            )?;
            if let SideRun::Ok(ms) = self.run(st, Who::Reference, plan, opts.flush_l2)? {
                if i > 0 {
                    times.push(ms * 1e3);
                }
            }
        }
        let spread = timing::rel_mad(&times);
        self.calibration.insert(key, spread);
        Ok(spread)
    }

    /// Times the members that passed every configuration so far.
    pub(crate) fn time_config(
        &mut self,
        st: &mut JobState,
        c: &JobConfig,
        mem: &JobMemory,
        plans: &ConfigPlans,
        opts: &TimingOptions,
        ref_key: u64,
    ) -> Run<()> {
        let job = st.job;
        let mut timed = timed_members(st);
        if timed.is_empty() {
            return Ok(());
        }
        let key = (ref_key, c.name.clone());
        let calibration = self.calibrate(st, c, mem, &plans.reference, opts, key)?;
        let mut sched = Schedule::new(job.secret, opts);
        let mut order_rng =
            rand::rngs::SmallRng::seed_from_u64(job.secret.derive(domain::SCHEDULE, 1));
        let n = job.candidates.len();
        let max_batch = 12usize;
        let mut samples = Samples::new(n);
        let budget = opts.budget_ms * (timed.len() as f64 + 1.0) / 2.0;
        let mut run = 0u32;
        let boot_seed = job.secret.derive(domain::BOOTSTRAP, 0);
        let mut settled = vec![false; n];
        let cx = TimedCtx {
            c,
            mem,
            plans,
            opts,
        };
        loop {
            let batch = (sched.next_batch() as usize).min(max_batch);
            for _ in 0..batch {
                run += 1;
                let seed = job.secret.derive(domain::TIMED, u64::from(run));
                let out = self.timed_run(st, &cx, seed, &timed, &mut order_rng)?;
                let counted = run > sched.warmup;
                record_run(st, run, counted, out, &mut timed, &mut samples);
            }
            timed.retain(|&i| st.members[i].active());
            if timed.is_empty() {
                return Ok(());
            }
            let reps = samples.ref_us.len() as u32;
            if reps >= sched.max_reps || samples.spent_ms >= budget {
                break;
            }
            if reps >= sched.min_reps
                && all_settled(
                    &timed,
                    &samples.paired_ref,
                    &samples.cand_us,
                    boot_seed,
                    opts,
                    &mut settled,
                )
            {
                break;
            }
        }
        self.record_timings(
            st,
            c,
            opts,
            Measurements {
                timed,
                ref_us: samples.ref_us,
                cand_us: samples.cand_us,
                paired_ref: samples.paired_ref,
                run,
                warmup: sched.warmup,
                boot_seed,
                calibration,
            },
        );
        Ok(())
    }

    /// One timed run: input set `seed` into every side of `timed`, the sides in an order
    /// drawn from `order_rng`, then every member's outputs and inputs checked.
    fn timed_run(
        &mut self,
        st: &mut JobState,
        cx: &TimedCtx<'_>,
        seed: u64,
        timed: &[usize],
        order_rng: &mut rand::rngs::SmallRng,
    ) -> Run<RunOutcome> {
        let TimedCtx {
            c,
            mem,
            plans,
            opts,
        } = *cx;
        let mut sides = vec![Who::Reference];
        sides.extend(timed.iter().map(|&i| Who::Member(i)));
        // The poison of a timed run is drawn from its seed: a kernel that leaves the
        // elements equal to one pattern unwritten is caught on the runs of the other.
        let poison = POISONS[(seed >> 63) as usize];
        self.prepare(st, c, mem, &sides, InputSet::main(seed), poison)?;
        sides.shuffle(order_rng);
        let (r_ms, times) = self.run_timed_sides(st, plans, sides, opts.flush_l2)?;
        // Every run is checked: outputs against this run's reference outputs, and
        // the inputs it was given.
        let (times, found) = self.check_timed_run(st, c, mem, seed, poison, times)?;
        Ok((r_ms, times, found))
    }

    /// Runs the timed run's sides in `sides`' order; the reference's milliseconds and each
    /// member's that ran.
    #[allow(clippy::type_complexity)]
    fn run_timed_sides(
        &mut self,
        st: &mut JobState,
        plans: &ConfigPlans,
        sides: Vec<Who>,
        flush_l2: bool,
    ) -> Run<(Option<f64>, Vec<(usize, f64)>)> {
        let mut r_ms = None;
        let mut times = Vec::new();
        for who in sides {
            let plan = match who {
                Who::Reference => &plans.reference,
                Who::Member(i) => &plans.members[i],
            };
            match (who, self.run(st, who, plan, flush_l2)?) {
                (Who::Reference, SideRun::Ok(ms)) => r_ms = Some(ms),
                (Who::Member(i), SideRun::Ok(ms)) => times.push((i, ms)),
                _ => {}
            }
        }
        Ok((r_ms, times))
    }

    /// Checks a timed run (inputs `seed`, outputs poisoned with `poison`): per member that
    /// ran, its milliseconds and its entries in what the batch found.
    #[allow(clippy::type_complexity)]
    fn check_timed_run(
        &mut self,
        st: &mut JobState,
        c: &JobConfig,
        mem: &JobMemory,
        seed: u64,
        poison: u8,
        times: Vec<(usize, f64)>,
    ) -> Run<(Vec<(usize, f64, usize, usize)>, Found)> {
        let reference = mem.reference.slices();
        let mut checks = Batch::default();
        let times: Vec<(usize, f64, usize, usize)> = times
            .into_iter()
            .filter_map(|(i, ms)| {
                let own = mem.side(Who::Member(i))?.slices();
                let cmp = checks.compare(own.clone(), reference.clone(), false, false, poison);
                Some((i, ms, cmp, checks.verify(own, InputSet::main(seed))))
            })
            .collect();
        let found = self.check_batch(st, c, mem, &checks)?;
        Ok((times, found))
    }

    /// Records each timed member's [`TimingStage`] from what the loop measured.
    fn record_timings(
        &mut self,
        st: &mut JobState,
        c: &JobConfig,
        opts: &TimingOptions,
        m: Measurements,
    ) {
        let job = st.job;
        let Measurements {
            timed,
            ref_us,
            cand_us,
            paired_ref,
            run,
            warmup,
            boot_seed,
            calibration,
        } = m;
        let spread = timing::rel_mad(&ref_us);
        let noise = timing::noise_floor(
            &ref_us,
            opts.bootstrap as usize,
            boot_seed,
            opts.min_noise_floor,
        );
        let (bytes, floor_us, compute_floor_us) = self.floors(job);
        for i in timed {
            let ref_med = timing::median(&paired_ref[i]);
            let cand_med = timing::median(&cand_us[i]);
            let ci95 = timing::ratio_ci(
                &paired_ref[i],
                &cand_us[i],
                opts.bootstrap as usize,
                boot_seed,
            );
            let award = timing::award(&timing::Measured {
                reference_us: ref_med,
                candidate_us: cand_med,
                noise_floor: noise,
                floor_us,
                compute_floor_us,
                reference_spread: spread,
                reference_calibration: calibration,
                unstable_factor: opts.unstable_factor,
            });
            let occupancy = self.occupancy_of(st, c, i);
            st.members[i].timing = Some(TimingStage {
                protocol: PROTOCOL_VERSION,
                config: c.name.clone(),
                reference: st
                    .job
                    .torch_reference
                    .as_ref()
                    .map_or(ReferenceKind::Cuda, |t| t.mode.into()),
                reference_us: ref_med,
                candidate_us: cand_med,
                speedup: award.speedup,
                raw_speedup: award.raw_speedup,
                ci95,
                noise_floor: noise,
                within_noise: award.within_noise,
                implausible: award.implausible,
                floor_us,
                compute_floor_us,
                unstable: award.unstable,
                reference_spread: spread,
                reference_calibration: calibration,
                withheld: award.withheld,
                achieved_gbps: if cand_med > 0.0 {
                    bytes / (cand_med * 1e3)
                } else {
                    0.0
                },
                repetitions: cand_us[i].len() as u32,
                warmup,
                checked_runs: run,
                occupancy,
            });
        }
    }

    /// The job's floors: the bytes it must move, and the memory and compute floors, us.
    fn floors(&self, job: &ExecJob) -> (f64, f64, f64) {
        let bandwidth = if job.bandwidth_gbps > 0.0 {
            job.bandwidth_gbps
        } else {
            self.info.bandwidth_gbps
        };
        let peak = if job.peak_tflops > 0.0 {
            job.peak_tflops
        } else {
            self.info.peak_tflops
        };
        let bytes = job.floor_bytes();
        let floor_us = if bandwidth > 0.0 {
            bytes / (bandwidth * 1e3)
        } else {
            0.0
        };
        let compute_floor_us = if peak > 0.0 && job.flops > 0.0 {
            job.flops / (peak * 1e6)
        } else {
            0.0
        };
        (bytes, floor_us, compute_floor_us)
    }

    /// Member `i`'s kernels' occupancy (its runner asks the driver; none past the deadline).
    fn occupancy_of(&mut self, st: &JobState, c: &JobConfig, i: usize) -> Vec<KernelOccupancy> {
        let queries = c.candidates[i]
            .launches
            .iter()
            .enumerate()
            .map(|(li, l)| (li, l.block.iter().product::<u32>(), l.smem))
            .collect();
        let blocks = match self.limit(st) {
            Ok(limit) => self.runners[i]
                .occupancy(queries, limit)
                .unwrap_or_default(),
            Err(_) => Vec::new(),
        };
        c.candidates[i]
            .launches
            .iter()
            .zip(blocks)
            .filter_map(|(l, b)| {
                let blocks = b?;
                let threads = l.block.iter().product::<u32>();
                let warps = f64::from(blocks) * f64::from(threads.div_ceil(32));
                Some(KernelOccupancy {
                    kernel: l.kernel.clone(),
                    block_threads: threads,
                    blocks_per_sm: blocks,
                    occupancy: (warps / f64::from(self.max_warps_per_sm)).min(1.0),
                })
            })
            .collect()
    }
}

/// The config a timing loop measures, and how.
struct TimedCtx<'a> {
    c: &'a JobConfig,
    mem: &'a JobMemory,
    plans: &'a ConfigPlans,
    opts: &'a TimingOptions,
}

/// The timing loop's samples so far (us), and the time its counted runs took (ms).
struct Samples {
    ref_us: Vec<f64>,
    cand_us: Vec<Vec<f64>>,
    paired_ref: Vec<Vec<f64>>,
    spent_ms: f64,
}

impl Samples {
    /// No samples yet, for a job of `n` members.
    fn new(n: usize) -> Samples {
        let (ref_us, cand_us) = (Vec::new(), vec![Vec::new(); n]);
        // A member's time is paired with the reference's of the same run.
        let paired_ref: Vec<Vec<f64>> = vec![Vec::new(); n];
        let spent_ms = 0.0;
        Samples {
            ref_us,
            cand_us,
            paired_ref,
            spent_ms,
        }
    }
}

/// What one timed run came to: the reference's milliseconds, per member that ran its
/// milliseconds and its entries in what the checks found, and the checks.
type RunOutcome = (Option<f64>, Vec<(usize, f64, usize, usize)>, Found);

/// Adds timed run `run`'s times to `samples` when it counts; a member whose outputs or
/// inputs were wrong is failed and no longer timed.
fn record_run(
    st: &mut JobState,
    run: u32,
    counted: bool,
    out: RunOutcome,
    timed: &mut Vec<usize>,
    samples: &mut Samples,
) {
    let (r_ms, times, found) = out;
    let Samples {
        ref_us,
        cand_us,
        paired_ref,
        spent_ms,
    } = samples;
    if counted {
        if let Some(r) = r_ms {
            ref_us.push(r * 1e3);
            *spent_ms += r;
        }
    }
    for (i, ms, cmp, ver) in times {
        let (out, inp) = (&found.compares[cmp].0, &found.verifies[ver]);
        let failure = timed_failure(run, out, inp);
        if let Some(reason) = failure {
            mark_timed_mismatch(st, i, reason);
            timed.retain(|&m| m != i);
            continue;
        }
        if let (true, Some(r)) = (counted, r_ms) {
            cand_us[i].push(ms * 1e3);
            paired_ref[i].push(r * 1e3);
            *spent_ms += ms;
        }
    }
}

/// What the timing loop measured, for the members still timed.
struct Measurements {
    timed: Vec<usize>,
    ref_us: Vec<f64>,
    cand_us: Vec<Vec<f64>>,
    paired_ref: Vec<Vec<f64>>,
    /// Timed runs so far (every one checked), and the warm-up runs among them.
    run: u32,
    warmup: u32,
    boot_seed: u64,
    calibration: f64,
}

/// The active members that passed every configuration so far.
fn timed_members(st: &JobState) -> Vec<usize> {
    st.active()
        .into_iter()
        .filter(|&i| st.members[i].passed_so_far())
        .collect()
}

/// Why timed run `run` failed a member, if it did.
fn timed_failure(run: u32, out: &Stats, inp: &Stats) -> Option<String> {
    if !out.clean() {
        Some(format!(
            "run {run} of the timing phase (fresh inputs) gave a wrong result: {} elements differ from the reference, {} never written",
            out.mismatches, out.unwritten
        ))
    } else if inp.mismatches > 0 {
        Some(format!(
            "run {run} of the timing phase left {} input elements modified",
            inp.mismatches
        ))
    } else {
        None
    }
}

/// Marks member `i`'s last check as failed on a timed run (once).
fn mark_timed_mismatch(st: &mut JobState, i: usize, reason: String) {
    if let Some(ch) = st.members[i].checks.last_mut() {
        if !ch.timed_run_mismatch {
            ch.timed_run_mismatch = true;
            ch.passed = false;
            ch.reasons.push(reason);
        }
    }
}

/// Whether every timed member's speedup interval is within the target (each one's verdict
/// kept in `settled`).
fn all_settled(
    timed: &[usize],
    paired_ref: &[Vec<f64>],
    cand_us: &[Vec<f64>],
    boot_seed: u64,
    opts: &TimingOptions,
    settled: &mut [bool],
) -> bool {
    for &i in timed {
        let ratio = timing::median(&paired_ref[i]) / timing::median(&cand_us[i]);
        let [lo, hi] = timing::ratio_ci(&paired_ref[i], &cand_us[i], 500, boot_seed);
        settled[i] = (hi - lo) / 2.0 <= opts.target_rel_ci * ratio;
    }
    timed.iter().all(|&i| settled[i])
}
