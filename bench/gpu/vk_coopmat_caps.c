// What a Vulkan driver reports about cooperative matrices, integer dot product and bfloat16, for every physical
// device, as one JSON object per device in the keys of backscope's device profiles (docs/vulkan-profiles.md):
// `features` (the true members of the cooperative-matrix, cooperative-matrix-2, decode-vector and bfloat16 feature
// structures), `cooperative_matrix` (vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR),
// `cooperative_matrix_flexible_dimensions` (vkGetPhysicalDeviceCooperativeMatrixFlexibleDimensionsPropertiesNV) and
// `nv_cooperative_matrix2_properties` (VkPhysicalDeviceCooperativeMatrix2PropertiesNV). vulkaninfo 1.3.239 prints
// none of these, and ggml-vulkan decides its coopmat/coopmat2 paths by them (ggml-vulkan.cpp 4538-4636, 4658-4756).
//
// Build: cc -std=c11 -O1 -I VULKAN_HEADERS/include vk_coopmat_caps.c -lvulkan -o vk_coopmat_caps
// (Vulkan-Headers 1.4.309 or later: the trixie headers scripts/llama-build.sh unpacks).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vulkan/vulkan.h>

// VK_KHR_shader_bfloat16 is newer than the 1.4.309 headers: declared here as the registry defines it.
#define BF16_FEATURES_STYPE ((VkStructureType)1000141000)
typedef struct {
    VkStructureType sType;
    void *pNext;
    VkBool32 shaderBFloat16Type;
    VkBool32 shaderBFloat16DotProduct;
    VkBool32 shaderBFloat16CooperativeMatrix;
} Bf16Features;

// VK_NV_cooperative_matrix_decode_vector, likewise (the value ggml-vulkan-types.h uses).
#define DECODE_VECTOR_FEATURES_STYPE ((VkStructureType)1000689000)
typedef struct {
    VkStructureType sType;
    void *pNext;
    VkBool32 cooperativeMatrixDecodeVector;
} DecodeVectorFeatures;

static const char *component(VkComponentTypeKHR t) {
    static char other[32];
    switch ((int)t) {
    case 0: return "f16";
    case 1: return "f32";
    case 2: return "f64";
    case 3: return "s8";
    case 4: return "s16";
    case 5: return "s32";
    case 6: return "s64";
    case 7: return "u8";
    case 8: return "u16";
    case 9: return "u32";
    case 10: return "u64";
    case 1000141000: return "bf16";
    default: snprintf(other, sizeof other, "type%d", (int)t); return other;
    }
}

static const char *scope(VkScopeKHR s) {
    switch ((int)s) {
    case 1: return "device";
    case 2: return "workgroup";
    case 3: return "subgroup";
    case 5: return "queue_family";
    default: return "unknown";
    }
}

static int has_extension(VkExtensionProperties *ext, uint32_t n, const char *name) {
    for (uint32_t i = 0; i < n; i++)
        if (strcmp(ext[i].extensionName, name) == 0) return 1;
    return 0;
}

static void feature(int *first, const char *name, VkBool32 v) {
    if (!v) return;
    printf("%s\"%s\"", *first ? "" : ", ", name);
    *first = 0;
}

int main(void) {
    VkApplicationInfo app = {.sType = VK_STRUCTURE_TYPE_APPLICATION_INFO, .apiVersion = VK_API_VERSION_1_3};
    VkInstanceCreateInfo ici = {.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO, .pApplicationInfo = &app};
    VkInstance inst;
    if (vkCreateInstance(&ici, NULL, &inst) != VK_SUCCESS) {
        fprintf(stderr, "vkCreateInstance failed\n");
        return 1;
    }
    PFN_vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR coop =
        (PFN_vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR)vkGetInstanceProcAddr(
            inst, "vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR");
    PFN_vkGetPhysicalDeviceCooperativeMatrixFlexibleDimensionsPropertiesNV flex =
        (PFN_vkGetPhysicalDeviceCooperativeMatrixFlexibleDimensionsPropertiesNV)vkGetInstanceProcAddr(
            inst, "vkGetPhysicalDeviceCooperativeMatrixFlexibleDimensionsPropertiesNV");
    uint32_t ndev = 0;
    vkEnumeratePhysicalDevices(inst, &ndev, NULL);
    VkPhysicalDevice *devs = calloc(ndev ? ndev : 1, sizeof *devs);
    vkEnumeratePhysicalDevices(inst, &ndev, devs);
    for (uint32_t d = 0; d < ndev; d++) {
        uint32_t next = 0;
        vkEnumerateDeviceExtensionProperties(devs[d], NULL, &next, NULL);
        VkExtensionProperties *ext = calloc(next ? next : 1, sizeof *ext);
        vkEnumerateDeviceExtensionProperties(devs[d], NULL, &next, ext);
        int has_cm = has_extension(ext, next, "VK_KHR_cooperative_matrix");
        int has_cm2 = has_extension(ext, next, "VK_NV_cooperative_matrix2");
        int has_bf16 = has_extension(ext, next, "VK_KHR_shader_bfloat16");
        int has_dv = has_extension(ext, next, "VK_NV_cooperative_matrix_decode_vector");

        VkPhysicalDeviceCooperativeMatrixFeaturesKHR cmf = {
            .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_KHR};
        VkPhysicalDeviceCooperativeMatrix2FeaturesNV cm2f = {
            .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_2_FEATURES_NV};
        Bf16Features bf16f = {.sType = BF16_FEATURES_STYPE};
        DecodeVectorFeatures dvf = {.sType = DECODE_VECTOR_FEATURES_STYPE};
        VkPhysicalDeviceFeatures2 f2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2};
        void **tail = &f2.pNext;
        if (has_cm) { *tail = &cmf; tail = &cmf.pNext; }
        if (has_cm2) { *tail = &cm2f; tail = &cm2f.pNext; }
        if (has_bf16) { *tail = &bf16f; tail = &bf16f.pNext; }
        if (has_dv) { *tail = &dvf; tail = &dvf.pNext; }
        vkGetPhysicalDeviceFeatures2(devs[d], &f2);

        VkPhysicalDeviceCooperativeMatrix2PropertiesNV cm2p = {
            .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_2_PROPERTIES_NV};
        VkPhysicalDeviceProperties2 p2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2};
        if (has_cm2) p2.pNext = &cm2p;
        vkGetPhysicalDeviceProperties2(devs[d], &p2);

        printf("{\"device_name\": \"%s\", \"driver_version\": %u, \"features\": [", p2.properties.deviceName,
               p2.properties.driverVersion);
        int first = 1;
        feature(&first, "cooperativeMatrix", cmf.cooperativeMatrix);
        feature(&first, "cooperativeMatrixRobustBufferAccess", cmf.cooperativeMatrixRobustBufferAccess);
        feature(&first, "cooperativeMatrixWorkgroupScope", cm2f.cooperativeMatrixWorkgroupScope);
        feature(&first, "cooperativeMatrixFlexibleDimensions", cm2f.cooperativeMatrixFlexibleDimensions);
        feature(&first, "cooperativeMatrixReductions", cm2f.cooperativeMatrixReductions);
        feature(&first, "cooperativeMatrixConversions", cm2f.cooperativeMatrixConversions);
        feature(&first, "cooperativeMatrixPerElementOperations", cm2f.cooperativeMatrixPerElementOperations);
        feature(&first, "cooperativeMatrixTensorAddressing", cm2f.cooperativeMatrixTensorAddressing);
        feature(&first, "cooperativeMatrixBlockLoads", cm2f.cooperativeMatrixBlockLoads);
        feature(&first, "shaderBFloat16Type", bf16f.shaderBFloat16Type);
        feature(&first, "shaderBFloat16DotProduct", bf16f.shaderBFloat16DotProduct);
        feature(&first, "shaderBFloat16CooperativeMatrix", bf16f.shaderBFloat16CooperativeMatrix);
        feature(&first, "cooperativeMatrixDecodeVector", dvf.cooperativeMatrixDecodeVector);
        printf("],\n  \"cooperative_matrix\": [");
        if (has_cm && coop) {
            uint32_t n = 0;
            coop(devs[d], &n, NULL);
            VkCooperativeMatrixPropertiesKHR *cm = calloc(n ? n : 1, sizeof *cm);
            for (uint32_t i = 0; i < n; i++) cm[i].sType = VK_STRUCTURE_TYPE_COOPERATIVE_MATRIX_PROPERTIES_KHR;
            coop(devs[d], &n, cm);
            for (uint32_t i = 0; i < n; i++) {
                printf("%s\"%ux%ux%u %s", i ? ",\n    " : "", cm[i].MSize, cm[i].NSize, cm[i].KSize,
                       component(cm[i].AType));
                printf(" %s", component(cm[i].BType));
                printf(" %s", component(cm[i].CType));
                printf(" %s %s%s\"", component(cm[i].ResultType), scope(cm[i].scope),
                       cm[i].saturatingAccumulation ? " saturating" : "");
            }
            free(cm);
        }
        printf("],\n  \"cooperative_matrix_flexible_dimensions\": [");
        if (has_cm2 && flex) {
            uint32_t n = 0;
            flex(devs[d], &n, NULL);
            VkCooperativeMatrixFlexibleDimensionsPropertiesNV *fd = calloc(n ? n : 1, sizeof *fd);
            for (uint32_t i = 0; i < n; i++)
                fd[i].sType = VK_STRUCTURE_TYPE_COOPERATIVE_MATRIX_FLEXIBLE_DIMENSIONS_PROPERTIES_NV;
            flex(devs[d], &n, fd);
            for (uint32_t i = 0; i < n; i++) {
                printf("%s\"%ux%ux%u %s", i ? ",\n    " : "", fd[i].MGranularity, fd[i].NGranularity,
                       fd[i].KGranularity, component(fd[i].AType));
                printf(" %s", component(fd[i].BType));
                printf(" %s", component(fd[i].CType));
                printf(" %s %s %u%s\"", component(fd[i].ResultType), scope(fd[i].scope), fd[i].workgroupInvocations,
                       fd[i].saturatingAccumulation ? " saturating" : "");
            }
            free(fd);
        }
        printf("]");
        if (has_cm2)
            printf(",\n  \"nv_cooperative_matrix2_properties\": [%u, %u, %u]",
                   cm2p.cooperativeMatrixWorkgroupScopeMaxWorkgroupSize,
                   cm2p.cooperativeMatrixFlexibleDimensionsMaxDimension,
                   cm2p.cooperativeMatrixWorkgroupScopeReservedSharedMemory);
        printf("}\n");
        free(ext);
    }
    free(devs);
    vkDestroyInstance(inst, NULL);
    return 0;
}
