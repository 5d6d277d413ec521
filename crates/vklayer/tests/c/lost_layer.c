// A test Vulkan layer that makes the device "lost" or "hung": every call passes through, except that
// - the LOST_AFTER-th vkWaitForFences (and every later one) returns VK_ERROR_DEVICE_LOST without
//   reaching the driver (default: the 2nd);
// - with STALL_FROM=N, the N-th vkQueueSubmit and every later one are swallowed: they return
//   VK_SUCCESS and never reach the driver, as work a hung GPU never finishes (its fences and
//   semaphores are never signalled).
// - with FAULT_DESCRIPTION set, it offers VK_EXT_device_fault (the extension and its deviceFault feature) on every
//   physical device, strips both from vkCreateDevice before the driver sees them, and answers
//   vkGetDeviceFaultInfoEXT as a driver would after a loss: that description, one write fault at FAULT_ADDRESS
//   (default 0xdead0000, to 4096 bytes) and one vendor entry ("test vendor fault", code 0x31, data 0x1), as RADV and
//   NVIDIA's driver answer it for a GPU page fault.
// - with BUFFER_MARKERS=1, it offers VK_AMD_buffer_marker on every physical device, strips it from vkCreateDevice,
//   and records vkCmdWriteBufferMarkerAMD as a vkCmdFillBuffer of the marker's word. lavapipe runs a queue's commands
//   one after another, each to its end, so the word is written when everything recorded before it finished (and
//   before anything after it started), as the extension's BOTTOM_OF_PIPE and TOP_OF_PIPE writes are: the black box's
//   marker paths run on lavapipe, with a real spin (on a GPU, a fill may overlap earlier dispatches: not a stand-in
//   for markers there).
// - with SUBMITS_LOG=PATH, it appends one line per vkQueueSubmit to PATH, what reaches the driver: `batches B
//   buffers C signals S timeline T` (C and S of the last batch; T: the signal values of a VkTimelineSemaphoreSubmitInfo
//   at the head of its chain, `-` without one), so that a test sees which batch the layer above signals its semaphore
//   with.
// Enabled below the backscope layer (VK_INSTANCE_LAYERS lists it after it), so the backscope layer
// sees the error come back from the call it forwarded (tests/vulkan/crash.rs, tests/vulkan/blackbox.rs).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vulkan/vk_layer.h>
#include <vulkan/vulkan.h>

#define EXPORT __attribute__((visibility("default")))

static PFN_vkGetInstanceProcAddr next_gipa;
static PFN_vkGetDeviceProcAddr next_gdpa;
static PFN_vkWaitForFences next_wait;
static PFN_vkQueueSubmit next_submit;
static PFN_vkEnumerateDeviceExtensionProperties next_enumerate;
static PFN_vkGetPhysicalDeviceFeatures2 next_features2, next_features2_khr;
static PFN_vkCmdFillBuffer next_fill;
static int waits;
static int submits;

static VKAPI_ATTR VkResult VKAPI_CALL queue_submit(VkQueue queue, uint32_t count, const VkSubmitInfo *infos,
                                                   VkFence fence) {
    const char *log = getenv("SUBMITS_LOG");
    FILE *f = log && count > 0 ? fopen(log, "a") : NULL;
    if (f) {
        const VkSubmitInfo *last = &infos[count - 1];
        fprintf(f, "batches %u buffers %u signals %u timeline", count, last->commandBufferCount,
                last->signalSemaphoreCount);
        const VkTimelineSemaphoreSubmitInfo *t = last->pNext;
        if (t && t->sType == VK_STRUCTURE_TYPE_TIMELINE_SEMAPHORE_SUBMIT_INFO) {
            for (uint32_t i = 0; i < t->signalSemaphoreValueCount; i++)
                fprintf(f, "%s%llu", i ? "," : " ", (unsigned long long)t->pSignalSemaphoreValues[i]);
            if (t->signalSemaphoreValueCount == 0) fprintf(f, " none");
        } else {
            fprintf(f, " -");
        }
        fprintf(f, "\n");
        fclose(f);
    }
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
    VkResult r = create(info, allocator, out);
    // Resolved now: once the instance is made, the loader's terminator answers instance commands from the
    // instance's own chain, which starts above this layer (asking later returns this layer's functions).
    if (r == VK_SUCCESS) {
        next_enumerate = (PFN_vkEnumerateDeviceExtensionProperties)next_gipa(*out, "vkEnumerateDeviceExtensionProperties");
        next_features2 = (PFN_vkGetPhysicalDeviceFeatures2)next_gipa(*out, "vkGetPhysicalDeviceFeatures2");
        next_features2_khr = (PFN_vkGetPhysicalDeviceFeatures2)next_gipa(*out, "vkGetPhysicalDeviceFeatures2KHR");
    }
    return r;
}

static const char FAULT_EXTENSION[] = "VK_EXT_device_fault";
static const char MARKER_EXTENSION[] = "VK_AMD_buffer_marker";

static int fault_offered(void) { return getenv("FAULT_DESCRIPTION") != NULL; }

static int markers_offered(void) {
    const char *v = getenv("BUFFER_MARKERS");
    return v && strcmp(v, "1") == 0;
}

// The extensions this layer offers on top of the driver's, with their spec versions: how many (at most 2).
static uint32_t offered(const char *names[2], uint32_t versions[2]) {
    uint32_t k = 0;
    if (fault_offered()) names[k] = FAULT_EXTENSION, versions[k++] = 2;
    if (markers_offered()) names[k] = MARKER_EXTENSION, versions[k++] = 1;
    return k;
}

static VKAPI_ATTR VkResult VKAPI_CALL enumerate_device_extensions(VkPhysicalDevice physical, const char *layer,
                                                                  uint32_t *count, VkExtensionProperties *props) {
    PFN_vkEnumerateDeviceExtensionProperties next = next_enumerate;
    const char *names[2];
    uint32_t versions[2];
    uint32_t k = offered(names, versions);
    if (k == 0 || layer) return next(physical, layer, count, props);
    uint32_t n = 0;
    VkResult r = next(physical, NULL, &n, NULL);
    if (r != VK_SUCCESS) return r;
    if (!props) {
        *count = n + k;
        return VK_SUCCESS;
    }
    if (*count < n + k) return next(physical, NULL, count, props) == VK_SUCCESS ? VK_INCOMPLETE : r;
    r = next(physical, NULL, &n, props);
    if (r != VK_SUCCESS) return r;
    for (uint32_t i = 0; i < k; i++) {
        memset(&props[n + i], 0, sizeof props[n + i]);
        strcpy(props[n + i].extensionName, names[i]);
        props[n + i].specVersion = versions[i];
    }
    *count = n + k;
    return VK_SUCCESS;
}

// vkCmdWriteBufferMarkerAMD on lavapipe: the 4 bytes at `offset` filled with `marker`, in the command stream's order.
static VKAPI_ATTR void VKAPI_CALL write_buffer_marker(VkCommandBuffer cb, VkPipelineStageFlagBits stage,
                                                      VkBuffer buffer, VkDeviceSize offset, uint32_t marker) {
    (void)stage;
    next_fill(cb, buffer, offset, 4, marker);
}

static void offer_fault_feature(VkPhysicalDeviceFeatures2 *features) {
    if (!fault_offered()) return;
    for (VkBaseOutStructure *s = (VkBaseOutStructure *)features->pNext; s; s = s->pNext)
        if (s->sType == VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FAULT_FEATURES_EXT) {
            ((VkPhysicalDeviceFaultFeaturesEXT *)s)->deviceFault = VK_TRUE;
            ((VkPhysicalDeviceFaultFeaturesEXT *)s)->deviceFaultVendorBinary = VK_FALSE;
        }
}

static VKAPI_ATTR void VKAPI_CALL get_features2(VkPhysicalDevice physical, VkPhysicalDeviceFeatures2 *features) {
    next_features2(physical, features);
    offer_fault_feature(features);
}

static VKAPI_ATTR void VKAPI_CALL get_features2_khr(VkPhysicalDevice physical, VkPhysicalDeviceFeatures2 *features) {
    (next_features2_khr ? next_features2_khr : next_features2)(physical, features);
    offer_fault_feature(features);
}

static VKAPI_ATTR VkResult VKAPI_CALL get_device_fault_info(VkDevice device, VkDeviceFaultCountsEXT *counts,
                                                            VkDeviceFaultInfoEXT *info) {
    (void)device;
    const char *description = getenv("FAULT_DESCRIPTION");
    const char *address = getenv("FAULT_ADDRESS");
    if (!info) {
        counts->addressInfoCount = 1;
        counts->vendorInfoCount = 1;
        counts->vendorBinarySize = 0;
        return VK_SUCCESS;
    }
    memset(info->description, 0, sizeof info->description);
    strncpy(info->description, description ? description : "", sizeof info->description - 1);
    VkResult r = VK_SUCCESS;
    if (counts->addressInfoCount >= 1 && info->pAddressInfos) {
        info->pAddressInfos[0].addressType = VK_DEVICE_FAULT_ADDRESS_TYPE_WRITE_INVALID_EXT;
        info->pAddressInfos[0].reportedAddress = address ? strtoull(address, NULL, 0) : 0xdead0000ull;
        info->pAddressInfos[0].addressPrecision = 4096;
        counts->addressInfoCount = 1;
    } else {
        counts->addressInfoCount = 0;
        r = VK_INCOMPLETE;
    }
    if (counts->vendorInfoCount >= 1 && info->pVendorInfos) {
        memset(info->pVendorInfos[0].description, 0, sizeof info->pVendorInfos[0].description);
        strcpy(info->pVendorInfos[0].description, "test vendor fault");
        info->pVendorInfos[0].vendorFaultCode = 0x31;
        info->pVendorInfos[0].vendorFaultData = 0x1;
        counts->vendorInfoCount = 1;
    } else {
        counts->vendorInfoCount = 0;
        r = VK_INCOMPLETE;
    }
    counts->vendorBinarySize = 0;
    return r;
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
    // What this layer offers, the driver below may not know: the fault extension and its feature, the marker
    // extension. Those it offers are taken out of what the driver is given (the feature structure unlinked from the
    // chain for the call, then linked back); what it does not offer passes through, so that on a driver with its own
    // markers or fault reports (NVIDIA's, RADV) the layer above gets the driver's.
    int own_fault = fault_offered(), own_markers = markers_offered();
    VkDeviceCreateInfo copy = *info;
    const char *names[64];
    uint32_t n = 0;
    for (uint32_t i = 0; i < info->enabledExtensionCount && n < 64; i++)
        if (!(own_fault && strcmp(info->ppEnabledExtensionNames[i], FAULT_EXTENSION) == 0) &&
            !(own_markers && strcmp(info->ppEnabledExtensionNames[i], MARKER_EXTENSION) == 0))
            names[n++] = info->ppEnabledExtensionNames[i];
    copy.enabledExtensionCount = n;
    copy.ppEnabledExtensionNames = names;
    VkBaseOutStructure *before = (VkBaseOutStructure *)&copy, *fault = NULL;
    for (VkBaseOutStructure *s = (VkBaseOutStructure *)copy.pNext; own_fault && s; before = s, s = s->pNext)
        if (s->sType == VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FAULT_FEATURES_EXT) {
            fault = s;
            break;
        }
    if (fault) before->pNext = fault->pNext;
    VkResult r = create(physical, &copy, allocator, out);
    if (fault && before != (VkBaseOutStructure *)&copy) before->pNext = fault;
    if (r == VK_SUCCESS) {
        next_wait = (PFN_vkWaitForFences)next_gdpa(*out, "vkWaitForFences");
        next_submit = (PFN_vkQueueSubmit)next_gdpa(*out, "vkQueueSubmit");
        next_fill = (PFN_vkCmdFillBuffer)next_gdpa(*out, "vkCmdFillBuffer");
    }
    return r;
}

static VKAPI_ATTR PFN_vkVoidFunction VKAPI_CALL get_device_proc_addr(VkDevice device, const char *name) {
    if (strcmp(name, "vkGetDeviceProcAddr") == 0) return (PFN_vkVoidFunction)get_device_proc_addr;
    if (strcmp(name, "vkGetDeviceFaultInfoEXT") == 0 && fault_offered())
        return (PFN_vkVoidFunction)get_device_fault_info;
    if (strcmp(name, "vkCmdWriteBufferMarkerAMD") == 0 && markers_offered())
        return (PFN_vkVoidFunction)write_buffer_marker;
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
    if (strcmp(name, "vkEnumerateDeviceExtensionProperties") == 0) return (PFN_vkVoidFunction)enumerate_device_extensions;
    if (strcmp(name, "vkGetPhysicalDeviceFeatures2") == 0) return (PFN_vkVoidFunction)get_features2;
    if (strcmp(name, "vkGetPhysicalDeviceFeatures2KHR") == 0) return (PFN_vkVoidFunction)get_features2_khr;
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
