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
    // The fuzz seed with the Vulkan layer's order of dispatches (a MoE llama-bench impersonating the H200 on
    // lavapipe): its sequences, times their submissions, add up to the dispatches its windows counted.
    let seed = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/seeds/trace_reader/vulkan-order-moe-p9.jsonl");
    let seed = std::fs::read(seed).unwrap();
    drain::trace_reader(&seed);
    let trace = trace_reader::TraceFile::parse(std::str::from_utf8(&seed).unwrap()).unwrap();
    assert!(trace.order_recorded() && trace.sequences.len() > 1);
    let in_sequences: u64 = trace
        .sequence_submissions(trace_reader::Range::All)
        .iter()
        .map(|(id, n)| trace.sequences[id].dispatches() * n)
        .sum();
    assert_eq!(in_sequences, trace.total_launches(trace_reader::Range::All));
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

    // The Vulkan layer's order records at their limits: runs of u32::MAX dispatches, sequence counts at u64::MAX in
    // every window, and submissions whose order was not kept (sequence 0).
    let mut text = format!(
        "{}\n{{\"kernel\":1,\"name\":\"p\",\"api\":\"vulkan\"}}\n",
        header.replace('}', ",\"max_sequences\":4096}")
    );
    for id in 1..=200u32 {
        text += &format!("{{\"sequence\":{id},\"first_ns\":{id},\"runs\":[[1,{}],[1,1]]}}\n", u32::MAX);
        text += &format!("{{\"window\":[{id},{}],\"sequences\":[[{id},{}],[0,{}]]}}\n", id + 1, u64::MAX, u64::MAX);
    }
    drain::trace_reader(text.as_bytes());
    let folded = trace_reader::TraceFile::parse_folded(&text).unwrap();
    assert!(folded.order_recorded());
    assert_eq!(folded.sequences.len(), 200);
    assert_eq!(folded.sequences[&7].dispatches(), u64::from(u32::MAX) + 1);
    assert_eq!(folded.sequence_submissions(trace_reader::Range::All)[&0], u64::MAX);
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

/// The rotating-trace seeds of fuzz/seeds/trace_reader (the Vulkan layer on lavapipe, vkcrash.c 1,500 submissions
/// then SIGSEGV, a 48 KiB budget in 3 segments): they drain, and the two consecutive segments of one input join into
/// one process whose crash, in the newest, ended it.
#[test]
fn the_rotating_trace_seeds_drain_and_join() {
    let seeds = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/seeds/trace_reader");
    let one = std::fs::read(seeds.join("lavapipe-rotated-segment.jsonl")).unwrap();
    let two = std::fs::read(seeds.join("lavapipe-two-segments-crash.jsonl")).unwrap();
    drain::trace_reader(&one);
    drain::trace_reader(&two);
    let alone = trace_reader::TraceFile::parse(std::str::from_utf8(&one).unwrap()).unwrap();
    assert_eq!(
        (alone.header.segment, alone.rotated.as_ref().map(|r| r.next.as_str())),
        (Some(4), Some("trace-15370.s5.jsonl"))
    );
    let text = String::from_utf8(two).unwrap();
    let at = text.match_indices("{\"format\"").nth(1).unwrap().0;
    let parts = vec![
        trace_reader::TraceFile::parse(&text[..at]).unwrap(),
        trace_reader::TraceFile::parse(&text[at..]).unwrap(),
    ];
    let launches: u64 = parts.iter().map(|t| t.total_launches(trace_reader::Range::All)).sum();
    let (joined, problems) = trace_reader::join_segments(parts);
    assert!(problems.is_empty() && joined.len() == 1, "{problems:?}");
    let t = &joined[0];
    assert_eq!(t.total_launches(trace_reader::Range::All), launches);
    assert_eq!(t.segments.as_ref().unwrap().present.iter().map(|s| s.index).collect::<Vec<_>>(), [5, 6]);
    assert_eq!(t.fatal_crash().map(|c| (c.signal, c.queues[0].submits)), Some((11, 1500)));
    assert!(t.rotated_away().is_some(), "segments 0-4 are not in the input");
}
