// The GPU half of the Go crash test program (main.go), built with hipcc into a shared library that
// the Go program links through cgo: loading it registers the kernel with the real HIP runtime
// (__hipRegisterFatBinary/__hipRegisterFunction run in its static initialiser, before Go's runtime
// starts). Launches go through hipLaunchKernel explicitly (without a GPU a <<<>>> launch stops before
// it); each prints its status, so the test can compare the trace with the program's own account.
// The crash functions fail in C code, as a GPU backend under Ollama's Go runner would.
#include <hip/hip_runtime.h>
#include <stdio.h>
#include <stdlib.h>

__global__ void add_one(float* p, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) p[i] += 1.0f;
}

extern "C" int launch_add_one(int times) {
    static float* p = nullptr;
    static int n = 64;
    void* args[] = {&p, &n};
    int failed = 0;
    for (int i = 0; i < times; i++) {
        hipError_t rc = hipLaunchKernel((const void*)add_one, dim3(1), dim3(64), args, 0, nullptr);
        printf("launch add_one grid=1,1,1 block=64,1,1 rc=%d\n", (int)rc);
        failed += rc != hipSuccess;
    }
    fflush(stdout);
    return failed;
}

extern "C" void crash_null_write(void) {
    static volatile int* volatile nowhere = nullptr;
    *nowhere = 1;
}

extern "C" void crash_abort(void) { abort(); }
