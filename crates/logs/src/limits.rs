//! The caps on memory and work that hold whatever the input.

/// Caps on memory and work, whatever the input.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Longest line kept, in bytes; the rest of a longer line is skipped and the line flagged. Real log
    /// lines run to a few KiB (Ollama's `server config` line, runner command lines).
    pub max_line: usize,
    /// A NUL byte within this many leading bytes makes the input a binary file (an error).
    pub binary_probe: usize,
    /// Timeline entries kept from the start of the log.
    pub timeline_head: usize,
    /// Timeline entries kept from the end of the log (where crashes are).
    pub timeline_tail: usize,
    pub max_crashes: usize,
    /// Frames kept per crash.
    pub max_frames: usize,
    /// Cause and consequence lines kept per crash.
    pub max_causes: usize,
    /// Ranges kept per line set (unrecognised, truncated, bad timestamps).
    pub max_ranges: usize,
    /// Entries kept per fact list (backends, devices, buffers, timings…).
    pub max_facts: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_line: 64 << 10,
            binary_probe: 8 << 10,
            timeline_head: 2000,
            timeline_tail: 2000,
            max_crashes: 256,
            max_frames: 64,
            max_causes: 32,
            max_ranges: 4096,
            max_facts: 256,
        }
    }
}
