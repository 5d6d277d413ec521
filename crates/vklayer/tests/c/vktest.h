// What the Vulkan programs built from C share (vkcrash.c, vkspin.c, vkhooks.c here; bench/vklayer/dispatch_loop.c and
// bench/gpu/vk_marker_cost.c include it by its path): a checked Vulkan call, the SPIR-V file they build their
// pipelines from, and the device they run on.
#ifndef BACKSCOPE_VKTEST_H
#define BACKSCOPE_VKTEST_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <vulkan/vulkan.h>

#define CHECK(call)                                                                    \
    do {                                                                               \
        VkResult r_ = (call);                                                          \
        if (r_ != VK_SUCCESS) {                                                        \
            fprintf(stderr, "%s:%d: %s returned %d\n", __FILE__, __LINE__, #call, r_); \
            exit(1);                                                                   \
        }                                                                              \
    } while (0)

// Reads the SPIR-V file at `path` into `code` (at most `cap` bytes); its size in bytes. Exits with 1 when it
// cannot be opened or holds more than `cap` bytes.
static inline size_t read_spirv(const char *path, uint32_t *code, size_t cap) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        exit(1);
    }
    size_t size = fread(code, 1, cap, f);
    int more = fgetc(f) != EOF;
    fclose(f);
    if (more) {
        // A module cut short fails later as VK_ERROR_UNKNOWN from pipeline creation, far from the cause.
        fprintf(stderr, "%s: larger than the %zu bytes this program reads\n", path, cap);
        exit(1);
    }
    return size;
}

// The first physical device the loader lists. Exits with 1, naming the loader's result, when there is none.
static inline VkPhysicalDevice first_physical_device(VkInstance instance) {
    uint32_t n = 1;
    VkPhysicalDevice physical;
    VkResult r = vkEnumeratePhysicalDevices(instance, &n, &physical);
    if ((r != VK_SUCCESS && r != VK_INCOMPLETE) || n == 0) {
        fprintf(stderr, "no Vulkan device (%d)\n", r);
        exit(1);
    }
    return physical;
}

#endif
