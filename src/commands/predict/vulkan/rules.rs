//! ggml-vulkan's rules as the phases ask them: one weight's matmul query and its pipeline (remembered per query),
//! a phase's flash attention; and what the device would run with a build that had the shaders it lacks.

use std::borrow::Cow;
use std::collections::HashMap;

use anyhow::Result;

use super::super::groups::{Predicted, Rules, WeightGroup};
use super::super::model::{MatmulOp, WeightTensor};
use super::super::phases::PhasePlan;
use super::prediction::{prediction_text, VkAttention, VulkanReport};
use crate::evidence::{Claim, Confidence, Source};
use crate::gpu::knowledge::vulkan_dispatch::{
    self as vkd, Fact, Facts, VkMatmulPrediction, VkMatmulQuery, VulkanRules,
};

/// Distinct matmul queries remembered (a real model has a few dozen; a hostile one may have 10^5).
const MAX_MEMO: usize = 4096;

impl Predicted for VkMatmulPrediction {
    type Query = VkMatmulQuery;
    type Attention = Option<VkAttention>;
    /// The flattened prediction's `op` names the node as the perf logger does (MUL_MAT_VEC for the vector path), so
    /// the graph node (MUL_MAT or MUL_MAT_ID) is `ggml_op` in JSON (one key per name).
    const OP_KEY: &'static str = "ggml_op";

    fn groups_with(&self, other: &Self) -> bool {
        self == other
    }
}

/// ggml-vulkan's rules for one device and build (its facts decided) and one model.
pub(super) struct VkRules<'a> {
    pub(super) rules: &'a VulkanRules,
    pub(super) facts: &'a Facts,
    pub(super) explain: bool,
    pub(super) flash_attn_used: bool,
    pub(super) kv_type: &'a str,
    /// Query heads per KV head (1 without grouped-query attention, or when the heads are not known).
    pub(super) gqa_ratio: u64,
    pub(super) memo: HashMap<VkMatmulQuery, VkMatmulPrediction>,
}

impl Rules for VkRules<'_> {
    type Prediction = VkMatmulPrediction;

    /// A weight whose shape is not known (a single `--type`) is taken as 4096 × 4096.
    fn query(&self, t: &WeightTensor, ne11: u64) -> Result<VkMatmulQuery> {
        Ok(VkMatmulQuery {
            weight_type: t.ggml_type.clone(),
            ne00: t.ne00.unwrap_or(4096),
            ne01: t.ne01.unwrap_or(4096),
            ne11,
            mul_mat_id: t.op == MatmulOp::MulMatId,
        })
    }

    /// The rules' prediction for a query, remembered across weights and phases.
    fn matmul(&mut self, q: &VkMatmulQuery) -> Result<Cow<'_, VkMatmulPrediction>> {
        if self.memo.contains_key(q) {
            return Ok(Cow::Borrowed(&self.memo[q]));
        }
        let mut pr = self.rules.matmul(self.facts, q)?;
        if !self.explain {
            pr.path.retain(|d| matches!(d.table.as_str(), "path" | "quantize_y" | "tile_selector" | "aligned"));
        }
        // A model of many distinct shapes is evaluated shape by shape without keeping them all.
        if self.memo.len() < MAX_MEMO {
            return Ok(Cow::Borrowed(self.memo.entry(q.clone()).or_insert(pr)));
        }
        Ok(Cow::Owned(pr))
    }

    fn add_nodes(&self, g: &WeightGroup<VkMatmulPrediction>, p: &PhasePlan) -> Result<u64> {
        Ok(g.nodes.saturating_add(p.repeat))
    }

    fn attention(&self, p: &PhasePlan, layer_on_gpu: bool) -> Result<Option<VkAttention>> {
        Ok(match (self.flash_attn_used && layer_on_gpu, p.kv_lens.first()) {
            (true, Some(&kv)) => {
                let (family, path) = self.rules.attention(self.facts, p.ne11, self.kv_type, self.gqa_ratio)?;
                Some(VkAttention { tokens: p.ne11, kv_len: kv, family, path })
            }
            _ => None,
        })
    }
}

/// The build flags that gate a device capability: (capability fact, build fact, define, what it is).
const GATED: &[(&str, &str, &str, &str)] = &[
    ("integer_dot", "glslc_integer_dot", "GGML_VULKAN_INTEGER_DOT_GLSLC_SUPPORT", "integer dot product"),
    ("coopmat", "glslc_coopmat", "GGML_VULKAN_COOPMAT_GLSLC_SUPPORT", "cooperative matrix (KHR)"),
    ("coopmat2", "glslc_coopmat2", "GGML_VULKAN_COOPMAT2_GLSLC_SUPPORT", "cooperative matrix 2 (NV)"),
];

/// Device offers X, build lacks Y: what ggml would pick with a build whose glslc had Y, as an Inferred claim.
pub(super) fn capability_gap(rules: &VulkanRules, r: &VulkanReport, device_only: Facts) -> Result<Vec<Claim>> {
    let mut with_all = device_only;
    with_all.extend(vkd::build_facts(["matmul_q4_0_q8_1", "matmul_f16_cm1", "matmul_f16_cm2", "matmul_bf16_cm1"])?);
    let (full, _) = rules.device_decisions(with_all)?;
    let lacking: Vec<&(&str, &str, &str, &str)> = GATED
        .iter()
        .filter(|(cap, flag, _, _)| {
            full.get(*cap) == Some(&Fact::Bool(true)) && r.build.facts.get(*flag) == Some(&Fact::Bool(false))
        })
        .collect();
    if lacking.is_empty() {
        return Ok(Vec::new());
    }
    let mut changes = Vec::new();
    for p in &r.phases {
        for g in &p.weights {
            let alt = rules.matmul(&full, &g.query)?;
            if alt.family != g.prediction.family || alt.pipeline != g.prediction.pipeline {
                let line = format!(
                    "{} {}: {} instead of {}",
                    p.id,
                    g.ggml_type,
                    prediction_text(&alt),
                    prediction_text(&g.prediction)
                );
                if !changes.contains(&line) && changes.len() < 8 {
                    changes.push(line);
                }
            }
        }
    }
    let statement = format!(
        "{} offers {}, which this build cannot use: its glslc lacked {} (no such shaders embedded{}). With them ggml \
         would pick: {}",
        r.device.label,
        lacking.iter().map(|l| l.3).collect::<Vec<_>>().join(", "),
        lacking.iter().map(|l| l.2).collect::<Vec<_>>().join(", "),
        r.build.library.as_deref().map(|l| format!(" in {l}")).unwrap_or_default(),
        if changes.is_empty() {
            "the same pipelines for this model and these phases".to_string()
        } else {
            changes.join("; ")
        }
    );
    let mut c = Claim::new("predict.vulkan.capability-gap", Confidence::Inferred, statement);
    for (_, flag, _, _) in &lacking {
        if let Some(row) = rules.build_flag.iter().find(|b| b.name == *flag) {
            c = c.with_source(Source::Rule {
                file: rules.file.into(),
                rule: format!("build_flag.{}", row.name),
                upstream: row.source.clone(),
            });
        }
    }
    Ok(vec![c])
}
