//! Prediction against observation: each predicted (phase, weight type, family) is Confirmed, Contradicted or
//! Unobserved by the kernels a trace saw, and every observed matmul or flash-attention kernel that no phase's
//! rules predict is reported as a contradiction.
//!
//! A trace of a whole run mixes phases (a llama-bench run of a 512-token prompt plus 128 generated tokens launches
//! the prefill and the decode kernels into one trace). The comparison therefore works on what a trace can tell:
//!
//! - **Confirmed**: at least one launch of a kernel of the predicted family for the predicted ggml type. For the
//!   vector kernels (MMVQ, MMVF) the kernel's `ncols_dst` template argument is the phase's ne11 exactly
//!   (mmvq.cu:599-601, mmvf.cu:8-9), so the launch must also have that column count: MMVQ with 8 columns confirms
//!   a prefill ubatch of 8 tokens, MMVQ with 1 column the decode phase. MMQ, MMF and the vendor-BLAS path carry no
//!   column count, so one launch confirms every phase that predicts them for that type. The vendor-BLAS path is
//!   confirmed by a vendor GEMM kernel or by ggml's conversion kernels (`dequantize_block_*`, `convert_unary`),
//!   because cuBLAS's own kernels may be invisible to the observer (it calls the driver directly).
//! - **Contradicted**: no such launch, while a matmul kernel for the same type ran that no prediction of this run
//!   accounts for (another family, or a vector kernel with a column count no phase has).
//! - **Unobserved**: neither (nothing of that type ran, or the observation lists only part of its kernels, as a
//!   sweep record's top-kernel list does).
//!
//! Run level: every observed MMVQ/MMQ/MMVF/MMF kernel whose (family, type, column count) no phase predicts, and
//! every flash-attention kernel family no phase predicts, is a contradiction too — a family the rules exclude
//! for every phase of the run must not appear. Launch counts are listed but not judged: fused kernels (the
//! FFN gate and up projections share one MMVQ launch at one column), stream-k fix-up launches and graph replays
//! make counts differ from node counts without contradicting the family.

use super::super::model::MatmulOp;
use super::super::observed::{Observed, ObservedKernel};
use super::super::placement::{self, gpu_matmul, Where};
use super::super::verdict::Verdict;
use super::prediction::{
    family_text, rule_source, Comparison, CudaPhase, CudaReport, CudaWeightGroup, ItemVerdict, Unexplained,
};
use crate::evidence::{Claim, Confidence, Source};
use crate::gpu::kernels;

/// Families of ggml's flash-attention kernels.
const FA_FAMILIES: &[&str] = &["FA-vec", "FA-tile", "FA-mma", "FA-wmma"];

/// A predicted matmul the trace may show.
struct Expect<'a> {
    family: &'a str,
    ggml_type: &'a str,
    /// Column count a vector kernel must show; `None` where the kernel does not encode it.
    ncols: Option<u64>,
}

fn matches(k: &ObservedKernel, e: &Expect<'_>) -> bool {
    // A kernel whose every launch the runtime refused did not run.
    if k.launches == 0 {
        return false;
    }
    let same_type = k.ggml_type.as_deref() == Some(e.ggml_type);
    match e.family {
        "BLAS" => k.family == "vendor-BLAS" || (k.family == "dequantize" && (same_type || k.ggml_type.is_none())),
        f => k.family == f && same_type && (e.ncols.is_none() || k.ncols.is_none() || k.ncols == e.ncols),
    }
}

/// The kernels the GPU-run weights of a report may launch (weights that run on the CPU launch none).
fn expects(report: &CudaReport) -> Vec<Expect<'_>> {
    let mut out = Vec::new();
    for p in &report.phases {
        for g in p.weights.iter().filter(|g| g.placement.runs_on == Where::Gpu) {
            let Some(family) = g.prediction.family.as_deref() else { continue };
            let vector = matches!(family, "MMVQ" | "MMVF") && g.op == MatmulOp::MulMat;
            out.push(Expect { family, ggml_type: &g.ggml_type, ncols: vector.then_some(g.ne11) });
        }
    }
    out
}

fn short(s: &str) -> String {
    crate::output::text::truncate(s, 80)
}

/// Whether an observation can say that a kernel did NOT run: it lists every kernel, and an observer wrote it.
fn absence_counts(observed: &Observed) -> bool {
    observed.complete && !observed.files.is_empty()
}

/// The placement verdict on one weight group, where the report's placement was asked for (a num_gpu given) or
/// where it matters anyway (weights in CPU memory: run on the CPU, or offloaded op by op).
///
/// - Weights predicted to run on the CPU: **Contradicted** by an observed GPU kernel that their matmul would be on
///   the GPU (the rules' family, type and column count for CUDA/HIP; the type and ggml-vulkan's op for the column
///   count on Vulkan) and that no GPU-run weight of the run explains; **Confirmed** when no such kernel ran and
///   the observation is complete; else Unobserved (the kernel ran, but GPU-run weights of the same type and shape
///   launch it too: a trace cannot tell them apart).
/// - Weights predicted on the GPU: **Confirmed** by a GPU matmul of their type that fits their column count;
///   **Contradicted** when the complete observation has none.
fn placement_item(
    report: &CudaReport,
    phase: &str,
    g: &CudaWeightGroup,
    observed: &Observed,
    gpu_expects: &[Expect<'_>],
) -> Option<ItemVerdict> {
    let placed = g.placement;
    let asked = report.placement.num_gpu.is_some() || !report.placement.gpu_device;
    if !asked && placed.rule == "weight-on-gpu" {
        return None;
    }
    let vector = matches!(g.prediction.family.as_deref(), Some("MMVQ" | "MMVF")) && g.op == MatmulOp::MulMat;
    let own = g.prediction.family.as_deref().map(|family| Expect {
        family,
        ggml_type: &g.ggml_type,
        ncols: vector.then_some(g.ne11),
    });
    // Whether kernel k is this group's matmul as it would run (or runs) on the GPU.
    let is_ours = |k: &ObservedKernel| {
        let Some(m) = gpu_matmul(k) else { return false };
        match (&m.vulkan_op, &own) {
            (None, Some(e)) if placed.runs_on == Where::Cpu => matches(k, e),
            (None, Some(e)) => matches(k, e) || m.fits(&g.ggml_type, g.ne11, g.op),
            _ => m.fits(&g.ggml_type, g.ne11, g.op),
        }
    };
    let ours: Vec<&ObservedKernel> = observed.kernels.iter().filter(|k| is_ours(k)).collect();
    let shown =
        |ks: &[&ObservedKernel]| ks.iter().map(|k| format!("{} ×{}", short(&k.demangled), k.launches)).collect();
    let statement = &placement::data().rule(placed.rule).statement;
    let (verdict, note, evidence) = match placed.runs_on {
        Where::Cpu => {
            // A kernel another (GPU-run) group of the run predicts is explained by it.
            let explained = |k: &ObservedKernel| {
                gpu_expects.iter().any(|e| matches(k, e))
                    || report.phases.iter().flat_map(|p| &p.weights).any(|h| {
                        h.placement.runs_on == Where::Gpu
                            && gpu_matmul(k)
                                .is_some_and(|m| m.vulkan_op.is_some() && m.fits(&h.ggml_type, h.ne11, h.op))
                    })
            };
            let unexplained: Vec<&ObservedKernel> = ours.iter().copied().filter(|k| !explained(k)).collect();
            if !unexplained.is_empty() {
                let note = format!(
                    "predicted on the CPU ({}: {statement}), but a GPU matmul for {} at {} column(s) ran",
                    placed.rule, g.ggml_type, g.ne11
                );
                (Verdict::Contradicted, note, shown(&unexplained))
            } else if !ours.is_empty() {
                let note = format!(
                    "the GPU kernel these weights would run ran for GPU-resident weights of the same type and shape; \
                     a trace cannot tell whether these {} CPU-resident weight(s) ran on the GPU too",
                    g.tensors
                );
                (Verdict::Unobserved, note, shown(&ours))
            } else if absence_counts(observed) {
                let note = format!(
                    "no GPU matmul for {} at {} column(s) ran, as the CPU placement says ({})",
                    g.ggml_type, g.ne11, placed.rule
                );
                (Verdict::Confirmed, note, Vec::new())
            } else {
                (Verdict::Unobserved, "the observation is incomplete: absence proves nothing".into(), Vec::new())
            }
        }
        Where::Gpu => {
            let how = if placed.rule == "op-offload" {
                format!("offloaded from CPU memory (op-offload: {} >= {} tokens)", g.ne11, report.placement.min_batch)
            } else {
                format!("resident on the GPU ({})", placed.resident_rule)
            };
            if !ours.is_empty() {
                (Verdict::Confirmed, format!("a GPU matmul for {} ran: {how}", g.ggml_type), shown(&ours))
            } else if absence_counts(observed) {
                let note = format!(
                    "predicted on the GPU ({how}), but no GPU matmul for {} at {} column(s) ran",
                    g.ggml_type, g.ne11
                );
                (Verdict::Contradicted, note, Vec::new())
            } else {
                (Verdict::Unobserved, format!("no GPU matmul for {} was observed", g.ggml_type), Vec::new())
            }
        }
    };
    Some(ItemVerdict {
        phase: phase.to_string(),
        ggml_type: g.ggml_type.clone(),
        ne11: g.ne11,
        predicted: Some(placed.runs_on.to_string()),
        verdict,
        nodes: g.nodes,
        matching_launches: ours.iter().fold(0u64, |n, k| n.saturating_add(k.launches)),
        evidence,
        note,
        placement_rule: Some(placed.rule.to_string()),
    })
}

/// The sources of every comparison claim: the run, then up to four trace files (or the observation's file).
fn trace_sources(observed: &Observed) -> Vec<Source> {
    let trace_sources: Vec<Source> = if observed.files.is_empty() {
        vec![Source::file(observed.path.clone(), None, None, format!("observed kernels ({})", observed.kind))]
    } else {
        observed
            .files
            .iter()
            .take(4)
            .map(|f| Source::file(f.clone(), None, None, "backscope-trace file (observed launches)"))
            .collect()
    };
    match &observed.run_id {
        Some(run) => {
            let mut v = vec![Source::Run { run_id: run.clone(), file: Some(observed.path.clone()) }];
            v.extend(trace_sources);
            v
        }
        None => trace_sources,
    }
}

/// The family verdict on one GPU-run weight group (none where the rules left the family undecided).
fn family_item(p: &CudaPhase, g: &CudaWeightGroup, observed: &Observed, all: &[Expect<'_>]) -> Option<ItemVerdict> {
    let family = g.prediction.family.as_deref()?;
    let vector = matches!(family, "MMVQ" | "MMVF") && g.op == MatmulOp::MulMat;
    let e = Expect { family, ggml_type: &g.ggml_type, ncols: vector.then_some(g.ne11) };
    let hits: Vec<&ObservedKernel> = observed.kernels.iter().filter(|k| matches(k, &e)).collect();
    // Kernels of another matmul family (or column count) for this type that no prediction of the run
    // explains: in a mixed trace the other phases' kernels are explained by their own predictions.
    let rivals: Vec<&ObservedKernel> = observed
        .kernels
        .iter()
        .filter(|k| {
            k.launches > 0
                && kernels::MATMUL_FAMILIES.contains(&k.family.as_str())
                && k.ggml_type.as_deref() == Some(g.ggml_type.as_str())
                && !all.iter().any(|o| matches(k, o))
        })
        .collect();
    let (verdict, note, evidence) = if !hits.is_empty() {
        let how = if family == "BLAS" {
            "vendor GEMM or ggml's conversion kernels ran".to_string()
        } else if e.ncols.is_some() {
            format!("{family} with {} column(s) ran for {}", g.ne11, g.ggml_type)
        } else {
            format!("{family} ran for {}", g.ggml_type)
        };
        (Verdict::Confirmed, how, hits.iter().map(|k| format!("{} ×{}", short(&k.demangled), k.launches)).collect())
    } else if !rivals.is_empty() {
        (
            Verdict::Contradicted,
            format!("no {family} kernel for {} ran, but {} did", g.ggml_type, rivals[0].family),
            rivals.iter().map(|k| format!("{} ×{}", short(&k.demangled), k.launches)).collect(),
        )
    } else {
        let why = if !observed.complete {
            "not in the observed kernel list, which is incomplete".to_string()
        } else if family == "BLAS" {
            "no vendor GEMM or conversion kernel was observed (cuBLAS kernels can be invisible to the observer)"
                .to_string()
        } else {
            format!("no matmul kernel for {} was observed", g.ggml_type)
        };
        (Verdict::Unobserved, why, Vec::new())
    };
    let matching_launches = hits.iter().fold(0u64, |n, k| n.saturating_add(k.launches));
    Some(ItemVerdict {
        phase: p.id.clone(),
        ggml_type: g.ggml_type.clone(),
        ne11: g.ne11,
        predicted: Some(family.to_string()),
        verdict,
        nodes: g.nodes,
        matching_launches,
        evidence,
        note,
        placement_rule: None,
    })
}

/// The verdicts on a phase's flash attention.
fn attention_items(report: &CudaReport, p: &CudaPhase, observed: &Observed) -> Vec<ItemVerdict> {
    let mut items = Vec::new();
    for a in &p.attention {
        let Some(family) = a.prediction.family.as_deref() else { continue };
        let hits: Vec<&ObservedKernel> =
            observed.kernels.iter().filter(|k| k.launches > 0 && k.family == family).collect();
        let others: Vec<&ObservedKernel> = observed
            .kernels
            .iter()
            .filter(|k| k.launches > 0 && FA_FAMILIES.contains(&k.family.as_str()) && k.family != family)
            .filter(|k| {
                !report
                    .phases
                    .iter()
                    .flat_map(|q| &q.attention)
                    .any(|b| b.prediction.family.as_deref() == Some(k.family.as_str()))
            })
            .collect();
        let (verdict, note) = if !hits.is_empty() {
            (Verdict::Confirmed, format!("{family} ran"))
        } else if !others.is_empty() {
            (Verdict::Contradicted, format!("no {family} kernel ran, but {} did", others[0].family))
        } else {
            (Verdict::Unobserved, "no flash-attention kernel was observed".to_string())
        };
        let shown = if hits.is_empty() { &others } else { &hits };
        items.push(ItemVerdict {
            phase: p.id.clone(),
            ggml_type: "attention".into(),
            ne11: a.tokens,
            predicted: Some(family.to_string()),
            verdict,
            nodes: p.repeat,
            matching_launches: hits.iter().fold(0u64, |n, k| n.saturating_add(k.launches)),
            evidence: shown.iter().map(|k| format!("{} ×{}", short(&k.demangled), k.launches)).collect(),
            note,
            placement_rule: None,
        });
    }
    items
}

/// Run level: observed matmul and attention kernels no phase predicts.
fn unexplained_kernels(report: &CudaReport, observed: &Observed, all: &[Expect<'_>]) -> Vec<Unexplained> {
    let fa_predicted: Vec<&str> =
        report.phases.iter().flat_map(|p| &p.attention).filter_map(|a| a.prediction.family.as_deref()).collect();
    let mut unexplained = Vec::new();
    for k in &observed.kernels {
        let matmul = kernels::MATMUL_FAMILIES.contains(&k.family.as_str());
        let fa = FA_FAMILIES.contains(&k.family.as_str());
        let explained = if matmul {
            // Float matmuls against the KV cache (attention without flash attention) are not modelled.
            all.iter().any(|e| matches(k, e))
                || (!report.flash_attn_used && matches!(k.ggml_type.as_deref(), Some("F16" | "F32" | "BF16")))
        } else if fa {
            fa_predicted.contains(&k.family.as_str())
        } else {
            true
        };
        if !explained && k.launches > 0 {
            unexplained.push(Unexplained {
                kernel: k.demangled.clone(),
                family: k.family.clone(),
                ggml_type: k.ggml_type.clone(),
                ncols: k.ncols,
                launches: k.launches,
            });
        }
    }
    unexplained
}

/// The claims of the items, the unexplained kernels and a partial observation.
fn comparison_claims(
    report: &CudaReport,
    observed: &Observed,
    items: &[ItemVerdict],
    unexplained: &[Unexplained],
    trace_sources: &[Source],
) -> Vec<Claim> {
    let mut claims = Vec::new();
    let on = format!("{} (ggml {})", report.arch.label, report.ggml.version);
    for it in items {
        let (confidence, verb) = match it.verdict {
            Verdict::Confirmed => (Confidence::Confirmed, "confirmed"),
            Verdict::Contradicted => (Confidence::Confirmed, "CONTRADICTED"),
            Verdict::Unobserved => (Confidence::Unresolved, "not observed"),
        };
        let rule = report.phases.iter().find(|p| p.id == it.phase).and_then(|p| {
            if it.placement_rule.is_some() {
                None
            } else if it.ggml_type == "attention" {
                p.attention.iter().find(|a| a.prediction.family == it.predicted).and_then(|a| a.prediction.rule.clone())
            } else {
                p.weights
                    .iter()
                    .find(|g| g.ggml_type == it.ggml_type && g.prediction.family == it.predicted)
                    .and_then(|g| g.prediction.rule.clone())
            }
        });
        let predicted = match &it.placement_rule {
            Some(_) => format!("runs on the {}", it.predicted.as_deref().unwrap_or_default()),
            None => it.predicted.as_deref().map(family_text).unwrap_or_default(),
        };
        let statement = format!(
            "{} {verb} on {on}: {} {} (ne11 = {}) -> {predicted}: {}{}",
            if it.placement_rule.is_some() { "Placement" } else { "Prediction" },
            it.phase,
            it.ggml_type,
            it.ne11,
            it.note,
            if it.evidence.is_empty() { String::new() } else { format!(" ({})", it.evidence.join("; ")) }
        );
        let what = if it.placement_rule.is_some() { ".placement" } else { "" };
        let mut c = Claim::new(
            format!("compare.{}.{}{what}.{}", it.phase, it.ggml_type, it.verdict.to_string().to_lowercase()),
            confidence,
            statement,
        );
        if let Some(r) = &rule {
            c = c.with_source(rule_source(r));
        }
        if let Some(id) = &it.placement_rule {
            c = c.with_source(placement::rule_source(id));
        }
        claims.push(c.with_sources(trace_sources.iter().cloned()));
    }
    for u in unexplained {
        let statement = format!(
            "Observed on {on}: {} ({}{}{}, {} launches), which no phase of this run predicts: the rules exclude it, so the \
             run's dispatch differs from the prediction (another ggml version or build flags, or a different model or phase)",
            short(&u.kernel),
            u.family,
            u.ggml_type.as_deref().map(|t| format!(", {t}")).unwrap_or_default(),
            u.ncols.map(|n| format!(", {n} column(s)")).unwrap_or_default(),
            u.launches
        );
        claims.push(
            Claim::new(format!("compare.unexplained.{}", u.family), Confidence::Confirmed, statement)
                .with_sources(trace_sources.iter().cloned()),
        );
    }
    if !observed.complete || observed.counts_lower_bound || !observed.notes.is_empty() {
        let mut why = observed.notes.clone();
        if observed.counts_lower_bound {
            why.push("a trace was cut: launch counts are lower bounds".into());
        }
        claims.push(
            Claim::new(
                "compare.observation-limited",
                Confidence::Limited,
                format!("The observation is partial: {}", why.join("; ")),
            )
            .with_sources(trace_sources.iter().cloned()),
        );
    }
    claims
}

/// Compare a prediction with observed kernels.
pub fn compare(report: &CudaReport, observed: &Observed) -> Comparison {
    let all = expects(report);
    let trace_sources = trace_sources(observed);
    let mut items = Vec::new();
    for p in &report.phases {
        for g in &p.weights {
            if let Some(item) = placement_item(report, &p.id, g, observed, &all) {
                items.push(item);
            }
            if g.placement.runs_on == Where::Cpu {
                continue;
            }
            items.extend(family_item(p, g, observed, &all));
        }
        items.extend(attention_items(report, p, observed));
    }
    let unexplained = unexplained_kernels(report, observed, &all);
    let claims = comparison_claims(report, observed, &items, &unexplained, &trace_sources);
    let count = |v: Verdict| items.iter().filter(|i| i.verdict == v).count() as u64;
    Comparison {
        observed: observed.clone(),
        confirmed: count(Verdict::Confirmed),
        contradicted: count(Verdict::Contradicted) + unexplained.len() as u64,
        unobserved: count(Verdict::Unobserved),
        items,
        unexplained,
        claims,
    }
}
