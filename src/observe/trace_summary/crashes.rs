//! The failures of a summary: crashes with the last work of each thread and queue before them, device losses (with
//! the driver's own account where it gave one), hangs, and their records for the kernel-log join.

use serde::{Deserialize, Serialize};

use super::kernels::{short_name, RowName};
use crate::evidence::{Claim, Confidence, Source};
use crate::trace::{CrashReport, DeviceLostReport, HangReport, QueueRuns};

/// Launches of one kernel that a thread made last before a crash (identical consecutive launches merged).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KernelBeforeCrash {
    pub name: String,
    pub demangled: String,
    pub family: String,
    pub api: String,
    pub launches: u32,
    /// The launch calls returned an error.
    pub failed: bool,
    pub grid: [u32; 3],
    pub block: [u32; 3],
    /// Start of the window (CLOCK_MONOTONIC ns) that counted the last of them.
    pub window_t0: u64,
}

/// One thread at a crash: the CUDA/HIP call it was inside and its last kernels, oldest first.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ThreadBeforeCrash {
    pub tid: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_flight: Option<String>,
    pub kernels: Vec<KernelBeforeCrash>,
}

/// Equal consecutive dispatches a Vulkan queue was given last (a crash or device-lost record of the layer).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DispatchBeforeCrash {
    /// The pipeline's name (ggml's debug name, or `spirv:<hash>`).
    pub name: String,
    pub family: String,
    /// The ggml op the pipeline computes (data/vulkan_pipelines.toml), when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub op: Option<String>,
    pub dispatches: u64,
    /// Workgroup counts and the pipeline's workgroup size.
    pub grid: [u32; 3],
    pub block: [u32; 3],
    /// The queue's submissions they were in (first, last), from 1.
    pub submits: [u64; 2],
    /// The debug label they were recorded under: ggml-vulkan's graph node (`MUL_MAT blk.0.attn_q`) under
    /// `GGML_VK_DEBUG_MARKERS`, which `backscope trace` sets for a command it runs (`--env` only with `--labels on`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
}

/// One Vulkan queue's last submitted dispatches before a crash or a lost device, oldest first.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueBeforeCrash {
    /// The queue's number in the layer's table (the order queues first submitted).
    pub queue: u32,
    /// The device's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<String>,
    /// Submissions with dispatches to the queue in the process so far.
    pub submits: u64,
    pub dispatches: Vec<DispatchBeforeCrash>,
    /// Dispatches the record left out (their pipeline was not yet defined in the trace).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub omitted: u32,
    /// How far the GPU got, from the layer's black box.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<QueueProgressSummary>,
}

/// How far the GPU got through a queue's work (the layer's black box).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueProgressSummary {
    /// `buffer_marker` (the GPU's own completion markers) or `submission` (the layer's per-submission signal).
    pub by: String,
    /// `in_flight` names dispatches that had started and not finished (markers); otherwise they are the
    /// dispatches of the first unfinished submission, one or more of which ran.
    pub exact: bool,
    pub completed: u64,
    pub pending: bool,
    pub in_flight: Vec<InFlightSummary>,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub more_in_flight: u32,
    pub not_started: u64,
    /// Pending only through command buffers no marker covered yet: they were not seen to finish, and the markers do
    /// not show them unfinished (a crash long after the GPU went idle reads the same).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub unconfirmed: bool,
}

/// A dispatch in flight (or a candidate), named.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct InFlightSummary {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub op: Option<String>,
    pub submit: u64,
    /// Its index in its command buffer, from 1.
    pub index: u32,
    pub grid: [u32; 3],
}

impl QueueProgressSummary {
    /// `in flight: spin_pipeline [1,1,1] (dispatch 1 of submission 2; by the GPU's own completion markers)`.
    fn text(&self, queue: u32) -> String {
        let names: Vec<String> = self
            .in_flight
            .iter()
            .map(|d| {
                let op = d.op.as_deref().map(|o| format!(" ({o})")).unwrap_or_default();
                format!(
                    "{}{op} [{},{},{}] (dispatch {} of submission {})",
                    d.name, d.grid[0], d.grid[1], d.grid[2], d.index, d.submit
                )
            })
            .collect();
        let more = if self.more_in_flight > 0 { format!(" and {} more", self.more_in_flight) } else { String::new() };
        if !self.pending {
            return format!("queue {queue}: all {} followed dispatches had completed", self.completed);
        }
        if self.unconfirmed && !names.is_empty() {
            return format!(
                "queue {queue}: not seen to finish: {}{more} ({} completed before; no marker covers their command \
                 buffers yet, too small for one of their own, so the markers cannot tell whether they ran or finished)",
                names.join(", "),
                self.completed
            );
        }
        let done = format!("{} completed before it, {} not started", self.completed, self.not_started);
        match (self.exact, names.is_empty()) {
            (_, true) => format!("queue {queue}: work pending, no dispatch in flight could be named ({done})"),
            (true, false) => format!(
                "queue {queue}: in flight: {}{more} ({done}; by the GPU's own completion markers)",
                names.join(", ")
            ),
            (false, false) => format!(
                "queue {queue}: unfinished: one or more of {}{more} ({done}; {})",
                names.join(", "),
                if self.by == "command_buffer_marker" {
                    "by the GPU's markers at command buffers' ends, which cannot tell which of their dispatches ran"
                } else {
                    "by the layer's per-submission signal, which cannot tell which dispatch of a submission ran"
                }
            ),
        }
    }
}

/// What each queue had in flight, in words (None when no queue has black-box progress).
fn in_flight_text(queues: &[QueueBeforeCrash]) -> Option<String> {
    let parts: Vec<String> = queues.iter().filter_map(|q| q.progress.as_ref().map(|p| p.text(q.queue))).collect();
    (!parts.is_empty()).then(|| parts.join("; "))
}

/// Whether the black box named exactly what ran (markers) on every queue with pending work.
fn in_flight_exact(queues: &[QueueBeforeCrash]) -> bool {
    let mut pending = queues.iter().filter_map(|q| q.progress.as_ref()).filter(|p| p.pending).peekable();
    pending.peek().is_some() && pending.all(|p| p.exact && !p.in_flight.is_empty())
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

impl QueueBeforeCrash {
    fn of(q: &QueueRuns) -> QueueBeforeCrash {
        QueueBeforeCrash {
            queue: q.queue,
            device: q.device.clone(),
            submits: q.submits,
            dispatches: q
                .runs
                .iter()
                .map(|r| {
                    let d = RowName::of(trace_format::record::api::VULKAN, &r.name, &[]);
                    DispatchBeforeCrash {
                        name: r.name.clone(),
                        family: d.family,
                        op: d.op,
                        dispatches: r.dispatches,
                        grid: r.grid,
                        block: r.block,
                        submits: [r.submits.0, r.submits.1],
                        label: r.label.clone(),
                    }
                })
                .collect(),
            omitted: q.omitted,
            progress: q.progress.as_ref().map(|(p, named)| QueueProgressSummary {
                exact: p.exact(),
                by: p.by.clone(),
                completed: p.completed,
                pending: p.pending,
                in_flight: named
                    .iter()
                    .map(|d| InFlightSummary {
                        name: d.name.clone(),
                        op: RowName::of(trace_format::record::api::VULKAN, &d.name, &[]).op,
                        submit: d.submit,
                        index: d.index,
                        grid: d.grid,
                    })
                    .collect(),
                more_in_flight: p.more_in_flight,
                not_started: p.not_started,
                unconfirmed: p.unconfirmed,
            }),
        }
    }

    /// `queue 0 (llvmpipe), submissions 1–3 of 3: 3× alpha_pipeline (other) [4,1,1], then …; the last: …`:
    /// the pipelines in the order they were last given, each with its dispatches over the remembered ones.
    fn text(&self) -> String {
        const SHOWN: usize = 6;
        let mut tally: Vec<(&DispatchBeforeCrash, u64)> = Vec::new();
        for d in &self.dispatches {
            match tally.iter_mut().find(|(t, _)| t.name == d.name && t.grid == d.grid) {
                Some((_, n)) => *n += d.dispatches,
                None => tally.push((d, d.dispatches)),
            }
        }
        let what = |d: &DispatchBeforeCrash| d.op.clone().unwrap_or_else(|| d.family.clone());
        let mut parts: Vec<String> = tally
            .iter()
            .take(SHOWN)
            .map(|(d, n)| format!("{n}× {} ({}) [{},{},{}]", d.name, what(d), d.grid[0], d.grid[1], d.grid[2]))
            .collect();
        if tally.len() > SHOWN {
            parts.push(format!("{} more", tally.len() - SHOWN));
        }
        let first = self.dispatches.first().map_or(0, |d| d.submits[0]);
        let span = if first == self.submits {
            format!("submission {first}")
        } else {
            format!("submissions {first}–{} of {}", self.submits, self.submits)
        };
        let last = self
            .dispatches
            .last()
            .map(|d| {
                let node = d.label.as_deref().map(|l| format!(", in `{l}`")).unwrap_or_default();
                format!("; the last: {} ({}){node}", d.name, what(d))
            })
            .unwrap_or_default();
        let omitted = if self.omitted > 0 {
            format!("; {} more of pipelines not yet defined", self.omitted)
        } else {
            String::new()
        };
        let device = self.device.as_deref().map(|d| format!(" ({d})")).unwrap_or_default();
        format!("queue {}{device}, {span}: {}{last}{omitted}", self.queue, parts.join(", "))
    }
}

/// The last Vulkan dispatches of each queue, in words (empty when none was remembered).
fn vulkan_text(queues: &[QueueBeforeCrash]) -> Option<String> {
    let parts: Vec<String> = queues.iter().filter(|q| !q.dispatches.is_empty()).map(QueueBeforeCrash::text).collect();
    (!parts.is_empty()).then(|| parts.join("; "))
}

/// A fatal signal the observer recorded (a `crash` record, docs/trace-format.md).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CrashSummary {
    pub pid: u32,
    pub exe: String,
    /// The trace file holding the record.
    pub file: String,
    /// `SIGSEGV`, `SIGABRT`, …
    pub signal: String,
    /// `si_code`: > 0 for a fault the CPU raised, <= 0 for a signal a process sent.
    pub code: i32,
    /// The faulting address.
    pub addr: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sender_pid: Option<u32>,
    pub at_ns: u64,
    /// The thread that received the signal (first in `threads`).
    pub tid: u32,
    /// Nothing shows the process survived it: no exit flush after it, and the program's own handler did not return.
    pub fatal: bool,
    /// The window open at the signal was written before the record.
    pub flushed: bool,
    pub threads: Vec<ThreadBeforeCrash>,
    /// The Vulkan queues' last submitted dispatches (from the Vulkan layer's crash record of the same process).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub vulkan: Vec<QueueBeforeCrash>,
    /// The Vulkan layer's trace file that holds `vulkan`, when it is not `file` (the observer's record of the same
    /// signal was merged with the layer's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vulkan_file: Option<String>,
}

impl CrashSummary {
    /// The trace files the claim cites: the record's, and the Vulkan layer's when another.
    pub fn sources(&self, base: impl Fn(&str) -> String) -> Vec<Source> {
        let mut out =
            vec![Source::file(base(&self.file), None, None, "backscope-trace file: crash record (signal handler)")];
        if let Some(f) = &self.vulkan_file {
            out.push(Source::file(
                base(f),
                None,
                None,
                "backscope-trace file: crash record (Vulkan layer's signal handler)",
            ));
        }
        out
    }

    /// The summaries of `reports`, with the Vulkan layer's record of a signal merged into the CUDA/HIP observer's
    /// record of the same signal in the same process (both handlers see it; one claim per crash). `file` says how
    /// a trace file is cited.
    pub fn all_of(reports: &[CrashReport], file: impl Fn(&CrashReport) -> String) -> Vec<CrashSummary> {
        /// Both handlers run within the one delivery of the signal: their records are a few ms apart at most
        /// (the handler's flush waits 1 s at most).
        const SAME_SIGNAL_NS: u64 = 5_000_000_000;
        let mut out: Vec<CrashSummary> = Vec::new();
        let mut layer: Vec<CrashSummary> = Vec::new();
        for r in reports {
            let summary = CrashSummary::new(r, file(r));
            if r.writer == trace_format::vulkan::WRITER_NAME {
                layer.push(summary);
            } else {
                out.push(summary);
            }
        }
        for l in layer {
            let same = out.iter_mut().find(|c| {
                c.pid == l.pid
                    && c.signal == l.signal
                    && c.vulkan.is_empty()
                    && c.at_ns.abs_diff(l.at_ns) < SAME_SIGNAL_NS
            });
            match same {
                Some(c) => {
                    for t in l.threads.into_iter().filter(|t| t.in_flight.is_some()) {
                        match c.threads.iter_mut().find(|o| o.tid == t.tid) {
                            Some(o) if o.in_flight.is_none() => o.in_flight = t.in_flight,
                            Some(_) => {}
                            None => c.threads.push(t),
                        }
                    }
                    c.vulkan = l.vulkan;
                    c.vulkan_file = Some(l.file);
                }
                None => out.push(l),
            }
        }
        out.sort_by_key(|c| c.at_ns);
        out
    }

    /// `file` is how the trace file is cited (a sweep cites it relative to its run directory).
    pub fn new(report: &CrashReport, file: String) -> CrashSummary {
        let c = &report.crash;
        CrashSummary {
            pid: report.pid,
            exe: report.exe.clone(),
            file,
            signal: c.signal_name.clone(),
            code: c.code,
            addr: c.addr,
            sender_pid: c.sender_pid,
            at_ns: c.at_ns,
            tid: c.tid,
            fatal: report.fatal,
            flushed: c.flushed,
            threads: report
                .threads
                .iter()
                .map(|t| ThreadBeforeCrash {
                    tid: t.tid,
                    in_flight: t.in_flight.clone(),
                    kernels: t
                        .launches
                        .iter()
                        .map(|l| {
                            let d = RowName::of(&l.api, &l.name, &[]);
                            KernelBeforeCrash {
                                name: l.name.clone(),
                                demangled: d.shown,
                                family: d.family,
                                api: l.api.clone(),
                                launches: l.repeats,
                                failed: l.failed,
                                grid: l.shape.grid,
                                block: l.shape.block,
                                window_t0: l.window_t0,
                            }
                        })
                        .collect(),
                })
                .collect(),
            vulkan: report.queues.iter().map(QueueBeforeCrash::of).collect(),
            vulkan_file: None,
        }
    }

    /// The sentence of the claim: what arrived where, inside which call, and the last kernels per thread, the
    /// receiving thread first.
    pub fn statement(&self) -> String {
        let how = match self.sender_pid {
            Some(sender) if self.code <= 0 => format!("received {} sent by pid {sender}", self.signal),
            _ if self.code <= 0 => format!("received {} (sent by a process)", self.signal),
            _ => format!("crashed with {} (faulting address {:#x})", self.signal, self.addr),
        };
        let inside = match self.threads.first().and_then(|t| t.in_flight.as_deref()) {
            Some(call) => format!(" inside {call}"),
            None if !self.vulkan.is_empty() => " outside any observed CUDA/HIP or Vulkan call".to_string(),
            None => " outside any observed CUDA/HIP call".to_string(),
        };
        let mut last = Vec::new();
        for t in self.threads.iter().filter(|t| !t.kernels.is_empty()).take(4) {
            let kernels: Vec<String> = t
                .kernels
                .iter()
                .rev()
                .take(4)
                .rev()
                .map(|k| {
                    let failed = if k.failed { ", failed" } else { "" };
                    format!("{}× {} ({}{failed})", k.launches, short_name(&k.demangled), k.family)
                })
                .collect();
            let inside = t.in_flight.as_deref().map(|c| format!(", inside {c}")).unwrap_or_default();
            last.push(format!("thread {}{inside}: {}", t.tid, kernels.join(", then ")));
        }
        let vulkan = vulkan_text(&self.vulkan);
        let last = match (last.is_empty(), vulkan) {
            (true, None) => "no CUDA/HIP kernel launch was observed before the crash".to_string(),
            (true, Some(v)) => format!("the last Vulkan dispatches before the crash were: {v}"),
            (false, None) => format!("the last kernels launched before the crash: {}", last.join("; ")),
            (false, Some(v)) => format!(
                "the last kernels launched before the crash: {}; the last Vulkan dispatches before the crash were: {v}",
                last.join("; ")
            ),
        };
        let ending = if self.fatal { "" } else { " (the program's own handler returned from it: it may have gone on)" };
        let gpu = in_flight_text(&self.vulkan).map(|t| format!("; on the GPU at the crash: {t}")).unwrap_or_default();
        format!("pid {} ({}) {how} in thread {}{inside}{ending}; {last}{gpu}", self.pid, self.exe, self.tid)
    }

    /// The claim about this crash: Confirmed when it ended the process (the record was written by the observer
    /// as the signal arrived), Inferred when the program's own handler returned from it.
    pub fn claim(&self, id: String, sources: Vec<Source>) -> Claim {
        let confidence = if self.fatal { Confidence::Confirmed } else { Confidence::Inferred };
        Claim::new(id, confidence, self.statement()).with_sources(sources)
    }
}

/// A Vulkan call that returned `VK_ERROR_DEVICE_LOST` (the layer's `device_lost` record).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceLostSummary {
    pub pid: u32,
    pub exe: String,
    /// The trace file holding the record.
    pub file: String,
    /// `vkQueueSubmit`, `vkWaitForFences`, …
    pub call: String,
    pub result: i32,
    pub at_ns: u64,
    /// The thread that made the call.
    pub tid: u32,
    pub vulkan: Vec<QueueBeforeCrash>,
    /// What the driver said about the fault (`VK_EXT_device_fault`), where it offers that.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub faults: Vec<trace_reader::DeviceFault>,
}

impl DeviceLostSummary {
    pub fn new(report: &DeviceLostReport, file: String) -> DeviceLostSummary {
        DeviceLostSummary {
            pid: report.pid,
            exe: report.exe.clone(),
            file,
            call: report.lost.call.clone(),
            result: report.lost.result,
            at_ns: report.lost.at_ns,
            tid: report.lost.tid,
            vulkan: report.queues.iter().map(QueueBeforeCrash::of).collect(),
            faults: report.lost.faults.clone(),
        }
    }

    pub fn statement(&self) -> String {
        let driver = self.faults.iter().map(fault_text).collect::<Vec<_>>().join("; ");
        let driver = if driver.is_empty() { driver } else { format!("; {driver}") };
        let last = match vulkan_text(&self.vulkan) {
            Some(v) => format!("the last Vulkan dispatches before it were: {v}"),
            None => "no Vulkan dispatch was submitted before it".to_string(),
        };
        let gpu =
            in_flight_text(&self.vulkan).map(|t| format!("; on the GPU at the device loss: {t}")).unwrap_or_default();
        format!(
            "pid {} ({}): {} returned VK_ERROR_DEVICE_LOST in thread {}; {last}{gpu}{driver}",
            self.pid, self.exe, self.call, self.tid
        )
    }

    /// Confirmed: the layer saw the call return the error.
    pub fn claim(&self, id: String, sources: Vec<Source>) -> Claim {
        Claim::new(id, Confidence::Confirmed, self.statement()).with_sources(sources)
    }
}

/// One driver's `VK_EXT_device_fault` answer, as a clause: its description, the faulting addresses and the vendor's
/// codes.
fn fault_text(f: &trace_reader::DeviceFault) -> String {
    let device = f.device.map(|d| format!(" of device {d}")).unwrap_or_default();
    let mut text = format!("the driver{device} reports (VK_EXT_device_fault): \"{}\"", f.description);
    let addresses: Vec<String> = f
        .addresses
        .iter()
        .map(|(kind, address, precision)| {
            format!("{} at {address:#x} (within {precision} bytes)", kind.replace('_', " "))
        })
        .collect();
    if !addresses.is_empty() {
        text.push_str(&format!(", {}", addresses.join(", ")));
    }
    let vendor: Vec<String> =
        f.vendor.iter().map(|(d, code, data)| format!("\"{d}\" (code {code:#x}, data {data:#x})")).collect();
    if !vendor.is_empty() {
        text.push_str(&format!(", vendor: {}", vendor.join(", ")));
    }
    text
}

/// Pending GPU work that made no progress (the layer's hang watcher, a `hang_ms` record).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HangSummary {
    pub pid: u32,
    pub exe: String,
    /// The trace file holding the record.
    pub file: String,
    pub stalled_ms: u64,
    pub at_ns: u64,
    pub vulkan: Vec<QueueBeforeCrash>,
}

impl HangSummary {
    pub fn new(report: &HangReport, file: String) -> HangSummary {
        HangSummary {
            pid: report.pid,
            exe: report.exe.clone(),
            file,
            stalled_ms: report.hang.stalled_ms,
            at_ns: report.hang.at_ns,
            vulkan: report.queues.iter().map(QueueBeforeCrash::of).collect(),
        }
    }

    pub fn statement(&self) -> String {
        let gpu = in_flight_text(&self.vulkan).unwrap_or_else(|| "no queue's progress was known".into());
        format!(
            "pid {} ({}): GPU work made no progress for {:.1} s while pending (the layer's hang watcher); {gpu}",
            self.pid,
            self.exe,
            self.stalled_ms as f64 / 1000.0
        )
    }

    /// Confirmed when the GPU's own markers named what was in flight; Inferred by submission (which dispatch of the
    /// unfinished submission stalled is not known) — a stall the watcher saw is itself observed either way.
    pub fn claim(&self, id: String, sources: Vec<Source>) -> Claim {
        let confidence = if in_flight_exact(&self.vulkan) { Confidence::Confirmed } else { Confidence::Inferred };
        Claim::new(id, confidence, self.statement()).with_sources(sources)
    }
}

/// The failure records of a trace for the kernel join, each with the id of its claim (as [`summarise`] numbers them).
pub fn kernel_failures(
    crashes: &[CrashSummary],
    device_lost: &[DeviceLostSummary],
    hangs: &[HangSummary],
) -> Vec<crate::observe::kernel_log::join::Failure> {
    use crate::observe::kernel_log::join::Failure;
    let id = |kind: &str, i: usize, n: usize| {
        if n == 1 {
            format!("trace.{kind}")
        } else {
            format!("trace.{kind}.{}", i + 1)
        }
    };
    let mut out = Vec::new();
    for (i, c) in crashes.iter().enumerate() {
        let what = if c.code <= 0 { format!("{} it received", c.signal) } else { format!("crash ({})", c.signal) };
        out.push(Failure { pid: c.pid, at_ns: c.at_ns, what, claim: id("crash", i, crashes.len()) });
    }
    for (i, d) in device_lost.iter().enumerate() {
        let what = format!("VK_ERROR_DEVICE_LOST ({})", d.call);
        out.push(Failure { pid: d.pid, at_ns: d.at_ns, what, claim: id("device_lost", i, device_lost.len()) });
    }
    for (i, h) in hangs.iter().enumerate() {
        let what =
            format!("stalled GPU work ({:.1} s without progress, the layer's hang watcher)", h.stalled_ms as f64 / 1e3);
        out.push(Failure { pid: h.pid, at_ns: h.at_ns, what, claim: id("hang", i, hangs.len()) });
    }
    out
}
