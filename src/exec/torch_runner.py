"""cudaperf's PyTorch reference runner (written next to the run by the crate; do not edit).

usage: python3 torch_runner.py --protocol N --version V
       python3 torch_runner.py --self-test     (CPU: checks the forward/copy logic, no GPU)

The reference side of a GPU job whose task names its PyTorch original as the reference. It
speaks the runner's JSON-lines protocol (one greeting line, then one response line per
request line) on a duplicate of stdout; fd 1 is pointed at stderr so that a print() in the
original cannot corrupt the protocol. Commands (the `type` of the job):

  load_torch  builds Model() from the task's original (source text), in eval mode on the GPU,
              optionally through torch.compile.
  alloc       frees the previous buffers and allocates these with cuMemAlloc in PyTorch's
              context; answers with one legacy CUDA IPC handle per buffer (the harness maps
              them, writes the inputs and poison there, and compares the outputs there).
  run_torch   one run: an untimed L2 flush, then between two CUDA events on PyTorch's current
              stream the forward on tensors over the input buffers; then (untimed) its outputs
              are copied into the output buffers. Answers with the milliseconds between the
              events.
  occupancy   answers nothing known (no CUDA module here).
  reset       frees the buffers and the model.

A failure of the original (an exception in Model() or forward, an output of the wrong size)
is a `failed` reply: the reference is broken. A failure to set up (no PyTorch, no GPU) is an
error response: the runner is unavailable here, which is ours, not the task's.
"""
import base64
import ctypes
import importlib.util
import json
import math
import os
import sys
import tempfile
import threading
import time
import traceback

DTYPES = {"f32": "float32", "f64": "float64", "f16": "float16", "bf16": "bfloat16",
          "i32": "int32", "i64": "int64", "u8": "uint8"}


class Unavailable(Exception):
    """Set-up failed here (ours): answered as an error response."""


class Broken(Exception):
    """The original failed: answered as a `failed` reply."""


def as_tuple(out):
    return tuple(out) if isinstance(out, (tuple, list)) else (out,)


class Driver:
    """The few driver calls the runner needs, through ctypes on libcuda."""

    def __init__(self):
        try:
            self.lib = ctypes.CDLL("libcuda.so.1")
        except OSError as e:
            raise Unavailable(f"libcuda not found: {e}")

    def check(self, rc, what):
        if rc != 0:
            name = ctypes.c_char_p()
            self.lib.cuGetErrorName(rc, ctypes.byref(name))
            raise Unavailable(f"{(name.value or b'?').decode()} ({rc}) during {what}")

    def alloc(self, nbytes):
        ptr = ctypes.c_uint64()
        self.check(self.lib.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(max(nbytes, 1))),
                   f"cuMemAlloc of {nbytes} bytes")
        return ptr.value

    def free(self, ptr):
        self.lib.cuMemFree_v2(ctypes.c_uint64(ptr))

    def ipc_handle(self, ptr):
        handle = (ctypes.c_char * 64)()
        self.check(self.lib.cuIpcGetMemHandle(handle, ctypes.c_uint64(ptr)), "cuIpcGetMemHandle")
        return base64.b64encode(bytes(handle)).decode()


class Raw:
    """A device allocation as bytes, for torch.as_tensor (zero copy)."""

    def __init__(self, ptr, nbytes):
        self.__cuda_array_interface__ = {
            "shape": (nbytes,), "typestr": "|u1", "data": (ptr, False), "version": 3,
            "strides": None,
        }


class Side:
    """The model and the buffers; `device` is "cuda" in a job, "cpu" in the self-test."""

    def __init__(self, torch, device):
        self.torch = torch
        self.device = device
        self.driver = Driver() if device == "cuda" else None
        self.model = None
        self.fn = None
        self.buffers = []  # (name, dtype, direction)
        self.ptrs = []
        self.raw = []  # one uint8 tensor over each buffer
        self.flush = None
        self.events = None
        self.tmp = tempfile.mkdtemp(prefix="cudaperf-torch-")

    def load(self, source, mode, buffers):
        torch = self.torch
        self.model = None
        self.fn = None
        if any(b["direction"] not in ("in", "out", "inout") for b in buffers):
            raise Broken("a buffer direction is not in/out/inout")
        self.buffers = buffers
        path = os.path.join(self.tmp, "original.py")
        with open(path, "w") as f:
            f.write(source)
        try:
            spec = importlib.util.spec_from_file_location("cudaperf_original", path)
            mod = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(mod)
            model = mod.Model().to(self.device).eval()
        except Exception as e:  # the original's own failure
            raise Broken(f"the original could not be built: {type(e).__name__}: {e}")
        self.model = model
        if mode == "compile":
            try:
                self.fn = torch.compile(model)
            except Exception as e:
                raise Unavailable(f"torch.compile is not usable here: {type(e).__name__}: {e}")
        else:
            self.fn = model

    def free(self):
        self.raw = []
        if self.driver:
            for p in self.ptrs:
                self.driver.free(p)
        self.ptrs = []

    def alloc(self, sizes):
        torch = self.torch
        self.free()
        handles = []
        for n in sizes:
            if self.driver:
                p = self.driver.alloc(n)
                self.ptrs.append(p)
                handles.append(self.driver.ipc_handle(p))
                self.raw.append(torch.as_tensor(Raw(p, max(n, 1)), device="cuda"))
            else:
                self.raw.append(torch.zeros(max(n, 1), dtype=torch.uint8))
        return handles

    def view(self, i, shape):
        torch = self.torch
        name, dtype = self.buffers[i]["name"], self.buffers[i]["dtype"]
        dt = getattr(torch, DTYPES[dtype])
        n = math.prod(shape)
        raw = self.raw[i]
        size = torch.tensor([], dtype=dt).element_size()
        if n * size > raw.numel():
            raise Broken(f"buffer `{name}`: shape {shape} needs {n * size} bytes, "
                         f"{raw.numel()} allocated")
        return raw[: (raw.numel() // size) * size].view(dt)[:n].view(shape)

    def forward(self, ins):
        """The original's forward on `ins`, its outputs as a tuple; its failure is Broken."""
        try:
            return as_tuple(self.fn(*ins))
        except Exception as e:
            raise Broken(f"the original's forward failed: {type(e).__name__}: {e}")

    def run(self, shapes, flush_bytes, flush_value):
        torch = self.torch
        if self.fn is None:
            raise Unavailable("run before load_torch")
        if len(shapes) != len(self.buffers) or len(self.raw) != len(self.buffers):
            raise Unavailable(f"{len(shapes)} shapes and {len(self.raw)} buffers for "
                              f"{len(self.buffers)} ABI buffers")
        ins, outs = [], []
        for i, b in enumerate(self.buffers):
            v = self.view(i, [int(d) for d in shapes[i]])
            if b["direction"] in ("in", "inout"):
                ins.append(v)
            if b["direction"] in ("out", "inout"):
                outs.append((b["name"], v))
        cuda = self.device == "cuda"
        if cuda:
            # An untimed forward first: eager time is mostly host dispatch on small problems,
            # and a Python process that slept between runs dispatches slowly (measured on
            # the H200: the reference's spread rose from 1-10 % alone to 30-66 % when
            # interleaved). The L2 flush after it still starts the timed forward cold on
            # the GPU, as every side's timed run does.
            with torch.no_grad():
                self.forward(ins)
        if cuda and flush_bytes > 0:
            words = flush_bytes // 4
            if self.flush is None or self.flush.numel() != words:
                self.flush = torch.empty(words, dtype=torch.int32, device="cuda")
            self.flush.fill_(int(flush_value) - (1 << 32) if flush_value >= 1 << 31
                             else int(flush_value))
        # The inputs are views of the harness-written buffers: a forward that writes into
        # its inputs would be caught by the harness's input check.
        with torch.no_grad():
            if cuda:
                if self.events is None:
                    self.events = (torch.cuda.Event(enable_timing=True),
                                   torch.cuda.Event(enable_timing=True))
                start, end = self.events
                start.record()
            t0 = time.perf_counter()
            res = self.forward(ins)
            if cuda:
                end.record()
                end.synchronize()
                millis = start.elapsed_time(end)
            else:
                millis = (time.perf_counter() - t0) * 1e3
            if len(res) != len(outs):
                raise Broken(f"forward returned {len(res)} outputs; the task's ABI has "
                             f"{len(outs)} out/inout buffers "
                             f"({', '.join(n for n, _ in outs)})")
            for (name, dst), r in zip(outs, res):
                if not isinstance(r, torch.Tensor):
                    raise Broken(f"output `{name}` is a {type(r).__name__}, not a tensor")
                if r.numel() != dst.numel():
                    raise Broken(f"output `{name}`: {r.numel()} elements returned "
                                 f"(shape {list(r.shape)}), the buffer has {dst.numel()} "
                                 f"(shape {list(dst.shape)})")
                dst.copy_(r.reshape(dst.shape))
            if cuda:
                torch.cuda.synchronize()
        return millis


def failed(what):
    return {"type": "failed", "error": {"code": -1, "name": "PyTorch reference failed",
                                        "during": what}}


def handle(state, job):
    """One job; returns (result or None, error or None, restart)."""
    kind = job.get("type")
    if kind not in ("load_torch", "alloc", "run_torch", "occupancy", "reset"):
        return None, f"a PyTorch reference runner does not run `{kind}` jobs", False
    try:
        if state.get("side") is None:
            try:
                import torch
            except Exception as e:
                raise Unavailable(f"PyTorch cannot be imported by {sys.executable}: {e}")
            if not torch.cuda.is_available():
                raise Unavailable(f"PyTorch ({torch.__version__}) sees no CUDA device")
            torch.backends.cuda.matmul.allow_tf32 = False
            torch.backends.cudnn.allow_tf32 = False
            torch.cuda.init()
            torch.zeros(1, device="cuda")  # PyTorch's context is now current here
            state["side"] = Side(torch, "cuda")
        side = state["side"]
        if kind == "load_torch":
            side.load(job["source"], job.get("mode", "eager"), job["buffers"])
            return {"type": "loaded"}, None, False
        if kind == "alloc":
            handles = side.alloc([int(b) for b in job["bytes"]])
            return {"type": "allocated", "handles": handles, "shared": False,
                    "pointers": list(side.ptrs)}, None, False
        if kind == "run_torch":
            millis = side.run(job["shapes"], int(job.get("flush_bytes", 0)),
                              int(job.get("flush_value", 0)))
            return {"type": "ran", "millis": millis, "reload_ms": 0.0}, None, False
        if kind == "occupancy":
            return {"type": "occupancy", "blocks": [None] * len(job.get("queries", []))}, None, False
        if kind == "reset":
            side.free()
            side.model = side.fn = None
            return {"type": "reset"}, None, False
    except Broken as e:
        return failed(str(e)), None, True
    except Unavailable as e:
        return None, str(e), True
    except Exception as e:  # a CUDA error inside PyTorch, out of memory...
        tail = traceback.format_exc().strip().splitlines()[-1]
        return failed(f"{type(e).__name__}: {e} ({tail})"), None, True


def watch_parent():
    parent = os.getppid()

    def loop():
        while True:
            time.sleep(0.2)
            if os.getppid() != parent:
                os._exit(3)

    threading.Thread(target=loop, daemon=True).start()


def serve(protocol, version):
    watch_parent()
    proto = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr

    def send(obj):
        proto.write(json.dumps(obj) + "\n")
        proto.flush()

    send({"hello": {"protocol": protocol, "role": "torch_runner", "version": version,
                    "pid": os.getpid()}})
    state = {}
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            req = json.loads(line)
            rid, job = int(req.get("id", 0)), req["job"]
        except Exception as e:
            send({"id": 0, "restart": False,
                  "error": f"bad request for a `torch_runner` worker: {e}"})
            continue
        result, error, restart = handle(state, job)
        resp = {"id": rid, "restart": restart}
        if error is not None:
            resp["error"] = error
        else:
            resp["result"] = result
        send(resp)


def self_test():
    """The forward/copy logic on the CPU: outputs written in ABI order, shapes per config,
    bf16 views, and the original's failures named."""
    import torch
    side = Side(torch, "cpu")
    src = (
        "import torch\n"
        "class Model(torch.nn.Module):\n"
        "    def forward(self, x, w, acc):\n"
        "        return (x @ w, acc + 1)\n"
    )
    bufs = [{"name": "x", "dtype": "f32", "direction": "in"},
            {"name": "w", "dtype": "bf16", "direction": "in"},
            {"name": "out", "dtype": "f32", "direction": "out"},
            {"name": "acc", "dtype": "i64", "direction": "inout"}]
    side.load(src.replace("x @ w", "x @ w.float()"), "eager", bufs)
    side.alloc([4 * 12, 2 * 12, 4 * 16, 8 * 5])
    for shapes in ([[2, 3], [3, 4], [2, 4], [5]], [[3, 3], [3, 4], [3, 4], [4]]):
        x = torch.randn(shapes[0])
        w = torch.randn(shapes[1]).to(torch.bfloat16)
        side.view(0, shapes[0]).copy_(x)
        side.view(1, shapes[1]).copy_(w)
        side.view(3, shapes[3]).copy_(torch.arange(math.prod(shapes[3])))
        side.run(shapes, 0, 0)
        got = side.view(2, shapes[2])
        assert torch.allclose(got, x @ w.float()), (got, x @ w.float())
        assert side.view(3, shapes[3]).tolist() == list(range(1, math.prod(shapes[3]) + 1))
    bad = []
    try:
        side.load(src.replace("(x @ w, acc + 1)", "x"), "eager", bufs)
        side.run([[2, 3], [3, 4], [2, 4], [5]], 0, 0)
    except Broken as e:
        bad.append(str(e))
    try:
        side.load("raise ValueError('nope')\n", "eager", bufs)
    except Broken as e:
        bad.append(str(e))
    try:
        side.view(0, [100, 100])
    except Broken as e:
        bad.append(str(e))
    assert "forward returned 1 outputs" in bad[0], bad
    assert "ValueError: nope" in bad[1], bad
    assert "buffer `x`" in bad[2], bad
    print(json.dumps({"self_test": "ok", "torch": torch.__version__, "errors": bad}))


def main(argv):
    if "--self-test" in argv:
        self_test()
        return 0
    args = dict(zip(argv[1::2], argv[2::2]))
    serve(int(args.get("--protocol", "0")), args.get("--version", "?"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
