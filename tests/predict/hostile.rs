//! `predict` on hostile inputs: time and memory bounded by the input whatever a model's tensor count, token counts
//! outside their range refused naming the flag, and `predict --run` reading a run one record at a time, taking
//! each record's model, and leaving out corrupt records with why. Models, traces and run directories are written
//! here; the commands run under the bounded runner where the case is about memory or time.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{json, Value};

use crate::support::bounded::{self, Bounds, Done, GIB, MIB};
use crate::support::util::*;

/// What the commands here get: 4 GiB of address space and a minute.
fn bounds() -> Bounds {
    Bounds { address_space: 4 * GIB, deadline: Duration::from_secs(60), ..Default::default() }
}

/// Writes a GGUF with the gguf crate's writer: llama metadata and `n` weight matrices `blk.I.attn_q.weight`
/// of type `ggml_type` with the dimensions `dims(I)` gives (zero rows: a valid tensor of no bytes, so the
/// file is all metadata).
fn many_tensor_gguf(path: &Path, n: u64, ggml_type: gguf::GgmlType, dims: impl Fn(u64) -> [u64; 2]) {
    use gguf::{GgufWriter, TensorSpec, Value};
    let specs: Vec<TensorSpec> =
        (0..n).map(|i| TensorSpec::new(format!("blk.{i}.attn_q.weight"), &dims(i), ggml_type)).collect();
    let kvs = [
        ("general.architecture", Value::String(b"llama")),
        ("llama.attention.head_count", Value::U32(32)),
        ("llama.attention.head_count_kv", Value::U32(8)),
        ("llama.embedding_length", Value::U32(4096)),
    ];
    let out = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    let mut w = GgufWriter::new(out, &kvs, &specs).unwrap();
    let total: u64 = specs.iter().map(|s| s.n_bytes().unwrap()).sum();
    w.write_data(&vec![0u8; total as usize]).unwrap();
    w.finish().unwrap();
}

fn predict_bounded(model: &Path, extra: &[&str]) -> bounded::Done {
    let mut args = vec!["predict", "--json", "--arch", "gfx1201", "--model", model.to_str().unwrap()];
    args.extend(extra);
    bounded::run(&args, bounds())
}

/// The whole rule table once ran per tensor per phase (20k tensors 11.6 s, 300k over 60 s). 300k tensors with
/// the same facts are one evaluation per phase.
#[test]
fn predict_on_300k_equal_tensors_is_bounded() {
    let tmp = tempfile::tempdir().unwrap();
    let model = tmp.path().join("many.gguf");
    many_tensor_gguf(&model, 300_000, gguf::GgmlType::F16, |_| [4096, 0]);
    let done = predict_bounded(&model, &["--prompt-tokens", "1000"]);
    done.assert_bounded(&[0], 10, GIB);
    let report: serde_json::Value = serde_json::from_str(done.stdout.trim()).unwrap();
    let phases = report["phases"].as_array().unwrap();
    // 1000 tokens: ubatch 1 of 512, the last of 488, then one decode step (llama.cpp's split_simple).
    let ids: Vec<&str> = phases.iter().map(|p| p["id"].as_str().unwrap()).collect();
    assert!(ids.starts_with(&["prefill", "prefill-last"]) && ids.ends_with(&["decode"]), "{ids:?}");
    for p in phases {
        let tensors: u64 = p["weights"].as_array().unwrap().iter().map(|g| g["tensors"].as_u64().unwrap()).sum();
        // Every tensor is counted once per phase it takes part in (the last layer's attn_q is before the gather).
        assert_eq!(tensors, 300_000, "{}", p["id"]);
    }
}

/// The hostile variant: every tensor a different row length, so no two share a query; with --explain too (the
/// decision paths show the values, so they are not memoised: 2.4 GB and 26 s before they were left out).
#[test]
fn predict_on_150k_distinct_tensors_is_bounded() {
    let tmp = tempfile::tempdir().unwrap();
    let model = tmp.path().join("distinct.gguf");
    many_tensor_gguf(&model, 150_000, gguf::GgmlType::F32, |i| [i + 1, 0]);
    assert!(std::fs::metadata(&model).unwrap().len() < 10 * MIB);
    let plain = predict_bounded(&model, &["--prompt-tokens", "1000"]);
    plain.assert_bounded(&[0], 10, GIB);
    let explained = predict_bounded(&model, &["--prompt-tokens", "1000", "--explain"]);
    explained.assert_bounded(&[0], 10, GIB);
    // The same groups either way; with --explain each carries its path.
    let (a, b): (serde_json::Value, serde_json::Value) =
        (serde_json::from_str(plain.stdout.trim()).unwrap(), serde_json::from_str(explained.stdout.trim()).unwrap());
    let groups = |r: &serde_json::Value| -> Vec<(String, u64)> {
        let phases = r["phases"].as_array().unwrap().iter();
        let weights = phases.flat_map(|p| p["weights"].as_array().unwrap().iter());
        weights.map(|g| (g["family"].to_string(), g["tensors"].as_u64().unwrap())).collect()
    };
    assert_eq!(groups(&a), groups(&b));
    assert!(b["phases"][0]["weights"][0]["path"].as_array().is_some_and(|p| !p.is_empty()), "{b}");
}

/// Huge token counts once wrapped (or, in a debug build, panicked) in the KV lengths and node counts. Each
/// count is checked against its range, and the error names the flag.
#[test]
fn predict_refuses_token_counts_outside_their_range() {
    let max = u64::MAX.to_string();
    let cases: [(&[&str], &str); 4] = [
        (&["--prompt-tokens", &max], "--prompt-tokens is 18446744073709551615; expected 0 to 1099511627776"),
        (&["--prompt-tokens", "10", "--decode-tokens", &max], "--decode-tokens"),
        (&["--ne11", "0"], "--ne11 is 0; expected 1 to 1099511627776"),
        (&["--prompt-tokens", "9", "--ubatch", &max], "--ubatch is 18446744073709551615"),
    ];
    for (flags, message) in cases {
        let mut args = vec!["predict", "--json", "--arch", "gfx1201", "--type", "q4_k"];
        args.extend(flags);
        let done = bounded::run(&args, Bounds { deadline: Duration::from_secs(30), ..Default::default() });
        done.assert_bounded(&[2], 30, GIB);
        assert!(done.stderr.contains(message), "{flags:?}: {}", done.stderr);
        assert!(done.stdout.is_empty(), "{flags:?}: {}", done.stdout);
    }
    // The top of the range is a prediction: 2^40 prompt tokens then 2^40 decode steps, the counts exact.
    let top = (1u64 << 40).to_string();
    let args =
        ["predict", "--json", "--arch", "gfx1201", "--type", "q4_k", "--prompt-tokens", &top, "--decode-tokens", &top];
    let done = bounded::run(&args, Bounds { deadline: Duration::from_secs(30), ..Default::default() });
    done.assert_bounded(&[0], 30, GIB);
    let report: serde_json::Value = serde_json::from_str(done.stdout.trim()).unwrap();
    let decode = report["phases"].as_array().unwrap().iter().find(|p| p["id"] == "decode").unwrap();
    assert_eq!(decode["repeat"].as_u64(), Some(1 << 40));
    // 2^40 / 512 ubatches: all but the last full, the last of 512 (llama.cpp's split_simple).
    let prefill = report["phases"].as_array().unwrap().iter().find(|p| p["id"] == "prefill").unwrap();
    assert_eq!(prefill["repeat"].as_u64(), Some((1 << 40) / 512 - 1));
}

/// `predict --run` once demanded `--model` although each record names its model. Without it, each record's
/// model is read: a GGUF path (here relative to the working directory, as the sweep was given it), else an Ollama
/// name through Ollama's manifest and blob layout; a model found neither way is named in the error.
#[test]
fn predict_run_takes_each_records_model() {
    let tmp = tempfile::tempdir().unwrap();
    let exe = crate::support::hip::mmvq_program(tmp.path());
    let (status, events, stderr, db) =
        crate::support::sweep::traced_stand_in_sweep(tmp.path(), &exe, &observer_library(), 1);
    assert_eq!(status.code(), Some(0), "stderr: {stderr}");
    let recs = crate::support::sweep::records(&events);
    let run_id = recs[0]["run_id"].as_str().unwrap().to_string();
    assert!(recs.iter().all(|r| r["model"] == "stand-in"));
    let predict = |cwd: &Path, ollama: &Path| {
        let mut cmd = backscope();
        cmd.current_dir(cwd).env("OLLAMA_MODELS", ollama);
        cmd.args(["predict", "--json", "--arch", "gfx900", "--run", &run_id, "--db", db.to_str().unwrap()]);
        run(&mut cmd)
    };
    let (with_file, elsewhere, ollama) =
        (tmp.path().join("cwd"), tmp.path().join("elsewhere"), tmp.path().join("ollama"));
    for d in [&with_file, &elsewhere, &ollama] {
        std::fs::create_dir(d).unwrap();
    }
    // Four Q4_K matrices of 256-element rows.
    let gguf = with_file.join("stand-in");
    many_tensor_gguf(&gguf, 4, gguf::GgmlType::Q4_K, |_| [256, 0]);

    let out = predict(&with_file, &ollama);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let cells = r["cells"].as_array().unwrap();
    assert_eq!(cells.len(), recs.len());
    for cell in cells {
        assert_eq!(cell["report"]["model"]["source"], "stand-in");
        assert_eq!(cell["report"]["model"]["weights_per_type"]["Q4_K"], 4);
    }

    let out = predict(&elsewhere, &ollama);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("model stand-in is neither a GGUF file here nor an Ollama model in"), "{stderr}");

    // The same name as an Ollama model: manifests/registry.ollama.ai/library/stand-in/latest names the blob.
    let hex = "ab".repeat(32);
    let manifest = ollama.join("manifests/registry.ollama.ai/library/stand-in");
    std::fs::create_dir_all(&manifest).unwrap();
    let layer =
        serde_json::json!({"mediaType": "application/vnd.ollama.image.model", "digest": format!("sha256:{hex}")});
    std::fs::write(manifest.join("latest"), serde_json::json!({"schemaVersion": 2, "layers": [layer]}).to_string())
        .unwrap();
    std::fs::create_dir(ollama.join("blobs")).unwrap();
    std::fs::copy(&gguf, ollama.join(format!("blobs/sha256-{hex}"))).unwrap();
    let out = predict(&elsewhere, &ollama);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(r["cells"][0]["report"]["model"]["weights_per_type"]["Q4_K"], 4);

    // Without --run there is nothing to take the model from.
    let out = run(backscope().args(["predict", "--arch", "gfx900", "--prompt-tokens", "5"]));
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--model M.gguf or --type T"));
}

/// A traced record of a sweep run, as `backscope sweep --trace` stores it: cell `seq`, a 9-token prompt, CUDA/HIP
/// kernels in its trace, and `prompt` as the request's prompt text.
fn traced_record(seq: u64, prompt: &str) -> Value {
    let cell = format!("cells/{seq:05}-rocm-ngl99");
    json!({
        "schema": 1, "run_id": "tp", "cell_key": format!("rocm|m|ngl=99|p|n=4|e1|r{seq}"), "seq": seq,
        "source": "sweep", "file": format!("{cell}/result.json"), "endpoint": "rocm", "managed": true, "model": "m",
        "num_gpu": -1, "prompt": prompt, "num_predict": 4, "epoch": 1, "repetition": 1, "stream": true,
        "started_at": "2026-12-02T01:00:00Z", "status": "ok",
        "server_timings": {"prompt_n": 9, "decode_n": 4}, "prompt_count_includes_cache": false,
        "response_chars": 10, "body_bytes": 100, "wall_ms": 100.0, "decode_tps": 40.0,
        "trace": {
            "dir": "traces/s001-rocm", "files": ["trace-77.jsonl"], "window_ns": [0, 100_000_000], "interval_ms": 50,
            "spill_ns": [0, 0], "total_launches": 10, "failed_launches": 0, "families": {"mmvq": 10},
            "kernels": [{
                "name": "_Z13mul_mat_vec_qIL9ggml_type12ELi1EEvPKvS2_PKfPfiiii",
                "demangled": "void mul_mat_vec_q<(ggml_type)12, 1>(void const*, void const*, float const*, float*, int, int, int, int)",
                "api": "hip", "family": "mmvq", "launches": 10,
            }],
            "distinct_kernels": 1, "processes": [],
        },
    })
}

fn write_record(run: &Path, r: &Value) -> PathBuf {
    let path = run.join(r["file"].as_str().unwrap());
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, serde_json::to_vec(r).unwrap()).unwrap();
    path
}

fn predict_run(run: &Path) -> Done {
    let args = ["predict", "--json", "--arch", "gfx900", "--type", "q4_k", "--run", run.to_str().unwrap()];
    bounded::run(&args, bounds())
}

/// `predict --run` once kept every record: 300 hard links to one 15 MiB record aborted it at 3.9 GB. Read one
/// record at a time, 300 links to one 2 MiB record (600 MiB of records, each parsed whole) stay far below the sum,
/// and every record is predicted.
#[test]
fn predict_run_streams_300_links_to_one_large_record() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    let first = write_record(&run, &traced_record(0, &"x".repeat(2 << 20)));
    let size = std::fs::metadata(&first).unwrap().len();
    assert!(size > 2 * MIB, "{size}");
    for seq in 1..300u64 {
        let cell = run.join(format!("cells/{seq:05}-rocm-ngl99"));
        std::fs::create_dir_all(&cell).unwrap();
        std::fs::hard_link(&first, cell.join("result.json")).unwrap();
    }
    let done = predict_run(&run);
    eprintln!("predict --run of 300 links to {} MiB: {}", size / MIB, done.describe());
    // All of them kept would be 300 × 2 MiB of prompt text alone.
    done.assert_bounded(&[0], 120, 200 * MIB);
    let out = done.json();
    assert_eq!(out["cells"].as_array().unwrap().len(), 300, "{}", out["skipped"]);
    assert_eq!(out["skipped"].as_array().unwrap().len(), 0, "{}", out["skipped"]);
}

/// One bad record once failed all of `predict --run`. Now the good records are predicted and the bad ones are
/// named as left out with why: a record that is not JSON, one that is not a record, and a FIFO in a record's place.
#[test]
fn predict_run_skips_corrupt_records_and_predicts_the_good_ones() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    for seq in [1, 2, 4] {
        write_record(&run, &traced_record(seq, "p"));
    }
    let cut = write_record(&run, &traced_record(3, "p"));
    let text = std::fs::read_to_string(&cut).unwrap();
    std::fs::write(&cut, &text[..text.len() / 2]).unwrap();
    let other = run.join("cells/00005-rocm-ngl99/result.json");
    std::fs::create_dir_all(other.parent().unwrap()).unwrap();
    std::fs::write(&other, r#"{"seq": 5, "note": "not a record"}"#).unwrap();
    let fifo = run.join("cells/00006-rocm-ngl99/result.json");
    std::fs::create_dir_all(fifo.parent().unwrap()).unwrap();
    mkfifo(&fifo);

    let done = predict_run(&run);
    done.assert_bounded(&[0], 60, 256 * MIB);
    let out = done.json();
    let seqs: Vec<u64> = out["cells"].as_array().unwrap().iter().map(|c| c["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, [1, 2, 4]);
    let skipped: Vec<&str> = out["skipped"].as_array().unwrap().iter().map(|s| s.as_str().unwrap()).collect();
    assert_eq!(skipped.len(), 3, "{skipped:#?}");
    for (path, why) in [(&cut, "EOF while parsing"), (&other, "missing field"), (&fifo, "is a FIFO")] {
        let name = path.strip_prefix(&run).unwrap().display().to_string();
        assert!(
            skipped.iter().any(|s| s.contains(&name) && s.contains(why) && s.contains("left out")),
            "{name}: {skipped:#?}"
        );
    }
}

/// A run whose only record is corrupt has nothing to predict: exit 2, naming the record.
#[test]
fn predict_run_with_only_a_corrupt_record_fails_naming_it() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    let bad = write_record(&run, &traced_record(1, "p"));
    std::fs::write(&bad, "{\"seq\": ").unwrap();
    let done = predict_run(&run);
    done.assert_bounded(&[2], 30, 256 * MIB);
    assert!(
        done.stderr.contains("no record to compare with") && done.stderr.contains("00001-rocm-ngl99/result.json"),
        "{}",
        done.stderr
    );
}
