//! Layer 5, runtime recognition: whether the runtime saw and accepted the GPU (device lines, `inference compute`,
//! unsupported-GPU and discovery-failure lines).

use super::logs::{same_gpu, FactKind, LogEvidence};
use super::rows::{Layer, LayerRow, Status};
use crate::evidence::{Confidence, Source};
use crate::gpu::arch::DeviceArch;

pub(super) fn recognition(arch: &DeviceArch, logs: &[LogEvidence]) -> LayerRow {
    let layer = Layer::Recognition;
    if logs.is_empty() {
        return LayerRow::no_input(layer, "no runtime log (--log FILE)");
    }
    let label = arch.label();
    let (mut seen, mut refused, mut failed, mut cpu_only, mut others) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut other_names = Vec::new();
    let mut gpu_compute = false;
    for log in logs {
        for f in &log.facts {
            match &f.kind {
                FactKind::Device { arch: a, compute_capability: cc, .. } => {
                    let name = a.as_deref().or(cc.as_deref()).unwrap_or("");
                    if same_gpu(name, arch) {
                        seen.push(log.fact_source(f));
                    } else if !name.is_empty() {
                        others.push(log.fact_source(f));
                        other_names.push(name.to_string());
                    }
                }
                FactKind::InferenceCompute { library, compute, .. } => {
                    let lib = library.as_deref().unwrap_or("");
                    if lib.eq_ignore_ascii_case("cpu") {
                        cpu_only.push(log.fact_source(f));
                    } else {
                        gpu_compute = true;
                        match compute.as_deref() {
                            Some(c) if same_gpu(c, arch) => seen.push(log.fact_source(f)),
                            Some(c) if !c.is_empty() => {
                                others.push(log.fact_source(f));
                                other_names.push(c.to_string());
                            }
                            _ => {}
                        }
                    }
                }
                FactKind::UnsupportedGpu { gpu, .. } if gpu.as_deref().is_none_or(|g| same_gpu(g, arch)) => {
                    refused.push(log.fact_source(f));
                }
                FactKind::DiscoveryFailure { .. } => failed.push(log.fact_source(f)),
                _ => {}
            }
        }
    }
    other_names.sort();
    other_names.dedup();
    let row = if !refused.is_empty() {
        LayerRow::new(
            layer,
            Status::Blocks,
            Confidence::Confirmed,
            format!("the runtime refused the GPU as unsupported ({label})"),
        )
        .sources(refused)
    } else if !seen.is_empty() {
        LayerRow::new(layer, Status::Allows, Confidence::Confirmed, format!("the runtime listed the GPU as {label}"))
            .sources(seen)
    } else if !failed.is_empty() {
        let fell_back = !cpu_only.is_empty() && !gpu_compute;
        LayerRow::new(
            layer,
            Status::Blocks,
            if fell_back { Confidence::Confirmed } else { Confidence::Inferred },
            format!(
                "GPU discovery failed{}; the log does not name the GPU, which is taken to be {label} as given",
                if fell_back { " and the runtime fell back to the CPU" } else { "" }
            ),
        )
        .sources(failed)
        .sources(cpu_only)
    } else if !others.is_empty() {
        LayerRow::new(
            layer,
            Status::Unknown,
            Confidence::Unresolved,
            format!("the log's GPUs are {}, not {label}", other_names.join(", ")),
        )
        .sources(others)
    } else if !cpu_only.is_empty() {
        LayerRow::new(layer, Status::Blocks, Confidence::Inferred, "the runtime found no GPU and uses the CPU")
            .sources(cpu_only)
    } else {
        LayerRow::new(
            layer,
            Status::Unknown,
            Confidence::Unresolved,
            "the log has no device, inference-compute or discovery line",
        )
        .sources(logs.iter().map(|l| Source::file(&l.path, None, None, format!("{} lines read", l.lines))))
    };
    row.basis("log")
}
