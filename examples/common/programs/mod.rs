//! A space of kernel programs: for each fixture task, a few knobs (block size, elements per
//! thread, vector width, shared-memory tiling with or without padding, reduction style,
//! synchronisation, unrolling, ...) that a generator renders to CUDA source in the crate's
//! candidate format (`// @launch` plan above the kernels).
//!
//! Every combination renders. Some are meant to fail, so that a reward has something to
//! teach, and [`Program::expect`] says how:
//! * compile errors: a shared-memory tile larger than the 48 KiB a kernel may declare
//!   statically (stencil, 1024 threads × 16 outputs);
//! * invalid launches: a 64 × 64 transpose tile with one row per thread (4096 threads);
//! * incorrect results (only a GPU sees them): elementwise kernels that assume the length is a
//!   multiple of the work per block (the tail is never written), and races: missing
//!   `__syncthreads()` between staging a tile and reading it, warp-synchronous reductions
//!   without `volatile` or `__syncwarp()`;
//! * slow ones: chunked (uncoalesced) element mapping, one thread per row, interleaved
//!   reductions, column-major thread mapping in matmul, unpadded transpose tiles.
//!
//! The examples (`grpo`, `cudaperf_ablation`) and `tests/rl.rs` include this module with
//! `#[path]`; it is example code, not library API (a trainer's policy is an LLM, not a knob
//! table).

mod elementwise;
mod matmul;
mod reduce;
mod rows;
mod stencil;
mod transpose;

/// One knob: a name and its options.
#[derive(Debug, Clone, Copy)]
pub struct Knob {
    /// Name (`block`, `vector`, ...).
    pub name: &'static str,
    /// Option labels, in index order.
    pub options: &'static [&'static str],
}

/// Kinds of task; tasks of one family share a knob table (and a policy head).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Family {
    /// out[i] = f(in0[i], in1[i]).
    Elementwise,
    /// One result (or a normalised row) per row of a matrix.
    RowReduction,
    /// Matrix transpose.
    Transpose,
    /// Matrix product.
    Matmul,
    /// One value from a whole array.
    FullReduction,
    /// 1-D stencil.
    Stencil,
}

impl Family {
    /// Every family, in policy order.
    pub const ALL: [Family; 6] = [
        Family::Elementwise,
        Family::RowReduction,
        Family::Transpose,
        Family::Matmul,
        Family::FullReduction,
        Family::Stencil,
    ];

    /// Position in [`Family::ALL`].
    pub fn index(self) -> usize {
        Family::ALL.iter().position(|f| *f == self).unwrap_or(0)
    }

    /// Name.
    pub fn name(self) -> &'static str {
        match self {
            Family::Elementwise => "elementwise",
            Family::RowReduction => "row_reduction",
            Family::Transpose => "transpose",
            Family::Matmul => "matmul",
            Family::FullReduction => "full_reduction",
            Family::Stencil => "stencil",
        }
    }

    /// The knob table.
    pub fn knobs(self) -> &'static [Knob] {
        match self {
            Family::Elementwise => elementwise::KNOBS,
            Family::RowReduction => rows::KNOBS,
            Family::Transpose => transpose::KNOBS,
            Family::Matmul => matmul::KNOBS,
            Family::FullReduction => reduce::KNOBS,
            Family::Stencil => stencil::KNOBS,
        }
    }

    /// Number of programs (knob combinations).
    pub fn space_size(self) -> usize {
        self.knobs().iter().map(|k| k.options.len()).product()
    }

    /// Every knob combination, in lexicographic order.
    pub fn all_choices(self) -> Vec<Vec<usize>> {
        let mut out = vec![Vec::new()];
        for k in self.knobs() {
            out = out
                .into_iter()
                .flat_map(|prefix| {
                    (0..k.options.len()).map(move |o| {
                        let mut v = prefix.clone();
                        v.push(o);
                        v
                    })
                })
                .collect();
        }
        out
    }
}

/// A fixture task the generator knows.
#[derive(Debug, Clone, Copy)]
pub struct TaskSpec {
    /// Task id (`fixtures/tasks/<id>`).
    pub id: &'static str,
    /// Family.
    pub family: Family,
    /// Not trained on in the examples; used to test transfer within a family.
    pub held_out: bool,
}

/// The tasks: six for training (one per family), three held out (one per family that has a
/// second fixture task with the same kind of kernel).
#[rustfmt::skip]
pub const TASKS: [TaskSpec; 9] = [
    TaskSpec {
        id: "vector_add",
        family: Family::Elementwise,
        held_out: false,
    },
    TaskSpec {
        id: "softmax_rows",
        family: Family::RowReduction,
        held_out: false,
    },
    TaskSpec {
        id: "transpose",
        family: Family::Transpose,
        held_out: false,
    },
    TaskSpec {
        id: "matmul",
        family: Family::Matmul,
        held_out: false,
    },
    TaskSpec {
        id: "max_reduce",
        family: Family::FullReduction,
        held_out: false,
    },
    TaskSpec {
        id: "stencil_1d",
        family: Family::Stencil,
        held_out: false,
    },
    TaskSpec {
        id: "saxpy",
        family: Family::Elementwise,
        held_out: true,
    },
    TaskSpec {
        id: "sum_dim",
        family: Family::RowReduction,
        held_out: true,
    },
    TaskSpec {
        id: "dot_product",
        family: Family::FullReduction,
        held_out: true,
    },
];

/// The spec of a task id.
pub fn spec(id: &str) -> Option<&'static TaskSpec> {
    TASKS.iter().find(|t| t.id == id)
}

/// What a program is meant to do when evaluated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Expect {
    /// Compiles and launches. `risk` names an intended correctness problem that only a GPU
    /// can show (a race, an unwritten tail), if any.
    Runs {
        /// The intended correctness problem.
        risk: Option<&'static str>,
    },
    /// NVRTC/ptxas refuses it; the compile log contains this text.
    CompileError(&'static str),
    /// The launch plan exceeds CUDA's limits; the plan error contains this text.
    InvalidLaunch(&'static str),
}

/// A rendered program.
#[derive(Debug, Clone)]
pub struct Program {
    /// Task id.
    pub task: &'static str,
    /// Knob option indices.
    pub choice: Vec<usize>,
    /// CUDA source in the candidate format.
    pub source: String,
    /// What it is meant to do.
    pub expect: Expect,
}

impl Program {
    /// The program as an LLM-style completion (a fenced code block).
    pub fn completion(&self) -> String {
        format!("```cuda\n{}```\n", self.source)
    }
}

/// `name=option` for every knob.
pub fn describe(family: Family, choice: &[usize]) -> String {
    family
        .knobs()
        .iter()
        .zip(choice)
        .map(|(k, &o)| format!("{}={}", k.name, k.options.get(o).copied().unwrap_or("?")))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Renders the program for `task` with knob options `choice`.
pub fn render(task: &str, choice: &[usize]) -> Result<Program, String> {
    let spec = spec(task).ok_or_else(|| format!("the generator has no task `{task}`"))?;
    let knobs = spec.family.knobs();
    if choice.len() != knobs.len() {
        return Err(format!(
            "{task}: {} knob values for {} knobs",
            choice.len(),
            knobs.len()
        ));
    }
    for (k, &o) in knobs.iter().zip(choice) {
        if o >= k.options.len() {
            return Err(format!("{task}: knob `{}` has no option {o}", k.name));
        }
    }
    let (body, expect) = match spec.family {
        Family::Elementwise => elementwise::render(spec.id, choice),
        Family::RowReduction => rows::render(spec.id, choice),
        Family::Transpose => transpose::render(choice),
        Family::Matmul => matmul::render(choice),
        Family::FullReduction => reduce::render(spec.id, choice),
        Family::Stencil => stencil::render(choice),
    };
    Ok(Program {
        task: spec.id,
        choice: choice.to_vec(),
        // No knob header in the source: knobs that do not change the code (a `sync` option of
        // a kernel without a barrier) give the same source, compiled and measured once.
        source: body,
        expect,
    })
}

/// Replaces every `$KEY$` in `template` by its value.
pub(crate) fn fill(template: &str, vars: &[(&str, String)]) -> String {
    let mut s = template.to_string();
    for (k, v) in vars {
        s = s.replace(&format!("${k}$"), v);
    }
    debug_assert!(!s.contains("$"), "unfilled template key in:\n{s}");
    s
}

/// `#pragma unroll` (or nothing), indented.
pub(crate) fn unroll(on: bool, indent: &str) -> String {
    if on {
        format!("{indent}#pragma unroll\n")
    } else {
        String::new()
    }
}
