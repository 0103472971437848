# GPU machine: times the harness kernels of src/exec/support.cu on the timed config of
# vector_add (50,331,651 f32), one target and 17 targets per launch, against plain memcpy.
# Usage: python3 tools/gpu/harness-kernels-bench.py src/exec/support.cu
import cupy as cp, sys, struct
src = open(sys.argv[1]).read()
mod = cp.RawModule(code=src, backend='nvcc', options=('-std=c++17', '-arch=sm_90'))
n = 50331651
sms = cp.cuda.runtime.getDeviceProperties(0)['multiProcessorCount']
max_blocks = sms * 16
MAXT = 32
def targets(ptrs, slots):
    p = list(ptrs) + [0] * (MAXT - len(ptrs)); s = list(slots) + [0] * (MAXT - len(slots))
    return struct.pack(f'<{MAXT}Q{MAXT}Qi4x', *p, *s, len(ptrs))
def t(name, f, reps=10):
    f(); cp.cuda.Device().synchronize()
    s, e = cp.cuda.Event(), cp.cuda.Event()
    s.record()
    for _ in range(reps): f()
    e.record(); e.synchronize()
    ms = cp.cuda.get_elapsed_time(s, e) / reps
    print(f"{name:55s} {ms*1e3:9.1f} us", flush=True)
import ctypes
u64 = lambda v: ctypes.c_uint64(v); f64 = lambda v: ctypes.c_double(v); i32 = lambda v: ctypes.c_int32(v)
fill = mod.get_function('fill_f32'); copy = mod.get_function('copy_fanout')
cmpk = mod.get_function('compare_f32'); ver = mod.get_function('verify_f32')
pristine = cp.empty(n, cp.float32)
fill((min((n+255)//256, max_blocks),), (256,), (pristine, cp.uint64(n), cp.uint64(7), cp.int32(0), cp.float64(-1), cp.float64(1)))
sides = [cp.empty(n, cp.float32) for _ in range(17)]
slots = cp.zeros((32, 6), cp.uint64)
nbytes = 4 * n; chunks = (nbytes + 15) // 16
def L(fn, count, items, targ, *rest):
    vals = [ctypes.create_string_buffer(targ, len(targ))] + list(rest)
    ptrs = (ctypes.c_void_p * len(vals))(*[ctypes.addressof(v) for v in vals])
    parts = max(1, min((items + 255) // 256, max(1, max_blocks // count)))
    cp.cuda.driver.launchKernel(fn.kernel.ptr if hasattr(fn, 'kernel') else fn.ptr, parts * count, 1, 1, 256, 1, 1, 0,
                                cp.cuda.get_current_stream().ptr, ctypes.addressof(ptrs), 0)
t("fill (hash) 1 buffer", lambda: fill((min((n+255)//256, max_blocks),), (256,), (pristine, cp.uint64(n), cp.uint64(7), cp.int32(0), cp.float64(-1), cp.float64(1))))
t("memcpy D2D 1 buffer", lambda: sides[0].data.copy_from_device_async(pristine.data, nbytes))
t("memcpy D2D x17", lambda: [s.data.copy_from_device_async(pristine.data, nbytes) for s in sides])
t("copy_fanout 1 target", lambda: L(copy, 1, chunks, targets([sides[0].data.ptr], []), u64(pristine.data.ptr), u64(nbytes)))
t("copy_fanout 17 targets", lambda: L(copy, 17, chunks, targets([s.data.ptr for s in sides], []), u64(pristine.data.ptr), u64(nbytes)))
t("copy_fanout 1 target x17 launches", lambda: [L(copy, 1, chunks, targets([s.data.ptr], []), u64(pristine.data.ptr), u64(nbytes)) for s in sides])
sl = [slots[k].data.ptr for k in range(17)]
t("verify 1 target", lambda: L(ver, 1, chunks, targets([sides[0].data.ptr], sl[:1]), u64(pristine.data.ptr), u64(n)))
t("verify 16 targets", lambda: L(ver, 16, chunks, targets([s.data.ptr for s in sides[:16]], sl[:16]), u64(pristine.data.ptr), u64(n)))
t("verify 1 target x16 launches", lambda: [L(ver, 1, chunks, targets([s.data.ptr], sl[:1]), u64(pristine.data.ptr), u64(n)) for s in sides[:16]])
t("compare 16 targets (equal)", lambda: L(cmpk, 16, chunks, targets([s.data.ptr for s in sides[:16]], sl[:16]), u64(pristine.data.ptr), u64(n), f64(1e-6), f64(1e-6), i32(0)))
t("compare 1 target x16 launches (equal)", lambda: [L(cmpk, 1, chunks, targets([s.data.ptr], sl[:1]), u64(pristine.data.ptr), u64(n), f64(1e-6), f64(1e-6), i32(0)) for s in sides[:16]])
t("memset 0xFF x17", lambda: [s.data.memset_async(0xFF, nbytes) for s in sides])
print("slot 0 after:", slots[0].get().tolist())
