//! From rows to words: the layer that explains each failure a log shows, the one-line verdict that keeps the layers
//! apart, and the claims.

use super::filter;
use super::logs::{same_gpu, FactKind, LogEvidence};
use super::rows::{Explanation, Layer, LayerRow, Status};
use crate::evidence::{Claim, Confidence, Source};
use crate::gpu::arch::DeviceArch;

/// The layer that explains a failure: the first of the given layers that blocks.
pub(super) fn first_blocking(rows: &[LayerRow], candidates: &[Layer]) -> Option<Layer> {
    candidates.iter().copied().find(|l| rows.iter().any(|r| r.layer == *l && r.status == Status::Blocks))
}

pub(super) fn explain(arch: &DeviceArch, logs: &[LogEvidence], rows: &[LayerRow]) -> Vec<Explanation> {
    let mut out = Vec::new();
    let label = arch.label();
    for log in logs {
        for f in &log.facts {
            let source = log.fact_source(f);
            match &f.kind {
                FactKind::BlasError { library, arch: a } => {
                    let p = a.as_deref().unwrap_or("?");
                    let other = a.as_deref().is_some_and(|a| !same_gpu(a, arch));
                    out.push(Explanation {
                        event: format!("{library} has no library for {p}"),
                        source,
                        explained_by: Some(Layer::ShippedArtifacts),
                        confidence: Confidence::Confirmed,
                        reason: format!(
                            "the vendor library names the missing per-arch file itself: a shipped-artifact gap, not a code-object or policy question{}",
                            if other { format!(" (the log's arch {p} is not {label}: an override or another GPU)") } else { String::new() }
                        ),
                    });
                }
                FactKind::UnsupportedGpu { gpu, reason: Some(r), .. } if filter::is_filter_reason(r) => {
                    out.push(Explanation {
                        event: format!("Ollama dropped {} at discovery: {r}", gpu.as_deref().unwrap_or("the GPU")),
                        source,
                        explained_by: Some(Layer::DeviceFilter),
                        confidence: Confidence::Confirmed,
                        reason: "Ollama's own device check (layer 7) names the missing file or arch itself".into(),
                    });
                }
                FactKind::UnsupportedGpu { gpu, supported, .. } => {
                    let by = first_blocking(rows, &[Layer::BuildTargets]);
                    out.push(Explanation {
                        event: format!(
                            "the runtime refused {} (supported: {})",
                            gpu.as_deref().unwrap_or("the GPU"),
                            supported.as_deref().unwrap_or("?")
                        ),
                        source,
                        explained_by: by.or(Some(Layer::Recognition)),
                        confidence: if by.is_some() { Confidence::Inferred } else { Confidence::Confirmed },
                        reason: match by {
                            Some(_) => {
                                "the runtime's build does not target the GPU (layer 2), so its own list refuses it"
                                    .into()
                            }
                            None => "the runtime's supported-type list refuses it (layer 5 itself)".into(),
                        },
                    });
                }
                FactKind::DiscoveryFailure { error } => {
                    let by = first_blocking(rows, &[Layer::Binaries, Layer::ShippedArtifacts, Layer::BuildTargets]);
                    out.push(Explanation {
                        event: format!("GPU discovery failed ({})", error.as_deref().unwrap_or("no error given")),
                        source,
                        explained_by: by,
                        confidence: if by.is_some() { Confidence::Inferred } else { Confidence::Unresolved },
                        reason: match by {
                            Some(Layer::Binaries) => format!("the runtime's GPU library has no code object for {label} (layer 4): initialising the device in the discovery runner fails"),
                            Some(Layer::ShippedArtifacts) => format!("the install's rocBLAS has no Tensile library for {label} (layer 3): Ollama's discovery initialises rocBLAS (GGML_CUDA_INIT=1) and that fails"),
                            Some(_) => format!("the runtime's build does not target {label} (layer 2): its ROCm library has no code object for it"),
                            None => "no layer blocks on the evidence given; scan the runtime's install (--install) to check layers 3 and 4".into(),
                        },
                    });
                }
                _ => {}
            }
        }
        for c in log.crashes.iter().filter(|c| c.is_death() && !c.kinds.iter().any(|k| k == "discovery_failure")) {
            let by = first_blocking(rows, &[Layer::Binaries, Layer::ShippedArtifacts]);
            out.push(Explanation {
                event: format!("the runtime died during {}{}", c.phase.label(), c.signal.as_ref().map(|s| format!(" ({s})")).unwrap_or_default()),
                source: log.source(c.line, &c.text),
                explained_by: by,
                confidence: if by.is_some() { Confidence::Inferred } else { Confidence::Unresolved },
                reason: match by {
                    Some(l) => format!("layer {} ({}) blocks {label}; the crash is consistent with it", l.number(), l.title()),
                    None => "no layer blocks on the evidence given: the cause is past what the gate checks (see `backscope` log analysis)".into(),
                },
            });
        }
    }
    out
}

pub(super) fn phrase(r: &LayerRow) -> &'static str {
    match (r.layer, r.status) {
        (Layer::VendorPolicy, Status::Blocks) => "not officially supported",
        (Layer::VendorPolicy, Status::Allows) => "officially supported",
        (Layer::VendorPolicy, Status::Unknown) => "support policy unknown",
        (Layer::BuildTargets, Status::Blocks) => "not a build target of the runtime",
        (Layer::BuildTargets, Status::Allows) => "a build target of the runtime",
        (Layer::BuildTargets, Status::Unknown) => "build targets unknown",
        (Layer::ShippedArtifacts, Status::Blocks) => "vendor libraries ship nothing for it",
        (Layer::ShippedArtifacts, Status::Allows) => "vendor libraries ship data for it",
        (Layer::ShippedArtifacts, Status::Unknown) => "vendor artifacts unknown",
        (Layer::Binaries, Status::Blocks) => "no code object for it in the binaries",
        (Layer::Binaries, Status::Allows) if r.confidence != Confidence::Confirmed => {
            "only PTX for it in the binaries (driver JIT)"
        }
        (Layer::Binaries, Status::Allows) => "code objects for it in the binaries",
        (Layer::Binaries, Status::Unknown) => "binaries not judged",
        (Layer::Recognition, Status::Blocks) => "not recognised by the runtime",
        (Layer::Recognition, Status::Allows) => "recognised by the runtime",
        (Layer::Recognition, Status::Unknown) => "recognition not observed",
        (Layer::Execution, Status::Blocks) => "runs failed",
        (Layer::Execution, Status::Allows) => "runs succeeded",
        (Layer::Execution, Status::Unknown) => "execution not observed",
        (Layer::DeviceFilter, Status::Blocks) => "dropped by Ollama's device filter",
        (Layer::DeviceFilter, Status::Allows) => "kept by Ollama's device filter",
        (Layer::DeviceFilter, Status::Unknown) => "Ollama's device filter not judged",
    }
}

/// The one-line verdict. `ggml_scanned`: layer 4 judged the runtime's own ggml GPU libraries, whose content then
/// outranks what layer 2's data says a release build targets (the install may be another build).
pub(super) fn verdict(label: &str, rows: &[LayerRow], ggml_scanned: bool) -> String {
    let parts: Vec<String> = rows.iter().map(|r| format!("({}) {}", r.number, phrase(r))).collect();
    let status = |l: Layer| rows.iter().find(|r| r.layer == l).map(|r| r.status).unwrap_or(Status::Unknown);
    // What the binaries and the install show outranks what the knowledge files say about them.
    let priority = |l: Layer| match l {
        Layer::Binaries => 0,
        Layer::ShippedArtifacts => 1,
        _ => 2,
    };
    let mut blocking: Vec<&LayerRow> = rows
        .iter()
        .filter(|r| {
            matches!(r.layer, Layer::BuildTargets | Layer::ShippedArtifacts | Layer::Binaries | Layer::DeviceFilter)
                && r.status == Status::Blocks
        })
        .collect();
    let binaries_allow = status(Layer::Binaries) == Status::Allows && ggml_scanned;
    let overruled = binaries_allow && status(Layer::BuildTargets) == Status::Blocks;
    if overruled {
        blocking.retain(|r| r.layer != Layer::BuildTargets);
    }
    blocking.sort_by_key(|r| (r.confidence, priority(r.layer)));
    let policy_blocks = status(Layer::VendorPolicy) == Status::Blocks;
    let conclusion = if status(Layer::Execution) == Status::Allows {
        if policy_blocks {
            "executable (runs succeeded) although not officially supported".to_string()
        } else {
            "executable: runs succeeded".to_string()
        }
    } else if let Some(b) = blocking.first() {
        let also: Vec<String> = blocking[1..].iter().map(|r| format!("{} ({})", r.number, r.title)).collect();
        format!(
            "not executable through this runtime's GPU path: layer {} ({}) blocks it{}",
            b.number,
            b.title,
            if also.is_empty() { String::new() } else { format!(", and so does layer {}", also.join(", ")) }
        )
    } else if status(Layer::Execution) == Status::Blocks {
        "runs failed although no earlier layer blocks: the cause is past what the gate checks".to_string()
    } else if policy_blocks {
        "not officially supported, which alone does not make it non-executable: no other layer blocks on the evidence given".to_string()
    } else {
        "no layer blocks on the evidence given".to_string()
    };
    let note = if overruled {
        " (the scanned binaries carry code for it although layer 2's release build does not target it: another build)"
    } else {
        ""
    };
    format!("{label}: {} => {conclusion}{note}", parts.join("; "))
}

pub(super) fn claims(label: &str, rows: &[LayerRow], explanations: &[Explanation], verdict_line: &str) -> Vec<Claim> {
    let mut out: Vec<Claim> = rows
        .iter()
        .map(|r| {
            Claim::new(
                format!("gate.{label}.{}", r.layer.id()),
                r.confidence,
                format!("Layer {} ({}) {}: {}", r.number, r.title, r.status, r.finding),
            )
            .with_sources(r.sources.iter().cloned())
        })
        .collect();
    for (i, e) in explanations.iter().enumerate() {
        let by = match e.explained_by {
            Some(l) => format!("explained by layer {} ({}): {}", l.number(), l.title(), e.reason),
            None => format!("not explained by any layer: {}", e.reason),
        };
        out.push(
            Claim::new(format!("gate.{label}.explain.{i}"), e.confidence, format!("{}: {by}", e.event))
                .with_source(e.source.clone()),
        );
    }
    let mut decisive: Vec<Source> =
        rows.iter().filter(|r| r.status != Status::Unknown).filter_map(|r| r.sources.first().cloned()).collect();
    if decisive.is_empty() {
        // Every layer lacked input: the verdict rests on the rule that such layers are Unknown.
        decisive.push(Source::Rule {
            file: "src/support_matrix/verdict.rs".into(),
            rule: "a layer without input is Unknown".into(),
            upstream: "the gate's inputs (--install, --log, --runs) and knowledge files".into(),
        });
    }
    out.push(Claim::new(format!("gate.{label}.verdict"), Confidence::Inferred, verdict_line).with_sources(decisive));
    out
}
