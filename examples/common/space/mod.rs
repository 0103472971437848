//! A sparse program space for the measure-once-replay-many ablation (issue 21): for three
//! fixture tasks (`matmul`, `softmax_rows`, `transpose`), kernels rendered from independent
//! knobs of two kinds:
//! * **hazard knobs** (binary; option 0 is safe, option 1 is a real bug on the task's
//!   configurations): a missing `__syncthreads()`, a launch grid that assumes the sizes are
//!   multiples of the tile, a loop that assumes the row length is a multiple of the chunk, a
//!   warp reduction whose total only lane 0 holds, a boundary off by one. Each task has four,
//!   so under a uniform policy 1 sample in 16 is free of them (6.25 %);
//! * **speed knobs** (tiling, padding, vector width, register blocking, launch shape,
//!   unrolling): every combination is a correct kernel, and only few approach the best.
//!
//! Every combination renders a kernel that compiles (`tests/space.rs` compiles a sample of
//! each task with NVRTC; `program_table` compiles all of them). The module is example code,
//! included with `#[path]` like the rest of `examples/common`.

mod gemm;
mod softmax;
mod transpose;

use sha2::{Digest, Sha256};

/// One knob of a task's space.
#[derive(Debug, Clone, Copy)]
pub struct Knob {
    /// Name (`tile`, `barrier`, ...).
    pub name: &'static str,
    /// Option labels, in index order.
    pub options: &'static [&'static str],
    /// A hazard knob: option 0 is safe, every other option is a bug on the task's configs.
    pub hazard: bool,
}

/// A task of the space: its fixture id and knobs.
#[derive(Debug, Clone, Copy)]
pub struct SpaceTask {
    /// Task id (`fixtures/tasks/<id>`).
    pub id: &'static str,
    /// Knobs, hazards and speed knobs, in the order of a choice vector.
    pub knobs: &'static [Knob],
    render: fn(&[usize]) -> String,
}

/// The three tasks of the space.
pub const TASKS: [SpaceTask; 3] = [
    SpaceTask {
        id: "matmul",
        knobs: gemm::KNOBS,
        render: gemm::render,
    },
    SpaceTask {
        id: "softmax_rows",
        knobs: softmax::KNOBS,
        render: softmax::render,
    },
    SpaceTask {
        id: "transpose",
        knobs: transpose::KNOBS,
        render: transpose::render,
    },
];

/// Supersets of speed options a task's measured space was picked from
/// (`program_table --superset`, tools/gpu/rl-table2.sh, then tools/gpu/rl-narrow.py): each
/// renders the programs of its task's measured space unchanged and adds knobs or options.
pub const SUPERSETS: [SpaceTask; 1] = [SpaceTask {
    id: "transpose",
    knobs: transpose::SUPERSET,
    render: transpose::render_superset,
}];

/// The space task with this id.
pub fn task(id: &str) -> Option<&'static SpaceTask> {
    TASKS.iter().find(|t| t.id == id)
}

/// The superset with this task id.
pub fn superset(id: &str) -> Option<&'static SpaceTask> {
    SUPERSETS.iter().find(|t| t.id == id)
}

/// A choice vector that does not fit a task's knobs.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChoiceError {
    /// Wrong number of knob values.
    #[error("{task}: {got} knob values for {want} knobs")]
    Length {
        /// Task id.
        task: &'static str,
        /// Values given.
        got: usize,
        /// Knobs.
        want: usize,
    },
    /// A value past a knob's options.
    #[error("{task}: knob `{knob}` has {options} options, not option {value}")]
    Option {
        /// Task id.
        task: &'static str,
        /// Knob name.
        knob: &'static str,
        /// Options of the knob.
        options: usize,
        /// The value given.
        value: usize,
    },
}

impl SpaceTask {
    /// Number of knob combinations.
    pub fn size(&self) -> usize {
        self.knobs.iter().map(|k| k.options.len()).product()
    }

    /// Checks a choice vector against the knobs.
    pub fn check(&self, choice: &[usize]) -> Result<(), ChoiceError> {
        if choice.len() != self.knobs.len() {
            return Err(ChoiceError::Length {
                task: self.id,
                got: choice.len(),
                want: self.knobs.len(),
            });
        }
        for (k, &v) in self.knobs.iter().zip(choice) {
            if v >= k.options.len() {
                return Err(ChoiceError::Option {
                    task: self.id,
                    knob: k.name,
                    options: k.options.len(),
                    value: v,
                });
            }
        }
        Ok(())
    }

    /// The CUDA source (candidate format, `// @launch` plan first) of a choice.
    pub fn render(&self, choice: &[usize]) -> Result<String, ChoiceError> {
        self.check(choice)?;
        Ok((self.render)(choice))
    }

    /// The hazard knobs set to an unsafe option.
    pub fn hazards(&self, choice: &[usize]) -> Vec<&'static str> {
        self.knobs
            .iter()
            .zip(choice)
            .filter(|(k, &v)| k.hazard && v != 0)
            .map(|(k, _)| k.name)
            .collect()
    }

    /// `name=option` for every knob.
    pub fn describe(&self, choice: &[usize]) -> String {
        self.knobs
            .iter()
            .zip(choice)
            .map(|(k, &o)| format!("{}={}", k.name, k.options.get(o).copied().unwrap_or("?")))
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// The choice at position `index` of the lexicographic order (last knob fastest).
    pub fn choice_at(&self, mut index: usize) -> Vec<usize> {
        let mut out = vec![0; self.knobs.len()];
        for (i, k) in self.knobs.iter().enumerate().rev() {
            out[i] = index % k.options.len();
            index /= k.options.len();
        }
        out
    }

    /// Every distinct program (by [`source_hash`]), in order of first appearance, with the
    /// knob combinations that render it (a uniform policy samples it with probability
    /// `choices.len() / size()`).
    pub fn distinct(&self) -> Vec<Distinct> {
        let mut out: Vec<Distinct> = Vec::new();
        let mut at = std::collections::HashMap::new();
        for i in 0..self.size() {
            let choice = self.choice_at(i);
            let source = (self.render)(&choice);
            let hash = source_hash(&source);
            match at.get(&hash) {
                Some(&j) => {
                    let d: &mut Distinct = &mut out[j];
                    d.choices.push(choice)
                }
                None => {
                    at.insert(hash.clone(), out.len());
                    out.push(Distinct {
                        hash,
                        source,
                        choices: vec![choice],
                    });
                }
            }
        }
        out
    }
}

/// One distinct program of a task's space.
#[derive(Debug, Clone)]
pub struct Distinct {
    /// [`source_hash`] of the source.
    pub hash: String,
    /// The source of its first knob combination.
    pub source: String,
    /// Every knob combination that renders it.
    pub choices: Vec<Vec<usize>>,
}

/// The source with comments dropped and runs of white space collapsed: two renders that
/// differ only there are one program.
pub fn normalise(source: &str) -> String {
    let mut out = String::with_capacity(source.len());
    for line in source.lines() {
        // `// @launch` and `// @scratch` are the launch plan: they stay.
        let code = match line.find("//") {
            Some(i) if !line[i..].starts_with("// @") => &line[..i],
            _ => line,
        };
        for word in code.split_whitespace() {
            if !out.is_empty() {
                out.push(' ');
            }
            out.push_str(word);
        }
    }
    out
}

/// First 16 hex digits of the SHA-256 of the [`normalise`]d source.
pub fn source_hash(source: &str) -> String {
    let digest = Sha256::digest(normalise(source).as_bytes());
    digest[..8].iter().map(|b| format!("{b:02x}")).collect()
}

/// Replaces every `$KEY$` in `template` by its value.
pub(crate) fn fill(template: &str, vars: &[(&str, String)]) -> String {
    let mut s = template.to_string();
    for (k, v) in vars {
        s = s.replace(&format!("${k}$"), v);
    }
    debug_assert!(!s.contains('$'), "unfilled template key in:\n{s}");
    s
}

/// `#pragma unroll` with a count (`1` keeps the loop rolled, `0` unrolls fully).
pub(crate) fn pragma(count: usize) -> String {
    if count == 0 {
        "#pragma unroll".into()
    } else {
        format!("#pragma unroll {count}")
    }
}
