// Harness kernels compiled once per worker: input generation on the device (hash-based,
// so any element can be generated independently) and tolerance comparison with a block
// reduction. Trusted source; never shown to candidates.
#include <cuda_fp16.h>
#include <cuda_bf16.h>

struct CompareStats {
    unsigned long long mismatches;
    unsigned long long unwritten;
    unsigned long long first_index;   // ULLONG_MAX when none
    unsigned long long max_abs_bits;  // non-negative double bits: integer order == numeric order
    unsigned long long max_rel_bits;
    unsigned long long nonfinite_mismatch;
};

__device__ __forceinline__ unsigned long long mix64(unsigned long long z) {
    z += 0x9E3779B97F4A7C15ULL;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

__device__ __forceinline__ double u01(unsigned long long seed, unsigned long long i, unsigned long long stream) {
    unsigned long long h = mix64(seed ^ mix64(i * 2ULL + stream));
    return (double)(h >> 11) * (1.0 / 9007199254740992.0);  // [0, 1)
}

__device__ __forceinline__ double to_double(float v) { return (double)v; }
__device__ __forceinline__ double to_double(double v) { return v; }
__device__ __forceinline__ double to_double(__half v) { return (double)__half2float(v); }
__device__ __forceinline__ double to_double(__nv_bfloat16 v) { return (double)__bfloat162float(v); }
__device__ __forceinline__ double to_double(int v) { return (double)v; }
__device__ __forceinline__ double to_double(long long v) { return (double)v; }
__device__ __forceinline__ double to_double(unsigned char v) { return (double)v; }

template <typename T> __device__ __forceinline__ T from_double(double v);
template <> __device__ __forceinline__ float from_double<float>(double v) { return (float)v; }
template <> __device__ __forceinline__ double from_double<double>(double v) { return v; }
template <> __device__ __forceinline__ __half from_double<__half>(double v) { return __float2half((float)v); }
template <> __device__ __forceinline__ __nv_bfloat16 from_double<__nv_bfloat16>(double v) { return __float2bfloat16((float)v); }
template <> __device__ __forceinline__ int from_double<int>(double v) { return (int)v; }
template <> __device__ __forceinline__ long long from_double<long long>(double v) { return (long long)v; }
template <> __device__ __forceinline__ unsigned char from_double<unsigned char>(double v) { return (unsigned char)v; }

// Whether every byte of v is the poison byte its buffer was filled with before the run (two
// patterns alternate between runs, so no valid value can hide an unwritten element).
template <typename T> __device__ __forceinline__ bool is_poison(T v, unsigned char poison) {
    const unsigned char* b = reinterpret_cast<const unsigned char*>(&v);
    #pragma unroll
    for (int k = 0; k < (int)sizeof(T); ++k) if (b[k] != poison) return false;
    return true;
}

template <typename T> __device__ __forceinline__ double min_normal();
template <> __device__ __forceinline__ double min_normal<float>() { return 1.1754943508222875e-38; }
template <> __device__ __forceinline__ double min_normal<__nv_bfloat16>() { return 1.1754943508222875e-38; }
template <> __device__ __forceinline__ double min_normal<__half>() { return 6.103515625e-05; }
template <> __device__ __forceinline__ double min_normal<double>() { return 2.2250738585072014e-308; }
template <typename T> __device__ __forceinline__ double min_normal() { return 0.0; }

// A NaN of the special values: fill_value stores it as the type's own quiet NaN (typed_nan),
// not through a conversion, so the CPU twin writes the same bits.
__device__ __forceinline__ double nan_marker() { return __longlong_as_double(0x7FF8000000000000LL); }
template <typename T> __device__ __forceinline__ T typed_nan() { return T(0); }
template <> __device__ __forceinline__ float typed_nan<float>() { return __int_as_float(0x7FC00000); }
template <> __device__ __forceinline__ double typed_nan<double>() { return __longlong_as_double(0x7FF8000000000000LL); }
template <> __device__ __forceinline__ __half typed_nan<__half>() { return __ushort_as_half((unsigned short)0x7E00u); }
template <> __device__ __forceinline__ __nv_bfloat16 typed_nan<__nv_bfloat16>() { return __ushort_as_bfloat16((unsigned short)0x7FC0u); }

// The special value element i takes instead of its drawn one (special: 1 NaN, 2 +Inf,
// 4 -Inf, 8 -0.0, 16 denormal of T), with probability rate; false when it keeps its own.
template <typename T>
__device__ __forceinline__ bool special_value(unsigned long long i, unsigned long long seed, unsigned int special,
                                              double rate, double* v) {
    if (special == 0u || u01(seed, i, 2) >= rate) return false;
    unsigned long long chosen = mix64(seed ^ mix64(i * 2ULL + 3ULL));
    unsigned long long k = chosen % (unsigned long long)__popc(special);
    unsigned int bit = 1u;
    for (unsigned int b = 0, seen = 0; b < 32; ++b) {
        if (special & (1u << b)) {
            if (seen == k) { bit = 1u << b; break; }
            ++seen;
        }
    }
    double sign = (chosen >> 63) ? -1.0 : 1.0;
    if (bit == 1u) *v = nan_marker();
    else if (bit == 2u) *v = __longlong_as_double(0x7FF0000000000000LL);
    else if (bit == 4u) *v = __longlong_as_double((long long)0xFFF0000000000000ULL);
    else if (bit == 8u) *v = -0.0;
    else *v = sign * (0.25 + 0.5 * u01(seed, i, 3)) * min_normal<T>();
    return true;
}

// mode: 0 uniform [a, b), 1 normal (mean a, std b), 2 integers in [a, b), 3 arange a + i*b,
// 4 constant a, 5 ragged arange (a + i*b plus an integer in [0, b] between the fixed ends)
template <typename T>
__device__ __forceinline__ T fill_value(unsigned long long i, unsigned long long n, unsigned long long seed, int mode,
                                        double a, double b, unsigned int special, double rate) {
    double v;
    if (special_value<T>(i, seed, special, rate, &v)) return isnan(v) ? typed_nan<T>() : from_double<T>(v);
    if (mode == 0) {
        v = a + (b - a) * u01(seed, i, 0);
    } else if (mode == 1) {
        double u1 = u01(seed, i, 0), u2 = u01(seed, i, 1);
        v = a + b * sqrt(-2.0 * log(1.0 - u1)) * cospi(2.0 * u2);
    } else if (mode == 2) {
        double lo = ceil(a), hi = ceil(b);
        unsigned long long span = hi > lo ? (unsigned long long)(hi - lo) : 1ULL;
        v = lo + (double)(mix64(seed ^ mix64(i)) % span);
    } else if (mode == 3) {
        v = a + (double)i * b;
    } else if (mode == 5) {
        v = a + (double)i * b;
        if (i != 0 && i + 1 < n) v += floor(u01(seed, i, 0) * (b + 1.0));
    } else {
        v = a;
    }
    return from_double<T>(v);
}

template <typename T>
__device__ void fill(T* out, unsigned long long n, unsigned long long seed, int mode, double a, double b,
                     unsigned int special, double rate) {
    unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        out[i] = fill_value<T>(i, n, seed, mode, a, b, special, rate);
}

// The precision probe: mantissa bits [lo, hi) of every normal element replaced by bits drawn
// from (seed, i), and bit 0 set, so that two input sets differ only where a format coarser
// than the task's contract rounds (the coarser format rounds both alike).
extern "C" __global__ void perturb_f32(unsigned int* x, unsigned long long n, unsigned long long seed, int lo, int hi) {
    unsigned int mask = (hi >= 32 ? 0xFFFFFFFFu : ((1u << hi) - 1u)) & ~((1u << lo) - 1u);
    unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        unsigned int v = x[i], e = (v >> 23) & 0xFFu;
        if (e == 0u || e == 0xFFu) continue;
        x[i] = (v & ~mask) | ((unsigned int)mix64(seed ^ mix64(i)) & mask) | 1u;
    }
}

extern "C" __global__ void perturb_f64(unsigned long long* x, unsigned long long n, unsigned long long seed, int lo, int hi) {
    unsigned long long mask = (hi >= 64 ? ~0ULL : ((1ULL << hi) - 1ULL)) & ~((1ULL << lo) - 1ULL);
    unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        unsigned long long v = x[i], e = (v >> 52) & 0x7FFULL;
        if (e == 0ULL || e == 0x7FFULL) continue;
        x[i] = (v & ~mask) | (mix64(seed ^ mix64(i)) & mask) | 1ULL;
    }
}

// How a member's outputs followed a change of inputs compared with the reference's: over the
// elements finite in all four buffers, out[0] += ((c1-c0) - (r1-r0))^2, out[1] += (r1-r0)^2,
// out[2] += r0^2.
template <typename T>
__device__ void sensitivity(const T* c1, const T* c0, const T* r1, const T* r0, unsigned long long n, double* out) {
    double e = 0.0, d = 0.0, s = 0.0;
    unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        double a1 = to_double(c1[i]), a0 = to_double(c0[i]), b1 = to_double(r1[i]), b0 = to_double(r0[i]);
        if (!(isfinite(a1) && isfinite(a0) && isfinite(b1) && isfinite(b0))) continue;
        double dr = b1 - b0, dc = a1 - a0;
        e += (dc - dr) * (dc - dr);
        d += dr * dr;
        s += b0 * b0;
    }
    #pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
        e += __shfl_down_sync(0xffffffffu, e, off);
        d += __shfl_down_sync(0xffffffffu, d, off);
        s += __shfl_down_sync(0xffffffffu, s, off);
    }
    if ((threadIdx.x & 31) == 0) {
        atomicAdd(&out[0], e);
        atomicAdd(&out[1], d);
        atomicAdd(&out[2], s);
    }
}

template <typename T> __device__ __forceinline__ bool same_bits(T x, T y) {
    const unsigned char* p = reinterpret_cast<const unsigned char*>(&x);
    const unsigned char* q = reinterpret_cast<const unsigned char*>(&y);
    #pragma unroll
    for (int k = 0; k < (int)sizeof(T); ++k) if (p[k] != q[k]) return false;
    return true;
}

__device__ __forceinline__ void atomic_max_bits(unsigned long long* p, double v) {
    if (v > 0.0) atomicMax(p, (unsigned long long)__double_as_longlong(v));
}

// Up to MAX_TARGETS buffers that one launch works on, each with its statistics slot. The
// launch's blocks are dealt round-robin over the targets, so the blocks that read a chunk
// of the shared source (the pristine inputs, the reference's outputs) run together and
// the chunk is read from DRAM once and from L2 by the others.
#define MAX_TARGETS 32
struct Targets {
    unsigned long long ptr[MAX_TARGETS];
    unsigned long long slot[MAX_TARGETS];
    int count;
};

struct Part {
    int who;                          // target index
    unsigned long long first, step;   // first work item of this thread, stride
};

__device__ __forceinline__ Part part_of(const Targets& t) {
    Part p;
    p.who = blockIdx.x % t.count;
    unsigned long long parts = gridDim.x / t.count;
    p.first = (unsigned long long)(blockIdx.x / t.count) * blockDim.x + threadIdx.x;
    p.step = parts * blockDim.x;
    return p;
}

// 16-byte chunks of n elements of T both buffers can be read in (0 when either is not
// 16-byte aligned: then every element goes through the scalar tail).
template <typename T>
__device__ __forceinline__ unsigned long long chunks_of(const void* a, const void* b, unsigned long long n) {
    if (((unsigned long long)a | (unsigned long long)b) & 15ULL) return 0;
    return n * sizeof(T) / 16;
}

__device__ __forceinline__ bool same_chunk(uint4 x, uint4 y) {
    return x.x == y.x && x.y == y.y && x.z == y.z && x.w == y.w;
}

// Writes `bytes` of `src` into every target.
extern "C" __global__ void copy_fanout(Targets t, const unsigned char* src, unsigned long long bytes) {
    Part p = part_of(t);
    unsigned char* dst = reinterpret_cast<unsigned char*>(t.ptr[p.who]);
    unsigned long long chunks = (((unsigned long long)dst | (unsigned long long)src) & 15ULL) ? 0 : bytes / 16;
    const uint4* s4 = reinterpret_cast<const uint4*>(src);
    uint4* d4 = reinterpret_cast<uint4*>(dst);
    for (unsigned long long c = p.first; c < chunks; c += p.step) d4[c] = s4[c];
    for (unsigned long long i = chunks * 16 + p.first; i < bytes; i += p.step) dst[i] = src[i];
}

struct Tally {
    unsigned long long mism = 0, unwr = 0, first = ~0ULL, nonfin = 0;
    double max_abs = 0.0, max_rel = 0.0;
};

// One element of a comparison (elements with identical bits never get here: they agree).
template <typename T>
__device__ __forceinline__ void compare_one(T gr, T wr, unsigned long long i, double atol, double rtol,
                                            int nan_equal, unsigned char poison, Tally& y) {
    double g = to_double(gr), w = to_double(wr);
    bool ok;
    if (isnan(w) || isnan(g)) {
        ok = isnan(w) && isnan(g) && (nan_equal || !is_poison(gr, poison) || is_poison(wr, poison));
    } else if (isinf(w) || isinf(g)) {
        ok = g == w;
    } else {
        double d = fabs(g - w);
        ok = d <= atol + rtol * fabs(w);
        y.max_abs = fmax(y.max_abs, d);
        if (w != 0.0) y.max_rel = fmax(y.max_rel, d / fabs(w));
    }
    if (!ok) {
        y.mism++;
        if (i < y.first) y.first = i;
        if (!(isfinite(g) && isfinite(w))) y.nonfin++;
    }
    if (is_poison(gr, poison) && !is_poison(wr, poison)) y.unwr++;
}

__device__ __forceinline__ void flush_tally(Tally y, CompareStats* st) {
    #pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
        y.mism += __shfl_down_sync(0xffffffffu, y.mism, off);
        y.unwr += __shfl_down_sync(0xffffffffu, y.unwr, off);
        y.nonfin += __shfl_down_sync(0xffffffffu, y.nonfin, off);
        y.first = min(y.first, __shfl_down_sync(0xffffffffu, y.first, off));
        y.max_abs = fmax(y.max_abs, __shfl_down_sync(0xffffffffu, y.max_abs, off));
        y.max_rel = fmax(y.max_rel, __shfl_down_sync(0xffffffffu, y.max_rel, off));
    }
    if ((threadIdx.x & 31) == 0) {
        if (y.mism) atomicAdd(&st->mismatches, y.mism);
        if (y.unwr) atomicAdd(&st->unwritten, y.unwr);
        if (y.nonfin) atomicAdd(&st->nonfinite_mismatch, y.nonfin);
        if (y.first != ~0ULL) atomicMin(&st->first_index, y.first);
        atomic_max_bits(&st->max_abs_bits, y.max_abs);
        atomic_max_bits(&st->max_rel_bits, y.max_rel);
    }
}

// Calls on_diff(x, y, index) for every element of this thread's share of the target whose
// bits differ from `other`'s: 16-byte chunks first (equal chunks skipped whole), then the
// elements past the last chunk.
template <typename T, typename F>
__device__ __forceinline__ void each_difference(const Part& p, const T* mine, const T* other,
                                                unsigned long long n, F on_diff) {
    const unsigned long long per = 16 / sizeof(T);
    unsigned long long chunks = chunks_of<T>(mine, other, n);
    const uint4* m4 = reinterpret_cast<const uint4*>(mine);
    const uint4* o4 = reinterpret_cast<const uint4*>(other);
    for (unsigned long long c = p.first; c < chunks; c += p.step) {
        uint4 mc = m4[c], oc = o4[c];
        if (same_chunk(mc, oc)) continue;
        const T* me = reinterpret_cast<const T*>(&mc);
        const T* oe = reinterpret_cast<const T*>(&oc);
        for (unsigned long long k = 0; k < per; ++k)
            if (!same_bits(me[k], oe[k])) on_diff(me[k], oe[k], c * per + k);
    }
    for (unsigned long long i = chunks * per + p.first; i < n; i += p.step)
        if (!same_bits(mine[i], other[i])) on_diff(mine[i], other[i], i);
}

// Compares n elements of every target (`got`) with `want`, into the target's slot.
template <typename T>
__device__ void compare(const Targets& t, const T* want, unsigned long long n, double atol, double rtol,
                        int nan_equal, int poison) {
    Part p = part_of(t);
    Tally y;
    unsigned char pb = (unsigned char)poison;
    each_difference<T>(p, reinterpret_cast<const T*>(t.ptr[p.who]), want, n,
                       [&](T g, T w, unsigned long long i) { compare_one<T>(g, w, i, atol, rtol, nan_equal, pb, y); });
    flush_tally(y, reinterpret_cast<CompareStats*>(t.slot[p.who]));
}

// Counts the elements of every target that differ (bit for bit) from `pristine`: the
// inputs a candidate was given must be what it leaves behind.
template <typename T>
__device__ void verify(const Targets& t, const T* pristine, unsigned long long n) {
    Part p = part_of(t);
    Tally y;
    each_difference<T>(p, reinterpret_cast<const T*>(t.ptr[p.who]), pristine, n,
                       [&](T, T, unsigned long long i) {
                           y.mism++;
                           y.first = min(y.first, i);
                       });
    flush_tally(y, reinterpret_cast<CompareStats*>(t.slot[p.who]));
}

#define CUDAPERF_DTYPE(NAME, T)                                                                       \
    extern "C" __global__ void fill_##NAME(T* out, unsigned long long n, unsigned long long seed,    \
                                           int mode, double a, double b, unsigned int special,       \
                                           double rate) {                                            \
        fill<T>(out, n, seed, mode, a, b, special, rate);                                             \
    }                                                                                                 \
    extern "C" __global__ void sensitivity_##NAME(const T* c1, const T* c0, const T* r1, const T* r0, \
                                                  unsigned long long n, double* out) {               \
        sensitivity<T>(c1, c0, r1, r0, n, out);                                                       \
    }                                                                                                 \
    extern "C" __global__ void compare_##NAME(Targets t, const T* want, unsigned long long n,        \
                                              double atol, double rtol, int nan_equal, int poison) { \
        compare<T>(t, want, n, atol, rtol, nan_equal, poison);                                        \
    }                                                                                                 \
    extern "C" __global__ void verify_##NAME(Targets t, const T* pristine, unsigned long long n) {   \
        verify<T>(t, pristine, n);                                                                    \
    }

CUDAPERF_DTYPE(f32, float)
CUDAPERF_DTYPE(f64, double)
CUDAPERF_DTYPE(f16, __half)
CUDAPERF_DTYPE(bf16, __nv_bfloat16)
CUDAPERF_DTYPE(i32, int)
CUDAPERF_DTYPE(i64, long long)
CUDAPERF_DTYPE(u8, unsigned char)
