// What each way of learning GPU progress costs a decode-shaped stream of work, with no layer in between: the
// question the black box's process-level A/B cannot answer (docs/validation/gpu-2026-12-05-submission-cost,
// session 28: with the black box on, decode on an H100 pays 0.44% more than with it off, and ggml-vulkan records
// about seven command buffers a decode token, so the black box's default, one completion marker at each buffer's
// end, puts seven markers into each token).
//
// A round is one decode token's shape: command buffers of SHAPE's dispatch counts (default ggml-vulkan's for a
// 22-layer TinyLlama-shaped model on lavapipe: 12, 22, 40, 100, 100, 60, 1 — its ramp of small first submissions,
// then up to 100 nodes each), each recorded and submitted at once as ggml does (the GPU runs one while the next is
// recorded), a compute-to-compute barrier between consecutive dispatches (ggml's between dependent nodes), one
// pipeline bound per dispatch, the last submission with a fence the host waits for. What varies between modes is
// only what is added for progress:
//   none          nothing (the baseline);
//   marker_host   vkCmdWriteBufferMarkerAMD at BOTTOM_OF_PIPE at each buffer's end, into host memory that is not
//                 device-local (the layer's choice: it stays readable after a GPU reset), its word reset by the host
//                 before each submission (as the layer does);
//   marker_dev    the same into device-local, host-visible memory (the PCIe BAR), where the driver offers one;
//   marker2_cs    vkCmdWriteBufferMarker2AMD at COMPUTE_SHADER (synchronization2) into the host memory: the write
//                 waits for compute work only;
//   marker_top    one marker at TOP_OF_PIPE at each buffer's start, none at its end;
//   checkpoint    vkCmdSetCheckpointNV at each buffer's end (VK_NV_device_diagnostic_checkpoints);
//   sem_batch     no command added: each vkQueueSubmit carries one more batch that signals a timeline semaphore
//                 (the layer's progress by submissions, BACKSCOPE_VK_MARKERS=none, until session 28);
//   sem_merged    the same semaphore signalled by the application's own batch (no extra batch: the layer's way
//                 since session 28, where the batch's chain allows it).
// Every mode runs on the same device, set up once with every extension and feature it needs that the driver
// offers; modes the driver does not offer are left out with a line on stderr. Modes alternate round by round, their
// order turning each round, after WARMUP rounds of each.
//
// Prints one JSON line per round (stdout) and, on stderr, per mode: the median round time, and the median of the
// per-round differences to `none` per command buffer with a distribution-free 95% interval (order statistics of
// the differences; rounds are paired by position in the turn); the same for the host's part of a round (recording
// and submitting), which tells a command the driver takes long to record from one the GPU takes long to run.
//
// Build: cc -O2 -o vk_marker_cost bench/gpu/vk_marker_cost.c -lvulkan -lm
// Usage: vk_marker_cost SPIRV_FILE ROUNDS [SHAPE]   (SHAPE: dispatch counts, comma-separated, at most 64 buffers)
// Environment: MARKER_COST_MODES="none marker_host ..." (default: all), MARKER_COST_WARMUP (default 20),
// MARKER_COST_GROUPS (workgroups per dispatch, default 1), MARKER_COST_FAULT=1 (enable VK_EXT_device_fault, as the
// layer does, for every mode), MARKER_COST_CHECKPOINTS=1 (enable VK_NV_device_diagnostic_checkpoints where offered,
// for the checkpoint mode; without it that mode is left out), MARKER_COST_MARK_MIN=N (the marker and checkpoint
// modes leave buffers of fewer than N dispatches unmarked: fewer markers, as the layer's
// BACKSCOPE_VK_MARKER_MIN_DISPATCHES gives by counting the dispatches since its last marked buffer; the per-buffer
// figures still divide by every buffer).
#define _GNU_SOURCE
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <vulkan/vulkan.h>

// CHECK, read_spirv, first_physical_device.
#include "../../crates/vklayer/tests/c/vktest.h"

enum Mode { NONE, MARKER_HOST, MARKER_DEV, MARKER2_CS, MARKER_TOP, CHECKPOINT, SEM_BATCH, SEM_MERGED, MODES };
static const char *mode_names[MODES] = {"none",       "marker_host", "marker_dev", "marker2_cs",
                                        "marker_top", "checkpoint",  "sem_batch",  "sem_merged"};
enum { MAX_BUFFERS = 64, MAX_ROUNDS = 100000 };

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int has_extension(const VkExtensionProperties *list, uint32_t n, const char *name) {
    for (uint32_t i = 0; i < n; i++)
        if (strcmp(list[i].extensionName, name) == 0) return 1;
    return 0;
}

static int cmp_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

// The ranks of a distribution-free 95% interval for the median of n values (normal approximation of the binomial).
static void median_interval(int64_t *v, long n, int64_t *lo, int64_t *mid, int64_t *hi) {
    qsort(v, (size_t)n, sizeof *v, cmp_i64);
    double half = 0.98 * sqrt((double)n);
    long l = (long)((double)n / 2 - half), h = (long)((double)n / 2 + half);
    if (l < 0) l = 0;
    if (h > n - 1) h = n - 1;
    *lo = v[l];
    *mid = v[n / 2];
    *hi = v[h];
}

struct Ctx {
    VkDevice device;
    VkQueue queue;
    VkPipeline pipelines[2];
    VkPipelineLayout layout;
    VkCommandPool pool;
    VkCommandBuffer cbs[MAX_BUFFERS];
    VkFence fence;
    VkSemaphore timeline;
    uint64_t timeline_value;
    VkBuffer marker_buffer[2]; // host, device
    volatile uint32_t *marker_words[2];
    PFN_vkCmdWriteBufferMarkerAMD write_marker;
    PFN_vkCmdWriteBufferMarker2AMD write_marker2;
    PFN_vkCmdSetCheckpointNV set_checkpoint;
    uint32_t groups;
    // Buffers of fewer dispatches get no marker or checkpoint (the layer's BACKSCOPE_VK_MARKER_MIN_DISPATCHES).
    uint32_t mark_min;
};

static void barrier(VkCommandBuffer cb) {
    VkMemoryBarrier mb = {.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
                          .srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT,
                          .dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT};
    vkCmdPipelineBarrier(cb, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, 0, 1, &mb, 0,
                         NULL, 0, NULL);
}

// One decode-shaped round in `mode`; returns its wall time in nanoseconds, from the first begin to the fence.
// `host_ns`: the host's part, from the first begin until the last vkQueueSubmit returned (recording and submitting:
// where a driver's slow command would show without the GPU).
static uint64_t run_round(struct Ctx *c, enum Mode mode, const uint32_t *shape, int buffers, int round,
                          uint64_t *host_ns) {
    static const uintptr_t checkpoint_tags[MAX_BUFFERS + 1];
    int memory = mode == MARKER_DEV ? 1 : 0;
    uint64_t t0 = now_ns();
    CHECK(vkResetCommandPool(c->device, c->pool, 0));
    for (int b = 0; b < buffers; b++) {
        VkCommandBuffer cb = c->cbs[b];
        VkCommandBufferBeginInfo begin = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
                                          .flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT};
        CHECK(vkBeginCommandBuffer(cb, &begin));
        // Each buffer its own word (the layer gives each command buffer a slot): [2b] started, [2b+1] completed.
        int marked = shape[b] >= c->mark_min;
        if (mode == MARKER_TOP && marked)
            c->write_marker(cb, VK_PIPELINE_STAGE_TOP_OF_PIPE_BIT, c->marker_buffer[0], 8u * (uint32_t)b,
                            (uint32_t)round + 1);
        for (uint32_t d = 0; d < shape[b]; d++) {
            if (d > 0) barrier(cb);
            vkCmdBindPipeline(cb, VK_PIPELINE_BIND_POINT_COMPUTE, c->pipelines[d & 1]);
            vkCmdPushConstants(cb, c->layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, 4, &d);
            vkCmdDispatch(cb, c->groups, 1, 1);
        }
        switch (marked ? mode : NONE) {
        case MARKER_HOST:
        case MARKER_DEV:
            c->write_marker(cb, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, c->marker_buffer[memory], 8u * (uint32_t)b + 4,
                            (uint32_t)round + 1);
            break;
        case MARKER2_CS:
            c->write_marker2(cb, VK_PIPELINE_STAGE_2_COMPUTE_SHADER_BIT, c->marker_buffer[0], 8u * (uint32_t)b + 4,
                             (uint32_t)round + 1);
            break;
        case CHECKPOINT:
            c->set_checkpoint(cb, &checkpoint_tags[b + 1]);
            break;
        default:
            break;
        }
        CHECK(vkEndCommandBuffer(cb));
        if (mode == MARKER_HOST || mode == MARKER_DEV || mode == MARKER2_CS || mode == MARKER_TOP)
            c->marker_words[memory][2 * b + (mode == MARKER_TOP ? 0 : 1)] = 0;
        VkFence fence = b == buffers - 1 ? c->fence : VK_NULL_HANDLE;
        VkSubmitInfo batches[2] = {
            {.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO, .commandBufferCount = 1, .pCommandBuffers = &c->cbs[b]},
            {.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO}};
        uint64_t value = mode == SEM_BATCH || mode == SEM_MERGED ? ++c->timeline_value : 0;
        VkTimelineSemaphoreSubmitInfo tl = {.sType = VK_STRUCTURE_TYPE_TIMELINE_SEMAPHORE_SUBMIT_INFO,
                                            .signalSemaphoreValueCount = 1,
                                            .pSignalSemaphoreValues = &value};
        uint32_t count = 1;
        if (mode == SEM_BATCH || mode == SEM_MERGED) {
            VkSubmitInfo *s = &batches[mode == SEM_BATCH ? 1 : 0];
            s->pNext = &tl;
            s->signalSemaphoreCount = 1;
            s->pSignalSemaphores = &c->timeline;
            count = mode == SEM_BATCH ? 2 : 1;
        }
        CHECK(vkQueueSubmit(c->queue, count, batches, fence));
    }
    *host_ns = now_ns() - t0;
    CHECK(vkWaitForFences(c->device, 1, &c->fence, VK_TRUE, UINT64_MAX));
    uint64_t t1 = now_ns();
    CHECK(vkResetFences(c->device, 1, &c->fence));
    // The progress each mode wrote is there (a mode that wrote nothing would time nothing).
    if (mode == MARKER_HOST || mode == MARKER_DEV || mode == MARKER2_CS || mode == MARKER_TOP) {
        for (int b = 0; b < buffers; b++) {
            uint32_t w = c->marker_words[memory][2 * b + (mode == MARKER_TOP ? 0 : 1)];
            if (shape[b] >= c->mark_min && w != (uint32_t)round + 1) {
                fprintf(stderr, "%s: buffer %d's marker reads %u after the fence, %u expected\n", mode_names[mode], b,
                        w, (uint32_t)round + 1);
                exit(1);
            }
        }
    }
    if (mode == SEM_BATCH || mode == SEM_MERGED) {
        // Every submission's signal arrives (after the round's time is taken: lavapipe's fence can signal before the
        // last timeline value is visible, one in four rounds on a loaded machine).
        VkSemaphoreWaitInfo wait = {.sType = VK_STRUCTURE_TYPE_SEMAPHORE_WAIT_INFO,
                                    .semaphoreCount = 1,
                                    .pSemaphores = &c->timeline,
                                    .pValues = &c->timeline_value};
        VkResult waited = vkWaitSemaphores(c->device, &wait, 1000000000u);
        if (waited != VK_SUCCESS) {
            uint64_t v = 0;
            vkGetSemaphoreCounterValue(c->device, c->timeline, &v);
            fprintf(stderr, "%s: the semaphore reads %llu a second after the fence, %llu expected (%d)\n",
                    mode_names[mode], (unsigned long long)v, (unsigned long long)c->timeline_value, waited);
            exit(1);
        }
    }
    return t1 - t0;
}

// A host-visible, coherent buffer of `size` bytes in the best memory type with (`want`) or without device-local.
static int marker_memory(VkPhysicalDevice physical, struct Ctx *c, int device_local, VkBuffer *buffer,
                         volatile uint32_t **words) {
    VkBufferCreateInfo bci = {.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO,
                              .size = 8 * MAX_BUFFERS,
                              .usage = VK_BUFFER_USAGE_TRANSFER_DST_BIT | VK_BUFFER_USAGE_STORAGE_BUFFER_BIT};
    CHECK(vkCreateBuffer(c->device, &bci, NULL, buffer));
    VkMemoryRequirements req;
    vkGetBufferMemoryRequirements(c->device, *buffer, &req);
    VkPhysicalDeviceMemoryProperties props;
    vkGetPhysicalDeviceMemoryProperties(physical, &props);
    int best = -1, best_rank = -1;
    for (uint32_t i = 0; i < props.memoryTypeCount; i++) {
        VkMemoryPropertyFlags f = props.memoryTypes[i].propertyFlags;
        VkMemoryPropertyFlags need = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
        if (!(req.memoryTypeBits & (1u << i)) || (f & need) != need) continue;
        if (f & (VK_MEMORY_PROPERTY_PROTECTED_BIT | VK_MEMORY_PROPERTY_DEVICE_COHERENT_BIT_AMD)) continue;
        if (!!(f & VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT) != device_local) continue;
        int rank = (f & VK_MEMORY_PROPERTY_HOST_CACHED_BIT) ? 1 : 0;
        if (rank > best_rank) best = (int)i, best_rank = rank;
    }
    if (best < 0) {
        vkDestroyBuffer(c->device, *buffer, NULL);
        return 0;
    }
    VkMemoryAllocateInfo mai = {.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO,
                                .allocationSize = req.size,
                                .memoryTypeIndex = (uint32_t)best};
    VkDeviceMemory memory;
    CHECK(vkAllocateMemory(c->device, &mai, NULL, &memory));
    CHECK(vkBindBufferMemory(c->device, *buffer, memory, 0));
    void *p;
    CHECK(vkMapMemory(c->device, memory, 0, VK_WHOLE_SIZE, 0, &p));
    memset(p, 0, 8 * MAX_BUFFERS);
    *words = p;
    fprintf(stderr, "marker memory %s: type %d, flags 0x%x\n", device_local ? "device" : "host", best,
            props.memoryTypes[best].propertyFlags);
    return 1;
}

int main(int argc, char **argv) {
    if (argc != 3 && argc != 4) {
        fprintf(stderr, "usage: %s SPIRV_FILE ROUNDS [SHAPE]\n", argv[0]);
        return 2;
    }
    long rounds = atol(argv[2]);
    if (rounds < 1 || rounds > MAX_ROUNDS) {
        fprintf(stderr, "ROUNDS=%s: 1 to %d expected\n", argv[2], MAX_ROUNDS);
        return 2;
    }
    uint32_t shape[MAX_BUFFERS];
    int buffers = 0;
    const char *shape_text = argc == 4 ? argv[3] : "12,22,40,100,100,60,1";
    for (const char *p = shape_text; *p;) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 1 || v > 100000 || buffers == MAX_BUFFERS || (*end && *end != ',')) {
            fprintf(stderr, "SHAPE=%s: up to %d comma-separated dispatch counts (1 to 100000) expected\n", shape_text,
                    MAX_BUFFERS);
            return 2;
        }
        shape[buffers++] = (uint32_t)v;
        p = *end ? end + 1 : end;
    }
    const char *warmup_env = getenv("MARKER_COST_WARMUP");
    long warmup = warmup_env ? atol(warmup_env) : 20;
    const char *groups_env = getenv("MARKER_COST_GROUPS");
    static uint32_t code[1 << 16];
    size_t code_size = read_spirv(argv[1], code, sizeof code);

    VkApplicationInfo app = {.sType = VK_STRUCTURE_TYPE_APPLICATION_INFO, .apiVersion = VK_API_VERSION_1_3};
    VkInstanceCreateInfo ici = {.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO, .pApplicationInfo = &app};
    VkInstance instance;
    CHECK(vkCreateInstance(&ici, NULL, &instance));
    VkPhysicalDevice physical = first_physical_device(instance);
    VkPhysicalDeviceProperties pp;
    vkGetPhysicalDeviceProperties(physical, &pp);
    fprintf(stderr, "device: %s, driver 0x%x\n", pp.deviceName, pp.driverVersion);

    uint32_t ext_count = 0;
    CHECK(vkEnumerateDeviceExtensionProperties(physical, NULL, &ext_count, NULL));
    VkExtensionProperties *exts = calloc(ext_count, sizeof *exts);
    CHECK(vkEnumerateDeviceExtensionProperties(physical, NULL, &ext_count, exts));
    const char *enabled[4];
    uint32_t enabled_count = 0;
    int markers = has_extension(exts, ext_count, "VK_AMD_buffer_marker");
    // Checkpoints only when asked for: enabling the extension may change what the driver does for every submission,
    // and the layer never enables it, so the other modes' baseline stays the layer's device.
    const char *checkpoints_env = getenv("MARKER_COST_CHECKPOINTS");
    int checkpoints = checkpoints_env && strcmp(checkpoints_env, "1") == 0 &&
                      has_extension(exts, ext_count, "VK_NV_device_diagnostic_checkpoints");
    const char *fault_env = getenv("MARKER_COST_FAULT");
    int fault = fault_env && strcmp(fault_env, "1") == 0 && has_extension(exts, ext_count, "VK_EXT_device_fault");
    if (markers) enabled[enabled_count++] = "VK_AMD_buffer_marker";
    if (checkpoints) enabled[enabled_count++] = "VK_NV_device_diagnostic_checkpoints";
    if (fault) enabled[enabled_count++] = "VK_EXT_device_fault";

    VkPhysicalDeviceFaultFeaturesEXT fault_features = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FAULT_FEATURES_EXT};
    VkPhysicalDeviceVulkan13Features f13 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_3_FEATURES,
                                            .pNext = fault ? &fault_features : NULL};
    VkPhysicalDeviceVulkan12Features f12 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES,
                                            .pNext = &f13};
    VkPhysicalDeviceFeatures2 features = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, .pNext = &f12};
    vkGetPhysicalDeviceFeatures2(physical, &features);
    // Only what the modes need, and the device-fault feature when asked for.
    VkPhysicalDeviceFaultFeaturesEXT want_fault = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FAULT_FEATURES_EXT,
                                                   .deviceFault = fault_features.deviceFault};
    VkPhysicalDeviceVulkan13Features want13 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_3_FEATURES,
                                               .pNext = fault ? &want_fault : NULL,
                                               .synchronization2 = f13.synchronization2};
    VkPhysicalDeviceVulkan12Features want12 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES,
                                               .pNext = &want13,
                                               .timelineSemaphore = f12.timelineSemaphore};
    int have[MODES] = {1,           markers,     markers, markers && f13.synchronization2, markers,
                       checkpoints, f12.timelineSemaphore, f12.timelineSemaphore};

    uint32_t family_count = 0;
    vkGetPhysicalDeviceQueueFamilyProperties(physical, &family_count, NULL);
    VkQueueFamilyProperties families[16];
    if (family_count > 16) family_count = 16;
    vkGetPhysicalDeviceQueueFamilyProperties(physical, &family_count, families);
    uint32_t family = UINT32_MAX;
    for (uint32_t i = 0; i < family_count && family == UINT32_MAX; i++)
        if (families[i].queueFlags & VK_QUEUE_COMPUTE_BIT) family = i;
    if (family == UINT32_MAX) {
        fprintf(stderr, "no compute queue\n");
        return 1;
    }
    float priority = 1.0f;
    VkDeviceQueueCreateInfo qci = {.sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO,
                                   .queueFamilyIndex = family,
                                   .queueCount = 1,
                                   .pQueuePriorities = &priority};
    VkDeviceCreateInfo dci = {.sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO,
                              .pNext = &want12,
                              .queueCreateInfoCount = 1,
                              .pQueueCreateInfos = &qci,
                              .enabledExtensionCount = enabled_count,
                              .ppEnabledExtensionNames = enabled};
    const char *mark_min_env = getenv("MARKER_COST_MARK_MIN");
    struct Ctx c = {.groups = groups_env ? (uint32_t)atol(groups_env) : 1,
                    .mark_min = mark_min_env ? (uint32_t)atol(mark_min_env) : 1};
    if (c.groups < 1) c.groups = 1;
    CHECK(vkCreateDevice(physical, &dci, NULL, &c.device));
    vkGetDeviceQueue(c.device, family, 0, &c.queue);
    c.write_marker = (PFN_vkCmdWriteBufferMarkerAMD)vkGetDeviceProcAddr(c.device, "vkCmdWriteBufferMarkerAMD");
    c.write_marker2 = (PFN_vkCmdWriteBufferMarker2AMD)vkGetDeviceProcAddr(c.device, "vkCmdWriteBufferMarker2AMD");
    c.set_checkpoint = (PFN_vkCmdSetCheckpointNV)vkGetDeviceProcAddr(c.device, "vkCmdSetCheckpointNV");
    if (!c.write_marker) have[MARKER_HOST] = have[MARKER_DEV] = have[MARKER_TOP] = 0;
    if (!c.write_marker2) have[MARKER2_CS] = 0;
    if (!c.set_checkpoint) have[CHECKPOINT] = 0;
    if (have[MARKER_HOST] && !marker_memory(physical, &c, 0, &c.marker_buffer[0], &c.marker_words[0]))
        have[MARKER_HOST] = have[MARKER2_CS] = have[MARKER_TOP] = 0;
    if (have[MARKER_DEV] && !marker_memory(physical, &c, 1, &c.marker_buffer[1], &c.marker_words[1]))
        have[MARKER_DEV] = 0;

    VkShaderModuleCreateInfo smci = {.sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO,
                                     .codeSize = code_size,
                                     .pCode = code};
    VkShaderModule module;
    CHECK(vkCreateShaderModule(c.device, &smci, NULL, &module));
    VkPushConstantRange range = {.stageFlags = VK_SHADER_STAGE_COMPUTE_BIT, .size = 4};
    VkPipelineLayoutCreateInfo plci = {.sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO,
                                       .pushConstantRangeCount = 1,
                                       .pPushConstantRanges = &range};
    CHECK(vkCreatePipelineLayout(c.device, &plci, NULL, &c.layout));
    for (int i = 0; i < 2; i++) {
        VkComputePipelineCreateInfo cpci = {
            .sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO,
            .stage = {.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO,
                      .stage = VK_SHADER_STAGE_COMPUTE_BIT,
                      .module = module,
                      .pName = "main"},
            .layout = c.layout};
        CHECK(vkCreateComputePipelines(c.device, VK_NULL_HANDLE, 1, &cpci, NULL, &c.pipelines[i]));
    }
    VkCommandPoolCreateInfo cpi = {.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO, .queueFamilyIndex = family};
    CHECK(vkCreateCommandPool(c.device, &cpi, NULL, &c.pool));
    VkCommandBufferAllocateInfo cbai = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO,
                                        .commandPool = c.pool,
                                        .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY,
                                        .commandBufferCount = (uint32_t)buffers};
    CHECK(vkAllocateCommandBuffers(c.device, &cbai, c.cbs));
    VkFenceCreateInfo fci = {.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
    CHECK(vkCreateFence(c.device, &fci, NULL, &c.fence));
    if (have[SEM_BATCH]) {
        VkSemaphoreTypeCreateInfo type = {.sType = VK_STRUCTURE_TYPE_SEMAPHORE_TYPE_CREATE_INFO,
                                          .semaphoreType = VK_SEMAPHORE_TYPE_TIMELINE};
        VkSemaphoreCreateInfo sci = {.sType = VK_STRUCTURE_TYPE_SEMAPHORE_CREATE_INFO, .pNext = &type};
        CHECK(vkCreateSemaphore(c.device, &sci, NULL, &c.timeline));
    }

    // The modes asked for, in the order given; those the driver does not offer are left out.
    enum Mode modes[MODES];
    int mode_count = 0;
    const char *asked = getenv("MARKER_COST_MODES");
    for (int m = 0; m < MODES; m++) {
        int wanted = !asked;
        if (asked) {
            const char *p = strstr(asked, mode_names[m]);
            size_t len = strlen(mode_names[m]);
            while (p && ((p != asked && p[-1] != ' ' && p[-1] != ',') || (p[len] && p[len] != ' ' && p[len] != ',')))
                p = strstr(p + 1, mode_names[m]);
            wanted = p != NULL;
        }
        if (!wanted) continue;
        if (!have[m]) {
            fprintf(stderr, "%s: not offered by this driver, left out\n", mode_names[m]);
            continue;
        }
        modes[mode_count++] = (enum Mode)m;
    }
    if (mode_count == 0 || modes[0] != NONE) {
        fprintf(stderr, "the modes must include none (the baseline)\n");
        return 2;
    }
    int64_t *times = calloc((size_t)(rounds * mode_count), sizeof *times);
    int64_t *host_times = calloc((size_t)(rounds * mode_count), sizeof *host_times);
    int64_t *diffs = calloc((size_t)rounds, sizeof *diffs);
    if (!times || !host_times || !diffs) return 1;
    uint64_t host;
    for (long w = 0; w < warmup; w++)
        for (int i = 0; i < mode_count; i++) run_round(&c, modes[i], shape, buffers, (int)w, &host);
    for (long r = 0; r < rounds; r++) {
        for (int k = 0; k < mode_count; k++) {
            int i = (int)((k + r) % mode_count);
            uint64_t ns = run_round(&c, modes[i], shape, buffers, (int)(warmup + r), &host);
            times[r * mode_count + i] = (int64_t)ns;
            host_times[r * mode_count + i] = (int64_t)host;
            printf("{\"round\":%ld,\"mode\":\"%s\",\"buffers\":%d,\"ns\":%llu,\"host_ns\":%llu}\n", r,
                   mode_names[modes[i]], buffers, (unsigned long long)ns, (unsigned long long)host);
        }
    }
    uint32_t dispatches = 0;
    for (int b = 0; b < buffers; b++) dispatches += shape[b];
    int marked = 0;
    for (int b = 0; b < buffers; b++) marked += shape[b] >= c.mark_min;
    fprintf(stderr, "%ld rounds of %d buffers, %u dispatches (%s), %u workgroup(s) each; %d buffers marked\n", rounds,
            buffers, dispatches, shape_text, c.groups, marked);
    // Per mode: the round's wall time and the host's part, each as a median and as the median of the per-round
    // differences to `none`, per command buffer.
    for (int which = 0; which < 2; which++) {
        int64_t *t = which ? host_times : times;
        int64_t none_mid = 0;
        fprintf(stderr, "%s\n", which ? "host (recording and submitting):" : "round (first begin to the fence):");
        for (int i = 0; i < mode_count; i++) {
            int64_t lo, mid, hi, round_mid;
            for (long r = 0; r < rounds; r++) diffs[r] = t[r * mode_count + i];
            median_interval(diffs, rounds, &lo, &round_mid, &hi);
            if (i == 0) none_mid = round_mid;
            for (long r = 0; r < rounds; r++) diffs[r] = t[r * mode_count + i] - t[r * mode_count];
            median_interval(diffs, rounds, &lo, &mid, &hi);
            fprintf(stderr, "  %-12s %8.1f us   vs none per buffer %+7.3f us [%+7.3f, %+7.3f]   (%+.2f%% of none's)\n",
                    mode_names[modes[i]], (double)round_mid / 1e3, (double)mid / 1e3 / buffers,
                    (double)lo / 1e3 / buffers, (double)hi / 1e3 / buffers, 100.0 * (double)mid / (double)none_mid);
        }
    }
    vkDeviceWaitIdle(c.device);
    vkDestroyDevice(c.device, NULL);
    vkDestroyInstance(instance, NULL);
    return 0;
}
