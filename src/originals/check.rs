//! One task's check: its original on the smallest config's inputs, and on the inputs of each
//! of its input regimes (on the smallest config the regime applies to), compared with the
//! reference run on the GPU (or with reference values sampled there earlier), the NumPy twin
//! with the PyTorch module where both can run, and the CPU twin of the input generator with
//! the device's.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use super::samples::{BufferSamples, Exact, RegimeSamples, Samples, TaskSamples};

use super::compare::{compare, element_f64, BufferCompare};
use super::{run_original, smallest_config, Engine, OriginalOutputs, Tools};
use crate::candidate::{Candidate, PlanLimits};
use crate::compile::{CompileOutcome, Compiler};
use crate::exec::{DirectGpu, ExecJob, JobParts, JobReference, JobSide};
use crate::inputs::{buffer_seed, HostInputs};
use crate::task::{DType, InputConfig, Regime, Task};

/// How to check.
#[derive(Debug, Clone)]
pub struct CheckOptions {
    /// Input set seed.
    pub seed: u64,
    /// Time limit of one run of an original.
    pub limit: Duration,
    /// Reference values per output element to record for `Samples` (0: none).
    pub samples_per_buffer: usize,
}

impl Default for CheckOptions {
    fn default() -> Self {
        CheckOptions {
            seed: 0x0C0D_A9E2_F00D_2026,
            limit: Duration::from_secs(120),
            samples_per_buffer: 64,
        }
    }
}

/// How the CPU twin of the input generator compared with the device, per input buffer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TwinCheck {
    /// The buffer.
    pub buffer: String,
    /// Elements generated.
    pub elements: u64,
    /// Elements whose bytes differ.
    pub differing: u64,
}

/// One task's result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskCheck {
    /// The task.
    pub task: String,
    /// The config its original ran on.
    pub config: String,
    /// What ran the original.
    pub engine: Option<Engine>,
    /// Seconds the original ran.
    pub seconds: f64,
    /// What the outputs were compared with: `reference` (run on the GPU now), `samples`
    /// (sampled on a GPU earlier), or `nothing` (the original only had to run).
    pub against: String,
    /// Per output buffer.
    pub outputs: Vec<BufferCompare>,
    /// The NumPy twin against the PyTorch module (both ran).
    pub twin_vs_torch: Vec<BufferCompare>,
    /// The CPU input generator against the device's.
    pub generator: Vec<TwinCheck>,
    /// Why the check could not be completed.
    pub error: Option<String>,
    /// The same check on each of the task's input regimes.
    #[serde(default)]
    pub regimes: Vec<RegimeCheck>,
}

impl TaskCheck {
    /// Everything that was compared agreed and nothing failed, on the main inputs and on
    /// every input regime.
    pub fn passed(&self) -> bool {
        self.error.is_none()
            && self.outputs.iter().all(BufferCompare::clean)
            && self.twin_vs_torch.iter().all(BufferCompare::clean)
            && self.generator.iter().all(|g| g.differing == 0)
            && self.regimes.iter().all(RegimeCheck::passed)
    }
}

/// The original on one input regime of its task, on the smallest config the regime
/// applies to: it must run (no crash, no time-out), and agree with the reference where
/// there is one to compare with.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RegimeCheck {
    /// The regime.
    pub regime: String,
    /// The config its original ran on.
    pub config: String,
    /// Seconds the original ran.
    pub seconds: f64,
    /// What the outputs were compared with (as [`TaskCheck::against`]).
    pub against: String,
    /// Per output buffer.
    pub outputs: Vec<BufferCompare>,
    /// The NumPy twin against the PyTorch module (both ran).
    pub twin_vs_torch: Vec<BufferCompare>,
    /// The CPU input generator against the device's, on the regime's distributions.
    pub generator: Vec<TwinCheck>,
    /// Why the check could not be completed.
    pub error: Option<String>,
}

impl RegimeCheck {
    /// Everything that was compared agreed and nothing failed.
    pub fn passed(&self) -> bool {
        self.error.is_none()
            && self.outputs.iter().all(BufferCompare::clean)
            && self.twin_vs_torch.iter().all(BufferCompare::clean)
            && self.generator.iter().all(|g| g.differing == 0)
    }
}

/// (name, dtype, is output) of each ABI buffer.
fn buffers(task: &Task) -> Vec<(String, DType, bool)> {
    task.buffers()
        .map(|b| (b.name.to_string(), b.dtype, b.direction.is_output()))
        .collect()
}

/// Indices to sample from `n` elements: the ends, the middle and hashed positions.
fn sample_indices(n: u64, k: usize, salt: u64) -> Vec<u64> {
    if n == 0 {
        return Vec::new();
    }
    let mut v: Vec<u64> = vec![0, n / 2, n - 1];
    v.extend((0..k.saturating_sub(3) as u64).map(|j| crate::inputs::mix64(salt ^ j) % n));
    v.sort_unstable();
    v.dedup();
    v
}

/// Compares outputs with reference bytes, buffer by buffer.
fn against_reference(task: &Task, got: &OriginalOutputs, want: &[Vec<u8>]) -> Vec<BufferCompare> {
    buffers(task)
        .iter()
        .enumerate()
        .filter(|(_, b)| b.2)
        .map(|(i, (name, dtype, _))| {
            let g = got.buffers[i].as_deref().unwrap_or(&[]);
            compare(name, *dtype, g, &want[i], &task.tolerance)
        })
        .collect()
}

/// Compares outputs with sampled reference values (per output buffer, by name).
fn against_samples(
    task: &Task,
    got: &OriginalOutputs,
    samples: &BufferSamples,
) -> Result<Vec<BufferCompare>, String> {
    let mut out = Vec::new();
    for (i, (name, dtype, is_out)) in buffers(task).iter().enumerate() {
        if !is_out {
            continue;
        }
        let g = got.buffers[i].as_deref().unwrap_or(&[]);
        let n = g.len() / dtype.size_bytes() as usize;
        let want = samples
            .get(name)
            .ok_or_else(|| format!("the samples have no buffer `{name}`"))?;
        let mut c = BufferCompare::empty(name);
        for &(idx, w) in want {
            if idx as usize >= n {
                return Err(format!(
                    "sample index {idx} of `{name}` is past its {n} elements"
                ));
            }
            let gv = element_f64(*dtype, g, idx as usize);
            c.elements += 1;
            match w {
                Some(Exact(w)) => c.add(idx, gv, w, &task.tolerance),
                None if !gv.is_finite() => {}
                None => c.add(idx, gv, f64::NAN, &task.tolerance),
            }
        }
        out.push(c);
    }
    Ok(out)
}

/// Reference values of `want` at sampled positions, per output buffer (non-finite values
/// kept as they are: a NaN must stay a NaN, an infinity keep its sign).
fn sample_outputs(
    task: &Task,
    inputs: &HostInputs,
    want: &[Vec<u8>],
    per_buffer: usize,
) -> BufferSamples {
    let mut out = BTreeMap::new();
    for (i, (name, dtype, is_out)) in buffers(task).iter().enumerate() {
        if !is_out || per_buffer == 0 {
            continue;
        }
        let idx = sample_indices(
            inputs.values.lens[i],
            per_buffer,
            crate::inputs::mix64(i as u64),
        );
        let vals = idx
            .into_iter()
            .map(|k| (k, Some(Exact(element_f64(*dtype, &want[i], k as usize)))))
            .collect();
        out.insert(name.clone(), vals);
    }
    out
}

/// What the GPU side of a check needs.
pub struct GpuCheck<'a> {
    /// The device.
    pub gpu: &'a DirectGpu,
    /// A compiler for the device's architecture (in process: references are trusted).
    pub compiler: &'a Compiler,
}

/// The reference's outputs on these inputs.
fn reference_outputs(
    task: &Task,
    ci: usize,
    inputs: &HostInputs,
    g: &GpuCheck<'_>,
    seed: u64,
) -> Result<Vec<Vec<u8>>, String> {
    let mut cand =
        Candidate::parse(&task.reference.source).map_err(|e| format!("reference: {e}"))?;
    cand.check_abi(task)
        .map_err(|e| format!("reference: {e}"))?;
    let plan = cand
        .resolve(task, &task.configs[ci], &PlanLimits::default())
        .map_err(|e| format!("reference: {e}"))?;
    let module = match g.compiler.compile(&cand) {
        CompileOutcome::Compiled { module, .. } => module,
        other => return Err(format!("reference did not compile: {other:?}")),
    };
    let plans = [plan];
    let side = JobSide {
        candidate: &cand,
        module: &module,
        plans: &plans,
    };
    let job = ExecJob::build(JobParts {
        task,
        configs: &[ci],
        reference: JobReference::Cuda(side),
        candidates: &[],
        timing_config: 0,
        seed,
        timing: None,
        max_device_bytes: u64::MAX,
        bandwidth_gbps: 0.0,
        peak_tflops: 0.0,
        deadline_ms: 0,
        run_limit_ms: 0,
        member_budget_ms: 0,
    })
    .map_err(|e| e.to_string())?;
    g.gpu
        .run_reference(&job, 0, &inputs.buffers)
        .map_err(|e| e.to_string())
}

/// One input set the original ran on: the config (index into `task.configs`), the
/// inputs, and what the original wrote.
struct Ran {
    ci: usize,
    inputs: HostInputs,
    got: OriginalOutputs,
}

/// A task whose original has run (the CPU half of a check; `Send`, so that originals can
/// run on worker threads while the GPU half runs where the device was opened).
pub struct Prepared {
    check: TaskCheck,
    ran: Option<Ran>,
    /// Per input regime (as `task.regimes`), its run where it succeeded.
    regimes: Vec<Option<Ran>>,
    seed: u64,
}

/// Runs the original (and the NumPy twin next to PyTorch) on the smallest config, and on
/// the smallest config of each input regime.
pub fn prepare(
    task: &Task,
    tools: &Tools,
    opts: &CheckOptions,
    samples: Option<&Samples>,
) -> Prepared {
    let seed = samples.map_or(opts.seed, |s| s.seed);
    let mut check = TaskCheck {
        task: task.id.clone(),
        config: String::new(),
        engine: None,
        seconds: 0.0,
        against: "nothing".into(),
        outputs: Vec::new(),
        twin_vs_torch: Vec::new(),
        generator: Vec::new(),
        error: None,
        regimes: Vec::new(),
    };
    check.engine = Some(tools.engine_for(task));
    let ran = match smallest_config(task).ok_or_else(|| "the task has no configs".to_string()) {
        Ok(cfg) => {
            check.config = cfg.name.clone();
            run_set(task, tools, opts, cfg, None, seed).map(|(r, twin)| {
                check.seconds = r.got.seconds;
                check.twin_vs_torch = twin;
                r
            })
        }
        Err(e) => Err(e),
    };
    let ran = ran.map_err(|e| check.error = Some(e)).ok();
    let mut regimes = Vec::new();
    for regime in &task.regimes {
        let mut rc = RegimeCheck {
            regime: regime.name.clone(),
            config: String::new(),
            seconds: 0.0,
            against: "nothing".into(),
            outputs: Vec::new(),
            twin_vs_torch: Vec::new(),
            generator: Vec::new(),
            error: None,
        };
        let run = match smallest_config_of(task, regime) {
            Some(cfg) => {
                rc.config = cfg.name.clone();
                run_set(task, tools, opts, cfg, Some(regime), seed)
            }
            None => Err("the regime applies to no config".into()),
        };
        regimes.push(match run {
            Ok((r, twin)) => {
                rc.seconds = r.got.seconds;
                rc.twin_vs_torch = twin;
                Some(r)
            }
            Err(e) => {
                rc.error = Some(e);
                None
            }
        });
        check.regimes.push(rc);
    }
    Prepared {
        check,
        ran,
        regimes,
        seed,
    }
}

/// The config an input regime's original runs on: the smallest (by buffer bytes) of those
/// it applies to.
pub fn smallest_config_of<'t>(task: &'t Task, regime: &Regime) -> Option<&'t InputConfig> {
    task.configs
        .iter()
        .filter(|c| regime.applies_to(&c.name))
        .min_by_key(|c| task.buffer_bytes(c).unwrap_or(u64::MAX))
}

/// Runs the original on one input set of `cfg` (the main distributions, or `regime`'s),
/// and the NumPy twin next to PyTorch where both run.
fn run_set(
    task: &Task,
    tools: &Tools,
    opts: &CheckOptions,
    cfg: &InputConfig,
    regime: Option<&Regime>,
    seed: u64,
) -> Result<(Ran, Vec<BufferCompare>), String> {
    let ci = task
        .configs
        .iter()
        .position(|c| c.name == cfg.name)
        .unwrap_or(0);
    let inputs = HostInputs::generate_with(task, cfg, regime, seed).map_err(|e| e.to_string())?;
    let engine = tools.engine_for(task);
    let got =
        run_original(task, cfg, &inputs, engine, tools, opts.limit).map_err(|e| e.to_string())?;
    let mut twin_vs_torch = Vec::new();
    if engine == Engine::Torch && task.numpy_twin.is_some() {
        let twin = run_original(task, cfg, &inputs, Engine::Numpy, tools, opts.limit)
            .map_err(|e| format!("NumPy twin: {e}"))?;
        let torch: Vec<Vec<u8>> = got
            .buffers
            .iter()
            .map(|b| b.clone().unwrap_or_default())
            .collect();
        twin_vs_torch = against_reference(task, &twin, &torch);
    }
    Ok((Ran { ci, inputs, got }, twin_vs_torch))
}

/// The GPU half: with `gpu`, the reference runs on the same inputs and the generator is
/// compared with the device's; else, with `samples`, the original is compared with reference
/// values sampled earlier. `record` receives this task's reference samples (GPU only).
pub fn finish(
    task: &Task,
    prepared: Prepared,
    opts: &CheckOptions,
    gpu: Option<&GpuCheck<'_>>,
    samples: Option<&Samples>,
    record: Option<&mut Samples>,
) -> TaskCheck {
    let Prepared {
        mut check,
        ran,
        regimes,
        seed,
    } = prepared;
    let task_samples = samples.and_then(|s| s.tasks.get(&task.id));
    let mut recorded: Option<TaskSamples> = None;
    if let Some(r) = ran {
        let mut side = Side::default();
        match compare_side(task, &r, seed, opts, gpu, &mut side) {
            Ok(()) if gpu.is_none() => {
                if let Some(s) = task_samples {
                    match against_config_samples(task, &r, &s.config, &s.buffers) {
                        Ok(outputs) => {
                            check.against = "samples".into();
                            check.outputs = outputs;
                        }
                        Err(e) => check.error = Some(e),
                    }
                }
            }
            Ok(()) => {
                check.against = "reference".into();
                check.outputs = side.outputs;
                check.generator = side.generator;
                recorded = side.samples.map(|buffers| TaskSamples {
                    config: check.config.clone(),
                    buffers,
                    regimes: BTreeMap::new(),
                });
            }
            Err(e) => check.error = Some(e),
        }
    }
    let against = Against {
        task,
        seed,
        opts,
        gpu,
        samples: task_samples,
    };
    finish_regimes(&against, &mut check.regimes, regimes, &mut recorded);
    if let (Some(rec), Some(t)) = (record, recorded) {
        rec.seed = seed;
        rec.tasks.insert(task.id.clone(), t);
    }
    check
}

/// What the GPU half compares a run with: the device (with `gpu`) or the reference samples
/// taken earlier.
struct Against<'a> {
    task: &'a Task,
    seed: u64,
    opts: &'a CheckOptions,
    gpu: Option<&'a GpuCheck<'a>>,
    samples: Option<&'a TaskSamples>,
}

/// The GPU half of each input regime's check (see [`finish`]); their reference samples go
/// into `recorded`.
fn finish_regimes(
    a: &Against<'_>,
    checks: &mut [RegimeCheck],
    regimes: Vec<Option<Ran>>,
    recorded: &mut Option<TaskSamples>,
) {
    for (rc, (ran, regime)) in checks
        .iter_mut()
        .zip(regimes.into_iter().zip(&a.task.regimes))
    {
        let Some(r) = ran else { continue };
        let mut side = Side::default();
        match compare_side(a.task, &r, a.seed, a.opts, a.gpu, &mut side) {
            Ok(()) if a.gpu.is_none() => {
                if let Some(s) = a.samples.and_then(|s| s.regimes.get(&regime.name)) {
                    match against_config_samples(a.task, &r, &s.config, &s.buffers) {
                        Ok(outputs) => {
                            rc.against = "samples".into();
                            rc.outputs = outputs;
                        }
                        Err(e) => rc.error = Some(format!("regime `{}`: {e}", regime.name)),
                    }
                }
            }
            Ok(()) => {
                rc.against = "reference".into();
                rc.outputs = side.outputs;
                rc.generator = side.generator;
                if let (Some(t), Some(buffers)) = (recorded.as_mut(), side.samples) {
                    t.regimes.insert(
                        regime.name.clone(),
                        RegimeSamples {
                            config: rc.config.clone(),
                            buffers,
                        },
                    );
                }
            }
            Err(e) => rc.error = Some(e),
        }
    }
}

/// Compares a run with samples taken on `config`.
fn against_config_samples(
    task: &Task,
    r: &Ran,
    config: &str,
    samples: &BufferSamples,
) -> Result<Vec<BufferCompare>, String> {
    let now = &task.configs[r.ci].name;
    if config != now {
        return Err(format!(
            "the samples are for config `{config}`, the smallest config is now `{now}`"
        ));
    }
    against_samples(task, &r.got, samples)
}

/// Both halves in this thread.
pub fn check_task(
    task: &Task,
    tools: &Tools,
    opts: &CheckOptions,
    gpu: Option<&GpuCheck<'_>>,
    samples: Option<&Samples>,
    record: Option<&mut Samples>,
) -> TaskCheck {
    let p = prepare(task, tools, opts, samples);
    finish(task, p, opts, gpu, samples, record)
}

/// Checks many tasks: originals on `jobs` worker threads, the GPU half in this thread, in
/// task order; `each` sees every result as it is done.
#[allow(clippy::too_many_arguments)]
pub fn check_tasks(
    tasks: &[&Task],
    tools: &Tools,
    opts: &CheckOptions,
    gpu: Option<&GpuCheck<'_>>,
    samples: Option<&Samples>,
    mut record: Option<&mut Samples>,
    jobs: usize,
    mut each: impl FnMut(&TaskCheck),
) -> Vec<TaskCheck> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::mpsc;
    let next = AtomicUsize::new(0);
    let (tx, rx) = mpsc::channel::<(usize, Prepared)>();
    let mut results: Vec<Option<TaskCheck>> = (0..tasks.len()).map(|_| None).collect();
    std::thread::scope(|scope| {
        for _ in 0..jobs.max(1).min(tasks.len().max(1)) {
            let tx = tx.clone();
            let next = &next;
            scope.spawn(move || loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(t) = tasks.get(i) else { break };
                if tx.send((i, prepare(t, tools, opts, samples))).is_err() {
                    break;
                }
            });
        }
        drop(tx);
        for (i, p) in rx {
            let c = finish(tasks[i], p, opts, gpu, samples, record.as_deref_mut());
            each(&c);
            results[i] = Some(c);
        }
    });
    results.into_iter().flatten().collect()
}

/// What the GPU half found for one input set.
#[derive(Default)]
struct Side {
    outputs: Vec<BufferCompare>,
    generator: Vec<TwinCheck>,
    samples: Option<BufferSamples>,
}

/// With `gpu`: the device generator against the CPU twin on this input set's fills, then
/// the reference on the same inputs against the original (and samples of its outputs when
/// `opts.samples_per_buffer` > 0). Without, nothing.
fn compare_side(
    task: &Task,
    r: &Ran,
    seed: u64,
    opts: &CheckOptions,
    gpu: Option<&GpuCheck<'_>>,
    out: &mut Side,
) -> Result<(), String> {
    let Some(g) = gpu else { return Ok(()) };
    let inputs = &r.inputs;
    let bufs = buffers(task);
    for (i, f) in inputs.values.fills.iter().enumerate() {
        let (Some(f), Some(host)) = (f, &inputs.buffers[i]) else {
            continue;
        };
        let (name, dtype, _) = &bufs[i];
        let dev = g
            .gpu
            .device_fill(*dtype, inputs.values.lens[i], buffer_seed(seed, i), f)
            .map_err(|e| e.to_string())?;
        let w = dtype.size_bytes() as usize;
        let differing = dev
            .chunks(w)
            .zip(host.chunks(w))
            .filter(|(a, b)| a != b)
            .count() as u64;
        out.generator.push(TwinCheck {
            buffer: name.clone(),
            elements: inputs.values.lens[i],
            differing,
        });
    }
    let want = reference_outputs(task, r.ci, inputs, g, seed)?;
    out.outputs = against_reference(task, &r.got, &want);
    if opts.samples_per_buffer > 0 {
        out.samples = Some(sample_outputs(task, inputs, &want, opts.samples_per_buffer));
    }
    Ok(())
}
