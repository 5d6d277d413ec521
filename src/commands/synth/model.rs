//! Model shapes: presets, the tensors llama.cpp's loader expects for them, and their hyperparameter KVs.
//!
//! Tensor names and shapes follow llama.cpp 11434 `src/models/llama.cpp`, `src/models/qwen2.cpp`,
//! `src/models/qwen35.cpp` and `src/models/phi3.cpp` (`load_arch_tensors`), names as in src/llama-arch.cpp
//! `LLM_TENSOR_NAMES` (gguf-py constants.py `TENSOR_NAMES`); KV names as in constants.py `Keys`.
//! A mixture-of-experts shape (`n_expert > 0`) is the llama loader's MoE branch (src/models/llama.cpp:78-82):
//! `ffn_gate_inp` {n_embd, n_expert} and `ffn_{gate,up}_exps` {n_embd, n_ff, n_expert}, `ffn_down_exps`
//! {n_ff, n_embd, n_expert} in place of the dense `ffn_{gate,up,down}` (src/models/llama.cpp:69-76).

use anyhow::{bail, Result};

use gguf::{GgmlType, TensorSpec};

/// Largest `--n-vocab` accepted.
pub const MAX_VOCAB: u64 = 1 << 22;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Preset {
    /// 256 dims, 4 layers, 8 heads (4 KV), n_ff 512, llama-spm vocab: ~19M parameters, 38 MB in F16 (for tests).
    Tiny,
    /// TinyLlama 1.1B: 2048 dims, 22 layers, 32 heads (4 KV), n_ff 5632, llama-spm vocab.
    Tinyllama1_1b,
    /// Qwen2 7B: 3584 dims, 28 layers, 28 heads (4 KV), n_ff 18944, q/k/v biases, qwen2 vocab padded to 152064.
    Qwen2_7b,
    /// A Mixtral-shaped mixture of experts as small as `Tiny`: 256 dims, 2 layers, 8 heads (4 KV), 8 experts of
    /// n_ff 512, 2 used per token, llama-spm vocab (for tests on lavapipe).
    TinyMoe,
    /// Qwen3.5 2B (`qwen35`): a hybrid of gated delta-net (linear attention) and gated full attention, 2048 dims,
    /// 24 layers as 6 × (3 delta-net + 1 attention), attention 8 heads (2 KV) of 256, delta-net 16 QK and 16 V
    /// heads of 128, n_ff 6144, qwen35 vocab padded to 248320, output tied to the embedding.
    Qwen35_2b,
    /// Phi-4-mini (`phi3`): 3072 dims, 32 layers, 24 heads (8 KV), n_ff 8192, fused QKV and gate/up, LongRoPE
    /// over 96 of 128 head dims, vocab 200064 rows, output tied to the embedding.
    Phi4Mini,
}

/// The gated delta-net (linear attention) layers of a `qwen35` hybrid: what llama.cpp 11434 reads as
/// `qwen35.ssm.*` and `qwen35.full_attention_interval` (src/models/qwen35.cpp:4-23) and sizes its tensors by
/// (src/models/qwen35.cpp:55-97).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeltaNet {
    /// Width of the causal convolution (`ssm.conv_kernel`; config.json `linear_conv_kernel_dim`).
    pub conv_kernel: u64,
    /// Head size of Q, K and V (`ssm.state_size`; `linear_key_head_dim`; llama.cpp uses it for V too).
    pub head_dim: u64,
    /// Query/key heads (`ssm.group_count`; `linear_num_key_heads`).
    pub k_heads: u64,
    /// Value heads (`ssm.time_step_rank`; `linear_num_value_heads`).
    pub v_heads: u64,
    /// Every this-many-th layer is full attention, the others delta-net (`full_attention_interval`).
    pub full_attention_interval: u64,
}

impl DeltaNet {
    /// Q and K together, then V: the channels of the fused `attn_qkv` and of the convolution.
    pub fn conv_channels(&self) -> u64 {
        self.head_dim * self.k_heads * 2 + self.value_dim()
    }

    /// V's width (`ssm.inner_size`).
    pub fn value_dim(&self) -> u64 {
        self.head_dim * self.v_heads
    }

    /// Whether layer `il` is a delta-net layer (src/models/qwen35.cpp:19-21: all but every interval-th).
    pub fn is_recurrent(&self, il: u64) -> bool {
        !(il + 1).is_multiple_of(self.full_attention_interval)
    }
}

/// Most experts llama.cpp 11434 loads (src/llama-hparams.h:12 `LLAMA_MAX_EXPERTS`, asserted at
/// src/llama-model.cpp:1363).
pub const MAX_EXPERTS: u64 = 1024;

/// Most layers llama.cpp 11434 loads (src/llama-hparams.h:11 `LLAMA_MAX_LAYERS`).
pub const MAX_LAYERS: u64 = 512;

/// Most weights a synthetic model may have: 2^40, about 1.1 trillion (the largest open models are near one
/// trillion). A shape above it is a typo that would write terabytes.
pub const MAX_PARAMETERS: u128 = 1 << 40;

/// Everything that decides the file's tensors and hyperparameters.
#[derive(Debug, Clone, PartialEq)]
pub struct Shape {
    /// `general.architecture`: `llama` or `qwen2` (same tensors; qwen2 adds q/k/v biases).
    pub arch: &'static str,
    pub name: String,
    pub n_embd: u64,
    pub n_layer: u64,
    pub n_head: u64,
    pub n_head_kv: u64,
    pub n_ff: u64,
    pub n_ctx: u64,
    /// Rows of the embedding and output matrices; `None`: the vocabulary's token count. Larger than the token
    /// count pads the token list as convert_hf_to_gguf.py does (`[PADn]`), as in real Qwen2 GGUFs.
    pub n_vocab: Option<u64>,
    /// File name of the vocab GGUF in llama.cpp's `models/` directory.
    pub vocab_file: &'static str,
    pub rope_freq_base: f32,
    pub rms_eps: f32,
    pub qkv_bias: bool,
    /// Experts per MoE layer (`llama.expert_count`); 0: a dense feed-forward.
    pub n_expert: u64,
    /// Experts each token is routed to (`llama.expert_used_count`).
    pub n_expert_used: u64,
    /// Head dimensions RoPE rotates (`rope.dimension_count`); `None`: the whole head.
    pub n_rot: Option<u64>,
    /// The output projection is the embedding matrix (no `output.weight`: llama.cpp duplicates `token_embd`).
    pub tied_output: bool,
    /// A `qwen35` hybrid's delta-net layers (and its gated attention: Q twice as wide, Q/K norms).
    pub delta_net: Option<DeltaNet>,
    /// `phi3`'s LongRoPE: the context before scaling (`rope.scaling.original_context_length`); with it the
    /// `rope_factors_long`/`rope_factors_short` tensors ({n_rot / 2}, F32) are written.
    pub rope_orig_ctx: Option<u64>,
    /// `attention.sliding_window` as the real GGUF carries it (llama.cpp 11434 disables it for phi3 with a
    /// warning, src/models/phi3.cpp:13-24).
    pub sliding_window: Option<u64>,
}

impl Preset {
    /// Hyperparameters of the real models (their config.json), with the tokenizer llama.cpp ships for them.
    pub fn shape(self) -> Shape {
        match self {
            // A plain dense llama: none of the optional parts (experts, partial RoPE, tied output, delta-net
            // layers, LongRoPE, sliding window). The other presets start from it and set what they differ in.
            Preset::Tiny => Shape {
                arch: "llama",
                name: "tiny".into(),
                n_embd: 256,
                n_layer: 4,
                n_head: 8,
                n_head_kv: 4,
                n_ff: 512,
                n_ctx: 2048,
                n_vocab: None,
                vocab_file: "ggml-vocab-llama-spm.gguf",
                rope_freq_base: 10000.0,
                rms_eps: 1e-5,
                qkv_bias: false,
                n_expert: 0,
                n_expert_used: 0,
                n_rot: None,
                tied_output: false,
                delta_net: None,
                rope_orig_ctx: None,
                sliding_window: None,
            },
            // Tiny is TinyLlama scaled down (its vocab, 4 KV heads, context, RoPE base and norm epsilon).
            Preset::Tinyllama1_1b => Shape {
                name: "tinyllama-1.1b".into(),
                n_embd: 2048,
                n_layer: 22,
                n_head: 32,
                n_ff: 5632,
                ..Preset::Tiny.shape()
            },
            Preset::Qwen2_7b => Shape {
                arch: "qwen2",
                name: "qwen2-7b".into(),
                n_embd: 3584,
                n_layer: 28,
                n_head: 28,
                n_head_kv: 4,
                n_ff: 18944,
                n_ctx: 32768,
                n_vocab: Some(152064),
                vocab_file: "ggml-vocab-qwen2.gguf",
                rope_freq_base: 1_000_000.0,
                rms_eps: 1e-6,
                qkv_bias: true,
                ..Preset::Tiny.shape()
            },
            Preset::TinyMoe => Shape {
                name: "tiny-moe".into(),
                n_layer: 2,
                // Mixtral 8x7B routes each token to 2 of 8 experts (its config.json: num_local_experts 8,
                // num_experts_per_tok 2).
                n_expert: 8,
                n_expert_used: 2,
                ..Preset::Tiny.shape()
            },
            // The model card of Qwen/Qwen3.5-2B on Hugging Face ("Model Overview", Language Model): hidden 2048,
            // token embedding 248320 (padded), 24 layers, layout 6 × (3 × Gated DeltaNet → 1 × Gated Attention),
            // DeltaNet 16 heads for V and 16 for QK of head dimension 128, attention 8 heads for Q and 2 for KV of
            // head dimension 256, rotary embedding dimension 64, FFN 6144, LM output tied to the embedding,
            // context 262144. rope_theta 10,000,000, rms_norm_eps 1e-6 and linear_conv_kernel_dim 4 as the
            // Qwen3.5 config.json files give them (text_config).
            Preset::Qwen35_2b => Shape {
                arch: "qwen35",
                name: "qwen3.5-2b".into(),
                n_embd: 2048,
                n_layer: 24,
                n_head: 8,
                n_head_kv: 2,
                n_ff: 6144,
                n_ctx: 262144,
                n_vocab: Some(248320),
                vocab_file: "ggml-vocab-qwen35.gguf",
                rope_freq_base: 10_000_000.0,
                rms_eps: 1e-6,
                n_rot: Some(64),
                tied_output: true,
                delta_net: Some(DeltaNet {
                    conv_kernel: 4,
                    head_dim: 128,
                    k_heads: 16,
                    v_heads: 16,
                    full_attention_interval: 4,
                }),
                ..Preset::Tiny.shape()
            },
            // microsoft/Phi-4-mini-instruct's config.json: hidden_size 3072, num_hidden_layers 32,
            // num_attention_heads 24, num_key_value_heads 8, intermediate_size 8192, vocab_size 200064,
            // partial_rotary_factor 0.75 (96 of 128 head dims), rope_theta 10000, rms_norm_eps 1e-5,
            // max_position_embeddings 131072, original_max_position_embeddings 4096, sliding_window 262144,
            // tie_word_embeddings true. Its tokenizer is GPT-4o's BPE, which llama.cpp does not ship as a vocab
            // GGUF: llama-bpe's BPE token list padded to the 200064 rows stands in (rows decide the shapes).
            Preset::Phi4Mini => Shape {
                arch: "phi3",
                name: "phi4-mini".into(),
                n_embd: 3072,
                n_layer: 32,
                n_head: 24,
                n_head_kv: 8,
                n_ff: 8192,
                n_ctx: 131072,
                n_vocab: Some(200064),
                vocab_file: "ggml-vocab-llama-bpe.gguf",
                rope_freq_base: 10000.0,
                rms_eps: 1e-5,
                n_rot: Some(96),
                tied_output: true,
                rope_orig_ctx: Some(4096),
                sliding_window: Some(262144),
                ..Preset::Tiny.shape()
            },
        }
    }
}

/// What the 2-D weight matrices are stored as; 1-D tensors (norms, biases) are always F32, as
/// convert_hf_to_gguf.py writes them and llama-quantize leaves them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WeightType {
    F32,
    F16,
    Q4KM,
    Q8_0,
}

impl WeightType {
    /// The type synth writes itself; quantized types are written as F16 and handed to llama-quantize.
    pub fn written(self) -> GgmlType {
        match self {
            WeightType::F32 => GgmlType::F32,
            _ => GgmlType::F16,
        }
    }

    /// `general.file_type` (llama.h `llama_ftype`) of the file synth writes.
    pub fn written_file_type(self) -> u32 {
        match self {
            WeightType::F32 => 0,
            _ => 1,
        }
    }

    /// llama-quantize's type argument, for the quantized types.
    pub fn quantize_arg(self) -> Option<&'static str> {
        match self {
            WeightType::Q4KM => Some("Q4_K_M"),
            WeightType::Q8_0 => Some("Q8_0"),
            _ => None,
        }
    }
}

/// How a tensor's values are generated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fill {
    /// Random N(0, 0.02²).
    Random,
    /// All 1.0: RMS-norm weights, so normalisation passes activations through unscaled.
    Ones,
}

impl Shape {
    pub fn validate(&self) -> Result<()> {
        for (what, v) in [
            ("--n-embd", self.n_embd),
            ("--n-layer", self.n_layer),
            ("--n-head", self.n_head),
            ("--n-head-kv", self.n_head_kv),
            ("--n-ff", self.n_ff),
            ("--n-ctx", self.n_ctx),
        ] {
            if v == 0 || v > u64::from(u32::MAX) {
                bail!("{what} must be between 1 and {}, not {v}", u32::MAX);
            }
        }
        // Real vocabularies stop near 262,144 tokens (Gemma); the bound keeps a typo from padding a token list
        // of billions in memory.
        if let Some(v) = self.n_vocab {
            if v == 0 || v > MAX_VOCAB {
                bail!("--n-vocab must be between 1 and {MAX_VOCAB}, not {v}");
            }
        }
        if self.n_layer > MAX_LAYERS {
            bail!("--n-layer must be at most {MAX_LAYERS} (llama.cpp's LLAMA_MAX_LAYERS), not {}", self.n_layer);
        }
        if self.n_expert > MAX_EXPERTS {
            bail!("--n-expert must be at most {MAX_EXPERTS} (llama.cpp's LLAMA_MAX_EXPERTS), not {}", self.n_expert);
        }
        // llama.cpp asserts both ways (src/llama-model.cpp:1364-1366): experts used among those there are, and at
        // least one used when there are experts.
        if self.n_expert_used > self.n_expert || (self.n_expert > 0 && self.n_expert_used == 0) {
            bail!(
                "--n-expert-used must be between 1 and --n-expert ({}) for a mixture of experts, and 0 without one; \
                 not {}",
                self.n_expert,
                self.n_expert_used
            );
        }
        if !self.n_embd.is_multiple_of(self.n_head) {
            bail!("--n-embd {} is not a multiple of --n-head {}", self.n_embd, self.n_head);
        }
        if !self.n_head.is_multiple_of(self.n_head_kv) {
            bail!(
                "--n-head {} is not a multiple of --n-head-kv {} (grouped-query attention)",
                self.n_head,
                self.n_head_kv
            );
        }
        // RoPE rotates pairs of values within a head.
        if !self.head_dim().is_multiple_of(2) {
            bail!("the head size n_embd / n_head = {} must be even for RoPE", self.head_dim());
        }
        if let Some(r) = self.n_rot {
            if r == 0 || r > self.head_dim() || !r.is_multiple_of(2) {
                bail!("the rotated dims ({r}) must be even and at most the head size {}", self.head_dim());
            }
        }
        if self.delta_net.is_some() && self.n_expert > 0 {
            bail!("--n-expert: the qwen35 hybrid preset is dense (qwen35moe is not written)");
        }
        if let Some(d) = self.delta_net {
            for (what, v) in [
                ("conv kernel", d.conv_kernel),
                ("head size", d.head_dim),
                ("QK heads", d.k_heads),
                ("V heads", d.v_heads),
                ("full attention interval", d.full_attention_interval),
            ] {
                if v == 0 || v > 1 << 16 {
                    bail!("the delta-net {what} must be between 1 and 65536, not {v}");
                }
            }
            // ggml_gated_delta_net broadcasts the QK heads over the V heads.
            if !d.v_heads.is_multiple_of(d.k_heads) {
                bail!("the delta-net V heads ({}) must be a multiple of its QK heads ({})", d.v_heads, d.k_heads);
            }
        }
        let weights = self.weights_at_most();
        if weights > MAX_PARAMETERS {
            bail!(
                "the shape (--n-embd, --n-layer, --n-ff, --n-expert, --n-vocab) has about {weights} weights; a \
                 synthetic model may have at most {MAX_PARAMETERS} (2^40)"
            );
        }
        Ok(())
    }

    /// The weights of the shape's matrices, with the vocabulary at its largest when it is not given: in u128, where
    /// the product of the bounded dimensions cannot overflow.
    fn weights_at_most(&self) -> u128 {
        let (e, ff, layers) = (u128::from(self.n_embd), u128::from(self.n_ff), u128::from(self.n_layer));
        let vocab = u128::from(self.n_vocab.unwrap_or(MAX_VOCAB));
        let gqa = u128::from(self.n_embd_gqa());
        let experts = u128::from(self.n_expert.max(1));
        // Per layer: q (twice, for a gated attention) and output, k and v, the feed-forward (per expert), the
        // router, the norms and biases; a delta-net layer's projections, convolution and per-head vectors.
        let per_layer = 3 * e * e + 2 * e * gqa + 3 * e * ff * experts + e * experts + 3 * e + 2 * gqa;
        let delta_net = self.delta_net.map_or(0, |d| {
            let (conv, value) = (u128::from(d.conv_channels()), u128::from(d.value_dim()));
            e * (conv + value + 2 * u128::from(d.v_heads)) + value * e + conv * u128::from(d.conv_kernel) + 4 * value
        });
        2 * e * vocab + layers * (per_layer + delta_net) + e
    }

    pub fn head_dim(&self) -> u64 {
        self.n_embd / self.n_head
    }

    /// The dims RoPE rotates (`rope.dimension_count`).
    pub fn rope_dims(&self) -> u64 {
        self.n_rot.unwrap_or_else(|| self.head_dim())
    }

    /// Width of the K and V projections (llama.cpp's n_embd_k_gqa / n_embd_v_gqa).
    pub fn n_embd_gqa(&self) -> u64 {
        self.head_dim() * self.n_head_kv
    }

    /// The tensors in file order, with how to fill each. `n_vocab` is the final vocabulary size.
    pub fn tensors(&self, n_vocab: u64, matrix_type: GgmlType) -> Vec<(TensorSpec, Fill)> {
        let (e, ff, gqa) = (self.n_embd, self.n_ff, self.n_embd_gqa());
        let q = self.head_dim() * self.n_head;
        let m = |name: String, dims: &[u64]| (TensorSpec::new(name, dims, matrix_type), Fill::Random);
        let f32_of = |name: String, dims: &[u64], fill| (TensorSpec::new(name, dims, GgmlType::F32), fill);
        let norm = |name: String| (TensorSpec::new(name, &[e], GgmlType::F32), Fill::Ones);
        let bias = |name: String, n: u64| (TensorSpec::new(name, &[n], GgmlType::F32), Fill::Random);
        let mut out = vec![m("token_embd.weight".into(), &[e, n_vocab])];
        if self.rope_orig_ctx.is_some() {
            // One pair for the whole model (src/models/phi3.cpp:51-52: every layer but the first duplicates
            // them); their values only scale rotation frequencies, ones stand in for the trained factors.
            let half = self.rope_dims() / 2;
            out.push(f32_of("rope_factors_long.weight".into(), &[half], Fill::Ones));
            out.push(f32_of("rope_factors_short.weight".into(), &[half], Fill::Ones));
        }
        for i in 0..self.n_layer {
            let b = format!("blk.{i}");
            out.push(norm(format!("{b}.attn_norm.weight")));
            match (self.arch, self.delta_net) {
                // src/models/qwen35.cpp:55-97: each layer has a post-attention norm; a delta-net layer has
                // the fused QKV, the output gate, the convolution (F32, as convert_hf_to_gguf.py and
                // llama-quantize keep it), dt bias, A, beta and alpha, a per-head norm and the output; a full
                // attention layer a Q of twice the heads' width (query and gate), K, V, output and Q/K norms.
                (_, Some(d)) if d.is_recurrent(i) => {
                    out.push(norm(format!("{b}.post_attention_norm.weight")));
                    let (conv, value) = (d.conv_channels(), d.value_dim());
                    out.push(m(format!("{b}.attn_qkv.weight"), &[e, conv]));
                    out.push(m(format!("{b}.attn_gate.weight"), &[e, value]));
                    out.push(f32_of(format!("{b}.ssm_conv1d.weight"), &[d.conv_kernel, conv], Fill::Random));
                    out.push(bias(format!("{b}.ssm_dt.bias"), d.v_heads));
                    out.push(f32_of(format!("{b}.ssm_a"), &[d.v_heads], Fill::Random));
                    out.push(m(format!("{b}.ssm_beta.weight"), &[e, d.v_heads]));
                    out.push(m(format!("{b}.ssm_alpha.weight"), &[e, d.v_heads]));
                    out.push(f32_of(format!("{b}.ssm_norm.weight"), &[d.head_dim], Fill::Ones));
                    out.push(m(format!("{b}.ssm_out.weight"), &[value, e]));
                }
                (_, Some(_)) => {
                    out.push(norm(format!("{b}.post_attention_norm.weight")));
                    out.push(m(format!("{b}.attn_q.weight"), &[e, 2 * q]));
                    out.push(m(format!("{b}.attn_k.weight"), &[e, gqa]));
                    out.push(m(format!("{b}.attn_v.weight"), &[e, gqa]));
                    out.push(m(format!("{b}.attn_output.weight"), &[q, e]));
                    out.push(f32_of(format!("{b}.attn_q_norm.weight"), &[self.head_dim()], Fill::Ones));
                    out.push(f32_of(format!("{b}.attn_k_norm.weight"), &[self.head_dim()], Fill::Ones));
                }
                // src/models/phi3.cpp:41-49: Q, K and V fused in one matrix.
                ("phi3", None) => {
                    out.push(m(format!("{b}.attn_qkv.weight"), &[e, q + 2 * gqa]));
                    out.push(m(format!("{b}.attn_output.weight"), &[q, e]));
                }
                _ => {
                    out.push(m(format!("{b}.attn_q.weight"), &[e, q]));
                    out.push(m(format!("{b}.attn_k.weight"), &[e, gqa]));
                    out.push(m(format!("{b}.attn_v.weight"), &[e, gqa]));
                    if self.qkv_bias {
                        out.push(bias(format!("{b}.attn_q.bias"), q));
                        out.push(bias(format!("{b}.attn_k.bias"), gqa));
                        out.push(bias(format!("{b}.attn_v.bias"), gqa));
                    }
                    out.push(m(format!("{b}.attn_output.weight"), &[q, e]));
                }
            }
            if self.delta_net.is_none() {
                out.push(norm(format!("{b}.ffn_norm.weight")));
            }
            if self.arch == "phi3" {
                // src/models/phi3.cpp:47-48: gate and up fused, {n_embd, 2 n_ff}.
                out.push(m(format!("{b}.ffn_down.weight"), &[ff, e]));
                out.push(m(format!("{b}.ffn_up.weight"), &[e, 2 * ff]));
            } else if self.n_expert == 0 {
                out.push(m(format!("{b}.ffn_gate.weight"), &[e, ff]));
                out.push(m(format!("{b}.ffn_down.weight"), &[ff, e]));
                out.push(m(format!("{b}.ffn_up.weight"), &[e, ff]));
            } else {
                let x = self.n_expert;
                // The router stays F32, as convert_hf_to_gguf.py writes it and llama-quantize leaves it
                // (src/llama-quant.cpp:306 leaves `ffn_gate_inp.weight` unquantized).
                out.push((TensorSpec::new(format!("{b}.ffn_gate_inp.weight"), &[e, x], GgmlType::F32), Fill::Random));
                out.push(m(format!("{b}.ffn_gate_exps.weight"), &[e, ff, x]));
                out.push(m(format!("{b}.ffn_down_exps.weight"), &[ff, e, x]));
                out.push(m(format!("{b}.ffn_up_exps.weight"), &[e, ff, x]));
            }
        }
        out.push(norm("output_norm.weight".into()));
        if !self.tied_output {
            out.push(m("output.weight".into(), &[e, n_vocab]));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_are_valid_and_tiny_has_the_documented_size() {
        for p in [
            Preset::Tiny,
            Preset::Tinyllama1_1b,
            Preset::Qwen2_7b,
            Preset::TinyMoe,
            Preset::Qwen35_2b,
            Preset::Phi4Mini,
        ] {
            p.shape().validate().unwrap();
        }
        let tiny = Preset::Tiny.shape();
        let params: u64 = tiny.tensors(32000, GgmlType::F16).iter().map(|(t, _)| t.n_elements().unwrap()).sum();
        // 2 × 256 × 32000 (embedding, output) + 4 × (q 256² + k, v 256×128 + o 256² + 3 × 256×512 + 2 norms) + norm.
        assert_eq!(params, 2 * 256 * 32000 + 4 * (65536 + 2 * 32768 + 65536 + 3 * 131072 + 512) + 256);
        let qwen = Preset::Qwen2_7b.shape();
        let t = qwen.tensors(152064, GgmlType::F16);
        assert_eq!(t.len(), 2 + 28 * 12 + 1);
        let params: u64 = t.iter().map(|(t, _)| t.n_elements().unwrap()).sum();
        // Qwen2-7B's published parameter count is 7.62 B (7,615,616,512).
        assert_eq!(params, 7_615_616_512);
    }

    /// The tensors of the llama loader's MoE branch (src/models/llama.cpp:78-82), their ne as it creates them.
    #[test]
    fn tiny_moe_has_the_expert_tensors_llama_cpp_loads() {
        let s = Preset::TinyMoe.shape();
        let t = s.tensors(32000, GgmlType::F16);
        let dims = |name: &str| t.iter().find(|(t, _)| t.name == name).map(|(t, _)| t.dims.clone());
        assert_eq!(dims("blk.1.ffn_gate_inp.weight"), Some(vec![256, 8]));
        assert_eq!(dims("blk.1.ffn_gate_exps.weight"), Some(vec![256, 512, 8]));
        assert_eq!(dims("blk.1.ffn_up_exps.weight"), Some(vec![256, 512, 8]));
        assert_eq!(dims("blk.1.ffn_down_exps.weight"), Some(vec![512, 256, 8]));
        assert_eq!(dims("blk.0.ffn_gate.weight"), None, "no dense feed-forward beside the experts");
        // token_embd + 2 × (attn_norm, q, k, v, o, ffn_norm, gate_inp, 3 experts) + output_norm + output.
        assert_eq!(t.len(), 1 + 2 * 10 + 2);
        let gate_inp = t.iter().find(|(t, _)| t.name == "blk.0.ffn_gate_inp.weight").unwrap();
        assert_eq!(gate_inp.0.ggml_type, GgmlType::F32);
    }

    /// Phi-4-mini-instruct's published parameter count (the safetensors total of microsoft/Phi-4-mini-instruct on
    /// Hugging Face: 3,836,021,760) is the preset's tensors with the output tied to the embedding; the two LongRoPE
    /// factor vectors are buffers, not parameters, and are left out of it.
    #[test]
    fn phi4_mini_has_the_published_parameter_count_and_fused_tensors() {
        let s = Preset::Phi4Mini.shape();
        s.validate().unwrap();
        let t = s.tensors(200064, GgmlType::F16);
        let dims = |name: &str| t.iter().find(|(t, _)| t.name == name).map(|(t, _)| t.dims.clone());
        let params: u64 =
            t.iter().filter(|(t, _)| !t.name.starts_with("rope_factors")).map(|(t, _)| t.n_elements().unwrap()).sum();
        assert_eq!(params, 3_836_021_760);
        // 3072 for Q and 2 × 8 KV heads × 128 for K and V; gate and up in one of 2 × 8192.
        assert_eq!(dims("blk.31.attn_qkv.weight"), Some(vec![3072, 5120]));
        assert_eq!(dims("blk.0.ffn_up.weight"), Some(vec![3072, 16384]));
        // 96 rotated dims of 128: 48 factors (partial_rotary_factor 0.75).
        assert_eq!(dims("rope_factors_long.weight"), Some(vec![48]));
        assert_eq!(dims("output.weight"), None, "tie_word_embeddings");
    }

    /// The Qwen3.5-2B model card's shapes through llama.cpp 11434's qwen35 loader (src/models/qwen35.cpp:55-97):
    /// delta-net layers hold Q and K (16 heads of 128 each) and V (16 × 128) in one projection of 6144 rows, with a
    /// convolution over the same channels; every fourth layer is gated attention, its Q projection twice 8 heads of
    /// 256 wide.
    #[test]
    fn qwen35_2b_has_the_loaders_hybrid_layout() {
        let s = Preset::Qwen35_2b.shape();
        s.validate().unwrap();
        let t = s.tensors(248320, GgmlType::F16);
        let dims = |name: &str| t.iter().find(|(t, _)| t.name == name).map(|(t, _)| t.dims.clone());
        let ty = |name: &str| t.iter().find(|(t, _)| t.name == name).map(|(t, _)| t.ggml_type);
        for il in [0, 1, 2, 20, 21, 22] {
            assert_eq!(dims(&format!("blk.{il}.attn_qkv.weight")), Some(vec![2048, 6144]), "layer {il}");
            assert_eq!(dims(&format!("blk.{il}.attn_q.weight")), None, "layer {il}");
        }
        assert_eq!(dims("blk.0.attn_gate.weight"), Some(vec![2048, 2048]));
        assert_eq!(dims("blk.0.ssm_conv1d.weight"), Some(vec![4, 6144]));
        assert_eq!(ty("blk.0.ssm_conv1d.weight"), Some(GgmlType::F32));
        assert_eq!(dims("blk.0.ssm_beta.weight"), Some(vec![2048, 16]));
        assert_eq!(dims("blk.0.ssm_a"), Some(vec![16]));
        assert_eq!(dims("blk.0.ssm_norm.weight"), Some(vec![128]));
        assert_eq!(dims("blk.0.ssm_out.weight"), Some(vec![2048, 2048]));
        let full: Vec<u64> = (0..24).filter(|il| dims(&format!("blk.{il}.attn_q.weight")).is_some()).collect();
        assert_eq!(full, [3, 7, 11, 15, 19, 23]);
        assert_eq!(dims("blk.3.attn_q.weight"), Some(vec![2048, 4096]));
        assert_eq!(dims("blk.3.attn_k.weight"), Some(vec![2048, 512]));
        assert_eq!(dims("blk.3.attn_output.weight"), Some(vec![2048, 2048]));
        assert_eq!(dims("blk.3.attn_k_norm.weight"), Some(vec![256]));
        assert_eq!(dims("blk.3.ffn_norm.weight"), None, "post_attention_norm is the FFN's norm");
        assert_eq!(dims("blk.3.post_attention_norm.weight"), Some(vec![2048]));
        assert_eq!(dims("blk.23.ffn_down.weight"), Some(vec![6144, 2048]));
        assert_eq!(dims("output.weight"), None, "tied to the embedding");
        assert!(s.weights_at_most() >= t.iter().map(|(t, _)| u128::from(t.n_elements().unwrap())).sum::<u128>());
        // Four layers keep the pattern: three delta-net, then attention.
        let four = Shape { n_layer: 4, ..s };
        assert_eq!(
            four.tensors(248320, GgmlType::F16).iter().filter(|(t, _)| t.name.ends_with("attn_q.weight")).count(),
            1
        );
    }

    #[test]
    fn bad_shapes_are_refused() {
        let mut s = Preset::TinyMoe.shape();
        s.n_expert_used = 9;
        assert!(s.validate().is_err(), "more experts used than there are");
        let mut s = Preset::TinyMoe.shape();
        s.n_expert_used = 0;
        assert!(s.validate().is_err(), "a mixture of experts routes to at least one");
        let mut s = Preset::Tiny.shape();
        s.n_expert_used = 1;
        assert!(s.validate().is_err(), "experts used without experts");
        let mut s = Preset::Tiny.shape();
        s.n_head_kv = 3;
        assert!(s.validate().is_err());
        let mut s = Preset::Tiny.shape();
        s.n_embd = 250;
        assert!(s.validate().is_err());
        let mut s = Preset::Tiny.shape();
        s.n_layer = 0;
        assert!(s.validate().is_err());
        let mut s = Preset::Tiny.shape();
        s.n_vocab = Some(MAX_VOCAB + 1);
        assert!(s.validate().is_err());
        let mut s = Preset::Phi4Mini.shape();
        s.n_rot = Some(130);
        assert!(s.validate().is_err(), "more rotated dims than the head has");
        let mut s = Preset::Qwen35_2b.shape();
        s.delta_net = s.delta_net.map(|d| DeltaNet { v_heads: 24, k_heads: 16, ..d });
        assert!(s.validate().is_err(), "V heads not a multiple of QK heads");
        let mut s = Preset::Qwen35_2b.shape();
        s.n_expert = 8;
        s.n_expert_used = 2;
        assert!(s.validate().is_err(), "no qwen35moe");
        // More layers than llama.cpp loads, and a shape of terabytes (n_ff of 2^32 - 1), are refused before any
        // tensor list is made.
        let mut s = Preset::Tiny.shape();
        s.n_layer = MAX_LAYERS + 1;
        assert!(s.validate().unwrap_err().to_string().contains("LLAMA_MAX_LAYERS"));
        let mut s = Preset::Tiny.shape();
        s.n_ff = u64::from(u32::MAX);
        assert!(s.validate().unwrap_err().to_string().contains("at most 1099511627776"));
        // The bound is no looser than the count: Qwen2-7B's 7.6 B weights are below their bound.
        let q = Preset::Qwen2_7b.shape();
        let counted: u64 = q.tensors(152064, GgmlType::F16).iter().map(|(t, _)| t.n_elements().unwrap()).sum();
        assert!(q.weights_at_most() >= u128::from(counted));
    }
}
