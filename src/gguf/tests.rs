//! Reader/writer round trips and hostile inputs. Comparisons against the independent reader (gguf-py) and
//! real files are in tests/gguf_synth.rs.

use super::*;

fn sample_tensors() -> Vec<TensorSpec> {
    vec![
        TensorSpec::new("a.f32", &[3], GgmlType::F32),
        TensorSpec::new("b.f16", &[4, 2], GgmlType::F16),
        TensorSpec::new("empty", &[0, 5], GgmlType::F32),
        TensorSpec::new("c.q4k", &[256, 2], GgmlType::Q4_K),
        TensorSpec::new("d.q80", &[32, 1, 1, 3], GgmlType::Q8_0),
    ]
}

/// A valid file with every value type, nested and empty arrays, alignment 64 and five tensors, written in
/// uneven chunks. Returns the bytes and the tensor data written.
fn sample_file() -> (Vec<u8>, Vec<Vec<u8>>) {
    let strings = ArrayBuf::strings(["<unk>", "<s>", "", "héllo"]);
    let inner_a = ArrayBuf::from_values(ValueType::U16, [Value::U16(1), Value::U16(2)]).unwrap();
    let inner_b = ArrayBuf::new(ValueType::U16);
    let nested = ArrayBuf::from_values(ValueType::Array, [inner_a.value(), inner_b.value()]).unwrap();
    let empty = ArrayBuf::new(ValueType::String);
    let ints = ArrayBuf::from_values(ValueType::I32, (0..5).map(|i| Value::I32(i - 2))).unwrap();
    let kvs = vec![
        ("general.architecture", Value::String(b"llama")),
        ("general.alignment", Value::U32(64)),
        ("llama.block_count", Value::U32(4)),
        ("llama.embedding_length", Value::U64(256)),
        ("llama.attention.head_count", Value::I32(8)),
        ("llama.context_length", Value::U16(2048)),
        ("t.u8", Value::U8(255)),
        ("t.i8", Value::I8(-128)),
        ("t.i16", Value::I16(-2)),
        ("t.i64", Value::I64(i64::MIN)),
        ("t.f32", Value::F32(1e-5)),
        ("t.f64", Value::F64(-0.25)),
        ("t.bool", Value::Bool(true)),
        ("t.non_utf8", Value::String(b"\xff\xfe")),
        ("tokenizer.ggml.tokens", strings.value()),
        ("t.nested", nested.value()),
        ("t.empty", empty.value()),
        ("t.ints", ints.value()),
    ];
    let tensors = sample_tensors();
    let data: Vec<Vec<u8>> =
        tensors.iter().enumerate().map(|(i, t)| vec![i as u8 + 1; t.n_bytes().unwrap() as usize]).collect();
    let mut w = GgufWriter::new(Vec::new(), &kvs, &tensors).unwrap();
    let all: Vec<u8> = data.concat();
    for chunk in all.chunks(7) {
        w.write_data(chunk).unwrap();
    }
    (w.finish().unwrap(), data)
}

#[test]
fn round_trip_every_value_type_and_tensor_layout() {
    let (bytes, data) = sample_file();
    let g = Gguf::parse(&bytes).unwrap();
    assert_eq!(g.version, 3);
    assert_eq!(g.alignment, 64);
    assert_eq!(g.data_offset % 64, 0);
    assert_eq!(g.architecture(), Some("llama"));
    assert_eq!(g.block_count(), Some(4));
    assert_eq!(g.offloadable_layers(), Some(5));
    assert_eq!(g.embedding_length(), Some(256));
    assert_eq!(g.head_count(), Some(8));
    assert_eq!(g.head_count_kv(), Some(8), "defaults to the head count");
    assert_eq!(g.context_length(), Some(2048));
    assert_eq!(g.vocab_size(), Some(4));
    assert_eq!(g.get("t.u8"), Some(&Value::U8(255)));
    assert_eq!(g.get("t.i8"), Some(&Value::I8(-128)));
    assert_eq!(g.get("t.i16"), Some(&Value::I16(-2)));
    assert_eq!(g.get("t.i64"), Some(&Value::I64(i64::MIN)));
    assert_eq!(g.get("t.f32"), Some(&Value::F32(1e-5)));
    assert_eq!(g.get("t.f64"), Some(&Value::F64(-0.25)));
    assert_eq!(g.get("t.bool"), Some(&Value::Bool(true)));
    assert_eq!(g.get("t.non_utf8"), Some(&Value::String(b"\xff\xfe")));
    let toks: Vec<&[u8]> = g.get("tokenizer.ggml.tokens").unwrap().as_array().unwrap().strings().unwrap().collect();
    assert_eq!(toks, [&b"<unk>"[..], b"<s>", b"", "héllo".as_bytes()]);
    let nested = g.get("t.nested").unwrap().as_array().unwrap();
    assert_eq!((nested.elem, nested.len), (ValueType::Array, 2));
    let inner: Vec<Vec<Value>> = nested.iter().map(|v| v.as_array().unwrap().iter().collect()).collect();
    assert_eq!(inner, vec![vec![Value::U16(1), Value::U16(2)], vec![]]);
    assert_eq!(g.get("t.empty").unwrap().as_array().unwrap().len, 0);
    let ints: Vec<Value> = g.get("t.ints").unwrap().as_array().unwrap().iter().collect();
    assert_eq!(ints, (0..5).map(|i| Value::I32(i - 2)).collect::<Vec<_>>());

    let specs = sample_tensors();
    assert_eq!(g.tensors.len(), specs.len());
    for ((t, s), d) in g.tensors.iter().zip(&specs).zip(&data) {
        assert_eq!((t.name, &t.dims, t.ggml_type), (s.name.as_str(), &s.dims, s.ggml_type));
        assert_eq!(t.offset % 64, 0);
        assert_eq!(g.tensor_data(t).unwrap(), &d[..], "{}", t.name);
    }
    let q4k = g.tensor("c.q4k").unwrap();
    assert_eq!((q4k.n_elements, q4k.n_bytes), (512, 2 * 144));
    assert_eq!(g.n_params(), 3 + 8 + 512 + 96);
    let totals = g.type_totals();
    assert_eq!(totals[&GgmlType::F32].tensors, 2);
    assert_eq!(totals[&GgmlType::Q8_0].bytes, 3 * 34);
    // Every tensor, the last one included, is padded: the file ends on the alignment.
    assert_eq!(bytes.len() % 64, 0);
}

#[test]
fn writer_rejects_bad_specs_and_incomplete_data() {
    let long = "x".repeat(MAX_TENSOR_NAME);
    for bad in [
        TensorSpec::new(long.as_str(), &[1], GgmlType::F32),
        TensorSpec::new("q", &[100], GgmlType::Q4_K),
        TensorSpec::new("d", &[1, 1, 1, 1, 1], GgmlType::F32),
        TensorSpec::new("u", &[1], GgmlType(99)),
    ] {
        assert!(GgufWriter::new(Vec::new(), &[], std::slice::from_ref(&bad)).is_err(), "{bad:?}");
    }
    assert!(GgufWriter::new(Vec::new(), &[("general.alignment", Value::U32(3))], &[]).is_err());
    assert!(GgufWriter::new(Vec::new(), &[("k", Value::U8(1)), ("k", Value::U8(2))], &[]).is_err());
    let t = [TensorSpec::new("a", &[4], GgmlType::F32)];
    let mut w = GgufWriter::new(Vec::new(), &[], &t).unwrap();
    w.write_data(&[0; 8]).unwrap();
    assert!(w.finish().is_err(), "8 of 16 bytes");
    let mut w = GgufWriter::new(Vec::new(), &[], &t).unwrap();
    assert!(w.write_data(&[0; 17]).is_err(), "one byte too many");
}

#[test]
fn truncation_at_every_cut_point_is_an_error() {
    let (bytes, _) = sample_file();
    let g = Gguf::parse(&bytes).unwrap();
    let last = g.tensors.iter().map(|t| g.data_offset + t.offset + t.n_bytes).max().unwrap();
    for cut in 0..bytes.len() {
        let r = Gguf::parse(&bytes[..cut]);
        if (cut as u64) < last {
            let e = r.expect_err(&format!("cut at {cut} must fail"));
            if (cut as u64) < g.header_end {
                // A field that runs past the end is reported where it starts.
                assert!(e.offset <= cut as u64, "cut {cut}: error offset {} is past the cut: {e}", e.offset);
            } else {
                assert!(e.field.ends_with("data") && e.problem.contains("truncated"), "cut {cut}: {e}");
            }
        } else {
            // Only trailing padding was cut.
            assert!(r.is_ok(), "cut {cut}: {:?}", r.err());
        }
    }
}

/// A header with the given counts followed by `rest`.
fn header(version: u32, tensors: u64, kvs: u64, rest: &[u8]) -> Vec<u8> {
    let mut b = b"GGUF".to_vec();
    b.extend_from_slice(&version.to_le_bytes());
    b.extend_from_slice(&tensors.to_le_bytes());
    b.extend_from_slice(&kvs.to_le_bytes());
    b.extend_from_slice(rest);
    b
}

fn kv_bytes(key: &str, ty: u32, value: &[u8]) -> Vec<u8> {
    let mut b = (key.len() as u64).to_le_bytes().to_vec();
    b.extend_from_slice(key.as_bytes());
    b.extend_from_slice(&ty.to_le_bytes());
    b.extend_from_slice(value);
    b
}

fn tensor_bytes(name: &str, dims: &[u64], ty: u32, offset: u64) -> Vec<u8> {
    let mut b = (name.len() as u64).to_le_bytes().to_vec();
    b.extend_from_slice(name.as_bytes());
    b.extend_from_slice(&(dims.len() as u32).to_le_bytes());
    for d in dims {
        b.extend_from_slice(&d.to_le_bytes());
    }
    b.extend_from_slice(&ty.to_le_bytes());
    b.extend_from_slice(&offset.to_le_bytes());
    b
}

fn err(bytes: &[u8]) -> GgufError {
    Gguf::parse(bytes).expect_err("hostile input must be an error")
}

#[test]
fn hostile_headers() {
    let e = err(&header(3, 1 << 63, 0, &[0; 100]));
    assert_eq!((e.offset, e.field.as_str()), (8, "tensor count"));
    assert!(e.problem.contains("9223372036854775808 tensors cannot fit"), "{e}");
    let e = err(&header(3, 0, u64::MAX, &[]));
    assert_eq!((e.offset, e.field.as_str()), (16, "KV count"));
    assert!(err(b"GGML\x03\0\0\0").problem.contains("expected \"GGUF\""));
    assert!(err(&header(1, 0, 0, &[])).problem.contains("v1"));
    assert!(err(&header(3u32.swap_bytes(), 0, 0, &[])).problem.contains("big-endian"));
    assert!(err(&header(4, 0, 0, &[])).problem.contains("expected 2 or 3"));
    assert!(err(b"").problem.contains("expected 4 bytes"));
    assert!(Gguf::parse(&header(2, 0, 0, &[])).is_ok(), "v2 has the same layout as v3");
}

#[test]
fn hostile_strings_and_arrays() {
    // A key whose length runs past the end of the file.
    let mut kv = (1u64 << 40).to_le_bytes().to_vec();
    kv.extend_from_slice(b"abc\0\0\0\0\0\0\0\0\0\0\0\0\0");
    let e = err(&header(3, 0, 1, &kv));
    assert_eq!(e.offset, 24);
    assert!(e.field.starts_with("kv[0]") && e.field.ends_with("key length"), "{e}");
    assert!(e.problem.contains("1099511627776 bytes, but only 16 bytes are left"), "{e}");
    // A string value past the end.
    let e = err(&header(3, 0, 1, &kv_bytes("k", 8, &u64::MAX.to_le_bytes())));
    assert!(e.field.contains("'k'") && e.problem.contains("only 0 bytes are left"), "{e}");
    // An array claiming 2^62 u32 elements.
    let mut arr = 4u32.to_le_bytes().to_vec();
    arr.extend_from_slice(&(1u64 << 62).to_le_bytes());
    let e = err(&header(3, 0, 1, &kv_bytes("k", 9, &arr)));
    assert!(e.problem.contains("4611686018427387904 elements"), "{e}");
    // An array of strings whose 2nd element's length runs past the end.
    let mut arr = 8u32.to_le_bytes().to_vec();
    arr.extend_from_slice(&2u64.to_le_bytes());
    arr.extend_from_slice(&1u64.to_le_bytes());
    arr.push(b'a');
    arr.extend_from_slice(&1000u64.to_le_bytes());
    arr.extend_from_slice(&[0; 8]);
    let e = err(&header(3, 0, 1, &kv_bytes("tok", 9, &arr)));
    assert!(e.field.contains("'tok' > element 1 > string length"), "{e}");
    // Arrays nested past the depth limit: each level is a one-element array of arrays.
    let mut deep = Vec::new();
    for _ in 0..MAX_ARRAY_DEPTH + 2 {
        deep.extend_from_slice(&9u32.to_le_bytes());
        deep.extend_from_slice(&1u64.to_le_bytes());
    }
    deep.extend_from_slice(&[0; 64]);
    let e = err(&header(3, 0, 1, &kv_bytes("d", 9, &deep)));
    assert!(e.problem.contains("nested deeper"), "{e}");
    // Bad type tags and values.
    assert!(err(&header(3, 0, 1, &kv_bytes("k", 13, &[0; 8]))).problem.contains("found 13"));
    assert!(err(&header(3, 0, 1, &kv_bytes("k", 7, &[2]))).problem.contains("expected 0 or 1"));
    assert!(err(&header(3, 0, 1, &kv_bytes("", 0, &[1]))).problem.contains("non-empty"));
    let two = [kv_bytes("k", 0, &[1]), kv_bytes("k", 0, &[2])].concat();
    assert!(err(&header(3, 0, 2, &two)).problem.contains("duplicate key"));
    let e = err(&header(3, 0, 1, &kv_bytes("general.alignment", 10, &64u64.to_le_bytes())));
    assert!(e.problem.contains("UINT32"), "{e}");
    let e = err(&header(3, 0, 1, &kv_bytes("general.alignment", 4, &48u32.to_le_bytes())));
    assert!(e.problem.contains("power of two"), "{e}");
    let mut bad_key = 2u64.to_le_bytes().to_vec();
    bad_key.extend_from_slice(b"\xff\xff");
    bad_key.extend_from_slice(&0u32.to_le_bytes());
    bad_key.push(0);
    assert!(err(&header(3, 0, 1, &bad_key)).problem.contains("UTF-8"));
}

#[test]
fn hostile_tensor_infos() {
    let pad = [0u8; 64];
    let one = |t: Vec<u8>| [t, pad.to_vec()].concat();
    let e = err(&header(3, 1, 0, &one(tensor_bytes("t", &[1, 1, 1, 1, 1], 0, 0))));
    assert!(e.field.contains("'t' n_dims") && e.problem.contains("at most 4"), "{e}");
    let e = err(&header(3, 1, 0, &one(tensor_bytes("t", &[1 << 63], 0, 0))));
    assert!(e.problem.contains("int64"), "{e}");
    let e = err(&header(3, 1, 0, &one(tensor_bytes("t", &[1 << 40, 1 << 40], 0, 0))));
    assert!(e.problem.contains("overflows"), "{e}");
    let e = err(&header(3, 1, 0, &one(tensor_bytes("t", &[4], 99, 0))));
    assert!(e.problem.contains("unknown ggml type 99"), "{e}");
    let e = err(&header(3, 1, 0, &one(tensor_bytes("t", &[100], 12, 0))));
    assert!(e.problem.contains("whole blocks of 256"), "{e}");
    let e = err(&header(3, 1, 0, &one(tensor_bytes("t", &[4], 0, 8))));
    assert!(e.problem.contains("multiple of the alignment 32"), "{e}");
    // Data past the end of the file: 2^20 F32 elements in a file of a few hundred bytes.
    let e = err(&header(3, 1, 0, &one(tensor_bytes("t", &[1 << 20], 0, 0))));
    assert!(e.field.contains("'t' data") && e.problem.contains("truncated"), "{e}");
    // An offset so large that data_offset + offset overflows.
    let e = err(&header(3, 1, 0, &one(tensor_bytes("t", &[1], 0, u64::MAX - 31))));
    assert!(e.field.contains("data"), "{e}");
    let two = [tensor_bytes("t", &[1], 0, 0), tensor_bytes("t", &[1], 0, 32), pad.to_vec()].concat();
    assert!(err(&header(3, 2, 0, &two)).problem.contains("duplicate tensor name"));
}

/// Deterministic byte flips over a valid file: every outcome is Ok or a described error, never a panic.
#[test]
fn mutated_files_never_panic() {
    let (bytes, _) = sample_file();
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let header_end = Gguf::parse(&bytes).unwrap().header_end as usize;
    for _ in 0..20_000 {
        let mut m = bytes.clone();
        for _ in 0..1 + next() % 4 {
            let i = (next() % header_end as u64) as usize;
            m[i] = match next() % 3 {
                0 => next() as u8,
                1 => 0xff,
                _ => m[i] ^ (1 << (next() % 8)),
            };
        }
        if let Ok(g) = Gguf::parse(&m) {
            // Whatever parsed must be internally consistent.
            for t in &g.tensors {
                assert!(g.tensor_data(t).is_some());
            }
            for kv in &g.kvs {
                if let Value::Array(a) = kv.value {
                    assert_eq!(a.iter().count() as u64, a.len);
                }
            }
        }
    }
}

/// The size table and the project's ggml type table (data/ggml_types.toml, from ggml.h) agree on names.
#[test]
fn type_table_matches_knowledge_file() {
    let known = crate::knowledge::ggml_types();
    for (t, info) in GgmlType::all() {
        assert_eq!(known.name(t.0), Some(info.name), "ggml type {}", t.0);
    }
    for v in 0..64u32 {
        assert_eq!(known.name(v).is_some(), GgmlType(v).info().is_some(), "ggml type {v}");
    }
}
