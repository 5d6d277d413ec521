//! Kernel GPU-driver lines pasted beside a log: amdgpu ring timeouts, resets, page faults and coredumps, NVIDIA Xids,
//! Intel GPU hangs.

use crate::event::{EventKind, GpuDriver, GpuDriverEvent};

use super::text::{after, find, leading_u32, trim, trim_start};
use crate::patterns::{ByteSet, Needle};

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

/// The needles of the driver lines, each looked for by its least common byte; a message's [`ByteSet`] tells which of
/// those bytes it holds, and a needle whose byte it lacks is not searched (a driver line that names none of the events
/// below, the common case, is then read once instead of once per needle).
mod needles {
    use crate::patterns::Needle;

    pub(super) const GPU_HANG: Needle = Needle::new("GPU HANG: ");
    pub(super) const TIMEDOUT_JOB: Needle = Needle::new("Timedout job: ");
    pub(super) const ENGINE_RESET: Needle = Needle::new("Engine reset: engine_class=");
    pub(super) const BRACKET_RESETTING: Needle = Needle::new("] Resetting ");
    pub(super) const COLON_RESETTING: Needle = Needle::new(": Resetting ");
    pub(super) const RING_TIMEOUT: Needle = Needle::new(" timeout, signaled seq=");
    pub(super) const PROCESS_INFORMATION: Needle = Needle::new("Process information: process ");
    pub(super) const PROCESS: Needle = Needle::new(":  Process ");
    pub(super) const PAGE_FAULT: Needle = Needle::new("page fault");
    pub(super) const PROTECTION_FAULT: Needle = Needle::new("PROTECTION_FAULT_STATUS");
    pub(super) const RESET_BEGIN: Needle = Needle::new("GPU reset begin");
    pub(super) const STARTING: Needle = Needle::new("Starting ");
    pub(super) const RESET: Needle = Needle::new("reset");
    pub(super) const SUCCEEDED: Needle = Needle::new("succeeded");
    pub(super) const FAILED: Needle = Needle::new("failed");
    pub(super) const COREDUMP: Needle = Needle::new("coredump");
}

/// What follows the first `needle` in `msg` (whose bytes are `set`).
fn after_needle<'a>(msg: &'a [u8], set: &ByteSet, needle: &Needle) -> Option<&'a [u8]> {
    needle.find_with(msg, set).map(|at| &msg[at + needle.len()..])
}

/// Intel's i915 and xe drivers (`i915 0000:00:02.0: [drm] …`, `xe 0000:03:00.0: [drm] Tile0: GT0: …`, FreeBSD's
/// `drmn0: [drm] …`): a hang and the process it names, an engine or chip reset. `set` is the bytes of `msg`.
fn intel_line<'a>(msg: &'a [u8], set: &ByteSet) -> Option<EventKind<'a>> {
    use needles::*;
    if let Some(rest) = after_needle(msg, set, &GPU_HANG) {
        return driver(GpuDriverEvent::Hang, None, after(rest, b", in ").map_or((None, None), intel_process));
    }
    if let Some(rest) = after_needle(msg, set, &TIMEDOUT_JOB) {
        return driver(GpuDriverEvent::Hang, None, after(rest, b" in ").map_or((None, None), intel_process));
    }
    if let Some(rest) = after_needle(msg, set, &ENGINE_RESET) {
        let end = rest.iter().position(|&b| b == b',' || b == b' ').unwrap_or(rest.len());
        return driver(GpuDriverEvent::ResetBegin, Some(&rest[..end]).filter(|r| !r.is_empty()), (None, None));
    }
    if let Some(rest) = after_needle(msg, set, &BRACKET_RESETTING).or_else(|| after_needle(msg, set, &COLON_RESETTING))
    {
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
    use needles::*;
    if msg.starts_with(b"radv/amdgpu: ") || msg.starts_with(b"amdgpu: The CS has been cancelled") {
        // RADV: the kernel reset the GPU under this process's context (`radv_amdgpu_cs.c`); the device is lost.
        return find(msg, b"context is lost").map(|_| EventKind::DeviceLost { message: trim(msg) });
    }
    let intel = msg.starts_with(b"i915 ") || msg.starts_with(b"xe ");
    if !(intel || msg.starts_with(b"amdgpu") || msg.starts_with(b"[drm") || msg.starts_with(b"drmn")) {
        return None;
    }
    let set = &ByteSet::of(msg);
    if let Some(kind) = intel_line(msg, set) {
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
    fn pid_after(rest: Option<&[u8]>) -> (Option<&[u8]>, Option<u32>) {
        let Some(rest) = rest.map(trim_start) else { return (None, None) };
        let (name, tail) = match rest.strip_prefix(b"pid ") {
            Some(tail) => (&rest[..0], tail),
            None => match find(rest, b" pid ") {
                Some(at) => (&rest[..at], &rest[at + 5..]),
                None => return (None, None),
            },
        };
        (Some(name).filter(|n| !n.is_empty()), leading_u32(tail).map(|x| x.0))
    }
    let has = |needle: &Needle| needle.find_with(msg, set).is_some();
    if has(&RING_TIMEOUT) {
        return driver(GpuDriverEvent::RingTimeout, word_after(b"ring "), (None, None));
    }
    if let Some(rest) = after_needle(msg, set, &PROCESS_INFORMATION) {
        return driver(GpuDriverEvent::Process, None, pid_after(Some(rest)));
    }
    if let Some(rest) = after_needle(msg, set, &PROCESS) {
        return driver(GpuDriverEvent::Process, None, pid_after(Some(rest)));
    }
    if has(&PAGE_FAULT) {
        return driver(GpuDriverEvent::PageFault, None, pid_after(after(msg, b"for process ")));
    }
    if has(&PROTECTION_FAULT) {
        return driver(GpuDriverEvent::PageFault, None, (None, None));
    }
    if has(&RESET_BEGIN) {
        return driver(GpuDriverEvent::ResetBegin, None, (None, None));
    }
    if let Some(ring) = after_needle(msg, set, &STARTING).filter(|r| find(r, b" ring reset").is_some()) {
        let end = ring.iter().position(|&b| b == b' ').unwrap_or(ring.len());
        return driver(GpuDriverEvent::ResetBegin, Some(&ring[..end]), (None, None));
    }
    let reset = has(&RESET);
    if reset && has(&SUCCEEDED) {
        return driver(GpuDriverEvent::ResetSucceeded, word_after(b"Ring "), (None, None));
    }
    if reset && has(&FAILED) {
        return driver(GpuDriverEvent::ResetFailed, word_after(b"Ring "), (None, None));
    }
    if has(&COREDUMP) {
        return driver(GpuDriverEvent::Coredump, None, (None, None));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The rules as they were before their needles were gated on the message's bytes, to compare against.
    mod before {
        use super::super::{driver, intel_process};
        use crate::classify::text::{after, find, leading_u32, trim, trim_start};
        use crate::event::{EventKind, GpuDriverEvent};

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
    }

    /// Every line of the logs, and driver lines of each shape with their needles cut, moved and doubled, read as before.
    #[test]
    fn driver_lines_read_as_before() {
        let mut lines: Vec<Vec<u8>> = Vec::new();
        for line in crate::patterns::repository_log_lines() {
            let message = crate::prefix::strip(&line).message.to_vec();
            lines.push(line);
            lines.push(message);
        }
        let heads = [
            "amdgpu 0000:03:00.0: amdgpu: ",
            "[drm:amdgpu_job_timedout [amdgpu]] *ERROR* ",
            "drmn0: [drm] ",
            "i915 0000:00:02.0: [drm] ",
            "xe 0000:00:02.0: [drm] GT0: ",
            "[drm ERROR :amdgpu_job_timedout] ",
            "radv/amdgpu: ",
            "amdgpu: The CS has been cancelled ",
        ];
        let bodies = [
            "ring comp_1.1.0 timeout, signaled seq=7, emitted seq=9",
            "Process information: process cosmic-comp pid 3503 thread cosmic-com:cs0 pid 3539",
            "Process information: process  pid 540118 thread  pid 540118",
            " Process gst-plugin-scan pid 4087 thread gst-plugin:cs0 pid 4213",
            "[gfxhub] page fault (src_id:0 ring:32 vmid:0 pasid:0, for process llama pid 12 thread x pid 13)",
            "[gfxhub] page fault (src_id:0 ring:32 vmid:0 pasid:0)",
            "GCVM_L2_PROTECTION_FAULT_STATUS:0x00000000",
            "GPU reset begin!",
            "Starting gfx_0.0.0 ring reset",
            "Starting the day",
            "Ring gfx_0.0.0 reset succeeded",
            "Ring comp_1.1.0 reset failed",
            "reset",
            "GPU reset succeeded, trying to resume",
            "AMDGPU device coredump file has been created",
            "GPU HANG: ecode 12:1:0020fffe, in xdg-desktop-por [1676]",
            "GPU HANG: ecode 7:0:0x87c3ffff, reason: Ring hung, action: reset",
            "Timedout job: seqno=24496, lrc_seqno=24496, guc_id=0, flags=0x13 in no process [-1]",
            "Engine reset: engine_class=ccs, logical_mask: 0x1, guc_id=2",
            "Resetting rcs0 for preemption time out",
            "Resetting chip for GuC failed to reset engine mask=0x1",
            "The CS has been cancelled because the context is lost. This context is innocent.",
            "Dumping IP State",
            "     PERMISSION_FAULTS: 0x0",
            "",
        ];
        for head in heads {
            for body in bodies {
                let line = format!("{head}{body}");
                for cut in 0..line.len().min(40) {
                    lines.push(line.as_bytes()[..line.len() - cut].to_vec());
                }
                lines.push(format!("{line} {body}").into_bytes());
                lines.push(format!("{head}x{body}").into_bytes());
            }
        }
        for line in &lines {
            assert_eq!(gpu_driver_line(line), before::gpu_driver_line(line), "{}", String::from_utf8_lossy(line));
        }
    }
}
