/*
 * TEST DOUBLE of a vendor BLAS library - not cuBLAS or rocBLAS.
 *
 * libfake_blas.so reaches the (test-double) driver the way cuBLAS and cuBLASLt do with their statically
 * linked CUDA runtime, and rocBLAS with hipGetProcAddress: it links no runtime, dlopens the driver library
 * itself (RTLD_LOCAL), finds the lookup function with dlsym on that handle, and gets every other function,
 * the launch functions included, as pointers from the lookup. Its kernels carry names of real cuBLAS,
 * cuBLASLt, CUTLASS and Tensile kernels (from Nsight Compute's kernel list of llama-bench on an H100 and
 * rocBLAS's Tensile naming), created with the module API through a pointer too, so nothing about them passes
 * an exported symbol. Each entry point prints what it launched.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct {
    unsigned gx, gy, gz, bx, by, bz, shared;
    void *stream;
    void *attrs;
    unsigned num_attrs;
} cu_launch_config;

typedef int (*get_proc_fn)(const char *symbol, void **pfn, int version, unsigned long long flags, int *status);
typedef int (*module_get_function_fn)(void **function, void *module, const char *name);
typedef int (*launch_fn)(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                         unsigned shared, void *stream, void **params, void **extra);
typedef int (*launch_ex_fn)(const cu_launch_config *config, void *f, void **params, void **extra);
typedef int (*ext_launch_fn)(void *f, uint32_t gx, uint32_t gy, uint32_t gz, uint32_t lx, uint32_t ly, uint32_t lz,
                             size_t shared, void *stream, void **params, void **extra, void *start, void *stop,
                             uint32_t flags);

/* CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM */
#define PER_THREAD_DEFAULT_STREAM 2

static void *driver(void) {
    static void *handle;
    if (!handle) {
        const char *dir = getenv("FAKE_LIB_DIR");
        char path[4096];
        snprintf(path, sizeof path, "%s/libfake_runtime.so", dir ? dir : ".");
        handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
        if (!handle) {
            fprintf(stderr, "fake_blas: dlopen %s: %s\n", path, dlerror());
            exit(93);
        }
    }
    return handle;
}

static void *from(get_proc_fn get_proc, const char *symbol, unsigned long long flags) {
    void *f = NULL;
    int status = -1;
    int rc = get_proc(symbol, &f, 12000, flags, &status);
    if (rc != 0 || !f) {
        fprintf(stderr, "fake_blas: %s: rc=%d status=%d\n", symbol, rc, status);
        exit(94);
    }
    return f;
}

/* cuBLAS-like: a GEMM (sm90_xmma), a CUTLASS GEMM on the per-thread default stream, and cuBLASLt's split-K
 * reduction through cuLaunchKernelEx found with dlsym on the driver's handle. */
void fake_cublas_gemm(int n) {
    get_proc_fn get_proc = (get_proc_fn)dlsym(driver(), "cuGetProcAddress_v2");
    if (!get_proc) exit(95);
    module_get_function_fn get_function = (module_get_function_fn)from(get_proc, "cuModuleGetFunction", 0);
    launch_fn launch = (launch_fn)from(get_proc, "cuLaunchKernel", 0);
    launch_fn launch_ptsz = (launch_fn)from(get_proc, "cuLaunchKernel", PER_THREAD_DEFAULT_STREAM);
    launch_ex_fn launch_ex = (launch_ex_fn)dlsym(driver(), "cuLaunchKernelEx");
    void *gemm = NULL, *cutlass = NULL, *reduce = NULL;
    get_function(&gemm, NULL, "sm90_xmma_gemm_f16f16_f16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas");
    get_function(&cutlass, NULL, "cutlass_80_tensorop_f16_s16816gemm_relu_f16_64x64_32x6_tn_align8");
    get_function(&reduce, NULL, "_ZN8cublasLt19splitKreduce_kernelILi32ELi16EiffffLb0ELb1ELb0ELb0EEEvNS_18cublasSplitKParamsIT3_EEPKT1_PKT2_PS7_PKT4_PKS9_PS9_PS7_");
    for (int i = 0; i < n; i++) launch(gemm, 4, 4, 1, 128, 1, 1, 0, NULL, NULL, NULL);
    for (int i = 0; i < 2 * n; i++) launch_ptsz(cutlass, 2, 2, 1, 64, 1, 1, 0, NULL, NULL, NULL);
    cu_launch_config config = {1, 1, 1, 32, 1, 1, 0, NULL, NULL, 0};
    launch_ex(&config, reduce, NULL, NULL);
    printf("fake_blas cublas gemm x%d cutlass x%d reduce x1\n", n, 2 * n);
}

/* rocBLAS-like: Tensile kernels through hipExtModuleLaunchKernel (global work sizes) and hipModuleLaunchKernel,
 * both from hipGetProcAddress, which itself came from the lookup asked for itself. */
void fake_rocblas_gemm(int n) {
    get_proc_fn first = (get_proc_fn)dlsym(driver(), "hipGetProcAddress");
    if (!first) exit(96);
    get_proc_fn get_proc = (get_proc_fn)from(first, "hipGetProcAddress", 0);
    module_get_function_fn get_function = (module_get_function_fn)from(get_proc, "hipModuleGetFunction", 0);
    ext_launch_fn ext_launch = (ext_launch_fn)from(get_proc, "hipExtModuleLaunchKernel", 0);
    launch_fn launch = (launch_fn)from(get_proc, "hipModuleLaunchKernel", 0);
    void *tensile = NULL, *beta = NULL;
    get_function(&tensile, NULL, "Cijk_Ailk_Bljk_HHS_BH_MT64x64x32_MI32x32x8x1_SN_1LDSB0_GRVW8_SU32_SUM0_SUS256_WG16_16_1");
    get_function(&beta, NULL, "Cijk_S");
    for (int i = 0; i < n; i++) ext_launch(tensile, 256, 128, 1, 256, 1, 1, 0, NULL, NULL, NULL, NULL, NULL, 0);
    launch(beta, 8, 1, 1, 256, 1, 1, 0, NULL, NULL, NULL);
    printf("fake_blas rocblas tensile x%d beta x1\n", n);
}
