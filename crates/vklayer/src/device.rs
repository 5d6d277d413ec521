//! The facts about a physical device that ggml-vulkan chooses its shaders by, asked from the next link
//! when a device is created: name, driver, vendor, subgroup sizes, integer dot product, cooperative
//! matrices, FP16, the shader core count (SMs, CUs) that ggml's split-k and tile choice read. ggml-vulkan's own start-up line (`int dot: … | matrix cores: …`) reports the same
//! properties combined with what its shader compiler supported; the trace records what the device
//! offers.
//!
//! Also here: turning pipeline statistics on (`VK_KHR_pipeline_executable_properties`) for devices
//! that offer them, by adding the extension and its feature to the device's creation.

use std::ffi::{c_char, CStr};

use ash::vk;

use crate::dispatch::InstanceDispatch;
use crate::loader;
use crate::pipelines::DeviceFacts;

/// Most device extensions read (drivers offer a few hundred).
const MAX_EXTENSIONS: u32 = 4096;

pub const PIPELINE_EXECUTABLE_PROPERTIES: &CStr = c"VK_KHR_pipeline_executable_properties";

/// The extensions ggml-vulkan reads its shader core count from (ggml-vulkan.cpp:4053-4056).
const SM_BUILTINS: &str = "VK_NV_shader_sm_builtins";
const AMD_CORE_PROPERTIES2: &str = "VK_AMD_shader_core_properties2";

/// ggml-vulkan's environment switches that turn off what the driver offers (ggml-vulkan.cpp 4063, 4071, 4079, 4084,
/// 4272, 4919-4921 of llama.cpp 11434): each one the process has set is recorded as a flag of that name, true, since
/// the device's offers alone would then say ggml may use what it was told not to. ggml tests only that the variable
/// is set (`getenv(...) != nullptr`), whatever its value.
const GGML_SWITCHES: [&CStr; 7] = [
    c"GGML_VK_DISABLE_COOPMAT",
    c"GGML_VK_DISABLE_COOPMAT2",
    c"GGML_VK_DISABLE_INTEGER_DOT_PRODUCT",
    c"GGML_VK_DISABLE_BFLOAT16",
    c"GGML_VK_DISABLE_F16",
    c"GGML_VK_DISABLE_MMVQ",
    c"GGML_VK_FORCE_MMVQ",
];

/// The switches of [`GGML_SWITCHES`] this process has set.
fn ggml_switches_set() -> Vec<(&'static str, bool)> {
    GGML_SWITCHES
        .iter()
        // SAFETY: getenv with a NUL-terminated name; the layer never modifies the environment.
        .filter(|name| !unsafe { libc::getenv(name.as_ptr()) }.is_null())
        .filter_map(|name| name.to_str().ok().map(|n| (n, true)))
        .collect()
}

/// The extension names a physical device offers.
///
/// # Safety
/// `physical` must be a physical device of the instance `inst` describes.
pub unsafe fn extensions(inst: &InstanceDispatch, physical: vk::PhysicalDevice) -> Vec<Vec<u8>> {
    let Some(enumerate) = inst.enumerate_device_extension_properties else { return Vec::new() };
    let mut count = 0u32;
    // SAFETY: the count query of vkEnumerateDeviceExtensionProperties.
    if unsafe { enumerate(physical, std::ptr::null(), &mut count, std::ptr::null_mut()) } != vk::Result::SUCCESS {
        return Vec::new();
    }
    let mut props = vec![vk::ExtensionProperties::default(); count.min(MAX_EXTENSIONS) as usize];
    let mut count = props.len() as u32;
    // SAFETY: `props` has room for `count` elements; VK_INCOMPLETE (more than that) keeps what fit.
    let result = unsafe { enumerate(physical, std::ptr::null(), &mut count, props.as_mut_ptr()) };
    if result != vk::Result::SUCCESS && result != vk::Result::INCOMPLETE {
        return Vec::new();
    }
    props.truncate(count as usize);
    props.iter().map(|p| c_text(&p.extension_name)).collect()
}

/// The bytes of a fixed-size C string field, up to its terminator.
pub(crate) fn c_text(field: &[c_char]) -> Vec<u8> {
    field.iter().take_while(|&&c| c != 0).map(|&c| c as u8).collect()
}

fn has(extensions: &[Vec<u8>], name: &str) -> bool {
    extensions.iter().any(|e| e == name.as_bytes())
}

fn device_type(t: vk::PhysicalDeviceType) -> &'static str {
    match t {
        vk::PhysicalDeviceType::DISCRETE_GPU => "discrete",
        vk::PhysicalDeviceType::INTEGRATED_GPU => "integrated",
        vk::PhysicalDeviceType::VIRTUAL_GPU => "virtual",
        vk::PhysicalDeviceType::CPU => "cpu",
        _ => "other",
    }
}

/// The device's facts (its trace id is set by the registry).
///
/// # Safety
/// `physical` must be a physical device of the instance `inst` describes.
pub unsafe fn facts(inst: &InstanceDispatch, physical: vk::PhysicalDevice, extensions: &[Vec<u8>]) -> DeviceFacts {
    let mut props = vk::PhysicalDeviceProperties::default();
    if let Some(get) = inst.get_physical_device_properties {
        // SAFETY: fills one VkPhysicalDeviceProperties.
        unsafe { get(physical, &mut props) };
    }
    let version = props.api_version;
    let at_least = |minor: u32| vk::api_version_major(version) > 1 || vk::api_version_minor(version) >= minor;
    let mut subgroup = vk::PhysicalDeviceSubgroupProperties::default();
    let mut driver = vk::PhysicalDeviceDriverProperties::default();
    let mut size_control = vk::PhysicalDeviceSubgroupSizeControlProperties::default();
    // ggml-vulkan uses integer dot product only where the driver also reports packed signed 4x8-bit dot products
    // as accelerated (ggml-vulkan.cpp:4280): the feature alone (lavapipe has it) is not enough.
    let mut dot_props = vk::PhysicalDeviceShaderIntegerDotProductProperties::default();
    let has_dot_props = at_least(3) || has(extensions, "VK_KHR_shader_integer_dot_product");
    let has_driver = at_least(2) || has(extensions, "VK_KHR_driver_properties");
    let has_size_control = at_least(3) || has(extensions, "VK_EXT_subgroup_size_control");
    // ggml-vulkan's shader_core_count (ggml-vulkan.cpp:4226-4234): VK_NV_shader_sm_builtins' shaderSMCount, else
    // VK_AMD_shader_core_properties2's activeComputeUnitCount, each chained only when the device offers the
    // extension (4053-4056, 4141-4148); else 0 (on Intel ggml looks the device id up instead, 4230-4231, 16271).
    let mut sm_builtins = vk::PhysicalDeviceShaderSMBuiltinsPropertiesNV::default();
    let mut amd_cores = vk::PhysicalDeviceShaderCoreProperties2AMD::default();
    let has_sm_builtins = has(extensions, SM_BUILTINS);
    let has_amd_cores = has(extensions, AMD_CORE_PROPERTIES2);
    if let (Some(get2), true) = (inst.get_physical_device_properties2, at_least(1)) {
        // Only structures the device knows may be chained (`push_next` puts each right after the root).
        let props2 = vk::PhysicalDeviceProperties2::default();
        let props2 = if has_sm_builtins { props2.push_next(&mut sm_builtins) } else { props2 };
        let props2 = if has_amd_cores { props2.push_next(&mut amd_cores) } else { props2 };
        let props2 = if has_size_control { props2.push_next(&mut size_control) } else { props2 };
        let props2 = if has_dot_props { props2.push_next(&mut dot_props) } else { props2 };
        let props2 = if has_driver { props2.push_next(&mut driver) } else { props2 };
        let mut props2 = props2.push_next(&mut subgroup);
        // SAFETY: a chain of live output structures the device supports.
        unsafe { get2(physical, &mut props2) };
    }
    let mut integer_dot = vk::PhysicalDeviceShaderIntegerDotProductFeatures::default();
    let mut float16 = vk::PhysicalDeviceShaderFloat16Int8Features::default();
    let has_integer_dot = at_least(3) || has(extensions, "VK_KHR_shader_integer_dot_product");
    let has_float16 = at_least(2) || has(extensions, "VK_KHR_shader_float16_int8");
    if let (Some(get2), true) = (inst.get_physical_device_features2, at_least(1)) {
        let features2 = vk::PhysicalDeviceFeatures2::default();
        let features2 = if has_integer_dot { features2.push_next(&mut integer_dot) } else { features2 };
        let mut features2 = if has_float16 { features2.push_next(&mut float16) } else { features2 };
        // SAFETY: a chain of live output structures the device supports.
        unsafe { get2(physical, &mut features2) };
    }
    let compute_arithmetic = subgroup.supported_stages.contains(vk::ShaderStageFlags::COMPUTE)
        && subgroup.supported_operations.contains(vk::SubgroupFeatureFlags::ARITHMETIC);
    DeviceFacts {
        id: 0,
        name: c_text(&props.device_name),
        driver: c_text(&driver.driver_name),
        driver_info: c_text(&driver.driver_info),
        driver_version: props.driver_version,
        api_version: [vk::api_version_major(version), vk::api_version_minor(version), vk::api_version_patch(version)],
        vendor_id: props.vendor_id,
        device_id: props.device_id,
        device_type: device_type(props.device_type),
        subgroup_size: subgroup.subgroup_size,
        subgroup_size_min: size_control.min_subgroup_size,
        subgroup_size_max: size_control.max_subgroup_size,
        integer_dot: integer_dot.shader_integer_dot_product == vk::TRUE,
        cooperative_matrix: has(extensions, "VK_KHR_cooperative_matrix") || has(extensions, "VK_NV_cooperative_matrix"),
        shader_core_count: if has_sm_builtins {
            (sm_builtins.shader_sm_count, SM_BUILTINS)
        } else if has_amd_cores {
            (amd_cores.active_compute_unit_count, AMD_CORE_PROPERTIES2)
        } else {
            (0, "none")
        },
        flags: [
            ("subgroup_arithmetic", compute_arithmetic),
            ("subgroup_size_control", has_size_control),
            ("fp16", float16.shader_float16 == vk::TRUE),
            ("bf16", has(extensions, "VK_KHR_shader_bfloat16")),
            ("cooperative_matrix2", has(extensions, "VK_NV_cooperative_matrix2")),
            ("integer_dot_accelerated", dot_props.integer_dot_product4x8_bit_packed_signed_accelerated == vk::TRUE),
            ("pipeline_executable_properties", has(extensions, "VK_KHR_pipeline_executable_properties")),
        ]
        .into_iter()
        .chain(ggml_switches_set())
        .collect(),
        impersonated: None,
    }
}

/// Whether the device supports the `pipelineExecutableInfo` feature.
///
/// # Safety
/// As for [`facts`].
pub unsafe fn supports_pipeline_statistics(inst: &InstanceDispatch, physical: vk::PhysicalDevice) -> bool {
    // SAFETY: the caller's promise.
    unsafe {
        supports_feature(inst, physical, |f: &vk::PhysicalDevicePipelineExecutablePropertiesFeaturesKHR| {
            f.pipeline_executable_info
        })
    }
}

/// Whether `physical` supports the feature `enabled` reads from an extension's feature structure `T`, as
/// `vkGetPhysicalDeviceFeatures2` fills it (the caller checked the device offers the extension); false without that
/// command.
///
/// # Safety
/// `physical` must be a physical device of `inst`'s instance that offers `T`'s extension.
pub unsafe fn supports_feature<T: vk::ExtendsPhysicalDeviceFeatures2 + Default>(
    inst: &InstanceDispatch,
    physical: vk::PhysicalDevice,
    enabled: impl Fn(&T) -> vk::Bool32,
) -> bool {
    let Some(get2) = inst.get_physical_device_features2 else { return false };
    let mut feature = T::default();
    let mut features2 = vk::PhysicalDeviceFeatures2::default().push_next(&mut feature);
    // SAFETY: one live output structure of an extension the caller checked the device offers.
    unsafe { get2(physical, &mut features2) };
    enabled(&feature) == vk::TRUE
}

/// Whether the application's create info chains a structure of type `s_type` (a feature structure it decided
/// itself: the layer then adds nothing of that feature).
///
/// # Safety
/// `info` must be a valid `VkDeviceCreateInfo`.
pub unsafe fn chained_by_application(info: &vk::DeviceCreateInfo<'_>, s_type: vk::StructureType) -> bool {
    // SAFETY: the chain of a valid create info; only the sType of each structure is read.
    unsafe { crate::loader::chain(info.p_next) }.any(|s| unsafe { (*s).s_type } == s_type)
}

/// How a device's creation turns pipeline statistics on, when the application did not.
pub enum Statistics {
    /// The application decided (it chained the feature structure): statistics are captured if it
    /// enabled the feature.
    ByApplication(bool),
    /// The layer adds the extension (when missing) and the feature.
    ByLayer,
}

/// What the application's `VkDeviceCreateInfo` says about pipeline statistics.
///
/// # Safety
/// `info` must be a valid `VkDeviceCreateInfo`.
pub unsafe fn statistics_in(info: &vk::DeviceCreateInfo<'_>) -> Statistics {
    // SAFETY: the chain of a valid create info.
    for s in unsafe { loader::chain(info.p_next) } {
        // SAFETY: a structure of the chain; its sType says which.
        if unsafe { (*s).s_type } == vk::StructureType::PHYSICAL_DEVICE_PIPELINE_EXECUTABLE_PROPERTIES_FEATURES_KHR {
            // SAFETY: that sType is this structure.
            let feature = unsafe { &*(s as *const vk::PhysicalDevicePipelineExecutablePropertiesFeaturesKHR<'_>) };
            return Statistics::ByApplication(feature.pipeline_executable_info == vk::TRUE);
        }
    }
    Statistics::ByLayer
}

/// The create info's extension names plus those of `added` it does not list yet.
///
/// # Safety
/// `info` must be a valid create info.
pub unsafe fn extensions_with(info: &vk::DeviceCreateInfo<'_>, added: &[&'static CStr]) -> Vec<*const c_char> {
    let mut names: Vec<*const c_char> = if info.enabled_extension_count == 0
        || info.pp_enabled_extension_names.is_null()
    {
        Vec::new()
    } else {
        // SAFETY: a valid create info holds that many extension name pointers.
        unsafe { std::slice::from_raw_parts(info.pp_enabled_extension_names, info.enabled_extension_count as usize) }
            .to_vec()
    };
    for name in added {
        // SAFETY: each is a NUL-terminated extension name of a valid create info.
        if !names.iter().any(|&n| unsafe { CStr::from_ptr(n) } == *name) {
            names.push(name.as_ptr());
        }
    }
    names
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::c_void;

    #[test]
    fn finds_the_application_s_choice_and_adds_the_extension_once() {
        let mut feature = vk::PhysicalDevicePipelineExecutablePropertiesFeaturesKHR {
            pipeline_executable_info: vk::FALSE,
            ..Default::default()
        };
        let mut info = vk::DeviceCreateInfo::default();
        // SAFETY: a create info without a chain.
        assert!(matches!(unsafe { statistics_in(&info) }, Statistics::ByLayer));
        info.p_next = &mut feature as *mut _ as *const c_void;
        // SAFETY: a chain of one live structure.
        assert!(matches!(unsafe { statistics_in(&info) }, Statistics::ByApplication(false)));
        let names = [c"VK_KHR_16bit_storage".as_ptr()];
        info.enabled_extension_count = 1;
        info.pp_enabled_extension_names = names.as_ptr();
        // SAFETY: one live extension name.
        let added = unsafe { extensions_with(&info, &[PIPELINE_EXECUTABLE_PROPERTIES]) };
        assert_eq!(added.len(), 2);
        let already = [c"VK_KHR_pipeline_executable_properties".as_ptr()];
        info.pp_enabled_extension_names = already.as_ptr();
        // SAFETY: as above.
        assert_eq!(unsafe { extensions_with(&info, &[PIPELINE_EXECUTABLE_PROPERTIES]) }.len(), 1);
    }
}
