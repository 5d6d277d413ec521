//! From events to findings: a timeline, the facts a log states (backends, devices, offload…), and crash
//! incidents with their phase and signature.
//!
//! [`Analyzer`] consumes the parser's events one at a time and keeps bounded state: the first
//! `timeline_head` and last `timeline_tail` timeline entries, at most `max_crashes` crashes with at most
//! `max_frames` frames each, at most `max_ranges` ranges of unrecognised lines. Past a cap it counts.
//! Crashes past `max_crashes` are delimited by the same rules as the others (each stays a crash of its own,
//! never merged into the next), placed and grouped by signature; only their details are not kept:
//! [`Report::crashes_total`] counts them all, [`Report::crashes`] holds the first `max_crashes`.
//!
//! # Crash incidents
//! A line that shows a failure by itself ([`EventKind::is_fatal`]: a signal, an assertion, a GPU or BLAS
//! error, a discovery failure, a terminated runner, `post predict … EOF`…) opens an incident when none is
//! open. Later failure lines, the crashing goroutine's frames (the first goroutine Go prints after the
//! signal), native backtrace frames and HTTP 5xx responses join it. It closes when a new runner starts,
//! when a second signal or a new cause follows a terminated runner, when a second runner is reported
//! terminated (a runner terminates once), or at the end of the log.
//!
//! # Phase of a crash
//! Each runner lifetime (from Ollama's `starting runner`/`starting llama server`/`starting llama-server`,
//! or from the start of the log) records milestones: model loading began (model loader, offload, model
//! buffers, `loading model`), warm-up began, the runner was ready (`runner started in N s`, llama-server
//! `model loaded`/`listening`), a request finished (an HTTP 2xx on an inference route, `print_timing`, slot
//! release), the current request's prompt was done. The crashing stack adds what code was running. The
//! first rule that holds decides:
//! 1. **discovery** — the incident starts with a GPU-discovery failure, or the runner was started
//!    without a model (Ollama's discovery runners), or the stack is in discovery code;
//! 2. **load** — the stack is in model-loading code (`llama_model_load*`, `LoadModelFromFile`, `loadModel`,
//!    context or projector creation);
//!    **first compute** — the stack is in the init function that runs the warm-up (`common_init_from_params`,
//!    `llama_init_from_gpt_params`): stack evidence outranks every rule below, llama-cli has no runner milestones;
//! 3. **decode** — a request had finished in this lifetime, or the current request's prompt was done;
//! 4. **first compute** — the runner was ready, or warm-up had begun, or the stack is in graph compute
//!    (`llama_decode`, `Decode`, `processBatch`, `graph_compute`): the first computation on the model;
//! 5. **load** — model loading had begun;
//! 6. **unknown** — the log shows none of this.
//!
//! The phase is an inference from the lines it cites (`phase_lines`), never more; `phase_rule` names the rule that won.
//!
//! # Shapes of a crash
//! A paste may start inside a crash: a Go dump cut before its signal line (registers, a frame's source line, `created
//! by`), which opens an incident marked `header_cut`; ggml's backtrace in glibc's `backtrace_symbols` form behind any
//! prefix; libstdc++'s terminate path (an uncaught exception) without its `terminate called` line. The kernel's amdgpu
//! lines pasted beside it (a ring timeout, the process it names, resets, a devcoredump, a GPU page fault) open an
//! incident or join the open one (`gpu_driver`); a GPU hang after a finished reset is a new incident.
//!
//! # Times
//! A line without a timestamp of its own (a Go panic, a backtrace, llama.cpp output in an Ollama log) takes
//! the time of the last earlier timestamped line as `t`, marked `t_inherited`; it was written between that
//! time and the next later timestamp, given as `t_bounds` (`[lo, hi]`, `hi` null when no timestamp follows).
//! A later stamp in whole seconds bounds it by the end of that second. Renderers say an inherited time as
//! that bracket, never as a point.

use std::collections::{BTreeMap, VecDeque};

use serde::Serialize;

use crate::event::{lossy, BufferKind, Event, EventKind, GpuDriverEvent, TimingKind};
use crate::milestones::Meaning;
use crate::parser::Stats;
use crate::placement::{backend_of_path, FilteredGpu, Placement, Reason};
use crate::signature::{self, SIGNATURE_FRAMES};
use crate::slog::unquote;
use crate::time::{Clock, Timestamp};
use crate::Limits;

/// Version of the [`Report`] layout; bump on any change a consumer could notice.
pub const SCHEMA: &str = "backscope.logs/3";

/// Longest summary text kept per timeline entry or cause (characters).
const SUMMARY_CHARS: usize = 300;

/// The analysis of one log.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub schema: &'static str,
    pub stats: Stats,
    /// What produced the log, from the lines seen: `ollama` (v0.30+, llama-server runners),
    /// `ollama-go-runner` (before v0.30), `ollama` when the era cannot be told, `llama.cpp`, `unknown`.
    pub flavor: &'static str,
    /// Events per kind (see [`EventKind::name`]).
    pub counts: BTreeMap<&'static str, u64>,
    /// Lines no rule recognised.
    pub other: LineSet,
    /// Lines cut at the line cap.
    pub truncated: LineSet,
    /// Lines whose timestamp could not be read.
    pub bad_timestamps: LineSet,
    /// The clock relative times are measured on (`None`: the log has no timestamps).
    pub clock: Option<Clock>,
    pub timeline: Vec<TimelineEntry>,
    /// Timeline entries left out between the first and the last ones kept.
    pub timeline_elided: u64,
    /// Where in `timeline` the left-out entries were (the number of entries before them).
    pub timeline_elided_at: Option<usize>,
    pub facts: Facts,
    /// The first `max_crashes` crashes, in detail.
    pub crashes: Vec<Crash>,
    /// Every crash the log shows, kept in `crashes` or not.
    pub crashes_total: u64,
    /// Crashes counted (and grouped by signature) but not kept in `crashes`: `crashes_total - crashes.len()`.
    pub crashes_dropped: u64,
    /// Crashes grouped by signature, most frequent first; every crash counts, kept in detail or not. At most
    /// `max_crashes` distinct signatures are listed.
    pub signatures: Vec<SignatureGroup>,
    /// Crashes whose signature is not in `signatures` because that many distinct signatures were listed.
    pub signatures_dropped: u64,
    /// The state of the last runner when the log ends.
    pub ending: Ending,
}

/// How the log ends: what a caller that saw the process die needs to place the death.
#[derive(Clone, Debug, Serialize)]
pub struct Ending {
    pub last_line: u64,
    /// llama-server's `cleaning up before exit` in the last runner lifetime.
    pub orderly_shutdown: Option<u64>,
    /// A llama-server task had started and not finished when the log ends.
    pub request_in_progress: Option<u64>,
    /// The phase a crash right at the end would be in (the crash rules without a stack).
    pub phase: Phase,
    pub phase_rule: String,
    pub phase_lines: Vec<u64>,
    /// Where the log shows the last runtime begin: a runner start or the model loader's first line (`None`: a
    /// fragment that starts after that, whose "no crash" covers only its own lines).
    pub start_line: Option<u64>,
}

/// A set of line numbers as ranges (bounded).
#[derive(Clone, Debug, Default, Serialize)]
pub struct LineSet {
    pub count: u64,
    /// Inclusive ranges `[first, last]`, in order.
    pub ranges: Vec<(u64, u64)>,
    /// Lines not in `ranges` because the range cap was reached.
    pub unlisted: u64,
}

impl LineSet {
    fn add(&mut self, line: u64, cap: usize) {
        self.count += 1;
        if let Some(last) = self.ranges.last_mut() {
            if last.1 + 1 == line {
                last.1 = line;
                return;
            }
        }
        if self.ranges.len() < cap {
            self.ranges.push((line, line));
        } else {
            self.unlisted += 1;
        }
    }
}

/// One line of the timeline.
#[derive(Clone, Debug, Serialize)]
pub struct TimelineEntry {
    pub line: u64,
    pub offset: u64,
    /// Seconds since the log's first timestamp.
    pub t: Option<f64>,
    /// `t` is the time of an earlier line (this one has no timestamp of its own).
    pub t_inherited: bool,
    /// When `t_inherited`: the line was written between these two times (see [`TimeBounds`]).
    pub t_bounds: Option<TimeBounds>,
    pub kind: &'static str,
    pub summary: String,
    /// The line as written (lossy UTF-8, escape sequences kept; escape before display).
    pub raw: String,
    #[serde(skip)]
    time: Option<Timestamp>,
    /// The next timestamp after this line, when its own time is inherited.
    #[serde(skip)]
    next_time: Option<Timestamp>,
}

/// The time of a line without a timestamp of its own, as a bracket in seconds since the log's first
/// timestamp: `.0` is the time of the last earlier timestamped line, `.1` that of the next later one (`None`:
/// no timestamp follows, the line was written at or after `.0`). Serialised as `[lo, hi]`, `hi` null when none.
pub type TimeBounds = (f64, Option<f64>);

/// The bracket of an inherited time: `[time, next]` relative to `origin`.
fn bounds(origin: Option<Timestamp>, time: Option<Timestamp>, next: Option<Timestamp>) -> Option<TimeBounds> {
    let rel = |t: Timestamp| -> Option<f64> {
        let o = origin?;
        (t.clock == o.clock).then(|| (t.micros - o.micros) as f64 / 1e6)
    };
    Some((rel(time?)?, next.and_then(rel)))
}

/// What the log states about the runtime's setup (the last value wins where one is expected).
#[derive(Clone, Debug, Default, Serialize)]
pub struct Facts {
    pub backends: Vec<Backend>,
    pub devices: Vec<Device>,
    pub inference_compute: Vec<BTreeMap<&'static str, String>>,
    pub offload: Option<Offload>,
    pub flash_attention: Option<Sourced<String>>,
    pub graph: Option<Graph>,
    pub buffers: Vec<Buffer>,
    pub runner_started_s: Vec<Sourced<f64>>,
    pub http_status: BTreeMap<u16, u64>,
    /// The last timings (oldest first).
    pub timings: VecDeque<Timing>,
    /// Where the model ran: backends and how each is known, dropped GPUs, CPU serving, contradictions.
    pub placement: Placement,
    /// Failures the runtime handled and went on from (an allocation it retried another way): no crash.
    pub handled: Vec<Handled>,
}

/// A failure the runtime handled: the lines that said it failed, and the line where it went on.
#[derive(Clone, Debug, Serialize)]
pub struct Handled {
    /// What failed, as its first line says.
    pub failure: String,
    pub line: u64,
    pub last_line: u64,
    /// The line where the runtime went on (a retry it announced, another allocation attempt).
    pub retry_line: u64,
    pub retry: String,
}

#[derive(Clone, Debug, Serialize)]
pub struct Sourced<T> {
    pub value: T,
    pub line: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct Backend {
    pub name: String,
    pub path: String,
    pub line: u64,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct Device {
    /// `CUDA`, `ROCm`, `MUSA` or `Vulkan`.
    pub backend: String,
    pub index: u32,
    pub name: String,
    pub arch: Option<String>,
    pub compute_capability: Option<String>,
    pub vmm: Option<bool>,
    pub wave_size: Option<u32>,
    pub vram_mib: Option<u64>,
    pub driver: Option<String>,
    pub uma: Option<bool>,
    pub fp16: Option<bool>,
    pub warp_size: Option<u32>,
    pub int_dot: Option<bool>,
    pub matrix_cores: Option<String>,
    pub line: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct Offload {
    pub offloaded: u32,
    pub total: u32,
    pub line: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct Graph {
    pub nodes: Option<u64>,
    pub splits: Option<u64>,
    pub line: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct Buffer {
    pub device: String,
    pub kind: BufferKind,
    pub mib: f64,
    pub line: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct Timing {
    pub which: TimingKind,
    pub ms: f64,
    pub tokens: Option<u64>,
    pub line: u64,
}

/// Phase of a crash (see the module documentation for the rules).
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
    time: Option<Timestamp>,
    /// The next timestamp after the first line, when its time is inherited.
    #[serde(skip)]
    next_time: Option<Timestamp>,
}

#[derive(Clone, Debug, Serialize)]
pub struct SignatureGroup {
    pub id: String,
    pub text: String,
    pub count: u64,
    pub phases: Vec<Phase>,
    /// First line of each crash with this signature (bounded).
    pub crash_lines: Vec<u64>,
}

/// Bytes of the contiguous ring that hold a tail entry's line; a longer line is kept whole beside it.
const TAIL_STRIDE: usize = 512;

/// A timeline entry kept as its raw line until the report is assembled.
#[derive(Debug, Default)]
struct TailSlot {
    line: u64,
    offset: u64,
    time: Option<Timestamp>,
    inherited: bool,
    next_time: Option<Timestamp>,
    /// The line's length; up to [`TAIL_STRIDE`] bytes it is in the ring, a longer one in `long`.
    len: usize,
    long: Vec<u8>,
}

/// The last timeline entries, their lines in one contiguous ring of fixed strides (written in order, so the copy of
/// each line streams through the cache instead of touching one heap buffer per entry).
#[derive(Debug, Default)]
struct Tail {
    slots: Vec<TailSlot>,
    bytes: Vec<u8>,
    /// Where the next entry goes, and how many are kept.
    next: usize,
    len: usize,
}

impl Tail {
    /// Keep `raw` as the newest entry of at most `cap`; returns whether the oldest one was dropped for it.
    fn push(&mut self, cap: usize, raw: &[u8], head: TailSlot) -> bool {
        if self.slots.len() < cap {
            self.slots.resize_with(cap, TailSlot::default);
            self.bytes.resize(cap * TAIL_STRIDE, 0);
        }
        let i = self.next;
        let slot = &mut self.slots[i];
        let long = std::mem::take(&mut slot.long);
        *slot = TailSlot { long, ..head };
        slot.len = raw.len();
        if raw.len() <= TAIL_STRIDE {
            self.bytes[i * TAIL_STRIDE..i * TAIL_STRIDE + raw.len()].copy_from_slice(raw);
        } else {
            slot.long.clear();
            slot.long.extend_from_slice(raw);
        }
        self.next = (i + 1) % cap;
        let dropped = self.len == cap;
        self.len = (self.len + 1).min(cap);
        dropped
    }

    /// Ring positions of the last `n` entries, oldest first.
    fn last(&self, n: usize) -> impl Iterator<Item = usize> + '_ {
        let cap = self.slots.len().max(1);
        let n = n.min(self.len);
        (self.len - n..self.len).map(move |k| (self.next + cap - self.len + k) % cap)
    }

    fn raw(&self, i: usize) -> &[u8] {
        let slot = &self.slots[i];
        if slot.len <= TAIL_STRIDE {
            &self.bytes[i * TAIL_STRIDE..i * TAIL_STRIDE + slot.len]
        } else {
            &slot.long
        }
    }

    /// The kept entries, oldest first, as timeline entries.
    fn entries(&self) -> Vec<TimelineEntry> {
        let (mut scratch, mut json) = (Vec::new(), Vec::new());
        self.last(self.len).map(|i| self.slots[i].entry(self.raw(i), &mut scratch, &mut json)).collect()
    }
}

impl TailSlot {
    /// Re-read the line (classification does not depend on earlier lines for timeline kinds).
    fn entry(&self, raw: &[u8], scratch: &mut Vec<u8>, json: &mut Vec<u8>) -> TimelineEntry {
        let text: &[u8] = if raw.contains(&0x1b) {
            crate::parser::strip_ansi(raw, scratch);
            scratch
        } else {
            raw
        };
        let stripped = crate::prefix::strip(text).message;
        let message: &[u8] =
            if stripped.first() == Some(&b'{') && crate::jsonline::decode(stripped, json) { json } else { stripped };
        let kind = crate::classify::classify(message, &mut crate::classify::Context::default()).kind;
        TimelineEntry {
            line: self.line,
            offset: self.offset,
            t: None,
            t_inherited: self.inherited,
            t_bounds: None,
            kind: kind.name(),
            summary: summary(&kind, message.starts_with(b"time=")),
            raw: clip(lossy(raw).into_owned()),
            time: self.time,
            next_time: self.next_time,
        }
    }
}

/// Milestones of one runner lifetime.
#[derive(Clone, Copy, Debug, Default)]
struct Lifetime {
    start: Option<u64>,
    /// The line where the log shows this runtime begin: a runner started, or the model loader's first line.
    began: Option<u64>,
    discovery_runner: bool,
    loading: Option<u64>,
    warmup: Option<u64>,
    ready: Option<u64>,
    request_done: Option<u64>,
    prompt_done: Option<u64>,
    /// A llama-server task began and has not finished, or a request's prompt was being processed.
    request_open: Option<u64>,
    /// A llama-server task numbered above 0 began: the server had run earlier tasks (it numbers them from 0).
    earlier_tasks: Option<(u64, u64)>,
    shutdown: Option<u64>,
    /// The time of the `ready` line and the load time the runner reported (`runner started in N s`).
    ready_time: Option<Timestamp>,
    started_s: Option<f64>,
    /// An HTTP 2xx that was the load-only request Ollama's CLI sends when a model starts (not a computation).
    load_only: Option<u64>,
    /// A 2xx on `/api/generate` when the runner's ready line is not in the log: it may be that load-only request.
    maybe_load_only: Option<u64>,
    /// The last allocation attempt of a load retry loop (`msg=load request="{Operation:fit … GPULayers:N …}"`).
    attempt: Option<(u64, Option<u32>)>,
}

/// An open incident.
#[derive(Debug)]
struct Open {
    crash: Crash,
    at_open: Lifetime,
    /// Frames are being collected from the crashing goroutine.
    in_crashing_goroutine: bool,
    /// A goroutine dump began (native frames after it are not the crash's).
    go_dump_started: bool,
    terminated: bool,
    discovery_failure: bool,
    /// A line of the incident names graph compute (an op that failed, `ggml_compute_forward_*`).
    compute_line: Option<u64>,
    /// The kernel reported a GPU or ring reset finished: a later GPU hang is a new incident.
    gpu_reset_done: bool,
    /// The incident's allocation failures were followed by a retry the runtime announced, and nothing failed since:
    /// the line of that retry and what it says.
    recovered: Option<(u64, String)>,
}

impl Open {
    /// The incident so far is allocation failures only: no signal, no abort, no death of the runner.
    fn only_allocation_failures(&self) -> bool {
        let c = &self.crash;
        !self.terminated
            && c.signal.is_none()
            && c.consequences.is_empty()
            && c.causes.iter().any(|x| x.kind == "out_of_memory")
            && c.causes.iter().all(|x| matches!(x.kind, "out_of_memory" | "gpu_error_location"))
    }

    fn new(crash: Crash, at_open: Lifetime) -> Self {
        Open {
            crash,
            at_open,
            in_crashing_goroutine: false,
            go_dump_started: false,
            terminated: false,
            discovery_failure: false,
            compute_line: None,
            gpu_reset_done: false,
            recovered: None,
        }
    }
}

/// A crash opened at `line`; `inherited`: `time` is that of an earlier line.
fn new_crash(line: u64, offset: u64, time: Option<Timestamp>, inherited: bool) -> Crash {
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

/// Builds a [`Report`] from events.
#[derive(Debug)]
pub struct Analyzer {
    limits: Limits,
    counts: [u64; EventKind::NAMES.len()],
    other: LineSet,
    truncated: LineSet,
    bad_timestamps: LineSet,
    clock: Option<Clock>,
    last_time: Option<Timestamp>,
    head: Vec<TimelineEntry>,
    /// The last entries as raw lines in reused buffers: their summaries are made at the end, so the
    /// timeline costs no allocation per line once the head is full.
    tail: Tail,
    elided: u64,
    facts: Facts,
    lifetime: Lifetime,
    open: Option<Open>,
    crashes: Vec<Crash>,
    crashes_total: u64,
    groups: Vec<SignatureGroup>,
    signatures_dropped: u64,
    saw_ollama: bool,
    saw_llama_server_runner: bool,
    saw_go_runner: bool,
    saw_llama: bool,
    gpu_backend: String,
    last_line: u64,
    last_offset: u64,
    /// The log's first timestamp: relative times count from it.
    origin: Option<Timestamp>,
    /// Entries whose time is inherited and which wait for the next timestamp to close their bracket: the
    /// head entries from this index on, the last `pending_tail` tail slots, the kept crashes from this index on
    /// (and the open one).
    pending_head: Option<usize>,
    pending_tail: usize,
    pending_crashes: Option<usize>,
    /// The frames of the last Python traceback (innermost last) and the line of its last frame: a Python launcher
    /// (KoboldCpp's) prints them before the exception that a native crash became.
    python_frames: Vec<Frame>,
    python_frames_line: u64,
}

impl Analyzer {
    pub fn new(limits: Limits) -> Self {
        Analyzer {
            limits,
            counts: [0; EventKind::NAMES.len()],
            other: LineSet::default(),
            truncated: LineSet::default(),
            bad_timestamps: LineSet::default(),
            clock: None,
            last_time: None,
            head: Vec::new(),
            tail: Tail::default(),
            elided: 0,
            facts: Facts::default(),
            lifetime: Lifetime::default(),
            open: None,
            crashes: Vec::new(),
            crashes_total: 0,
            groups: Vec::new(),
            signatures_dropped: 0,
            saw_ollama: false,
            saw_llama_server_runner: false,
            saw_go_runner: false,
            saw_llama: false,
            gpu_backend: String::new(),
            last_line: 0,
            last_offset: 0,
            origin: None,
            pending_head: None,
            pending_tail: 0,
            pending_crashes: None,
            python_frames: Vec::new(),
            python_frames_line: 0,
        }
    }

    /// Record that the process writing the log died, as its supervisor saw it (e.g. `killed by signal 11
    /// (SIGSEGV)`): a log often stops without a word when a process is killed. The death joins the open
    /// incident, or becomes a crash at the last line, placed in a phase by the same rules. Its cause line
    /// has line number 0: it comes from the caller, not from the log.
    pub fn process_exit(&mut self, description: &str) {
        if self.open.is_none() {
            // The death was seen after the last line: at or after its time, never a timestamp later.
            let crash = new_crash(self.last_line, self.last_offset, self.last_time, true);
            self.open = Some(Open::new(crash, self.lifetime));
        }
        if let Some(open) = self.open.as_mut() {
            let text = clip(format!("process exit: {description}"));
            let line = CrashLine { kind: "process_exit", raw: String::new(), text, line: 0, count: 1, last: 0 };
            if open.crash.causes.is_empty() && open.crash.signal.is_none() {
                open.crash.causes.push(line);
            } else {
                open.crash.consequences.push(line);
            }
        }
    }

    /// Take one event.
    pub fn event(&mut self, e: &Event<'_>) {
        self.counts[e.kind.index()] += 1;
        self.last_line = e.line;
        self.last_offset = e.offset;
        let cap = self.limits.max_ranges;
        if e.flags.truncated {
            self.truncated.add(e.line, cap);
        }
        if e.flags.bad_timestamp {
            self.bad_timestamps.add(e.line, cap);
        }
        let time = self.own_time(e);
        if let Some(own) = time {
            self.last_time = time;
            // The line's own stamp, not the finer earlier one `own_time` may have kept in its stead: a stamp in
            // whole seconds says the line was written before the end of that second.
            let stamp = e.time.filter(|t| t.clock == own.clock).unwrap_or(own);
            let upper = if stamp.micros % 1_000_000 == 0 {
                Timestamp { micros: stamp.micros.saturating_add(1_000_000), ..stamp }
            } else {
                stamp
            };
            self.close_brackets(Some(upper));
        }
        let slog_line = e.text.starts_with(b"time=");
        if !self.saw_ollama {
            self.saw_ollama = slog_line
                || e.text.starts_with(b"[GIN]")
                || matches!(e.kind, EventKind::GoFrame { function } if find_bytes(function, b"ollama").is_some());
        }
        if let Some(before) = e.before {
            // The message the line began with (a progress line the crash cut short) happened first.
            let kind = before.kind();
            self.counts[kind.index()] += 1;
            self.lifecycle(&Event { kind, before: None, ..*e }, time);
        }
        if matches!(e.kind, EventKind::Other) {
            self.other.add(e.line, cap);
            if slog_line {
                self.slog_backend_hints(e);
                self.scheduler_hints(e);
            } else {
                if self.open.is_some() {
                    self.failed_call_hints(e);
                }
                self.front_end_hints(e);
            }
            return;
        }
        if let EventKind::NativeFrame(f) = e.kind {
            if f.module.is_some_and(|m| m.ends_with(b".py")) {
                self.python_frame(e, &f);
                return;
            }
        }
        self.saw_llama |= !slog_line && !e.kind.is_trace();
        self.lifecycle(e, time);
        self.facts(e, slog_line);
        self.incident(e, slog_line, time);
        if !e.kind.is_trace() {
            self.push_timeline(e, slog_line, time);
        }
    }

    /// A line with a time of its own closes the bracket of every inherited time since the last such line.
    /// Each pending entry is visited once, so this costs nothing per line beyond the entries themselves.
    fn close_brackets(&mut self, next: Option<Timestamp>) {
        if let Some(from) = self.pending_head.take() {
            for entry in self.head.iter_mut().skip(from).filter(|e| e.t_inherited) {
                entry.next_time = next;
            }
        }
        let (cap, len, at) = (self.tail.slots.len().max(1), self.tail.len, self.tail.next);
        for k in len - self.pending_tail.min(len)..len {
            let slot = &mut self.tail.slots[(at + cap - len + k) % cap];
            if slot.inherited {
                slot.next_time = next;
            }
        }
        self.pending_tail = 0;
        if let Some(from) = self.pending_crashes.take() {
            for crash in self.crashes.iter_mut().skip(from).filter(|c| c.t_inherited && c.next_time.is_none()) {
                crash.next_time = next;
            }
        }
        if let Some(open) = self.open.as_mut().filter(|o| o.crash.t_inherited && o.crash.next_time.is_none()) {
            open.crash.next_time = next;
        }
    }

    /// The event's time if it is on the log's clock (the clock of the first timestamp seen).
    fn own_time(&mut self, e: &Event<'_>) -> Option<Timestamp> {
        let t = e.time?;
        match self.clock {
            None => {
                self.clock = Some(t.clock);
                self.origin = Some(t);
                Some(t)
            }
            Some(c) if c == t.clock => {
                // A whole-second stamp (Gin, a journal) written in the same second as a finer earlier one
                // (slog): the finer one is the better estimate, and time does not run backwards.
                match self.last_time {
                    Some(last)
                        if t.micros % 1_000_000 == 0 && (t.micros..t.micros + 1_000_000).contains(&last.micros) =>
                    {
                        Some(last)
                    }
                    _ => Some(t),
                }
            }
            Some(_) => None,
        }
    }

    fn lifecycle(&mut self, e: &Event<'_>, time: Option<Timestamp>) {
        use EventKind::*;
        let l = e.line;
        // A request that finished after a crash line was written did not run before it: while an incident is open,
        // answers do not count as finished requests.
        let crashed = self.open.is_some();
        match e.kind {
            RunnerStarting { cmd, with_model } => {
                if find_bytes(cmd, b"llama-server").is_some() {
                    self.saw_llama_server_runner = true;
                } else {
                    self.saw_go_runner = true;
                }
                self.close_incident();
                self.lifetime = Lifetime {
                    start: Some(l),
                    began: Some(l),
                    discovery_runner: !with_model,
                    loading: with_model.then_some(l),
                    ..Lifetime::default()
                };
            }
            ModelLoading { .. } => {
                self.lifetime.loading.get_or_insert(l);
                self.lifetime.began.get_or_insert(l);
                self.lifetime.discovery_runner = false;
            }
            LayersOffloaded { .. } | DeviceUsed { .. } => {
                self.lifetime.loading.get_or_insert(l);
                self.lifetime.discovery_runner = false;
            }
            // The model's buffers, the context's KV, compute and output buffers and its graph are set up while loading.
            BufferSize { .. } | Graph { .. } => {
                self.lifetime.loading.get_or_insert(l);
            }
            Warmup => {
                self.lifetime.warmup.get_or_insert(l);
            }
            RunnerStarted { seconds } if self.lifetime.ready.is_none() => {
                self.lifetime.ready = Some(l);
                self.lifetime.ready_time = time;
                self.lifetime.started_s = Some(seconds);
            }
            ServerReady => {
                self.lifetime.ready.get_or_insert(l);
            }
            Milestone { index, number } => self.milestone(l, index, number),
            RequestStarted { task } => {
                self.lifetime.prompt_done = None;
                self.lifetime.request_open = Some(l);
                if let Some(t) = task.filter(|&t| t > 0) {
                    self.lifetime.earlier_tasks.get_or_insert((l, t));
                }
            }
            // A request's prompt is being processed (KoboldCpp's progress has no task line before it).
            Progress { decoding: false, .. } => {
                self.lifetime.request_open.get_or_insert(l);
            }
            PromptDone { .. } | Progress { decoding: true, .. } => {
                self.lifetime.prompt_done.get_or_insert(l);
            }
            Shutdown => self.lifetime.shutdown = Some(l),
            RequestDone { .. } | Timing { which: TimingKind::Total, .. } if !crashed => {
                self.lifetime.request_done = Some(l);
                self.lifetime.prompt_done = None;
                self.lifetime.request_open = None;
            }
            HttpRequest { status, path, latency, .. }
                if (200..300).contains(&status) && is_inference_route(path) && !crashed =>
            {
                if self.is_load_only(path, latency, time) {
                    self.lifetime.load_only = Some(l);
                } else if path.starts_with(b"/api/generate")
                    && self.lifetime.ready_time.is_none()
                    && self.lifetime.request_done.is_none()
                {
                    // Without the runner's ready line the load-only request cannot be told from a computation.
                    self.lifetime.maybe_load_only.get_or_insert(l);
                } else {
                    self.lifetime.request_done = Some(l);
                    self.lifetime.prompt_done = None;
                }
            }
            _ => {}
        }
    }

    /// A line of the era table ([`crate::milestones`]).
    fn milestone(&mut self, l: u64, index: u16, number: Option<u32>) {
        let Some(row) = crate::milestones::table().get(index) else { return };
        if row.era.starts_with("ollama") {
            self.saw_ollama = true;
            self.saw_go_runner = true;
        }
        let crashed = self.open.is_some();
        // Another allocation attempt after allocation failures: the runtime handled them (Ollama's fit loop asks the
        // runner again with fewer layers; llama.cpp retries without pipeline parallelism, L src/llama-context.cpp:680).
        let retry = row.meaning == Meaning::Retry || (row.meaning == Meaning::Load && row.number_after.is_some());
        if let Some(open) = self.open.as_mut().filter(|o| retry && o.only_allocation_failures()) {
            open.recovered = Some((l, format!("{}: {}", row.meaning.label(), row.pattern)));
        }
        let lt = &mut self.lifetime;
        match row.meaning {
            Meaning::Discovery => {
                if lt.loading.is_none() {
                    lt.discovery_runner = true;
                }
            }
            Meaning::VocabOnly => {
                // The model-loader lines before it were a tokenizer-only load (Ollama's server reads the vocabulary
                // itself), not the runner's load.
                lt.loading = None;
            }
            Meaning::RunnerStart => {
                lt.began.get_or_insert(l);
                if !lt.discovery_runner {
                    lt.loading.get_or_insert(l);
                }
            }
            Meaning::Load => {
                lt.loading.get_or_insert(l);
                lt.discovery_runner = false;
                if row.number_after.is_some() {
                    lt.attempt = Some((l, number));
                }
            }
            Meaning::Ready => {
                lt.ready.get_or_insert(l);
            }
            Meaning::RequestStarted => {
                lt.prompt_done = None;
                lt.request_open = Some(l);
            }
            Meaning::PromptDone => {
                lt.prompt_done.get_or_insert(l);
            }
            Meaning::RequestDone if !crashed => {
                lt.request_done = Some(l);
                lt.prompt_done = None;
                lt.request_open = None;
            }
            Meaning::RequestDone => {}
            Meaning::Compute => {
                if let Some(open) = self.open.as_mut() {
                    open.compute_line.get_or_insert(l);
                }
            }
            Meaning::Retry => {}
        }
    }

    /// Ollama's CLI (`ollama run`) first sends an empty `/api/generate` that only loads the model: it is answered
    /// as soon as the runner is up, in about the runner's start time and in the second the runner reported
    /// ready. Such an answer is no computation on the model (O24 `cmd/cmd.go:469-517` loadOrUnloadModel sends a
    /// `GenerateRequest` without a prompt; `server/routes.go:429-436` answers it, `done_reason` "load").
    fn is_load_only(&self, path: &[u8], latency: Option<&[u8]>, time: Option<Timestamp>) -> bool {
        let lt = &self.lifetime;
        if lt.request_done.is_some() || !(path.starts_with(b"/api/generate") || path.starts_with(b"/api/chat")) {
            return false;
        }
        let (Some(ready), Some(started), Some(at), Some(latency)) =
            (lt.ready_time, lt.started_s, time, latency.and_then(go_duration_s))
        else {
            return false;
        };
        let gap = (at.micros - ready.micros) as f64 / 1e6;
        at.clock == ready.clock && (-1.0..=1.0).contains(&gap) && latency + 0.5 >= started && latency <= started + 1.5
    }

    /// An Ollama line no rule claims may still name the backend: a `library=ROCm` field (`msg="gpu memory"`), the
    /// library directories it uses (a `…/lib/ollama/cuda_v13` directory in any field).
    fn slog_backend_hints(&mut self, e: &Event<'_>) {
        let cap = self.limits.max_facts;
        let field = find_bytes(e.text, b" library=").is_some();
        let path = find_bytes(e.text, b"lib/ollama/").is_some();
        if !(field || path) || says_not_used(e.text) {
            return;
        }
        if let Some(lib) = crate::slog::get(e.text, b"library").filter(|_| field) {
            let lib = lossy(lib).into_owned();
            if !lib.eq_ignore_ascii_case("cpu") && !lib.is_empty() {
                self.facts.placement.backend(&lib, "Ollama's library field", format!("library={lib}"), e.line, cap);
            }
        }
        if path {
            let line = lossy(e.text);
            let found = line
                .split([' ', '"', '[', ']', '='])
                .filter(|w| w.contains("lib/ollama/"))
                .find_map(|w| backend_of_path(w).filter(|b| *b != "CPU").map(|b| (b, w.to_string())));
            if let Some((b, w)) = found {
                self.facts.placement.backend(b, "runner library path", clip(w), e.line, cap);
            }
        }
    }

    /// Ollama's scheduler logs each runner with its inference library, size and GPU memory (`runner.inference="[{ID:0
    /// Library:Vulkan}]" runner.size="2.3 GiB" runner.vram="2.3 GiB"`, older releases `runner.inference=cuda`), and the
    /// devices a runner enumerated (`msg="runner enumerated devices" devices="[{DeviceID:{ID:… Library:CUDA} Name:CUDA0
    /// Description:NVIDIA GeForce RTX 4070 FilterID: …}]"`, O `discover/runner.go`).
    fn scheduler_hints(&mut self, e: &Event<'_>) {
        let cap = self.limits.max_facts;
        let text = e.text;
        let runner = find_bytes(text, b" runner.").is_some();
        if !runner && find_bytes(text, b" devices=\"[{").is_none() {
            return;
        }
        if let Some(inference) = crate::slog::get(text, b"runner.inference").filter(|_| runner) {
            let value = lossy(inference).into_owned();
            let mut libraries: Vec<&str> =
                value.split("Library:").skip(1).map(|l| l.split(['}', ' ']).next().unwrap_or("")).collect();
            if libraries.is_empty() {
                libraries.push(value.as_str());
            }
            for lib in libraries.into_iter().filter(|l| !l.is_empty() && !l.eq_ignore_ascii_case("cpu")) {
                let evidence = format!("runner.inference={}", clip(value.clone()));
                self.facts.placement.backend(lib, "Ollama's scheduler record", evidence, e.line, cap);
            }
        }
        if let (Some(size), Some(vram)) =
            (crate::slog::get(text, b"runner.size"), crate::slog::get(text, b"runner.vram"))
        {
            self.facts.placement.scheduler_memory = Some(crate::placement::SchedulerMemory {
                size: unquote(size).into_owned(),
                vram: unquote(vram).into_owned(),
                line: e.line,
            });
        }
        if let Some(devices) = crate::slog::get(text, b"devices").filter(|d| d.starts_with(b"[{")) {
            let devices = unquote(devices).into_owned();
            for entry in devices.split("Name:").skip(1).take(cap) {
                let name = entry.split(' ').next().unwrap_or("");
                let Some(description) =
                    entry.split_once("Description:").and_then(|(_, d)| d.split(" FilterID:").next())
                else {
                    continue;
                };
                let Some(backend) = crate::placement::backend_of_device(name) else { continue };
                let digits = name.bytes().rev().take_while(u8::is_ascii_digit).count();
                let index = name[name.len() - digits..].parse().unwrap_or(0);
                let dev = Device {
                    backend: backend.to_string(),
                    index,
                    name: clip(description.to_string()),
                    line: e.line,
                    ..Device::default()
                };
                push_device(&mut self.facts.devices, dev, cap);
            }
        }
    }

    /// Settings a front end logs before it loads a model: LM Studio's resolved GPU offload (`  Num Offload Layers: 39`
    /// in its `Resolved GPU config options:` block, `… with raw num offload layers '0' and context length …` in its
    /// estimate).
    fn front_end_hints(&mut self, e: &Event<'_>) {
        let text = e.text;
        if !matches!(text.first(), Some(b' ' | b'[')) {
            return;
        }
        let setting = if let Some(n) = text.strip_prefix(b"  Num Offload Layers: ") {
            Some(format!("Num Offload Layers: {}", lossy(n.trim_ascii())))
        } else if text
            .trim_ascii_start()
            .starts_with(b"[LM Studio] Model load size estimate with raw num offload layers '")
        {
            let n = after_bytes(text, b"layers '").and_then(|r| r.split(|&b| b == b'\'').next()).unwrap_or_default();
            Some(format!("raw num offload layers '{}' (LM Studio's load estimate)", lossy(n)))
        } else {
            None
        };
        if let Some(text) = setting {
            self.facts.placement.requested_offload = Some(crate::placement::Reason { text: clip(text), line: e.line });
        }
    }

    /// The call that failed, as the line after a CUDA-named error prints it: `hipMalloc((void **) &ptr, size)` says the
    /// build is HIP (ROCm), whatever name the error line used (ggml's HIP build printed `CUDA error` before mid-2024).
    fn failed_call_hints(&mut self, e: &Event<'_>) {
        let call = e.text.trim_ascii_start();
        let api = call.iter().take_while(|b| b.is_ascii_alphanumeric() || **b == b'_').count();
        if api > 3 && call.get(api) == Some(&b'(') && call.starts_with(b"hip") {
            let cap = self.limits.max_facts;
            let what = format!("{} failed", lossy(&call[..api]));
            self.facts.placement.backend("ROCm", "failing HIP call", what, e.line, cap);
        }
    }

    /// A frame of a Python traceback (`File "koboldcpp.py", line 351, in load_model`): kept until the exception that
    /// ends the traceback opens a crash, which takes them as its stack.
    fn python_frame(&mut self, e: &Event<'_>, f: &crate::event::NativeFrame<'_>) {
        if e.line > self.python_frames_line + 4 {
            self.python_frames.clear();
        }
        self.python_frames_line = e.line;
        if self.python_frames.len() < self.limits.max_frames {
            let function = signature::native_function(
                f.module.map(|m| lossy(m)).as_deref(),
                f.symbol.map(|s| lossy(s)).as_deref(),
            );
            if let Some(function) = function {
                self.python_frames.push(Frame { function, source: None, native: true, line: e.line });
            }
        }
    }

    /// What a line says about where the model ran.
    fn placement(&mut self, e: &Event<'_>, slog_line: bool) {
        use EventKind::*;
        let text =
            |b: &[u8]| -> String { clip(if slog_line { unquote(b).into_owned() } else { lossy(b).into_owned() }) };
        let cap = self.limits.max_facts;
        let gpu = if self.gpu_backend.is_empty() { "CUDA/ROCm" } else { self.gpu_backend.as_str() };
        let p = &mut self.facts.placement;
        match e.kind {
            BackendLoaded { backend, path } => {
                p.backend_with(&lossy(backend), "library path", || text(path), e.line, cap)
            }
            BufferSize { device, .. } => {
                let d = lossy(device);
                if let Some(b) = crate::placement::backend_of_device(&d) {
                    p.backend_with(b, "buffer", || format!("{} buffer", text(device)), e.line, cap);
                }
            }
            NativeFrame(f)
                if f.module.is_some_and(|m| GPU_LIBRARY_HINTS.iter().any(|h| find_bytes(m, h).is_some())) =>
            {
                if let Some(b) = f.module.map(text).as_deref().and_then(backend_of_path).filter(|b| *b != "CPU") {
                    p.backend(b, "crashing frame's library", text(f.module.unwrap_or_default()), e.line, cap);
                }
            }
            VulkanDevice(_) | DevicesFound { .. } | DeviceLost { .. } | OutOfMemory { .. }
                if e.text.starts_with(b"ggml_vulkan: ") =>
            {
                p.backend_with("Vulkan", "ggml_vulkan lines", || clip(lossy(e.text).into_owned()), e.line, cap)
            }
            GgmlAssert { file, .. } | Abort { file, .. } if find_bytes(file, b"ggml-cuda").is_some() => {
                p.backend(gpu, "failing ggml-cuda code", text(file), e.line, cap)
            }
            GgmlAssert { file, .. } | Abort { file, .. } if find_bytes(file, b"ggml-vulkan").is_some() => {
                p.backend("Vulkan", "failing ggml-vulkan code", text(file), e.line, cap)
            }
            // Only a line with a path (or a KoboldCpp library name) can name one.
            Milestone { .. } | RunnerStarting { .. }
                if memchr::memchr2(b'/', b'\\', e.text).is_some() || find_bytes(e.text, b"koboldcpp_").is_some() =>
            {
                let line = lossy(e.text);
                let found = line
                    .split([' ', '"', '='])
                    .filter(|w| w.contains('/') || w.contains('\\') || w.starts_with("koboldcpp_"))
                    .find_map(|w| backend_of_path(w).map(|b| (b, w)));
                if let Some((backend, path)) = found.filter(|_| !says_not_used(e.text)) {
                    p.backend(backend, "runner library path", clip(path.to_string()), e.line, cap);
                }
            }
            InferenceCompute(ic) => {
                if let Some(lib) = ic.library {
                    let lib = text(lib);
                    if lib.eq_ignore_ascii_case("cpu") {
                        p.inference_cpu.get_or_insert(e.line);
                    }
                    p.backend(&lib, "inference compute", format!("library={lib}"), e.line, cap);
                }
            }
            DevicesFound { backend, count } if count > 0 => {
                p.backend(&text(backend), "device initialisation", format!("{count} device(s) found"), e.line, cap)
            }
            DevicesFound { backend, .. } if p.no_device.len() < cap => p.no_device.push(Reason {
                text: format!("{} found no device: {}", text(backend), clip(lossy(e.text).into_owned())),
                line: e.line,
            }),
            OpFailed { op } => {
                p.backend(gpu, "failing op", format!("{} failed in ggml_cuda_compute_forward", text(op)), e.line, cap)
            }
            GpuError { api, message } => {
                let api = text(api);
                // ggml's HIP build reported its errors as "CUDA" before mid-2024: the devices the log found name it.
                let backend = if api == "HIP" {
                    "ROCm".to_string()
                } else if api == "CUDA" && gpu != "CUDA" {
                    // `CUDA/ROCm` until a line of the log says which ([`Placement::judge`]).
                    gpu.to_string()
                } else {
                    api.clone()
                };
                p.backend(&backend, "GPU runtime error", format!("{api} error: {}", text(message)), e.line, cap)
            }
            BlasError { library, .. } => {
                p.backend("ROCm", "BLAS library error", format!("{} error", text(library)), e.line, cap)
            }
            // ROCr's hang report (`HW Exception by GPU node-N … reason :GPU Hang`) is ROCm's; every other is Vulkan's.
            DeviceLost { message } if message.starts_with(b"HW Exception") => {
                p.backend("ROCm", "ROCm runtime", summary(&e.kind, slog_line), e.line, cap)
            }
            DeviceLost { .. } => p.backend("Vulkan", "device lost", summary(&e.kind, slog_line), e.line, cap),
            UnsupportedGpu { gpu, supported, message } => {
                let gpu = FilteredGpu {
                    gpu: gpu.map(text),
                    reason: text(message),
                    supported: supported.map(text),
                    line: e.line,
                };
                p.filtered(gpu, cap);
            }
            OutOfMemory { message } | LoadError { error: message } => {
                // `unable to allocate CUDA0 buffer`: the device the allocation was for.
                let m = text(message);
                let found = m
                    .split([' ', '"', ':', ','])
                    .find_map(|w| crate::placement::backend_of_device(w).map(|b| (b, w.to_string())));
                if let Some((b, w)) = found {
                    p.backend(b, "device named in a line", format!("{w} in: {m}"), e.line, cap);
                }
            }
            DiscoveryFailure { .. } if p.discovery_failures.len() < cap => {
                p.discovery_failures.push(Reason { text: summary(&e.kind, slog_line), line: e.line });
            }
            _ => {}
        }
    }

    fn facts(&mut self, e: &Event<'_>, slog_line: bool) {
        use EventKind::*;
        self.placement(e, slog_line);
        let text = |b: &[u8]| -> String {
            if slog_line {
                unquote(b).into_owned()
            } else {
                lossy(b).into_owned()
            }
        };
        let cap = self.limits.max_facts;
        let f = &mut self.facts;
        match e.kind {
            BackendLoaded { backend, path } => {
                let known = f.backends.iter().any(|b| b.name.as_bytes() == backend && b.path.as_bytes() == path);
                if f.backends.len() < cap && !known {
                    f.backends.push(Backend { name: text(backend), path: text(path), line: e.line });
                }
            }
            DevicesFound { backend, count } if count > 0 && self.gpu_backend.as_bytes() != backend => {
                self.gpu_backend = text(backend)
            }
            GpuDevice(d) if seen_device(&mut f.devices, None, d.index, d.name, e.line) => {}
            VulkanDevice(v) if seen_device(&mut f.devices, Some("Vulkan"), v.index, v.name, e.line) => {}
            GpuDevice(d) => {
                let backend = if !self.gpu_backend.is_empty() && self.gpu_backend != "Vulkan" {
                    self.gpu_backend.clone()
                } else if d.arch.is_some() || is_amd_name(d.name) {
                    // An AMD GPU in a `Device N:` list is a HIP build's (CUDA lists NVIDIA GPUs only), whatever
                    // the list's header said or whether it was pasted.
                    "ROCm".to_string()
                } else {
                    "CUDA".to_string()
                };
                let dev = Device {
                    backend,
                    index: d.index,
                    name: text(d.name),
                    arch: d.arch.map(text),
                    compute_capability: d.compute_capability.map(text),
                    vmm: d.vmm,
                    wave_size: d.wave_size,
                    vram_mib: d.vram_mib,
                    line: e.line,
                    ..Device::default()
                };
                push_device(&mut f.devices, dev, cap);
            }
            VulkanDevice(v) => {
                let dev = Device {
                    backend: "Vulkan".to_string(),
                    index: v.index,
                    name: text(v.name),
                    driver: v.driver.map(text),
                    uma: v.uma,
                    fp16: v.fp16,
                    warp_size: v.warp_size,
                    int_dot: v.int_dot,
                    matrix_cores: v.matrix_cores.map(text),
                    line: e.line,
                    ..Device::default()
                };
                push_device(&mut f.devices, dev, cap);
            }
            DeviceListed { device, description, total_mib, .. } => {
                let name = text(device);
                let digits = name.bytes().rev().take_while(u8::is_ascii_digit).count();
                let (backend, index) = name.split_at(name.len() - digits);
                let dev = Device {
                    backend: backend.to_string(),
                    index: index.parse().unwrap_or(0),
                    name: text(description),
                    vram_mib: total_mib,
                    line: e.line,
                    ..Device::default()
                };
                push_device(&mut f.devices, dev, cap);
            }
            InferenceCompute(ic) if f.inference_compute.len() < cap => {
                let mut m = BTreeMap::new();
                let fields = [
                    ("id", ic.id),
                    ("library", ic.library),
                    ("compute", ic.compute),
                    ("name", ic.name),
                    ("description", ic.description),
                    ("libdirs", ic.libdirs),
                    ("driver", ic.driver),
                    ("type", ic.device_type),
                    ("total", ic.total),
                    ("available", ic.available),
                ];
                for (k, v) in fields {
                    if let Some(v) = v {
                        m.insert(k, text(v));
                    }
                }
                m.insert("line", e.line.to_string());
                f.inference_compute.push(m);
            }
            LayersOffloaded { offloaded, total } => f.offload = Some(Offload { offloaded, total, line: e.line }),
            FlashAttention { setting } => match f.flash_attention.as_mut() {
                Some(fa) if fa.value.as_bytes() == setting => fa.line = e.line,
                _ => f.flash_attention = Some(Sourced { value: text(setting), line: e.line }),
            },
            Graph { nodes, splits } => {
                let prev = f.graph.take();
                f.graph = Some(self::Graph {
                    nodes: nodes.or(prev.as_ref().and_then(|g| g.nodes)),
                    splits: splits.or(prev.as_ref().and_then(|g| g.splits)),
                    line: e.line,
                });
            }
            BufferSize { device, buffer, mib } => {
                if let Some(b) = f.buffers.iter_mut().find(|b| b.device.as_bytes() == device && b.kind == buffer) {
                    b.mib = mib;
                    b.line = e.line;
                } else if f.buffers.len() < cap {
                    f.buffers.push(Buffer { device: text(device), kind: buffer, mib, line: e.line });
                }
            }
            RunnerStarted { seconds } if f.runner_started_s.len() < cap => {
                f.runner_started_s.push(Sourced { value: seconds, line: e.line });
            }
            HttpRequest { status, .. } => *f.http_status.entry(status).or_insert(0) += 1,
            Timing { which, ms, tokens } => {
                if f.timings.len() >= cap {
                    f.timings.pop_front();
                }
                f.timings.push_back(self::Timing { which, ms, tokens, line: e.line });
            }
            _ => {}
        }
    }

    /// Closes the open incident where `e` begins a new one, and opens one where `e` can: whether an incident is open
    /// for `e` to join.
    fn open_or_close_incident(&mut self, e: &Event<'_>, slog_line: bool, time: Option<Timestamp>, fatal: bool) -> bool {
        use EventKind::*;
        // A new failure after the runner was reported terminated, or a second signal, is a new crash.
        if let Some(open) = &self.open {
            let new_cause =
                matches!(e.kind, Signal { .. } | GgmlAssert { .. } | Abort { .. } | GpuError { .. } | GoFatal { .. });
            // The same assertion again (another thread, or its echo in the runner's log) is this crash, not a new one.
            let repeated = new_cause && {
                let text = summary(&e.kind, slog_line);
                open.crash.causes.iter().any(|x| x.kind == e.kind.name() && x.text == text)
            };
            // The same death told again in the same record (LM Studio repeats it in each `Caused By:` of one error's
            // chain, lines without a time of their own); the same words in a later record are another death.
            let told_again = matches!(e.kind, RunnerTerminated { .. }) && time.is_none() && {
                let text = summary(&e.kind, slog_line);
                open.crash.consequences.iter().any(|x| x.kind == e.kind.name() && x.text == text)
            };
            if (open.terminated
                && new_cause
                && !repeated
                && !matches!(e.kind, Signal { .. } if open.crash.signal.is_none()))
                || (matches!(e.kind, Signal { .. }) && open.crash.signal.is_some())
                || (open.terminated && matches!(e.kind, RunnerTerminated { .. }) && !told_again)
                || (fatal && matches!(e.kind, GpuDriver(_)) && open.gpu_reset_done)
                // After a handled allocation failure, only another allocation failure continues the retry loop.
                || (open.recovered.is_some() && fatal && !matches!(e.kind, OutOfMemory { .. }))
            {
                self.close_incident();
            }
        }
        if self.open.is_none() {
            // A native backtrace is printed only when something aborts: it opens an incident too.
            // So is a goroutine dump: the Go runtime prints one when it dies, even where the log lost its cause; and so
            // is any line of a Go crash dump (a register, a frame's source, `created by`) that a paste starts with.
            let headerless =
                matches!(e.kind, RegisterDump | GoFrameSource { .. } | GoCreatedBy { .. } | GoFrame { .. });
            if !fatal && !headerless && !matches!(e.kind, NativeFrame(_) | Goroutine { .. }) {
                return false;
            }
            let mut crash = new_crash(e.line, e.offset, time.or(self.last_time), time.is_none());
            crash.raw = clip(lossy(e.raw).into_owned());
            if !self.python_frames.is_empty() && e.line <= self.python_frames_line + 4 {
                // The traceback just above is the stack the exception unwound (innermost last as Python prints it).
                crash.frames = self.python_frames.drain(..).rev().collect();
            }
            let mut open = Open::new(crash, self.lifetime);
            if headerless {
                // The frames before the first goroutine header belong to a goroutine whose header is cut: which one
                // crashed cannot be told, so none of them is taken for the crashing stack.
                open.go_dump_started = true;
                header_cut(&mut open.crash, e, "the log starts inside a Go crash dump (registers, goroutine frames), which the Go runtime prints only when a fatal signal or panic kills it; the signal line is above the fragment", self.limits.max_causes);
            }
            // Past the cap too the incident is followed in full (its signal, frames and causes, all bounded):
            // what closes it and what it is grouped with depend on them.
            self.open = Some(open);
        }
        true
    }

    fn incident(&mut self, e: &Event<'_>, slog_line: bool, time: Option<Timestamp>) {
        use EventKind::*;
        let fatal = e.kind.is_fatal();
        if !self.open_or_close_incident(e, slog_line, time, fatal) {
            return;
        }
        let max_frames = self.limits.max_frames;
        let max_lines = self.limits.max_causes;
        let Some(open) = self.open.as_mut() else { return };
        let c = &mut open.crash;
        let text = |b: &[u8]| -> String {
            let s = if slog_line { unquote(b).into_owned() } else { lossy(b).into_owned() };
            clip(s)
        };
        if fatal {
            open.recovered = None;
        }
        let mut joined = true;
        match e.kind {
            Signal { signal, description } => {
                let info = c.signal.get_or_insert_with(SignalInfo::default);
                info.name = text(signal);
                info.description = text(description);
                info.line = e.line;
            }
            SignalContext { pc, addr, sigcode } => {
                if let Some(info) = c.signal.as_mut() {
                    info.pc = pc.map(text);
                    info.addr = addr.map(text);
                    info.sigcode = sigcode.map(text);
                } else {
                    joined = false;
                }
            }
            SignalInForeignCode => {
                c.signal.get_or_insert_with(SignalInfo::default).in_foreign_code = true;
            }
            InstructionBytes { bytes } => match c.signal.as_mut() {
                Some(info) => info.instruction_bytes = Some(Sourced { value: text(bytes), line: e.line }),
                None => joined = false,
            },
            OpFailed { op } => {
                c.op = Some(Sourced { value: text(op), line: e.line });
                open.compute_line.get_or_insert(e.line);
                push_line(&mut c.causes, e, summary(&e.kind, slog_line), max_lines);
            }
            GpuErrorLocation { function, .. } => {
                if c.op.is_none() && is_op_function(function) {
                    c.op = Some(Sourced { value: text(function), line: e.line });
                }
                push_line(&mut c.causes, e, summary(&e.kind, slog_line), max_lines);
            }
            OutOfMemory { .. } => {
                record_attempt(c, self.lifetime.attempt, e, slog_line, max_lines);
                push_line(&mut c.causes, e, summary(&e.kind, slog_line), max_lines);
            }
            Goroutine { id, .. } => {
                if c.causes.is_empty() && c.signal.is_none() && c.consequences.is_empty() {
                    let text = "a Go goroutine dump without the line that says why the runtime died";
                    header_cut(c, e, text, max_lines);
                }
                if !open.go_dump_started {
                    open.go_dump_started = true;
                    open.in_crashing_goroutine = true;
                    c.goroutine = Some(id);
                } else {
                    open.in_crashing_goroutine = false;
                    joined = false;
                }
            }
            GoFrame { function } => {
                if open.in_crashing_goroutine {
                    push_frame(
                        c,
                        Frame { function: text(function), source: None, native: false, line: e.line },
                        max_frames,
                    );
                } else {
                    joined = false;
                }
            }
            GoFrameSource { file, line } => {
                if open.in_crashing_goroutine {
                    if let Some(last) = c.frames.last_mut().filter(|f| !f.native && f.source.is_none()) {
                        last.source = Some(format!("{}:{line}", lossy(file)));
                    }
                } else {
                    joined = false;
                }
            }
            GoCreatedBy { .. } | GoTraceDetail => joined = open.in_crashing_goroutine,
            RegisterDump => {}
            GpuDriver(d) => gpu_driver_joins(open, e, &d, fatal, slog_line, max_lines),
            NativeFrame(frame) => joined = native_frame_joins(open, e, &frame, max_frames),
            PostPredictError { .. } | RunnerTerminated { .. } | CompletionError { .. } => {
                if matches!(e.kind, RunnerTerminated { .. }) {
                    open.terminated = true;
                }
                push_line(&mut c.consequences, e, summary(&e.kind, slog_line), max_lines);
            }
            HttpRequest { status, .. } if status >= 500 => {
                push_line(&mut c.consequences, e, summary(&e.kind, slog_line), max_lines);
            }
            DiscoveryFailure { .. } => {
                if c.causes.is_empty() && c.signal.is_none() {
                    open.discovery_failure = true;
                }
                push_line(&mut c.causes, e, summary(&e.kind, slog_line), max_lines);
            }
            _ if fatal || matches!(e.kind, GpuErrorLocation { .. }) => {
                push_line(&mut c.causes, e, summary(&e.kind, slog_line), max_lines)
            }
            _ => joined = false,
        }
        if joined {
            open.crash.last_line = e.line;
        }
    }

    fn close_incident(&mut self) {
        let Some(open) = self.open.take() else { return };
        if let Some((retry_line, retry)) = open.recovered {
            // Handled: no crash. What failed and where the runtime went on are kept as facts.
            if self.facts.handled.len() < self.limits.max_facts {
                let first = open.crash.causes.first();
                self.facts.handled.push(Handled {
                    failure: first.map(|x| x.text.clone()).unwrap_or_default(),
                    line: open.crash.line,
                    last_line: open.crash.last_line,
                    retry_line,
                    retry,
                });
            }
            return;
        }
        let mut crash = open.crash;
        let cause_line = |pred: &dyn Fn(&CrashLine) -> bool| crash.causes.iter().find(|x| pred(x)).map(|x| x.line);
        let evidence = CrashEvidence {
            line: Some(crash.line),
            discovery_failure: open.discovery_failure,
            frames: &crash.frames,
            compute_line: open.compute_line,
            load_error: cause_line(&|x| x.kind == "load_error").or_else(|| {
                // Ollama's words for a runner that died before it was ready, wherever they are quoted (a JSON wrapper,
                // the runner-terminated line): O24 server/sched.go "error loading llama server", v0.1.17
                // llm/llama.go:459 "error starting llama runner".
                const LOAD_FAILED: [&str; 3] =
                    ["error loading llama server", "error starting llama runner", "error loading model"];
                crash
                    .causes
                    .iter()
                    .chain(&crash.consequences)
                    .find(|x| LOAD_FAILED.iter().any(|w| x.raw.contains(w)))
                    .map(|x| x.line)
            }),
            k_shift: cause_line(&|x| x.text.contains("K-shift")),
        };
        let (phase, rule, lines) = decide_phase(&open.at_open, evidence);
        crash.phase = phase;
        crash.phase_rule = rule;
        crash.phase_lines = lines;
        crash.signature = signature_of(&crash, |text| {
            // A crash like one grouped before has its id already: the hash is computed once per signature.
            self.groups.iter().find(|g| g.text == text).map(|g| g.id.clone())
        });
        self.crashes_total += 1;
        let room = self.groups.len() < self.limits.max_crashes;
        match self.groups.iter_mut().find(|g| g.id == crash.signature.id) {
            Some(g) => {
                g.count += 1;
                if !g.phases.contains(&crash.phase) {
                    g.phases.push(crash.phase);
                }
                if g.crash_lines.len() < self.limits.max_causes {
                    g.crash_lines.push(crash.line);
                }
            }
            None if room => self.groups.push(SignatureGroup {
                id: crash.signature.id.clone(),
                text: crash.signature.text.clone(),
                count: 1,
                phases: vec![crash.phase],
                crash_lines: vec![crash.line],
            }),
            None => self.signatures_dropped += 1,
        }
        if self.crashes.len() < self.limits.max_crashes {
            if crash.t_inherited && crash.next_time.is_none() && self.pending_crashes.is_none() {
                self.pending_crashes = Some(self.crashes.len());
            }
            self.crashes.push(crash);
        }
    }

    fn push_timeline(&mut self, e: &Event<'_>, slog_line: bool, time: Option<Timestamp>) {
        let (time, inherited) = match time {
            Some(t) => (Some(t), false),
            None => (self.last_time, self.last_time.is_some()),
        };
        if self.head.len() < self.limits.timeline_head {
            if inherited && self.pending_head.is_none() {
                self.pending_head = Some(self.head.len());
            }
            self.head.push(TimelineEntry {
                line: e.line,
                offset: e.offset,
                t: None,
                t_inherited: inherited,
                t_bounds: None,
                kind: e.kind.name(),
                summary: summary(&e.kind, slog_line),
                raw: clip(lossy(e.raw).into_owned()),
                time,
                next_time: None,
            });
            return;
        }
        if self.limits.timeline_tail == 0 {
            self.elided += 1;
            return;
        }
        let head = TailSlot { line: e.line, offset: e.offset, time, inherited, ..TailSlot::default() };
        if self.tail.push(self.limits.timeline_tail, e.raw, head) {
            self.elided += 1;
        }
        // Pending slots are the last ones; those that fell off the front are gone.
        self.pending_tail = (self.pending_tail + usize::from(inherited)).min(self.tail.len);
    }

    /// Finish: close the open incident and assemble the report.
    pub fn finish(mut self, stats: Stats) -> Report {
        self.close_incident();
        let facts = &mut self.facts;
        facts.placement.judge(facts.offload.as_ref(), &facts.buffers);
        let (phase, phase_rule, phase_lines) = decide_phase(&self.lifetime, CrashEvidence::default());
        let ending = Ending {
            last_line: self.last_line,
            orderly_shutdown: self.lifetime.shutdown,
            request_in_progress: self.lifetime.request_open,
            phase,
            phase_rule,
            phase_lines,
            start_line: self.lifetime.began,
        };
        let origin = self.origin;
        let rel = |t: Option<Timestamp>| -> Option<f64> {
            let (t, o) = (t?, origin?);
            (t.clock == o.clock).then(|| (t.micros - o.micros) as f64 / 1e6)
        };
        let elided_at = (self.elided > 0).then_some(self.head.len());
        let tail: Vec<TimelineEntry> = self.tail.entries();
        let mut timeline: Vec<TimelineEntry> = self.head.into_iter().chain(tail).collect();
        for entry in &mut timeline {
            entry.t = rel(entry.time);
            if entry.t_inherited {
                entry.t_bounds = bounds(origin, entry.time, entry.next_time);
            }
        }
        for crash in &mut self.crashes {
            crash.t = rel(crash.time);
            if crash.t_inherited {
                crash.t_bounds = bounds(origin, crash.time, crash.next_time);
            }
        }
        self.groups.sort_by(|a, b| b.count.cmp(&a.count).then(a.crash_lines.first().cmp(&b.crash_lines.first())));
        let flavor = if self.saw_llama_server_runner {
            "ollama"
        } else if self.saw_go_runner {
            "ollama-go-runner"
        } else if self.saw_ollama {
            "ollama"
        } else if self.saw_llama {
            "llama.cpp"
        } else {
            "unknown"
        };
        Report {
            schema: SCHEMA,
            stats,
            flavor,
            counts: EventKind::NAMES.iter().zip(self.counts).filter(|(_, n)| *n > 0).map(|(k, n)| (*k, n)).collect(),
            other: self.other,
            truncated: self.truncated,
            bad_timestamps: self.bad_timestamps,
            clock: self.clock,
            timeline,
            timeline_elided: self.elided,
            timeline_elided_at: elided_at,
            facts: self.facts,
            crashes_dropped: self.crashes_total - self.crashes.len() as u64,
            crashes: self.crashes,
            crashes_total: self.crashes_total,
            signatures: self.groups,
            signatures_dropped: self.signatures_dropped,
            ending,
        }
    }
}

/// A Go `time.Duration` as Gin prints it (`2.345678s`, `1m2.5s`, `567.8ms`, `35.141µs`), in seconds.
pub fn go_duration_s(text: &[u8]) -> Option<f64> {
    let s = std::str::from_utf8(text).ok()?.trim();
    let mut total = 0.0;
    let mut rest = s;
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let n = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(rest.len());
        let value: f64 = rest[..n].parse().ok()?;
        rest = &rest[n..];
        let (factor, len) =
            [("h", 3600.0), ("ms", 1e-3), ("m", 60.0), ("s", 1.0), ("µs", 1e-6), ("us", 1e-6), ("ns", 1e-9)]
                .iter()
                .find(|(u, _)| rest.starts_with(u))
                .map(|(u, f)| (*f, u.len()))?;
        total += value * factor;
        rest = &rest[len..];
    }
    Some(total)
}

/// Substrings of a library path that can name a GPU backend ([`backend_of_path`] decides): a frame's module is only
/// read for the backend when it has one.
const GPU_LIBRARY_HINTS: [&[u8]; 6] = [b"cuda", b"rocm", b"hip", b"vulkan", b"ggml-", b"koboldcpp_"];

fn find_bytes(h: &[u8], needle: &[u8]) -> Option<usize> {
    crate::find_in(h, needle)
}

fn after_bytes<'a>(h: &'a [u8], needle: &[u8]) -> Option<&'a [u8]> {
    find_bytes(h, needle).map(|i| &h[i + needle.len()..])
}

/// A line that names a library or device only to say it is not used (`skipping …`, `… skipped at user's request`,
/// `disabled`): no evidence that the backend ran.
fn says_not_used(text: &[u8]) -> bool {
    const WORDS: [&[u8]; 6] = [b"skipping", b"skipped", b"Skipping", b"not loading", b"at user's request", b"ignoring"];
    WORDS.iter().any(|w| find_bytes(text, w).is_some())
}

/// A GPU name of AMD's (`AMD Radeon RX 6700 XT`, `Radeon RX 580`, `AMD Instinct MI100`).
fn is_amd_name(name: &[u8]) -> bool {
    name.starts_with(b"AMD ") || name.starts_with(b"Radeon") || find_bytes(name, b" Radeon").is_some()
}

/// Routes whose successful answer means the model computed something.
fn is_inference_route(path: &[u8]) -> bool {
    const ROUTES: &[&[u8]] = &[
        b"/api/generate",
        b"/api/chat",
        b"/api/embed",
        b"/completion",
        b"/completions",
        b"/v1/",
        b"/chat/completions",
        b"/infill",
        b"/embedding",
        b"/rerank",
    ];
    ROUTES.iter().any(|r| path.starts_with(r))
}

/// Whether a device is already listed (by index and name, and backend when given); updates its line.
fn seen_device(devices: &mut [Device], backend: Option<&str>, index: u32, name: &[u8], line: u64) -> bool {
    let found = devices
        .iter_mut()
        .find(|d| d.index == index && d.name.as_bytes() == name && backend.is_none_or(|b| d.backend == b));
    match found {
        Some(d) => {
            d.line = line;
            true
        }
        None => false,
    }
}

fn push_device(devices: &mut Vec<Device>, dev: Device, cap: usize) {
    if let Some(d) = devices.iter_mut().find(|d| d.backend == dev.backend && d.index == dev.index && d.name == dev.name)
    {
        d.line = dev.line;
        return;
    }
    if devices.len() < cap {
        devices.push(dev);
    }
}

fn push_frame(c: &mut Crash, frame: Frame, cap: usize) {
    if c.frames.len() < cap {
        c.frames.push(frame);
    } else {
        c.frames_dropped += 1;
    }
}

/// An out-of-memory line after a load request of a retry loop (`msg=load request="{Operation:fit … GPULayers:N …}"`)
/// is an attempt of that loop: the first such line after each request is kept with the request's GPU layers.
fn record_attempt(c: &mut Crash, attempt: Option<(u64, Option<u32>)>, e: &Event<'_>, slog_line: bool, cap: usize) {
    let Some((request_line, gpu_layers)) = attempt else { return };
    if c.attempts.last().is_none_or(|a| a.request_line != Some(request_line)) && c.attempts.len() < cap {
        let text = summary(&e.kind, slog_line);
        c.attempts.push(Attempt { line: e.line, text, gpu_layers, request_line: Some(request_line) });
    }
}

/// Adds a cause or consequence line; a line that says exactly what an earlier one said (the same assertion from
/// another thread) counts on the earlier one instead.
fn push_line(list: &mut Vec<CrashLine>, e: &Event<'_>, text: String, cap: usize) {
    if let Some(same) = list.iter_mut().find(|x| x.kind == e.kind.name() && x.text == text) {
        same.count += 1;
        same.last = e.line;
        return;
    }
    if list.len() < cap {
        list.push(CrashLine {
            kind: e.kind.name(),
            text,
            line: e.line,
            count: 1,
            raw: clip(lossy(e.raw).into_owned()),
            last: e.line,
        });
    }
}

/// A kernel GPU-driver line joins the incident: kept with the crash, and the timed-out job or fault as a cause when no
/// runner line has said what failed.
fn gpu_driver_joins(
    open: &mut Open,
    e: &Event<'_>,
    d: &crate::event::GpuDriver<'_>,
    fatal: bool,
    slog_line: bool,
    cap: usize,
) {
    if matches!(d.event, GpuDriverEvent::ResetSucceeded | GpuDriverEvent::ResetFailed) {
        open.gpu_reset_done = true;
    }
    let c = &mut open.crash;
    let said = summary(&e.kind, slog_line);
    // The coredump's two lines (created, where to find it) are one event, not a repeat.
    if fatal && c.causes.iter().all(|x| x.kind == "gpu_driver" && x.text != said) && c.signal.is_none() {
        push_line(&mut c.causes, e, said, cap);
        // The timed-out job or the fault decides the signature, not the coredump or reset around it.
        if matches!(
            d.event,
            GpuDriverEvent::RingTimeout | GpuDriverEvent::PageFault | GpuDriverEvent::Xid | GpuDriverEvent::Hang
        ) {
            if let Some(at) = c.causes.iter().position(|x| x.line == e.line) {
                let first = c.causes.remove(at);
                c.causes.insert(0, first);
            }
        }
    }
    if c.gpu_driver.len() < cap {
        let text = |b: &[u8]| clip(lossy(b).into_owned());
        c.gpu_driver.push(GpuDriverLine {
            event: d.event,
            ring: d.ring.map(text),
            process: d.process.map(text),
            pid: d.pid,
            code: d.code,
            line: e.line,
        });
    }
}

/// A native backtrace frame joins the incident (unless a Go dump began: its native frames are not the crash's); the
/// abort and uncaught-exception machinery in it are causes even where their message is not in the log. Returns
/// whether the line joined.
fn native_frame_joins(
    open: &mut Open,
    e: &Event<'_>,
    frame: &crate::event::NativeFrame<'_>,
    max_frames: usize,
) -> bool {
    if open.go_dump_started {
        return false;
    }
    let c = &mut open.crash;
    let mark = |c: &mut Crash, kind: &'static str, text: String| {
        if !c.causes.iter().any(|x| x.kind == kind) {
            let raw = clip(lossy(e.raw).into_owned());
            c.causes.push(CrashLine { kind, text, line: e.line, count: 1, raw, last: e.line });
        }
    };
    // ggml_abort in the backtrace: the process aborted through ggml even where its message is not in the log.
    if frame.symbol == Some(b"ggml_abort") {
        mark(c, "abort", "ggml_abort in the backtrace (its message is not in the log)".to_string());
    }
    // ggml's CUDA/HIP error handler in the backtrace: a GPU runtime call failed (it aborts through ggml_abort), even where
    // the error line is not in the log (L ggml/src/ggml-cuda/ggml-cuda.cu ggml_cuda_error).
    if frame.symbol.is_some_and(|s| s.starts_with(b"ggml_cuda_error")) {
        mark(
            c,
            "gpu_error",
            "ggml_cuda_error in the backtrace: a CUDA/HIP call failed (its error line is not in the log)".to_string(),
        );
    }
    // libstdc++'s terminate path in the backtrace: an exception nobody caught (ggml's handler prints the backtrace
    // from std::terminate), even where the `terminate called after throwing` line is not in the log.
    if let Some(symbol) = frame.symbol.filter(|s| UNCAUGHT_EXCEPTION_FRAMES.contains(s)) {
        let symbol = lossy(symbol);
        mark(
            c,
            "cpp_terminate",
            format!("an uncaught C++ exception ({symbol} in the backtrace: std::terminate was called)"),
        );
    }
    let module = frame.module.map(|m| lossy(m));
    let symbol = frame.symbol.map(|s| lossy(s));
    if let Some(function) = signature::native_function(module.as_deref(), symbol.as_deref()) {
        if let Some(at) = function.find("ggml_compute_forward_") {
            open.compute_line.get_or_insert(e.line);
            if c.op.is_none() {
                let op = function[at..].split(['(', '+', ' ']).next().unwrap_or_default().to_string();
                c.op = Some(Sourced { value: op, line: e.line });
            }
        }
        push_frame(c, Frame { function, source: None, native: true, line: e.line }, max_frames);
    }
    true
}

/// Marks a crash that begins inside a crash dump whose header is not in the log, with a cause that says so.
fn header_cut(c: &mut Crash, e: &Event<'_>, what: &str, cap: usize) {
    c.header_cut = true;
    if c.causes.len() < cap {
        c.causes.push(CrashLine {
            kind: "header_cut",
            text: format!("crash (header cut): {what}"),
            line: e.line,
            count: 1,
            raw: clip(lossy(e.raw).into_owned()),
            last: e.line,
        });
    }
}

/// Frames of libstdc++'s and ggml's handling of an exception nobody caught.
const UNCAUGHT_EXCEPTION_FRAMES: &[&[u8]] = &[
    b"_ZSt10unexpectedv",
    b"_ZSt9terminatev",
    b"std::terminate",
    b"__cxa_throw",
    b"__cxa_rethrow",
    b"ggml_uncaught_exception",
];

fn clip(mut s: String) -> String {
    // A text of no more bytes than the limit has no more characters either: most summaries end here.
    if s.len() > SUMMARY_CHARS && s.chars().count() > SUMMARY_CHARS {
        let cut = s.char_indices().nth(SUMMARY_CHARS).map_or(s.len(), |(i, _)| i);
        s.truncate(cut);
        s.push('…');
    }
    s
}

/// Functions whose presence in the crashing stack tells the phase.
/// (`ggml_backend_load_all` is not one: every runner loads its backends when it starts, discovery or not.)
const DISCOVERY_FUNCTIONS: &[&str] = &["discover.", "GetGPUInfo", "cuda_init", "bootstrapDevices"];
const LOAD_FUNCTIONS: &[&str] = &[
    // KoboldCpp's launcher (`koboldcpp.py` load_model) and llama-server's `server_context::load_model`.
    "load_model",
    // Ollama's in-process server of 2024 (O v0.1.29 llm/dyn_ext_server.go:81 newDynExtServer → dyn_init).
    "newLlmServer",
    "newDynExtServer",
    "llama_model_load",
    "llama_load_model",
    "LoadModelFromFile",
    "loadModel",
    "NewContextWithModel",
    "llama_init_from_model",
    "llama_new_context",
    "clip_model_load",
    "NewClipContext",
    "mtmd_init",
    "NewMtmdContext",
];
/// Init functions that run the warm-up compute after the model and context are loaded (a load frame above them in the
/// stack decides load first).
const WARMUP_FUNCTIONS: &[&str] = &["common_init_from_params", "llama_init_from_gpt_params"];
/// Server functions that compute for a request (llama-server's slot loop, Ollama's runner batch loop).
const REQUEST_FUNCTIONS: &[&str] =
    &["update_slots", "handle_completions", "process_token", "processBatch", "forwardBatch"];
const COMPUTE_FUNCTIONS: &[&str] = &[
    "ggml_compute_forward",
    "ggml_graph_compute",
    "ggml_cuda_compute_forward",
    "llama_decode",
    "Decode",
    "processBatch",
    "Compute",
    "graph_compute",
    "ggml_backend_sched_graph_compute",
    "forwardBatch",
];

fn stack_has(frames: &[Frame], names: &[&str]) -> Option<u64> {
    let has = |function: &str, name: &str| crate::find_in(function.as_bytes(), name.as_bytes()).is_some();
    frames.iter().find(|f| names.iter().any(|n| has(&f.function, n))).map(|f| f.line)
}

/// What a crash incident adds to its runner's milestones for the phase rules.
#[derive(Clone, Copy, Debug, Default)]
struct CrashEvidence<'a> {
    /// The incident's first line.
    line: Option<u64>,
    /// It begins with a GPU-discovery failure.
    discovery_failure: bool,
    frames: &'a [Frame],
    /// A line of it names graph compute (a failing op, `ggml_compute_forward_*`).
    compute_line: Option<u64>,
    /// A line of it says the model load failed (`error loading model`, Ollama's `Load failed`).
    load_error: Option<u64>,
    /// A line of it says the KV cache needed a K-shift (the context was full).
    k_shift: Option<u64>,
}

fn decide_phase(lt: &Lifetime, ev: CrashEvidence<'_>) -> (Phase, String, Vec<u64>) {
    let lines = |xs: &[Option<u64>]| xs.iter().flatten().copied().collect::<Vec<_>>();
    if ev.discovery_failure {
        return (Phase::Discovery, "the incident begins with a GPU-discovery failure".into(), lines(&[ev.line]));
    }
    if lt.discovery_runner {
        return (
            Phase::Discovery,
            "the crashing runner was started without a model (a discovery runner)".into(),
            lines(&[lt.start]),
        );
    }
    if let Some(l) = stack_has(ev.frames, DISCOVERY_FUNCTIONS) {
        return (Phase::Discovery, "the crashing stack is in GPU discovery code".into(), vec![l]);
    }
    if let Some(l) = stack_has(ev.frames, LOAD_FUNCTIONS) {
        return (Phase::Load, "the crashing stack is in model-loading code".into(), vec![l]);
    }
    // The stack outranks milestones and the fragment rules: llama-cli and the common library run the warm-up inside
    // their init function, before any request (L common/common.cpp common_init_from_params; before 2024-09
    // llama_init_from_gpt_params), and llama-cli has no runner whose ready line would tell it.
    if let Some(l) = stack_has(ev.frames, WARMUP_FUNCTIONS) {
        return (
            Phase::FirstCompute,
            format!("the crashing stack is in the load-time warm-up (line {l}: the init function computes once on the model after loading it): the first compute"),
            vec![l],
        );
    }
    if let Some(l) = ev.load_error.filter(|_| lt.ready.is_none()) {
        return (
            Phase::Load,
            format!("the runtime says the model load failed (line {l}) and the runner was not ready"),
            vec![l],
        );
    }
    if let Some(l) = ev.k_shift {
        // ggml aborts when the KV cache must shift and the model cannot (L src/llama-kv-cache.cpp:877): the context
        // filled up while tokens were being generated.
        return (
            Phase::Decode,
            format!("the KV cache needed a K-shift (line {l}): the context was full, the request was generating"),
            vec![l],
        );
    }
    if lt.request_done.is_some() || lt.prompt_done.is_some() {
        let rule = match lt.request_done {
            Some(r) => format!("a request had finished in this runner before the crash (line {r})"),
            None => "the current request had finished its prompt and was generating".to_string(),
        };
        return (Phase::Decode, rule, lines(&[lt.request_done, lt.prompt_done]));
    }
    if let Some((l, task)) = lt.earlier_tasks {
        // llama-server numbers the tasks it creates from 0 (L tools/server/server-queue.h:17 `id = 0`, get_new_id): a
        // task above 0 means the server had already run others.
        return (
            Phase::Decode,
            format!("the request began as task {task} (line {l}): llama-server numbers its tasks from 0, so earlier requests had run in this server (runner-up: the first compute, if none of them finished)"),
            vec![l],
        );
    }
    let compute = stack_has(ev.frames, COMPUTE_FUNCTIONS).or(ev.compute_line);
    if let Some(r) = lt.request_open.filter(|_| lt.ready.is_none() && lt.warmup.is_none()) {
        return (
            Phase::FirstCompute,
            format!("a request's prompt was being processed (line {r}) and the log shows no request or prompt finished before it: the first compute (runner-up: unknown, if the log begins after earlier requests)"),
            lines(&[Some(r), compute]),
        );
    }
    let load_only = lt
        .load_only
        .map(|l| format!("; the answer at line {l} was the load-only request Ollama's CLI sends when a model starts (same second, about the start time), no computation"))
        .unwrap_or_default();
    if lt.ready.is_some() || lt.warmup.is_some() {
        let rule = match (lt.ready, lt.warmup) {
            (Some(r), _) => format!(
                "the runner was ready (line {r}) and no request had finished since: the first request's compute{load_only}"
            ),
            _ => "the load-time warm-up had begun: the first compute on the model".to_string(),
        };
        return (Phase::FirstCompute, rule, lines(&[lt.ready, lt.warmup, lt.load_only, compute]));
    }
    if let Some(c) = compute {
        if let Some(l) = lt.loading {
            return (
                Phase::FirstCompute,
                format!("the crash is in graph compute (line {c}) and the log shows the model load (line {l}) with no request finished since: the first compute on the model"),
                vec![l, c],
            );
        }
        // The log begins after the runner loaded (a fragment, or a paste that starts mid-backtrace): the lines
        // that would tell a first compute from a later request are not in it. A stack in a request handler says it
        // was a request's compute, not the warm-up; which request it still cannot say.
        if let Some(r) = stack_has(ev.frames, REQUEST_FUNCTIONS) {
            return (
                Phase::Unknown,
                format!("the crashing stack computes for a request (line {r}), not the load or warm-up, but the log begins after the runner loaded: whether an earlier request had finished cannot be told"),
                vec![r, c],
            );
        }
        let maybe = lt
            .maybe_load_only
            .map(|l| {
                format!(" (the answer at line {l} may be the load-only request Ollama's CLI sends when a model starts)")
            })
            .unwrap_or_default();
        return (
            Phase::Unknown,
            format!("the crash is in graph compute (line {c}), but the log begins after the runner loaded: whether a request had finished before it cannot be told{maybe}"),
            lines(&[lt.maybe_load_only, Some(c)]),
        );
    }
    if lt.loading.is_some() {
        return (Phase::Load, "model loading had begun and the runner was not ready".into(), lines(&[lt.loading]));
    }
    (Phase::Unknown, "the log shows no runner milestones and no stack that tells the phase".into(), vec![])
}

/// How much a cause line tells about what failed: the most specific one names a crash (an assertion or the GPU
/// runtime's error string before ggml's generic `abort at ggml-cuda.cu:97: CUDA error`).
fn cause_rank(kind: &str) -> u8 {
    match kind {
        "ggml_assert" => 0,
        "gpu_error" | "blas_error" | "device_lost" => 1,
        "out_of_memory" | "cpp_terminate" | "load_error" | "go_fatal" | "discovery_failure" => 2,
        "abort" => 4,
        "op_failed" | "gpu_error_location" | "gpu_driver" => 5,
        "header_cut" => 6,
        _ => 3,
    }
}

/// Functions of a GPU error's location that name the op (`ggml_cuda_op_mul_mat_cublas`), not the dispatcher or a
/// synchronisation (`ggml_cuda_compute_forward`, `ggml_backend_cuda_synchronize`).
fn is_op_function(function: &[u8]) -> bool {
    [&b"ggml_cuda_op_"[..], b"ggml_cuda_mul_mat", b"ggml_cuda_flash_attn"].iter().any(|p| function.starts_with(p))
}

fn signature_of(c: &Crash, known: impl FnOnce(&str) -> Option<String>) -> Signature {
    let mut parts: Vec<String> = Vec::new();
    if let Some(s) = &c.signal {
        if !s.name.is_empty() {
            parts.push(s.name.clone());
        } else if s.in_foreign_code {
            parts.push("signal in cgo".into());
        }
    }
    // The cause that names the failure best (the error string, not ggml's generic abort), then the op that ran.
    // A cut header says nothing of the failure: the runner's own words after it (post predict EOF, its exit status)
    // decide, and the same crash pasted whole or cut groups together.
    let deciding = c.causes.iter().enumerate().filter(|(_, x)| x.kind != "header_cut");
    if let Some(cause) = deciding.min_by_key(|(i, x)| (cause_rank(x.kind), *i)).map(|(_, x)| x) {
        parts.push(signature::normalise_text(&cause.text));
    } else if parts.is_empty() {
        if let Some(first) = c.consequences.first().or(c.causes.first()) {
            parts.push(signature::normalise_text(&first.text));
        }
    }
    if let Some(op) = &c.op {
        parts.push(format!("op {}", op.value));
    } else if let Some(at) = c.causes.iter().find(|x| x.kind == "gpu_error_location") {
        // Where the GPU call failed, when no op is named (`in ggml_cuda_pool_malloc_leg`: the compute pool, not the
        // weights): the function, without the line numbers that change between builds.
        if let Some(function) = at.text.strip_prefix("in ").and_then(|t| t.split(' ').next()) {
            parts.push(format!("in {function}"));
        }
    }
    let go: Vec<String> = c
        .frames
        .iter()
        .filter(|f| !f.native && !signature::is_go_runtime(&f.function))
        .map(|f| signature::go_function(&f.function))
        .collect();
    // A native frame without a symbol (`libggml-base.so.0!?`) is an address, which differs between builds: only named
    // frames decide.
    let frames: Vec<String> = if go.is_empty() {
        let named = |f: &&Frame| f.native && !f.function.ends_with('?');
        c.frames.iter().filter(named).map(|f| f.function.clone()).take(SIGNATURE_FRAMES).collect()
    } else {
        go.into_iter().take(SIGNATURE_FRAMES).collect()
    };
    if !frames.is_empty() {
        parts.push(frames.join(" > "));
    }
    let text = parts.join(" | ");
    let id = known(&text).unwrap_or_else(|| signature::id_of(&text));
    Signature { id, text, frames }
}

/// A signal name a pager cut (`signal: illegal ins>`, `less` marks a cut line with `>`): which name it begins.
fn cut_signal_note(error: &[u8]) -> String {
    const NAMES: [&str; 6] =
        ["segmentation fault", "illegal instruction", "aborted", "bus error", "floating point exception", "killed"];
    let Some(cut) = error.strip_suffix(b">") else { return String::new() };
    let Some(at) = find_bytes(cut, b"signal: ") else { return String::new() };
    let head = String::from_utf8_lossy(&cut[at + 8..]).into_owned();
    match NAMES.iter().find(|n| head.len() >= 3 && n.starts_with(head.as_str()) && n.len() > head.len()) {
        Some(name) => format!(" (the line is cut; the signal's name begins as {name} does)"),
        None => String::new(),
    }
}

/// ` (STATUS_ACCESS_VIOLATION: access violation)` for a text holding a Windows status code the table names.
fn status_note(text: &str) -> String {
    if let Some((code, name)) = signature::windows_status(text) {
        return format!(" ({code} is {name})");
    }
    signature::rounded_exit_code(text).unwrap_or_default()
}

/// `ring gfx_0.0.0 timeout (a GPU job did not finish)`, `process llama-server pid 12519`, `GPU reset begin`…
fn gpu_driver_summary(d: &crate::event::GpuDriver<'_>, t: &dyn Fn(&[u8]) -> String) -> String {
    let ring = d.ring.map(|r| format!(" on ring {}", t(r))).unwrap_or_default();
    let who = match (d.process.map(t), d.pid) {
        (Some(p), Some(pid)) => format!(" of process {p} pid {pid}"),
        (None, Some(pid)) => format!(" of pid {pid}"),
        (Some(p), None) => format!(" of process {p}"),
        (None, None) => String::new(),
    };
    match d.event {
        GpuDriverEvent::RingTimeout => format!("GPU driver: a GPU job timed out{ring}"),
        GpuDriverEvent::Process => {
            format!("GPU driver: the job was that{}", if who.is_empty() { " of an unnamed process" } else { &who })
        }
        GpuDriverEvent::ResetBegin => format!("GPU driver: reset begins{ring}"),
        GpuDriverEvent::ResetSucceeded => format!("GPU driver: reset succeeded{ring}"),
        GpuDriverEvent::ResetFailed => format!("GPU driver: reset failed{ring}"),
        GpuDriverEvent::Coredump => "GPU driver: a device coredump was written".into(),
        GpuDriverEvent::PageFault => format!("GPU driver: GPU page fault{who}"),
        GpuDriverEvent::Xid => format!("GPU driver: NVIDIA Xid {}{who}", d.code.unwrap_or(0)),
        GpuDriverEvent::Hang => format!("GPU driver: a GPU hang{who}"),
    }
}

/// `model load (ollama-new-engine): GPULayers 37`.
fn milestone_summary(index: u16, number: Option<u32>) -> String {
    let Some(m) = crate::milestones::table().get(index) else { return "milestone".into() };
    let number = number.map(|n| format!(": {} {n}", m.number_after.as_deref().unwrap_or("").trim_end_matches(':')));
    format!("{} ({}){}", m.meaning.label(), m.era, number.unwrap_or_default())
}

/// `device 0: NAME, gfx900:xnack-, wave size 64, VMM no` (the timeline's words for a CUDA/ROCm device line).
fn gpu_device_summary(d: &crate::event::GpuDevice<'_>, t: &dyn Fn(&[u8]) -> String) -> String {
    let mut s = format!("device {}: {}", d.index, t(d.name));
    if let Some(a) = d.arch {
        s += &format!(", {}", t(a));
    }
    if let Some(cc) = d.compute_capability {
        s += &format!(", compute capability {}", t(cc));
    }
    if let Some(w) = d.wave_size {
        s += &format!(", wave size {w}");
    }
    if let Some(v) = d.vmm {
        s += &format!(", VMM {}", if v { "yes" } else { "no" });
    }
    s
}

/// `Vulkan device 0: NAME (DRIVER), uma 0, fp16 1, warp size 64, int dot 0, matrix cores none`.
fn vulkan_device_summary(v: &crate::event::VulkanDevice<'_>, t: &dyn Fn(&[u8]) -> String) -> String {
    let mut s = format!("Vulkan device {}: {}", v.index, t(v.name));
    if let Some(d) = v.driver {
        s += &format!(" ({})", t(d));
    }
    let flag = |name: &str, v: Option<bool>| v.map(|b| format!(", {name} {}", u8::from(b))).unwrap_or_default();
    s += &flag("uma", v.uma);
    s += &flag("fp16", v.fp16);
    if let Some(w) = v.warp_size {
        s += &format!(", warp size {w}");
    }
    s += &flag("int dot", v.int_dot);
    if let Some(m) = v.matrix_cores {
        s += &format!(", matrix cores {}", t(m));
    }
    s
}

fn buffer_word(buffer: BufferKind) -> &'static str {
    match buffer {
        BufferKind::Model => "model",
        BufferKind::Kv => "KV",
        BufferKind::Compute => "compute",
        BufferKind::Output => "output",
    }
}

/// A one-line description of an event for the timeline.
pub fn summary(kind: &EventKind<'_>, slog_line: bool) -> String {
    use EventKind::*;
    let t = |b: &[u8]| -> String {
        if slog_line {
            unquote(b).into_owned()
        } else {
            lossy(b).into_owned()
        }
    };
    let opt = |b: Option<&[u8]>| b.map(t).unwrap_or_default();
    let s = match *kind {
        BackendLoaded { backend, path } => format!("{} backend loaded from {}", t(backend), t(path)),
        DevicesFound { backend, count } => format!("{count} {} device(s) found", t(backend)),
        GpuDevice(d) => gpu_device_summary(&d, &t),
        VulkanDevice(v) => vulkan_device_summary(&v, &t),
        DeviceListed { device, description, total_mib, free_mib } => {
            let mem = match (total_mib, free_mib) {
                (Some(t), Some(f)) => format!(" ({t} MiB, {f} MiB free)"),
                _ => String::new(),
            };
            format!("device available: {} {}{mem}", t(device), t(description))
        }
        DeviceUsed { device, description, free_mib } => {
            let free = free_mib.map(|f| format!(", {f} MiB free")).unwrap_or_default();
            format!("using device {} {}{free}", t(device), t(description))
        }
        InferenceCompute(ic) => format!(
            "inference compute: library={} compute={} name={} description={}",
            opt(ic.library),
            opt(ic.compute),
            opt(ic.name),
            opt(ic.description)
        ),
        RunnerStarting { cmd, with_model } => {
            format!("{} starting: {}", if with_model { "runner" } else { "discovery runner" }, t(cmd))
        }
        ModelLoading { path } => {
            format!("model load begins{}", path.map(|p| format!(": {}", t(p))).unwrap_or_default())
        }
        LayersOffloaded { offloaded, total } => format!("offloaded {offloaded}/{total} layers to GPU"),
        FlashAttention { setting } => format!("flash attention: {}", t(setting)),
        Graph { nodes, splits } => {
            let n = nodes.map(|v| format!("nodes {v}")).unwrap_or_default();
            let s = splits.map(|v| format!("splits {v}")).unwrap_or_default();
            format!("graph: {}", [n, s].into_iter().filter(|x| !x.is_empty()).collect::<Vec<_>>().join(", "))
        }
        BufferSize { device, buffer, mib } => format!("{} {} buffer {mib:.2} MiB", t(device), buffer_word(buffer)),
        Warmup => "warm-up run begins".into(),
        RunnerStarted { seconds } => format!("runner started in {seconds} s"),
        ServerReady => "server ready".into(),
        RequestStarted { task } => format!("task {} started", task.map_or("?".into(), |v| v.to_string())),
        PromptDone { task } => format!("task {} prompt done", task.map_or("?".into(), |v| v.to_string())),
        RequestDone { task } => format!("task {} done", task.map_or("?".into(), |v| v.to_string())),
        Progress { task, decoding, tokens } => format!(
            "task {} {} {} tokens",
            task.map_or("?".into(), |v| v.to_string()),
            if decoding { "decoding: generated" } else { "prompt: processed" },
            tokens.map_or("?".into(), |v| v.to_string())
        ),
        Shutdown => "orderly shutdown".into(),
        Timing { which, ms, tokens } => {
            let w = match which {
                TimingKind::PromptEval => "prompt eval",
                TimingKind::Eval => "eval",
                TimingKind::Total => "total",
            };
            format!("{w} {ms} ms{}", tokens.map(|n| format!(" / {n} tokens")).unwrap_or_default())
        }
        HttpRequest { status, method, path, latency } => format!(
            "HTTP {status} {} {}{}",
            t(method),
            t(path),
            latency.map(|l| format!(" ({})", t(l))).unwrap_or_default()
        ),
        DiscoveryFailure { error, detail } => format!(
            "GPU discovery failed{}{}",
            error.map(|e| format!(": {}", t(e))).unwrap_or_default(),
            detail.map(|d| format!(" ({})", t(d))).unwrap_or_default()
        ),
        UnsupportedGpu { gpu, supported, message } => format!(
            "unsupported GPU{}: {}{}",
            gpu.map(|g| format!(" {}", t(g))).unwrap_or_default(),
            t(message),
            supported.map(|s| format!(" (supported: {})", t(s))).unwrap_or_default()
        ),
        BlasError { library, message, arch } => {
            format!(
                "{} error: {}{}",
                t(library),
                t(message),
                arch.map(|a| format!(" [arch {}]", t(a))).unwrap_or_default()
            )
        }
        Signal { signal, description } => format!("{}{}: {}", t(signal), status_note(&t(signal)), t(description)),
        SignalContext { pc, addr, sigcode } => [("PC", pc), ("addr", addr), ("sigcode", sigcode)]
            .iter()
            .filter_map(|(k, v)| v.map(|v| format!("{k}={}", t(v))))
            .collect::<Vec<_>>()
            .join(" "),
        SignalInForeignCode => "signal arrived during cgo execution (in C/C++ code)".into(),
        GoFatal { message } => format!("Go fatal: {}", t(message)),
        GgmlAssert { file, line, condition } => {
            let at = if file.is_empty() { String::new() } else { format!(" at {}:{line}", t(file)) };
            format!("GGML_ASSERT({}) failed{at}", t(condition))
        }
        Abort { file: b"", message, .. } => format!("abort: {}", t(message)),
        Abort { file, line, message } => format!("abort at {}:{line}: {}", t(file), t(message)),
        GpuError { api, message } => format!("{} error: {}", t(api), t(message)),
        GpuErrorLocation { device, function, file, line } => format!(
            "in {} at {}:{line}{}",
            t(function),
            t(file),
            device.map(|d| format!(" (device {d})")).unwrap_or_default()
        ),
        DeviceLost { message } if message.starts_with(b"HW Exception") => {
            format!("GPU hang reported by the ROCm runtime: {}", t(message))
        }
        DeviceLost { message } => format!("Vulkan device lost: {}", t(message)),
        CppTerminate { exception } => format!("C++ exception: {}", t(exception)),
        OutOfMemory { message } => format!("out of memory: {}", t(message)),
        ProcessCrash { message } => t(message),
        PostPredictError { error } => {
            format!("post predict failed{}", error.map(|e| format!(": {}", t(e))).unwrap_or_default())
        }
        RunnerTerminated { error } => {
            format!("runner terminated: {}{}{}", t(error), status_note(&t(error)), cut_signal_note(error))
        }
        LoadError { error } => format!("model load failed: {}", t(error)),
        BindFailed { message } => format!("the server could not listen: {}", t(message)),
        CompletionError { message } => format!("completion failed: {}", t(message)),
        Diagnostic { level, msg } => format!("{}: {}", t(level), t(msg)),
        Milestone { index, number } => milestone_summary(index, number),
        OpFailed { op } => format!("op {} failed on the GPU", t(op)),
        InstructionBytes { bytes } => format!("instruction bytes at PC: {}", t(bytes)),
        Goroutine { id, state } => format!("goroutine {id} [{}]", t(state)),
        GoFrame { function } => t(function),
        GoFrameSource { file, line } => format!("{}:{line}", t(file)),
        GoCreatedBy { function } => format!("created by {}", t(function)),
        GoTraceDetail => "trace detail".into(),
        NativeFrame(f) => {
            signature::native_function(f.module.map(|m| lossy(m)).as_deref(), f.symbol.map(|s| lossy(s)).as_deref())
                .unwrap_or_else(|| "abort machinery".into())
        }
        GpuDriver(d) => gpu_driver_summary(&d, &t),
        RegisterDump => "a register of a Go crash dump".into(),
        Other => String::new(),
    };
    clip(s)
}
