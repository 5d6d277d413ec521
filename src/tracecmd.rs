//! `backscope trace -- CMD ARGS…`: run a command under the dispatch observer (`crates/observer`, loaded with
//! `LD_PRELOAD`) and the Vulkan layer (`crates/vklayer`, enabled through the Vulkan loader's environment), then read
//! the trace files it and its children wrote and report which GPU kernels and Vulkan pipelines really ran,
//! classified into ggml families. `--env` prints what to set to observe a service instead, and `--read DIR`
//! summarises traces written that way.
//!
//! While the command runs, SIGINT and SIGTERM sent to backscope are passed on to it (see [`run_observed`]); then
//! backscope summarises what was written and exits with the command's status. A trace file that cannot be read is
//! reported with its path and line and left out; the others are still summarised. Counts from a trace the observer
//! cut (byte budget, write error) are lower bounds, and the claims say so.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use trace_format::env;

use crate::evidence::{Claim, Confidence, Source};
use crate::kernels;
use crate::output::{messages, Block, Column, Document, Excerpt, Output, OutputOptions, Render, Rendered, Table};
use crate::trace::{
    self, Aggregate, CrashReport, DeviceLostReport, KernelStats, QueueRuns, Range, TraceError, TraceFile,
};
use crate::vulkan::{self, ShaderIndex, Shaders};

pub const OBSERVER_FILE: &str = "libbackscope_observer.so";

/// What `backscope trace` does: run a command under the observer, print the environment that observes a service
/// (`env`), or summarise traces already written (`read`).
#[derive(Debug, Clone, Default)]
pub struct TraceOptions {
    /// The observer library (default: $BACKSCOPE_OBSERVER_SO, else next to the backscope executable).
    pub observer: Option<PathBuf>,
    /// The Vulkan layer library (default: $BACKSCOPE_VKLAYER_SO, else next to the backscope executable).
    pub vklayer: Option<PathBuf>,
    /// Directory for the trace files (default: a new directory under the system temp dir). Must be empty or new.
    pub dir: Option<PathBuf>,
    /// Length of a trace time window in milliseconds.
    pub interval_ms: u64,
    /// Turn ggml's CUDA graphs off in the traced command (GGML_CUDA_DISABLE_GRAPHS=1).
    pub no_graphs: bool,
    /// Print the environment lines that observe a service, then exit.
    pub env: bool,
    /// With `env`: print a systemd drop-in for this unit instead.
    pub systemd: Option<String>,
    /// Summarise the trace files already in this directory instead of running a command.
    pub read: Option<PathBuf>,
    /// Format (JSON: the summary, schema `backscope.trace-summary/1`) and destination.
    pub output: OutputOptions,
    /// Rows of the per-kernel table (0 = all).
    pub top: usize,
    /// The command to run.
    pub command: Vec<String>,
}

/// One kernel as observed, merged across processes: a row of `backscope trace`'s summary and of a sweep record's
/// trace section (`sweep::record::TraceKernel`), both built from [`Aggregate`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObservedKernel {
    /// As the runtime knows it (mangled for C++ kernels).
    pub name: String,
    pub demangled: String,
    /// `cuda`, `cu`, `hip`, `hip_module`, `vulkan`.
    pub api: String,
    /// ggml family (MMVQ, MMQ, …) from `crate::kernels::describe`.
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
    /// CUDA/HIP kernels by their (mangled) name (`crate::kernels`), Vulkan pipelines by name and the shaders their
    /// SPIR-V matched (`crate::vulkan`).
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
        format!("pid {} ({}) {how} in thread {}{inside}{ending}; {last}", self.pid, self.exe, self.tid)
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
        }
    }

    pub fn statement(&self) -> String {
        let last = match vulkan_text(&self.vulkan) {
            Some(v) => format!("the last Vulkan dispatches before it were: {v}"),
            None => "no Vulkan dispatch was submitted before it".to_string(),
        };
        format!(
            "pid {} ({}): {} returned VK_ERROR_DEVICE_LOST in thread {}; {last}",
            self.pid, self.exe, self.call, self.tid
        )
    }

    /// Confirmed: the layer saw the call return the error.
    pub fn claim(&self, id: String, sources: Vec<Source>) -> Claim {
        Claim::new(id, Confidence::Confirmed, self.statement()).with_sources(sources)
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
        format!(
            "Vulkan device {} (driver {}, {}; vendor {:#06x}, device {:#06x}, {}, Vulkan {}) was used by pid {}: subgroup \
             size {}{sizes}, integer dot product {}, cooperative matrix {}, FP16 shaders {}, subgroup arithmetic {} \
             (the device's side of ggml-vulkan's `int dot` and `matrix cores`; ggml also needs shaders built for them)",
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
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_status: Option<i32>,
    /// The signal that ended the traced command (`SIGTERM`), when one did; `exit_status` is then 128 + its number.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_signal: Option<String>,
    /// Some trace was cut by the observer (byte budget, write error): every count is a lower bound.
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
    pub warnings: Vec<String>,
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

/// Find the observer library: explicit path, environment, or beside the running executable.
/// Where `trace --env` points a service's traces when no `--dir` is given: `/var/tmp/backscope-traces-UID`, made
/// private to the user (mode 0700, [`crate::inputs::private_dir`]) and refused when someone else could have
/// planted traces in it, since `trace --read` takes what it finds there as evidence. `/var/tmp` rather than
/// `$XDG_RUNTIME_DIR`: that is a tmpfs of a few percent of RAM, removed at logout, and a service's traces (up to the
/// observer's 1 GiB per process) outlive sessions.
pub fn default_env_dir() -> Result<PathBuf> {
    // SAFETY: getuid cannot fail.
    let dir = PathBuf::from(format!("/var/tmp/backscope-traces-{}", unsafe { libc::getuid() }));
    crate::inputs::private_dir(&dir).map_err(|e| anyhow::anyhow!("{e}, or name another directory with --dir"))?;
    Ok(dir)
}

pub fn find_observer(explicit: Option<&Path>) -> Result<PathBuf> {
    find_library(explicit, "observer library", "BACKSCOPE_OBSERVER_SO", OBSERVER_FILE, " or pass --observer PATH")
}

/// The observer library for `trace -- CMD`, or `None` (with a note) when none was named and none is found: a
/// Vulkan-only program is still observed by the layer, and [`run_observed`] refuses only when neither is there.
fn optional_observer(explicit: Option<&Path>) -> Result<Option<PathBuf>> {
    match find_observer(explicit) {
        Ok(p) => Ok(Some(p)),
        Err(e) if explicit.is_none() && std::env::var_os("BACKSCOPE_OBSERVER_SO").is_none() => {
            messages::note(format_args!("CUDA/HIP launches are not observed: {e:#}"));
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

/// A library `backscope trace` loads into the traced program (`file`, called `what` in messages): the path given,
/// else `$env_var`, else beside the running executable, in `deps/`, or in `../lib/backscope` (where `cargo build` and
/// an install put it). `hint` ends the not-found message.
pub(crate) fn find_library(
    explicit: Option<&Path>,
    what: &str,
    env_var: &str,
    file: &str,
    hint: &str,
) -> Result<PathBuf> {
    // A named library must be a regular file: the dynamic loader of the traced program would block forever on a
    // FIFO and read a device without end.
    let regular = |p: PathBuf, named: String| -> Result<PathBuf> {
        let p = p.canonicalize().with_context(|| named.clone())?;
        crate::inputs::open_input(&p).with_context(|| named)?;
        Ok(p)
    };
    if let Some(p) = explicit {
        return regular(p.to_path_buf(), format!("{what} {}", p.display()));
    }
    if let Some(p) = std::env::var_os(env_var) {
        let p = PathBuf::from(p);
        let named = format!("{env_var}={}", p.display());
        return regular(p, named);
    }
    let exe = std::env::current_exe().context("locating the backscope executable")?;
    let dir = exe.parent().unwrap_or(Path::new("."));
    for candidate in [dir.join(file), dir.join("deps").join(file), dir.join("../lib/backscope").join(file)] {
        if candidate.is_file() {
            return Ok(candidate.canonicalize()?);
        }
    }
    bail!(
        "cannot find {file} next to {}; build it with `cargo build --release` (the workspace builds it){hint}",
        exe.display()
    )
}

/// The variables that enable the Vulkan layer (`crate::vulkan::layer_env`), its manifest written: empty, with a note
/// on stderr, when the layer cannot be found and none was named (CUDA/HIP are still observed); an error when the
/// one named cannot be used.
pub fn vulkan_env(explicit: Option<&Path>, existing: impl Fn(&str) -> Option<String>) -> Result<Vec<(String, String)>> {
    let dir = vulkan::optional_manifest_dir(explicit).context("writing the Vulkan layer's manifest")?;
    Ok(dir.map(|dir| vulkan::layer_env(&dir, existing)).unwrap_or_default())
}

pub fn run(args: TraceOptions) -> Result<u8> {
    let inputs = crate::output::Inputs::none()
        .maybe(args.read.as_ref())
        .maybe(args.observer.as_ref())
        .maybe(args.vklayer.as_ref());
    let mut out = Output::open(&args.output, &inputs)?;
    if args.env {
        let observer = find_observer(args.observer.as_deref())?;
        // A service starts with its own environment: only what these lines set is assumed.
        let vulkan = vulkan_env(args.vklayer.as_deref(), |_| None)?;
        let dir = match &args.dir {
            Some(d) => d.clone(),
            None => default_env_dir()?,
        };
        out.emit(&env_view(&observer, &vulkan, &dir, args.systemd.as_deref(), args.interval_ms))?;
        out.finish()?;
        return Ok(0);
    }
    let (dir, exit_status, exit_signal) = match &args.read {
        Some(dir) => (dir.clone(), None, None),
        None => {
            if args.command.is_empty() {
                bail!("nothing to trace: give a command after `--` (backscope trace -- llama-bench -m model.gguf), or --read DIR / --env");
            }
            let observer = optional_observer(args.observer.as_deref())?;
            let dir = match &args.dir {
                Some(d) => {
                    std::fs::create_dir_all(d).with_context(|| format!("creating {}", d.display()))?;
                    if std::fs::read_dir(d)?.next().is_some() {
                        bail!("{} is not empty: trace files of an earlier run would mix with this one", d.display());
                    }
                    d.clone()
                }
                // A new directory with an unpredictable name, mode 0700, created exclusively: in a shared /tmp a
                // predictable name could be taken first by another user, who would then own the trace files.
                None => tempfile::Builder::new()
                    .prefix(&format!("backscope-trace-{}-", std::process::id()))
                    .tempdir()
                    .context("creating the trace directory")?
                    .keep(),
            };
            // First, so that a run that is killed outright still said where its files are.
            messages::note(format_args!("tracing into {}", dir.display()));
            let (status, signal) = run_observed(observer.as_deref(), &dir, &args)?;
            (dir, Some(status), signal)
        }
    };
    let read = trace::read_dir_folded(&dir)?;
    let mut summary = summarise(&dir, read.traces, &read.problems, exit_status);
    summary.exit_signal = exit_signal.map(|s| trace_format::record::signal_name(s).to_string());
    out.emit(&TraceView { summary: &summary, top: args.top })?;
    out.finish()?;
    // Exit with the traced command's status, so `backscope trace -- cmd` can stand in for `cmd` in scripts.
    Ok(match exit_status {
        Some(s) if (0..=255).contains(&s) => s as u8,
        Some(_) => 1,
        // `--read` with some unreadable trace file: the others are summarised.
        None if !summary.problems.is_empty() => crate::exit::PROBLEMS,
        None => 0,
    })
}

/// `--env`: the lines to copy, and (JSON) the variables.
fn env_view(
    observer: &Path,
    vulkan: &[(String, String)],
    dir: &Path,
    systemd_unit: Option<&str>,
    interval_ms: u64,
) -> Rendered {
    let text = env_lines(observer, vulkan, dir, systemd_unit, interval_ms);
    let mut document = Document::new("backscope trace --env");
    document.push(Excerpt::verbatim(text.lines().map(str::to_string)));
    let mut variables = serde_json::json!({
        "LD_PRELOAD": observer.display().to_string(),
        "BACKSCOPE_TRACE_DIR": dir.display().to_string(),
        "BACKSCOPE_TRACE_INTERVAL_MS": interval_ms.to_string(),
    });
    for (k, v) in vulkan {
        variables[k.as_str()] = serde_json::Value::String(v.clone());
    }
    let json = serde_json::json!({
        "schema": "backscope.trace-env/1",
        "systemd_unit": systemd_unit,
        "variables": variables,
        "text": text,
    });
    Rendered { document, json }
}

/// Environment that loads the observer into a process (and, through inheritance, its children), and enables the
/// Vulkan layer in it (`vulkan`: from [`vulkan_env`]).
pub fn env_lines(
    observer: &Path,
    vulkan: &[(String, String)],
    dir: &Path,
    systemd_unit: Option<&str>,
    interval_ms: u64,
) -> String {
    let mut vars: Vec<(&str, String)> = vec![
        ("LD_PRELOAD", observer.display().to_string()),
        (env::TRACE_DIR.name(), dir.display().to_string()),
        (env::TRACE_INTERVAL_MS.name(), interval_ms.to_string()),
    ];
    vars.extend(vulkan.iter().map(|(k, v)| (k.as_str(), v.clone())));
    let mut out = String::new();
    match systemd_unit {
        Some(unit) => {
            let _ = writeln!(out, "# /etc/systemd/system/{unit}.d/backscope-trace.conf");
            let _ = writeln!(
                out,
                "# then: mkdir -p {0} && chown <service user> {0}; systemctl daemon-reload; systemctl restart {unit}",
                dir.display()
            );
            let _ = writeln!(
                out,
                "# runners the service starts inherit LD_PRELOAD; read the traces with: backscope trace --read {}",
                dir.display()
            );
            if !vulkan.is_empty() {
                let _ = writeln!(
                    out,
                    "# VK_* enable backscope's Vulkan layer; GGML_VK_DEBUG_MARKERS makes ggml-vulkan name its pipelines"
                );
            }
            let _ = writeln!(out, "[Service]");
            for (k, v) in vars {
                let _ = writeln!(out, "Environment=\"{k}={v}\"");
            }
        }
        None => {
            let _ = writeln!(
                out,
                "# mkdir -p {0}; export these before starting the service; then: backscope trace --read {0}",
                dir.display()
            );
            for (k, v) in vars {
                let _ = writeln!(out, "export {k}={v}");
            }
        }
    }
    out
}

/// Runs the traced command and waits for it. SIGINT and SIGTERM are blocked in backscope from here on and taken
/// with `sigtimedwait`, so they never end backscope itself (the summary is still to come); each one is passed on to
/// the command (see [`signals::forward`]) unless it came from the terminal to the foreground process group the command
/// shares with backscope (it has it already: a second SIGINT would make llama-server quit without its orderly
/// shutdown). The third request sends SIGKILL instead, for a command that does not stop. The command starts with
/// an empty signal mask and the default action for the signals backscope handles ([`signals::start_clean`]: std
/// leaves the mask as the spawning thread has it), so it sees signals as it would without backscope. Returns the
/// exit status (128 + N for a signal) and the signal that ended the command, if one did.
fn run_observed(observer: Option<&Path>, dir: &Path, args: &TraceOptions) -> Result<(i32, Option<i32>)> {
    let vulkan = vulkan_env(args.vklayer.as_deref(), |k| std::env::var(k).ok())?;
    if observer.is_none() && vulkan.is_empty() {
        bail!(
            "nothing to observe with: neither the observer library (CUDA/HIP) nor the Vulkan layer was found; build \
             them with `cargo build --release` (the workspace builds both) or pass --observer / --vklayer"
        );
    }
    let mut cmd = Command::new(&args.command[0]);
    cmd.args(&args.command[1..])
        .env(env::TRACE_DIR.name(), dir)
        .env(env::TRACE_INTERVAL_MS.name(), args.interval_ms.to_string());
    if let Some(observer) = observer {
        let preload = match std::env::var("LD_PRELOAD") {
            Ok(existing) if !existing.is_empty() => format!("{}:{existing}", observer.display()),
            _ => observer.display().to_string(),
        };
        cmd.env("LD_PRELOAD", preload);
    }
    for (k, v) in vulkan {
        cmd.env(k, v);
    }
    if args.no_graphs {
        cmd.env("GGML_CUDA_DISABLE_GRAPHS", "1");
    }
    signals::start_clean(&mut cmd);
    let signals = signals::Blocked::termination_and_child()?;
    let mut child = cmd.spawn().with_context(|| format!("cannot run {}", args.command[0]))?;
    let pid = child.id() as i32;
    let mut requests = 0u32;
    let status = loop {
        if let Some(status) = child.try_wait().context("waiting for the traced command")? {
            break status;
        }
        // SIGCHLD wakes this up when the command exits; the timeout only bounds a missed wake-up.
        let Some(received) = signals.wait(Duration::from_millis(200)) else { continue };
        if received.signal == libc::SIGCHLD {
            continue;
        }
        requests += 1;
        let name = signals::name(received.signal);
        if requests >= 3 {
            let target = signals::forward(pid, libc::SIGKILL);
            messages::note(format_args!("{name} again: sent SIGKILL to {target}"));
        } else if received.from_process || !signals::shares_our_group(pid) {
            let target = signals::forward(pid, received.signal);
            messages::note(format_args!(
                "{name}: passed on to {target}; waiting for it to exit (a third request sends SIGKILL)"
            ));
        } else {
            messages::note(format_args!(
                "{name} from the terminal (the traced command has it too); waiting for it to exit"
            ));
        }
    };
    use std::os::unix::process::ExitStatusExt;
    Ok((status.code().unwrap_or_else(|| 128 + status.signal().unwrap_or(0)), status.signal()))
}

/// The signal plumbing of [`run_observed`], on libc alone.
mod signals {
    use std::io;
    use std::time::Duration;

    /// Makes `cmd` start with an empty signal mask and SIGINT, SIGTERM, SIGCHLD and SIGPIPE at their default
    /// action. The mask is inherited across fork and exec, and std's spawn does not reset it: without this the
    /// command would start with the signals [`Blocked`] takes blocked, so every forwarded SIGINT/SIGTERM would stay
    /// pending in it forever (issue 21).
    pub fn start_clean(cmd: &mut std::process::Command) {
        use std::os::unix::process::CommandExt;
        // SAFETY: only async-signal-safe calls (sigemptyset, pthread_sigmask, signal) between fork and exec.
        unsafe {
            cmd.pre_exec(|| {
                let mut empty: libc::sigset_t = std::mem::zeroed();
                libc::sigemptyset(&mut empty);
                let rc = libc::pthread_sigmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());
                if rc != 0 {
                    return Err(io::Error::from_raw_os_error(rc));
                }
                for signal in [libc::SIGINT, libc::SIGTERM, libc::SIGCHLD, libc::SIGPIPE] {
                    if libc::signal(signal, libc::SIG_DFL) == libc::SIG_ERR {
                        return Err(io::Error::last_os_error());
                    }
                }
                Ok(())
            });
        }
    }

    /// A signal taken by [`Blocked::wait`].
    pub struct Received {
        pub signal: libc::c_int,
        /// Sent with `kill`/`sigqueue`/`tgkill` (`si_code <= 0` on Linux) rather than generated by the kernel
        /// (a terminal's Ctrl-C, which reaches the whole foreground process group).
        pub from_process: bool,
    }

    /// SIGINT, SIGTERM and SIGCHLD blocked in the calling thread. The mask stays for the rest of the process:
    /// a request that arrives while the summary is being written is held, not acted on, so it cannot cut the
    /// summary short.
    pub struct Blocked {
        set: libc::sigset_t,
    }

    impl Blocked {
        pub fn termination_and_child() -> io::Result<Blocked> {
            // SAFETY: sigset_t is plain data, initialised by sigemptyset before any other use.
            let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
            // SAFETY: `set` is a valid sigset_t; the signal numbers are valid.
            unsafe {
                libc::sigemptyset(&mut set);
                for signal in [libc::SIGINT, libc::SIGTERM, libc::SIGCHLD] {
                    libc::sigaddset(&mut set, signal);
                }
            }
            // SAFETY: changes this thread's mask only; `set` is valid and the old mask is not needed.
            let rc = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
            if rc != 0 {
                return Err(io::Error::from_raw_os_error(rc));
            }
            Ok(Blocked { set })
        }

        /// The next pending signal of the set, waiting at most `timeout`.
        pub fn wait(&self, timeout: Duration) -> Option<Received> {
            let timeout = libc::timespec {
                tv_sec: timeout.as_secs() as libc::time_t,
                tv_nsec: timeout.subsec_nanos() as libc::c_long,
            };
            // SAFETY: siginfo_t is plain data that sigtimedwait fills in.
            let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
            // SAFETY: valid set, writable info and a valid timeout; the signals are blocked in this thread.
            let signal = unsafe { libc::sigtimedwait(&self.set, &mut info, &timeout) };
            (signal > 0).then_some(Received { signal, from_process: info.si_code <= 0 })
        }
    }

    pub fn name(signal: libc::c_int) -> &'static str {
        match signal {
            libc::SIGINT => "SIGINT",
            libc::SIGTERM => "SIGTERM",
            libc::SIGKILL => "SIGKILL",
            _ => "signal",
        }
    }

    fn pgid(pid: libc::pid_t) -> libc::pid_t {
        // SAFETY: getpgid has no memory preconditions; it fails harmlessly for a process that is gone.
        unsafe { libc::getpgid(pid) }
    }

    /// Whether `pid` is in backscope's process group (where a terminal's signals reach it too).
    pub fn shares_our_group(pid: libc::pid_t) -> bool {
        pgid(pid) == pgid(0)
    }

    /// Sends `signal` to the traced command: to its process group if it leads one of its own, else to it and every
    /// process below it (what a terminal's Ctrl-C would reach), so that `sh -c 'long-running'` leaves nothing
    /// behind. Returns what was signalled, for the message.
    pub fn forward(child: libc::pid_t, signal: libc::c_int) -> String {
        if pgid(child) == child {
            // SAFETY: signals the process group that the traced command leads.
            unsafe { libc::kill(-child, signal) };
            return format!("process group {child}");
        }
        let below = crate::proc::stat::descendants(child);
        // SAFETY: signals the traced command, our own child (not yet reaped, so the pid is still its).
        unsafe { libc::kill(child, signal) };
        for &pid in &below {
            // SAFETY: a process found under the traced command a moment ago.
            unsafe { libc::kill(pid, signal) };
        }
        match below.len() {
            0 => format!("pid {child}"),
            n => format!("pid {child} and the {n} process(es) it started"),
        }
    }
}

/// Merge every process's kernels by name, classify them, and state what ran as claims. `problems` are the trace
/// files that could not be read (left out of the counts).
pub fn summarise(
    dir: &Path,
    mut traces: Vec<TraceFile>,
    problems: &[TraceError],
    exit_status: Option<i32>,
) -> TraceSummary {
    // Vulkan pipelines without a debug name are named after the shader their SPIR-V matched.
    let mut index = ShaderIndex::default();
    index.add_traces(&traces);
    traces.iter_mut().for_each(|t| index.name_pipelines(t));
    let traces = traces.as_slice();
    let shaders = index.shaders_by_name(traces);
    let all = Aggregate::of(traces, Range::All);
    let file = |p: &Option<PathBuf>| p.as_ref().map(|p| p.display().to_string()).unwrap_or_default();
    let processes = all
        .processes
        .iter()
        .map(|p| ProcessSummary {
            pid: p.pid,
            exe: p.exe.clone(),
            file: file(&p.path),
            launches: p.launches,
            graph_launches: p.graph_launches,
            complete: p.complete,
            cut: p.cut.as_ref().map(|c| c.why()),
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
    for (i, d) in device_lost.iter().enumerate() {
        let id = if device_lost.len() == 1 {
            "trace.device_lost".to_string()
        } else {
            format!("trace.device_lost.{}", i + 1)
        };
        let source =
            Source::file(d.file.clone(), None, None, "backscope-trace file: device_lost record (Vulkan layer)");
        claims.push(d.claim(id, vec![source]));
    }
    claims.extend(vulkan_claims(traces, &devices, &index));
    let observed: Vec<(String, u64)> = kernels
        .iter()
        .filter(|k| k.api == trace_format::record::api::VULKAN)
        .map(|k| (k.name.clone(), k.launches))
        .collect();
    claims.extend(crate::vulkan_capability::trace_claims("trace.vulkan.capability", traces, &observed, &[]));
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
        exit_status,
        exit_signal: None,
        counts_are_lower_bounds: traces.iter().any(TraceFile::is_cut),
        problems,
    }
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
        let listed: Vec<String> = problems.iter().take(4).map(|p| p.to_string()).collect();
        let more = if problems.len() > 4 { format!("; and {} more", problems.len() - 4) } else { String::new() };
        out.push(
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
            ),
        );
    }
    if traces.is_empty() {
        if problems.is_empty() {
            out.push(
                Claim::new(
                    "trace.none",
                    Confidence::Unresolved,
                    format!("No trace file in {}: the command loaded no CUDA/HIP runtime and created no Vulkan device, or the observer could not write (see its stderr line)", dir.display()),
                )
                .with_source(Source::file(dir.display().to_string(), None, None, "trace directory")),
            );
        }
        return out;
    }
    // A cut trace misses everything after its cut: its counts are lower bounds, and "did not run" is unknown.
    let cut: Vec<&TraceFile> = traces.iter().filter(|t| t.is_cut()).collect();
    let (counted, at_least, confidence) = if cut.is_empty() {
        ("", "", Confidence::Confirmed)
    } else {
        (" (at least)", "at least ", Confidence::Limited)
    };
    let total: u64 = kernels.iter().map(|k| k.launches).sum();
    let failed: u64 = kernels.iter().map(|k| k.errors).sum();
    let failed_text =
        if failed > 0 { format!(" ({failed} of them failed: the runtime returned an error)") } else { String::new() };
    let vulkan_text = if kernels.iter().any(|k| k.api == trace_format::record::api::VULKAN) {
        " (a Vulkan pipeline's launches are its dispatches, counted when submitted)"
    } else {
        ""
    };
    let cut_text = if cut.is_empty() {
        String::new()
    } else {
        format!("; {} trace(s) were cut, so these counts are lower bounds (see trace.cut)", cut.len())
    };
    out.push(
        Claim::new(
            "trace.total",
            confidence,
            format!(
                "{at_least}{total} kernel launches of {} distinct kernels were observed in {} process(es){vulkan_text}{failed_text}{cut_text}",
                kernels.len(),
                traces.len()
            ),
        )
        .with_sources(sources.clone()),
    );
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
            .with_sources(sources.clone()),
        );
    }
    if !present.is_empty() && !absent.is_empty() {
        let (confidence, statement) = if cut.is_empty() {
            (Confidence::Confirmed, format!("No {} kernel ran during the traced command", absent.join(", ")))
        } else {
            (
                Confidence::Unresolved,
                format!(
                    "No {} kernel ran before the trace(s) were cut; whether one ran afterwards is not known",
                    absent.join(", ")
                ),
            )
        };
        out.push(Claim::new("trace.absent", confidence, statement).with_sources(sources.clone()));
    }
    if !cut.is_empty() {
        let what: Vec<String> = cut
            .iter()
            .filter_map(|t| {
                let c = t.truncated.as_ref()?;
                Some(format!("pid {} after {} bytes: {}", t.pid(), c.bytes, c.why()))
            })
            .collect();
        out.push(
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
        );
    }
    for (i, c) in crashes.iter().enumerate() {
        let id = if crashes.len() == 1 { "trace.crash".to_string() } else { format!("trace.crash.{}", i + 1) };
        out.push(c.claim(id, c.sources(str::to_string)));
    }
    // A process whose crash record says its open window was written lost nothing; any other that ended without
    // the exit flush may have lost its last window.
    let incomplete: Vec<&TraceFile> =
        traces.iter().filter(|t| !t.is_finished() && !t.fatal_crash().is_some_and(|c| c.flushed)).collect();
    if !incomplete.is_empty() {
        out.push(
            Claim::new(
                "trace.incomplete",
                Confidence::Limited,
                format!("{} process(es) ended without the observer's exit flush (killed or crashed): their last window may be missing", incomplete.len()),
            )
            .with_sources(incomplete.iter().filter_map(|t| t.path.as_ref()).map(|p| Source::file(p.display().to_string(), None, None, "trace file without end record"))),
        );
    }
    out
}

fn short_name(demangled: &str) -> String {
    let mut s: String = demangled.chars().take(70).collect();
    if demangled.chars().count() > 70 {
        s.push('…');
    }
    s
}

/// What `backscope trace` prints: the summary, with `top` rows of the per-kernel table (0: all).
#[derive(Debug)]
pub struct TraceView<'a> {
    pub summary: &'a TraceSummary,
    pub top: usize,
}

impl Render for TraceView<'_> {
    fn write_json(&self, out: &mut dyn std::io::Write) -> std::io::Result<()> {
        serde_json::to_writer(&mut *out, self.summary)?;
        writeln!(out)
    }

    fn document(&self) -> Document {
        document(self.summary, self.top)
    }
}

/// The summary as a document: how the command ended, what ran (the claims), then the families, the kernels, the
/// processes.
pub fn document(s: &TraceSummary, top: usize) -> Document {
    let mut doc = Document::new(format!("backscope trace: {}", s.dir));
    match (s.exit_status, &s.exit_signal) {
        (Some(code), Some(signal)) => {
            doc.paragraph(format!("traced command was ended by {signal} (exit status {code}); traces in {}", s.dir))
        }
        (Some(code), None) => doc.paragraph(format!("traced command exited with status {code}; traces in {}", s.dir)),
        (None, _) => doc.paragraph(format!("traces in {}", s.dir)),
    };
    if s.counts_are_lower_bounds {
        doc.paragraph("Counts are lower bounds (at least): a trace was cut before its process ended (see trace.cut)");
    }
    doc.heading(2, "Claims");
    doc.claims(&s.claims);
    let mut t = Table::new(vec![
        Column::keep("family"),
        Column::number("kernels"),
        Column::number("launches"),
        Column::number("via graph replay"),
        Column::number("failed"),
    ]);
    for f in &s.families {
        t.row([
            f.family.clone(),
            f.kernels.to_string(),
            f.launches.to_string(),
            f.graph.to_string(),
            f.errors.to_string(),
        ]);
    }
    doc.heading(2, "Kernel families");
    doc.push(t);
    let mut t = Table::new(vec![
        Column::label("kernel"),
        Column::keep("family"),
        Column::keep("type"),
        Column::number("launches"),
        Column::number("graph"),
        Column::number("failed"),
        Column::text("top shape (grid / block)"),
    ]);
    let n = if top == 0 { s.kernels.len() } else { top.min(s.kernels.len()) };
    for k in &s.kernels[..n] {
        let shape = k.shapes.first().map(|(g, b, c)| format!("{g:?} / {b:?} ×{c}")).unwrap_or_default();
        let label = match &k.variant {
            Some(v) => format!("{} ({v})", short_name(&k.demangled)),
            None => short_name(&k.demangled),
        };
        t.row([
            label,
            k.family.to_string(),
            k.ggml_type.as_deref().unwrap_or("-").to_string(),
            k.launches.to_string(),
            k.graph.to_string(),
            k.errors.to_string(),
            shape,
        ]);
    }
    doc.heading(2, format!("Kernels ({} of {})", n, s.kernels.len()));
    doc.push(t);
    if !s.devices.is_empty() {
        let mut t = Table::new(vec![
            Column::label("Vulkan device"),
            Column::keep("driver"),
            Column::keep("subgroup"),
            Column::keep("int dot"),
            Column::keep("coopmat"),
            Column::keep("fp16"),
            Column::text("pids"),
        ]);
        let yes = |b: bool| if b { "yes" } else { "no" }.to_string();
        for d in &s.devices {
            let subgroup = if d.subgroup_size_min > 0 {
                format!("{} ({}–{})", d.subgroup_size, d.subgroup_size_min, d.subgroup_size_max)
            } else {
                d.subgroup_size.to_string()
            };
            t.row([
                d.name.clone(),
                format!("{} {}", d.driver, d.driver_info),
                subgroup,
                yes(d.integer_dot),
                yes(d.cooperative_matrix),
                d.flags.get("fp16").map_or("?".to_string(), |&b| yes(b)),
                d.pids.iter().map(u32::to_string).collect::<Vec<_>>().join(", "),
            ]);
        }
        doc.heading(2, "Vulkan devices");
        doc.push(t);
    }
    let mut t = Table::new(vec![
        Column::number("pid"),
        Column::label("executable"),
        Column::number("kernel launches"),
        Column::number("graph launches"),
        Column::text("trace"),
        Column::label("file"),
    ]);
    let mut warnings = Vec::new();
    for p in &s.processes {
        let state = match (&p.cut, p.complete) {
            (Some(why), _) => format!("cut: {why}"),
            (None, true) => "complete".to_string(),
            (None, false) => "no exit record".to_string(),
        };
        t.row([
            p.pid.to_string(),
            p.exe.clone(),
            p.launches.to_string(),
            p.graph_launches.to_string(),
            state,
            p.file.clone(),
        ]);
        warnings.extend(p.warnings.iter().map(|w| format!("pid {}: {w}", p.pid).into()));
        for c in s.crashes.iter().filter(|c| c.pid == p.pid && c.file == p.file) {
            let inside = c.threads.first().and_then(|t| t.in_flight.as_deref()).unwrap_or("no observed call");
            warnings.push(
                format!(
                    "pid {}: {} {} in thread {} ({inside}); see the crash claim",
                    p.pid,
                    if c.fatal { "crashed with" } else { "received" },
                    c.signal,
                    c.tid
                )
                .into(),
            );
        }
    }
    doc.heading(2, "Processes");
    doc.push(t);
    if !warnings.is_empty() {
        doc.push(Block::List(warnings));
    }
    if !s.problems.is_empty() {
        doc.heading(2, "Problems (these files are left out)");
        doc.push(Block::List(s.problems.iter().map(|p| p.to_string().into()).collect()));
    }
    doc
}
