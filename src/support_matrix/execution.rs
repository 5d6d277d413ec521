//! Layer 6, runtime execution: whether requests ran on the GPU (sweep cells per backend and num_gpu, crashes and
//! finished requests in a log).

use super::logs::{same_gpu, FactKind, LogEvidence};
use super::rows::{Layer, LayerRow, Status};
use super::runs::RunGroup;
use crate::evidence::Confidence;
use crate::gpu::arch::DeviceArch;
use crate::run::format::record::Record;

pub(super) fn execution(
    arch: &DeviceArch,
    logs: &[LogEvidence],
    records: Option<(&str, &[Record])>,
    groups: &[RunGroup],
) -> LayerRow {
    let layer = Layer::Execution;
    if logs.is_empty() && records.is_none() {
        return LayerRow::no_input(layer, "no runs (--runs DB) and no runtime log (--log FILE)");
    }
    let gpu_kind = match arch {
        DeviceArch::Amd { .. } => "rocm",
        _ => "cuda",
    };
    let mut allows = Vec::new();
    let mut blocks = Vec::new();
    let mut sources_ok = Vec::new();
    let mut sources_bad = Vec::new();
    let mut basis = Vec::new();
    let mut other_gpu = Vec::new();
    let mut notes: Vec<String> = Vec::new();
    if let Some((db, _)) = records {
        basis.push("sweep runs");
        notes.push(format!("the runs in {db} are taken to be on {}", arch.label()));
        for g in groups.iter().filter(|g| g.num_gpu != 0) {
            let failures: Vec<String> = g.outcomes.iter().map(|(o, n)| format!("{n} {o}")).collect();
            let text = format!(
                "{}{} at num_gpu {}: {} ok, {} failed{}",
                g.backend,
                if g.devices.is_empty() { String::new() } else { format!(" [{}]", g.devices.join("; ")) },
                g.num_gpu,
                g.ok,
                g.failed,
                if failures.is_empty() { String::new() } else { format!(" ({})", failures.join(", ")) }
            );
            if g.backend == gpu_kind {
                if g.ok > 0 {
                    allows.push(text);
                    sources_ok.extend(g.sources.iter().cloned());
                } else {
                    blocks.push(text);
                    sources_bad.extend(g.sources.iter().cloned());
                }
            } else if g.backend == "unknown" && g.failed > 0 {
                blocks.push(format!("{text} (backend not recorded)"));
                sources_bad.extend(g.sources.iter().cloned());
            } else if g.backend != "cpu" && g.ok > 0 {
                other_gpu.push(text);
            }
        }
        if groups.is_empty() {
            blocks.push(format!("{db} has no records"));
        }
    }
    for log in logs {
        basis.push("log");
        let offloaded =
            log.facts.iter().any(|f| matches!(f.kind, FactKind::Offloaded { offloaded, .. } if offloaded > 0));
        let on_gpu = log.facts.iter().any(|f| match &f.kind {
            FactKind::Device { arch: a, compute_capability: cc, .. } => {
                a.as_deref().or(cc.as_deref()).is_some_and(|n| same_gpu(n, arch))
            }
            FactKind::InferenceCompute { compute: Some(c), .. } => same_gpu(c, arch),
            _ => false,
        });
        let done: Vec<_> = log.facts.iter().filter(|f| f.kind == FactKind::RequestDone).collect();
        if offloaded && on_gpu && !done.is_empty() {
            allows.push(format!("{}: {} request(s) finished with layers offloaded to the GPU", log.path, done.len()));
            sources_ok.extend(done.iter().take(2).map(|f| log.fact_source(f)));
            sources_ok.extend(
                log.facts
                    .iter()
                    .filter(|f| matches!(f.kind, FactKind::Offloaded { .. }))
                    .take(1)
                    .map(|f| log.fact_source(f)),
            );
        }
        for c in log.crashes.iter().filter(|c| c.is_death()) {
            blocks.push(format!(
                "{}:{}: the runtime died during {}{}",
                log.path,
                c.line,
                c.phase.label(),
                c.signal.as_ref().map(|s| format!(" ({s})")).unwrap_or_default()
            ));
            sources_bad.push(log.source(c.line, &c.text));
        }
    }
    let mut other = if other_gpu.is_empty() {
        String::new()
    } else {
        format!("; other GPU backends ran ({}): a path layers 1-4 do not concern", other_gpu.join("; "))
    };
    for n in notes {
        other.push_str(&format!(" ({n})"));
    }
    let mut row = if !allows.is_empty() {
        let failed = if blocks.is_empty() { String::new() } else { format!("; failures too: {}", blocks.join("; ")) };
        LayerRow::new(layer, Status::Allows, Confidence::Confirmed, format!("{}{failed}{other}", allows.join("; ")))
            .sources(sources_ok)
            .sources(sources_bad)
    } else if !blocks.is_empty() {
        LayerRow::new(layer, Status::Blocks, Confidence::Confirmed, format!("{}{other}", blocks.join("; ")))
            .sources(sources_bad)
    } else {
        let mut missing = Vec::new();
        if records.is_some() {
            missing.push(format!("no {gpu_kind} cell with layers on the GPU"));
        }
        if !logs.is_empty() {
            missing.push("no finished GPU request and no crash in the log".to_string());
        }
        LayerRow::new(layer, Status::Unknown, Confidence::Unresolved, format!("{}{other}", missing.join("; ")))
    };
    for b in basis {
        row = row.basis(b);
    }
    row
}
