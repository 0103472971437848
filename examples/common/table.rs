//! The measured program table (issue 21, "measure once, replay many"): one JSON line per
//! distinct program of the space (`examples/common/space`), with its knobs, its verdict and
//! speedup on the GPU, and its static columns (structure, ranker). `program_table` writes it;
//! `cudaperf_ablation --table` replays it.

use std::collections::BTreeMap;
use std::io::{BufRead, Write};
use std::path::Path;

use cudaperf::pipeline::report::{RankerScores, RankerStage, Stages};
use cudaperf::pipeline::{Evaluation, Verdict};
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
    let r = stages.ranker.as_ref().and_then(RankerStage::scores);
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

/// A small sub-table cut from a measured table, a full product of option subsets per task
/// (what [`super::replay::ReplayTask`] needs): every option of every hazard knob; of the first
/// `varied` speed knobs, the option of the task's best correct program and its neighbour
/// (the next option, or the previous one for the last); the best program's option of the
/// other speed knobs. Rows keep their measured columns; their knobs and weights are those of
/// the cut. With four varied speed knobs: 16 × 16 = 256 rows per task of four hazards.
pub fn cut(rows: &[Row], varied: usize) -> Result<Vec<Row>, String> {
    let mut by: BTreeMap<&str, Vec<&Row>> = BTreeMap::new();
    for r in rows {
        by.entry(r.task.as_str()).or_default().push(r);
    }
    let mut out = Vec::new();
    for (id, rs) in by {
        let t = space::task(id).ok_or_else(|| format!("row of unknown task `{id}`"))?;
        let best = rs
            .iter()
            .filter(|r| r.correct() && r.speedup.is_some_and(f64::is_finite))
            .max_by(|a, b| {
                a.speedup
                    .unwrap_or(0.0)
                    .total_cmp(&b.speedup.unwrap_or(0.0))
            })
            .ok_or_else(|| format!("{id}: no correct row to cut around"))?;
        let mut speed_seen = 0;
        let options: Vec<Vec<usize>> = t
            .knobs
            .iter()
            .zip(&best.knobs)
            .map(|(k, &b)| {
                if k.hazard {
                    return (0..k.options.len()).collect();
                }
                speed_seen += 1;
                if speed_seen > varied || k.options.len() < 2 {
                    return vec![b];
                }
                let other = if b + 1 < k.options.len() {
                    b + 1
                } else {
                    b - 1
                };
                let mut v = vec![b, other];
                v.sort();
                v
            })
            .collect();
        let by_hash: std::collections::HashMap<&str, &Row> =
            rs.iter().map(|r| (r.hash.as_str(), *r)).collect();
        let mut picked: Vec<Row> = Vec::new();
        let mut at: std::collections::HashMap<String, usize> = Default::default();
        let total: usize = options.iter().map(Vec::len).product();
        for mut n in 0..total {
            let mut combo = vec![0; options.len()];
            for i in (0..options.len()).rev() {
                combo[i] = options[i][n % options[i].len()];
                n /= options[i].len();
            }
            let hash = space::source_hash(&t.render(&combo).map_err(|e| e.to_string())?);
            match at.get(&hash) {
                Some(&i) => picked[i].weight += 1,
                None => {
                    let r = by_hash.get(hash.as_str()).ok_or_else(|| {
                        format!(
                            "{id} {}: not in the table (hash {hash})",
                            t.describe(&combo)
                        )
                    })?;
                    let mut r = (*r).clone();
                    r.knobs = combo;
                    r.weight = 1;
                    at.insert(hash, picked.len());
                    picked.push(r);
                }
            }
        }
        out.extend(picked);
    }
    Ok(out)
}

/// The ranker stage of a row's program from its source and task alone: the features of the
/// parsed source, its launch plan on the task's timed configuration (for a model with
/// launch-plan features) and the model's member scores against the task's reference — what
/// the pipeline's ranker stage computes, without its compile, extract and structure stages
/// (the ranker reads none of their results but the parse, so the values are the same).
pub struct RankerScorer {
    ranker: cudaperf::ranker::TrainedRanker,
    names: Vec<String>,
    launch: bool,
    limits: cudaperf::candidate::PlanLimits,
    origin: String,
    /// Per task: the fixture task, its reference's base features and the model's member
    /// scores of the reference.
    tasks: std::collections::HashMap<String, (cudaperf::task::Task, Vec<f32>, Vec<f32>)>,
}

impl RankerScorer {
    /// Loads the model folder `model` (named `model` in the stages it writes).
    pub fn new(model: &Path) -> Result<RankerScorer, String> {
        let ranker = cudaperf::ranker::TrainedRanker::load_unchecked(model)
            .map_err(|e| format!("ranker model {}: {e}", model.display()))?;
        let names = ranker.base_feature_names().to_vec();
        let launch = cudaperf::ranker::FeatureSet::of(&names).needs_plan();
        Ok(RankerScorer {
            ranker,
            names,
            launch,
            limits: Default::default(),
            origin: model.display().to_string(),
            tasks: Default::default(),
        })
    }

    /// Loads a task (and scores its reference) before [`RankerScorer::stage`] needs it.
    pub fn add_task(&mut self, fixtures: &Path, id: &str) -> Result<(), String> {
        if self.tasks.contains_key(id) {
            return Ok(());
        }
        let task = cudaperf::task::Task::load(fixtures.join("tasks").join(id))
            .map_err(|e| format!("task {id}: {e}"))?;
        let src = task.reference.source.clone();
        let what = "the task's reference";
        let f = self
            .base_features(&task, &src, what)
            .map_err(|e| format!("{id}: {e}"))?;
        let (_, reference) = self
            .member_scores(&f, &f)
            .map_err(|e| format!("{id}: {what}: {e}"))?;
        self.tasks.insert(id.to_string(), (task, f, reference));
        Ok(())
    }

    /// The base features ([`cudaperf::ranker::TrainedRanker::base_feature_names`]) of `src` in `task`.
    fn base_features(
        &self,
        task: &cudaperf::task::Task,
        src: &str,
        what: &str,
    ) -> Result<Vec<f32>, String> {
        use cudaperf::ranker::{features_for, TimedPlan};
        let plan = self
            .launch
            .then(|| TimedPlan::of_source(task, src, &self.limits, what))
            .transpose()
            .map_err(|e| e.to_string())?;
        features_for(
            src,
            plan.as_ref().map(|p| p.input(task, src)).as_ref(),
            &self.names,
        )
        .map_err(|e| e.to_string())
    }

    /// The model's input for base features `f` against the reference's, and its member scores.
    fn member_scores(&self, f: &[f32], reference: &[f32]) -> Result<(Vec<f32>, Vec<f32>), String> {
        let x = self
            .ranker
            .input_against(f, reference)
            .map_err(|e| e.to_string())?;
        let scores = self.ranker.member_scores(&x).map_err(|e| e.to_string())?;
        Ok((x, scores))
    }

    /// The base feature names and values of a row's program (rendered again from its knobs).
    pub fn row_features(&self, r: &Row) -> Result<(&[String], Vec<f32>), String> {
        let (src, (task, _, _)) = self.program(r)?;
        Ok((
            &self.names,
            self.base_features(task, &src, "the candidate")?,
        ))
    }

    /// A row's program rendered again from its knobs (an error if it no longer renders the
    /// row's hash) and its added task's entry.
    #[allow(clippy::type_complexity)]
    fn program(
        &self,
        r: &Row,
    ) -> Result<(String, &(cudaperf::task::Task, Vec<f32>, Vec<f32>)), String> {
        let t = space::task(&r.task).ok_or_else(|| format!("row of unknown task `{}`", r.task))?;
        let src = t.render(&r.knobs).map_err(|e| e.to_string())?;
        if space::source_hash(&src) != r.hash {
            return Err(format!(
                "{} {} no longer renders its hash {}: the space changed since it was measured",
                r.task,
                t.describe(&r.knobs),
                r.hash
            ));
        }
        let entry = self
            .tasks
            .get(&r.task)
            .ok_or_else(|| format!("task {} not added", r.task))?;
        Ok((src, entry))
    }

    /// The ranker stage of a row (its program rendered again from its knobs; an error if it
    /// no longer renders the row's hash, or its task was not added).
    pub fn stage(&self, r: &Row) -> Result<RankerScores, String> {
        let (src, (task, ref_features, reference)) = self.program(r)?;
        let f = self.base_features(task, &src, "the candidate")?;
        let (f, cand) = self.member_scores(&f, ref_features)?;
        let verdict = self.ranker.compare_scores(&cand, reference, Some(&f));
        let mean = |v: &[f32]| f64::from(v.iter().sum::<f32>()) / v.len().max(1) as f64;
        Ok(RankerScores {
            candidate_score: mean(&cand),
            reference_score: mean(reference),
            prob_faster: f64::from(verdict.prob_faster),
            model: self.origin.clone(),
            uncertainty: Some(f64::from(verdict.uncertainty)),
            out_of_range: Some(f64::from(verdict.out_of_range)),
        })
    }
}

/// Replaces a row's ranker columns and stage.
pub fn set_ranker(r: &mut Row, scores: RankerScores) {
    r.ranker_margin = Some(scores.candidate_score - scores.reference_score);
    r.ranker_prob = Some(scores.prob_faster);
    r.stages.ranker = Some(RankerStage::Scored(scores));
}

/// Stages as a table stores them: the parts [`slim`] empties are left out of the JSON (the
/// structure stage's features, terms and occupancy, the device description) and read back
/// as empty values (no device), so that a row is about a kilobyte rather than three.
mod compact {
    use cudaperf::pipeline::report::Stages;
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

/// Adds a measured table's correct programs to ranker training data as samples of their
/// task (features with `data`'s names, each program rendered again from its knobs and its
/// launch plan resolved on the task's timed configuration), and up to `pairs_per_task` of
/// their pairs per task as [`cudaperf::ranker::Pair::train_only`] pairs: they train the
/// model, but a held-out task's table pairs are held out with it and no table pair is ever
/// validated or tested on, so cross-validation still reports the dataset's pairs alone.
/// The pairs are spread evenly over all pairs of the task's correct programs in hash order
/// (deterministic), each ordered by the row's speedup (its own reference measured in the
/// same run). Returns (samples, pairs) added.
pub fn add_train_only_pairs(
    data: &mut cudaperf::ranker::RankingData,
    rows: &[Row],
    fixtures: &Path,
    pairs_per_task: usize,
) -> Result<(usize, usize), String> {
    use cudaperf::ranker::{features_for, FeatureSet, Pair, Sample, TimedPlan};
    let set = FeatureSet::of(&data.feature_names);
    let mut by_task: BTreeMap<&str, Vec<&Row>> = BTreeMap::new();
    for r in rows {
        if r.verdict == Verdict::Correct && r.speedup.is_some_and(|s| s > 0.0 && s.is_finite()) {
            by_task.entry(&r.task).or_default().push(r);
        }
    }
    let (mut samples, mut pairs) = (0, 0);
    for (id, mut task_rows) in by_task {
        task_rows.sort_by(|a, b| a.hash.cmp(&b.hash));
        let task = cudaperf::task::Task::load(fixtures.join("tasks").join(id))
            .map_err(|e| format!("table task {id}: {e}"))?;
        let space_task =
            space::task(id).ok_or_else(|| format!("table row of unknown task `{id}`"))?;
        let first = data.samples.len();
        for r in &task_rows {
            let what = format!("table program {id} {}", r.hash);
            let src = space_task
                .render(&r.knobs)
                .map_err(|e| format!("{what}: {e}"))?;
            if space::source_hash(&src) != r.hash {
                return Err(format!("{what}: the space no longer renders this hash"));
            }
            let plan = set
                .needs_plan()
                .then(|| TimedPlan::of_source(&task, &src, &Default::default(), &what))
                .transpose()
                .map_err(|e| e.to_string())?;
            let input = plan.as_ref().map(|p| p.input(&task, &src));
            let features = features_for(&src, input.as_ref(), &data.feature_names)
                .map_err(|e| format!("{what}: {e}"))?;
            data.samples.push(Sample {
                task: id.to_string(),
                kind: task.kind.as_str().to_string(),
                name: format!("table:{}", r.hash),
                features,
            });
        }
        let n = task_rows.len();
        let all = n * n.saturating_sub(1) / 2;
        let step = all.div_ceil(pairs_per_task.max(1)).max(1);
        let mut k = 0;
        for a in 0..n {
            for b in a + 1..n {
                if k % step == 0 {
                    let (sa, sb) = (task_rows[a].speedup.unwrap(), task_rows[b].speedup.unwrap());
                    let (fast, slow) = if sa >= sb { (a, b) } else { (b, a) };
                    data.pairs.push(Pair {
                        fast: first + fast,
                        slow: first + slow,
                        log_ratio: (sa.max(sb) / sa.min(sb)).ln() as f32,
                        train_only: true,
                    });
                    pairs += 1;
                }
                k += 1;
            }
        }
        samples += n;
    }
    data.validate().map_err(|e| e.to_string())?;
    Ok((samples, pairs))
}
