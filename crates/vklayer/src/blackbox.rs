//! The black box's hooks into the layer (`crate::progress` holds its state): setting it up on a new device, what
//! each submission adds, reading the layer's timeline semaphores, and the hang watcher, a thread that writes a
//! `hang` record when a queue has pending work and the GPU made no progress for `BACKSCOPE_VK_HANG_MS`.

use std::ffi::{c_void, CStr};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use ash::vk;
use ash::vk::Handle;

use crate::dispatch::{DeviceDispatch, InstanceDispatch};
use crate::progress::{By, Markers, MARKER_SLOTS};

/// Sets the black box up on a device just created: its marker buffer when the layer enabled buffer markers
/// (`markers`), else the submission way when the application enabled timeline semaphores. A device where neither
/// works is followed without progress.
///
/// # Safety
/// `info` must be the create info of `d`'s device, `physical` its physical device of `inst`'s instance.
pub unsafe fn set_up_device(
    inst: &InstanceDispatch,
    physical: vk::PhysicalDevice,
    d: &'static DeviceDispatch,
    info: &vk::DeviceCreateInfo<'_>,
    markers: bool,
    device_coherent: bool,
) {
    if markers {
        // SAFETY: forwarded from the caller.
        match unsafe { marker_buffer(inst, physical, d, device_coherent) } {
            Ok(m) => {
                let _ = d.progress.markers.set(m);
                return;
            }
            Err(why) => crate::state::note(format_args!("black box: no buffer markers on this device ({why})")),
        }
    }
    // Without either, the device is followed without progress (records keep the last submitted dispatches),
    // silently: the program's own output stays what it is without the layer.
    // SAFETY: a valid create info's chain.
    if unsafe { timeline_enabled(info) } && d.create_semaphore.is_some() {
        d.progress.timeline.store(true, Ordering::Relaxed);
    }
}

/// Whether the device create info enables `timelineSemaphore` (Vulkan 1.2 features or the extension's struct).
///
/// # Safety
/// `info` must be a valid create info.
unsafe fn timeline_enabled(info: &vk::DeviceCreateInfo<'_>) -> bool {
    let mut next = info.p_next as *const vk::BaseInStructure<'_>;
    let mut hops = 0;
    while !next.is_null() && hops < 256 {
        // SAFETY: a valid pNext chain of Vulkan structures.
        let base = unsafe { &*next };
        match base.s_type {
            vk::StructureType::PHYSICAL_DEVICE_VULKAN_1_2_FEATURES => {
                // SAFETY: the structure type says what it is.
                let f = unsafe { &*(next as *const vk::PhysicalDeviceVulkan12Features<'_>) };
                if f.timeline_semaphore == vk::TRUE {
                    return true;
                }
            }
            vk::StructureType::PHYSICAL_DEVICE_TIMELINE_SEMAPHORE_FEATURES => {
                // SAFETY: as above.
                let f = unsafe { &*(next as *const vk::PhysicalDeviceTimelineSemaphoreFeatures<'_>) };
                if f.timeline_semaphore == vk::TRUE {
                    return true;
                }
            }
            _ => {}
        }
        next = base.p_next;
        hops += 1;
    }
    false
}

/// `VK_AMD_device_coherent_memory`: memory types whose device writes skip the GPU's caches (`DEVICE_UNCACHED_AMD`).
/// A marker the GPU wrote into ordinary memory may still sit in the GPU's L2 when the GPU hangs, and the dispatch it
/// marks complete then reads as in flight; breadcrumb tools put their markers in such memory where it is offered
/// (RADV and AMD's drivers offer it; NVIDIA's driver and lavapipe do not). The layer enables the extension and its
/// feature alongside the buffer markers, unless the application chains the feature itself.
pub const DEVICE_COHERENT: &CStr = c"VK_AMD_device_coherent_memory";

/// The memory type for the marker buffer among `types` that `allowed` (the buffer's `memoryTypeBits`) permits:
/// host-visible and coherent, never protected, device-coherent only where the layer enabled that feature
/// (`device_coherent`; allocating such a type otherwise is invalid). Preferred, in order: device-uncached memory
/// (the GPU's marker writes reach memory, not its L2), memory that is not device-local (system memory stays readable
/// when the GPU is reset after a hang; device memory seen through the PCIe BAR may not), host-cached memory (the
/// watcher and the crash handler read it from the CPU's cache instead of across the bus). The first of equals.
/// `device_local` turns the second preference round (`BACKSCOPE_VK_MARKER_MEMORY=device`): a measurement of whether
/// a marker written to the GPU's own memory costs it less than one written across the bus.
pub fn marker_memory_type(
    types: &[vk::MemoryType],
    allowed: u32,
    device_coherent: bool,
    device_local: bool,
) -> Option<u32> {
    use vk::MemoryPropertyFlags as F;
    let needed = F::HOST_VISIBLE | F::HOST_COHERENT;
    let rank = |flags: F| {
        (u8::from(flags.contains(F::DEVICE_UNCACHED_AMD)) << 2)
            | (u8::from(flags.contains(F::DEVICE_LOCAL) == device_local) << 1)
            | u8::from(flags.contains(F::HOST_CACHED))
    };
    types
        .iter()
        .enumerate()
        .take(32)
        .filter(|&(i, t)| {
            allowed & (1 << i) != 0
                && t.property_flags.contains(needed)
                && !t.property_flags.contains(F::PROTECTED)
                && (device_coherent || !t.property_flags.intersects(F::DEVICE_COHERENT_AMD | F::DEVICE_UNCACHED_AMD))
        })
        // The first of the best: `max_by_key` keeps the last of equals, so compare against the reversed index too.
        .max_by_key(|&(i, t)| (rank(t.property_flags), std::cmp::Reverse(i)))
        .map(|(i, _)| i as u32)
}

/// Creates, binds and maps the device's marker buffer in host-visible, coherent memory ([`marker_memory_type`]).
///
/// # Safety
/// `physical` must be `d`'s physical device, of `inst`'s instance.
unsafe fn marker_buffer(
    inst: &InstanceDispatch,
    physical: vk::PhysicalDevice,
    d: &DeviceDispatch,
    device_coherent: bool,
) -> Result<Markers, &'static str> {
    let (Some(write), Some(create), Some(requirements), Some(allocate), Some(bind), Some(map), Some(memory_props)) = (
        d.cmd_write_buffer_marker,
        d.create_buffer,
        d.get_buffer_memory_requirements,
        d.allocate_memory,
        d.bind_buffer_memory,
        d.map_memory,
        inst.get_physical_device_memory_properties,
    ) else {
        return Err("a command it needs is missing");
    };
    let size = u64::from(MARKER_SLOTS) * 8;
    let buffer_info = vk::BufferCreateInfo {
        size,
        usage: vk::BufferUsageFlags::TRANSFER_DST | vk::BufferUsageFlags::STORAGE_BUFFER,
        sharing_mode: vk::SharingMode::EXCLUSIVE,
        ..Default::default()
    };
    let mut buffer = vk::Buffer::null();
    // SAFETY: valid create info; the buffer is the layer's own.
    if unsafe { create(d.device, &buffer_info, std::ptr::null(), &mut buffer) } != vk::Result::SUCCESS {
        return Err("vkCreateBuffer failed");
    }
    let mut req = vk::MemoryRequirements::default();
    // SAFETY: the buffer just created.
    unsafe { requirements(d.device, buffer, &mut req) };
    let mut props = vk::PhysicalDeviceMemoryProperties::default();
    // SAFETY: fills one structure.
    unsafe { memory_props(physical, &mut props) };
    let types = &props.memory_types[..props.memory_type_count.min(vk::MAX_MEMORY_TYPES as u32) as usize];
    let device_local = format::env::get(format::env::VK_MARKER_MEMORY).is_some_and(|v| v.trim() == "device");
    let Some(type_index) = marker_memory_type(types, req.memory_type_bits, device_coherent, device_local) else {
        return Err("no host-visible coherent memory for it");
    };
    let alloc =
        vk::MemoryAllocateInfo { allocation_size: req.size, memory_type_index: type_index, ..Default::default() };
    let mut memory = vk::DeviceMemory::null();
    // SAFETY: valid allocate info.
    if unsafe { allocate(d.device, &alloc, std::ptr::null(), &mut memory) } != vk::Result::SUCCESS {
        return Err("vkAllocateMemory failed");
    }
    // SAFETY: the layer's buffer and memory, unbound so far.
    if unsafe { bind(d.device, buffer, memory, 0) } != vk::Result::SUCCESS {
        return Err("vkBindBufferMemory failed");
    }
    let mut ptr: *mut c_void = std::ptr::null_mut();
    // SAFETY: host-visible memory the layer allocated; mapped for the life of the process.
    if unsafe { map(d.device, memory, 0, vk::WHOLE_SIZE, vk::MemoryMapFlags::empty(), &mut ptr) } != vk::Result::SUCCESS
        || ptr.is_null()
    {
        return Err("vkMapMemory failed");
    }
    // SAFETY: `size` mapped bytes.
    unsafe { std::ptr::write_bytes(ptr.cast::<u8>(), 0, size as usize) };
    // SAFETY: `2 * MARKER_SLOTS` u32 mapped until the process ends.
    Ok(unsafe { Markers::new(ptr.cast::<u32>(), MARKER_SLOTS, buffer, memory, write) })
}

/// Reads the layer's semaphore of each queue that has one into its `signaled` value. Not for the signal handler:
/// it calls into the driver. A device that was lost keeps the value last seen.
pub fn poll_semaphores() {
    // A device being destroyed waits for a poll in progress (`device_destroyed`), and so does the process's exit.
    let _polling = POLLING.lock();
    if EXITING.load(Ordering::Acquire) {
        return;
    }
    for (_, ring) in crate::locus::queue_rings() {
        let q = &ring.progress;
        let Some((semaphore, device)) = q.semaphore() else { continue };
        if device == 0 {
            continue;
        }
        // SAFETY: `device` points at a device table, never freed.
        let d = unsafe { &*(device as *const DeviceDispatch) };
        let Some(get) = d.get_semaphore_counter_value.or(d.get_semaphore_counter_value_khr) else { continue };
        let mut value = 0u64;
        // SAFETY: a semaphore the layer created on that device; reading its counter needs no synchronisation.
        if unsafe { get(d.device, semaphore, &mut value) } == vk::Result::SUCCESS {
            q.signaled_at(value);
        }
    }
}

/// Held while semaphores are read, and while a device's are forgotten before it is destroyed.
static POLLING: format::spin::SpinLock<()> = format::spin::SpinLock::new(());

/// The process is exiting: no thread of the layer reads a semaphore any more. Set by an `atexit` handler registered
/// when the layer made its first semaphore, after the driver had set up the device, so it runs before the exit-time
/// teardown the driver registered then. Applications often exit without destroying their device (ggml-vulkan does),
/// and on an H200 a poll during NVIDIA's teardown crashed the process at exit in about half the runs with the black
/// box following submissions (`BACKSCOPE_VK_MARKERS=none`; docs/validation/gpu-2026-12-04-append).
static EXITING: AtomicBool = AtomicBool::new(false);

extern "C" fn process_exiting() {
    EXITING.store(true, Ordering::Release);
    // A poll in progress (it checked the flag before it was set) ends first. Bounded: in a forked child the lock may
    // be held for good by a parent's thread that does not exist there.
    for _ in 0..1000 {
        if POLLING.try_lock().is_some() {
            return;
        }
        std::thread::yield_now();
    }
}

fn stop_polling_at_exit() {
    static REGISTERED: std::sync::Once = std::sync::Once::new();
    // SAFETY: registers a handler that only takes a lock and sets a flag. Registered from this library, it runs at
    // exit or when the library is unloaded, whichever comes first (glibc's `atexit` is bound to its caller's object).
    REGISTERED.call_once(|| unsafe {
        libc::atexit(process_exiting);
    });
}

/// The application is destroying `d`'s device: nothing of the black box reads or uses its objects any more, and the
/// layer's own (semaphores, marker buffer and memory) are destroyed first, as Vulkan requires of child objects.
pub fn device_destroyed(d: &'static DeviceDispatch) {
    let key = d as *const DeviceDispatch as usize;
    let mut semaphores = Vec::new();
    {
        let _polling = POLLING.lock();
        for (_, ring) in crate::locus::queue_rings() {
            if let Some(s) = ring.progress.take_semaphore_of(key) {
                semaphores.push(s);
            }
        }
    }
    if let Some(destroy) = d.destroy_semaphore {
        for s in semaphores {
            // SAFETY: the layer's semaphore on this device; the application waited for the device's work before
            // destroying it (Vulkan requires it), so no submission still signals it.
            unsafe { destroy(d.device, s, std::ptr::null()) };
        }
    }
    if let Some(m) = d.progress.markers.get() {
        m.retire();
        if let (Some(destroy), Some(free)) = (d.destroy_buffer, d.free_memory) {
            // SAFETY: the layer's buffer and memory on this device, no longer read (retired above).
            unsafe {
                destroy(d.device, m.buffer, std::ptr::null());
                free(d.device, m.memory, std::ptr::null());
            }
        }
    }
}

/// Fences the application submitted work with: handle to `ring number << 48 | submission`.
static FENCES: crate::handles::HandleMap = crate::handles::HandleMap::new(4096);

/// The application saw these fences signalled: their submissions, and all earlier ones on their queues, completed.
pub fn fences_signaled(fences: &[vk::Fence]) {
    for f in fences {
        if let Some(v) = FENCES.get(f.as_raw()) {
            if let Some(ring) = crate::locus::ring((v >> 48) as u32) {
                ring.progress.signaled_at(v & ((1 << 48) - 1));
            }
        }
    }
}

/// The application's wait for `queue` to be idle returned: every submission made on it so far finished (Vulkan
/// makes the application synchronise a queue's submissions with its wait, so none was made during it).
pub fn queue_idle(queue: vk::Queue) {
    if let Some(ring) = crate::locus::ring_of(queue.as_raw()) {
        finished_so_far(ring);
    }
}

/// The application's wait for `d`'s device to be idle returned: as [`queue_idle`] for each of its queues (the
/// application synchronises all of them with that wait).
pub fn device_idle(d: &DeviceDispatch) {
    if let Some(id) = d.facts_id {
        for ring in crate::locus::rings_of_device(id) {
            finished_so_far(ring);
        }
    }
}

/// Every submission made on `ring`'s queue so far finished.
fn finished_so_far(ring: &crate::locus::QueueRing) {
    ring.progress.signaled_at(ring.submits());
}

/// A submission with dispatches is about to be forwarded as number `submit` of `ring`'s queue: each command buffer's
/// marker words are reset and the buffers remembered with their dispatch counts. Returns the layer's semaphore and
/// the value to signal with it, when the queue's progress is followed by submissions.
///
/// The application's `fence`, when it passed one, is remembered with the submission: when the application sees it
/// signalled (`vkWaitForFences`, `vkGetFenceStatus`), this submission and every earlier one on the queue completed.
#[inline(always)]
pub fn submitting(
    ring: &'static crate::locus::QueueRing,
    d: &'static DeviceDispatch,
    buffers: impl Iterator<Item = &'static crate::commands::CommandBuffer>,
    submit: u64,
    fence: vk::Fence,
) -> Option<(vk::Semaphore, u64)> {
    let by = d.progress.by();
    let q = &ring.progress;
    q.set_by(by);
    if !fence.is_null() && submit < 1 << 48 {
        let _ = FENCES.insert(fence.as_raw(), (u64::from(ring.number()) << 48) | submit);
    }
    for state in buffers {
        let b = &state.progress;
        if let Some(m) = b.markers_ref() {
            m.reset(b.slot.load(Ordering::Relaxed));
        }
        q.submitted(submit, b, b.recorded());
    }
    if by != By::Submission {
        return None;
    }
    match q.semaphore() {
        Some((s, _)) => Some((s, submit)),
        None => Some((first_semaphore(q, d)?, submit)),
    }
}

/// The layer's timeline semaphore for a queue followed by submissions, made at its first submission.
#[cold]
#[inline(never)]
fn first_semaphore(q: &crate::progress::QueueProgress, d: &'static DeviceDispatch) -> Option<vk::Semaphore> {
    let create = d.create_semaphore?;
    let mut kind = vk::SemaphoreTypeCreateInfo {
        semaphore_type: vk::SemaphoreType::TIMELINE,
        initial_value: 0,
        ..Default::default()
    };
    let info = vk::SemaphoreCreateInfo { p_next: &mut kind as *mut _ as *const c_void, ..Default::default() };
    let mut s = vk::Semaphore::null();
    // SAFETY: a valid create info; the semaphore is the layer's own, never destroyed (the device's table outlives it
    // too).
    if unsafe { create(d.device, &info, std::ptr::null(), &mut s) } != vk::Result::SUCCESS || s.is_null() {
        d.progress.timeline.store(false, Ordering::Relaxed);
        crate::state::note(format_args!("black box: the layer's timeline semaphore could not be created"));
        return None;
    }
    q.set_semaphore(s, d as *const DeviceDispatch as usize);
    stop_polling_at_exit();
    Some(s)
}

/// The hang watcher's default: ten seconds without GPU progress while work is pending (ggml's longest single
/// dispatches, a 512-token prompt's matrix multiplications on a slow GPU, take well under a second; amdgpu's own
/// compute-ring timeout is 10 s by default, after which the kernel resets the GPU).
pub const DEFAULT_HANG_MS: u64 = 10_000;

/// Starts the hang watcher (unless the black box is off or `BACKSCOPE_VK_HANG_MS=0`): a thread that reads every
/// queue's progress a few times per hang period and writes one `hang` record per stall.
pub fn start_watcher() {
    if !crate::progress::wanted() {
        return;
    }
    let hang_ms = match format::env::get(format::env::VK_HANG_MS) {
        None => DEFAULT_HANG_MS,
        Some(v) => match v.trim().parse::<u64>() {
            Ok(ms) => ms.min(24 * 3_600_000),
            Err(_) => {
                crate::state::note(format_args!(
                    "BACKSCOPE_VK_HANG_MS={v:?} is not a number of milliseconds; the hang watcher uses {DEFAULT_HANG_MS}"
                ));
                DEFAULT_HANG_MS
            }
        },
    };
    if hang_ms == 0 {
        return;
    }
    let spawned = std::thread::Builder::new().name("backscope-vk-hang".into()).spawn(move || watch(hang_ms));
    if spawned.is_err() {
        crate::state::note(format_args!("could not start the hang watcher; hangs will not be recorded"));
    }
}

/// How often the application found its GPU work unfinished: a fence not ready, a wait for fences or semaphores that
/// timed out (ggml-vulkan polls its fence with `vkGetFenceStatus` while a graph runs).
static FOUND_UNFINISHED: AtomicU64 = AtomicU64::new(0);

/// The application asked after GPU work and was told it had not finished.
#[inline]
pub fn found_unfinished() {
    FOUND_UNFINISHED.fetch_add(1, Ordering::Relaxed);
}

/// Whether the application is waiting for the GPU: a thread inside a wait now, or told of unfinished work since the
/// last look (`seen`, updated).
fn application_waiting(seen: &mut u64) -> bool {
    use crate::locus::{call, call_slots};
    let found = FOUND_UNFINISHED.load(Ordering::Relaxed);
    let told = found != *seen;
    *seen = found;
    told || call_slots().any(|s| s.call().is_some_and(call::waits_for_gpu))
}

fn watch(hang_ms: u64) {
    use crate::locus::QUEUES;
    let period = std::time::Duration::from_millis((hang_ms / 4).clamp(5, 1000));
    let mut last = [0u64; QUEUES];
    let mut since = [None::<std::time::Instant>; QUEUES];
    let mut reported = [false; QUEUES];
    let mut seen_unfinished = FOUND_UNFINISHED.load(Ordering::Relaxed);
    loop {
        std::thread::sleep(period);
        // Once the process exits no poll reads the semaphores (`EXITING`): a queue would look stalled that is not.
        if !crate::state::on() || EXITING.load(Ordering::Acquire) {
            return;
        }
        let stalled = crate::state::guarded(|| {
            poll_semaphores();
            let mut stalled_ms = None;
            let waiting = application_waiting(&mut seen_unfinished);
            for (number, ring) in crate::locus::queue_rings() {
                let i = number as usize;
                let state = crate::progress::read(&ring.progress);
                if !state.pending || state.by == By::Nothing || state.signature != last[i] {
                    last[i] = state.signature;
                    since[i] = state.pending.then(std::time::Instant::now);
                    reported[i] = false;
                    continue;
                }
                if state.unconfirmed && !waiting {
                    // Only buffers no marker covers are pending: the GPU may have finished them long ago (a program
                    // that submits a small buffer and then compiles pipelines for seconds). Not a stall until the
                    // application waits for them.
                    since[i] = None;
                    continue;
                }
                let start = *since[i].get_or_insert_with(std::time::Instant::now);
                let ms = start.elapsed().as_millis() as u64;
                if ms >= hang_ms && !reported[i] {
                    reported[i] = true;
                    stalled_ms = Some(stalled_ms.unwrap_or(0).max(ms));
                }
            }
            stalled_ms
        })
        .flatten();
        if let Some(ms) = stalled {
            crate::writer::hang(ms);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vk::MemoryPropertyFlags as F;

    fn types(flags: &[F]) -> Vec<vk::MemoryType> {
        flags.iter().map(|&property_flags| vk::MemoryType { property_flags, heap_index: 0 }).collect()
    }

    const HV: F = F::from_raw(F::HOST_VISIBLE.as_raw() | F::HOST_COHERENT.as_raw());
    const AMD: F = F::from_raw(F::DEVICE_COHERENT_AMD.as_raw() | F::DEVICE_UNCACHED_AMD.as_raw());

    #[test]
    fn markers_go_where_the_gpus_writes_reach_memory_and_survive_a_reset() {
        // Every combination an AMD driver lists with VK_AMD_device_coherent_memory: device memory, system memory
        // (uncached and cached), device memory through the BAR, and each again device-coherent and uncached.
        let amd = types(&[
            F::DEVICE_LOCAL,
            HV,
            F::DEVICE_LOCAL | HV,
            HV | F::HOST_CACHED,
            F::DEVICE_LOCAL | AMD,
            HV | AMD,
            F::DEVICE_LOCAL | HV | AMD,
            HV | F::HOST_CACHED | AMD,
        ]);
        assert_eq!(marker_memory_type(&amd, u32::MAX, true, false), Some(7), "uncached by the GPU, system, cached");
        assert_eq!(marker_memory_type(&amd, !(1 << 7), true, false), Some(5), "uncached by the GPU, system");
        assert_eq!(marker_memory_type(&amd, u32::MAX, false, false), Some(3), "without the feature: system, cached");
        assert_eq!(marker_memory_type(&amd, 0b0000_0110, false, false), Some(1), "system memory over the BAR");
        assert_eq!(
            marker_memory_type(&amd, 0b0000_0100, false, false),
            Some(2),
            "the BAR when nothing else is allowed"
        );
        assert_eq!(marker_memory_type(&amd, 0b1111_0001, false, false), None, "no host-visible type allowed");
        // One type with every property (lavapipe's): taken.
        let one = types(&[F::DEVICE_LOCAL | HV | F::HOST_CACHED]);
        assert_eq!(marker_memory_type(&one, u32::MAX, false, false), Some(0));
        // Protected memory is never mapped; equals keep the driver's order.
        let protected = types(&[HV | F::PROTECTED, HV, HV]);
        assert_eq!(marker_memory_type(&protected, u32::MAX, false, false), Some(1));
        // Device-local asked for: the BAR (NVIDIA's drivers list it as device-local, host-visible and coherent),
        // still after device-uncached memory; system memory where the BAR is not allowed.
        assert_eq!(marker_memory_type(&amd, u32::MAX, false, true), Some(2), "the BAR");
        assert_eq!(marker_memory_type(&amd, u32::MAX, true, true), Some(6), "uncached by the GPU, the BAR");
        assert_eq!(marker_memory_type(&amd, 0b0000_1010, false, true), Some(3), "system, cached, without the BAR");
    }
}
