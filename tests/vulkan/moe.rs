//! A mixture-of-experts model (`backscope synth --preset tiny-moe`: llama architecture, 8 experts, 2 used) in the
//! real llama.cpp 11434 Vulkan build on lavapipe, under `backscope trace` with the Vulkan layer: every pipeline it
//! dispatches has an op, the MoE matmuls are MUL_MAT_ID, and the layer's dispatches equal ggml-vulkan's own count
//! of graph nodes (GGML_VK_PERF_LOGGER) once the per-token and helper dispatches are accounted for
//! (`backscope::observe::vulkan::counts`). The prompts cover both MUL_MAT_ID paths: 8 tokens and a decode take the per-token
//! vector path, 64 tokens the matrix path with count_experts.

use std::path::{Path, PathBuf};
use std::process::Command;

use backscope::observe::vulkan::counts::{account, parse_perf_logger};
use backscope::observe::vulkan::{describe, OTHER};
use serde_json::Value;

use crate::support::sweep::{heavy, llama_bin};
use crate::support::util::*;

/// `tiny-moe` written by synth in `dir` and quantized by the build's llama-quantize (about 2 s).
fn tiny_moe(dir: &Path, ty: &str) -> PathBuf {
    let path = dir.join(format!("tiny-moe-{ty}.gguf"));
    let mut cmd = backscope();
    cmd.args(["synth", "--preset", "tiny-moe", "--type", ty, "--json", "--llama-bin"])
        .arg(llama_bin())
        .arg("-o")
        .arg(&path);
    stdout_ok(&mut cmd);
    path
}

/// llama-quantize takes the MoE shape: the expert tensors come back in the asked type, 3-D as written, the router
/// left in F32 (llama-quant.cpp:306), and llama-bench loads and runs the Q8_0 file.
#[test]
fn tiny_moe_quantizes_and_runs_in_llama_bench() {
    let _turn = heavy();
    let dir = tempfile::tempdir().unwrap();
    let q8 = tiny_moe(dir.path(), "q8_0");
    let bytes = std::fs::read(&q8).unwrap();
    let g = gguf::Gguf::parse(&bytes).unwrap();
    assert_eq!(g.arch_u64("expert_count"), Some(8));
    assert_eq!(g.arch_u64("expert_used_count"), Some(2));
    let tensor = |name: &str| g.tensors.iter().find(|t| t.name == name).unwrap_or_else(|| panic!("{name}"));
    let up = tensor("blk.1.ffn_up_exps.weight");
    assert_eq!((up.ggml_type.to_string().as_str(), up.dims()), ("Q8_0", &[256, 512, 8][..]));
    assert_eq!(tensor("blk.0.ffn_gate_inp.weight").ggml_type.to_string(), "F32");
    let q4 = tiny_moe(dir.path(), "q4_k_m");
    let bytes = std::fs::read(&q4).unwrap();
    let g4 = gguf::Gguf::parse(&bytes).unwrap();
    let down = g4.tensors.iter().find(|t| t.name == "blk.0.ffn_down_exps.weight").unwrap();
    // Q4_K_M keeps some ffn_down in a larger k-quant (llama-quant.cpp's use_more_bits), never in the F16 written.
    assert!(["Q4_K", "Q5_K", "Q6_K"].contains(&down.ggml_type.to_string().as_str()), "{}", down.ggml_type);

    // llama-bench on the CPU backend (quick): it loads the experts and reports the parameters synth wrote.
    let out = run(Command::new(llama_bin().join("llama-bench"))
        .arg("-m")
        .arg(&q8)
        .args(["-ngl", "0", "-dev", "none", "-p", "8", "-n", "2", "-r", "1", "-o", "json"]));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let rows: Value = serde_json::from_slice(&out.stdout).unwrap();
    let params: u64 = g.tensors.iter().map(|t| t.n_elements).sum();
    assert_eq!(rows[0]["model_n_params"].as_u64(), Some(params), "{rows:#}");
}

#[test]
fn moe_dispatches_equal_perf_logger_nodes_after_accounting() {
    let _turn = heavy();
    let dir = tempfile::tempdir().unwrap();
    let model = tiny_moe(dir.path(), "q4_k_m");
    let traces = dir.path().join("traces");
    let mut cmd = backscope();
    cmd.args(["trace", "--json", "--vklayer"]).arg(vklayer_library()).arg("--dir").arg(&traces).arg("--");
    cmd.arg(llama_bin().join("llama-bench")).arg("-m").arg(&model);
    // One process: prompts of 8 and 64 tokens and a 4-token decode (llama-bench runs each after a warm-up).
    cmd.args(["-ngl", "99", "-p", "8,64", "-n", "4", "-r", "1"]);
    cmd.env("GGML_VK_VISIBLE_DEVICES", "0").env("GGML_VK_PERF_LOGGER", "1");
    let out = run(&mut cmd);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let summary: Value = serde_json::from_str(stdout.trim_end().rsplit('\n').next().unwrap()).unwrap();
    let kernels = summary["kernels"].as_array().unwrap();

    // Every pipeline named by ggml (debug markers, which `trace` sets) and mapped to an op and family.
    let rows: Vec<(&str, u64)> =
        kernels.iter().map(|k| (k["name"].as_str().unwrap(), k["launches"].as_u64().unwrap())).collect();
    for k in kernels {
        let name = k["name"].as_str().unwrap();
        assert!(!name.starts_with("spirv:"), "{name}");
        assert!(k["op"].is_string() && k["family"] != OTHER, "{k}");
        // The MoE matmuls, whatever variant ran, are MUL_MAT_ID in the summary too.
        if name.starts_with("matmul_id") || name.starts_with("mul_mat_vec_id") || name == "count_experts" {
            assert_eq!(k["op"], "MUL_MAT_ID", "{k}");
        }
    }
    let launches = |prefix: &str| rows.iter().filter(|(n, _)| n.starts_with(prefix)).map(|(_, c)| c).sum::<u64>();
    assert!(launches("mul_mat_vec_id_") > 0, "the 8-token prompt and the decode take the per-token path: {rows:?}");
    assert!(launches("matmul_id_") > 0, "the 64-token prompt takes the matrix path: {rows:?}");
    assert!(launches("topk_moe_") > 0, "the router's top-k is fused: {rows:?}");

    // The perf logger's own count, independent of the data file: MUL_MAT_ID nodes and their tokens (`batch=`).
    let entries = parse_perf_logger(&stderr);
    let nodes_of = |f: &dyn Fn(u64) -> bool| {
        entries.iter().filter(|e| e.op == "MUL_MAT_ID" && f(e.tokens)).map(|e| e.count).sum::<u64>()
    };
    let (vector_nodes, matrix_nodes) = (nodes_of(&|t| t <= 8), nodes_of(&|t| t > 8));
    let vector_tokens: u64 =
        entries.iter().filter(|e| e.op == "MUL_MAT_ID" && e.tokens <= 8).map(|e| e.count * e.tokens).sum();
    assert!(vector_nodes > 0 && matrix_nodes > 0, "{entries:#?}");
    assert!(vector_tokens > vector_nodes, "8-token nodes issue more dispatches than nodes");
    // ggml_vk_mul_mat_vec_id_q_f16 dispatches once per token; ggml_vk_mul_mat_id_q_f16 once plus count_experts.
    assert_eq!(launches("mul_mat_vec_id_"), vector_tokens);
    assert_eq!(launches("matmul_id_"), matrix_nodes);
    assert_eq!(launches("count_experts"), matrix_nodes);

    // Each per-token dispatch covers the token's experts: workgroups { groups_x, nei0, groups_z } with nei0 the
    // experts used per token (ggml-vulkan.cpp:7904), which the perf logger prints as the node's `n=`.
    let used: Vec<u64> = entries
        .iter()
        .filter(|e| e.op == "MUL_MAT_ID")
        .filter_map(|e| e.name.split(' ').find_map(|t| t.strip_prefix("n=")?.parse().ok()))
        .collect();
    assert!(!used.is_empty() && used.iter().all(|&n| n == 2), "{used:?}");
    for k in kernels.iter().filter(|k| k["name"].as_str().unwrap().starts_with("mul_mat_vec_id_")) {
        for shape in k["shapes"].as_array().unwrap() {
            assert_eq!(shape[0][1], 2, "{k}");
        }
    }

    // The whole run, every op: equal after accounting, and not equal without it (dispatches per op against
    // nodes per op, the dense-model rule).
    let acc = account(&entries, rows.iter().copied());
    assert!(acc.equal(), "{}\n{}", acc.headline(), acc.lines().join("\n"));
    assert!(acc.headline().starts_with("EQUAL after accounting"));
    let id = &acc.ops["MUL_MAT_ID"];
    let naive = id.node_dispatches + id.token_dispatches;
    assert_ne!(naive, id.nodes, "per-token dispatches make MUL_MAT_ID dispatches differ from its nodes");
    eprintln!("{}\n{}", acc.headline(), acc.lines().join("\n"));
    for (name, _) in &rows {
        assert_ne!(describe(name, None).family, OTHER, "{name}");
    }
}
