// Test program for the real HIP runtime (built with hipcc at test time). Static initialisation
// registers the three kernels through __hipRegisterFatBinary/__hipRegisterFunction. Launches go
// through hipLaunchKernel explicitly: without a GPU, a <<<>>> launch stops at
// __hipPushCallConfiguration (which fails) and never reaches hipLaunchKernel. Every launch prints
// its kernel, shape and the status the runtime returned, so the test can compare the observer's
// trace with the program's own account, and the output with and without the observer.
#include <hip/hip_runtime.h>
#include <stdio.h>

__global__ void add_one(float* p, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) p[i] += 1.0f;
}

template <int N>
__global__ void scale_by(float* p) {
    p[blockIdx.x * blockDim.x + threadIdx.x] *= N;
}

__global__ void never_launched(int* p) { p[0] = 0; }

static void launch(const char* label, const void* kernel, dim3 grid, dim3 block, void** args) {
    hipError_t rc = hipLaunchKernel(kernel, grid, block, args, 0, nullptr);
    printf("launch %s grid=%u,%u,%u block=%u,%u,%u rc=%d\n", label, grid.x, grid.y, grid.z, block.x, block.y,
           block.z, (int)rc);
}

int main() {
    int devices = -1;
    printf("hipGetDeviceCount rc=%d\n", (int)hipGetDeviceCount(&devices));
    float* p = nullptr;
    int n = 64;
    void* args_add[] = {&p, &n};
    void* args_scale[] = {&p};
    for (int i = 0; i < 3; i++) launch("add_one", (const void*)add_one, dim3(1), dim3(64), args_add);
    for (unsigned i = 0; i < 5; i++)
        launch("scale_by", (const void*)scale_by<3>, dim3(i + 1, 2, 1), dim3(32, 4, 1), args_scale);
    // The stream and capture calls the observer hooks or asks (without a GPU they fail; the
    // observer must return the runtime's own codes and record no capture).
    hipStreamCaptureStatus capture = hipStreamCaptureStatusNone;
    printf("stream hipStreamBeginCapture rc=%d\n", (int)hipStreamBeginCapture(nullptr, hipStreamCaptureModeGlobal));
    printf("stream hipStreamIsCapturing rc=%d\n", (int)hipStreamIsCapturing(nullptr, &capture));
    hipGraph_t graph = nullptr;
    printf("stream hipStreamEndCapture rc=%d\n", (int)hipStreamEndCapture(nullptr, &graph));
    printf("stream hipStreamDestroy rc=%d\n", (int)hipStreamDestroy(nullptr));
    launch("add_one", (const void*)add_one, dim3(2), dim3(64), args_add);
    printf("done\n");
    return 0;
}
