//! Replays every input in `tests/regressions/` through the same drain logic as the fuzz targets
//! (`tests/drain/mod.rs`). Files are named `<target>-<short hash>.bin`, where `<target>` is a fuzz target
//! in `fuzz/fuzz_targets/`: crash, timeout and OOM reproducers found by `scripts/fuzz.sh`, plus
//! hand-made hostile inputs. To add one: copy `fuzz/artifacts/<target>/crash-<sha1>` to
//! `tests/regressions/<target>-<first 8 hex digits of the sha1>.bin`, fix the decoder, run this test.

mod drain;

use std::panic;
use std::path::Path;
use std::time::{Duration, Instant};

/// A regression input that takes longer than this (in a debug build) is a slowness regression.
const MAX_TIME_PER_INPUT: Duration = Duration::from_secs(20);

#[test]
fn every_regression_input_drains_without_panicking() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/regressions");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()))
        .map(|entry| entry.expect("directory entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "bin"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no regression inputs in {}", dir.display());

    let mut failures = Vec::new();
    for path in &files {
        let name = path.file_name().and_then(|n| n.to_str()).expect("UTF-8 file name");
        let target = name.rsplit_once('-').map(|(t, _)| t).unwrap_or_default();
        let Some(&(_, drain)) = drain::TARGETS.iter().find(|(t, _)| *t == target) else {
            panic!("{name}: the name must start with a fuzz target name: one of {:?}", target_names());
        };
        let data = std::fs::read(path).expect("read regression input");
        let start = Instant::now();
        if let Err(panic) = panic::catch_unwind(|| drain(&data)) {
            let msg = panic.downcast_ref::<String>().map(String::as_str).or(panic.downcast_ref::<&str>().copied());
            failures.push(format!("{name}: panicked: {}", msg.unwrap_or("(non-string panic)")));
        }
        let took = start.elapsed();
        if took > MAX_TIME_PER_INPUT {
            failures.push(format!("{name}: took {took:?}"));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} regression inputs failed:\n{}",
        failures.len(),
        files.len(),
        failures.join("\n")
    );
}

fn target_names() -> Vec<&'static str> {
    drain::TARGETS.iter().map(|(t, _)| *t).collect()
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
