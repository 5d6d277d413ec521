// Built with --default-stream per-thread: launches and captures go through the _ptsz entry points.
#include <cuda_runtime.h>
#include <cstdio>
__global__ void k_ptsz(float* p) { p[threadIdx.x] += 1.0f; }
int main() {
  float* d; cudaMalloc(&d, 1024 * 4); cudaMemset(d, 0, 4096);
  for (int i = 0; i < 3; i++) k_ptsz<<<1, 32>>>(d);
  cudaGraph_t g; cudaGraphExec_t e;
  printf("begin %d\n", (int)cudaStreamBeginCapture(cudaStreamPerThread, cudaStreamCaptureModeThreadLocal));
  k_ptsz<<<2, 32>>>(d); k_ptsz<<<2, 32>>>(d);
  printf("end %d\n", (int)cudaStreamEndCapture(cudaStreamPerThread, &g));
  printf("inst %d\n", (int)cudaGraphInstantiate(&e, g, 0));
  for (int i = 0; i < 5; i++) cudaGraphLaunch(e, 0);
  cudaDeviceSynchronize();
  float h[32]; cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost);
  printf("h0 %.1f (3 + 5 x 2 = 13)\n", h[0]);
  printf("expect cuda _Z6k_ptszPf launches=13 graph=10 captured=2\n");
  return 0;
}
