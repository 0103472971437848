//! The measured program table (issue 21, "measure once, replay many"): one JSON line per
//! distinct program of the space (`examples/common/space`), with its knobs, its verdict and
//! speedup on the GPU, and its static columns (structure, ranker). `program_table` writes it;
//! `cudaperf_ablation --table` replays it.

use std::collections::BTreeMap;
use std::io::{BufRead, Write};
use std::path::Path;

use cudaperf::reward::{Evaluation, Stages, Verdict};
use serde::{Deserialize, Serialize};

use super::space;

/// One row: a distinct program and what it earned.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Row {
    /// Task id.
    pub task: String,
    /// Knob values of the first combination that renders the program.
    pub knobs: Vec<usize>,
    /// How many knob combinations render it (its weight under a uniform policy).
    pub weight: usize,
    /// Unsafe hazard knobs.
    pub hazards: Vec<String>,
    /// `space::source_hash` of the source.
    pub hash: String,
    /// Verdict of the GPU evaluation (`correct`, `incorrect`, `cuda_error`, ...).
    pub verdict: Verdict,
    /// Pass rate over the configurations, when the GPU stages ran.
    pub pass_rate: Option<f64>,
    /// The speedup awarded (correct programs).
    pub speedup: Option<f64>,
    /// Bootstrap 95 % interval of the speedup ratio.
    pub ci95: Option<[f64; 2]>,
    /// Candidate median time, µs.
    pub candidate_us: Option<f64>,
    /// Reference median time, µs.
    pub reference_us: Option<f64>,
    /// Bytes floor of the timed config, µs.
    pub floor_us: Option<f64>,
    /// FLOPs floor of the timed config, µs.
    pub compute_floor_us: Option<f64>,
    /// Structural score in [-1, 1].
    pub structure: Option<f64>,
    /// Ranker: s_cand − s_ref.
    pub ranker_margin: Option<f64>,
    /// Ranker: P(candidate faster than the reference).
    pub ranker_prob: Option<f64>,
    /// The stages the rewards read, slimmed (no compile log, no per-finding features, no
    /// per-config details, no device description): rebuilt with `Evaluation::from_stages`
    /// to score the row.
    #[serde(with = "compact")]
    pub stages: Stages,
    /// The GPU columns were made up (a bookkeeping fixture for tests), not measured.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub synthetic: bool,
}

impl Row {
    /// Whether the program passed every check.
    pub fn correct(&self) -> bool {
        self.verdict == Verdict::Correct
    }

    /// The row's evaluation, for the crate's rewards.
    pub fn evaluation(&self) -> Evaluation {
        Evaluation::from_stages(self.stages.clone())
    }
}

/// Drops what no reward reads from stored stages (kept: every verdict input, the timing
/// numbers, the structure and ranker scores).
pub fn slim(mut stages: Stages) -> Stages {
    if let Some(c) = &mut stages.compile {
        c.log.clear();
    }
    if let Some(s) = &mut stages.structure {
        s.features = Default::default();
        s.terms.clear();
        s.occupancy.clear();
    }
    if let Some(c) = &mut stages.correctness {
        // The pass rate and the verdict stay; per-config details are the feedback's.
        c.configs.clear();
    }
    if let Some(t) = &mut stages.timing {
        t.occupancy.clear();
    }
    stages
}

/// The columns of a row read from its stages.
pub fn row_from(
    task: &space::SpaceTask,
    d: &space::Distinct,
    verdict: Verdict,
    stages: Stages,
) -> Row {
    let t = stages.timing.as_ref();
    let r = stages.ranker.as_ref().filter(|r| r.error.is_none());
    Row {
        task: task.id.to_string(),
        knobs: d.choices[0].clone(),
        weight: d.choices.len(),
        hazards: task
            .hazards(&d.choices[0])
            .iter()
            .map(|h| h.to_string())
            .collect(),
        hash: d.hash.clone(),
        verdict,
        pass_rate: stages.correctness.as_ref().map(|c| c.pass_rate),
        speedup: t.filter(|_| verdict == Verdict::Correct).map(|t| t.speedup),
        ci95: t
            .map(|t| t.ci95)
            .filter(|c| c[0].is_finite() && c[1].is_finite()),
        candidate_us: t.map(|t| t.candidate_us),
        reference_us: t.map(|t| t.reference_us),
        floor_us: t.map(|t| t.floor_us),
        compute_floor_us: t.map(|t| t.compute_floor_us),
        structure: stages.structure.as_ref().map(|s| s.score),
        ranker_margin: r.map(|r| r.candidate_score - r.reference_score),
        ranker_prob: r.map(|r| r.prob_faster),
        stages: slim(stages),
        synthetic: false,
    }
}

/// Reads a table (JSON lines, gzipped when the name ends in `.gz`; blank lines skipped).
pub fn read(path: &Path) -> Result<Vec<Row>, String> {
    let file = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let reader: Box<dyn std::io::Read> = if path.extension().is_some_and(|e| e == "gz") {
        Box::new(flate2::read::GzDecoder::new(file))
    } else {
        Box::new(file)
    };
    let mut rows = Vec::new();
    for (i, line) in std::io::BufReader::new(reader).lines().enumerate() {
        let line = line.map_err(|e| format!("{}:{}: {e}", path.display(), i + 1))?;
        if line.trim().is_empty() {
            continue;
        }
        rows.push(
            serde_json::from_str(&line)
                .map_err(|e| format!("{}:{}: not a table row: {e}", path.display(), i + 1))?,
        );
    }
    Ok(rows)
}

/// Appends rows to `out` (one JSON line each) and flushes.
pub fn append(out: &mut impl Write, rows: &[Row]) -> Result<(), String> {
    for r in rows {
        let line = serde_json::to_string(r).map_err(|e| e.to_string())?;
        writeln!(out, "{line}").map_err(|e| e.to_string())?;
    }
    out.flush().map_err(|e| e.to_string())
}

/// Sparsity of one task's table under a uniform policy over knob combinations.
#[derive(Debug, Clone, Serialize)]
pub struct Sparsity {
    /// Task id.
    pub task: String,
    /// Distinct programs in the table.
    pub programs: usize,
    /// Knob combinations the rows cover.
    pub combinations: usize,
    /// Fraction of combinations whose program is correct.
    pub correct: f64,
    /// Fraction of combinations free of hazard knobs (by design; no GPU needed).
    pub hazard_free: f64,
    /// The best speedup of a correct program.
    pub best: Option<f64>,
    /// Fraction of combinations whose program is correct and ≥ 0.9 × the best.
    pub near_best: f64,
    /// Correct programs whose verdict disagrees with the design (correct with a hazard, or
    /// not correct without one): each is a finding about the space.
    pub surprises: usize,
}

/// Sparsity figures per task (sorted by task id).
pub fn sparsity(rows: &[Row]) -> Vec<Sparsity> {
    let mut by: BTreeMap<&str, Vec<&Row>> = BTreeMap::new();
    for r in rows {
        by.entry(r.task.as_str()).or_default().push(r);
    }
    by.into_iter()
        .map(|(task, rs)| {
            let total: usize = rs.iter().map(|r| r.weight).sum();
            let w = |f: &dyn Fn(&Row) -> bool| {
                rs.iter().filter(|r| f(r)).map(|r| r.weight).sum::<usize>() as f64
                    / total.max(1) as f64
            };
            let best = best_speedup(rs.iter().copied());
            Sparsity {
                task: task.to_string(),
                programs: rs.len(),
                combinations: total,
                correct: w(&|r| r.correct()),
                hazard_free: w(&|r| r.hazards.is_empty()),
                best,
                near_best: best.map_or(0.0, |b| {
                    w(&|r| r.correct() && r.speedup.is_some_and(|s| s >= 0.9 * b))
                }),
                surprises: rs
                    .iter()
                    .filter(|r| r.correct() != r.hazards.is_empty())
                    .count(),
            }
        })
        .collect()
}

/// The best speedup of a correct row.
pub fn best_speedup<'a>(rows: impl IntoIterator<Item = &'a Row>) -> Option<f64> {
    rows.into_iter()
        .filter(|r| r.correct())
        .filter_map(|r| r.speedup)
        .filter(|s| s.is_finite())
        .max_by(f64::total_cmp)
}

/// The sparsity figures as text lines.
pub fn sparsity_text(s: &[Sparsity]) -> String {
    let mut out = String::from(
        "task          programs  combos  correct  hazard-free  best      >=0.9x best  surprises\n",
    );
    for x in s {
        out += &format!(
            "{:<13} {:>8}  {:>6}  {:>6.2}%  {:>10.2}%  {:>8}  {:>10.4}%  {:>9}\n",
            x.task,
            x.programs,
            x.combinations,
            100.0 * x.correct,
            100.0 * x.hazard_free,
            x.best.map_or("-".into(), |b| format!("{b:.2}x")),
            100.0 * x.near_best,
            x.surprises
        );
    }
    out
}

/// Stages as a table stores them: the parts [`slim`] empties are left out of the JSON (the
/// structure stage's features, terms and occupancy, the device description) and read back
/// as empty values (no device), so that a row is about a kilobyte rather than three.
mod compact {
    use cudaperf::reward::Stages;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};
    use serde_json::Value;

    pub fn serialize<S: Serializer>(stages: &Stages, s: S) -> Result<S::Ok, S::Error> {
        let mut v = serde_json::to_value(stages).map_err(serde::ser::Error::custom)?;
        if let Some(st) = v.get_mut("structure").and_then(Value::as_object_mut) {
            st.remove("features");
            st.remove("terms");
            st.remove("occupancy");
        }
        if let Some(ex) = v.get_mut("execute").and_then(Value::as_object_mut) {
            ex.remove("device");
        }
        v.serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Stages, D::Error> {
        let mut v = Value::deserialize(d)?;
        if let Some(st) = v.get_mut("structure").and_then(Value::as_object_mut) {
            let features = serde_json::to_value(cudaperf::analysis::Features::default())
                .map_err(serde::de::Error::custom)?;
            st.entry("features").or_insert(features);
            st.entry("terms").or_insert(Value::Array(Vec::new()));
            st.entry("occupancy").or_insert(Value::Array(Vec::new()));
        }
        // `execute.device` is optional: read back as none.
        serde_json::from_value(v).map_err(serde::de::Error::custom)
    }
}
