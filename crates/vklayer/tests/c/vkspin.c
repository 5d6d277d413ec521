// A Vulkan program whose GPU work stalls, for the black box (tests/vulkan/blackbox.rs). One shader
// (bench/vklayer/spin.comp) makes four compute pipelines, named with vkSetDebugUtilsObjectNameEXT:
// before_a, before_b, spin_pipeline and after_c; only spin_pipeline's push constant makes it spin, on a
// host-visible flag, until the host sets the flag or a bounded loop ends (seconds on lavapipe).
// It enables timeline semaphores, as ggml-vulkan does. Submissions:
//   1: before_a (4,1,1), before_b (2,1,1) in one command buffer; waited for with a fence;
//   2: spin_pipeline (1,1,1);           3: after_c (8,1,1)       (separately, not waited for);
//   or with GROUPED: 2: spin_pipeline, after_c in one command buffer.
// Then, by MODE:
//   hang   waits for submission 3's fence at most SECONDS (argument 3, default 3); if it did not signal (a
//          layer below swallowed the work, as a hung GPU never finishes it), prints so and exits 4 at once;
//          else releases the spin and exits 0
//   segv   sleeps 0.5 s, then writes through a null pointer (SIGSEGV) while the GPU spins
//   lost   waits for submission 3's fence: a layer below ours returns VK_ERROR_DEVICE_LOST from it; prints
//          the call, releases the spin and exits 3
//   exit   releases the spin at once, waits, exits 0 (the control)
//   idle   releases the spin at once, then sleeps SECONDS without asking after its work (as a program that compiles
//          pipelines after a small submission), then waits and exits 0: the GPU is idle, not hung
// Usage: vkspin SPIRV_FILE MODE [SECONDS] [grouped]
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <vulkan/vulkan.h>

#include "vktest.h"


static VkDevice device;
static VkPipelineLayout layout;
static VkDescriptorSet set;

static VkCommandBuffer recorded(VkCommandPool pool, int n, VkPipeline *pipes, const uint32_t *groups,
                                const uint32_t *spin) {
    VkCommandBufferAllocateInfo cbai = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO, .commandPool = pool,
                                        .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY, .commandBufferCount = 1};
    VkCommandBuffer cb;
    CHECK(vkAllocateCommandBuffers(device, &cbai, &cb));
    VkCommandBufferBeginInfo begin = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
    CHECK(vkBeginCommandBuffer(cb, &begin));
    vkCmdBindDescriptorSets(cb, VK_PIPELINE_BIND_POINT_COMPUTE, layout, 0, 1, &set, 0, NULL);
    for (int i = 0; i < n; i++) {
        if (i > 0) {
            // As ggml-vulkan separates dependent nodes.
            VkMemoryBarrier mb = {.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER, .srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT,
                                  .dstAccessMask = VK_ACCESS_SHADER_READ_BIT};
            vkCmdPipelineBarrier(cb, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, 0, 1,
                                 &mb, 0, NULL, 0, NULL);
        }
        vkCmdBindPipeline(cb, VK_PIPELINE_BIND_POINT_COMPUTE, pipes[i]);
        vkCmdPushConstants(cb, layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, 4, &spin[i]);
        vkCmdDispatch(cb, groups[i], 1, 1);
    }
    CHECK(vkEndCommandBuffer(cb));
    return cb;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s SPIRV_FILE MODE [SECONDS] [grouped]\n", argv[0]);
        return 2;
    }
    const char *mode = argv[2];
    double seconds = argc > 3 ? atof(argv[3]) : 3.0;
    int grouped = argc > 4 && strcmp(argv[4], "grouped") == 0;
    static uint32_t code[1 << 16];
    size_t code_size = read_spirv(argv[1], code, sizeof code);

    const char *extensions[] = {"VK_EXT_debug_utils"};
    VkApplicationInfo app = {.sType = VK_STRUCTURE_TYPE_APPLICATION_INFO, .apiVersion = VK_API_VERSION_1_2};
    VkInstanceCreateInfo ici = {.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO, .pApplicationInfo = &app,
                                .enabledExtensionCount = 1, .ppEnabledExtensionNames = extensions};
    VkInstance instance;
    CHECK(vkCreateInstance(&ici, NULL, &instance));
    PFN_vkSetDebugUtilsObjectNameEXT set_name =
        (PFN_vkSetDebugUtilsObjectNameEXT)vkGetInstanceProcAddr(instance, "vkSetDebugUtilsObjectNameEXT");
    VkPhysicalDevice physical = first_physical_device(instance);
    float priority = 1.0f;
    VkDeviceQueueCreateInfo qci = {.sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO, .queueFamilyIndex = 0,
                                   .queueCount = 1, .pQueuePriorities = &priority};
    VkPhysicalDeviceVulkan12Features v12 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES,
                                            .timelineSemaphore = VK_TRUE};
    VkDeviceCreateInfo dci = {.sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO, .pNext = &v12,
                              .queueCreateInfoCount = 1, .pQueueCreateInfos = &qci};
    CHECK(vkCreateDevice(physical, &dci, NULL, &device));
    VkQueue queue;
    vkGetDeviceQueue(device, 0, 0, &queue);

    // The flag the spinning shader watches, in host-visible coherent memory.
    VkPhysicalDeviceMemoryProperties mp;
    vkGetPhysicalDeviceMemoryProperties(physical, &mp);
    uint32_t type = UINT32_MAX;
    for (uint32_t i = 0; i < mp.memoryTypeCount; i++) {
        VkMemoryPropertyFlags want = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
        if ((mp.memoryTypes[i].propertyFlags & want) == want) { type = i; break; }
    }
    if (type == UINT32_MAX) { fprintf(stderr, "no host-visible coherent memory\n"); return 1; }
    VkBufferCreateInfo bci = {.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO, .size = 256,
                              .usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT};
    VkBuffer flag_buffer;
    CHECK(vkCreateBuffer(device, &bci, NULL, &flag_buffer));
    VkMemoryRequirements req;
    vkGetBufferMemoryRequirements(device, flag_buffer, &req);
    VkMemoryAllocateInfo mai = {.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO, .allocationSize = req.size,
                                .memoryTypeIndex = type};
    VkDeviceMemory memory;
    CHECK(vkAllocateMemory(device, &mai, NULL, &memory));
    CHECK(vkBindBufferMemory(device, flag_buffer, memory, 0));
    volatile uint32_t *flag;
    CHECK(vkMapMemory(device, memory, 0, VK_WHOLE_SIZE, 0, (void **)&flag));
    flag[0] = 0;
    flag[1] = 0;

    VkDescriptorSetLayoutBinding binding = {0, VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, 1, VK_SHADER_STAGE_COMPUTE_BIT, NULL};
    VkDescriptorSetLayoutCreateInfo dslci = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO,
                                             .bindingCount = 1, .pBindings = &binding};
    VkDescriptorSetLayout dsl;
    CHECK(vkCreateDescriptorSetLayout(device, &dslci, NULL, &dsl));
    VkPushConstantRange range = {.stageFlags = VK_SHADER_STAGE_COMPUTE_BIT, .size = 4};
    VkPipelineLayoutCreateInfo plci = {.sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO, .setLayoutCount = 1,
                                       .pSetLayouts = &dsl, .pushConstantRangeCount = 1, .pPushConstantRanges = &range};
    CHECK(vkCreatePipelineLayout(device, &plci, NULL, &layout));
    VkDescriptorPoolSize ps = {VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, 1};
    VkDescriptorPoolCreateInfo dpci = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO, .maxSets = 1,
                                       .poolSizeCount = 1, .pPoolSizes = &ps};
    VkDescriptorPool dpool;
    CHECK(vkCreateDescriptorPool(device, &dpci, NULL, &dpool));
    VkDescriptorSetAllocateInfo dsai = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO,
                                        .descriptorPool = dpool, .descriptorSetCount = 1, .pSetLayouts = &dsl};
    CHECK(vkAllocateDescriptorSets(device, &dsai, &set));
    VkDescriptorBufferInfo dbi = {flag_buffer, 0, 256};
    VkWriteDescriptorSet write = {.sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET, .dstSet = set,
                                  .descriptorCount = 1, .descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                                  .pBufferInfo = &dbi};
    vkUpdateDescriptorSets(device, 1, &write, 0, NULL);

    VkShaderModuleCreateInfo smci = {.sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO, .codeSize = code_size,
                                     .pCode = code};
    VkShaderModule module;
    CHECK(vkCreateShaderModule(device, &smci, NULL, &module));
    const char *names[4] = {"before_a", "before_b", "spin_pipeline", "after_c"};
    VkPipeline pipes[4];
    for (int i = 0; i < 4; i++) {
        VkComputePipelineCreateInfo cpci = {
            .sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO,
            .stage = {.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO,
                      .stage = VK_SHADER_STAGE_COMPUTE_BIT, .module = module, .pName = "main"},
            .layout = layout};
        CHECK(vkCreateComputePipelines(device, VK_NULL_HANDLE, 1, &cpci, NULL, &pipes[i]));
        VkDebugUtilsObjectNameInfoEXT name = {.sType = VK_STRUCTURE_TYPE_DEBUG_UTILS_OBJECT_NAME_INFO_EXT,
                                              .objectType = VK_OBJECT_TYPE_PIPELINE,
                                              .objectHandle = (uint64_t)pipes[i], .pObjectName = names[i]};
        CHECK(set_name(device, &name));
    }
    VkCommandPoolCreateInfo cpi = {.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO, .queueFamilyIndex = 0};
    VkCommandPool pool;
    CHECK(vkCreateCommandPool(device, &cpi, NULL, &pool));
    const uint32_t groups[4] = {4, 2, 1, 8};
    const uint32_t spin[4] = {0, 0, 1, 0};
    VkCommandBuffer first = recorded(pool, 2, pipes, groups, spin);
    VkCommandBuffer stall = recorded(pool, grouped ? 2 : 1, pipes + 2, groups + 2, spin + 2);
    VkCommandBuffer after = grouped ? VK_NULL_HANDLE : recorded(pool, 1, pipes + 3, groups + 3, spin + 3);
    VkFenceCreateInfo fci = {.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
    VkFence fences[2];
    CHECK(vkCreateFence(device, &fci, NULL, &fences[0]));
    CHECK(vkCreateFence(device, &fci, NULL, &fences[1]));

    VkSubmitInfo si = {.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO, .commandBufferCount = 1, .pCommandBuffers = &first};
    CHECK(vkQueueSubmit(queue, 1, &si, fences[0]));
    CHECK(vkWaitForFences(device, 1, &fences[0], VK_TRUE, UINT64_MAX));
    si.pCommandBuffers = &stall;
    CHECK(vkQueueSubmit(queue, 1, &si, grouped ? fences[1] : VK_NULL_HANDLE));
    if (!grouped) {
        si.pCommandBuffers = &after;
        CHECK(vkQueueSubmit(queue, 1, &si, fences[1]));
    }
    printf("vkspin: submitted, the GPU spins\n");
    fflush(stdout);

    if (strcmp(mode, "segv") == 0) {
        usleep(500000);
        volatile int *nowhere = NULL;
        *nowhere = 1;
    } else if (strcmp(mode, "hang") == 0) {
        VkResult r = vkWaitForFences(device, 1, &fences[1], VK_TRUE, (uint64_t)(seconds * 1e9));
        if (r == VK_TIMEOUT) {
            printf("vkspin: the work did not finish in %.1f s\n", seconds);
            fflush(stdout);
            _exit(4);
        }
        CHECK(r);
    } else if (strcmp(mode, "idle") == 0) {
        flag[0] = 1;
        usleep((useconds_t)(seconds * 1e6));
    } else if (strcmp(mode, "lost") == 0) {
        VkResult r = vkWaitForFences(device, 1, &fences[1], VK_TRUE, UINT64_MAX);
        if (r == VK_ERROR_DEVICE_LOST) {
            printf("vkspin: vkWaitForFences returned VK_ERROR_DEVICE_LOST\n");
            flag[0] = 1;
            vkDeviceWaitIdle(device);
            return 3;
        }
        CHECK(r);
    }
    flag[0] = 1;
    CHECK(vkWaitForFences(device, 1, &fences[1], VK_TRUE, UINT64_MAX));
    printf("vkspin: done, the spin ran %u rounds\n", flag[1]);
    vkDestroyFence(device, fences[0], NULL);
    vkDestroyFence(device, fences[1], NULL);
    vkDestroyCommandPool(device, pool, NULL);
    for (int i = 0; i < 4; i++) vkDestroyPipeline(device, pipes[i], NULL);
    vkDestroyPipelineLayout(device, layout, NULL);
    vkDestroyShaderModule(device, module, NULL);
    vkDestroyDescriptorPool(device, dpool, NULL);
    vkDestroyDescriptorSetLayout(device, dsl, NULL);
    vkDestroyBuffer(device, flag_buffer, NULL);
    vkFreeMemory(device, memory, NULL);
    vkDestroyDevice(device, NULL);
    vkDestroyInstance(instance, NULL);
    return 0;
}
