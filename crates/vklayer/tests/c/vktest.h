// What the Vulkan test programs of this directory share (vkcrash.c, vkspin.c, vkhooks.c): a checked Vulkan call, and the
// SPIR-V file they build their pipelines from.
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
// cannot be opened.
static inline size_t read_spirv(const char *path, uint32_t *code, size_t cap) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        exit(1);
    }
    size_t size = fread(code, 1, cap, f);
    fclose(f);
    return size;
}

#endif
