//! Replays every input in `tests/regressions/` through the same drain logic as the `trace_reader` fuzz target
//! (`tests/drain/mod.rs`), with the shared loop of `fuzz_replay`. To add one: copy
//! `fuzz/artifacts/trace_reader/crash-<sha1>` to `tests/regressions/trace_reader-<first 8 hex digits>.bin`, fix
//! the reader, run this test.

mod drain;

use std::path::Path;

#[test]
fn every_regression_input_drains_without_panicking() {
    fuzz_replay::replay(&Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/regressions"), drain::TARGETS);
}

/// The real trace of tests/data, and the shapes of issue 21 built here: counts at u64::MAX, many warnings, a
/// crash record repeated past what a folding reader keeps.
#[test]
fn real_and_hostile_traces_drain() {
    let real = std::fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/v1-graph-cuda.jsonl")).unwrap();
    drain::trace_reader(&real);
    let header =
        r#"{"format":"backscope-trace","version":3,"pid":1,"ppid":0,"exe":"x","clock":"monotonic","start_ns":0}"#;
    let mut text = format!("{header}\n{{\"kernel\":1,\"name\":\"k\",\"api\":\"hip\"}}\n");
    for i in 0..300u64 {
        text += &format!("{{\"window\":[{i},{}],\"counts\":[[1,{}]]}}\n", i + 1, u64::MAX - i);
        text += "{\"warning\":\"w\",\"detail\":\"d\"}\n";
        text += &format!(
            "{{\"crash\":6,\"seq\":{i},\"signal_name\":\"SIGABRT\",\"code\":-6,\"addr\":0,\"at_ns\":{i},\"tid\":1,\"flushed\":true,\"threads\":[]}}\n"
        );
    }
    drain::trace_reader(text.as_bytes());
    let folded = trace_reader::TraceFile::parse_folded(&text).unwrap();
    assert_eq!(folded.total_launches(trace_reader::Range::All), u64::MAX);
    assert_eq!(folded.crashes.len(), trace_reader::MAX_KEPT);
    assert_eq!(folded.crashes.last().unwrap().seq, 299);
}
