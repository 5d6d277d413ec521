//! Placement-aware predictions against the real llama.cpp 11434 Vulkan build on Mesa's lavapipe, traced by the
//! Vulkan layer under `backscope trace`: a tiny Q4_K_M model (4 layers) at -ngl 0, 3 (two repeating layers and
//! the output layer) and 99, with a prompt below (8) and above (64) the op-offload threshold of 32 tokens.
//!
//! Independent expectations: the number of matmul dispatches the layer saw is compared with the weights that
//! llama.cpp's cited rules put on the GPU, restated here from the source (not from backscope's code):
//! - a layer il is on the GPU iff il >= max(n_layer + 1 - ngl, 0), the output layer being il = n_layer
//!   (src/llama-model.cpp:1591-1616);
//! - a CPU-resident weight's MUL_MAT runs on the GPU iff ne[1] >= 32 and op offload is on
//!   (ggml/src/ggml-backend.cpp:1107-1116, ggml-vulkan-debug.cpp:766-779, ggml-vulkan.cpp:16135);
//! - only the last token's rows reach the last layer's FFN and the output head (src/models/llama.cpp:174-176).
//!
//! The counts also tell llama.cpp 11434's layer assignment from the older one (i_gpu_start = n_layer - ngl, the
//! output layer only when ngl > n_layer): at -ngl 3 with an 8-token prompt 11434 runs layers 2-3 and the output
//! layer on the GPU (15 matmul dispatches), the older rule would run layers 1-3 without the output (21).
//!
//! On ggml-vulkan one MUL_MAT node is one main-pipeline dispatch (tests/vulkan/layer.rs checks that against
//! GGML_VK_PERF_LOGGER), and `llama-bench -r 1 --no-warmup -n 0` evaluates the prompt exactly once.

use std::path::Path;
use std::time::Duration;

use serde_json::Value;

use crate::support::sweep::*;
use crate::support::util::*;

/// `backscope trace` (Vulkan layer) around one llama-bench prompt evaluation; returns the trace summary.
fn traced_bench(dir: &Path, model: &Path, ngl: u32, prompt: u32, extra: &[&str]) -> Value {
    let mut cmd = backscope();
    cmd.args(["trace", "--json", "--vklayer"]).arg(vklayer_library()).arg("--dir").arg(dir).arg("--");
    cmd.arg(llama_bin().join("llama-bench"))
        .arg("-m")
        .arg(model)
        .args(["-ngl", &ngl.to_string(), "-p", &prompt.to_string(), "-n", "0", "-r", "1", "--no-warmup"])
        .args(extra)
        .env("GGML_VK_VISIBLE_DEVICES", "0");
    let out = run(&mut cmd);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(stdout.trim_end().rsplit('\n').next().unwrap()).unwrap()
}

/// Main-pipeline matmul dispatches in a trace summary (helpers such as activation quantization left out).
fn matmul_dispatches(summary: &Value) -> u64 {
    summary["kernels"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|k| {
            let d = backscope::observe::vulkan::describe(k["name"].as_str().unwrap(), None);
            matches!(d.op, Some("MUL_MAT" | "MUL_MAT_VEC" | "MUL_MAT_ID")) && !d.helper
        })
        .map(|k| k["launches"].as_u64().unwrap())
        .sum()
}

/// The matmul nodes llama.cpp runs on the GPU for one prompt of `prompt` tokens at `ngl`, from the model's tensor
/// names and the rules restated in this file's header.
fn expected_gpu_matmuls(model: &Path, ngl: u64, prompt: u64, op_offload: bool) -> u64 {
    let w = backscope::commands::predict::model::from_gguf(model).unwrap();
    let n_layer = w.n_layer.unwrap();
    let start = (n_layer + 1).saturating_sub(ngl);
    let mut n = 0;
    for t in &w.tensors {
        let il = if t.name == "output.weight" || t.name == "token_embd.weight" {
            n_layer
        } else {
            t.name.strip_prefix("blk.").and_then(|r| r.split('.').next()).unwrap().parse::<u64>().unwrap()
        };
        let resident_gpu = ngl > 0 && il >= start;
        let last_rows = il == n_layer || (il == n_layer - 1 && t.name.contains(".ffn_"));
        let tokens = if last_rows { 1 } else { prompt };
        if resident_gpu || (op_offload && tokens >= 32) {
            n += 1;
        }
    }
    n
}

fn placement_items(report: &Value) -> Vec<Value> {
    let c = &report["comparison"];
    c["items"].as_array().unwrap().iter().filter(|i| i["placement_rule"].is_string()).cloned().collect()
}

/// Predicted matmul nodes that run on the GPU, over the report's phases.
fn predicted_gpu_nodes(report: &Value) -> u64 {
    report["phases"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|p| p["weights"].as_array().unwrap())
        .filter(|g| g["placement"]["runs_on"] == "GPU")
        .map(|g| g["nodes"].as_u64().unwrap())
        .sum()
}

#[test]
fn vulkan_placement_at_ngl_0_partial_and_all_for_short_and_long_prompts() {
    let _turn = heavy();
    let model = tiny_q4_k_m();
    let m = model.to_str().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    for ngl in [0u32, 3, 99] {
        for prompt in [8u32, 64] {
            let dir = tmp.path().join(format!("ngl{ngl}-p{prompt}"));
            let summary = traced_bench(&dir, &model, ngl, prompt, &[]);
            let observed = matmul_dispatches(&summary);
            let expected = expected_gpu_matmuls(&model, u64::from(ngl), u64::from(prompt), true);
            assert_eq!(observed, expected, "ngl {ngl}, prompt {prompt}: matmul dispatches against the cited rules");

            let r = predict_json(&[
                "--arch",
                "sm_90",
                "--model",
                m,
                "--prompt-tokens",
                &prompt.to_string(),
                "--decode-tokens",
                "0",
                "--num-gpu",
                &ngl.to_string(),
                "--trace",
                dir.to_str().unwrap(),
            ]);
            assert_eq!(predicted_gpu_nodes(&r), expected, "ngl {ngl}, prompt {prompt}: predicted GPU nodes");
            let items = placement_items(&r);
            assert!(!items.is_empty());
            let bad: Vec<&Value> = items.iter().filter(|i| i["verdict"] == "Contradicted").collect();
            assert!(bad.is_empty(), "ngl {ngl}, prompt {prompt}: {bad:#?}");
            assert!(r["comparison"]["unexplained"].as_array().unwrap().is_empty(), "{:#}", r["comparison"]);
            let verdict = |phase: &str, on: &str| -> Vec<String> {
                items
                    .iter()
                    .filter(|i| i["phase"] == phase && i["predicted"] == on)
                    .map(|i| i["verdict"].as_str().unwrap().to_string())
                    .collect()
            };
            match (ngl, prompt) {
                (0, 8) => {
                    // Nothing on the GPU: every weight on the CPU, confirmed by the absence of any GPU matmul.
                    assert_eq!(observed, 0);
                    assert!(items.iter().all(|i| i["predicted"] == "CPU" && i["verdict"] == "Confirmed"), "{items:#?}");
                    assert!(items.iter().all(|i| i["placement_rule"] == "op-offload-small-batch"));
                }
                (0, 64) => {
                    // The prompt's matmuls are offloaded op by op; the last token's rows stay on the CPU.
                    assert!(verdict("prefill-last", "GPU").iter().all(|v| v == "Confirmed"));
                    assert!(!verdict("prefill-last", "GPU").is_empty());
                    assert!(items
                        .iter()
                        .filter(|i| i["phase"] == "prefill-last")
                        .all(|i| i["placement_rule"] == "op-offload"));
                    assert!(!verdict("last-rows", "CPU").is_empty());
                    assert!(verdict("last-rows", "CPU").iter().all(|v| v == "Confirmed"));
                }
                (3, _) => {
                    // Partial: the output layer and layers 2-3 on the GPU (confirmed), layers 0-1 on the CPU at 8
                    // tokens (their kernel is the GPU layers' too: the dispatch count above tells them apart).
                    assert!(verdict("last-rows", "GPU").iter().all(|v| v == "Confirmed"));
                    assert!(r["placement"]["first_gpu_layer"] == 2 && r["placement"]["output_on_gpu"] == true);
                    if prompt == 8 {
                        assert!(verdict("prefill-last", "CPU").iter().all(|v| v == "Unobserved"));
                        assert!(!verdict("prefill-last", "CPU").is_empty());
                    }
                }
                _ => {
                    assert!(items.iter().all(|i| i["predicted"] == "GPU" && i["verdict"] == "Confirmed"), "{items:#?}")
                }
            }
        }
    }
}

/// llama-bench -nopo 1 (llama.cpp's op_offload off): at -ngl 0 a 64-token prompt runs no matmul on the GPU. The
/// prediction with --no-op-offload is confirmed; the one without it is contradicted, naming the rule.
#[test]
fn no_op_offload_keeps_cpu_resident_weights_on_the_cpu() {
    let _turn = heavy();
    let model = tiny_q4_k_m();
    let m = model.to_str().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("nopo");
    let summary = traced_bench(&dir, &model, 0, 64, &["-nopo", "1"]);
    assert_eq!(matmul_dispatches(&summary), expected_gpu_matmuls(&model, 0, 64, false));
    assert_eq!(matmul_dispatches(&summary), 0);
    let args = ["--arch", "sm_90", "--model", m, "--prompt-tokens", "64", "--decode-tokens", "0", "--num-gpu", "0"];
    let d = dir.to_str().unwrap();
    let off = predict_json(&[&args[..], &["--no-op-offload", "--trace", d]].concat());
    let items = placement_items(&off);
    assert!(items.iter().all(|i| i["verdict"] == "Confirmed" && i["predicted"] == "CPU"), "{items:#?}");
    assert!(items.iter().any(|i| i["placement_rule"] == "op-offload-off"));
    let on = predict_json(&[&args[..], &["--trace", d]].concat());
    let items = placement_items(&on);
    let contradicted: Vec<&Value> = items.iter().filter(|i| i["verdict"] == "Contradicted").collect();
    assert!(!contradicted.is_empty() && contradicted.iter().all(|i| i["placement_rule"] == "op-offload"), "{items:#?}");
    let claims = on["claims"].as_array().unwrap();
    let claim = claims
        .iter()
        .find(|c| c["id"].as_str().unwrap().ends_with(".placement.contradicted"))
        .expect("a placement contradiction claim");
    assert!(claim["sources"].as_array().unwrap().iter().any(|s| s["rule"] == "op-offload"), "{claim:#}");
}

/// A CPU placement predicted for weights that ran on the GPU (the -ngl 99 trace) is contradicted by the GPU kernel.
#[test]
fn a_gpu_kernel_contradicts_a_cpu_placement() {
    let _turn = heavy();
    let model = tiny_q4_k_m();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("all");
    traced_bench(&dir, &model, 99, 8, &[]);
    let r = predict_json(&[
        "--arch",
        "sm_90",
        "--model",
        model.to_str().unwrap(),
        "--prompt-tokens",
        "8",
        "--decode-tokens",
        "0",
        "--num-gpu",
        "0",
        "--trace",
        dir.to_str().unwrap(),
    ]);
    let items = placement_items(&r);
    assert!(items.iter().all(|i| i["predicted"] == "CPU" && i["verdict"] == "Contradicted"), "{items:#?}");
    assert!(items[0]["evidence"][0].as_str().unwrap().contains("mul_mat_vec_q"), "{:#}", items[0]);
}

/// A sweep of the Vulkan llama-server at num_gpu 0 and -1 with --trace: `predict --run DB` needs nothing but the
/// architecture: each record gives its model, prompt and decode counts, num_gpu and backend (Vulkan0).
#[test]
fn predict_run_takes_model_prompt_num_gpu_and_backend_from_each_record() {
    let _turn = heavy();
    let model = tiny_q4_k_m();
    let dir = tempfile::tempdir().unwrap();
    let (db, runs) = (dir.path().join("backscope.db"), dir.path().join("runs"));
    let (observer, layer) = (observer_library(), vklayer_library());
    let bin = llama_bin();
    let args = [
        "--server",
        "vulkan=llama-server:--device,Vulkan0",
        "--env",
        "vulkan:GGML_VK_VISIBLE_DEVICES=0",
        "--llama-bin",
        bin.to_str().unwrap(),
        "--model",
        model.to_str().unwrap(),
        "--num-gpu",
        "0,-1",
        "--num-predict",
        "4",
        "--repetitions",
        "1",
        "--read-timeout",
        "300",
        "--trace",
        "--observer",
        observer.to_str().unwrap(),
        "--vklayer",
        layer.to_str().unwrap(),
    ];
    let (status, events, stderr) = Sweep::start(&args, &db, &runs).finish(Duration::from_secs(900));
    assert_eq!(status.code(), Some(0), "stderr: {stderr}");
    let recs = records(&events);
    assert_eq!(recs.len(), 2);
    // --backend cuda: ggml-cuda's placement rules over the Vulkan dispatches (without it, each Vulkan record is
    // predicted by ggml-vulkan's rules: tests/predict/vulkan_run.rs).
    let r = predict_json(&["--backend", "cuda", "--arch", "sm_90", "--run", db.to_str().unwrap()]);
    let cells = r["cells"].as_array().unwrap();
    assert_eq!(cells.len(), 2, "{r:#}");
    for cell in cells {
        let rep = &cell["report"];
        let rec = recs.iter().find(|x| x["file"] == cell["file"]).unwrap();
        assert_eq!(rep["tokens"]["prompt_tokens"], rec["server_timings"]["prompt_n"]);
        assert_eq!(rep["placement"]["backend"], "vulkan", "the record's device Vulkan0");
        let items = placement_items(rep);
        assert!(!items.is_empty());
        let prompt = rec["server_timings"]["prompt_n"].as_u64().unwrap();
        assert!(prompt < 32, "the sweep's prompt is short: {prompt}");
        if cell["num_gpu"] == 0 {
            assert_eq!(rep["placement"]["n_gpu_layers"], 0);
            assert_eq!(rec["trace"]["total_launches"], 0);
            assert!(items.iter().all(|i| i["predicted"] == "CPU" && i["verdict"] == "Confirmed"), "{items:#?}");
        } else {
            // -1: the log's `offloaded 5/5 layers` (4 layers and the output).
            assert_eq!(rep["placement"]["n_gpu_layers"], 5, "{:#}", rep["placement"]);
            assert!(items.iter().all(|i| i["predicted"] == "GPU" && i["verdict"] != "Contradicted"), "{items:#?}");
            assert!(items.iter().any(|i| i["verdict"] == "Confirmed"));
        }
    }
    // The run directory alone serves as well.
    let run_dir = events.iter().find(|e| event_is(e, "run_started")).unwrap()["run_dir"].as_str().unwrap().to_string();
    let by_dir = predict_json(&["--backend", "cuda", "--arch", "sm_90", "--run", &run_dir]);
    assert_eq!(by_dir["cells"].as_array().unwrap().len(), 2);
}

/// The H100 traces of docs/validation/gpu-2026-11-21 (llama-bench -ngl 99 on the 22-layer TinyLlama-shaped Q4_K_M,
/// CUDA): predicted with -ngl 99 every placement is confirmed; predicted with -ngl 0, the 64-token prompt's
/// matmuls are still confirmed on the GPU (op offload), while the weights that would have stayed on the CPU (the
/// one-row last layer FFN and head, every decode step, an 8-token prompt) are contradicted by the MMVQ kernels
/// that ran for them, naming the placement rule.
#[test]
fn h100_traces_at_ngl_99_confirm_gpu_placement_and_contradict_a_cpu_one() {
    use backscope::commands::predict::{
        self, Backend, Batch, NumGpu, ObservedSource, PredictOptions, Verdict, WeightSource,
    };
    let trace = |case: &str| {
        ObservedSource::TraceSummary(
            Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("docs/validation/gpu-2026-11-21/trace-{case}-off.json")),
        )
    };
    let predict_at = |case: &str, ngl: i64| {
        let (batch, decode) = match case.strip_prefix('p') {
            Some(n) => (Batch::PromptTokens(n.parse().unwrap()), 0),
            None => (Batch::PromptTokens(0), case.trim_start_matches("tg").parse().unwrap()),
        };
        let mut o = PredictOptions::new(
            Backend::cuda("sm_90"),
            WeightSource::Model(crate::support::models::models().tl_q4_k_m.clone()),
            batch,
        );
        o.decode_tokens = Some(decode);
        o.placement.num_gpu = Some(NumGpu::from_count(ngl));
        o.observed = Some(trace(case));
        predict::cuda::run(&o).unwrap()
    };
    let placement = |r: &predict::CudaReport| -> Vec<(String, String, String, Verdict)> {
        r.comparison
            .as_ref()
            .unwrap()
            .items
            .iter()
            .filter_map(|i| Some((i.phase.clone(), i.predicted.clone()?, i.placement_rule.clone()?, i.verdict)))
            .collect()
    };
    for case in ["p8", "p64", "tg16"] {
        let all = placement(&predict_at(case, 99));
        assert!(!all.is_empty() && all.iter().all(|(_, on, _, v)| on == "GPU" && *v == Verdict::Confirmed), "{all:?}");
    }
    let p64 = placement(&predict_at("p64", 0));
    assert!(p64.iter().any(|(p, on, rule, v)| p == "prefill-last"
        && on == "GPU"
        && rule == "op-offload"
        && *v == Verdict::Confirmed));
    assert!(p64
        .iter()
        .filter(|(p, ..)| p == "last-rows")
        .all(|(_, on, rule, v)| on == "CPU" && rule == "op-offload-small-batch" && *v == Verdict::Contradicted));
    for case in ["p8", "tg16"] {
        let cpu = placement(&predict_at(case, 0));
        assert!(
            !cpu.is_empty() && cpu.iter().all(|(_, on, _, v)| on == "CPU" && *v == Verdict::Contradicted),
            "{cpu:?}"
        );
    }
}
