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

use std::ffi::{c_char, c_void, CStr};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use ash::vk;
use ash::vk::Handle;

use crate::commands;
use crate::device;
use crate::dispatch::{self, DeviceDispatch, InstanceDispatch};
use crate::loader::{self, dispatch_key, NegotiateLayerInterface};
use crate::locus::Marked;
use crate::pipelines::{self, Meta, Module, Stat, OVERFLOW};
use crate::shader::{specialization_value, LocalSize};
use crate::state;

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
    n.pfn_get_physical_device_proc_addr = None;
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

/// Instance-level commands the layer implements.
fn instance_hook(name: &[u8]) -> vk::PFN_vkVoidFunction {
    match name {
        b"vkGetInstanceProcAddr" => hook!(get_instance_proc_addr, vk::PFN_vkGetInstanceProcAddr),
        b"vkGetDeviceProcAddr" => hook!(get_device_proc_addr, vk::PFN_vkGetDeviceProcAddr),
        b"vkCreateInstance" => hook!(create_instance, vk::PFN_vkCreateInstance),
        b"vkDestroyInstance" => hook!(destroy_instance, vk::PFN_vkDestroyInstance),
        b"vkCreateDevice" => hook!(create_device, vk::PFN_vkCreateDevice),
        _ => None,
    }
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
        b"vkCmdBeginDebugUtilsLabelEXT" => hook!(cmd_begin_label, vk::PFN_vkCmdBeginDebugUtilsLabelEXT),
        b"vkCmdEndDebugUtilsLabelEXT" => hook!(cmd_end_label, vk::PFN_vkCmdEndDebugUtilsLabelEXT),
        b"vkAllocateCommandBuffers" => hook!(allocate_command_buffers, vk::PFN_vkAllocateCommandBuffers),
        b"vkFreeCommandBuffers" => hook!(free_command_buffers, vk::PFN_vkFreeCommandBuffers),
        b"vkDestroyCommandPool" => hook!(destroy_command_pool, vk::PFN_vkDestroyCommandPool),
        b"vkResetCommandPool" => hook!(reset_command_pool, vk::PFN_vkResetCommandPool),
        b"vkBeginCommandBuffer" => hook!(begin_command_buffer, vk::PFN_vkBeginCommandBuffer),
        b"vkResetCommandBuffer" => hook!(reset_command_buffer, vk::PFN_vkResetCommandBuffer),
        b"vkCmdBindPipeline" => hook!(cmd_bind_pipeline, vk::PFN_vkCmdBindPipeline),
        b"vkCmdDispatch" => hook!(cmd_dispatch, vk::PFN_vkCmdDispatch),
        b"vkCmdDispatchBase" => hook!(cmd_dispatch_base, vk::PFN_vkCmdDispatchBase),
        b"vkCmdDispatchBaseKHR" => hook!(cmd_dispatch_base_khr, vk::PFN_vkCmdDispatchBase),
        b"vkCmdDispatchIndirect" => hook!(cmd_dispatch_indirect, vk::PFN_vkCmdDispatchIndirect),
        b"vkCmdExecuteCommands" => hook!(cmd_execute_commands, vk::PFN_vkCmdExecuteCommands),
        b"vkQueueSubmit" => hook!(queue_submit, vk::PFN_vkQueueSubmit),
        b"vkQueueSubmit2" => hook!(queue_submit2, vk::PFN_vkQueueSubmit2),
        b"vkQueueSubmit2KHR" => hook!(queue_submit2_khr, vk::PFN_vkQueueSubmit2),
        b"vkWaitForFences" => hook!(wait_for_fences, vk::PFN_vkWaitForFences),
        b"vkGetFenceStatus" => hook!(get_fence_status, vk::PFN_vkGetFenceStatus),
        b"vkQueueWaitIdle" => hook!(queue_wait_idle, vk::PFN_vkQueueWaitIdle),
        b"vkDeviceWaitIdle" => hook!(device_wait_idle, vk::PFN_vkDeviceWaitIdle),
        b"vkWaitSemaphores" => hook!(wait_semaphores, vk::PFN_vkWaitSemaphores),
        b"vkWaitSemaphoresKHR" => hook!(wait_semaphores_khr, vk::PFN_vkWaitSemaphores),
        b"vkGetSemaphoreCounterValue" => hook!(get_semaphore_counter_value, vk::PFN_vkGetSemaphoreCounterValue),
        b"vkGetSemaphoreCounterValueKHR" => {
            hook!(get_semaphore_counter_value_khr, vk::PFN_vkGetSemaphoreCounterValue)
        }
        b"vkGetQueryPoolResults" => hook!(get_query_pool_results, vk::PFN_vkGetQueryPoolResults),
        b"vkAllocateMemory" => hook!(allocate_memory, vk::PFN_vkAllocateMemory),
        b"vkMapMemory" => hook!(map_memory, vk::PFN_vkMapMemory),
        _ => None,
    }
}

/// # Safety
/// `name` must be a NUL-terminated string.
unsafe fn name_bytes<'a>(name: *const c_char) -> &'a [u8] {
    if name.is_null() {
        return b"";
    }
    // SAFETY: the caller's promise.
    unsafe { CStr::from_ptr(name) }.to_bytes()
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
        return device_hook(n);
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

/// The device table of a dispatchable handle of a device (device, queue, command buffer).
#[inline(always)]
fn device_of<H: Handle>(handle: H) -> Option<&'static DeviceDispatch> {
    // SAFETY: hooks are called with valid handles of devices this layer created.
    unsafe { dispatch::device(handle.as_raw() as *mut u8) }
}

unsafe extern "system" fn create_instance(
    info: *const vk::InstanceCreateInfo<'_>,
    allocator: *const vk::AllocationCallbacks<'_>,
    out: *mut vk::Instance,
) -> vk::Result {
    crate::start::start();
    // SAFETY: the loader chains its link structure into the create info it passes.
    let Some(link) = (unsafe { loader::instance_link((*info).p_next) }) else {
        return vk::Result::ERROR_INITIALIZATION_FAILED;
    };
    // SAFETY: the link structure is the loader's, valid for this call; the layer advances it for the
    // next layer, as the loader's interface requires.
    let next_gipa = unsafe {
        let layer_info = (*link).layer_info;
        if layer_info.is_null() {
            return vk::Result::ERROR_INITIALIZATION_FAILED;
        }
        (*link).layer_info = (*layer_info).p_next;
        (*layer_info).pfn_next_get_instance_proc_addr
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
    let table = unsafe { InstanceDispatch::new(instance, next_gipa) };
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

    // What the device offers, and whether the layer adds pipeline statistics to its creation.
    let observed = state::on()
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
        .flatten();
    let add_statistics = matches!(observed, Some((_, Some((_, true)))));
    let mut result = vk::Result::ERROR_INITIALIZATION_FAILED;
    if add_statistics {
        // SAFETY: `info` is valid; the copy points at the caller's structures plus two of the layer's
        // that live until the call returns.
        unsafe {
            let names = device::extensions_with_statistics(&*info);
            let mut feature = vk::PhysicalDevicePipelineExecutablePropertiesFeaturesKHR {
                pipeline_executable_info: vk::TRUE,
                ..Default::default()
            };
            feature.p_next = (*info).p_next as *mut c_void;
            let mut with = *info;
            with.p_next = &feature as *const _ as *const c_void;
            with.enabled_extension_count = names.len() as u32;
            with.pp_enabled_extension_names = names.as_ptr();
            result = watched(&call::CREATE_DEVICE, || next_create(physical, &with, allocator, out));
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
    // SAFETY: next_gdpa is the next link's and `device` its new device.
    let mut table = unsafe { DeviceDispatch::new(device, next_gdpa, facts_id, statistics_on) };
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
    result
}

unsafe extern "system" fn destroy_device(device: vk::Device, allocator: *const vk::AllocationCallbacks<'_>) {
    if device == vk::Device::null() {
        return;
    }
    let Some(d) = device_of(device) else { return };
    // SAFETY: a valid device handle.
    let key = unsafe { dispatch_key(device.as_raw() as *mut u8) };
    state::guarded(|| pipelines::remove_device_modules(key));
    dispatch::remove_device(key);
    if let Some(destroy) = d.destroy_device {
        // SAFETY: forwarding the caller's arguments.
        unsafe { destroy(device, allocator) };
    }
}

/// Where backscope should look a module's hash up: the loaded object that holds the bytes at `code`
/// (`libggml-vulkan.so`, whose shaders are arrays in its read-only data), else the loaded ggml-vulkan
/// library. ggml-vulkan passes its embedded arrays directly, except on devices with FP16 float
/// controls, where it passes a patched copy on the heap (see `format::spirv`).
fn object_of(code: *const c_void) -> Option<Arc<[u8]>> {
    holder_of(code).or_else(|| GGML_VULKAN.get_or_init(ggml_vulkan_library).clone())
}

static GGML_VULKAN: std::sync::OnceLock<Option<Arc<[u8]>>> = std::sync::OnceLock::new();

/// The path of the first loaded object whose file name starts with `libggml-vulkan`.
fn ggml_vulkan_library() -> Option<Arc<[u8]>> {
    unsafe extern "C" fn visit(info: *mut libc::dl_phdr_info, _size: libc::size_t, found: *mut c_void) -> libc::c_int {
        // SAFETY: dl_iterate_phdr passes a valid info whose name is a NUL-terminated path (or null).
        let name = unsafe { (*info).dlpi_name };
        if name.is_null() {
            return 0;
        }
        // SAFETY: as above.
        let path = unsafe { CStr::from_ptr(name) }.to_bytes();
        let file = path.rsplit(|&b| b == b'/').next().unwrap_or(path);
        if file.starts_with(b"libggml-vulkan") {
            // SAFETY: `found` is the `Option` passed below, alive during the iteration.
            unsafe { *(found as *mut Option<Arc<[u8]>>) = Some(Arc::from(path)) };
            return 1;
        }
        0
    }
    let mut found: Option<Arc<[u8]>> = None;
    // SAFETY: the callback only reads the infos and writes `found`.
    unsafe { libc::dl_iterate_phdr(Some(visit), &mut found as *mut _ as *mut c_void) };
    found
}

/// The loaded object that holds the bytes at `code`, if any.
fn holder_of(code: *const c_void) -> Option<Arc<[u8]>> {
    let mut info: libc::Dl_info = libc::Dl_info {
        dli_fname: std::ptr::null(),
        dli_fbase: std::ptr::null_mut(),
        dli_sname: std::ptr::null(),
        dli_saddr: std::ptr::null_mut(),
    };
    // SAFETY: dladdr only reads the loader's tables for an address.
    if unsafe { libc::dladdr(code, &mut info) } == 0 || info.dli_fname.is_null() {
        return None;
    }
    // SAFETY: dladdr returned the NUL-terminated path of a loaded object.
    let path = unsafe { CStr::from_ptr(info.dli_fname) }.to_bytes();
    // The main program's path is an empty string in the loader's tables.
    (!path.is_empty()).then(|| Arc::from(path))
}

/// A module from its create info: hash, workgroup-size recipe, origin.
///
/// # Safety
/// `info` must be a valid `VkShaderModuleCreateInfo`.
unsafe fn module_of(info: &vk::ShaderModuleCreateInfo<'_>) -> Module {
    let code: &[u8] = if info.p_code.is_null() {
        &[]
    } else {
        // SAFETY: a valid create info holds `code_size` bytes of code.
        unsafe { std::slice::from_raw_parts(info.p_code as *const u8, info.code_size) }
    };
    Module {
        hash: format::spirv::module_hash(code),
        local_size: LocalSize::parse(code),
        object: object_of(info.p_code as *const c_void),
    }
}

unsafe extern "system" fn create_shader_module(
    device: vk::Device,
    info: *const vk::ShaderModuleCreateInfo<'_>,
    allocator: *const vk::AllocationCallbacks<'_>,
    out: *mut vk::ShaderModule,
) -> vk::Result {
    let Some(next) = device_of(device).and_then(|d| d.create_shader_module) else {
        return vk::Result::ERROR_INITIALIZATION_FAILED;
    };
    // SAFETY: forwarding the caller's arguments.
    let result = watched(&call::CREATE_SHADER_MODULE, || unsafe { next(device, info, allocator, out) });
    if result == vk::Result::SUCCESS && state::on() {
        state::guarded(|| {
            // SAFETY: the caller's valid create info and the module just created.
            let (module, handle) = unsafe { (module_of(&*info), *out) };
            // SAFETY: a valid device handle.
            let key = unsafe { dispatch_key(device.as_raw() as *mut u8) };
            pipelines::add_module(key, handle.as_raw(), module);
        });
    }
    result
}

unsafe extern "system" fn destroy_shader_module(
    device: vk::Device,
    module: vk::ShaderModule,
    allocator: *const vk::AllocationCallbacks<'_>,
) {
    let Some(next) = device_of(device).and_then(|d| d.destroy_shader_module) else { return };
    if module != vk::ShaderModule::null() && state::on() {
        // SAFETY: a valid device handle.
        let key = unsafe { dispatch_key(device.as_raw() as *mut u8) };
        state::guarded(|| pipelines::remove_module(key, module.as_raw()));
    }
    // SAFETY: forwarding the caller's arguments.
    unsafe { next(device, module, allocator) };
}

/// Whether a pipeline create info carries `VkPipelineCreateFlags2CreateInfoKHR`, whose flags replace
/// `flags` (so adding a bit to `flags` would do nothing).
///
/// # Safety
/// `info` must be a valid create info.
unsafe fn has_flags2(info: &vk::ComputePipelineCreateInfo<'_>) -> bool {
    // SAFETY: the chain of a valid create info.
    unsafe { loader::chain(info.p_next) }
        // SAFETY: a structure of the chain.
        .any(|s| unsafe { (*s).s_type } == vk::StructureType::PIPELINE_CREATE_FLAGS_2_CREATE_INFO_KHR)
}

unsafe extern "system" fn create_compute_pipelines(
    device: vk::Device,
    cache: vk::PipelineCache,
    count: u32,
    infos: *const vk::ComputePipelineCreateInfo<'_>,
    allocator: *const vk::AllocationCallbacks<'_>,
    out: *mut vk::Pipeline,
) -> vk::Result {
    let Some(d) = device_of(device) else { return vk::Result::ERROR_INITIALIZATION_FAILED };
    let Some(next) = d.create_compute_pipelines else { return vk::Result::ERROR_INITIALIZATION_FAILED };
    let observing = state::on() && count > 0 && !infos.is_null();
    let with_statistics = observing && d.capture_statistics;
    let result = if with_statistics {
        // SAFETY: `count` valid create infos; the copies differ only in `flags` and live until the
        // call returns.
        unsafe {
            let mut copies = std::slice::from_raw_parts(infos, count as usize).to_vec();
            for c in copies.iter_mut().filter(|c| !has_flags2(c)) {
                c.flags |= vk::PipelineCreateFlags::CAPTURE_STATISTICS_KHR;
            }
            watched(&call::CREATE_COMPUTE_PIPELINES, || next(device, cache, count, copies.as_ptr(), allocator, out))
        }
    } else {
        // SAFETY: forwarding the caller's arguments.
        watched(&call::CREATE_COMPUTE_PIPELINES, || unsafe { next(device, cache, count, infos, allocator, out) })
    };
    if observing && !out.is_null() {
        state::guarded(|| {
            // SAFETY: the caller's create infos and output array, `count` long each.
            let (infos, pipelines) = unsafe {
                (std::slice::from_raw_parts(infos, count as usize), std::slice::from_raw_parts(out, count as usize))
            };
            for (info, &pipeline) in infos.iter().zip(pipelines) {
                if pipeline != vk::Pipeline::null() {
                    // SAFETY: a valid create info and the pipeline created from it on `d`.
                    unsafe { register_pipeline(device, d, info, pipeline) };
                }
            }
        });
    }
    result
}

/// Gives `pipeline` a slot, described from its shader module and specialization constants.
///
/// # Safety
/// `info` must be the valid create info `pipeline` was created from, on `device`.
unsafe fn register_pipeline(
    device: vk::Device,
    d: &'static DeviceDispatch,
    info: &vk::ComputePipelineCreateInfo<'_>,
    pipeline: vk::Pipeline,
) {
    let stage = &info.stage;
    // SAFETY: a valid device handle.
    let key = unsafe { dispatch_key(device.as_raw() as *mut u8) };
    let module = if stage.module != vk::ShaderModule::null() {
        pipelines::module(key, stage.module.as_raw())
    } else {
        // Maintenance 5: the module's create info chained into the stage instead of a module.
        // SAFETY: the chain of a valid stage create info.
        unsafe { loader::chain(stage.p_next) }
            // SAFETY: a structure of the chain; its sType says which.
            .find(|&s| unsafe { (*s).s_type } == vk::StructureType::SHADER_MODULE_CREATE_INFO)
            // SAFETY: that sType is this structure.
            .map(|s| Arc::new(unsafe { module_of(&*(s as *const vk::ShaderModuleCreateInfo<'_>)) }))
    };
    let entry: &[u8] = if stage.p_name.is_null() {
        b"main"
    } else {
        // SAFETY: the entry point name of a valid stage create info.
        unsafe { CStr::from_ptr(stage.p_name) }.to_bytes()
    };
    // SAFETY: the specialization info of a valid stage create info, if any.
    let (map, data) = unsafe { specialization(stage.p_specialization_info) };
    let local_size =
        module.as_ref().and_then(|m| m.local_size.resolve(entry, |id| specialization_value(&map, data, id)));
    let hash = module.as_ref().map_or(0, |m| m.hash);
    let hex = format::spirv::hex(hash);
    let mut name = b"spirv:".to_vec();
    name.extend_from_slice(&hex);
    let stats = if d.capture_statistics {
        // SAFETY: a pipeline of `d`'s device.
        unsafe { statistics(d, pipeline) }
    } else {
        Vec::new()
    };
    let slot = pipelines::add_pipeline(Meta {
        name,
        source: format::record::source::SPIRV_HASH,
        device: d.facts_id,
        spirv_hash: hash,
        local_size,
        spirv_object: module.and_then(|m| m.object.clone()),
        stats,
    });
    // Values of the map are never 0: slot + 1.
    d.pipelines.insert(pipeline.as_raw(), u64::from(slot) + 1);
}

/// The map entries and data of a `VkSpecializationInfo`.
///
/// # Safety
/// `info` must be null or a valid specialization info.
unsafe fn specialization<'a>(info: *const vk::SpecializationInfo<'a>) -> (Vec<(u32, u32, usize)>, &'a [u8]) {
    if info.is_null() {
        return (Vec::new(), &[]);
    }
    // SAFETY: a valid specialization info.
    let info = unsafe { &*info };
    let entries: &[vk::SpecializationMapEntry] = if info.p_map_entries.is_null() {
        &[]
    } else {
        // SAFETY: `map_entry_count` entries.
        unsafe { std::slice::from_raw_parts(info.p_map_entries, info.map_entry_count as usize) }
    };
    let data: &[u8] = if info.p_data.is_null() {
        &[]
    } else {
        // SAFETY: `data_size` bytes.
        unsafe { std::slice::from_raw_parts(info.p_data as *const u8, info.data_size) }
    };
    (entries.iter().map(|e| (e.constant_id, e.offset, e.size)).collect(), data)
}

/// Most executables and statistics read per pipeline (a compute pipeline has one executable and a
/// few dozen statistics).
const MAX_EXECUTABLES: u32 = 8;
const MAX_STATISTICS: u32 = 64;

/// The driver's statistics of `pipeline` (`VK_KHR_pipeline_executable_properties`).
///
/// # Safety
/// `pipeline` must be a pipeline of `d`'s device, created to capture statistics.
unsafe fn statistics(d: &DeviceDispatch, pipeline: vk::Pipeline) -> Vec<Stat> {
    let (Some(properties), Some(statistics)) =
        (d.get_pipeline_executable_properties, d.get_pipeline_executable_statistics)
    else {
        return Vec::new();
    };
    let pipeline_info = vk::PipelineInfoKHR { pipeline, ..Default::default() };
    let mut count = 0u32;
    // SAFETY: the count query.
    if unsafe { properties(d.device, &pipeline_info, &mut count, std::ptr::null_mut()) } != vk::Result::SUCCESS {
        return Vec::new();
    }
    let mut executables = vec![vk::PipelineExecutablePropertiesKHR::default(); count.min(MAX_EXECUTABLES) as usize];
    let mut count = executables.len() as u32;
    // SAFETY: room for `count` elements.
    let result = unsafe { properties(d.device, &pipeline_info, &mut count, executables.as_mut_ptr()) };
    if result != vk::Result::SUCCESS && result != vk::Result::INCOMPLETE {
        return Vec::new();
    }
    executables.truncate(count as usize);
    let mut out = Vec::new();
    for (index, executable) in executables.iter().enumerate() {
        let exec_name = c_string(&executable.name);
        let info = vk::PipelineExecutableInfoKHR { pipeline, executable_index: index as u32, ..Default::default() };
        let mut n = 0u32;
        // SAFETY: the count query.
        if unsafe { statistics(d.device, &info, &mut n, std::ptr::null_mut()) } != vk::Result::SUCCESS {
            continue;
        }
        let mut stats = vec![vk::PipelineExecutableStatisticKHR::default(); n.min(MAX_STATISTICS) as usize];
        let mut n = stats.len() as u32;
        // SAFETY: room for `n` elements.
        let result = unsafe { statistics(d.device, &info, &mut n, stats.as_mut_ptr()) };
        if result != vk::Result::SUCCESS && result != vk::Result::INCOMPLETE {
            continue;
        }
        stats.truncate(n as usize);
        for s in &stats {
            // SAFETY: the union member that `format` names.
            let value = unsafe {
                match s.format {
                    vk::PipelineExecutableStatisticFormatKHR::BOOL32 => f64::from(s.value.b32),
                    vk::PipelineExecutableStatisticFormatKHR::INT64 => s.value.i64 as f64,
                    vk::PipelineExecutableStatisticFormatKHR::UINT64 => s.value.u64 as f64,
                    vk::PipelineExecutableStatisticFormatKHR::FLOAT64 => s.value.f64,
                    _ => f64::NAN,
                }
            };
            out.push(Stat { executable: exec_name.clone(), name: c_string(&s.name), value });
        }
    }
    out
}

fn c_string(field: &[c_char]) -> String {
    String::from_utf8_lossy(&crate::device::c_text(field)).into_owned()
}

unsafe extern "system" fn destroy_pipeline(
    device: vk::Device,
    pipeline: vk::Pipeline,
    allocator: *const vk::AllocationCallbacks<'_>,
) {
    let Some(d) = device_of(device) else { return };
    if pipeline != vk::Pipeline::null() && state::on() {
        d.pipelines.remove(pipeline.as_raw());
    }
    if let Some(next) = d.destroy_pipeline {
        // SAFETY: forwarding the caller's arguments.
        unsafe { next(device, pipeline, allocator) };
    }
}

unsafe extern "system" fn set_debug_utils_object_name(
    device: vk::Device,
    info: *const vk::DebugUtilsObjectNameInfoEXT<'_>,
) -> vk::Result {
    let Some(d) = device_of(device) else { return vk::Result::ERROR_INITIALIZATION_FAILED };
    if state::on() && !info.is_null() {
        state::guarded(|| {
            // SAFETY: the caller's valid name info.
            let info = unsafe { &*info };
            if info.object_type == vk::ObjectType::PIPELINE && !info.p_object_name.is_null() {
                if let Some(slot) = d.pipelines.get(info.object_handle) {
                    // SAFETY: a NUL-terminated name.
                    let name = unsafe { CStr::from_ptr(info.p_object_name) }.to_bytes();
                    pipelines::set_name((slot - 1) as u32, name);
                }
            }
        });
    }
    match d.set_debug_utils_object_name.or(d.instance_set_debug_utils_object_name) {
        // SAFETY: forwarding the caller's arguments.
        Some(next) => unsafe { next(device, info) },
        None => vk::Result::ERROR_EXTENSION_NOT_PRESENT,
    }
}

unsafe extern "system" fn allocate_command_buffers(
    device: vk::Device,
    info: *const vk::CommandBufferAllocateInfo<'_>,
    out: *mut vk::CommandBuffer,
) -> vk::Result {
    let Some(d) = device_of(device) else { return vk::Result::ERROR_INITIALIZATION_FAILED };
    let Some(next) = d.allocate_command_buffers else { return vk::Result::ERROR_INITIALIZATION_FAILED };
    // SAFETY: forwarding the caller's arguments.
    let result = unsafe { next(device, info, out) };
    if result == vk::Result::SUCCESS && state::on() {
        state::guarded(|| {
            // SAFETY: the caller's allocate info and the `command_buffer_count` buffers just allocated.
            let (pool, buffers) = unsafe {
                ((*info).command_pool, std::slice::from_raw_parts(out, (*info).command_buffer_count as usize))
            };
            commands::allocated(d, pool, buffers);
        });
    }
    result
}

unsafe extern "system" fn free_command_buffers(
    device: vk::Device,
    pool: vk::CommandPool,
    count: u32,
    buffers: *const vk::CommandBuffer,
) {
    let Some(d) = device_of(device) else { return };
    if !buffers.is_null() && state::on() {
        // SAFETY: `count` handles (some may be null, which no map holds).
        state::guarded(|| commands::freed(unsafe { std::slice::from_raw_parts(buffers, count as usize) }));
    }
    if let Some(next) = d.free_command_buffers {
        // SAFETY: forwarding the caller's arguments.
        unsafe { next(device, pool, count, buffers) };
    }
}

unsafe extern "system" fn destroy_command_pool(
    device: vk::Device,
    pool: vk::CommandPool,
    allocator: *const vk::AllocationCallbacks<'_>,
) {
    let Some(d) = device_of(device) else { return };
    if pool != vk::CommandPool::null() && state::on() {
        state::guarded(|| commands::pool_destroyed(d, pool));
    }
    if let Some(next) = d.destroy_command_pool {
        // SAFETY: forwarding the caller's arguments.
        unsafe { next(device, pool, allocator) };
    }
}

unsafe extern "system" fn reset_command_pool(
    device: vk::Device,
    pool: vk::CommandPool,
    flags: vk::CommandPoolResetFlags,
) -> vk::Result {
    let Some(d) = device_of(device) else { return vk::Result::ERROR_INITIALIZATION_FAILED };
    if state::on() {
        state::guarded(|| commands::pool_reset(d, pool));
    }
    match d.reset_command_pool {
        // SAFETY: forwarding the caller's arguments.
        Some(next) => unsafe { next(device, pool, flags) },
        None => vk::Result::ERROR_INITIALIZATION_FAILED,
    }
}

/// The state of a command buffer the layer follows, while it observes (off, the states are not
/// kept up to date and are never used).
#[inline(always)]
fn followed(cb: vk::CommandBuffer) -> Option<&'static commands::CommandBuffer> {
    if state::on() && !crate::switch::paused() {
        commands::get(cb)
    } else {
        None
    }
}

/// The device table of a command buffer: from its state when the layer follows it (no second
/// lookup), else by its dispatch key.
#[inline(always)]
fn buffer_device(cb: vk::CommandBuffer, state: Option<&commands::CommandBuffer>) -> Option<&'static DeviceDispatch> {
    match state {
        Some(s) => Some(s.device()),
        None => device_of(cb),
    }
}

unsafe extern "system" fn begin_command_buffer(
    cb: vk::CommandBuffer,
    info: *const vk::CommandBufferBeginInfo<'_>,
) -> vk::Result {
    let s = followed(cb);
    if let Some(s) = s {
        state::guarded(|| s.clear());
    }
    match buffer_device(cb, s).and_then(|d| d.begin_command_buffer) {
        // SAFETY: forwarding the caller's arguments.
        Some(next) => unsafe { next(cb, info) },
        None => vk::Result::ERROR_INITIALIZATION_FAILED,
    }
}

unsafe extern "system" fn reset_command_buffer(
    cb: vk::CommandBuffer,
    flags: vk::CommandBufferResetFlags,
) -> vk::Result {
    let s = followed(cb);
    if let Some(s) = s {
        state::guarded(|| s.clear());
    }
    match buffer_device(cb, s).and_then(|d| d.reset_command_buffer) {
        // SAFETY: forwarding the caller's arguments.
        Some(next) => unsafe { next(cb, flags) },
        None => vk::Result::ERROR_INITIALIZATION_FAILED,
    }
}

unsafe extern "system" fn cmd_bind_pipeline(
    cb: vk::CommandBuffer,
    point: vk::PipelineBindPoint,
    pipeline: vk::Pipeline,
) {
    let s = followed(cb);
    if let (Some(s), vk::PipelineBindPoint::COMPUTE) = (s, point) {
        state::guarded(|| {
            let slot = s.device().pipelines.get(pipeline.as_raw()).map_or(OVERFLOW, |v| (v - 1) as u32);
            s.bind(slot);
        });
    }
    if let Some(next) = buffer_device(cb, s).and_then(|d| d.cmd_bind_pipeline) {
        // SAFETY: forwarding the caller's arguments.
        unsafe { next(cb, point, pipeline) };
    }
}

/// `vkCmdBeginDebugUtilsLabelEXT`: the label names the dispatches recorded until its end (ggml-vulkan: one region
/// per graph node, `MUL_MAT blk.0.attn_q`), for the crash locus.
unsafe extern "system" fn cmd_begin_label(cb: vk::CommandBuffer, info: *const vk::DebugUtilsLabelEXT<'_>) {
    let s = followed(cb);
    if let (Some(s), false) = (s, info.is_null()) {
        state::guarded(|| {
            // SAFETY: the caller's valid label info.
            let name = unsafe { (*info).p_label_name };
            let text = if name.is_null() {
                &b""[..]
            } else {
                // SAFETY: a valid label info's name is a NUL-terminated string; only the bytes kept are read.
                let len = unsafe { libc::strnlen(name, crate::labels::MAX_TEXT) };
                // SAFETY: `len` bytes before the NUL (or the first MAX_TEXT of a longer name) are readable.
                unsafe { std::slice::from_raw_parts(name.cast::<u8>(), len) }
            };
            s.begin_label(text);
        });
    }
    if let Some(next) = buffer_device(cb, s).and_then(|d| d.cmd_begin_debug_utils_label) {
        // SAFETY: forwarding the caller's arguments.
        unsafe { next(cb, info) };
    }
}

unsafe extern "system" fn cmd_end_label(cb: vk::CommandBuffer) {
    let s = followed(cb);
    if let Some(s) = s {
        state::guarded(|| s.end_label());
    }
    if let Some(next) = buffer_device(cb, s).and_then(|d| d.cmd_end_debug_utils_label) {
        // SAFETY: forwarding the caller's arguments.
        unsafe { next(cb) };
    }
}

/// Records one dispatch into `cb`'s state (when the layer follows `cb`), and returns its device.
#[inline(always)]
fn record(cb: vk::CommandBuffer, grid: [u32; 3]) -> Option<&'static DeviceDispatch> {
    let s = followed(cb);
    if let Some(s) = s {
        state::guarded(|| s.record(grid));
    }
    buffer_device(cb, s)
}

unsafe extern "system" fn cmd_dispatch(cb: vk::CommandBuffer, x: u32, y: u32, z: u32) {
    if let Some(next) = record(cb, [x, y, z]).and_then(|d| d.cmd_dispatch) {
        // SAFETY: forwarding the caller's arguments.
        unsafe { next(cb, x, y, z) };
    }
}

unsafe extern "system" fn cmd_dispatch_base(cb: vk::CommandBuffer, bx: u32, by: u32, bz: u32, x: u32, y: u32, z: u32) {
    if let Some(next) = record(cb, [x, y, z]).and_then(|d| d.cmd_dispatch_base) {
        // SAFETY: forwarding the caller's arguments.
        unsafe { next(cb, bx, by, bz, x, y, z) };
    }
}

unsafe extern "system" fn cmd_dispatch_base_khr(
    cb: vk::CommandBuffer,
    bx: u32,
    by: u32,
    bz: u32,
    x: u32,
    y: u32,
    z: u32,
) {
    if let Some(next) = record(cb, [x, y, z]).and_then(|d| d.cmd_dispatch_base_khr) {
        // SAFETY: forwarding the caller's arguments.
        unsafe { next(cb, bx, by, bz, x, y, z) };
    }
}

unsafe extern "system" fn cmd_dispatch_indirect(cb: vk::CommandBuffer, buffer: vk::Buffer, offset: vk::DeviceSize) {
    // The workgroup counts live in GPU memory: recorded as [0, 0, 0].
    if let Some(next) = record(cb, [0, 0, 0]).and_then(|d| d.cmd_dispatch_indirect) {
        // SAFETY: forwarding the caller's arguments.
        unsafe { next(cb, buffer, offset) };
    }
}

unsafe extern "system" fn cmd_execute_commands(cb: vk::CommandBuffer, count: u32, buffers: *const vk::CommandBuffer) {
    let s = followed(cb);
    if let (Some(s), false) = (s, buffers.is_null()) {
        // SAFETY: `count` secondary command buffer handles.
        let secondaries = unsafe { std::slice::from_raw_parts(buffers, count as usize) };
        state::guarded(|| secondaries.iter().for_each(|&b| s.execute(b)));
    }
    if let Some(next) = buffer_device(cb, s).and_then(|d| d.cmd_execute_commands) {
        // SAFETY: forwarding the caller's arguments.
        unsafe { next(cb, count, buffers) };
    }
}

/// Counts a submission's dispatches before the driver sees it (afterwards the application may reset
/// the buffers as soon as they complete), then forwards it; a failed submission's dispatches are
/// counted as errors too.
///
/// The dispatches are also remembered in the queue's ring (the crash locus) before the driver sees
/// them, and the call is marked in flight: a crash inside the driver's submit names both.
fn submit<I: Iterator<Item = vk::CommandBuffer> + Clone>(
    queue: vk::Queue,
    name: &'static &'static str,
    buffers: I,
    forward: impl FnOnce() -> vk::Result,
) -> vk::Result {
    if !state::on() || crate::switch::paused() {
        return forward();
    }
    let tally = state::guarded(|| commands::count(buffers.clone(), false)).unwrap_or_default();
    if tally.dispatches > 0 {
        state::guarded(|| {
            let device = device_of(queue).and_then(|d| d.facts_id);
            if let Some(ring) = crate::locus::queue_ring(queue.as_raw(), device) {
                commands::remember(buffers.clone(), ring);
            }
        });
    }
    let result = watched(name, forward);
    if tally.dispatches > 0 {
        crate::writer::SUBMITS.fetch_add(1, Ordering::Relaxed);
        if result.as_raw() < 0 {
            state::guarded(|| commands::count(buffers, true));
        }
    }
    result
}

/// Forwards a call marked in flight on this thread (the crash record names it); a
/// `VK_ERROR_DEVICE_LOST` it returns is written to the trace with the queues' last dispatches.
#[inline]
fn watched(name: &'static &'static str, forward: impl FnOnce() -> vk::Result) -> vk::Result {
    if !state::on() {
        return forward();
    }
    let result = {
        let _inside = Marked::enter(name);
        forward()
    };
    if result == vk::Result::ERROR_DEVICE_LOST {
        crate::writer::device_lost(name, result.as_raw());
    }
    result
}

/// Names of the calls marked in flight (statics: the crash handler reads them through their address).
mod call {
    pub static CREATE_DEVICE: &str = "vkCreateDevice";
    pub static CREATE_SHADER_MODULE: &str = "vkCreateShaderModule";
    pub static CREATE_COMPUTE_PIPELINES: &str = "vkCreateComputePipelines";
    pub static QUEUE_SUBMIT: &str = "vkQueueSubmit";
    pub static QUEUE_SUBMIT2: &str = "vkQueueSubmit2";
    pub static QUEUE_SUBMIT2_KHR: &str = "vkQueueSubmit2KHR";
    pub static WAIT_FOR_FENCES: &str = "vkWaitForFences";
    pub static GET_FENCE_STATUS: &str = "vkGetFenceStatus";
    pub static QUEUE_WAIT_IDLE: &str = "vkQueueWaitIdle";
    pub static DEVICE_WAIT_IDLE: &str = "vkDeviceWaitIdle";
    pub static WAIT_SEMAPHORES: &str = "vkWaitSemaphores";
    pub static GET_SEMAPHORE_COUNTER_VALUE: &str = "vkGetSemaphoreCounterValue";
    pub static GET_QUERY_POOL_RESULTS: &str = "vkGetQueryPoolResults";
    pub static ALLOCATE_MEMORY: &str = "vkAllocateMemory";
    pub static MAP_MEMORY: &str = "vkMapMemory";
}

unsafe extern "system" fn wait_for_fences(
    device: vk::Device,
    count: u32,
    fences: *const vk::Fence,
    wait_all: vk::Bool32,
    timeout: u64,
) -> vk::Result {
    let Some(next) = device_of(device).and_then(|d| d.wait_for_fences) else {
        return vk::Result::ERROR_INITIALIZATION_FAILED;
    };
    // SAFETY: forwarding the caller's arguments.
    watched(&call::WAIT_FOR_FENCES, || unsafe { next(device, count, fences, wait_all, timeout) })
}

unsafe extern "system" fn get_fence_status(device: vk::Device, fence: vk::Fence) -> vk::Result {
    let Some(next) = device_of(device).and_then(|d| d.get_fence_status) else {
        return vk::Result::ERROR_INITIALIZATION_FAILED;
    };
    // SAFETY: forwarding the caller's arguments.
    watched(&call::GET_FENCE_STATUS, || unsafe { next(device, fence) })
}

unsafe extern "system" fn queue_wait_idle(queue: vk::Queue) -> vk::Result {
    let Some(next) = device_of(queue).and_then(|d| d.queue_wait_idle) else {
        return vk::Result::ERROR_INITIALIZATION_FAILED;
    };
    // SAFETY: forwarding the caller's arguments.
    watched(&call::QUEUE_WAIT_IDLE, || unsafe { next(queue) })
}

unsafe extern "system" fn device_wait_idle(device: vk::Device) -> vk::Result {
    let Some(next) = device_of(device).and_then(|d| d.device_wait_idle) else {
        return vk::Result::ERROR_INITIALIZATION_FAILED;
    };
    // SAFETY: forwarding the caller's arguments.
    watched(&call::DEVICE_WAIT_IDLE, || unsafe { next(device) })
}

unsafe extern "system" fn wait_semaphores(
    device: vk::Device,
    info: *const vk::SemaphoreWaitInfo<'_>,
    timeout: u64,
) -> vk::Result {
    let Some(next) = device_of(device).and_then(|d| d.wait_semaphores) else {
        return vk::Result::ERROR_INITIALIZATION_FAILED;
    };
    // SAFETY: forwarding the caller's arguments.
    watched(&call::WAIT_SEMAPHORES, || unsafe { next(device, info, timeout) })
}

unsafe extern "system" fn wait_semaphores_khr(
    device: vk::Device,
    info: *const vk::SemaphoreWaitInfo<'_>,
    timeout: u64,
) -> vk::Result {
    let Some(next) = device_of(device).and_then(|d| d.wait_semaphores_khr) else {
        return vk::Result::ERROR_INITIALIZATION_FAILED;
    };
    // SAFETY: forwarding the caller's arguments.
    watched(&call::WAIT_SEMAPHORES, || unsafe { next(device, info, timeout) })
}

unsafe extern "system" fn get_semaphore_counter_value(
    device: vk::Device,
    semaphore: vk::Semaphore,
    value: *mut u64,
) -> vk::Result {
    let Some(next) = device_of(device).and_then(|d| d.get_semaphore_counter_value) else {
        return vk::Result::ERROR_INITIALIZATION_FAILED;
    };
    // SAFETY: forwarding the caller's arguments.
    watched(&call::GET_SEMAPHORE_COUNTER_VALUE, || unsafe { next(device, semaphore, value) })
}

unsafe extern "system" fn get_semaphore_counter_value_khr(
    device: vk::Device,
    semaphore: vk::Semaphore,
    value: *mut u64,
) -> vk::Result {
    let Some(next) = device_of(device).and_then(|d| d.get_semaphore_counter_value_khr) else {
        return vk::Result::ERROR_INITIALIZATION_FAILED;
    };
    // SAFETY: forwarding the caller's arguments.
    watched(&call::GET_SEMAPHORE_COUNTER_VALUE, || unsafe { next(device, semaphore, value) })
}

#[allow(clippy::too_many_arguments)]
unsafe extern "system" fn get_query_pool_results(
    device: vk::Device,
    pool: vk::QueryPool,
    first: u32,
    count: u32,
    size: usize,
    data: *mut c_void,
    stride: vk::DeviceSize,
    flags: vk::QueryResultFlags,
) -> vk::Result {
    let Some(next) = device_of(device).and_then(|d| d.get_query_pool_results) else {
        return vk::Result::ERROR_INITIALIZATION_FAILED;
    };
    // SAFETY: forwarding the caller's arguments.
    watched(&call::GET_QUERY_POOL_RESULTS, || unsafe { next(device, pool, first, count, size, data, stride, flags) })
}

unsafe extern "system" fn allocate_memory(
    device: vk::Device,
    info: *const vk::MemoryAllocateInfo<'_>,
    allocator: *const vk::AllocationCallbacks<'_>,
    out: *mut vk::DeviceMemory,
) -> vk::Result {
    let Some(next) = device_of(device).and_then(|d| d.allocate_memory) else {
        return vk::Result::ERROR_INITIALIZATION_FAILED;
    };
    // SAFETY: forwarding the caller's arguments.
    watched(&call::ALLOCATE_MEMORY, || unsafe { next(device, info, allocator, out) })
}

unsafe extern "system" fn map_memory(
    device: vk::Device,
    memory: vk::DeviceMemory,
    offset: vk::DeviceSize,
    size: vk::DeviceSize,
    flags: vk::MemoryMapFlags,
    out: *mut *mut c_void,
) -> vk::Result {
    let Some(next) = device_of(device).and_then(|d| d.map_memory) else {
        return vk::Result::ERROR_INITIALIZATION_FAILED;
    };
    // SAFETY: forwarding the caller's arguments.
    watched(&call::MAP_MEMORY, || unsafe { next(device, memory, offset, size, flags, out) })
}

/// The command buffers of `VkSubmitInfo`s.
///
/// # Safety
/// `submits` must hold `count` valid submit infos (or be null with `count` 0).
unsafe fn buffers_of<'a>(
    submits: *const vk::SubmitInfo<'a>,
    count: u32,
) -> impl Iterator<Item = vk::CommandBuffer> + Clone + 'a {
    let submits: &'a [vk::SubmitInfo<'a>] =
        // SAFETY: `count` valid submit infos, alive for the call.
        if submits.is_null() { &[] } else { unsafe { std::slice::from_raw_parts(submits, count as usize) } };
    submits.iter().flat_map(|s| {
        let buffers: &[vk::CommandBuffer] = if s.p_command_buffers.is_null() {
            &[]
        } else {
            // SAFETY: a valid submit info holds `command_buffer_count` handles.
            unsafe { std::slice::from_raw_parts(s.p_command_buffers, s.command_buffer_count as usize) }
        };
        buffers.iter().copied()
    })
}

/// The command buffers of `VkSubmitInfo2`s.
///
/// # Safety
/// `submits` must hold `count` valid submit infos (or be null with `count` 0).
unsafe fn buffers_of2<'a>(
    submits: *const vk::SubmitInfo2<'a>,
    count: u32,
) -> impl Iterator<Item = vk::CommandBuffer> + Clone + 'a {
    let submits: &'a [vk::SubmitInfo2<'a>] =
        // SAFETY: `count` valid submit infos, alive for the call.
        if submits.is_null() { &[] } else { unsafe { std::slice::from_raw_parts(submits, count as usize) } };
    submits.iter().flat_map(|s| {
        let infos: &[vk::CommandBufferSubmitInfo<'_>] = if s.p_command_buffer_infos.is_null() {
            &[]
        } else {
            // SAFETY: a valid submit info holds `command_buffer_info_count` infos.
            unsafe { std::slice::from_raw_parts(s.p_command_buffer_infos, s.command_buffer_info_count as usize) }
        };
        infos.iter().map(|i| i.command_buffer)
    })
}

unsafe extern "system" fn queue_submit(
    queue: vk::Queue,
    count: u32,
    submits: *const vk::SubmitInfo<'_>,
    fence: vk::Fence,
) -> vk::Result {
    let Some(next) = device_of(queue).and_then(|d| d.queue_submit) else {
        return vk::Result::ERROR_INITIALIZATION_FAILED;
    };
    // SAFETY: the caller's submit infos; forwarding the caller's arguments.
    unsafe { submit(queue, &call::QUEUE_SUBMIT, buffers_of(submits, count), || next(queue, count, submits, fence)) }
}

unsafe extern "system" fn queue_submit2(
    queue: vk::Queue,
    count: u32,
    submits: *const vk::SubmitInfo2<'_>,
    fence: vk::Fence,
) -> vk::Result {
    let Some(next) = device_of(queue).and_then(|d| d.queue_submit2) else {
        return vk::Result::ERROR_INITIALIZATION_FAILED;
    };
    // SAFETY: the caller's submit infos; forwarding the caller's arguments.
    unsafe { submit(queue, &call::QUEUE_SUBMIT2, buffers_of2(submits, count), || next(queue, count, submits, fence)) }
}

unsafe extern "system" fn queue_submit2_khr(
    queue: vk::Queue,
    count: u32,
    submits: *const vk::SubmitInfo2<'_>,
    fence: vk::Fence,
) -> vk::Result {
    let Some(next) = device_of(queue).and_then(|d| d.queue_submit2_khr) else {
        return vk::Result::ERROR_INITIALIZATION_FAILED;
    };
    // SAFETY: the caller's submit infos; forwarding the caller's arguments.
    unsafe {
        submit(queue, &call::QUEUE_SUBMIT2_KHR, buffers_of2(submits, count), || next(queue, count, submits, fence))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn negotiation_hands_over_both_proc_addr_functions_at_version_2() {
        let mut n = NegotiateLayerInterface {
            s_type: loader::LAYER_NEGOTIATE_INTERFACE_STRUCT,
            p_next: std::ptr::null_mut(),
            loader_layer_interface_version: 5,
            pfn_get_instance_proc_addr: None,
            pfn_get_device_proc_addr: None,
            pfn_get_physical_device_proc_addr: None,
        };
        // SAFETY: a valid negotiation structure.
        assert_eq!(unsafe { vkNegotiateLoaderLayerInterfaceVersion(&mut n) }, vk::Result::SUCCESS);
        assert_eq!(n.loader_layer_interface_version, 2);
        assert!(n.pfn_get_instance_proc_addr.is_some() && n.pfn_get_device_proc_addr.is_some());
        let mut old = NegotiateLayerInterface { loader_layer_interface_version: 1, ..n };
        // SAFETY: as above.
        assert_ne!(unsafe { vkNegotiateLoaderLayerInterfaceVersion(&mut old) }, vk::Result::SUCCESS);
        // SAFETY: a null pointer is refused before any access.
        assert_ne!(unsafe { vkNegotiateLoaderLayerInterfaceVersion(std::ptr::null_mut()) }, vk::Result::SUCCESS);
    }

    fn fixed<const N: usize>(text: &str) -> [c_char; N] {
        let mut out = [0 as c_char; N];
        for (o, b) in out.iter_mut().zip(text.bytes()) {
            *o = b as c_char;
        }
        out
    }

    /// A driver's `vkGetPipelineExecutablePropertiesKHR`: one executable. With a huge count it claims more
    /// executables than any pipeline has, to check the layer's bound.
    unsafe extern "system" fn properties(
        _: vk::Device,
        info: *const vk::PipelineInfoKHR<'_>,
        count: *mut u32,
        out: *mut vk::PipelineExecutablePropertiesKHR<'_>,
    ) -> vk::Result {
        // SAFETY: the layer passes valid pointers; `out` has room for `*count` elements.
        unsafe {
            let huge = (*info).pipeline.as_raw() == 2;
            if out.is_null() {
                *count = if huge { 1 << 30 } else { 1 };
            } else {
                for i in 0..*count as usize {
                    (*out.add(i)).name = fixed("Compute Shader");
                }
            }
        }
        vk::Result::SUCCESS
    }

    /// A driver's `vkGetPipelineExecutableStatisticsKHR`: three statistics of three formats.
    unsafe extern "system" fn statistics_of(
        _: vk::Device,
        _: *const vk::PipelineExecutableInfoKHR<'_>,
        count: *mut u32,
        out: *mut vk::PipelineExecutableStatisticKHR<'_>,
    ) -> vk::Result {
        // SAFETY: the layer passes valid pointers; `out` has room for `*count` elements.
        unsafe {
            if out.is_null() {
                *count = 3;
                return vk::Result::SUCCESS;
            }
            let values = [
                (
                    "Registers",
                    vk::PipelineExecutableStatisticFormatKHR::UINT64,
                    vk::PipelineExecutableStatisticValueKHR { u64: 48 },
                ),
                (
                    "Spills",
                    vk::PipelineExecutableStatisticFormatKHR::BOOL32,
                    vk::PipelineExecutableStatisticValueKHR { b32: 0 },
                ),
                (
                    "Occupancy",
                    vk::PipelineExecutableStatisticFormatKHR::FLOAT64,
                    vk::PipelineExecutableStatisticValueKHR { f64: 0.5 },
                ),
            ];
            for (i, (name, format, value)) in values.into_iter().enumerate().take(*count as usize) {
                let s = &mut *out.add(i);
                s.name = fixed(name);
                s.format = format;
                s.value = value;
            }
        }
        vk::Result::SUCCESS
    }

    unsafe extern "system" fn gdpa(_: vk::Device, name: *const c_char) -> vk::PFN_vkVoidFunction {
        // SAFETY: a command name.
        match unsafe { CStr::from_ptr(name) }.to_bytes() {
            b"vkGetPipelineExecutablePropertiesKHR" => {
                hook!(properties, vk::PFN_vkGetPipelineExecutablePropertiesKHR)
            }
            b"vkGetPipelineExecutableStatisticsKHR" => {
                hook!(statistics_of, vk::PFN_vkGetPipelineExecutableStatisticsKHR)
            }
            _ => None,
        }
    }

    #[test]
    fn driver_statistics_are_read_in_every_format_and_bounded() {
        // SAFETY: `gdpa` resolves the two commands to functions of their types.
        let d = unsafe { DeviceDispatch::new(vk::Device::null(), gdpa, Some(0), true) };
        assert!(d.cmd_dispatch.is_none(), "a command the next link lacks stays absent");
        // SAFETY: the fake driver accepts any pipeline.
        let stats = unsafe { statistics(&d, vk::Pipeline::from_raw(1)) };
        let read: Vec<(&str, &str, f64)> =
            stats.iter().map(|s| (s.executable.as_str(), s.name.as_str(), s.value)).collect();
        assert_eq!(
            read,
            [
                ("Compute Shader", "Registers", 48.0),
                ("Compute Shader", "Spills", 0.0),
                ("Compute Shader", "Occupancy", 0.5)
            ]
        );
        // SAFETY: as above.
        let many = unsafe { statistics(&d, vk::Pipeline::from_raw(2)) };
        assert_eq!(many.len(), MAX_EXECUTABLES as usize * 3, "executables read are bounded");
    }

    /// A fake next link for `vkCreateDevice`: a physical device that offers pipeline statistics, and a
    /// `vkCreateDevice` that records what it was asked for (and refuses the layer's version when told to).
    mod next_link {
        use super::*;
        use std::sync::atomic::{AtomicBool, AtomicU64};
        use std::sync::Mutex;

        pub static INSTANCE_KEY: usize = 0x1000_0001;
        pub static DEVICE_KEY: usize = 0x2000_0001;
        pub static REFUSE_ADDED_EXTENSION: AtomicBool = AtomicBool::new(false);
        /// One `vkCreateDevice` the next link saw: the extension names and the feature's value in the chain
        /// (None: not chained).
        pub type Call = (Vec<String>, Option<bool>);
        pub static CALLS: Mutex<Vec<Call>> = Mutex::new(Vec::new());
        pub static CREATED: AtomicU64 = AtomicU64::new(0);

        pub unsafe extern "system" fn gipa(_: vk::Instance, name: *const c_char) -> vk::PFN_vkVoidFunction {
            // SAFETY: a command name.
            match unsafe { CStr::from_ptr(name) }.to_bytes() {
                b"vkCreateDevice" => hook!(create, vk::PFN_vkCreateDevice),
                b"vkEnumerateDeviceExtensionProperties" => {
                    hook!(extensions, vk::PFN_vkEnumerateDeviceExtensionProperties)
                }
                b"vkGetPhysicalDeviceFeatures2" => hook!(features2, vk::PFN_vkGetPhysicalDeviceFeatures2),
                _ => None,
            }
        }

        pub unsafe extern "system" fn gdpa(_: vk::Device, _: *const c_char) -> vk::PFN_vkVoidFunction {
            None
        }

        unsafe extern "system" fn extensions(
            _: vk::PhysicalDevice,
            _: *const c_char,
            count: *mut u32,
            out: *mut vk::ExtensionProperties,
        ) -> vk::Result {
            // SAFETY: valid pointers from the layer; room for `*count` elements.
            unsafe {
                if out.is_null() {
                    *count = 1;
                } else {
                    (*out).extension_name = fixed("VK_KHR_pipeline_executable_properties");
                    *count = 1;
                }
            }
            vk::Result::SUCCESS
        }

        unsafe extern "system" fn features2(_: vk::PhysicalDevice, features: *mut vk::PhysicalDeviceFeatures2<'_>) {
            // SAFETY: the layer's output chain.
            for s in unsafe { loader::chain((*features).p_next) } {
                // SAFETY: a structure of the chain; its sType says which.
                if unsafe { (*s).s_type }
                    == vk::StructureType::PHYSICAL_DEVICE_PIPELINE_EXECUTABLE_PROPERTIES_FEATURES_KHR
                {
                    let f = s as *mut vk::PhysicalDevicePipelineExecutablePropertiesFeaturesKHR<'_>;
                    // SAFETY: that sType is this structure, writable (an output chain).
                    unsafe { (*f).pipeline_executable_info = vk::TRUE };
                }
            }
        }

        unsafe extern "system" fn create(
            _: vk::PhysicalDevice,
            info: *const vk::DeviceCreateInfo<'_>,
            _: *const vk::AllocationCallbacks<'_>,
            out: *mut vk::Device,
        ) -> vk::Result {
            // SAFETY: the create info the layer forwards.
            let info = unsafe { &*info };
            let names: Vec<String> = (0..info.enabled_extension_count as usize)
                // SAFETY: that many extension names.
                .map(|i| unsafe { CStr::from_ptr(*info.pp_enabled_extension_names.add(i)) }.to_string_lossy().into())
                .collect();
            let mut feature = None;
            // SAFETY: the chain of a valid create info.
            for s in unsafe { loader::chain(info.p_next) } {
                // SAFETY: a structure of the chain; its sType says which.
                if unsafe { (*s).s_type }
                    == vk::StructureType::PHYSICAL_DEVICE_PIPELINE_EXECUTABLE_PROPERTIES_FEATURES_KHR
                {
                    let f = s as *const vk::PhysicalDevicePipelineExecutablePropertiesFeaturesKHR<'_>;
                    // SAFETY: that sType is this structure.
                    feature = Some(unsafe { (*f).pipeline_executable_info } == vk::TRUE);
                }
            }
            let added = names.iter().any(|n| n == "VK_KHR_pipeline_executable_properties") && feature == Some(true);
            CALLS.lock().unwrap().push((names, feature));
            if added && REFUSE_ADDED_EXTENSION.load(std::sync::atomic::Ordering::Relaxed) {
                return vk::Result::ERROR_FEATURE_NOT_PRESENT;
            }
            CREATED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            // SAFETY: `out` is the caller's; the handle is a pointer to a word holding the device's key.
            unsafe { *out = vk::Device::from_raw(&DEVICE_KEY as *const usize as u64) };
            vk::Result::SUCCESS
        }
    }

    /// Creates a device through the layer's `vkCreateDevice` with the fake next link; the application's create info
    /// chains `app_feature` when given. Returns what the next link was asked for and the device's table.
    fn create_through_layer(app_feature: Option<bool>) -> (Vec<next_link::Call>, &'static DeviceDispatch) {
        next_link::CALLS.lock().unwrap().clear();
        let physical = vk::PhysicalDevice::from_raw(&next_link::INSTANCE_KEY as *const usize as u64);
        let mut link = loader::LayerDeviceLink {
            p_next: std::ptr::null_mut(),
            pfn_next_get_instance_proc_addr: next_link::gipa,
            pfn_next_get_device_proc_addr: next_link::gdpa,
        };
        let mut feature = vk::PhysicalDevicePipelineExecutablePropertiesFeaturesKHR {
            pipeline_executable_info: if app_feature == Some(true) { vk::TRUE } else { vk::FALSE },
            ..Default::default()
        };
        let chain_info = loader::LayerDeviceCreateInfo {
            s_type: vk::StructureType::LOADER_DEVICE_CREATE_INFO,
            p_next: if app_feature.is_some() { &mut feature as *mut _ as *const c_void } else { std::ptr::null() },
            function: loader::LAYER_LINK_INFO,
            layer_info: &mut link,
        };
        let names = [c"VK_KHR_16bit_storage".as_ptr()];
        let info = vk::DeviceCreateInfo {
            p_next: &chain_info as *const _ as *const c_void,
            enabled_extension_count: 1,
            pp_enabled_extension_names: names.as_ptr(),
            ..Default::default()
        };
        let mut device = vk::Device::null();
        // SAFETY: a physical device whose dispatch key names the fake instance; a create info with the link.
        let result = unsafe { create_device(physical, &info, std::ptr::null(), &mut device) };
        assert_eq!(result, vk::Result::SUCCESS);
        let calls = next_link::CALLS.lock().unwrap().clone();
        (calls, device_of(device).expect("the device's table is registered"))
    }

    #[test]
    fn device_creation_turns_pipeline_statistics_on_unless_the_application_decided() {
        let _serial = crate::pipelines::tests::TEST_LOCK.lock().unwrap();
        let dir = std::env::temp_dir().join(format!("backscope-vklayer-unit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::env::set_var("BACKSCOPE_TRACE_DIR", &dir);
        std::env::set_var("BACKSCOPE_TRACE_INTERVAL_MS", "0");
        crate::start::start();
        assert!(state::on());
        // SAFETY: `gipa` resolves the fake next link's commands.
        let table = unsafe { InstanceDispatch::new(vk::Instance::null(), next_link::gipa) };
        assert!(dispatch::add_instance(next_link::INSTANCE_KEY as u64, table));

        // Offered and supported, the application silent: the layer adds the extension and the feature.
        let (calls, d) = create_through_layer(None);
        assert_eq!(calls.len(), 1);
        assert_eq!(calls[0].0, ["VK_KHR_16bit_storage", "VK_KHR_pipeline_executable_properties"]);
        assert_eq!(calls[0].1, Some(true));
        assert!(d.capture_statistics);

        // The driver refuses the layer's version: the application's own create info, unchanged, is what counts.
        next_link::REFUSE_ADDED_EXTENSION.store(true, Ordering::Relaxed);
        let (calls, d) = create_through_layer(None);
        next_link::REFUSE_ADDED_EXTENSION.store(false, Ordering::Relaxed);
        assert_eq!(calls.len(), 2);
        assert_eq!(calls[1], (vec!["VK_KHR_16bit_storage".to_string()], None));
        assert!(!d.capture_statistics);

        // The application chained the feature: its choice stands, and the create info is forwarded as it is.
        for choice in [false, true] {
            let (calls, d) = create_through_layer(Some(choice));
            assert_eq!(calls, [(vec!["VK_KHR_16bit_storage".to_string()], Some(choice))]);
            assert_eq!(d.capture_statistics, choice);
        }
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn global_commands_resolve_without_an_instance_and_others_do_not() {
        // SAFETY: command names are C strings; a null instance is allowed for global commands.
        unsafe {
            assert!(get_instance_proc_addr(vk::Instance::null(), c"vkCreateInstance".as_ptr()).is_some());
            assert!(get_instance_proc_addr(vk::Instance::null(), c"vkCmdDispatch".as_ptr()).is_none());
            assert!(get_device_proc_addr(vk::Device::null(), c"vkGetDeviceProcAddr".as_ptr()).is_some());
            assert!(get_device_proc_addr(vk::Device::null(), c"vkCmdDispatch".as_ptr()).is_none());
        }
    }
}
