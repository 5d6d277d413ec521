// Per-launch cost of the dispatch observer: N launches of an empty kernel through `<<<>>>` (CUDA 13:
// __cudaLaunchKernel), timed on the host around the loop plus a final synchronize. Run with and without
// LD_PRELOAD=libbackscope_observer.so; the difference per launch is the observer's cost on the launch path.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

__global__ void empty_kernel(int x) {
    if (x == -1) printf("never\n");
}

int main(int argc, char** argv) {
    int n = argc > 1 ? atoi(argv[1]) : 200000;
    empty_kernel<<<1, 32>>>(0);  // warm up: context, module load
    cudaDeviceSynchronize();
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < n; ++i) empty_kernel<<<1, 32>>>(i);
    cudaDeviceSynchronize();
    auto t1 = std::chrono::steady_clock::now();
    double ns = std::chrono::duration<double, std::nano>(t1 - t0).count() / n;
    printf("{\"launches\":%d,\"ns_per_launch\":%.1f,\"error\":\"%s\"}\n", n, ns, cudaGetErrorString(cudaGetLastError()));
    return 0;
}
