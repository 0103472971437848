// best program seen for matmul during training: style=smem_tiled tile=32 regs=4 unroll=yes (reward 0.960, not_run)
// @launch matmul_k grid=(ceil_div(n, 32), ceil_div(m, 32)) block=(32, 32)
#define T 32
extern "C" __global__ void matmul_k(const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ c, int m, int n, int k) {
    __shared__ float As[T][T];
    __shared__ float Bs[T][T];
    int tx = threadIdx.x, ty = threadIdx.y;
    int row = blockIdx.y * T + ty;
    int col = blockIdx.x * T + tx;
    float acc = 0.0f;
    for (int k0 = 0; k0 < k; k0 += T) {
        As[ty][tx] = (row < m && k0 + tx < k) ? a[row * k + k0 + tx] : 0.0f;
        Bs[ty][tx] = (k0 + ty < k && col < n) ? b[(k0 + ty) * n + col] : 0.0f;
        __syncthreads();
        #pragma unroll
        for (int p = 0; p < T; ++p) acc += As[ty][p] * Bs[p][tx];
        __syncthreads();
    }
    if (row < m && col < n) c[row * n + col] = acc;
}
