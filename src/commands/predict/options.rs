//! What a prediction is asked: the arch, the weights, the tokens (a prompt or one batch), the ggml version and build,
//! the placement, and where observed kernels come from — with the bounds every count is checked against.

use std::path::PathBuf;

use anyhow::{bail, Result};
use serde::Serialize;

use super::model::ModelWeights;
use super::observed::{Observed, VkObservation};
use super::placement::PlacementOptions;
use crate::gpu::knowledge;

/// llama.cpp's default n_ubatch (common/common.h:457, src/llama-context.cpp:3761).
pub const DEFAULT_UBATCH: u64 = 512;
/// The most tokens a count may say (2^40, about 10^12: far beyond any context or run), so that sums of counts,
/// padded KV lengths and node counts (tensors × repeats) are all exact in u64 instead of wrapping.
pub const MAX_TOKENS: u64 = 1 << 40;

/// `value` of `what` (a flag, or a record's field) within 1..=MAX_TOKENS (0 too where `zero_ok`).
pub(super) fn check_count(what: &str, value: u64, zero_ok: bool) -> Result<()> {
    let least = u64::from(!zero_ok);
    if value < least || value > MAX_TOKENS {
        bail!("{what} is {value}; expected {least} to {MAX_TOKENS} (2^40) tokens");
    }
    Ok(())
}

/// What weights to predict for.
#[derive(Clone, Debug)]
pub enum WeightSource {
    /// A GGUF model file: its tensor names, types and shapes.
    Model(PathBuf),
    /// One weight of a type (`Q4_K`), optionally with `n` rows of `k` elements.
    Single { weight_type: String, n: Option<u64>, k: Option<u64> },
    /// Weights already read (from a GGUF the caller parsed, or built by hand).
    Weights(ModelWeights),
    /// Each record's own model (`predict --run` without `--model`): a GGUF path or an Ollama model name
    /// ([`super::model::of_record`]).
    EachRecord,
}

/// How many tokens the matmuls see.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Batch {
    /// A prompt of N tokens, split into ubatches.
    PromptTokens(u64),
    /// One batch of exactly this many columns (every weight sees it).
    Ne11(u64),
}

/// Whether flash attention is used (llama.cpp `-fa`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum FlashAttn {
    /// llama.cpp's default: on when the GPU backend has a kernel for the shape (llama-context.cpp:549-560).
    #[default]
    Auto,
    On,
    Off,
}

/// The prompt token count taken from a recorded run, with what that count means.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PromptFromRun {
    pub run_id: String,
    pub prompt_tokens: u64,
    /// The count includes tokens served from the prompt cache (Ollama's prompt_eval_count): fewer tokens may
    /// have been evaluated, so the real ubatches may be smaller.
    pub includes_cache: bool,
}

impl PromptFromRun {
    /// The prompt token count a sweep record reports (`server_timings.prompt_n`), flagged when it includes
    /// prompt-cache hits (Ollama's prompt_eval_count, `Record::prompt_count_includes_cache`). `None` when the
    /// record has no count (a failed request).
    pub fn from_record(r: &crate::run::format::record::Record) -> Option<PromptFromRun> {
        Some(PromptFromRun {
            run_id: r.run_id.clone(),
            prompt_tokens: r.server_timings.prompt_n?,
            includes_cache: r.prompt_count_includes_cache,
        })
    }
}

/// Where observed kernels come from.
#[derive(Clone, Debug)]
pub enum ObservedSource {
    /// A directory of backscope-trace files (`backscope trace --dir`, or an observed service).
    TraceDir(PathBuf),
    /// The JSON `backscope trace --json` printed.
    TraceSummary(PathBuf),
    /// A JSON file holding a sweep record's `trace` field (or the whole record).
    SweepRecord(PathBuf),
    /// Already loaded.
    Loaded(Observed),
    /// Vulkan pipelines already loaded (a sweep record's trace, for `--backend vulkan --run`).
    LoadedVulkan(VkObservation),
}

/// Options of [`super::run`].
#[derive(Clone, Debug)]
pub struct PredictOptions {
    /// `gfx1201`, `gfx90a:xnack-`, `sm_86`, `8.6`.
    pub arch: String,
    pub weights: WeightSource,
    pub batch: Batch,
    /// Decode steps after the prompt (one token each). `None`: one decode phase for prompts, none for `Ne11`.
    pub decode_tokens: Option<u64>,
    pub ubatch: u64,
    /// ggml version (`11434`, `ollama-v0.24.0`, aliases in knowledge::dispatch_version; the Vulkan rules' versions
    /// are knowledge::vulkan_dispatch::versions).
    pub ggml: String,
    /// Keep every rule checked, with its inputs.
    pub explain: bool,
    /// KV cache type (llama.cpp `-ctk`/`-ctv`, default F16).
    pub kv_type: String,
    pub flash_attn: FlashAttn,
    /// Build flags set in addition to the version's defaults (e.g. `GGML_CUDA_FORCE_MMQ`).
    pub build_flags: Vec<String>,
    pub prompt_from_run: Option<PromptFromRun>,
    pub observed: Option<ObservedSource>,
    /// Layers offloaded, backend, op offload: which weights run on the GPU in which phase.
    pub placement: PlacementOptions,
}

impl PredictOptions {
    pub fn new(arch: impl Into<String>, weights: WeightSource, batch: Batch) -> Self {
        PredictOptions {
            arch: arch.into(),
            weights,
            batch,
            decode_tokens: None,
            ubatch: DEFAULT_UBATCH,
            ggml: knowledge::DEFAULT_GGML_VERSION.to_string(),
            explain: false,
            kv_type: "F16".into(),
            flash_attn: FlashAttn::Auto,
            build_flags: Vec::new(),
            prompt_from_run: None,
            observed: None,
            placement: PlacementOptions::default(),
        }
    }
}
