//! Drain a byte string through the whole log pipeline and check the properties that must hold for any
//! input. Shared by the fuzz target `logs` (fuzz/fuzz_targets/logs.rs) and the regression tests.
//!
//! Properties: parsing in chunks gives the same events as parsing in one piece; line numbers count up
//! by one from 1; offsets increase and stay inside the input; no event's raw bytes exceed the line
//! cap; the analysis finishes and its report serialises; the crashes found do not depend on the crash cap
//! (past it crashes are counted, never merged). Limits are small so the caps are exercised.

#![allow(dead_code)]

use logs::{Analyzer, Limits, Parser};

/// Small caps, so that fuzz inputs reach them.
pub fn limits() -> Limits {
    Limits {
        max_line: 512,
        binary_probe: 64,
        timeline_head: 8,
        timeline_tail: 8,
        max_crashes: 4,
        max_frames: 6,
        max_causes: 4,
        max_ranges: 8,
        max_facts: 4,
    }
}

/// A compact fingerprint of one event, to compare two parses.
fn fingerprint(e: &logs::Event<'_>) -> (u64, u64, &'static str, Vec<u8>, Option<i64>) {
    (e.line, e.offset, e.kind.name(), e.raw.to_vec(), e.time.map(|t| t.micros))
}

/// Parse `data` whole and in chunks whose sizes come from the data's first byte; compare; analyse.
pub fn logs(data: &[u8]) {
    let limits = limits();
    let mut whole = Vec::new();
    let mut analyzer = Analyzer::new(limits);
    let uncapped_limits = Limits { max_crashes: usize::MAX, ..limits };
    let mut uncapped = Analyzer::new(uncapped_limits);
    let mut parser = Parser::new(limits);
    let first = parser.feed(data, |e| {
        whole.push(fingerprint(e));
        analyzer.event(e);
        uncapped.event(e);
    });
    let stats = match first {
        Ok(()) => parser.finish(|e| {
            whole.push(fingerprint(e));
            analyzer.event(e);
            uncapped.event(e);
        }),
        Err(e) => Err(e),
    };
    let chunk = usize::from(data.first().copied().unwrap_or(1) % 64).max(1);
    let mut pieces = Vec::new();
    let mut chunked = Parser::new(limits);
    let mut chunked_result = Ok(());
    for part in data.chunks(chunk) {
        chunked_result = chunked.feed(part, |e| pieces.push(fingerprint(e)));
        if chunked_result.is_err() {
            break;
        }
    }
    let chunked_stats = chunked_result.and_then(|()| chunked.finish(|e| pieces.push(fingerprint(e))));
    match (&stats, &chunked_stats) {
        (Ok(a), Ok(b)) => assert_eq!(a, b, "stats differ between whole and chunked parsing"),
        (Err(_), Err(_)) => {}
        _ => panic!("whole and chunked parsing disagree on failing"),
    }
    assert_eq!(whole, pieces, "events differ between whole and chunked parsing");
    let Ok(stats) = stats else { return };
    let mut prev_offset = None;
    for (i, (line, offset, _, raw, _)) in whole.iter().enumerate() {
        assert_eq!(*line, i as u64 + 1, "line numbers count up by one");
        assert!(prev_offset.is_none_or(|p| *offset > p), "offsets increase");
        assert!(*offset <= data.len() as u64, "offset inside the input");
        assert!(raw.len() <= limits.max_line, "raw line within the cap");
        prev_offset = Some(*offset);
    }
    assert_eq!(stats.lines, whole.len() as u64);
    let report = analyzer.finish(stats);
    let all = uncapped.finish(stats);
    assert!(report.timeline.len() <= limits.timeline_head + limits.timeline_tail);
    assert!(report.crashes.len() <= limits.max_crashes);
    assert_eq!(report.crashes_total, all.crashes.len() as u64, "the crash cap changed how many crashes there are");
    assert_eq!(report.crashes_total, report.crashes.len() as u64 + report.crashes_dropped);
    for (kept, c) in report.crashes.iter().zip(&all.crashes) {
        assert_eq!((kept.line, kept.last_line, &kept.signature.id), (c.line, c.last_line, &c.signature.id));
    }
    let grouped: u64 = report.signatures.iter().map(|g| g.count).sum::<u64>() + report.signatures_dropped;
    assert_eq!(grouped, report.crashes_total, "every crash is in one signature group or counted as ungrouped");
    for c in &report.crashes {
        assert!(c.frames.len() <= limits.max_frames);
        assert_eq!(c.signature.id.len(), 16);
    }
    let _ = logs::render::report_text(&report);
}

/// The /dev/kmsg record decoder (`logs::kmsg`) over the input, as one record and as a text of records: errors are
/// values naming a byte inside the input, records start at increasing offsets inside it, a record's text never holds
/// its newline, the dictionary's pairs come from its own lines, and a record parsed on its own reads the same.
/// Shared by the fuzz target `kmsg` (fuzz/fuzz_targets/kmsg.rs) and the regression replay.
pub fn kmsg(data: &[u8]) {
    use logs::kmsg::{parse_record, Records};
    match parse_record(data) {
        Ok(r) => {
            assert!(!r.text.contains(&b'\n'), "the text ends at the first newline");
            assert!(r.level <= 7);
            for (k, v) in r.dict() {
                assert!(!k.contains(&b'\n') && !v.contains(&b'\n'));
            }
        }
        Err(e) => assert!(e.offset <= data.len(), "{e}"),
    }
    let mut prev: Option<usize> = None;
    let mut n = 0usize;
    for (at, r) in Records::new(data) {
        assert!(prev.is_none_or(|p| at > p), "records start at increasing offsets");
        assert!(at < data.len(), "a record starts inside the input");
        match r {
            Ok(r) => {
                assert!(!r.text.contains(&b'\n'));
                // The record's own bytes parse alone to the same record.
                let end =
                    data[at..].windows(2).position(|w| w[0] == b'\n' && w[1] != b' ').map_or(data.len(), |i| at + i);
                let key = |r: &logs::kmsg::KmsgRecord<'_>| {
                    (r.level, r.facility, r.seq, r.usec, r.continuation, r.text.to_vec(), r.dict().count())
                };
                assert_eq!(parse_record(&data[at..end]).map(|x| key(&x)), Ok(key(&r)));
            }
            Err(e) => assert!(e.offset >= at && e.offset <= data.len(), "{e} at {at}"),
        }
        prev = Some(at);
        n += 1;
    }
    assert!(n <= data.len());
}
