//! Seed corpus for the cargo-fuzz target `gguf`, from real GGUF files:
//!
//! ```text
//! cargo run -p backscope-gguf --example gguf_fuzz_seeds -- VOCAB_DIR OUT_DIR
//! ```
//!
//! VOCAB_DIR holds llama.cpp's `ggml-vocab-*.gguf` (`models/` of the llama.cpp sdist that
//! `scripts/fixtures.sh` unpacks); OUT_DIR receives `gguf/` (`fuzz/corpus` for `scripts/fuzz.sh`). Seeds:
//!
//! - each vocab file under [`MAX_WHOLE`] bytes as it is;
//! - each vocab file shrunk: every KV kept, every array cut to its first [`KEEP`] elements, written back by
//!   this crate's writer (the token lists of real vocabularies are 0.6 to 15 MB);
//! - what `backscope synth` writes, in miniature: the llama tensors of a one-block model (32 wide, 64
//!   tokens) with F32 norms and F32, F16 or Q8_0 matrices, the shrunk llama-spm tokenizer and synth's
//!   hyperparameter keys;
//! - one tensor of every ggml type this crate knows, alignment 64, in GGUF v3 and v2;
//! - the shapes of issue 21: 2000 weight matrices of zero rows (a file all metadata, as `predict` meets a
//!   model of 300k tensors), once all of one row length and once each of its own.
//!
//! Seeds are named by a hash of their bytes, so running this twice writes nothing new. A vocab file that
//! is missing or does not parse is reported and skipped.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use gguf::{ArrayBuf, GgmlType, Gguf, GgufWriter, TensorSpec, Value, ValueType};

/// Largest vocab file copied whole (under the fuzzers' 1 MiB `-max_len`).
const MAX_WHOLE: usize = 768 << 10;
/// Elements kept of each array in a shrunk vocab.
const KEEP: u64 = 64;
/// The vocab whose tokenizer the synth-like seeds carry (synth's default for llama).
const SYNTH_VOCAB: &str = "ggml-vocab-llama-spm.gguf";

fn main() {
    let mut args = std::env::args_os().skip(1);
    let (Some(vocab_dir), Some(out)) = (args.next(), args.next()) else {
        eprintln!("usage: gguf_fuzz_seeds VOCAB_DIR OUT_DIR");
        std::process::exit(2);
    };
    let mut seeds = Seeds { dir: PathBuf::from(out).join("gguf"), seen: HashSet::new(), written: 0 };
    let mut synth_tokenizer = None;
    for path in vocab_files(Path::new(&vocab_dir)) {
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default().to_string();
        let label = name.trim_start_matches("ggml-vocab-").trim_end_matches(".gguf");
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) => {
                eprintln!("gguf_fuzz_seeds: skipping {}: {e}", path.display());
                continue;
            }
        };
        let g = match Gguf::parse(&bytes) {
            Ok(g) => g,
            Err(e) => {
                eprintln!("gguf_fuzz_seeds: skipping {}: {}", path.display(), e.with_names(&bytes));
                continue;
            }
        };
        if bytes.len() <= MAX_WHOLE {
            seeds.add(&format!("vocab-{label}"), &bytes);
        }
        let shrunk = shrink(&g);
        seeds.add(&format!("vocab-{label}-shrunk"), &shrunk);
        if name == SYNTH_VOCAB {
            synth_tokenizer = Some(shrunk);
        }
    }
    match &synth_tokenizer {
        Some(vocab) => {
            let vocab = Gguf::parse(vocab).expect("the writer's output reads back");
            for (label, matrices) in
                [("synth-f32", GgmlType::F32), ("synth-f16", GgmlType::F16), ("synth-q8_0", GgmlType::Q8_0)]
            {
                seeds.add(label, &synth_like(&vocab, matrices));
            }
        }
        None => {
            eprintln!("gguf_fuzz_seeds: no {SYNTH_VOCAB} in {}: no synth-like seeds", Path::new(&vocab_dir).display())
        }
    }
    let types = every_type();
    seeds.add("types-v3", &types);
    let mut v2 = types;
    // Version 2 has the same layout as 3 (u64 counts); only the number differs.
    if let Some(version) = v2.get_mut(4..8) {
        version.copy_from_slice(&2u32.to_le_bytes());
    }
    seeds.add("types-v2", &v2);
    seeds.add("many-tensors-equal", &many_tensors(2000, |_| 4096));
    seeds.add("many-tensors-distinct", &many_tensors(2000, |i| i + 1));
    eprintln!("gguf_fuzz_seeds: gguf: {} seeds written to {}", seeds.written, seeds.dir.display());
}

/// Seed files, deduplicated by content.
struct Seeds {
    dir: PathBuf,
    seen: HashSet<u64>,
    written: usize,
}

impl Seeds {
    fn add(&mut self, label: &str, bytes: &[u8]) {
        // Every seed must be a file the reader accepts: the fuzzer starts from valid inputs.
        if let Err(e) = Gguf::parse(bytes) {
            eprintln!("gguf_fuzz_seeds: {label} does not read back: {}", e.with_names(bytes));
            std::process::exit(1);
        }
        let hash = fnv1a(bytes);
        if !self.seen.insert(hash) {
            return;
        }
        let path = self.dir.join(format!("{label}-{hash:016x}"));
        if let Err(e) = std::fs::create_dir_all(&self.dir).and_then(|()| std::fs::write(&path, bytes)) {
            eprintln!("gguf_fuzz_seeds: cannot write {}: {e}", path.display());
            std::process::exit(1);
        }
        self.written += 1;
    }
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3))
}

fn vocab_files(dir: &Path) -> Vec<PathBuf> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) => {
            eprintln!(
                "gguf_fuzz_seeds: cannot read {}: {e} (scripts/fixtures.sh unpacks the llama.cpp sdist)",
                dir.display()
            );
            return Vec::new();
        }
    };
    let mut files: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or_default();
            name.starts_with("ggml-vocab-") && name.ends_with(".gguf")
        })
        .collect();
    files.sort();
    files
}

/// The first [`KEEP`] elements of an array.
fn truncated(a: gguf::Array<'_>) -> ArrayBuf {
    ArrayBuf::from_values(a.elem, a.iter().take(KEEP as usize)).expect("elements of the array's own type")
}

/// `g`'s KVs with every array cut to [`KEEP`] elements, and its tensors (vocab files have none) kept.
fn shrink(g: &Gguf<'_>) -> Vec<u8> {
    let arrays: Vec<Option<ArrayBuf>> = g.kvs.iter().map(|kv| kv.value.as_array().map(truncated)).collect();
    let kvs: Vec<(&str, Value<'_>)> =
        g.kvs.iter().zip(&arrays).map(|(kv, a)| (kv.key, a.as_ref().map_or(kv.value, ArrayBuf::value))).collect();
    let specs: Vec<TensorSpec> = g.tensors.iter().map(|t| TensorSpec::new(t.name, t.dims(), t.ggml_type)).collect();
    let mut w = GgufWriter::new(Vec::new(), &kvs, &specs).expect("a vocab file's KVs are valid");
    for t in &g.tensors {
        w.write_data(g.tensor_data(t).unwrap_or_default()).expect("writing to memory");
    }
    w.finish().expect("every tensor written")
}

/// Deterministic filler bytes: the reader does not look at tensor data, the fuzzer may.
fn filler(n: u64, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn write(kvs: &[(&str, Value<'_>)], specs: &[TensorSpec]) -> Vec<u8> {
    let mut w = GgufWriter::new(Vec::new(), kvs, specs).expect("valid seed layout");
    for (i, s) in specs.iter().enumerate() {
        w.write_data(&filler(s.n_bytes().expect("a size"), i as u64)).expect("writing to memory");
    }
    w.finish().expect("every tensor written")
}

/// The layout `backscope synth` writes for llama (src/commands/synth/model.rs; names from gguf-py constants.py
/// `TENSOR_NAMES`): one block, 32 wide, 4 heads (2 KV), n_ff 64, the vocab's (shrunk) token count.
fn synth_like(vocab: &Gguf<'_>, matrices: GgmlType) -> Vec<u8> {
    let (n_embd, n_ff, n_head, n_head_kv) = (32u64, 64u64, 4u64, 2u64);
    let gqa = n_embd / n_head * n_head_kv;
    let n_vocab = vocab.vocab_size().unwrap_or(KEEP);
    let file_type = match matrices {
        GgmlType::F32 => 0,
        GgmlType::F16 => 1,
        _ => 7, // llama.h LLAMA_FTYPE_MOSTLY_Q8_0
    };
    let mut kvs: Vec<(&str, Value<'_>)> = vec![
        ("general.architecture", Value::String(b"llama")),
        ("general.name", Value::String(b"backscope-synth-seed")),
        ("general.file_type", Value::U32(file_type)),
        ("llama.vocab_size", Value::U32(n_vocab as u32)),
        ("llama.context_length", Value::U32(2048)),
        ("llama.embedding_length", Value::U32(n_embd as u32)),
        ("llama.block_count", Value::U32(1)),
        ("llama.feed_forward_length", Value::U32(n_ff as u32)),
        ("llama.attention.head_count", Value::U32(n_head as u32)),
        ("llama.attention.head_count_kv", Value::U32(n_head_kv as u32)),
        ("llama.rope.dimension_count", Value::U32((n_embd / n_head) as u32)),
        ("llama.rope.freq_base", Value::F32(10000.0)),
        ("llama.attention.layer_norm_rms_epsilon", Value::F32(1e-5)),
    ];
    kvs.extend(vocab.kvs.iter().filter(|kv| kv.key.starts_with("tokenizer.")).map(|kv| (kv.key, kv.value)));
    let m = |name: &str, dims: &[u64]| TensorSpec::new(name, dims, matrices);
    let norm = |name: &str| TensorSpec::new(name, &[n_embd], GgmlType::F32);
    let specs = vec![
        m("token_embd.weight", &[n_embd, n_vocab]),
        norm("blk.0.attn_norm.weight"),
        m("blk.0.attn_q.weight", &[n_embd, n_embd]),
        m("blk.0.attn_k.weight", &[n_embd, gqa]),
        m("blk.0.attn_v.weight", &[n_embd, gqa]),
        m("blk.0.attn_output.weight", &[n_embd, n_embd]),
        norm("blk.0.ffn_norm.weight"),
        m("blk.0.ffn_gate.weight", &[n_embd, n_ff]),
        m("blk.0.ffn_down.weight", &[n_ff, n_embd]),
        m("blk.0.ffn_up.weight", &[n_embd, n_ff]),
        norm("output_norm.weight"),
        m("output.weight", &[n_embd, n_vocab]),
    ];
    write(&kvs, &specs)
}

/// One two-row tensor of every known ggml type, each row one block, plus KVs of every value type.
fn every_type() -> Vec<u8> {
    let specs: Vec<TensorSpec> = GgmlType::all()
        .map(|(t, info)| TensorSpec::new(format!("t.{}", info.name.to_ascii_lowercase()), &[info.block_size, 2], t))
        .collect();
    let strings = ArrayBuf::strings(["<unk>", "<s>", "", "h\u{e9}llo"]);
    let nested = ArrayBuf::from_values(ValueType::Array, [strings.value()]).expect("an array of arrays");
    let bools = ArrayBuf::from_values(ValueType::Bool, [Value::Bool(true), Value::Bool(false)]).expect("bools");
    let kvs = [
        ("general.alignment", Value::U32(64)),
        ("t.u8", Value::U8(1)),
        ("t.i8", Value::I8(-1)),
        ("t.u16", Value::U16(2)),
        ("t.i16", Value::I16(-2)),
        ("t.u32", Value::U32(3)),
        ("t.i32", Value::I32(-3)),
        ("t.f32", Value::F32(0.5)),
        ("t.bool", Value::Bool(true)),
        ("t.string", Value::String(b"text")),
        ("t.u64", Value::U64(4)),
        ("t.i64", Value::I64(-4)),
        ("t.f64", Value::F64(0.25)),
        ("t.strings", strings.value()),
        ("t.nested", nested.value()),
        ("t.bools", bools.value()),
    ];
    write(&kvs, &specs)
}

/// `n` F32 weight matrices `blk.I.attn_q.weight` of `row_length(I)` elements and zero rows (no data), with the
/// llama keys `predict` reads.
fn many_tensors(n: u64, row_length: impl Fn(u64) -> u64) -> Vec<u8> {
    let kvs = [
        ("general.architecture", Value::String(b"llama")),
        ("llama.attention.head_count", Value::U32(32)),
        ("llama.attention.head_count_kv", Value::U32(8)),
    ];
    let specs: Vec<TensorSpec> =
        (0..n).map(|i| TensorSpec::new(format!("blk.{i}.attn_q.weight"), &[row_length(i), 0], GgmlType::F32)).collect();
    GgufWriter::new(Vec::new(), &kvs, &specs).and_then(|w| w.finish()).expect("valid seed layout")
}
