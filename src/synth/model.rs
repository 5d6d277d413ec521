//! Model shapes: presets, the tensors llama.cpp's loader expects for them, and their hyperparameter KVs.
//!
//! Tensor names and shapes follow llama.cpp 11434 `src/models/llama.cpp` and `src/models/qwen2.cpp`
//! (`load_arch_tensors`), names as in gguf-py constants.py `TENSOR_NAMES`; KV names as in constants.py `Keys`.
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
}

impl Preset {
    /// Hyperparameters of the real models (their config.json), with the tokenizer llama.cpp ships for them.
    pub fn shape(self) -> Shape {
        match self {
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
            },
            Preset::Tinyllama1_1b => Shape {
                arch: "llama",
                name: "tinyllama-1.1b".into(),
                n_embd: 2048,
                n_layer: 22,
                n_head: 32,
                n_head_kv: 4,
                n_ff: 5632,
                n_ctx: 2048,
                n_vocab: None,
                vocab_file: "ggml-vocab-llama-spm.gguf",
                rope_freq_base: 10000.0,
                rms_eps: 1e-5,
                qkv_bias: false,
                n_expert: 0,
                n_expert_used: 0,
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
                n_expert: 0,
                n_expert_used: 0,
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
        // Per layer: q and output, k and v, the feed-forward (per expert), the router, the norms and biases.
        let per_layer = 2 * e * e + 2 * e * gqa + 3 * e * ff * experts + e * experts + 3 * e + 2 * gqa;
        2 * e * vocab + layers * per_layer + e
    }

    pub fn head_dim(&self) -> u64 {
        self.n_embd / self.n_head
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
        let norm = |name: String| (TensorSpec::new(name, &[e], GgmlType::F32), Fill::Ones);
        let bias = |name: String, n: u64| (TensorSpec::new(name, &[n], GgmlType::F32), Fill::Random);
        let mut out = vec![m("token_embd.weight".into(), &[e, n_vocab])];
        for i in 0..self.n_layer {
            let b = format!("blk.{i}");
            out.push(norm(format!("{b}.attn_norm.weight")));
            out.push(m(format!("{b}.attn_q.weight"), &[e, q]));
            out.push(m(format!("{b}.attn_k.weight"), &[e, gqa]));
            out.push(m(format!("{b}.attn_v.weight"), &[e, gqa]));
            if self.qkv_bias {
                out.push(bias(format!("{b}.attn_q.bias"), q));
                out.push(bias(format!("{b}.attn_k.bias"), gqa));
                out.push(bias(format!("{b}.attn_v.bias"), gqa));
            }
            out.push(m(format!("{b}.attn_output.weight"), &[q, e]));
            out.push(norm(format!("{b}.ffn_norm.weight")));
            if self.n_expert == 0 {
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
        out.push(m("output.weight".into(), &[e, n_vocab]));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_are_valid_and_tiny_has_the_documented_size() {
        for p in [Preset::Tiny, Preset::Tinyllama1_1b, Preset::Qwen2_7b, Preset::TinyMoe] {
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
