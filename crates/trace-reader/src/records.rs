//! The typed records of a trace file, as read. Field names are those `trace_format::record` writes;
//! the round-trip tests of this crate write every record with those writers and read it back here.

use serde::{Deserialize, Serialize};

/// First line of a trace file.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Header {
    pub format: String,
    pub version: u32,
    pub pid: u32,
    pub ppid: u32,
    pub exe: String,
    #[serde(default)]
    pub cmdline: Vec<String>,
    /// Always `"monotonic"`: CLOCK_MONOTONIC nanoseconds.
    pub clock: String,
    pub start_ns: u64,
    #[serde(default)]
    pub interval_ms: u64,
    #[serde(default)]
    pub shape_buckets: u32,
    #[serde(default)]
    pub max_kernels: u32,
    /// The byte budget of the file (`BACKSCOPE_TRACE_MAX_BYTES`); 0: none, or a version 1 file.
    #[serde(default)]
    pub max_bytes: u64,
    #[serde(default)]
    pub observer: String,
    /// The program that wrote the trace (version 3; empty when not said).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub writer: String,
    /// Version 4: the segment of a rotating trace this file is (from 0; `BACKSCOPE_TRACE_ROTATE`); `None` for a
    /// trace that does not rotate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub segment: Option<u32>,
    /// Version 4: segments the rotating trace keeps, and each one's budget.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub segments_kept: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub segment_max_bytes: Option<u64>,
    /// Version 4: the file name of the segment before this one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous: Option<String>,
    /// The distinct dispatch sequences the Vulkan layer keeps (versions 3 and 4, added later); 0: the trace records no
    /// order (an older layer, order recording off, or the CUDA/HIP observer).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub max_sequences: u32,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// A Vulkan dispatch sequence (a `sequence` record): the pipelines one submitted command buffer dispatched, in order,
/// as runs of `(kernel id, dispatches in a row)`. Windows count its submissions.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sequence {
    /// From 1, in order of first submission (0, in windows, counts submissions whose order was not kept).
    #[serde(rename = "sequence")]
    pub id: u32,
    /// When it was first submitted (CLOCK_MONOTONIC ns): the request it belongs to.
    #[serde(default)]
    pub first_ns: u64,
    pub runs: Vec<(u32, u32)>,
}

impl Sequence {
    /// Its dispatches: the runs' lengths added.
    pub fn dispatches(&self) -> u64 {
        self.runs.iter().fold(0u64, |sum, &(_, n)| sum.saturating_add(n.into()))
    }
}

/// A statistic the driver reported for a Vulkan pipeline (version 3).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PipelineStat {
    pub executable: String,
    pub name: String,
    /// `null` in the file (a value JSON cannot hold) reads as NaN.
    #[serde(deserialize_with = "number_or_nan")]
    pub value: f64,
}

impl Eq for PipelineStat {}

fn number_or_nan<'de, D: serde::Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    Ok(Option::<f64>::deserialize(d)?.unwrap_or(f64::NAN))
}

/// A kernel definition line: `{"kernel":ID,"name":…,"api":…,"source":…}`; for a Vulkan pipeline
/// (version 3) also the device, SPIR-V hash, workgroup size and driver statistics.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KernelDef {
    #[serde(rename = "kernel")]
    pub id: u32,
    /// The name as the runtime knows it (mangled for C++ kernels); a Vulkan pipeline's debug name or
    /// `spirv:<hash>`.
    pub name: String,
    /// `cuda`, `cu`, `hip`, `hip_module`, `vulkan` or `overflow`.
    pub api: String,
    /// `register`, `get_function`, `runtime`, `synthetic`, `none`, `debug_name` or `spirv_hash`.
    #[serde(default)]
    pub source: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spirv_hash: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local_size: Option<[u32; 3]>,
    /// The loaded object the pipeline's SPIR-V bytes came from (`libggml-vulkan.so`), when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spirv_object: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stats: Vec<PipelineStat>,
}

/// Grid and block dimensions of a launch (for Vulkan: workgroup counts and workgroup size).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Shape {
    pub grid: [u32; 3],
    pub block: [u32; 3],
}

/// Launches of one kernel with one shape in one window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShapeCount {
    pub kernel: u32,
    pub shape: Shape,
    pub launches: u64,
}

/// A window line: what happened in `[t0, t1]` (CLOCK_MONOTONIC ns). Per-kernel lists hold only
/// kernels with a non-zero value.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Window {
    pub t0: u64,
    pub t1: u64,
    /// Executions per kernel: direct launches plus graph replays (Vulkan: dispatches submitted).
    pub counts: Vec<(u32, u64)>,
    /// Of `counts`, launches whose launch call returned an error.
    pub errors: Vec<(u32, u64)>,
    /// Of `counts`, executions that came from graph replays.
    pub graph: Vec<(u32, u64)>,
    /// Launches recorded into a stream capture (not executions).
    pub captured: Vec<(u32, u64)>,
    pub shapes: Vec<ShapeCount>,
    /// Executions whose shape was not among the kernel's first distinct shapes.
    pub other_shapes: Vec<(u32, u64)>,
    pub graph_launches: u64,
    pub unknown_graph_launches: u64,
    pub unattributed_captures: u64,
    /// Capture records dropped because the capture ended where no hook saw it.
    pub expired_captures: u64,
    /// Vulkan queue submissions that carried the window's dispatches (version 3).
    pub submits: u64,
    /// Submitted command buffers per dispatch sequence (`[sequence, n]`; 0: order not kept). Versions 3 and 4, added later.
    pub sequences: Vec<(u32, u64)>,
}

/// A warning line: `{"warning":CODE,"detail":…}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Warning {
    #[serde(rename = "warning")]
    pub code: String,
    #[serde(default)]
    pub detail: String,
}

/// The last line of a complete trace.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct End {
    pub end_ns: u64,
    pub reason: String,
}

/// The last line of a trace the observer stopped writing before the process ended:
/// `{"truncated":"budget"|"write_error","at_ns":…,"bytes":…,…}`. Launches after `at_ns` (and those
/// of the window being written then) are not in the file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Truncated {
    /// `budget` (the file reached `max_bytes`) or `write_error`.
    #[serde(rename = "truncated")]
    pub reason: String,
    pub at_ns: u64,
    /// Size of the file before this record.
    pub bytes: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_bytes: Option<u64>,
    /// For `write_error`: the system's message (`No space left on device (os error 28)`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl Truncated {
    /// Why the trace stops, for people: "its budget of 65536 bytes was spent", "writing failed
    /// (No space left on device (os error 28))".
    pub fn why(&self) -> String {
        match (self.reason.as_str(), self.max_bytes, &self.error) {
            ("budget", Some(max), _) => format!("its budget of {max} bytes (BACKSCOPE_TRACE_MAX_BYTES) was spent"),
            ("write_error", _, Some(error)) => format!("writing failed ({error})"),
            (reason, _, _) => format!("the observer stopped writing ({reason})"),
        }
    }
}

/// The last record of a segment of a rotating trace (version 4): the trace goes on in the file `next` (a file name
/// in the same directory).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rotated {
    #[serde(rename = "rotated")]
    pub next: String,
    pub at_ns: u64,
    /// Size of the file before this record.
    pub bytes: u64,
}

/// One launch a thread made shortly before a crash.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct CrashLaunch {
    pub kernel: u32,
    /// Start of the window that counts it.
    pub window_t0: u64,
    pub shape: Shape,
    /// The launch call returned an error.
    pub failed: bool,
}

/// One thread of a crash record: the runtime call it was inside, and its last launches, oldest first.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct CrashThread {
    pub tid: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub in_flight: Option<String>,
    pub launches: Vec<CrashLaunch>,
}

/// A fatal signal the observer caught (version 3), before the program's handler or the default
/// action took it. `threads[0]` is the thread that received it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Crash {
    pub seq: u32,
    pub signal: i32,
    /// `SIGSEGV`, `SIGABRT`, …
    pub signal_name: String,
    /// `si_code`: > 0 for a fault the kernel raised, <= 0 for a signal a process sent.
    pub code: i32,
    pub addr: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sender_pid: Option<u32>,
    pub at_ns: u64,
    pub tid: u32,
    /// The window open at the signal was written before this record.
    pub flushed: bool,
    pub threads: Vec<CrashThread>,
    /// Vulkan queues and their last submitted dispatches (written by the Vulkan layer; empty in the
    /// CUDA/HIP observer's records).
    pub queues: Vec<QueueAtLoss>,
    /// A `signal_returned` record followed: the program's own handler returned from the signal, so
    /// the program may have gone on.
    pub returned: bool,
}

/// Equal consecutive dispatches a Vulkan queue was given (version 3, crash and device-lost records).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct QueueDispatch {
    pub kernel: u32,
    /// The queue's submission that carried them, from 1.
    pub submit: u64,
    /// Workgroup counts.
    pub grid: [u32; 3],
    pub count: u32,
    /// The debug label open when they were recorded (ggml-vulkan's graph node, `MUL_MAT blk.0.attn_q`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
}

/// One Vulkan queue's last submitted dispatches, oldest first, as a crash or device-lost record
/// lists them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueAtLoss {
    pub queue: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<u32>,
    #[serde(default)]
    pub submits: u64,
    #[serde(default, deserialize_with = "raw_dispatches")]
    pub dispatches: Vec<QueueDispatch>,
    /// Dispatches left out because their pipeline was not defined in the file.
    #[serde(default)]
    pub omitted: u32,
    /// How far the GPU got (the layer's black box), when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<QueueProgress>,
}

/// How far the GPU got through a queue's followed submissions (a queue's `progress` in crash, device-lost and hang
/// records).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueProgress {
    /// `buffer_marker`: the GPU's own completion markers (the `in_flight` dispatches had started and not finished);
    /// `submission`: the layer's per-submission signal (`in_flight` are the first unfinished submission's
    /// dispatches, one or more of which ran).
    pub by: String,
    #[serde(default)]
    pub completed: u64,
    #[serde(default)]
    pub pending: bool,
    #[serde(default, deserialize_with = "raw_in_flight")]
    pub in_flight: Vec<InFlightDispatch>,
    #[serde(default)]
    pub more_in_flight: u32,
    #[serde(default)]
    pub not_started: u64,
    /// Pending only through command buffers no marker covered yet: not seen to finish, not shown unfinished.
    #[serde(default)]
    pub unconfirmed: bool,
}

impl QueueProgress {
    /// Whether `in_flight` names what ran (markers), not candidates (submissions).
    pub fn exact(&self) -> bool {
        self.by == "buffer_marker"
    }
}

/// A dispatch in flight: written as `[kernel, submission, index in its command buffer, grid]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct InFlightDispatch {
    pub kernel: u32,
    pub submit: u64,
    pub index: u32,
    pub grid: [u32; 3],
}

fn raw_in_flight<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<InFlightDispatch>, D::Error> {
    let raw = Vec::<(u32, u64, u32, [u32; 3])>::deserialize(d)?;
    Ok(raw.into_iter().map(|(kernel, submit, index, grid)| InFlightDispatch { kernel, submit, index, grid }).collect())
}

/// The layer's hang watcher saw pending GPU work make no progress (a `hang_ms` record).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hang {
    /// How long nothing progressed, in milliseconds.
    #[serde(rename = "hang_ms")]
    pub stalled_ms: u64,
    pub at_ns: u64,
    #[serde(default)]
    pub seq: u32,
    #[serde(default)]
    pub queues: Vec<QueueAtLoss>,
}

/// A remembered dispatch as written: `[kernel, submission, grid, count]`, then its label when it has one.
#[derive(Deserialize)]
#[serde(untagged)]
enum RawDispatch {
    Labelled(u32, u64, [u32; 3], u32, String),
    Plain(u32, u64, [u32; 3], u32),
}

fn raw_dispatches<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<QueueDispatch>, D::Error> {
    let raw = Vec::<RawDispatch>::deserialize(d)?;
    Ok(raw
        .into_iter()
        .map(|r| match r {
            RawDispatch::Labelled(kernel, submit, grid, count, label) => {
                QueueDispatch { kernel, submit, grid, count, label: Some(label) }
            }
            RawDispatch::Plain(kernel, submit, grid, count) => {
                QueueDispatch { kernel, submit, grid, count, label: None }
            }
        })
        .collect())
}

/// A Vulkan call that returned `VK_ERROR_DEVICE_LOST` (a `device_lost` record).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceLost {
    /// The call: `vkQueueSubmit`, `vkWaitForFences`, …
    #[serde(rename = "device_lost")]
    pub call: String,
    #[serde(default)]
    pub result: i32,
    pub at_ns: u64,
    #[serde(default)]
    pub seq: u32,
    #[serde(default)]
    pub tid: u32,
    #[serde(default)]
    pub queues: Vec<QueueAtLoss>,
    /// What drivers with `VK_EXT_device_fault` reported about the loss.
    #[serde(default)]
    pub faults: Vec<DeviceFault>,
}

/// One device's `vkGetDeviceFaultInfoEXT` answer in a `device_lost` record.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceFault {
    /// The trace's id of the device (a `device` record), when known.
    #[serde(default)]
    pub device: Option<u32>,
    #[serde(default)]
    pub description: String,
    /// `[kind, address, precision]`: `read_invalid`, `write_invalid`, `execute_invalid`, `instruction_pointer_*`.
    #[serde(default)]
    pub addresses: Vec<(String, u64, u64)>,
    /// `[description, code, data]` of the vendor's own fault information.
    #[serde(default)]
    pub vendor: Vec<(String, u64, u64)>,
    #[serde(default)]
    pub vendor_binary_bytes: u64,
}

impl Crash {
    /// Whether a process sent the signal (`kill`, `raise`, `abort`) rather than the CPU faulting.
    pub fn sent_by_process(&self) -> bool {
        self.code <= 0
    }
}

/// A GPU device a Vulkan layer saw (version 3).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Device {
    #[serde(rename = "device")]
    pub id: u32,
    #[serde(default)]
    pub api: String,
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub driver: String,
    #[serde(default)]
    pub driver_info: String,
    #[serde(default)]
    pub driver_version: u32,
    #[serde(default)]
    pub api_version: [u32; 3],
    #[serde(default)]
    pub vendor_id: u32,
    #[serde(default)]
    pub device_id: u32,
    #[serde(default)]
    pub device_type: String,
    #[serde(default)]
    pub subgroup_size: u32,
    #[serde(default)]
    pub subgroup_size_min: u32,
    #[serde(default)]
    pub subgroup_size_max: u32,
    #[serde(default)]
    pub integer_dot: bool,
    #[serde(default)]
    pub cooperative_matrix: bool,
    /// The shader cores (SMs, active CUs) as ggml-vulkan reads them from the driver; `None` in traces of layers
    /// that did not record it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shader_core_count: Option<u32>,
    /// Where that count came from: `VK_NV_shader_sm_builtins`, `VK_AMD_shader_core_properties2`, or `none` (the
    /// driver offers neither: ggml's count is 0, except on Intel, where ggml looks the device id up).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shader_core_count_from: Option<String>,
    #[serde(default)]
    pub flags: std::collections::BTreeMap<String, bool>,
    /// Present when the layer made the device answer from a profile (`backscope trace --impersonate`): the facts
    /// above are the profile's, the work ran on `real_name`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub impersonated: Option<Impersonated>,
}

/// The profile a device was impersonating and the device that really ran the work.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Impersonated {
    #[serde(default)]
    pub profile: String,
    #[serde(default)]
    pub profile_source: String,
    #[serde(default)]
    pub real_name: String,
    #[serde(default)]
    pub real_driver: String,
}

// Raw forms of the records whose format is compact arrays.

#[derive(Deserialize)]
pub(crate) struct RawWindow {
    window: (u64, u64),
    #[serde(default)]
    counts: Vec<(u32, u64)>,
    #[serde(default)]
    errors: Vec<(u32, u64)>,
    #[serde(default)]
    graph: Vec<(u32, u64)>,
    #[serde(default)]
    captured: Vec<(u32, u64)>,
    #[serde(default)]
    shapes: Vec<(u32, [u32; 3], [u32; 3], u64)>,
    #[serde(default)]
    other_shapes: Vec<(u32, u64)>,
    #[serde(default)]
    graph_launches: u64,
    #[serde(default)]
    unknown_graph_launches: u64,
    #[serde(default)]
    unattributed_captures: u64,
    #[serde(default)]
    expired_captures: u64,
    #[serde(default)]
    submits: u64,
    #[serde(default)]
    sequences: Vec<(u32, u64)>,
}

impl From<RawWindow> for Window {
    fn from(raw: RawWindow) -> Window {
        Window {
            t0: raw.window.0,
            t1: raw.window.1,
            counts: raw.counts,
            errors: raw.errors,
            graph: raw.graph,
            captured: raw.captured,
            shapes: raw
                .shapes
                .into_iter()
                .map(|(kernel, grid, block, launches)| ShapeCount { kernel, shape: Shape { grid, block }, launches })
                .collect(),
            other_shapes: raw.other_shapes,
            graph_launches: raw.graph_launches,
            unknown_graph_launches: raw.unknown_graph_launches,
            unattributed_captures: raw.unattributed_captures,
            expired_captures: raw.expired_captures,
            submits: raw.submits,
            sequences: raw.sequences,
        }
    }
}

/// A launch in a crash record as written: `[kernel, window t0, grid, block, failed]`.
type RawCrashLaunch = (u32, u64, [u32; 3], [u32; 3], u8);

#[derive(Deserialize)]
pub(crate) struct RawCrashThread {
    tid: u32,
    #[serde(default)]
    in_flight: Option<String>,
    #[serde(default)]
    launches: Vec<RawCrashLaunch>,
}

#[derive(Deserialize)]
pub(crate) struct RawCrash {
    crash: i32,
    #[serde(default)]
    signal: String,
    #[serde(default)]
    code: i32,
    #[serde(default)]
    addr: u64,
    #[serde(default)]
    sender_pid: Option<u32>,
    at_ns: u64,
    seq: u32,
    tid: u32,
    #[serde(default)]
    flushed: bool,
    #[serde(default)]
    threads: Vec<RawCrashThread>,
    #[serde(default)]
    queues: Vec<QueueAtLoss>,
}

impl From<RawCrash> for Crash {
    fn from(raw: RawCrash) -> Crash {
        Crash {
            seq: raw.seq,
            signal: raw.crash,
            signal_name: if raw.signal.is_empty() { format!("signal {}", raw.crash) } else { raw.signal },
            code: raw.code,
            addr: raw.addr,
            sender_pid: raw.sender_pid,
            at_ns: raw.at_ns,
            tid: raw.tid,
            flushed: raw.flushed,
            threads: raw
                .threads
                .into_iter()
                .map(|t| CrashThread {
                    tid: t.tid,
                    in_flight: t.in_flight,
                    launches: t
                        .launches
                        .into_iter()
                        .map(|(kernel, window_t0, grid, block, failed)| CrashLaunch {
                            kernel,
                            window_t0,
                            shape: Shape { grid, block },
                            failed: failed != 0,
                        })
                        .collect(),
                })
                .collect(),
            queues: raw.queues,
            returned: false,
        }
    }
}

#[derive(Deserialize)]
pub(crate) struct SignalReturned {
    pub signal_returned: u32,
}
