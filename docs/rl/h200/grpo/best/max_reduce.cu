// best program seen for max_reduce during training: items=8 vector=4 reduce=sequential sync=safe final=two_pass (reward 1.858, correct)
// @scratch total f32 (ceil_div(n, 8192))
// @launch reduce_block grid=(ceil_div(n, 8192)) block=(256) args=(x, total, n)
// @launch reduce_final grid=(1) block=(1024) args=(total, out, ceil_div(n, 8192))
#define BLOCK 256
#define ITEMS 8
#define NEG_INF __int_as_float(0xff800000)
__device__ __forceinline__ float warp_reduce(float v) {
    #pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
__device__ __forceinline__ float max4(float4 q) { return fmaxf(fmaxf(q.x, q.y), fmaxf(q.z, q.w)); }
__device__ __forceinline__ float dot4(float4 p, float4 q) { return p.x * q.x + p.y * q.y + p.z * q.z + p.w * q.w; }
__device__ __forceinline__ unsigned float_to_ordered(float f) {
    unsigned u = __float_as_uint(f);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
__device__ __forceinline__ float ordered_to_float(unsigned k) {
    return __uint_as_float((k & 0x80000000u) ? (k & 0x7FFFFFFFu) : ~k);
}
extern "C" __global__ void reduce_block(const float* __restrict__ x, float* total, int n) {
    int tid = threadIdx.x;
    int nv = n / 4;
    int base = blockIdx.x * (BLOCK * ITEMS) + tid;
    float acc = NEG_INF;
    #pragma unroll
    for (int k = 0; k < ITEMS; ++k) {
        int v = base + k * BLOCK;
        if (v < nv) acc = fmaxf(acc, max4(reinterpret_cast<const float4*>(x)[v]));
    }
    if (blockIdx.x == 0 && tid < n - nv * 4) {
        int i = nv * 4 + tid;
        acc = fmaxf(acc, x[i]);
    }
    __shared__ float s[BLOCK];
    s[tid] = acc;
    __syncthreads();
    for (int st = BLOCK / 2; st > 0; st >>= 1) {
        if (tid < st) s[tid] = fmaxf(s[tid], s[tid + st]);
        __syncthreads();
    }
    acc = s[0];
    if (tid == 0) total[blockIdx.x] = acc;
}

extern "C" __global__ void reduce_final(const float* __restrict__ total, float* __restrict__ out, int m) {
    __shared__ float ws[32];
    int tid = threadIdx.x;
    float v = NEG_INF;
    for (int i = tid; i < m; i += 1024) v = fmaxf(v, total[i]);
    v = warp_reduce(v);
    if ((tid & 31) == 0) ws[tid >> 5] = v;
    __syncthreads();
    if (tid < 32) {
        v = warp_reduce(ws[tid]);
        if (tid == 0) out[0] = v;
    }
}
