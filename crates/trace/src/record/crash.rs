//! The records of a crash and of a lost Vulkan device: what was running and what the GPU was last given.

use super::keys::{field, kind};
use crate::json::{Arr, Obj, Out};

/// One launch remembered for the crash record.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CrashLaunch {
    pub kernel: u32,
    /// Start of the window the launch was counted in (the open window's start when it happened).
    pub window_t0: u64,
    pub grid: [u32; 3],
    pub block: [u32; 3],
    /// The launch call returned an error.
    pub failed: bool,
}

/// One thread in a crash record: the runtime call it was inside, and its last launches, oldest first.
#[derive(Clone, Copy, Debug)]
pub struct CrashThread<'a> {
    pub tid: u32,
    pub in_flight: Option<&'a str>,
    pub launches: &'a [CrashLaunch],
}

/// A fatal signal as the observer saw it, before the program's own handler (or the default action)
/// took it.
#[derive(Clone, Copy, Debug)]
pub struct Crash<'a> {
    /// Number of this crash record in the process, from 1.
    pub seq: u32,
    pub signal: i32,
    /// `si_code`: > 0 for a fault the kernel raised, <= 0 for a signal some process sent.
    pub code: i32,
    /// `si_addr`: the faulting address of SIGSEGV/SIGBUS/SIGILL/SIGFPE.
    pub addr: u64,
    /// `si_pid` of a signal sent by a process (`code <= 0`).
    pub sender_pid: Option<u32>,
    pub at_ns: u64,
    /// The thread that received the signal; it comes first in `threads`.
    pub tid: u32,
    /// The window open at the signal was written before this record.
    pub flushed: bool,
    pub threads: &'a [CrashThread<'a>],
}

/// The conventional name of a signal, or "" for one not listed.
pub fn signal_name(signal: i32) -> &'static str {
    // Linux numbering (x86-64 and AArch64 share it for these).
    match signal {
        1 => "SIGHUP",
        2 => "SIGINT",
        3 => "SIGQUIT",
        4 => "SIGILL",
        5 => "SIGTRAP",
        6 => "SIGABRT",
        7 => "SIGBUS",
        8 => "SIGFPE",
        9 => "SIGKILL",
        11 => "SIGSEGV",
        13 => "SIGPIPE",
        14 => "SIGALRM",
        15 => "SIGTERM",
        31 => "SIGSYS",
        _ => "",
    }
}

pub fn crash(out: &mut (impl Out + ?Sized), c: &Crash<'_>) {
    crash_with_queues(out, c, &[]);
}

/// A crash record with the Vulkan queues' last submitted dispatches (written by the Vulkan layer;
/// `queues` is left out when empty, so [`crash`] writes the CUDA/HIP observer's record unchanged).
pub fn crash_with_queues(out: &mut (impl Out + ?Sized), c: &Crash<'_>, queues: &[CrashQueue<'_>]) {
    let mut o = Obj::begin(out);
    o.i64(kind::CRASH, c.signal.into()).str(field::SIGNAL, signal_name(c.signal));
    o.i64(field::CODE, c.code.into()).u64(field::ADDR, c.addr);
    if let Some(sender) = c.sender_pid {
        o.u64(field::SENDER_PID, sender.into());
    }
    o.u64(field::AT_NS, c.at_ns).u64(field::SEQ, c.seq.into()).u64(field::TID, c.tid.into());
    o.bool(field::FLUSHED, c.flushed);
    o.list(field::THREADS, c.threads, |out, t| {
        let mut th = Obj::begin(out);
        th.u64(field::TID, t.tid.into()).opt_str(field::IN_FLIGHT, t.in_flight);
        th.list(field::LAUNCHES, t.launches, |out, l| {
            let mut launch = Arr::begin(out);
            launch.u64(l.kernel.into()).u64(l.window_t0).u32x3(l.grid).u32x3(l.block).u64(l.failed.into()).end();
        });
        th.end();
    });
    put_queues(&mut o, queues);
    o.end_line();
}

/// One dispatch (or several equal ones in a row) a Vulkan queue was given, remembered for the crash
/// and device-lost records.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QueueDispatch<'a> {
    /// The pipeline's kernel id.
    pub kernel: u32,
    /// The queue's submission (`vkQueueSubmit*` call with dispatches) that carried it, from 1.
    pub submit: u64,
    /// Workgroup counts (`[0,0,0]` for an indirect dispatch).
    pub grid: [u32; 3],
    /// Equal consecutive dispatches of one command buffer.
    pub count: u32,
    /// The innermost debug label open when they were recorded (`vkCmdBeginDebugUtilsLabelEXT`: ggml-vulkan's
    /// graph node, `MUL_MAT blk.0.attn_q`); empty for none.
    pub label: &'a [u8],
}

/// One Vulkan queue's last submitted dispatches, oldest first.
#[derive(Clone, Copy, Debug)]
pub struct CrashQueue<'a> {
    /// The queue's number in the layer's table (in the order queues first submitted dispatches).
    pub queue: u32,
    /// The `device` record of its device, when described.
    pub device: Option<u32>,
    /// Submissions with dispatches on this queue so far.
    pub submits: u64,
    pub dispatches: &'a [QueueDispatch<'a>],
    /// Dispatches left out of the list because their pipeline's definition could not be written.
    pub omitted: u32,
    /// How far the GPU got (the black box), when known.
    pub progress: Option<QueueProgress<'a>>,
}

/// A dispatch in flight (or a candidate for it): `[kernel, submission, index in its command buffer, grid]`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct InFlightDispatch {
    pub kernel: u32,
    pub submit: u64,
    pub index: u32,
    pub grid: [u32; 3],
}

/// How far the GPU got through a queue's followed submissions.
#[derive(Clone, Copy, Debug)]
pub struct QueueProgress<'a> {
    /// `buffer_marker` (the GPU's own completion markers: `in_flight` were started and not finished) or
    /// `submission` (the layer's timeline semaphore: `in_flight` are the dispatches of the first unfinished
    /// submission, one or more of which was running).
    pub by: &'a str,
    pub completed: u64,
    pub in_flight: &'a [InFlightDispatch],
    /// In flight but not listed.
    pub more_in_flight: u32,
    pub not_started: u64,
    /// Some followed work had not completed.
    pub pending: bool,
    /// Pending only through command buffers no marker covered yet: not seen to finish, not shown unfinished
    /// (written only when true).
    pub unconfirmed: bool,
}

fn put_queues<O: Out + ?Sized>(o: &mut Obj<'_, O>, queues: &[CrashQueue<'_>]) {
    if queues.is_empty() {
        return;
    }
    o.list(field::QUEUES, queues, |out, q| {
        let mut qo = Obj::begin(out);
        qo.u64(field::QUEUE, q.queue.into());
        if let Some(device) = q.device {
            qo.u64(field::DEVICE, device.into());
        }
        qo.u64(field::SUBMITS, q.submits);
        qo.list(field::DISPATCHES, q.dispatches, |out, d| {
            let mut dispatch = Arr::begin(out);
            dispatch.u64(d.kernel.into()).u64(d.submit).u32x3(d.grid).u64(d.count.into());
            if !d.label.is_empty() {
                dispatch.bytes(d.label);
            }
            dispatch.end();
        });
        qo.u64_nonzero(field::OMITTED, q.omitted.into());
        if let Some(p) = &q.progress {
            let mut o = Obj::begin(qo.key(field::PROGRESS));
            o.str(field::BY, p.by).u64(field::COMPLETED, p.completed).bool(field::PENDING, p.pending);
            o.list(field::IN_FLIGHT, p.in_flight, |out, d| {
                Arr::begin(out).u64(d.kernel.into()).u64(d.submit).u64(d.index.into()).u32x3(d.grid).end()
            });
            o.u64_nonzero(field::MORE_IN_FLIGHT, p.more_in_flight.into());
            o.u64(field::NOT_STARTED, p.not_started);
            if p.unconfirmed {
                o.bool(field::UNCONFIRMED, true);
            }
            o.end();
        }
        qo.end();
    });
}

/// A Vulkan call that returned `VK_ERROR_DEVICE_LOST`, as the layer saw it return.
#[derive(Clone, Copy, Debug)]
pub struct DeviceLost<'a> {
    /// The call (`vkQueueSubmit`, `vkWaitForFences`, …).
    pub call: &'a str,
    /// Its `VkResult` (-4).
    pub result: i32,
    pub at_ns: u64,
    /// The thread that made the call.
    pub tid: u32,
    /// Number of this device-lost record in the file, from 1.
    pub seq: u32,
    /// What the drivers of devices with `VK_EXT_device_fault` said about the loss (`vkGetDeviceFaultInfoEXT`).
    pub faults: &'a [DeviceFault<'a>],
}

/// One device's answer to `vkGetDeviceFaultInfoEXT` after a device loss.
#[derive(Clone, Copy, Debug, Default)]
pub struct DeviceFault<'a> {
    /// The trace's id of the device (`device` record), when the layer described it.
    pub device: Option<u32>,
    /// The driver's description of the fault.
    pub description: &'a [u8],
    pub addresses: &'a [FaultAddress],
    pub vendor: &'a [FaultVendor<'a>],
    /// Size of the vendor's binary crash dump the driver offers (not fetched).
    pub vendor_binary_bytes: u64,
}

/// A `VkDeviceFaultAddressInfoEXT`: what kind of access, where, to what precision.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FaultAddress {
    /// `VkDeviceFaultAddressTypeEXT`.
    pub kind: i32,
    pub address: u64,
    /// The address is known to within this many bytes (a power of two).
    pub precision: u64,
}

/// A `VkDeviceFaultVendorInfoEXT`.
#[derive(Clone, Copy, Debug, Default)]
pub struct FaultVendor<'a> {
    pub description: &'a [u8],
    pub code: u64,
    pub data: u64,
}

/// The name a fault address type is written as (`VkDeviceFaultAddressTypeEXT`, Vulkan 1.3 spec, VK_EXT_device_fault).
pub fn fault_address_kind(kind: i32) -> &'static str {
    match kind {
        0 => "none",
        1 => "read_invalid",
        2 => "write_invalid",
        3 => "execute_invalid",
        4 => "instruction_pointer_unknown",
        5 => "instruction_pointer_invalid",
        6 => "instruction_pointer_fault",
        _ => "unknown",
    }
}

pub fn device_lost(out: &mut (impl Out + ?Sized), d: &DeviceLost<'_>, queues: &[CrashQueue<'_>]) {
    let mut o = Obj::begin(out);
    o.str(kind::DEVICE_LOST, d.call).i64(field::RESULT, d.result.into());
    o.u64(field::AT_NS, d.at_ns).u64(field::SEQ, d.seq.into()).u64(field::TID, d.tid.into());
    put_queues(&mut o, queues);
    put_faults(&mut o, d.faults);
    o.end_line();
}

fn put_faults<O: Out + ?Sized>(o: &mut Obj<'_, O>, faults: &[DeviceFault<'_>]) {
    if faults.is_empty() {
        return;
    }
    o.list(field::FAULTS, faults, |out, f| {
        let mut fo = Obj::begin(out);
        if let Some(device) = f.device {
            fo.u64(field::DEVICE, device.into());
        }
        fo.bytes(field::DESCRIPTION, f.description);
        fo.list(field::ADDRESSES, f.addresses, |out, a| {
            Arr::begin(out).bytes(fault_address_kind(a.kind).as_bytes()).u64(a.address).u64(a.precision).end()
        });
        fo.list(field::VENDOR, f.vendor, |out, v| Arr::begin(out).bytes(v.description).u64(v.code).u64(v.data).end());
        fo.u64_nonzero(field::VENDOR_BINARY_BYTES, f.vendor_binary_bytes);
        fo.end();
    });
}

/// The hang watcher's record: work was pending on a queue and the GPU made no progress for `stalled_ms`.
#[derive(Clone, Copy, Debug)]
pub struct Hang {
    pub stalled_ms: u64,
    pub at_ns: u64,
    /// Number of this hang record in the file, from 1.
    pub seq: u32,
}

pub fn hang(out: &mut (impl Out + ?Sized), h: &Hang, queues: &[CrashQueue<'_>]) {
    let mut o = Obj::begin(out);
    o.u64(kind::HANG, h.stalled_ms).u64(field::AT_NS, h.at_ns).u64(field::SEQ, h.seq.into());
    put_queues(&mut o, queues);
    o.end_line();
}

/// The program's own handler, called after crash record `seq`, returned: the program may have
/// recovered from the signal (a Go panic in Go code does), so that record may not mark its end.
pub fn signal_returned(out: &mut (impl Out + ?Sized), seq: u32, at_ns: u64) {
    let mut o = Obj::begin(out);
    o.u64(kind::SIGNAL_RETURNED, seq.into()).u64(field::AT_NS, at_ns);
    o.end_line();
}
