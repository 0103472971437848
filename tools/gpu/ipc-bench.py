# GPU machine: is memory mapped from another process through CUDA IPC slower to access than
# memory of one's own? A child allocates 17 buffers of vector_add's timed size and hands
# their IPC handles over; the parent runs the harness's fan-out copy into them and into 17
# buffers of its own. Usage: python3 tools/gpu/ipc-bench.py src/exec/support.cu
import multiprocessing as mp, sys, struct, ctypes

N = 50331651

def child(q, done):
    import cupy as cp
    bufs = [cp.empty(N, cp.float32) for _ in range(17)]
    q.put([cp.cuda.runtime.ipcGetMemHandle(b.data.ptr) for b in bufs])
    done.wait()

if __name__ == '__main__':
    mp.set_start_method('spawn')
    q, done = mp.Queue(), mp.Event()
    p = mp.Process(target=child, args=(q, done), daemon=True); p.start()
    handles = q.get()
    import cupy as cp
    src = open(sys.argv[1]).read()
    mod = cp.RawModule(code=src, backend='nvcc', options=('-std=c++17', '-arch=sm_90'))
    copy = mod.get_function('copy_fanout'); ver = mod.get_function('verify_f32')
    max_blocks = cp.cuda.runtime.getDeviceProperties(0)['multiProcessorCount'] * 16
    mapped = [cp.cuda.runtime.ipcOpenMemHandle(h) for h in handles]
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
        print(f"{name:50s} {cp.cuda.get_elapsed_time(s, e) / reps * 1e3:9.1f} us", flush=True)
    u64 = ctypes.c_uint64
    try:
        for name, bufs in [("own", [b.data.ptr for b in own]), ("IPC-mapped", mapped)]:
            t(f"copy_fanout 17 targets, {name}", lambda: L(copy, bufs, [], u64(pristine.data.ptr), u64(4 * N)))
            t(f"verify 16 targets, {name}", lambda: L(ver, bufs[:16], [slots[k].data.ptr for k in range(16)], u64(pristine.data.ptr), u64(N)))
            t(f"memset 17, {name}", lambda: [cp.cuda.runtime.memsetAsync(b, 0xFF, 4 * N, cp.cuda.get_current_stream().ptr) for b in bufs])
    finally:
        done.set(); p.join(5)
