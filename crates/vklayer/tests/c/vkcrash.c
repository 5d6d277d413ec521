// A Vulkan program that dies after GPU work, for the layer's crash and device-lost records
// (tests/vulkan/crash.rs). It creates two compute pipelines from one shader, names them with
// vkSetDebugUtilsObjectNameEXT (as ggml-vulkan does under GGML_VK_DEBUG_MARKERS), records
// alpha_pipeline (4,1,1) then beta_pipeline (2,1,1) into one command buffer, each inside a debug label
// region ("ALPHA node.0", "BETA node.1", as ggml labels its graph nodes), submits it 3 times
// waiting for its fence each time, and then, by MODE:
//   segv     writes through a null pointer (SIGSEGV in host code)
//   abort    calls abort() (SIGABRT)
//   handler  as segv, with its own SIGSEGV handler installed (SA_ONSTACK|SA_SIGINFO) before the
//            Vulkan instance: the handler prints a line and _exit(2)s, as Go's runtime reports and exits
//   lost     keeps submitting and waiting until a call fails; on VK_ERROR_DEVICE_LOST it prints the call
//            and exits with 3 (a layer below the one under test makes the driver "lose" the device)
//   exit     returns normally (the control: the same pipelines x3 through the exit flush)
// ROUNDS makes it ROUNDS submissions instead (lost: at most ROUNDS), PAUSE_US microseconds apart, and WAIT_MS bounds
// each fence wait: one that times out prints "vkcrash: submission N did not finish in WAIT_MS ms" and exits with 4
// (a submission the test layer swallowed, as a hung GPU never finishes it). With ROUNDS the device also enables
// timeline semaphores, as ggml-vulkan does, so that the layer's black box follows its progress by submission (and
// its hang watcher sees a stall). For the rotating traces of tests/vulkan/crash.rs, which need a program that runs
// long enough.
// Usage: vkcrash SPIRV_FILE MODE [ROUNDS PAUSE_US [WAIT_MS]]
#define _GNU_SOURCE
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <vulkan/vulkan.h>

#include "vktest.h"


static void own_handler(int sig, siginfo_t *info, void *context) {
    (void)info;
    (void)context;
    static const char line[] = "vkcrash: own handler caught the signal\n";
    (void)sig;
    if (write(2, line, sizeof line - 1) < 0) _exit(4);
    _exit(2);
}

int main(int argc, char **argv) {
    if (argc != 3 && argc != 5 && argc != 6) {
        fprintf(stderr, "usage: %s SPIRV_FILE MODE [ROUNDS PAUSE_US [WAIT_MS]]\n", argv[0]);
        return 2;
    }
    const char *mode = argv[2];
    if (strcmp(mode, "handler") == 0) {
        // An alternate stack, as Go gives every thread.
        static char stack[1 << 16];
        stack_t ss = {.ss_sp = stack, .ss_size = sizeof stack};
        sigaltstack(&ss, NULL);
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_sigaction = own_handler;
        sa.sa_flags = SA_ONSTACK | SA_SIGINFO;
        sigemptyset(&sa.sa_mask);
        sigaction(SIGSEGV, &sa, NULL);
    }
    static uint32_t code[1 << 14];
    size_t code_size = read_spirv(argv[1], code, sizeof code);

    const char *extensions[] = {"VK_EXT_debug_utils"};
    VkApplicationInfo app = {.sType = VK_STRUCTURE_TYPE_APPLICATION_INFO, .apiVersion = VK_API_VERSION_1_2};
    VkInstanceCreateInfo ici = {.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO, .pApplicationInfo = &app,
                                .enabledExtensionCount = 1, .ppEnabledExtensionNames = extensions};
    VkInstance instance;
    CHECK(vkCreateInstance(&ici, NULL, &instance));
    PFN_vkSetDebugUtilsObjectNameEXT set_name =
        (PFN_vkSetDebugUtilsObjectNameEXT)vkGetInstanceProcAddr(instance, "vkSetDebugUtilsObjectNameEXT");
    PFN_vkCmdBeginDebugUtilsLabelEXT begin_label =
        (PFN_vkCmdBeginDebugUtilsLabelEXT)vkGetInstanceProcAddr(instance, "vkCmdBeginDebugUtilsLabelEXT");
    PFN_vkCmdEndDebugUtilsLabelEXT end_label =
        (PFN_vkCmdEndDebugUtilsLabelEXT)vkGetInstanceProcAddr(instance, "vkCmdEndDebugUtilsLabelEXT");
    VkPhysicalDevice physical = first_physical_device(instance);
    float priority = 1.0f;
    VkDeviceQueueCreateInfo qci = {.sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO, .queueFamilyIndex = 0,
                                   .queueCount = 1, .pQueuePriorities = &priority};
    VkPhysicalDeviceVulkan12Features v12 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES,
                                            .timelineSemaphore = VK_TRUE};
    VkDeviceCreateInfo dci = {.sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO, .pNext = argc >= 5 ? &v12 : NULL,
                              .queueCreateInfoCount = 1, .pQueueCreateInfos = &qci};
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
    const char *names[2] = {"alpha_pipeline", "beta_pipeline"};
    VkPipeline pipelines[2];
    for (int i = 0; i < 2; i++) {
        VkComputePipelineCreateInfo cpci = {
            .sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO,
            .stage = {.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO,
                      .stage = VK_SHADER_STAGE_COMPUTE_BIT, .module = module, .pName = "main"},
            .layout = layout};
        CHECK(vkCreateComputePipelines(device, VK_NULL_HANDLE, 1, &cpci, NULL, &pipelines[i]));
        VkDebugUtilsObjectNameInfoEXT name = {.sType = VK_STRUCTURE_TYPE_DEBUG_UTILS_OBJECT_NAME_INFO_EXT,
                                              .objectType = VK_OBJECT_TYPE_PIPELINE,
                                              .objectHandle = (uint64_t)pipelines[i], .pObjectName = names[i]};
        CHECK(set_name(device, &name));
    }
    VkCommandPoolCreateInfo cpi = {.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO, .queueFamilyIndex = 0};
    VkCommandPool pool;
    CHECK(vkCreateCommandPool(device, &cpi, NULL, &pool));
    VkCommandBufferAllocateInfo cbai = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO, .commandPool = pool,
                                        .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY, .commandBufferCount = 1};
    VkCommandBuffer cb;
    CHECK(vkAllocateCommandBuffers(device, &cbai, &cb));
    VkCommandBufferBeginInfo begin = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
    CHECK(vkBeginCommandBuffer(cb, &begin));
    VkDebugUtilsLabelEXT alpha = {.sType = VK_STRUCTURE_TYPE_DEBUG_UTILS_LABEL_EXT, .pLabelName = "ALPHA node.0"};
    VkDebugUtilsLabelEXT beta = {.sType = VK_STRUCTURE_TYPE_DEBUG_UTILS_LABEL_EXT, .pLabelName = "BETA node.1"};
    begin_label(cb, &alpha);
    vkCmdBindPipeline(cb, VK_PIPELINE_BIND_POINT_COMPUTE, pipelines[0]);
    vkCmdDispatch(cb, 4, 1, 1);
    end_label(cb);
    begin_label(cb, &beta);
    vkCmdBindPipeline(cb, VK_PIPELINE_BIND_POINT_COMPUTE, pipelines[1]);
    vkCmdDispatch(cb, 2, 1, 1);
    end_label(cb);
    CHECK(vkEndCommandBuffer(cb));
    VkFenceCreateInfo fci = {.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
    VkFence fence;
    CHECK(vkCreateFence(device, &fci, NULL, &fence));
    VkSubmitInfo si = {.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO, .commandBufferCount = 1, .pCommandBuffers = &cb};
    int rounds = argc >= 5 ? atoi(argv[3]) : strcmp(mode, "lost") == 0 ? 1000 : 3;
    useconds_t pause_us = argc >= 5 ? (useconds_t)atoi(argv[4]) : 0;
    uint64_t wait_ns = argc == 6 ? (uint64_t)atoi(argv[5]) * 1000000 : UINT64_MAX;
    for (int i = 0; i < rounds; i++) {
        if (pause_us > 0) usleep(pause_us);
        VkResult r = vkQueueSubmit(queue, 1, &si, fence);
        const char *call = "vkQueueSubmit";
        if (r == VK_SUCCESS) {
            r = vkWaitForFences(device, 1, &fence, VK_TRUE, wait_ns);
            call = "vkWaitForFences";
        }
        if (r == VK_TIMEOUT) {
            printf("vkcrash: submission %d did not finish in %s ms\n", i + 1, argv[5]);
            return 4;
        }
        if (r == VK_ERROR_DEVICE_LOST) {
            printf("vkcrash: %s returned VK_ERROR_DEVICE_LOST after %d submissions\n", call, i + 1);
            return 3;
        }
        CHECK(r);
        CHECK(vkResetFences(device, 1, &fence));
    }
    printf("vkcrash: %d submissions done, now %s\n", rounds, mode);
    fflush(stdout);
    if (strcmp(mode, "abort") == 0) abort();
    if (strcmp(mode, "segv") == 0 || strcmp(mode, "handler") == 0) {
        volatile int *nowhere = NULL;
        *nowhere = 1;
    }
    vkDestroyFence(device, fence, NULL);
    vkDestroyCommandPool(device, pool, NULL);
    for (int i = 0; i < 2; i++) vkDestroyPipeline(device, pipelines[i], NULL);
    vkDestroyPipelineLayout(device, layout, NULL);
    vkDestroyShaderModule(device, module, NULL);
    vkDestroyDevice(device, NULL);
    vkDestroyInstance(instance, NULL);
    return 0;
}
