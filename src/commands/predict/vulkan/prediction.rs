//! What a Vulkan prediction says, in the form `predict --backend vulkan --json` prints: the device and build
//! predicted for, per phase the pipeline each weight group runs, and the comparison with observed pipelines; how a
//! prediction and its decisions read as text and evidence; and its claims.

use serde::Serialize;

use super::super::groups::{Phase, WeightGroup};
use super::super::model::{MatmulOp, ModelSummary};
use super::super::observed::{ObservedKernel, VkObservation};
use super::super::phases::TokensInfo;
use super::super::placement::{self, Offload, Where};
use super::super::verdict::Verdict;
use crate::evidence::{Claim, Confidence, Source};
use crate::gpu::knowledge::vulkan_dispatch::{Decision, Facts, VkMatmulPrediction};

pub const SCHEMA: &str = "backscope.predict-vulkan/1";

/// Largest libggml-vulkan.so read for its shader names (11434's is 29 MB).
pub(super) const MAX_LIBRARY_BYTES: u64 = 1 << 30;

/// The device as predicted for.
#[derive(Clone, Debug, Serialize)]
pub struct VkDeviceInfo {
    pub label: String,
    /// `profile ID` or `trace DIR`.
    pub from: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub profile: Option<String>,
    pub source: String,
    pub facts: Facts,
    /// Facts neither the trace nor a profile gave, at their assumed value.
    pub assumed: Vec<String>,
    /// Where `shader_core_count` (split-k reads it) came from: the layer's record, a profile, or not known.
    pub shader_core_count_from: String,
    /// ggml's `GGML_VK_DISABLE_*`/`GGML_VK_FORCE_MMVQ` switches the traced process had set (the layer's device
    /// record); none for a profile.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub ggml_switches: Vec<String>,
}

/// The build as predicted for.
#[derive(Clone, Debug, Serialize)]
pub struct VkBuildInfo {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub library: Option<String>,
    pub embedded_shaders: usize,
    pub facts: Facts,
    pub note: String,
}

/// The weights of one type in one phase that take the same pipeline.
pub type VkWeightGroup = WeightGroup<VkMatmulPrediction>;
/// One phase of the request: its weight groups and its flash attention.
pub type VkPhase = Phase<VkMatmulPrediction>;

/// A phase's flash attention.
#[derive(Clone, Debug, Serialize)]
pub struct VkAttention {
    pub tokens: u64,
    pub kv_len: u64,
    pub family: String,
    pub path: Vec<Decision>,
}

/// Everything `predict --backend vulkan` says (`--json`: schema backscope.predict-vulkan/1).
#[derive(Clone, Debug, Serialize)]
pub struct VulkanReport {
    pub schema: &'static str,
    pub rules: String,
    pub rules_version: String,
    pub device: VkDeviceInfo,
    pub build: VkBuildInfo,
    /// The device tables' decisions (architecture, integer dot, coopmat, …).
    pub device_decisions: Vec<Decision>,
    pub model: ModelSummary,
    pub tokens: TokensInfo,
    pub flash_attn_used: bool,
    /// Which layers are offloaded and when CPU-resident weights' matmuls run on the device.
    pub placement: Offload,
    pub assumptions: Vec<String>,
    pub phases: Vec<VkPhase>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub comparison: Option<VkComparison>,
    /// `--verify --against DIR`: the impersonated run held against the real one (expected: the real run).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub against: Option<crate::observe::vulkan::dispatch_record::RecordComparison>,
    pub claims: Vec<Claim>,
    /// Whether every table's decision was kept (`--explain`).
    pub explain: bool,
}

/// The verdict on one expected dispatch of a weight group, or on a phase's flash attention.
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
    /// The placement rule (data/ggml_placement_11434.toml) where placement was asked for or weights are in CPU
    /// memory.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub placement_rule: Option<String>,
}

/// Dispatches of one pipeline over a request: predicted (GPU-run weights' nodes) against observed.
#[derive(Clone, Debug, Serialize)]
pub struct VkCount {
    pub pipeline: String,
    pub predicted: u64,
    pub observed: u64,
    pub verdict: Verdict,
}

/// A prediction held against the observed pipelines: a verdict per item, the dispatch counts, the pipelines no
/// prediction accounts for, the tally and the claims.
#[derive(Clone, Debug, Serialize)]
pub struct VkComparison {
    pub observed: VkObservation,
    pub items: Vec<VkItem>,
    /// Dispatch counts per predicted pipeline, where the observation is one request.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub counts: Vec<VkCount>,
    /// Matmul and flash-attention pipelines no prediction accounts for.
    pub unexplained: Vec<ObservedKernel>,
    pub confirmed: u64,
    pub contradicted: u64,
    pub unobserved: u64,
    pub claims: Vec<Claim>,
}

/// The evidence source of a decision.
pub fn decision_source(d: &Decision) -> Source {
    Source::Rule { file: d.file.into(), rule: format!("{}.{}", d.table, d.rule), upstream: d.source.clone() }
}

/// What a prediction reads as: the pipeline name, else the family.
pub fn prediction_text(p: &VkMatmulPrediction) -> String {
    let mut s = match &p.pipeline {
        Some(name) => format!("{} `{name}`", p.family),
        None => format!("{} ({})", p.family, p.tile.as_deref().unwrap_or("pipeline name not composed")),
    };
    if let Some(sh) = &p.shader {
        s += &format!(", shader {sh}");
    }
    if !p.helpers.is_empty() {
        s += &format!(" + {}", p.helpers.join(" + "));
    }
    if p.split_k_undecided.is_some() {
        s += " + split_k_reduce if ggml splits K (undecided)";
    }
    if p.dispatches_per_node > 1 {
        s += &format!(", {} dispatches per node (one per token)", p.dispatches_per_node);
    }
    s
}

/// The claims of a Vulkan prediction: per weight group and phase, with its placement.
pub(super) fn prediction_claims(r: &VulkanReport) -> Vec<Claim> {
    let on = format!("{} (ggml-vulkan {})", r.device.label, r.rules_version);
    let mut out = Vec::new();
    let arch = r.device_decisions.iter().find(|d| d.table == "architecture");
    for p in &r.phases {
        for g in &p.weights {
            let cpu = g.placement.runs_on == Where::Cpu;
            let what = match (g.placement.runs_on, g.placement.rule) {
                (Where::Cpu, rule) => format!(
                    "the CPU ({rule}: {}), so no Vulkan dispatch for them (on the device they would run {})",
                    placement::data().rule(rule).statement,
                    prediction_text(&g.prediction)
                ),
                (Where::Gpu, "op-offload") => format!(
                    "{}, on the device although they live in CPU memory (op-offload: ne11 >= {})",
                    prediction_text(&g.prediction),
                    r.placement.min_batch
                ),
                (Where::Gpu, _) => prediction_text(&g.prediction),
            };
            let statement = format!(
                "On {on}, {} (ne11 = {}): {} {} weight(s) of type {} -> {what}",
                p.label,
                g.ne11,
                g.tensors,
                if g.op == MatmulOp::MulMatId { "MUL_MAT_ID" } else { "MUL_MAT" },
                g.ggml_type,
            );
            let confidence =
                if g.prediction.undecided.is_some() && !cpu { Confidence::Unresolved } else { Confidence::Inferred };
            let family = if cpu { "CPU" } else { g.prediction.family.as_str() };
            let mut c = Claim::new(format!("predict.vulkan.{}.{}.{family}", p.id, g.ggml_type), confidence, statement);
            for d in arch.into_iter().chain(&g.prediction.path) {
                c = c.with_source(decision_source(d));
            }
            if g.placement.rule != "weight-on-gpu" || r.placement.num_gpu.is_some() {
                c = c.with_source(placement::rule_source(g.placement.resident_rule));
                c = c.with_source(placement::rule_source(g.placement.rule));
            }
            out.push(c);
        }
    }
    out
}
