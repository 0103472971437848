// best program seen for softmax_rows during training: style=block_per_row block=512 vector=4 sync=safe (reward 2.090, correct)
// @launch rowwise grid=(rows) block=(512)
#define BLOCK 512
extern "C" __global__ void rowwise(const float* __restrict__ x, float* __restrict__ y, int rows, int cols) {
    int row = blockIdx.x;
    int tid = threadIdx.x;
    __shared__ float red[BLOCK];
    const float* xr = x + (size_t)row * cols;
    float m = -__int_as_float(0x7f800000);
    if ((cols & 3) == 0) {  // rows start 16-byte aligned: float4 loads
        const float4* xr4 = reinterpret_cast<const float4*>(xr);
        for (int j = tid; j < cols / 4; j += BLOCK) {
            float4 q = xr4[j];
            { float v = q.x; m = fmaxf(m, v); }
            { float v = q.y; m = fmaxf(m, v); }
            { float v = q.z; m = fmaxf(m, v); }
            { float v = q.w; m = fmaxf(m, v); }
        }
    } else {
        for (int j = tid; j < cols; j += BLOCK) {
            float v = xr[j];
            m = fmaxf(m, v);
        }
    }
    red[tid] = m;
    __syncthreads();
    for (int s = 256; s > 0; s >>= 1) {
        if (tid < s) red[tid] = fmaxf(red[tid], red[tid + s]);
        __syncthreads();
    }
    m = red[0];
    __syncthreads();
    float s = 0.0f;
    if ((cols & 3) == 0) {  // rows start 16-byte aligned: float4 loads
        const float4* xr4 = reinterpret_cast<const float4*>(xr);
        for (int j = tid; j < cols / 4; j += BLOCK) {
            float4 q = xr4[j];
            { float v = q.x; s += expf(v - m); }
            { float v = q.y; s += expf(v - m); }
            { float v = q.z; s += expf(v - m); }
            { float v = q.w; s += expf(v - m); }
        }
    } else {
        for (int j = tid; j < cols; j += BLOCK) {
            float v = xr[j];
            s += expf(v - m);
        }
    }
    red[tid] = s;
    __syncthreads();
    for (int s = 256; s > 0; s >>= 1) {
        if (tid < s) red[tid] = red[tid] + red[tid + s];
        __syncthreads();
    }
    s = red[0];
    __syncthreads();
    float inv = 1.0f / s;
    float* yr = y + (size_t)row * cols;
    if ((cols & 3) == 0) {
        const float4* xr4 = reinterpret_cast<const float4*>(xr);
        float4* yr4 = reinterpret_cast<float4*>(yr);
        for (int j = tid; j < cols / 4; j += BLOCK) {
            float4 q = xr4[j];
            yr4[j] = make_float4(expf(q.x - m) * inv, expf(q.y - m) * inv, expf(q.z - m) * inv, expf(q.w - m) * inv);
        }
    } else {
        for (int j = tid; j < cols; j += BLOCK) yr[j] = expf(xr[j] - m) * inv;
    }
}
