//! Models `backscope synth` writes for the predict tests, once per test process (in its [`process_dir`]).

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use crate::support::util::{backscope, process_dir, run};

/// Synthesized models, written once per test process: tiny preset (4 layers, 256 wide) in F16, Q8_0 and Q4_K_M,
/// and a 22-layer model with TinyLlama's layer count and attention shape (head size 64, 8 query heads per KV
/// head) in Q4_K_M.
pub struct Models {
    pub f16: PathBuf,
    pub q8_0: PathBuf,
    pub q4_k_m: PathBuf,
    pub tl_q4_k_m: PathBuf,
}

fn synth(out: &Path, args: &[&str]) {
    let o = run(backscope().arg("synth").args(args).arg("-o").arg(out));
    assert!(
        o.status.success(),
        "backscope synth {args:?} failed: {}\n{}",
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
}

pub fn models() -> &'static Models {
    static M: OnceLock<Models> = OnceLock::new();
    M.get_or_init(|| {
        let dir = process_dir("backscope-models-tests-");
        let p = |n: &str| dir.join(n);
        synth(&p("tiny-f16.gguf"), &["--preset", "tiny", "--type", "f16"]);
        synth(&p("tiny-q8_0.gguf"), &["--preset", "tiny", "--type", "q8_0"]);
        synth(&p("tiny-q4_k_m.gguf"), &["--preset", "tiny", "--type", "q4_k_m"]);
        // TinyLlama-1.1B has 22 blocks, 32 heads over 4 KV heads of 64: the same layer count and head shape at a
        // tenth of the width. llama-quantize picks Q4_K_M's per-tensor types from the layer index and count
        // (src/llama-quant.cpp:452-456 use_more_bits, :590-591 attn_v, :646-651 ffn_down), so this file has the
        // type pattern of the TinyLlama Q4_K_M file the H100 traces ran.
        synth(
            &p("tl22-q4_k_m.gguf"),
            &[
                "--preset",
                "tiny",
                "--n-layer",
                "22",
                "--n-embd",
                "512",
                "--n-head",
                "8",
                "--n-head-kv",
                "1",
                "--n-ff",
                "512",
                "--type",
                "q4_k_m",
            ],
        );
        Models {
            f16: p("tiny-f16.gguf"),
            q8_0: p("tiny-q8_0.gguf"),
            q4_k_m: p("tiny-q4_k_m.gguf"),
            tl_q4_k_m: p("tl22-q4_k_m.gguf"),
        }
    })
}
