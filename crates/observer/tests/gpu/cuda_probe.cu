// GPU validation probe for the dispatch observer (run by run_cuda_probe.sh on a CUDA machine; not part
// of `cargo test`). Exercises every CUDA entry point the observer hooks that CUDA 13 programs use:
// <<<>>> (__cudaGetKernel + __cudaLaunchKernel), cudaLaunchKernel, cudaLaunchKernelExC with a PDL
// attribute (ggml's Hopper path), cudaLaunchCooperativeKernel, cuLaunchKernel on a runtime kernel
// (named by cuFuncGetName) and on a module function (cuModuleGetFunction), stream capture, graph
// instantiate, replay and exec update, and a cuBLAS call (invisible to LD_PRELOAD, by design).
// It prints "expect API NAME launches=N graph=G captured=C" lines for check_trace.py.
#include <cuda.h>
#include <cuda_runtime.h>
#include <cublas_v2.h>
#include <cooperative_groups.h>
#include <cstdio>
#include <vector>
#include <chrono>
__global__ void empty_kernel() {}

__global__ void add_one(float* p, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) p[i] += 1.0f; }
template <int N> __global__ void scale_by(float* p, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) p[i] = p[i] * N; }
__global__ void coop_kernel(float* p) { cooperative_groups::this_grid().sync(); if (threadIdx.x == 0 && blockIdx.x == 0) p[0] += 100.0f; }
__global__ void never_launched(int* p) { p[0] = 0; }

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { printf("%s -> %d %s\n", #x, (int)e_, cudaGetErrorString(e_)); } } while (0)
#define CU(x) do { CUresult r_ = (x); if (r_ != CUDA_SUCCESS) { printf("%s -> %d\n", #x, (int)r_); } } while (0)

int main() {
  const int n = 1 << 16;
  float* d; CK(cudaMalloc(&d, n * sizeof(float))); CK(cudaMemset(d, 0, n * sizeof(float)));
  // <<<>>>: add_one x3 (grid 256, block 256), scale_by<2> x5 with grid (i+1)
  for (int i = 0; i < 3; i++) add_one<<<256, 256>>>(d, n);
  for (int i = 0; i < 5; i++) scale_by<2><<<dim3(i + 1, 1, 1), dim3(128, 1, 1)>>>(d, n);
  // explicit cudaLaunchKernel: add_one x2 grid 2 block 64
  int nn = n; void* args[] = {&d, &nn};
  for (int i = 0; i < 2; i++) CK(cudaLaunchKernel((const void*)add_one, dim3(2), dim3(64), args, 0, 0));
  // cudaLaunchKernelEx with PDL attribute (ggml's Hopper path): scale_by<2> x2 grid 16 block 256
  cudaLaunchConfig_t cfg = {}; cfg.gridDim = dim3(16); cfg.blockDim = dim3(256);
  cudaLaunchAttribute attr[1]; attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization; attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr; cfg.numAttrs = 1;
  for (int i = 0; i < 2; i++) CK(cudaLaunchKernelEx(&cfg, scale_by<2>, d, nn));
  // cooperative x1 grid 4 block 32
  void* cargs[] = {&d};
  CK(cudaLaunchCooperativeKernel((const void*)coop_kernel, dim3(4), dim3(32), cargs, 0, 0));
  // driver API on a runtime kernel: cuLaunchKernel x2 via cudaGetFuncBySymbol (named by cuFuncGetName)
  cudaFunction_t f; CK(cudaGetFuncBySymbol(&f, (const void*)add_one));
  for (int i = 0; i < 2; i++) CU(cuLaunchKernel((CUfunction)f, 3, 1, 1, 32, 1, 1, 0, 0, args, nullptr));
  // driver module: cuModuleLoad + cuModuleGetFunction + cuLaunchKernel x4
  CUmodule mod; CU(cuModuleLoad(&mod, "drv_kernel.cubin")); CUfunction g; CU(cuModuleGetFunction(&g, mod, "drv_kernel"));
  for (int i = 0; i < 4; i++) CU(cuLaunchKernel(g, 5, 1, 1, 64, 1, 1, 0, 0, args, nullptr));
  CK(cudaDeviceSynchronize());
  // graphs: capture add_one x2 (grid 1 block 64) + scale_by<2> x1 (grid 7 block 32); 10 replays; update with add_one x1 (grid 9); 3 replays
  cudaStream_t s; CK(cudaStreamCreate(&s));
  cudaGraph_t g1, g2; cudaGraphExec_t e;
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  add_one<<<1, 64, 0, s>>>(d, n); add_one<<<1, 64, 0, s>>>(d, n); scale_by<2><<<7, 32, 0, s>>>(d, n);
  CK(cudaStreamEndCapture(s, &g1));
  CK(cudaGraphInstantiate(&e, g1, 0));
  for (int i = 0; i < 10; i++) CK(cudaGraphLaunch(e, s));
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  add_one<<<9, 64, 0, s>>>(d, n); add_one<<<9, 64, 0, s>>>(d, n); scale_by<2><<<3, 32, 0, s>>>(d, n);
  CK(cudaStreamEndCapture(s, &g2));
  cudaGraphExecUpdateResultInfo info; CK(cudaGraphExecUpdate(e, g2, &info));
  for (int i = 0; i < 3; i++) CK(cudaGraphLaunch(e, s));
  CK(cudaStreamSynchronize(s));
  // cuBLAS sgemm x1 (expected to be invisible to an LD_PRELOAD observer)
  cublasHandle_t h; cublasCreate(&h); float one = 1.f, zero = 0.f; float *A, *B, *C;
  cudaMalloc(&A, 256 * 256 * 4); cudaMalloc(&B, 256 * 256 * 4); cudaMalloc(&C, 256 * 256 * 4);
  printf("sgemm status=%d\n", (int)cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 256, 256, 256, &one, A, 256, B, 256, &zero, C, 256));
  CK(cudaDeviceSynchronize());
  std::vector<float> host(n); CK(cudaMemcpy(host.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost));
  double sum = 0; for (float v : host) sum += v;
  printf("checksum %.1f first %.1f\n", sum, host[0]);
  // add_one: 3 <<<>>> + 2 cudaLaunchKernel + graph 10 x 2 + 3 x 2 (after the update); scale_by<2>:
  // 5 <<<>>> + 2 cudaLaunchKernelEx + graph 10 x 1 + 3 x 1.
  printf("expect cuda _Z7add_onePfi launches=31 graph=26 captured=4\n");
  printf("expect cuda _Z8scale_byILi2EEvPfi launches=20 graph=13 captured=2\n");
  printf("expect cuda _Z11coop_kernelPf launches=1 graph=0 captured=0\n");
  printf("expect cuda _Z14never_launchedPi launches=0 graph=0 captured=0\n");
  printf("expect cu _Z7add_onePfi launches=2 graph=0 captured=0\n");
  printf("expect cu drv_kernel launches=4 graph=0 captured=0\n");
  printf("expect cuda _Z12empty_kernelv launches=200000 graph=0 captured=0\n");
  // launch cost: 200000 empty launches
  cudaEvent_t t0, t1; cudaEventCreate(&t0); cudaEventCreate(&t1);
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 200000; i++) empty_kernel<<<1, 32, 0, s>>>();
  CK(cudaStreamSynchronize(s));
  auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start).count();
  fprintf(stderr, "TIMING ns_per_launch %.1f\n", ns / 200000.0);
  return 0;
}
