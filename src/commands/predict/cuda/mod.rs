//! `predict` by ggml-cuda's rules: which kernel family ggml's CUDA/HIP backend picks for each weight of a model, per
//! phase of a request, for one GPU arch and ggml version, from the rules in `data/ggml_dispatch_*.toml`; and, given
//! observed kernels (a trace directory, a `backscope trace --json` summary, or a sweep record's trace), whether the
//! observation confirms or contradicts each prediction ([`compare`]).

pub mod compare;
pub mod observed;
pub mod prediction;
pub mod render;
pub mod rules;

use anyhow::{anyhow, bail, Result};

use super::groups::{self, Phases};
use super::model::{self, ModelSummary, ModelWeights};
use super::options::{check_count, Backend, Batch, FlashAttn, PredictOptions};
use super::phases::{plan_for, TokensInfo, KV_PAD};
use super::placement::Offload;
use crate::gpu::knowledge;
use crate::gpu::knowledge::dispatch::{Device, Evaluator};
use prediction::{prediction_claims, CudaReport, GgmlInfo, SCHEMA};
use rules::{device_for, CudaRules};

/// The counts and build flags of the options, checked before anything is read.
fn check_options(
    opts: &PredictOptions,
    build_flags: &[String],
    dispatch: &knowledge::dispatch::rules::Dispatch,
) -> Result<()> {
    check_count("--ubatch", opts.ubatch, false)?;
    match (opts.batch, &opts.prompt_from_run) {
        (Batch::Ne11(n), _) => check_count("--ne11", n, false)?,
        (Batch::PromptTokens(n), Some(run)) => {
            check_count(&format!("the prompt token count of run {} (server_timings.prompt_n)", run.run_id), n, true)?
        }
        (Batch::PromptTokens(n), None) => check_count("--prompt-tokens", n, true)?,
    }
    if let Some(n) = opts.decode_tokens {
        check_count("--decode-tokens (or a record's server_timings.decode_n)", n, true)?;
    }
    for flag in build_flags {
        if !dispatch.build_flag.iter().any(|f| &f.name == flag) {
            let known: Vec<&str> = dispatch.build_flag.iter().map(|f| f.name.as_str()).collect();
            bail!("unknown build flag `{flag}` for ggml {} (known: {})", dispatch.version, known.join(", "));
        }
    }
    Ok(())
}

/// What a CUDA/HIP prediction assumes, in words.
fn assumptions(
    opts: &PredictOptions,
    build_flags: &[String],
    device: &Device,
    case: (&ModelWeights, &Offload, bool),
    attention_on_cpu: &[&str],
) -> Result<Vec<String>> {
    let (weights, offload, flash_attn_used) = case;
    let mut assumptions = vec![
        format!(
            "ggml's *_available() helpers that read ggml_cuda_highest_compiled_arch(cc) assume the build has code for {} itself",
            device.label
        ),
        "build flags at their defaults".to_string()
            + &if build_flags.is_empty() { String::new() } else { format!(", plus {}", build_flags.join(", ")) },
        "one sequence (no continuous batching with other requests); the logits of the last prompt token only".into(),
        "weights are contiguous, F32 activations and output (no split buffers, no padded views)".into(),
    ];
    if weights.attention.is_some() {
        assumptions.push(format!(
            "attention: causal mask, no ALiBi, KV cache {} padded to {KV_PAD} cells",
            model::type_facts(&opts.kv_type)?.0
        ));
    }
    assumptions.push(offload.describe(weights.n_layer));
    if !attention_on_cpu.is_empty() && weights.attention.is_some() {
        assumptions.push(format!(
            "attention runs on the CPU in {}: no layer's matmul runs on the GPU there (attention-follows-matmuls)",
            attention_on_cpu.join(", ")
        ));
    }
    if !flash_attn_used && weights.attention.is_some() {
        assumptions.push(
            "flash attention off: the KQ and KQV products against the KV cache are matmuls this prediction does not list"
                .into(),
        );
    }
    if let Some(r) = &opts.prompt_from_run {
        if r.includes_cache {
            assumptions.push(format!(
                "the prompt token count ({}) comes from run {} and includes prompt tokens served from the prompt cache; \
                 only the uncached suffix is evaluated, so the real ubatches may be fewer and smaller",
                r.prompt_tokens, r.run_id
            ));
        }
    }
    Ok(assumptions)
}

/// Predict by ggml-cuda's rules (`opts.backend` is [`Backend::Cuda`]), and compare with observed kernels when
/// `opts.observed` is set.
pub fn run(opts: &PredictOptions) -> Result<CudaReport> {
    let Backend::Cuda { arch, build_flags } = &opts.backend else {
        bail!("ggml-cuda's rules predict for a GPU arch (Backend::Cuda), not a Vulkan device");
    };
    let (device, arch) = device_for(arch)?;
    let dispatch = knowledge::dispatch(&opts.ggml).ok_or_else(|| {
        anyhow!(
            "no dispatch rules for ggml version `{}` (known: {})",
            opts.ggml,
            knowledge::dispatch_versions().join(", ")
        )
    })?;
    check_options(opts, build_flags, dispatch)?;
    let (kv_type, kv_quantized, _) = model::type_facts(&opts.kv_type)?;
    let Some(weights) = opts.weights.read(None)? else {
        bail!("say which weights: --model M.gguf or --type T (with --run, each record's model is taken)")
    };
    let ev = Evaluator::new(dispatch, &device, build_flags);
    let offload = Offload::new(&opts.placement, weights.n_layer)?;
    let plans = plan_for(opts, &weights);
    let mut rules = CudaRules::new(&ev, &weights, (kv_type.to_string(), kv_quantized), opts.explain);
    let fa_supported = rules.flash_attn_supported(KV_PAD);
    rules.flash_attn_used = match opts.flash_attn {
        FlashAttn::Off => false,
        FlashAttn::On => fa_supported.is_some(),
        FlashAttn::Auto => fa_supported == Some(true),
    };
    let flash_attn_used = rules.flash_attn_used;
    let Phases { phases, attention_on_cpu } = groups::predict(&mut rules, &plans, &weights, &offload)?;
    let assumptions =
        assumptions(opts, build_flags, &device, (&weights, &offload, flash_attn_used), &attention_on_cpu)?;
    let mut report = CudaReport {
        schema: SCHEMA,
        arch,
        ggml: GgmlInfo {
            version: dispatch.version.clone(),
            name: dispatch.name.clone(),
            file: knowledge::dispatch_file(&dispatch.version).unwrap_or_default().to_string(),
            source_root: dispatch.source_root.clone(),
        },
        model: ModelSummary::of(&weights),
        tokens: TokensInfo::new(opts.batch, opts.ubatch, opts.decode_steps(), opts.prompt_from_run.clone()),
        flash_attn: opts.flash_attn,
        flash_attn_used,
        placement: offload,
        assumptions,
        phases,
        comparison: None,
        claims: Vec::new(),
        explain: opts.explain,
    };
    report.claims = prediction_claims(&report, opts.prompt_from_run.as_ref());
    if let Some(src) = &opts.observed {
        let observed = observed::load(src)?;
        let cmp = compare::compare(&report, &observed);
        report.claims.extend(cmp.claims.iter().cloned());
        report.comparison = Some(cmp);
    }
    Ok(report)
}

#[cfg(test)]
mod tests;
