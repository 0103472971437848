// Probe for the "state kept between runs" class (issue 19): can a kernel read what an earlier
// launch of the same CUDA context left in shared memory or in local memory (the stack)?
// Both outlive no allocation the harness controls, so if a later launch sees them, a
// candidate could carry data from one run to the next even with its module reloaded.
// Build and run on the GPU machine: nvcc -O2 -arch=sm_90 -o leftovers leftovers.cu && ./leftovers
#include <cstdio>
#include <cuda_runtime.h>

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

int main() {
    int sms = 0;
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
    unsigned long long* seen;
    int* sink;
    cudaMalloc(&seen, 8);
    cudaMalloc(&sink, 4);
    unsigned long long h = 0;
    int blocks = sms * 4, threads = 256;
    cudaFuncSetAttribute(write_smem, cudaFuncAttributeMaxDynamicSharedMemorySize, 48 * 1024);
    cudaFuncSetAttribute(read_smem, cudaFuncAttributeMaxDynamicSharedMemorySize, 48 * 1024);
    write_smem<<<blocks, threads, 48 * 1024>>>(7);
    cudaMemset(seen, 0, 8);
    read_smem<<<blocks, threads, 48 * 1024>>>(seen);
    cudaMemcpy(&h, seen, 8, cudaMemcpyDeviceToHost);
    printf("shared memory: %llu of %llu words read back the previous launch's pattern (%s)\n", h,
           (unsigned long long)blocks * SMEM_WORDS, cudaGetErrorString(cudaGetLastError()));
    write_local<<<blocks, threads>>>(9, sink);
    cudaMemset(seen, 0, 8);
    read_local<<<blocks, threads>>>(seen);
    cudaMemcpy(&h, seen, 8, cudaMemcpyDeviceToHost);
    printf("local memory: %llu of %llu words read back the previous launch's pattern (%s)\n", h,
           (unsigned long long)blocks * threads * LOCAL_WORDS, cudaGetErrorString(cudaGetLastError()));
    return 0;
}
