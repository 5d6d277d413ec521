//! What a CUDA/HIP prediction says, in the form `predict --json` prints: the arch and ggml version predicted for, the
//! model read, the tokens, and per phase the kernel family each weight group and attention takes, with the
//! comparison against observed kernels when one was asked for; and its claims.

use serde::Serialize;

use super::super::groups::{Phase, WeightGroup};
use super::super::model::{MatmulOp, ModelSummary};
use super::super::observed::Observed;
use super::super::options::{FlashAttn, PromptFromRun};
use super::super::phases::TokensInfo;
use super::super::placement::{self, Offload, Where};
use super::super::verdict::Verdict;
use crate::evidence::{Claim, Confidence, Source};
use crate::gpu::knowledge;
use crate::gpu::knowledge::dispatch::{AttentionPrediction, MatmulPrediction, RuleRef};

pub const SCHEMA: &str = "backscope.predict/1";

/// The GPU as predicted for.
#[derive(Clone, Debug, Serialize)]
pub struct ArchInfo {
    pub label: String,
    pub family: String,
    pub vendor: String,
    pub ggml_cc: String,
    pub warp_size: u64,
    pub source: String,
}

#[derive(Clone, Debug, Serialize)]
pub struct GgmlInfo {
    pub version: String,
    pub name: String,
    pub file: String,
    pub source_root: String,
}

/// The weights of one type in one phase that take the same kernel family.
pub type CudaWeightGroup = WeightGroup<MatmulPrediction>;
/// One phase of the request: its weight groups and, per KV length where it changes the kernel, its flash attention.
pub type CudaPhase = Phase<MatmulPrediction>;

/// A phase's flash attention at one KV length.
#[derive(Clone, Debug, Serialize)]
pub struct AttentionEntry {
    pub tokens: u64,
    pub kv_len: u64,
    pub head_dim: u64,
    pub gqa: u64,
    pub kv_type: String,
    #[serde(flatten)]
    pub prediction: AttentionPrediction,
}

/// Everything a CUDA/HIP prediction says, in the form `--json` prints.
#[derive(Clone, Debug, Serialize)]
pub struct CudaReport {
    pub schema: &'static str,
    pub arch: ArchInfo,
    pub ggml: GgmlInfo,
    pub model: ModelSummary,
    pub tokens: TokensInfo,
    pub flash_attn: FlashAttn,
    /// Whether flash attention runs on the GPU (auto: a kernel exists for the shape).
    pub flash_attn_used: bool,
    /// Which layers are offloaded and when CPU-resident weights run on the GPU.
    pub placement: Offload,
    pub assumptions: Vec<String>,
    pub phases: Vec<CudaPhase>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub comparison: Option<Comparison>,
    pub claims: Vec<Claim>,
    /// Whether the decision paths were kept (`explain`).
    pub explain: bool,
}

/// The verdict on one predicted (phase, type, family).
#[derive(Clone, Debug, Serialize)]
pub struct ItemVerdict {
    pub phase: String,
    /// A weight type, or `attention`.
    pub ggml_type: String,
    pub ne11: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub predicted: Option<String>,
    pub verdict: Verdict,
    /// Matmul nodes (or attention nodes) the phase runs with this prediction.
    pub nodes: u64,
    /// Launches of the observed kernels that confirm it.
    pub matching_launches: u64,
    /// The kernels that confirm or contradict it (demangled, with launches).
    pub evidence: Vec<String>,
    pub note: String,
    /// For a placement verdict (where the weights ran, GPU or CPU): the placement rule that decided it
    /// (data/ggml_placement_11434.toml).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub placement_rule: Option<String>,
}

/// An observed kernel no prediction of the run accounts for.
#[derive(Clone, Debug, Serialize)]
pub struct Unexplained {
    pub kernel: String,
    pub family: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ggml_type: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ncols: Option<u64>,
    pub launches: u64,
}

/// A prediction held against what was observed: a verdict per item, the kernels no phase predicts, the tally and
/// the claims.
#[derive(Clone, Debug, Serialize)]
pub struct Comparison {
    pub observed: Observed,
    pub items: Vec<ItemVerdict>,
    pub unexplained: Vec<Unexplained>,
    pub confirmed: u64,
    pub contradicted: u64,
    pub unobserved: u64,
    pub claims: Vec<Claim>,
}

/// The evidence source of a rule.
pub fn rule_source(r: &RuleRef) -> Source {
    Source::Rule { file: r.file(), rule: r.id.clone(), upstream: r.source.clone() }
}

pub(super) fn prediction_claims(r: &CudaReport, from_run: Option<&PromptFromRun>) -> Vec<Claim> {
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
            if g.placement.rule != "weight-on-gpu" || r.placement.num_gpu.is_some() {
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
