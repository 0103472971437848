# GPU machine: memory shared between processes through the VMM API (cuMemCreate, a POSIX
# file descriptor passed over a Unix socket, cuMemImportFromShareableHandle + cuMemMap in
# the importer) against legacy CUDA IPC (cuIpcOpenMemHandle) and one's own memory: the
# harness's fan-out copy and fan-in verify into 17 buffers of vector_add's timed size.
# Usage: python3 tools/gpu/vmm-bench.py src/exec/support.cu
import multiprocessing as mp, sys, struct, ctypes
from multiprocessing import reduction

N = 50331651
POSIX_FD = 1

class Loc(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]
class Prop(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("handle_types", ctypes.c_int), ("location", Loc),
                ("win32", ctypes.c_void_p), ("flags", ctypes.c_ubyte * 8)]
class Access(ctypes.Structure):
    _fields_ = [("location", Loc), ("flags", ctypes.c_int)]

def cu():
    lib = ctypes.CDLL("libcuda.so.1")
    def call(name, *args):
        r = getattr(lib, name)(*args)
        if r != 0: raise RuntimeError(f"{name} -> {r}")
    return call

def prop():
    p = Prop(); p.type = 1; p.handle_types = POSIX_FD; p.location = Loc(1, 0); return p

def rounded(size):
    call = cu(); g = ctypes.c_size_t(); p = prop()
    call("cuMemGetAllocationGranularity", ctypes.byref(g), ctypes.byref(p), 1)
    return (size + g.value - 1) // g.value * g.value

def child(conn, done):
    import cupy as cp, os
    cp.cuda.Device(0).use(); cp.zeros(1)
    call = cu(); size = rounded(4 * N)
    legacy = [cp.empty(N, cp.float32) for _ in range(17)]
    conn.send([cp.cuda.runtime.ipcGetMemHandle(b.data.ptr) for b in legacy])
    for _ in range(17):
        h = ctypes.c_ulonglong(); p = prop()
        call("cuMemCreate", ctypes.byref(h), ctypes.c_size_t(size), ctypes.byref(p), ctypes.c_ulonglong(0))
        fd = ctypes.c_int()
        call("cuMemExportToShareableHandle", ctypes.byref(fd), h, POSIX_FD, ctypes.c_ulonglong(0))
        reduction.send_handle(conn, fd.value, os.getppid())
        os.close(fd.value)
    done.wait()

if __name__ == '__main__':
    mp.set_start_method('spawn')
    parent, kid = mp.Pipe(); done = mp.Event()
    p = mp.Process(target=child, args=(kid, done), daemon=True); p.start()
    import cupy as cp
    cp.cuda.Device(0).use(); cp.zeros(1)
    try:
        call = cu(); size = rounded(4 * N)
        legacy = [cp.cuda.runtime.ipcOpenMemHandle(h) for h in parent.recv()]
        vmm = []
        for _ in range(17):
            fd = reduction.recv_handle(parent)
            h = ctypes.c_ulonglong()
            call("cuMemImportFromShareableHandle", ctypes.byref(h), ctypes.c_void_p(fd), POSIX_FD)
            ptr = ctypes.c_ulonglong()
            call("cuMemAddressReserve", ctypes.byref(ptr), ctypes.c_size_t(size), ctypes.c_size_t(0), ctypes.c_ulonglong(0), ctypes.c_ulonglong(0))
            call("cuMemMap", ptr, ctypes.c_size_t(size), ctypes.c_size_t(0), h, ctypes.c_ulonglong(0))
            a = Access(Loc(1, 0), 3)
            call("cuMemSetAccess", ptr, ctypes.c_size_t(size), ctypes.byref(a), ctypes.c_size_t(1))
            vmm.append(ptr.value)
        src = open(sys.argv[1]).read()
        mod = cp.RawModule(code=src, backend='nvcc', options=('-std=c++17', '-arch=sm_90'))
        copy = mod.get_function('copy_fanout'); ver = mod.get_function('verify_f32')
        max_blocks = cp.cuda.runtime.getDeviceProperties(0)['multiProcessorCount'] * 16
        own = [cp.empty(N, cp.float32) for _ in range(17)]
        pristine = cp.random.random(N, dtype=cp.float32)
        slots = cp.zeros((32, 6), cp.uint64)
        def L(fn, ptrs, slotp, *rest):
            t = struct.pack('<32Q32Qi4x', *(ptrs + [0] * (32 - len(ptrs))), *(slotp + [0] * (32 - len(slotp))), len(ptrs))
            vals = [ctypes.create_string_buffer(t, len(t))] + list(rest)
            arr = (ctypes.c_void_p * len(vals))(*[ctypes.addressof(v) for v in vals])
            parts = max(1, min((N * 4 // 16 + 255) // 256, max(1, max_blocks // len(ptrs))))
            cp.cuda.driver.launchKernel(fn.kernel.ptr, parts * len(ptrs), 1, 1, 256, 1, 1, 0, cp.cuda.get_current_stream().ptr, ctypes.addressof(arr), 0)
        def t(name, f, reps=10):
            f(); cp.cuda.Device().synchronize()
            s, e = cp.cuda.Event(), cp.cuda.Event(); s.record()
            for _ in range(reps): f()
            e.record(); e.synchronize()
            print(f"{name:45s} {cp.cuda.get_elapsed_time(s, e) / reps * 1e3:9.1f} us", flush=True)
        u64 = ctypes.c_uint64
        for name, bufs in [("own", [b.data.ptr for b in own]), ("legacy IPC", legacy), ("VMM import", vmm)]:
            t(f"copy_fanout 17 targets, {name}", lambda: L(copy, bufs, [], u64(pristine.data.ptr), u64(4 * N)))
            t(f"verify 16 targets, {name}", lambda: L(ver, bufs[:16], [slots[k].data.ptr for k in range(16)], u64(pristine.data.ptr), u64(N)))
            t(f"memset 17, {name}", lambda: [cp.cuda.runtime.memsetAsync(b, 0xFF, 4 * N, cp.cuda.get_current_stream().ptr) for b in bufs])
    finally:
        done.set(); p.join(5)
