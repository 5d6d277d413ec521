//! What a prediction is asked: whose rules (ggml-cuda for a GPU arch, or ggml-vulkan for a device and build), the
//! weights, the tokens (a prompt or one batch), the ggml version, the placement, and where observed kernels come
//! from — with the bounds every count is checked against.

use std::path::{Path, PathBuf};

use anyhow::{bail, Result};
use serde::Serialize;

use super::model::{self, ModelWeights};
use super::observed::{Observed, VkObservation};
use super::placement::{GpuBackend, PlacementOptions};
use crate::builds::BuildNumber;
use crate::gpu::knowledge;
use crate::observe::vulkan::dispatch_record::DispatchRecord;

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

impl WeightSource {
    /// The weights this names; `None` for each record's own, which the caller fills in first. A single weight's unknown
    /// row count and length stay unknown, or are `single_shape` where the rules need a number.
    pub(super) fn read(&self, single_shape: Option<u64>) -> Result<Option<ModelWeights>> {
        Ok(Some(match self {
            WeightSource::Model(path) => model::from_gguf(path)?,
            WeightSource::Single { weight_type, n, k } => {
                model::single(weight_type, n.or(single_shape), k.or(single_shape))?
            }
            WeightSource::Weights(w) => w.clone(),
            WeightSource::EachRecord => return Ok(None),
        }))
    }
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
    /// The trace of a build that ran the case impersonating the predicted device (`--verify`, Vulkan).
    Verified(Box<Verified>),
}

/// What `--verify` observed: the trace directory of the impersonated run, the build whose ggml made its choices,
/// and the real run it is held against (`--against`).
#[derive(Clone, Debug)]
pub struct Verified {
    pub trace: PathBuf,
    pub by: VerifyingBuild,
    pub against: Option<DispatchRecord>,
}

/// The build whose llama-bench verified, as the report names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VerifyingBuild {
    pub llama_bench: PathBuf,
    /// Its llama.cpp build number: the one `--build` named, else what `llama-bench --version` prints (none for a
    /// build configured without one, which says `build 0`).
    pub build: Option<BuildNumber>,
    /// Where it came from, in words (the provider and its cache directory, or the path given).
    pub origin: String,
    /// `llama-bench --version`'s first line, when it was asked (a source for the version note).
    pub version_line: Option<String>,
}

/// Where a Vulkan prediction's device facts come from.
#[derive(Clone, Debug)]
pub enum DeviceSource {
    /// A profile id of data/vulkan_devices.toml.
    Profile(String),
    /// A trace directory whose Vulkan layer recorded the device.
    TraceDir(PathBuf),
    /// Each record's own trace directory (`predict --run` without `--device`).
    EachRecord,
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

/// Whose rules predict, and for what.
#[derive(Clone, Debug)]
pub enum Backend {
    /// ggml-cuda (CUDA and HIP): the GPU arch (`gfx1201`, `gfx90a:xnack-`, `sm_86`, `8.6`; empty: not given) and the
    /// build flags set in addition to the ggml version's defaults (e.g. `GGML_CUDA_FORCE_MMQ`).
    Cuda { arch: String, build_flags: Vec<String> },
    /// ggml-vulkan: the device, and a libggml-vulkan.so whose embedded shaders tell the build's glslc support
    /// (default: the one the trace's pipelines came from).
    Vulkan { device: DeviceSource, library: Option<PathBuf> },
}

impl Backend {
    /// ggml-cuda's rules for `arch`, with the version's default build flags.
    pub fn cuda(arch: impl Into<String>) -> Backend {
        Backend::Cuda { arch: arch.into(), build_flags: Vec::new() }
    }

    /// ggml-vulkan's rules for `device`, with the build its trace names.
    pub fn vulkan(device: DeviceSource) -> Backend {
        Backend::Vulkan { device, library: None }
    }
}

/// What one prediction is asked ([`super::run`] predicts it by its backend's rules).
#[derive(Clone, Debug)]
pub struct PredictOptions {
    pub backend: Backend,
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
    pub prompt_from_run: Option<PromptFromRun>,
    pub observed: Option<ObservedSource>,
    /// Layers offloaded, backend, op offload: which weights run on the GPU in which phase.
    pub placement: PlacementOptions,
}

impl PredictOptions {
    /// Options with the command line's defaults: every layer offloaded (on the backend's GPU), op offload on, F16 KV,
    /// flash attention auto, one decode step after a prompt.
    pub fn new(backend: Backend, weights: WeightSource, batch: Batch) -> Self {
        let gpu = match backend {
            Backend::Cuda { .. } => GpuBackend::Cuda,
            Backend::Vulkan { .. } => GpuBackend::Vulkan,
        };
        PredictOptions {
            backend,
            weights,
            batch,
            decode_tokens: None,
            ubatch: DEFAULT_UBATCH,
            ggml: knowledge::DEFAULT_GGML_VERSION.to_string(),
            explain: false,
            kv_type: "F16".into(),
            flash_attn: FlashAttn::Auto,
            prompt_from_run: None,
            observed: None,
            placement: PlacementOptions { backend: gpu, ..PlacementOptions::default() },
        }
    }

    /// The decode steps predicted: as given, else one after a prompt and none after one batch.
    pub fn decode_steps(&self) -> u64 {
        self.decode_tokens.unwrap_or(match self.batch {
            Batch::PromptTokens(_) => 1,
            Batch::Ne11(_) => 0,
        })
    }
}
