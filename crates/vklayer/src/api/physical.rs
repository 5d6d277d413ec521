//! The physical-device queries an impersonating layer answers from its profile (`crate::impersonate`), and the
//! device creation it forwards in place of the application's. Handed out (by `vkGetInstanceProcAddr` and the
//! loader's `vk_layerGetPhysicalDeviceProcAddr`) only while `BACKSCOPE_VK_IMPERSONATE` is set, so that a layer
//! without it forwards these calls exactly as before.

use std::ffi::{c_char, c_void};

use ash::vk;
use ash::vk::Handle;

use super::calls::{name_bytes, watched};
use crate::dispatch::{self, InstanceDispatch};
use crate::impersonate::{self, answers, Profile};
use crate::locus::call;
use crate::pipelines::{self, ImpersonatedFacts};
use crate::{device, state};

/// The physical-device commands answered from the profile.
pub(super) fn physical_hook(name: &[u8]) -> vk::PFN_vkVoidFunction {
    if !impersonate::requested() {
        return None;
    }
    match name {
        b"vkGetPhysicalDeviceProperties" => hook!(properties, vk::PFN_vkGetPhysicalDeviceProperties),
        b"vkGetPhysicalDeviceProperties2" | b"vkGetPhysicalDeviceProperties2KHR" => {
            hook!(properties2, vk::PFN_vkGetPhysicalDeviceProperties2)
        }
        b"vkGetPhysicalDeviceFeatures" => hook!(features, vk::PFN_vkGetPhysicalDeviceFeatures),
        b"vkGetPhysicalDeviceFeatures2" | b"vkGetPhysicalDeviceFeatures2KHR" => {
            hook!(features2, vk::PFN_vkGetPhysicalDeviceFeatures2)
        }
        b"vkEnumerateDeviceExtensionProperties" => {
            hook!(enumerate_extensions, vk::PFN_vkEnumerateDeviceExtensionProperties)
        }
        b"vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR" => {
            hook!(cooperative_matrix, vk::PFN_vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR)
        }
        b"vkGetPhysicalDeviceCooperativeMatrixFlexibleDimensionsPropertiesNV" => {
            hook!(flexible_dimensions, FlexibleDimensions)
        }
        _ => None,
    }
}

/// `PFN_vkGetPhysicalDeviceCooperativeMatrixFlexibleDimensionsPropertiesNV` (newer than ash's headers).
type FlexibleDimensions =
    unsafe extern "system" fn(vk::PhysicalDevice, *mut u32, *mut answers::FlexibleDimensionsProperties) -> vk::Result;

/// The loader's entry for physical-device commands it does not know itself (`vk_layerGetPhysicalDeviceProcAddr`):
/// the commands above, else the next link's.
pub(super) unsafe extern "system" fn get_physical_device_proc_addr(
    instance: vk::Instance,
    name: *const c_char,
) -> vk::PFN_vkVoidFunction {
    // SAFETY: the loader passes a command name.
    let n = unsafe { name_bytes(name) };
    if let Some(f) = physical_hook(n) {
        return Some(f);
    }
    if instance == vk::Instance::null() {
        return None;
    }
    // SAFETY: a non-null instance handle of this chain.
    let next = unsafe { dispatch::instance(instance.as_raw() as *mut u8) }?.get_physical_device_proc_addr?;
    // SAFETY: the next link's own entry, with its instance.
    unsafe { next(instance, name) }
}

fn instance_of(physical: vk::PhysicalDevice) -> Option<&'static InstanceDispatch> {
    // SAFETY: applications pass valid physical device handles, which share their instance's dispatch key.
    unsafe { dispatch::instance(physical.as_raw() as *mut u8) }
}

unsafe extern "system" fn properties(physical: vk::PhysicalDevice, out: *mut vk::PhysicalDeviceProperties) {
    let Some(inst) = instance_of(physical) else { return };
    if let Some(next) = inst.get_physical_device_properties {
        // SAFETY: forwarding the caller's arguments.
        unsafe { next(physical, out) };
    }
    if let (Some(p), false) = (impersonate::active(), out.is_null()) {
        // SAFETY: the caller's writable output structure.
        answers::properties(p, unsafe { &mut *out });
    }
}

unsafe extern "system" fn properties2(physical: vk::PhysicalDevice, out: *mut vk::PhysicalDeviceProperties2<'_>) {
    let Some(inst) = instance_of(physical) else { return };
    if let Some(next) = inst.get_physical_device_properties2 {
        // SAFETY: forwarding the caller's arguments (drivers skip structures they do not know).
        unsafe { next(physical, out) };
    }
    if let (Some(p), false) = (impersonate::active(), out.is_null()) {
        // SAFETY: the caller's valid, writable chain.
        unsafe { answers::properties2(p, &mut *out) };
    }
}

unsafe extern "system" fn features(physical: vk::PhysicalDevice, out: *mut vk::PhysicalDeviceFeatures) {
    let Some(inst) = instance_of(physical) else { return };
    if let Some(next) = inst.get_physical_device_features {
        // SAFETY: forwarding the caller's arguments.
        unsafe { next(physical, out) };
    }
    if let (Some(p), false) = (impersonate::active(), out.is_null()) {
        // SAFETY: the caller's writable output structure.
        answers::features(p, unsafe { &mut *out });
    }
}

unsafe extern "system" fn features2(physical: vk::PhysicalDevice, out: *mut vk::PhysicalDeviceFeatures2<'_>) {
    let Some(inst) = instance_of(physical) else { return };
    if let Some(next) = inst.get_physical_device_features2 {
        // SAFETY: forwarding the caller's arguments (drivers skip structures they do not know).
        unsafe { next(physical, out) };
    }
    if let (Some(p), false) = (impersonate::active(), out.is_null()) {
        // SAFETY: the caller's valid, writable chain.
        unsafe { answers::features2(p, &mut *out) };
    }
}

/// Fills a Vulkan "count, then array" query from `items`: the count when `out` is null, else as many as fit
/// (`VK_INCOMPLETE` when not all did).
///
/// # Safety
/// `count` must be writable; `out` null or room for `*count` elements.
unsafe fn fill<T: Copy>(items: &[T], count: *mut u32, out: *mut T) -> vk::Result {
    if count.is_null() {
        return vk::Result::ERROR_INITIALIZATION_FAILED;
    }
    if out.is_null() {
        // SAFETY: the caller's promise.
        unsafe { *count = items.len() as u32 };
        return vk::Result::SUCCESS;
    }
    // SAFETY: the caller's promise.
    let room = unsafe { *count } as usize;
    let written = room.min(items.len());
    // SAFETY: `out` has room for `room` elements.
    unsafe {
        std::ptr::copy_nonoverlapping(items.as_ptr(), out, written);
        *count = written as u32;
    }
    if written < items.len() {
        vk::Result::INCOMPLETE
    } else {
        vk::Result::SUCCESS
    }
}

unsafe extern "system" fn enumerate_extensions(
    physical: vk::PhysicalDevice,
    layer: *const c_char,
    count: *mut u32,
    out: *mut vk::ExtensionProperties,
) -> vk::Result {
    let Some(inst) = instance_of(physical) else { return vk::Result::ERROR_INITIALIZATION_FAILED };
    let Some(next) = inst.enumerate_device_extension_properties else {
        return vk::Result::ERROR_INITIALIZATION_FAILED;
    };
    let Some(p) = impersonate::active().filter(|_| layer.is_null()) else {
        // SAFETY: forwarding the caller's arguments (a layer's own extensions are not the device's).
        return unsafe { next(physical, layer, count, out) };
    };
    // SAFETY: a physical device of `inst`'s instance.
    let real = unsafe { device::extensions(inst, physical) };
    let items: Vec<vk::ExtensionProperties> = p
        .extensions
        .iter()
        .filter(|name| !impersonate::hidden(name, &real))
        .map(|name| {
            let mut e = vk::ExtensionProperties { spec_version: 1, ..Default::default() };
            let bytes = &name.as_bytes()[..name.len().min(e.extension_name.len() - 1)];
            for (slot, &b) in e.extension_name.iter_mut().zip(bytes) {
                *slot = b as c_char;
            }
            e
        })
        .collect();
    // SAFETY: the caller's count and array.
    unsafe { fill(&items, count, out) }
}

unsafe extern "system" fn cooperative_matrix(
    _physical: vk::PhysicalDevice,
    count: *mut u32,
    out: *mut vk::CooperativeMatrixPropertiesKHR<'_>,
) -> vk::Result {
    let Some(p) = impersonate::active() else { return vk::Result::ERROR_INITIALIZATION_FAILED };
    if out.is_null() {
        // SAFETY: the caller's count.
        return unsafe { fill(&p.cooperative_matrix, count, std::ptr::null_mut()) };
    }
    // The application's elements carry its sType and pNext: keep them, write the values.
    // SAFETY: the caller's count and array of `*count` elements.
    unsafe {
        let room = (*count as usize).min(p.cooperative_matrix.len());
        for (i, shape) in p.cooperative_matrix.iter().take(room).enumerate() {
            let slot = &mut *out.add(i);
            let p_next = slot.p_next;
            *slot = vk::CooperativeMatrixPropertiesKHR { p_next, ..*shape };
        }
        *count = room as u32;
        if room < p.cooperative_matrix.len() {
            vk::Result::INCOMPLETE
        } else {
            vk::Result::SUCCESS
        }
    }
}

unsafe extern "system" fn flexible_dimensions(
    _physical: vk::PhysicalDevice,
    count: *mut u32,
    out: *mut answers::FlexibleDimensionsProperties,
) -> vk::Result {
    let Some(p) = impersonate::active() else { return vk::Result::ERROR_INITIALIZATION_FAILED };
    if count.is_null() {
        return vk::Result::ERROR_INITIALIZATION_FAILED;
    }
    let shapes = &p.flexible_dimensions;
    // SAFETY: the caller's count, and (when `out` is not null) its array of `*count` elements, whose sType and
    // pNext it set and which are kept.
    unsafe {
        if out.is_null() {
            *count = shapes.len() as u32;
            return vk::Result::SUCCESS;
        }
        let room = (*count as usize).min(shapes.len());
        for (i, shape) in shapes.iter().take(room).enumerate() {
            answers::flexible_dimensions(shape, &mut *out.add(i));
        }
        *count = room as u32;
        if room < shapes.len() {
            vk::Result::INCOMPLETE
        } else {
            vk::Result::SUCCESS
        }
    }
}

/// The two links `create_device` calls through: the next layer's vkCreateDevice, and this layer's own
/// vkGetInstanceProcAddr (the device's facts are read as the application sees them, through this layer's answers).
pub(super) struct Chain {
    pub next_create: vk::PFN_vkCreateDevice,
    pub layer_gipa: vk::PFN_vkGetInstanceProcAddr,
}

/// `vkCreateDevice` of an impersonating layer: the application's create info cut down to what the real device
/// offers; the device's facts (the trace's `device` record) are the profile's, with the real device named.
///
/// # Safety
/// As for `vkCreateDevice`; `inst` is `physical`'s instance and `next_create` the next link's command.
pub(super) unsafe fn create_device(
    inst: &InstanceDispatch,
    profile: &'static Profile,
    physical: vk::PhysicalDevice,
    info: *const vk::DeviceCreateInfo<'_>,
    allocator: *const vk::AllocationCallbacks<'_>,
    out: *mut vk::Device,
    chain: Chain,
) -> (vk::Result, Option<u32>) {
    let Chain { next_create, layer_gipa } = chain;
    // SAFETY: a physical device of `inst`'s instance.
    let real_extensions = unsafe { device::extensions(inst, physical) };
    let mut real_props = vk::PhysicalDeviceProperties::default();
    if let Some(get) = inst.get_physical_device_properties {
        // SAFETY: fills one structure.
        unsafe { get(physical, &mut real_props) };
    }
    impersonate::set_real_group_count(real_props.limits.max_compute_work_group_count);
    let query = |f: &mut vk::PhysicalDeviceFeatures2<'_>| {
        if let Some(get) = inst.get_physical_device_features2 {
            // SAFETY: a chain of live structures the layer built.
            unsafe { get(physical, f) };
        }
    };
    let real = impersonate::RealDevice {
        extensions: &real_extensions,
        api_minor: vk::api_version_minor(real_props.api_version),
        query: &query,
    };
    // SAFETY: the caller's valid create info.
    let copy = unsafe { impersonate::device_create_info(&*info, &real) };
    if !copy.dropped.is_empty() {
        state::note(format_args!(
            "impersonating {}: not enabled on the real device (it lacks them): {}",
            profile.id,
            copy.dropped.join(", ")
        ));
    }
    // SAFETY: the copy is a valid create info whose storage lives until the call returns.
    let result = watched(&call::CREATE_DEVICE, || unsafe { next_create(physical, copy.info(), allocator, out) });
    if result != vk::Result::SUCCESS || !state::on() {
        return (result, None);
    }
    let facts_id = state::guarded(|| {
        pipelines::device_id(physical.as_raw(), || {
            // The facts as the application sees them: through this layer's own answers.
            // SAFETY: the layer's vkGetInstanceProcAddr resolves for the same instance.
            let view = unsafe { InstanceDispatch::new(inst.instance, layer_gipa) };
            // SAFETY: a physical device of that instance.
            let mut facts = unsafe { device::facts(&view, physical, &device::extensions(&view, physical)) };
            let mut driver = vk::PhysicalDeviceDriverProperties::default();
            if let Some(get2) = inst.get_physical_device_properties2 {
                let mut props2 = vk::PhysicalDeviceProperties2 {
                    p_next: &mut driver as *mut _ as *mut c_void,
                    ..Default::default()
                };
                // SAFETY: one live output structure every Vulkan 1.2 driver knows.
                unsafe { get2(physical, &mut props2) };
            }
            facts.impersonated = Some(ImpersonatedFacts {
                profile: profile.id.as_bytes().to_vec(),
                profile_source: profile.source.as_bytes().to_vec(),
                real_name: device::c_text(&real_props.device_name),
                real_driver: device::c_text(&driver.driver_name),
            });
            facts
        })
    })
    .flatten();
    (result, facts_id)
}

/// Replaces a shader module's code with the empty shader (`impersonate::EMPTY_SHADER`).
pub(super) fn empty_module_info<'a>(info: &vk::ShaderModuleCreateInfo<'a>) -> vk::ShaderModuleCreateInfo<'a> {
    vk::ShaderModuleCreateInfo {
        p_next: std::ptr::null(),
        code_size: std::mem::size_of_val(&impersonate::EMPTY_SHADER),
        p_code: impersonate::EMPTY_SHADER.as_ptr(),
        ..*info
    }
}
