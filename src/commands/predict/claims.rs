//! The claims of a CUDA/HIP prediction: per weight group and phase (with its placement) and per attention, and
//! where the prompt count came from.

use super::model::MatmulOp;
use super::options::PromptFromRun;
use super::placement::{self, Where};
use super::prediction::PredictReport;
use crate::evidence::{Claim, Confidence, Source};
use crate::gpu::knowledge::{self, dispatch::RuleRef};

/// The evidence source of a rule.
pub fn rule_source(r: &RuleRef) -> Source {
    Source::Rule { file: r.file(), rule: r.id.clone(), upstream: r.source.clone() }
}

pub(super) fn prediction_claims(r: &PredictReport, from_run: Option<&PromptFromRun>) -> Vec<Claim> {
    let mut out = Vec::new();
    let on = format!("{} ({}, ggml {})", r.arch.label, r.arch.family, r.ggml.version);
    let arch_source = Source::Rule {
        file: knowledge::GPU_ARCHS_FILE.into(),
        rule: r.arch.label.clone(),
        upstream: r.arch.source.clone(),
    };
    for p in &r.phases {
        for g in &p.weights {
            let cpu = g.placement.runs_on == Where::Cpu;
            let id = if cpu {
                format!("predict.{}.{}.CPU", p.id, g.ggml_type)
            } else {
                format!("predict.{}.{}.{}", p.id, g.ggml_type, g.prediction.family.as_deref().unwrap_or("undecided"))
            };
            let gpu_what = match (&g.prediction.family, &g.prediction.undecided) {
                (Some(f), _) => {
                    let compute =
                        g.prediction.blas_compute.as_ref().map(|c| format!(" (weights as {c})")).unwrap_or_default();
                    format!("{}{compute}", family_text(f))
                }
                (None, Some(why)) => format!("undecided: {why}"),
                (None, None) => "undecided".into(),
            };
            let what = match (g.placement.runs_on, g.placement.rule) {
                (Where::Cpu, rule) => format!(
                    "the CPU ({rule}: {}), so no GPU kernel for them (on the GPU they would run {gpu_what})",
                    placement::data().rule(rule).statement
                ),
                (Where::Gpu, "op-offload") => {
                    format!(
                        "{gpu_what}, on the GPU although they live in CPU memory (op-offload: ne11 >= {})",
                        r.placement.min_batch
                    )
                }
                (Where::Gpu, _) => gpu_what,
            };
            let statement = format!(
                "On {on}, {} (ne11 = {}): {} {} weight(s) of type {} -> {what}",
                p.label,
                g.ne11,
                g.tensors,
                match g.op {
                    MatmulOp::MulMat => "MUL_MAT",
                    MatmulOp::MulMatId => "MUL_MAT_ID",
                },
                g.ggml_type
            );
            let confidence =
                if cpu || g.prediction.family.is_some() { Confidence::Inferred } else { Confidence::Unresolved };
            let mut c = Claim::new(id, confidence, statement).with_source(arch_source.clone());
            if let Some(rule) = g.prediction.rule.as_ref().filter(|_| !cpu) {
                c = c.with_source(rule_source(rule));
            }
            if g.placement.rule != "weight-on-gpu" || r.placement.n_gpu_layers.is_some() {
                c = c.with_source(placement::rule_source(g.placement.resident_rule));
                c = c.with_source(placement::rule_source(g.placement.rule));
            }
            out.push(c);
        }
        for a in &p.attention {
            let statement = format!(
                "On {on}, {}: flash attention over {} query token(s), head size {}, GQA {}, KV {} x {} -> {}",
                p.label,
                a.tokens,
                a.head_dim,
                a.gqa,
                a.kv_len,
                a.kv_type,
                a.prediction.family.as_deref().unwrap_or("no kernel")
            );
            let mut c = Claim::new(format!("predict.{}.attention", p.id), Confidence::Inferred, statement)
                .with_source(arch_source.clone());
            if let Some(rule) = &a.prediction.rule {
                c = c.with_source(rule_source(rule));
            }
            out.push(c);
        }
    }
    if let Some(run) = from_run {
        out.push(
            Claim::new(
                "predict.prompt-from-run",
                if run.includes_cache { Confidence::Limited } else { Confidence::Inferred },
                format!(
                    "The prompt of {} token(s) is the count recorded for run {}{}",
                    run.prompt_tokens,
                    run.run_id,
                    if run.includes_cache {
                        "; that count includes cached prompt tokens, which are not evaluated (prompt-cache caveat)"
                    } else {
                        ""
                    }
                ),
            )
            .with_source(Source::Run { run_id: run.run_id.clone(), file: None }),
        );
    }
    out
}

/// How a family reads in text.
pub fn family_text(f: &str) -> String {
    match f {
        "BLAS" => "dequantize/convert + vendor BLAS (cuBLAS/hipBLAS)".into(),
        "MMID-loop" => "per-expert loop (MUL_MAT_ID fallback, host-synchronising)".into(),
        other => other.to_string(),
    }
}
