//! From the probe's facts to a task folder's files: size symbols, the ABI, configs,
//! distributions, tolerances, `task.toml` and the `original.py` that wraps the problem in the
//! crate's convention. Pure (no Python): the probe's JSON in, file texts out.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Deserialize;

/// What the probe found (see `probe.py`).
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct Probe {
    /// Python sources of `get_init_inputs()`'s values.
    pub init_inputs: Vec<String>,
    /// Non-tensor entries of `get_inputs()`, by position, as Python sources.
    #[serde(default)]
    pub constants: BTreeMap<String, String>,
    /// The forward's tensor inputs.
    pub inputs: Vec<ProbeTensor>,
    /// The module's parameters and buffers (dotted names).
    pub params: Vec<ProbeTensor>,
    /// The outputs.
    pub outputs: Vec<ProbeTensor>,
    /// Length of `get_inputs()`'s list.
    pub forward_args: usize,
    /// The file's config first, then smaller ones.
    pub configs: Vec<ProbeConfig>,
    /// PyTorch's version.
    #[serde(default)]
    pub torch: String,
}

/// One tensor.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct ProbeTensor {
    /// Its name (forward argument, dotted state name; empty for outputs).
    #[serde(default)]
    pub name: String,
    /// Position in `get_inputs()` (inputs only).
    #[serde(default)]
    pub position: usize,
    /// Task dtype.
    pub dtype: String,
    /// Distribution of its values, as the task format's `[inputs.x]` table.
    #[serde(default)]
    pub dist: Option<serde_json::Map<String, serde_json::Value>>,
}

/// One config: the module-level size constants set, every tensor's shape.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct ProbeConfig {
    pub name: String,
    pub globals: BTreeMap<String, i64>,
    /// Inputs, then params, then outputs.
    pub shapes: Vec<Vec<i64>>,
}

/// The files of an imported task.
#[derive(Debug, Clone)]
pub(crate) struct TaskFiles {
    pub toml: String,
    pub original: String,
}

/// A name usable as an ABI parameter or a size: ASCII letters, digits and `_`, starting
/// with a letter.
fn ident(raw: &str) -> String {
    let mut s: String = raw
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '_'
            }
        })
        .collect();
    if !s.starts_with(|c: char| c.is_ascii_alphabetic()) {
        s.insert_str(0, "t_");
    }
    s
}

/// `name`, or `name_2`, `name_3`... whichever is not taken yet; marks it taken.
fn unique(name: String, taken: &mut Vec<String>) -> String {
    let mut n = name.clone();
    let mut k = 2;
    while taken.contains(&n) {
        n = format!("{name}_{k}");
        k += 1;
    }
    taken.push(n.clone());
    n
}

/// Size symbols: each tensor axis whose extent changes between configs is a size, shared by
/// every axis with the same extents in every config and named after the module constant
/// with those values where there is one; axes of fixed extent are literals.
pub(crate) struct Symbols {
    /// Per tensor, per axis: a size name or a literal.
    pub dims: Vec<Vec<String>>,
    /// Size names in order of first use, with their value in each config.
    pub sizes: Vec<(String, Vec<i64>)>,
}

pub(crate) fn symbols(
    probe: &Probe,
    tensor_names: &[String],
    taken: &mut Vec<String>,
) -> Result<Symbols, String> {
    let n = tensor_names.len();
    let first = probe.configs.first().ok_or("the probe found no config")?;
    for c in &probe.configs {
        if c.shapes.len() != n {
            return Err(format!(
                "config `{}` has {} tensors, the file's has {n}",
                c.name,
                c.shapes.len()
            ));
        }
        for (t, s) in c.shapes.iter().enumerate() {
            if s.len() != first.shapes[t].len() {
                return Err(format!(
                    "`{}` has rank {} in config `{}` but {} at the file's sizes: the rank changes with the sizes",
                    tensor_names[t],
                    s.len(),
                    c.name,
                    first.shapes[t].len()
                ));
            }
        }
    }
    let mut sizes: Vec<(String, Vec<i64>)> = Vec::new();
    let mut dims = Vec::with_capacity(n);
    for (t, shape) in first.shapes.iter().enumerate() {
        let mut axes = Vec::with_capacity(shape.len());
        for axis in 0..shape.len() {
            let values: Vec<i64> = probe.configs.iter().map(|c| c.shapes[t][axis]).collect();
            if values.iter().all(|&v| v == values[0]) {
                axes.push(values[0].to_string());
                continue;
            }
            if let Some((name, _)) = sizes.iter().find(|(_, v)| *v == values) {
                axes.push(name.clone());
                continue;
            }
            let global = first.globals.keys().find(|g| {
                probe
                    .configs
                    .iter()
                    .zip(&values)
                    .all(|(c, v)| c.globals.get(*g) == Some(v))
            });
            let name = match global {
                Some(g) => ident(g),
                None => format!("{}_d{axis}", tensor_names[t]),
            };
            let name = unique(name, taken);
            axes.push(name.clone());
            sizes.push((name, values));
        }
        dims.push(axes);
    }
    Ok(Symbols { dims, sizes })
}

/// Tolerance by the least precise output type: what reordered sums of that type stay
/// within (KernelBench's fixed 1e-2 lets an f32 kernel lose half its digits).
fn tolerance(outputs: &[ProbeTensor]) -> (f64, f64) {
    let rank = |d: &str| match d {
        "bf16" => 4,
        "f16" => 3,
        "f32" => 2,
        "f64" => 1,
        _ => 0,
    };
    match outputs.iter().map(|o| rank(&o.dtype)).max().unwrap_or(0) {
        4 => (2e-2, 2e-2),
        3 => (1e-2, 1e-2),
        2 => (1e-3, 1e-3),
        1 => (1e-8, 1e-8),
        _ => (0.0, 0.0),
    }
}

fn toml_str(s: &str) -> String {
    toml_value(&serde_json::Value::String(s.to_string()))
}

fn toml_value(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::String(s) => serde_json::to_string(s).unwrap_or_default(),
        serde_json::Value::Number(n) => {
            // TOML floats need a fraction or exponent; JSON integers stay integers.
            let t = n.to_string();
            if n.is_f64() && !t.contains(['.', 'e', 'E']) {
                format!("{t}.0")
            } else {
                t
            }
        }
        other => other.to_string(),
    }
}

/// The task's files for a probed problem; `id` is the task id, `problem_name` the source
/// file's name (for the comments), `problem_source` its text.
pub(crate) fn task_files(
    probe: &Probe,
    id: &str,
    problem_name: &str,
    problem_source: &str,
) -> Result<TaskFiles, String> {
    let mut taken = Vec::new();
    let (tensor_names, directions) = abi_names(probe, &mut taken);
    let tensors: Vec<&ProbeTensor> = (probe.inputs.iter())
        .chain(&probe.params)
        .chain(&probe.outputs)
        .collect();
    let sym = symbols(probe, &tensor_names, &mut taken)?;
    let mut t = String::new();
    write_header(&mut t, probe, id, problem_name);
    let abi = Abi {
        names: &tensor_names,
        directions: &directions,
        tensors: &tensors,
    };
    write_buffer_params(&mut t, probe, &abi, &sym);
    write_size_params(&mut t, &sym);
    write_configs(&mut t, probe, &sym);
    write_inputs(&mut t, &abi);
    let _ = writeln!(t, "\n# Input regimes: none written by the import (add the ones the module's semantics define,");
    let _ = writeln!(t, "# docs/task-regimes.md).");
    let original = wrapper(probe, problem_name, problem_source, &tensor_names);
    Ok(TaskFiles { toml: t, original })
}

/// The ABI's buffers as the task file names them, in order (inputs, the module's
/// parameters and buffers, outputs), with their directions.
fn abi_names(probe: &Probe, taken: &mut Vec<String>) -> (Vec<String>, Vec<&'static str>) {
    let mut names = Vec::new();
    let mut directions = Vec::new();
    for t in probe.inputs.iter().chain(&probe.params) {
        names.push(unique(ident(&t.name), taken));
        directions.push("in");
    }
    for k in 0..probe.outputs.len() {
        let name = if probe.outputs.len() == 1 {
            "out".to_string()
        } else {
            format!("out{k}")
        };
        names.push(unique(name, taken));
        directions.push("out");
    }
    (names, directions)
}

/// The ABI's buffers: names, directions and the probed tensors, in order.
struct Abi<'a> {
    names: &'a [String],
    directions: &'a [&'static str],
    tensors: &'a [&'a ProbeTensor],
}

/// The task file's head: where it came from, its id, kind, files and tolerance.
fn write_header(t: &mut String, probe: &Probe, id: &str, problem_name: &str) {
    let (atol, rtol) = tolerance(&probe.outputs);
    let _ = writeln!(
        t,
        "# Imported by `cudaperf tasks import` from {problem_name} (PyTorch {}).",
        probe.torch
    );
    let _ = writeln!(t, "# The original is the problem itself plus a wrapper in the crate's convention: forward takes the");
    let _ = writeln!(t, "# problem's inputs, then its module's parameters and buffers (inputs like any other, drawn from");
    let _ = writeln!(
        t,
        "# the job's seed), and returns the outputs. The reference is that PyTorch original."
    );
    let _ = writeln!(t, "id = {}", toml_str(id));
    let _ = writeln!(t, "kind = \"torch2cuda\"");
    let _ = writeln!(
        t,
        "title = {}",
        toml_str(&format!("{problem_name} (PyTorch module, imported)"))
    );
    let _ = writeln!(t, "original = \"original.py\"");
    let _ = writeln!(t, "reference = \"original.py\"");
    let _ = writeln!(
        t,
        "\n# By output type ({}): reordered sums of that type stay within it.",
        probe
            .outputs
            .iter()
            .map(|o| o.dtype.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    );
    let _ = writeln!(t, "[tolerance]\natol = {atol:e}\nrtol = {rtol:e}");
}

/// One `[[params]]` buffer entry per ABI tensor, with its length and shape in size names.
fn write_buffer_params(t: &mut String, probe: &Probe, abi: &Abi<'_>, sym: &Symbols) {
    for (k, name) in abi.names.iter().enumerate() {
        let dims = &sym.dims[k];
        let len = if dims.is_empty() {
            "1".to_string()
        } else {
            dims.join(" * ")
        };
        let shape: Vec<String> = if dims.is_empty() {
            vec![toml_str("1")]
        } else {
            dims.iter().map(|d| toml_str(d)).collect()
        };
        let _ = writeln!(t, "\n[[params]]");
        if k >= probe.inputs.len() && k < probe.inputs.len() + probe.params.len() {
            let _ = writeln!(
                t,
                "# the module's `{}`",
                probe.params[k - probe.inputs.len()].name
            );
        }
        let _ = writeln!(t, "name = {}", toml_str(name));
        let _ = writeln!(t, "kind = \"buffer\"");
        let _ = writeln!(t, "direction = \"{}\"", abi.directions[k]);
        let _ = writeln!(t, "dtype = {}", toml_str(&abi.tensors[k].dtype));
        let _ = writeln!(t, "len = {}", toml_str(&len));
        let _ = writeln!(t, "shape = [{}]", shape.join(", "));
    }
}

/// One scalar `[[params]]` entry per size (`i64` where a value passes 2^31).
fn write_size_params(t: &mut String, sym: &Symbols) {
    for (name, values) in &sym.sizes {
        let dtype = if values.iter().all(|&v| v <= i32::MAX as i64) {
            "i32"
        } else {
            "i64"
        };
        let _ = writeln!(
            t,
            "\n[[params]]\nname = {}\nkind = \"scalar\"\ndtype = \"{dtype}\"\nvalue = {}",
            toml_str(name),
            toml_str(name)
        );
    }
}

/// The configs, smallest first; the file's own sizes last (the timed config is the largest).
fn write_configs(t: &mut String, probe: &Probe, sym: &Symbols) {
    let mut order: Vec<usize> = (0..probe.configs.len()).collect();
    order.sort_by_key(|&ci| {
        (probe.configs[ci].shapes.iter())
            .map(|s| s.iter().product::<i64>())
            .sum::<i64>()
    });
    for ci in order {
        let c = &probe.configs[ci];
        let sizes: Vec<String> = (sym.sizes.iter())
            .map(|(n, v)| format!("{n} = {}", v[ci]))
            .collect();
        let _ = writeln!(t, "\n[[configs]]\nname = {}", toml_str(&c.name));
        let _ = writeln!(t, "sizes = {{ {} }}", sizes.join(", "));
    }
}

/// The input distributions resembling the file's own draws.
fn write_inputs(t: &mut String, abi: &Abi<'_>) {
    for (k, name) in abi.names.iter().enumerate() {
        if abi.directions[k] != "in" {
            continue;
        }
        if let Some(d) = &abi.tensors[k].dist {
            let _ = writeln!(t, "\n[inputs.{name}]");
            for (key, v) in d {
                let _ = writeln!(t, "{key} = {}", toml_value(v));
            }
        }
    }
}

/// The Python lists the wrapper is written with: where each tensor input goes among
/// forward's arguments, the constant arguments, the names of the module's state, and the
/// inputs that are 0-dimensional.
struct WrapperLists {
    positions: Vec<String>,
    constants: Vec<String>,
    state: Vec<String>,
    rank0: Vec<String>,
}

impl WrapperLists {
    fn of(probe: &Probe) -> WrapperLists {
        let rank0 = (probe
            .configs
            .first()
            .map(|c| &c.shapes)
            .into_iter()
            .flatten())
        .take(probe.inputs.len() + probe.params.len())
        .enumerate()
        .filter(|(_, s)| s.is_empty())
        .map(|(k, _)| k.to_string())
        .collect();
        WrapperLists {
            positions: (probe.inputs.iter())
                .map(|t| t.position.to_string())
                .collect(),
            constants: (probe.constants.iter())
                .map(|(k, v)| format!("{k}: {v}"))
                .collect(),
            state: (probe.params.iter())
                .map(|p| serde_json::to_string(&p.name).unwrap_or_default())
                .collect(),
            rank0,
        }
    }
}

/// `original.py`: the problem's text unchanged, then the wrapper that gives it the crate's
/// convention (`Model()` without arguments, every ABI input to `forward`).
fn wrapper(probe: &Probe, problem_name: &str, source: &str, names: &[String]) -> String {
    let WrapperLists {
        positions,
        constants,
        state,
        rank0,
    } = WrapperLists::of(probe);
    let args: Vec<&str> = names[..probe.inputs.len() + probe.params.len()]
        .iter()
        .map(|s| s.as_str())
        .collect();
    let mut w = String::new();
    let _ = writeln!(w, "{}", source.trim_end());
    let _ = writeln!(
        w,
        r#"


# ---- cudaperf: the problem above ({problem_name}, unchanged) in the crate's convention ----
# Written by `cudaperf tasks import`. The kernel's ABI, in order: {abi}.
# forward({args}) computes the problem's Model(*get_init_inputs()) on the problem's inputs,
# with the module's parameters and buffers taken from the arguments after them.
import torch as _cudaperf_torch
from torch.func import functional_call as _cudaperf_functional_call

_cudaperf_torch.backends.cuda.matmul.allow_tf32 = False
_cudaperf_torch.backends.cudnn.allow_tf32 = False
_CUDAPERF_PROBLEM = Model
_CUDAPERF_INIT_INPUTS = [{init}]
_CUDAPERF_FORWARD_ARGS = {nargs}
_CUDAPERF_TENSOR_POSITIONS = [{positions}]
_CUDAPERF_CONSTANTS = {{{constants}}}
_CUDAPERF_STATE = [{state}]
_CUDAPERF_RANK0 = {{{rank0}}}


class Model(_cudaperf_torch.nn.Module):
    def __init__(self):
        super().__init__()
        # The problem's methods may name `Model` (KernelBench writes `super(Model, self)`):
        # while the problem is built, that name is its own class again.
        names = globals()
        wrapper, names["Model"] = names["Model"], _CUDAPERF_PROBLEM
        try:
            self.problem = _CUDAPERF_PROBLEM(*_CUDAPERF_INIT_INPUTS)
        finally:
            names["Model"] = wrapper
        self.problem.eval()

    def forward(self, *tensors):
        tensors = [t.reshape(()) if k in _CUDAPERF_RANK0 else t for k, t in enumerate(tensors)]
        n = len(_CUDAPERF_TENSOR_POSITIONS)
        args = [None] * _CUDAPERF_FORWARD_ARGS
        for k, p in enumerate(_CUDAPERF_TENSOR_POSITIONS):
            args[p] = tensors[k]
        for p, v in _CUDAPERF_CONSTANTS.items():
            args[p] = v
        state = dict(zip(_CUDAPERF_STATE, tensors[n:]))
        return _cudaperf_functional_call(self.problem, state, tuple(args))"#,
        abi = names.join(", "),
        args = args.join(", "),
        init = probe.init_inputs.join(", "),
        nargs = probe.forward_args,
        positions = positions.join(", "),
        constants = constants.join(", "),
        state = state.join(", "),
        rank0 = rank0.join(", "),
    );
    w
}

#[cfg(test)]
mod tests {
    use super::*;

    fn probe(json: serde_json::Value) -> Probe {
        serde_json::from_value(json).unwrap()
    }

    // A linear layer: batch scales with the constant `batch_size`, features stay fixed;
    // the output's batch axis must share the input's symbol, the weight be literal.
    #[test]
    fn symbols_follow_constants_and_share_axes() {
        let p = probe(serde_json::json!({
            "init_inputs": ["64", "32"], "forward_args": 1,
            "inputs": [{"name": "x", "position": 0, "dtype": "f32"}],
            "params": [{"name": "fc.weight", "dtype": "f32"}, {"name": "fc.bias", "dtype": "f32"}],
            "outputs": [{"dtype": "f32"}],
            "configs": [
                {"name": "file", "globals": {"batch_size": 128}, "shapes": [[128, 64], [32, 64], [32], [128, 32]]},
                {"name": "small_odd", "globals": {"batch_size": 9}, "shapes": [[9, 64], [32, 64], [32], [9, 32]]}
            ]
        }));
        let names: Vec<String> = ["x", "fc_weight", "fc_bias", "out"]
            .map(String::from)
            .to_vec();
        let s = symbols(&p, &names, &mut names.clone()).unwrap();
        assert_eq!(s.dims[0], ["batch_size", "64"]);
        assert_eq!(s.dims[1], ["32", "64"]);
        assert_eq!(s.dims[3], ["batch_size", "32"]);
        assert_eq!(s.sizes, vec![("batch_size".to_string(), vec![128, 9])]);
    }

    // An output axis that follows no constant (a convolution's H - 2) gets its own size.
    #[test]
    fn derived_axes_get_their_own_size() {
        let p = probe(serde_json::json!({
            "init_inputs": [], "forward_args": 1,
            "inputs": [{"name": "x", "position": 0, "dtype": "f32"}],
            "params": [], "outputs": [{"dtype": "f32"}],
            "configs": [
                {"name": "file", "globals": {"height": 256}, "shapes": [[256], [254]]},
                {"name": "small_odd", "globals": {"height": 17}, "shapes": [[17], [15]]}
            ]
        }));
        let names: Vec<String> = vec!["x".into(), "out".into()];
        let s = symbols(&p, &names, &mut names.clone()).unwrap();
        assert_eq!(
            s.dims,
            vec![vec!["height".to_string()], vec!["out_d0".to_string()]]
        );
    }

    #[test]
    fn rank_change_is_refused() {
        let p = probe(serde_json::json!({
            "init_inputs": [], "forward_args": 1,
            "inputs": [{"name": "x", "position": 0, "dtype": "f32"}],
            "params": [], "outputs": [{"dtype": "f32"}],
            "configs": [
                {"name": "file", "globals": {}, "shapes": [[4], [4]]},
                {"name": "small_odd", "globals": {}, "shapes": [[3], [3, 1]]}
            ]
        }));
        let names: Vec<String> = vec!["x".into(), "out".into()];
        let e = symbols(&p, &names, &mut names.clone()).err().unwrap();
        assert!(e.contains("rank changes"), "{e}");
    }

    #[test]
    fn names_are_identifiers_and_unique() {
        let mut taken = vec!["x".to_string()];
        assert_eq!(unique(ident("x"), &mut taken), "x_2");
        assert_eq!(ident("0.weight"), "t_0_weight");
        assert_eq!(ident("Conv.Bias"), "conv_bias");
    }
}
