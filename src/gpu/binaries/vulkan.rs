//! What a ggml-vulkan build's embedded SPIR-V shaders say: how many per op family and per build variant
//! (integer dot, cooperative matrix 1/2, bf16, subgroup, f16 accumulation), from the names vulkan-shaders-gen gives
//! them. The shaders themselves are found by [`binfmt::spirv::embedded_shaders`].

use std::collections::BTreeMap;

use binfmt::spirv::EmbeddedShader;

use super::records::{VulkanCode, VulkanShaderRecord};

/// Op families by name prefix, longest first where one prefix extends another (`matmul_id` before `matmul`).
const FAMILIES: &[&str] = &[
    "matmul_id",
    "matmul",
    "mul_mat_vec_id",
    "mul_mat_vec_nc",
    "mul_mat_vec_p021",
    "mul_mat_vec",
    "flash_attn",
    "dequant",
    "quantize",
    "get_rows",
    "cpy",
    "contig_cpy",
    "copy",
    "soft_max",
    "rms_norm",
    "norm",
    "rope",
    "topk",
    "argsort",
    "conv",
    "im2col",
    "ssm",
];

/// Whether a shader name carries a variant.
type NameTest = fn(&str) -> bool;

/// Build variants by what vulkan-shaders-gen puts in a name: the q8_1 B type of the integer-dot shaders, the
/// `_cm1`/`_cm2` suffixes of the cooperative-matrix builds, bf16, the subgroup reductions and f16 accumulation.
const VARIANTS: &[(&str, NameTest)] = &[
    // quantize_q8_1* is the activation quantizer every build has, not an integer-dot shader.
    ("q8_1", |n| n.contains("_q8_1") && !n.starts_with("quantize_")),
    ("cm1", |n| n.ends_with("_cm1")),
    ("cm2", |n| n.ends_with("_cm2")),
    ("bf16", |n| n.contains("bf16")),
    ("subgroup", |n| n.contains("_subgroup")),
    ("f16acc", |n| n.contains("f16acc")),
];

/// The op family of a shader name: a known prefix followed by `_` (or the whole name), else `other`.
pub fn family(name: &str) -> &'static str {
    FAMILIES
        .iter()
        .find(|f| name == **f || name.strip_prefix(**f).is_some_and(|rest| rest.starts_with('_')))
        .copied()
        .unwrap_or("other")
}

/// Counts per family and variant; each shader with its offset when `want_entries`.
pub fn summarize(shaders: &[EmbeddedShader<'_>], want_entries: bool) -> VulkanCode {
    let mut families: BTreeMap<String, u64> = BTreeMap::new();
    let mut variants: BTreeMap<String, u64> = BTreeMap::new();
    let mut bytes = 0u64;
    for s in shaders {
        *families.entry(family(s.name).to_string()).or_default() += 1;
        for (v, has) in VARIANTS {
            if has(s.name) {
                *variants.entry((*v).to_string()).or_default() += 1;
            }
        }
        bytes = bytes.saturating_add(s.code.len() as u64);
    }
    let entries = want_entries.then(|| {
        shaders
            .iter()
            .map(|s| VulkanShaderRecord {
                name: s.name.to_string(),
                family: family(s.name).to_string(),
                offset: s.offset,
                size: s.code.len() as u64,
            })
            .collect()
    });
    VulkanCode { shaders: shaders.len() as u64, bytes, families, variants, entries }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_take_the_longest_prefix_at_a_word_boundary() {
        assert_eq!(family("matmul_id_subgroup_q4_k_q8_1"), "matmul_id");
        assert_eq!(family("matmul_f16_f32_f16acc_cm1"), "matmul");
        assert_eq!(family("mul_mat_vec_id_q4_k_f32_f32"), "mul_mat_vec_id");
        assert_eq!(family("mul_mat_vec_q4_k_f32_f32_subgroup"), "mul_mat_vec");
        assert_eq!(family("normalize_x"), "other", "norm is a prefix only at a word boundary");
        assert_eq!(family("norm_f32"), "norm");
    }

    #[test]
    fn variants_count_every_name_that_carries_them() {
        let code = [0x03u8, 0x02, 0x23, 0x07];
        let shaders: Vec<EmbeddedShader<'_>> = [
            "matmul_q4_0_q8_1",
            "matmul_f16_f16acc_cm1",
            "matmul_bf16_cm2",
            "mul_mat_vec_f16_f32_f32_subgroup",
            "quantize_q8_1",
        ]
        .into_iter()
        .enumerate()
        .map(|(i, name)| EmbeddedShader { name, offset: 16 * i as u64, code: &code })
        .collect();
        let v = summarize(&shaders, true);
        assert_eq!((v.shaders, v.bytes), (5, 20));
        let variants: Vec<(&str, u64)> = v.variants.iter().map(|(k, n)| (k.as_str(), *n)).collect();
        // quantize_q8_1 is no integer-dot variant.
        assert_eq!(variants, [("bf16", 1), ("cm1", 1), ("cm2", 1), ("f16acc", 1), ("q8_1", 1), ("subgroup", 1)]);
        assert_eq!(v.families["matmul"], 3);
        assert_eq!(v.entries.unwrap()[3].offset, 48);
    }
}
