//! Arithmetic: FLOPs in loop bodies, special functions, FMAs, reduced precision,
//! tensor cores (WMMA and `mma.sync` in inline assembly).

use super::node::NodeExt;
use tree_sitter::Node;

use super::parse::text;
use super::walk::Walker;

/// Transcendental and other special-function-unit calls.
pub(crate) fn is_special_function(name: &str) -> bool {
    matches!(
        name,
        "expf"
            | "__expf"
            | "exp"
            | "exp2f"
            | "exp2"
            | "exp10f"
            | "__exp10f"
            | "expm1f"
            | "logf"
            | "__logf"
            | "log"
            | "log2f"
            | "__log2f"
            | "log10f"
            | "__log10f"
            | "log1pf"
            | "sqrtf"
            | "sqrt"
            | "__fsqrt_rn"
            | "rsqrtf"
            | "rsqrt"
            | "cbrtf"
            | "rcbrtf"
            | "sinf"
            | "__sinf"
            | "sin"
            | "cosf"
            | "__cosf"
            | "cos"
            | "sincosf"
            | "__sincosf"
            | "tanf"
            | "__tanf"
            | "tanhf"
            | "tanh"
            | "powf"
            | "__powf"
            | "pow"
            | "erff"
            | "erf"
            | "erfcf"
            | "__fdividef"
            | "__frcp_rn"
            | "hexp"
            | "h2exp"
            | "hsqrt"
            | "h2sqrt"
            | "hrsqrt"
            | "h2rsqrt"
            | "hlog"
            | "h2log"
            | "hsin"
            | "hcos"
            | "atanf"
            | "atan2f"
    )
}

/// Issue cost of a special-function call in FP32-lane slots beyond its one FLOP, and whether
/// its name is the unsuffixed one (`exp`, not `expf`) whose cost depends on the argument's
/// precision. Round figures from the instruction sequences nvcc emits: an SFU intrinsic is
/// one quarter-rate MUFU op, accurate float functions add range reduction and polynomial
/// FMAs, `powf` is a log, a multiply and an exp with special cases.
pub fn special_function_cost(name: &str) -> (f64, bool) {
    let unsuffixed = matches!(
        name,
        "exp" | "exp2" | "log" | "sqrt" | "rsqrt" | "sin" | "cos" | "tanh" | "pow" | "erf"
    );
    let cost = match name {
        "__expf" | "__exp10f" | "__logf" | "__log2f" | "__log10f" | "__sinf" | "__cosf"
        | "__tanf" | "__fdividef" | "__frcp_rn" | "rsqrtf" | "exp2f" | "__powf" | "hexp"
        | "h2exp" | "hsqrt" | "h2sqrt" | "hrsqrt" | "h2rsqrt" | "hlog" | "h2log" | "hsin"
        | "hcos" => 4.0,
        "__sincosf" => 8.0,
        "sinf" | "cosf" | "tanf" | "atanf" | "atan2f" | "sincosf" => 24.0,
        "powf" => 48.0,
        _ => 16.0,
    };
    (cost, unsuffixed)
}

/// Fused multiply-adds (2 FLOPs each).
pub(crate) fn is_fma(name: &str) -> bool {
    matches!(
        name,
        "fma"
            | "fmaf"
            | "__fmaf_rn"
            | "__fmaf_rz"
            | "__fmaf_ru"
            | "__fmaf_rd"
            | "__fma_rn"
            | "__fmaf_ieee_rn"
            | "__hfma"
            | "__hfma2"
            | "__hfma_relu"
    )
}

/// Half/bfloat16 intrinsics and conversions.
fn is_reduced_precision_call(name: &str) -> bool {
    name.starts_with("__float2half")
        || name.starts_with("__half2float")
        || name.starts_with("__float2bfloat16")
        || name.starts_with("__bfloat162float")
        || matches!(
            name,
            "__hadd"
                | "__hadd2"
                | "__hmul"
                | "__hmul2"
                | "__hsub"
                | "__hsub2"
                | "__hdiv"
                | "__hfma"
                | "__hfma2"
                | "__floats2half2_rn"
                | "__half22float2"
                | "__hmax"
                | "__hmin"
                | "__hneg"
        )
}

impl<'t> Walker<'_, 't> {
    /// Adds `n` FLOPs at the current loop weight.
    pub fn add_flops(&mut self, n: f64) {
        if self.in_loop() {
            self.k.compute.arith_ops_in_loops += 1;
        }
        self.k.compute.weighted_flops += n * self.weight();
    }

    /// An arithmetic binary operator on a data value is a FLOP; index math is not.
    pub fn count_arith(&mut self, node: Node<'t>) {
        if self.in_index > 0 {
            return;
        }
        let op = node.field("operator").map(|o| o.kind_str());
        if !matches!(op, Some("+" | "-" | "*" | "/")) {
            return;
        }
        if self.eval(node).data {
            self.add_flops(1.0);
        }
    }

    /// Math intrinsics, FMAs, half intrinsics, WMMA calls.
    pub fn math_call(&mut self, node: Node<'t>, name: &str) {
        let c = &mut self.k.compute;
        if is_special_function(name) {
            c.special_functions += 1;
            let why = format!("`{name}`: special-function unit");
            Self::finding(&mut c.findings, "special_function", node, why);
            let (cost, unsuffixed) = special_function_cost(name);
            let w = self.weight();
            let c = &mut self.k.compute;
            if unsuffixed {
                c.weighted_unsuffixed_math += w;
            } else {
                c.weighted_special_cost += cost * w;
            }
            self.add_flops(1.0);
        } else if is_fma(name) {
            c.fma += 1;
            self.add_flops(2.0);
        }
        let c = &mut self.k.compute;
        if is_reduced_precision_call(name) {
            c.reduced_precision += 1;
        }
        if name == "mma_sync" || name == "wgmma" {
            c.tensor_core += 1;
            let why = format!("`{name}`: tensor-core matrix multiply-accumulate");
            Self::finding(&mut c.findings, "tensor_core", node, why);
            // A 16x16x16 WMMA tile is 2*16^3 FLOPs.
            self.add_flops(8192.0);
        }
    }

    /// Inline PTX: `mma.sync`, `wgmma`, `ldmatrix`, `cp.async`.
    pub fn inline_asm(&mut self, node: Node<'t>) {
        let asm = text(node, self.src);
        if asm.contains("mma.sync") || asm.contains("wgmma") || asm.contains("mma.") {
            self.k.compute.tensor_core += 1;
            let why = "inline PTX `mma`: tensor-core matrix multiply-accumulate".to_string();
            Self::finding(&mut self.k.compute.findings, "tensor_core", node, why);
        }
        if asm.contains("cp.async") {
            self.k.memory_ops.async_copies += 1;
            let why = "inline PTX `cp.async`: asynchronous global-to-shared copy".to_string();
            Self::finding(&mut self.k.memory_ops.findings, "async_copy", node, why);
        }
        self.children(node);
    }
}
