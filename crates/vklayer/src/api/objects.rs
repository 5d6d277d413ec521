//! Hooks on the objects that name pipelines: shader modules (their SPIR-V hash and the library that holds them),
//! compute pipelines (slot, workgroup size, driver statistics) and debug names.

use std::ffi::{c_char, c_void, CStr};
use std::sync::Arc;

use ash::vk;
use ash::vk::Handle;

use super::calls::watched;
use crate::dispatch::{device_of, DeviceDispatch};
use crate::loader::{self, dispatch_key};
use crate::locus::call;
use crate::pipelines::{self, Meta, Module, Stat};
use crate::shader::{specialization_value, LocalSize};
use crate::state;

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

pub(super) unsafe extern "system" fn create_shader_module(
    device: vk::Device,
    info: *const vk::ShaderModuleCreateInfo<'_>,
    allocator: *const vk::AllocationCallbacks<'_>,
    out: *mut vk::ShaderModule,
) -> vk::Result {
    let Some(next) = device_of(device).and_then(|d| d.create_shader_module) else {
        return vk::Result::ERROR_INITIALIZATION_FAILED;
    };
    // An impersonating layer gives the driver the empty shader (the observation below reads the original code).
    let empty = (crate::impersonate::active().is_some() && !info.is_null())
        // SAFETY: the caller's valid create info.
        .then(|| super::physical::empty_module_info(unsafe { &*info }));
    let forwarded = empty.as_ref().map_or(info, |e| e as *const _);
    // SAFETY: forwarding the caller's arguments (or the empty module's create info, alive for the call).
    let result = watched(&call::CREATE_SHADER_MODULE, || unsafe { next(device, forwarded, allocator, out) });
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

pub(super) unsafe extern "system" fn destroy_shader_module(
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

pub(super) unsafe extern "system" fn create_compute_pipelines(
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
    let result = if crate::impersonate::active().is_some() && count > 0 && !infos.is_null() {
        // SAFETY: `count` valid create infos; the copies live until the call returns.
        unsafe {
            let copies = crate::impersonate::pipeline_create_infos(std::slice::from_raw_parts(infos, count as usize));
            watched(&call::CREATE_COMPUTE_PIPELINES, || next(device, cache, count, copies.as_ptr(), allocator, out))
        }
    } else if with_statistics {
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
pub(super) const MAX_EXECUTABLES: u32 = 8;
const MAX_STATISTICS: u32 = 64;

/// The driver's statistics of `pipeline` (`VK_KHR_pipeline_executable_properties`).
///
/// # Safety
/// `pipeline` must be a pipeline of `d`'s device, created to capture statistics.
pub(super) unsafe fn statistics(d: &DeviceDispatch, pipeline: vk::Pipeline) -> Vec<Stat> {
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

pub(super) unsafe extern "system" fn destroy_pipeline(
    device: vk::Device,
    pipeline: vk::Pipeline,
    allocator: *const vk::AllocationCallbacks<'_>,
) {
    let Some(d) = device_of(device) else { return };
    if pipeline != vk::Pipeline::null() && state::on() {
        d.pipelines.remove(pipeline.as_raw());
    }
    if pipeline != vk::Pipeline::null() && crate::impersonate::active().is_some() {
        crate::impersonate::readback::pipeline_destroyed(pipeline.as_raw());
    }
    if let Some(next) = d.destroy_pipeline {
        // SAFETY: forwarding the caller's arguments.
        unsafe { next(device, pipeline, allocator) };
    }
}

pub(super) unsafe extern "system" fn set_debug_utils_object_name(
    device: vk::Device,
    info: *const vk::DebugUtilsObjectNameInfoEXT<'_>,
) -> vk::Result {
    let Some(d) = device_of(device) else { return vk::Result::ERROR_INITIALIZATION_FAILED };
    if state::on() && !info.is_null() {
        state::guarded(|| {
            // SAFETY: the caller's valid name info.
            let info = unsafe { &*info };
            if info.object_type == vk::ObjectType::PIPELINE && !info.p_object_name.is_null() {
                // SAFETY: a NUL-terminated name.
                let name = unsafe { CStr::from_ptr(info.p_object_name) }.to_bytes();
                if let Some(slot) = d.pipelines.get(info.object_handle) {
                    pipelines::set_name((slot - 1) as u32, name);
                }
                if crate::impersonate::active().is_some() {
                    crate::impersonate::readback::pipeline_named(info.object_handle, name);
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

/// `vkUpdateDescriptorSets` (hooked only when impersonating): the storage-buffer ranges of each set, for
/// `impersonate::readback`.
pub(super) unsafe extern "system" fn update_descriptor_sets(
    device: vk::Device,
    write_count: u32,
    writes: *const vk::WriteDescriptorSet<'_>,
    copy_count: u32,
    copies: *const vk::CopyDescriptorSet<'_>,
) {
    let Some(d) = device_of(device) else { return };
    if crate::impersonate::active().is_some() && !writes.is_null() {
        state::guarded(|| {
            // SAFETY: `write_count` valid writes, per the caller's promise.
            for w in unsafe { std::slice::from_raw_parts(writes, write_count as usize) } {
                if w.descriptor_type == vk::DescriptorType::STORAGE_BUFFER && !w.p_buffer_info.is_null() {
                    // SAFETY: a storage-buffer write's `descriptor_count` buffer infos.
                    let infos = unsafe { std::slice::from_raw_parts(w.p_buffer_info, w.descriptor_count as usize) };
                    crate::impersonate::readback::descriptors_written(w.dst_set.as_raw(), w.dst_binding, infos);
                }
            }
        });
    }
    if let Some(next) = d.update_descriptor_sets {
        // SAFETY: forwarding the caller's arguments.
        unsafe { next(device, write_count, writes, copy_count, copies) };
    }
}
