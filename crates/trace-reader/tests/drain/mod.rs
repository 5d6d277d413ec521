//! The drain logic of the `trace_reader` fuzz target (fuzz/fuzz_targets/trace_reader.rs), shared with
//! tests/fuzz_regressions.rs: read the input as a trace, whole and folded (what `trace --read` does), line by line
//! through a [`Reader`] (what `sweep --trace` does), and aggregate it; nothing may panic, and the folded read must
//! agree with the whole one over all windows, also on the files the trace names (the paths the binary opens). An
//! input with several headers is also read as several files (split before each header, as the segments of a
//! rotating trace are) and joined as `read_dir` joins segments.

#![allow(dead_code)] // the fuzz target and the regression test each use part of this file

use trace_reader::{join_segments, Aggregate, Range, Reader, TraceFile, LEFT_OUT};

pub type Drain = fn(&[u8]);

pub const TARGETS: &[(&str, Drain)] = &[("trace_reader", trace_reader)];

pub fn trace_reader(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let whole = TraceFile::parse(&text);
    let folded = TraceFile::parse_folded(&text);
    match (&whole, &folded) {
        (Ok(w), Ok(f)) => {
            assert!(f.windows.len() <= 1, "a folded trace has at most one window");
            assert_eq!(w.kernel_stats(Range::All), f.kernel_stats(Range::All), "folding changed the totals");
            assert_eq!(w.total_launches(Range::All), f.total_launches(Range::All));
            assert_eq!(w.graph_launches(Range::All), f.graph_launches(Range::All));
            assert_eq!(Aggregate::of([w], Range::All).kernels, Aggregate::of([f], Range::All).kernels);
            assert_eq!(w.fatal_crash().map(|c| c.seq), f.fatal_crash().map(|c| c.seq), "the last crash is kept");
            // The order of dispatches: the same sequences, and the same submissions of each, either way.
            assert_eq!(w.sequences, f.sequences, "folding changed the sequences");
            assert_eq!(w.sequence_submissions(Range::All), f.sequence_submissions(Range::All));
            assert_eq!(w.order_recorded(), f.order_recorded());
            let kept = f.warnings.iter().filter(|x| x.code != LEFT_OUT).count();
            assert!(kept <= w.warnings.len());
            // The record → path step: the files a trace names (what the binary will try to open) are the same
            // either way, each once, and no more than its kernels.
            let named = w.named_files();
            assert_eq!(named, f.named_files(), "folding changed the files named");
            assert!(named.len() <= w.kernels.len());
            let mut unique = named.clone();
            unique.sort_unstable();
            unique.dedup();
            assert_eq!(unique.len(), named.len(), "a file is named twice: {named:?}");
            for range in [Range::Within(0, u64::MAX / 2), Range::Overlapping(u64::MAX / 2, u64::MAX)] {
                let _ = Aggregate::of([w], range);
            }
        }
        (Err(w), Err(f)) => assert_eq!(w, f, "whole and folded reads fail alike"),
        _ => panic!("whole and folded reads disagree: {whole:?} vs {folded:?}"),
    }
    // Line by line, as a growing file is followed: every line fed once, errors skipped.
    let mut reader = Reader::default();
    for line in text.lines() {
        let _ = reader.feed(line);
    }
    if let Some(t) = reader.trace() {
        let _ = Aggregate::of([t], Range::All);
    }
    segments(&text);
}

/// The input split before each header line, each part read as a file (whole and folded), then joined: nothing may
/// panic, a joined trace comes from at least one part, and joining never adds launches.
fn segments(text: &str) {
    let mut parts: Vec<String> = Vec::new();
    for line in text.split_inclusive('\n') {
        if line.starts_with("{\"format\"") || parts.is_empty() {
            if parts.len() == 64 {
                break;
            }
            parts.push(String::new());
        }
        if let Some(last) = parts.last_mut() {
            last.push_str(line);
        }
    }
    if parts.len() < 2 {
        return;
    }
    for parse in [TraceFile::parse, TraceFile::parse_folded] {
        let read: Vec<TraceFile> = parts.iter().filter_map(|p| parse(p).ok()).collect();
        let launches = read.iter().fold(0u64, |n, t| n.saturating_add(t.total_launches(Range::All)));
        let count = read.len();
        let (joined, problems) = join_segments(read);
        assert!(joined.len() + problems.len() <= count && joined.len() <= count);
        let after = joined.iter().fold(0u64, |n, t| n.saturating_add(t.total_launches(Range::All)));
        assert!(after <= launches, "joining added launches: {after} > {launches}");
        for t in &joined {
            if let Some(s) = t.segments.as_ref() {
                let _ = (s.describe(), s.missing(), s.file_at(u64::MAX));
            }
            let _ = Aggregate::of([t], Range::All);
        }
    }
}
