//! The text an LLM policy sees for a task.

use std::fmt::Write;

use crate::compile::ALLOWED_INCLUDES;
use crate::task::{Direction, Param, Task, TaskKind};

impl Task {
    /// The RL prompt: the original program, the kernel ABI, the configurations, and exact
    /// instructions for the candidate format (`@launch` lines).
    pub fn prompt(&self) -> String {
        let mut p = String::new();
        let (what, lang) = match self.kind {
            TaskKind::C2cuda => ("C function", "c"),
            TaskKind::Torch2cuda => ("PyTorch module", "python"),
        };
        let _ = writeln!(
            p,
            "Write a fast CUDA implementation of this {what} ({}).\n",
            self.title
        );
        let _ = writeln!(p, "```{lang}\n{}\n```\n", self.original.trim_end());
        let _ = writeln!(
            p,
            "Kernel parameters, in this order (the default arguments of every launch):"
        );
        self.write_params(&mut p);
        let _ = writeln!(
            p,
            "\nIt is checked on these sizes (and timed on the largest):"
        );
        for c in &self.configs {
            let sizes: Vec<String> = c.sizes.iter().map(|(k, v)| format!("{k} = {v}")).collect();
            let _ = writeln!(p, "- {}", sizes.join(", "));
        }
        let _ = writeln!(
            p,
            "\nOutputs must match the original within |got - want| <= {} + {} * |want| on every element.",
            self.tolerance.atol, self.tolerance.rtol
        );
        if self
            .buffers()
            .any(|b| b.direction.is_input() && b.dtype.is_float())
        {
            let _ = writeln!(
                p,
                "Precision: {}; results that ignore what that precision keeps are judged incorrect.",
                self.precision.describe()
            );
        }
        self.write_regimes(&mut p);
        self.write_answer_format(&mut p);
        p
    }

    /// The ABI, one line per parameter.
    fn write_params(&self, p: &mut String) {
        for param in &self.params {
            match param {
                Param::Buffer {
                    name,
                    direction,
                    dtype,
                    len,
                    ..
                } => {
                    let role = match direction {
                        Direction::In => "input, read-only",
                        Direction::Out => "output",
                        Direction::Inout => "input and output",
                    };
                    let c = if *direction == Direction::In {
                        "const "
                    } else {
                        ""
                    };
                    let _ = writeln!(
                        p,
                        "- `{c}{}* {name}`: {role}, {len} elements",
                        dtype.cuda_type()
                    );
                }
                Param::Scalar { name, dtype, value } => {
                    let _ = writeln!(p, "- `{} {name}` = {value}", dtype.cuda_type());
                }
            }
        }
    }

    /// The extra input regimes correctness is checked on, if any.
    fn write_regimes(&self, p: &mut String) {
        if !self.regimes.is_empty() {
            let _ = writeln!(
                p,
                "Besides the inputs described above, correctness is also checked on:"
            );
            for r in &self.regimes {
                let _ = writeln!(
                    p,
                    "- {}{}",
                    r.name.replace('_', " "),
                    if r.why.is_empty() {
                        String::new()
                    } else {
                        format!(": {}", r.why)
                    }
                );
            }
        }
    }

    /// How to answer: the code block, the launch plan's syntax, the signature and the rules.
    fn write_answer_format(&self, p: &mut String) {
        let _ = write!(
            p,
            "\nAnswer with one ```cuda code block. Above the kernels, give the launch plan as comments, one line per launch, run in order on one stream:\n\
             // @launch KERNEL grid=(X[,Y[,Z]]) block=(X[,Y[,Z]]) [smem=(BYTES)] [args=(A, B, ...)]\n\
             // @scratch NAME DTYPE (LENGTH)      (optional temporary buffer, zeroed before each run)\n\
             Expressions may use the size names, integers, + - * / %, min(a, b), max(a, b), ceil_div(a, b). \
             Without args=(...), a launch receives the parameters above in order; args may name parameters, scratch buffers or integer expressions (passed as int).\n\
             Declare kernels `extern \"C\" __global__` with the signature {}. \
             Only these headers may be included: {}. \
             Every output element must be written on every run (outputs start as NaN), inputs must not be modified, and the result must not depend on anything but the inputs.\n\
             Example:\n\
             ```cuda\n// @launch my_kernel grid=(ceil_div({}, 256)) block=(256)\nextern \"C\" __global__ void my_kernel{} {{ ... }}\n```\n",
            self.signature(),
            ALLOWED_INCLUDES.join(", "),
            self.configs.first().and_then(|c| c.sizes.keys().next()).map_or("n", String::as_str),
            self.signature(),
        );
    }
}
