// Per-launch cost of the dispatch observer, measured inside one process so that the machine's run-to-run spread
// (vCPU placement, clocks) cancels out. The same empty kernel is launched through two function pointers to each
// launch entry point:
//   "observed": the symbol the program would bind to (dlsym(RTLD_DEFAULT)): the observer's hook under LD_PRELOAD;
//   "plain":    the same symbol looked up in libcudart itself: the runtime, bypassing any interposer.
// Blocks of BLOCK launches alternate between the two (ABBA order); only the launch calls are timed, the stream is
// synchronized between blocks so that the launch queue never fills and the host cost is what is measured.
// Without LD_PRELOAD both pointers are the same function: that run is the A/A control (the method's resolution).
// Build: nvcc -O2 -arch=sm_90 -cudart shared -o launch_ab launch_ab.cu -ldl
// Prints one JSON line per entry point: medians of per-launch ns for both modes and of the paired differences.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <vector>

__global__ void empty_kernel(int x) {
    if (x == -1) printf("never\n");
}

using LaunchKernelFn = cudaError_t (*)(const void*, dim3, dim3, void**, size_t, cudaStream_t);
using LaunchKernelExCFn = cudaError_t (*)(const cudaLaunchConfig_t*, const void*, void**);
// CUDA 12.4+ `<<<>>>` lowering (crt/host_runtime.h); what ggml's kernels call under CUDA 13.
using InternalLaunchFn = cudaError_t (*)(cudaKernel_t, dim3, dim3, void**, size_t, cudaStream_t);

static double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    size_t n = v.size();
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static void check(cudaError_t e, const char* what) {
    if (e != cudaSuccess) {
        fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
        exit(1);
    }
}

// Times `rounds` ABBA groups of `block` launches per mode; `launch(mode)` launches once through mode 0 (plain) or
// 1 (observed) and returns its status.
template <typename F>
static void measure(const char* entry, bool interposed, int rounds, int block, F launch) {
    std::vector<double> ns[2], diff;
    const int order[4] = {0, 1, 1, 0};
    for (int r = 0; r < rounds; ++r) {
        double group[2] = {0, 0};
        for (int k = 0; k < 4; ++k) {
            int mode = order[k];
            auto t0 = std::chrono::steady_clock::now();
            for (int i = 0; i < block; ++i) check(launch(mode), entry);
            auto t1 = std::chrono::steady_clock::now();
            check(cudaStreamSynchronize(0), "cudaStreamSynchronize");
            double per_launch = std::chrono::duration<double, std::nano>(t1 - t0).count() / block;
            if (r >= 10) ns[mode].push_back(per_launch);  // the first groups warm caches and clocks
            group[mode] += per_launch / 2;
        }
        if (r >= 10) diff.push_back(group[1] - group[0]);
    }
    std::sort(diff.begin(), diff.end());
    printf("{\"entry\":\"%s\",\"interposed\":%s,\"launches_per_mode\":%d,\"plain_ns\":%.1f,\"observed_ns\":%.1f,"
           "\"paired_diff_ns\":%.1f,\"paired_diff_p10\":%.1f,\"paired_diff_p90\":%.1f}\n",
           entry, interposed ? "true" : "false", (rounds - 10) * block * 2, median(ns[0]), median(ns[1]),
           median(diff), diff[diff.size() / 10], diff[diff.size() * 9 / 10]);
    fflush(stdout);
}

int main(int argc, char** argv) {
    int rounds = argc > 1 ? atoi(argv[1]) : 1000;
    int block = argc > 2 ? atoi(argv[2]) : 64;
    empty_kernel<<<1, 32>>>(0);  // context creation and module load stay out of the numbers
    check(cudaDeviceSynchronize(), "warm-up");

    // libcudart's own handle: the library that defines a runtime function the observer does not hook.
    Dl_info info{};
    if (!dladdr(dlsym(RTLD_DEFAULT, "cudaGetDeviceCount"), &info) || !info.dli_fname) {
        fprintf(stderr, "cannot find libcudart (built without -cudart shared?)\n");
        return 1;
    }
    void* cudart = dlopen(info.dli_fname, RTLD_NOLOAD | RTLD_LAZY);
    if (!cudart) {
        fprintf(stderr, "dlopen(%s): %s\n", info.dli_fname, dlerror());
        return 1;
    }
    auto both = [&](const char* name) {
        void* bound = dlsym(RTLD_DEFAULT, name);
        void* real = dlsym(cudart, name);
        if (!bound || !real) {
            fprintf(stderr, "%s not found\n", name);
            exit(1);
        }
        return std::make_pair(real, bound);
    };
    int x = 0;
    void* args[] = {&x};
    const void* stub = reinterpret_cast<const void*>(empty_kernel);

    {
        auto [real, bound] = both("cudaLaunchKernel");
        LaunchKernelFn fn[2] = {reinterpret_cast<LaunchKernelFn>(real), reinterpret_cast<LaunchKernelFn>(bound)};
        measure("cudaLaunchKernel", real != bound, rounds, block,
                [&](int m) { return fn[m](stub, dim3(1), dim3(32), args, 0, nullptr); });
    }
    {
        auto [real, bound] = both("cudaLaunchKernelExC");
        LaunchKernelExCFn fn[2] = {reinterpret_cast<LaunchKernelExCFn>(real),
                                   reinterpret_cast<LaunchKernelExCFn>(bound)};
        cudaLaunchConfig_t config{};
        config.gridDim = dim3(1);
        config.blockDim = dim3(32);
        measure("cudaLaunchKernelExC", real != bound, rounds, block, [&](int m) { return fn[m](&config, stub, args); });
    }
    {
        cudaKernel_t kernel = nullptr;
        check(cudaGetKernel(&kernel, empty_kernel), "cudaGetKernel");
        auto [real, bound] = both("__cudaLaunchKernel");
        InternalLaunchFn fn[2] = {reinterpret_cast<InternalLaunchFn>(real), reinterpret_cast<InternalLaunchFn>(bound)};
        measure("__cudaLaunchKernel", real != bound, rounds, block,
                [&](int m) { return fn[m](kernel, dim3(1), dim3(32), args, 0, nullptr); });
    }
    return 0;
}
