//! Measures every program of the sparse space (`examples/common/space`) once and writes the
//! program table that `cudaperf_ablation --table` replays (issue 21, "measure once, replay
//! many"): one JSON line per distinct program (knobs, hash, verdict, speedup with its 95 %
//! interval, candidate/reference µs, floors, structural score, ranker margin and
//! probability, and the slimmed stages the rewards read).
//!
//! ```text
//! # GPU host (the binary is its own sandbox worker), in shards of <= 9 minutes:
//! cargo build --release --example program_table
//! program_table --shard 0/2 --out table.jsonl        # appends; --resume table.jsonl to go on
//! program_table --shard 1/2 --resume table.jsonl
//! program_table --summary table.jsonl                # sparsity figures
//! # CPU: refresh the structure and ranker columns (a new ranker) of an existing table
//! program_table --static-only table.jsonl --out table2.jsonl
//! # CPU: only the ranker columns (a new ranker), from source and task alone: seconds
//! program_table --ranker-only table.jsonl --ranker-model fixtures/models/ranker-heldout-rl
//! # CPU: the static sparsity figures of the space (hazard-free share, sizes)
//! program_table --space
//! # CPU: every combination of a task's superset (prepared for a re-measure) and its program
//! program_table --superset --tasks transpose --hashes hashes.txt
//! # CPU: the CI sub-table (a few hundred measured rows per task)
//! program_table --cut table.jsonl.gz --out fixtures/rl/program_table.sub.jsonl.gz
//! ```
//! Groups of programs go through `Evaluator::evaluate_groups` (one group per task in each
//! wave) so that one task's compiles overlap another's GPU work.

#[path = "common/mod.rs"]
mod common;

use std::collections::HashSet;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use clap::Parser;
use common::space::{self, Distinct, SpaceTask};
use common::table;
use cudaperf::pipeline::{EvalOptions, Evaluator, Stage, Submission, Verdict};
use cudaperf::task::Task;

#[derive(Parser, Debug)]
#[command(about = "Measure every program of the sparse space once (issue 21)")]
struct Args {
    /// Tasks (comma-separated; default all of the space's).
    #[arg(long, value_delimiter = ',')]
    tasks: Vec<String>,
    /// Measure the i-th of n shards (`i/n`; a program's shard is its index mod n).
    #[arg(long)]
    shard: Option<String>,
    /// Append to this table, skipping the programs it already has.
    #[arg(long)]
    resume: Option<PathBuf>,
    /// Output table (JSON lines; appended to). Default: the --resume file, else
    /// runs/program_table.jsonl.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Programs per group job.
    #[arg(long, default_value_t = 16)]
    group: usize,
    /// Groups per task in each wave (2 lets a lone task's compiles overlap its own GPU
    /// work, as several tasks' groups do).
    #[arg(long, default_value_t = 1)]
    lanes: usize,
    /// Stop starting new waves after this many seconds (resume later).
    #[arg(long, default_value_t = 500)]
    budget_s: u64,
    /// Refresh the static columns (structure, ranker) of this table on the CPU.
    #[arg(long)]
    static_only: Option<PathBuf>,
    /// Refresh only the ranker columns of this table on the CPU, from each row's source and
    /// task alone (no compile: features, launch plan and the model), with --ranker-model;
    /// writes --out (default: the table itself).
    #[arg(long)]
    ranker_only: Option<PathBuf>,
    /// The ranker model folder for --static-only and --ranker-only (default: the shipped
    /// fixtures/models/ranker).
    #[arg(long)]
    ranker_model: Option<PathBuf>,
    /// Measure only these programs: a file of `task hash` lines (e.g. the final programs
    /// of a replayed ablation, to re-measure them); use with a fresh `--out`.
    #[arg(long)]
    only: Option<PathBuf>,
    /// Print the sparsity figures of this table and exit.
    #[arg(long)]
    summary: Option<PathBuf>,
    /// Print the space's sizes and hazard-free shares (no evaluation) and exit.
    #[arg(long)]
    space: bool,
    /// Write every knob combination of the selected tasks as `task hash k0,k1,..` lines
    /// (after a `#knobs task name:kind:options ...` line per task) to this file (no
    /// evaluation) and exit: the map from combinations to programs that a
    /// script needs to pick `--only` lists (tools/gpu/rl-select.py).
    #[arg(long)]
    hashes: Option<PathBuf>,
    /// Cut a small sub-table from this measured table (a full product of option subsets per
    /// task: every hazard, the best program's option and its neighbour of the first four
    /// speed knobs; `table::cut`) and write it to --out (gzipped when it ends in .gz): the
    /// committed CI table fixtures/rl/program_table.sub.jsonl.gz.
    #[arg(long)]
    cut: Option<PathBuf>,
    /// Use the tasks' supersets of speed options (`space::SUPERSETS`, prepared for a
    /// re-measure: tools/gpu/rl-table2.sh) instead of their measured spaces.
    #[arg(long)]
    superset: bool,
    /// Fixtures folder.
    #[arg(long)]
    fixtures: Option<PathBuf>,
}

fn main() {
    common::setup::serve_as_worker_if_asked();
    if let Err(e) = run(Args::parse()) {
        eprintln!("error: {e}");
        std::process::exit(2);
    }
}

fn stamp(start: Instant) -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    format!(
        "[{:02}:{:02}:{:02} +{:.0}s]",
        now / 3600 % 24,
        now / 60 % 60,
        now % 60,
        start.elapsed().as_secs_f64()
    )
}

fn run(args: Args) -> Result<(), String> {
    if let Some(path) = &args.summary {
        print!(
            "{}",
            table::sparsity_text(&table::sparsity(&table::read(path)?))
        );
        return Ok(());
    }
    let tasks = selected(&args.tasks, args.superset)?;
    if let Some(path) = &args.hashes {
        return write_hashes(path, &tasks);
    }
    if args.space {
        println!("task          knobs  combos  distinct  hazard-free");
        for t in &tasks {
            let d = t.distinct();
            let free = d
                .iter()
                .flat_map(|d| &d.choices)
                .filter(|c| t.hazards(c).is_empty())
                .count();
            println!(
                "{:<13} {:>5}  {:>6}  {:>8}  {:>10.2}%",
                t.id,
                t.knobs.len(),
                t.size(),
                d.len(),
                100.0 * free as f64 / t.size() as f64
            );
        }
        return Ok(());
    }
    let fixtures = common::setup::fixtures_root(args.fixtures.as_deref())?;
    if let Some(path) = &args.cut {
        let out = args
            .out
            .clone()
            .ok_or("--cut needs --out (the sub-table to write)")?;
        return cut_table(path, &out);
    }
    let model = args
        .ranker_model
        .clone()
        .unwrap_or_else(|| fixtures.join("models/ranker"));
    if let Some(path) = &args.static_only {
        let out = args.out.clone().unwrap_or_else(|| path.clone());
        return refresh_static(path, &out, &fixtures, &model);
    }
    if let Some(path) = &args.ranker_only {
        let out = args.out.clone().unwrap_or_else(|| path.clone());
        return refresh_ranker(path, &out, &fixtures, &model);
    }
    measure(&args, &tasks, &fixtures)
}

/// See `--hashes`.
fn write_hashes(path: &Path, tasks: &[&'static SpaceTask]) -> Result<(), String> {
    let mut out = String::new();
    for t in tasks {
        // A header per task: `#knobs task name:hazard|speed:opt|opt ...`.
        let knobs: Vec<String> = t
            .knobs
            .iter()
            .map(|k| {
                let kind = if k.hazard { "hazard" } else { "speed" };
                format!("{}:{kind}:{}", k.name, k.options.join("|"))
            })
            .collect();
        out += &format!("#knobs {} {}\n", t.id, knobs.join(" "));
        for d in t.distinct() {
            for c in &d.choices {
                let knobs: Vec<String> = c.iter().map(|v| v.to_string()).collect();
                out += &format!("{} {} {}\n", t.id, d.hash, knobs.join(","));
            }
        }
    }
    std::fs::write(path, out).map_err(|e| format!("{}: {e}", path.display()))?;
    println!("wrote {}", path.display());
    Ok(())
}

fn selected(ids: &[String], superset: bool) -> Result<Vec<&'static SpaceTask>, String> {
    let all: &'static [SpaceTask] = if superset {
        &space::SUPERSETS
    } else {
        &space::TASKS
    };
    if ids.is_empty() {
        return Ok(all.iter().collect());
    }
    ids.iter()
        .map(|id| {
            all.iter().find(|t| t.id == id).ok_or_else(|| {
                format!(
                    "--tasks: the {} has no task `{id}` (it has {})",
                    if superset { "superset" } else { "space" },
                    all.iter().map(|t| t.id).collect::<Vec<_>>().join(", ")
                )
            })
        })
        .collect()
}

/// The `task hash` pairs of an `--only` file.
fn read_only(path: &Path) -> Result<HashSet<(String, String)>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut out = HashSet::new();
    for (i, line) in text.lines().enumerate() {
        let mut parts = line.split_whitespace();
        match (parts.next(), parts.next(), parts.next()) {
            (None, ..) => continue,
            (Some(task), Some(hash), None) => {
                out.insert((task.to_string(), hash.to_string()));
            }
            _ => {
                return Err(format!(
                    "{}:{}: expected `task hash`, got `{line}`",
                    path.display(),
                    i + 1
                ))
            }
        }
    }
    Ok(out)
}

fn parse_shard(s: &str) -> Result<(usize, usize), String> {
    let bad = || format!("--shard `{s}`: expected i/n with 0 <= i < n");
    let (i, n) = s.split_once('/').ok_or_else(bad)?;
    let (i, n): (usize, usize) = (
        i.trim().parse().map_err(|_| bad())?,
        n.trim().parse().map_err(|_| bad())?,
    );
    if n == 0 || i >= n {
        return Err(bad());
    }
    Ok((i, n))
}

/// One task of a measuring run: the task and its programs still to measure.
type Queue = (Task, &'static SpaceTask, Vec<Distinct>);

/// The table rows already measured (`--resume` and the output table).
fn measured_keys(args: &Args, out_path: &Path) -> Result<HashSet<(String, String)>, String> {
    let mut done = HashSet::new();
    for p in args.resume.iter().map(PathBuf::as_path).chain([out_path]) {
        if p.exists() {
            for r in table::read(p)? {
                done.insert((r.task, r.hash));
            }
        }
    }
    Ok(done)
}

/// Per task, its programs of this shard that are neither measured nor left out by --only.
fn queues(
    args: &Args,
    tasks: &[&'static SpaceTask],
    fixtures: &Path,
    done: &HashSet<(String, String)>,
    start: Instant,
) -> Result<Vec<Queue>, String> {
    let (shard, shards) = args
        .shard
        .as_deref()
        .map(parse_shard)
        .transpose()?
        .unwrap_or((0, 1));
    let only = args.only.as_deref().map(read_only).transpose()?;
    let mut queues = Vec::new();
    for &t in tasks {
        let task = Task::load(fixtures.join("tasks").join(t.id))
            .map_err(|e| format!("task {}: {e}", t.id))?;
        let all = t.distinct();
        let n_all = all.len();
        let todo: Vec<Distinct> = all
            .into_iter()
            .enumerate()
            .filter(|(i, d)| {
                let key = (t.id.to_string(), d.hash.clone());
                i % shards == shard
                    && !done.contains(&key)
                    && only.as_ref().is_none_or(|o| o.contains(&key))
            })
            .map(|(_, d)| d)
            .collect();
        println!(
            "{} {}: {} distinct programs, {} to measure in shard {shard}/{shards}",
            stamp(start),
            t.id,
            n_all,
            todo.len()
        );
        queues.push((task, t, todo));
    }
    Ok(queues)
}

/// Measures one wave (`--lanes` groups of `--group` programs per task with work left,
/// through `evaluate_groups`); `None` when no work is left.
fn measure_wave(
    evaluator: &Evaluator,
    queues: &mut [Queue],
    args: &Args,
) -> Option<Vec<table::Row>> {
    let mut chunks: Vec<(usize, Vec<Distinct>)> = Vec::new();
    for _ in 0..args.lanes.max(1) {
        for (k, q) in queues
            .iter_mut()
            .enumerate()
            .filter(|(_, q)| !q.2.is_empty())
        {
            let n = args.group.max(1).min(q.2.len());
            chunks.push((k, q.2.drain(..n).collect()));
        }
    }
    if chunks.is_empty() {
        return None;
    }
    let subs: Vec<Vec<Submission>> = chunks
        .iter()
        .map(|(_, ds)| {
            ds.iter()
                .map(|d| Submission::from_source(d.source.clone()))
                .collect()
        })
        .collect();
    let groups: Vec<(&Task, &[Submission])> = chunks
        .iter()
        .zip(&subs)
        .map(|((k, _), s)| (&queues[*k].0, s.as_slice()))
        .collect();
    let evals = evaluator.evaluate_groups(&groups, Stage::Timing);
    let mut rows = Vec::new();
    for ((k, ds), es) in chunks.iter().zip(evals) {
        for (d, e) in ds.iter().zip(es) {
            rows.push(table::row_from(queues[*k].1, d, e.verdict(), e.stages));
        }
    }
    Some(rows)
}

fn measure(args: &Args, tasks: &[&'static SpaceTask], fixtures: &Path) -> Result<(), String> {
    let start = Instant::now();
    if !common::setup::gpu_present() {
        return Err("measuring the table needs a GPU (none found); --space, --summary, --hashes, --cut, --static-only and --ranker-only run without one".into());
    }
    let out_path = args
        .out
        .clone()
        .or_else(|| args.resume.clone())
        .unwrap_or_else(|| PathBuf::from("runs/program_table.jsonl"));
    let done = measured_keys(args, &out_path)?;
    if let Some(dir) = out_path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    let mut out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&out_path)
        .map_err(|e| format!("{}: {e}", out_path.display()))?;
    let mut queues = queues(args, tasks, fixtures, &done, start)?;
    let evaluator = common::setup::evaluator(fixtures, true, None);
    let total: usize = queues.iter().map(|q| q.2.len()).sum();
    let (mut measured, mut correct, mut wave) = (0usize, 0usize, 0usize);
    loop {
        if start.elapsed().as_secs() >= args.budget_s {
            println!(
                "{} budget of {} s reached: {measured}/{total} measured; go on with --resume {}",
                stamp(start),
                args.budget_s,
                out_path.display()
            );
            break;
        }
        let Some(rows) = measure_wave(&evaluator, &mut queues, args) else {
            break;
        };
        measured += rows.len();
        correct += rows.iter().filter(|r| r.correct()).count();
        table::append(&mut out, &rows)?;
        wave += 1;
        let unavailable = rows
            .iter()
            .filter(|r| r.verdict == Verdict::Unavailable)
            .count();
        println!(
            "{} wave {wave}: {measured}/{total} measured, {correct} correct{}",
            stamp(start),
            if unavailable > 0 {
                format!(", {unavailable} UNAVAILABLE in this wave (not the programs' fault: re-run them)")
            } else {
                String::new()
            }
        );
    }
    drop(out);
    println!("{} table {}:", stamp(start), out_path.display());
    print!(
        "{}",
        table::sparsity_text(&table::sparsity(&table::read(&out_path)?))
    );
    Ok(())
}

/// Recomputes the structure and ranker columns of every row on the CPU (the programs are
/// rendered again from their knobs; a row whose source no longer matches its hash is an
/// error: the space changed since the table was measured).
fn refresh_static(path: &Path, out: &Path, fixtures: &Path, model: &Path) -> Result<(), String> {
    let start = Instant::now();
    let mut rows = table::read(path)?;
    let mut o = EvalOptions {
        no_gpu: true,
        ranker_model: Some(model.to_path_buf()),
        ..EvalOptions::default()
    };
    // The space's kernels are this repository's own: compiled in-process (trusted).
    o.compile.isolation = cudaperf::compile::Isolation::InProcess;
    let evaluator = Evaluator::new(o).map_err(|e| e.to_string())?;
    let ids: Vec<String> = {
        let mut v: Vec<String> = rows.iter().map(|r| r.task.clone()).collect();
        v.sort();
        v.dedup();
        v
    };
    for id in ids {
        let t = space::task(&id)
            .ok_or_else(|| format!("{}: row of unknown task `{id}`", path.display()))?;
        let task = Task::load(fixtures.join("tasks").join(t.id)).map_err(|e| e.to_string())?;
        let idx: Vec<usize> = (0..rows.len()).filter(|&i| rows[i].task == id).collect();
        let mut subs = Vec::new();
        for &i in &idx {
            let src = t.render(&rows[i].knobs).map_err(|e| e.to_string())?;
            if space::source_hash(&src) != rows[i].hash {
                return Err(format!(
                    "{}: row {} ({} {}) no longer renders its hash {}: the space changed since it was measured",
                    path.display(),
                    i + 1,
                    id,
                    t.describe(&rows[i].knobs),
                    rows[i].hash
                ));
            }
            subs.push(Submission::from_source(src));
        }
        let evals = evaluator.evaluate_batch(&task, &subs, Stage::Ranker);
        for (&i, e) in idx.iter().zip(evals) {
            let r = &mut rows[i];
            let fresh = table::slim(e.stages);
            r.structure = fresh.structure.as_ref().map(|s| s.score);
            let rk = fresh.ranker.as_ref().and_then(|k| k.scores());
            r.ranker_margin = rk.map(|k| k.candidate_score - k.reference_score);
            r.ranker_prob = rk.map(|k| k.prob_faster);
            r.stages.structure = fresh.structure;
            r.stages.ranker = fresh.ranker;
        }
        println!("{} {id}: {} rows refreshed", stamp(start), idx.len());
    }
    write_rows(&rows, out)
}

/// Writes a whole table through a temporary file (the input may be the output).
fn write_rows(rows: &[table::Row], out: &Path) -> Result<(), String> {
    let tmp = out.with_extension("tmp");
    {
        let mut f = std::fs::File::create(&tmp).map_err(|e| format!("{}: {e}", tmp.display()))?;
        table::append(&mut f, rows)?;
        f.flush().map_err(|e| e.to_string())?;
    }
    std::fs::rename(&tmp, out).map_err(|e| format!("{}: {e}", out.display()))?;
    println!("wrote {}", out.display());
    Ok(())
}

/// Recomputes the ranker columns of every row from its source and task alone
/// ([`table::RankerScorer`]: no compile, extract or structure stage), the rows split over
/// the machine's cores.
fn refresh_ranker(path: &Path, out: &Path, fixtures: &Path, model: &Path) -> Result<(), String> {
    let start = Instant::now();
    let mut rows = table::read(path)?;
    let mut scorer = table::RankerScorer::new(model)?;
    for r in &rows {
        scorer.add_task(fixtures, &r.task)?;
    }
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let chunk = rows.len().div_ceil(threads).max(1);
    let scorer = &scorer;
    let stages: Vec<Result<cudaperf::pipeline::report::RankerScores, String>> =
        std::thread::scope(|s| {
            let handles: Vec<_> = rows
                .chunks(chunk)
                .map(|part| {
                    s.spawn(move || part.iter().map(|r| scorer.stage(r)).collect::<Vec<_>>())
                })
                .collect();
            handles
                .into_iter()
                .flat_map(|h| {
                    h.join()
                        .unwrap_or_else(|_| vec![Err("scoring thread panicked".into())])
                })
                .collect()
        });
    if stages.len() != rows.len() {
        return Err("ranker scoring lost rows (a thread panicked)".into());
    }
    for (r, st) in rows.iter_mut().zip(stages) {
        table::set_ranker(r, st.map_err(|e| format!("{}: {e}", path.display()))?);
    }
    println!(
        "{} {} rows scored with {} ({threads} threads)",
        stamp(start),
        rows.len(),
        model.display()
    );
    write_rows(&rows, out)
}

/// See `--cut`.
fn cut_table(path: &Path, out: &Path) -> Result<(), String> {
    let rows = table::read(path)?;
    let sub = table::cut(&rows, 4)?;
    let text = sub
        .iter()
        .map(|r| serde_json::to_string(r).map_err(|e| e.to_string()))
        .collect::<Result<Vec<_>, _>>()?
        .join("\n")
        + "\n";
    if out.extension().is_some_and(|e| e == "gz") {
        let f = std::fs::File::create(out).map_err(|e| format!("{}: {e}", out.display()))?;
        let mut gz = flate2::write::GzEncoder::new(f, flate2::Compression::best());
        gz.write_all(text.as_bytes())
            .and_then(|_| gz.finish().map(drop))
            .map_err(|e| format!("{}: {e}", out.display()))?;
    } else {
        std::fs::write(out, text).map_err(|e| format!("{}: {e}", out.display()))?;
    }
    println!(
        "wrote {} ({} rows cut from {})",
        out.display(),
        sub.len(),
        path.display()
    );
    print!("{}", table::sparsity_text(&table::sparsity(&sub)));
    Ok(())
}
