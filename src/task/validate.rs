//! Validating a `task.toml`: one `validate_*` function per part of the format, in the order
//! the parts depend on each other (configs first: every expression is checked against their
//! size names). Every error names the file and the field.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use crate::expr::Expr;

use super::format::{RawParam, RawTask};
use super::{
    DType, Direction, Distribution, Implementation, InputConfig, Param, Precision,
    PrecisionContract, Regime, Task, TaskError, TaskKind, TaskLimits, Tolerance,
};

/// Gives a task file's path and text from `(field, name)`.
pub(super) type FileReader<'a> = dyn Fn(&str, &str) -> Result<(PathBuf, String), TaskError> + 'a;

pub(super) fn is_identifier(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// A file named by a task must be a plain relative name inside the task folder.
pub(super) fn check_task_file_name(toml: &Path, field: &str, name: &str) -> Result<(), TaskError> {
    let rel = Path::new(name);
    if name.is_empty()
        || rel.is_absolute()
        || rel
            .components()
            .any(|c| !matches!(c, std::path::Component::Normal(_)))
    {
        return Err(TaskError::Invalid {
            path: toml.to_path_buf(),
            field: field.to_string(),
            message: format!("`{name}` must be a file name inside the task folder"),
        });
    }
    Ok(())
}

/// Reads a file that must stay inside the task folder.
pub(super) fn read_task_file(
    dir: &Path,
    toml: &Path,
    field: &str,
    name: &str,
) -> Result<(PathBuf, String), TaskError> {
    let invalid = |message: String| TaskError::Invalid {
        path: toml.to_path_buf(),
        field: field.to_string(),
        message,
    };
    check_task_file_name(toml, field, name)?;
    let path = dir.join(name);
    match std::fs::read(&path) {
        Ok(bytes) => String::from_utf8(bytes)
            .map(|s| (path.clone(), s))
            .map_err(|_| invalid(format!("{} is not UTF-8 text", path.display()))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            Err(invalid(format!("file {} does not exist", path.display())))
        }
        Err(source) => Err(TaskError::Io { path, source }),
    }
}

/// The file being validated, for errors, and the configs every expression is checked in.
struct Ctx<'a> {
    toml_path: &'a Path,
    configs: &'a [InputConfig],
}

impl Ctx<'_> {
    fn invalid(&self, field: impl Into<String>, message: impl Into<String>) -> TaskError {
        TaskError::Invalid {
            path: self.toml_path.to_path_buf(),
            field: field.into(),
            message: message.into(),
        }
    }

    /// An expression over the sizes that every config defines.
    fn expr(&self, field: &str, text: &str) -> Result<Expr, TaskError> {
        let e = Expr::parse(text).map_err(|e| self.invalid(field, e.to_string()))?;
        for (ci, c) in self.configs.iter().enumerate() {
            e.check_names(c.sizes.keys().map(String::as_str))
                .map_err(|err| {
                    self.invalid(
                        field,
                        format!("{err} in config `{}` (configs[{ci}])", c.name),
                    )
                })?;
        }
        Ok(e)
    }
}

/// The id is `[a-z0-9_]+` and, for a task read from its folder, the folder's name.
fn validate_id(toml_path: &Path, dir: &Path, id: &str) -> Result<(), TaskError> {
    let invalid = |message: String| TaskError::Invalid {
        path: toml_path.to_path_buf(),
        field: "id".into(),
        message,
    };
    if id.is_empty()
        || !id
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
    {
        return Err(invalid(format!("`{id}` must match [a-z0-9_]+")));
    }
    if let Some(folder) = dir.file_name().and_then(|f| f.to_str()) {
        if folder != id && dir.join("task.toml") == toml_path {
            return Err(invalid(format!(
                "`{id}` differs from the folder name `{folder}`"
            )));
        }
    }
    Ok(())
}

/// The kind, and a reference that is the original only for a PyTorch original.
fn validate_kind(cx: &Ctx<'_>, raw: &RawTask) -> Result<TaskKind, TaskError> {
    let kind = match raw.kind.as_str() {
        "c2cuda" => TaskKind::C2cuda,
        "torch2cuda" => TaskKind::Torch2cuda,
        other => {
            return Err(cx.invalid(
                "kind",
                format!("unknown kind `{other}` (expected c2cuda or torch2cuda)"),
            ))
        }
    };
    if raw.reference == raw.original && kind != TaskKind::Torch2cuda {
        return Err(cx.invalid(
            "reference",
            "only a torch2cuda task can name its original as the reference (a PyTorch reference)",
        ));
    }
    Ok(kind)
}

/// At least one config; unique names; sizes are non-negative identifiers.
fn validate_configs(cx: &Ctx<'_>) -> Result<(), TaskError> {
    if cx.configs.is_empty() {
        return Err(cx.invalid("configs", "at least one [[configs]] entry is required"));
    }
    let mut seen = BTreeSet::new();
    for (i, c) in cx.configs.iter().enumerate() {
        if !seen.insert(c.name.as_str()) {
            return Err(cx.invalid(
                format!("configs[{i}].name"),
                format!("duplicate config name `{}`", c.name),
            ));
        }
        if c.sizes.is_empty() {
            return Err(cx.invalid(format!("configs[{i}].sizes"), "no sizes given"));
        }
        for (name, v) in &c.sizes {
            if !is_identifier(name) {
                return Err(cx.invalid(
                    format!("configs[{i}].sizes.{name}"),
                    "size names must be identifiers",
                ));
            }
            if *v < 0 {
                return Err(cx.invalid(
                    format!("configs[{i}].sizes.{name}"),
                    format!("size {v} is negative"),
                ));
            }
        }
    }
    Ok(())
}

/// A buffer's shape holds exactly its `len` elements in every config.
fn validate_shape(cx: &Ctx<'_>, field: &str, len: &Expr, shape: &[Expr]) -> Result<(), TaskError> {
    if shape.is_empty() {
        return Ok(());
    }
    for c in cx.configs {
        let n = len.eval_int(&c.sizes).unwrap_or(-1);
        let dims: Result<Vec<i64>, _> = shape.iter().map(|d| d.eval_int(&c.sizes)).collect();
        let dims = dims.map_err(|e| cx.invalid(field, e.to_string()))?;
        let product = dims.iter().try_fold(1i64, |a, &d| a.checked_mul(d));
        if dims.iter().any(|&d| d < 0) || product != Some(n) {
            return Err(cx.invalid(
                field,
                format!(
                    "shape {dims:?} does not hold len = {n} elements in config `{}`",
                    c.name
                ),
            ));
        }
    }
    Ok(())
}

/// A `kind = "buffer"` parameter: direction, length and shape.
fn validate_buffer(cx: &Ctx<'_>, i: usize, p: RawParam, dtype: DType) -> Result<Param, TaskError> {
    let field = |f: &str| format!("params[{i}].{f}");
    let dir_text = p.direction.as_deref().ok_or_else(|| {
        cx.invalid(
            field("direction"),
            "buffers need a direction (in, out, inout)",
        )
    })?;
    let direction = Direction::parse(dir_text).ok_or_else(|| {
        cx.invalid(
            field("direction"),
            format!("unknown direction `{dir_text}` (expected in, out or inout)"),
        )
    })?;
    let len_text = p
        .len
        .as_deref()
        .ok_or_else(|| cx.invalid(field("len"), "buffers need a length expression"))?;
    let len = cx.expr(&field("len"), len_text)?;
    let mut shape = Vec::new();
    for (k, d) in p.shape.iter().flatten().enumerate() {
        shape.push(cx.expr(&field(&format!("shape[{k}]")), d)?);
    }
    validate_shape(cx, &field("shape"), &len, &shape)?;
    Ok(Param::Buffer {
        name: p.name,
        direction,
        dtype,
        len,
        shape,
    })
}

/// A `kind = "scalar"` parameter: a value expression and no shape.
fn validate_scalar(cx: &Ctx<'_>, i: usize, p: RawParam, dtype: DType) -> Result<Param, TaskError> {
    let field = |f: &str| format!("params[{i}].{f}");
    if p.shape.is_some() {
        return Err(cx.invalid(field("shape"), "only buffers have a shape"));
    }
    let value_text = p
        .value
        .as_deref()
        .ok_or_else(|| cx.invalid(field("value"), "scalars need a value expression"))?;
    let value = cx.expr(&field("value"), value_text)?;
    Ok(Param::Scalar {
        name: p.name,
        dtype,
        value,
    })
}

/// One parameter: an identifier, a known dtype, a buffer or a scalar.
fn validate_param(cx: &Ctx<'_>, i: usize, p: RawParam) -> Result<Param, TaskError> {
    let field = |f: &str| format!("params[{i}].{f}");
    if !is_identifier(&p.name) {
        return Err(cx.invalid(field("name"), format!("`{}` is not an identifier", p.name)));
    }
    let dtype = DType::parse(&p.dtype).ok_or_else(|| {
        cx.invalid(
            field("dtype"),
            format!(
                "unknown dtype `{}` (expected one of f32, f64, f16, bf16, i32, i64, u8)",
                p.dtype
            ),
        )
    })?;
    match p.kind.as_str() {
        "buffer" => validate_buffer(cx, i, p, dtype),
        "scalar" => validate_scalar(cx, i, p, dtype),
        other => Err(cx.invalid(
            field("kind"),
            format!("unknown parameter kind `{other}` (expected buffer or scalar)"),
        )),
    }
}

/// The ABI: unique names, valid parameters, at least one output buffer.
fn validate_params(cx: &Ctx<'_>, raw: Vec<RawParam>) -> Result<Vec<Param>, TaskError> {
    let mut params = Vec::with_capacity(raw.len());
    let mut names = BTreeSet::new();
    for (i, p) in raw.into_iter().enumerate() {
        // The name's checks come first, as the field order of a parameter does.
        if is_identifier(&p.name) && !names.insert(p.name.clone()) {
            return Err(cx.invalid(
                format!("params[{i}].name"),
                format!("duplicate parameter name `{}`", p.name),
            ));
        }
        params.push(validate_param(cx, i, p)?);
    }
    if !params
        .iter()
        .any(|p| matches!(p, Param::Buffer { direction, .. } if direction.is_output()))
    {
        return Err(cx.invalid(
            "params",
            "the ABI has no out or inout buffer, so nothing can be checked",
        ));
    }
    Ok(params)
}

/// Distributions name input buffers, suit their dtype, and have bounds that evaluate in
/// `configs`.
fn validate_inputs(
    cx: &Ctx<'_>,
    params: &[Param],
    prefix: &str,
    given: &BTreeMap<String, Distribution>,
    configs: &[&InputConfig],
) -> Result<(), TaskError> {
    for (name, dist) in given {
        let field = format!("{prefix}.{name}");
        let dtype = match params.iter().find(|p| p.name() == name) {
            Some(Param::Buffer {
                direction, dtype, ..
            }) if direction.is_input() => *dtype,
            Some(_) => return Err(cx.invalid(field, format!("`{name}` is not an input buffer"))),
            None => return Err(cx.invalid(field, format!("no parameter named `{name}`"))),
        };
        dist.check(dtype)
            .map_err(|m| cx.invalid(field.clone(), m))?;
        for b in dist.bounds() {
            for c in configs {
                b.eval(&c.sizes).map_err(|e| {
                    cx.invalid(field.clone(), format!("{e} in config `{}`", c.name))
                })?;
            }
        }
    }
    Ok(())
}

/// The given distributions, and the dtype's default for every other input buffer.
fn inputs_with_defaults(
    params: &[Param],
    given: &BTreeMap<String, Distribution>,
) -> BTreeMap<String, Distribution> {
    let mut inputs = given.clone();
    for p in params {
        if let Param::Buffer {
            name,
            direction,
            dtype,
            ..
        } = p
        {
            if direction.is_input() && !inputs.contains_key(name) {
                inputs.insert(name.clone(), Distribution::default_for(*dtype));
            }
        }
    }
    inputs
}

fn validate_tolerance(cx: &Ctx<'_>, tolerance: Option<Tolerance>) -> Result<Tolerance, TaskError> {
    let tolerance = tolerance.unwrap_or_default();
    let valid = |x: f64| x.is_finite() && x >= 0.0;
    if !(valid(tolerance.atol) && valid(tolerance.rtol)) {
        return Err(cx.invalid("tolerance", "atol and rtol must be finite and >= 0"));
    }
    Ok(tolerance)
}

/// A count over the sizes (`flops`, `min_bytes`) that is finite and >= 0 in every config.
fn validate_count(
    cx: &Ctx<'_>,
    field: &str,
    text: &Option<String>,
) -> Result<Option<Expr>, TaskError> {
    let Some(text) = text else { return Ok(None) };
    let e = Expr::parse(text).map_err(|e| cx.invalid(field, e.to_string()))?;
    for (ci, c) in cx.configs.iter().enumerate() {
        let v = e.eval_f64(&c.sizes).map_err(|err| {
            cx.invalid(
                field,
                format!("{err} in config `{}` (configs[{ci}])", c.name),
            )
        })?;
        if !(v.is_finite() && v >= 0.0) {
            return Err(cx.invalid(
                field,
                format!(
                    "evaluates to {v} in config `{}` (configs[{ci}]); it must be a finite count >= 0",
                    c.name
                ),
            ));
        }
    }
    Ok(Some(e))
}

/// Lowering the precision below an input's own type needs a reason.
fn validate_precision(
    cx: &Ctx<'_>,
    params: &[Param],
    precision: &PrecisionContract,
) -> Result<(), TaskError> {
    let Some(p) = precision.operands else {
        return Ok(());
    };
    let lowered = params.iter().any(|param| {
        matches!(param, Param::Buffer { direction, dtype, .. }
            if direction.is_input() && Precision::of(*dtype).is_some_and(|own| p > own))
    });
    if lowered && precision.reason.trim().is_empty() {
        return Err(cx.invalid(
            "precision.reason",
            format!("`operands = \"{p}\"` allows less precision than the inputs' types: say why in `reason`"),
        ));
    }
    Ok(())
}

/// Input regimes: unique names, known configs, valid distributions.
fn validate_regimes(cx: &Ctx<'_>, params: &[Param], regimes: &[Regime]) -> Result<(), TaskError> {
    let mut names = BTreeSet::new();
    for (ri, r) in regimes.iter().enumerate() {
        let field = |f: &str| format!("regimes[{ri}].{f}");
        if !is_identifier(&r.name) || !names.insert(r.name.as_str()) {
            return Err(cx.invalid(
                field("name"),
                format!(
                    "`{}` must be an identifier, unique among the regimes",
                    r.name
                ),
            ));
        }
        if r.inputs.is_empty() {
            return Err(cx.invalid(
                field("inputs"),
                "a regime replaces the distribution of at least one input",
            ));
        }
        for name in &r.configs {
            if !cx.configs.iter().any(|c| &c.name == name) {
                return Err(cx.invalid(field("configs"), format!("no config named `{name}`")));
            }
        }
        let configs: Vec<&InputConfig> = cx
            .configs
            .iter()
            .filter(|c| r.applies_to(&c.name))
            .collect();
        validate_inputs(cx, params, &field("inputs"), &r.inputs, &configs)?;
    }
    Ok(())
}

/// The NumPy twin exists and belongs to a torch2cuda task.
fn validate_numpy_twin(
    cx: &Ctx<'_>,
    kind: TaskKind,
    twin: &Option<String>,
    read: &FileReader,
) -> Result<Option<String>, TaskError> {
    match twin {
        None => Ok(None),
        Some(f) if kind == TaskKind::Torch2cuda => {
            read("numpy_twin", f)?;
            Ok(Some(f.clone()))
        }
        Some(_) => Err(cx.invalid(
            "numpy_twin",
            "only torch2cuda tasks have a NumPy twin of their original",
        )),
    }
}

fn load_implementation(
    read: &FileReader,
    field: &str,
    file: &str,
) -> Result<Implementation, TaskError> {
    let (path, source) = read(field, file)?;
    let name = Path::new(file)
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or(file)
        .to_string();
    Ok(Implementation { name, path, source })
}

/// The reference and the implementations, with unique names.
fn validate_implementations(
    cx: &Ctx<'_>,
    raw: &RawTask,
    read: &FileReader,
) -> Result<(Implementation, Vec<Implementation>), TaskError> {
    let reference = load_implementation(read, "reference", &raw.reference)?;
    let mut implementations = Vec::new();
    let mut names = BTreeSet::from([reference.name.clone()]);
    for (i, f) in raw.implementations.iter().enumerate() {
        let imp = load_implementation(read, &format!("implementations[{i}]"), f)?;
        if !names.insert(imp.name.clone()) {
            return Err(cx.invalid(
                format!("implementations[{i}]"),
                format!("duplicate implementation name `{}`", imp.name),
            ));
        }
        implementations.push(imp);
    }
    Ok((reference, implementations))
}

/// Every config's buffers fit in the byte cap.
fn validate_sizes(cx: &Ctx<'_>, task: &Task, limits: &TaskLimits) -> Result<(), TaskError> {
    for (ci, c) in task.configs.iter().enumerate() {
        let bytes = task.buffer_bytes(c).map_err(|m| {
            cx.invalid(
                format!("configs[{ci}]"),
                format!("config `{}`: {m}", c.name),
            )
        })?;
        if bytes > limits.max_buffer_bytes {
            return Err(cx.invalid(format!("configs[{ci}]"), limits.over_cap(&c.name, bytes)));
        }
    }
    Ok(())
}

/// Parses and validates task TOML text; `read(field, name)` gives a named file's path and
/// text.
pub(super) fn task(
    text: &str,
    toml_path: &Path,
    dir: &Path,
    limits: &TaskLimits,
    read: &FileReader,
) -> Result<Task, TaskError> {
    let mut raw: RawTask = toml::from_str(text).map_err(|e| TaskError::Parse {
        path: toml_path.to_path_buf(),
        message: e.to_string(),
    })?;
    validate_id(toml_path, dir, &raw.id)?;
    let configs = std::mem::take(&mut raw.configs);
    let cx = Ctx {
        toml_path,
        configs: &configs,
    };
    let kind = validate_kind(&cx, &raw)?;
    validate_configs(&cx)?;
    let params = validate_params(&cx, std::mem::take(&mut raw.params))?;
    let all_configs: Vec<&InputConfig> = configs.iter().collect();
    validate_inputs(&cx, &params, "inputs", &raw.inputs, &all_configs)?;
    let inputs = inputs_with_defaults(&params, &raw.inputs);
    let tolerance = validate_tolerance(&cx, raw.tolerance)?;
    let flops = validate_count(&cx, "flops", &raw.flops)?;
    let min_bytes = validate_count(&cx, "min_bytes", &raw.min_bytes)?;
    validate_precision(&cx, &params, &raw.precision)?;
    validate_regimes(&cx, &params, &raw.regimes)?;
    let (_, original) = read("original", &raw.original)?;
    let numpy_twin = validate_numpy_twin(&cx, kind, &raw.numpy_twin, read)?;
    let (reference, implementations) = validate_implementations(&cx, &raw, read)?;
    let task = Task {
        id: raw.id,
        kind,
        title: raw.title,
        dir: dir.to_path_buf(),
        original_file: raw.original,
        original,
        params,
        configs,
        inputs,
        tolerance,
        reference,
        implementations,
        flops,
        numpy_twin,
        min_bytes,
        precision: raw.precision,
        regimes: raw.regimes,
    };
    let cx = Ctx {
        toml_path,
        configs: &task.configs,
    };
    validate_sizes(&cx, &task, limits)?;
    Ok(task)
}
