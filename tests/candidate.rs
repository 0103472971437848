//! Launch plans: parsing, ABI checks, evaluation for a config, completion extraction, and
//! robustness on arbitrary text.

mod common;

use cudaperf::candidate::{
    extract_code, Candidate, CandidateError, LaunchArg, PlanLimits, ResolvedArg,
};
use cudaperf::expr::Expr;
use cudaperf::task::Task;
use proptest::prelude::*;

/// A 2-D task: x (in, rows*cols), y (out, rows*cols), rows, cols. Configs `small`
/// (rows 7, cols 1000) and `tall` (rows 70000, cols 3).
fn rows_task() -> (tempfile::TempDir, Task) {
    let toml = r#"id = "t"
kind = "torch2cuda"
original = "original.c"
reference = "reference.cu"

[[params]]
name = "x"
kind = "buffer"
direction = "in"
dtype = "f32"
len = "rows * cols"

[[params]]
name = "y"
kind = "buffer"
direction = "out"
dtype = "f32"
len = "rows * cols"

[[params]]
name = "rows"
kind = "scalar"
dtype = "i32"
value = "rows"

[[params]]
name = "cols"
kind = "scalar"
dtype = "i32"
value = "cols"

[[configs]]
name = "small"
sizes = { rows = 7, cols = 1000 }

[[configs]]
name = "tall"
sizes = { rows = 70000, cols = 3 }
"#;
    let (tmp, dir) = common::write_task(toml, &[]);
    let task = Task::load(&dir).expect("rows task");
    (tmp, task)
}

const VADD_KERNEL: &str =
    "extern \"C\" __global__ void vector_add(const float* a, const float* b, float* c, int n) {}\n";

/// A vector_add source with the given launch/scratch lines above the standard kernel.
fn vadd(lines: &str) -> String {
    format!("{lines}\n{VADD_KERNEL}")
}

fn parse_ok(src: &str) -> Candidate {
    Candidate::parse(src).unwrap_or_else(|e| panic!("parse failed: {e}\n{src}"))
}

// ---------------------------------------------------------------- parsing and evaluation

/// The fixture reference: one launch, default args, ceil_div grid.
#[test]
fn vector_add_reference_resolves() {
    let task = common::vector_add();
    let mut c = parse_ok(&task.reference.source);
    c.check_abi(&task).unwrap();
    let cfg = task.config("small_odd").unwrap();
    let plan = c.resolve(&task, cfg, &PlanLimits::default()).unwrap();
    assert_eq!(plan.launches.len(), 1);
    let l = &plan.launches[0];
    assert_eq!(l.kernel, "vector_add");
    assert_eq!(l.grid, [1000003u32.div_ceil(256), 1, 1]);
    assert_eq!(l.block, [256, 1, 1]);
    assert_eq!(l.smem, 0);
    assert_eq!(
        l.args,
        (0..4)
            .map(|index| ResolvedArg::Param { index })
            .collect::<Vec<_>>()
    );
}

/// Two and three dimensions, min/max/ceil_div, smem, explicit args with a scratch buffer
/// and integer expressions, several launches in order.
#[test]
fn multi_dim_plan_with_scratch_and_args() {
    let (_t, task) = rows_task();
    let src = "// @scratch partial f32 (rows*8)\n\
        // @scratch flags i32 (max(rows, 64))\n\
        // @launch part grid=(ceil_div(cols, 32), rows) block=(32, 8) smem=(256*4) args=(x, partial, rows, cols, rows*cols + 1)\n\
        // @launch fin grid=(min(rows, 4), 2, 3) block=(4, 4, 4) args=(partial, flags, y, ceil_div(cols, 3))\n\
        extern \"C\" __global__ void part(const float* x, float* p, int rows, int cols, int total) {}\n\
        extern \"C\" __global__ void fin(const float* p, int* f, float* y, int k) {}\n";
    let mut c = parse_ok(src);
    assert_eq!(c.launches.len(), 2);
    assert_eq!(c.scratch.len(), 2);
    assert_eq!(c.kernel_names(), ["part", "fin"]);
    c.check_abi(&task).unwrap();
    // check_abi turns scratch names into Scratch and size expressions into Int.
    let args = c.launches[0].args.as_ref().unwrap();
    assert_eq!(args[1], LaunchArg::Scratch("partial".into()));
    assert!(matches!(&args[4], LaunchArg::Int(e) if e.as_str() == "rows*cols + 1"));
    let plan = c
        .resolve(&task, task.config("small").unwrap(), &PlanLimits::default())
        .unwrap();
    assert_eq!(plan.scratch_lens, [56, 64]);
    let (a, b) = (&plan.launches[0], &plan.launches[1]);
    assert_eq!((a.grid, a.block, a.smem), ([32, 7, 1], [32, 8, 1], 1024));
    assert_eq!(
        a.args,
        [
            ResolvedArg::Param { index: 0 },
            ResolvedArg::Scratch { index: 0 },
            ResolvedArg::Param { index: 2 },
            ResolvedArg::Param { index: 3 },
            ResolvedArg::Int { value: 7001 },
        ]
    );
    assert_eq!((b.grid, b.block, b.smem), ([4, 2, 3], [4, 4, 4], 0));
    assert_eq!(
        b.args,
        [
            ResolvedArg::Scratch { index: 0 },
            ResolvedArg::Scratch { index: 1 },
            ResolvedArg::Param { index: 1 },
            ResolvedArg::Int { value: 334 },
        ]
    );
}

/// Template kernels keep their arguments (spaces included) for NVRTC name expressions,
/// and are matched by their base name.
#[test]
fn template_kernel_names() {
    let task = common::vector_add();
    let src = "// @launch reduce<256, 4> grid=(ceil_div(n, 1024)) block=(256)\n\
        template <int B, int U>\n__global__ void reduce(const float* a, const float* b, float* c, int n) {}\n";
    let mut c = parse_ok(src);
    assert_eq!(c.launches[0].kernel, "reduce<256, 4>");
    assert_eq!(c.launches[0].base_name(), "reduce");
    assert_eq!(c.kernel_names(), ["reduce"]);
    c.check_abi(&task).unwrap();
    let plan = c
        .resolve(&task, &task.configs[0], &PlanLimits::default())
        .unwrap();
    assert_eq!(plan.launches[0].kernel, "reduce<256, 4>");
}

/// `__launch_bounds__` between `__global__` and the name does not hide the kernel.
#[test]
fn launch_bounds_kernel_is_found() {
    let task = common::vector_add();
    let src = "// @launch k grid=(1) block=(128)\n\
        extern \"C\" __global__ void __launch_bounds__(128, 4) k(const float* __restrict__ a, const float* b, float* c, int n) {}\n";
    let mut c = parse_ok(src);
    c.check_abi(&task).unwrap();
}

// ---------------------------------------------------------------- parse errors

/// Each malformed directive is a `BadDirective` or `Expr` error naming its line.
macro_rules! bad_plan {
    ($($(#[$doc:meta])* $name:ident: $src:expr => $pat:pat, $says:expr;)*) => {
        $(
            $(#[$doc])*
            #[test]
            fn $name() {
                let src: String = $src;
                let err = Candidate::parse(&src).expect_err("should not parse");
                assert!(matches!(err, $pat), "unexpected error: {err:?}");
                assert!(err.to_string().contains($says), "message lacks `{}`: {err}", $says);
            }
        )*
    };
}

bad_plan! {
    /// grid is required.
    missing_grid: vadd("// @launch vector_add block=(256)") => CandidateError::BadDirective { line: 1, .. }, "has no grid";
    /// block is required.
    missing_block: vadd("\n// @launch vector_add grid=(1)") => CandidateError::BadDirective { line: 2, .. }, "has no block";
    /// Unknown keys are refused rather than ignored.
    unknown_option: vadd("// @launch vector_add grid=(1) block=(1) stream=(2)") => CandidateError::BadDirective { .. }, "unknown launch option `stream`";
    /// Unbalanced parentheses.
    unbalanced_parens: vadd("// @launch vector_add grid=(ceil_div(n, 2) block=(1)") => CandidateError::BadDirective { .. }, "unbalanced";
    /// Values must be parenthesised.
    unparenthesised_value: vadd("// @launch vector_add grid=4 block=(1)") => CandidateError::BadDirective { .. }, "parenthesised";
    /// At most three dimensions.
    four_dims: vadd("// @launch vector_add grid=(1,1,1,1) block=(1)") => CandidateError::BadDirective { .. }, "1 to 3 dimensions";
    /// A kernel name must be an identifier.
    bad_kernel_name: vadd("// @launch vector-add grid=(1) block=(1)") => CandidateError::BadDirective { .. }, "not a kernel name";
    /// An expression that does not parse names its line.
    bad_expression: vadd("\n\n// @launch vector_add grid=(n = 3) block=(1)") => CandidateError::Expr { line: 3, .. }, "line 3";
    /// Scratch dtypes are checked.
    scratch_bad_dtype: vadd("// @scratch tmp float32 (n)\n// @launch vector_add grid=(1) block=(1)") => CandidateError::BadDirective { .. }, "unknown dtype `float32`";
    /// Scratch lengths are parenthesised.
    scratch_no_parens: vadd("// @scratch tmp f32 n\n// @launch vector_add grid=(1) block=(1)") => CandidateError::BadDirective { .. }, "parentheses";
    /// A scratch name declared twice.
    scratch_twice: vadd("// @scratch t f32 (n)\n// @scratch t f32 (n)\n// @launch vector_add grid=(1) block=(1)") => CandidateError::BadDirective { line: 2, .. }, "declared twice";
    /// No `@launch` line at all.
    no_launch_plan: VADD_KERNEL.to_string() => CandidateError::NoLaunchPlan, "no launch plan";
    /// A launch of a kernel the source does not define names what it found.
    unknown_kernel: vadd("// @launch vector_mul grid=(1) block=(1)") => CandidateError::UnknownKernel { line: 1, .. }, "found: vector_add";
    /// Sources past the size limit are refused before parsing.
    source_too_large: vadd(&format!("// @launch vector_add grid=(1) block=(1)\n{}", "x".repeat(cudaperf::candidate::MAX_SOURCE_BYTES))) => CandidateError::TooLarge { what: "source", .. }, "byte limit";
}

// ---------------------------------------------------------------- ABI checks

/// `check_abi` errors against vector_add (a, b, c, n).
macro_rules! abi_error {
    ($($(#[$doc:meta])* $name:ident: $src:expr => $pat:pat, $says:expr;)*) => {
        $(
            $(#[$doc])*
            #[test]
            fn $name() {
                let task = common::vector_add();
                let src: String = $src;
                let mut c = parse_ok(&src);
                let err = c.check_abi(&task).expect_err("ABI should not match");
                assert!(matches!(err, $pat), "unexpected error: {err:?}");
                assert!(err.to_string().contains($says), "message lacks `{}`: {err}", $says);
            }
        )*
    };
}

abi_error! {
    /// The kernel takes fewer parameters than the ABI has.
    wrong_param_count: "// @launch k grid=(1) block=(1)\nextern \"C\" __global__ void k(const float* a, float* c, int n) {}\n".to_string()
        => CandidateError::AbiMismatch { line: 1, .. }, "takes 3 parameters but the launch passes 4";
    /// A value parameter where the ABI passes a buffer.
    pointer_gets_value: "// @launch k grid=(1) block=(1)\nextern \"C\" __global__ void k(const float* a, float b, float* c, int n) {}\n".to_string()
        => CandidateError::AbiMismatch { .. }, "parameter 2 (`float b`) is a value but receives `b`, which is a buffer";
    /// A pointer parameter where the ABI passes a value.
    value_gets_pointer: "// @launch k grid=(1) block=(1)\nextern \"C\" __global__ void k(const float* a, const float* b, float* c, int* n) {}\n".to_string()
        => CandidateError::AbiMismatch { .. }, "is a pointer but receives `n`, which is a value";
    /// An `args` name that is neither a parameter, scratch buffer, nor size.
    unknown_arg_name: vadd("// @launch vector_add grid=(1) block=(1) args=(a, b, out, n)")
        => CandidateError::AbiMismatch { .. }, "argument `out` is neither";
    /// Explicit args with the wrong count.
    explicit_args_wrong_count: vadd("// @launch vector_add grid=(1) block=(1) args=(a, b, c)")
        => CandidateError::AbiMismatch { .. }, "takes 4 parameters but the launch passes 3";
    /// A scratch buffer may not shadow a task parameter.
    scratch_shadows_param: vadd("// @scratch c f32 (n)\n// @launch vector_add grid=(1) block=(1)")
        => CandidateError::BadDirective { line: 1, .. }, "name of a task parameter";
    /// A scratch length over an unknown size.
    scratch_unknown_size: vadd("// @scratch t f32 (m)\n// @launch vector_add grid=(1) block=(1)")
        => CandidateError::Expr { line: 1, .. }, "`m`";
}

/// Explicit args in a different order but the right kinds are accepted.
#[test]
fn explicit_args_in_another_order() {
    let task = common::vector_add();
    let mut c = parse_ok("// @launch k grid=(1) block=(1) args=(n, a, b, c)\nextern \"C\" __global__ void k(int n, const float* a, const float* b, float* c) {}\n");
    c.check_abi(&task).unwrap();
    let plan = c
        .resolve(&task, &task.configs[0], &PlanLimits::default())
        .unwrap();
    assert_eq!(plan.launches[0].args[0], ResolvedArg::Param { index: 3 });
}

// ---------------------------------------------------------------- resolve errors

/// `resolve` errors for the rows task, config `tall` (rows = 70000) unless said otherwise.
macro_rules! launch_error {
    ($($(#[$doc:meta])* $name:ident: $lines:expr, $config:expr => $pat:pat, $says:expr;)*) => {
        $(
            $(#[$doc])*
            #[test]
            fn $name() {
                let (_t, task) = rows_task();
                let src = format!("{}\nextern \"C\" __global__ void k(const float* x, float* y, int rows, int cols) {{}}\n", $lines);
                let mut c = parse_ok(&src);
                c.check_abi(&task).unwrap();
                let limits = PlanLimits { max_smem_bytes: 48 * 1024, max_launches: 2, ..PlanLimits::default() };
                let err = c.resolve(&task, task.config($config).unwrap(), &limits).expect_err("launch should be refused");
                assert!(matches!(err, $pat), "unexpected error: {err:?}");
                let text = err.to_string();
                assert!(text.contains($says), "message lacks `{}`: {text}", $says);
                assert!(text.contains(&format!("config `{}`", $config)) || !matches!(err, CandidateError::InvalidLaunch { .. }), "{text}");
            }
        )*
    };
}

launch_error! {
    /// grid.y is limited to 65535.
    grid_y_too_large: "// @launch k grid=(1, rows) block=(1)", "tall" => CandidateError::InvalidLaunch { .. }, "grid.y = 70000";
    /// grid.z is limited to 65535.
    grid_z_too_large: "// @launch k grid=(1, 1, rows) block=(1)", "tall" => CandidateError::InvalidLaunch { .. }, "grid.z = 70000";
    /// A zero-sized grid is not a launch.
    grid_zero: "// @launch k grid=(cols - 3) block=(1)", "tall" => CandidateError::InvalidLaunch { .. }, "grid.x = 0";
    /// More than 1024 threads per block in total.
    block_too_many_threads: "// @launch k grid=(1) block=(64, 32)", "small" => CandidateError::InvalidLaunch { .. }, "2048 threads";
    /// block.x alone over 1024.
    block_x_too_large: "// @launch k grid=(1) block=(2048)", "small" => CandidateError::InvalidLaunch { .. }, "block.x = 2048";
    /// block.z is limited to 64.
    block_z_too_large: "// @launch k grid=(1) block=(1, 1, 65)", "small" => CandidateError::InvalidLaunch { .. }, "block.z = 65";
    /// Dynamic shared memory over the limit.
    smem_over_limit: "// @launch k grid=(1) block=(32) smem=(cols * 64)", "small" => CandidateError::InvalidLaunch { .. }, "smem = 64000";
    /// Negative dynamic shared memory.
    smem_negative: "// @launch k grid=(1) block=(32) smem=(cols - 2000)", "small" => CandidateError::InvalidLaunch { .. }, "smem = -1000";
    /// A scratch buffer with a negative length.
    scratch_negative: "// @scratch tmp f32 (cols - 5000)\n// @launch k grid=(1) block=(32)", "small" => CandidateError::InvalidLaunch { line: 1, .. }, "negative length -4000";
    /// Scratch over the byte limit (4 GiB by default).
    scratch_too_large: "// @scratch tmp f64 (rows * rows * 200)\n// @launch k grid=(1) block=(32)", "tall" => CandidateError::InvalidLaunch { .. }, "scratch buffers need more than";
    /// More launches than the limit (2 here).
    too_many_launches: "// @launch k grid=(1) block=(1)\n// @launch k grid=(1) block=(1)\n// @launch k grid=(1) block=(1)", "small" => CandidateError::InvalidLaunch { line: 3, .. }, "more than the limit of 2";
    /// ceil_div by zero is an expression error, not a panic.
    ceil_div_by_zero: "// @launch k grid=(ceil_div(rows, cols - 1000)) block=(1)", "small" => CandidateError::Expr { line: 1, .. }, "divisor must be positive";
    /// Overflow is an expression error, not a panic.
    overflow: "// @launch k grid=(rows * 4611686018427387904) block=(1)", "small" => CandidateError::Expr { .. }, "cannot evaluate";
}

// ---------------------------------------------------------------- completions

const KERNEL_A: &str = "// @launch vector_add grid=(ceil_div(n, 256)) block=(256)\nextern \"C\" __global__ void vector_add(const float* a, const float* b, float* c, int n) {}\n";
const KERNEL_B: &str = "// @launch add2 grid=(ceil_div(n, 512)) block=(512)\nextern \"C\" __global__ void add2(const float* a, const float* b, float* c, int n) {}\n";

/// Extraction from completions: which fences count and which block wins.
macro_rules! completion {
    ($($(#[$doc:meta])* $name:ident: $text:expr => $want:expr;)*) => {
        $(
            $(#[$doc])*
            #[test]
            fn $name() {
                let text: String = $text;
                let got = Candidate::from_completion(&text).map(|c| c.kernel_names());
                let want: Result<&str, CandidateError> = $want;
                match (got, want) {
                    (Ok(names), Ok(k)) => assert_eq!(names, [k]),
                    (Err(e), Err(w)) => assert_eq!(std::mem::discriminant(&e), std::mem::discriminant(&w), "{e:?}"),
                    (got, want) => panic!("got {got:?}, want {want:?}\n{text}"),
                }
            }
        )*
    };
}

completion! {
    /// ```cuda fence.
    fence_cuda: format!("Here it is:\n```cuda\n{KERNEL_A}```\nDone.") => Ok("vector_add");
    /// ```cpp fence.
    fence_cpp: format!("```cpp\n{KERNEL_A}```\n") => Ok("vector_add");
    /// ```c++ fence.
    fence_cxx: format!("```c++\n{KERNEL_A}```\n") => Ok("vector_add");
    /// ```CUDA (case-insensitive) fence.
    fence_upper_case: format!("```CUDA\n{KERNEL_A}```\n") => Ok("vector_add");
    /// Bare ``` fence.
    fence_bare: format!("```\n{KERNEL_A}```\n") => Ok("vector_add");
    /// Indented fences (inside a list) still count.
    fence_indented: format!("1. code:\n   ```cuda\n{KERNEL_A}   ```\n") => Ok("vector_add");
    /// The last block with a kernel wins over an earlier draft.
    last_kernel_block_wins: format!("Draft:\n```cuda\n{KERNEL_A}```\nBetter:\n```cuda\n{KERNEL_B}```\n") => Ok("add2");
    /// A later block without `__global__` (e.g. host code) does not displace the kernel.
    later_non_kernel_block_ignored: format!("```cuda\n{KERNEL_B}```\nCompile with:\n```cpp\nint main() {{ return 0; }}\n```\n") => Ok("add2");
    /// Blocks in other languages are ignored even if last.
    python_block_ignored: format!("```cuda\n{KERNEL_A}```\n```python\nprint('__global__')\n```\n") => Ok("vector_add");
    /// A truncated completion whose last fence never closes.
    unclosed_final_fence: format!("```cuda\n{KERNEL_B}") => Ok("add2");
    /// Plain text without a fence.
    no_code_block: "I would write a kernel that adds the vectors.".to_string() => Err(CandidateError::NoCodeBlock);
    /// Only an empty block.
    empty_block: "```cuda\n```\n".to_string() => Err(CandidateError::NoCodeBlock);
    /// Only a python block.
    only_python: "```python\nimport torch\n```\n".to_string() => Err(CandidateError::NoCodeBlock);
    /// A kernel without a launch line.
    no_launch_plan_in_block: "```cuda\nextern \"C\" __global__ void k(float* a) {}\n```\n".to_string() => Err(CandidateError::NoLaunchPlan);
    /// A launch line for a kernel the block does not define.
    unknown_kernel_in_block: "```cuda\n// @launch k2 grid=(1) block=(1)\nextern \"C\" __global__ void k(float* a) {}\n```\n".to_string()
        => Err(CandidateError::UnknownKernel { name: String::new(), line: 0, available: String::new() });
}

/// Without any `__global__`, the largest block is taken.
#[test]
fn largest_block_without_kernel() {
    let code =
        extract_code("```cuda\nint a;\n```\n```cuda\nint bbbbbbbbbb;\n```\n```cuda\nint c;\n```\n")
            .unwrap();
    assert_eq!(code, "int bbbbbbbbbb;\n");
}

// ---------------------------------------------------------------- never panic

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// Arbitrary text never panics the parser.
    #[test]
    fn parse_never_panics(s in any::<String>()) {
        let _ = Candidate::parse(&s);
    }

    /// Arbitrary text never panics completion extraction.
    #[test]
    fn from_completion_never_panics(s in any::<String>()) {
        let _ = Candidate::from_completion(&s);
    }

    /// Arbitrary text never panics expression parsing or evaluation.
    #[test]
    fn expr_never_panics(s in any::<String>(), n in any::<i64>()) {
        if let Ok(e) = Expr::parse(&s) {
            let sizes = [("n".to_string(), n)].into_iter().collect();
            let _ = e.eval_int(&sizes);
            let _ = e.eval_f64(&sizes);
        }
    }

    /// Near-miss launch plans built from plan tokens never panic anywhere in the
    /// pipeline up to resolve (the random strings above rarely reach it).
    #[test]
    fn plan_like_text_never_panics(parts in proptest::collection::vec(prop_oneof![
        Just("// @launch "), Just("// @scratch "), Just("vector_add"), Just("k<"), Just(">"), Just("grid=("), Just("block=("),
        Just("smem=("), Just("args=("), Just(")"), Just("("), Just(","), Just(" "), Just("n"), Just("ceil_div(n, "), Just("min("),
        Just("max("), Just("0"), Just("-"), Just("*"), Just("/"), Just("%"), Just("4294967296"), Just("9223372036854775807"),
        Just("f32 "), Just("tmp "), Just("\n"), Just("```cuda\n"), Just("```\n"), Just("a"), Just("b"), Just("c"),
        Just("extern \"C\" __global__ void vector_add(const float* a, const float* b, float* c, int n) {}\n"),
        Just("template <int B> __global__ void k(float* a, int n) {}\n"), Just("__launch_bounds__("), Just("é"),
    ], 0..40)) {
        let text: String = parts.concat();
        static TASK: std::sync::OnceLock<Task> = std::sync::OnceLock::new();
        let task = TASK.get_or_init(common::vector_add);
        for mut c in [Candidate::parse(&text), Candidate::from_completion(&text)].into_iter().flatten() {
            if c.check_abi(task).is_ok() {
                for cfg in &task.configs {
                    let _ = c.resolve(task, cfg, &PlanLimits::default());
                }
            }
        }
    }
}
