//! Task loading and validation: every error names the file and the field; every shipped
//! task loads.

mod common;

use std::path::Path;

use common::{write_task, BASE_TASK};
use cudaperf::candidate::{Candidate, PlanLimits};
use cudaperf::expr::{Expr, Sizes};
use cudaperf::task::{Param, Task, TaskError, TaskLimits};

/// Loads a task folder built from `toml` and checks that it fails naming `task.toml`,
/// exactly `field`, and a message containing `says`.
fn expect_invalid(toml: &str, omit: &[&str], limits: TaskLimits, field: &str, says: &str) {
    let (tmp, dir) = write_task(toml, omit);
    // A file beside the task folder, so that `../x.cu` would exist if it were followed.
    std::fs::write(tmp.path().join("x.cu"), "secret").unwrap();
    let err = Task::load_with(&dir, &limits).expect_err("task should be rejected");
    let text = err.to_string();
    let toml_path = dir.join("task.toml");
    assert!(
        text.contains(&toml_path.display().to_string()),
        "message does not name the file: {text}"
    );
    match &err {
        TaskError::Invalid {
            path,
            field: f,
            message,
        } => {
            assert_eq!(path, &toml_path);
            assert_eq!(f, field, "wrong field in: {text}");
            assert!(message.contains(says), "message lacks `{says}`: {text}");
            assert!(text.contains(field), "Display lacks the field: {text}");
        }
        other => panic!("expected TaskError::Invalid for `{field}`, got {other:?}"),
    }
    assert!(!text.contains("secret"));
}

fn replace(from: &str, to: &str) -> String {
    assert!(BASE_TASK.contains(from), "BASE_TASK lacks {from}");
    BASE_TASK.replacen(from, to, 1)
}

fn append(extra: &str) -> String {
    format!("{BASE_TASK}\n{extra}\n")
}

fn cap(bytes: u64) -> TaskLimits {
    TaskLimits {
        max_buffer_bytes: bytes,
    }
}

/// A special-value distribution for buffer `a` of [`BASE_TASK`].
const SPECIAL: &str = "[regimes.inputs.a]\ndist = \"special\"\nvalues = [\"nan\", \"-0\"]\nrate = 0.05\nbase = { dist = \"uniform\", low = -1.0, high = 1.0 }";

/// A regime named `r` with the distributions `inputs` (TOML tables under it).
fn regime(inputs: &str) -> String {
    format!("[[regimes]]\nname = \"r\"\nwhy = \"w\"\n{inputs}\n")
}

/// One `#[test]` per invalid task: `name: toml, omitted files, limits => field, message`.
macro_rules! invalid_task {
    ($($(#[$doc:meta])* $name:ident: $toml:expr, omit $omit:expr, $limits:expr => $field:expr, $says:expr;)*) => {
        $(
            $(#[$doc])*
            #[test]
            fn $name() {
                let toml: String = $toml;
                expect_invalid(&toml, &$omit, $limits, $field, $says);
            }
        )*
    };
}

invalid_task! {
    /// A typo in a dtype is caught at load time, not when buffers are allocated.
    unknown_dtype: replace("dtype = \"f32\"", "dtype = \"float32\""), omit [], cap(8 << 30) => "params[0].dtype", "unknown dtype `float32`";
    /// Directions other than in/out/inout are refused.
    unknown_direction: replace("direction = \"in\"", "direction = \"sideways\""), omit [], cap(8 << 30) => "params[0].direction", "unknown direction `sideways`";
    /// The task kind must be c2cuda or torch2cuda.
    unknown_task_kind: replace("kind = \"c2cuda\"", "kind = \"py2cuda\""), omit [], cap(8 << 30) => "kind", "unknown kind `py2cuda`";
    /// A parameter kind must be buffer or scalar.
    unknown_param_kind: replace("kind = \"buffer\"", "kind = \"tensor\""), omit [], cap(8 << 30) => "params[0].kind", "unknown parameter kind `tensor`";
    /// A length expression over a size no config defines.
    len_names_unknown_size: replace("len = \"n\"", "len = \"n * m\""), omit [], cap(8 << 30) => "params[0].len", "`m`";
    /// A scalar value over a size no config defines.
    value_names_unknown_size: replace("value = \"n\"", "value = \"rows\""), omit [], cap(8 << 30) => "params[2].value", "`rows`";
    /// Two parameters with one name would make `args=(...)` ambiguous.
    duplicate_param_names: replace("name = \"c\"", "name = \"a\""), omit [], cap(8 << 30) => "params[1].name", "duplicate parameter name `a`";
    /// Two configs with one name would make reports ambiguous.
    duplicate_config_names: append("[[configs]]\nname = \"small\"\nsizes = { n = 5 }"), omit [], cap(8 << 30) => "configs[1].name", "duplicate config name `small`";
    /// A task needs at least one config.
    no_configs: BASE_TASK.split("[[configs]]").next().unwrap().to_string(), omit [], cap(8 << 30) => "configs", "at least one";
    /// A size must not be negative.
    negative_size: replace("n = 1000", "n = -4"), omit [], cap(8 << 30) => "configs[0].sizes.n", "negative";
    /// The reference file must exist.
    missing_reference: BASE_TASK.to_string(), omit ["reference.cu"], cap(8 << 30) => "reference", "does not exist";
    /// The original program must exist.
    missing_original: BASE_TASK.to_string(), omit ["original.c"], cap(8 << 30) => "original", "does not exist";
    /// Each listed implementation must exist.
    missing_implementation: replace("reference = \"reference.cu\"", "reference = \"reference.cu\"\nimplementations = [\"fast.cu\"]"), omit [], cap(8 << 30) => "implementations[0]", "does not exist";
    /// A config whose lengths evaluate below zero.
    config_makes_length_negative: replace("len = \"n\"", "len = \"n - 2000\""), omit [], cap(8 << 30) => "configs[0]", "negative length";
    /// A config whose buffers exceed the memory cap (1000 floats in + out = 8000 bytes).
    config_exceeds_memory_cap: BASE_TASK.to_string(), omit [], cap(7999) => "configs[0]", "more than the cap of 7999 bytes";
    /// Distributions are only for input buffers.
    inputs_for_an_output: append("[inputs.c]\ndist = \"uniform\"\nlow = 0.0\nhigh = 1.0"), omit [], cap(8 << 30) => "inputs.c", "not an input buffer";
    /// Distributions are only for input buffers (a scalar is not one).
    inputs_for_a_scalar: append("[inputs.n]\ndist = \"constant\"\nvalue = 1.0"), omit [], cap(8 << 30) => "inputs.n", "not an input buffer";
    /// A distribution for a parameter that does not exist.
    inputs_for_unknown_param: append("[inputs.zz]\ndist = \"constant\"\nvalue = 1.0"), omit [], cap(8 << 30) => "inputs.zz", "no parameter named `zz`";
    /// A distribution bound over an unknown size.
    inputs_bound_unknown_size: append("[inputs.a]\ndist = \"int_range\"\nlow = 0\nhigh = \"m\""), omit [], cap(8 << 30) => "inputs.a", "`m`";
    /// Without an out/inout buffer nothing can be compared.
    no_output_buffer: replace("direction = \"out\"", "direction = \"in\""), omit [], cap(8 << 30) => "params", "no out or inout buffer";
    /// `../x.cu` must not read files outside the task folder (x.cu exists there).
    reference_path_traversal: replace("reference = \"reference.cu\"", "reference = \"../x.cu\""), omit [], cap(8 << 30) => "reference", "inside the task folder";
    /// Absolute paths are refused too.
    original_absolute_path: replace("original = \"original.c\"", "original = \"/etc/passwd\""), omit [], cap(8 << 30) => "original", "inside the task folder";
    /// Traversal in an implementation list.
    implementation_path_traversal: replace("reference = \"reference.cu\"", "reference = \"reference.cu\"\nimplementations = [\"sub/../../x.cu\"]"), omit [], cap(8 << 30) => "implementations[0]", "inside the task folder";
    /// The id must equal the folder name.
    id_differs_from_folder: replace("id = \"t\"", "id = \"other\""), omit [], cap(8 << 30) => "id", "folder name";
    /// `flops` over a size no config defines.
    flops_names_unknown_size: replace("reference = \"reference.cu\"", "reference = \"reference.cu\"\nflops = \"2 * n * k\""), omit [], cap(8 << 30) => "flops", "`k`";
    /// A negative FLOP count would make every result implausible.
    flops_negative: replace("reference = \"reference.cu\"", "reference = \"reference.cu\"\nflops = \"0 - n\""), omit [], cap(8 << 30) => "flops", "finite count >= 0";
    /// A regime's distribution for a buffer the ABI does not have.
    regime_unknown_buffer: append(&regime("[regimes.inputs.zz]\ndist = \"constant\"\nvalue = 1.0")), omit [], cap(8 << 30) => "regimes[0].inputs.zz", "no parameter named `zz`";
    /// A regime may only replace inputs (the output is poisoned, not generated).
    regime_for_an_output: append(&regime("[regimes.inputs.c]\ndist = \"constant\"\nvalue = 1.0")), omit [], cap(8 << 30) => "regimes[0].inputs.c", "not an input buffer";
    /// NaN and infinities have no integer encoding: `special` needs a float buffer.
    regime_special_on_integer: replace("dtype = \"f32\"", "dtype = \"i32\"") + &regime(SPECIAL), omit [], cap(8 << 30) => "regimes[0].inputs.a", "special values need a float buffer, not i32";
    /// A rate above 1 is not a fraction of the elements.
    regime_rate_above_one: append(&regime(&SPECIAL.replace("rate = 0.05", "rate = 1.5"))), omit [], cap(8 << 30) => "regimes[0].inputs.a", "`rate` is 1.5; it must be in (0, 1]";
    /// A rate of 0 would mix in nothing: the regime would check nothing new.
    regime_rate_zero: append(&regime(&SPECIAL.replace("rate = 0.05", "rate = 0.0"))), omit [], cap(8 << 30) => "regimes[0].inputs.a", "must be in (0, 1]";
    /// `special` with no value listed mixes in nothing.
    regime_special_without_values: append(&regime(&SPECIAL.replace("values = [\"nan\", \"-0\"]", "values = []"))), omit [], cap(8 << 30) => "regimes[0].inputs.a", "lists no special value";
    /// Two regimes with one name would make reports ambiguous.
    regime_duplicate_name: append(&format!("{}\n{}", regime(SPECIAL), regime(SPECIAL))), omit [], cap(8 << 30) => "regimes[1].name", "unique among the regimes";
    /// A regime name is an identifier (it appears in reports and samples files).
    regime_name_not_identifier: append(&regime(SPECIAL).replace("name = \"r\"", "name = \"two words\"")), omit [], cap(8 << 30) => "regimes[0].name", "must be an identifier";
    /// `configs` may only name configs the task has.
    regime_unknown_config: append(&regime(SPECIAL).replace("why = \"w\"", "why = \"w\"\nconfigs = [\"huge\"]")), omit [], cap(8 << 30) => "regimes[0].configs", "no config named `huge`";
    /// A regime that replaces no input checks nothing the main inputs do not.
    regime_without_inputs: append("[[regimes]]\nname = \"r\"\nwhy = \"w\""), omit [], cap(8 << 30) => "regimes[0].inputs", "at least one input";
    /// A regime's bounds are evaluated on every config it applies to.
    regime_bound_unknown_size: append(&regime("[regimes.inputs.a]\ndist = \"ragged\"\nstart = 0\nstep = \"k\"")), omit [], cap(8 << 30) => "regimes[0].inputs.a", "`k`";
    /// Tensor-core precision for f32 inputs is a decision the task file must explain.
    precision_lowered_without_reason: append("[precision]\noperands = \"tf32\""), omit [], cap(8 << 30) => "precision.reason", "say why in `reason`";
    /// A negative bytes floor would make every time plausible.
    min_bytes_negative: replace("reference = \"reference.cu\"", "reference = \"reference.cu\"\nmin_bytes = \"0 - n\""), omit [], cap(8 << 30) => "min_bytes", "finite count >= 0";
    /// `min_bytes` over a size no config defines.
    min_bytes_names_unknown_size: replace("reference = \"reference.cu\"", "reference = \"reference.cu\"\nmin_bytes = \"4 * m\""), omit [], cap(8 << 30) => "min_bytes", "`m`";
    /// Negative tolerances make every comparison fail.
    negative_tolerance: append("[tolerance]\natol = -1.0\nrtol = 0.0"), omit [], cap(8 << 30) => "tolerance", "finite";
}

/// An incomplete length expression (`n +`) is rejected naming the file and the buffer.
/// evalexpr builds a tree for `n +`, so the error surfaces when the config's lengths are
/// evaluated (field `configs[0]`), not at `params[0].len`.
#[test]
fn incomplete_len_expression_is_rejected() {
    let (_tmp, dir) = write_task(&replace("len = \"n\"", "len = \"n +\""), &[]);
    let err = Task::load(&dir).unwrap_err().to_string();
    assert!(
        err.contains(&dir.join("task.toml").display().to_string()),
        "{err}"
    );
    assert!(err.contains("`n +`") && err.contains("buffer `a`"), "{err}");
}

/// A TOML syntax error and an unknown top-level key are `Parse` errors naming the file.
#[test]
fn toml_errors_name_the_file() {
    for toml in [
        format!("{BASE_TASK}\n[[params]\n"),
        format!("colour = \"red\"\n{BASE_TASK}"),
    ] {
        let (_tmp, dir) = write_task(&toml, &[]);
        let err = Task::load(&dir).unwrap_err();
        assert!(matches!(err, TaskError::Parse { .. }), "{err:?}");
        assert!(
            err.to_string()
                .contains(&dir.join("task.toml").display().to_string()),
            "{err}"
        );
    }
}

/// A task folder without task.toml is an I/O error naming the path.
#[test]
fn missing_task_toml_is_io_error() {
    let tmp = tempfile::tempdir().unwrap();
    let err = Task::load(tmp.path().join("nope")).unwrap_err();
    assert!(matches!(err, TaskError::Io { .. }), "{err:?}");
    assert!(err.to_string().contains("nope"), "{err}");
}

/// The base task used by the invalid cases is itself valid (so each case fails for its
/// own reason), and defaults are filled in.
#[test]
fn base_task_is_valid() {
    let (_tmp, dir) = write_task(BASE_TASK, &[]);
    let t = Task::load(&dir).expect("base task");
    assert_eq!(t.params.len(), 3);
    assert!(t.inputs.contains_key("a"), "default distribution filled in");
    assert_eq!(t.signature(), "(const float* a, float* c, int n)");
    assert_eq!(t.buffer_bytes(&t.configs[0]).unwrap(), 8000);
    // Exactly at the cap is allowed.
    assert!(Task::load_with(&dir, &cap(8000)).is_ok());
}

fn task_dirs() -> Vec<std::path::PathBuf> {
    let root = common::fixture("tasks");
    let mut dirs: Vec<_> = std::fs::read_dir(&root)
        .unwrap_or_else(|e| panic!("read {}: {e}", root.display()))
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.join("task.toml").is_file())
        .collect();
    dirs.sort();
    dirs
}

/// Every shipped task loads and validates; the count is printed (the dataset aims at >= 40).
#[test]
fn every_fixture_task_loads() {
    let dirs = task_dirs();
    let mut failures = Vec::new();
    for d in &dirs {
        if let Err(e) = Task::load(d) {
            failures.push(format!("{}: {e}", d.display()));
        }
    }
    println!("fixture tasks: {} ({} failed)", dirs.len(), failures.len());
    assert!(!dirs.is_empty(), "no tasks under fixtures/tasks");
    assert!(
        failures.is_empty(),
        "tasks that fail to load:\n{}",
        failures.join("\n")
    );
}

/// Every scalar value and buffer length of every shipped task evaluates for every config
/// (float scalars such as `1e-5` included), and every implementation parses, matches the
/// ABI and resolves its launch plan for every config.
#[test]
fn every_fixture_task_evaluates_and_its_implementations_resolve() {
    let mut failures = Vec::new();
    let mut impls = 0;
    for d in task_dirs() {
        let Ok(task) = Task::load(&d) else { continue };
        for c in &task.configs {
            for p in &task.params {
                if let Param::Scalar { name, dtype, value } = p {
                    let r = if dtype.is_float() {
                        value.eval_f64(&c.sizes).map(|_| ())
                    } else {
                        value.eval_int(&c.sizes).map(|_| ())
                    };
                    if let Err(e) = r {
                        failures.push(format!("{} scalar {name} config {}: {e}", task.id, c.name));
                    }
                }
            }
            if let Err(e) = task.buffer_lens(c) {
                failures.push(format!("{} config {}: {e}", task.id, c.name));
            }
        }
        for imp in task.all_implementations() {
            impls += 1;
            let r = Candidate::parse(&imp.source).and_then(|mut cand| {
                cand.check_abi(&task)?;
                for c in &task.configs {
                    cand.resolve(&task, c, &PlanLimits::default())?;
                }
                Ok(())
            });
            if let Err(e) = r {
                failures.push(format!("{}/{}: {e}", task.id, imp.name));
            }
        }
    }
    println!("fixture implementations checked: {impls}");
    assert!(
        failures.is_empty(),
        "{} problems:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// Float literals in scalar values, scientific notation included, evaluate to the number
/// written (regression: evalexpr alone does not read `1e-5`).
#[test]
fn float_scalar_literals_evaluate() {
    let none = Sizes::new();
    for (text, want) in [
        ("1e-5", 1e-5),
        ("1e-6", 1e-6),
        ("2.5E3", 2500.0),
        ("0.01", 0.01),
        ("1.75", 1.75),
        ("3", 3.0),
        ("-0.5", -0.5),
    ] {
        let got = Expr::parse(text).and_then(|e| e.eval_f64(&none));
        assert_eq!(got, Ok(want), "{text}");
    }
}

/// A task whose scalar is a float in scientific notation loads and evaluates.
#[test]
fn task_with_scientific_scalar_loads() {
    let toml = BASE_TASK.replacen(
        "dtype = \"i32\"\nvalue = \"n\"",
        "dtype = \"f32\"\nvalue = \"1e-5\"",
        1,
    );
    assert_ne!(toml, BASE_TASK);
    let (_tmp, dir) = write_task(&toml, &[]);
    let t = Task::load(Path::new(&dir)).expect("loads");
    let Param::Scalar { value, .. } = &t.params[2] else {
        panic!("scalar")
    };
    assert_eq!(value.eval_f64(&t.configs[0].sizes), Ok(1e-5));
}

/// A declared `flops` expression is kept and evaluates per config (matmul: 2 m n k).
#[test]
fn flops_is_loaded() {
    let t = cudaperf::task::Task::load(common::fixture("tasks/matmul")).expect("matmul");
    let c = t.configs.iter().find(|c| c.name == "large").expect("large");
    let f = t.flops.as_ref().expect("matmul declares flops");
    assert_eq!(
        f.eval_f64(&c.sizes).expect("evaluates"),
        2.0 * 2048f64.powi(3)
    );
    assert!(common::vector_add().flops.is_none());
}

/// A task from TOML text and in-memory files validates like a folder: the same errors,
/// naming `task.toml` and the field; a file the TOML names but `files` lacks is reported on
/// that field; names that leave the task folder are refused before any lookup.
#[test]
fn from_toml_and_files_validates_like_the_loader() {
    use std::collections::BTreeMap;
    let dir = common::fixture("tasks/vector_add");
    let toml = std::fs::read_to_string(dir.join("task.toml")).unwrap();
    let mut files = BTreeMap::new();
    for name in [
        "original.c",
        "reference.cu",
        "vectorized_float4.cu",
        "grid_stride_unroll4.cu",
        "strided_blocks.cu",
        "vectorized_float2_ldg.cu",
    ] {
        files.insert(
            name.to_string(),
            std::fs::read_to_string(dir.join(name)).unwrap(),
        );
    }
    let limits = TaskLimits::default();
    let from_disk = Task::load(&dir).unwrap();
    let t = Task::from_toml_and_files(&toml, &files, &limits).unwrap();
    assert_eq!(t.id, from_disk.id);
    assert_eq!(t.params, from_disk.params);
    assert_eq!(t.reference.source, from_disk.reference.source);
    assert_eq!(t.implementations.len(), 4);

    let mut missing = files.clone();
    missing.remove("strided_blocks.cu");
    match Task::from_toml_and_files(&toml, &missing, &limits) {
        Err(TaskError::Invalid {
            path,
            field,
            message,
        }) => {
            assert_eq!(path, Path::new("task.toml"));
            assert_eq!(field, "implementations[2]");
            assert!(message.contains("strided_blocks.cu"), "{message}");
        }
        other => panic!("expected a missing-file error, got {other:?}"),
    }
    let escaping = toml.replace("reference = \"reference.cu\"", "reference = \"../x.cu\"");
    let mut with_escape = files.clone();
    with_escape.insert("../x.cu".into(), "secret".into());
    match Task::from_toml_and_files(&escaping, &with_escape, &limits) {
        Err(TaskError::Invalid { field, message, .. }) => {
            assert_eq!(field, "reference");
            assert!(message.contains("inside the task folder"), "{message}");
        }
        other => panic!("expected the name to be refused, got {other:?}"),
    }
    let bad_dtype = toml.replacen("dtype = \"f32\"", "dtype = \"f31\"", 1);
    let e = Task::from_toml_and_files(&bad_dtype, &files, &limits).unwrap_err();
    assert!(
        e.to_string()
            .starts_with("task.toml: field `params[0].dtype`"),
        "{e}"
    );
}

/// The contract fields load as written: the floor evaluates per config, the precision
/// contract keeps its reason, and each regime its configs and distributions (`ragged` and
/// `special` included); the precision a buffer must keep follows the contract.
#[test]
fn contract_fields_load() {
    use cudaperf::task::{DType, Distribution, Precision, SpecialValue};
    let toml = replace(
        "reference = \"reference.cu\"",
        "reference = \"reference.cu\"\nmin_bytes = \"4 * n * (n + 1) / 2\"",
    ) + "[[configs]]\nname = \"big\"\nsizes = { n = 5001 }\n\
         [precision]\noperands = \"tf32\"\nreason = \"a GEMM: tensor cores are the point\"\n"
        + &regime(SPECIAL)
        + &regime("[regimes.inputs.a]\ndist = \"ragged\"\nstart = 0\nstep = 3")
            .replace("name = \"r\"", "name = \"steps\"")
            .replace("why = \"w\"", "why = \"w\"\nconfigs = [\"big\"]");
    let (_tmp, dir) = write_task(&toml, &[]);
    let t = Task::load(&dir).expect("loads");
    let floor = t.min_bytes.as_ref().expect("min_bytes");
    let sizes: Sizes = [("n".to_string(), 1000)].into();
    assert_eq!(floor.eval_f64(&sizes).unwrap(), 2_002_000.0);
    assert_eq!(t.precision.operands, Some(Precision::Tf32));
    assert!(t
        .precision
        .describe()
        .contains("tensor cores are the point"));
    assert_eq!(t.precision.required(DType::F32), Some(Precision::Tf32));
    assert_eq!(t.regimes.len(), 2);
    let (special, steps) = (&t.regimes[0], &t.regimes[1]);
    assert!(special.applies_to("small") && special.applies_to("big"));
    assert!(!steps.applies_to("small") && steps.applies_to("big"));
    match &special.inputs["a"] {
        Distribution::Special { values, rate, .. } => {
            assert_eq!(values, &[SpecialValue::Nan, SpecialValue::NegZero]);
            assert_eq!(*rate, 0.05);
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(steps.inputs["a"], Distribution::Ragged { .. }));
}
