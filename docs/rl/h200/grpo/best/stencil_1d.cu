// best program seen for stencil_1d during training: block=128 items=4 smem=shared_tile sync=barrier (reward 1.373, correct)
// @launch stencil_k grid=(ceil_div(n, 512)) block=(128)
#define BLOCK 128
#define ITEMS 4
#define TILE 512
extern "C" __global__ void stencil_k(const float* __restrict__ in, float* __restrict__ out, int n) {
    const float w[7] = {0.05f, 0.1f, 0.15f, 0.4f, 0.15f, 0.1f, 0.05f};
    int base = blockIdx.x * TILE;
    __shared__ float s[TILE + 6];
    int t = threadIdx.x;
    #pragma unroll
    for (int k = 0; k < ITEMS; ++k) {
        int i = base + t + k * BLOCK;
        s[t + k * BLOCK + 3] = i < n ? in[i] : 0.0f;
    }
    if (t < 3) {
        int l = base - 3 + t;
        s[t] = l >= 0 ? in[l] : 0.0f;
        int r = base + TILE + t;
        s[TILE + 3 + t] = r < n ? in[r] : 0.0f;
    }
    __syncthreads();
    #pragma unroll
    for (int k = 0; k < ITEMS; ++k) {
        int lt = t + k * BLOCK;
        int i = base + lt;
        if (i < n) {
            if (i < 3 || i >= n - 3) {
                out[i] = s[lt + 3];
            } else {
                float acc = 0.0f;
                #pragma unroll
                for (int j = 0; j < 7; ++j) acc += w[j] * s[lt + j];
                out[i] = acc;
            }
        }
    }
}
