//! `predict`: which GPU kernel family ggml's CUDA/HIP backend picks for each weight of a model, per phase of a
//! request (each prefill ubatch, the rows that see one token after the last layer's gather, decode), for one GPU
//! arch and ggml version, from the rules in `data/ggml_dispatch_*.toml`; and, given observed kernels (a trace
//! directory, a `backscope trace --json` summary, or a sweep record's trace), whether the observation confirms
//! or contradicts each prediction ([`compare`]).
//!
//! How a prompt becomes ubatches (llama.cpp 11434; shared/reference notes §3): a `llama_decode` of N tokens is
//! split into ubatches of `n_ubatch` (default 512) contiguous tokens, so the matmuls see ne11 = 512, 512, …, the
//! remainder (src/llama-batch.cpp split_simple). Only the last token produces logits: in the last layer the rows
//! are gathered after attention (src/models/llama.cpp:174-176, src/llama-graph.cpp:2569-2589), so the last
//! layer's FFN and the output head see ne11 = 1 in the final ubatch and nothing in earlier ones (empty nodes are
//! skipped). Each decode step is one token (ne11 = 1 with one sequence).

// `mod.rs` only calls down: what the children share (options, the report's types, the observations, the verdicts,
// the phase plan) lives in its own file, so that no child reaches back up into this one.
mod claims;
pub mod command;
pub mod compare;
mod comparison;
pub mod model;
mod observed;
mod options;
mod phases;
pub mod placement;
mod prediction;
mod render;
pub mod vulkan;

use std::collections::HashMap;

use anyhow::{anyhow, bail, Result};

use crate::gpu::arch::DeviceArch;
use crate::gpu::knowledge::dispatch::{AttentionQuery, Device, Evaluator, MatmulPrediction, MatmulQuery};
use crate::gpu::knowledge::{self, gpu_archs};
use claims::prediction_claims;
use options::check_count;
use phases::{plan, PhasePlan, WeightSet, KV_PAD};

pub use claims::{family_text, rule_source};
pub use comparison::{Comparison, ItemVerdict, Unexplained, Verdict};
pub use model::{AttentionShape, MatmulOp, ModelWeights, WeightTensor};
pub use observed::{Observed, ObservedKernel};
pub use options::{
    Batch, FlashAttn, ObservedSource, PredictOptions, PromptFromRun, WeightSource, DEFAULT_UBATCH, MAX_TOKENS,
};
pub use placement::{GpuBackend, Offload, Placed, PlacementOptions, Where};
pub use prediction::{
    ArchInfo, AttentionEntry, GgmlInfo, ModelSummary, Phase, PredictReport, TokensInfo, WeightGroup, SCHEMA,
};

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

/// The counts and build flags of the options, checked before anything is read.
fn check_options(opts: &PredictOptions, dispatch: &knowledge::dispatch::rules::Dispatch) -> Result<()> {
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
    for flag in &opts.build_flags {
        if !dispatch.build_flag.iter().any(|f| &f.name == flag) {
            let known: Vec<&str> = dispatch.build_flag.iter().map(|f| f.name.as_str()).collect();
            bail!("unknown build flag `{flag}` for ggml {} (known: {})", dispatch.version, known.join(", "));
        }
    }
    Ok(())
}

/// What the CUDA/HIP phases are predicted from besides the plan.
struct CudaInputs<'a> {
    ev: &'a Evaluator<'a>,
    offload: &'a Offload,
    weights: &'a ModelWeights,
    kv_type: String,
    kv_quantized: bool,
    flash_attn_used: bool,
    explain: bool,
}

impl CudaInputs<'_> {
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

    /// One phase's weight groups; also whether a layer's matmul runs on the GPU in it. The rule tables depend
    /// only on the query: weights with equal facts (every layer's attn_q, …) share one evaluation, in every phase
    /// with the same ne11. A model of 300k tensors has a handful of distinct queries, and one of 300k distinct
    /// shapes a few hundred classes of them (Evaluator::matmul_key).
    fn weight_groups(
        &self,
        p: &PhasePlan,
        memo: &mut HashMap<MatmulQuery, MatmulPrediction>,
    ) -> Result<(Vec<WeightGroup>, bool)> {
        let mut groups: Vec<WeightGroup> = Vec::new();
        // Attention has no weight: the scheduler runs it next to its layer's matmuls (attention-follows-matmuls).
        let mut layer_on_gpu = false;
        for t in self.weights.tensors.iter().filter(|t| match p.weights {
            WeightSet::All => true,
            WeightSet::BeforeGather => !t.after_gather,
            WeightSet::AfterGather => t.after_gather,
        }) {
            let (_, quantized, type_size) = model::type_facts(&t.ggml_type)?;
            let q = MatmulQuery {
                weight_type: t.ggml_type.clone(),
                quantized,
                type_size,
                ne00: t.ne00,
                ne01: t.ne01,
                experts: t.experts,
                ne11: p.ne11,
                mul_mat_id: t.op == MatmulOp::MulMatId,
            };
            // Keyed on what the rules can tell apart in ne00/ne01; the memo keeps no decision path (a path shows the
            // values themselves, and 150k paths would take GBs): --explain evaluates each group's first weight again.
            let prediction = memo.entry(self.ev.matmul_key(&q)).or_insert_with_key(|key| {
                let mut prediction = self.ev.matmul(key);
                prediction.path.clear();
                prediction
            });
            let placed = self.offload.runs_on(t, p.ne11);
            layer_on_gpu |= !t.head && placed.runs_on == Where::Gpu;
            let key = |g: &WeightGroup| {
                g.placement == placed
                    && g.ggml_type == t.ggml_type
                    && g.op == t.op
                    && g.prediction.family == prediction.family
                    && g.prediction.rule == prediction.rule
                    && g.prediction.blas_compute == prediction.blas_compute
            };
            if let Some(g) = groups.iter_mut().find(|g| key(g)) {
                g.tensors += 1;
                // Repeats are at most MAX_TOKENS, tensors fewer than the file's bytes: this fits, but says so if not.
                g.nodes = g.nodes.checked_add(p.repeat).ok_or_else(|| {
                    anyhow!("{}: more matmul nodes than a u64 counts ({} × {} repeats)", p.label, g.tensors, p.repeat)
                })?;
                if g.examples.len() < 4 {
                    g.examples.push(t.name.clone());
                }
            } else {
                let prediction = if self.explain { self.ev.matmul(&q) } else { prediction.clone() };
                groups.push(WeightGroup {
                    ggml_type: t.ggml_type.clone(),
                    op: t.op,
                    ne11: p.ne11,
                    tensors: 1,
                    examples: vec![t.name.clone()],
                    nodes: p.repeat,
                    placement: placed,
                    prediction,
                });
            }
        }
        Ok((groups, layer_on_gpu))
    }

    /// A phase's flash attention, per KV length where it changes the kernel.
    fn attention(&self, p: &PhasePlan) -> Vec<AttentionEntry> {
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

    /// Every phase's groups and attention; also the phases where attention runs on the CPU.
    fn phases(&self, plans: &[PhasePlan]) -> Result<(Vec<Phase>, Vec<&'static str>)> {
        let mut memo: HashMap<MatmulQuery, MatmulPrediction> = HashMap::new();
        let mut phases = Vec::new();
        // Phases where no layer's matmul runs on the GPU, so neither does its attention.
        let mut attention_on_cpu = Vec::new();
        for p in plans {
            let (weights, layer_on_gpu) = self.weight_groups(p, &mut memo)?;
            if !layer_on_gpu && !p.kv_lens.is_empty() {
                attention_on_cpu.push(p.id);
            }
            let attention = if self.flash_attn_used && layer_on_gpu { self.attention(p) } else { Vec::new() };
            phases.push(Phase {
                id: p.id.to_string(),
                label: p.label.clone(),
                ne11: p.ne11,
                repeat: p.repeat,
                weights,
                attention,
            });
        }
        Ok((phases, attention_on_cpu))
    }
}

/// What a CUDA/HIP prediction assumes, in words.
fn cuda_assumptions(
    opts: &PredictOptions,
    device: &Device,
    inp: &CudaInputs<'_>,
    attention_on_cpu: &[&str],
) -> Result<Vec<String>> {
    let mut assumptions = vec![
        format!(
            "ggml's *_available() helpers that read ggml_cuda_highest_compiled_arch(cc) assume the build has code for {} itself",
            device.label
        ),
        "build flags at their defaults".to_string()
            + &if opts.build_flags.is_empty() { String::new() } else { format!(", plus {}", opts.build_flags.join(", ")) },
        "one sequence (no continuous batching with other requests); the logits of the last prompt token only".into(),
        "weights are contiguous, F32 activations and output (no split buffers, no padded views)".into(),
    ];
    let weights = inp.weights;
    if weights.attention.is_some() {
        assumptions.push(format!(
            "attention: causal mask, no ALiBi, KV cache {} padded to {KV_PAD} cells",
            model::type_facts(&opts.kv_type)?.0
        ));
    }
    assumptions.push(inp.offload.describe(weights.n_layer));
    if !attention_on_cpu.is_empty() && weights.attention.is_some() {
        assumptions.push(format!(
            "attention runs on the CPU in {}: no layer's matmul runs on the GPU there (attention-follows-matmuls)",
            attention_on_cpu.join(", ")
        ));
    }
    if !inp.flash_attn_used && weights.attention.is_some() {
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

/// Predict, and compare with observed kernels when `opts.observed` is set.
pub fn run(opts: &PredictOptions) -> Result<PredictReport> {
    let (device, arch) = device_for(&opts.arch)?;
    let dispatch = knowledge::dispatch(&opts.ggml).ok_or_else(|| {
        anyhow!(
            "no dispatch rules for ggml version `{}` (known: {})",
            opts.ggml,
            knowledge::dispatch_versions().join(", ")
        )
    })?;
    check_options(opts, dispatch)?;
    let (kv_type, kv_quantized, _) = model::type_facts(&opts.kv_type)?;
    let weights = match &opts.weights {
        WeightSource::Model(path) => model::from_gguf(path)?,
        WeightSource::Single { weight_type, n, k } => model::single(weight_type, *n, *k)?,
        WeightSource::Weights(w) => w.clone(),
        WeightSource::EachRecord => {
            bail!("say which weights: --model M.gguf or --type T (with --run, each record's model is taken)")
        }
    };
    let ev = Evaluator::new(dispatch, &device, &opts.build_flags);
    let offload = Offload::new(&opts.placement, weights.n_layer)?;
    let gathered = weights.tensors.iter().any(|t| t.after_gather);
    let decode = opts.decode_tokens.unwrap_or(match opts.batch {
        Batch::PromptTokens(_) => 1,
        Batch::Ne11(_) => 0,
    });
    let plans = plan(opts.batch, opts.ubatch, decode, gathered);
    let mut inputs = CudaInputs {
        ev: &ev,
        offload: &offload,
        weights: &weights,
        kv_type: kv_type.to_string(),
        kv_quantized,
        flash_attn_used: false,
        explain: opts.explain,
    };
    // Flash attention: with `auto`, llama.cpp enables it when the GPU backend supports the op, i.e. when a
    // kernel exists for the shape (ggml_cuda_flash_attn_ext_supported, fattn.cu), which does not depend on the
    // number of tokens.
    let fa_supported = inputs.attention_query(1, KV_PAD).map(|q| ev.attention(&q).family.is_some());
    inputs.flash_attn_used = match opts.flash_attn {
        FlashAttn::Off => false,
        FlashAttn::On => fa_supported.is_some(),
        FlashAttn::Auto => fa_supported == Some(true),
    };
    let (phases, attention_on_cpu) = inputs.phases(&plans)?;
    let assumptions = cuda_assumptions(opts, &device, &inputs, &attention_on_cpu)?;
    let flash_attn_used = inputs.flash_attn_used;
    let mut report = PredictReport {
        schema: SCHEMA,
        arch,
        ggml: GgmlInfo {
            version: dispatch.version.clone(),
            name: dispatch.name.clone(),
            file: knowledge::dispatch_file(&dispatch.version).unwrap_or_default().to_string(),
            source_root: dispatch.source_root.clone(),
        },
        model: ModelSummary::of(&weights),
        tokens: TokensInfo::new(opts.batch, opts.ubatch, decode, opts.prompt_from_run.clone()),
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
        let observed = match src {
            ObservedSource::Loaded(o) => o.clone(),
            other => compare::load(other)?,
        };
        let cmp = compare::compare(&report, &observed);
        report.claims.extend(cmp.claims.iter().cloned());
        report.comparison = Some(cmp);
    }
    Ok(report)
}

#[cfg(test)]
mod tests;
