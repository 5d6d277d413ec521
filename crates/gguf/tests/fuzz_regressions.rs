//! Replays every input in `tests/regressions/` through the same drain logic as the fuzz targets
//! (`tests/drain/mod.rs`), with the shared loop of `fuzz_replay`. To add one: copy
//! `fuzz/artifacts/<target>/crash-<sha1>` to `tests/regressions/<target>-<first 8 hex digits of the sha1>.bin`,
//! fix the decoder, run this test.

mod drain;

use std::path::Path;

#[test]
fn every_regression_input_drains_without_panicking() {
    fuzz_replay::replay(&Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/regressions"), drain::TARGETS);
}

/// The hand-made inputs (tests/regressions/README.md) read as they were built to: offsets and counts from
/// the encoder that wrote them, not from this reader.
#[test]
fn hand_made_inputs_read_as_built() {
    use gguf::Gguf;
    let read = |name: &str| {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/regressions").join(name);
        std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    };
    for (name, offset, field) in [("gguf-1ddbfe66.bin", 8, "tensor count"), ("gguf-38a73f06.bin", 37 + 8 * 12, "array")]
    {
        let e = Gguf::parse(&read(name)).expect_err(name);
        assert_eq!((e.offset, e.field), (offset, field), "{name}: {e}");
    }
    for (name, tensors, alignment) in [
        ("gguf-7de97377.bin", 4096, 32),
        ("gguf-aebe772a.bin", 0, 1 << 31),
        ("gguf-44374cc6.bin", 0, 32),
        ("gguf-b3e7d1e4.bin", 3, 64),
        ("gguf-a9aa4665.bin", 1, 32),
        ("gguf-e37d3f4d.bin", 1, 32),
    ] {
        let bytes = read(name);
        let g = Gguf::parse(&bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!((g.tensors.len(), g.alignment), (tensors, alignment), "{name}");
    }
}
