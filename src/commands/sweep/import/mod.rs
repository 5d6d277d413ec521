//! llama-bench results (`-o json`: one array; `-o jsonl`: one object per line) as records, so they sit next to
//! sweep records in the same database and export. Fields as llama.cpp's `tools/llama-bench/llama-bench.cpp` writes
//! them: `model_filename, backends, gpu_info, n_gpu_layers, n_prompt, n_gen,
//! n_depth, test_time, avg_ns, stddev_ns, avg_ts, stddev_ts, samples_ns, samples_ts, …`.
//!
//! An import is all or nothing, and costs what its input costs. Every input is read exactly once (a pipe such as
//! `<(llama-bench -o jsonl)` or `-` included) with a byte limit, and every test is parsed and checked before
//! anything is created: a bad value is refused with its file, line and field, and leaves no run, no run directory
//! and no database behind. The records are then written as one `records.jsonl` in the run directory (one file,
//! one sync) and as rows of one database transaction (one commit), next to a copy of the bytes read; the database
//! row of the run is what makes the import visible, so a crash before its commit leaves only an unreferenced
//! directory. Past [`check::MAX_TESTS`] tests or [`check::MAX_IMPORT_BYTES`] bytes an import is refused, naming the file.

mod check;

use std::io::Write;
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde_json::{json, Map, Value};

use crate::run::format::ids::{new_run_id, utc_now};
use crate::run::format::paths::absolute;
use crate::run::format::record::{BackendFacts, Record, RunSource, ServerTimings, Status, RECORD_SCHEMA};
use crate::run::format::run_dir::RunDir;
use crate::run::format::run_row::{RunRow, RunStatus};
use crate::run::format::target::{DbTarget, DbValue};
use crate::run::write::durable;
use crate::run::write::store::Store;
use check::{check, each_object, parse_object, read_inputs, Input};

/// What an import stored.
#[derive(Debug)]
pub struct Imported {
    pub run_id: String,
    pub run_dir: PathBuf,
    pub tests: usize,
}

/// Store llama-bench output files as the records of a new run in `db`, its run directory under `runs_dir`. All or
/// nothing: a failure leaves the database and `runs_dir` as they were.
pub fn import(files: &[PathBuf], db: &DbValue, runs_dir: &Path, endpoint: &str) -> Result<Imported> {
    let inputs = read_inputs(files)?;
    let tests = check(&inputs)?;
    let target = db.target()?;
    // The database and the runs directory may not exist yet; whatever this import creates is removed again when
    // it fails (a full disk, say) after that.
    let db_file = match target {
        DbTarget::Sqlite(file) => Some(absolute(file)),
        DbTarget::Postgres(_) => None,
    };
    let db_created = db_file.as_deref().and_then(first_missing);
    let mut store = Store::open(target)?;
    let run_id = new_run_id();
    let run_dir = absolute(&runs_dir.join(&run_id));
    let dir_created = first_missing(&run_dir);
    let stored = store_run(&mut store, &inputs, tests, &run_id, &run_dir, endpoint);
    drop(store);
    if stored.is_err() {
        if let Some(top) = dir_created {
            let _ = std::fs::remove_dir_all(top);
        }
        match db_created {
            Some(file) if Some(&file) == db_file.as_ref() => {
                for suffix in ["", "-wal", "-shm"] {
                    let mut p = file.clone().into_os_string();
                    p.push(suffix);
                    let _ = std::fs::remove_file(p);
                }
            }
            Some(top) => {
                let _ = std::fs::remove_dir_all(top);
            }
            None => {}
        }
    }
    stored?;
    Ok(Imported { run_id, run_dir, tests })
}

/// The outermost of `path` (absolute) and its parents that does not exist yet.
fn first_missing(path: &Path) -> Option<PathBuf> {
    path.ancestors().take_while(|d| !d.as_os_str().is_empty() && !d.exists()).last().map(Path::to_path_buf)
}

fn store_run(
    store: &mut Store,
    inputs: &[Input],
    tests: usize,
    run_id: &str,
    run_dir: &Path,
    endpoint: &str,
) -> Result<()> {
    let input_dir = RunDir::new(run_dir).input_dir();
    std::fs::create_dir_all(&input_dir).with_context(|| format!("cannot create {}", input_dir.display()))?;
    // The bytes read, under their own names (standard input as `stdin`); two inputs of the same name get their
    // position in front.
    let mut names = std::collections::HashSet::new();
    for (k, input) in inputs.iter().enumerate() {
        let name = match input.path.file_name() {
            _ if input.path == Path::new("-") => "stdin".into(),
            Some(n) => n.to_os_string(),
            None => "input".into(),
        };
        let name = if names.insert(name.clone()) {
            name
        } else {
            let mut n = std::ffi::OsString::from(format!("{}-", k + 1));
            n.push(&name);
            n
        };
        write_synced(&input_dir.join(name), &input.bytes)?;
    }
    durable::sync_dir(&input_dir)?;
    let from: Vec<String> = inputs
        .iter()
        .map(|i| if i.path == Path::new("-") { "-".into() } else { absolute(&i.path).display().to_string() })
        .collect();
    let mut batch = store.batch()?;
    batch.create_run(&RunRow {
        run_id: run_id.to_string(),
        created_at: utc_now(),
        finished_at: Some(utc_now()),
        status: RunStatus::Finished,
        source: RunSource::LlamaBench,
        run_dir: run_dir.display().to_string(),
        plan_json: json!({"imported_from": from}).to_string(),
        cells_total: tests as u64,
        backscope_version: env!("CARGO_PKG_VERSION").into(),
        host: Some(crate::run::format::host::this_host()),
        owner: None,
    })?;
    // records.jsonl: written through a temporary file and renamed, like every result file of a run.
    let records_path = RunDir::new(run_dir).records_path();
    let tmp = RunDir::new(run_dir).records_tmp_path();
    let mut out = std::io::BufWriter::new(
        std::fs::File::create(&tmp).with_context(|| format!("cannot write {}", tmp.display()))?,
    );
    let mut index = 0usize;
    let mut failed = None;
    for input in inputs {
        each_object(&input.bytes, |_, text| {
            // Checked already: every object parses and has sane values.
            let written = parse_object(text).map_err(anyhow::Error::msg).and_then(|o| {
                let rec = to_record(&o, index, run_id, endpoint);
                let json = serde_json::to_string(&rec)?;
                batch.insert_record_json(&rec, &json)?;
                out.write_all(json.as_bytes())?;
                out.write_all(b"\n")?;
                Ok(())
            });
            index += 1;
            match written {
                Ok(()) => ControlFlow::Continue(()),
                Err(e) => {
                    failed = Some(e);
                    ControlFlow::Break(())
                }
            }
        })?;
        if let Some(e) = failed.take() {
            return Err(e);
        }
    }
    let file =
        out.into_inner().map_err(|e| e.into_error()).with_context(|| format!("cannot write {}", tmp.display()))?;
    file.sync_all().with_context(|| format!("cannot write {}", tmp.display()))?;
    drop(file);
    std::fs::rename(&tmp, &records_path)
        .with_context(|| format!("cannot rename {} to {}", tmp.display(), records_path.display()))?;
    durable::sync_dir(run_dir)?;
    // The run becomes visible with this one commit.
    batch.commit()
}

fn write_synced(path: &Path, bytes: &[u8]) -> Result<()> {
    let mut f = std::fs::File::create(path).with_context(|| format!("cannot write {}", path.display()))?;
    f.write_all(bytes).and_then(|_| f.sync_all()).with_context(|| format!("cannot write {}", path.display()))
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

/// The record of the test `o`, the `index`th of the import (0-based).
fn to_record(o: &Map<String, Value>, index: usize, run_id: &str, endpoint: &str) -> Record {
    let u = |k: &str| o.get(k).and_then(Value::as_u64).unwrap_or(0);
    let f = |k: &str| o.get(k).and_then(Value::as_f64);
    let s = |k: &str| o.get(k).and_then(Value::as_str).unwrap_or("").to_string();
    let (n_prompt, n_gen, n_depth) = (u("n_prompt"), u("n_gen"), u("n_depth"));
    let test = test_name(n_prompt, n_gen, n_depth);
    let model_path = s("model_filename");
    let model = model_path.rsplit('/').next().unwrap_or(&model_path).to_string();
    let ngl = o.get("n_gpu_layers").and_then(Value::as_i64).unwrap_or(-1);
    let avg_ms = f("avg_ns").map(|ns| ns / 1e6);
    let avg_ts = f("avg_ts");
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
    let backends = s("backends");
    let gpu = s("gpu_info");
    let backend = if gpu.is_empty() { backends.clone() } else { format!("{backends} ({gpu})") };
    let mut extra = Map::new();
    extra.insert("llama_bench".into(), Value::Object(o.clone()));
    Record {
        schema: RECORD_SCHEMA,
        run_id: run_id.to_string(),
        cell_key: format!("{endpoint}|{model}|ngl={ngl}|{test}|n={n_gen}|t{index}"),
        seq: index as u64,
        source: RunSource::LlamaBench,
        file: RunDir::RECORDS_JSONL.to_string(),
        endpoint: endpoint.to_string(),
        model,
        num_gpu: ngl,
        prompt: test,
        num_predict: n_gen as i64,
        epoch: 1,
        repetition: 1,
        started_at: s("test_time"),
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
}

#[cfg(test)]
mod tests {
    use super::*;

    // One pp and one tg test in the shape llama-bench -o jsonl prints (field list from llama-bench.cpp).
    const JSONL: &str = r#"{"build_commit": "abc1234", "build_number": 11434, "cpu_info": "AMD EPYC", "gpu_info": "llvmpipe (LLVM 15.0.6, 256 bits)", "backends": "Vulkan", "model_filename": "/m/tiny.gguf", "model_type": "llama ?B F16", "model_size": 40000000, "model_n_params": 20000000, "n_batch": 2048, "n_ubatch": 512, "n_threads": 2, "type_k": "f16", "type_v": "f16", "n_gpu_layers": 99, "split_mode": "layer", "main_gpu": 0, "no_kv_offload": false, "flash_attn": false, "n_prompt": 64, "n_gen": 0, "n_depth": 0, "test_time": "2026-11-21T12:00:00Z", "avg_ns": 1361702127, "stddev_ns": 1000000, "avg_ts": 47.0, "stddev_ts": 0.5, "samples_ns": [1361702127], "samples_ts": [47.0]}
{"build_commit": "abc1234", "build_number": 11434, "cpu_info": "AMD EPYC", "gpu_info": "llvmpipe (LLVM 15.0.6, 256 bits)", "backends": "Vulkan", "model_filename": "/m/tiny.gguf", "n_gpu_layers": 99, "n_prompt": 0, "n_gen": 16, "n_depth": 0, "test_time": "2026-11-21T12:00:05Z", "avg_ns": 4705882352, "stddev_ns": 2000000, "avg_ts": 3.4, "stddev_ts": 0.1, "samples_ns": [4705882352], "samples_ts": [3.4]}
"#;

    /// The test objects of `text` as the import reads them, or the check's error.
    fn tests_of(text: &str) -> Result<Vec<Map<String, Value>>> {
        let input = Input { path: "t.jsonl".into(), bytes: text.as_bytes().to_vec() };
        check(std::slice::from_ref(&input))?;
        let mut out = Vec::new();
        each_object(&input.bytes, |_, t| {
            out.push(parse_object(t).unwrap());
            ControlFlow::Continue(())
        })?;
        Ok(out)
    }

    fn check_error(text: &str) -> String {
        format!("{:#}", tests_of(text).unwrap_err())
    }

    #[test]
    fn jsonl_and_json_forms_give_the_same_records() {
        let a = tests_of(JSONL).unwrap();
        // llama-bench -o json prints the array with each object over several lines.
        let arr = format!("[\n  {}\n]\n", JSONL.trim().lines().collect::<Vec<_>>().join(",\n  "));
        let b = tests_of(&arr).unwrap();
        assert_eq!(a, b);
        let recs: Vec<Record> = a.iter().enumerate().map(|(i, o)| to_record(o, i, "r", "llama-bench")).collect();
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
    fn array_elements_are_split_with_their_lines_and_strings_left_alone() {
        let text = "\n[\n {\"a\": \"x,]}\\\"\"},\n\n {\"b\": [1, {\"c\": 2}]}\n, 3]\n";
        let mut got = Vec::new();
        each_object(text.as_bytes(), |at, t| {
            got.push((at.test, at.line, String::from_utf8_lossy(t).trim().to_string()));
            ControlFlow::Continue(())
        })
        .unwrap();
        assert_eq!(
            got,
            [
                (1, 3, "{\"a\": \"x,]}\\\"\"}".to_string()),
                (2, 5, "{\"b\": [1, {\"c\": 2}]}".to_string()),
                (3, 6, "3".to_string())
            ]
        );
        assert!(each_object(b"[{\"a\": 1}", |_, _| ControlFlow::Continue(()))
            .unwrap_err()
            .to_string()
            .contains("not closed"));
        assert!(each_object(b"[1] x", |_, _| ControlFlow::Continue(()))
            .unwrap_err()
            .to_string()
            .contains("after the closing"));
    }

    #[test]
    fn not_llama_bench_output_is_refused_with_the_reason() {
        assert!(check_error("").contains("no llama-bench tests"));
        assert!(check_error("{\"x\": 1}").contains("line 1 (test 1): no `n_prompt` field"));
        assert!(check_error("[1]").contains("JSON object"));
        assert!(check_error("| model | size |").contains("line 1"));
        assert_eq!(test_name(512, 128, 4096), "pp512+tg128 @ d4096");
    }

    /// One valid jsonl test with `field` replaced by `value` (a JSON token, as llama-bench would print it).
    fn with(field: &str, value: &str) -> String {
        let first = JSONL.lines().next().unwrap();
        let o: Map<String, Value> = serde_json::from_str(first).unwrap();
        let fields: Vec<String> = o
            .iter()
            .map(|(k, v)| if k == field { format!("\"{k}\": {value}") } else { format!("\"{k}\": {v}") })
            .collect();
        format!("{first}\n{{{}}}\n", fields.join(", "))
    }

    #[test]
    fn insane_values_are_refused_with_line_and_field() {
        for (field, value, expect) in [
            ("avg_ts", "-47.0", "`avg_ts` is -47.0, expected tokens per second"),
            ("avg_ts", "nan", "`avg_ts` is `nan`, which is no number"),
            ("avg_ts", "-nan", "`avg_ts` is `-nan`, which is no number"),
            ("stddev_ts", "inf", "`stddev_ts` is `inf`, which is no number"),
            ("avg_ts", "1e300", "`avg_ts` is 1e+300, expected tokens per second from 0 to 1e9"),
            ("avg_ts", "\"47\"", "`avg_ts` is \"47\", expected"),
            ("avg_ns", "-1361702127", "`avg_ns` is -1361702127, expected a duration"),
            ("stddev_ns", "-1", "`stddev_ns` is -1, expected a duration"),
            ("n_prompt", "-64", "`n_prompt` is -64, expected a whole number of tokens from 0 to 16777216"),
            ("n_prompt", "18446744073709551615", "`n_prompt` is 18446744073709551615, expected a whole number"),
            ("n_depth", "1.5", "`n_depth` is 1.5, expected a whole number"),
            ("n_gpu_layers", "-7", "`n_gpu_layers` is -7"),
            ("samples_ts", "[47.0, -1.0]", "`samples_ts[1]` is -1.0"),
            ("samples_ns", "7", "`samples_ns` is 7, expected an array"),
        ] {
            let e = check_error(&with(field, value));
            assert!(e.contains(&format!("t.jsonl, line 2 (test 2): {expect}")), "{field}={value}: {e}");
            assert!(!e.contains("line 1 "), "the valid first line is not blamed: {e}");
        }
        // Every problem is listed, up to the limit, each with its own line.
        let bad = "{\"n_prompt\": -1, \"n_gen\": 0, \"avg_ns\": 1, \"avg_ts\": 1}\n".repeat(12);
        let e = check_error(&bad);
        assert!(e.contains("line 10 (test 10)") && !e.contains("line 11 ") && e.contains("and 2 more problems"), "{e}");
    }
}
