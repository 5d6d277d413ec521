//! Reader/writer round trips and hostile inputs. Comparisons against the independent reader (gguf-py) and
//! real files are in tests/synth/gguf.rs.

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
        assert_eq!((t.name, t.dims(), t.ggml_type), (s.name.as_str(), &s.dims[..], s.ggml_type));
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
                // Reported at the tensor info's offset field, with the end the data would need.
                assert!(matches!(e.entry, Entry::Tensor { .. }), "cut {cut}: {e}");
                assert!(e.field == "data end" && e.expected.contains("truncated"), "cut {cut}: {e}");
                assert!(e.offset < g.header_end && e.found > Some(cut as u64), "cut {cut}: {e}");
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

fn err(bytes: &[u8]) -> Error {
    Gguf::parse(bytes).expect_err("hostile input must be an error")
}

/// The error as a person sees it: with the key or tensor name read back from the file.
fn named(bytes: &[u8]) -> String {
    err(bytes).with_names(bytes).to_string()
}

#[test]
fn hostile_headers() {
    let e = err(&header(3, 1 << 63, 0, &[0; 100]));
    assert_eq!((e.offset, e.entry, e.field, e.found), (8, Entry::Header, "tensor count", Some(1 << 63)));
    assert_eq!(
        e.to_string(),
        "GGUF offset 8 (0x8), tensor count: expected a count of tensor infos (24 bytes each at least) that fits in \
         the bytes after the header, found 9223372036854775808"
    );
    let e = err(&header(3, 0, u64::MAX, &[]));
    assert_eq!((e.offset, e.field, e.found), (16, "KV count", Some(u64::MAX)));
    let e = err(b"GGML\x03\0\0\0");
    assert_eq!((e.offset, e.field), (0, "magic"));
    assert!(e.expected.contains("\"GGUF\""), "{e}");
    let e = err(&header(1, 0, 0, &[]));
    assert_eq!((e.offset, e.field, e.found), (4, "version", Some(1)));
    assert!(e.expected.contains("v1"), "{e}");
    let e = err(&header(3u32.swap_bytes(), 0, 0, &[]));
    assert_eq!((e.field, e.found), ("version", Some(0x0300_0000)));
    assert!(e.expected.contains("big-endian"), "{e}");
    let e = err(&header(4, 0, 0, &[]));
    assert_eq!((e.field, e.expected, e.found), ("version", "2 or 3", Some(4)));
    let e = err(b"");
    assert_eq!((e.offset, e.field, e.expected), (0, "magic", "4 bytes before the end of the file (truncated?)"));
    assert!(Gguf::parse(&header(2, 0, 0, &[])).is_ok(), "v2 has the same layout as v3");
}

#[test]
fn hostile_strings_and_arrays() {
    let kv0 = Entry::Kv { index: 0, at: 24 };
    // A key whose length runs past the end of the file.
    let mut kv = (1u64 << 40).to_le_bytes().to_vec();
    kv.extend_from_slice(b"abc\0\0\0\0\0\0\0\0\0\0\0\0\0");
    let e = err(&header(3, 0, 1, &kv));
    assert_eq!((e.offset, e.entry, e.field, e.found), (24, kv0, "key length", Some(1 << 40)));
    assert_eq!(e.expected, "a length within the bytes left in the file");
    // A string value past the end: key length 8 + key 1 + type 4 after the header.
    let e = err(&header(3, 0, 1, &kv_bytes("k", 8, &u64::MAX.to_le_bytes())));
    assert_eq!((e.offset, e.entry, e.field, e.found), (37, kv0, "string length", Some(u64::MAX)));
    assert!(named(&header(3, 0, 1, &kv_bytes("k", 8, &u64::MAX.to_le_bytes()))).contains("kv[0] 'k' > string length"));
    // An array claiming 2^62 u32 elements; its length field follows the element type at 37.
    let mut arr = 4u32.to_le_bytes().to_vec();
    arr.extend_from_slice(&(1u64 << 62).to_le_bytes());
    let e = err(&header(3, 0, 1, &kv_bytes("k", 9, &arr)));
    assert_eq!((e.offset, e.field, e.found), (41, "array length", Some(1 << 62)));
    // An array of strings whose 2nd element's length runs past the end.
    let mut arr = 8u32.to_le_bytes().to_vec();
    arr.extend_from_slice(&2u64.to_le_bytes());
    arr.extend_from_slice(&1u64.to_le_bytes());
    arr.push(b'a');
    arr.extend_from_slice(&1000u64.to_le_bytes());
    arr.extend_from_slice(&[0; 8]);
    let file = header(3, 0, 1, &kv_bytes("tok", 9, &arr));
    let e = err(&file);
    assert_eq!((e.entry, e.element, e.field, e.found), (kv0, Some(1), "string length", Some(1000)));
    let text = named(&file);
    assert!(text.contains("kv[0] 'tok' > element 1 > string length: expected a length within"), "{text}");
    // Arrays nested past the depth limit: each level is a one-element array of arrays.
    let mut deep = Vec::new();
    for _ in 0..MAX_ARRAY_DEPTH + 2 {
        deep.extend_from_slice(&9u32.to_le_bytes());
        deep.extend_from_slice(&1u64.to_le_bytes());
    }
    deep.extend_from_slice(&[0; 64]);
    let e = err(&header(3, 0, 1, &kv_bytes("d", 9, &deep)));
    assert_eq!((e.field, e.element), ("array", Some(0)));
    assert!(e.expected.contains(&format!("at most {MAX_ARRAY_DEPTH} deep")), "{e}");
    // Bad type tags and values.
    let e = err(&header(3, 0, 1, &kv_bytes("k", 13, &[0; 8])));
    assert_eq!((e.offset, e.field, e.found), (33, "value type", Some(13)));
    let e = err(&header(3, 0, 1, &kv_bytes("k", 7, &[2])));
    assert_eq!((e.offset, e.field, e.expected, e.found), (37, "bool", "0 or 1", Some(2)));
    let mut bools = 7u32.to_le_bytes().to_vec();
    bools.extend_from_slice(&3u64.to_le_bytes());
    bools.extend_from_slice(&[1, 0, 5]);
    let e = err(&header(3, 0, 1, &kv_bytes("k", 9, &bools)));
    assert_eq!((e.offset, e.element, e.field, e.found), (51, Some(2), "bool", Some(5)));
    let e = err(&header(3, 0, 1, &kv_bytes("", 0, &[1])));
    assert_eq!((e.entry, e.field, e.expected), (kv0, "key", "a non-empty key"));
    let two = [kv_bytes("k", 0, &[1]), kv_bytes("k", 0, &[2])].concat();
    let e = err(&header(3, 0, 2, &two));
    assert_eq!((e.entry, e.field), (Entry::Kv { index: 1, at: 38 }, "key"));
    assert!(e.expected.contains("no earlier KV"), "{e}");
    let e = err(&header(3, 0, 1, &kv_bytes("general.alignment", 10, &64u64.to_le_bytes())));
    assert_eq!((e.offset, e.field, e.found), (24 + 8 + 17, "value type", Some(10)));
    assert!(e.expected.contains("UINT32"), "{e}");
    let e = err(&header(3, 0, 1, &kv_bytes("general.alignment", 4, &48u32.to_le_bytes())));
    assert_eq!((e.offset, e.field, e.found), (24 + 8 + 17 + 4, "value", Some(48)));
    assert!(e.expected.contains("power of two"), "{e}");
    let mut bad_key = 2u64.to_le_bytes().to_vec();
    bad_key.extend_from_slice(b"\xff\xff");
    bad_key.extend_from_slice(&0u32.to_le_bytes());
    bad_key.push(0);
    let e = err(&header(3, 0, 1, &bad_key));
    assert_eq!((e.offset, e.field, e.expected), (24, "key", "UTF-8 text"));
}

#[test]
fn hostile_tensor_infos() {
    let pad = [0u8; 64];
    let one = |t: Vec<u8>| header(3, 1, 0, &[t, pad.to_vec()].concat());
    let t0 = Entry::Tensor { index: 0, at: 24 };
    // The info of a tensor named "t": name length at 24, name at 32, n_dims at 33, dims from 37.
    let file = one(tensor_bytes("t", &[1, 1, 1, 1, 1], 0, 0));
    let e = err(&file);
    assert_eq!((e.offset, e.entry, e.field, e.found), (33, t0, "n_dims", Some(5)));
    assert!(named(&file).contains("tensor[0] 't' > n_dims: expected at most 4 dimensions"), "{}", named(&file));
    let e = err(&one(tensor_bytes("t", &[1 << 63], 0, 0)));
    assert_eq!((e.offset, e.field, e.found), (37, "dims", Some(1 << 63)));
    assert!(e.expected.contains("int64"), "{e}");
    let e = err(&one(tensor_bytes("t", &[1 << 40, 1 << 40], 0, 0)));
    assert_eq!((e.offset, e.field), (45, "dims"));
    assert!(e.expected.contains("fits in 64 bits"), "{e}");
    let e = err(&one(tensor_bytes("t", &[4], 99, 0)));
    assert_eq!((e.offset, e.field, e.found), (45, "type", Some(99)));
    // Q4_K (12) has blocks of 256 elements (ggml.c type_traits).
    let e = err(&one(tensor_bytes("t", &[100], 12, 0)));
    assert_eq!((e.offset, e.field, e.found), (37, "dims[0]", Some(100)));
    assert!(e.expected.contains("whole number of the type's blocks"), "{e}");
    let e = err(&one(tensor_bytes("t", &[4], 0, 8)));
    assert_eq!((e.offset, e.field, e.found), (49, "offset", Some(8)));
    assert!(e.expected.contains("multiple of the alignment"), "{e}");
    // Data past the end of the file: 2^20 F32 elements in a file of a few hundred bytes. The info ends at 57,
    // so the data section starts at 64 and the data would end at 64 + 4 MiB.
    let e = err(&one(tensor_bytes("t", &[1 << 20], 0, 0)));
    assert_eq!((e.offset, e.entry, e.field, e.found), (49, t0, "data end", Some(64 + (4 << 20))));
    assert!(e.expected.contains("truncated"), "{e}");
    // An offset so large that data_offset + offset overflows.
    let e = err(&one(tensor_bytes("t", &[1], 0, u64::MAX - 31)));
    assert_eq!((e.field, e.found), ("data end", None));
    assert!(e.expected.contains("fits in 64 bits"), "{e}");
    let two = [tensor_bytes("t", &[1], 0, 0), tensor_bytes("t", &[1], 0, 32), pad.to_vec()].concat();
    let e = err(&header(3, 2, 0, &two));
    assert_eq!((e.entry, e.field), (Entry::Tensor { index: 1, at: 24 + 33 }, "name"));
    assert!(e.expected.contains("no earlier tensor"), "{e}");
}

#[test]
fn array_new_checks_payloads() {
    // Two strings: u64 length 1, "a", u64 length 2, "bc" (19 bytes).
    let strings = ArrayBuf::strings(["a", "bc"]);
    let a = strings.as_array();
    assert_eq!(Array::new(ValueType::String, 2, a.payload), Ok(a));
    let e = Array::new(ValueType::String, 2, &a.payload[..18]).unwrap_err();
    assert_eq!(
        (e.offset, e.entry, e.element, e.field, e.found),
        (9, Entry::Payload, Some(1), "string length", Some(2))
    );
    let e = Array::new(ValueType::String, 1, a.payload).unwrap_err();
    assert_eq!((e.offset, e.field, e.found), (9, "trailing bytes", Some(10)));
    assert_eq!(
        e.to_string(),
        "GGUF offset 9 (0x9), array payload > trailing bytes: expected none after the last element, found 10"
    );
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
        let parsed = Gguf::parse(&m);
        if let Err(e) = &parsed {
            // An error names a field that starts inside the file, and its message can be built.
            assert!(e.offset <= m.len() as u64, "{e}");
            assert!(!e.with_names(&m).to_string().is_empty());
        }
        if let Ok(g) = parsed {
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
