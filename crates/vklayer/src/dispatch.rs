//! Where each hooked call goes next: one table of the next layer's (or driver's) functions per
//! instance and per device, found by the handle's dispatch key ([`crate::loader::dispatch_key`]).
//!
//! Tables are built at `vkCreateInstance` / `vkCreateDevice` from the `vkGetInstanceProcAddr` /
//! `vkGetDeviceProcAddr` of the next link, and never freed: a destroyed object's table stays
//! reachable for a racing call (which would be the application's bug) and costs a few hundred bytes
//! per instance or device a process ever creates.

use std::ffi::CStr;

use ash::vk;

use crate::handles::HandleMap;
use crate::loader::dispatch_key;

/// Instances and devices alive at once: far above what any program creates; past it, a new one is
/// not observed (its calls still reach the driver, see `api`).
const MAX_LIVE: usize = 4096;

/// Compute pipelines alive at once per device that the layer follows (ggml-vulkan creates a few
/// thousand); a pipeline past it is counted as the overflow kernel.
const MAX_PIPELINES: usize = 1 << 20;

static INSTANCES: HandleMap = HandleMap::new(MAX_LIVE);
static DEVICES: HandleMap = HandleMap::new(MAX_LIVE);

/// Resolves `name` through `gipa` for `instance`, as the function type `F` (a `PFN_vk…`).
///
/// # Safety
/// `F` must be the function pointer type of the command `name`.
unsafe fn load<F: Copy>(resolve: &dyn Fn(&CStr) -> vk::PFN_vkVoidFunction, name: &CStr) -> Option<F> {
    const { assert!(std::mem::size_of::<F>() == std::mem::size_of::<unsafe extern "system" fn()>()) };
    let f = resolve(name)?;
    // SAFETY: the loader returned the command `name`, whose type the caller gives as `F`.
    Some(unsafe { std::mem::transmute_copy::<unsafe extern "system" fn(), F>(&f) })
}

/// The next link's instance-level functions.
pub struct InstanceDispatch {
    pub instance: vk::Instance,
    pub get_instance_proc_addr: vk::PFN_vkGetInstanceProcAddr,
    pub destroy_instance: Option<vk::PFN_vkDestroyInstance>,
    pub enumerate_device_extension_properties: Option<vk::PFN_vkEnumerateDeviceExtensionProperties>,
    pub get_physical_device_properties: Option<vk::PFN_vkGetPhysicalDeviceProperties>,
    pub get_physical_device_properties2: Option<vk::PFN_vkGetPhysicalDeviceProperties2>,
    pub get_physical_device_features2: Option<vk::PFN_vkGetPhysicalDeviceFeatures2>,
    pub get_physical_device_features: Option<vk::PFN_vkGetPhysicalDeviceFeatures>,
    pub get_physical_device_memory_properties: Option<vk::PFN_vkGetPhysicalDeviceMemoryProperties>,
    /// The next link's `vk_layerGetPhysicalDeviceProcAddr` (set by `vkCreateInstance` from the loader's link), which
    /// an impersonating layer forwards the physical-device commands it does not answer to.
    pub get_physical_device_proc_addr: crate::loader::GetPhysicalDeviceProcAddr,
    /// `VK_EXT_debug_utils` is an instance extension: its device commands come from here.
    pub set_debug_utils_object_name: Option<vk::PFN_vkSetDebugUtilsObjectNameEXT>,
    pub cmd_begin_debug_utils_label: Option<vk::PFN_vkCmdBeginDebugUtilsLabelEXT>,
    pub cmd_end_debug_utils_label: Option<vk::PFN_vkCmdEndDebugUtilsLabelEXT>,
}

impl InstanceDispatch {
    /// # Safety
    /// `gipa` must be the next link's `vkGetInstanceProcAddr` and `instance` the instance it created.
    pub unsafe fn new(instance: vk::Instance, gipa: vk::PFN_vkGetInstanceProcAddr) -> InstanceDispatch {
        // SAFETY: gipa is a valid vkGetInstanceProcAddr (the caller's promise); names are C strings.
        let resolve = |name: &CStr| unsafe { gipa(instance, name.as_ptr()) };
        // SAFETY: in each `load`, the name and the type are those of the same command.
        unsafe {
            InstanceDispatch {
                instance,
                get_instance_proc_addr: gipa,
                destroy_instance: load(&resolve, c"vkDestroyInstance"),
                enumerate_device_extension_properties: load(&resolve, c"vkEnumerateDeviceExtensionProperties"),
                get_physical_device_properties: load(&resolve, c"vkGetPhysicalDeviceProperties"),
                get_physical_device_properties2: load(&resolve, c"vkGetPhysicalDeviceProperties2")
                    .or_else(|| load(&resolve, c"vkGetPhysicalDeviceProperties2KHR")),
                get_physical_device_features2: load(&resolve, c"vkGetPhysicalDeviceFeatures2")
                    .or_else(|| load(&resolve, c"vkGetPhysicalDeviceFeatures2KHR")),
                get_physical_device_features: load(&resolve, c"vkGetPhysicalDeviceFeatures"),
                get_physical_device_memory_properties: load(&resolve, c"vkGetPhysicalDeviceMemoryProperties"),
                get_physical_device_proc_addr: None,
                set_debug_utils_object_name: load(&resolve, c"vkSetDebugUtilsObjectNameEXT"),
                cmd_begin_debug_utils_label: load(&resolve, c"vkCmdBeginDebugUtilsLabelEXT"),
                cmd_end_debug_utils_label: load(&resolve, c"vkCmdEndDebugUtilsLabelEXT"),
            }
        }
    }
}

/// The next link's device-level functions that the layer hooks or calls.
///
/// What a bind and a dispatch read (the pipelines' map, their two functions, and the barrier's) is in the first cache
/// line (`repr(C)` keeps the order, the alignment the line), as in `commands::CommandBuffer`.
#[repr(C, align(64))]
pub struct DeviceDispatch {
    /// The device's compute pipelines: handle to slot + 1 (handles are only unique per device).
    pub pipelines: HandleMap,
    pub cmd_bind_pipeline: Option<vk::PFN_vkCmdBindPipeline>,
    pub cmd_dispatch: Option<vk::PFN_vkCmdDispatch>,
    pub cmd_pipeline_barrier: Option<vk::PFN_vkCmdPipelineBarrier>,
    pub device: vk::Device,
    /// The trace's id of the device's physical device (`device` record); `None` when it could not be described.
    pub facts_id: Option<u32>,
    /// The layer made the device capture pipeline statistics: pipelines get
    /// `VK_PIPELINE_CREATE_CAPTURE_STATISTICS_BIT_KHR` and their statistics are recorded.
    pub capture_statistics: bool,
    pub get_device_proc_addr: vk::PFN_vkGetDeviceProcAddr,
    pub destroy_device: Option<vk::PFN_vkDestroyDevice>,
    pub create_shader_module: Option<vk::PFN_vkCreateShaderModule>,
    pub destroy_shader_module: Option<vk::PFN_vkDestroyShaderModule>,
    pub create_compute_pipelines: Option<vk::PFN_vkCreateComputePipelines>,
    pub destroy_pipeline: Option<vk::PFN_vkDestroyPipeline>,
    pub set_debug_utils_object_name: Option<vk::PFN_vkSetDebugUtilsObjectNameEXT>,
    /// The same command from the instance's chain, where the device's has none.
    pub instance_set_debug_utils_object_name: Option<vk::PFN_vkSetDebugUtilsObjectNameEXT>,
    /// Debug labels (ggml-vulkan's per-node regions under `GGML_VK_DEBUG_MARKERS`), from the device's chain or
    /// the instance's.
    pub cmd_begin_debug_utils_label: Option<vk::PFN_vkCmdBeginDebugUtilsLabelEXT>,
    pub cmd_end_debug_utils_label: Option<vk::PFN_vkCmdEndDebugUtilsLabelEXT>,
    pub allocate_command_buffers: Option<vk::PFN_vkAllocateCommandBuffers>,
    pub free_command_buffers: Option<vk::PFN_vkFreeCommandBuffers>,
    pub destroy_command_pool: Option<vk::PFN_vkDestroyCommandPool>,
    pub reset_command_pool: Option<vk::PFN_vkResetCommandPool>,
    pub begin_command_buffer: Option<vk::PFN_vkBeginCommandBuffer>,
    pub reset_command_buffer: Option<vk::PFN_vkResetCommandBuffer>,
    pub cmd_dispatch_base: Option<vk::PFN_vkCmdDispatchBase>,
    pub cmd_dispatch_base_khr: Option<vk::PFN_vkCmdDispatchBase>,
    pub cmd_dispatch_indirect: Option<vk::PFN_vkCmdDispatchIndirect>,
    pub cmd_execute_commands: Option<vk::PFN_vkCmdExecuteCommands>,
    pub queue_submit: Option<vk::PFN_vkQueueSubmit>,
    pub queue_submit2: Option<vk::PFN_vkQueueSubmit2>,
    pub queue_submit2_khr: Option<vk::PFN_vkQueueSubmit2>,
    pub get_pipeline_executable_properties: Option<vk::PFN_vkGetPipelineExecutablePropertiesKHR>,
    pub get_pipeline_executable_statistics: Option<vk::PFN_vkGetPipelineExecutableStatisticsKHR>,
    // Calls that can return VK_ERROR_DEVICE_LOST, hooked for it (and marked in flight).
    pub wait_for_fences: Option<vk::PFN_vkWaitForFences>,
    pub get_fence_status: Option<vk::PFN_vkGetFenceStatus>,
    pub queue_wait_idle: Option<vk::PFN_vkQueueWaitIdle>,
    pub device_wait_idle: Option<vk::PFN_vkDeviceWaitIdle>,
    pub wait_semaphores: Option<vk::PFN_vkWaitSemaphores>,
    pub wait_semaphores_khr: Option<vk::PFN_vkWaitSemaphores>,
    pub get_semaphore_counter_value: Option<vk::PFN_vkGetSemaphoreCounterValue>,
    pub get_semaphore_counter_value_khr: Option<vk::PFN_vkGetSemaphoreCounterValue>,
    pub get_query_pool_results: Option<vk::PFN_vkGetQueryPoolResults>,
    pub allocate_memory: Option<vk::PFN_vkAllocateMemory>,
    pub map_memory: Option<vk::PFN_vkMapMemory>,
    // Impersonation only (`impersonate::readback`): descriptor bookkeeping and the zero-fill of read-back outputs.
    pub update_descriptor_sets: Option<vk::PFN_vkUpdateDescriptorSets>,
    pub cmd_bind_descriptor_sets: Option<vk::PFN_vkCmdBindDescriptorSets>,
    pub cmd_fill_buffer: Option<vk::PFN_vkCmdFillBuffer>,
    // The black box (`crate::progress`): marker writes, the marker buffer, the layer's timeline semaphores.
    pub cmd_write_buffer_marker: Option<vk::PFN_vkCmdWriteBufferMarkerAMD>,
    /// `vkGetDeviceFaultInfoEXT`, only on devices the layer or the application created with `VK_EXT_device_fault`
    /// and its feature (`crate::fault`).
    pub get_device_fault_info: Option<vk::PFN_vkGetDeviceFaultInfoEXT>,
    pub cmd_pipeline_barrier2: Option<vk::PFN_vkCmdPipelineBarrier2>,
    pub cmd_pipeline_barrier2_khr: Option<vk::PFN_vkCmdPipelineBarrier2>,
    pub end_command_buffer: Option<vk::PFN_vkEndCommandBuffer>,
    pub create_buffer: Option<vk::PFN_vkCreateBuffer>,
    pub get_buffer_memory_requirements: Option<vk::PFN_vkGetBufferMemoryRequirements>,
    pub bind_buffer_memory: Option<vk::PFN_vkBindBufferMemory>,
    pub create_semaphore: Option<vk::PFN_vkCreateSemaphore>,
    pub destroy_semaphore: Option<vk::PFN_vkDestroySemaphore>,
    pub destroy_buffer: Option<vk::PFN_vkDestroyBuffer>,
    pub free_memory: Option<vk::PFN_vkFreeMemory>,
    pub progress: crate::progress::DeviceProgress,
}

impl DeviceDispatch {
    /// # Safety
    /// `gdpa` must be the next link's `vkGetDeviceProcAddr` and `device` the device it created.
    pub unsafe fn new(
        device: vk::Device,
        gdpa: vk::PFN_vkGetDeviceProcAddr,
        facts_id: Option<u32>,
        capture_statistics: bool,
    ) -> DeviceDispatch {
        // SAFETY: gdpa is a valid vkGetDeviceProcAddr (the caller's promise); names are C strings.
        let resolve = |name: &CStr| unsafe { gdpa(device, name.as_ptr()) };
        // SAFETY: in each `load`, the name and the type are those of the same command.
        unsafe {
            DeviceDispatch {
                device,
                facts_id,
                capture_statistics,
                pipelines: HandleMap::new(MAX_PIPELINES),
                get_device_proc_addr: gdpa,
                destroy_device: load(&resolve, c"vkDestroyDevice"),
                create_shader_module: load(&resolve, c"vkCreateShaderModule"),
                destroy_shader_module: load(&resolve, c"vkDestroyShaderModule"),
                create_compute_pipelines: load(&resolve, c"vkCreateComputePipelines"),
                destroy_pipeline: load(&resolve, c"vkDestroyPipeline"),
                set_debug_utils_object_name: load(&resolve, c"vkSetDebugUtilsObjectNameEXT"),
                instance_set_debug_utils_object_name: None,
                cmd_begin_debug_utils_label: load(&resolve, c"vkCmdBeginDebugUtilsLabelEXT"),
                cmd_end_debug_utils_label: load(&resolve, c"vkCmdEndDebugUtilsLabelEXT"),
                allocate_command_buffers: load(&resolve, c"vkAllocateCommandBuffers"),
                free_command_buffers: load(&resolve, c"vkFreeCommandBuffers"),
                destroy_command_pool: load(&resolve, c"vkDestroyCommandPool"),
                reset_command_pool: load(&resolve, c"vkResetCommandPool"),
                begin_command_buffer: load(&resolve, c"vkBeginCommandBuffer"),
                reset_command_buffer: load(&resolve, c"vkResetCommandBuffer"),
                cmd_bind_pipeline: load(&resolve, c"vkCmdBindPipeline"),
                cmd_dispatch: load(&resolve, c"vkCmdDispatch"),
                cmd_dispatch_base: load(&resolve, c"vkCmdDispatchBase"),
                cmd_dispatch_base_khr: load(&resolve, c"vkCmdDispatchBaseKHR"),
                cmd_dispatch_indirect: load(&resolve, c"vkCmdDispatchIndirect"),
                cmd_execute_commands: load(&resolve, c"vkCmdExecuteCommands"),
                queue_submit: load(&resolve, c"vkQueueSubmit"),
                queue_submit2: load(&resolve, c"vkQueueSubmit2"),
                queue_submit2_khr: load(&resolve, c"vkQueueSubmit2KHR"),
                get_pipeline_executable_properties: load(&resolve, c"vkGetPipelineExecutablePropertiesKHR"),
                get_pipeline_executable_statistics: load(&resolve, c"vkGetPipelineExecutableStatisticsKHR"),
                wait_for_fences: load(&resolve, c"vkWaitForFences"),
                get_fence_status: load(&resolve, c"vkGetFenceStatus"),
                queue_wait_idle: load(&resolve, c"vkQueueWaitIdle"),
                device_wait_idle: load(&resolve, c"vkDeviceWaitIdle"),
                wait_semaphores: load(&resolve, c"vkWaitSemaphores"),
                wait_semaphores_khr: load(&resolve, c"vkWaitSemaphoresKHR"),
                get_semaphore_counter_value: load(&resolve, c"vkGetSemaphoreCounterValue"),
                get_semaphore_counter_value_khr: load(&resolve, c"vkGetSemaphoreCounterValueKHR"),
                get_query_pool_results: load(&resolve, c"vkGetQueryPoolResults"),
                allocate_memory: load(&resolve, c"vkAllocateMemory"),
                map_memory: load(&resolve, c"vkMapMemory"),
                update_descriptor_sets: load(&resolve, c"vkUpdateDescriptorSets"),
                cmd_bind_descriptor_sets: load(&resolve, c"vkCmdBindDescriptorSets"),
                cmd_fill_buffer: load(&resolve, c"vkCmdFillBuffer"),
                cmd_pipeline_barrier: load(&resolve, c"vkCmdPipelineBarrier"),
                cmd_write_buffer_marker: load(&resolve, c"vkCmdWriteBufferMarkerAMD"),
                get_device_fault_info: None,
                cmd_pipeline_barrier2: load(&resolve, c"vkCmdPipelineBarrier2"),
                cmd_pipeline_barrier2_khr: load(&resolve, c"vkCmdPipelineBarrier2KHR"),
                end_command_buffer: load(&resolve, c"vkEndCommandBuffer"),
                create_buffer: load(&resolve, c"vkCreateBuffer"),
                get_buffer_memory_requirements: load(&resolve, c"vkGetBufferMemoryRequirements"),
                bind_buffer_memory: load(&resolve, c"vkBindBufferMemory"),
                create_semaphore: load(&resolve, c"vkCreateSemaphore"),
                destroy_semaphore: load(&resolve, c"vkDestroySemaphore"),
                destroy_buffer: load(&resolve, c"vkDestroyBuffer"),
                free_memory: load(&resolve, c"vkFreeMemory"),
                progress: Default::default(),
            }
        }
    }
}

/// Registers the table of the instance with dispatch key `key`; false when no more fit.
pub fn add_instance(key: u64, table: InstanceDispatch) -> bool {
    let table = Box::into_raw(Box::new(table));
    if INSTANCES.insert(key, table as u64) {
        return true;
    }
    // SAFETY: never published.
    drop(unsafe { Box::from_raw(table) });
    false
}

pub fn add_device(key: u64, table: DeviceDispatch) -> Option<&'static DeviceDispatch> {
    let table = Box::into_raw(Box::new(table));
    if DEVICES.insert(key, table as u64) {
        // SAFETY: published tables are never freed.
        return Some(unsafe { &*table });
    }
    // SAFETY: never published.
    drop(unsafe { Box::from_raw(table) });
    None
}

/// The instance table for a dispatchable handle of that instance (the instance or one of its
/// physical devices).
///
/// # Safety
/// `handle` must be a valid dispatchable handle.
#[inline]
pub unsafe fn instance(handle: *mut u8) -> Option<&'static InstanceDispatch> {
    // SAFETY: forwarded from the caller.
    let key = unsafe { dispatch_key(handle) };
    // SAFETY: values are pointers to tables leaked in `add_instance`, never freed.
    INSTANCES.get(key).map(|p| unsafe { &*(p as *const InstanceDispatch) })
}

/// The device table for a dispatchable handle of that device (the device, a queue, a command buffer).
///
/// # Safety
/// `handle` must be a valid dispatchable handle.
#[inline]
pub unsafe fn device(handle: *mut u8) -> Option<&'static DeviceDispatch> {
    // SAFETY: forwarded from the caller.
    let key = unsafe { dispatch_key(handle) };
    // SAFETY: values are pointers to tables leaked in `add_device`, never freed.
    DEVICES.get(key).map(|p| unsafe { &*(p as *const DeviceDispatch) })
}

/// Forgets the instance whose dispatch key is `key` (its table stays allocated, see the module docs).
pub fn remove_instance(key: u64) {
    INSTANCES.remove(key);
}

pub fn remove_device(key: u64) {
    DEVICES.remove(key);
}

/// Calls `f` with each live device's table.
pub fn for_each_device(mut f: impl FnMut(&'static DeviceDispatch)) {
    // SAFETY: values are pointers to tables leaked in `add_device`, never freed.
    DEVICES.for_each(|_, p| f(unsafe { &*(p as *const DeviceDispatch) }));
}

/// In a forked child: a parent thread may have held a map's lock. The maps stay usable (entries are
/// written with atomics), and the child still forwards every call through them.
pub const FORK: format::fork::ForkHandlers = format::fork::ForkHandlers::child(force_unlock_in_child);

fn force_unlock_in_child() {
    INSTANCES.force_unlock();
    DEVICES.force_unlock();
}

/// The device table of a dispatchable handle of a device (device, queue, command buffer).
#[inline(always)]
pub fn device_of<H: ash::vk::Handle>(handle: H) -> Option<&'static DeviceDispatch> {
    // SAFETY: hooks are called with valid handles of devices this layer created.
    unsafe { device(handle.as_raw() as *mut u8) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{align_of, offset_of};

    #[test]
    fn what_a_bind_and_a_dispatch_read_is_in_the_first_cache_line() {
        assert_eq!(align_of::<DeviceDispatch>(), 64);
        assert_eq!(offset_of!(DeviceDispatch, pipelines), 0);
        let end = offset_of!(DeviceDispatch, cmd_pipeline_barrier) + 8;
        assert!(end <= 64, "the barrier's function ends at byte {end}");
    }
}
