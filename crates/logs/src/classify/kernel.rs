//! Kernel GPU-driver lines pasted beside a log: amdgpu ring timeouts, resets, page faults and coredumps, NVIDIA Xids,
//! Intel GPU hangs.

use crate::event::{EventKind, GpuDriver, GpuDriverEvent};

use super::text::{after, find, leading_u32, trim, trim_start};

pub(super) fn driver<'a>(
    event: GpuDriverEvent,
    ring: Option<&'a [u8]>,
    (process, pid): (Option<&'a [u8]>, Option<u32>),
) -> Option<EventKind<'a>> {
    Some(EventKind::GpuDriver(GpuDriver { event, ring, process, pid, code: None }))
}

/// NVIDIA's kernel driver reports a GPU error by number (`nv_report_error` in the driver's `nvidia/` sources): `NVRM: Xid
/// (PCI:0000:01:00): 31, pid=14292, name=python, Ch 00000030, …`. Since the 470-era drivers the line names the process
/// (`pid='<unknown>', name=<unknown>` when the driver cannot tell); older ones give the number and the details only
/// (`NVRM: Xid (PCI:0000:01:00): 31, Ch 00000003, engmask 00000101, intr 10000000`).
pub(super) fn nvidia_xid(msg: &[u8]) -> Option<EventKind<'_>> {
    let rest = msg.strip_prefix(b"NVRM: Xid (")?;
    let rest = after(rest, b"): ")?;
    let (code, rest) = leading_u32(rest)?;
    let pid = rest.strip_prefix(b", pid=").and_then(leading_u32).map(|x| x.0);
    let process = after(rest, b", name=")
        .map(|n| &n[..n.iter().position(|&b| b == b',').unwrap_or(n.len())])
        .filter(|n| !n.is_empty() && *n != b"<unknown>");
    Some(EventKind::GpuDriver(GpuDriver { event: GpuDriverEvent::Xid, ring: None, process, pid, code: Some(code) }))
}

/// `NAME [PID]` after Intel's `in ` (i915's `GPU HANG: …, in xdg-desktop-por [1676]`, xe's `Timedout job: … in
/// llama-bench [260404]`); xe writes `no process [-1]` for a job no process owns.
pub(super) fn intel_process(s: &[u8]) -> (Option<&[u8]>, Option<u32>) {
    let Some(open) = find(s, b" [") else { return (None, None) };
    let name = &s[..open];
    let pid = leading_u32(&s[open + 2..]).filter(|(_, rest)| rest.starts_with(b"]")).map(|x| x.0);
    (Some(name).filter(|n| !n.is_empty() && *n != b"no process"), pid)
}

/// Intel's i915 and xe drivers (`i915 0000:00:02.0: [drm] …`, `xe 0000:03:00.0: [drm] Tile0: GT0: …`, FreeBSD's
/// `drmn0: [drm] …`): a hang and the process it names, an engine or chip reset.
pub(super) fn intel_line(msg: &[u8]) -> Option<EventKind<'_>> {
    if let Some(rest) = after(msg, b"GPU HANG: ") {
        return driver(GpuDriverEvent::Hang, None, after(rest, b", in ").map_or((None, None), intel_process));
    }
    if let Some(rest) = after(msg, b"Timedout job: ") {
        return driver(GpuDriverEvent::Hang, None, after(rest, b" in ").map_or((None, None), intel_process));
    }
    if let Some(rest) = after(msg, b"Engine reset: engine_class=") {
        let end = rest.iter().position(|&b| b == b',' || b == b' ').unwrap_or(rest.len());
        return driver(GpuDriverEvent::ResetBegin, Some(&rest[..end]).filter(|r| !r.is_empty()), (None, None));
    }
    if let Some(rest) = after(msg, b"] Resetting ").or_else(|| after(msg, b": Resetting ")) {
        let end = rest.iter().position(|&b| b == b' ').unwrap_or(rest.len());
        let ring = Some(&rest[..end]).filter(|r| *r != b"chip" && !r.is_empty());
        return driver(GpuDriverEvent::ResetBegin, ring, (None, None));
    }
    None
}

/// A line of the kernel's amdgpu driver, or of RADV (Mesa's Vulkan driver) reporting what the kernel did to its
/// context. Shapes: `amdgpu 0000:03:00.0: amdgpu: ring comp_1.1.0 timeout, signaled seq=7, emitted seq=9` (kernel 6.x,
/// `amdgpu_job.c`), `[drm:amdgpu_job_timedout [amdgpu]] *ERROR* ring gfx_0.0.0 timeout, …` (older kernels), FreeBSD's
/// `[drm ERROR :amdgpu_job_timedout] …` and `drmn0: GPU reset begin!`.
pub(super) fn gpu_driver_line(msg: &[u8]) -> Option<EventKind<'_>> {
    if msg.starts_with(b"radv/amdgpu: ") || msg.starts_with(b"amdgpu: The CS has been cancelled") {
        // RADV: the kernel reset the GPU under this process's context (`radv_amdgpu_cs.c`); the device is lost.
        return find(msg, b"context is lost").map(|_| EventKind::DeviceLost { message: trim(msg) });
    }
    let intel = msg.starts_with(b"i915 ") || msg.starts_with(b"xe ");
    if !(intel || msg.starts_with(b"amdgpu") || msg.starts_with(b"[drm") || msg.starts_with(b"drmn")) {
        return None;
    }
    if let Some(kind) = intel_line(msg) {
        return Some(kind);
    }
    if intel {
        return None;
    }
    let word_after = |needle: &[u8]| -> Option<&[u8]> {
        let rest = after(msg, needle)?;
        let end = rest.iter().position(|&b| b == b' ' || b == b',').unwrap_or(rest.len());
        Some(&rest[..end]).filter(|w| !w.is_empty())
    };
    // `process NAME pid N thread …`: NAME may be empty (`process  pid 540118`).
    let pid_after = |needle: &[u8]| -> (Option<&[u8]>, Option<u32>) {
        let Some(rest) = after(msg, needle).map(trim_start) else { return (None, None) };
        let (name, tail) = match rest.strip_prefix(b"pid ") {
            Some(tail) => (&rest[..0], tail),
            None => match find(rest, b" pid ") {
                Some(at) => (&rest[..at], &rest[at + 5..]),
                None => return (None, None),
            },
        };
        (Some(name).filter(|n| !n.is_empty()), leading_u32(tail).map(|x| x.0))
    };
    if find(msg, b" timeout, signaled seq=").is_some() {
        return driver(GpuDriverEvent::RingTimeout, word_after(b"ring "), (None, None));
    }
    if find(msg, b"Process information: process ").is_some() {
        return driver(GpuDriverEvent::Process, None, pid_after(b"Process information: process "));
    }
    if find(msg, b":  Process ").is_some() {
        return driver(GpuDriverEvent::Process, None, pid_after(b":  Process "));
    }
    if find(msg, b"page fault").is_some() {
        return driver(GpuDriverEvent::PageFault, None, pid_after(b"for process "));
    }
    if find(msg, b"PROTECTION_FAULT_STATUS").is_some() {
        return driver(GpuDriverEvent::PageFault, None, (None, None));
    }
    if find(msg, b"GPU reset begin").is_some() {
        return driver(GpuDriverEvent::ResetBegin, None, (None, None));
    }
    if let Some(ring) = after(msg, b"Starting ").filter(|r| find(r, b" ring reset").is_some()) {
        let end = ring.iter().position(|&b| b == b' ').unwrap_or(ring.len());
        return driver(GpuDriverEvent::ResetBegin, Some(&ring[..end]), (None, None));
    }
    if find(msg, b"reset").is_some() && find(msg, b"succeeded").is_some() {
        return driver(GpuDriverEvent::ResetSucceeded, word_after(b"Ring "), (None, None));
    }
    if find(msg, b"reset").is_some() && find(msg, b"failed").is_some() {
        return driver(GpuDriverEvent::ResetFailed, word_after(b"Ring "), (None, None));
    }
    if find(msg, b"coredump").is_some() {
        return driver(GpuDriverEvent::Coredump, None, (None, None));
    }
    None
}
