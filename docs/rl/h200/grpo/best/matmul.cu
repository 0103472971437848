// best program seen for matmul during training: style=register_blocked tile=32 regs=4 unroll=yes (reward 1.750, correct)
// @launch matmul_k grid=(ceil_div(n, 128), ceil_div(m, 128)) block=(1024)
#define BT 32
#define R 4
#define TM 128
extern "C" __global__ void __launch_bounds__(1024) matmul_k(const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ c, int m, int n, int k) {
    __shared__ float As[TM][BT];
    __shared__ float Bs[BT][TM];
    int tid = threadIdx.x;
    int tx = tid % BT, ty = tid / BT;
    int row0 = blockIdx.y * TM, col0 = blockIdx.x * TM;
    float acc[R][R];
    #pragma unroll
    for (int i = 0; i < R; ++i)
        #pragma unroll
        for (int j = 0; j < R; ++j) acc[i][j] = 0.0f;
    for (int k0 = 0; k0 < k; k0 += BT) {
        #pragma unroll
        for (int l = 0; l < R; ++l) {
            int e = tid + BT * BT * l;
            int ar = e / BT, ac = e % BT;
            As[ar][ac] = (row0 + ar < m && k0 + ac < k) ? a[(row0 + ar) * k + k0 + ac] : 0.0f;
            int br = e / TM, bc = e % TM;
            Bs[br][bc] = (k0 + br < k && col0 + bc < n) ? b[(k0 + br) * n + col0 + bc] : 0.0f;
        }
        __syncthreads();
        #pragma unroll
        for (int p = 0; p < BT; ++p) {
            float av[R], bv[R];
            #pragma unroll
            for (int i = 0; i < R; ++i) av[i] = As[ty + BT * i][p];
            #pragma unroll
            for (int j = 0; j < R; ++j) bv[j] = Bs[p][tx + BT * j];
            #pragma unroll
            for (int i = 0; i < R; ++i)
                #pragma unroll
                for (int j = 0; j < R; ++j) acc[i][j] += av[i] * bv[j];
        }
        __syncthreads();
    }
    #pragma unroll
    for (int i = 0; i < R; ++i) {
        int rr = row0 + ty + BT * i;
        #pragma unroll
        for (int j = 0; j < R; ++j) {
            int cc = col0 + tx + BT * j;
            if (rr < m && cc < n) c[rr * n + cc] = acc[i][j];
        }
    }
}
