// best program seen for vector_add during training: block=1024 vector=4 items=1 mapping=coalesced tail=assume_divisible (reward 0.949, not_run)
// @launch elementwise grid=(n / 4096) block=(1024)
#define BLOCK 1024
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
        float4 p = in0v[v], q = in1v[v];
        outv[v] = make_float4(OP(p.x, q.x), OP(p.y, q.y), OP(p.z, q.z), OP(p.w, q.w));
    }
}
