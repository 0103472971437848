//! A C original: a driver that includes `original.c`, reads the inputs, calls the task's
//! function with the config's scalars and writes the outputs; built with the system compiler.

use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use super::{
    io_error, read_outputs, run_limited, write_inputs, Ended, Engine, OriginalError,
    OriginalOutputs, Tools,
};
use crate::inputs::HostInputs;
use crate::task::{DType, Direction, InputConfig, Param, Task};

/// The C type of a dtype in an original (see docs/task-format.md).
fn c_type(d: DType) -> Option<&'static str> {
    Some(match d {
        DType::F32 => "float",
        DType::F64 => "double",
        DType::I32 => "int",
        DType::I64 => "long long",
        DType::U8 => "unsigned char",
        DType::F16 => "_Float16",
        DType::Bf16 => return None,
    })
}

/// The driver's source for this config.
fn driver_source(task: &Task, inputs: &HostInputs, original: &Path) -> Result<String, String> {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "#include <stdio.h>\n#include <stdlib.h>\n#include <string.h>"
    );
    let _ = writeln!(s, "#include \"{}\"", original.display());
    s.push_str(
        r#"
static void* cudaperf_load(const char* dir, int i, size_t bytes, int input) {
    void* p = malloc(bytes ? bytes : 1);
    if (!p) { fprintf(stderr, "out of memory for buffer %d\n", i); exit(3); }
    if (!input) { memset(p, 0xFF, bytes); return p; }
    char path[4096];
    snprintf(path, sizeof path, "%s/in_%d.bin", dir, i);
    FILE* f = fopen(path, "rb");
    if (!f || fread(p, 1, bytes, f) != bytes) { fprintf(stderr, "cannot read %s\n", path); exit(3); }
    fclose(f);
    return p;
}
static void cudaperf_save(const char* dir, int i, const void* p, size_t bytes) {
    char path[4096];
    snprintf(path, sizeof path, "%s/out_%d.bin", dir, i);
    FILE* f = fopen(path, "wb");
    if (!f || fwrite(p, 1, bytes, f) != bytes) { fprintf(stderr, "cannot write %s\n", path); exit(3); }
    fclose(f);
}
int main(int argc, char** argv) {
    if (argc < 2) return 2;
    const char* dir = argv[1];
"#,
    );
    let mut args = Vec::new();
    let mut saves = String::new();
    let mut b = 0usize;
    for (pi, p) in task.params.iter().enumerate() {
        let ty = c_type(p.dtype())
            .ok_or_else(|| format!("parameter `{}`: bf16 has no C type", p.name()))?;
        match p {
            Param::Buffer { direction, .. } => {
                let bytes = inputs.values.lens[b] * p.dtype().size_bytes();
                let _ = writeln!(
                    s,
                    "    {ty}* b{b} = ({ty}*)cudaperf_load(dir, {b}, {bytes}ull, {});",
                    u8::from(direction.is_input())
                );
                args.push(if *direction == Direction::In {
                    format!("(const {ty}*)b{b}")
                } else {
                    format!("b{b}")
                });
                if direction.is_output() {
                    let _ = writeln!(saves, "    cudaperf_save(dir, {b}, b{b}, {bytes}ull);");
                }
                b += 1;
            }
            Param::Scalar { dtype, .. } => {
                let v = inputs.values.scalars[pi];
                args.push(if dtype.is_float() {
                    format!("({ty}){v:e}")
                } else {
                    format!("({ty}){}LL", v as i64)
                });
            }
        }
    }
    let _ = writeln!(s, "    {}({});", task.id, args.join(", "));
    s.push_str(&saves);
    s.push_str("    return 0;\n}\n");
    Ok(s)
}

pub(super) fn run(
    task: &Task,
    cfg: &InputConfig,
    inputs: &HostInputs,
    tools: &Tools,
    dir: &Path,
    limit: Duration,
) -> Result<OriginalOutputs, OriginalError> {
    let cc = tools.cc.as_deref().ok_or_else(|| OriginalError::Missing {
        tool: "a C compiler (cc or $CC)".into(),
        reason: "running `cc --version` failed".into(),
    })?;
    let original = task.dir.join(&task.original_file);
    let original = original
        .canonicalize()
        .map_err(|e| io_error(&original, e))?;
    let src = driver_source(task, inputs, &original).map_err(|log| OriginalError::Compile {
        task: task.id.clone(),
        file: task.original_file.clone(),
        log,
    })?;
    let driver = dir.join("driver.c");
    std::fs::write(&driver, src).map_err(|e| io_error(&driver, e))?;
    let exe = dir.join("driver");
    let mut cmd = Command::new(cc);
    cmd.args(["-O2", "-std=gnu11", "-o"])
        .arg(&exe)
        .arg(&driver)
        .arg("-lm");
    let compile_error = |log: String| OriginalError::Compile {
        task: task.id.clone(),
        file: task.original_file.clone(),
        log,
    };
    match run_limited(cmd, Duration::from_secs(120)).map_err(compile_error)? {
        (Ended::Exited(true, _), _) => {}
        (Ended::Exited(false, log), _) => return Err(compile_error(log)),
        (Ended::TimedOut, _) => return Err(compile_error("the C compiler ran past 120 s".into())),
    }
    write_inputs(inputs, dir)?;
    let mut cmd = Command::new(&exe);
    cmd.arg(dir);
    let (ended, seconds) = run_limited(cmd, limit).map_err(|reason| OriginalError::Run {
        task: task.id.clone(),
        engine: Engine::C,
        config: cfg.name.clone(),
        reason,
    })?;
    match ended {
        Ended::Exited(true, _) => {}
        Ended::Exited(false, log) => {
            return Err(OriginalError::Run {
                task: task.id.clone(),
                engine: Engine::C,
                config: cfg.name.clone(),
                reason: format!("non-zero exit; output: {log}"),
            })
        }
        Ended::TimedOut => {
            return Err(OriginalError::Timeout {
                task: task.id.clone(),
                engine: Engine::C,
                config: cfg.name.clone(),
                seconds: limit.as_secs_f64(),
            })
        }
    }
    Ok(OriginalOutputs {
        engine: Engine::C,
        buffers: read_outputs(task, inputs, dir)?,
        seconds,
    })
}
