//! The layer's entry points: the one exported function the loader looks up
//! (`vkNegotiateLoaderLayerInterfaceVersion`), the `vkGetInstanceProcAddr` / `vkGetDeviceProcAddr` it
//! hands the loader, and the hooks those return.
//!
//! Every hook forwards its call, with the caller's arguments, to the next link found through the
//! handle's dispatch table, and returns that result. The only calls the layer changes are the ones
//! that make a device record pipeline statistics (`device::Statistics::ByLayer`): the device is
//! created with `VK_KHR_pipeline_executable_properties` and its feature added (retried without them
//! if that fails), and compute pipelines with `VK_PIPELINE_CREATE_CAPTURE_STATISTICS_BIT_KHR`; no
//! result an application sees changes. Observation runs under `state::guarded`, after or around
//! the forwarded call, and is skipped while the layer is off.

use std::ffi::{c_char, c_void};

use ash::vk;
use ash::vk::Handle;

use crate::device;
use crate::dispatch::{self, device_of, DeviceDispatch, InstanceDispatch};
use crate::loader::{self, dispatch_key, NegotiateLayerInterface};
use crate::locus::call;
use crate::pipelines::{self};
use crate::state;

mod calls;
mod objects;
mod recording;

use calls::*;
use objects::*;
use recording::*;

/// The loader's entry into the layer (interface version 2: the loader gets the layer's
/// `vkGetInstanceProcAddr` and `vkGetDeviceProcAddr` from here).
///
/// # Safety
/// `negotiate` must point to the loader's negotiation structure.
#[cfg_attr(not(test), no_mangle)]
#[allow(non_snake_case)]
pub unsafe extern "system" fn vkNegotiateLoaderLayerInterfaceVersion(
    negotiate: *mut NegotiateLayerInterface,
) -> vk::Result {
    if negotiate.is_null() {
        return vk::Result::ERROR_INITIALIZATION_FAILED;
    }
    // SAFETY: the loader passes a valid, writable structure (checked non-null above).
    let n = unsafe { &mut *negotiate };
    if n.s_type != loader::LAYER_NEGOTIATE_INTERFACE_STRUCT || n.loader_layer_interface_version < 2 {
        return vk::Result::ERROR_INITIALIZATION_FAILED;
    }
    n.loader_layer_interface_version = n.loader_layer_interface_version.min(loader::INTERFACE_VERSION);
    n.pfn_get_instance_proc_addr = Some(get_instance_proc_addr);
    n.pfn_get_device_proc_addr = Some(get_device_proc_addr);
    // Only an impersonating layer answers physical-device commands the loader may not know itself
    // (vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR on older loaders).
    n.pfn_get_physical_device_proc_addr = crate::impersonate::requested()
        .then_some(physical::get_physical_device_proc_addr as unsafe extern "system" fn(_, _) -> _);
    vk::Result::SUCCESS
}

/// A hook as the untyped pointer `vkGet*ProcAddr` returns.
macro_rules! hook {
    ($f:expr, $t:ty) => {{
        let f: $t = $f;
        // SAFETY: a function pointer cast to the untyped function pointer the loader expects; the
        // caller casts it back to the command's type.
        Some(unsafe { std::mem::transmute::<$t, unsafe extern "system" fn()>(f) })
    }};
}

mod physical;

/// Instance-level commands the layer implements.
fn instance_hook(name: &[u8]) -> vk::PFN_vkVoidFunction {
    match name {
        b"vkGetInstanceProcAddr" => hook!(get_instance_proc_addr, vk::PFN_vkGetInstanceProcAddr),
        b"vkGetDeviceProcAddr" => hook!(get_device_proc_addr, vk::PFN_vkGetDeviceProcAddr),
        b"vkCreateInstance" => hook!(create_instance, vk::PFN_vkCreateInstance),
        b"vkDestroyInstance" => hook!(destroy_instance, vk::PFN_vkDestroyInstance),
        b"vkCreateDevice" => hook!(create_device, vk::PFN_vkCreateDevice),
        _ => physical::physical_hook(name),
    }
}

/// Whether the layer hooks the commands that record into command buffers. Not where each of those hooks would only
/// forward for the rest of the process: the layer is off (started without a trace destination, it never observes
/// later) and no profile is impersonated. The loader then calls the next link's functions directly, and a process
/// that loads the layer without tracing pays nothing per recorded command.
fn recording_hooked() -> bool {
    state::on() || crate::impersonate::requested()
}

/// Whether the layer hooks pipeline barriers: only where the black box puts markers after them (`sync`, `barrier`).
/// With any other placement the barrier hooks only forward, and ggml-vulkan records a barrier between dependent
/// nodes: about 240 calls a token in a small model's decode that now go to the driver directly.
fn barriers_hooked() -> bool {
    recording_hooked() && crate::progress::markers_at_barriers()
}

/// Device-level commands the layer hooks.
fn device_hook(name: &[u8]) -> vk::PFN_vkVoidFunction {
    match name {
        b"vkGetDeviceProcAddr" => hook!(get_device_proc_addr, vk::PFN_vkGetDeviceProcAddr),
        b"vkDestroyDevice" => hook!(destroy_device, vk::PFN_vkDestroyDevice),
        b"vkCreateShaderModule" => hook!(create_shader_module, vk::PFN_vkCreateShaderModule),
        b"vkDestroyShaderModule" => hook!(destroy_shader_module, vk::PFN_vkDestroyShaderModule),
        b"vkCreateComputePipelines" => hook!(create_compute_pipelines, vk::PFN_vkCreateComputePipelines),
        b"vkDestroyPipeline" => hook!(destroy_pipeline, vk::PFN_vkDestroyPipeline),
        b"vkSetDebugUtilsObjectNameEXT" => hook!(set_debug_utils_object_name, vk::PFN_vkSetDebugUtilsObjectNameEXT),
        b"vkCmdBeginDebugUtilsLabelEXT" if recording_hooked() => {
            hook!(cmd_begin_label, vk::PFN_vkCmdBeginDebugUtilsLabelEXT)
        }
        b"vkCmdEndDebugUtilsLabelEXT" if recording_hooked() => hook!(cmd_end_label, vk::PFN_vkCmdEndDebugUtilsLabelEXT),
        b"vkAllocateCommandBuffers" => hook!(allocate_command_buffers, vk::PFN_vkAllocateCommandBuffers),
        b"vkFreeCommandBuffers" => hook!(free_command_buffers, vk::PFN_vkFreeCommandBuffers),
        b"vkDestroyCommandPool" => hook!(destroy_command_pool, vk::PFN_vkDestroyCommandPool),
        b"vkResetCommandPool" => hook!(reset_command_pool, vk::PFN_vkResetCommandPool),
        b"vkBeginCommandBuffer" if recording_hooked() => hook!(begin_command_buffer, vk::PFN_vkBeginCommandBuffer),
        b"vkResetCommandBuffer" if recording_hooked() => hook!(reset_command_buffer, vk::PFN_vkResetCommandBuffer),
        b"vkCmdBindPipeline" if recording_hooked() => hook!(cmd_bind_pipeline, vk::PFN_vkCmdBindPipeline),
        b"vkCmdDispatch" if recording_hooked() => hook!(cmd_dispatch, vk::PFN_vkCmdDispatch),
        b"vkCmdDispatchBase" if recording_hooked() => hook!(cmd_dispatch_base::<false>, vk::PFN_vkCmdDispatchBase),
        b"vkCmdDispatchBaseKHR" if recording_hooked() => hook!(cmd_dispatch_base::<true>, vk::PFN_vkCmdDispatchBase),
        b"vkCmdDispatchIndirect" if recording_hooked() => hook!(cmd_dispatch_indirect, vk::PFN_vkCmdDispatchIndirect),
        b"vkCmdExecuteCommands" if recording_hooked() => hook!(cmd_execute_commands, vk::PFN_vkCmdExecuteCommands),
        // The black box's "completed" markers at the program's own sync points (`crate::progress`).
        b"vkCmdPipelineBarrier" if barriers_hooked() => hook!(cmd_pipeline_barrier, vk::PFN_vkCmdPipelineBarrier),
        b"vkCmdPipelineBarrier2" if barriers_hooked() => {
            hook!(cmd_pipeline_barrier2::<false>, vk::PFN_vkCmdPipelineBarrier2)
        }
        b"vkCmdPipelineBarrier2KHR" if barriers_hooked() => {
            hook!(cmd_pipeline_barrier2::<true>, vk::PFN_vkCmdPipelineBarrier2)
        }
        b"vkEndCommandBuffer" if recording_hooked() => hook!(end_command_buffer, vk::PFN_vkEndCommandBuffer),
        b"vkQueueSubmit" => hook!(queue_submit, vk::PFN_vkQueueSubmit),
        b"vkQueueSubmit2" => hook!(queue_submit2::<false>, vk::PFN_vkQueueSubmit2),
        b"vkQueueSubmit2KHR" => hook!(queue_submit2::<true>, vk::PFN_vkQueueSubmit2),
        b"vkWaitForFences" => hook!(wait_for_fences, vk::PFN_vkWaitForFences),
        b"vkGetFenceStatus" => hook!(get_fence_status, vk::PFN_vkGetFenceStatus),
        b"vkQueueWaitIdle" => hook!(queue_wait_idle, vk::PFN_vkQueueWaitIdle),
        b"vkDeviceWaitIdle" => hook!(device_wait_idle, vk::PFN_vkDeviceWaitIdle),
        b"vkWaitSemaphores" => hook!(wait_semaphores::<false>, vk::PFN_vkWaitSemaphores),
        b"vkWaitSemaphoresKHR" => hook!(wait_semaphores::<true>, vk::PFN_vkWaitSemaphores),
        b"vkGetSemaphoreCounterValue" => {
            hook!(get_semaphore_counter_value::<false>, vk::PFN_vkGetSemaphoreCounterValue)
        }
        b"vkGetSemaphoreCounterValueKHR" => {
            hook!(get_semaphore_counter_value::<true>, vk::PFN_vkGetSemaphoreCounterValue)
        }
        b"vkGetQueryPoolResults" => hook!(get_query_pool_results, vk::PFN_vkGetQueryPoolResults),
        b"vkAllocateMemory" => hook!(allocate_memory, vk::PFN_vkAllocateMemory),
        b"vkMapMemory" => hook!(map_memory, vk::PFN_vkMapMemory),
        // Only an impersonating process needs its descriptors followed (`impersonate::readback`).
        b"vkUpdateDescriptorSets" if crate::impersonate::requested() => {
            hook!(update_descriptor_sets, vk::PFN_vkUpdateDescriptorSets)
        }
        b"vkCmdBindDescriptorSets" if crate::impersonate::requested() => {
            hook!(cmd_bind_descriptor_sets, vk::PFN_vkCmdBindDescriptorSets)
        }
        _ => None,
    }
}

unsafe extern "system" fn get_instance_proc_addr(
    instance: vk::Instance,
    name: *const c_char,
) -> vk::PFN_vkVoidFunction {
    // SAFETY: the loader and applications pass a command name.
    let n = unsafe { name_bytes(name) };
    if let Some(f) = instance_hook(n) {
        return Some(f);
    }
    if instance == vk::Instance::null() {
        return None;
    }
    // SAFETY: a non-null instance handle of this chain.
    let table = unsafe { dispatch::instance(instance.as_raw() as *mut u8) }?;
    // SAFETY: the next link's vkGetInstanceProcAddr with its own instance.
    let next = unsafe { (table.get_instance_proc_addr)(instance, name) };
    // A device command of an instance extension: the loader fills device dispatch tables with it
    // through vkGetInstanceProcAddr (VK_EXT_debug_utils), so the hook must be handed out here too.
    let debug_utils =
        matches!(n, b"vkSetDebugUtilsObjectNameEXT" | b"vkCmdBeginDebugUtilsLabelEXT" | b"vkCmdEndDebugUtilsLabelEXT");
    if debug_utils && next.is_some() {
        return device_hook(n).or(next);
    }
    next
}

unsafe extern "system" fn get_device_proc_addr(device: vk::Device, name: *const c_char) -> vk::PFN_vkVoidFunction {
    // SAFETY: the loader and applications pass a command name.
    let n = unsafe { name_bytes(name) };
    if n == b"vkGetDeviceProcAddr" {
        return device_hook(n);
    }
    if device == vk::Device::null() {
        return None;
    }
    // SAFETY: a non-null device handle of this chain.
    let table = unsafe { dispatch::device(device.as_raw() as *mut u8) }?;
    // SAFETY: the next link's vkGetDeviceProcAddr with its own device.
    let next = unsafe { (table.get_device_proc_addr)(device, name) };
    // A command the next link does not offer is not offered here either.
    next?;
    device_hook(n).or(next)
}

unsafe extern "system" fn create_instance(
    info: *const vk::InstanceCreateInfo<'_>,
    allocator: *const vk::AllocationCallbacks<'_>,
    out: *mut vk::Instance,
) -> vk::Result {
    crate::start::start();
    if let Some(why) = crate::impersonate::failure() {
        // Running as the real device would pass a real run off as an impersonated one.
        state::note(format_args!("BACKSCOPE_VK_IMPERSONATE: {why}; no instance is created"));
        return vk::Result::ERROR_INITIALIZATION_FAILED;
    }
    // SAFETY: the loader chains its link structure into the create info it passes.
    let Some(link) = (unsafe { loader::instance_link((*info).p_next) }) else {
        return vk::Result::ERROR_INITIALIZATION_FAILED;
    };
    // SAFETY: the link structure is the loader's, valid for this call; the layer advances it for the
    // next layer, as the loader's interface requires.
    let (next_gipa, next_gpdpa) = unsafe {
        let layer_info = (*link).layer_info;
        if layer_info.is_null() {
            return vk::Result::ERROR_INITIALIZATION_FAILED;
        }
        (*link).layer_info = (*layer_info).p_next;
        ((*layer_info).pfn_next_get_instance_proc_addr, (*layer_info).pfn_next_get_physical_device_proc_addr)
    };
    // SAFETY: vkCreateInstance is a global command, looked up with a null instance.
    let next_create = unsafe { next_gipa(vk::Instance::null(), c"vkCreateInstance".as_ptr()) };
    let Some(next_create) = next_create else { return vk::Result::ERROR_INITIALIZATION_FAILED };
    // SAFETY: the command's own type.
    let next_create: vk::PFN_vkCreateInstance = unsafe { std::mem::transmute(next_create) };
    // SAFETY: forwarding the caller's arguments.
    let result = unsafe { next_create(info, allocator, out) };
    if result != vk::Result::SUCCESS {
        return result;
    }
    // SAFETY: the instance just created.
    let instance = unsafe { *out };
    // SAFETY: next_gipa is the next link's and `instance` its new instance.
    let mut table = unsafe { InstanceDispatch::new(instance, next_gipa) };
    table.get_physical_device_proc_addr = next_gpdpa;
    let destroy = table.destroy_instance;
    // SAFETY: a valid instance handle.
    if !dispatch::add_instance(unsafe { dispatch_key(instance.as_raw() as *mut u8) }, table) {
        // Without its table the layer could not forward the instance's calls.
        if let Some(destroy) = destroy {
            // SAFETY: destroys the instance this call created, with the caller's allocator.
            unsafe { destroy(instance, allocator) };
        }
        return vk::Result::ERROR_INITIALIZATION_FAILED;
    }
    result
}

unsafe extern "system" fn destroy_instance(instance: vk::Instance, allocator: *const vk::AllocationCallbacks<'_>) {
    if instance == vk::Instance::null() {
        return;
    }
    let raw = instance.as_raw() as *mut u8;
    // SAFETY: a valid instance handle.
    let (table, key) = unsafe { (dispatch::instance(raw), dispatch_key(raw)) };
    dispatch::remove_instance(key);
    if let Some(destroy) = table.and_then(|t| t.destroy_instance) {
        // SAFETY: forwarding the caller's arguments.
        unsafe { destroy(instance, allocator) };
    }
}

unsafe extern "system" fn create_device(
    physical: vk::PhysicalDevice,
    info: *const vk::DeviceCreateInfo<'_>,
    allocator: *const vk::AllocationCallbacks<'_>,
    out: *mut vk::Device,
) -> vk::Result {
    // SAFETY: a valid physical device handle; it shares its instance's dispatch key.
    let Some(inst) = (unsafe { dispatch::instance(physical.as_raw() as *mut u8) }) else {
        return vk::Result::ERROR_INITIALIZATION_FAILED;
    };
    // SAFETY: the loader chains its link structure into the create info it passes.
    let Some(link) = (unsafe { loader::device_link((*info).p_next) }) else {
        return vk::Result::ERROR_INITIALIZATION_FAILED;
    };
    // SAFETY: the loader's link structure for this call, advanced for the next layer.
    let (next_gipa, next_gdpa) = unsafe {
        let layer_info = (*link).layer_info;
        if layer_info.is_null() {
            return vk::Result::ERROR_INITIALIZATION_FAILED;
        }
        (*link).layer_info = (*layer_info).p_next;
        ((*layer_info).pfn_next_get_instance_proc_addr, (*layer_info).pfn_next_get_device_proc_addr)
    };
    // SAFETY: an instance-level command looked up with the instance of `physical`.
    let Some(next_create) = (unsafe { next_gipa(inst.instance, c"vkCreateDevice".as_ptr()) }) else {
        return vk::Result::ERROR_INITIALIZATION_FAILED;
    };
    // SAFETY: the command's own type.
    let next_create: vk::PFN_vkCreateDevice = unsafe { std::mem::transmute(next_create) };
    if let Some(profile) = crate::impersonate::active() {
        let chain = physical::Chain { next_create, layer_gipa: get_instance_proc_addr };
        // SAFETY: the caller's arguments, `inst` the physical device's instance.
        let (result, facts_id) =
            unsafe { physical::create_device(inst, profile, physical, info, allocator, out, chain) };
        if result != vk::Result::SUCCESS {
            return result;
        }
        // SAFETY: the device just created, by the next link whose vkGetDeviceProcAddr is next_gdpa.
        return unsafe { register_device(inst, *out, next_gdpa, facts_id, false, false, allocator) };
    }

    // What the device offers, and whether the layer adds pipeline statistics to its creation.
    // SAFETY: `physical` is a physical device of `inst`'s instance, `info` the caller's valid create info.
    let observed = unsafe { device_offers(inst, physical, info) };
    let add_statistics = matches!(observed, Some((_, Some((_, true)))));
    // SAFETY: `info` is the caller's valid create info, `physical` a physical device of `inst`'s instance.
    let BlackBoxAdditions { markers: add_markers, fault: add_fault, coherent: add_coherent } = unsafe {
        black_box_additions(inst, physical, &*info, observed.as_ref().map(|(extensions, _)| &extensions[..]))
    };
    let mut result = vk::Result::ERROR_INITIALIZATION_FAILED;
    let mut markers_on = false;
    let mut fault_on = false;
    let mut coherent_on = false;
    if add_statistics || add_markers || add_fault {
        // SAFETY: `info` is valid; the copy points at the caller's structures plus the layer's, which live until
        // the call returns.
        unsafe {
            let mut added = Vec::new();
            if add_statistics {
                added.push(device::PIPELINE_EXECUTABLE_PROPERTIES);
            }
            if add_markers {
                added.push(crate::progress::BUFFER_MARKER);
            }
            if add_fault {
                added.push(crate::fault::EXTENSION);
            }
            if add_coherent {
                added.push(crate::blackbox::DEVICE_COHERENT);
            }
            let names = device::extensions_with(&*info, &added);
            // The layer's feature structures go in front of the application's chain.
            let mut head = (*info).p_next as *mut c_void;
            let mut feature = vk::PhysicalDevicePipelineExecutablePropertiesFeaturesKHR {
                pipeline_executable_info: vk::TRUE,
                ..Default::default()
            };
            if add_statistics {
                feature.p_next = head;
                head = &mut feature as *mut _ as *mut c_void;
            }
            let mut fault_feature = vk::PhysicalDeviceFaultFeaturesEXT { device_fault: vk::TRUE, ..Default::default() };
            if add_fault {
                fault_feature.p_next = head;
                head = &mut fault_feature as *mut _ as *mut c_void;
            }
            let mut coherent_feature =
                vk::PhysicalDeviceCoherentMemoryFeaturesAMD { device_coherent_memory: vk::TRUE, ..Default::default() };
            if add_coherent {
                coherent_feature.p_next = head;
                head = &mut coherent_feature as *mut _ as *mut c_void;
            }
            let mut with = *info;
            with.p_next = head;
            with.enabled_extension_count = names.len() as u32;
            with.pp_enabled_extension_names = names.as_ptr();
            result = watched(&call::CREATE_DEVICE, || next_create(physical, &with, allocator, out));
            markers_on = add_markers && result == vk::Result::SUCCESS;
            fault_on = add_fault && result == vk::Result::SUCCESS;
            coherent_on = add_coherent && result == vk::Result::SUCCESS;
        }
    }
    let statistics_on = match observed {
        Some((_, Some((on, true)))) => on && result == vk::Result::SUCCESS,
        Some((_, Some((on, false)))) => on,
        _ => false,
    };
    if result != vk::Result::SUCCESS {
        // SAFETY: forwarding the caller's arguments unchanged.
        result = watched(&call::CREATE_DEVICE, || unsafe { next_create(physical, info, allocator, out) });
    }
    if result != vk::Result::SUCCESS {
        return result;
    }
    // SAFETY: the device just created.
    let device = unsafe { *out };
    let facts_id = observed.and_then(|(extensions, _)| {
        state::guarded(|| {
            // SAFETY: a physical device of `inst`'s instance.
            pipelines::device_id(physical.as_raw(), || unsafe { device::facts(inst, physical, &extensions) })
        })
        .flatten()
    });
    // SAFETY: the device just created by the next link.
    let result = unsafe { register_device(inst, device, next_gdpa, facts_id, statistics_on, fault_on, allocator) };
    if result == vk::Result::SUCCESS && crate::progress::wanted() {
        if let Some(d) = device_of(device) {
            state::guarded(|| {
                // SAFETY: `info` is the caller's valid create info, `physical` the device's physical device.
                unsafe { crate::blackbox::set_up_device(inst, physical, d, &*info, markers_on, coherent_on) }
            });
        }
    }
    result
}

/// Whether a device records pipeline statistics: `(on, added by the layer)`; None where neither the application nor
/// the layer turns them on.
type StatisticsChoice = Option<(bool, bool)>;

/// What the device offers (its extensions), and its [`StatisticsChoice`]. None where the layer does not observe.
///
/// # Safety
/// `physical` must be a physical device of `inst`'s instance and `info` a valid create info.
unsafe fn device_offers(
    inst: &InstanceDispatch,
    physical: vk::PhysicalDevice,
    info: *const vk::DeviceCreateInfo<'_>,
) -> Option<(Vec<Vec<u8>>, StatisticsChoice)> {
    state::on()
        .then(|| {
            state::guarded(|| {
                // SAFETY: a physical device of `inst`'s instance; `info` is the caller's valid create info.
                unsafe {
                    let extensions = device::extensions(inst, physical);
                    let offered = extensions.iter().any(|e| e == device::PIPELINE_EXECUTABLE_PROPERTIES.to_bytes());
                    let statistics = match device::statistics_in(&*info) {
                        device::Statistics::ByApplication(on) => Some((on, false)),
                        device::Statistics::ByLayer
                            if offered
                                && state::statistics_wanted()
                                && device::supports_pipeline_statistics(inst, physical) =>
                        {
                            Some((true, true))
                        }
                        device::Statistics::ByLayer => None,
                    };
                    (extensions, statistics)
                }
            })
        })
        .flatten()
}

/// What the black box adds to a device's creation, each where the device offers it (`offered`: its extensions; None
/// when the layer does not observe).
struct BlackBoxAdditions {
    /// `VK_AMD_buffer_marker`: the GPU's own completion markers.
    markers: bool,
    /// `VK_EXT_device_fault` and its feature: what the driver says about a device loss.
    fault: bool,
    /// `VK_AMD_device_coherent_memory` and its feature, with the markers: memory their writes reach without the
    /// GPU's caches (`crate::blackbox::DEVICE_COHERENT`).
    coherent: bool,
}

/// # Safety
/// `info` must be a valid create info and `physical` a physical device of `inst`'s instance.
unsafe fn black_box_additions(
    inst: &InstanceDispatch,
    physical: vk::PhysicalDevice,
    info: &vk::DeviceCreateInfo<'_>,
    offered: Option<&[Vec<u8>]>,
) -> BlackBoxAdditions {
    let offers = |name: &std::ffi::CStr| offered.is_some_and(|all| all.iter().any(|e| e == name.to_bytes()));
    let black_box = crate::progress::wanted();
    let markers = black_box && crate::progress::markers_wanted() && offers(crate::progress::BUFFER_MARKER);
    let fault = black_box
        && crate::fault::wanted()
        && offers(crate::fault::EXTENSION)
        // SAFETY: the caller's promises.
        && unsafe {
            !device::chained_by_application(info, vk::StructureType::PHYSICAL_DEVICE_FAULT_FEATURES_EXT)
                && device::supports_feature(inst, physical, |f: &vk::PhysicalDeviceFaultFeaturesEXT| f.device_fault)
        };
    let coherent = markers
        && offers(crate::blackbox::DEVICE_COHERENT)
        // SAFETY: as above.
        && unsafe {
            !device::chained_by_application(info, vk::StructureType::PHYSICAL_DEVICE_COHERENT_MEMORY_FEATURES_AMD)
                && device::supports_feature(inst, physical, |f: &vk::PhysicalDeviceCoherentMemoryFeaturesAMD| {
                    f.device_coherent_memory
                })
        };
    BlackBoxAdditions { markers, fault, coherent }
}

/// Gives a new device its table of the next link's functions; a device without one is destroyed again (its calls
/// could not be forwarded).
///
/// # Safety
/// `device` must be the device the next link, whose `vkGetDeviceProcAddr` is `next_gdpa`, just created.
unsafe fn register_device(
    inst: &InstanceDispatch,
    device: vk::Device,
    next_gdpa: vk::PFN_vkGetDeviceProcAddr,
    facts_id: Option<u32>,
    statistics_on: bool,
    fault_on: bool,
    allocator: *const vk::AllocationCallbacks<'_>,
) -> vk::Result {
    // SAFETY: next_gdpa is the next link's and `device` its new device.
    let mut table = unsafe { DeviceDispatch::new(device, next_gdpa, facts_id, statistics_on) };
    if fault_on {
        // SAFETY: the next link's vkGetDeviceProcAddr for its device; the name and the type are the same command's.
        table.get_device_fault_info = unsafe { next_gdpa(device, c"vkGetDeviceFaultInfoEXT".as_ptr()) }
            .map(|f| unsafe { std::mem::transmute::<unsafe extern "system" fn(), vk::PFN_vkGetDeviceFaultInfoEXT>(f) });
    }
    table.instance_set_debug_utils_object_name = inst.set_debug_utils_object_name;
    table.cmd_begin_debug_utils_label = table.cmd_begin_debug_utils_label.or(inst.cmd_begin_debug_utils_label);
    table.cmd_end_debug_utils_label = table.cmd_end_debug_utils_label.or(inst.cmd_end_debug_utils_label);
    let destroy = table.destroy_device;
    // SAFETY: a valid device handle.
    if dispatch::add_device(unsafe { dispatch_key(device.as_raw() as *mut u8) }, table).is_none() {
        if let Some(destroy) = destroy {
            // SAFETY: destroys the device this call created, with the caller's allocator.
            unsafe { destroy(device, allocator) };
        }
        return vk::Result::ERROR_INITIALIZATION_FAILED;
    }
    vk::Result::SUCCESS
}

unsafe extern "system" fn destroy_device(device: vk::Device, allocator: *const vk::AllocationCallbacks<'_>) {
    if device == vk::Device::null() {
        return;
    }
    let Some(d) = device_of(device) else { return };
    // SAFETY: a valid device handle.
    let key = unsafe { dispatch_key(device.as_raw() as *mut u8) };
    state::guarded(|| pipelines::remove_device_modules(key));
    state::guarded(|| crate::blackbox::device_destroyed(d));
    dispatch::remove_device(key);
    if let Some(destroy) = d.destroy_device {
        // SAFETY: forwarding the caller's arguments.
        unsafe { destroy(device, allocator) };
    }
}

#[cfg(test)]
mod tests;
