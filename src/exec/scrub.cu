// Kernels a candidate's runner launches before each of its runs (untimed): shared memory and
// local memory (the stack) belong to the CUDA context, not to a module or an allocation, and
// a launch can read what an earlier launch of the same context left there (seen on an H200:
// every word). Overwriting both keeps a kernel from carrying data from one run to the next.
// Trusted source; never shown to candidates.

// Zeroes `words` words of this block's dynamic shared memory; launched with the device's
// largest opt-in shared memory per block, enough blocks for every SM.
extern "C" __global__ void scrub_shared(unsigned int words) {
    extern __shared__ unsigned int s[];
    for (unsigned int i = threadIdx.x; i < words; i += blockDim.x) s[i] = 0u;
}

// Zeroes a local array of W words per thread; launched to fill every thread slot of every SM,
// with W at least the candidate's largest stack frame. `sink` keeps the stores alive.
template <int W>
__device__ __forceinline__ void scrub_local(int* sink) {
    volatile unsigned int loc[W];
    for (int i = 0; i < W; ++i) loc[i] = 0u;
    if (loc[threadIdx.x % W] != 0u) sink[0] = 1;
}

extern "C" __global__ void scrub_local_1k(int* sink) { scrub_local<256>(sink); }
extern "C" __global__ void scrub_local_4k(int* sink) { scrub_local<1024>(sink); }
extern "C" __global__ void scrub_local_16k(int* sink) { scrub_local<4096>(sink); }
extern "C" __global__ void scrub_local_64k(int* sink) { scrub_local<16384>(sink); }
