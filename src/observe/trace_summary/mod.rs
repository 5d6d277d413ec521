//! What a set of trace files says ran: kernels and Vulkan pipelines merged across processes and classified into
//! ggml families, the devices, the crashes and device losses with the last work before them, and the claims they
//! support. A ground-floor module: `trace` prints it, a sweep record stores its rows, `predict` compares with it and
//! `report` cites its crashes.

pub mod claims;
pub mod crashes;
pub mod files;
pub mod kernels;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::evidence::{Claim, Source};
use crate::observe::vulkan::ShaderIndex;
use crate::trace::{Aggregate, Range, TraceError, TraceFile};
use crashes::{CrashSummary, DeviceLostSummary, HangSummary};
use files::{ProcessSummary, SegmentsSummary, TraceProblem};
use kernels::{DeviceSummary, FamilyTotal, ObservedKernel};

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

/// [`summarise`] of traces written while backscope did not run (`trace --read` of a service traced with `--env`):
/// without a `kernel-log.jsonl` beside them, the kernel's lines of the traces' span are read after the fact
/// ([`crate::observe::kernel_log::after_the_fact`]).
pub fn summarise_read(dir: &Path, traces: Vec<TraceFile>, problems: &[TraceError]) -> TraceSummary {
    summarise_inner(dir, traces, problems, None, &[], KernelLines::StoredElseAfterTheFact)
}

/// [`summarise`], with `libraries` read for Vulkan shaders besides those the traces name (see
/// [`ShaderIndex::add_library`]).
pub fn summarise_with_libraries(
    dir: &Path,
    traces: Vec<TraceFile>,
    problems: &[TraceError],
    exit_status: Option<i32>,
    libraries: &[&Path],
) -> TraceSummary {
    summarise_inner(dir, traces, problems, exit_status, libraries, KernelLines::Stored)
}

/// Where the kernel's lines of a summary come from.
#[derive(Clone, Copy, PartialEq, Eq)]
enum KernelLines {
    /// `kernel-log.jsonl` in the directory, when there is one.
    Stored,
    /// That, else read after the fact for the traces' span.
    StoredElseAfterTheFact,
}

fn summarise_inner(
    dir: &Path,
    mut traces: Vec<TraceFile>,
    problems: &[TraceError],
    exit_status: Option<i32>,
    libraries: &[&Path],
    kernel_lines: KernelLines,
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
    let mut claims = claims::claims(dir, traces, &problems, &kernels, &families, &crashes);
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
    claims.extend(claims::vulkan_claims(traces, &devices, &index));
    claims.extend(claims::order_claim(dir, traces));
    let observed: Vec<(String, u64)> = kernels
        .iter()
        .filter(|k| k.api == trace_format::record::api::VULKAN)
        .map(|k| (k.name.clone(), k.launches))
        .collect();
    claims.extend(crate::observe::vulkan::capability::trace_claims("trace.vulkan.capability", traces, &observed, &[]));
    let kernel_log = crate::observe::kernel_log::stored::read_dir(
        dir,
        &dir.join(crate::observe::kernel_log::record::FILE_NAME).display().to_string(),
    )
    .or_else(|| {
        (kernel_lines == KernelLines::StoredElseAfterTheFact)
            .then(|| crate::observe::kernel_log::after_the_fact::read(traces))
            .flatten()
    });
    if let Some(log) = &kernel_log {
        claims::kernel_claims(log, traces, (&crashes, &device_lost, &hangs), &mut claims);
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
