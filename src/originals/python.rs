//! A torch2cuda original: `original.py`'s `Model` run with PyTorch, or the task's NumPy twin,
//! through `driver.py`; and the PyTorch-eager time of the module on the GPU.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use serde_json::json;

use super::{
    io_error, read_outputs, run_limited, run_limited_full, write_inputs, Ended, Engine,
    OriginalError, OriginalOutputs, Tools,
};
use crate::exec::ConfigValues;
use crate::inputs::HostInputs;
use crate::task::{BufferParam, InputConfig, Task};

const DRIVER: &str = include_str!("driver.py");

/// Each ABI buffer with its shape on a config; a buffer without `shape` is flat.
fn buffer_shapes<'t>(
    task: &'t Task,
    cfg: &InputConfig,
) -> Result<Vec<(BufferParam<'t>, Vec<i64>)>, String> {
    let lens = task.buffer_lens(cfg).map_err(|e| e.to_string())?;
    task.buffers()
        .zip(lens)
        .map(|(b, (_, _, len))| {
            let dims = if b.shape.is_empty() {
                vec![len as i64]
            } else {
                b.shape
                    .iter()
                    .map(|d| d.eval_int(&cfg.sizes))
                    .collect::<Result<_, _>>()
                    .map_err(|e| format!("shape of `{}`: {e}", b.name))?
            };
            Ok((b, dims))
        })
        .collect()
}

/// `python driver.py spec.json`, both written into `dir`.
fn driver_command(
    python: &str,
    dir: &Path,
    spec: &serde_json::Value,
) -> Result<Command, OriginalError> {
    let spec_path = dir.join("spec.json");
    std::fs::write(&spec_path, spec.to_string()).map_err(|e| io_error(&spec_path, e))?;
    let driver = dir.join("driver.py");
    std::fs::write(&driver, DRIVER).map_err(|e| io_error(&driver, e))?;
    let mut cmd = Command::new(python);
    cmd.arg(&driver).arg(&spec_path);
    Ok(cmd)
}

fn module_path(task: &Task, engine: Engine) -> Result<std::path::PathBuf, OriginalError> {
    let file = match engine {
        Engine::Numpy => task
            .numpy_twin
            .as_deref()
            .ok_or_else(|| OriginalError::NoTwin {
                task: task.id.clone(),
            })?,
        _ => task.original_file.as_str(),
    };
    let p = task.dir.join(file);
    p.canonicalize().map_err(|e| io_error(&p, e))
}

pub(super) fn run(
    task: &Task,
    cfg: &InputConfig,
    inputs: &HostInputs,
    engine: Engine,
    tools: &Tools,
    dir: &Path,
    limit: Duration,
) -> Result<OriginalOutputs, OriginalError> {
    let python = tools
        .python
        .as_deref()
        .ok_or_else(|| OriginalError::Missing {
            tool: "python3 with numpy".into(),
            reason: "`python3 -c 'import numpy'` failed".into(),
        })?;
    if engine == Engine::Torch && !tools.torch {
        return Err(OriginalError::Missing {
            tool: "PyTorch".into(),
            reason: "`import torch` failed".into(),
        });
    }
    let shapes = buffer_shapes(task, cfg).map_err(|reason| OriginalError::Output {
        task: task.id.clone(),
        buffer: "(shapes)".into(),
        reason,
    })?;
    let module = module_path(task, engine)?;
    let file = |kind: &str, i: usize| dir.join(format!("{kind}_{i}.bin"));
    let mut ins = Vec::new();
    let mut outs = Vec::new();
    for (i, (b, shape)) in shapes.iter().enumerate() {
        let (name, dtype) = (b.name, b.dtype.as_str());
        if b.direction.is_input() {
            ins.push(json!({"name": name, "file": file("in", i), "dtype": dtype, "shape": shape}));
        }
        if b.direction.is_output() {
            outs.push(
                json!({"name": name, "file": file("out", i), "dtype": dtype, "shape": shape}),
            );
        }
    }
    let spec = json!({
        "mode": if engine == Engine::Numpy { "numpy" } else { "torch" },
        "module": module,
        "cuda": true,
        "inputs": ins,
        "outputs": outs,
    });
    write_inputs(inputs, dir)?;
    let cmd = driver_command(python, dir, &spec)?;
    let failed = |reason: String| OriginalError::Run {
        task: task.id.clone(),
        engine,
        config: cfg.name.clone(),
        reason,
    };
    let (ended, seconds) = run_limited(cmd, limit).map_err(failed)?;
    match ended {
        Ended::Exited(true, _) => {}
        Ended::Exited(false, log) => return Err(failed(format!("non-zero exit; output: {log}"))),
        Ended::TimedOut => {
            return Err(OriginalError::Timeout {
                task: task.id.clone(),
                engine,
                config: cfg.name.clone(),
                seconds: limit.as_secs_f64(),
            })
        }
    }
    Ok(OriginalOutputs {
        engine,
        buffers: read_outputs(task, inputs, dir)?,
        seconds,
    })
}

/// The PyTorch-eager time of each `(task, config)` module on this machine's GPU, in one
/// Python process (PyTorch imported once): inputs drawn there from the task's distributions,
/// an L2-sized buffer written before every run (as the timing protocol flushes L2), 5
/// warm-ups, then `runs` timed runs with CUDA events. Per item, the driver's JSON line
/// (`median_ms`, `min_ms`, `runs`, `device`, `torch`) or why it failed.
pub fn torch_eager_ms(
    items: &[(&Task, &InputConfig)],
    runs: usize,
    flush_bytes: u64,
    limit: Duration,
) -> Result<Vec<Result<serde_json::Value, String>>, OriginalError> {
    let specs = time_many_specs(items, runs, flush_bytes)?;
    let dir = super::ScratchDir::new("torch-eager")?;
    let spec = json!({"mode": "time_many", "items": specs});
    let cmd = driver_command("python3", dir.path(), &spec)?;
    let whole = |reason: String| OriginalError::Run {
        task: "(torch-eager)".into(),
        engine: Engine::Torch,
        config: "timed".into(),
        reason,
    };
    let (ended, _) = run_limited_full(cmd, limit).map_err(whole)?;
    let out = match ended {
        Ended::Exited(_, out) => out,
        Ended::TimedOut => {
            return Err(OriginalError::Timeout {
                task: "(torch-eager)".into(),
                engine: Engine::Torch,
                config: "timed".into(),
                seconds: limit.as_secs_f64(),
            })
        }
    };
    Ok(time_many_results(&out, items.len()))
}

/// The driver's `time_many` item of each `(task, config)`: its module, input fills and
/// run counts.
fn time_many_specs(
    items: &[(&Task, &InputConfig)],
    runs: usize,
    flush_bytes: u64,
) -> Result<Vec<serde_json::Value>, OriginalError> {
    let failed = |task: &Task, cfg: &InputConfig, reason: String| OriginalError::Run {
        task: task.id.clone(),
        engine: Engine::Torch,
        config: cfg.name.clone(),
        reason,
    };
    let mut specs = Vec::new();
    for (index, &(task, cfg)) in items.iter().enumerate() {
        let values = ConfigValues::of(task, cfg).map_err(|r| failed(task, cfg, r.to_string()))?;
        let shapes = buffer_shapes(task, cfg).map_err(|r| failed(task, cfg, r))?;
        let ins: Vec<_> = shapes
            .iter()
            .zip(&values.fills)
            .filter_map(|((b, shape), f)| {
                f.as_ref().map(|f| {
                    json!({"name": b.name, "dtype": b.dtype.as_str(), "shape": shape,
                           "fill": {"mode": f.mode, "a": f.a, "b": f.b}})
                })
            })
            .collect();
        specs.push(json!({
            "index": index,
            "module": module_path(task, Engine::Torch)?,
            "inputs": ins,
            "warmup": 5,
            "runs": runs.max(1),
            "flush_bytes": flush_bytes,
        }));
    }
    Ok(specs)
}

/// Each item's JSON line from the driver's output, or why there is none.
fn time_many_results(out: &str, n: usize) -> Vec<Result<serde_json::Value, String>> {
    let mut results: Vec<Result<serde_json::Value, String>> = (0..n)
        .map(|_| {
            Err(format!(
                "no result (the driver stopped early); its output ended with: {}",
                tail(out)
            ))
        })
        .collect();
    for v in out
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
    {
        let Some(i) = v["index"].as_u64().map(|i| i as usize).filter(|&i| i < n) else {
            continue;
        };
        results[i] = match v["error"].as_str() {
            Some(e) => Err(e.to_string()),
            None => Ok(v),
        };
    }
    results
}

fn tail(s: &str) -> &str {
    let mut start = s.len().saturating_sub(600);
    while !s.is_char_boundary(start) {
        start += 1;
    }
    &s[start..]
}
