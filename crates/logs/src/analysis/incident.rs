//! Crash incidents: which line opens one, which lines join it, what closes it, and how a closed one is placed in a
//! phase, signed and grouped.

use crate::event::{lossy, Event, EventKind, GpuDriverEvent};
use crate::signature;
use crate::slog::unquote;
use crate::time::Timestamp;

use super::crash::{new_crash, Attempt, Crash, CrashLine, Frame, GpuDriverLine, SignalInfo};
use super::crash_signature::{is_op_function, signature_of};
use super::phase::{decide_phase, CrashEvidence};
use super::report::SignatureGroup;
use super::state::{Analyzer, Open};
use super::summary::summary;
use super::text::{clip, decimal, find_bytes};
use crate::facts::{Handled, Sourced};

impl Analyzer {
    /// A frame of a Python traceback (`File "koboldcpp.py", line 351, in load_model`): kept until the exception that
    /// ends the traceback opens a crash, which takes them as its stack.
    pub(super) fn python_frame(&mut self, e: &Event<'_>, f: &crate::event::NativeFrame<'_>) {
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

    /// Closes the open incident where `e` begins a new one, and opens one where `e` can: whether an incident is open
    /// for `e` to join.
    pub(super) fn open_or_close_incident(
        &mut self,
        e: &Event<'_>,
        slog_line: bool,
        time: Option<Timestamp>,
        fatal: bool,
    ) -> bool {
        use EventKind::*;
        // A new failure after the runner was reported terminated, or a second signal, is a new crash.
        if let Some(open) = &self.open {
            let new_cause =
                matches!(e.kind, Signal { .. } | GgmlAssert { .. } | Abort { .. } | GpuError { .. } | GoFatal { .. });
            // The same assertion again (another thread, or its echo in the runner's log) is this crash, not a new one.
            // The summary is made only where a cause of the same kind is there to compare it with.
            let kind = e.kind.name();
            let repeated = new_cause && open.crash.causes.iter().any(|x| x.kind == kind) && {
                let text = summary(&e.kind, slog_line);
                open.crash.causes.iter().any(|x| x.kind == kind && x.text == text)
            };
            // The same death told again in the same record (LM Studio repeats it in each `Caused By:` of one error's
            // chain, lines without a time of their own); the same words in a later record are another death.
            let told_again = matches!(e.kind, RunnerTerminated { .. })
                && time.is_none()
                && open.crash.consequences.iter().any(|x| x.kind == kind)
                && {
                    let text = summary(&e.kind, slog_line);
                    open.crash.consequences.iter().any(|x| x.kind == kind && x.text == text)
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

    pub(super) fn incident(&mut self, e: &Event<'_>, slog_line: bool, time: Option<Timestamp>) {
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
                        last.source = Some(super::text::joined(&[&lossy(file), ":", decimal(line, &mut [0; 10])]));
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

    pub(super) fn close_incident(&mut self) {
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
            k_shift: cause_line(&|x| find_bytes(x.text.as_bytes(), b"K-shift").is_some()),
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
}

pub(super) fn push_frame(c: &mut Crash, frame: Frame, cap: usize) {
    if c.frames.len() < cap {
        c.frames.push(frame);
    } else {
        c.frames_dropped += 1;
    }
}

/// An out-of-memory line after a load request of a retry loop (`msg=load request="{Operation:fit … GPULayers:N …}"`)
/// is an attempt of that loop: the first such line after each request is kept with the request's GPU layers.
pub(super) fn record_attempt(
    c: &mut Crash,
    attempt: Option<(u64, Option<u32>)>,
    e: &Event<'_>,
    slog_line: bool,
    cap: usize,
) {
    let Some((request_line, gpu_layers)) = attempt else { return };
    if c.attempts.last().is_none_or(|a| a.request_line != Some(request_line)) && c.attempts.len() < cap {
        let text = summary(&e.kind, slog_line);
        c.attempts.push(Attempt { line: e.line, text, gpu_layers, request_line: Some(request_line) });
    }
}

/// Adds a cause or consequence line; a line that says exactly what an earlier one said (the same assertion from
/// another thread) counts on the earlier one instead.
pub(super) fn push_line(list: &mut Vec<CrashLine>, e: &Event<'_>, text: String, cap: usize) {
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
pub(super) fn gpu_driver_joins(
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
pub(super) fn native_frame_joins(
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
        // A needle searched with `memchr` on its rarest byte: `str::find` sets up a two-way searcher on every call.
        if let Some(at) = find_bytes(function.as_bytes(), b"ggml_compute_forward_") {
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
pub(super) fn header_cut(c: &mut Crash, e: &Event<'_>, what: &str, cap: usize) {
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
pub(super) const UNCAUGHT_EXCEPTION_FRAMES: &[&[u8]] = &[
    b"_ZSt10unexpectedv",
    b"_ZSt9terminatev",
    b"std::terminate",
    b"__cxa_throw",
    b"__cxa_rethrow",
    b"ggml_uncaught_exception",
];
