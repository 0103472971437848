#!/usr/bin/env python3
"""Development aid: checks task folders without the Rust crate.

Parses task.toml, checks that files exist, that every @launch kernel is defined in its file,
that args name ABI params/scratch buffers, and compiles every .cu file with NVRTC
(-arch=sm_90 -Xptxas=-v) from the nvidia-cuda-nvrtc wheel. Usage:
    python3 tools/check_task.py fixtures/tasks/<id> [...]
The authoritative checks are the crate's own (tests/dataset.rs); this is a fast first pass.
"""
import ctypes, glob, os, re, sys, tomllib

import nvidia
ROOT = [p for p in nvidia.__path__][0] + "/cu13"
nvrtc = ctypes.CDLL(ROOT + "/lib/libnvrtc.so.13")
INC = ROOT + "/include"

def compile_cu(src, name):
    prog = ctypes.c_void_p()
    r = nvrtc.nvrtcCreateProgram(ctypes.byref(prog), src.encode(), name.encode(), 0, None, None)
    assert r == 0, r
    opts = [b"-arch=sm_90", b"-Xptxas=-v", b"-std=c++17", ("-I" + INC).encode()]
    arr = (ctypes.c_char_p * len(opts))(*opts)
    r = nvrtc.nvrtcCompileProgram(prog, len(opts), arr)
    n = ctypes.c_size_t()
    nvrtc.nvrtcGetProgramLogSize(prog, ctypes.byref(n))
    buf = ctypes.create_string_buffer(n.value)
    nvrtc.nvrtcGetProgramLog(prog, buf)
    nvrtc.nvrtcDestroyProgram(ctypes.byref(prog))
    return r == 0, buf.value.decode(errors="replace")

DTYPES = {"f32", "f64", "f16", "bf16", "i32", "i64", "u8"}
ALLOWED_INCLUDES = {"cuda_fp16.h", "cuda_bf16.h", "mma.h", "cooperative_groups.h",
                    "cooperative_groups/reduce.h", "cuda_pipeline.h"}

def check(task_dir):
    errs = []
    with open(os.path.join(task_dir, "task.toml"), "rb") as f:
        t = tomllib.load(f)
    tid = os.path.basename(os.path.normpath(task_dir))
    if t.get("id") != tid: errs.append(f"id {t.get('id')!r} != folder {tid!r}")
    if t.get("kind") not in ("c2cuda", "torch2cuda"): errs.append(f"bad kind {t.get('kind')!r}")
    for key in ("original", "reference"):
        if not os.path.exists(os.path.join(task_dir, t.get(key, "?"))): errs.append(f"missing {key} file")
    params = t.get("params", [])
    names = [p["name"] for p in params]
    if len(set(names)) != len(names): errs.append("duplicate param names")
    for p in params:
        if p.get("dtype") not in DTYPES: errs.append(f"param {p['name']}: bad dtype {p.get('dtype')}")
        if p["kind"] == "buffer" and p.get("direction") not in ("in", "out", "inout"): errs.append(f"param {p['name']}: bad direction")
    configs = t.get("configs", [])
    if len(configs) < 3: errs.append(f"only {len(configs)} configs")
    sizes = set(configs[0]["sizes"]) if configs else set()
    impls = [t["reference"]] + t.get("implementations", [])
    for impl in impls:
        path = os.path.join(task_dir, impl)
        if not os.path.exists(path): errs.append(f"missing implementation {impl}"); continue
        src = open(path).read()
        for inc in re.findall(r'#\s*include\s*[<"]([^>"]+)[>"]', src):
            if inc not in ALLOWED_INCLUDES: errs.append(f"{impl}: include {inc} not allowed")
        scratch = set(m.group(1) for m in re.finditer(r"//\s*@scratch\s+(\w+)", src))
        launches = re.findall(r"//\s*@launch\s+([\w<>, ]+?)\s+grid=", src)
        if not launches: errs.append(f"{impl}: no @launch line")
        for k in launches:
            base = k.split("<")[0]
            if not re.search(r"__global__[^;{]*\b" + re.escape(base) + r"\s*[(<]", src):
                errs.append(f"{impl}: kernel {k} not defined")
        for m in re.finditer(r"args=\(([^)]*(?:\([^)]*\)[^)]*)*)\)", src):
            for a in [x.strip() for x in m.group(1).split(",")]:
                if re.fullmatch(r"[A-Za-z_]\w*", a) and a not in names and a not in scratch and a not in sizes:
                    errs.append(f"{impl}: arg {a} is neither ABI param, scratch nor size")
        ok, log = compile_cu(src, impl)
        if not ok: errs.append(f"{impl}: NVRTC failed:\n{log}")
        else:
            regs = re.findall(r"Used (\d+) registers", log)
            print(f"  {impl}: ok, registers {regs}")
    return errs

if __name__ == "__main__":
    bad = 0
    dirs = sys.argv[1:] or sorted(glob.glob("fixtures/tasks/*/"))
    for d in dirs:
        print(d)
        for e in check(d):
            bad += 1
            print("  ERROR", e)
    print("errors:", bad)
    sys.exit(1 if bad else 0)
