/*
 * Test program part: a stand-in for a ggml backend library (libggml-hip.so / libggml-cuda.so).
 * It is linked against the test double libfake_runtime.so (DT_NEEDED) and reaches the runtime
 * through its PLT, as a real backend does; host.c dlopens it after start. Its constructor registers
 * kernels the way hipcc/nvcc static initialisers do. Every scenario prints what it did, so the
 * test can compare the program's own account with the observer's trace.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    unsigned x, y, z;
} dim3;

#define BAD_STREAM ((void *)0xBAD0)
/* Distinctive argument values: the fake runtime hashes what reaches it (see its argsum). */
#define ARGV ((void **)0xA110)
#define PARAMS ((void **)0xBEE0)
#define EXTRA ((void **)0xE770)
#define EVENT_START ((void *)0xE1)
#define EVENT_STOP ((void *)0xE2)

/* Runtime API (libfake_runtime.so, same signatures as the vendors'). */
void **__hipRegisterFatBinary(const void *data);
void __hipRegisterFunction(void **modules, const void *host_function, char *device_function,
                           const char *device_name, unsigned thread_limit, void *tid, void *bid,
                           dim3 *block_dim, dim3 *grid_dim, int *warp_size);
int hipLaunchKernel(const void *f, dim3 grid, dim3 block, void **args, size_t shared, void *stream);
int hipModuleGetFunction(void **function, void *module, const char *name);
int hipModuleLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                          unsigned bz, unsigned shared, void *stream, void **params, void **extra);
int hipExtModuleLaunchKernel(void *f, uint32_t gx, uint32_t gy, uint32_t gz, uint32_t lx, uint32_t ly,
                             uint32_t lz, size_t shared, void *stream, void **params, void **extra,
                             void *start, void *stop, uint32_t flags);
int hipStreamBeginCapture(void *stream, int mode);
int hipStreamEndCapture(void *stream, void **graph);
int hipGraphInstantiate(void **exec, void *graph, void *error_node, char *log, size_t log_size);
int hipGraphExecUpdate(void *exec, void *graph, void *error_node, int *result);
int hipGraphLaunch(void *exec, void *stream);
int hipGraphExecDestroy(void *exec);
int hipGraphDestroy(void *graph);
int hipStreamDestroy(void *stream);

typedef struct {
    dim3 grid, block;
    size_t dynamic_smem;
    void *stream;
    void *attrs;
    unsigned num_attrs;
} cuda_launch_config;
typedef struct {
    unsigned gx, gy, gz, bx, by, bz, shared;
    void *stream;
    void *attrs;
    unsigned num_attrs;
} cu_launch_config;

void **__cudaRegisterFatBinary(void *fatbin);
void __cudaRegisterFunction(void **handle, const char *host_function, char *device_function,
                            const char *device_name, int thread_limit, void *tid, void *bid,
                            dim3 *block_dim, dim3 *grid_dim, int *warp_size);
int __cudaGetKernel(void **kernel, const void *host_function);
int cudaLaunchKernel(const void *f, dim3 grid, dim3 block, void **args, size_t shared, void *stream);
int __cudaLaunchKernel(void *kernel, dim3 grid, dim3 block, void **args, size_t shared, void *stream);
int cudaLaunchKernelExC(const cuda_launch_config *config, const void *f, void **args);
int cudaLaunchCooperativeKernel(const void *f, dim3 grid, dim3 block, void **args, size_t shared, void *stream);
int cudaStreamBeginCapture(void *stream, int mode);
int cudaStreamEndCapture(void *stream, void **graph);
int cudaGraphInstantiate(void **exec, void *graph, unsigned long long flags);
int cudaGraphExecUpdate(void *exec, void *graph, void *result_info);
int cudaGraphLaunch(void *exec, void *stream);
int cudaGraphExecDestroy(void *exec);
int cudaGraphDestroy(void *graph);
int cudaStreamDestroy(void *stream);
int cuStreamEndCapture(void *stream, void **graph);
int cuModuleGetFunction(void **function, void *module, const char *name);
int cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                   unsigned shared, void *stream, void **params, void **extra);
int cuLaunchKernelEx(const cu_launch_config *config, void *f, void **params, void **extra);

/* Test-double helpers (not hooked). */
void fake_register_silently(const void *key, const char *name);
void *fake_make_function(const char *name);
void *fake_make_graph(const void *key, int n);
long fake_is_capturing_calls(void);

/* Host stubs: only their addresses matter. */
static char stubs[16];
#define HIP_A (&stubs[0])
#define HIP_B (&stubs[1])
#define HIP_TWICE_1 (&stubs[2])
#define HIP_TWICE_2 (&stubs[3])
#define CUDA_C (&stubs[4])
#define CUDA_D (&stubs[5])
#define HIP_UNSEEN (&stubs[10])
#define CUDA_UNSEEN (&stubs[11])
#define HIP_EXPLICIT (&stubs[12])
#define CUDA_EXPLICIT (&stubs[13])

static const dim3 ONE = {1, 1, 1};

static void **register_hip(const void *stub, const char *name) {
    static void **module;
    if (!module) module = __hipRegisterFatBinary("fake fatbin");
    /* deviceFunction and deviceName point to the same string, as hipcc emits. */
    __hipRegisterFunction(module, stub, (char *)name, name, (unsigned)-1, NULL, NULL, NULL, NULL, NULL);
    return module;
}

__attribute__((constructor)) static void register_kernels(void) {
    register_hip(HIP_A, "_Z12hip_kernel_av");
    register_hip(HIP_B, "_Z12hip_kernel_bPfi");
    register_hip(HIP_EXPLICIT, "hip_explicit_graph_kernel");
    void **cuda = __cudaRegisterFatBinary("fake fatbin");
    __cudaRegisterFunction(cuda, CUDA_C, "_Z6cuda_cPf", "_Z6cuda_cPf", -1, NULL, NULL, NULL, NULL, NULL);
    __cudaRegisterFunction(cuda, CUDA_D, "_Z6cuda_dv", "_Z6cuda_dv", -1, NULL, NULL, NULL, NULL, NULL);
    __cudaRegisterFunction(cuda, CUDA_EXPLICIT, "cuda_explicit_graph_kernel", "cuda_explicit_graph_kernel", -1, NULL,
                           NULL, NULL, NULL, NULL);
}

const void *backend_stub_a(void) { return HIP_A; }

static void report(const char *what, int rc) { printf("%s rc=%d\n", what, rc); }

/* Every launch entry point, success and failure, and kernels named only at their first launch. */
void backend_basic(void) {
    for (unsigned i = 0; i < 3; i++) report("hipLaunchKernel a", hipLaunchKernel(HIP_A, ONE, (dim3){64, 1, 1}, ARGV, 48, NULL));
    for (unsigned i = 0; i < 5; i++)
        report("hipLaunchKernel b", hipLaunchKernel(HIP_B, (dim3){i + 1, 2, 1}, (dim3){32, 4, 1}, ARGV, 48, NULL));
    for (unsigned i = 0; i < 2; i++)
        report("hipLaunchKernel b bad-stream", hipLaunchKernel(HIP_B, ONE, ONE, ARGV, 48, BAD_STREAM));

    void *tensile = NULL;
    report("hipModuleGetFunction", hipModuleGetFunction(&tensile, (void *)0x1, "Cijk_Ailk_Bljk_SB_MT64x64x8"));
    for (int i = 0; i < 2; i++)
        report("hipModuleLaunchKernel", hipModuleLaunchKernel(tensile, 4, 4, 1, 256, 1, 1, 96, NULL, PARAMS, EXTRA));
    report("hipExtModuleLaunchKernel",
           hipExtModuleLaunchKernel(tensile, 256, 1, 1, 64, 1, 1, 96, NULL, PARAMS, EXTRA, EVENT_START, EVENT_STOP, 5));

    fake_register_silently(HIP_UNSEEN, "hip_unseen_stub_kernel");
    for (int i = 0; i < 2; i++) report("hipLaunchKernel unseen", hipLaunchKernel(HIP_UNSEEN, ONE, ONE, ARGV, 48, NULL));
    void *unseen_function = fake_make_function("hip_unseen_module_kernel");
    report("hipModuleLaunchKernel unseen", hipModuleLaunchKernel(unseen_function, 1, 1, 1, 1, 1, 1, 96, NULL, PARAMS, EXTRA));

    for (int i = 0; i < 2; i++)
        report("cudaLaunchKernel c", cudaLaunchKernel(CUDA_C, (dim3){8, 1, 1}, (dim3){128, 1, 1}, ARGV, 48, NULL));
    void *kernel_c = NULL;
    report("__cudaGetKernel c", __cudaGetKernel(&kernel_c, CUDA_C));
    for (int i = 0; i < 3; i++)
        report("__cudaLaunchKernel c", __cudaLaunchKernel(kernel_c, (dim3){8, 1, 1}, (dim3){128, 1, 1}, ARGV, 48, NULL));
    cuda_launch_config config = {{16, 1, 1}, {256, 1, 1}, 64, NULL, NULL, 0};
    for (int i = 0; i < 4; i++) report("cudaLaunchKernelExC c", cudaLaunchKernelExC(&config, CUDA_C, ARGV));
    report("cudaLaunchCooperativeKernel d", cudaLaunchCooperativeKernel(CUDA_D, ONE, ONE, ARGV, 48, NULL));
    fake_register_silently(CUDA_UNSEEN, "cuda_unseen_stub_kernel");
    for (int i = 0; i < 2; i++) report("cudaLaunchKernel unseen", cudaLaunchKernel(CUDA_UNSEEN, ONE, ONE, ARGV, 48, NULL));

    void *gemm = NULL;
    report("cuModuleGetFunction", cuModuleGetFunction(&gemm, (void *)0x2, "cublas_like_gemm_kernel"));
    for (int i = 0; i < 2; i++) report("cuLaunchKernel gemm", cuLaunchKernel(gemm, 2, 2, 1, 128, 1, 1, 96, NULL, PARAMS, EXTRA));
    cu_launch_config cu_config = {3, 1, 1, 64, 1, 1, 32, NULL, NULL, 0};
    report("cuLaunchKernelEx gemm", cuLaunchKernelEx(&cu_config, gemm, PARAMS, EXTRA));
    void *cu_unseen = fake_make_function("cu_unseen_function_kernel");
    for (int i = 0; i < 3; i++) report("cuLaunchKernel unseen", cuLaunchKernel(cu_unseen, 1, 1, 1, 1, 1, 1, 96, NULL, PARAMS, EXTRA));
}

/* One kernel registered twice under one stub (two fatbins), and once more under another stub. */
void backend_twice(void) {
    register_hip(HIP_TWICE_1, "_Z12twice_kernelv");
    void **second = __hipRegisterFatBinary("second fatbin");
    __hipRegisterFunction(second, HIP_TWICE_1, "_Z12twice_kernelv", "_Z12twice_kernelv", (unsigned)-1, NULL, NULL,
                          NULL, NULL, NULL);
    __hipRegisterFunction(second, HIP_TWICE_2, "_Z12twice_kernelv", "_Z12twice_kernelv", (unsigned)-1, NULL, NULL,
                          NULL, NULL, NULL);
    for (int i = 0; i < 2; i++) report("hipLaunchKernel twice-1", hipLaunchKernel(HIP_TWICE_1, ONE, ONE, ARGV, 48, NULL));
    for (int i = 0; i < 3; i++) report("hipLaunchKernel twice-2", hipLaunchKernel(HIP_TWICE_2, ONE, ONE, ARGV, 48, NULL));
}

/* Launches from many threads: alternating kernels and shapes. */
void backend_hammer(int n) {
    for (int i = 0; i < n; i++) {
        dim3 grid = {(unsigned)(i % 3) + 1, 1, 1};
        hipLaunchKernel(i % 2 ? HIP_B : HIP_A, grid, ONE, ARGV, 48, NULL);
    }
}

/* n distinct kernels. Names are written into one reused buffer, so an observer that kept the
 * caller's pointer instead of copying would report every kernel under the last name. Kernel i is
 * launched (i % 3) + 1 times with grid (i % 5 + 1, 1, 1). */
static char many_stubs[1 << 18];
void backend_many(int n) {
    void **module = __hipRegisterFatBinary("many fatbin");
    char name[64];
    for (int i = 0; i < n && i < (int)sizeof many_stubs; i++) {
        snprintf(name, sizeof name, "many_kernel_%d", i);
        __hipRegisterFunction(module, &many_stubs[i], name, name, (unsigned)-1, NULL, NULL, NULL, NULL, NULL);
    }
    memset(name, 'x', sizeof name - 1);
    long calls = 0, failures = 0;
    for (int i = 0; i < n && i < (int)sizeof many_stubs; i++)
        for (int j = 0; j <= i % 3; j++) {
            calls++;
            failures += hipLaunchKernel(&many_stubs[i], (dim3){(unsigned)(i % 5) + 1, 1, 1}, ONE, ARGV, 48, NULL) != 0;
        }
    printf("many kernels=%d launches=%ld failures=%ld\n", n, calls, failures);
}

/* Capture, instantiate, replay, exec update, a graph launched inside a capture, and a graph that was
 * not captured. Both APIs, the same sequence. */
#define S ((void *)0x5000)
#define T ((void *)0x6000)
#define S2 ((void *)0x7000)

void backend_graph_hip(void) {
    void *graph = NULL, *graph2 = NULL, *graph3 = NULL, *exec = NULL, *exec3 = NULL, *outer = NULL, *outer_exec = NULL;
    report("hipStreamBeginCapture", hipStreamBeginCapture(S, 0));
    for (int i = 0; i < 2; i++) report("hipLaunchKernel a (captured)", hipLaunchKernel(HIP_A, ONE, (dim3){64, 1, 1}, ARGV, 48, S));
    report("hipLaunchKernel b (captured)", hipLaunchKernel(HIP_B, (dim3){7, 1, 1}, ONE, ARGV, 48, S));
    report("hipLaunchKernel b (other stream)", hipLaunchKernel(HIP_B, (dim3){5, 1, 1}, ONE, ARGV, 48, T));
    report("hipStreamEndCapture", hipStreamEndCapture(S, &graph));
    report("hipGraphInstantiate", hipGraphInstantiate(&exec, graph, NULL, NULL, 0));
    for (int i = 0; i < 10; i++) report("hipGraphLaunch", hipGraphLaunch(exec, S));

    report("hipStreamBeginCapture", hipStreamBeginCapture(S, 0));
    report("hipLaunchKernel a (captured)", hipLaunchKernel(HIP_A, (dim3){9, 1, 1}, (dim3){64, 1, 1}, ARGV, 48, S));
    report("hipStreamEndCapture", hipStreamEndCapture(S, &graph2));
    int update_result = -1;
    report("hipGraphExecUpdate", hipGraphExecUpdate(exec, graph2, NULL, &update_result));
    for (int i = 0; i < 3; i++) report("hipGraphLaunch", hipGraphLaunch(exec, S));

    report("hipStreamBeginCapture", hipStreamBeginCapture(S2, 0));
    report("hipGraphLaunch (captured)", hipGraphLaunch(exec, S2));
    report("hipStreamEndCapture", hipStreamEndCapture(S2, &outer));
    report("hipGraphInstantiate", hipGraphInstantiate(&outer_exec, outer, NULL, NULL, 0));
    for (int i = 0; i < 2; i++) report("hipGraphLaunch", hipGraphLaunch(outer_exec, S));

    graph3 = fake_make_graph(HIP_EXPLICIT, 4);
    report("hipGraphInstantiate", hipGraphInstantiate(&exec3, graph3, NULL, NULL, 0));
    for (int i = 0; i < 2; i++) report("hipGraphLaunch (not captured)", hipGraphLaunch(exec3, S));

    report("hipGraphExecDestroy", hipGraphExecDestroy(exec));
    report("hipGraphExecDestroy", hipGraphExecDestroy(outer_exec));
    report("hipGraphExecDestroy", hipGraphExecDestroy(exec3));
    report("hipGraphDestroy", hipGraphDestroy(graph));
    report("hipGraphDestroy", hipGraphDestroy(graph2));
    report("hipGraphDestroy", hipGraphDestroy(outer));
    report("hipGraphDestroy", hipGraphDestroy(graph3));
}

void backend_graph_cuda(void) {
    void *graph = NULL, *graph2 = NULL, *graph3 = NULL, *exec = NULL, *exec3 = NULL, *outer = NULL, *outer_exec = NULL;
    void *kernel_c = NULL;
    report("__cudaGetKernel c", __cudaGetKernel(&kernel_c, CUDA_C));
    report("cudaStreamBeginCapture", cudaStreamBeginCapture(S, 0));
    for (int i = 0; i < 2; i++)
        report("__cudaLaunchKernel c (captured)", __cudaLaunchKernel(kernel_c, ONE, (dim3){64, 1, 1}, ARGV, 48, S));
    cuda_launch_config config = {{7, 1, 1}, {1, 1, 1}, 0, S, NULL, 0};
    report("cudaLaunchKernelExC d (captured)", cudaLaunchKernelExC(&config, CUDA_D, NULL));
    report("cudaLaunchKernel d (other stream)", cudaLaunchKernel(CUDA_D, (dim3){5, 1, 1}, ONE, ARGV, 48, T));
    report("cudaStreamEndCapture", cudaStreamEndCapture(S, &graph));
    report("cudaGraphInstantiate", cudaGraphInstantiate(&exec, graph, 0));
    for (int i = 0; i < 10; i++) report("cudaGraphLaunch", cudaGraphLaunch(exec, S));

    report("cudaStreamBeginCapture", cudaStreamBeginCapture(S, 0));
    report("cudaLaunchKernel c (captured)", cudaLaunchKernel(CUDA_C, (dim3){9, 1, 1}, (dim3){64, 1, 1}, ARGV, 48, S));
    report("cudaStreamEndCapture", cudaStreamEndCapture(S, &graph2));
    report("cudaGraphExecUpdate", cudaGraphExecUpdate(exec, graph2, NULL));
    for (int i = 0; i < 3; i++) report("cudaGraphLaunch", cudaGraphLaunch(exec, S));

    report("cudaStreamBeginCapture", cudaStreamBeginCapture(S2, 0));
    report("cudaGraphLaunch (captured)", cudaGraphLaunch(exec, S2));
    report("cudaStreamEndCapture", cudaStreamEndCapture(S2, &outer));
    report("cudaGraphInstantiate", cudaGraphInstantiate(&outer_exec, outer, 0));
    for (int i = 0; i < 2; i++) report("cudaGraphLaunch", cudaGraphLaunch(outer_exec, S));

    graph3 = fake_make_graph(CUDA_EXPLICIT, 4);
    report("cudaGraphInstantiate", cudaGraphInstantiate(&exec3, graph3, 0));
    for (int i = 0; i < 2; i++) report("cudaGraphLaunch (not captured)", cudaGraphLaunch(exec3, S));

    report("cudaGraphExecDestroy", cudaGraphExecDestroy(exec));
    report("cudaGraphExecDestroy", cudaGraphExecDestroy(outer_exec));
    report("cudaGraphExecDestroy", cudaGraphExecDestroy(exec3));
    report("cudaGraphDestroy", cudaGraphDestroy(graph));
    report("cudaGraphDestroy", cudaGraphDestroy(graph2));
    report("cudaGraphDestroy", cudaGraphDestroy(outer));
    report("cudaGraphDestroy", cudaGraphDestroy(graph3));
}

/* A few launches of one kernel, for the fork and exec scenario. */
void backend_launch(const char *which, int n) {
    const void *stub = strcmp(which, "a") == 0 ? HIP_A : HIP_B;
    for (int i = 0; i < n; i++) hipLaunchKernel(stub, ONE, ONE, ARGV, 48, NULL);
    printf("pid-role launched %s x%d\n", which, n);
}

/* ---- driver entry points from the runtime (cudaGetDriverEntryPoint) ----
 * A CUDA-like program that asks the runtime for driver functions: for functions other than launches the
 * pointer it gets must be the runtime's own (an observer may change nothing there), and launches through
 * the pointers it gets for cuLaunchKernel / cuLaunchKernelEx are launches. */
int cudaGetDriverEntryPoint(const char *symbol, void **function, unsigned long long flags, int *status);
int cudaGetDriverEntryPointByVersion(const char *symbol, void **function, unsigned version, unsigned long long flags,
                                     int *status);
void *fake_internal_address(const char *symbol);

void backend_entry_points(int n) {
    void *mem_alloc = NULL, *ctx_get_device = NULL, *missing = (void *)1, *launch = NULL, *launch_ex = NULL;
    int status = -1;
    int rc = cudaGetDriverEntryPoint("cuMemAlloc", &mem_alloc, 0, &status);
    printf("entry cuMemAlloc rc=%d status=%d unchanged=%s\n", rc, status,
           mem_alloc == fake_internal_address("cuMemAlloc") ? "yes" : "no");
    void *allocated = NULL;
    int call_rc = ((int (*)(void **, size_t))mem_alloc)(&allocated, 64);
    printf("entry cuMemAlloc call rc=%d -> %p\n", call_rc, allocated);
    rc = cudaGetDriverEntryPointByVersion("cuCtxGetDevice", &ctx_get_device, 12000, 0, &status);
    int device = -1;
    call_rc = ((int (*)(int *))ctx_get_device)(&device);
    printf("entry cuCtxGetDevice rc=%d status=%d unchanged=%s call rc=%d device=%d\n", rc, status,
           ctx_get_device == fake_internal_address("cuCtxGetDevice") ? "yes" : "no", call_rc, device);
    rc = cudaGetDriverEntryPoint("cuNoSuchFunction", &missing, 0, &status);
    printf("entry cuNoSuchFunction rc=%d status=%d pointer=%p\n", rc, status, missing);
    rc = cudaGetDriverEntryPoint("cuLaunchKernel", &launch, 0, &status);
    void *kernel = fake_make_function("entry_point_kernel");
    for (int i = 0; i < n; i++)
        ((int (*)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void *, void **,
                  void **))launch)(kernel, 3, 1, 1, 32, 1, 1, 0, NULL, ARGV, NULL);
    rc = cudaGetDriverEntryPointByVersion("cuLaunchKernelEx", &launch_ex, 12000, 0, &status);
    cu_launch_config config = {5, 1, 1, 64, 1, 1, 0, NULL, NULL, 0};
    ((int (*)(const cu_launch_config *, void *, void **, void **))launch_ex)(&config, kernel, ARGV, NULL);
    printf("entry launched entry_point_kernel x%d + 1 rc=%d\n", n, rc);
}

/* A launch of kernel a on the stream on which the test-double runtime faults. */
void backend_launch_crashing(void) { hipLaunchKernel(HIP_A, ONE, ONE, ARGV, 48, (void *)0xDEAD0); }

void backend_launch_cuda_c(int n) {
    for (int i = 0; i < n; i++) cudaLaunchKernel(CUDA_C, ONE, ONE, ARGV, 48, NULL);
    printf("launched cuda c x%d\n", n);
}

/* ---- captures that end where the observer cannot see it ---- */

/* One runtime's capture API, for the scenario below. Calls through `end`, `begin` and the others go
 * through this library's PLT, i.e. to the observer's hooks when it is preloaded; `end_unseen` is the
 * runtime's own function, found with dlsym on the runtime's handle (what a library that looks up
 * entry points itself gets), which no LD_PRELOAD hook sees. */
typedef struct {
    int (*begin)(void *stream, int mode);
    int (*end)(void *stream, void **graph);
    int (*end_second)(void *stream, void **graph);
    int (*end_unseen)(void *stream, void **graph);
    int (*destroy)(void *stream);
    int (*launch)(const void *f, dim3 grid, dim3 block, void **args, size_t shared, void *stream);
    int (*instantiate)(void **exec, void *graph);
    int (*graph_launch)(void *exec, void *stream);
    int (*exec_destroy)(void *exec);
    int (*graph_destroy)(void *graph);
    const void *x, *y;
} capture_api;

static int hip_instantiate(void **exec, void *graph) { return hipGraphInstantiate(exec, graph, NULL, NULL, 0); }
static int cuda_instantiate(void **exec, void *graph) { return cudaGraphInstantiate(exec, graph, 0); }

#define P ((void *)0x8000)
#define Q ((void *)0x9000)
#define R ((void *)0xA000)
#define PER_THREAD ((void *)2)

static void queries(const char *phase, long before) {
    /* stderr: the count differs with and without the observer, the rest of the output must not. */
    fprintf(stderr, "is-capturing queries %s %ld\n", phase, fake_is_capturing_calls() - before);
}

static const capture_api *per_thread_api;
static pthread_barrier_t per_thread_barrier;

/* The second thread of the per-thread scenario: launches x on ITS per-thread stream while the first
 * thread captures its own. */
static void *per_thread_other(void *arg) {
    (void)arg;
    pthread_barrier_wait(&per_thread_barrier);
    for (int i = 0; i < 4; i++)
        report("launch x per-thread (other thread)", per_thread_api->launch(per_thread_api->x, ONE, ONE, ARGV, 48, PER_THREAD));
    pthread_barrier_wait(&per_thread_barrier);
    return NULL;
}

static void stale_capture_scenario(const capture_api *api) {
    void *graph = NULL, *graph2 = NULL, *graph3 = NULL, *graph4 = NULL, *graph5 = NULL;
    void *exec = NULL, *exec4 = NULL, *exec5 = NULL;
    /* 1. A capture on P ends unseen: the next launches on P execute. */
    report("begin P", api->begin(P, 0));
    for (int i = 0; i < 2; i++) report("launch x P (captured)", api->launch(api->x, ONE, ONE, ARGV, 48, P));
    report("end P (unseen)", api->end_unseen(P, &graph));
    for (int i = 0; i < 3; i++) report("launch x P", api->launch(api->x, ONE, ONE, ARGV, 48, P));
    /* 2. Its graph was never seen either: its replays run 2 x 2 kernels nobody can name. */
    report("instantiate", api->instantiate(&exec, graph));
    for (int i = 0; i < 2; i++) report("graph launch (unseen capture)", api->graph_launch(exec, P));

    /* 3. A capture on Q ends unseen and Q is never used again; launches go to R. Then Q is
     * destroyed, which drops the record: launches on R no longer ask about captures at all. */
    report("begin Q", api->begin(Q, 0));
    report("launch y Q (captured)", api->launch(api->y, ONE, ONE, ARGV, 48, Q));
    report("end Q (unseen)", api->end_unseen(Q, &graph2));
    long before = fake_is_capturing_calls();
    for (int i = 0; i < 5; i++) report("launch x R", api->launch(api->x, ONE, ONE, ARGV, 48, R));
    queries("while-q-stale", before);
    report("destroy Q", api->destroy(Q));
    before = fake_is_capturing_calls();
    for (int i = 0; i < 5; i++) report("launch x R", api->launch(api->x, ONE, ONE, ARGV, 48, R));
    queries("after-q-destroyed", before);

    /* 4. A capture on P ends unseen, then P is captured again: only the new capture's kernel is
     * replayed. */
    report("begin P", api->begin(P, 0));
    report("launch y P (captured)", api->launch(api->y, ONE, ONE, ARGV, 48, P));
    report("end P (unseen)", api->end_unseen(P, &graph3));
    report("begin P again", api->begin(P, 0));
    report("launch x P (captured)", api->launch(api->x, (dim3){3, 1, 1}, ONE, ARGV, 48, P));
    report("end P", api->end_second(P, &graph4));
    report("instantiate", api->instantiate(&exec4, graph4));
    for (int i = 0; i < 3; i++) report("graph launch", api->graph_launch(exec4, P));

    /* 5. Per-thread default streams: this thread captures its own while another thread launches on
     * its own, which is not capturing. */
    per_thread_api = api;
    pthread_barrier_init(&per_thread_barrier, NULL, 2);
    pthread_t other;
    pthread_create(&other, NULL, per_thread_other, NULL);
    report("begin per-thread", api->begin(PER_THREAD, 0));
    pthread_barrier_wait(&per_thread_barrier);
    pthread_barrier_wait(&per_thread_barrier);
    pthread_join(other, NULL);
    pthread_barrier_destroy(&per_thread_barrier);
    report("launch y per-thread (captured)", api->launch(api->y, (dim3){5, 1, 1}, ONE, ARGV, 48, PER_THREAD));
    report("end per-thread", api->end(PER_THREAD, &graph5));
    report("instantiate", api->instantiate(&exec5, graph5));
    for (int i = 0; i < 2; i++) report("graph launch", api->graph_launch(exec5, R));

    before = fake_is_capturing_calls();
    for (int i = 0; i < 5; i++) report("launch x R", api->launch(api->x, ONE, ONE, ARGV, 48, R));
    queries("at-the-end", before);
    api->exec_destroy(exec);
    api->exec_destroy(exec4);
    api->exec_destroy(exec5);
    api->graph_destroy(graph);
    api->graph_destroy(graph2);
    api->graph_destroy(graph3);
    api->graph_destroy(graph4);
    api->graph_destroy(graph5);
}

static void *runtime_symbol(const char *name) {
    void *runtime = dlopen("libfake_runtime.so", RTLD_NOLOAD | RTLD_LAZY);
    void *symbol = runtime ? dlsym(runtime, name) : NULL;
    if (!symbol) {
        fprintf(stderr, "fake_backend: %s not found in libfake_runtime.so\n", name);
        exit(93);
    }
    return symbol;
}

void backend_stale_capture_hip(void) {
    capture_api api = {hipStreamBeginCapture, hipStreamEndCapture, hipStreamEndCapture,
                       (int (*)(void *, void **))runtime_symbol("hipStreamEndCapture"),
                       hipStreamDestroy, hipLaunchKernel, hip_instantiate, hipGraphLaunch, hipGraphExecDestroy,
                       hipGraphDestroy, HIP_A, HIP_B};
    stale_capture_scenario(&api);
}

/* CUDA ends the second capture with the driver's cuStreamEndCapture. */
void backend_stale_capture_cuda(void) {
    capture_api api = {cudaStreamBeginCapture, cudaStreamEndCapture, cuStreamEndCapture,
                       (int (*)(void *, void **))runtime_symbol("cudaStreamEndCapture"),
                       cudaStreamDestroy, cudaLaunchKernel, cuda_instantiate, cudaGraphLaunch, cudaGraphExecDestroy,
                       cudaGraphDestroy, CUDA_C, CUDA_D};
    stale_capture_scenario(&api);
}
