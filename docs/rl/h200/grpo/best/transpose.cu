// best program seen for transpose during training: tile=32 smem=tiled_padded rows_per_thread=4 sync=barrier (reward 1.701, correct)
// @launch transpose_k grid=(ceil_div(N, 32), ceil_div(M, 32)) block=(32, 8)
#define TILE 32
#define BY 8
extern "C" __global__ void transpose_k(const float* __restrict__ a, float* __restrict__ t, int M, int N) {
    __shared__ float tile[TILE][TILE + 1];
    int tx = threadIdx.x, ty = threadIdx.y;
    int c = blockIdx.x * TILE + tx;
    int r0 = blockIdx.y * TILE + ty;
    #pragma unroll
    for (int k = 0; k < TILE; k += BY) {
        int r = r0 + k;
        if (r < M && c < N) tile[ty + k][tx] = a[r * N + c];
    }
    __syncthreads();
    int oc = blockIdx.y * TILE + tx;
    int orow0 = blockIdx.x * TILE + ty;
    #pragma unroll
    for (int k = 0; k < TILE; k += BY) {
        int orow = orow0 + k;
        if (orow < N && oc < M) t[orow * M + oc] = tile[tx][ty + k];
    }
}
