"""cudaperf's probe for `cudaperf tasks import` (shipped in the crate, run with python3).

usage: python3 probe.py MAX_TRIAL_ELEMENTS PROBLEM.py...

Loads each problem in the KernelBench layout (`class Model(nn.Module)`, `get_inputs()`,
`get_init_inputs()`) and prints one JSON line per problem, in order, each with its "index": either {"ok": false, "reason": ...} (one
line saying why the problem cannot be a task) or the facts a task is built from: the
forward's inputs, the module's parameters and buffers, the outputs, and per config (the
file's sizes, then smaller ones with odd sizes) every tensor's shape. Shapes at every config
come from a forward on the meta device (no memory); one real forward on the CPU, on the
smallest config, checks what the task format cannot express (randomness in forward, in-place
writes to inputs or buffers, non-tensor outputs, output shapes that depend on values).
"""
import ast
import importlib.util
import inspect
import json
import math
import sys

DTYPES = None  # torch dtype -> task dtype, filled once torch is imported


class Refused(Exception):
    """The problem cannot be a task; the message is the reason."""


def emit(obj):
    print(json.dumps(obj), flush=True)


def load(path, index):
    spec = importlib.util.spec_from_file_location(f"cudaperf_problem_{index}", path)
    if spec is None or spec.loader is None:
        raise Refused("not a Python file")
    mod = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(mod)
    except Exception as e:  # noqa: BLE001 - the user's file, reported in one line
        raise Refused(f"the file does not run: {type(e).__name__}: {e}")
    for name in ("Model", "get_inputs", "get_init_inputs"):
        if not hasattr(mod, name):
            raise Refused(f"no `{name}` defined (expected the KernelBench layout: "
                          "class Model(nn.Module), get_inputs(), get_init_inputs())")
    return mod


def literal(v, what):
    """The Python source of a constant, checked to read back equal."""
    import torch
    if isinstance(v, torch.Tensor):
        raise Refused(f"{what} is a tensor: only Python constants (numbers, strings, tuples) "
                      "can be baked into the task's module")
    try:
        text = repr(v)
        if ast.literal_eval(text) != v:
            raise ValueError
    except Exception:  # noqa: BLE001 - any failure means "not a constant"
        raise Refused(f"{what} ({type(v).__name__}) is not a Python constant")
    return text


def task_dtype(t, what):
    d = DTYPES.get(t.dtype)
    if d is None:
        raise Refused(f"{what} has dtype {t.dtype}, which the task format has no type for "
                      "(f32 f64 f16 bf16 i32 i64 u8)")
    return d


def size_globals(mod):
    """Module-level integer constants: the candidates for sizes."""
    return {k: v for k, v in vars(mod).items()
            if type(v) is int and v > 1 and not k.startswith("_")}


def with_globals(mod, values, fn):
    old = {k: getattr(mod, k) for k in values}
    try:
        for k, v in values.items():
            setattr(mod, k, v)
        return fn()
    finally:
        for k, v in old.items():
            setattr(mod, k, v)


def as_outputs(out):
    import torch
    outs = list(out) if isinstance(out, (tuple, list)) else [out]
    for i, o in enumerate(outs):
        if not isinstance(o, torch.Tensor):
            raise Refused(f"forward returns a value of type `{type(o).__name__}` as output {i}: outputs must be tensors")
    if not outs:
        raise Refused("forward returns no outputs")
    return outs


def split_inputs(raw):
    """(tensor positions, {position: constant source}) of get_inputs()'s list."""
    import torch
    if not isinstance(raw, (list, tuple)):
        raise Refused(f"get_inputs() returns a {type(raw).__name__}, not a list")
    tensors, constants = [], {}
    for i, v in enumerate(raw):
        if isinstance(v, torch.Tensor):
            tensors.append(i)
        else:
            constants[i] = literal(v, f"get_inputs()[{i}]")
    if not tensors:
        raise Refused("get_inputs() returns no tensor")
    return tensors, constants


def meta_shapes(mod, init, values):
    """Every tensor's shape at one config, from a forward on the meta device."""
    import torch

    def run():
        with torch.device("meta"):
            raw = mod.get_inputs()
            if mod.get_init_inputs() != init:
                raise Refused("get_init_inputs() changes with the sizes")
            model = mod.Model(*init)
        model.eval()
        tensors, _ = split_inputs(raw)
        with torch.no_grad():
            outs = as_outputs(model(*raw))
        return ([list(raw[i].shape) for i in tensors]
                + [list(t.shape) for _, t in state_of(model)]
                + [list(o.shape) for o in outs])
    return with_globals(mod, values, run)


def state_of(model):
    """Parameters then buffers, by dotted name, without duplicates (tied weights)."""
    seen, out = set(), []
    for name, t in list(model.named_parameters()) + list(model.named_buffers()):
        if id(t) not in seen:
            seen.add(id(t))
            out.append((name, t))
    return out


def odd(v):
    return v if v % 2 else v + 1


def smaller_configs(mod, init, sizes):
    """Configs with every size global that feeds get_inputs() scaled down to odd values."""
    import torch
    base = meta_shapes(mod, init, {})
    scalable = []
    for k in sorted(sizes):
        v = sizes[k]
        if v < 8:
            continue
        try:
            if meta_shapes(mod, init, {k: odd(max(3, v // 4))}) != base:
                scalable.append(k)
        except Exception:  # noqa: BLE001 - a global this forward cannot take smaller
            continue
    configs = []
    for name, div in (("small_odd", 16), ("medium_odd", 4)):
        # Distinct constants get distinct values, so that no two sizes coincide by accident
        # (conv2d's height and width both came out 11 before).
        values = {}
        for j, k in enumerate(scalable):
            v = min(odd(max(3, sizes[k] // div)) + 2 * j, sizes[k] - 1)
            while v in values.values() and v + 2 <= sizes[k] - 1:
                v += 2
            values[k] = v
        if not values or any(c["globals"] == values for c in configs):
            continue
        try:
            shapes = meta_shapes(mod, init, values)
        except Refused:
            raise
        except Exception:  # noqa: BLE001 - these sizes do not fit the module: try others
            continue
        configs.append({"name": name, "globals": values, "shapes": shapes})
    return scalable, configs


def same(a, b):
    import torch
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.is_floating_point():
        return bool(((a == b) | (a.isnan() & b.isnan())).all())
    return bool(torch.equal(a, b))


def distribution(t):
    """A distribution that resembles the tensor's values (the file's own draw)."""
    import torch
    if t.numel() == 0:
        return {"dist": "uniform", "low": -1.0, "high": 1.0} if t.is_floating_point() else {"dist": "int_range", "low": 0, "high": 2}
    if t.is_floating_point():
        x = t.detach().double()
        lo, hi = float(x.min()), float(x.max())
        if not (math.isfinite(lo) and math.isfinite(hi)):
            return {"dist": "uniform", "low": -1.0, "high": 1.0}
        if lo == hi:  # constant init (norm weights, running stats): spread around it
            return {"dist": "uniform", "low": lo - 0.5, "high": hi + 0.5}
        mean, std = float(x.mean()), float(x.std()) if x.numel() > 1 else 0.0
        if x.numel() >= 64 and lo < 0 < hi and abs(mean) < 0.1 and 0.9 < std < 1.1 and (lo < -1.8 or hi > 1.8):
            return {"dist": "normal", "mean": 0.0, "std": 1.0}
        if x.numel() >= 64 and lo >= 0 and hi <= 1:
            return {"dist": "uniform", "low": 0.0, "high": 1.0}
        return {"dist": "uniform", "low": lo, "high": hi}
    lo, hi = int(t.min()), int(t.max())
    return {"dist": "int_range", "low": lo, "high": hi + 1}


def trial(mod, init, values, n_inputs):
    """The real CPU forward on the smallest config: what only values can tell."""
    import torch

    def run():
        torch.manual_seed(0)
        raw = mod.get_inputs()
        model = mod.Model(*init)
        model.eval()
        tensors, constants = split_inputs(raw)
        before_in = [raw[i].clone() for i in tensors]
        state = state_of(model)
        before_state = [t.detach().clone() for _, t in state]
        with torch.no_grad():
            torch.manual_seed(1)
            out1 = as_outputs(model(*raw))
            out1 = [o.clone() for o in out1]
            for k, i in enumerate(tensors):
                if not same(raw[i], before_in[k]):
                    raise Refused(f"forward writes into its input {k} in place; the task format's inputs are read-only")
            for (name, t), b in zip(state, before_state):
                if not same(t.detach(), b):
                    raise Refused(f"forward changes the module's `{name}` (state kept between calls)")
            torch.manual_seed(2)
            out2 = as_outputs(model(*raw))
            for k, (a, b) in enumerate(zip(out1, out2)):
                if not same(a, b):
                    raise Refused(f"forward is random: output {k} differs between two calls on the same inputs (dropout, torch.rand, ...)")
            torch.manual_seed(3)
            raw2 = mod.get_inputs()
            out3 = as_outputs(model(*raw2))
            if [list(o.shape) for o in out3] != [list(o.shape) for o in out1]:
                raise Refused("the output shapes depend on the input values, not only on their sizes")
        return raw, tensors, constants, state, out1
    return with_globals(mod, values, run)


def probe(path, index, max_trial):
    global DTYPES
    import torch
    DTYPES = {torch.float32: "f32", torch.float64: "f64", torch.float16: "f16",
              torch.bfloat16: "bf16", torch.int32: "i32", torch.int64: "i64", torch.uint8: "u8"}
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    mod = load(path, index)
    init_raw = mod.get_init_inputs()
    if not isinstance(init_raw, (list, tuple)):
        raise Refused(f"get_init_inputs() returns a {type(init_raw).__name__}, not a list")
    init = list(init_raw)
    init_src = [literal(v, f"get_init_inputs()[{i}]") for i, v in enumerate(init)]
    sizes = size_globals(mod)
    try:
        file_shapes = meta_shapes(mod, init, {})
    except Refused:
        raise
    except Exception as e:  # noqa: BLE001 - the forward's own error, in one line
        first = str(e).split(". ")[0].splitlines()[0][:160] if str(e) else ""
        raise Refused("forward cannot run without values (on the meta device), so its output shapes "
                      "depend on the input values or it calls an operation with no shape rule: "
                      f"{type(e).__name__}: {first}")
    scalable, small = smaller_configs(mod, init, sizes)
    configs = [{"name": "file", "globals": {k: sizes[k] for k in scalable}, "shapes": file_shapes}] + small
    smallest = min(configs, key=lambda c: sum(math.prod(s) for s in c["shapes"]))
    if sum(math.prod(s) for s in smallest["shapes"]) > max_trial:
        raise Refused(f"even the smallest config has more than {max_trial} elements: too big for the CPU trial forward")
    raw, tensors, constants, state, outs = trial(mod, init, smallest["globals"], None)
    if [list(raw[i].shape) for i in tensors] + [list(t.shape) for _, t in state] + [list(o.shape) for o in outs] != smallest["shapes"]:
        raise Refused("the meta device and the CPU disagree on the shapes")
    try:
        names = [p for p in inspect.signature(mod.Model.forward).parameters][1:]
    except (TypeError, ValueError):
        names = []
    inputs = []
    for k, i in enumerate(tensors):
        t = raw[i]
        name = names[i] if i < len(names) and not names[i].startswith("*") else f"in{k}"
        inputs.append({"name": name, "position": i, "dtype": task_dtype(t, f"input `{name}`"),
                       "dist": distribution(t)})
    params = [{"name": n, "dtype": task_dtype(t, f"parameter or buffer `{n}`"),
               "dist": distribution(t), "rank0": t.dim() == 0} for n, t in state]
    outputs = [{"dtype": task_dtype(o, f"output {k}")} for k, o in enumerate(outs)]
    emit({"index": index, "ok": True, "torch": torch.__version__, "init_inputs": init_src,
          "constants": {str(k): v for k, v in constants.items()},
          "inputs": inputs, "params": params, "outputs": outputs,
          "forward_args": len(raw), "configs": configs})


def main():
    max_trial, paths = int(sys.argv[1]), sys.argv[2:]
    try:
        import torch  # noqa: F401 - once for every problem: the import is the slow part
    except ImportError as e:
        for i in range(len(paths)):
            emit({"index": i, "ok": False, "missing_torch": True,
                  "reason": f"PyTorch cannot be imported: {e}"})
        return
    for i, path in enumerate(paths):
        try:
            probe(path, i, max_trial)
        except Refused as e:
            emit({"index": i, "ok": False, "reason": str(e)})
        except Exception as e:  # noqa: BLE001 - the user's code failed somewhere: one line
            emit({"index": i, "ok": False, "reason": f"{type(e).__name__}: {e}".splitlines()[0]})


if __name__ == "__main__":
    main()
