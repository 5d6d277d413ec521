// Which shared object each device command comes from: for every command name on the command line, the pointer
// vkGetDeviceProcAddr returns for a lavapipe device and the object dladdr finds it in, one line each
// (`NAME OBJECT`, `NAME none` when there is no pointer). A command a layer hooks comes from the layer's library; one
// it leaves alone, from the driver's. (The loader fills a device's dispatch table from the top layer's
// vkGetDeviceProcAddr when the device is created, and vkGetDeviceProcAddr then answers from that table.)
#define _GNU_SOURCE
#include <dlfcn.h>

#include "vktest.h"

int main(int argc, char **argv) {
    VkApplicationInfo app = {.sType = VK_STRUCTURE_TYPE_APPLICATION_INFO, .apiVersion = VK_API_VERSION_1_2};
    VkInstanceCreateInfo instance_info = {.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO, .pApplicationInfo = &app};
    VkInstance instance;
    CHECK(vkCreateInstance(&instance_info, NULL, &instance));
    VkPhysicalDevice physical = first_physical_device(instance);
    float priority = 1.0f;
    VkDeviceQueueCreateInfo queue = {.sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO,
                                     .queueFamilyIndex = 0,
                                     .queueCount = 1,
                                     .pQueuePriorities = &priority};
    VkDeviceCreateInfo device_info = {
        .sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO, .queueCreateInfoCount = 1, .pQueueCreateInfos = &queue};
    VkDevice device;
    CHECK(vkCreateDevice(physical, &device_info, NULL, &device));
    for (int i = 1; i < argc; i++) {
        PFN_vkVoidFunction f = vkGetDeviceProcAddr(device, argv[i]);
        Dl_info where;
        const char *object = "none";
        if (f && dladdr((void *)f, &where) && where.dli_fname) {
            object = where.dli_fname;
        }
        printf("%s %s\n", argv[i], object);
    }
    vkDestroyDevice(device, NULL);
    vkDestroyInstance(instance, NULL);
    return 0;
}
