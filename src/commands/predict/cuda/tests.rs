//! Unit tests of the phase plan, flash-attention and MUL_MAT_ID predictions on hand-built weights. Expected values
//! are read off the cited llama.cpp 11434 (and Ollama v0.24.0) source lines, not produced by this code.

use super::super::phases::kv_len;
use super::super::*;
use super::rules::device_for;
use super::run;
use crate::evidence::{Confidence, Source};

fn weights(tensors: Vec<WeightTensor>, attention: Option<AttentionShape>) -> ModelWeights {
    ModelWeights {
        source: "hand-built".into(),
        architecture: Some("llama".into()),
        n_layer: Some(1),
        tensors,
        attention,
    }
}

fn dense(name: &str, ty: &str, k: u64, n: u64, after_gather: bool) -> WeightTensor {
    WeightTensor {
        name: name.into(),
        ggml_type: ty.into(),
        ne00: Some(k),
        ne01: Some(n),
        experts: 0,
        op: MatmulOp::MulMat,
        after_gather,
        layer: name.strip_prefix("blk.").and_then(|r| r.split('.').next()?.parse().ok()),
        head: name == "output.weight",
    }
}

fn attention_family(arch: &str, ggml: &str, head_dim: u64, n_head: u64, n_head_kv: u64, tokens: u64) -> Option<String> {
    let w = weights(
        vec![dense("blk.0.attn_q.weight", "Q8_0", 4096, 4096, false)],
        Some(AttentionShape { head_dim, dv: head_dim, n_head, n_head_kv }),
    );
    let mut o = PredictOptions::new(Backend::cuda(arch), WeightSource::Weights(w), Batch::Ne11(tokens));
    o.ggml = ggml.into();
    let r = run(&o).unwrap();
    r.phases[0].attention.first().and_then(|a| a.prediction.family.clone())
}

#[test]
fn flash_attention_kernels_follow_fattn_cu() {
    let fa = |arch, d, h, kv, t| attention_family(arch, "11434", d, h, kv, t);
    // Turing+ with F16 KV: one query token on Ada or newer takes the vector kernel (fattn.cu:638-648), more tokens
    // the MMA kernel (:664).
    assert_eq!(fa("sm_90", 64, 32, 4, 1).as_deref(), Some("FA-vec"));
    assert_eq!(fa("sm_90", 64, 32, 4, 8).as_deref(), Some("FA-mma"));
    // Ampere is below ADA_LOVELACE: with GQA (gqa_opt applies) one token still goes to MMA; without GQA the vector
    // kernel (:660-662).
    assert_eq!(fa("sm_86", 128, 32, 8, 1).as_deref(), Some("FA-mma"));
    assert_eq!(fa("sm_86", 128, 32, 32, 1).as_deref(), Some("FA-vec"));
    // RDNA4 (WMMA): MMA once tokens x gqa_eff exceed 8 at head size <= 128 (:700-703); gqa_eff of GQA 8 is 8
    // (:667-671), so one token is 8 (tile kernel, :719) and two are 16 (MMA).
    assert_eq!(fa("gfx1201", 64, 32, 4, 1).as_deref(), Some("FA-tile"));
    assert_eq!(fa("gfx1201", 64, 32, 4, 2).as_deref(), Some("FA-mma"));
    // GCN without matrix units: tile, or the vector kernel for one token without GQA (:706-712).
    assert_eq!(fa("gfx900", 128, 32, 8, 1).as_deref(), Some("FA-tile"));
    assert_eq!(fa("gfx900", 128, 32, 32, 1).as_deref(), Some("FA-vec"));
    // CDNA3 (MFMA), head size 128, GQA 4: MMA above 16 tokens x gqa_eff (:688-690): 4 x 4 = 16 no, 5 x 4 yes.
    assert_eq!(fa("gfx942", 128, 32, 8, 4).as_deref(), Some("FA-tile"));
    assert_eq!(fa("gfx942", 128, 32, 8, 5).as_deref(), Some("FA-mma"));
    // Ollama v0.24's ggml has no MMA path on AMD without rocWMMA (fattn.cu:346-367 there): tile for a prompt.
    assert_eq!(attention_family("gfx1201", "o24", 64, 32, 4, 512).as_deref(), Some("FA-tile"));
}

#[test]
fn unsupported_head_size_turns_auto_flash_attention_off() {
    // Head size 48 has no kernel (fattn.cu:576-623): with -fa auto llama.cpp disables flash attention.
    let w = weights(
        vec![dense("blk.0.attn_q.weight", "Q8_0", 4096, 4096, false)],
        Some(AttentionShape { head_dim: 48, dv: 48, n_head: 8, n_head_kv: 8 }),
    );
    let r = run(&PredictOptions::new(Backend::cuda("sm_90"), WeightSource::Weights(w), Batch::Ne11(4))).unwrap();
    assert!(!r.flash_attn_used);
    assert!(r.phases[0].attention.is_empty());
    assert!(r.assumptions.iter().any(|a| a.contains("flash attention off")));
}

fn experts(ty: &str, n_expert: u64) -> ModelWeights {
    weights(
        vec![WeightTensor {
            name: "blk.0.ffn_up_exps.weight".into(),
            ggml_type: ty.into(),
            ne00: Some(2048),
            ne01: Some(768),
            experts: n_expert,
            op: MatmulOp::MulMatId,
            after_gather: false,
            layer: Some(0),
            head: false,
        }],
        None,
    )
}

fn moe_family(arch: &str, ggml: &str, ty: &str, tokens: u64) -> String {
    let mut o = PredictOptions::new(Backend::cuda(arch), WeightSource::Weights(experts(ty, 8)), Batch::Ne11(tokens));
    o.ggml = ggml.into();
    run(&o).unwrap().phases[0].weights[0].prediction.family.clone().unwrap()
}

#[test]
fn mul_mat_id_follows_ggml_cuda_mul_mat_id() {
    // RDNA4 MMVQ for MUL_MAT_ID: Q4_K up to 4 tokens (mmvq.cu:258-283), then MMQ (mmq.cu:432-434).
    assert_eq!(moe_family("gfx1201", "11434", "Q4_K", 4), "MMVQ");
    assert_eq!(moe_family("gfx1201", "11434", "Q4_K", 5), "MMQ");
    // Turing..Hopper: Q4_K is not in the per-type table, so up to 8 (mmvq.cu:177-188).
    assert_eq!(moe_family("sm_86", "11434", "Q4_K", 8), "MMVQ");
    // gfx900 keeps MMQ for MoE (mmq.cu:437-442: n_experts > 0).
    assert_eq!(moe_family("gfx900", "11434", "Q4_K", 16), "MMQ");
    // Float experts on AMD take MMVF for few tokens (ggml-cuda.cu:1987-1991).
    assert_eq!(moe_family("gfx90a", "11434", "F16", 3), "MMVF");
    // Ollama v0.24: the vector kernels for exactly one token (ggml-cuda.cu:2415-2421 there), else MMQ.
    assert_eq!(moe_family("gfx900", "o24", "Q4_K", 1), "MMVQ");
    assert_eq!(moe_family("gfx900", "o24", "Q4_K", 2), "MMQ");
}

#[test]
fn phases_of_prompts() {
    let w = weights(
        vec![dense("blk.0.attn_q.weight", "Q8_0", 256, 256, false), dense("output.weight", "Q8_0", 256, 32000, true)],
        None,
    );
    let shape = |batch, decode| {
        let mut o = PredictOptions::new(Backend::cuda("sm_90"), WeightSource::Weights(w.clone()), batch);
        o.decode_tokens = decode;
        run(&o).unwrap().phases.iter().map(|p| (p.id.clone(), p.ne11, p.repeat)).collect::<Vec<_>>()
    };
    let s = |v: &[(&str, u64, u64)]| v.iter().map(|(a, b, c)| (a.to_string(), *b, *c)).collect::<Vec<_>>();
    assert_eq!(
        shape(Batch::PromptTokens(512), None),
        s(&[("prefill-last", 512, 1), ("last-rows", 1, 1), ("decode", 1, 1)])
    );
    assert_eq!(
        shape(Batch::PromptTokens(1024), Some(0)),
        s(&[("prefill", 512, 1), ("prefill-last", 512, 1), ("last-rows", 1, 1)])
    );
    // A one-token last ubatch gathers nothing away: every weight sees its one row.
    assert_eq!(shape(Batch::PromptTokens(513), Some(0)), s(&[("prefill", 512, 1), ("prefill-last", 1, 1)]));
    assert_eq!(shape(Batch::PromptTokens(0), Some(16)), s(&[("decode", 1, 16)]));
    assert_eq!(shape(Batch::Ne11(5), None), s(&[("batch", 5, 1)]));
    assert_eq!(kv_len(1), 256);
    assert_eq!(kv_len(257), 512);
}

#[test]
fn prompt_count_from_a_run_carries_the_cache_caveat() {
    let w = weights(vec![dense("blk.0.attn_q.weight", "Q8_0", 256, 256, false)], None);
    let mut o = PredictOptions::new(Backend::cuda("gfx1201"), WeightSource::Weights(w), Batch::PromptTokens(700));
    o.prompt_from_run =
        Some(PromptFromRun { run_id: "2026-11-20T10-00-00-ollama".into(), prompt_tokens: 700, includes_cache: true });
    let r = run(&o).unwrap();
    let c = r.claims.iter().find(|c| c.id == "predict.prompt-from-run").unwrap();
    assert_eq!(c.confidence, Confidence::Limited);
    assert!(c.statement.contains("cached"));
    assert!(r.assumptions.iter().any(|a| a.contains("prompt cache")));
    assert!(matches!(&c.sources[0], Source::Run { run_id, .. } if run_id == "2026-11-20T10-00-00-ollama"));
}

#[test]
fn options_are_checked() {
    let w = WeightSource::Single { weight_type: "Q8_0".into(), n: None, k: None };
    let mut o = PredictOptions::new(Backend::cuda("sm_90"), w.clone(), Batch::Ne11(1));
    o.ggml = "b9999".into();
    assert!(run(&o).unwrap_err().to_string().contains("no dispatch rules"));
    let mut o = PredictOptions::new(Backend::cuda("sm_90"), w.clone(), Batch::Ne11(1));
    o.backend = Backend::Cuda { arch: "sm_90".into(), build_flags: vec!["GGML_NOPE".into()] };
    assert!(run(&o).unwrap_err().to_string().contains("unknown build flag"));
    assert!(run(&PredictOptions::new(Backend::cuda("sm_90"), w.clone(), Batch::Ne11(0))).is_err());
    // GGML_CUDA_FORCE_CUBLAS sends quantized weights past MMQ (mmq.cu:319-321).
    let mut o = PredictOptions::new(Backend::cuda("sm_90"), w, Batch::Ne11(64));
    o.backend = Backend::Cuda { arch: "sm_90".into(), build_flags: vec!["GGML_CUDA_FORCE_CUBLAS".into()] };
    assert_eq!(run(&o).unwrap().phases[0].weights[0].prediction.family.as_deref(), Some("BLAS"));
}

#[test]
fn prompt_count_from_a_sweep_record() {
    let mut rec = crate::run::format::record::Record { run_id: "r1".into(), ..Default::default() };
    assert_eq!(PromptFromRun::from_record(&rec), None);
    rec.server_timings.prompt_n = Some(1100);
    rec.prompt_count_includes_cache = true;
    assert_eq!(
        PromptFromRun::from_record(&rec),
        Some(PromptFromRun { run_id: "r1".into(), prompt_tokens: 1100, includes_cache: true })
    );
}

/// A GGUF of `n` small llama weight matrices (`blk.I.attn_q.weight`, 32×2 F32), written with the gguf crate's
/// writer; its tensor-info table alone spans many pages.
fn small_tensor_gguf(path: &std::path::Path, n: u64) {
    use gguf::{GgmlType, GgufWriter, TensorSpec, Value};
    let specs: Vec<TensorSpec> =
        (0..n).map(|i| TensorSpec::new(format!("blk.{i}.attn_q.weight"), &[32, 2], GgmlType::F32)).collect();
    let kvs = [("general.architecture", Value::String(b"llama"))];
    let out = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    let mut w = GgufWriter::new(out, &kvs, &specs).unwrap();
    let zeros = vec![0u8; 32 * 2 * 4];
    for _ in 0..n {
        w.write_data(&zeros).unwrap();
    }
    w.finish().unwrap();
}

/// Issue 21: a GGUF cut short while it is mapped (a model being re-downloaded) killed predict and synth with
/// SIGBUS. Through the guarded map it is an error naming the file and the offset where the bytes end.
#[test]
fn a_gguf_truncated_while_mapped_is_an_error_not_sigbus() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("model.gguf");
    small_tensor_gguf(&path, 4000);
    let file = crate::gguf_file::open_gguf(&path).unwrap();
    assert!(file.bytes().len() > 64 * 4096);
    // Cut to one page (the tensor infos run far past it) before a byte is read.
    std::fs::OpenOptions::new().write(true).open(&path).unwrap().set_len(4096).unwrap();
    let error = format!("{:#}", crate::gguf_file::parse_gguf(&file).unwrap_err());
    assert!(error.starts_with(&format!("{}: ", path.display())), "{error}");
    assert!(error.contains("truncated while it was being read"), "{error}");
    assert!(error.contains("from offset 4096 on"), "{error}");
    drop(file);
    // The whole path, on the file as it now is: a clear reader error, not a crash.
    let error = format!("{:#}", model::from_gguf(&path).unwrap_err());
    assert!(error.contains("model.gguf"), "{error}");
}

/// The memo key of `predict` (Evaluator::matmul_key) must be invisible: for every version, a spread of GPUs,
/// types, shapes, token counts and expert counts, the key's prediction is the query's own.
#[test]
fn the_memo_key_predicts_what_the_query_predicts() {
    use crate::gpu::knowledge::dispatch::{Evaluator, MatmulQuery};
    let shapes = [0, 1, 2, 3, 31, 32, 33, 64, 96, 128, 130, 256, 511, 512, 513, 1024, 1025, 1056, 2048, 4096, 4097];
    let shapes: Vec<u64> = shapes.into_iter().chain([11008, 14336, 151_936, 152_064, (1 << 40) + 32]).collect();
    let mut compared = 0u64;
    for version in crate::gpu::knowledge::dispatch_versions() {
        let dispatch = crate::gpu::knowledge::dispatch(version).unwrap();
        for arch in ["gfx900", "gfx906", "gfx1100", "gfx1201", "sm_75", "sm_86"] {
            let Ok((device, _)) = device_for(arch) else { continue };
            for flags in [vec![], vec!["GGML_CUDA_FORCE_MMQ".to_string()]] {
                if !flags.iter().all(|f| dispatch.build_flag.iter().any(|b| &b.name == f)) {
                    continue;
                }
                let ev = Evaluator::new(dispatch, &device, &flags);
                for ty in ["F32", "F16", "Q4_0", "Q4_K", "Q8_0"] {
                    let (_, quantized, type_size) = model::type_facts(ty).unwrap();
                    for (&ne00, &ne01) in shapes.iter().zip(shapes.iter().rev()).chain(shapes.iter().zip(&shapes)) {
                        for ne11 in [1, 8, 512] {
                            for experts in [0, 8] {
                                let q = MatmulQuery {
                                    weight_type: ty.into(),
                                    quantized,
                                    type_size,
                                    ne00: Some(ne00),
                                    ne01: Some(ne01),
                                    experts,
                                    ne11,
                                    mul_mat_id: experts > 0,
                                };
                                let (a, b) = (ev.matmul(&q), ev.matmul(&ev.matmul_key(&q)));
                                assert_eq!(
                                    (a.family, a.rule, a.blas_compute, a.undecided),
                                    (b.family, b.rule, b.blas_compute, b.undecided),
                                    "{version} {arch} {q:?}"
                                );
                                compared += 1;
                            }
                        }
                    }
                }
            }
        }
    }
    assert!(compared > 10_000, "{compared}");
}
