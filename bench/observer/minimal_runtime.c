/*
 * TEST DOUBLE - not a GPU runtime. The smallest runtime the observer can sit in front of, for
 * bench/observer_launch.sh: registration does nothing, a launch writes 64 bytes of "commands" to a
 * ring and returns success, so the observer's own cost per launch is a large, visible share. One
 * stream can capture (begin/end/is-capturing), for the stale-capture arms of the benchmark; launches
 * ignore it.
 */
#include <stddef.h>

typedef struct {
    unsigned x, y, z;
} dim3;

static volatile unsigned long ring[4096];
static unsigned position;

void **__cudaRegisterFatBinary(void *fat_cubin) {
    static void *handle;
    (void)fat_cubin;
    return &handle;
}

void __cudaRegisterFunction(void **handle, const char *host, char *device, const char *name, int thread_limit,
                            void *tid, void *bid, dim3 *block, dim3 *grid, int *warp_size) {
    (void)handle, (void)host, (void)device, (void)name, (void)thread_limit;
    (void)tid, (void)bid, (void)block, (void)grid, (void)warp_size;
}

int cudaLaunchKernel(const void *function, dim3 grid, dim3 block, void **args, size_t shared, void *stream) {
    (void)args, (void)shared, (void)stream;
    for (int i = 0; i < 8; i++) ring[(position + i) & 4095] = (unsigned long)function + grid.x + block.x + i;
    position += 8;
    return 0;
}

static void *capturing_stream;
static int capturing;

int cudaStreamBeginCapture(void *stream, int mode) {
    (void)mode;
    capturing_stream = stream;
    capturing = 1;
    return 0;
}

int cudaStreamEndCapture(void *stream, void **graph) {
    if (!capturing || stream != capturing_stream) return 4;
    capturing = 0;
    *graph = (void *)&capturing;
    return 0;
}

int cudaStreamIsCapturing(void *stream, int *status) {
    *status = capturing && stream == capturing_stream;
    return 0;
}
