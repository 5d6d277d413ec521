//! Hooks on submissions and on the calls a crash or a lost device can happen in: submissions count their
//! dispatches and remember them in the queue's ring (`crate::locus`); waits, allocations and maps are marked in
//! flight and watched for `VK_ERROR_DEVICE_LOST`.

use std::ffi::{c_char, c_void, CStr};
use std::sync::atomic::Ordering;

use ash::vk;
use ash::vk::Handle;

use crate::commands;
use crate::dispatch::{device_of, DeviceDispatch};
use crate::locus::{call, Marked};
use crate::state;

/// What the layer worked out about a submission before the driver sees it: what [`after_submit`] needs, and the
/// black box's batch for the forward.
pub(super) struct Submitting {
    /// The submission's dispatches (0: none, or not observed).
    dispatches: u64,
    /// With the black box following the queue by submissions: the layer's semaphore and the value the call signals
    /// it with (from its last batch, or one batch more: `forward_signalling`, `forward2`; `crate::progress`).
    signal: Option<(vk::Semaphore, u64)>,
}

/// Counts a submission's dispatches before the driver sees it (afterwards the application may reset
/// the buffers as soon as they complete); the caller then forwards it inside [`watched`] and hands the result to
/// [`after_submit`].
///
/// The dispatches are also remembered in the queue's ring (the crash locus) before the driver sees
/// them, and the call is marked in flight: a crash inside the driver's submit names both.
///
/// Inlined into each submit hook, with the forward written out there (no closure): a submission's own code is what
/// ggml-vulkan's thread runs between recording and its driver's submit, about ten times a token, each time with its
/// lines pushed out of the core's caches by the recording; every instruction and line it does not take counts.
/// `device` is the queue's (the hook looked it up for the driver's function already). For a layer that observes:
/// [`forwards_only`] tells the hook to forward the call as it is, not even marked in flight.
#[inline(always)]
pub(super) fn before_submit<I: Iterator<Item = vk::CommandBuffer> + Clone>(
    queue: vk::Queue,
    device: &'static DeviceDispatch,
    buffers: I,
    fence: vk::Fence,
) -> Submitting {
    let sequences = crate::order::recording().then_some(crate::order::counted as commands::SequenceHook);
    // ggml-vulkan's submission token after token, in one pass (`commands::repeat`): `None` when the buffers are
    // something else, for the general path (a panic, not expected, counts nothing more).
    let repeated = state::guarded(|| {
        let r = commands::repeat::Repeats::find(buffers.clone(), sequences.is_some())?;
        let ring = crate::locus::queue_ring(queue.as_raw(), device.facts_id);
        let signal = r
            .count_and_remember(sequences, ring)
            .and_then(|submit| black_box(ring?, device, r.states(), submit, fence));
        Some(Submitting { dispatches: r.dispatches, signal })
    });
    match repeated {
        Some(Some(done)) => done,
        None => Submitting { dispatches: 0, signal: None },
        Some(None) => submit_walked(queue, device, buffers, sequences, fence),
    }
}

/// [`before_submit`] for what is not a repeat of kept recordings: the buffers' entries walked and copied into the
/// queue's ring.
#[inline(never)]
fn submit_walked<I: Iterator<Item = vk::CommandBuffer> + Clone>(
    queue: vk::Queue,
    device: &'static DeviceDispatch,
    buffers: I,
    sequences: Option<commands::SequenceHook>,
    fence: vk::Fence,
) -> Submitting {
    let tally = state::guarded(|| commands::submission::count(buffers.clone(), false, sequences)).unwrap_or_default();
    let mut signal = None;
    if tally.dispatches > 0 {
        signal = state::guarded(|| {
            let ring = crate::locus::queue_ring(queue.as_raw(), device.facts_id)?;
            let submit = commands::submission::remember(buffers.clone(), ring);
            black_box(ring, device, buffers.clone().filter_map(commands::get), submit, fence)
        })
        .flatten();
    }
    Submitting { dispatches: tally.dispatches, signal }
}

/// Whether a submit hook only forwards: the layer is off, or paused (the in-process A/B's forwarding-only arm).
#[inline(always)]
fn forwards_only() -> bool {
    !state::on() || crate::switch::paused()
}

/// After the driver's answer to a submission [`before_submit`] saw: one more submission with dispatches, and a
/// failed one's dispatches counted as errors too.
#[inline(always)]
pub(super) fn after_submit<I: Iterator<Item = vk::CommandBuffer> + Clone>(
    submitting: &Submitting,
    result: vk::Result,
    buffers: I,
) {
    if submitting.dispatches > 0 {
        crate::writer::SUBMITS.fetch_add(1, Ordering::Relaxed);
        if result.as_raw() < 0 {
            state::guarded(|| commands::submission::count(buffers, true, None));
        }
    }
}

/// The black box's part of a submission, where it is wanted: see [`crate::blackbox::submitting`].
#[inline(always)]
fn black_box(
    ring: &'static crate::locus::QueueRing,
    device: &'static DeviceDispatch,
    states: impl Iterator<Item = &'static commands::CommandBuffer>,
    submit: u64,
    fence: vk::Fence,
) -> Option<(vk::Semaphore, u64)> {
    crate::progress::wanted().then(|| crate::blackbox::submitting(ring, device, states, submit, fence)).flatten()
}

/// Forwards a call marked in flight on this thread (the crash record names it); a
/// `VK_ERROR_DEVICE_LOST` it returns is written to the trace with the queues' last dispatches.
#[inline]
pub(super) fn watched(name: &'static &'static str, forward: impl FnOnce() -> vk::Result) -> vk::Result {
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

pub(super) unsafe extern "system" fn wait_for_fences(
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
    let result = watched(&call::WAIT_FOR_FENCES, || unsafe { next(device, count, fences, wait_all, timeout) });
    if result == vk::Result::TIMEOUT {
        crate::blackbox::found_unfinished();
    }
    if result == vk::Result::SUCCESS && (wait_all == vk::TRUE || count == 1) && !fences.is_null() && state::on() {
        // SAFETY: a valid call's `count` fences.
        let fences = unsafe { std::slice::from_raw_parts(fences, count as usize) };
        state::guarded(|| crate::blackbox::fences_signaled(fences));
    }
    result
}

pub(super) unsafe extern "system" fn get_fence_status(device: vk::Device, fence: vk::Fence) -> vk::Result {
    let Some(next) = device_of(device).and_then(|d| d.get_fence_status) else {
        return vk::Result::ERROR_INITIALIZATION_FAILED;
    };
    // SAFETY: forwarding the caller's arguments.
    let result = watched(&call::GET_FENCE_STATUS, || unsafe { next(device, fence) });
    if result == vk::Result::NOT_READY {
        crate::blackbox::found_unfinished();
    }
    if result == vk::Result::SUCCESS && state::on() {
        state::guarded(|| crate::blackbox::fences_signaled(&[fence]));
    }
    result
}

pub(super) unsafe extern "system" fn queue_wait_idle(queue: vk::Queue) -> vk::Result {
    let Some(next) = device_of(queue).and_then(|d| d.queue_wait_idle) else {
        return vk::Result::ERROR_INITIALIZATION_FAILED;
    };
    // SAFETY: forwarding the caller's arguments.
    let result = watched(&call::QUEUE_WAIT_IDLE, || unsafe { next(queue) });
    if result == vk::Result::SUCCESS && state::on() {
        state::guarded(|| crate::blackbox::queue_idle(queue));
    }
    result
}

pub(super) unsafe extern "system" fn device_wait_idle(device: vk::Device) -> vk::Result {
    let Some((d, next)) = device_of(device).and_then(|d| Some((d, d.device_wait_idle?))) else {
        return vk::Result::ERROR_INITIALIZATION_FAILED;
    };
    // SAFETY: forwarding the caller's arguments.
    let result = watched(&call::DEVICE_WAIT_IDLE, || unsafe { next(device) });
    if result == vk::Result::SUCCESS && state::on() {
        state::guarded(|| crate::blackbox::device_idle(d));
    }
    result
}

/// `vkWaitSemaphores`, and with `KHR` its alias `vkWaitSemaphoresKHR` (forwarded to the next link's function of
/// that name).
pub(super) unsafe extern "system" fn wait_semaphores<const KHR: bool>(
    device: vk::Device,
    info: *const vk::SemaphoreWaitInfo<'_>,
    timeout: u64,
) -> vk::Result {
    let Some(next) = device_of(device).and_then(|d| if KHR { d.wait_semaphores_khr } else { d.wait_semaphores }) else {
        return vk::Result::ERROR_INITIALIZATION_FAILED;
    };
    // SAFETY: forwarding the caller's arguments.
    let result = watched(&call::WAIT_SEMAPHORES, || unsafe { next(device, info, timeout) });
    if result == vk::Result::TIMEOUT {
        crate::blackbox::found_unfinished();
    }
    result
}

/// `vkGetSemaphoreCounterValue`, and with `KHR` its alias `vkGetSemaphoreCounterValueKHR`.
pub(super) unsafe extern "system" fn get_semaphore_counter_value<const KHR: bool>(
    device: vk::Device,
    semaphore: vk::Semaphore,
    value: *mut u64,
) -> vk::Result {
    let next =
        device_of(device)
            .and_then(|d| if KHR { d.get_semaphore_counter_value_khr } else { d.get_semaphore_counter_value });
    let Some(next) = next else { return vk::Result::ERROR_INITIALIZATION_FAILED };
    // SAFETY: forwarding the caller's arguments.
    watched(&call::GET_SEMAPHORE_COUNTER_VALUE, || unsafe { next(device, semaphore, value) })
}

#[allow(clippy::too_many_arguments)]
pub(super) unsafe extern "system" fn get_query_pool_results(
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

pub(super) unsafe extern "system" fn allocate_memory(
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

pub(super) unsafe extern "system" fn map_memory(
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

/// The `count` batches at `submits` of a `vkQueueSubmit*` call (none for a null pointer or a count of 0).
///
/// # Safety
/// `submits` must hold `count` valid batches (or be null, or `count` 0), alive for `'a`.
unsafe fn batches<'a, T>(submits: *const T, count: u32) -> &'a [T] {
    if count == 0 || submits.is_null() {
        return &[];
    }
    // SAFETY: the caller's promise.
    unsafe { std::slice::from_raw_parts(submits, count as usize) }
}

/// The command buffers of `VkSubmitInfo`s.
///
/// # Safety
/// `submits` must hold `count` valid submit infos (or be null with `count` 0).
unsafe fn buffers_of<'a>(
    submits: *const vk::SubmitInfo<'a>,
    count: u32,
) -> impl Iterator<Item = vk::CommandBuffer> + Clone + 'a {
    // SAFETY: `count` valid submit infos, alive for the call.
    let submits: &'a [vk::SubmitInfo<'a>] = unsafe { batches(submits, count) };
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
    // SAFETY: `count` valid submit infos, alive for the call.
    let submits: &'a [vk::SubmitInfo2<'a>] = unsafe { batches(submits, count) };
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

pub(super) unsafe extern "system" fn queue_submit(
    queue: vk::Queue,
    count: u32,
    submits: *const vk::SubmitInfo<'_>,
    fence: vk::Fence,
) -> vk::Result {
    let Some((device, next)) = device_of(queue).and_then(|d| Some((d, d.queue_submit?))) else {
        return vk::Result::ERROR_INITIALIZATION_FAILED;
    };
    if forwards_only() {
        // SAFETY: forwarding the caller's arguments.
        return unsafe { next(queue, count, submits, fence) };
    }
    // SAFETY: the caller's submit infos.
    let buffers = unsafe { buffers_of(submits, count) };
    let submitting = before_submit(queue, device, buffers.clone(), fence);
    let result = watched(&call::QUEUE_SUBMIT, || match submitting.signal {
        // SAFETY: forwarding the caller's arguments.
        None => unsafe { next(queue, count, submits, fence) },
        // SAFETY: as above, plus one batch that only signals the layer's semaphore.
        Some(signal) => unsafe { forward_signalling(next, queue, count, submits, fence, signal) },
    });
    after_submit(&submitting, result, buffers);
    result
}

/// `vkQueueSubmit`'s forwarding with the layer's semaphore signalled (out of line: only devices followed by
/// submissions take it): by the last batch where it can be added there ([`signalled_by_last`]), else by one batch of
/// its own after the given ones. A signal in the last batch covers every batch of the call as an extra batch's does
/// (a semaphore signal waits for every command earlier in submission order), without the extra batch's work in the
/// driver.
///
/// # Safety
/// The caller's arguments of a `vkQueueSubmit` call.
#[inline(never)]
unsafe fn forward_signalling(
    next: vk::PFN_vkQueueSubmit,
    queue: vk::Queue,
    count: u32,
    submits: *const vk::SubmitInfo<'_>,
    fence: vk::Fence,
    (semaphore, value): (vk::Semaphore, u64),
) -> vk::Result {
    // SAFETY: a valid call holds `count` submit infos.
    let given: &[vk::SubmitInfo<'_>] = unsafe { batches(submits, count) };
    if let Some((last, rest)) = given.split_last() {
        // SAFETY: a valid submit info; forwarding the caller's batches with the last one signalling the semaphore too.
        let merged = unsafe {
            signalled_by_last(last, semaphore, value, |last| {
                with_extra(rest, *last, |all| next(queue, all.len() as u32, all.as_ptr(), fence))
            })
        };
        if let Some(result) = merged {
            return result;
        }
    }
    let values = [value];
    let timeline = vk::TimelineSemaphoreSubmitInfo {
        signal_semaphore_value_count: 1,
        p_signal_semaphore_values: values.as_ptr(),
        ..Default::default()
    };
    let semaphores = [semaphore];
    let extra = vk::SubmitInfo {
        p_next: &timeline as *const _ as *const c_void,
        signal_semaphore_count: 1,
        p_signal_semaphores: semaphores.as_ptr(),
        ..Default::default()
    };
    // SAFETY: the caller's batches plus one that only signals the layer's semaphore.
    with_extra(given, extra, |all| unsafe { next(queue, all.len() as u32, all.as_ptr(), fence) })
}

/// Semaphores a batch may signal for the layer's to be added to it (on the stack); a batch with more gets an extra
/// batch instead.
const SIGNALS_ON_STACK: usize = 8;

/// `last` with the layer's `semaphore` (to `value`) added to the semaphores it signals, for `f`; `None` where that
/// cannot be done without rewriting the application's structures: more than [`SIGNALS_ON_STACK`] - 1 semaphores, a
/// `pNext` chain with anything that counts the batch's semaphores other than a `VkTimelineSemaphoreSubmitInfo` at its
/// head (device-group and D3D12 fence infos do, and a timeline info further down would need its predecessor
/// rewritten), or a timeline info whose signal values do not match the semaphores. The timeline info is copied with
/// the layer's value added (zeros stand for the application's binary semaphores' values, which are ignored), or
/// made, in front of the rest of the chain.
///
/// # Safety
/// `last` must be a valid submit info.
unsafe fn signalled_by_last<R>(
    last: &vk::SubmitInfo<'_>,
    semaphore: vk::Semaphore,
    value: u64,
    f: impl FnOnce(&vk::SubmitInfo<'_>) -> R,
) -> Option<R> {
    let n = last.signal_semaphore_count as usize;
    if n >= SIGNALS_ON_STACK || (n > 0 && last.p_signal_semaphores.is_null()) {
        return None;
    }
    let mut timeline: Option<&vk::TimelineSemaphoreSubmitInfo<'_>> = None;
    let mut p = last.p_next as *const vk::BaseInStructure<'_>;
    for hop in 0.. {
        if p.is_null() {
            break;
        }
        if hop == 16 {
            return None;
        }
        // SAFETY: a valid chain's structures each begin with `sType` and `pNext`.
        let base = unsafe { &*p };
        match base.s_type {
            vk::StructureType::TIMELINE_SEMAPHORE_SUBMIT_INFO if hop == 0 => {
                // SAFETY: the structure its `sType` names.
                timeline = Some(unsafe { &*(p as *const vk::TimelineSemaphoreSubmitInfo<'_>) });
            }
            vk::StructureType::PROTECTED_SUBMIT_INFO | vk::StructureType::PERFORMANCE_QUERY_SUBMIT_INFO_KHR => {}
            _ => return None,
        }
        p = base.p_next;
    }
    let mut semaphores = [vk::Semaphore::null(); SIGNALS_ON_STACK];
    let mut values = [0u64; SIGNALS_ON_STACK];
    if n > 0 {
        // SAFETY: a valid submit info holds `signal_semaphore_count` semaphores.
        semaphores[..n].copy_from_slice(unsafe { std::slice::from_raw_parts(last.p_signal_semaphores, n) });
    }
    let mut ours = vk::TimelineSemaphoreSubmitInfo { p_next: last.p_next, ..Default::default() };
    if let Some(t) = timeline {
        match t.signal_semaphore_value_count as usize {
            0 => {}
            m if m == n && !t.p_signal_semaphore_values.is_null() => {
                // SAFETY: the application's `signal_semaphore_value_count` values.
                values[..n].copy_from_slice(unsafe { std::slice::from_raw_parts(t.p_signal_semaphore_values, n) });
            }
            _ => return None,
        }
        ours = vk::TimelineSemaphoreSubmitInfo {
            p_next: t.p_next,
            wait_semaphore_value_count: t.wait_semaphore_value_count,
            p_wait_semaphore_values: t.p_wait_semaphore_values,
            ..Default::default()
        };
    }
    semaphores[n] = semaphore;
    values[n] = value;
    ours.signal_semaphore_value_count = n as u32 + 1;
    ours.p_signal_semaphore_values = values.as_ptr();
    let merged = vk::SubmitInfo {
        p_next: &ours as *const _ as *const c_void,
        signal_semaphore_count: n as u32 + 1,
        p_signal_semaphores: semaphores.as_ptr(),
        ..*last
    };
    Some(f(&merged))
}

/// `vkQueueSubmit2`'s forwarding, with the black box's semaphore signalled when given one: by the last batch (its
/// signal infos, which nothing else in the chain counts) where it signals fewer than [`SIGNALS_ON_STACK`], else by an
/// extra batch.
///
/// # Safety
/// The caller's arguments of a `vkQueueSubmit2` call.
unsafe fn forward2(
    next: vk::PFN_vkQueueSubmit2,
    queue: vk::Queue,
    count: u32,
    submits: *const vk::SubmitInfo2<'_>,
    fence: vk::Fence,
    signal: Option<(vk::Semaphore, u64)>,
) -> vk::Result {
    let Some((semaphore, value)) = signal else {
        // SAFETY: forwarding the caller's arguments.
        return unsafe { next(queue, count, submits, fence) };
    };
    let ours = vk::SemaphoreSubmitInfo {
        semaphore,
        value,
        stage_mask: vk::PipelineStageFlags2::ALL_COMMANDS,
        ..Default::default()
    };
    // SAFETY: a valid call holds `count` submit infos.
    let given: &[vk::SubmitInfo2<'_>] = unsafe { batches(submits, count) };
    if let Some((last, rest)) = given.split_last() {
        let n = last.signal_semaphore_info_count as usize;
        if n < SIGNALS_ON_STACK && (n == 0 || !last.p_signal_semaphore_infos.is_null()) {
            let mut infos = [ours; SIGNALS_ON_STACK];
            if n > 0 {
                // SAFETY: a valid submit info holds `signal_semaphore_info_count` infos.
                infos[..n].copy_from_slice(unsafe { std::slice::from_raw_parts(last.p_signal_semaphore_infos, n) });
            }
            let merged = vk::SubmitInfo2 {
                signal_semaphore_info_count: n as u32 + 1,
                p_signal_semaphore_infos: infos.as_ptr(),
                ..*last
            };
            // SAFETY: the caller's batches, the last one signalling the layer's semaphore too.
            return with_extra(rest, merged, |all| unsafe { next(queue, all.len() as u32, all.as_ptr(), fence) });
        }
    }
    let info = [ours];
    let extra = vk::SubmitInfo2 {
        signal_semaphore_info_count: 1,
        p_signal_semaphore_infos: info.as_ptr(),
        ..Default::default()
    };
    // SAFETY: the caller's batches plus one that only signals the layer's semaphore.
    with_extra(given, extra, |all| unsafe { next(queue, all.len() as u32, all.as_ptr(), fence) })
}

/// `given` with `extra` after it, as one slice for `f`: on the stack for the few batches a program submits at once
/// (ggml-vulkan submits one), so that a submission the black box adds its batch to, or whose last batch it rewrites
/// (`given` then the ones before it), allocates nothing.
fn with_extra<T: Copy, R>(given: &[T], extra: T, f: impl FnOnce(&[T]) -> R) -> R {
    const ON_STACK: usize = 8;
    if given.len() < ON_STACK {
        let mut all = [extra; ON_STACK];
        all[..given.len()].copy_from_slice(given);
        return f(&all[..=given.len()]);
    }
    let mut all = given.to_vec();
    all.push(extra);
    f(&all)
}

/// `vkQueueSubmit2`, and with `KHR` its alias `vkQueueSubmit2KHR`.
pub(super) unsafe extern "system" fn queue_submit2<const KHR: bool>(
    queue: vk::Queue,
    count: u32,
    submits: *const vk::SubmitInfo2<'_>,
    fence: vk::Fence,
) -> vk::Result {
    let Some((device, next)) =
        device_of(queue).and_then(|d| Some((d, if KHR { d.queue_submit2_khr } else { d.queue_submit2 }?)))
    else {
        return vk::Result::ERROR_INITIALIZATION_FAILED;
    };
    let name = if KHR { &call::QUEUE_SUBMIT2_KHR } else { &call::QUEUE_SUBMIT2 };
    if forwards_only() {
        // SAFETY: forwarding the caller's arguments.
        return unsafe { next(queue, count, submits, fence) };
    }
    // SAFETY: the caller's submit infos.
    let buffers = unsafe { buffers_of2(submits, count) };
    let submitting = before_submit(queue, device, buffers.clone(), fence);
    // SAFETY: forwarding the caller's arguments (plus, for the black box, one batch that only signals the layer's
    // semaphore).
    let result = watched(name, || unsafe { forward2(next, queue, count, submits, fence, submitting.signal) });
    after_submit(&submitting, result, buffers);
    result
}

/// The bytes of a command name as the loader or an application passes it (empty for a null pointer).
///
/// # Safety
/// `name` must be a NUL-terminated string.
pub(super) unsafe fn name_bytes<'a>(name: *const c_char) -> &'a [u8] {
    if name.is_null() {
        return b"";
    }
    // SAFETY: the caller's promise.
    unsafe { CStr::from_ptr(name) }.to_bytes()
}

#[cfg(test)]
mod tests {
    use std::ffi::c_void;

    use ash::vk;
    use ash::vk::Handle;

    use super::{signalled_by_last, with_extra};

    /// What `signalled_by_last` gave its closure: the signalled semaphores with their timeline values, the timeline
    /// info's wait values, and the `sType`s (raw: ash's types have no `Debug` here) of the rest of the chain after the
    /// timeline info.
    type Merged = (Vec<(u64, u64)>, Vec<u64>, Vec<i32>);

    fn merged(last: &vk::SubmitInfo<'_>) -> Option<Merged> {
        // SAFETY: the tests' submit infos are valid, their arrays alive for the call.
        unsafe {
            signalled_by_last(last, vk::Semaphore::from_raw(0xabc), 77, |m| {
                let t = &*(m.p_next as *const vk::TimelineSemaphoreSubmitInfo<'_>);
                assert!(t.s_type == vk::StructureType::TIMELINE_SEMAPHORE_SUBMIT_INFO);
                assert_eq!(t.signal_semaphore_value_count, m.signal_semaphore_count);
                let n = m.signal_semaphore_count as usize;
                let semaphores = std::slice::from_raw_parts(m.p_signal_semaphores, n);
                let values = std::slice::from_raw_parts(t.p_signal_semaphore_values, n);
                let waits = if t.wait_semaphore_value_count == 0 {
                    vec![]
                } else {
                    std::slice::from_raw_parts(t.p_wait_semaphore_values, t.wait_semaphore_value_count as usize)
                        .to_vec()
                };
                let mut rest = vec![];
                let mut p = t.p_next as *const vk::BaseInStructure<'_>;
                while !p.is_null() {
                    rest.push((*p).s_type.as_raw());
                    p = (*p).p_next;
                }
                // The rest of the batch is the application's.
                assert_eq!(
                    (m.command_buffer_count, m.wait_semaphore_count),
                    (last.command_buffer_count, last.wait_semaphore_count)
                );
                (semaphores.iter().map(|s| s.as_raw()).zip(values.iter().copied()).collect(), waits, rest)
            })
        }
    }

    #[test]
    fn the_last_batch_signals_the_layers_semaphore_where_its_chain_allows() {
        let buffers = [vk::CommandBuffer::from_raw(1)];
        let signals: Vec<vk::Semaphore> = (1..=8).map(vk::Semaphore::from_raw).collect();
        let batch = |n: u32| vk::SubmitInfo {
            command_buffer_count: 1,
            p_command_buffers: buffers.as_ptr(),
            signal_semaphore_count: n,
            p_signal_semaphores: signals.as_ptr(),
            ..Default::default()
        };
        let ours = (0xabc, 77);
        // No chain (vkspin's batches): a timeline info is made for the layer's value alone.
        assert_eq!(merged(&batch(0)), Some((vec![ours], vec![], vec![])));
        // Binary semaphores and no timeline info: their values are zeros, which the driver ignores.
        assert_eq!(merged(&batch(2)), Some((vec![(1, 0), (2, 0), ours], vec![], vec![])));
        // ggml-vulkan's shape: a timeline info at the head with the batch's values; the rest of the chain is kept.
        let protected = vk::ProtectedSubmitInfo::default();
        let (waits, values) = ([3u64], [5u64]);
        let timeline = vk::TimelineSemaphoreSubmitInfo {
            p_next: &protected as *const _ as *const c_void,
            wait_semaphore_value_count: 1,
            p_wait_semaphore_values: waits.as_ptr(),
            signal_semaphore_value_count: 1,
            p_signal_semaphore_values: values.as_ptr(),
            ..Default::default()
        };
        let ggml = vk::SubmitInfo { p_next: &timeline as *const _ as *const c_void, ..batch(1) };
        assert_eq!(
            merged(&ggml),
            Some((vec![(1, 5), ours], vec![3], vec![vk::StructureType::PROTECTED_SUBMIT_INFO.as_raw()]))
        );
        // A timeline info with no signal values (the batch signals only binary semaphores): zeros for them.
        let waits_only = vk::TimelineSemaphoreSubmitInfo { signal_semaphore_value_count: 0, ..timeline };
        let b = vk::SubmitInfo { p_next: &waits_only as *const _ as *const c_void, ..batch(2) };
        assert_eq!(merged(&b).map(|m| m.0), Some(vec![(1, 0), (2, 0), ours]));
        // Seven semaphores fit with the layer's; eight do not.
        assert_eq!(merged(&batch(7)).map(|m| m.0.len()), Some(8));
        assert_eq!(merged(&batch(8)), None);
        // What the layer does not rewrite: signal values that do not match the semaphores, a timeline info behind
        // another structure, a structure that counts the batch's semaphores (a device group's indices).
        let mismatched = vk::SubmitInfo { p_next: &timeline as *const _ as *const c_void, ..batch(2) };
        assert_eq!(merged(&mismatched), None);
        let behind = vk::ProtectedSubmitInfo { p_next: &timeline as *const _ as *const c_void, ..Default::default() };
        assert_eq!(merged(&vk::SubmitInfo { p_next: &behind as *const _ as *const c_void, ..batch(1) }), None);
        let group = vk::DeviceGroupSubmitInfo::default();
        assert_eq!(merged(&vk::SubmitInfo { p_next: &group as *const _ as *const c_void, ..batch(0) }), None);
    }

    #[test]
    fn the_extra_batch_follows_the_given_ones_on_the_stack_or_not() {
        for n in [0u32, 1, 7, 8, 30] {
            let given: Vec<u32> = (0..n).collect();
            let all = with_extra(&given, 99, |all| all.to_vec());
            assert_eq!(all, [given.clone(), vec![99]].concat(), "{n} given");
        }
    }
}
