// Host-side cost of compute dispatches through whatever Vulkan layers the loader enables: records DISPATCHES
// dispatches into one command buffer the way ggml-vulkan does (bind a pipeline, dispatch; two pipelines
// alternate and the workgroup count varies, so consecutive dispatches differ), submits it, waits, and repeats.
// Prints one JSON line per round: nanoseconds per dispatch for recording (vkCmdBindPipeline + vkCmdDispatch),
// for the vkQueueSubmit call (where a layer counts what was recorded), and both together.
// With LABELLED = 1 it also labels the commands as ggml-vulkan does under GGML_VK_DEBUG_MARKERS
// (ggml_vk_ctx_begin, ggml_vk_debug_label): one `submit N` region per command buffer, a region per graph node
// (`MUL_MAT blk.7.attn_q`) and inside it one per dispatch (`PIPELINE (X,Y,Z)`) around the bind and the dispatch;
// recording then times the label calls too.
//
// With DISPATCH_LOOP_KEYS=N (even, 2 to 64) in the environment the plain loop's workgroup counts cycle through N/2
// values, so that a command buffer holds N distinct (pipeline, workgroup count) keys, as ggml-vulkan's decode buffers
// of a 1.1B model hold about 20 (the default, 6, is the loop of earlier measurements: counts 1, 2, 3).
//
// With DISPATCH_LOOP_PAUSED=1 in the environment it pauses backscope's layer through its switch
// (backscope_vk_set_observing, as bench/gpu/vk_decode_ab.cpp does): the layer then only forwards calls, which is
// the plain arm of the in-process A/B.
//
// Usage: dispatch_loop SPIRV_FILE DISPATCHES ROUNDS [LABELLED]
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <vulkan/vulkan.h>

// CHECK, read_spirv, first_physical_device.
#include "../../crates/vklayer/tests/c/vktest.h"

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

// The loader opens the layer RTLD_LOCAL: find it among the loaded objects, reopen it without loading anything.
static int find_layer(struct dl_phdr_info *info, size_t size, void *out) {
    (void)size;
    if (info->dlpi_name && strstr(info->dlpi_name, "libbackscope_vklayer")) {
        *(const char **)out = info->dlpi_name;
        return 1;
    }
    return 0;
}

static void pause_layer(void) {
    const char *path = NULL;
    dl_iterate_phdr(find_layer, &path);
    void *handle = path ? dlopen(path, RTLD_NOLOAD | RTLD_LAZY) : NULL;
    int (*set_observing)(int) = handle ? (int (*)(int))dlsym(handle, "backscope_vk_set_observing") : NULL;
    if (!set_observing) {
        fprintf(stderr, "DISPATCH_LOOP_PAUSED: backscope's layer is not loaded\n");
        exit(1);
    }
    set_observing(0);
}

int main(int argc, char **argv) {
    if (argc != 4 && argc != 5) {
        fprintf(stderr, "usage: %s SPIRV_FILE DISPATCHES ROUNDS [LABELLED]\n", argv[0]);
        return 2;
    }
    long dispatches = atol(argv[2]), rounds = atol(argv[3]);
    int labelled = argc == 5 && atoi(argv[4]) != 0;
    static uint32_t code[1 << 16];
    size_t code_size = read_spirv(argv[1], code, sizeof code);

    VkApplicationInfo app = {.sType = VK_STRUCTURE_TYPE_APPLICATION_INFO, .apiVersion = VK_API_VERSION_1_2};
    const char *extensions[] = {"VK_EXT_debug_utils"};
    VkInstanceCreateInfo ici = {.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO, .pApplicationInfo = &app,
                                .enabledExtensionCount = labelled ? 1 : 0, .ppEnabledExtensionNames = extensions};
    VkInstance instance;
    CHECK(vkCreateInstance(&ici, NULL, &instance));
    const char *keys_env = getenv("DISPATCH_LOOP_KEYS");
    long keys = keys_env ? atol(keys_env) : 6;
    if (keys < 2 || keys > 64 || keys % 2) {
        fprintf(stderr, "DISPATCH_LOOP_KEYS=%ld: an even number from 2 to 64 is expected\n", keys);
        return 1;
    }
    const char *paused = getenv("DISPATCH_LOOP_PAUSED");
    if (paused && strcmp(paused, "1") == 0) pause_layer();
    // ggml-vulkan takes these through vkGetInstanceProcAddr too.
    PFN_vkCmdBeginDebugUtilsLabelEXT begin_label = NULL;
    PFN_vkCmdEndDebugUtilsLabelEXT end_label = NULL;
    if (labelled) {
        begin_label =
            (PFN_vkCmdBeginDebugUtilsLabelEXT)vkGetInstanceProcAddr(instance, "vkCmdBeginDebugUtilsLabelEXT");
        end_label = (PFN_vkCmdEndDebugUtilsLabelEXT)vkGetInstanceProcAddr(instance, "vkCmdEndDebugUtilsLabelEXT");
        if (!begin_label || !end_label) {
            fprintf(stderr, "no vkCmdBeginDebugUtilsLabelEXT\n");
            return 1;
        }
    }
    // The label texts, made before timing (ggml builds a std::string per label in every arm alike): 7 nodes per
    // layer of 22 layers, and the dispatch labels of the two pipelines and three workgroup counts.
    enum { NODES = 7 * 22 };
    static const char *ops[7] = {"MUL_MAT", "RMS_NORM+MUL", "ROPE", "MUL_MAT", "SOFT_MAX", "ADD", "GLU"};
    static const char *tensors[7] = {"attn_q", "attn_norm", "Qcur", "ffn_down", "kq_soft_max", "ffn_inp", "ffn_swiglu"};
    static char node_labels[NODES][64], dispatch_labels[2][3][64];
    for (int i = 0; i < NODES; i++)
        snprintf(node_labels[i], sizeof node_labels[i], "%s blk.%d.%s", ops[i % 7], i / 7, tensors[i % 7]);
    for (int p = 0; p < 2; p++)
        for (int g = 0; g < 3; g++)
            snprintf(dispatch_labels[p][g], sizeof dispatch_labels[p][g], "%s (%d,1,1)",
                     p ? "mul_mat_vec_q4_k_f32_f32" : "rms_norm_mul_f32", 1 + g);
    VkDebugUtilsLabelEXT label = {.sType = VK_STRUCTURE_TYPE_DEBUG_UTILS_LABEL_EXT,
                                  .color = {1.0f, 1.0f, 1.0f, 1.0f}};
    char submit_label[32];
    VkPhysicalDevice physical = first_physical_device(instance);
    float priority = 1.0f;
    VkDeviceQueueCreateInfo qci = {.sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO, .queueFamilyIndex = 0,
                                   .queueCount = 1, .pQueuePriorities = &priority};
    VkDeviceCreateInfo dci = {.sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO, .queueCreateInfoCount = 1,
                              .pQueueCreateInfos = &qci};
    VkDevice device;
    CHECK(vkCreateDevice(physical, &dci, NULL, &device));
    VkQueue queue;
    vkGetDeviceQueue(device, 0, 0, &queue);

    VkShaderModuleCreateInfo smci = {.sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO, .codeSize = code_size,
                                     .pCode = code};
    VkShaderModule module;
    CHECK(vkCreateShaderModule(device, &smci, NULL, &module));
    VkPushConstantRange range = {.stageFlags = VK_SHADER_STAGE_COMPUTE_BIT, .size = 4};
    VkPipelineLayoutCreateInfo plci = {.sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO,
                                       .pushConstantRangeCount = 1, .pPushConstantRanges = &range};
    VkPipelineLayout layout;
    CHECK(vkCreatePipelineLayout(device, &plci, NULL, &layout));
    VkPipeline pipelines[2];
    for (int i = 0; i < 2; i++) {
        VkComputePipelineCreateInfo cpci = {
            .sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO,
            .stage = {.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO,
                      .stage = VK_SHADER_STAGE_COMPUTE_BIT, .module = module, .pName = "main"},
            .layout = layout};
        CHECK(vkCreateComputePipelines(device, VK_NULL_HANDLE, 1, &cpci, NULL, &pipelines[i]));
    }
    VkCommandPoolCreateInfo cpi = {.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO, .queueFamilyIndex = 0,
                                   .flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT};
    VkCommandPool pool;
    CHECK(vkCreateCommandPool(device, &cpi, NULL, &pool));
    VkCommandBufferAllocateInfo cbai = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO, .commandPool = pool,
                                        .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY, .commandBufferCount = 1};
    VkCommandBuffer cb;
    CHECK(vkAllocateCommandBuffers(device, &cbai, &cb));

    for (long round = 0; round < rounds; round++) {
        VkCommandBufferBeginInfo begin = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
                                          .flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT};
        CHECK(vkBeginCommandBuffer(cb, &begin));
        uint64_t t0 = now_ns();
        if (labelled) {
            snprintf(submit_label, sizeof submit_label, "submit %ld", round);
            label.pLabelName = submit_label;
            begin_label(cb, &label);
            for (long i = 0; i < dispatches; i++) {
                label.pLabelName = node_labels[i % NODES];
                begin_label(cb, &label);
                label.pLabelName = dispatch_labels[i & 1][i % 3];
                begin_label(cb, &label);
                vkCmdBindPipeline(cb, VK_PIPELINE_BIND_POINT_COMPUTE, pipelines[i & 1]);
                vkCmdDispatch(cb, 1 + (uint32_t)(i % 3), 1, 1);
                end_label(cb);
                end_label(cb);
            }
            end_label(cb);
        } else {
            for (long i = 0; i < dispatches; i++) {
                vkCmdBindPipeline(cb, VK_PIPELINE_BIND_POINT_COMPUTE, pipelines[i & 1]);
                // Six keys: counts 1, 2, 3 (as before the knob); more: each pipeline's counts cycle apart.
                uint32_t x = keys == 6 ? 1 + (uint32_t)(i % 3) : 1 + (uint32_t)((i / 2) % (keys / 2));
                vkCmdDispatch(cb, x, 1, 1);
            }
        }
        uint64_t t1 = now_ns();
        CHECK(vkEndCommandBuffer(cb));
        VkSubmitInfo si = {.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO, .commandBufferCount = 1, .pCommandBuffers = &cb};
        uint64_t t2 = now_ns();
        CHECK(vkQueueSubmit(queue, 1, &si, VK_NULL_HANDLE));
        uint64_t t3 = now_ns();
        CHECK(vkQueueWaitIdle(queue));
        double per = 1.0 / (double)dispatches;
        printf("{\"labelled\":%d,\"round\":%ld,\"dispatches\":%ld,\"record_ns\":%.3f,\"submit_ns\":%.3f,\"total_ns\":%.3f}\n",
               labelled, round, dispatches, (double)(t1 - t0) * per, (double)(t3 - t2) * per, (double)(t1 - t0 + t3 - t2) * per);
        CHECK(vkResetCommandBuffer(cb, 0));
    }
    vkDestroyCommandPool(device, pool, NULL);
    for (int i = 0; i < 2; i++) vkDestroyPipeline(device, pipelines[i], NULL);
    vkDestroyPipelineLayout(device, layout, NULL);
    vkDestroyShaderModule(device, module, NULL);
    vkDestroyDevice(device, NULL);
    vkDestroyInstance(instance, NULL);
    return 0;
}
