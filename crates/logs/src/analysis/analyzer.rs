//! The [`Analyzer`]'s work: each event dispatched to the rules (lifecycle, facts, incidents, timeline), the brackets
//! of inherited times closed, and the report assembled at the end.

use crate::event::{lossy, Event, EventKind};
use crate::limits::Limits;
use crate::parser::Stats;
use crate::time::Timestamp;

use super::crash::{new_crash, CrashLine};
use super::phase::{decide_phase, CrashEvidence};
use super::report::{Ending, Facts, LineSet, Report, SCHEMA};
use super::state::{Analyzer, Lifetime, Open};
use super::summary::summary;
use super::text::{clip, find_bytes};
use super::timeline::{bounds, Tail, TailSlot, TimelineEntry};

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
    pub(super) fn close_brackets(&mut self, next: Option<Timestamp>) {
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
    pub(super) fn own_time(&mut self, e: &Event<'_>) -> Option<Timestamp> {
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

    pub(super) fn push_timeline(&mut self, e: &Event<'_>, slog_line: bool, time: Option<Timestamp>) {
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
