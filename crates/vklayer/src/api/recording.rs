//! Hooks on command buffers: allocation and pools, begin/reset, and the recording calls (bind, dispatch, debug
//! labels), each forwarded after the layer notes what it records (`crate::commands`).

use ash::vk;
use ash::vk::Handle;

use crate::commands;
use crate::dispatch::{device_of, DeviceDispatch};
use crate::pipelines::OVERFLOW;
use crate::state;

pub(super) unsafe extern "system" fn allocate_command_buffers(
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

pub(super) unsafe extern "system" fn free_command_buffers(
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
    if !buffers.is_null() && crate::impersonate::active().is_some() {
        // SAFETY: as above.
        let freed = unsafe { std::slice::from_raw_parts(buffers, count as usize) };
        state::guarded(|| freed.iter().for_each(|b| crate::impersonate::readback::command_buffer_gone(b.as_raw())));
    }
    if let Some(next) = d.free_command_buffers {
        // SAFETY: forwarding the caller's arguments.
        unsafe { next(device, pool, count, buffers) };
    }
}

pub(super) unsafe extern "system" fn destroy_command_pool(
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

pub(super) unsafe extern "system" fn reset_command_pool(
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

pub(super) unsafe extern "system" fn begin_command_buffer(
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

pub(super) unsafe extern "system" fn reset_command_buffer(
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

pub(super) unsafe extern "system" fn cmd_bind_pipeline(
    cb: vk::CommandBuffer,
    point: vk::PipelineBindPoint,
    pipeline: vk::Pipeline,
) {
    let s = followed(cb);
    if point == vk::PipelineBindPoint::COMPUTE && crate::impersonate::active().is_some() {
        state::guarded(|| crate::impersonate::readback::pipeline_bound(cb.as_raw(), pipeline.as_raw()));
    }
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
pub(super) unsafe extern "system" fn cmd_begin_label(cb: vk::CommandBuffer, info: *const vk::DebugUtilsLabelEXT<'_>) {
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

pub(super) unsafe extern "system" fn cmd_end_label(cb: vk::CommandBuffer) {
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

pub(super) unsafe extern "system" fn cmd_dispatch(cb: vk::CommandBuffer, x: u32, y: u32, z: u32) {
    let device = record(cb, [x, y, z]);
    if let Some(d) = device {
        crate::impersonate::zero_readback_outputs(cb, d);
    }
    if let Some(next) = device.and_then(|d| d.cmd_dispatch) {
        // An impersonated device may take more workgroups than the real one: recorded as asked, forwarded within
        // the real limits (unchanged otherwise).
        let (x, y, z) = crate::impersonate::clamp_groups(x, y, z);
        // SAFETY: forwarding the caller's arguments.
        unsafe { next(cb, x, y, z) };
    }
}

pub(super) unsafe extern "system" fn cmd_dispatch_base(
    cb: vk::CommandBuffer,
    bx: u32,
    by: u32,
    bz: u32,
    x: u32,
    y: u32,
    z: u32,
) {
    let device = record(cb, [x, y, z]);
    if let Some(d) = device {
        crate::impersonate::zero_readback_outputs(cb, d);
    }
    if let Some(next) = device.and_then(|d| d.cmd_dispatch_base) {
        let (x, y, z) = crate::impersonate::clamp_groups(x, y, z);
        // SAFETY: forwarding the caller's arguments.
        unsafe { next(cb, bx, by, bz, x, y, z) };
    }
}

pub(super) unsafe extern "system" fn cmd_dispatch_base_khr(
    cb: vk::CommandBuffer,
    bx: u32,
    by: u32,
    bz: u32,
    x: u32,
    y: u32,
    z: u32,
) {
    let device = record(cb, [x, y, z]);
    if let Some(d) = device {
        crate::impersonate::zero_readback_outputs(cb, d);
    }
    if let Some(next) = device.and_then(|d| d.cmd_dispatch_base_khr) {
        let (x, y, z) = crate::impersonate::clamp_groups(x, y, z);
        // SAFETY: forwarding the caller's arguments.
        unsafe { next(cb, bx, by, bz, x, y, z) };
    }
}

pub(super) unsafe extern "system" fn cmd_dispatch_indirect(
    cb: vk::CommandBuffer,
    buffer: vk::Buffer,
    offset: vk::DeviceSize,
) {
    // The workgroup counts live in GPU memory: recorded as [0, 0, 0].
    if let Some(next) = record(cb, [0, 0, 0]).and_then(|d| d.cmd_dispatch_indirect) {
        // SAFETY: forwarding the caller's arguments.
        unsafe { next(cb, buffer, offset) };
    }
}

pub(super) unsafe extern "system" fn cmd_execute_commands(
    cb: vk::CommandBuffer,
    count: u32,
    buffers: *const vk::CommandBuffer,
) {
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

/// `vkCmdBindDescriptorSets` (hooked only when impersonating): which set a compute dispatch reads and writes, for
/// `impersonate::readback`.
#[allow(clippy::too_many_arguments)]
pub(super) unsafe extern "system" fn cmd_bind_descriptor_sets(
    cb: vk::CommandBuffer,
    point: vk::PipelineBindPoint,
    layout: vk::PipelineLayout,
    first: u32,
    count: u32,
    sets: *const vk::DescriptorSet,
    dynamic_count: u32,
    dynamic_offsets: *const u32,
) {
    if point == vk::PipelineBindPoint::COMPUTE && crate::impersonate::active().is_some() {
        if !sets.is_null() {
            state::guarded(|| {
                // SAFETY: `count` set handles, per the caller's promise.
                let sets = unsafe { std::slice::from_raw_parts(sets, count as usize) };
                let raw: Vec<u64> = sets.iter().map(|s| s.as_raw()).collect();
                crate::impersonate::readback::sets_bound(cb.as_raw(), first, &raw);
            });
        }
        // Not forwarded: every compute shader is the empty one, which declares no descriptor, so no dispatch needs a
        // set bound (Vulkan requires bound sets only for the descriptors a pipeline uses). Forwarding was harmful on
        // lavapipe (Mesa 22.3), which reads every buffer a bound set names when it executes the bind: ggml-vulkan
        // reuses descriptor sets whose unused bindings may still name a buffer it has since destroyed (a
        // preallocated buffer grown in the middle of a graph), which is valid Vulkan but made lavapipe read the freed
        // buffer (valgrind) and die of SIGSEGV in its queue thread, e.g. llama-server on a qwen35 model under the
        // gfx900 profile, whose 64 compute units give ggml split-k matmuls that grow the split-k buffer.
        return;
    }
    if let Some(next) = buffer_device(cb, followed(cb)).and_then(|d| d.cmd_bind_descriptor_sets) {
        // SAFETY: forwarding the caller's arguments.
        unsafe { next(cb, point, layout, first, count, sets, dynamic_count, dynamic_offsets) };
    }
}
