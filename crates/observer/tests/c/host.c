/*
 * Test program: the "application". It links no GPU runtime; like Ollama's runner or llama-server
 * with GGML_BACKEND_DL it dlopens the backend (libfake_backend.so, which pulls in the test-double
 * runtime) after start, with RTLD_LOCAL unless FAKE_DLOPEN_GLOBAL=1.
 *
 *   host basic | twice | graph-hip | graph-cuda |  run one backend scenario, then print the fake
 *        stale-capture-hip | stale-capture-cuda     runtime's per-kernel counts
 *   host threads THREADS N                          THREADS threads x N launches
 *   host many N                                     N distinct kernels
 *   host fork                                       fork (child launches, exits) and fork+exec
 *   host exec-child                                 (what the exec'd child runs)
 *   host missing                                    call hooks before any runtime is loaded
 *   host sleep MS                                   launch, sleep, launch (for window timing)
 *   host crash segv | abort | in-launch              launch a x3 (main thread), b x1 (a second thread),
 *                                                   b x2 (main thread), then crash: a null-pointer
 *                                                   write, abort(), or a launch the runtime faults in
 *   host crash-early                                 a null-pointer write before any runtime is loaded
 *   host blas N                                      the vendor-BLAS stand-in (libfake_blas.so) launches
 *                                                   through driver pointers, N GEMMs each
 *   host entry-points                                driver entry points from cudaGetDriverEntryPoint
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

typedef struct {
    unsigned x, y, z;
} dim3;

static void *backend;

static void *need(void *handle, const char *name) {
    void *symbol = dlsym(handle, name);
    if (!symbol) {
        fprintf(stderr, "host: %s: %s\n", name, dlerror());
        exit(90);
    }
    return symbol;
}

static void load_backend(void) {
    const char *dir = getenv("FAKE_LIB_DIR");
    char path[4096];
    snprintf(path, sizeof path, "%s/libfake_backend.so", dir ? dir : ".");
    const char *global = getenv("FAKE_DLOPEN_GLOBAL");
    int mode = RTLD_NOW | (global && strcmp(global, "1") == 0 ? RTLD_GLOBAL : RTLD_LOCAL);
    backend = dlopen(path, mode);
    if (!backend) {
        fprintf(stderr, "host: dlopen %s: %s\n", path, dlerror());
        exit(91);
    }
}

static void print_fake_counts(void) {
    void (*print_counts)(void) = (void (*)(void))need(backend, "fake_print_counts");
    print_counts();
}

static void *launch_b_once(void *arg) {
    (void)arg;
    ((void (*)(const char *, int))need(backend, "backend_launch"))("b", 1);
    return NULL;
}

static int threads_n;
static void *hammer(void *arg) {
    (void)arg;
    void (*run)(int) = (void (*)(int))need(backend, "backend_hammer");
    run(threads_n);
    return NULL;
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "basic";
    setvbuf(stdout, NULL, _IOLBF, 0);
    printf("host started mode=%s\n", mode);

    if (strcmp(mode, "missing") == 0) {
        /* No runtime loaded yet: whatever these resolve to must not crash. */
        int (*launch)(const void *, dim3, dim3, void **, size_t, void *) =
            (int (*)(const void *, dim3, dim3, void **, size_t, void *))dlsym(RTLD_DEFAULT, "hipLaunchKernel");
        int (*cuda_launch)(const void *, dim3, dim3, void **, size_t, void *) =
            (int (*)(const void *, dim3, dim3, void **, size_t, void *))dlsym(RTLD_DEFAULT, "cudaLaunchKernel");
        void **(*register_fatbin)(const void *) = (void **(*)(const void *))dlsym(RTLD_DEFAULT, "__hipRegisterFatBinary");
        dim3 one = {1, 1, 1};
        if (launch) printf("before-load hipLaunchKernel rc=%d\n", launch((void *)0x1, one, one, NULL, 0, NULL));
        else printf("before-load hipLaunchKernel absent\n");
        if (cuda_launch) printf("before-load cudaLaunchKernel rc=%d\n", cuda_launch((void *)0x1, one, one, NULL, 0, NULL));
        else printf("before-load cudaLaunchKernel absent\n");
        if (register_fatbin) printf("before-load __hipRegisterFatBinary %s\n", register_fatbin("x") ? "non-null" : "null");
        else printf("before-load __hipRegisterFatBinary absent\n");
        load_backend();
        const void *(*stub_a)(void) = (const void *(*)(void))need(backend, "backend_stub_a");
        if (launch) printf("after-load hipLaunchKernel rc=%d\n", launch(stub_a(), one, one, NULL, 0, NULL));
        else printf("after-load hipLaunchKernel absent\n");
        print_fake_counts();
        return 0;
    }

    if (strcmp(mode, "crash-early") == 0) {
        printf("crashing before any runtime\n");
        static volatile int *volatile nowhere = NULL;
        *nowhere = 1;
    }

    load_backend();
    static const char *const scenarios[][2] = {
        {"basic", "backend_basic"},
        {"twice", "backend_twice"},
        {"graph-hip", "backend_graph_hip"},
        {"graph-cuda", "backend_graph_cuda"},
        {"stale-capture-hip", "backend_stale_capture_hip"},
        {"stale-capture-cuda", "backend_stale_capture_cuda"},
    };
    const char *scenario = NULL;
    for (size_t i = 0; i < sizeof scenarios / sizeof scenarios[0]; i++)
        if (strcmp(mode, scenarios[i][0]) == 0) scenario = scenarios[i][1];
    if (scenario) {
        ((void (*)(void))need(backend, scenario))();
        print_fake_counts();
    } else if (strcmp(mode, "threads") == 0) {
        int n_threads = argc > 2 ? atoi(argv[2]) : 8;
        threads_n = argc > 3 ? atoi(argv[3]) : 100000;
        pthread_t threads[64];
        if (n_threads > 64) n_threads = 64;
        for (int i = 0; i < n_threads; i++) pthread_create(&threads[i], NULL, hammer, NULL);
        for (int i = 0; i < n_threads; i++) pthread_join(threads[i], NULL);
        print_fake_counts();
    } else if (strcmp(mode, "many") == 0) {
        int n = argc > 2 ? atoi(argv[2]) : 100000;
        ((void (*)(int))need(backend, "backend_many"))(n);
        long (*total)(void) = (long (*)(void))need(backend, "fake_total_executed");
        printf("fake total executed %ld\n", total());
    } else if (strcmp(mode, "fork") == 0) {
        void (*launch)(const char *, int) = (void (*)(const char *, int))need(backend, "backend_launch");
        launch("a", 3);
        pid_t child = fork();
        if (child == 0) {
            launch("b", 2); /* a forked child that keeps running and exits normally */
            exit(0);
        }
        int status = 0;
        waitpid(child, &status, 0);
        printf("fork-child pid=%d status=%d\n", (int)child, status);
        pid_t exec_child = fork();
        if (exec_child == 0) {
            execl("/proc/self/exe", argv[0], "exec-child", (char *)NULL);
            _exit(92);
        }
        waitpid(exec_child, &status, 0);
        printf("exec-child pid=%d status=%d\n", (int)exec_child, status);
        launch("a", 1);
        print_fake_counts();
    } else if (strcmp(mode, "exec-child") == 0) {
        ((void (*)(int))need(backend, "backend_launch_cuda_c"))(4);
    } else if (strcmp(mode, "sleep") == 0) {
        int ms = argc > 2 ? atoi(argv[2]) : 200;
        void (*launch)(const char *, int) = (void (*)(const char *, int))need(backend, "backend_launch");
        struct timespec t0, t1, pause = {ms / 1000, (ms % 1000) * 1000000L};
        clock_gettime(CLOCK_MONOTONIC, &t0);
        launch("a", 5);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        printf("phase a %lld %lld\n", t0.tv_sec * 1000000000LL + t0.tv_nsec, t1.tv_sec * 1000000000LL + t1.tv_nsec);
        nanosleep(&pause, NULL);
        clock_gettime(CLOCK_MONOTONIC, &t0);
        launch("b", 7);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        printf("phase b %lld %lld\n", t0.tv_sec * 1000000000LL + t0.tv_nsec, t1.tv_sec * 1000000000LL + t1.tv_nsec);
    } else if (strcmp(mode, "blas") == 0) {
        int n = argc > 2 ? atoi(argv[2]) : 3;
        const char *dir = getenv("FAKE_LIB_DIR");
        char path[4096];
        snprintf(path, sizeof path, "%s/libfake_blas.so", dir ? dir : ".");
        void *blas = dlopen(path, RTLD_NOW | RTLD_LOCAL);
        if (!blas) {
            fprintf(stderr, "host: dlopen %s: %s\n", path, dlerror());
            return 91;
        }
        ((void (*)(int))need(blas, "fake_cublas_gemm"))(n);
        ((void (*)(int))need(blas, "fake_rocblas_gemm"))(n);
        print_fake_counts();
    } else if (strcmp(mode, "entry-points") == 0) {
        ((void (*)(int))need(backend, "backend_entry_points"))(3);
        print_fake_counts();
    } else if (strcmp(mode, "crash") == 0) {
        const char *how = argc > 2 ? argv[2] : "segv";
        void (*launch)(const char *, int) = (void (*)(const char *, int))need(backend, "backend_launch");
        launch("a", 3);
        pthread_t other;
        pthread_create(&other, NULL, launch_b_once, NULL);
        pthread_join(other, NULL);
        launch("b", 2);
        printf("crashing %s\n", how);
        if (strcmp(how, "abort") == 0) abort();
        if (strcmp(how, "in-launch") == 0) ((void (*)(void))need(backend, "backend_launch_crashing"))();
        static volatile int *volatile nowhere = NULL;
        *nowhere = 1;
        printf("not reached\n");
    } else {
        fprintf(stderr, "host: unknown mode %s\n", mode);
        return 2;
    }
    printf("host done\n");
    return 0;
}
