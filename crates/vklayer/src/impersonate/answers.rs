//! Writing a profile's answers into the structures an application passes to the physical-device queries: the
//! real device answers first (`api::physical`), then every structure the profile speaks for is overwritten.

use std::collections::HashSet;
use std::ffi::{c_char, c_void};

use ash::vk;

use super::feature_table::{FeatureStruct, FEATURE_STRUCTS};
use super::profile::Profile;
use crate::loader;

/// `VkPhysicalDeviceFloatControlsProperties`' `VkBool32` members after its two enums, in declaration order;
/// `VkPhysicalDeviceVulkan12Properties` holds the same block after the same two enums.
const FLOAT_CONTROLS: [&str; 15] = [
    "shaderSignedZeroInfNanPreserveFloat16",
    "shaderSignedZeroInfNanPreserveFloat32",
    "shaderSignedZeroInfNanPreserveFloat64",
    "shaderDenormPreserveFloat16",
    "shaderDenormPreserveFloat32",
    "shaderDenormPreserveFloat64",
    "shaderDenormFlushToZeroFloat16",
    "shaderDenormFlushToZeroFloat32",
    "shaderDenormFlushToZeroFloat64",
    "shaderRoundingModeRTEFloat16",
    "shaderRoundingModeRTEFloat32",
    "shaderRoundingModeRTEFloat64",
    "shaderRoundingModeRTZFloat16",
    "shaderRoundingModeRTZFloat32",
    "shaderRoundingModeRTZFloat64",
];

/// `VkPhysicalDeviceShaderIntegerDotProductProperties`' members (all `VkBool32`), in declaration order.
const INTEGER_DOT: [&str; 30] = [
    "integerDotProduct8BitUnsignedAccelerated",
    "integerDotProduct8BitSignedAccelerated",
    "integerDotProduct8BitMixedSignednessAccelerated",
    "integerDotProduct4x8BitPackedUnsignedAccelerated",
    "integerDotProduct4x8BitPackedSignedAccelerated",
    "integerDotProduct4x8BitPackedMixedSignednessAccelerated",
    "integerDotProduct16BitUnsignedAccelerated",
    "integerDotProduct16BitSignedAccelerated",
    "integerDotProduct16BitMixedSignednessAccelerated",
    "integerDotProduct32BitUnsignedAccelerated",
    "integerDotProduct32BitSignedAccelerated",
    "integerDotProduct32BitMixedSignednessAccelerated",
    "integerDotProduct64BitUnsignedAccelerated",
    "integerDotProduct64BitSignedAccelerated",
    "integerDotProduct64BitMixedSignednessAccelerated",
    "integerDotProductAccumulatingSaturating8BitUnsignedAccelerated",
    "integerDotProductAccumulatingSaturating8BitSignedAccelerated",
    "integerDotProductAccumulatingSaturating8BitMixedSignednessAccelerated",
    "integerDotProductAccumulatingSaturating4x8BitPackedUnsignedAccelerated",
    "integerDotProductAccumulatingSaturating4x8BitPackedSignedAccelerated",
    "integerDotProductAccumulatingSaturating4x8BitPackedMixedSignednessAccelerated",
    "integerDotProductAccumulatingSaturating16BitUnsignedAccelerated",
    "integerDotProductAccumulatingSaturating16BitSignedAccelerated",
    "integerDotProductAccumulatingSaturating16BitMixedSignednessAccelerated",
    "integerDotProductAccumulatingSaturating32BitUnsignedAccelerated",
    "integerDotProductAccumulatingSaturating32BitSignedAccelerated",
    "integerDotProductAccumulatingSaturating32BitMixedSignednessAccelerated",
    "integerDotProductAccumulatingSaturating64BitUnsignedAccelerated",
    "integerDotProductAccumulatingSaturating64BitSignedAccelerated",
    "integerDotProductAccumulatingSaturating64BitMixedSignednessAccelerated",
];

/// `VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_2_PROPERTIES_NV` (VK_NV_cooperative_matrix2 is newer than
/// ash's headers).
pub const COOPMAT2_PROPERTIES_STYPE: i32 = 1_000_593_002;

/// `VkPhysicalDeviceCooperativeMatrix2PropertiesNV`, as Vulkan-Headers declare it.
#[repr(C)]
pub struct Coopmat2Properties {
    pub s_type: vk::StructureType,
    pub p_next: *mut c_void,
    pub workgroup_scope_max_workgroup_size: u32,
    pub flexible_dimensions_max_dimension: u32,
    pub workgroup_scope_reserved_shared_memory: u32,
}

/// `VkCooperativeMatrixFlexibleDimensionsPropertiesNV`, as Vulkan-Headers declare it.
#[repr(C)]
pub struct FlexibleDimensionsProperties {
    pub s_type: vk::StructureType,
    pub p_next: *mut c_void,
    pub granularity: [u32; 3],
    pub types: [vk::ComponentTypeKHR; 4],
    pub saturating_accumulation: vk::Bool32,
    pub scope: vk::ScopeKHR,
    pub workgroup_invocations: u32,
}

/// Writes one flexible-dimensions entry into the application's element, keeping its sType and pNext.
pub fn flexible_dimensions(shape: &super::profile::FlexibleShape, out: &mut FlexibleDimensionsProperties) {
    out.granularity = shape.granularity;
    out.types = shape.types;
    out.saturating_accumulation = vk::Bool32::from(shape.saturating);
    out.scope = shape.scope;
    out.workgroup_invocations = shape.workgroup_invocations;
}

/// Writes `names`' truth into `count` consecutive `VkBool32`s starting at `first`.
///
/// # Safety
/// `first` must point to `table.len()` writable, consecutive `VkBool32`s.
unsafe fn write_bools(first: *mut vk::Bool32, table: &[&str], true_names: &HashSet<&str>) {
    for (i, name) in table.iter().enumerate() {
        // SAFETY: the caller's promise: `table.len()` members from `first`.
        unsafe { *first.add(i) = vk::Bool32::from(true_names.contains(name)) };
    }
}

fn name_set(names: &[String]) -> HashSet<&str> {
    names.iter().map(String::as_str).collect()
}

/// Copies `text` into a fixed-size C string field, cut to fit, NUL-terminated.
fn set_text(field: &mut [c_char], text: &str) {
    let bytes = &text.as_bytes()[..text.len().min(field.len().saturating_sub(1))];
    for (slot, &b) in field.iter_mut().zip(bytes.iter().chain(std::iter::repeat(&0))) {
        *slot = b as c_char;
    }
}

/// The core properties and the limits the profile gives.
pub fn properties(p: &Profile, out: &mut vk::PhysicalDeviceProperties) {
    out.api_version = p.api_version;
    if let Some(v) = p.driver_version {
        out.driver_version = v;
    }
    out.vendor_id = p.vendor_id;
    out.device_id = p.device_id;
    out.device_type = p.device_type;
    set_text(&mut out.device_name, &p.device_name);
    let (l, limits) = (&p.limits, &mut out.limits);
    let set = |slot: &mut u32, v: Option<u32>| {
        if let Some(v) = v {
            *slot = v;
        }
    };
    set(&mut limits.max_compute_shared_memory_size, l.max_compute_shared_memory_size);
    set(&mut limits.max_storage_buffer_range, l.max_storage_buffer_range);
    set(&mut limits.max_uniform_buffer_range, l.max_uniform_buffer_range);
    set(&mut limits.max_push_constants_size, l.max_push_constants_size);
    set(&mut limits.max_compute_work_group_invocations, l.max_compute_work_group_invocations);
    if let Some(v) = l.max_compute_work_group_count {
        limits.max_compute_work_group_count = v;
    }
    if let Some(v) = l.max_compute_work_group_size {
        limits.max_compute_work_group_size = v;
    }
    if let Some(v) = l.min_storage_buffer_offset_alignment {
        limits.min_storage_buffer_offset_alignment = v;
    }
}

/// Overwrites every structure of a `vkGetPhysicalDeviceProperties2` chain the profile speaks for.
///
/// # Safety
/// `props` must be a valid, writable `VkPhysicalDeviceProperties2` chain.
pub unsafe fn properties2(p: &Profile, props: &mut vk::PhysicalDeviceProperties2<'_>) {
    properties(p, &mut props.properties);
    // SAFETY: the caller's valid chain.
    for s in unsafe { loader::chain(props.p_next) } {
        // SAFETY: each element is a live, writable structure whose sType says which (the caller's promise).
        unsafe { property_struct(p, s as *mut c_void) };
    }
}

/// # Safety
/// `s` must be a live, writable Vulkan output structure.
unsafe fn property_struct(p: &Profile, s: *mut c_void) {
    type S = vk::StructureType;
    // SAFETY: every Vulkan structure starts with its sType.
    let s_type = unsafe { *(s as *const S) };
    // SAFETY: each arm casts to the structure whose sType was read, live and writable (the caller's promise).
    unsafe {
        match s_type {
            S::PHYSICAL_DEVICE_SUBGROUP_PROPERTIES => {
                let out = &mut *(s as *mut vk::PhysicalDeviceSubgroupProperties<'_>);
                out.subgroup_size = p.subgroup_size;
                out.supported_stages = p.subgroup_stages.unwrap_or(out.supported_stages);
                out.supported_operations = p.subgroup_operations.unwrap_or(out.supported_operations);
            }
            S::PHYSICAL_DEVICE_VULKAN_1_1_PROPERTIES => {
                let out = &mut *(s as *mut vk::PhysicalDeviceVulkan11Properties<'_>);
                out.subgroup_size = p.subgroup_size;
                out.subgroup_supported_stages = p.subgroup_stages.unwrap_or(out.subgroup_supported_stages);
                out.subgroup_supported_operations = p.subgroup_operations.unwrap_or(out.subgroup_supported_operations);
                out.max_memory_allocation_size =
                    p.limits.max_memory_allocation_size.unwrap_or(out.max_memory_allocation_size);
            }
            S::PHYSICAL_DEVICE_VULKAN_1_2_PROPERTIES => {
                let out = &mut *(s as *mut vk::PhysicalDeviceVulkan12Properties<'_>);
                out.driver_id = p.driver_id;
                set_text(&mut out.driver_name, &p.driver_name);
                if let Some(info) = &p.driver_info {
                    set_text(&mut out.driver_info, info);
                }
                if let Some(names) = &p.float_controls {
                    write_bools(
                        &mut out.shader_signed_zero_inf_nan_preserve_float16,
                        &FLOAT_CONTROLS,
                        &name_set(names),
                    );
                }
            }
            S::PHYSICAL_DEVICE_DRIVER_PROPERTIES => {
                let out = &mut *(s as *mut vk::PhysicalDeviceDriverProperties<'_>);
                out.driver_id = p.driver_id;
                set_text(&mut out.driver_name, &p.driver_name);
                if let Some(info) = &p.driver_info {
                    set_text(&mut out.driver_info, info);
                }
            }
            S::PHYSICAL_DEVICE_FLOAT_CONTROLS_PROPERTIES => {
                if let Some(names) = &p.float_controls {
                    let out = &mut *(s as *mut vk::PhysicalDeviceFloatControlsProperties<'_>);
                    write_bools(
                        &mut out.shader_signed_zero_inf_nan_preserve_float16,
                        &FLOAT_CONTROLS,
                        &name_set(names),
                    );
                }
            }
            S::PHYSICAL_DEVICE_SUBGROUP_SIZE_CONTROL_PROPERTIES => {
                let out = &mut *(s as *mut vk::PhysicalDeviceSubgroupSizeControlProperties<'_>);
                out.min_subgroup_size = p.subgroup_size_min.unwrap_or(out.min_subgroup_size);
                out.max_subgroup_size = p.subgroup_size_max.unwrap_or(out.max_subgroup_size);
                out.max_compute_workgroup_subgroups =
                    p.max_compute_workgroup_subgroups.unwrap_or(out.max_compute_workgroup_subgroups);
                out.required_subgroup_size_stages =
                    p.required_subgroup_size_stages.unwrap_or(out.required_subgroup_size_stages);
            }
            S::PHYSICAL_DEVICE_SHADER_INTEGER_DOT_PRODUCT_PROPERTIES => {
                if let Some(names) = &p.integer_dot_properties {
                    let out = &mut *(s as *mut vk::PhysicalDeviceShaderIntegerDotProductProperties<'_>);
                    write_bools(&mut out.integer_dot_product8_bit_unsigned_accelerated, &INTEGER_DOT, &name_set(names));
                }
            }
            S::PHYSICAL_DEVICE_MAINTENANCE_3_PROPERTIES => {
                let out = &mut *(s as *mut vk::PhysicalDeviceMaintenance3Properties<'_>);
                out.max_memory_allocation_size =
                    p.limits.max_memory_allocation_size.unwrap_or(out.max_memory_allocation_size);
            }
            S::PHYSICAL_DEVICE_MAINTENANCE_4_PROPERTIES => {
                let out = &mut *(s as *mut vk::PhysicalDeviceMaintenance4Properties<'_>);
                out.max_buffer_size = p.limits.max_buffer_size.unwrap_or(out.max_buffer_size);
            }
            S::PHYSICAL_DEVICE_SHADER_CORE_PROPERTIES_AMD => {
                let out = &mut *(s as *mut vk::PhysicalDeviceShaderCorePropertiesAMD<'_>);
                out.wavefronts_per_simd = p.amd_wavefronts_per_simd.unwrap_or(out.wavefronts_per_simd);
                out.wavefront_size = p.amd_wavefront_size.unwrap_or(out.wavefront_size);
            }
            S::PHYSICAL_DEVICE_SHADER_CORE_PROPERTIES_2_AMD => {
                let out = &mut *(s as *mut vk::PhysicalDeviceShaderCoreProperties2AMD<'_>);
                out.active_compute_unit_count =
                    p.amd_active_compute_unit_count.unwrap_or(out.active_compute_unit_count);
            }
            S::PHYSICAL_DEVICE_SHADER_SM_BUILTINS_PROPERTIES_NV => {
                let out = &mut *(s as *mut vk::PhysicalDeviceShaderSMBuiltinsPropertiesNV<'_>);
                out.shader_sm_count = p.nv_shader_sm_count.unwrap_or(out.shader_sm_count);
                out.shader_warps_per_sm = p.nv_shader_warps_per_sm.unwrap_or(out.shader_warps_per_sm);
            }
            t if t.as_raw() == COOPMAT2_PROPERTIES_STYPE => {
                if let Some([max_workgroup, max_dimension, reserved]) = p.coopmat2_properties {
                    let out = &mut *(s as *mut Coopmat2Properties);
                    out.workgroup_scope_max_workgroup_size = max_workgroup;
                    out.flexible_dimensions_max_dimension = max_dimension;
                    out.workgroup_scope_reserved_shared_memory = reserved;
                }
            }
            _ => {}
        }
    }
}

/// The feature structure of the table with this sType (`0`: the core `VkPhysicalDeviceFeatures`).
pub fn feature_struct(s_type: vk::StructureType) -> Option<&'static FeatureStruct> {
    FEATURE_STRUCTS.iter().find(|f| f.s_type != 0 && f.s_type == s_type.as_raw())
}

fn core_features() -> &'static FeatureStruct {
    &FEATURE_STRUCTS[0]
}

/// The core features as the profile gives them.
pub fn features(p: &Profile, out: &mut vk::PhysicalDeviceFeatures) {
    let core = core_features();
    // SAFETY: VkPhysicalDeviceFeatures is exactly the table's members, all VkBool32, in order.
    unsafe { write_bools(out as *mut _ as *mut vk::Bool32, core.members, &name_set(&p.features)) };
}

/// Overwrites every feature structure of a `vkGetPhysicalDeviceFeatures2` chain that the table knows.
///
/// # Safety
/// `features2` must be a valid, writable `VkPhysicalDeviceFeatures2` chain.
pub unsafe fn features2(p: &Profile, features2: &mut vk::PhysicalDeviceFeatures2<'_>) {
    features(p, &mut features2.features);
    let names = name_set(&p.features);
    // SAFETY: the caller's valid chain.
    for s in unsafe { loader::chain(features2.p_next) } {
        // SAFETY: a live structure of the chain.
        let Some(table) = feature_struct(unsafe { (*s).s_type }) else { continue };
        // SAFETY: a structure of that sType has the table's members after sType and pNext.
        unsafe { write_bools((s as *mut u8).add(16) as *mut vk::Bool32, table.members, &names) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tables_match_the_structures_ash_declares() {
        // The generated table's member counts against ash's layouts (16 bytes of sType and pNext first).
        let size = |name: &str| 16 + 4 * FEATURE_STRUCTS.iter().find(|f| f.name == name).unwrap().members.len();
        assert_eq!(4 * core_features().members.len(), std::mem::size_of::<vk::PhysicalDeviceFeatures>());
        assert_eq!(size("VkPhysicalDeviceVulkan11Features"), std::mem::size_of::<vk::PhysicalDeviceVulkan11Features>());
        assert_eq!(
            size("VkPhysicalDeviceVulkan12Features"),
            std::mem::size_of::<vk::PhysicalDeviceVulkan12Features>() - 4
        );
        assert_eq!(
            size("VkPhysicalDeviceVulkan13Features"),
            std::mem::size_of::<vk::PhysicalDeviceVulkan13Features>() - 4
        );
        assert_eq!(std::mem::offset_of!(vk::PhysicalDeviceVulkan12Features, shader_float16), 16 + 4 * 7);
        let v12 = FEATURE_STRUCTS.iter().find(|f| f.name == "VkPhysicalDeviceVulkan12Features").unwrap();
        assert_eq!(v12.members[7], "shaderFloat16");
        assert_eq!(
            std::mem::offset_of!(vk::PhysicalDeviceFloatControlsProperties, shader_rounding_mode_rte_float16),
            std::mem::offset_of!(
                vk::PhysicalDeviceFloatControlsProperties,
                shader_signed_zero_inf_nan_preserve_float16
            ) + 4 * 9
        );
        assert_eq!(std::mem::size_of::<vk::PhysicalDeviceShaderIntegerDotProductProperties>(), 16 + 4 * 30);
        assert_eq!(
            std::mem::offset_of!(
                vk::PhysicalDeviceShaderIntegerDotProductProperties,
                integer_dot_product4x8_bit_packed_signed_accelerated
            ),
            16 + 4 * 4
        );
    }

    #[test]
    fn features_follow_the_profile_in_any_chain_position() {
        let p = Profile {
            features: vec!["shaderFloat16".into(), "storageBuffer16BitAccess".into(), "shaderInt64".into()],
            ..Default::default()
        };
        let mut v12 = vk::PhysicalDeviceVulkan12Features { buffer_device_address: vk::TRUE, ..Default::default() };
        let mut v11 =
            vk::PhysicalDeviceVulkan11Features { p_next: &mut v12 as *mut _ as *mut c_void, ..Default::default() };
        let mut f2 = vk::PhysicalDeviceFeatures2 { p_next: &mut v11 as *mut _ as *mut c_void, ..Default::default() };
        // SAFETY: a chain of live structures.
        unsafe { features2(&p, &mut f2) };
        assert_eq!((f2.features.shader_int64, f2.features.robust_buffer_access), (vk::TRUE, vk::FALSE));
        assert_eq!(v11.storage_buffer16_bit_access, vk::TRUE);
        assert_eq!((v12.shader_float16, v12.buffer_device_address), (vk::TRUE, vk::FALSE));
    }

    /// `VK_STRUCTURE_TYPE_COOPERATIVE_MATRIX_FLEXIBLE_DIMENSIONS_PROPERTIES_NV` (Vulkan-Headers 1.4.309).
    const FLEXIBLE_DIMENSIONS_STYPE: i32 = 1_000_593_001;

    #[test]
    fn the_cooperative_matrix_2_answers_land_where_the_headers_put_them() {
        // Vulkan-Headers 1.4.309: three uint32_t after sType and pNext; the flexible-dimensions entry has its
        // granularities at 16, the four component types at 28, then saturation, scope and invocations.
        assert_eq!(std::mem::size_of::<Coopmat2Properties>(), 32);
        assert_eq!(std::mem::offset_of!(FlexibleDimensionsProperties, types), 28);
        assert_eq!(std::mem::offset_of!(FlexibleDimensionsProperties, workgroup_invocations), 52);
        let p = Profile { coopmat2_properties: Some([256, 65535, 0]), ..Default::default() };
        let mut cm2 = Coopmat2Properties {
            s_type: vk::StructureType::from_raw(COOPMAT2_PROPERTIES_STYPE),
            p_next: std::ptr::null_mut(),
            workgroup_scope_max_workgroup_size: 0,
            flexible_dimensions_max_dimension: 0,
            workgroup_scope_reserved_shared_memory: 7,
        };
        let mut props2 =
            vk::PhysicalDeviceProperties2 { p_next: &mut cm2 as *mut _ as *mut c_void, ..Default::default() };
        // SAFETY: a chain of one live structure.
        unsafe { properties2(&p, &mut props2) };
        assert_eq!((cm2.workgroup_scope_max_workgroup_size, cm2.flexible_dimensions_max_dimension), (256, 65535));
        assert_eq!(cm2.workgroup_scope_reserved_shared_memory, 0);
        let mut entry = FlexibleDimensionsProperties {
            s_type: vk::StructureType::from_raw(FLEXIBLE_DIMENSIONS_STYPE),
            p_next: std::ptr::null_mut(),
            granularity: [0; 3],
            types: [vk::ComponentTypeKHR::from_raw(0); 4],
            saturating_accumulation: vk::TRUE,
            scope: vk::ScopeKHR::DEVICE,
            workgroup_invocations: 0,
        };
        let shape = crate::impersonate::profile::FlexibleShape {
            granularity: [32, 16, 16],
            types: [0, 0, 1, 1].map(vk::ComponentTypeKHR::from_raw),
            saturating: false,
            scope: vk::ScopeKHR::WORKGROUP,
            workgroup_invocations: 128,
        };
        flexible_dimensions(&shape, &mut entry);
        assert_eq!(entry.s_type.as_raw(), FLEXIBLE_DIMENSIONS_STYPE);
        assert_eq!(
            (entry.granularity, entry.workgroup_invocations, entry.saturating_accumulation),
            ([32, 16, 16], 128, 0)
        );
    }

    #[test]
    fn texts_are_cut_to_fit_and_terminated() {
        let mut field = [1 as c_char; 4];
        set_text(&mut field, "abcdef");
        assert_eq!(field, [b'a' as c_char, b'b' as c_char, b'c' as c_char, 0]);
    }
}
