//! What a set of trace files says ran: kernels and Vulkan pipelines merged across processes and classified into
//! ggml families, the devices, the crashes and device losses with the last work before them, and the claims they
//! support. A ground-floor module: `trace` prints it, a sweep record stores its rows, `predict` compares with it and
//! `report` cites its crashes.

use std::collections::BTreeMap;

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::evidence::{Claim, Confidence, Source};
use crate::gpu::kernels;
use crate::observe::vulkan::{self, ShaderIndex, Shaders};
use crate::trace::{
    Aggregate, CrashReport, DeviceLostReport, HangReport, KernelStats, QueueRuns, Range, TraceError, TraceFile,
};

/// One kernel as observed, merged across processes: a row of `backscope trace`'s summary and of a sweep record's
/// trace section (`sweep::record::TraceKernel`), both built from [`Aggregate`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObservedKernel {
    /// As the runtime knows it (mangled for C++ kernels).
    pub name: String,
    pub demangled: String,
    /// `cuda`, `cu`, `hip`, `hip_module`, `vulkan`.
    pub api: String,
    /// ggml family (MMVQ, MMQ, …) from `crate::gpu::kernels::describe`.
    pub family: String,
    /// The vendor library of a vendor-BLAS kernel (`cuBLASLt`, `CUTLASS`, `rocBLAS/Tensile`, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub library: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ggml_type: Option<String>,
    /// Launches: direct launch calls plus kernels run by replays of captured graphs (failed calls included).
    pub launches: u64,
    /// Of those, kernels run through graph replays.
    #[serde(default)]
    pub graph: u64,
    /// Of those, launch calls that returned an error (the kernel did not run).
    #[serde(default)]
    pub errors: u64,
    /// The most frequent (grid, block) shapes with their counts; sweep records leave them out. For a Vulkan
    /// pipeline: workgroup counts and the workgroup size.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shapes: Vec<([u32; 3], [u32; 3], u64)>,
    /// Vulkan: the shaders embedded in libggml-vulkan.so that the pipeline's SPIR-V matched.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shaders: Vec<String>,
    /// Vulkan: matmul tile and alignment, coopmat or subgroup variant, in words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub variant: Option<String>,
    /// Vulkan: the ggml op the pipeline computes, as GGML_VK_PERF_LOGGER names the graph node (data/vulkan_pipelines.toml).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub op: Option<String>,
    /// Vulkan: a dispatch a node issues besides its main pipeline (split-k reductions and the like).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub helper: bool,
}

/// How a kernel or pipeline name reads: what to show, its family and ggml type, and (Vulkan) its variant.
pub struct RowName {
    pub shown: String,
    pub family: String,
    /// The vendor library of a vendor-BLAS kernel.
    pub library: Option<String>,
    pub ggml_type: Option<String>,
    pub variant: Option<String>,
    pub op: Option<String>,
    pub helper: bool,
}

impl RowName {
    /// CUDA/HIP kernels by their (mangled) name (`crate::gpu::kernels`), Vulkan pipelines by name and the shaders their
    /// SPIR-V matched (`crate::observe::vulkan`).
    pub fn of(api: &str, name: &str, shaders: &[String]) -> RowName {
        if api == trace_format::record::api::VULKAN {
            let d = vulkan::describe(name, shaders.first().map(String::as_str));
            return RowName {
                shown: name.to_string(),
                family: d.family.to_string(),
                library: None,
                ggml_type: d.ggml_type.map(str::to_string),
                variant: d.variant,
                op: d.op.map(str::to_string),
                helper: d.helper,
            };
        }
        let d = kernels::describe(name);
        RowName {
            shown: d.demangled,
            family: d.family.to_string(),
            library: d.library.map(str::to_string),
            ggml_type: d.ggml_type.map(str::to_string),
            variant: None,
            op: None,
            helper: false,
        }
    }
}

impl ObservedKernel {
    /// A row for one aggregated kernel, classified by name (Vulkan pipelines also by the shaders `shaders` says
    /// they ran), with its `shapes` most frequent shapes.
    pub fn new(stats: KernelStats, shapes: usize, shader_names: &Shaders) -> ObservedKernel {
        let run = if stats.api == trace_format::record::api::VULKAN { shader_names.of(&stats.name) } else { &[] };
        let d = RowName::of(&stats.api, &stats.name, run);
        ObservedKernel {
            demangled: d.shown,
            family: d.family,
            library: d.library,
            ggml_type: d.ggml_type,
            api: stats.api,
            launches: stats.launches,
            graph: stats.graph,
            errors: stats.errors,
            shapes: stats.shapes.iter().take(shapes).map(|(sh, n)| (sh.grid, sh.block, *n)).collect(),
            shaders: run.to_vec(),
            variant: d.variant,
            op: d.op,
            helper: d.helper,
            name: stats.name,
        }
    }
}

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
    /// `GGML_VK_DEBUG_MARKERS`, which `backscope trace` sets.
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
                    "by the GPU's marker at the end of each command buffer, which cannot tell which of its dispatches ran"
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

#[derive(Clone, Debug, Default, Serialize)]
pub struct FamilyTotal {
    pub family: String,
    pub kernels: u64,
    pub launches: u64,
    pub graph: u64,
    pub errors: u64,
}

/// A Vulkan device the layer described (a `device` record), with the processes that used it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceSummary {
    pub pids: Vec<u32>,
    pub name: String,
    pub driver: String,
    pub driver_info: String,
    /// `major.minor.patch`.
    pub api_version: String,
    pub vendor_id: u32,
    pub device_id: u32,
    pub device_type: String,
    pub subgroup_size: u32,
    pub subgroup_size_min: u32,
    pub subgroup_size_max: u32,
    pub integer_dot: bool,
    pub cooperative_matrix: bool,
    /// The shader cores as ggml-vulkan reads them (SMs, active CUs), and the extension that gave them; absent in
    /// traces of layers that did not record them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shader_core_count: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shader_core_count_from: Option<String>,
    pub flags: BTreeMap<String, bool>,
    /// The device answered as a profile (`backscope trace --impersonate`): which, and the device that really ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub impersonated: Option<trace_reader::Impersonated>,
}

impl DeviceSummary {
    /// The devices of `traces`, one per distinct device, in order of first appearance.
    pub fn of<'a>(traces: impl IntoIterator<Item = &'a TraceFile>) -> Vec<DeviceSummary> {
        let mut out: Vec<DeviceSummary> = Vec::new();
        for t in traces {
            for d in t.devices.values() {
                let same = |s: &&mut DeviceSummary| {
                    s.name == d.name
                        && s.driver_info == d.driver_info
                        && (s.vendor_id, s.device_id) == (d.vendor_id, d.device_id)
                };
                if let Some(s) = out.iter_mut().find(same) {
                    if !s.pids.contains(&t.pid()) {
                        s.pids.push(t.pid());
                    }
                    continue;
                }
                out.push(DeviceSummary {
                    pids: vec![t.pid()],
                    name: d.name.clone(),
                    driver: d.driver.clone(),
                    driver_info: d.driver_info.clone(),
                    api_version: format!("{}.{}.{}", d.api_version[0], d.api_version[1], d.api_version[2]),
                    vendor_id: d.vendor_id,
                    device_id: d.device_id,
                    device_type: d.device_type.clone(),
                    subgroup_size: d.subgroup_size,
                    subgroup_size_min: d.subgroup_size_min,
                    subgroup_size_max: d.subgroup_size_max,
                    integer_dot: d.integer_dot,
                    cooperative_matrix: d.cooperative_matrix,
                    shader_core_count: d.shader_core_count,
                    shader_core_count_from: d.shader_core_count_from.clone(),
                    flags: d.flags.clone(),
                    impersonated: d.impersonated.clone(),
                });
            }
        }
        out
    }

    /// The claim sentence: what the device offers of what ggml-vulkan chooses its shaders by.
    pub fn statement(&self) -> String {
        let yes = |b: bool| if b { "offered" } else { "not offered" };
        let flag = |f: &str| match self.flags.get(f) {
            Some(true) => "yes",
            Some(false) => "no",
            None => "unknown",
        };
        let sizes = if self.subgroup_size_min > 0 {
            format!(" ({}–{} with subgroup size control)", self.subgroup_size_min, self.subgroup_size_max)
        } else {
            String::new()
        };
        let impersonated = match &self.impersonated {
            Some(i) => format!(
                " [impersonated: profile {} answered ggml's device queries; the work ran on {} ({}) with empty shaders]",
                i.profile, i.real_name, i.real_driver
            ),
            None => String::new(),
        };
        format!(
            "Vulkan device {} (driver {}, {}; vendor {:#06x}, device {:#06x}, {}, Vulkan {}) was used by pid {}: subgroup \
             size {}{sizes}, integer dot product {}, cooperative matrix {}, FP16 shaders {}, subgroup arithmetic {} \
             (the device's side of ggml-vulkan's `int dot` and `matrix cores`; ggml also needs shaders built for them)\
             {impersonated}",
            self.name,
            self.driver,
            self.driver_info,
            self.vendor_id,
            self.device_id,
            self.device_type,
            self.api_version,
            self.pids.iter().map(u32::to_string).collect::<Vec<_>>().join(", "),
            self.subgroup_size,
            yes(self.integer_dot),
            yes(self.cooperative_matrix),
            flag("fp16"),
            flag("subgroup_arithmetic"),
        )
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct TraceSummary {
    pub schema: &'static str,
    pub dir: String,
    pub processes: Vec<ProcessSummary>,
    pub families: Vec<FamilyTotal>,
    pub kernels: Vec<ObservedKernel>,
    /// Vulkan devices the layer described.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub devices: Vec<DeviceSummary>,
    pub claims: Vec<Claim>,
    /// Fatal signals the observer recorded, with the last kernels before each.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub crashes: Vec<CrashSummary>,
    /// Vulkan calls that returned `VK_ERROR_DEVICE_LOST`, with each queue's last dispatches before.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub device_lost: Vec<DeviceLostSummary>,
    /// The Vulkan layer's hang records.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hangs: Vec<HangSummary>,
    /// The GPU-driver lines the kernel logged while the command ran (`kernel-log.jsonl`), when any were kept or the
    /// kernel log could not be read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kernel_log: Option<crate::observe::kernel_log::stored::KernelLog>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_status: Option<i32>,
    /// The signal that ended the traced command (`SIGTERM`), when one did; `exit_status` is then 128 + its number.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_signal: Option<String>,
    /// Some trace was cut by the observer (byte budget, write error), or is a rotating trace whose earliest segments
    /// were rotated away: every count is a lower bound.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub counts_are_lower_bounds: bool,
    /// Trace files that could not be read; they are left out of every count.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub problems: Vec<TraceProblem>,
}

#[derive(Clone, Debug, Serialize)]
pub struct ProcessSummary {
    pub pid: u32,
    pub exe: String,
    pub file: String,
    pub launches: u64,
    pub graph_launches: u64,
    pub complete: bool,
    /// Why the observer stopped writing this trace early; its counts are lower bounds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cut: Option<String>,
    /// The segments of a rotating trace (`BACKSCOPE_TRACE_ROTATE`) read as this process's trace.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub segments: Option<SegmentsSummary>,
    pub warnings: Vec<String>,
}

/// Which segments of a rotating trace were read: `file` is the newest's; counts are those since `since_ns` when
/// earlier segments were rotated away.
#[derive(Clone, Debug, Serialize)]
pub struct SegmentsSummary {
    /// Segment numbers read, oldest first, and their files.
    pub present: Vec<u32>,
    pub files: Vec<String>,
    /// Segments the trace keeps.
    pub kept: u32,
    /// Earlier segments not read (numbers 0 to `rotated_away` - 1): deleted by the rotation.
    pub rotated_away: u32,
    /// Runs of segment numbers between those read that are missing, `[first, last]`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub missing: Vec<[u32; 2]>,
    /// Start of the first window read (CLOCK_MONOTONIC ns): the counts are those since then.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub since_ns: Option<u64>,
    /// The newest segment read names a next one that was not read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub continues_in: Option<String>,
    /// All of it, for people.
    pub statement: String,
}

impl SegmentsSummary {
    fn of(trace: &TraceFile) -> Option<SegmentsSummary> {
        let s = trace.segments.as_ref()?;
        Some(SegmentsSummary {
            present: s.present.iter().map(|p| p.index).collect(),
            files: s.present.iter().filter_map(|p| p.path.as_ref()).map(|p| p.display().to_string()).collect(),
            kept: s.kept,
            rotated_away: s.first_index(),
            missing: s.missing().into_iter().map(|(a, b)| [a, b]).collect(),
            since_ns: s.since_ns,
            continues_in: s.continues_in.clone(),
            statement: s.describe(),
        })
    }
}

/// A trace file left out: where, and what was wrong.
#[derive(Clone, Debug, Serialize)]
pub struct TraceProblem {
    pub file: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub line: Option<usize>,
    pub message: String,
}

impl From<&TraceError> for TraceProblem {
    fn from(e: &TraceError) -> TraceProblem {
        TraceProblem {
            file: e.path.as_ref().map(|p| p.display().to_string()).unwrap_or_default(),
            line: e.line,
            message: e.message.clone(),
        }
    }
}

impl std::fmt::Display for TraceProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.line {
            Some(line) => write!(f, "{}:{line}: {}", self.file, self.message),
            None => write!(f, "{}: {}", self.file, self.message),
        }
    }
}

/// Merge every process's kernels by name, classify them, and state what ran as claims. `problems` are the trace
/// files that could not be read (left out of the counts).
pub fn summarise(
    dir: &Path,
    traces: Vec<TraceFile>,
    problems: &[TraceError],
    exit_status: Option<i32>,
) -> TraceSummary {
    summarise_with_libraries(dir, traces, problems, exit_status, &[])
}

/// [`summarise`], with `libraries` read for Vulkan shaders besides those the traces name (see
/// [`ShaderIndex::add_library`]).
pub fn summarise_with_libraries(
    dir: &Path,
    mut traces: Vec<TraceFile>,
    problems: &[TraceError],
    exit_status: Option<i32>,
    libraries: &[&Path],
) -> TraceSummary {
    // Vulkan pipelines without a debug name are named after the shader their SPIR-V matched.
    let mut index = ShaderIndex::default();
    index.add_traces(&traces);
    libraries.iter().for_each(|l| index.add_library(l));
    traces.iter_mut().for_each(|t| index.name_pipelines(t));
    let traces = traces.as_slice();
    let shaders = index.shaders_by_name(traces);
    let all = Aggregate::of(traces, Range::All);
    let file = |p: &Option<PathBuf>| p.as_ref().map(|p| p.display().to_string()).unwrap_or_default();
    // `Aggregate::of` lists one process per trace, in their order.
    let processes = all
        .processes
        .iter()
        .zip(traces)
        .map(|(p, t)| ProcessSummary {
            pid: p.pid,
            exe: p.exe.clone(),
            file: file(&p.path),
            launches: p.launches,
            graph_launches: p.graph_launches,
            complete: p.complete,
            cut: p.cut.as_ref().map(|c| c.why()),
            segments: SegmentsSummary::of(t),
            warnings: p.warnings.iter().map(|w| format!("{}: {}", w.code, w.detail)).collect(),
        })
        .collect();
    let kernels: Vec<ObservedKernel> = all.kernels.into_iter().map(|s| ObservedKernel::new(s, 4, &shaders)).collect();
    let devices = DeviceSummary::of(traces);
    let mut fam: BTreeMap<&str, FamilyTotal> = BTreeMap::new();
    for k in &kernels {
        let f = fam.entry(&k.family).or_insert_with(|| FamilyTotal { family: k.family.clone(), ..Default::default() });
        f.kernels += 1;
        f.launches += k.launches;
        f.graph += k.graph;
        f.errors += k.errors;
    }
    let mut families: Vec<FamilyTotal> = fam.into_values().collect();
    families.sort_by_key(|f| std::cmp::Reverse(f.launches));
    let problems: Vec<TraceProblem> = problems.iter().map(TraceProblem::from).collect();
    let crashes = CrashSummary::all_of(&all.crashes, |c| file(&c.path));
    let device_lost: Vec<DeviceLostSummary> =
        all.device_lost.iter().map(|d| DeviceLostSummary::new(d, file(&d.path))).collect();
    let mut claims = claims(dir, traces, &problems, &kernels, &families, &crashes);
    // One claim per record: `trace.KIND` when there is one, `trace.KIND.N` when there are several.
    let numbered = |kind: &str, i: usize, n: usize| {
        if n == 1 {
            format!("trace.{kind}")
        } else {
            format!("trace.{kind}.{}", i + 1)
        }
    };
    for (i, d) in device_lost.iter().enumerate() {
        let source =
            Source::file(d.file.clone(), None, None, "backscope-trace file: device_lost record (Vulkan layer)");
        claims.push(d.claim(numbered("device_lost", i, device_lost.len()), vec![source]));
    }
    let hangs: Vec<HangSummary> = all.hangs.iter().map(|h| HangSummary::new(h, file(&h.path))).collect();
    for (i, h) in hangs.iter().enumerate() {
        let source = Source::file(h.file.clone(), None, None, "backscope-trace file: hang_ms record (Vulkan layer)");
        claims.push(h.claim(numbered("hang", i, hangs.len()), vec![source]));
    }
    claims.extend(vulkan_claims(traces, &devices, &index));
    claims.extend(order_claim(dir, traces));
    let observed: Vec<(String, u64)> = kernels
        .iter()
        .filter(|k| k.api == trace_format::record::api::VULKAN)
        .map(|k| (k.name.clone(), k.launches))
        .collect();
    claims.extend(crate::observe::vulkan::capability::trace_claims("trace.vulkan.capability", traces, &observed, &[]));
    let kernel_log = crate::observe::kernel_log::stored::read_dir(
        dir,
        &dir.join(crate::observe::kernel_log::record::FILE_NAME).display().to_string(),
    );
    if let Some(log) = &kernel_log {
        kernel_claims(log, traces, (&crashes, &device_lost, &hangs), &mut claims);
    }
    TraceSummary {
        schema: "backscope.trace-summary/1",
        dir: dir.display().to_string(),
        processes,
        families,
        kernels,
        devices,
        claims,
        crashes,
        device_lost,
        hangs,
        kernel_log,
        exit_status,
        exit_signal: None,
        counts_are_lower_bounds: traces.iter().any(|t| t.is_cut() || t.rotated_away().is_some()),
        problems,
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

/// The kernel's side: a claim per incident of the kept GPU-driver lines (`trace.kernel`, `trace.kernel.N`), joined
/// to the traced process it names and that process's failure record, whose claim then names it; and the capture's
/// limits (`trace.kernel_log`, Limited).
fn kernel_claims(
    log: &crate::observe::kernel_log::stored::KernelLog,
    traces: &[TraceFile],
    (crashes, device_lost, hangs): (&[CrashSummary], &[DeviceLostSummary], &[HangSummary]),
    claims: &mut Vec<Claim>,
) {
    use crate::observe::kernel_log::join;
    let failures = kernel_failures(crashes, device_lost, hangs);
    let traced: Vec<(u32, String)> = traces.iter().map(|t| (t.pid(), t.header.exe.clone())).collect();
    // The last window with work of a process that began before an instant: where its last launch or submission was.
    let last_work = |pid: u32, t_ns: u64| {
        traces
            .iter()
            .filter(|t| t.pid() == pid)
            .flat_map(|t| t.windows.iter())
            .filter(|w| w.t0 <= t_ns && !w.counts.is_empty())
            .max_by_key(|w| w.t0)
            .map(|w| [w.t0, w.t1])
    };
    let joined = join::join(&log.lines, &traced, &failures);
    for (i, j) in joined.iter().enumerate() {
        let id = if joined.len() == 1 { "trace.kernel".to_string() } else { format!("trace.kernel.{}", i + 1) };
        claims.push(j.claim(id.clone(), &failures, &last_work));
        for (k, f) in failures.iter().enumerate() {
            let Some((note, sources)) = j.note_for(k, &id, &failures) else { continue };
            if let Some(c) = claims.iter_mut().find(|c| c.id == f.claim) {
                c.statement.push_str(&note);
                c.sources.extend(sources);
            }
        }
    }
    claims.extend(join::limits_claim(log, "trace.kernel_log"));
}

/// Besides ggml's own matmul kernels ([`kernels::MATMUL_FAMILIES`]), a trace summary names the paths that leave
/// matmuls to a dequantize pass and vendor BLAS; on Vulkan, to a dequantize pass.
const MATMUL_FALLBACKS: &[&str] = &["dequantize", "vendor-BLAS"];
const VULKAN_MATMUL_FALLBACKS: &[&str] = &["dequantize"];

/// The matmul families that say something for these kernels: CUDA/HIP's when some kernel is not a Vulkan
/// pipeline, Vulkan's when some is.
fn matmul_families(kernels: &[ObservedKernel]) -> Vec<&'static str> {
    let vulkan = |k: &&ObservedKernel| k.api == trace_format::record::api::VULKAN;
    let mut out: Vec<&'static str> = Vec::new();
    if kernels.is_empty() || kernels.iter().any(|k| !vulkan(&k)) {
        out.extend(kernels::MATMUL_FAMILIES.iter().chain(MATMUL_FALLBACKS));
    }
    if kernels.iter().any(|k| vulkan(&k)) {
        for f in kernels::VULKAN_MATMUL_FAMILIES.iter().chain(VULKAN_MATMUL_FALLBACKS) {
            if !out.contains(f) {
                out.push(f);
            }
        }
    }
    out
}

/// Claims about Vulkan: each device's facts (asked from the driver by the layer), and how pipelines without a
/// debug name were named.
fn vulkan_claims(traces: &[TraceFile], devices: &[DeviceSummary], index: &ShaderIndex) -> Vec<Claim> {
    let mut out = Vec::new();
    let file_of = |pid: u32| {
        traces.iter().filter(move |t| t.pid() == pid && !t.devices.is_empty()).filter_map(|t| t.path.as_ref())
    };
    for (i, d) in devices.iter().enumerate() {
        let id = if devices.len() == 1 {
            "trace.vulkan.device".to_string()
        } else {
            format!("trace.vulkan.device.{}", i + 1)
        };
        let sources = d.pids.iter().flat_map(|&pid| file_of(pid)).take(8).map(|p| {
            Source::file(
                p.display().to_string(),
                None,
                None,
                "backscope-trace device record (the Vulkan layer asked the driver)",
            )
        });
        out.push(Claim::new(id, Confidence::Confirmed, d.statement()).with_sources(sources));
    }
    let hashed: Vec<&str> = traces
        .iter()
        .flat_map(|t| t.kernels.values())
        .filter(|k| k.api == trace_format::record::api::VULKAN && k.source == trace_format::record::source::SPIRV_HASH)
        .filter(|k| !k.name.starts_with("spirv:"))
        .map(|k| k.name.as_str())
        .collect();
    let libraries: Vec<Source> = index
        .libraries
        .iter()
        .map(|(p, what)| {
            let what = match what {
                vulkan::Library::Shaders(n) => {
                    format!("{n} embedded SPIR-V shaders, hashed as the layer hashes modules")
                }
                vulkan::Library::Stripped => "no symbol table (stripped): its shaders have no names".to_string(),
                vulkan::Library::Unreadable(e) => format!("could not be read: {e}"),
            };
            Source::file(p.display().to_string(), None, None, what)
        })
        .collect();
    if !hashed.is_empty() {
        out.push(
            Claim::new(
                "trace.vulkan.shaders",
                Confidence::Inferred,
                format!(
                    "{} Vulkan pipeline(s) had no debug name and are named after the embedded shader their SPIR-V hash matched (e.g. {})",
                    hashed.len(),
                    hashed.iter().take(3).copied().collect::<Vec<_>>().join(", ")
                ),
            )
            .with_sources(libraries.clone()),
        );
    }
    if let Some(claim) = unread_libraries_claim(index) {
        out.push(claim);
    }
    let unnamed = index.unnamed(traces);
    if unnamed > 0 {
        let why = if index.libraries.is_empty() {
            "no trace names a library holding their SPIR-V (the layer records the loaded libggml-vulkan)".to_string()
        } else {
            "their hash matched no shader of the libraries read".to_string()
        };
        out.push(
            Claim::new(
                "trace.vulkan.unnamed",
                Confidence::Limited,
                format!(
                    "{unnamed} Vulkan pipeline(s) are known only by the hash of their SPIR-V (spirv:<hash>): {why}; \
                     GGML_VK_DEBUG_MARKERS=1 (which backscope trace sets) makes ggml-vulkan name them"
                ),
            )
            .with_sources(libraries),
        );
    }
    out
}

/// The order of the Vulkan dispatches, where the layer recorded it: how many distinct sequences of pipelines the
/// submitted command buffers dispatched (`crate::observe::vulkan::dispatch_record`), the one submitted most, and those whose
/// order was not kept. Nothing for traces that recorded no order or no dispatch.
fn order_claim(dir: &Path, traces: &[TraceFile]) -> Option<Claim> {
    use crate::observe::vulkan::dispatch_record::{DispatchRecord, Order};
    let record = DispatchRecord::of(dir, traces);
    let Order::Yes { sequences, not_kept } = &record.order else { return None };
    let most = sequences.iter().max_by_key(|s| (s.submissions, std::cmp::Reverse(s.first_ns)))?;
    let submissions: u64 = sequences.iter().map(|s| s.submissions).sum();
    let start: Vec<String> = most.runs.iter().take(4).map(|(name, n)| format!("{n}× {name}")).collect();
    let statement = format!(
        "The order of the Vulkan dispatches was recorded: {} distinct sequence(s) of pipelines over {submissions} \
         submitted command buffer(s){}; the most submitted ({}×) is {} dispatches: {}{}",
        sequences.len(),
        if *not_kept > 0 { format!(" and {not_kept} whose order the layer did not keep") } else { String::new() },
        most.submissions,
        most.dispatches(),
        start.join(", "),
        if most.runs.len() > start.len() { ", …" } else { "" }
    );
    let sources = traces.iter().filter(|t| t.order_recorded()).filter_map(|t| t.path.as_ref()).take(8).map(|p| {
        Source::file(p.display().to_string(), None, None, "backscope-trace file: sequence records (Vulkan layer)")
    });
    Some(Claim::new("trace.vulkan.order", Confidence::Confirmed, statement).with_sources(sources))
}

/// The id of the Limited claim naming the shader libraries the traces name that were not read.
pub const LIBRARIES_SKIPPED: &str = "trace.vulkan.libraries_skipped";

/// The libraries the traces name that were not read for shaders (not a regular file, too large, over the
/// command's read budget, not a library), each named with why: what the shader names rest on is then partial.
fn unread_libraries_claim(index: &ShaderIndex) -> Option<Claim> {
    let unread: Vec<(&PathBuf, &str)> = index
        .libraries
        .iter()
        .filter_map(|(p, what)| match what {
            vulkan::Library::Unreadable(why) => Some((p, why.as_str())),
            _ => None,
        })
        .collect();
    if unread.is_empty() && !index.libraries_left_out {
        return None;
    }
    const SHOWN: usize = 4;
    let mut listed: Vec<String> =
        unread.iter().take(SHOWN).map(|(p, why)| format!("{} ({why})", p.display())).collect();
    if unread.len() > SHOWN {
        listed.push(format!("and {} more", unread.len() - SHOWN));
    }
    if index.libraries_left_out {
        listed.push(format!(
            "the traces name more than {} libraries; the rest were not looked at",
            vulkan::MAX_LIBRARIES
        ));
    }
    let sources = unread.iter().take(SHOWN).map(|(p, why)| {
        Source::file(p.display().to_string(), None, None, format!("named by a trace's pipeline; not read: {why}"))
    });
    Some(
        Claim::new(
            LIBRARIES_SKIPPED,
            Confidence::Limited,
            format!(
                "{} of the {}{} shader libraries the traces name were not read, so pipelines from them keep their \
                 spirv:<hash> names: {}",
                unread.len(),
                index.libraries.len(),
                if index.libraries_left_out { "+" } else { "" },
                listed.join("; ")
            ),
        )
        .with_sources(sources),
    )
}

fn claims(
    dir: &Path,
    traces: &[TraceFile],
    problems: &[TraceProblem],
    kernels: &[ObservedKernel],
    families: &[FamilyTotal],
    crashes: &[CrashSummary],
) -> Vec<Claim> {
    let sources: Vec<Source> = traces
        .iter()
        .filter_map(|t| t.path.as_ref())
        .take(8)
        .map(|p| Source::file(p.display().to_string(), None, None, "backscope-trace file (observed launches)"))
        .collect();
    let mut out = Vec::new();
    if !problems.is_empty() {
        out.push(unreadable_claim(problems));
    }
    if traces.is_empty() {
        if problems.is_empty() {
            out.push(none_claim(dir));
        }
        return out;
    }
    // A cut trace misses everything after its cut, a rotating one whose earliest segments were rotated away
    // everything before its first window read: their counts are lower bounds, and "did not run" is unknown.
    let cut: Vec<&TraceFile> = traces.iter().filter(|t| t.is_cut()).collect();
    let rotated: Vec<&TraceFile> = traces.iter().filter(|t| t.rotated_away().is_some()).collect();
    let counting = if cut.is_empty() && rotated.is_empty() {
        Counting { counted: "", at_least: "", confidence: Confidence::Confirmed }
    } else {
        Counting { counted: " (at least)", at_least: "at least ", confidence: Confidence::Limited }
    };
    out.push(total_claim(traces, kernels, (cut.len(), rotated.len()), &counting, &sources));
    family_claims(kernels, families, (cut.len(), rotated.len()), &counting, &sources, &mut out);
    out.extend(cut_claim(&cut));
    out.extend(rotated_claim(&rotated));
    for (i, c) in crashes.iter().enumerate() {
        let id = if crashes.len() == 1 { "trace.crash".to_string() } else { format!("trace.crash.{}", i + 1) };
        out.push(c.claim(id, c.sources(str::to_string)));
    }
    out.extend(incomplete_claim(traces));
    out
}

/// How counts are worded: exact, or lower bounds when a trace was cut.
struct Counting {
    counted: &'static str,
    at_least: &'static str,
    confidence: Confidence,
}

/// Trace files that could not be read are left out of every count.
fn unreadable_claim(problems: &[TraceProblem]) -> Claim {
    let listed: Vec<String> = problems.iter().take(4).map(|p| p.to_string()).collect();
    let more = if problems.len() > 4 { format!("; and {} more", problems.len() - 4) } else { String::new() };
    Claim::new(
        "trace.unreadable",
        Confidence::Limited,
        format!(
            "{} trace file(s) could not be read and are left out of every count: {}{more}",
            problems.len(),
            listed.join("; ")
        ),
    )
    .with_sources(
        problems
            .iter()
            .take(8)
            .map(|p| Source::file(p.file.clone(), None, None, format!("unreadable trace file: {}", p.message))),
    )
}

/// No trace at all.
fn none_claim(dir: &Path) -> Claim {
    Claim::new(
            "trace.none",
            Confidence::Unresolved,
            format!("No trace file in {}: the command loaded no CUDA/HIP runtime and created no Vulkan device, or the observer could not write (see its stderr line)", dir.display()),
        )
        .with_source(Source::file(dir.display().to_string(), None, None, "trace directory"))
}

/// How many launches of how many kernels in how many processes.
fn total_claim(
    traces: &[TraceFile],
    kernels: &[ObservedKernel],
    (cut, rotated): (usize, usize),
    counting: &Counting,
    sources: &[Source],
) -> Claim {
    let Counting { at_least, confidence, .. } = *counting;
    let total: u64 = kernels.iter().map(|k| k.launches).sum();
    let failed: u64 = kernels.iter().map(|k| k.errors).sum();
    let failed_text =
        if failed > 0 { format!(" ({failed} of them failed: the runtime returned an error)") } else { String::new() };
    let vulkan_text = if kernels.iter().any(|k| k.api == trace_format::record::api::VULKAN) {
        " (a Vulkan pipeline's launches are its dispatches, counted when submitted)"
    } else {
        ""
    };
    let cut_text = match (cut, rotated) {
        (0, 0) => String::new(),
        (cut, 0) => format!("; {cut} trace(s) were cut, so these counts are lower bounds (see trace.cut)"),
        (0, rotated) => format!(
            "; {rotated} rotating trace(s) had their earliest segments rotated away, so these counts are lower \
             bounds (see trace.rotated)"
        ),
        (cut, rotated) => format!(
            "; {cut} trace(s) were cut and {rotated} had their earliest segments rotated away, so these counts are \
             lower bounds (see trace.cut, trace.rotated)"
        ),
    };
    Claim::new(
            "trace.total",
            confidence,
            format!(
                "{at_least}{total} kernel launches of {} distinct kernels were observed in {} process(es){vulkan_text}{failed_text}{cut_text}",
                kernels.len(),
                traces.len()
            ),
        )
        .with_sources(sources.to_vec())
}

/// Which matmul families ran, and which did not.
fn family_claims(
    kernels: &[ObservedKernel],
    families: &[FamilyTotal],
    (cut, rotated): (usize, usize),
    counting: &Counting,
    sources: &[Source],
    out: &mut Vec<Claim>,
) {
    let Counting { counted, at_least, confidence } = *counting;
    let relevant = matmul_families(kernels);
    let present: Vec<&FamilyTotal> = families.iter().filter(|f| relevant.contains(&f.family.as_str())).collect();
    let absent: Vec<&str> = relevant.iter().copied().filter(|m| !families.iter().any(|f| f.family == *m)).collect();
    for f in &present {
        let top: Vec<String> = kernels
            .iter()
            .filter(|k| k.family == f.family)
            .take(3)
            .map(|k| format!("{} {}", k.launches, short_name(&k.demangled)))
            .collect();
        // Vendor BLAS: which libraries' kernels they were.
        let mut libraries: Vec<&str> =
            kernels.iter().filter(|k| k.family == f.family).filter_map(|k| k.library.as_deref()).collect();
        libraries.sort_unstable();
        libraries.dedup();
        let from = if libraries.is_empty() { String::new() } else { format!(" ({})", libraries.join(", ")) };
        out.push(
            Claim::new(
                format!("trace.family.{}", f.family),
                confidence,
                format!(
                    "{}{from} ran: {at_least}{} launches of {} kernel(s) (top{counted}: {})",
                    f.family,
                    f.launches - f.errors,
                    f.kernels,
                    top.join("; ")
                ),
            )
            .with_sources(sources.to_vec()),
        );
    }
    if !present.is_empty() && !absent.is_empty() {
        let absent = absent.join(", ");
        let (confidence, statement) = match (cut, rotated) {
            (0, 0) => (Confidence::Confirmed, format!("No {absent} kernel ran during the traced command")),
            (_, 0) => (
                Confidence::Unresolved,
                format!("No {absent} kernel ran before the trace(s) were cut; whether one ran afterwards is not known"),
            ),
            _ => (
                Confidence::Unresolved,
                format!(
                    "No {absent} kernel ran in what the traces hold; some were cut or rotated (see trace.cut, \
                     trace.rotated), and whether one ran outside it is not known"
                ),
            ),
        };
        out.push(Claim::new("trace.absent", confidence, statement).with_sources(sources.to_vec()));
    }
}

/// Traces the observer stopped writing before their process ended.
fn cut_claim(cut: &[&TraceFile]) -> Option<Claim> {
    if cut.is_empty() {
        return None;
    }
    let what: Vec<String> = cut
        .iter()
        .filter_map(|t| {
            let c = t.truncated.as_ref()?;
            Some(format!("pid {} after {} bytes: {}", t.pid(), c.bytes, c.why()))
        })
        .collect();
    Some(
        Claim::new(
            "trace.cut",
            Confidence::Limited,
            format!(
                "The observer stopped writing {} trace(s) before the process ended ({}); launches after the cut are not counted",
                cut.len(),
                what.join("; ")
            ),
        )
        .with_sources(cut.iter().filter_map(|t| t.path.as_ref()).map(|p| {
            Source::file(p.display().to_string(), None, None, "trace file ending with a truncated record")
        })),
    )
}

/// Rotating traces whose earliest segments were rotated away (or are missing): their counts start later than their
/// process.
fn rotated_claim(rotated: &[&TraceFile]) -> Option<Claim> {
    if rotated.is_empty() {
        return None;
    }
    let what: Vec<String> = rotated
        .iter()
        .filter_map(|t| {
            let s = t.rotated_away()?;
            let since = match s.since_ns {
                Some(since) => format!(
                    "its counts are those since {since} ns (CLOCK_MONOTONIC; {:.1} s after the process started)",
                    since.saturating_sub(t.header.start_ns) as f64 / 1e9
                ),
                None => "its segments read hold no window".to_string(),
            };
            Some(format!("pid {} ({}): {}; {since}", t.pid(), t.header.exe, s.describe()))
        })
        .collect();
    let sources = rotated.iter().filter_map(|t| t.segments.as_ref()).flat_map(|s| &s.present).filter_map(|p| {
        let what = format!("backscope-trace file: segment {} of a rotating trace", p.index);
        p.path.as_ref().map(|path| Source::file(path.display().to_string(), None, None, what))
    });
    Some(
        Claim::new(
            "trace.rotated",
            Confidence::Limited,
            format!(
                "{} rotating trace(s) (BACKSCOPE_TRACE_ROTATE) no longer hold their process's beginning: {}; \
                 every count of theirs is a lower bound for the process",
                rotated.len(),
                what.join("; ")
            ),
        )
        .with_sources(sources.take(16)),
    )
}

/// A process whose crash record says its open window was written lost nothing; any other that ended without
/// the exit flush may have lost its last window.
fn incomplete_claim(traces: &[TraceFile]) -> Option<Claim> {
    let incomplete: Vec<&TraceFile> =
        traces.iter().filter(|t| !t.is_finished() && !t.fatal_crash().is_some_and(|c| c.flushed)).collect();
    (!incomplete.is_empty()).then(|| {
            Claim::new(
                "trace.incomplete",
                Confidence::Limited,
                format!("{} process(es) ended without the observer's exit flush (killed or crashed): their last window may be missing", incomplete.len()),
            )
            .with_sources(incomplete.iter().filter_map(|t| t.path.as_ref()).map(|p| Source::file(p.display().to_string(), None, None, "trace file without end record")))
    })
}

pub fn short_name(demangled: &str) -> String {
    let mut s: String = demangled.chars().take(70).collect();
    if demangled.chars().count() > 70 {
        s.push('…');
    }
    s
}
