//! ggml-cuda's rules as the phases ask them: the GPU an `--arch` means, one weight's matmul query and its kernel
//! family (remembered per class of queries the rules cannot tell apart), and a phase's flash attention.

use std::borrow::Cow;
use std::collections::HashMap;

use anyhow::{anyhow, Result};

use super::super::groups::{Predicted, Rules, WeightGroup};
use super::super::model::{self, MatmulOp, ModelWeights, WeightTensor};
use super::super::phases::PhasePlan;
use super::prediction::{ArchInfo, AttentionEntry};
use crate::gpu::arch::DeviceArch;
use crate::gpu::knowledge::dispatch::{AttentionQuery, Device, Evaluator, MatmulPrediction, MatmulQuery};
use crate::gpu::knowledge::gpu_archs;

impl Predicted for MatmulPrediction {
    type Query = MatmulQuery;
    type Attention = Vec<AttentionEntry>;
    const OP_KEY: &'static str = "op";

    /// Weights share a group when the rules picked the same family by the same rule (and BLAS compute type); the
    /// decision paths may differ in the values they show.
    fn groups_with(&self, other: &Self) -> bool {
        self.family == other.family && self.rule == other.rule && self.blas_compute == other.blas_compute
    }
}

/// The device for an `--arch` argument, with its knowledge row.
pub fn device_for(arch: &str) -> Result<(Device, ArchInfo)> {
    let parsed = DeviceArch::parse(arch);
    let archs = gpu_archs();
    let row = archs.find(&parsed).ok_or_else(|| {
        anyhow!(
            "no architecture data for `{arch}` (data/gpu_archs.toml knows {}); AMD targets are gfxNNN, NVIDIA sm_NN or N.N",
            archs.known().join(", ")
        )
    })?;
    let device = row.device();
    let info = ArchInfo {
        label: device.label.clone(),
        family: row.family().to_string(),
        vendor: format!("{:?}", device.vendor).to_lowercase(),
        ggml_cc: if device.cc >= 0x100_0000 { format!("{:#x}", device.cc) } else { device.cc.to_string() },
        warp_size: device.warp_size,
        source: row.source().to_string(),
    };
    Ok((device, info))
}

/// ggml-cuda's rules for one device, build and model.
pub(super) struct CudaRules<'a> {
    ev: &'a Evaluator<'a>,
    weights: &'a ModelWeights,
    kv_type: String,
    kv_quantized: bool,
    /// Whether flash attention runs (decided once the rules are set up: [`CudaRules::flash_attn_supported`]).
    pub(super) flash_attn_used: bool,
    explain: bool,
    /// The rule tables depend only on the query: weights with equal facts (every layer's attn_q, …) share one
    /// evaluation, in every phase with the same ne11. A model of 300k tensors has a handful of distinct queries, and
    /// one of 300k distinct shapes a few hundred classes of them (Evaluator::matmul_key).
    memo: HashMap<MatmulQuery, MatmulPrediction>,
}

impl<'a> CudaRules<'a> {
    /// The rules of `ev` for `weights`, with a KV cache of `kv_type` (quantized or not).
    pub(super) fn new(
        ev: &'a Evaluator<'a>,
        weights: &'a ModelWeights,
        (kv_type, kv_quantized): (String, bool),
        explain: bool,
    ) -> Self {
        CudaRules { ev, weights, kv_type, kv_quantized, flash_attn_used: false, explain, memo: HashMap::new() }
    }

    /// The flash-attention query of `tokens` query rows against `kv` cells, for a model with attention.
    fn attention_query(&self, tokens: u64, kv: u64) -> Option<AttentionQuery> {
        self.weights.attention.as_ref().map(|a| AttentionQuery {
            head_dim: a.head_dim,
            dv: a.dv,
            gqa: a.n_head.checked_div(a.n_head_kv).unwrap_or(1),
            kv_type: self.kv_type.clone(),
            kv_quantized: self.kv_quantized,
            kv_len: kv,
            tokens,
        })
    }

    /// Whether a flash-attention kernel exists for the model's shape (`None`: no attention shape). With `auto`,
    /// llama.cpp enables flash attention when the GPU backend supports the op (ggml_cuda_flash_attn_ext_supported,
    /// fattn.cu), which does not depend on the number of tokens.
    pub(super) fn flash_attn_supported(&self, kv: u64) -> Option<bool> {
        self.attention_query(1, kv).map(|q| self.ev.attention(&q).family.is_some())
    }

    /// A phase's flash attention, per KV length where it changes the kernel.
    fn attention_entries(&self, p: &PhasePlan) -> Vec<AttentionEntry> {
        let mut attention: Vec<AttentionEntry> = Vec::new();
        let mut kvs = p.kv_lens.clone();
        kvs.dedup();
        for kv in kvs {
            let Some(q) = self.attention_query(p.ne11, kv) else { continue };
            let mut prediction = self.ev.attention(&q);
            if !self.explain {
                prediction.path.clear();
            }
            // A second KV length is listed only where it changes the kernel.
            if attention.last().is_some_and(|a| a.prediction.family == prediction.family) {
                continue;
            }
            attention.push(AttentionEntry {
                tokens: q.tokens,
                kv_len: kv,
                head_dim: q.head_dim,
                gqa: q.gqa,
                kv_type: q.kv_type.clone(),
                prediction,
            });
        }
        attention
    }
}

impl Rules for CudaRules<'_> {
    type Prediction = MatmulPrediction;

    fn query(&self, t: &WeightTensor, ne11: u64) -> Result<MatmulQuery> {
        let (_, quantized, type_size) = model::type_facts(&t.ggml_type)?;
        Ok(MatmulQuery {
            weight_type: t.ggml_type.clone(),
            quantized,
            type_size,
            ne00: t.ne00,
            ne01: t.ne01,
            experts: t.experts,
            ne11,
            mul_mat_id: t.op == MatmulOp::MulMatId,
        })
    }

    /// Keyed on what the rules can tell apart in ne00/ne01; the memo keeps no decision path (a path shows the values
    /// themselves, and 150k paths would take GBs): `--explain` evaluates each group's first weight again.
    fn matmul(&mut self, q: &MatmulQuery) -> Result<Cow<'_, MatmulPrediction>> {
        let ev = self.ev;
        let prediction = self.memo.entry(ev.matmul_key(q)).or_insert_with_key(|key| {
            let mut prediction = ev.matmul(key);
            prediction.path.clear();
            prediction
        });
        Ok(Cow::Borrowed(prediction))
    }

    fn shown(&self, q: &MatmulQuery, grouping: MatmulPrediction) -> MatmulPrediction {
        if self.explain {
            self.ev.matmul(q)
        } else {
            grouping
        }
    }

    /// Repeats are at most MAX_TOKENS, tensors fewer than the file's bytes: this fits, but says so if not.
    fn add_nodes(&self, g: &WeightGroup<MatmulPrediction>, p: &PhasePlan) -> Result<u64> {
        g.nodes.checked_add(p.repeat).ok_or_else(|| {
            anyhow!("{}: more matmul nodes than a u64 counts ({} × {} repeats)", p.label, g.tensors, p.repeat)
        })
    }

    fn attention(&self, p: &PhasePlan, layer_on_gpu: bool) -> Result<Vec<AttentionEntry>> {
        Ok(if self.flash_attn_used && layer_on_gpu { self.attention_entries(p) } else { Vec::new() })
    }
}
