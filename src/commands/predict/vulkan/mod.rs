//! `predict` by ggml-vulkan's rules (`--backend vulkan`): which pipeline each weight's matmul runs, per phase of a
//! request, on a device (a profile of `data/vulkan_devices.toml`, or the device a trace's Vulkan layer recorded) with
//! a build (the shaders its `libggml-vulkan.so` embeds), from the rules in `data/ggml_vulkan_11434.toml`; and, given
//! the layer's observed pipelines, whether they confirm or contradict each prediction ([`compare`]).
//!
//! The phases are the CUDA prediction's ([`super::phases`]): prefill ubatches, the last layer's rows after the
//! gather, decode.

pub mod compare;
mod device;
pub mod observed;
pub mod prediction;
mod render;
pub mod rules;
pub mod verify;
pub mod verifying_build;

use std::collections::HashMap;

use anyhow::{bail, Result};

use super::groups;
use super::model::{self, ModelSummary, ModelWeights};
use super::options::{check_count, Backend, FlashAttn, ObservedSource, PredictOptions, PromptFromRun};
use super::phases::{plan_for, TokensInfo};
use super::placement::Offload;
use crate::gpu::knowledge::vulkan_dispatch as vkd;
use crate::observe::vulkan::dispatch_record::{self, DispatchRecord};
use device::{build_info, device_facts};
use prediction::{prediction_claims, VkBuildInfo, VkDeviceInfo, VulkanReport, SCHEMA};
use rules::{capability_gap, VkRules};

/// What the prediction assumes, in words.
fn assumptions(
    device: &VkDeviceInfo,
    build: &VkBuildInfo,
    offload: &Offload,
    weights: &ModelWeights,
    from_run: Option<&PromptFromRun>,
) -> Vec<String> {
    let switches = if device.ggml_switches.is_empty() {
        "no GGML_VK_* environment overrides".to_string()
    } else {
        format!("the GGML_VK_* switches the traced process set: {}", device.ggml_switches.join(", "))
    };
    let mut out = vec![
        format!("one sequence; weights contiguous; F32 activations; default matmul precision; {switches}"),
        "the device's tiles are enabled by the shared-memory test of the mmq warptiles (coopmat staging not counted)"
            .into(),
    ];
    out.extend(device.assumed.iter().map(|a| format!("device fact assumed: {a}")));
    out.push(format!("build: {}", build.note));
    out.push(offload.describe(weights.n_layer));
    if let Some(r) = from_run.filter(|r| r.includes_cache) {
        out.push(format!(
            "the prompt token count ({}) comes from run {} and includes prompt tokens served from the prompt cache; \
             only the uncached suffix is evaluated, so the real ubatches may be fewer and smaller",
            r.prompt_tokens, r.run_id
        ));
    }
    out
}

/// Predict by ggml-vulkan's rules (`opts.backend` is [`Backend::Vulkan`]), and compare with the observed pipelines
/// when `opts.observed` is set.
pub fn run(opts: &PredictOptions) -> Result<VulkanReport> {
    let Backend::Vulkan { device, library } = &opts.backend else {
        bail!("ggml-vulkan's rules predict for a Vulkan device (Backend::Vulkan), not a GPU arch");
    };
    let rules = vkd::rules_for(&opts.ggml)?;
    let (mut device, dev_facts, libraries) = device_facts(device)?;
    let build = build_info(library.as_deref(), libraries.first().map(std::path::Path::new))?;
    let device_only = dev_facts.clone();
    let mut facts = dev_facts;
    facts.extend(build.facts.clone());
    let (facts, decisions) = rules.device_decisions(facts)?;
    device.facts = facts.clone();
    check_count("--ubatch", opts.ubatch, false)?;
    let Some(weights) = opts.weights.read(Some(4096))? else { bail!("say which weights: --model M.gguf or --type T") };
    let offload = Offload::new(&opts.placement, weights.n_layer)?;
    let flash_attn_used = match opts.flash_attn {
        FlashAttn::Off => false,
        // ggml-vulkan supports FLASH_ATTN_EXT for the usual head sizes and F16 KV on every device
        // (ggml_backend_vk_device_supports_op), so auto turns it on.
        FlashAttn::On | FlashAttn::Auto => weights.attention.is_some(),
    };
    let (kv_type, _, _) = model::type_facts(&opts.kv_type)?;
    let kv_type = kv_type.to_string();
    let gqa_ratio = weights
        .attention
        .as_ref()
        .filter(|a| a.n_head_kv > 0 && a.n_head % a.n_head_kv == 0)
        .map_or(1, |a| a.n_head / a.n_head_kv);
    let mut vk = VkRules {
        rules,
        facts: &facts,
        explain: opts.explain,
        flash_attn_used,
        kv_type: &kv_type,
        gqa_ratio,
        memo: HashMap::new(),
    };
    let phases = groups::predict(&mut vk, &plan_for(opts, &weights), &weights, &offload)?.phases;
    let mut report = VulkanReport {
        schema: SCHEMA,
        rules: rules.file.into(),
        rules_version: rules.version.clone(),
        assumptions: assumptions(&device, &build, &offload, &weights, opts.prompt_from_run.as_ref()),
        device,
        build,
        device_decisions: decisions,
        model: ModelSummary::of(&weights),
        tokens: TokensInfo::new(opts.batch, opts.ubatch, opts.decode_steps(), opts.prompt_from_run.clone()),
        flash_attn_used,
        placement: offload,
        phases,
        comparison: None,
        against: None,
        claims: Vec::new(),
        explain: opts.explain,
    };
    report.claims = prediction_claims(&report);
    report.claims.extend(capability_gap(rules, &report, device_only)?);
    let verified = match &opts.observed {
        Some(ObservedSource::Verified(v)) => Some(v),
        _ => None,
    };
    if let Some(v) = verified {
        report.assumptions.push(format!("verified with {}", v.by.origin));
        report.claims.extend(verifying_build::version_claim(&rules.version, &rules.name, rules.file, &v.by));
    }
    if let Some(src) = &opts.observed {
        let observed = observed::load(src, library.as_deref())?;
        let cmp = compare::compare(&report, &observed);
        report.claims.extend(cmp.claims.iter().cloned());
        report.comparison = Some(cmp);
    }
    if let Some((real, v)) = verified.and_then(|v| Some((v.against.as_ref()?, v))) {
        let impersonated = DispatchRecord::read(&v.trace)?;
        let cmp = dispatch_record::compare(real, &impersonated);
        report.claims.extend(cmp.claims("predict.vulkan.verify.against", "the real run", "the impersonated run"));
        report.against = Some(cmp);
    }
    Ok(report)
}
