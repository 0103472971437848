// best program seen for vector_add during training: block=128 vector=4 items=1 mapping=coalesced tail=exact (reward 1.280, correct)
// @launch elementwise grid=(ceil_div(n, 512)) block=(128)
#define BLOCK 128
#define ITEMS 1
#define OP(p, q) ((p) + (q))
extern "C" __global__ void elementwise(const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ c, int n) {
    const float4* in0v = reinterpret_cast<const float4*>(a);
    const float4* in1v = reinterpret_cast<const float4*>(b);
    float4* outv = reinterpret_cast<float4*>(c);
    int nv = n / 4;
    int base = blockIdx.x * (BLOCK * ITEMS) + threadIdx.x;
    for (int k = 0; k < ITEMS; ++k) {
        int v = base + k * BLOCK;
        if (v < nv) {
            float4 p = in0v[v], q = in1v[v];
            outv[v] = make_float4(OP(p.x, q.x), OP(p.y, q.y), OP(p.z, q.z), OP(p.w, q.w));
        }
    }
    // The n % 4 elements after the last whole vector.
    if (blockIdx.x == 0 && threadIdx.x < n - nv * 4) {
        int i = nv * 4 + threadIdx.x;
        c[i] = OP(a[i], b[i]);
    }
}
