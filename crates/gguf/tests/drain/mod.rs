//! Drain logic of the cargo-fuzz target `gguf` (`fuzz/fuzz_targets/gguf.rs` includes this file with
//! `#[path]`), shared with `tests/fuzz_regressions.rs`, which replays every committed input through it.
//!
//! It parses arbitrary bytes as a GGUF file and consumes everything the reader returns: every KV, every
//! array element at every nesting level, every tensor info and each tensor's data, and the derived
//! accessors. Along the way it checks that returned slices lie in the input where the reader says they do,
//! that counts, shapes and sizes agree, and that errors point at a field inside the input. Then the round
//! trip: a file the reader accepts, written back by the writer from what was read, reads back equal, and
//! writing that again gives the same bytes. A panic here is a finding, from the reader, the writer or a
//! property.
//!
//! Kept in `tests/` so that the crate has no fuzzing API; the fuzz package reaches this file by path.

#![allow(dead_code)] // the fuzz target and the regression test each use part of this file

use std::collections::HashSet;
use std::io::Write;

use gguf::{
    Array, ArrayBuf, Entry, Error, Gguf, GgufWriter, TensorSpec, Value, ValueType, MAX_ARRAY_DEPTH, MAX_DIMS,
    MAX_TENSOR_NAME,
};

/// A drain entry point: decode everything in the input, panic on a broken property.
pub type Drain = fn(&[u8]);

/// Every drain entry point by fuzz target name; regression files are named `<target>-<hash>.bin`.
pub const TARGETS: &[(&str, Drain)] = &[("gguf", gguf)];

/// Largest file the round trip writes. Tensors may share data in the input (every offset 0), so the file
/// written back can be far larger than the input; beyond this the round trip is skipped.
const MAX_REWRITE: u64 = 16 << 20;

/// Lookups by name checked per file (each is a linear search, so checking all would be quadratic).
const MAX_LOOKUPS: usize = 64;

/// `gguf`: the input as a GGUF file, drained, then written back and read again.
pub fn gguf(data: &[u8]) {
    match Gguf::parse(data) {
        Ok(g) => {
            check_file(data, &g);
            round_trip(&g);
        }
        Err(e) => check_error(&e, data),
    }
}

fn check_error(e: &Error, input: &[u8]) {
    let len = input.len() as u64;
    // Every error names the start of a field, and fields start inside the input or at its end.
    assert!(e.offset <= len, "error offset {:#x} is past the {len}-byte input: {e}", e.offset);
    assert!(!e.field.is_empty() && !e.expected.is_empty());
    match e.entry {
        Entry::Kv { at, .. } | Entry::Tensor { at, .. } => assert!(at <= e.offset, "{e}"),
        Entry::Header => assert!(e.element.is_none(), "{e}"),
        Entry::Payload => panic!("a file error placed in an array payload: {e}"),
    }
    if e.element.is_some() {
        assert!(matches!(e.entry, Entry::Kv { .. }), "{e}");
    }
    let mut sink = std::io::sink();
    write!(sink, "{e} {}", e.with_names(input)).expect("formatting an error");
}

/// `part` is a slice of `data` starting at `offset`.
fn assert_at(data: &[u8], part: &[u8], offset: u64) {
    let start = part.as_ptr() as usize - data.as_ptr() as usize;
    assert!(
        part.as_ptr() >= data.as_ptr() && start as u64 == offset && start + part.len() <= data.len(),
        "a slice is not where the reader says ({offset})"
    );
}

/// `part` is a slice of `data`.
fn assert_within(data: &[u8], part: &[u8]) {
    let (d, p) = (data.as_ptr() as usize, part.as_ptr() as usize);
    assert!(part.is_empty() || (p >= d && p + part.len() <= d + data.len()), "a slice lies outside the input");
}

fn check_file(data: &[u8], g: &Gguf<'_>) {
    let len = data.len() as u64;
    assert_eq!(g.file_size, len);
    assert!(g.version == 2 || g.version == 3);
    assert!(g.alignment.is_power_of_two() && g.alignment <= u32::MAX.into());
    assert!(g.header_end <= len);
    assert!(g.data_offset >= g.header_end && g.data_offset - g.header_end < g.alignment);
    assert_eq!(g.data_offset % g.alignment, 0);

    let mut keys = HashSet::new();
    let mut prev_end = 24u64;
    for kv in &g.kvs {
        assert!(!kv.key.is_empty() && keys.insert(kv.key), "empty or repeated key");
        assert!(kv.offset >= prev_end, "KVs overlap or go backwards");
        assert_at(data, kv.key.as_bytes(), kv.offset + 8);
        prev_end = kv.offset + 8 + kv.key.len() as u64 + 4;
        assert!(prev_end <= g.header_end);
        drain_value(data, &kv.value, 0);
    }
    for kv in g.kvs.iter().take(MAX_LOOKUPS) {
        assert!(g.get(kv.key).is_some_and(|v| same_value(v, &kv.value)), "get({:?})", kv.key);
    }
    if let Some(v) = g.get("general.alignment") {
        assert_eq!(v.as_u64(), Some(g.alignment));
    }

    let mut names = HashSet::new();
    let mut prev_info = 0u64;
    for t in &g.tensors {
        assert!(names.insert(t.name), "repeated tensor name");
        assert!(t.info_offset >= prev_info && t.info_offset >= prev_end && t.info_offset < g.header_end);
        prev_info = t.info_offset + 1;
        assert_at(data, t.name.as_bytes(), t.info_offset + 8);
        assert!(t.dims().len() <= MAX_DIMS as usize);
        let product = t.dims().iter().try_fold(1u64, |acc, &d| acc.checked_mul(d));
        assert_eq!(product, Some(t.n_elements));
        assert!(t.dims().iter().all(|&d| d <= i64::MAX as u64));
        let row = t.dims().first().copied().unwrap_or(1);
        assert_eq!(t.ggml_type.tensor_bytes(row, t.n_elements), Some(t.n_bytes));
        assert_eq!(t.offset % g.alignment, 0);
        let bytes = g.tensor_data(t).expect("tensor data inside the file");
        assert_eq!(bytes.len() as u64, t.n_bytes);
        assert_at(data, bytes, g.data_offset + t.offset);
    }
    for t in g.tensors.iter().take(MAX_LOOKUPS) {
        assert_eq!(g.tensor(t.name), Some(t));
    }

    // The derived facts: whatever they are, they come out without panicking and add up.
    let _ = (g.architecture(), g.block_count(), g.offloadable_layers(), g.embedding_length());
    let _ = (g.feed_forward_length(), g.head_count(), g.head_count_kv(), g.context_length(), g.file_type());
    if let Some(n) = g.vocab_size() {
        assert_eq!(g.get("tokenizer.ggml.tokens").and_then(|v| v.as_array()).map(|a| a.len), Some(n));
    }
    let totals = g.type_totals();
    assert_eq!(totals.values().map(|t| t.tensors).sum::<u64>(), g.tensors.len() as u64);
    // Saturating sums of the same numbers agree in any grouping.
    assert_eq!(totals.values().map(|t| t.elements).fold(0, u64::saturating_add), g.n_params());
    assert_eq!(totals.values().map(|t| t.bytes).fold(0, u64::saturating_add), g.tensor_bytes());
}

/// Decode a value all the way down.
fn drain_value(data: &[u8], v: &Value<'_>, depth: u32) {
    let mut sink = std::io::sink();
    write!(sink, "{v}").expect("formatting a value");
    let _ = (v.as_u64(), v.as_f64(), v.as_str());
    match *v {
        Value::String(s) => assert_within(data, s),
        Value::Array(a) => {
            assert!(depth < MAX_ARRAY_DEPTH, "arrays nested deeper than the reader allows");
            assert_within(data, a.payload);
            // The payload was validated at parse time: checking it again gives the same array.
            assert_eq!(Array::new(a.elem, a.len, a.payload), Ok(a));
            let mut n = 0u64;
            for e in a.iter() {
                assert_eq!(e.value_type(), a.elem);
                drain_value(data, &e, depth + 1);
                n += 1;
            }
            assert_eq!(n, a.len, "an array yields as many elements as it claims");
            if let Some(strings) = a.strings() {
                assert_eq!(strings.map(|s| assert_within(data, s)).count() as u64, a.len);
            }
            // Rebuilt element by element, an array has the same encoding (checked at the top level only:
            // nested levels are rebuilt inside their parents).
            if depth == 0 {
                let rebuilt = ArrayBuf::from_values(a.elem, a.iter()).expect("elements of the array's type");
                assert_eq!(rebuilt.as_array(), a);
            }
        }
        _ => assert_ne!(v.value_type(), ValueType::Array),
    }
}

/// Equal, with floats compared by their bits (NaN payloads included).
fn same_value(a: &Value<'_>, b: &Value<'_>) -> bool {
    match (*a, *b) {
        (Value::F32(x), Value::F32(y)) => x.to_bits() == y.to_bits(),
        (Value::F64(x), Value::F64(y)) => x.to_bits() == y.to_bits(),
        _ => a == b,
    }
}

/// Write `g` with the writer: its KVs in order, its tensors in order with their data.
fn rewrite(g: &Gguf<'_>) -> std::io::Result<Vec<u8>> {
    let kvs: Vec<(&str, Value<'_>)> = g.kvs.iter().map(|kv| (kv.key, kv.value)).collect();
    let specs: Vec<TensorSpec> = g.tensors.iter().map(|t| TensorSpec::new(t.name, t.dims(), t.ggml_type)).collect();
    let mut w = GgufWriter::new(Vec::new(), &kvs, &specs)?;
    for t in &g.tensors {
        w.write_data(g.tensor_data(t).expect("tensor data inside the file"))?;
    }
    w.finish()
}

fn round_trip(g: &Gguf<'_>) {
    // The writer pads every tensor to the alignment and lays them out one after the other.
    let size = g.tensors.iter().try_fold(g.data_offset, |acc, t| {
        t.n_bytes.checked_next_multiple_of(g.alignment).and_then(|n| acc.checked_add(n))
    });
    if size.is_none_or(|s| s > MAX_REWRITE) {
        return;
    }
    // The reader takes any tensor name; llama.cpp and the writer want 1 to 63 bytes.
    let names_ok = g.tensors.iter().all(|t| !t.name.is_empty() && t.name.len() < MAX_TENSOR_NAME);
    let out = match rewrite(g) {
        Ok(out) => out,
        Err(e) => {
            assert!(!names_ok, "the writer refused what the reader accepted: {e}");
            return;
        }
    };
    assert!(names_ok, "the writer took a tensor name llama.cpp refuses");
    assert_eq!(Some(out.len() as u64), size, "the writer's layout");

    let back = Gguf::parse(&out).unwrap_or_else(|e| panic!("the writer's output does not read back: {e}"));
    assert_eq!(back.version, 3);
    assert_eq!((back.alignment, back.header_end, back.data_offset), (g.alignment, g.header_end, g.data_offset));
    assert_eq!(back.kvs.len(), g.kvs.len());
    for (b, a) in back.kvs.iter().zip(&g.kvs) {
        assert_eq!((b.key, b.offset), (a.key, a.offset));
        assert!(same_value(&b.value, &a.value), "KV {:?} changed in the round trip", a.key);
    }
    assert_eq!(back.tensors.len(), g.tensors.len());
    let mut offset = 0u64;
    for (b, a) in back.tensors.iter().zip(&g.tensors) {
        assert_eq!((b.name, b.dims(), b.ggml_type), (a.name, a.dims(), a.ggml_type));
        assert_eq!((b.n_elements, b.n_bytes, b.info_offset), (a.n_elements, a.n_bytes, a.info_offset));
        assert_eq!(b.offset, offset, "tensors are laid out in order");
        offset += b.n_bytes.next_multiple_of(g.alignment);
        assert_eq!(back.tensor_data(b), g.tensor_data(a), "tensor {:?} data changed", a.name);
    }
    let again = rewrite(&back).expect("the writer takes its own output");
    assert!(again == out, "writing the written file again changed it");
}
