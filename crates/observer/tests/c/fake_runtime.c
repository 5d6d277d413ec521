/*
 * TEST DOUBLE - not a GPU runtime.
 *
 * libfake_runtime.so exports the HIP and CUDA entry points the observer hooks, with the same C
 * signatures, and "runs" kernels by counting them. It exists to test what the real HIP runtime on
 * a machine without a GPU cannot show: a runtime that arrives by dlopen after start (RTLD_LOCAL, as
 * ggml's backend loader does), launches that succeed, many threads, graphs and stream capture,
 * 100,000 kernels, and the CUDA paths. The real HIP runtime is exercised by hip_runtime.rs.
 *
 * Semantics (the parts a test relies on):
 *  - kernels are registered by host pointer (__hipRegisterFunction / __cudaRegisterFunction) or
 *    created as function objects (hipModuleGetFunction / cuModuleGetFunction / fake_make_function);
 *  - a launch of a known kernel on stream FAKE_BAD_STREAM fails with 98 (failed++); any other launch
 *    of a known kernel returns 0 and counts executed++ unless its stream is capturing, in which case
 *    it becomes a node of the capture's graph;
 *  - a graph launch executes every node of the exec's graph;
 *  - stream 2 is the per-thread default stream (cudaStreamPerThread / hipStreamPerThread): a
 *    different stream in every thread, so a capture on it belongs to the thread that began it;
 *  - destroying a stream ends a capture on it; ...StreamIsCapturing calls are counted
 *    (fake_is_capturing_calls), so a test can see when an observer asks;
 *  - __cudaLaunchKernel calls the exported cudaLaunchKernel through the PLT (what CUDA 13 is reported
 *    to do), so an interposer sees a nested call;
 *  - a launch on stream FAKE_CRASH_STREAM crashes inside the runtime (a write through a null
 *    pointer), as a driver that faults in a launch would.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FAKE_BAD_STREAM ((void *)0xBAD0)
#define FAKE_CRASH_STREAM ((void *)0xDEAD0)
#define ERR_INVALID 98

typedef struct {
    unsigned x, y, z;
} dim3;

typedef struct fake_kernel {
    const void *key;
    char name[192];
    atomic_long executed;
    atomic_long failed;
    /* Sum of a hash of every launch's arguments: the program prints it, and the test compares the
     * output with and without the observer, so an argument corrupted on the way through a hook
     * (by-value dim3, stack-passed parameters) shows up. */
    atomic_ulong argsum;
} fake_kernel;

static unsigned long mix(int n, const unsigned long *values) {
    unsigned long h = 1469598103934665603ul;
    for (int i = 0; i < n; i++) h = (h ^ values[i]) * 1099511628211ul;
    return h;
}
#define ARGS(...) mix(sizeof((unsigned long[]){__VA_ARGS__}) / sizeof(unsigned long), (unsigned long[]){__VA_ARGS__})
#define U(x) ((unsigned long)(uintptr_t)(x))
#define D3(d) (unsigned long)(d).x, (unsigned long)(d).y, (unsigned long)(d).z

#define TABLE_BITS 19
#define TABLE_SIZE (1u << TABLE_BITS)
static fake_kernel *_Atomic table[TABLE_SIZE];
static pthread_mutex_t table_lock = PTHREAD_MUTEX_INITIALIZER;
static atomic_long total_executed;

static size_t slot_of(const void *key) {
    uint64_t h = (uint64_t)(uintptr_t)key * 0x9E3779B97F4A7C15ull;
    return (size_t)(h >> (64 - TABLE_BITS));
}

static fake_kernel *find(const void *key) {
    for (size_t i = slot_of(key), n = 0; n < TABLE_SIZE; i = (i + 1) & (TABLE_SIZE - 1), n++) {
        fake_kernel *k = atomic_load(&table[i]);
        if (!k) return NULL;
        if (k->key == key) return k;
    }
    return NULL;
}

static fake_kernel *add(const void *key, const char *name) {
    pthread_mutex_lock(&table_lock);
    fake_kernel *k = find(key);
    if (!k) {
        k = calloc(1, sizeof *k);
        k->key = key ? key : (const void *)k;
        size_t i = slot_of(k->key);
        while (atomic_load(&table[i])) i = (i + 1) & (TABLE_SIZE - 1);
        atomic_store(&table[i], k);
    }
    snprintf(k->name, sizeof k->name, "%s", name ? name : "?");
    pthread_mutex_unlock(&table_lock);
    return k;
}

/* ---- capture and graphs ---- */

typedef struct fake_graph {
    int n;
    fake_kernel *nodes[4096];
} fake_graph;

#define PER_THREAD_STREAM ((void *)2)

static struct {
    void *stream;
    pthread_t owner; /* for the per-thread stream only */
    fake_graph *graph;
} captures[16];
static pthread_mutex_t capture_lock = PTHREAD_MUTEX_INITIALIZER;
static atomic_long is_capturing_calls;

static int same_stream(int i, void *stream) {
    return captures[i].stream == stream &&
           (stream != PER_THREAD_STREAM || pthread_equal(captures[i].owner, pthread_self()));
}

static fake_graph *capturing(void *stream) {
    for (int i = 0; i < 16; i++)
        if (captures[i].graph && same_stream(i, stream)) return captures[i].graph;
    return NULL;
}

static int begin_capture(void *stream) {
    pthread_mutex_lock(&capture_lock);
    int rc = capturing(stream) ? ERR_INVALID : -1;
    for (int i = 0; i < 16 && rc == -1; i++)
        if (!captures[i].graph) {
            captures[i].stream = stream;
            captures[i].owner = pthread_self();
            captures[i].graph = calloc(1, sizeof(fake_graph));
            rc = 0;
        }
    pthread_mutex_unlock(&capture_lock);
    return rc == -1 ? ERR_INVALID : rc;
}

static int end_capture(void *stream, void **graph) {
    pthread_mutex_lock(&capture_lock);
    int rc = ERR_INVALID;
    for (int i = 0; i < 16; i++)
        if (captures[i].graph && same_stream(i, stream)) {
            *graph = captures[i].graph;
            captures[i].graph = NULL;
            rc = 0;
            break;
        }
    pthread_mutex_unlock(&capture_lock);
    return rc;
}

static int is_capturing(void *stream, int *status) {
    atomic_fetch_add(&is_capturing_calls, 1);
    pthread_mutex_lock(&capture_lock);
    *status = capturing(stream) ? 1 : 0;
    pthread_mutex_unlock(&capture_lock);
    return 0;
}

/* A destroyed stream's capture ends with it (its graph is dropped). */
static int destroy_stream(void *stream) {
    pthread_mutex_lock(&capture_lock);
    for (int i = 0; i < 16; i++)
        if (captures[i].graph && same_stream(i, stream)) {
            free(captures[i].graph);
            captures[i].graph = NULL;
        }
    pthread_mutex_unlock(&capture_lock);
    return 0;
}

/* A null pointer the compiler cannot see through, so the faulting write stays a real write. */
static uintptr_t stream_null(void) {
    static volatile uintptr_t zero = 0;
    return zero;
}

static int launch(fake_kernel *k, void *stream, unsigned long argsum) {
    if (stream == FAKE_CRASH_STREAM) *(volatile int *)(uintptr_t)stream_null() = 1;
    if (!k) return ERR_INVALID;
    atomic_fetch_add(&k->argsum, argsum);
    if (stream == FAKE_BAD_STREAM) {
        atomic_fetch_add(&k->failed, 1);
        return ERR_INVALID;
    }
    pthread_mutex_lock(&capture_lock);
    fake_graph *g = capturing(stream);
    if (g && g->n < 4096) g->nodes[g->n++] = k;
    pthread_mutex_unlock(&capture_lock);
    if (!g) {
        atomic_fetch_add(&k->executed, 1);
        atomic_fetch_add(&total_executed, 1);
    }
    return 0;
}

static int instantiate(void **exec, void *graph) {
    if (!exec || !graph) return ERR_INVALID;
    fake_graph *e = malloc(sizeof *e);
    memcpy(e, graph, sizeof *e);
    *exec = e;
    return 0;
}

static int exec_update(void *exec, void *graph) {
    if (!exec || !graph) return ERR_INVALID;
    memcpy(exec, graph, sizeof(fake_graph));
    return 0;
}

static int graph_launch(void *exec, void *stream) {
    fake_graph *e = exec;
    if (!e) return ERR_INVALID;
    pthread_mutex_lock(&capture_lock);
    fake_graph *g = capturing(stream);
    if (g)
        for (int i = 0; i < e->n && g->n < 4096; i++) g->nodes[g->n++] = e->nodes[i];
    pthread_mutex_unlock(&capture_lock);
    if (!g)
        for (int i = 0; i < e->n; i++) {
            atomic_fetch_add(&e->nodes[i]->executed, 1);
            atomic_fetch_add(&total_executed, 1);
        }
    return 0;
}

/* ---- helpers for the test programs (not hooked by the observer) ---- */

/* A kernel the runtime knows but whose registration the observer never saw. */
void fake_register_silently(const void *key, const char *name) { add(key, name); }

/* A function object (hipFunction_t / CUfunction) created without a hooked call. */
void *fake_make_function(const char *name) { return add(NULL, name); }

/* A graph built node by node (not by capture): `n` nodes of the kernel registered under `key`. */
void *fake_make_graph(const void *key, int n) {
    fake_graph *g = calloc(1, sizeof *g);
    for (int i = 0; i < n && i < 4096; i++) g->nodes[g->n++] = find(key);
    return g;
}

long fake_total_executed(void) { return atomic_load(&total_executed); }

long fake_is_capturing_calls(void) { return atomic_load(&is_capturing_calls); }

static int by_name(const void *a, const void *b) {
    return strcmp((*(fake_kernel *const *)a)->name, (*(fake_kernel *const *)b)->name);
}

/* One line per kernel name: "fake NAME executed N failed M" (sorted; kernels sharing a name summed). */
void fake_print_counts(void) {
    fake_kernel **all = malloc(sizeof(fake_kernel *) * TABLE_SIZE);
    size_t n = 0;
    for (size_t i = 0; i < TABLE_SIZE; i++)
        if (atomic_load(&table[i])) all[n++] = atomic_load(&table[i]);
    qsort(all, n, sizeof *all, by_name);
    for (size_t i = 0; i < n;) {
        long executed = 0, failed = 0;
        unsigned long argsum = 0;
        size_t j = i;
        for (; j < n && strcmp(all[j]->name, all[i]->name) == 0; j++) {
            executed += atomic_load(&all[j]->executed);
            failed += atomic_load(&all[j]->failed);
            argsum += atomic_load(&all[j]->argsum);
        }
        printf("fake %s executed %ld failed %ld argsum %016lx\n", all[i]->name, executed, failed, argsum);
        i = j;
    }
    free(all);
    fflush(stdout);
}

/* ---- HIP ---- */

static int fatbin_handles[64];
static atomic_int fatbins;

static void **register_fatbin(void) { return (void **)&fatbin_handles[atomic_fetch_add(&fatbins, 1) % 64]; }

static int module_get_function(void **function, const char *name) {
    if (!function || !name) return ERR_INVALID;
    *function = add(NULL, name);
    return 0;
}

void **__hipRegisterFatBinary(const void *data) {
    (void)data;
    return register_fatbin();
}

void __hipRegisterFunction(void **modules, const void *host_function, char *device_function,
                           const char *device_name, unsigned thread_limit, void *tid, void *bid,
                           dim3 *block_dim, dim3 *grid_dim, int *warp_size) {
    (void)modules, (void)device_function, (void)thread_limit, (void)tid, (void)bid, (void)block_dim,
        (void)grid_dim, (void)warp_size;
    add(host_function, device_name);
}

int hipLaunchKernel(const void *f, dim3 grid, dim3 block, void **args, size_t shared, void *stream) {
    return launch(find(f), stream, ARGS(D3(grid), D3(block), U(args), shared, U(stream)));
}

int hipModuleGetFunction(void **function, void *module, const char *name) {
    (void)module;
    return module_get_function(function, name);
}

int hipModuleLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                          unsigned bz, unsigned shared, void *stream, void **params, void **extra) {
    return launch(f, stream, ARGS(gx, gy, gz, bx, by, bz, shared, U(stream), U(params), U(extra)));
}

int hipExtModuleLaunchKernel(void *f, uint32_t gx, uint32_t gy, uint32_t gz, uint32_t lx, uint32_t ly,
                             uint32_t lz, size_t shared, void *stream, void **params, void **extra,
                             void *start, void *stop, uint32_t flags) {
    return launch(f, stream,
                  ARGS(gx, gy, gz, lx, ly, lz, shared, U(stream), U(params), U(extra), U(start), U(stop), flags));
}

const char *hipKernelNameRefByPtr(const void *host_function, void *stream) {
    (void)stream;
    fake_kernel *k = find(host_function);
    return k ? k->name : NULL;
}

const char *hipKernelNameRef(void *f) { return f ? ((fake_kernel *)f)->name : NULL; }

int hipStreamBeginCapture(void *stream, int mode) { (void)mode; return begin_capture(stream); }
int hipStreamEndCapture(void *stream, void **graph) { return end_capture(stream, graph); }
int hipStreamIsCapturing(void *stream, int *status) { return is_capturing(stream, status); }
int hipStreamDestroy(void *stream) { return destroy_stream(stream); }
int hipGraphInstantiate(void **exec, void *graph, void *error_node, char *log, size_t log_size) {
    (void)error_node, (void)log, (void)log_size;
    return instantiate(exec, graph);
}
int hipGraphExecUpdate(void *exec, void *graph, void *error_node, int *result) {
    (void)error_node;
    if (result) *result = 0;
    return exec_update(exec, graph);
}
int hipGraphLaunch(void *exec, void *stream) { return graph_launch(exec, stream); }
int hipGraphExecDestroy(void *exec) { free(exec); return 0; }
int hipGraphDestroy(void *graph) { free(graph); return 0; }

/* ---- CUDA runtime ---- */

typedef struct {
    dim3 grid, block;
    size_t dynamic_smem;
    void *stream;
    void *attrs;
    unsigned num_attrs;
} cuda_launch_config;

void **__cudaRegisterFatBinary(void *fatbin) {
    (void)fatbin;
    return register_fatbin();
}

void __cudaRegisterFunction(void **handle, const char *host_function, char *device_function,
                            const char *device_name, int thread_limit, void *tid, void *bid,
                            dim3 *block_dim, dim3 *grid_dim, int *warp_size) {
    (void)handle, (void)device_function, (void)thread_limit, (void)tid, (void)bid, (void)block_dim,
        (void)grid_dim, (void)warp_size;
    add(host_function, device_name);
}

/* The kernel handle is the fake kernel object, an address distinct from the host stub. */
int __cudaGetKernel(void **kernel, const void *host_function) {
    fake_kernel *k = find(host_function);
    if (!k || !kernel) return ERR_INVALID;
    *kernel = k;
    return 0;
}

int cudaLaunchKernel(const void *f, dim3 grid, dim3 block, void **args, size_t shared, void *stream) {
    return launch(find(f), stream, ARGS(D3(grid), D3(block), U(args), shared, U(stream)));
}

int __cudaLaunchKernel(void *kernel, dim3 grid, dim3 block, void **args, size_t shared, void *stream) {
    if (!kernel) return ERR_INVALID;
    /* Through the exported symbol, on purpose (see the header comment). */
    return cudaLaunchKernel(((fake_kernel *)kernel)->key, grid, block, args, shared, stream);
}

int cudaLaunchKernelExC(const cuda_launch_config *config, const void *f, void **args) {
    if (!config) return ERR_INVALID;
    return launch(find(f), config->stream,
                  ARGS(D3(config->grid), D3(config->block), config->dynamic_smem, U(config->stream), U(args)));
}

int cudaLaunchCooperativeKernel(const void *f, dim3 grid, dim3 block, void **args, size_t shared,
                                void *stream) {
    return launch(find(f), stream, ARGS(D3(grid), D3(block), U(args), shared, U(stream)));
}

int cudaFuncGetName(const char **name, const void *f) {
    fake_kernel *k = find(f);
    if (!k || !name) return ERR_INVALID;
    *name = k->name;
    return 0;
}

int cudaStreamBeginCapture(void *stream, int mode) { (void)mode; return begin_capture(stream); }
int cudaStreamEndCapture(void *stream, void **graph) { return end_capture(stream, graph); }
int cudaStreamIsCapturing(void *stream, int *status) { return is_capturing(stream, status); }
int cudaStreamDestroy(void *stream) { return destroy_stream(stream); }
/* The CUDA 12+ form. */
int cudaGraphInstantiate(void **exec, void *graph, unsigned long long flags) {
    (void)flags;
    return instantiate(exec, graph);
}
int cudaGraphExecUpdate(void *exec, void *graph, void *result_info) {
    (void)result_info;
    return exec_update(exec, graph);
}
int cudaGraphLaunch(void *exec, void *stream) { return graph_launch(exec, stream); }
int cudaGraphExecDestroy(void *exec) { free(exec); return 0; }
int cudaGraphDestroy(void *graph) { free(graph); return 0; }

/* ---- CUDA driver ---- */

typedef struct {
    unsigned gx, gy, gz, bx, by, bz, shared;
    void *stream;
    void *attrs;
    unsigned num_attrs;
} cu_launch_config;

int cuModuleGetFunction(void **function, void *module, const char *name) {
    (void)module;
    return module_get_function(function, name);
}

int cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                   unsigned shared, void *stream, void **params, void **extra) {
    return launch(f, stream, ARGS(gx, gy, gz, bx, by, bz, shared, U(stream), U(params), U(extra)));
}

int cuLaunchKernelEx(const cu_launch_config *config, void *f, void **params, void **extra) {
    if (!config) return ERR_INVALID;
    return launch(f, config->stream,
                  ARGS(config->gx, config->gy, config->gz, config->bx, config->by, config->bz, config->shared,
                       U(config->stream), U(params), U(extra)));
}

/* Driver end of a capture (the runtime's streams are driver streams). */
int cuStreamEndCapture(void *stream, void **graph) { return end_capture(stream, graph); }

int cuFuncGetName(const char **name, void *f) {
    if (!f || !name) return ERR_INVALID;
    *name = ((fake_kernel *)f)->name;
    return 0;
}

int cuKernelGetName(const char **name, void *kernel) {
    if (!kernel || !name) return ERR_INVALID;
    *name = ((fake_kernel *)kernel)->name;
    return 0;
}

/* ---- entry points by pointer ----
 * What cuBLAS's static CUDA runtime (and rocBLAS through hipGetProcAddress) uses: the lookup functions below
 * hand out internal copies of the launch and module functions, reachable through no exported symbol, so that
 * only an observer of the lookups can see launches made through them. Other symbols get internal functions
 * too (cuMemAlloc, cuCtxGetDevice), which a test compares with fake_internal_address to prove that an
 * observer changes no other lookup. */

static int internal_cu_launch_kernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                                     unsigned bz, unsigned shared, void *stream, void **params, void **extra) {
    return launch(f, stream, ARGS(gx, gy, gz, bx, by, bz, shared, U(stream), U(params), U(extra)));
}
/* The per-thread-default-stream variant (CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM): another address. */
static int internal_cu_launch_kernel_ptsz(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                                          unsigned by, unsigned bz, unsigned shared, void *stream, void **params,
                                          void **extra) {
    return launch(f, stream == NULL ? PER_THREAD_STREAM : stream,
                  ARGS(gx, gy, gz, bx, by, bz, shared, U(stream), U(params), U(extra)));
}
static int internal_cu_launch_kernel_ex(const cu_launch_config *config, void *f, void **params, void **extra) {
    if (!config) return ERR_INVALID;
    return launch(f, config->stream,
                  ARGS(config->gx, config->gy, config->gz, config->bx, config->by, config->bz, config->shared,
                       U(config->stream), U(params), U(extra)));
}
static int internal_cu_module_get_function(void **function, void *module, const char *name) {
    (void)module;
    return module_get_function(function, name);
}
static int internal_hip_module_launch_kernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                                             unsigned by, unsigned bz, unsigned shared, void *stream,
                                             void **params, void **extra) {
    return launch(f, stream, ARGS(gx, gy, gz, bx, by, bz, shared, U(stream), U(params), U(extra)));
}
static int internal_hip_ext_module_launch_kernel(void *f, uint32_t gx, uint32_t gy, uint32_t gz, uint32_t lx,
                                                 uint32_t ly, uint32_t lz, size_t shared, void *stream,
                                                 void **params, void **extra, void *start, void *stop,
                                                 uint32_t flags) {
    return launch(f, stream,
                  ARGS(gx, gy, gz, lx, ly, lz, shared, U(stream), U(params), U(extra), U(start), U(stop), flags));
}
static int internal_mem_alloc(void **pointer, size_t size) {
    if (!pointer) return ERR_INVALID;
    *pointer = (void *)(uintptr_t)(0x10000 + size);
    return 0;
}
static int internal_ctx_get_device(int *device) {
    if (!device) return ERR_INVALID;
    *device = 7;
    return 0;
}

int cuGetProcAddress_v2(const char *symbol, void **pfn, int version, unsigned long long flags, int *status);
int hipGetProcAddress(const char *symbol, void **pfn, int version, uint64_t flags, int *status);

static void *proc_address(const char *symbol, unsigned long long flags) {
    static const struct {
        const char *name;
        void *function;
    } table[] = {
        {"cuLaunchKernelEx", (void *)internal_cu_launch_kernel_ex},
        {"cuModuleGetFunction", (void *)internal_cu_module_get_function},
        {"cuMemAlloc", (void *)internal_mem_alloc},
        {"cuCtxGetDevice", (void *)internal_ctx_get_device},
        {"cuGetProcAddress", (void *)cuGetProcAddress_v2},
        {"hipModuleGetFunction", (void *)internal_cu_module_get_function},
        {"hipModuleLaunchKernel", (void *)internal_hip_module_launch_kernel},
        {"hipExtModuleLaunchKernel", (void *)internal_hip_ext_module_launch_kernel},
        {"hipGetProcAddress", (void *)hipGetProcAddress},
    };
    if (!symbol) return NULL;
    if (strcmp(symbol, "cuLaunchKernel") == 0)
        return flags & 2 ? (void *)internal_cu_launch_kernel_ptsz : (void *)internal_cu_launch_kernel;
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
        if (strcmp(symbol, table[i].name) == 0) return table[i].function;
    return NULL;
}

/* CUDA 12's form; the result is also written to *status (0 found, 1 not found) when given. */
int cuGetProcAddress_v2(const char *symbol, void **pfn, int version, unsigned long long flags, int *status) {
    (void)version;
    void *f = proc_address(symbol, flags);
    if (status) *status = f ? 0 : 1;
    if (pfn) *pfn = f;
    return f ? 0 : 500; /* CUDA_ERROR_NOT_FOUND */
}

/* CUDA 11.3's four-parameter form. */
int cuGetProcAddress(const char *symbol, void **pfn, int version, unsigned long long flags) {
    (void)version;
    void *f = proc_address(symbol, flags);
    if (pfn) *pfn = f;
    return f ? 0 : 500;
}

/* The runtime's lookups reach the driver's table directly, as the real runtime does through its own pointer. */
int cudaGetDriverEntryPoint(const char *symbol, void **function, unsigned long long flags, int *status) {
    void *f = proc_address(symbol, flags);
    if (status) *status = f ? 0 : 1;
    if (function) *function = f;
    return f ? 0 : 500;
}

int cudaGetDriverEntryPointByVersion(const char *symbol, void **function, unsigned version, unsigned long long flags,
                                     int *status) {
    (void)version;
    return cudaGetDriverEntryPoint(symbol, function, flags, status);
}

int hipGetProcAddress(const char *symbol, void **pfn, int version, uint64_t flags, int *status) {
    (void)version;
    void *f = proc_address(symbol, flags);
    if (status) *status = f ? 0 : 1;
    if (pfn) *pfn = f;
    return f ? 0 : 500;
}

/* Test helper: what the lookups above return for `symbol` (default stream), for comparison. */
void *fake_internal_address(const char *symbol) { return proc_address(symbol, 0); }
