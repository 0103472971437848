# Times the harness kernels (support.cu) against copy-based alternatives on 50M f32.
import cupy as cp, sys, time
src = open(sys.argv[1]).read()
extra = r'''
template <typename T>
__device__ void verify_copy(const T* buf, const T* pristine, unsigned long long n, CompareStats* st) {
    unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    unsigned long long mism = 0, first = ~0ULL;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        if (!same_bits(buf[i], pristine[i])) { mism++; if (i < first) first = i; }
    }
    for (int off = 16; off > 0; off >>= 1) {
        mism += __shfl_down_sync(0xffffffffu, mism, off);
        first = min(first, __shfl_down_sync(0xffffffffu, first, off));
    }
    if ((threadIdx.x & 31) == 0 && mism) { atomicAdd(&st->mismatches, mism); atomicMin(&st->first_index, first); }
}
template <typename T>
__device__ void compare_fast(const T* got, const T* want, unsigned long long n, double atol, double rtol,
                        int nan_equal, CompareStats* st) {
    unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    unsigned long long mism = 0, unwr = 0, first = ~0ULL, nonfin = 0;
    double max_abs = 0.0, max_rel = 0.0;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        T gr = got[i], wr = want[i];
        if (same_bits(gr, wr)) continue;
        double g = to_double(gr), w = to_double(wr);
        bool ok;
        if (isnan(w) || isnan(g)) {
            ok = isnan(w) && isnan(g) && (nan_equal || !is_poison(gr) || is_poison(wr));
        } else if (isinf(w) || isinf(g)) {
            ok = g == w;
        } else {
            double d = fabs(g - w);
            ok = d <= atol + rtol * fabs(w);
            max_abs = fmax(max_abs, d);
            if (w != 0.0) max_rel = fmax(max_rel, d / fabs(w));
        }
        if (!ok) { mism++; if (i < first) first = i; if (!(isfinite(g) && isfinite(w))) nonfin++; }
        if (is_poison(gr) && !is_poison(wr)) unwr++;
    }
    for (int off = 16; off > 0; off >>= 1) {
        mism += __shfl_down_sync(0xffffffffu, mism, off);
        unwr += __shfl_down_sync(0xffffffffu, unwr, off);
        nonfin += __shfl_down_sync(0xffffffffu, nonfin, off);
        first = min(first, __shfl_down_sync(0xffffffffu, first, off));
        max_abs = fmax(max_abs, __shfl_down_sync(0xffffffffu, max_abs, off));
        max_rel = fmax(max_rel, __shfl_down_sync(0xffffffffu, max_rel, off));
    }
    if ((threadIdx.x & 31) == 0) {
        if (mism) atomicAdd(&st->mismatches, mism);
        if (unwr) atomicAdd(&st->unwritten, unwr);
        if (nonfin) atomicAdd(&st->nonfinite_mismatch, nonfin);
        if (first != ~0ULL) atomicMin(&st->first_index, first);
        atomic_max_bits(&st->max_abs_bits, max_abs);
        atomic_max_bits(&st->max_rel_bits, max_rel);
    }
}
extern "C" __global__ void verify_copy_f32(const float* b, const float* p, unsigned long long n, CompareStats* st) { verify_copy<float>(b, p, n, st); }
extern "C" __global__ void compare_fast_f32(const float* g, const float* w, unsigned long long n, double atol, double rtol, int ne, CompareStats* st) { compare_fast<float>(g, w, n, atol, rtol, ne, st); }
'''
mod = cp.RawModule(code=src + extra, backend='nvcc', options=('-std=c++17', '-arch=sm_90'))
n = 50331651
sms = cp.cuda.runtime.getDeviceProperties(0)['multiProcessorCount']
grid = (min((n + 255)//256, sms*16),); block = (256,)
a = cp.empty(n, cp.float32); b = cp.empty(n, cp.float32); c = cp.empty(n, cp.float32)
st = cp.zeros(6, cp.uint64)
N = cp.uint64(n); seed = cp.uint64(12345)
def t(name, f, reps=20):
    f(); cp.cuda.Device().synchronize()
    s, e = cp.cuda.Event(), cp.cuda.Event()
    s.record()
    for _ in range(reps): f()
    e.record(); e.synchronize()
    ms = cp.cuda.get_elapsed_time(s, e) / reps
    print(f"{name:40s} {ms*1e3:8.1f} us")
    return ms
fill = mod.get_function('fill_f32'); ver = mod.get_function('verify_f32'); cmpk = mod.get_function('compare_f32')
vc = mod.get_function('verify_copy_f32'); cf = mod.get_function('compare_fast_f32')
for mode, A, B in [(0, -1.0, 1.0), (1, 0.0, 1.0)]:
    t(f"fill mode {mode}", lambda: fill(grid, block, (a, N, seed, cp.int32(mode), cp.float64(A), cp.float64(B))))
    t(f"verify (regenerate) mode {mode}", lambda: ver(grid, block, (a, N, seed, cp.int32(mode), cp.float64(A), cp.float64(B), st)))
fill(grid, block, (a, N, seed, cp.int32(0), cp.float64(-1), cp.float64(1)))
t("memcpy D2D 200MB", lambda: b.data.copy_from_device_async(a.data, 4*n))
t("memset 0xFF 200MB", lambda: c.data.memset_async(0xFF, 4*n))
t("verify_copy (bitwise vs pristine)", lambda: vc(grid, block, (b, a, N, st)))
t("compare (double, equal data)", lambda: cmpk(grid, block, (b, a, N, cp.float64(1e-6), cp.float64(1e-6), cp.int32(0), st)))
t("compare_fast (equal data)", lambda: cf(grid, block, (b, a, N, cp.float64(1e-6), cp.float64(1e-6), cp.int32(0), st)))
c[:] = a * (1 + 1e-7)
t("compare (double, near data)", lambda: cmpk(grid, block, (c, a, N, cp.float64(1e-6), cp.float64(1e-6), cp.int32(0), st)))
t("compare_fast (near data)", lambda: cf(grid, block, (c, a, N, cp.float64(1e-6), cp.float64(1e-6), cp.int32(0), st)))
