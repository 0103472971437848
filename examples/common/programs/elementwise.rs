//! Elementwise kernels: `vector_add` (c = a + b) and `saxpy` (y_out = a·x + y).

use super::{fill, unroll, Expect, Knob};

#[rustfmt::skip]
pub const KNOBS: &[Knob] = &[
    Knob { name: "block", options: &["128", "256", "1024"] },
    Knob { name: "vector", options: &["1", "4"] },
    Knob { name: "items", options: &["1", "4"] },
    Knob { name: "mapping", options: &["coalesced", "chunked"] },
    Knob { name: "tail", options: &["exact", "assume_divisible"] },
];

struct Abi {
    params: &'static str,
    in0: &'static str,
    in1: &'static str,
    out: &'static str,
    op: &'static str,
}

fn abi(task: &str) -> Abi {
    match task {
        "saxpy" => Abi {
            params: "const float* __restrict__ x, const float* __restrict__ y, float* __restrict__ y_out, float a, int n",
            in0: "x",
            in1: "y",
            out: "y_out",
            op: "a * (p) + (q)",
        },
        _ => Abi {
            params: "const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ c, int n",
            in0: "a",
            in1: "b",
            out: "c",
            op: "(p) + (q)",
        },
    }
}

pub fn render(task: &str, c: &[usize]) -> (String, Expect) {
    let block = [128, 256, 1024][c[0]];
    let vec = [1, 4][c[1]];
    let items = [1, 4][c[2]];
    let chunked = c[3] == 1;
    let divisible = c[4] == 1;
    let abi = abi(task);
    let per_block = block * items * vec;
    let grid = if divisible {
        format!("n / {per_block}")
    } else {
        format!("ceil_div(n, {per_block})")
    };
    let (vt, apply) = match vec {
        1 => ("float", "OP(p, q)".to_string()),
        2 => (
            "float2",
            "make_float2(OP(p.x, q.x), OP(p.y, q.y))".to_string(),
        ),
        _ => (
            "float4",
            "make_float4(OP(p.x, q.x), OP(p.y, q.y), OP(p.z, q.z), OP(p.w, q.w))".to_string(),
        ),
    };
    let base = if chunked {
        "(blockIdx.x * BLOCK + threadIdx.x) * ITEMS"
    } else {
        "blockIdx.x * (BLOCK * ITEMS) + threadIdx.x"
    };
    let index = if chunked {
        "base + k"
    } else {
        "base + k * BLOCK"
    };
    let body = if divisible {
        // Every thread's vectors exist when n is a multiple of the work per block; nothing
        // covers the rest.
        format!("        {vt} p = in0v[v], q = in1v[v];\n        outv[v] = {apply};\n")
    } else {
        format!(
            "        if (v < nv) {{\n            {vt} p = in0v[v], q = in1v[v];\n            outv[v] = {apply};\n        }}\n"
        )
    };
    let tail = if !divisible && vec > 1 {
        format!(
            "    // The n % {vec} elements after the last whole vector.\n    if (blockIdx.x == 0 && threadIdx.x < n - nv * {vec}) {{\n        int i = nv * {vec} + threadIdx.x;\n        {out}[i] = OP({in0}[i], {in1}[i]);\n    }}\n",
            out = abi.out,
            in0 = abi.in0,
            in1 = abi.in1
        )
    } else {
        String::new()
    };
    let src = fill(
        r#"// @launch elementwise grid=($GRID$) block=($BLOCK$)
#define BLOCK $BLOCK$
#define ITEMS $ITEMS$
#define OP(p, q) ($OPEXPR$)
extern "C" __global__ void elementwise($PARAMS$) {
    const $VT$* in0v = reinterpret_cast<const $VT$*>($IN0$);
    const $VT$* in1v = reinterpret_cast<const $VT$*>($IN1$);
    $VT$* outv = reinterpret_cast<$VT$*>($OUT$);
    int nv = n / $VEC$;
    int base = $BASE$;
$UNROLL$    for (int k = 0; k < ITEMS; ++k) {
        int v = $INDEX$;
$BODY$    }
$TAIL$}
"#,
        &[
            ("GRID", grid),
            ("BLOCK", block.to_string()),
            ("ITEMS", items.to_string()),
            ("OPEXPR", abi.op.to_string()),
            ("PARAMS", abi.params.to_string()),
            ("VT", vt.to_string()),
            ("IN0", abi.in0.to_string()),
            ("IN1", abi.in1.to_string()),
            ("OUT", abi.out.to_string()),
            ("VEC", vec.to_string()),
            ("BASE", base.to_string()),
            ("UNROLL", unroll(items > 1, "    ")),
            ("INDEX", index.to_string()),
            ("BODY", body),
            ("TAIL", tail),
        ],
    );
    let expect = Expect::Runs {
        risk: divisible.then_some(
            "assumes n is a multiple of the elements per block: the tail is never written",
        ),
    };
    (src, expect)
}
