// One ggml MUL_MAT of a single-row F32 matrix by an F32 batch, on the first GPU backend: the shape whose CUDA
// dispatch changed between llama.cpp b10189 and b10199 (ggml-cuda.cu, ggml_cuda_mul_mat: "A transposed vector can
// still use MMVQ (i.e. ne01 == 1)" — with ne11 > MMVF_MAX_BATCH_SIZE the operands are swapped and
// mul_mat_vec_f runs instead of cuBLAS). It is the shape of Qwen2-MoE's shared-expert gate (ffn_gate_inp_shexp,
// {n_embd, 1}, F32) during prompt processing. bench/gpu/bisect_cuda.sh builds this against each build's ggml
// headers and runs it under `backscope trace`.
//
//   mulmat_m1 [N=128] [K=2048]      exits 0 when the result is right (every element K * 0.5), 2 otherwise
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "ggml-alloc.h"
#include "ggml-backend.h"
#include "ggml.h"

int main(int argc, char ** argv) {
    const int64_t n = argc > 1 ? std::atoll(argv[1]) : 128;
    const int64_t k = argc > 2 ? std::atoll(argv[2]) : 2048;
    ggml_backend_t backend = ggml_backend_init_by_type(GGML_BACKEND_DEVICE_TYPE_GPU, nullptr);
    if (backend == nullptr) {
        std::fprintf(stderr, "mulmat_m1: no GPU backend\n");
        return 3;
    }
    ggml_init_params params = { ggml_tensor_overhead() * 8 + ggml_graph_overhead(), nullptr, true };
    ggml_context * ctx = ggml_init(params);
    ggml_tensor * a = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, k, 1);  // ne01 == 1
    ggml_tensor * b = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, k, n);  // ne11 == n
    ggml_tensor * c = ggml_mul_mat(ctx, a, b);
    ggml_cgraph * graph = ggml_new_graph(ctx);
    ggml_build_forward_expand(graph, c);
    ggml_backend_buffer_t buffer = ggml_backend_alloc_ctx_tensors(ctx, backend);
    std::vector<float> va(k, 1.0f), vb(k * n, 0.5f), vc(n, 0.0f);
    ggml_backend_tensor_set(a, va.data(), 0, ggml_nbytes(a));
    ggml_backend_tensor_set(b, vb.data(), 0, ggml_nbytes(b));
    if (ggml_backend_graph_compute(backend, graph) != GGML_STATUS_SUCCESS) {
        std::fprintf(stderr, "mulmat_m1: graph compute failed\n");
        return 2;
    }
    ggml_backend_tensor_get(c, vc.data(), 0, ggml_nbytes(c));
    int wrong = 0;
    for (float v : vc) {
        wrong += v != 0.5f * (float) k;
    }
    std::printf("mulmat_m1: %s n=%lld k=%lld wrong=%d\n", ggml_backend_name(backend), (long long) n, (long long) k, wrong);
    ggml_backend_buffer_free(buffer);
    ggml_free(ctx);
    ggml_backend_free(backend);
    return wrong == 0 ? 0 : 2;
}
