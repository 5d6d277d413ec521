// Host-side cost of compute dispatches through whatever Vulkan layers the loader enables: records DISPATCHES
// dispatches into one command buffer the way ggml-vulkan does (bind a pipeline, dispatch; two pipelines
// alternate and the workgroup count varies, so consecutive dispatches differ), submits it, waits, and repeats.
// Prints one JSON line per round: nanoseconds per dispatch for recording (vkCmdBindPipeline + vkCmdDispatch),
// for the vkQueueSubmit call (where a layer counts what was recorded), and both together.
//
// Usage: dispatch_loop SPIRV_FILE DISPATCHES ROUNDS
#define _POSIX_C_SOURCE 199309L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <vulkan/vulkan.h>

#define CHECK(call)                                                                  \
    do {                                                                             \
        VkResult r_ = (call);                                                        \
        if (r_ != VK_SUCCESS) {                                                      \
            fprintf(stderr, "%s:%d: %s returned %d\n", __FILE__, __LINE__, #call, r_); \
            exit(1);                                                                 \
        }                                                                            \
    } while (0)

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: %s SPIRV_FILE DISPATCHES ROUNDS\n", argv[0]);
        return 2;
    }
    long dispatches = atol(argv[2]), rounds = atol(argv[3]);
    FILE *f = fopen(argv[1], "rb");
    if (!f) { perror(argv[1]); return 1; }
    static uint32_t code[1 << 16];
    size_t code_size = fread(code, 1, sizeof code, f);
    fclose(f);

    VkApplicationInfo app = {.sType = VK_STRUCTURE_TYPE_APPLICATION_INFO, .apiVersion = VK_API_VERSION_1_2};
    VkInstanceCreateInfo ici = {.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO, .pApplicationInfo = &app};
    VkInstance instance;
    CHECK(vkCreateInstance(&ici, NULL, &instance));
    uint32_t n = 1;
    VkPhysicalDevice physical;
    VkResult enumerated = vkEnumeratePhysicalDevices(instance, &n, &physical);
    if ((enumerated != VK_SUCCESS && enumerated != VK_INCOMPLETE) || n == 0) {
        fprintf(stderr, "no Vulkan device\n");
        return 1;
    }
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
        for (long i = 0; i < dispatches; i++) {
            vkCmdBindPipeline(cb, VK_PIPELINE_BIND_POINT_COMPUTE, pipelines[i & 1]);
            vkCmdDispatch(cb, 1 + (uint32_t)(i % 3), 1, 1);
        }
        uint64_t t1 = now_ns();
        CHECK(vkEndCommandBuffer(cb));
        VkSubmitInfo si = {.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO, .commandBufferCount = 1, .pCommandBuffers = &cb};
        uint64_t t2 = now_ns();
        CHECK(vkQueueSubmit(queue, 1, &si, VK_NULL_HANDLE));
        uint64_t t3 = now_ns();
        CHECK(vkQueueWaitIdle(queue));
        double per = 1.0 / (double)dispatches;
        printf("{\"round\":%ld,\"dispatches\":%ld,\"record_ns\":%.3f,\"submit_ns\":%.3f,\"total_ns\":%.3f}\n", round,
               dispatches, (double)(t1 - t0) * per, (double)(t3 - t2) * per, (double)(t1 - t0 + t3 - t2) * per);
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
