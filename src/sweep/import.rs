//! llama-bench results (`-o json`: one array; `-o jsonl`: one object per line) as records, so they sit next to
//! sweep records in the same database and export. Fields as llama.cpp's `tools/llama-bench/llama-bench.cpp` writes
//! them: `model_filename, backends, gpu_info, n_gpu_layers, n_prompt, n_gen,
//! n_depth, test_time, avg_ns, stddev_ns, avg_ts, stddev_ts, samples_ns, samples_ts, …`.

use anyhow::{bail, Context, Result};
use serde_json::{Map, Value};

use super::record::{BackendFacts, Record, RunSource, ServerTimings, Status, RECORD_SCHEMA};

/// Parse llama-bench output (either format) into its test objects.
pub fn parse_bench(text: &str) -> Result<Vec<Map<String, Value>>> {
    let trimmed = text.trim_start();
    let values: Vec<Value> = if trimmed.starts_with('[') {
        serde_json::from_str(trimmed).context("llama-bench -o json output: not a JSON array")?
    } else {
        trimmed
            .lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty())
            .map(|(i, l)| {
                serde_json::from_str(l)
                    .with_context(|| format!("llama-bench -o jsonl output, line {}: not JSON", i + 1))
            })
            .collect::<Result<_>>()?
    };
    let mut out = Vec::new();
    for (i, v) in values.into_iter().enumerate() {
        let Value::Object(o) = v else { bail!("llama-bench test {}: expected a JSON object", i + 1) };
        for required in ["n_prompt", "n_gen", "avg_ns", "avg_ts"] {
            if !o.contains_key(required) {
                bail!("llama-bench test {}: no `{required}` field; is this llama-bench -o json/jsonl output?", i + 1);
            }
        }
        out.push(o);
    }
    if out.is_empty() {
        bail!("no llama-bench tests in the input");
    }
    Ok(out)
}

/// The test's name as llama-bench prints it: `pp512`, `tg128`, `pp512+tg128`, with `@d4096` for a depth.
pub fn test_name(n_prompt: u64, n_gen: u64, n_depth: u64) -> String {
    let mut s = match (n_prompt, n_gen) {
        (p, 0) => format!("pp{p}"),
        (0, g) => format!("tg{g}"),
        (p, g) => format!("pp{p}+tg{g}"),
    };
    if n_depth > 0 {
        s.push_str(&format!(" @ d{n_depth}"));
    }
    s
}

pub fn to_records(tests: &[Map<String, Value>], run_id: &str, endpoint: &str) -> Vec<Record> {
    let u = |o: &Map<String, Value>, k: &str| o.get(k).and_then(Value::as_u64).unwrap_or(0);
    let f = |o: &Map<String, Value>, k: &str| o.get(k).and_then(Value::as_f64);
    let s = |o: &Map<String, Value>, k: &str| o.get(k).and_then(Value::as_str).unwrap_or("").to_string();
    tests
        .iter()
        .enumerate()
        .map(|(i, o)| {
            let (n_prompt, n_gen, n_depth) = (u(o, "n_prompt"), u(o, "n_gen"), u(o, "n_depth"));
            let test = test_name(n_prompt, n_gen, n_depth);
            let model_path = s(o, "model_filename");
            let model = model_path.rsplit('/').next().unwrap_or(&model_path).to_string();
            let ngl = o.get("n_gpu_layers").and_then(Value::as_i64).unwrap_or(-1);
            let avg_ms = f(o, "avg_ns").map(|ns| ns / 1e6);
            let avg_ts = f(o, "avg_ts");
            let mut timings = ServerTimings::default();
            let (mut prompt_tps, mut decode_tps) = (None, None);
            if n_gen == 0 {
                timings.prompt_n = Some(n_prompt);
                timings.prompt_ms = avg_ms;
                prompt_tps = avg_ts;
            } else if n_prompt == 0 {
                timings.decode_n = Some(n_gen);
                timings.decode_ms = avg_ms;
                decode_tps = avg_ts;
            }
            timings.total_ms = avg_ms;
            let backends = s(o, "backends");
            let gpu = s(o, "gpu_info");
            let backend = if gpu.is_empty() { backends.clone() } else { format!("{backends} ({gpu})") };
            let mut extra = Map::new();
            extra.insert("llama_bench".into(), Value::Object(o.clone()));
            Record {
                schema: RECORD_SCHEMA,
                run_id: run_id.to_string(),
                cell_key: format!("{endpoint}|{model}|ngl={ngl}|{test}|n={n_gen}|t{i}"),
                seq: i as u64,
                source: RunSource::LlamaBench,
                file: format!("records/{i:05}/result.json"),
                endpoint: endpoint.to_string(),
                model,
                num_gpu: ngl,
                prompt: test,
                num_predict: n_gen as i64,
                epoch: 1,
                repetition: 1,
                started_at: s(o, "test_time"),
                status: Status::Ok,
                wall_ms: avg_ms,
                server_timings: timings,
                prompt_tps,
                decode_tps,
                // llama-bench names its backends itself; no log line stands behind it, so no evidence lines.
                backend: (!backends.is_empty()).then(|| BackendFacts { backend, ..Default::default() }),
                extra,
                ..Default::default()
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    // One pp and one tg test in the shape llama-bench -o jsonl prints (field list from llama-bench.cpp).
    const JSONL: &str = r#"{"build_commit": "abc1234", "build_number": 11434, "cpu_info": "AMD EPYC", "gpu_info": "llvmpipe (LLVM 15.0.6, 256 bits)", "backends": "Vulkan", "model_filename": "/m/tiny.gguf", "model_type": "llama ?B F16", "model_size": 40000000, "model_n_params": 20000000, "n_batch": 2048, "n_ubatch": 512, "n_threads": 2, "type_k": "f16", "type_v": "f16", "n_gpu_layers": 99, "split_mode": "layer", "main_gpu": 0, "no_kv_offload": false, "flash_attn": false, "n_prompt": 64, "n_gen": 0, "n_depth": 0, "test_time": "2026-11-21T12:00:00Z", "avg_ns": 1361702127, "stddev_ns": 1000000, "avg_ts": 47.0, "stddev_ts": 0.5, "samples_ns": [1361702127], "samples_ts": [47.0]}
{"build_commit": "abc1234", "build_number": 11434, "cpu_info": "AMD EPYC", "gpu_info": "llvmpipe (LLVM 15.0.6, 256 bits)", "backends": "Vulkan", "model_filename": "/m/tiny.gguf", "n_gpu_layers": 99, "n_prompt": 0, "n_gen": 16, "n_depth": 0, "test_time": "2026-11-21T12:00:05Z", "avg_ns": 4705882352, "stddev_ns": 2000000, "avg_ts": 3.4, "stddev_ts": 0.1, "samples_ns": [4705882352], "samples_ts": [3.4]}
"#;

    #[test]
    fn jsonl_and_json_forms_give_the_same_records() {
        let a = parse_bench(JSONL).unwrap();
        let arr = format!("[{}]", JSONL.trim().lines().collect::<Vec<_>>().join(","));
        let b = parse_bench(&arr).unwrap();
        assert_eq!(a, b);
        let recs = to_records(&a, "r", "llama-bench");
        assert_eq!(recs.len(), 2);
        assert_eq!(recs[0].prompt, "pp64");
        assert_eq!(recs[0].prompt_tps, Some(47.0));
        assert_eq!(recs[0].decode_tps, None);
        assert_eq!(recs[1].prompt, "tg16");
        assert_eq!(recs[1].decode_tps, Some(3.4));
        assert_eq!(recs[1].num_gpu, 99);
        assert_eq!(recs[1].model, "tiny.gguf");
        assert_eq!(recs[1].backend.as_ref().unwrap().backend, "Vulkan (llvmpipe (LLVM 15.0.6, 256 bits))");
        assert_eq!(recs[1].extra["llama_bench"]["samples_ts"][0], 3.4);
        assert_ne!(recs[0].cell_key, recs[1].cell_key);
    }

    #[test]
    fn not_llama_bench_output_is_refused_with_the_reason() {
        assert!(parse_bench("").unwrap_err().to_string().contains("no llama-bench tests"));
        assert!(parse_bench("{\"x\": 1}").unwrap_err().to_string().contains("n_prompt"));
        assert!(parse_bench("[1]").unwrap_err().to_string().contains("JSON object"));
        assert!(parse_bench("| model | size |").unwrap_err().to_string().contains("line 1"));
        assert_eq!(test_name(512, 128, 4096), "pp512+tg128 @ d4096");
    }
}
