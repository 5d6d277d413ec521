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
//!
//! [`EventKind::is_fatal`]: crate::EventKind::is_fatal

// The analysis by job. The report's layout: `report` (with `crash`, `facts`, `timeline`). The analyzer's state:
// `state`; its work, each an `impl Analyzer` block: `analyzer` (the dispatch of an event, the report assembled),
// `lifecycle` (runner milestones), `read_facts` (what a line states about the setup), `incident` (crash incidents).
// The rules those call: `phase`, `crash_signature`, `summary` (an event in words), `text`.
mod analyzer;
mod crash;
mod crash_signature;

mod incident;
mod lifecycle;
mod phase;
mod read_facts;
mod report;
mod state;
mod summary;
mod text;
mod timeline;

pub use crate::facts::{Backend, Buffer, Device, Graph, Handled, Offload, Sourced, Timing};
pub use crash::{Attempt, Crash, CrashLine, Frame, GpuDriverLine, Phase, SignalInfo, Signature};
pub use report::{Ending, Facts, LineSet, Report, SignatureGroup, SCHEMA};
pub use state::Analyzer;
pub use summary::summary;
pub use text::go_duration_s;
pub use timeline::{TimeBounds, TimelineEntry};
