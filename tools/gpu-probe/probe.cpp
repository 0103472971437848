// Probes the isolation and cost questions behind timing protocol v2, on the GPU machine:
//   1. can device code reach pageable host memory (HMM/ATS)?
//   2. can a kernel in one CUDA context read memory allocated in another context of the
//      same process?
//   3. does CUDA IPC work between two processes here, and what does opening a handle cost?
//   4. what does one host round trip to another process (each with its own context, the
//      GPU switching between them) cost?
//   5. what does loading + unloading a small module cost?
// Build: nvcc -cubin -arch=sm_90 -o kernels.cubin kernels.cu && g++ -O2 -o probe probe.cpp -I/usr/local/cuda/include -L/usr/local/cuda/lib64/stubs -lcuda
#include <cuda.h>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>
#include <algorithm>
#include <unistd.h>
#include <sys/wait.h>

static const char* name(CUresult r) { const char* s = nullptr; cuGetErrorName(r, &s); return s ? s : "?"; }
#define CK(x) do { CUresult r_ = (x); if (r_ != CUDA_SUCCESS) { printf("  %s -> %s\n", #x, name(r_)); } } while (0)
static double now_us() { return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count(); }
static std::vector<char> cubin;
static CUfunction fn(CUmodule m, const char* n) { CUfunction f; CK(cuModuleGetFunction(&f, m, n)); return f; }

static int child(int rfd, int wfd) {
    CK(cuInit(0)); CUdevice d; CK(cuDeviceGet(&d, 0)); CUcontext c; CK(cuDevicePrimaryCtxRetain(&c, d)); CK(cuCtxSetCurrent(c));
    CUmodule m; CK(cuModuleLoadData(&m, cubin.data()));
    CUipcMemHandle h; if (read(rfd, &h, sizeof h) != sizeof h) return 1;
    double t0 = now_us(); CUdeviceptr p = 0; CUresult r = cuIpcOpenMemHandle(&p, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS); double t1 = now_us();
    printf("  child: cuIpcOpenMemHandle -> %s in %.1f us\n", name(r), t1 - t0);
    CUdeviceptr out; CK(cuMemAlloc(&out, 4));
    void* args[] = {&p, &out}; CK(cuLaunchKernel(fn(m, "read_first"), 1,1,1, 1,1,1, 0, 0, args, nullptr)); CK(cuCtxSynchronize());
    float v = 0; CK(cuMemcpyDtoH(&v, out, 4)); printf("  child: read through IPC: %g (parent wrote 42)\n", v);
    // Ping-pong: wait for a byte, run a 20 us kernel, sync, answer.
    CUfunction spin = fn(m, "spin"); int us = 20; void* sargs[] = {&us};
    char b;
    while (read(rfd, &b, 1) == 1 && b != 'q') {
        CK(cuLaunchKernel(spin, 1,1,1, 1,1,1, 0, 0, sargs, nullptr)); CK(cuCtxSynchronize());
        if (write(wfd, &b, 1) != 1) return 1;
    }
    return 0;
}

int main(int argc, char** argv) {
    FILE* f = fopen(argc > 2 ? argv[2] : "kernels.cubin", "rb"); if (!f) { printf("no cubin\n"); return 1; }
    fseek(f, 0, SEEK_END); cubin.resize(ftell(f)); fseek(f, 0, SEEK_SET); if (fread(cubin.data(), 1, cubin.size(), f) != cubin.size()) return 1; fclose(f);
    if (argc > 1 && std::string(argv[1]) == "child") return child(3, 4);
    if (argc > 1 && std::string(argv[1]) == "holder") {  // opens a handle and keeps it open
        CK(cuInit(0)); CUdevice d; CK(cuDeviceGet(&d, 0)); CUcontext c; CK(cuDevicePrimaryCtxRetain(&c, d)); CK(cuCtxSetCurrent(c));
        CUipcMemHandle h; if (read(3, &h, sizeof h) != sizeof h) return 1;
        CUdeviceptr p = 0; CK(cuIpcOpenMemHandle(&p, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
        char b = 'x'; if (write(4, &b, 1) != 1) return 1; if (read(3, &b, 1) != 1) return 1; return 0;
    }
    // usage: probe [hmm|main] [cubin]
    CK(cuInit(0)); CUdevice d; CK(cuDeviceGet(&d, 0));
    int pma = -1, hpt = -1, cma = -1;
    cuDeviceGetAttribute(&pma, CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS, d);
    cuDeviceGetAttribute(&hpt, CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS_USES_HOST_PAGE_TABLES, d);
    cuDeviceGetAttribute(&cma, CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS, d);
    printf("1. pageable memory access=%d uses host page tables=%d concurrent managed=%d\n", pma, hpt, cma);
    CUcontext a; CK(cuDevicePrimaryCtxRetain(&a, d)); CK(cuCtxSetCurrent(a));
    CUmodule ma; CK(cuModuleLoadData(&ma, cubin.data()));
    if (argc > 1 && std::string(argv[1]) == "atomics") {
        // 6. global atomics on a 1 KiB histogram: plain allocation, exported with an IPC
        // handle, and mapped by another process.
        int n = 1 << 28; CUdeviceptr data; CK(cuMemAlloc(&data, n));
        unsigned long long nn = n; void* fa[] = {&data, &nn};
        CK(cuLaunchKernel(fn(ma, "fill_u8"), (n + 255) / 256,1,1, 256,1,1, 0, 0, fa, nullptr)); CK(cuCtxSynchronize());
        CUevent e0, e1; CK(cuEventCreate(&e0, 0)); CK(cuEventCreate(&e1, 0));
        auto time_hist = [&](CUdeviceptr bins) {
            std::vector<float> ms;
            for (int r = 0; r < 7; ++r) {
                CK(cuMemsetD8(bins, 0, 1024)); void* ha[] = {&data, &bins, &n};
                CK(cuEventRecord(e0, 0)); CK(cuLaunchKernel(fn(ma, "hist"), (n + 255) / 256,1,1, 256,1,1, 0, 0, ha, nullptr)); CK(cuEventRecord(e1, 0)); CK(cuEventSynchronize(e1));
                float t; CK(cuEventElapsedTime(&t, e0, e1)); ms.push_back(t);
            }
            std::sort(ms.begin(), ms.end()); return ms[3];
        };
        CUdeviceptr plain, exported; CK(cuMemAlloc(&plain, 1 << 21)); CK(cuMemAlloc(&exported, 1 << 21));
        CUipcMemHandle h; CK(cuIpcGetMemHandle(&h, exported));
        printf("6. histogram of %d bytes, global atomics: plain %.3f ms, exported %.3f ms", n, time_hist(plain), time_hist(exported));
        int to_child[2], from_child[2]; if (pipe(to_child) || pipe(from_child)) return 1;
        pid_t pid = fork();
        if (pid == 0) { dup2(to_child[0], 3); dup2(from_child[1], 4); execl("/proc/self/exe", argv[0], "holder", argc > 2 ? argv[2] : "kernels.cubin", (char*)nullptr); _exit(127); }
        if (write(to_child[1], &h, sizeof h) != sizeof h) return 1; char b; if (read(from_child[0], &b, 1) != 1) return 1;
        printf(", mapped by another process %.3f ms, plain again %.3f ms\n", time_hist(exported), time_hist(plain));
        b = 'q'; if (write(to_child[1], &b, 1) != 1) return 1; int st; waitpid(pid, &st, 0);
        return 0;
    }
    if (argc > 1 && std::string(argv[1]) == "hmm") {
    {   // device code dereferencing a malloc'ed host pointer
        int* host = (int*)malloc(4096); host[0] = 1234; CUdeviceptr out; CK(cuMemAlloc(&out, 4)); CK(cuMemsetD8(out, 0, 4));
        CUdeviceptr hp = (CUdeviceptr)host; void* args[] = {&hp, &out};
        CUresult r = cuLaunchKernel(fn(ma, "read_host"), 1,1,1, 1,1,1, 0, 0, args, nullptr); CUresult s = cuCtxSynchronize();
        int v = 0; CUresult c = cuMemcpyDtoH(&v, out, 4);
        printf("   kernel reading malloc'ed host memory: launch %s, sync %s, copy %s, value %d (1234 = reachable)\n", name(r), name(s), name(c), v);
        if (s != CUDA_SUCCESS) { printf("   (context is dead now; re-run the other probes in a fresh process)\n"); }
    }
        return 0;
    }
    // 2. two contexts in one process
    CUdeviceptr pa; CK(cuMemAlloc(&pa, 1 << 20));
    { void* args[] = {&pa, nullptr}; float v = 7.0f; unsigned long long n = 1; args[1] = &v; void* a3[] = {&pa, &v, &n}; CK(cuLaunchKernel(fn(ma, "fill"), 1,1,1, 1,1,1, 0, 0, a3, nullptr)); CK(cuCtxSynchronize()); }
    CUcontext b; CK(cuCtxCreate(&b, nullptr, 0, d)); CUmodule mb; CK(cuModuleLoadData(&mb, cubin.data()));
    {
        CUdeviceptr out; CK(cuMemAlloc(&out, 4)); CK(cuMemsetD8(out, 0, 4));
        void* args[] = {&pa, &out};
        CUresult r = cuLaunchKernel(fn(mb, "read_first"), 1,1,1, 1,1,1, 0, 0, args, nullptr); CUresult s = cuCtxSynchronize();
        float v = 0; CUresult c = cuMemcpyDtoH(&v, out, 4);
        printf("2. kernel in context B reading context A's allocation: launch %s, sync %s, copy %s, value %g (7 = readable)\n", name(r), name(s), name(c), v);
        unsigned long long pa2 = 0; CUresult pr = cuPointerGetAttribute(&pa2, CU_POINTER_ATTRIBUTE_CONTEXT, pa);
        printf("   pointer attribute query from B: %s\n", name(pr));
    }
    CK(cuCtxSetCurrent(a));
    // 5. module load + unload cost
    { double t0 = now_us(); for (int i = 0; i < 100; ++i) { CUmodule m; CK(cuModuleLoadData(&m, cubin.data())); CUfunction fx = fn(m, "fill"); (void)fx; CK(cuModuleUnload(m)); } printf("5. module load+get+unload: %.1f us each\n", (now_us() - t0) / 100); }
    // 3 + 4. IPC and ping-pong with a child process
    CUdeviceptr shared; CK(cuMemAlloc(&shared, 1 << 21)); { float v = 42.0f; unsigned long long n = 1; void* a3[] = {&shared, &v, &n}; CK(cuLaunchKernel(fn(ma, "fill"), 1,1,1, 1,1,1, 0, 0, a3, nullptr)); CK(cuCtxSynchronize()); }
    CUipcMemHandle h; double t0 = now_us(); CK(cuIpcGetMemHandle(&h, shared)); printf("3. cuIpcGetMemHandle %.1f us\n", now_us() - t0);
    int to_child[2], from_child[2]; if (pipe(to_child) || pipe(from_child)) return 1;
    pid_t pid = fork();
    if (pid == 0) {
        dup2(to_child[0], 3); dup2(from_child[1], 4);
        execl("/proc/self/exe", argv[0], "child", argc > 2 ? argv[2] : "kernels.cubin", (char*)nullptr); _exit(127);
    }
    close(to_child[0]); close(from_child[1]);
    if (write(to_child[1], &h, sizeof h) != sizeof h) return 1;
    usleep(1500000);
    CUfunction spin = fn(ma, "spin"); int us = 20; void* sargs[] = {&us};
    std::vector<double> rt;
    for (int i = 0; i < 300; ++i) {
        CK(cuLaunchKernel(spin, 1,1,1, 1,1,1, 0, 0, sargs, nullptr)); CK(cuCtxSynchronize());
        double t = now_us(); char c = 'x'; if (write(to_child[1], &c, 1) != 1 || read(from_child[0], &c, 1) != 1) break; rt.push_back(now_us() - t);
    }
    std::sort(rt.begin(), rt.end());
    if (!rt.empty()) printf("4. round trip to the other process running a 20 us kernel: median %.1f us, p90 %.1f us\n", rt[rt.size()/2], rt[rt.size()*9/10]);
    char q = 'q'; if (write(to_child[1], &q, 1) != 1) return 1; int st; waitpid(pid, &st, 0);
    printf("done\n");
    return 0;
}
