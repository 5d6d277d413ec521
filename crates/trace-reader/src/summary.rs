//! One aggregation over the traces of a run (the processes of one command, or of one server during
//! one request): kernels merged by (api, name) across processes, per-process totals, how far the
//! counted windows reach outside the range, and the crashes with the kernels launched before them.
//! `backscope trace` summarises with [`Range::All`]; `sweep --trace` with each request's interval.

use std::path::PathBuf;

use crate::reader::{merge_by_name, KernelStats, Range, TraceFile};
use crate::records::{Crash, DeviceLost, QueueAtLoss, Shape, Truncated, Warning};

/// One process's part of an [`Aggregate`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProcessStats {
    pub pid: u32,
    pub ppid: u32,
    pub exe: String,
    pub path: Option<PathBuf>,
    /// Executions in the range.
    pub launches: u64,
    /// Graph launches in the range.
    pub graph_launches: u64,
    /// Graph launches of graphs not captured under observation, in the range.
    pub unknown_graph_launches: u64,
    /// The process reached its exit flush.
    pub complete: bool,
    /// Why the observer stopped writing this trace early, if it did.
    pub cut: Option<Truncated>,
    pub warnings: Vec<Warning>,
}

/// A run of identical consecutive launches before a crash.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LaunchRun {
    pub name: String,
    pub api: String,
    pub shape: Shape,
    pub failed: bool,
    /// Start of the window of the last launch of the run.
    pub window_t0: u64,
    pub repeats: u32,
}

/// One thread's state at a crash: the runtime call it was inside and its last launches, oldest
/// first, identical consecutive launches merged.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ThreadAtCrash {
    pub tid: u32,
    pub in_flight: Option<String>,
    pub launches: Vec<LaunchRun>,
}

/// A run of equal consecutive dispatches a Vulkan queue was given, its pipeline named.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DispatchRun {
    pub name: String,
    /// Workgroup counts.
    pub grid: [u32; 3],
    /// The pipeline's workgroup size, from its definition (`[0,0,0]` when unknown).
    pub block: [u32; 3],
    /// The queue's submissions the run spans (first, last).
    pub submits: (u64, u64),
    pub dispatches: u64,
    /// The debug label they were recorded under (ggml-vulkan's graph node).
    pub label: Option<String>,
}

/// One Vulkan queue's last submitted dispatches, oldest first, equal consecutive ones merged.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueueRuns {
    pub queue: u32,
    /// The device's name, from its `device` record.
    pub device: Option<String>,
    pub submits: u64,
    pub runs: Vec<DispatchRun>,
    /// Dispatches the record left out (their pipeline was not defined in the file).
    pub omitted: u32,
    /// The black box's progress, with the in-flight dispatches named.
    pub progress: Option<(crate::records::QueueProgress, Vec<InFlightRun>)>,
}

/// A dispatch the black box names as in flight (or as a candidate, by submission).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InFlightRun {
    pub name: String,
    pub submit: u64,
    /// Its index in its command buffer, from 1.
    pub index: u32,
    pub grid: [u32; 3],
}

impl QueueRuns {
    fn of(trace: &TraceFile, q: &QueueAtLoss) -> QueueRuns {
        let mut runs: Vec<DispatchRun> = Vec::new();
        for d in &q.dispatches {
            let (name, block) = trace
                .kernels
                .get(&d.kernel)
                .map(|k| (k.name.clone(), k.local_size.unwrap_or_default()))
                .unwrap_or_else(|| (format!("kernel {}", d.kernel), [0; 3]));
            match runs.last_mut() {
                Some(run) if run.name == name && run.grid == d.grid && run.label == d.label => {
                    run.dispatches += u64::from(d.count);
                    run.submits.1 = d.submit;
                }
                _ => runs.push(DispatchRun {
                    name,
                    grid: d.grid,
                    block,
                    submits: (d.submit, d.submit),
                    dispatches: u64::from(d.count),
                    label: d.label.clone(),
                }),
            }
        }
        QueueRuns {
            queue: q.queue,
            device: q.device.and_then(|id| trace.devices.get(&id)).map(|d| d.name.clone()),
            submits: q.submits,
            runs,
            omitted: q.omitted,
            progress: q.progress.as_ref().map(|p| {
                let named = p
                    .in_flight
                    .iter()
                    .map(|d| InFlightRun {
                        name: trace
                            .kernels
                            .get(&d.kernel)
                            .map_or_else(|| format!("kernel {}", d.kernel), |k| k.name.clone()),
                        submit: d.submit,
                        index: d.index,
                        grid: d.grid,
                    })
                    .collect();
                (p.clone(), named)
            }),
        }
    }

    /// Dispatches remembered.
    pub fn dispatches(&self) -> u64 {
        self.runs.iter().map(|r| r.dispatches).sum()
    }
}

/// A crash record with its kernels named.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CrashReport {
    pub pid: u32,
    pub exe: String,
    pub path: Option<PathBuf>,
    /// The program that wrote the trace (`backscope-vklayer` for the Vulkan layer's records).
    pub writer: String,
    pub crash: Crash,
    /// Nothing shows that the process survived it (see [`TraceFile::fatal_crash`]).
    pub fatal: bool,
    /// The receiving thread first.
    pub threads: Vec<ThreadAtCrash>,
    /// Vulkan queues' last submitted dispatches (the layer's records).
    pub queues: Vec<QueueRuns>,
}

/// A `device_lost` record with its pipelines named.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceLostReport {
    pub pid: u32,
    pub exe: String,
    pub path: Option<PathBuf>,
    pub lost: DeviceLost,
    pub queues: Vec<QueueRuns>,
}

/// A `hang_ms` record with its pipelines named.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HangReport {
    pub pid: u32,
    pub exe: String,
    pub path: Option<PathBuf>,
    pub hang: crate::records::Hang,
    pub queues: Vec<QueueRuns>,
}

impl CrashReport {
    fn of(trace: &TraceFile, crash: &Crash) -> CrashReport {
        let threads = crash
            .threads
            .iter()
            .map(|t| {
                let mut launches: Vec<LaunchRun> = Vec::new();
                for l in &t.launches {
                    let (name, api) = trace
                        .kernels
                        .get(&l.kernel)
                        .map(|k| (k.name.clone(), k.api.clone()))
                        .unwrap_or_else(|| (format!("kernel {}", l.kernel), String::new()));
                    match launches.last_mut() {
                        Some(run)
                            if run.name == name && run.api == api && run.shape == l.shape && run.failed == l.failed =>
                        {
                            run.repeats += 1;
                            run.window_t0 = l.window_t0;
                        }
                        _ => launches.push(LaunchRun {
                            name,
                            api,
                            shape: l.shape,
                            failed: l.failed,
                            window_t0: l.window_t0,
                            repeats: 1,
                        }),
                    }
                }
                ThreadAtCrash { tid: t.tid, in_flight: t.in_flight.clone(), launches }
            })
            .collect();
        CrashReport {
            pid: trace.pid(),
            exe: trace.header.exe.clone(),
            path: trace.path_at(crash.at_ns),
            writer: trace.header.writer.clone(),
            crash: crash.clone(),
            fatal: trace.fatal_crash().is_some_and(|f| f.seq == crash.seq),
            threads,
            queues: crash.queues.iter().map(|q| QueueRuns::of(trace, q)).collect(),
        }
    }

    /// Launches remembered before the crash, over all threads.
    pub fn launches(&self) -> u32 {
        self.threads.iter().flat_map(|t| &t.launches).map(|l| l.repeats).sum()
    }
}

/// What several traces show over one time range.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Aggregate {
    /// Kernels launched in the range, merged by (api, name) across processes, most launched first
    /// (then by name).
    pub kernels: Vec<KernelStats>,
    /// Every trace, in the order given.
    pub processes: Vec<ProcessStats>,
    pub total_launches: u64,
    /// Of those, launch calls that returned an error.
    pub failed_launches: u64,
    /// How far the counted windows with launches reach before the range's start and after its end
    /// (ns); zero for [`Range::All`].
    pub spill_ns: [u64; 2],
    /// Crash records whose signal arrived within the range, in trace order.
    pub crashes: Vec<CrashReport>,
    /// Device-lost records within the range, in trace order.
    pub device_lost: Vec<DeviceLostReport>,
    /// The Vulkan layer's hang records.
    pub hangs: Vec<HangReport>,
}

impl Aggregate {
    pub fn of<'a>(traces: impl IntoIterator<Item = &'a TraceFile>, range: Range) -> Aggregate {
        let mut out = Aggregate::default();
        let mut stats = Vec::new();
        for t in traces {
            if let Range::Within(t0, t1) | Range::Overlapping(t0, t1) = range {
                for w in t.windows_in(range).filter(|w| !w.counts.is_empty()) {
                    out.spill_ns[0] = out.spill_ns[0].max(t0.saturating_sub(w.t0));
                    out.spill_ns[1] = out.spill_ns[1].max(w.t1.saturating_sub(t1));
                }
            }
            out.processes.push(ProcessStats {
                pid: t.pid(),
                ppid: t.header.ppid,
                exe: t.header.exe.clone(),
                path: t.path.clone(),
                launches: t.total_launches(range),
                graph_launches: t.graph_launches(range),
                unknown_graph_launches: t.windows_in(range).fold(0, |n, w| n.saturating_add(w.unknown_graph_launches)),
                complete: t.is_complete(),
                cut: t.truncated.clone(),
                warnings: t.warnings.clone(),
            });
            out.crashes
                .extend(t.crashes.iter().filter(|c| range.includes_instant(c.at_ns)).map(|c| CrashReport::of(t, c)));
            out.device_lost.extend(t.device_lost.iter().filter(|d| range.includes_instant(d.at_ns)).map(|d| {
                DeviceLostReport {
                    pid: t.pid(),
                    exe: t.header.exe.clone(),
                    path: t.path_at(d.at_ns),
                    lost: d.clone(),
                    queues: d.queues.iter().map(|q| QueueRuns::of(t, q)).collect(),
                }
            }));
            out.hangs.extend(t.hangs.iter().filter(|h| range.includes_instant(h.at_ns)).map(|h| HangReport {
                pid: t.pid(),
                exe: t.header.exe.clone(),
                path: t.path_at(h.at_ns),
                hang: h.clone(),
                queues: h.queues.iter().map(|q| QueueRuns::of(t, q)).collect(),
            }));
            stats.extend(t.kernel_stats(range));
        }
        let mut kernels: Vec<KernelStats> = merge_by_name(stats).into_values().filter(|s| s.launches > 0).collect();
        kernels.sort_by(|a, b| b.launches.cmp(&a.launches).then_with(|| a.name.cmp(&b.name)));
        out.total_launches = kernels.iter().fold(0, |n, k| n.saturating_add(k.launches));
        out.failed_launches = kernels.iter().fold(0, |n, k| n.saturating_add(k.errors));
        out.kernels = kernels;
        out
    }
}
