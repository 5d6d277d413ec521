//! Joining the segments of a rotating trace, each read as its own [`TraceFile`], into one: see [`crate::segments`].

use std::collections::BTreeMap;

use crate::reader::{Folded, TraceError, TraceFile};
use crate::segments::Segments;

/// What makes segments one process's: pid, start time, writer and executable (the CUDA/HIP observer and the Vulkan
/// layer of one process write a trace each).
type ProcessKey = (u32, u64, String, String);

/// Joins the segments of each rotating trace among `traces` into one [`TraceFile`] (the others are returned as they
/// are): definitions and devices united, windows, crashes, device losses and hangs in order, warnings once each, the
/// last record and the path of the newest segment. A segment read twice, or whose definitions contradict an earlier
/// segment's, is left out as a problem. Windows that were folded ([`TraceFile::read_folded`]: one per file) are
/// folded again into one.
pub fn join(traces: Vec<TraceFile>) -> (Vec<TraceFile>, Vec<TraceError>) {
    let mut out = Vec::new();
    let mut problems = Vec::new();
    let mut groups: BTreeMap<ProcessKey, Vec<TraceFile>> = BTreeMap::new();
    for mut trace in traces {
        match trace.header.segment {
            Some(_) => {
                // A trace fed line by line (`Reader::trace`) has not said its segment yet.
                if trace.segments.is_none() {
                    trace.segments = Segments::of_one(&trace);
                }
                let h = &trace.header;
                groups.entry((h.pid, h.start_ns, h.writer.clone(), h.exe.clone())).or_default().push(trace);
            }
            None => out.push(trace),
        }
    }
    for (_, mut group) in groups {
        group.sort_by(|a, b| (a.header.segment, &a.path).cmp(&(b.header.segment, &b.path)));
        let folded = group.iter().all(|t| t.windows.len() <= 1);
        let mut segments = group.into_iter();
        let Some(mut joined) = segments.next() else { continue };
        for next in segments {
            if let Err(message) = absorb(&mut joined, next.clone()) {
                problems.push(TraceError { path: next.path.clone(), line: None, message });
            }
        }
        if folded && joined.windows.len() > 1 {
            joined.windows = Folded::all(std::mem::take(&mut joined.windows)).into_iter().collect();
        }
        out.push(joined);
    }
    (out, problems)
}

/// Adds segment `next` (newer than those in `joined`) to `joined`; why not, when it cannot be.
fn absorb(joined: &mut TraceFile, next: TraceFile) -> Result<(), String> {
    let index = next.header.segment.unwrap_or(0);
    let newest = joined.segments.as_ref().map_or(0, Segments::newest_index);
    let newest_path = joined.path.as_ref().map_or_else(String::new, |p| p.display().to_string());
    if index == newest {
        return Err(format!("segment {index} of process {} read twice (also {newest_path}); left out", next.pid()));
    }
    for (id, def) in &next.kernels {
        if joined.kernels.get(id).is_some_and(|d| d != def) {
            return Err(format!(
                "kernel {id} is defined differently than in segment {newest} ({newest_path}); left out"
            ));
        }
    }
    for (id, device) in &next.devices {
        if joined.devices.get(id).is_some_and(|d| d != device) {
            return Err(format!(
                "device {id} is defined differently than in segment {newest} ({newest_path}); left out"
            ));
        }
    }
    for (id, sequence) in &next.sequences {
        if joined.sequences.get(id).is_some_and(|s| s != sequence) {
            return Err(format!(
                "sequence {id} is defined differently than in segment {newest} ({newest_path}); left out"
            ));
        }
    }
    let TraceFile {
        path,
        header,
        kernels,
        devices,
        windows,
        warnings,
        crashes,
        device_lost,
        hangs,
        sequences,
        end,
        truncated,
        rotated,
        segments,
        earlier_returns,
        partial_last_line,
        unknown_lines,
    } = next;
    joined.kernels.extend(kernels);
    joined.devices.extend(devices);
    joined.sequences.extend(sequences);
    joined.windows.extend(windows);
    for warning in warnings {
        if !joined.warnings.iter().any(|w| w.code == warning.code) {
            joined.warnings.push(warning);
        }
    }
    for seq in earlier_returns {
        if let Some(crash) = joined.crashes.iter_mut().rev().find(|c| c.seq == seq) {
            crash.returned = true;
        }
    }
    joined.crashes.extend(crashes);
    joined.device_lost.extend(device_lost);
    joined.hangs.extend(hangs);
    (joined.end, joined.truncated, joined.rotated) = (end, truncated, rotated);
    joined.partial_last_line = partial_last_line;
    joined.unknown_lines = joined.unknown_lines.saturating_add(unknown_lines);
    joined.header = header;
    joined.path = path;
    if let (Some(all), Some(mut this)) = (joined.segments.as_mut(), segments) {
        all.present.append(&mut this.present);
        all.continues_in = this.continues_in;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Segment `k` of a trace of pid 9 keeping 3, its windows starting at `t`, ending with a `rotated` record
    /// unless it is the newest.
    fn segment(k: u32, t: u64, last: &str) -> String {
        let previous = if k == 0 { String::new() } else { format!(r#","previous":"trace-9.s{}.jsonl""#, k - 1) };
        let header = format!(
            r#"{{"format":"backscope-trace","version":4,"pid":9,"ppid":1,"exe":"/bin/x","cmdline":["x"],"clock":"monotonic","start_ns":100,"interval_ms":50,"shape_buckets":8,"max_kernels":16,"max_bytes":65536,"observer":"0","writer":"backscope-vklayer","segment":{k},"segments_kept":3,"segment_max_bytes":21845{previous}}}"#
        );
        [
            header,
            r#"{"device":0,"api":"vulkan","name":"llvmpipe"}"#.to_string(),
            r#"{"kernel":1,"name":"spin","api":"vulkan","source":"debug_name","device":0}"#.to_string(),
            format!(r#"{{"window":[{t},{}],"counts":[[1,2]],"shapes":[[1,[1,1,1],[64,1,1],2]],"submits":1}}"#, t + 50),
            format!(
                r#"{{"window":[{},{}],"counts":[[1,3]],"shapes":[[1,[1,1,1],[64,1,1],3]],"submits":1}}"#,
                t + 50,
                t + 100
            ),
            last.to_string(),
        ]
        .join("\n")
            + "\n"
    }

    fn rotated(k: u32, at: u64) -> String {
        format!(r#"{{"rotated":"trace-9.s{}.jsonl","at_ns":{at},"bytes":900}}"#, k + 1)
    }

    #[test]
    fn a_segment_reads_alone_and_its_rotated_record_is_neither_a_cut_nor_a_partial_line() {
        let trace = TraceFile::parse(&segment(4, 1000, &rotated(4, 1100))).unwrap();
        assert_eq!(trace.header.segment, Some(4));
        assert_eq!(trace.total_launches(crate::Range::All), 5);
        assert!(trace.is_finished() && !trace.is_cut() && !trace.is_complete() && !trace.partial_last_line);
        assert_eq!(trace.rotated.as_ref().unwrap().next, "trace-9.s5.jsonl");
        let away = trace.rotated_away().expect("segments 0-3 are not here");
        assert_eq!((away.first_index(), away.since_ns), (4, Some(1000)));
        assert_eq!(away.describe(), "segment 4 of a trace that keeps 3 (segments 0–3 rotated away or missing); it continues in trace-9.s5.jsonl, not read");
        // Nothing may follow the rotated record; a trace that does not rotate has none.
        let after = segment(4, 1000, &rotated(4, 1100)) + r#"{"window":[2000,2001],"counts":[[1,1]]}"# + "\n";
        assert_eq!(TraceFile::parse(&after).unwrap_err().message, "record after the rotated record");
        let plain = segment(4, 1000, &rotated(4, 1100)).replace(r#","segment":4,"segments_kept":3"#, "");
        assert!(TraceFile::parse(&plain)
            .unwrap_err()
            .message
            .starts_with("rotated record in a trace that does not rotate"));
        let one = segment(4, 1000, "").replace(r#""segments_kept":3"#, r#""segments_kept":1"#);
        assert!(TraceFile::parse(&one).unwrap_err().message.contains("at least 2 segments"));
    }

    #[test]
    fn the_segments_of_one_process_join_into_one_trace_since_the_first_read() {
        let dir = tempfile::tempdir().unwrap();
        let crash = r#"{"crash":11,"signal":"SIGSEGV","code":1,"addr":0,"at_ns":1350,"seq":1,"tid":9,"flushed":true,"threads":[{"tid":9,"launches":[]}],"queues":[{"queue":0,"device":0,"submits":3,"dispatches":[[1,3,[1,1,1],1]]}]}"#;
        std::fs::write(dir.path().join("trace-9.s4.jsonl"), segment(4, 1000, &rotated(4, 1100))).unwrap();
        std::fs::write(dir.path().join("trace-9.s5.jsonl"), segment(5, 1100, &rotated(5, 1200))).unwrap();
        std::fs::write(dir.path().join("trace-9.s6.jsonl"), segment(6, 1200, crash)).unwrap();
        // Another process of the same pid (pid reuse), not rotating.
        let other = segment(0, 5000, "").replace(r#","segment":0,"segments_kept":3,"segment_max_bytes":21845"#, "");
        std::fs::write(dir.path().join("trace-9.1.jsonl"), other.replace(r#""version":4"#, r#""version":3"#)).unwrap();
        for read in [crate::read_dir(dir.path()).unwrap(), crate::read_dir_folded(dir.path()).unwrap()] {
            assert!(read.problems.is_empty(), "{:?}", read.problems);
            assert_eq!(read.traces.len(), 2);
            let joined = read.traces.iter().find(|t| t.segments.is_some()).unwrap();
            assert_eq!(joined.total_launches(crate::Range::All), 15);
            assert!(joined.path.as_ref().unwrap().ends_with("trace-9.s6.jsonl"), "the newest segment's");
            let segments = joined.rotated_away().unwrap();
            assert_eq!(segments.present.iter().map(|s| s.index).collect::<Vec<_>>(), [4, 5, 6]);
            assert_eq!((segments.since_ns, segments.continues_in.as_deref()), (Some(1000), None));
            assert_eq!(
                segments.describe(),
                "segments 4–6 of a trace that keeps 3 (segments 0–3 rotated away or missing)"
            );
            // The crash in the newest segment ended the process, as in a trace that does not rotate.
            assert_eq!(joined.fatal_crash().unwrap().seq, 1);
            assert!(segments.file_at(1350).unwrap().ends_with("trace-9.s6.jsonl"));
            assert!(segments.file_at(1050).unwrap().ends_with("trace-9.s4.jsonl"));
            assert_eq!(joined.kernels.len(), 1);
        }
        // A segment between those read is missing: said so.
        std::fs::remove_file(dir.path().join("trace-9.s5.jsonl")).unwrap();
        let read = crate::read_dir(dir.path()).unwrap();
        let joined = read.traces.iter().find(|t| t.segments.is_some()).unwrap();
        assert_eq!(joined.rotated_away().unwrap().missing(), [(5, 5)]);
        assert_eq!(joined.total_launches(crate::Range::All), 10);
    }

    #[test]
    fn contradicting_or_repeated_segments_are_left_out_as_problems() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("trace-9.s1.jsonl"), segment(1, 1000, &rotated(1, 1100))).unwrap();
        std::fs::write(dir.path().join("trace-9.s1.1.jsonl"), segment(1, 1000, &rotated(1, 1100))).unwrap();
        let renamed = segment(2, 1100, "").replace(r#""name":"spin""#, r#""name":"other""#);
        std::fs::write(dir.path().join("trace-9.s2.jsonl"), renamed).unwrap();
        let read = crate::read_dir(dir.path()).unwrap();
        assert_eq!(read.traces.len(), 1);
        assert_eq!(read.traces[0].total_launches(crate::Range::All), 5);
        let messages: Vec<String> = read.problems.iter().map(|p| p.to_string()).collect();
        assert_eq!(messages.len(), 2, "{messages:?}");
        assert!(messages[0].contains("segment 1 of process 9 read twice"), "{messages:?}");
        assert!(
            messages[1].contains("trace-9.s2.jsonl: kernel 1 is defined differently than in segment 1"),
            "{messages:?}"
        );
    }

    #[test]
    fn a_returned_signal_joins_its_crash_in_an_earlier_segment() {
        let crash = r#"{"crash":11,"signal":"SIGSEGV","code":1,"addr":0,"at_ns":1050,"seq":1,"tid":9,"flushed":true,"threads":[]}"#;
        let first = segment(0, 1000, &format!("{crash}\n{}", rotated(0, 1100)));
        let second = segment(1, 1100, r#"{"signal_returned":1,"at_ns":1150}"#);
        let traces = vec![TraceFile::parse(&first).unwrap(), TraceFile::parse(&second).unwrap()];
        assert_eq!(traces[1].earlier_returns, [1]);
        let (joined, problems) = join(traces);
        assert!(problems.is_empty());
        assert!(joined[0].crashes[0].returned && joined[0].fatal_crash().is_none());
        assert!(joined[0].rotated_away().is_none(), "every segment from 0 on is here");
    }
}
