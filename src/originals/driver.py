"""cudaperf's driver for torch2cuda originals (written next to the run by the crate).

usage: python3 driver.py SPEC.json
  mode "torch" / "numpy": load the inputs from files, call Model().forward (PyTorch) or the
      NumPy twin's forward, write the outputs to files.
  mode "time": PyTorch-eager time of Model().forward on the GPU, inputs generated there with
      the task's distributions; prints one JSON line.
"""
import importlib.util
import json
import math
import sys

import numpy as np

NP = {"f32": np.float32, "f64": np.float64, "f16": np.float16, "i32": np.int32,
      "i64": np.int64, "u8": np.uint8}


def load_module(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def as_tuple(out):
    return tuple(out) if isinstance(out, (tuple, list)) else (out,)


def write_outputs(spec, outs):
    if len(outs) != len(spec["outputs"]):
        sys.exit(f"forward returned {len(outs)} outputs; the task's ABI has {len(spec['outputs'])} "
                 f"out/inout buffers ({', '.join(o['name'] for o in spec['outputs'])})")
    for o, arr in zip(spec["outputs"], outs):
        arr = np.ascontiguousarray(arr)
        n = math.prod(o["shape"])
        if arr.size != n:
            sys.exit(f"output `{o['name']}`: {arr.size} elements returned (shape {list(arr.shape)}), "
                     f"the buffer has {n} (shape {o['shape']})")
        arr.astype(NP[o["dtype"]], copy=False).reshape(-1).tofile(o["file"])


def run(spec):
    arrays = [np.fromfile(i["file"], dtype=NP[i["dtype"]]).reshape(i["shape"]) for i in spec["inputs"]]
    if spec["mode"] == "numpy":
        mod = load_module(spec["module"], "cudaperf_numpy_twin")
        with np.errstate(all="ignore"):
            outs = as_tuple(mod.forward(*arrays))
        write_outputs(spec, [np.asarray(o) for o in outs])
        return
    import torch
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = "cuda" if spec.get("cuda") and torch.cuda.is_available() else "cpu"
    mod = load_module(spec["module"], "cudaperf_original")
    model = mod.Model().to(dev).eval()
    tensors = [torch.from_numpy(a.copy()).to(dev) for a in arrays]
    with torch.no_grad():
        outs = as_tuple(model(*tensors))
    write_outputs(spec, [o.detach().to("cpu").contiguous().numpy() for o in outs])


def generate(torch, i, dev):
    shape, f = i["shape"], i["fill"]
    dt = getattr(torch, {"f32": "float32", "f64": "float64", "f16": "float16", "i32": "int32",
                         "i64": "int64", "u8": "uint8"}[i["dtype"]])
    n = math.prod(shape)
    mode, a, b = f["mode"], f["a"], f["b"]
    if mode == 0:
        t = a + (b - a) * torch.rand(n, device=dev, dtype=torch.float64)
    elif mode == 1:
        t = a + b * torch.randn(n, device=dev, dtype=torch.float64)
    elif mode == 2:
        lo, hi = math.ceil(a), math.ceil(b)
        t = torch.randint(lo, max(hi, lo + 1), (n,), device=dev, dtype=torch.int64)
    elif mode == 3:
        t = a + torch.arange(n, device=dev, dtype=torch.float64) * b
    else:
        t = torch.full((n,), a, device=dev, dtype=torch.float64)
    return t.to(dt).reshape(shape)


def time_eager(spec):
    import torch
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = "cuda"
    mod = load_module(spec["module"], "cudaperf_original_" + str(spec.get("index", 0)))
    model = mod.Model().to(dev).eval()
    tensors = [generate(torch, i, dev) for i in spec["inputs"]]
    flush = torch.empty(max(spec.get("flush_bytes", 0) // 4, 1), device=dev, dtype=torch.int32)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    with torch.no_grad():
        for k in range(spec["warmup"] + spec["runs"]):
            flush.fill_(k)
            start.record()
            model(*tensors)
            end.record()
            end.synchronize()
            if k >= spec["warmup"]:
                times.append(start.elapsed_time(end))
    times.sort()
    del tensors, flush
    torch.cuda.empty_cache()
    print(json.dumps({"index": spec.get("index", 0), "median_ms": times[len(times) // 2],
                      "min_ms": times[0], "runs": len(times),
                      "device": torch.cuda.get_device_name(), "torch": torch.__version__}), flush=True)


def main():
    with open(sys.argv[1]) as f:
        spec = json.load(f)
    if spec["mode"] == "time":
        time_eager(spec)
    elif spec["mode"] == "time_many":
        # One process for many modules: PyTorch is imported once. A module that fails
        # prints an error line for its index and the others go on.
        for item in spec["items"]:
            try:
                time_eager(item)
            except Exception as e:  # noqa: BLE001 - reported per item
                print(json.dumps({"index": item.get("index", 0), "error": f"{type(e).__name__}: {e}"}), flush=True)
    else:
        run(spec)


if __name__ == "__main__":
    main()
