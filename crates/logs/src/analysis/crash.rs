//! A crash incident as the report gives it: its phase, signal, causes and consequences, frames and signature.

use serde::Serialize;

use crate::event::GpuDriverEvent;
use crate::time::Timestamp;

use super::timeline::TimeBounds;
use crate::facts::Sourced;

/// Phase of a crash (see [`crate::analysis`] for the rules).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    Discovery,
    Load,
    FirstCompute,
    Decode,
    Unknown,
}

impl Phase {
    pub fn label(self) -> &'static str {
        match self {
            Phase::Discovery => "discovery",
            Phase::Load => "load",
            Phase::FirstCompute => "first compute",
            Phase::Decode => "decode",
            Phase::Unknown => "unknown",
        }
    }
}

/// A signal as the Go runtime reports it.
#[derive(Clone, Debug, Default, Serialize)]
pub struct SignalInfo {
    pub name: String,
    pub description: String,
    pub pc: Option<String>,
    pub addr: Option<String>,
    pub sigcode: Option<String>,
    /// `signal arrived during cgo execution`: the fault was in C/C++ code (ggml, a GPU runtime).
    pub in_foreign_code: bool,
    /// The Go runtime's `instruction bytes:` dump after a SIGILL (the bytes at PC), and its line.
    pub instruction_bytes: Option<Sourced<String>>,
    pub line: u64,
}

/// A line of a crash: a cause (assertion, error) or a consequence (terminated runner, HTTP 500).
#[derive(Clone, Debug, Serialize)]
pub struct CrashLine {
    pub kind: &'static str,
    pub text: String,
    pub line: u64,
    /// How many lines of the incident said exactly this (threads that hit the same assertion): `line` is the
    /// first of them.
    pub count: u64,
    /// The line as written (clipped), for quoting it.
    #[serde(skip)]
    pub raw: String,
    /// The last line that said it (`line` when `count` is 1): repeats on consecutive lines are threads printing
    /// at once, repeats far apart may be retries.
    pub last: u64,
}

/// A kernel GPU-driver line of a crash incident (amdgpu): a GPU job that timed out, whose job it was, a reset.
#[derive(Clone, Debug, Serialize)]
pub struct GpuDriverLine {
    pub event: GpuDriverEvent,
    pub ring: Option<String>,
    pub process: Option<String>,
    pub pid: Option<u32>,
    /// An NVIDIA Xid's number.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub code: Option<u32>,
    pub line: u64,
}

/// One attempt of an allocation retry loop (Ollama's new engine fits the model with fewer GPU layers after an
/// out-of-memory failure): the failure and the layer count it was made with.
#[derive(Clone, Debug, Serialize)]
pub struct Attempt {
    /// The out-of-memory line.
    pub line: u64,
    pub text: String,
    /// GPU layers of the load request before it (`GPULayers:N`), and that request's line.
    pub gpu_layers: Option<u32>,
    pub request_line: Option<u64>,
}

/// A stack frame of the crash.
#[derive(Clone, Debug, Serialize)]
pub struct Frame {
    /// Go function or native `module!symbol`, as written (arguments and offsets dropped).
    pub function: String,
    /// `file:line` of a Go frame.
    pub source: Option<String>,
    pub native: bool,
    pub line: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct Signature {
    pub id: String,
    pub text: String,
    pub frames: Vec<String>,
}

/// One crash incident.
#[derive(Clone, Debug, Serialize)]
pub struct Crash {
    /// First line of the incident.
    pub line: u64,
    pub offset: u64,
    pub t: Option<f64>,
    /// The first line has no timestamp of its own: `t` is the time of an earlier line, and `t_bounds` says
    /// between which times the crash was written.
    pub t_inherited: bool,
    pub t_bounds: Option<TimeBounds>,
    pub phase: Phase,
    /// Which rule decided the phase, in words.
    pub phase_rule: String,
    /// Lines the phase rests on.
    pub phase_lines: Vec<u64>,
    pub signal: Option<SignalInfo>,
    pub causes: Vec<CrashLine>,
    pub consequences: Vec<CrashLine>,
    /// Id of the crashing goroutine (the first dumped after the signal).
    pub goroutine: Option<u64>,
    pub frames: Vec<Frame>,
    pub frames_dropped: u64,
    /// The ggml op that was running when it failed (`MUL_MAT`, from `ggml_cuda_compute_forward: MUL_MAT failed`,
    /// a GPU error's location `ggml_cuda_op_mul_mat…` or a frame `ggml_compute_forward_mul_mat`), and its line.
    pub op: Option<Sourced<String>>,
    /// The attempts of an allocation retry loop that this incident gathers (empty when it is no such loop).
    pub attempts: Vec<Attempt>,
    /// The kernel's GPU-driver lines of this incident (a ring timeout, the process named, resets, a coredump).
    pub gpu_driver: Vec<GpuDriverLine>,
    /// The incident begins inside a crash dump whose header (the signal or panic line) is not in the log: the log
    /// starts mid-dump.
    pub header_cut: bool,
    pub signature: Signature,
    /// The last line of the incident.
    pub last_line: u64,
    /// The first line as written (clipped), for quoting it.
    #[serde(skip)]
    pub raw: String,
    #[serde(skip)]
    pub(super) time: Option<Timestamp>,
    /// The next timestamp after the first line, when its time is inherited.
    #[serde(skip)]
    pub(super) next_time: Option<Timestamp>,
}

/// A crash opened at `line`; `inherited`: `time` is that of an earlier line.
pub(super) fn new_crash(line: u64, offset: u64, time: Option<Timestamp>, inherited: bool) -> Crash {
    Crash {
        line,
        offset,
        t: None,
        t_inherited: inherited && time.is_some(),
        t_bounds: None,
        phase: Phase::Unknown,
        phase_rule: String::new(),
        phase_lines: Vec::new(),
        signal: None,
        causes: Vec::new(),
        consequences: Vec::new(),
        goroutine: None,
        frames: Vec::new(),
        frames_dropped: 0,
        op: None,
        attempts: Vec::new(),
        gpu_driver: Vec::new(),
        header_cut: false,
        signature: Signature { id: String::new(), text: String::new(), frames: Vec::new() },
        last_line: line,
        raw: String::new(),
        time,
        next_time: None,
    }
}
