//! `backscope predict --run` on a sweep of the llama.cpp 11434 Vulkan llama-server on Mesa's lavapipe, recorded with
//! `--trace` (the Vulkan layer in the managed server): each record is predicted by ggml-vulkan's rules for the device
//! its own trace recorded, with its model, prompt, decode and num_gpu, and compared with the pipelines of its request.
//! The expected side is ggml's own GGML_VK_PERF_LOGGER lines of the same request (the graph nodes it computed per
//! op and weight type, in the record's slice of the server log), not backscope's rules.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde_json::Value;

use crate::support::sweep::*;
use crate::support::util::*;

/// The matmul nodes GGML_VK_PERF_LOGGER printed (`vk_perf_logger::print_timings`: `NAME: COUNT x AVG us = …`, NAME
/// `MUL_MAT q4_K m=… n=… k=…`, or for a fused group `MUL_MAT_ADD MUL_MAT_VEC q6_K …`, whose node is the second
/// op), per (op, weight type as ggml names it, upper-cased).
fn perf_logger_matmuls(text: &str) -> BTreeMap<(String, String), u64> {
    let is_op = |t: &str| !t.is_empty() && t.chars().all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_');
    let mut out = BTreeMap::new();
    for line in text.lines() {
        let Some((name, rest)) = line.split_once(": ") else { continue };
        let Some(count) = rest.split_once(" x ").and_then(|(c, _)| c.parse::<u64>().ok()) else { continue };
        let tokens: Vec<&str> = name.split(' ').collect();
        let node_at = if tokens.len() > 1 && is_op(tokens[1]) { 1 } else { 0 };
        let (Some(op), Some(ty)) = (tokens.get(node_at), tokens.get(node_at + 1)) else { continue };
        // MUL_MAT_ID's vector path has a node name of its own; both are MUL_MAT_ID nodes.
        let op = if *op == "MUL_MAT_ID_VEC" { "MUL_MAT_ID" } else { op };
        if ["MUL_MAT", "MUL_MAT_VEC", "MUL_MAT_ID"].contains(&op) {
            *out.entry((op.to_string(), ty.to_ascii_uppercase())).or_default() += count;
        }
    }
    out
}

/// The matmul nodes a Vulkan report predicts on the device, per (op, weight type): the GPU-run weight groups' nodes
/// (for a dense model one main-pipeline dispatch each; the per-pipeline dispatch counts are the report's `counts`).
fn predicted_matmuls(report: &Value) -> BTreeMap<(String, String), u64> {
    let mut out = BTreeMap::new();
    for p in report["phases"].as_array().unwrap() {
        for g in p["weights"].as_array().unwrap() {
            if g["placement"]["runs_on"] != "GPU" {
                continue;
            }
            let n = g["nodes"].as_u64().unwrap();
            let key = (g["op"].as_str().unwrap().to_string(), g["ggml_type"].as_str().unwrap().to_string());
            *out.entry(key).or_default() += n;
        }
    }
    out
}

fn total(m: &BTreeMap<(String, String), u64>) -> u64 {
    m.values().sum()
}

/// A traced sweep of the Vulkan llama-server with GGML_VK_PERF_LOGGER on (8- and 64-token prompts, 4 generated
/// tokens, 2 repetitions), run into `dir`, which must exit 0 with `expected` records: the records and the run
/// directory, and `predict --run RUN_DIR` of it (the database is `dir/backscope.db`), which must have predicted every record.
fn traced_sweep_predicted(
    dir: &std::path::Path,
    model: &std::path::Path,
    num_gpu: &str,
    expected: usize,
    limit: Duration,
) -> (Vec<Value>, PathBuf, Value) {
    let (db, runs) = (dir.join("backscope.db"), dir.join("runs"));
    let (observer, layer, bin) = (observer_library(), vklayer_library(), llama_bin());
    let args = [
        "--server",
        "vulkan=llama-server:--device,Vulkan0",
        "--env",
        "vulkan:GGML_VK_VISIBLE_DEVICES=0",
        "--env",
        "vulkan:GGML_VK_PERF_LOGGER=1",
        "--llama-bin",
        bin.to_str().unwrap(),
        "--model",
        model.to_str().unwrap(),
        "--num-gpu",
        num_gpu,
        "--prompt-tokens",
        "8,64",
        "--num-predict",
        "4",
        "--repetitions",
        "2",
        "--read-timeout",
        "300",
        "--trace",
        "--observer",
        observer.to_str().unwrap(),
        "--vklayer",
        layer.to_str().unwrap(),
    ];
    let (status, events, stderr) = Sweep::start(&args, &db, &runs).finish(limit);
    assert_eq!(status.code(), Some(0), "stderr: {stderr}");
    let recs = records(&events);
    assert_eq!(recs.len(), expected);
    let run_dir =
        PathBuf::from(events.iter().find(|e| event_is(e, "run_started")).unwrap()["run_dir"].as_str().unwrap());
    let run = predict_json(&["--run", run_dir.to_str().unwrap()]);
    assert_eq!(run["cells"].as_array().unwrap().len(), expected, "{:#}", run["skipped"]);
    (recs, run_dir, run)
}

/// A sweep of the Vulkan llama-server at num_gpu 0 (nothing offloaded), 1 (the output layer only), 2 (one
/// repeating layer and the output) and -1 (all 4 layers and the output) with 8- and 64-token prompts and 4
/// generated tokens: `predict --run RUN_DIR` with no other flag predicts every record by ggml-vulkan's rules, with
/// the placement of its num_gpu (op offload puts the CPU-resident weights' matmuls of the 65-token prompt on the
/// device), and every prediction and per-pipeline dispatch count is confirmed with nothing unexplained. The predicted
/// matmul dispatches per op and type equal the perf logger's nodes of the same request; partial offload predicts
/// fewer of them. A wrong num_gpu or --no-op-offload is contradicted.
#[test]
fn predict_run_confirms_a_vulkan_sweep_at_every_num_gpu_against_the_perf_logger() {
    let _turn = heavy();
    let model = tiny_q4_k_m();
    let dir = tempfile::tempdir().unwrap();
    let (recs, run_dir, run) = traced_sweep_predicted(dir.path(), &model, "0,1,2,-1", 16, Duration::from_secs(1500));
    let db = dir.path().join("backscope.db");
    let cells = run["cells"].as_array().unwrap();
    let mut per_ngl: BTreeMap<(i64, u64), u64> = BTreeMap::new();
    for cell in cells {
        let rep = &cell["report"];
        let rec = recs.iter().find(|x| x["file"] == cell["file"]).unwrap();
        let (ngl, prompt) = (rec["num_gpu"].as_i64().unwrap(), rec["server_timings"]["prompt_n"].as_u64().unwrap());
        let what = format!("num_gpu {ngl}, prompt {prompt}, repetition {}", rec["repetition"]);
        assert_eq!(rep["schema"], "backscope.predict-vulkan/1", "{what}");
        assert!(rep["device"]["label"].as_str().unwrap().starts_with("llvmpipe"), "{what}: the record's own trace");
        assert_eq!(rep["tokens"]["prompt_tokens"], prompt, "{what}");
        let c = &rep["comparison"];
        let items = c["items"].as_array().unwrap();
        assert!(!items.is_empty(), "{what}");
        assert!(items.iter().all(|i| i["verdict"] == "Confirmed"), "{what}: {items:#?}");
        assert_eq!(c["unexplained"].as_array().unwrap().len(), 0, "{what}: {}", c["unexplained"]);
        assert_eq!(c["contradicted"], 0, "{what}");
        let counts = c["counts"].as_array().map(Vec::as_slice).unwrap_or_default();
        assert!(counts.iter().all(|n| n["verdict"] == "Confirmed"), "{what}: {counts:#?}");
        // The independent side: ggml's perf logger lines of this request (the second repetition: a server start's
        // first slice also holds the warm-up).
        let predicted = predicted_matmuls(rep);
        if rec["repetition"] == 2 {
            let slice = std::fs::read_to_string(run_dir.join(rec["log_slice"].as_str().unwrap())).unwrap();
            assert_eq!(predicted, perf_logger_matmuls(&slice), "{what}: matmul nodes per op and type");
        }
        per_ngl.insert((ngl, prompt), total(&predicted));
        if ngl == 0 && prompt < 32 {
            assert_eq!(total(&predicted), 0, "{what}: nothing on the device");
            assert_eq!(rec["trace"]["total_launches"], 0);
        }
    }
    // Partial offload predicts fewer dispatches, and more layers more of them.
    for prompt in [9, 65] {
        let at = |ngl: i64| per_ngl[&(ngl, prompt)];
        assert!(at(0) < at(1) || prompt == 65, "prompt {prompt}: {per_ngl:?}");
        assert!(at(1) < at(2) && at(2) < at(-1), "prompt {prompt}: {per_ngl:?}");
    }

    // The database serves as well, with --backend vulkan spelled out.
    let by_db = predict_json(&["--backend", "vulkan", "--run", db.to_str().unwrap()]);
    assert_eq!(by_db["cells"].as_array().unwrap().len(), 16);

    // Wrong placement: an num_gpu-2 record predicted with one layer (the output only) and a num_gpu-0 record with a
    // 65-token prompt predicted without op offload are contradicted, naming the counts and the placement rule.
    let cell_of = |ngl: i64, prompt: u64| {
        let r = recs
            .iter()
            .find(|r| r["num_gpu"] == ngl && r["server_timings"]["prompt_n"] == prompt && r["repetition"] == 2)
            .unwrap();
        r["seq"].as_u64().unwrap().to_string()
    };
    let d = run_dir.to_str().unwrap();
    let wrong = predict_json(&["--run", d, "--cell", &cell_of(2, 9), "--num-gpu", "1"]);
    let c = &wrong["cells"][0]["report"]["comparison"];
    assert!(c["contradicted"].as_u64().unwrap() > 0, "{c:#}");
    assert!(c["counts"].as_array().unwrap().iter().any(|n| n["verdict"] == "Contradicted"), "{c:#}");
    let nopo = predict_json(&["--run", d, "--cell", &cell_of(0, 65), "--no-op-offload"]);
    let c = &nopo["cells"][0]["report"]["comparison"];
    let items = c["items"].as_array().unwrap();
    assert!(
        items.iter().any(|i| i["verdict"] == "Contradicted" && i["placement_rule"] == "op-offload-off"),
        "{items:#?}"
    );
}

/// A mixture of experts (`synth --preset tiny-moe`, Q4_K_M by the real llama-quantize) in the Vulkan llama-server at
/// num_gpu 1 (the output layer; the 65-token prompt's expert matmuls offloaded op by op) and -1: `predict --run` has
/// nothing contradicted or unexplained, and its MUL_MAT, MUL_MAT_VEC and MUL_MAT_ID nodes per weight type equal the
/// perf logger's (which names MUL_MAT_ID's per-token vector path MUL_MAT_ID_VEC). Where a record lists every
/// pipeline its dispatch counts, MUL_MAT_ID's included, are confirmed; a record keeps its 20 most dispatched
/// pipelines only, so at num_gpu -1 (24 of them) the counts are not judged and the record says so.
#[test]
fn predict_run_on_a_moe_sweep_matches_the_perf_logger_nodes() {
    let _turn = heavy();
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("tiny-moe-q4_k_m.gguf");
    let mut synth = backscope();
    synth
        .args(["synth", "--preset", "tiny-moe", "--type", "q4_k_m", "--llama-bin"])
        .arg(llama_bin())
        .arg("-o")
        .arg(&model);
    stdout_ok(&mut synth);
    let (recs, run_dir, run) = traced_sweep_predicted(dir.path(), &model, "1,-1", 8, Duration::from_secs(1200));
    let cells = run["cells"].as_array().unwrap();
    let mut judged = 0;
    for cell in cells {
        let rep = &cell["report"];
        let rec = recs.iter().find(|x| x["file"] == cell["file"]).unwrap();
        let what = format!("num_gpu {}, prompt {}", rec["num_gpu"], rec["server_timings"]["prompt_n"]);
        let c = &rep["comparison"];
        assert_eq!(c["contradicted"], 0, "{what}: {c:#}");
        assert_eq!(c["unexplained"].as_array().unwrap().len(), 0, "{what}");
        let complete = rec["trace"]["distinct_kernels"] == rec["trace"]["kernels"].as_array().unwrap().len();
        assert_eq!(c["observed"]["complete"].as_bool(), Some(complete), "{what}");
        if complete {
            let counts = c["counts"].as_array().unwrap();
            assert!(!counts.is_empty() && counts.iter().all(|n| n["verdict"] == "Confirmed"), "{what}: {counts:#?}");
            assert!(c["items"].as_array().unwrap().iter().all(|i| i["verdict"] == "Confirmed"), "{what}");
            judged += 1;
        } else {
            assert!(c["observed"]["notes"].to_string().contains("most dispatched"), "{what}");
        }
        if rec["repetition"] == 2 {
            let slice = std::fs::read_to_string(run_dir.join(rec["log_slice"].as_str().unwrap())).unwrap();
            let nodes = perf_logger_matmuls(&slice);
            // The experts' matmuls run on the device with their layers, or offloaded at 65 tokens; the 8-token
            // prompt at num_gpu 1 runs only the output layer there.
            let experts_on_device = rec["num_gpu"] == -1 || rec["server_timings"]["prompt_n"].as_u64() > Some(32);
            assert_eq!(nodes.keys().any(|(op, _)| op == "MUL_MAT_ID"), experts_on_device, "{what}: {nodes:?}");
            assert_eq!(predicted_matmuls(rep), nodes, "{what}: matmul nodes per op and type");
        }
    }
    assert!(judged >= 4, "the num_gpu-1 records list every pipeline: {judged}");
}
