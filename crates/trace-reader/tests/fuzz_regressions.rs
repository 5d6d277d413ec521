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

/// A rotating trace's segments in one input (the drain splits it before each header and joins the parts): segment
/// numbers at the ends of their range, a contradicting definition, a repeated segment, records after `rotated`.
#[test]
fn hostile_segments_drain() {
    let header = |k: u32, pid: u32| {
        format!(
            r#"{{"format":"backscope-trace","version":4,"pid":{pid},"ppid":0,"exe":"x","clock":"monotonic","start_ns":0,"segment":{k},"segments_kept":2,"segment_max_bytes":16384}}"#
        )
    };
    let mut text = String::new();
    for (k, name) in [(0, "a"), (u32::MAX, "a"), (u32::MAX, "a"), (7, "b")] {
        text += &format!("{}\n{{\"kernel\":1,\"name\":\"{name}\",\"api\":\"hip\"}}\n", header(k, 1));
        text += &format!("{{\"window\":[{k},{}],\"counts\":[[1,{}]]}}\n", u64::from(k) + 1, u64::MAX - 1);
        text += "{\"rotated\":\"next\",\"at_ns\":1,\"bytes\":1}\n";
    }
    text += &format!("{}\n{{\"rotated\":\"n\",\"at_ns\":1,\"bytes\":1}}\n{{\"window\":[0,1]}}\n", header(3, 1));
    drain::trace_reader(text.as_bytes());
    let parts: Vec<trace_reader::TraceFile> = text
        .split_inclusive('\n')
        .fold(Vec::<String>::new(), |mut parts, line| {
            if line.starts_with("{\"format\"") {
                parts.push(String::new());
            }
            parts.last_mut().unwrap().push_str(line);
            parts
        })
        .iter()
        .filter_map(|p| trace_reader::TraceFile::parse(p).ok())
        .collect();
    assert_eq!(parts.len(), 4, "the part with a record after `rotated` is refused");
    let (joined, problems) = trace_reader::join_segments(parts);
    assert_eq!((joined.len(), problems.len()), (1, 2), "{problems:?}");
    let segments = joined[0].segments.as_ref().unwrap();
    assert_eq!(segments.missing(), [(1, u32::MAX - 1)], "a range, not a list of four billion");
    assert_eq!(joined[0].total_launches(trace_reader::Range::All), u64::MAX, "saturated");
}
