//! `backscope predict` on the command line: synthesized models (tests/support/models.rs makes them), the families
//! the cited llama.cpp 11434 and Ollama v0.24.0 source lines give (the table of tests/predict/rules.rs), and the
//! observed side from every source the command takes: a trace directory written by the observer around a
//! hipcc-built program, a committed H100 `trace --json` summary, and a sweep run recorded with `--trace` (a protocol
//! stand-in server that runs the HIP program per request, as tests/sweep/trace.rs does).

use std::path::Path;

use serde_json::Value;

use crate::support::hip::{mmvq_program, traced_mmvq_program};
use crate::support::models::models;
use crate::support::sweep::*;
use crate::support::util::*;

/// The families the Q4_K weights of a phase get.
fn families(r: &Value, phase: &str, ty: &str) -> Vec<String> {
    let p =
        r["phases"].as_array().unwrap().iter().find(|p| p["id"] == phase).unwrap_or_else(|| panic!("no phase {phase}"));
    let mut f: Vec<String> = p["weights"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|w| w["ggml_type"] == ty)
        .map(|w| w["family"].as_str().unwrap_or("undecided").to_string())
        .collect();
    f.sort();
    f.dedup();
    f
}

#[test]
fn a_prompt_of_100_tokens_on_rdna4_gcn5_and_ollamas_ggml() {
    let model = models().q4_k_m.to_str().unwrap().to_string();
    // gfx1201 (RDNA4): ne11 <= 8 -> MMVQ (mmvq.cu), RDNA4 -> MMQ at any batch (mmq.cu:434). One ubatch of 100.
    let r = predict_json(&["--arch", "gfx1201", "--model", &model, "--prompt-tokens", "100"]);
    assert_eq!(r["schema"], "backscope.predict/1");
    assert_eq!(families(&r, "prefill-last", "Q4_K"), ["MMQ"]);
    assert_eq!(families(&r, "decode", "Q4_K"), ["MMVQ"]);
    assert_eq!(families(&r, "last-rows", "Q4_K"), ["MMVQ"]);
    let text =
        stdout_ok(backscope().args(["predict", "--arch", "gfx1201", "--model", &model, "--prompt-tokens", "100"]));
    assert!(
        text.contains("prefill, one ubatch of 100 token(s) (ne11 = 100)")
            && text.contains("MMQ")
            && text.contains("MMVQ"),
        "{text}"
    );
    // gfx900 in llama.cpp 11434: dense weights above the MMVQ range go to hipBLAS (mmq.cu:437-442).
    let r = predict_json(&["--arch", "gfx900", "--model", &model, "--prompt-tokens", "100"]);
    assert_eq!(families(&r, "prefill-last", "Q4_K"), ["BLAS"]);
    assert_eq!(families(&r, "decode", "Q4_K"), ["MMVQ"]);
    let text =
        stdout_ok(backscope().args(["predict", "--arch", "gfx900", "--model", &model, "--prompt-tokens", "100"]));
    assert!(text.contains("vendor BLAS (cuBLAS/hipBLAS)"), "{text}");
    // Ollama v0.24.0's ggml has no gfx900 exception: MMQ (O24 mmq.cu:239-315).
    let r =
        predict_json(&["--arch", "gfx900", "--ggml", "ollama-v0.24.0", "--model", &model, "--prompt-tokens", "100"]);
    assert_eq!(r["ggml"]["version"], "ollama-v0.24.0");
    assert_eq!(families(&r, "prefill-last", "Q4_K"), ["MMQ"]);
    // --explain prints the decision path.
    let text =
        stdout_ok(backscope().args(["predict", "--arch", "gfx900", "--type", "q4_k", "--ne11", "64", "--explain"]));
    assert!(text.contains("decision path for Q4_K"), "{text}");
}

#[test]
fn flag_errors_are_usage_errors() {
    let out = run(backscope().args(["predict", "--arch", "gfx900", "--prompt-tokens", "8"]));
    assert_eq!(out.status.code(), Some(2), "--model or --type is required");
    let out =
        run(backscope().args(["predict", "--arch", "gfx900", "--type", "q4_k", "--prompt-tokens", "8", "--ne11", "8"]));
    assert_eq!(out.status.code(), Some(2), "one token source");
    let out = run(backscope().args(["predict", "--arch", "gfx900", "--type", "q4_k"]));
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--prompt-tokens N, --ne11 N, --from-run RUN or --run RUN"));
    let out = run(backscope().args([
        "predict",
        "--arch",
        "gfx900",
        "--type",
        "q4_k",
        "--ne11",
        "1",
        "--run",
        "r",
        "--db",
        "/nonexistent.db",
    ]));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no such sweep database"));
}

#[test]
fn an_h100_trace_summary_confirms_every_prediction() {
    // docs/validation/gpu-2026-11-21: llama-bench -p 9 -n 0 on the TinyLlama-shaped Q4_K_M model, graphs off.
    let trace = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/validation/gpu-2026-11-21/trace-p9-off.json");
    let model = models().tl_q4_k_m.to_str().unwrap().to_string();
    let r = predict_json(&[
        "--arch",
        "sm_90",
        "--model",
        &model,
        "--prompt-tokens",
        "9",
        "--decode-tokens",
        "0",
        "--trace-json",
        trace.to_str().unwrap(),
    ]);
    let c = &r["comparison"];
    assert_eq!(c["observed"]["kind"], "trace-summary");
    assert_eq!(c["contradicted"], 0, "{c:#}");
    assert_eq!(c["unobserved"], 0, "{c:#}");
    assert_eq!(c["confirmed"].as_u64(), Some(c["items"].as_array().unwrap().len() as u64));
    // ne11 = 9: MMQ for the prompt, MMVQ with one column for the gathered rows (mmvq.cu ncols_dst).
    let items = c["items"].as_array().unwrap();
    assert!(items
        .iter()
        .any(|i| i["phase"] == "prefill-last" && i["predicted"] == "MMQ" && i["verdict"] == "Confirmed"));
    assert!(items.iter().any(|i| i["phase"] == "last-rows" && i["predicted"] == "MMVQ" && i["verdict"] == "Confirmed"));
}

#[test]
fn a_trace_directory_marks_each_phase() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = traced_mmvq_program(tmp.path());
    let r = predict_json(&[
        "--arch",
        "gfx900",
        "--type",
        "q4_k",
        "--n",
        "4096",
        "--k",
        "4096",
        "--prompt-tokens",
        "1",
        "--trace",
        dir.to_str().unwrap(),
    ]);
    let c = &r["comparison"];
    assert_eq!(c["observed"]["kind"], "trace-dir");
    assert!(c["observed"]["files"]
        .as_array()
        .unwrap()
        .iter()
        .all(|f| f.as_str().unwrap().starts_with(dir.to_str().unwrap())));
    // One prompt token: the prefill and the decode step both predict MMVQ with one column; the traced launch
    // failed (no GPU), so neither is confirmed, and a kernel that never ran contradicts nothing.
    let items = c["items"].as_array().unwrap();
    let phases: Vec<&str> = items.iter().map(|i| i["phase"].as_str().unwrap()).collect();
    assert_eq!(phases, ["prefill-last", "decode"]);
    assert!(items.iter().all(|i| i["predicted"] == "MMVQ" && i["verdict"] == "Unobserved"), "{items:#?}");
    assert!(c["unexplained"].as_array().unwrap().is_empty());
    let text = stdout_ok(
        backscope()
            .args(["predict", "--arch", "gfx900", "--type", "q4_k", "--prompt-tokens", "1", "--trace"])
            .arg(&dir),
    );
    assert!(text.contains("Prediction vs observation (trace-dir"), "{text}");
}

#[test]
fn a_sweep_run_recorded_with_trace_is_compared_record_by_record() {
    let observer = observer_library();
    let tmp = tempfile::tempdir().unwrap();
    let exe = mmvq_program(tmp.path());
    let (status, events, stderr, db) = crate::support::sweep::traced_stand_in_sweep(tmp.path(), &exe, &observer, 2);
    assert_eq!(status.code(), Some(0), "stderr: {stderr}");
    let recs = records(&events);
    let run_id = recs[0]["run_id"].as_str().unwrap().to_string();
    // The stand-in reports one prompt token and one generated token per request (its `timings`).
    assert!(recs.iter().all(|r| r["server_timings"]["prompt_n"] == 1 && r["trace"].is_object()));

    let db_s = db.to_str().unwrap();
    let r = predict_json(&["--arch", "gfx900", "--type", "q4_k", "--run", &run_id, "--db", db_s]);
    assert_eq!(r["schema"], "backscope.predict-run/1");
    assert_eq!(r["run_id"], run_id.as_str());
    let cells = r["cells"].as_array().unwrap();
    assert_eq!(cells.len(), recs.len());
    for (cell, rec) in cells.iter().zip(&recs) {
        assert_eq!(cell["file"], rec["file"]);
        let rep = &cell["report"];
        assert_eq!(rep["tokens"]["prompt_tokens"], 1);
        assert_eq!(rep["tokens"]["from_run"]["run_id"], run_id.as_str());
        let c = &rep["comparison"];
        assert_eq!(
            (c["observed"]["kind"].as_str(), c["observed"]["run_id"].as_str()),
            (Some("sweep-record"), Some(run_id.as_str()))
        );
        assert_eq!(c["observed"]["files"], rec["trace"]["files"]);
        let k = &c["observed"]["kernels"][0];
        assert_eq!(
            (k["family"].as_str(), k["ggml_type"].as_str(), k["ncols"].as_u64(), k["launches"].as_u64()),
            (Some("MMVQ"), Some("Q4_K"), Some(1), Some(0))
        );
        assert!(c["items"].as_array().unwrap().iter().all(|i| i["verdict"] == "Unobserved"), "{c:#}");
    }
    // Text: how many records were compared first, then each record's prediction under its heading, within 120
    // columns.
    let text = stdout_ok(
        backscope()
            .env("COLUMNS", "120")
            .args(["predict", "--arch", "gfx900", "--type", "q4_k", "--run", &run_id, "--db", db_s]),
    );
    crate::support::output::assert_fits(&text, 120);
    let first = text.lines().next().unwrap();
    assert_eq!(first, format!("Sweep run {run_id} ({db_s}): {} traced record(s) compared", recs.len()));
    for rec in &recs {
        let heading = format!("\nrecord {} ({}): endpoint ", rec["seq"], rec["cell_key"].as_str().unwrap());
        assert!(text.contains(&heading), "{heading}: {text}");
    }
    // One record by position; the same run's prompt count for a prediction without observation.
    let one = predict_json(&["--arch", "gfx900", "--type", "q4_k", "--run", &run_id, "--cell", "1", "--db", db_s]);
    assert_eq!(one["cells"].as_array().unwrap().len(), 1);
    assert_eq!(one["cells"][0]["seq"], 1);
    let from = predict_json(&["--arch", "gfx900", "--type", "q4_k", "--from-run", &run_id, "--db", db_s]);
    assert_eq!(from["tokens"]["prompt_tokens"], 1);
    assert!(from["claims"].as_array().unwrap().iter().any(|c| c["id"] == "predict.prompt-from-run"));
    assert!(from.get("comparison").is_none());
    let out =
        run(backscope().args(["predict", "--arch", "gfx900", "--type", "q4_k", "--run", "no-such-run", "--db", db_s]));
    assert!(String::from_utf8_lossy(&out.stderr).contains(&format!("no run no-such-run in {db_s}")));
}

#[test]
fn llama_bench_records_give_the_prompt_count_per_cell() {
    // Real H100 llama-bench results imported as records: prompt-only tests (n_gen 0) of 512 tokens.
    let jsonl = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/validation/gpu-2026-11-21/overhead-run1.jsonl");
    let first: Value = serde_json::from_str(std::fs::read_to_string(&jsonl).unwrap().lines().next().unwrap()).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("b.db");
    let out = stdout_ok(
        backscope().args(["sweep", "import", "--db"]).arg(&db).arg("--runs-dir").arg(tmp.path().join("r")).arg(&jsonl),
    );
    let run_id = out.split_whitespace().nth(1).unwrap().trim_end_matches(':').to_string();
    let r = predict_json(&[
        "--arch",
        "sm_90",
        "--type",
        "q4_k",
        "--from-run",
        &run_id,
        "--cell",
        "0",
        "--db",
        db.to_str().unwrap(),
    ]);
    assert_eq!(r["tokens"]["prompt_tokens"], first["n_prompt"]);
    assert_eq!(r["tokens"]["from_run"]["includes_cache"], false, "llama-bench counts evaluated tokens");
    // Without traces, --run has nothing to compare with.
    let out =
        run(backscope().args(["predict", "--arch", "sm_90", "--type", "q4_k", "--run", &run_id, "--db"]).arg(&db));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no trace"), "{}", String::from_utf8_lossy(&out.stderr));
}
