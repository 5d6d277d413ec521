//! What a CUDA/HIP prediction says, in the form `predict --json` prints: the arch and ggml version predicted for, the
//! model read, the tokens, and per phase the kernel family each weight group and attention takes, with the
//! comparison against observed kernels when one was asked for.

use std::collections::BTreeMap;

use serde::Serialize;

use super::comparison::Comparison;
use super::model::{AttentionShape, MatmulOp, ModelWeights};
use super::options::{Batch, FlashAttn, PromptFromRun};
use super::placement::{Offload, Placed};
use crate::evidence::Claim;
use crate::gpu::knowledge::dispatch::{AttentionPrediction, MatmulPrediction};

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

/// The weights of one type in one phase that take the same path.
#[derive(Clone, Debug, Serialize)]
pub struct WeightGroup {
    pub ggml_type: String,
    pub op: MatmulOp,
    /// Columns these weights see (for MUL_MAT_ID: tokens).
    pub ne11: u64,
    pub tensors: u64,
    /// Up to four tensor names.
    pub examples: Vec<String>,
    /// Matmul nodes over the phase: tensors x repeat.
    pub nodes: u64,
    /// Where these weights live and where their matmuls run in this phase ([`super::placement`]). For weights that run
    /// on the CPU, `prediction` is the kernel the GPU would have run: what a trace must not show for them.
    pub placement: Placed,
    #[serde(flatten)]
    pub prediction: MatmulPrediction,
}

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

/// One phase of the request.
#[derive(Clone, Debug, Serialize)]
pub struct Phase {
    /// `prefill`, `prefill-last`, `last-rows`, `decode`, `batch`.
    pub id: String,
    pub label: String,
    pub ne11: u64,
    /// How many times the phase runs (ubatches, decode steps).
    pub repeat: u64,
    pub weights: Vec<WeightGroup>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub attention: Vec<AttentionEntry>,
}

#[derive(Clone, Debug, Serialize)]
pub struct TokensInfo {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt_tokens: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ne11: Option<u64>,
    pub ubatch: u64,
    pub decode_tokens: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub from_run: Option<PromptFromRun>,
}

impl TokensInfo {
    /// The token counts of a prediction for `batch`.
    pub fn new(batch: Batch, ubatch: u64, decode_tokens: u64, from_run: Option<PromptFromRun>) -> Self {
        let (prompt_tokens, ne11) = match batch {
            Batch::PromptTokens(n) => (Some(n), None),
            Batch::Ne11(n) => (None, Some(n)),
        };
        TokensInfo { prompt_tokens, ne11, ubatch, decode_tokens, from_run }
    }
}

/// Everything `predict` says, in the form `--json` prints.
#[derive(Clone, Debug, Serialize)]
pub struct PredictReport {
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
    pub phases: Vec<Phase>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub comparison: Option<Comparison>,
    pub claims: Vec<Claim>,
    /// Whether the decision paths were kept (`explain`).
    pub explain: bool,
}

#[derive(Clone, Debug, Serialize)]
pub struct ModelSummary {
    pub source: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub architecture: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub n_layer: Option<u64>,
    /// Matmul weights per ggml type.
    pub weights_per_type: BTreeMap<String, u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub attention: Option<AttentionShape>,
}

impl ModelSummary {
    /// What a prediction says of the model it read: its source and shape, and its matmul weights per type.
    pub fn of(weights: &ModelWeights) -> Self {
        let mut weights_per_type = BTreeMap::new();
        for t in &weights.tensors {
            *weights_per_type.entry(t.ggml_type.clone()).or_insert(0u64) += 1;
        }
        ModelSummary {
            source: weights.source.clone(),
            architecture: weights.architecture.clone(),
            n_layer: weights.n_layer,
            weights_per_type,
            attention: weights.attention.clone(),
        }
    }
}
