//! Vulkan predictions against the pipelines the Vulkan layer observed (a trace directory, a `backscope trace
//! --json` summary, or a sweep record's trace).
//!
//! A pipeline's debug name (ggml-vulkan names every pipeline with `GGML_VK_DEBUG_MARKERS`, which `backscope trace`
//! sets; without it the layer's SPIR-V hash names the embedded shader) carries what the rules decide: the path
//! (`mul_mat_vec_*` or `matmul_*`), integer dot (`_q8_1`), f16 accumulation (`_f16acc`), alignment (`_aligned`) and
//! the index of the tile among the enabled ones; the shader behind it carries the mat-vec reduction variant. So:
//!
//! - **Confirmed**: the predicted pipeline name was dispatched (and, where the trace knows the shader behind it,
//!   with the predicted shader); where the name is not composed (coopmat paths), a pipeline of the predicted family
//!   and op ran. Helper dispatches (q8_1 quantization, split-k reduce) are items of their own.
//! - **Contradicted**: not dispatched, while a matmul pipeline of the same op that no prediction accounts for was.
//! - **Unobserved**: neither.
//!
//! Run level: every matmul, matmul-helper or flash-attention pipeline no prediction accounts for is listed as
//! unexplained (a contradiction). A trace of a whole llama-bench run mixes its phases, so a pipeline is explained
//! when any phase predicts it.

use std::path::Path;

use anyhow::{bail, Context, Result};
use serde::Serialize;

use super::super::vulkan::{decision_source, prediction_text, VulkanReport};
use super::super::{MatmulOp, ObservedSource};
use super::Verdict;
use crate::evidence::{Claim, Confidence, Source};
use crate::output::{Column, Document, Table, Text};

/// One observed Vulkan pipeline.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct VkObserved {
    pub name: String,
    /// The embedded shaders behind it, when the trace knows them.
    pub shaders: Vec<String>,
    pub family: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub op: Option<String>,
    pub helper: bool,
    pub launches: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct VkObservation {
    pub kind: String,
    pub path: String,
    pub files: Vec<String>,
    pub pipelines: Vec<VkObserved>,
}

#[derive(Clone, Debug, Serialize)]
pub struct VkItem {
    pub phase: String,
    pub ggml_type: String,
    pub ne11: u64,
    pub predicted: String,
    pub verdict: Verdict,
    pub nodes: u64,
    pub evidence: Vec<String>,
    pub note: String,
    /// The rules that decided the prediction (`table.rule`, data/ggml_vulkan_11434.toml).
    pub rules: Vec<String>,
}

#[derive(Clone, Debug, Serialize)]
pub struct VkComparison {
    pub observed: VkObservation,
    pub items: Vec<VkItem>,
    /// Matmul and flash-attention pipelines no prediction accounts for.
    pub unexplained: Vec<VkObserved>,
    pub confirmed: u64,
    pub contradicted: u64,
    pub unobserved: u64,
    pub claims: Vec<Claim>,
}

/// Families whose pipelines the prediction must account for.
const MATMUL_FAMILIES: &[&str] =
    &["MMV", "MMVQ", "MM", "MMQ", "MM-coopmat", "MM-coopmat2", "MM-support", "quantize", "dequantize"];
const FA_FAMILIES: &[&str] = &["FA", "FA-coopmat", "FA-coopmat2", "FA-support"];

fn observed(name: &str, shaders: Vec<String>, launches: u64) -> VkObserved {
    let d = crate::vulkan::describe(name, shaders.first().map(String::as_str));
    VkObserved {
        name: name.to_string(),
        shaders,
        family: d.family.to_string(),
        op: d.op.map(str::to_string),
        helper: d.helper,
        launches,
    }
}

/// The largest `trace --json` summary or record read.
const MAX_JSON_BYTES: u64 = 64 << 20;

/// Loads the observed Vulkan pipelines; `library`, the build the pipelines came from when the caller knows it, also
/// names their shaders where the trace's recorded library path is not on this machine.
pub fn load(src: &ObservedSource, library: Option<&Path>) -> Result<VkObservation> {
    match src {
        ObservedSource::TraceDir(dir) => {
            let read = crate::trace::read_dir_folded(dir).with_context(|| format!("reading {}", dir.display()))?;
            let libraries: Vec<&Path> = library.into_iter().collect();
            let summary =
                crate::trace_summary::summarise_with_libraries(dir, read.traces, &read.problems, None, &libraries);
            Ok(VkObservation {
                kind: "trace-dir".into(),
                path: dir.display().to_string(),
                files: summary.processes.iter().map(|p| p.file.clone()).collect(),
                pipelines: summary
                    .kernels
                    .iter()
                    .filter(|k| k.api == "vulkan")
                    .map(|k| observed(&k.name, k.shaders.clone(), k.launches.saturating_sub(k.errors)))
                    .collect(),
            })
        }
        ObservedSource::TraceSummary(path) | ObservedSource::SweepRecord(path) => {
            let text = crate::inputs::read_text_limited(path, MAX_JSON_BYTES)?;
            let v: serde_json::Value =
                serde_json::from_str(text.trim()).with_context(|| format!("{}: not JSON", path.display()))?;
            let kernels = v.get("kernels").or_else(|| v.get("trace").and_then(|t| t.get("kernels")));
            let Some(kernels) = kernels.and_then(|k| k.as_array()) else {
                bail!(
                    "{}: no `kernels` array (a `backscope trace --json` summary or a sweep record with a trace)",
                    path.display()
                );
            };
            let mut pipelines = Vec::new();
            for (i, k) in kernels.iter().enumerate() {
                let (Some(name), Some(n)) =
                    (k.get("name").and_then(|n| n.as_str()), k.get("launches").and_then(|n| n.as_u64()))
                else {
                    bail!("{}: kernels[{i}] lacks a name or a launch count", path.display());
                };
                let shaders = k
                    .get("shaders")
                    .and_then(|s| s.as_array())
                    .map(|a| a.iter().filter_map(|s| s.as_str().map(str::to_string)).collect())
                    .unwrap_or_default();
                let errors = k.get("errors").and_then(|n| n.as_u64()).unwrap_or(0);
                pipelines.push(observed(name, shaders, n.saturating_sub(errors)));
            }
            Ok(VkObservation {
                kind: "trace-summary".into(),
                path: path.display().to_string(),
                files: Vec::new(),
                pipelines,
            })
        }
        ObservedSource::Loaded(_) => bail!("a loaded CUDA/HIP observation cannot be compared with a Vulkan prediction"),
    }
}

/// What a prediction expects to see dispatched.
struct Expect<'a> {
    /// An exact pipeline name, or none (family + op).
    pipeline: Option<&'a str>,
    family: &'a str,
    op: &'a str,
    shader: Option<&'a str>,
}

fn hit(o: &VkObserved, e: &Expect<'_>) -> bool {
    if o.launches == 0 {
        return false;
    }
    match e.pipeline {
        Some(name) => o.name == name,
        None => o.family == e.family && o.op.as_deref() == Some(e.op),
    }
}

fn expects(r: &VulkanReport) -> Vec<Expect<'_>> {
    let mut out = Vec::new();
    for g in r.phases.iter().flat_map(|p| &p.weights) {
        let pr = &g.prediction;
        out.push(Expect {
            pipeline: pr.pipeline.as_deref(),
            family: &pr.family,
            op: &pr.op,
            shader: pr.shader.as_deref(),
        });
        for h in &pr.helpers {
            out.push(Expect { pipeline: Some(h), family: "", op: "", shader: None });
        }
        // An undecided split accounts for a split-k reduce either way.
        if pr.split_k_undecided.is_some() {
            out.push(Expect { pipeline: Some(SPLIT_K_REDUCE), family: "", op: "", shader: None });
        }
    }
    out
}

const SPLIT_K_REDUCE: &str = "split_k_reduce";

/// Whether a pipeline some prediction (or the flash attention one) accounts for.
fn explained(r: &VulkanReport, all: &[Expect<'_>], o: &VkObserved) -> bool {
    if all.iter().any(|e| hit(o, e)) {
        return true;
    }
    if FA_FAMILIES.contains(&o.family.as_str()) {
        let fa: Vec<&str> = r.phases.iter().filter_map(|p| p.attention.as_ref()).map(|a| a.family.as_str()).collect();
        return o.family == "FA-support" && !fa.is_empty() || fa.contains(&o.family.as_str());
    }
    // Without flash attention the KQ and KQV products are F16/F32 matmuls against the KV cache, not modelled here.
    !r.flash_attn_used
        && (o.name.starts_with("mul_mat_vec_nc") || o.name.starts_with("mul_mat_vec_p021") || o.name.contains("f16"))
}

fn source_list(obs: &VkObservation) -> Vec<Source> {
    if obs.files.is_empty() {
        vec![Source::file(obs.path.clone(), None, None, format!("observed Vulkan pipelines ({})", obs.kind))]
    } else {
        obs.files
            .iter()
            .take(4)
            .map(|f| Source::file(f.clone(), None, None, "backscope-trace file (Vulkan layer)"))
            .collect()
    }
}

/// Compare a Vulkan prediction with observed pipelines.
pub fn compare(r: &VulkanReport, obs: &VkObservation) -> VkComparison {
    let all = expects(r);
    let unexplained: Vec<VkObserved> = obs
        .pipelines
        .iter()
        .filter(|o| o.launches > 0)
        .filter(|o| MATMUL_FAMILIES.contains(&o.family.as_str()) || FA_FAMILIES.contains(&o.family.as_str()))
        .filter(|o| !explained(r, &all, o))
        .cloned()
        .collect();
    let sources = source_list(obs);
    let on = format!("{} (ggml-vulkan {})", r.device.label, r.rules_version);
    let mut items = Vec::new();
    let mut claims = Vec::new();
    let show = |o: &VkObserved| {
        format!("{} ×{}{}", o.name, o.launches, o.shaders.first().map(|s| format!(" [{s}]")).unwrap_or_default())
    };
    for p in &r.phases {
        for g in &p.weights {
            let pr = &g.prediction;
            let op = if g.op == MatmulOp::MulMatId { "MUL_MAT_ID" } else { pr.op.as_str() };
            let e = Expect { pipeline: pr.pipeline.as_deref(), family: &pr.family, op, shader: pr.shader.as_deref() };
            let mut checks = vec![(prediction_text(pr), e)];
            checks.extend(
                pr.helpers
                    .iter()
                    .map(|h| (format!("helper {h}"), Expect { pipeline: Some(h), family: "", op: "", shader: None })),
            );
            if let Some(why) = &pr.split_k_undecided {
                checks.push((
                    format!("helper {SPLIT_K_REDUCE} (undecided: {why})"),
                    Expect { pipeline: Some(SPLIT_K_REDUCE), family: "", op: "", shader: None },
                ));
            }
            for (what, e) in checks {
                let hits: Vec<&VkObserved> = obs.pipelines.iter().filter(|o| hit(o, &e)).collect();
                let shader_ok =
                    |o: &&VkObserved| e.shader.is_none_or(|s| o.shaders.is_empty() || o.shaders.iter().any(|x| x == s));
                let rivals: Vec<&VkObserved> = unexplained
                    .iter()
                    .filter(|o| {
                        e.op.is_empty()
                            || o.op.as_deref() == Some(if e.op == "MUL_MAT_VEC" { "MUL_MAT_VEC" } else { e.op })
                    })
                    .collect();
                let undecided_split = what.starts_with(&format!("helper {SPLIT_K_REDUCE} (undecided"));
                let (verdict, note, evidence) = if undecided_split {
                    // Neither a confirmation nor a contradiction: the prediction made none.
                    let seen = if hits.is_empty() { "was not dispatched" } else { "was dispatched" };
                    (
                        Verdict::Unobserved,
                        format!(
                            "undecided: split_k_reduce {seen}, which the rules cannot check without the core count"
                        ),
                        hits.iter().map(|o| show(o)).collect(),
                    )
                } else if !hits.is_empty() && hits.iter().any(shader_ok) {
                    (
                        Verdict::Confirmed,
                        "the predicted pipeline was dispatched".to_string(),
                        hits.iter().map(|o| show(o)).collect(),
                    )
                } else if !hits.is_empty() {
                    let s = e.shader.unwrap_or_default();
                    (
                        Verdict::Contradicted,
                        format!("the pipeline ran, but not with shader {s}"),
                        hits.iter().map(|o| show(o)).collect(),
                    )
                } else if !rivals.is_empty() {
                    (
                        Verdict::Contradicted,
                        format!("not dispatched, but {} was", rivals[0].name),
                        rivals.iter().map(|o| show(o)).collect(),
                    )
                } else {
                    (Verdict::Unobserved, "no such pipeline was dispatched".to_string(), Vec::new())
                };
                let statement = format!(
                    "Prediction {} on {on}: {} {} (ne11 = {}) -> {what}: {note}{}",
                    match verdict {
                        _ if undecided_split => "left undecided",
                        Verdict::Confirmed => "confirmed",
                        Verdict::Contradicted => "CONTRADICTED",
                        Verdict::Unobserved => "not observed",
                    },
                    p.id,
                    g.ggml_type,
                    g.ne11,
                    if evidence.is_empty() { String::new() } else { format!(" ({})", evidence.join("; ")) }
                );
                let confidence =
                    if verdict == Verdict::Unobserved { Confidence::Unresolved } else { Confidence::Confirmed };
                let mut c = Claim::new(
                    format!("compare.vulkan.{}.{}.{}", p.id, g.ggml_type, verdict.to_string().to_lowercase()),
                    confidence,
                    statement,
                );
                for d in &pr.path {
                    c = c.with_source(decision_source(d));
                }
                claims.push(c.with_sources(sources.iter().cloned()));
                items.push(VkItem {
                    phase: p.id.clone(),
                    ggml_type: g.ggml_type.clone(),
                    ne11: g.ne11,
                    predicted: what,
                    verdict,
                    nodes: g.nodes,
                    evidence,
                    note,
                    rules: pr.path.iter().map(|d| format!("{}.{}", d.table, d.rule)).collect(),
                });
            }
        }
        if let Some(a) = &p.attention {
            let hits: Vec<&VkObserved> =
                obs.pipelines.iter().filter(|o| o.launches > 0 && o.family == a.family).collect();
            let verdict = if !hits.is_empty() {
                Verdict::Confirmed
            } else if unexplained.iter().any(|o| FA_FAMILIES.contains(&o.family.as_str())) {
                Verdict::Contradicted
            } else {
                Verdict::Unobserved
            };
            items.push(VkItem {
                phase: p.id.clone(),
                ggml_type: "attention".into(),
                ne11: a.tokens,
                predicted: a.family.clone(),
                verdict,
                nodes: p.repeat,
                evidence: hits.iter().map(|o| show(o)).collect(),
                note: format!("flash attention family {}", a.family),
                rules: a.path.iter().map(|d| format!("{}.{}", d.table, d.rule)).collect(),
            });
        }
    }
    for u in &unexplained {
        claims.push(
            Claim::new(
                format!("compare.vulkan.unexplained.{}", u.family),
                Confidence::Confirmed,
                format!(
                    "Observed on {on}: {} ({}, {} dispatches), which no phase of this prediction accounts for: the run's \
                     selection differs from the rules (another device fact, build or shape)",
                    show(u),
                    u.family,
                    u.launches
                ),
            )
            .with_sources(sources.iter().cloned()),
        );
    }
    let count = |v: Verdict| items.iter().filter(|i| i.verdict == v).count() as u64;
    VkComparison {
        observed: obs.clone(),
        confirmed: count(Verdict::Confirmed),
        contradicted: count(Verdict::Contradicted) + unexplained.len() as u64,
        unobserved: count(Verdict::Unobserved),
        items,
        unexplained,
        claims,
    }
}

/// The comparison's tables in a document.
pub fn document(c: &VkComparison, doc: &mut Document) {
    doc.heading(2, "Against the observed pipelines");
    let mut t = Table::new(vec![
        Column::keep("phase"),
        Column::keep("type"),
        Column::keep("verdict"),
        Column::text("predicted"),
        Column::text("evidence"),
    ]);
    for i in &c.items {
        t.row([
            i.phase.clone(),
            i.ggml_type.clone(),
            i.verdict.to_string(),
            i.predicted.clone(),
            i.evidence.join("; "),
        ]);
    }
    doc.push(t);
    if !c.unexplained.is_empty() {
        doc.paragraph(Text::plain(format!(
            "Unexplained pipelines: {}",
            c.unexplained
                .iter()
                .map(|u| format!("{} ({}, ×{})", u.name, u.family, u.launches))
                .collect::<Vec<_>>()
                .join(", ")
        )));
    }
}
