//! What an impersonating layer forwards in place of the application's device and pipeline creation: the
//! application asked for what the profiled device offers, the real device gets what it offers of that.

use std::ffi::{c_char, c_void, CStr};

use ash::vk;

use super::answers::feature_struct;
use crate::loader;

/// Bytes copied of a loader link structure (`VkLayerDeviceCreateInfo`: sType, pNext, function, and a union of at
/// most two pointers in the loader's `vk_layer.h`).
const LOADER_STRUCT_BYTES: usize = 40;

/// A device create info the real device can take, with the storage it points into.
pub struct DeviceCreateCopy {
    info: vk::DeviceCreateInfo<'static>,
    /// The copied chain structures, each in 8-byte words (their pointers stay put when the copy moves).
    _structs: Vec<Box<[u64]>>,
    _names: Vec<*const c_char>,
    _core: Option<Box<vk::PhysicalDeviceFeatures>>,
    /// What was left out: extension names and feature structures the real device lacks.
    pub dropped: Vec<String>,
}

impl DeviceCreateCopy {
    pub fn info(&self) -> *const vk::DeviceCreateInfo<'static> {
        &self.info
    }
}

/// What the real device says about features: `query` fills a `VkPhysicalDeviceFeatures2` chain from the driver.
pub struct RealDevice<'a> {
    pub extensions: &'a [Vec<u8>],
    pub api_minor: u32,
    pub query: &'a dyn Fn(&mut vk::PhysicalDeviceFeatures2<'_>),
}

fn words_for(bytes: usize) -> Box<[u64]> {
    vec![0u64; bytes.div_ceil(8)].into_boxed_slice()
}

/// ANDs `count` `VkBool32`s at `ours` with those at `real`.
///
/// # Safety
/// Both must point to `count` consecutive `VkBool32`s; `ours` writable.
unsafe fn and_bools(ours: *mut vk::Bool32, real: *const vk::Bool32, count: usize) {
    for i in 0..count {
        // SAFETY: the caller's promise.
        unsafe { *ours.add(i) = vk::Bool32::from(*ours.add(i) != 0 && *real.add(i) != 0) };
    }
}

/// The application's `VkDeviceCreateInfo` cut down to what the real device offers: its extensions only, feature
/// structures it does not know unlinked, the rest ANDed with its own features; the loader's link structures kept.
/// Structures of any other kind are left out (ggml-vulkan chains only feature structures).
///
/// # Safety
/// `info` must be a valid `VkDeviceCreateInfo`.
pub unsafe fn device_create_info(info: &vk::DeviceCreateInfo<'_>, real: &RealDevice<'_>) -> DeviceCreateCopy {
    let mut dropped = Vec::new();
    let names: Vec<*const c_char> = if info.pp_enabled_extension_names.is_null() {
        Vec::new()
    } else {
        // SAFETY: a valid create info holds that many NUL-terminated names.
        unsafe { std::slice::from_raw_parts(info.pp_enabled_extension_names, info.enabled_extension_count as usize) }
            .iter()
            .copied()
            .filter(|&n| {
                // SAFETY: as above.
                let name = unsafe { CStr::from_ptr(n) }.to_bytes();
                let kept = real.extensions.iter().any(|e| e == name);
                if !kept {
                    dropped.push(String::from_utf8_lossy(name).into_owned());
                }
                kept
            })
            .collect()
    };
    let mut real_core = vk::PhysicalDeviceFeatures2::default();
    (real.query)(&mut real_core);
    let core_count = std::mem::size_of::<vk::PhysicalDeviceFeatures>() / 4;
    let mut structs: Vec<Box<[u64]>> = Vec::new();
    // SAFETY: the chain of a valid create info.
    for s in unsafe { loader::chain(info.p_next) } {
        // SAFETY: a live structure of the chain.
        let s_type = unsafe { (*s).s_type };
        let copy = |bytes: usize| {
            let mut words = words_for(bytes);
            // SAFETY: a structure of at least `bytes` bytes (its sType says which) into a buffer of that size.
            unsafe { std::ptr::copy_nonoverlapping(s as *const u8, words.as_mut_ptr() as *mut u8, bytes) };
            words
        };
        if s_type == vk::StructureType::PHYSICAL_DEVICE_FEATURES_2 {
            let mut words = copy(std::mem::size_of::<vk::PhysicalDeviceFeatures2<'_>>());
            let ours = words.as_mut_ptr() as *mut vk::PhysicalDeviceFeatures2<'_>;
            // SAFETY: the copy is a VkPhysicalDeviceFeatures2; its core features are `core_count` VkBool32s.
            unsafe {
                and_bools(
                    &mut (*ours).features as *mut _ as *mut vk::Bool32,
                    &real_core.features as *const _ as *const vk::Bool32,
                    core_count,
                )
            };
            structs.push(words);
        } else if s_type == vk::StructureType::LOADER_DEVICE_CREATE_INFO {
            structs.push(copy(LOADER_STRUCT_BYTES));
        } else if let Some(table) = feature_struct(s_type) {
            let known = table.extension.is_some_and(|e| real.extensions.iter().any(|r| r == e.as_bytes()))
                || table.core_minor.is_some_and(|m| m <= real.api_minor);
            if !known {
                dropped.push(table.name.to_string());
                continue;
            }
            let bytes = 16 + 4 * table.members.len();
            let mut words = copy(bytes);
            // The real device's values of the same structure, asked alone.
            let mut real_words = words_for(bytes);
            // SAFETY: the buffer starts with a BaseIn: sType, then a null pNext.
            unsafe { *(real_words.as_mut_ptr() as *mut vk::StructureType) = s_type };
            let mut query =
                vk::PhysicalDeviceFeatures2 { p_next: real_words.as_mut_ptr() as *mut c_void, ..Default::default() };
            (real.query)(&mut query);
            // SAFETY: both buffers hold the structure: `members` VkBool32s after 16 bytes.
            unsafe {
                and_bools(
                    (words.as_mut_ptr() as *mut u8).add(16) as *mut vk::Bool32,
                    (real_words.as_ptr() as *const u8).add(16) as *const vk::Bool32,
                    table.members.len(),
                )
            };
            structs.push(words);
        } else {
            dropped.push(format!("structure {}", s_type.as_raw()));
        }
    }
    // Link the copies in their original order.
    for i in 1..structs.len() {
        let next = structs[i].as_ptr() as *mut c_void;
        // SAFETY: every copy starts with sType and pNext.
        unsafe { (*(structs[i - 1].as_mut_ptr() as *mut loader::BaseIn)).p_next = next as *const loader::BaseIn };
    }
    if let Some(last) = structs.last_mut() {
        // SAFETY: as above.
        unsafe { (*(last.as_mut_ptr() as *mut loader::BaseIn)).p_next = std::ptr::null() };
    }
    let core = (!info.p_enabled_features.is_null()).then(|| {
        // SAFETY: a valid create info's enabled features.
        let mut core = Box::new(unsafe { *info.p_enabled_features });
        // SAFETY: both are VkPhysicalDeviceFeatures, `core_count` VkBool32s.
        unsafe {
            and_bools(
                &mut *core as *mut _ as *mut vk::Bool32,
                &real_core.features as *const _ as *const vk::Bool32,
                core_count,
            )
        };
        core
    });
    let mut copy = vk::DeviceCreateInfo {
        flags: info.flags,
        queue_create_info_count: info.queue_create_info_count,
        // The copy outlives nothing it points at: it is used within the application's call.
        p_queue_create_infos: info.p_queue_create_infos.cast(),
        enabled_extension_count: names.len() as u32,
        pp_enabled_extension_names: names.as_ptr(),
        p_enabled_features: core.as_deref().map_or(std::ptr::null(), |c| c as *const _),
        ..Default::default()
    };
    copy.p_next = structs.first().map_or(std::ptr::null(), |s| s.as_ptr() as *const c_void);
    DeviceCreateCopy { info: copy, _structs: structs, _names: names, _core: core, dropped }
}

/// Compute pipeline create infos the real device can take for the empty shader: no extension structures, no
/// flags (required subgroup sizes, full subgroups, statistics capture, 64-bit indexing all concern the shader
/// that was replaced), entry point `main`. Module, layout and specialization constants are the application's.
pub struct PipelineCopies(Vec<vk::ComputePipelineCreateInfo<'static>>);

impl PipelineCopies {
    pub fn as_ptr(&self) -> *const vk::ComputePipelineCreateInfo<'static> {
        self.0.as_ptr()
    }
}

/// # Safety
/// `infos` must be valid create infos, alive while the copies are used.
pub unsafe fn pipeline_create_infos(infos: &[vk::ComputePipelineCreateInfo<'_>]) -> PipelineCopies {
    PipelineCopies(
        infos
            .iter()
            .map(|info| {
                let stage = &info.stage;
                vk::ComputePipelineCreateInfo {
                    s_type: info.s_type,
                    p_next: std::ptr::null(),
                    flags: vk::PipelineCreateFlags::empty(),
                    stage: vk::PipelineShaderStageCreateInfo {
                        s_type: stage.s_type,
                        p_next: std::ptr::null(),
                        flags: vk::PipelineShaderStageCreateFlags::empty(),
                        stage: stage.stage,
                        module: stage.module,
                        p_name: c"main".as_ptr(),
                        // The caller keeps the specialization info alive while the copies are used.
                        p_specialization_info: stage.p_specialization_info.cast(),
                        _marker: std::marker::PhantomData,
                    },
                    layout: info.layout,
                    base_pipeline_handle: vk::Pipeline::null(),
                    base_pipeline_index: -1,
                    _marker: std::marker::PhantomData,
                }
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_real_device_gets_only_what_it_offers() {
        // The application asks for FP16 (Vulkan 1.2 features), cooperative matrix (unknown to the real device) and
        // two extensions, one of which the real device lacks.
        let mut coopmat =
            vk::PhysicalDeviceCooperativeMatrixFeaturesKHR { cooperative_matrix: vk::TRUE, ..Default::default() };
        let mut v12 = vk::PhysicalDeviceVulkan12Features {
            shader_float16: vk::TRUE,
            buffer_device_address: vk::TRUE,
            p_next: &mut coopmat as *mut _ as *mut c_void,
            ..Default::default()
        };
        let mut f2 = vk::PhysicalDeviceFeatures2 { p_next: &mut v12 as *mut _ as *mut c_void, ..Default::default() };
        f2.features.shader_int64 = vk::TRUE;
        f2.features.shader_float64 = vk::TRUE;
        let names = [c"VK_KHR_16bit_storage".as_ptr(), c"VK_KHR_cooperative_matrix".as_ptr()];
        let info = vk::DeviceCreateInfo {
            p_next: &f2 as *const _ as *const c_void,
            enabled_extension_count: 2,
            pp_enabled_extension_names: names.as_ptr(),
            ..Default::default()
        };
        // The real device: Vulkan 1.3, offers shaderFloat16 and shaderInt64 but neither bufferDeviceAddress nor
        // shaderFloat64.
        let query = |f: &mut vk::PhysicalDeviceFeatures2<'_>| {
            f.features.shader_int64 = vk::TRUE;
            // SAFETY: the chain the code under test builds.
            for s in unsafe { loader::chain(f.p_next) } {
                // SAFETY: as above.
                if unsafe { (*s).s_type } == vk::StructureType::PHYSICAL_DEVICE_VULKAN_1_2_FEATURES {
                    // SAFETY: that sType is this structure.
                    unsafe { (*(s as *mut vk::PhysicalDeviceVulkan12Features<'_>)).shader_float16 = vk::TRUE };
                }
            }
        };
        let extensions = vec![b"VK_KHR_16bit_storage".to_vec()];
        let real = RealDevice { extensions: &extensions, api_minor: 3, query: &query };
        // SAFETY: a valid create info of live structures.
        let copy = unsafe { device_create_info(&info, &real) };
        assert_eq!(copy.dropped, ["VK_KHR_cooperative_matrix", "VkPhysicalDeviceCooperativeMatrixFeaturesKHR"]);
        // SAFETY: the copy's own create info and chain.
        unsafe {
            let out = &*copy.info();
            assert_eq!(out.enabled_extension_count, 1);
            let f2 = &*(out.p_next as *const vk::PhysicalDeviceFeatures2<'_>);
            assert_eq!((f2.features.shader_int64, f2.features.shader_float64), (vk::TRUE, vk::FALSE));
            let v12 = &*(f2.p_next as *const vk::PhysicalDeviceVulkan12Features<'_>);
            assert!(v12.s_type == vk::StructureType::PHYSICAL_DEVICE_VULKAN_1_2_FEATURES);
            assert_eq!((v12.shader_float16, v12.buffer_device_address), (vk::TRUE, vk::FALSE));
            assert!(v12.p_next.is_null(), "the unknown structure is unlinked");
        }
        // The application's own structures are untouched.
        assert_eq!(v12.buffer_device_address, vk::TRUE);
    }

    #[test]
    fn pipelines_lose_what_concerned_the_replaced_shader() {
        let required =
            vk::PipelineShaderStageRequiredSubgroupSizeCreateInfo { required_subgroup_size: 64, ..Default::default() };
        let stage = vk::PipelineShaderStageCreateInfo {
            p_next: &required as *const _ as *const c_void,
            flags: vk::PipelineShaderStageCreateFlags::REQUIRE_FULL_SUBGROUPS,
            p_name: c"entry".as_ptr(),
            ..Default::default()
        };
        let info = vk::ComputePipelineCreateInfo {
            flags: vk::PipelineCreateFlags::CAPTURE_STATISTICS_KHR,
            stage,
            ..Default::default()
        };
        // SAFETY: a valid create info.
        let copies = unsafe { pipeline_create_infos(&[info]) };
        let c = &copies.0[0];
        assert!(c.stage.p_next.is_null() && c.stage.flags.is_empty() && c.flags.is_empty());
        // SAFETY: a static C string.
        assert_eq!(unsafe { CStr::from_ptr(c.stage.p_name) }, c"main");
    }
}
