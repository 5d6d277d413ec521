//! What the [`Analyzer`] keeps between lines: its whole state, with the milestones of the current runner lifetime and
//! the incident open now, which the crash rules read. The rules that change it live in the files of their job
//! (`lifecycle`, `read_facts`, `incident`), each an `impl Analyzer` block that only this state is shared between.

use crate::event::EventKind;
use crate::limits::Limits;
use crate::time::{Clock, Timestamp};

use super::crash::{Crash, Frame};
use super::report::{Facts, LineSet, SignatureGroup};
use super::timeline::{Tail, TimelineEntry};

/// Builds a [`Report`](super::Report) from events.
#[derive(Debug)]
pub struct Analyzer {
    pub(super) limits: Limits,
    pub(super) counts: [u64; EventKind::NAMES.len()],
    pub(super) other: LineSet,
    pub(super) truncated: LineSet,
    pub(super) bad_timestamps: LineSet,
    pub(super) clock: Option<Clock>,
    pub(super) last_time: Option<Timestamp>,
    pub(super) head: Vec<TimelineEntry>,
    /// The last entries as raw lines in reused buffers: their summaries are made at the end, so the
    /// timeline costs no allocation per line once the head is full.
    pub(super) tail: Tail,
    pub(super) elided: u64,
    pub(super) facts: Facts,
    pub(super) lifetime: Lifetime,
    pub(super) open: Option<Open>,
    pub(super) crashes: Vec<Crash>,
    pub(super) crashes_total: u64,
    pub(super) groups: Vec<SignatureGroup>,
    pub(super) signatures_dropped: u64,
    pub(super) saw_ollama: bool,
    pub(super) saw_llama_server_runner: bool,
    pub(super) saw_go_runner: bool,
    pub(super) saw_llama: bool,
    pub(super) gpu_backend: String,
    pub(super) last_line: u64,
    pub(super) last_offset: u64,
    /// The log's first timestamp: relative times count from it.
    pub(super) origin: Option<Timestamp>,
    /// Entries whose time is inherited and which wait for the next timestamp to close their bracket: the
    /// head entries from this index on, the last `pending_tail` tail slots, the kept crashes from this index on
    /// (and the open one).
    pub(super) pending_head: Option<usize>,
    pub(super) pending_tail: usize,
    pub(super) pending_crashes: Option<usize>,
    /// The frames of the last Python traceback (innermost last) and the line of its last frame: a Python launcher
    /// (KoboldCpp's) prints them before the exception that a native crash became.
    pub(super) python_frames: Vec<Frame>,
    pub(super) python_frames_line: u64,
}

/// Milestones of one runner lifetime.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Lifetime {
    pub(super) start: Option<u64>,
    /// The line where the log shows this runtime begin: a runner started, or the model loader's first line.
    pub(super) began: Option<u64>,
    pub(super) discovery_runner: bool,
    pub(super) loading: Option<u64>,
    pub(super) warmup: Option<u64>,
    pub(super) ready: Option<u64>,
    pub(super) request_done: Option<u64>,
    pub(super) prompt_done: Option<u64>,
    /// A llama-server task began and has not finished, or a request's prompt was being processed.
    pub(super) request_open: Option<u64>,
    /// A llama-server task numbered above 0 began: the server had run earlier tasks (it numbers them from 0).
    pub(super) earlier_tasks: Option<(u64, u64)>,
    pub(super) shutdown: Option<u64>,
    /// The time of the `ready` line and the load time the runner reported (`runner started in N s`).
    pub(super) ready_time: Option<Timestamp>,
    pub(super) started_s: Option<f64>,
    /// An HTTP 2xx that was the load-only request Ollama's CLI sends when a model starts (not a computation).
    pub(super) load_only: Option<u64>,
    /// A 2xx on `/api/generate` when the runner's ready line is not in the log: it may be that load-only request.
    pub(super) maybe_load_only: Option<u64>,
    /// The last allocation attempt of a load retry loop (`msg=load request="{Operation:fit … GPULayers:N …}"`).
    pub(super) attempt: Option<(u64, Option<u32>)>,
}

/// An open incident.
#[derive(Debug)]
pub(super) struct Open {
    pub(super) crash: Crash,
    pub(super) at_open: Lifetime,
    /// Frames are being collected from the crashing goroutine.
    pub(super) in_crashing_goroutine: bool,
    /// A goroutine dump began (native frames after it are not the crash's).
    pub(super) go_dump_started: bool,
    pub(super) terminated: bool,
    pub(super) discovery_failure: bool,
    /// A line of the incident names graph compute (an op that failed, `ggml_compute_forward_*`).
    pub(super) compute_line: Option<u64>,
    /// The kernel reported a GPU or ring reset finished: a later GPU hang is a new incident.
    pub(super) gpu_reset_done: bool,
    /// The incident's allocation failures were followed by a retry the runtime announced, and nothing failed since:
    /// the line of that retry and what it says.
    pub(super) recovered: Option<(u64, String)>,
}

impl Open {
    /// The incident so far is allocation failures only: no signal, no abort, no death of the runner.
    pub(super) fn only_allocation_failures(&self) -> bool {
        let c = &self.crash;
        !self.terminated
            && c.signal.is_none()
            && c.consequences.is_empty()
            && c.causes.iter().any(|x| x.kind == "out_of_memory")
            && c.causes.iter().all(|x| matches!(x.kind, "out_of_memory" | "gpu_error_location"))
    }

    pub(super) fn new(crash: Crash, at_open: Lifetime) -> Self {
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
