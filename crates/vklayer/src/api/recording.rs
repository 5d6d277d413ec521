//! Hooks on command buffers: allocation and pools, begin/reset, and the recording calls (bind, dispatch, debug
//! labels), each forwarded after the layer notes what it records (`crate::commands`).

use ash::vk;
use ash::vk::Handle;

use crate::commands;
use crate::dispatch::{device_of, DeviceDispatch};
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

/// What a bind or dispatch hook does with a call, from the settings it reads at every call (one cache line,
/// `crate::flag::HOT`).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Path {
    /// Forward only: the layer does not observe (paused, or switched off after an internal failure) and impersonates
    /// nothing. One dispatch-table lookup and the call. (A process the layer never observes does not reach these
    /// hooks: `super::recording_hooked`.)
    Forward,
    /// Observe, and nothing else: no profile impersonated, no marker at each dispatch (what `trace` leaves on). The
    /// hooks' inline path: a lookup, a few stores, the call.
    Plain,
    /// Impersonation or markers at dispatches: the hooks' whole path, out of line.
    Full,
}

/// The settings of [`Path::Plain`] as the bytes of `crate::flag::HOT`'s first word: on, not paused, no profile
/// impersonated, no marker at each dispatch.
const PLAIN: u32 = u32::from_le_bytes([state::ON, 0, crate::flag::OnceFlag::NO, crate::flag::OnceFlag::NO]);
/// The same, paused ([`Path::Forward`]): what the in-process A/B's baseline runs.
const PAUSED: u32 = u32::from_le_bytes([state::ON, 1, crate::flag::OnceFlag::NO, crate::flag::OnceFlag::NO]);

/// Impersonation and markers at dispatches are read as `crate::start` worked them out (before any command buffer
/// could be recorded): the common path, and the paused one, are one load and a compare ([`PLAIN`], [`PAUSED`]), the
/// others one load each, no branch to work them out.
#[inline(always)]
fn path() -> Path {
    match crate::flag::HOT.first_word() {
        PLAIN => return Path::Plain,
        PAUSED => return Path::Forward,
        _ => {}
    }
    let observing = state::on() && !crate::switch::paused();
    let impersonating = crate::flag::IMPERSONATING.worked_out_yes();
    if !observing && !impersonating {
        Path::Forward
    } else if observing && !impersonating && !crate::flag::MARKERS_PER_DISPATCH.worked_out_yes() {
        Path::Plain
    } else {
        Path::Full
    }
}

/// Whether a recording hook only forwards ([`Path::Forward`]).
#[inline(always)]
fn only_forwarding() -> bool {
    path() == Path::Forward
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
        // SAFETY: the caller's valid begin info (or null, which the layer reads as no flags).
        let flags = unsafe { info.as_ref() }.map_or(vk::CommandBufferUsageFlags::empty(), |i| i.flags);
        state::guarded(|| s.begin(flags.contains(vk::CommandBufferUsageFlags::SIMULTANEOUS_USE)));
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
        state::guarded(|| s.clear_if_begun());
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
    // Markers at dispatches change nothing here: the bind's paths are forwarding, observing, and impersonating. As
    // the dispatch hook, every path ends in one call, last: the common one in the driver's bind. Its settings are
    // [`PLAIN`]'s or [`PAUSED`]'s (one load) or, with markers at dispatches, read one by one.
    let word = crate::flag::HOT.first_word();
    if word != PLAIN {
        // SAFETY: forwarding the caller's arguments.
        return unsafe {
            if word == PAUSED {
                forward_bind(cb, point, pipeline)
            } else {
                bind_not_plain(cb, point, pipeline)
            }
        };
    }
    // SAFETY: forwarding the caller's arguments.
    unsafe { bind_observed(cb, point, pipeline) }
}

/// The bind hook when the settings are neither [`PLAIN`]'s nor [`PAUSED`]'s: as [`dispatch_not_plain`].
#[cold]
#[inline(never)]
unsafe extern "system" fn bind_not_plain(cb: vk::CommandBuffer, point: vk::PipelineBindPoint, pipeline: vk::Pipeline) {
    if crate::flag::IMPERSONATING.worked_out_yes() {
        // SAFETY: forwarding the caller's arguments.
        return unsafe { bind_pipeline_impersonated(cb, point, pipeline) };
    }
    if !state::on() || crate::switch::paused() {
        // SAFETY: forwarding the caller's arguments.
        return unsafe { forward_bind(cb, point, pipeline) };
    }
    // SAFETY: forwarding the caller's arguments.
    unsafe { bind_observed(cb, point, pipeline) }
}

/// The observed bind: the pipeline's handle kept in the buffer's state.
#[inline(always)]
unsafe fn bind_observed(cb: vk::CommandBuffer, point: vk::PipelineBindPoint, pipeline: vk::Pipeline) {
    let Some(s) = commands::recent(cb) else {
        // SAFETY: forwarding the caller's arguments.
        return unsafe { bind_looked_up(cb, point, pipeline) };
    };
    if point == vk::PipelineBindPoint::COMPUTE {
        s.bind(pipeline.as_raw());
    }
    // SAFETY: forwarding the caller's arguments.
    unsafe { s.next_bind()(cb, point, pipeline) };
}

/// The bind hook when the layer only forwards: the device's table from the buffer's state when it is among those
/// looked up last (as observed: one load), else by the buffer's dispatch key. Kept as short as the observed path's
/// own forwarding, so that the in-process A/B (observing against paused) measures what observing adds.
#[inline(never)]
unsafe extern "system" fn forward_bind(cb: vk::CommandBuffer, point: vk::PipelineBindPoint, pipeline: vk::Pipeline) {
    let Some(s) = commands::recent(cb) else {
        // SAFETY: forwarding the caller's arguments.
        return unsafe { forward_bind_by_key(cb, point, pipeline) };
    };
    // SAFETY: forwarding the caller's arguments.
    unsafe { s.next_bind()(cb, point, pipeline) };
}

/// [`forward_bind`] for a buffer whose state is not among those looked up last: the map while the layer is on (paused:
/// it remembers the state for the next call), else the device's table by the buffer's dispatch key (a buffer
/// allocated before the layer observed, or the layer switched off after an internal failure, which then does no
/// more than forward).
#[inline(never)]
unsafe extern "system" fn forward_bind_by_key(
    cb: vk::CommandBuffer,
    point: vk::PipelineBindPoint,
    pipeline: vk::Pipeline,
) {
    let s = if state::on() { commands::get(cb) } else { None };
    if let Some(next) = buffer_device(cb, s).and_then(|d| d.cmd_bind_pipeline) {
        // SAFETY: forwarding the caller's arguments.
        unsafe { next(cb, point, pipeline) };
    }
}

/// The observed bind of a buffer whose state is not among those looked up last: the map, then as above.
#[inline(never)]
unsafe extern "system" fn bind_looked_up(cb: vk::CommandBuffer, point: vk::PipelineBindPoint, pipeline: vk::Pipeline) {
    let s = commands::get(cb);
    if let (Some(s), vk::PipelineBindPoint::COMPUTE) = (s, point) {
        s.bind(pipeline.as_raw());
    }
    if let Some(next) = buffer_device(cb, s).and_then(|d| d.cmd_bind_pipeline) {
        // SAFETY: forwarding the caller's arguments.
        unsafe { next(cb, point, pipeline) };
    }
}

/// The bind hook while a profile is impersonated: `impersonate::readback` learns the pipeline, then as observed.
#[inline(never)]
unsafe extern "system" fn bind_pipeline_impersonated(
    cb: vk::CommandBuffer,
    point: vk::PipelineBindPoint,
    pipeline: vk::Pipeline,
) {
    let s = followed(cb);
    if point == vk::PipelineBindPoint::COMPUTE {
        state::guarded(|| crate::impersonate::readback::pipeline_bound(cb.as_raw(), pipeline.as_raw()));
        if let Some(s) = s {
            s.bind(pipeline.as_raw());
        }
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

/// A dispatch being recorded: the device to forward it to, and where the black box marks its start and end.
struct Recorded {
    device: &'static DeviceDispatch,
    /// The buffer's marker words and the dispatch's index, where markers go at dispatches (`dispatch`, `sync`).
    marker: Option<(&'static crate::progress::Markers, u32, u32)>,
}

impl Recorded {
    /// Before forwarding: the zero-fill of impersonation, and the "started" marker (`marker` is only given where
    /// markers go at dispatches).
    #[inline(always)]
    fn before(&self, cb: vk::CommandBuffer) {
        if crate::impersonate::impersonating() {
            crate::impersonate::zero_readback_outputs(cb, self.device);
        }
        if let Some((m, slot, index)) = self.marker {
            let (started, _) = crate::progress::Markers::offsets(slot);
            // SAFETY: a command buffer in the recording state (the caller is recording a dispatch into it), the
            // layer's marker buffer of the same device.
            unsafe { (m.write)(cb, vk::PipelineStageFlags::TOP_OF_PIPE, m.buffer, started, index) };
        }
    }

    /// After forwarding: the "completed" marker, where markers follow every dispatch.
    #[inline(always)]
    fn after(&self, cb: vk::CommandBuffer) {
        if let Some((m, slot, index)) =
            self.marker.filter(|_| crate::progress::marker_placement() == crate::progress::MarkerPlacement::Dispatch)
        {
            let (_, completed) = crate::progress::Markers::offsets(slot);
            // SAFETY: as in `before`.
            unsafe { (m.write)(cb, vk::PipelineStageFlags::BOTTOM_OF_PIPE, m.buffer, completed, index) };
        }
    }
}

/// Records one dispatch into `cb`'s state (when the layer follows `cb`), and returns its device and markers.
#[inline(always)]
fn record(cb: vk::CommandBuffer, grid: [u32; 3]) -> Option<Recorded> {
    let s = followed(cb);
    let mut marker = None;
    if let Some(s) = s {
        let index = s.record(grid);
        if crate::progress::markers_per_dispatch() {
            let slot = s.progress.slot.load(std::sync::atomic::Ordering::Relaxed);
            if slot != crate::progress::NO_SLOT {
                marker = s.progress.markers_ref().map(|m| (m, slot, index));
            }
        }
    }
    buffer_device(cb, s).map(|device| Recorded { device, marker })
}

pub(super) unsafe extern "system" fn cmd_dispatch(cb: vk::CommandBuffer, x: u32, y: u32, z: u32) {
    // Every path ends in one call, last (a jump): the common one in the driver's dispatch, the others in a function of
    // their own. No register then needs saving on entry (a lookup loop or a call before the forward made the hook
    // save five and restore them on every dispatch).
    // The common path's settings ([`PLAIN`]) are tested first, the paused ones' ([`PAUSED`]) after the common path,
    // the others' out of line ([`dispatch_not_plain`]): the common path is one straight run of code, three lines of
    // it (the observed bind two), where tests of the other settings in between made it six (three).
    let word = crate::flag::HOT.first_word();
    if word != PLAIN {
        // SAFETY: forwarding the caller's arguments.
        return unsafe {
            if word == PAUSED {
                forward_dispatch(cb, x, y, z)
            } else {
                dispatch_not_plain(cb, x, y, z)
            }
        };
    }
    // SAFETY: forwarding the caller's arguments.
    unsafe { dispatch_observed(cb, x, y, z) }
}

/// The observed dispatch ([`Path::Plain`]).
#[inline(always)]
unsafe fn dispatch_observed(cb: vk::CommandBuffer, x: u32, y: u32, z: u32) {
    let Some(s) = commands::recent(cb) else {
        // SAFETY: forwarding the caller's arguments.
        return unsafe { dispatch_looked_up(cb, x, y, z) };
    };
    if !s.record_in_trail([x, y, z]) {
        // SAFETY: forwarding the caller's arguments.
        return unsafe { entry_then_dispatch(cb, x, y, z, s) };
    }
    // SAFETY: forwarding the caller's arguments.
    unsafe { s.next_dispatch()(cb, x, y, z) };
}

/// The dispatch hook when the settings are neither [`PLAIN`]'s nor [`PAUSED`]'s, as [`path`] works them out.
#[cold]
#[inline(never)]
unsafe extern "system" fn dispatch_not_plain(cb: vk::CommandBuffer, x: u32, y: u32, z: u32) {
    match path() {
        // SAFETY: forwarding the caller's arguments.
        Path::Forward => unsafe { forward_dispatch(cb, x, y, z) },
        // SAFETY: forwarding the caller's arguments.
        Path::Plain => unsafe { dispatch_observed(cb, x, y, z) },
        // SAFETY: forwarding the caller's arguments.
        Path::Full => unsafe { dispatch_full(cb, x, y, z) },
    }
}

/// The dispatch hook when the layer only forwards: as [`forward_bind`].
#[inline(never)]
unsafe extern "system" fn forward_dispatch(cb: vk::CommandBuffer, x: u32, y: u32, z: u32) {
    let Some(s) = commands::recent(cb) else {
        // SAFETY: forwarding the caller's arguments.
        return unsafe { forward_dispatch_by_key(cb, x, y, z) };
    };
    // SAFETY: forwarding the caller's arguments.
    unsafe { s.next_dispatch()(cb, x, y, z) };
}

/// [`forward_dispatch`] for a buffer whose state is not among those looked up last: as [`forward_bind_by_key`].
#[inline(never)]
unsafe extern "system" fn forward_dispatch_by_key(cb: vk::CommandBuffer, x: u32, y: u32, z: u32) {
    let s = if state::on() { commands::get(cb) } else { None };
    if let Some(next) = buffer_device(cb, s).and_then(|d| d.cmd_dispatch) {
        // SAFETY: forwarding the caller's arguments.
        unsafe { next(cb, x, y, z) };
    }
}

/// The observed dispatch into a buffer whose state is not among those looked up last: the map, then recorded and
/// forwarded (forwarded only when the layer does not follow the buffer).
#[inline(never)]
unsafe extern "system" fn dispatch_looked_up(cb: vk::CommandBuffer, x: u32, y: u32, z: u32) {
    let s = commands::get(cb);
    if let Some(s) = s {
        s.record([x, y, z]);
    }
    if let Some(next) = buffer_device(cb, s).and_then(|d| d.cmd_dispatch) {
        // SAFETY: forwarding the caller's arguments.
        unsafe { next(cb, x, y, z) };
    }
}

/// An observed dispatch the common path did not record (`CommandBuffer::record_in_trail`: the trail is full or the
/// buffer needs entries): recorded with its entry, then the driver's dispatch. The state comes last, so that the hook
/// keeps the driver's four arguments in the registers they came in on every path (taking the state first made it move
/// all four and back on each dispatch).
#[inline(never)]
unsafe extern "system" fn entry_then_dispatch(
    cb: vk::CommandBuffer,
    x: u32,
    y: u32,
    z: u32,
    s: &'static commands::CommandBuffer,
) {
    s.record_slow([x, y, z]);
    // SAFETY: forwarding the caller's arguments.
    unsafe { s.next_dispatch()(cb, x, y, z) };
}

/// The dispatch hook with a profile impersonated or markers at dispatches: out of line, so that the common paths
/// stay a few cache lines of code.
#[inline(never)]
unsafe extern "system" fn dispatch_full(cb: vk::CommandBuffer, x: u32, y: u32, z: u32) {
    let Some(r) = record(cb, [x, y, z]) else { return };
    if let Some(next) = r.device.cmd_dispatch {
        r.before(cb);
        // An impersonated device may take more workgroups than the real one: recorded as asked, forwarded within
        // the real limits (unchanged otherwise).
        let (x, y, z) = crate::impersonate::clamp_groups(x, y, z);
        // SAFETY: forwarding the caller's arguments.
        unsafe { next(cb, x, y, z) };
        r.after(cb);
    }
}

/// `vkCmdDispatchBase`, and with `KHR` its alias `vkCmdDispatchBaseKHR` (forwarded to the next link's function of
/// that name).
pub(super) unsafe extern "system" fn cmd_dispatch_base<const KHR: bool>(
    cb: vk::CommandBuffer,
    bx: u32,
    by: u32,
    bz: u32,
    x: u32,
    y: u32,
    z: u32,
) {
    let Some(r) = record(cb, [x, y, z]) else { return };
    if let Some(next) = if KHR { r.device.cmd_dispatch_base_khr } else { r.device.cmd_dispatch_base } {
        r.before(cb);
        let (x, y, z) = crate::impersonate::clamp_groups(x, y, z);
        // SAFETY: forwarding the caller's arguments.
        unsafe { next(cb, bx, by, bz, x, y, z) };
        r.after(cb);
    }
}

pub(super) unsafe extern "system" fn cmd_dispatch_indirect(
    cb: vk::CommandBuffer,
    buffer: vk::Buffer,
    offset: vk::DeviceSize,
) {
    // The workgroup counts live in GPU memory: recorded as [0, 0, 0].
    let Some(r) = record(cb, [0, 0, 0]) else { return };
    if let Some(next) = r.device.cmd_dispatch_indirect {
        r.before(cb);
        // SAFETY: forwarding the caller's arguments.
        unsafe { next(cb, buffer, offset) };
        r.after(cb);
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

/// The black box's "completed" marker at a point where everything recorded before it is ordered: after a pipeline
/// barrier of the program's (its first scope covers the earlier dispatches; the GPU waits there anyway) and at the
/// end of the buffer. Nothing where markers follow every dispatch, where the buffer has no marker slot, or, with one
/// marker per buffer, where fewer dispatches than [`crate::progress::marker_min_dispatches`] went unmarked
/// ([`crate::progress::Markers::marks_end`]).
#[inline(always)]
fn mark_completed_so_far(cb: vk::CommandBuffer, s: Option<&'static commands::CommandBuffer>) {
    use crate::progress::MarkerPlacement;
    let placement = crate::progress::marker_placement();
    if placement == MarkerPlacement::Dispatch {
        return;
    }
    let Some(s) = s else { return };
    let slot = s.progress.slot.load(std::sync::atomic::Ordering::Relaxed);
    let recorded = s.progress.recorded();
    if slot == crate::progress::NO_SLOT || recorded == 0 {
        return;
    }
    let Some(m) = s.progress.markers_ref() else { return };
    if placement == MarkerPlacement::Buffer {
        let marked = m.marks_end(recorded, crate::progress::marker_min_dispatches());
        s.progress.set_marked(marked);
        if !marked {
            return;
        }
    }
    let (_, completed) = crate::progress::Markers::offsets(slot);
    // SAFETY: a command buffer in the recording state (the caller's command is being recorded into it), the layer's
    // marker buffer of the same device.
    unsafe { (m.write)(cb, vk::PipelineStageFlags::BOTTOM_OF_PIPE, m.buffer, completed, recorded) };
}

#[allow(clippy::too_many_arguments)]
pub(super) unsafe extern "system" fn cmd_pipeline_barrier(
    cb: vk::CommandBuffer,
    src: vk::PipelineStageFlags,
    dst: vk::PipelineStageFlags,
    dependency: vk::DependencyFlags,
    memory_count: u32,
    memory: *const vk::MemoryBarrier<'_>,
    buffer_count: u32,
    buffers: *const vk::BufferMemoryBarrier<'_>,
    image_count: u32,
    images: *const vk::ImageMemoryBarrier<'_>,
) {
    if only_forwarding() || !crate::progress::markers_at_barriers() {
        if let Some(next) = device_of(cb).and_then(|d| d.cmd_pipeline_barrier) {
            // SAFETY: forwarding the caller's arguments.
            unsafe { next(cb, src, dst, dependency, memory_count, memory, buffer_count, buffers, image_count, images) };
        }
        return;
    }
    let s = followed(cb);
    let Some(next) = buffer_device(cb, s).and_then(|d| d.cmd_pipeline_barrier) else { return };
    // SAFETY: forwarding the caller's arguments.
    unsafe { next(cb, src, dst, dependency, memory_count, memory, buffer_count, buffers, image_count, images) };
    state::guarded(|| mark_at_barrier(cb, s));
}

/// After a barrier of the program's: a completion marker where markers go at barriers.
#[inline(always)]
fn mark_at_barrier(cb: vk::CommandBuffer, s: Option<&'static commands::CommandBuffer>) {
    if matches!(
        crate::progress::marker_placement(),
        crate::progress::MarkerPlacement::Sync | crate::progress::MarkerPlacement::Barrier
    ) {
        mark_completed_so_far(cb, s);
    }
}

/// `vkCmdPipelineBarrier2`, and with `KHR` its alias `vkCmdPipelineBarrier2KHR`.
pub(super) unsafe extern "system" fn cmd_pipeline_barrier2<const KHR: bool>(
    cb: vk::CommandBuffer,
    info: *const vk::DependencyInfo<'_>,
) {
    if only_forwarding() || !crate::progress::markers_at_barriers() {
        let next = device_of(cb).and_then(|d| if KHR { d.cmd_pipeline_barrier2_khr } else { d.cmd_pipeline_barrier2 });
        if let Some(next) = next {
            // SAFETY: forwarding the caller's arguments.
            unsafe { next(cb, info) };
        }
        return;
    }
    let s = followed(cb);
    let next =
        buffer_device(cb, s).and_then(|d| if KHR { d.cmd_pipeline_barrier2_khr } else { d.cmd_pipeline_barrier2 });
    let Some(next) = next else { return };
    // SAFETY: forwarding the caller's arguments.
    unsafe { next(cb, info) };
    state::guarded(|| mark_at_barrier(cb, s));
}

pub(super) unsafe extern "system" fn end_command_buffer(cb: vk::CommandBuffer) -> vk::Result {
    let s = followed(cb);
    let Some(next) = buffer_device(cb, s).and_then(|d| d.end_command_buffer) else {
        return vk::Result::ERROR_INITIALIZATION_FAILED;
    };
    state::guarded(|| mark_completed_so_far(cb, s));
    // SAFETY: forwarding the caller's arguments.
    unsafe { next(cb) }
}
