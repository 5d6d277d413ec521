//! A kernel log line kept for a traced run, and what the logs crate's classifier reads in it.

use logs::event::{EventKind, GpuDriverEvent};
use serde::{Deserialize, Serialize};

/// The stored file's name, in a trace directory (`trace`) or a run directory (`sweep --trace`).
pub const FILE_NAME: &str = "kernel-log.jsonl";

/// Longest text kept of one record, in bytes (the kernel's own records stay under 1 KiB).
pub const MAX_TEXT: usize = 4096;

/// A kept line: where it is stored and cited, the kernel's record, and what it says.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KernelLine {
    /// The stored file, as claims cite it, and the line of it that holds the record (from 1).
    pub file: String,
    pub line: u64,
    /// The kernel's sequence number of the record.
    pub seq: u64,
    /// The kernel's timestamp: microseconds since boot by the printk clock (CLOCK_MONOTONIC, as journald reads it).
    pub usec: u64,
    /// The syslog level (3 error, 4 warning, 6 info).
    pub level: u8,
    /// The record's text as the kernel wrote it (non-printable bytes escaped as `\xNN`).
    pub text: String,
    /// The record's `DEVICE=` (`+pci:0000:03:00.0`), when it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<String>,
    pub event: GpuDriverEvent,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ring: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub process: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    /// An NVIDIA Xid's number.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<u32>,
}

/// What the logs crate reads in one kernel line, when it is a GPU-driver line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GpuFields {
    pub event: GpuDriverEvent,
    pub ring: Option<String>,
    pub process: Option<String>,
    pub pid: Option<u32>,
    pub code: Option<u32>,
}

/// The GPU-driver fields of `text` (a record's text), or `None` for every other kernel line. The same classifier reads
/// pasted logs (`backscope logs`), so a line joins a live trace and a paste alike.
pub fn classify(text: &str) -> Option<GpuFields> {
    let c = logs::classify::classify(text.as_bytes(), &mut logs::classify::Context::default());
    let EventKind::GpuDriver(d) = c.kind else { return None };
    let s = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    Some(GpuFields { event: d.event, ring: d.ring.map(s), process: d.process.map(s), pid: d.pid, code: d.code })
}

impl KernelLine {
    /// The line for `text`, when it is a GPU-driver line: `file` and `line` say where it is stored.
    pub fn new(
        file: String,
        line: u64,
        (seq, usec, level): (u64, u64, u8),
        text: String,
        device: Option<String>,
    ) -> Option<KernelLine> {
        let f = classify(&text)?;
        Some(KernelLine {
            file,
            line,
            seq,
            usec,
            level,
            text,
            device,
            event: f.event,
            ring: f.ring,
            process: f.process,
            pid: f.pid,
            code: f.code,
        })
    }

    /// `[12345.678901] amdgpu …`: the line as `dmesg` prints it.
    pub fn dmesg(&self) -> String {
        format!("[{:>5}.{:06}] {}", self.usec / 1_000_000, self.usec % 1_000_000, self.text)
    }

    /// A trigger opens an incident: the GPU stopped or failed in a job (the rest follow one: the process named,
    /// resets, coredumps).
    pub fn is_trigger(&self) -> bool {
        matches!(
            self.event,
            GpuDriverEvent::RingTimeout | GpuDriverEvent::PageFault | GpuDriverEvent::Xid | GpuDriverEvent::Hang
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gpu_lines_are_classified_and_others_are_not() {
        // ggml-org/llama.cpp#21724 (turn 8): the kernel 6.x amdgpu lines of a Vulkan device loss.
        let f = classify("amdgpu 0000:c2:00.0:  Process llama-server pid 12519 thread llama-server pid 12519").unwrap();
        assert_eq!(
            (f.event, f.process.as_deref(), f.pid),
            (GpuDriverEvent::Process, Some("llama-server"), Some(12519))
        );
        assert!(classify("backscope-test 1234: not a GPU line").is_none());
        assert!(classify("EXT4-fs (sda1): mounted filesystem").is_none());
        let l = KernelLine::new(
            "k".into(),
            1,
            (7, 12_345_678_901, 3),
            "amdgpu 0000:c2:00.0: ring gfx_0.0.0 timeout, signaled seq=166926, emitted seq=166928".into(),
            None,
        )
        .unwrap();
        assert!(l.is_trigger());
        assert_eq!(l.ring.as_deref(), Some("gfx_0.0.0"));
        assert_eq!(&l.dmesg()[..16], "[12345.678901] a");
    }
}
