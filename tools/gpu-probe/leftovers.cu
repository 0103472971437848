// Probe for the "state kept between runs" class (issue 19): can a kernel read what an earlier
// launch of the same CUDA context left in shared memory or in local memory (the stack)?
// Both outlive no allocation the harness controls, so if a later launch sees them, a
// candidate could carry data from one run to the next even with its module reloaded.
// Then the same with the runner's scrub kernels (src/exec/scrub.cu) launched in between:
// nothing may be read back.
// Build and run on the GPU machine: nvcc -O2 -arch=sm_90 -o leftovers leftovers.cu && ./leftovers
#include <cstdio>
#include <cuda_runtime.h>
#include "../../src/exec/scrub.cu"

#define PATTERN 0x5EED0000u
#define SMEM_WORDS (48 * 1024 / 4)
#define LOCAL_WORDS 2048

extern "C" __global__ void write_smem(unsigned int tag) {
    extern __shared__ unsigned int s[];
    for (int i = threadIdx.x; i < SMEM_WORDS; i += blockDim.x) s[i] = PATTERN | (tag & 0xFFFFu);
    __syncthreads();
}

extern "C" __global__ void read_smem(unsigned long long* seen) {
    extern __shared__ unsigned int s[];
    unsigned long long c = 0;
    for (int i = threadIdx.x; i < SMEM_WORDS; i += blockDim.x) c += (s[i] & 0xFFFF0000u) == PATTERN;
    atomicAdd(seen, c);
}

extern "C" __global__ void write_local(unsigned int tag, int* sink) {
    volatile unsigned int loc[LOCAL_WORDS];
    for (int i = 0; i < LOCAL_WORDS; ++i) loc[i] = PATTERN | (tag & 0xFFFFu);
    if (loc[threadIdx.x % LOCAL_WORDS] == 0) sink[0] = 1;
}

extern "C" __global__ void read_local(unsigned long long* seen) {
    volatile unsigned int loc[LOCAL_WORDS];
    unsigned long long c = 0;
    for (int i = 0; i < LOCAL_WORDS; ++i) c += (loc[i] & 0xFFFF0000u) == PATTERN;
    atomicAdd(seen, c);
}

static unsigned long long read_back(unsigned long long* seen, bool shared, int blocks, int threads) {
    unsigned long long h = 0;
    cudaMemset(seen, 0, 8);
    if (shared) read_smem<<<blocks, threads, 48 * 1024>>>(seen);
    else read_local<<<blocks, threads>>>(seen);
    cudaMemcpy(&h, seen, 8, cudaMemcpyDeviceToHost);
    return h;
}

int main() {
    int sms = 0, optin = 0, per_sm = 0;
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
    cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0);
    cudaDeviceGetAttribute(&per_sm, cudaDevAttrMaxThreadsPerMultiProcessor, 0);
    unsigned long long* seen;
    int* sink;
    cudaMalloc(&seen, 8);
    cudaMalloc(&sink, 4);
    int blocks = sms * 4, threads = 256;
    cudaFuncSetAttribute(write_smem, cudaFuncAttributeMaxDynamicSharedMemorySize, 48 * 1024);
    cudaFuncSetAttribute(read_smem, cudaFuncAttributeMaxDynamicSharedMemorySize, 48 * 1024);
    cudaFuncSetAttribute(scrub_shared, cudaFuncAttributeMaxDynamicSharedMemorySize, optin);
    for (int scrub = 0; scrub < 2; ++scrub) {
        write_smem<<<blocks, threads, 48 * 1024>>>(7);
        if (scrub) scrub_shared<<<2 * sms, 1024, optin>>>(optin / 4);
        unsigned long long h = read_back(seen, true, blocks, threads);
        printf("shared memory%s: %llu of %llu words read back the previous launch's pattern (%s)\n",
               scrub ? ", scrubbed in between" : "", h, (unsigned long long)blocks * SMEM_WORDS,
               cudaGetErrorString(cudaGetLastError()));
        write_local<<<blocks, threads>>>(9, sink);
        if (scrub) scrub_local_16k<<<2 * sms * (per_sm / 256), 256>>>(sink);
        h = read_back(seen, false, blocks, threads);
        printf("local memory%s: %llu of %llu words read back the previous launch's pattern (%s)\n",
               scrub ? ", scrubbed in between" : "", h, (unsigned long long)blocks * threads * LOCAL_WORDS,
               cudaGetErrorString(cudaGetLastError()));
    }
    return 0;
}
