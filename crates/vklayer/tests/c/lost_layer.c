// A test Vulkan layer that makes the device "lost" or "hung": every call passes through, except that
// - the LOST_AFTER-th vkWaitForFences (and every later one) returns VK_ERROR_DEVICE_LOST without
//   reaching the driver (default: the 2nd);
// - with STALL_FROM=N, the N-th vkQueueSubmit and every later one are swallowed: they return
//   VK_SUCCESS and never reach the driver, as work a hung GPU never finishes (its fences and
//   semaphores are never signalled).
// Enabled below the backscope layer (VK_INSTANCE_LAYERS lists it after it), so the backscope layer
// sees the error come back from the call it forwarded (tests/vulkan_crash.rs, tests/vulkan_blackbox.rs).
#include <stdlib.h>
#include <string.h>
#include <vulkan/vk_layer.h>
#include <vulkan/vulkan.h>

#define EXPORT __attribute__((visibility("default")))

static PFN_vkGetInstanceProcAddr next_gipa;
static PFN_vkGetDeviceProcAddr next_gdpa;
static PFN_vkWaitForFences next_wait;
static PFN_vkQueueSubmit next_submit;
static int waits;
static int submits;

static VKAPI_ATTR VkResult VKAPI_CALL queue_submit(VkQueue queue, uint32_t count, const VkSubmitInfo *infos,
                                                   VkFence fence) {
    const char *from = getenv("STALL_FROM");
    if (from && ++submits >= atoi(from)) return VK_SUCCESS;
    return next_submit(queue, count, infos, fence);
}

static VKAPI_ATTR VkResult VKAPI_CALL wait_for_fences(VkDevice device, uint32_t count, const VkFence *fences,
                                                      VkBool32 all, uint64_t timeout) {
    const char *after = getenv("LOST_AFTER");
    if (++waits >= (after ? atoi(after) : 2)) return VK_ERROR_DEVICE_LOST;
    return next_wait(device, count, fences, all, timeout);
}

static VKAPI_ATTR VkResult VKAPI_CALL create_instance(const VkInstanceCreateInfo *info,
                                                      const VkAllocationCallbacks *allocator, VkInstance *out) {
    VkLayerInstanceCreateInfo *link = (VkLayerInstanceCreateInfo *)info->pNext;
    while (link && !(link->sType == VK_STRUCTURE_TYPE_LOADER_INSTANCE_CREATE_INFO && link->function == VK_LAYER_LINK_INFO))
        link = (VkLayerInstanceCreateInfo *)link->pNext;
    if (!link) return VK_ERROR_INITIALIZATION_FAILED;
    next_gipa = link->u.pLayerInfo->pfnNextGetInstanceProcAddr;
    link->u.pLayerInfo = link->u.pLayerInfo->pNext;
    PFN_vkCreateInstance create = (PFN_vkCreateInstance)next_gipa(VK_NULL_HANDLE, "vkCreateInstance");
    return create(info, allocator, out);
}

static VKAPI_ATTR VkResult VKAPI_CALL create_device(VkPhysicalDevice physical, const VkDeviceCreateInfo *info,
                                                    const VkAllocationCallbacks *allocator, VkDevice *out) {
    VkLayerDeviceCreateInfo *link = (VkLayerDeviceCreateInfo *)info->pNext;
    while (link && !(link->sType == VK_STRUCTURE_TYPE_LOADER_DEVICE_CREATE_INFO && link->function == VK_LAYER_LINK_INFO))
        link = (VkLayerDeviceCreateInfo *)link->pNext;
    if (!link) return VK_ERROR_INITIALIZATION_FAILED;
    PFN_vkGetInstanceProcAddr gipa = link->u.pLayerInfo->pfnNextGetInstanceProcAddr;
    next_gdpa = link->u.pLayerInfo->pfnNextGetDeviceProcAddr;
    link->u.pLayerInfo = link->u.pLayerInfo->pNext;
    PFN_vkCreateDevice create = (PFN_vkCreateDevice)gipa(VK_NULL_HANDLE, "vkCreateDevice");
    VkResult r = create(physical, info, allocator, out);
    if (r == VK_SUCCESS) {
        next_wait = (PFN_vkWaitForFences)next_gdpa(*out, "vkWaitForFences");
        next_submit = (PFN_vkQueueSubmit)next_gdpa(*out, "vkQueueSubmit");
    }
    return r;
}

static VKAPI_ATTR PFN_vkVoidFunction VKAPI_CALL get_device_proc_addr(VkDevice device, const char *name) {
    if (strcmp(name, "vkGetDeviceProcAddr") == 0) return (PFN_vkVoidFunction)get_device_proc_addr;
    if (strcmp(name, "vkWaitForFences") == 0) return (PFN_vkVoidFunction)wait_for_fences;
    if (strcmp(name, "vkQueueSubmit") == 0) return (PFN_vkVoidFunction)queue_submit;
    return next_gdpa(device, name);
}

static VKAPI_ATTR PFN_vkVoidFunction VKAPI_CALL get_instance_proc_addr(VkInstance instance, const char *name) {
    if (strcmp(name, "vkGetInstanceProcAddr") == 0) return (PFN_vkVoidFunction)get_instance_proc_addr;
    if (strcmp(name, "vkCreateInstance") == 0) return (PFN_vkVoidFunction)create_instance;
    if (strcmp(name, "vkCreateDevice") == 0) return (PFN_vkVoidFunction)create_device;
    if (strcmp(name, "vkGetDeviceProcAddr") == 0) return (PFN_vkVoidFunction)get_device_proc_addr;
    if (strcmp(name, "vkWaitForFences") == 0) return (PFN_vkVoidFunction)wait_for_fences;
    if (strcmp(name, "vkQueueSubmit") == 0) return (PFN_vkVoidFunction)queue_submit;
    return next_gipa(instance, name);
}

EXPORT VKAPI_ATTR VkResult VKAPI_CALL vkNegotiateLoaderLayerInterfaceVersion(VkNegotiateLayerInterface *n) {
    if (n->loaderLayerInterfaceVersion < 2) return VK_ERROR_INITIALIZATION_FAILED;
    n->loaderLayerInterfaceVersion = 2;
    n->pfnGetInstanceProcAddr = get_instance_proc_addr;
    n->pfnGetDeviceProcAddr = get_device_proc_addr;
    n->pfnGetPhysicalDeviceProcAddr = NULL;
    return VK_SUCCESS;
}
