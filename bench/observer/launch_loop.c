/*
 * Observer cost per launch on the CPU, inside one process: 16 registered kernels are launched
 * round-robin through two pointers to cudaLaunchKernel, the one the program binds to (the
 * observer's hook under LD_PRELOAD) and the runtime's own (looked up in the runtime library).
 * Blocks of 256 launches alternate ABBA; prints one JSON line with the medians.
 * Usage: launch_loop ROUNDS RUNTIME_LIBRARY [plain|capturing|stale|stale-other]
 *   plain        launches on stream 0, no capture ever (the default)
 *   capturing    the launches go into a capture on stream S that stays open (the capture path)
 *   stale        first a capture on stream S that ends where the observer cannot see it (begun through
 *                the bound symbol, ended through the runtime's own cudaStreamEndCapture), then the
 *                launches on S
 *   stale-other  the same capture, then the launches on stream 0
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct {
    unsigned x, y, z;
} dim3;
void **__cudaRegisterFatBinary(void *fat_cubin);
void __cudaRegisterFunction(void **handle, const char *host, char *device, const char *name, int thread_limit,
                            void *tid, void *bid, dim3 *block, dim3 *grid, int *warp_size);
typedef int (*launch_fn)(const void *, dim3, dim3, void **, size_t, void *);
typedef int (*begin_fn)(void *, int);
typedef int (*end_fn)(void *, void **);

#define KERNELS 16
#define BLOCK 256
static char host_stubs[KERNELS];

static double now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    qsort(v, n, sizeof *v, by_value);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

int main(int argc, char **argv) {
    int rounds = argc > 1 ? atoi(argv[1]) : 4000;
    if (argc < 3 || rounds < 1) {
        fprintf(stderr, "usage: launch_loop ROUNDS RUNTIME_LIBRARY [plain|capturing|stale|stale-other]\n");
        return 2;
    }
    const char *mode_name = argc > 3 ? argv[3] : "plain";
    if (strcmp(mode_name, "plain") && strcmp(mode_name, "capturing") && strcmp(mode_name, "stale") &&
        strcmp(mode_name, "stale-other")) {
        fprintf(stderr, "unknown mode %s\n", mode_name);
        return 2;
    }
    void **handle = __cudaRegisterFatBinary(NULL);
    char name[32];
    for (int i = 0; i < KERNELS; i++) {
        snprintf(name, sizeof name, "_Z7kernel%di", i);
        __cudaRegisterFunction(handle, &host_stubs[i], name, name, -1, NULL, NULL, NULL, NULL, NULL);
    }
    void *runtime = dlopen(argv[2], RTLD_NOLOAD | RTLD_LAZY);
    launch_fn fn[2] = {runtime ? (launch_fn)dlsym(runtime, "cudaLaunchKernel") : NULL,
                       (launch_fn)dlsym(RTLD_DEFAULT, "cudaLaunchKernel")};
    if (!fn[0] || !fn[1]) {
        fprintf(stderr, "cudaLaunchKernel not found in %s\n", argv[2]);
        return 1;
    }
    void *stream = NULL;
    if (strcmp(mode_name, "plain") != 0) {
        void *captured = (void *)0x5000, *graph = NULL;
        begin_fn begin = (begin_fn)dlsym(RTLD_DEFAULT, "cudaStreamBeginCapture");
        end_fn end_unseen = (end_fn)dlsym(runtime, "cudaStreamEndCapture");
        int open_capture = strcmp(mode_name, "capturing") == 0;
        if (!begin || !end_unseen || begin(captured, 0) != 0 || (!open_capture && end_unseen(captured, &graph) != 0)) {
            fprintf(stderr, "cannot set up the capture\n");
            return 1;
        }
        if (strcmp(mode_name, "stale-other") != 0) stream = captured;
    }
    double *per_mode[2] = {malloc(sizeof(double) * rounds * 2), malloc(sizeof(double) * rounds * 2)};
    double *diff = malloc(sizeof(double) * rounds);
    const int order[4] = {0, 1, 1, 0};
    dim3 grid = {8, 1, 1}, block = {256, 1, 1};
    int n[2] = {0, 0};
    for (int r = 0; r < rounds; r++) {
        double group[2] = {0, 0};
        for (int k = 0; k < 4; k++) {
            int mode = order[k];
            double t0 = now_ns();
            for (int i = 0; i < BLOCK; i++) fn[mode](&host_stubs[i % KERNELS], grid, block, NULL, 0, stream);
            double per_launch = (now_ns() - t0) / BLOCK;
            per_mode[mode][n[mode]++] = per_launch;
            group[mode] += per_launch / 2;
        }
        diff[r] = group[1] - group[0];
    }
    printf("{\"mode\":\"%s\",\"interposed\":%s,\"launches_per_mode\":%d,\"runtime_ns\":%.2f,\"bound_ns\":%.2f,"
           "\"paired_diff_ns\":%.2f}\n",
           mode_name, fn[0] != fn[1] ? "true" : "false", rounds * 2 * BLOCK, median(per_mode[0], n[0]),
           median(per_mode[1], n[1]), median(diff, rounds));
    return 0;
}
