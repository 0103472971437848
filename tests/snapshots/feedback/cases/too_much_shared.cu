// A block reduction that stages 16384 floats (64 KiB) in static shared memory: more than the
// 48 KiB a kernel may declare statically, so ptxas refuses it.
// @scratch partials f32 (ceil_div(n, 16384))
// @launch max_chunk grid=(ceil_div(n, 16384)) block=(1024) args=(x, partials, n)
// @launch max_final grid=(1) block=(1) args=(partials, out, ceil_div(n, 16384))
extern "C" __global__ void max_chunk(const float* x, float* partials, int n) {
    __shared__ float s[16384];
    int base = blockIdx.x * 16384;
    for (int j = threadIdx.x; j < 16384; j += 1024)
        s[j] = base + j < n ? x[base + j] : -__int_as_float(0x7f800000);
    __syncthreads();
    for (int h = 8192; h > 0; h >>= 1) {
        for (int j = threadIdx.x; j < h; j += 1024) s[j] = fmaxf(s[j], s[j + h]);
        __syncthreads();
    }
    if (threadIdx.x == 0) partials[blockIdx.x] = s[0];
}

extern "C" __global__ void max_final(const float* partials, float* out, int m) {
    float v = partials[0];
    for (int i = 1; i < m; ++i) v = fmaxf(v, partials[i]);
    out[0] = v;
}
