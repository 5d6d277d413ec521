//! What a Vulkan prediction says, in the form `predict --backend vulkan --json` prints: the device and build
//! predicted for, per phase the pipeline each weight group runs, and the comparison with observed pipelines; with
//! where the device facts come from and how a prediction and its decisions read as text and evidence.

use std::path::{Path, PathBuf};

use serde::Serialize;

use super::super::comparison::VkComparison;
use super::super::model::MatmulOp;
use super::super::placement::{Offload, Placed};
use super::super::prediction::{ModelSummary, TokensInfo};
use crate::evidence::{Claim, Source};
use crate::gpu::knowledge::vulkan_dispatch::{Decision, Facts, VkMatmulPrediction, VkMatmulQuery};

pub const SCHEMA: &str = "backscope.predict-vulkan/1";

/// Largest libggml-vulkan.so read for its shader names (11434's is 29 MB).
pub(super) const MAX_LIBRARY_BYTES: u64 = 1 << 30;

/// Where the device facts come from.
#[derive(Clone, Debug)]
pub enum DeviceSource {
    /// A profile id of data/vulkan_devices.toml.
    Profile(String),
    /// A trace directory whose Vulkan layer recorded the device.
    TraceDir(PathBuf),
}

impl DeviceSource {
    /// `--device`: an existing directory is a trace, anything else a profile id.
    pub fn parse(arg: &str) -> DeviceSource {
        let p = Path::new(arg);
        if p.is_dir() {
            DeviceSource::TraceDir(p.to_path_buf())
        } else {
            DeviceSource::Profile(arg.to_string())
        }
    }
}

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

#[derive(Clone, Debug, Serialize)]
pub struct VkWeightGroup {
    pub ggml_type: String,
    /// The graph node (MUL_MAT or MUL_MAT_ID); the flattened prediction's `op` names it as the perf logger does
    /// (MUL_MAT_VEC for the vector path), so this one is `ggml_op` in JSON (one key per name).
    #[serde(rename = "ggml_op")]
    pub op: MatmulOp,
    pub ne11: u64,
    pub tensors: u64,
    pub examples: Vec<String>,
    /// Graph nodes over the phase (tensors × repeat).
    pub nodes: u64,
    /// Where these weights live and where their matmuls run in this phase (`super::placement`). For weights that
    /// run on the CPU, `prediction` is the pipeline the GPU would have run: what a trace must not show for them.
    pub placement: Placed,
    #[serde(flatten)]
    pub prediction: VkMatmulPrediction,
    /// The first weight's query, for re-evaluating with another build.
    #[serde(skip)]
    pub query: VkMatmulQuery,
}

#[derive(Clone, Debug, Serialize)]
pub struct VkAttention {
    pub tokens: u64,
    pub kv_len: u64,
    pub family: String,
    pub path: Vec<Decision>,
}

#[derive(Clone, Debug, Serialize)]
pub struct VkPhase {
    pub id: String,
    pub label: String,
    pub ne11: u64,
    pub repeat: u64,
    pub weights: Vec<VkWeightGroup>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub attention: Option<VkAttention>,
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
