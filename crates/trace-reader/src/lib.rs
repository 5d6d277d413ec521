//! Reader for `backscope-trace` files (versions 1 to 4, JSON Lines; the format is specified in
//! `docs/trace-format.md` and its names and writers are in the `backscope-trace` crate).
//!
//! [`Reader`] reads a trace one line at a time and keeps the header and kernel table, so a growing
//! file can be followed by feeding only the lines it gained (`sweep --trace`); [`TraceFile::parse`]
//! and [`TraceFile::read`] run it over a whole file. A last line cut short (no trailing newline) is
//! dropped and flagged in [`TraceFile::partial_last_line`], and a missing end record leaves
//! [`TraceFile::end`] empty. A trace the observer stopped writing (byte budget spent, write error)
//! ends with a `truncated` record ([`TraceFile::truncated`]): its counts are lower bounds. A fatal
//! signal leaves a `crash` record ([`TraceFile::crashes`], [`TraceFile::fatal_crash`]) with the
//! runtime call in flight and each thread's last launches. A rotating trace's segment (version 4)
//! ends with a `rotated` record ([`TraceFile::rotated`]), neither cut nor partial; [`read_dir`] joins
//! the segments of one process into one trace ([`join_segments`], [`Segments`]). Anything else
//! malformed is a [`TraceError`] naming the file and line; [`read_dir`] reports such files and keeps
//! the others.
//!
//! [`TraceFile::kernel_stats`] aggregates per kernel (launches, errors, graph replays, captures and
//! the grid/block histogram) over all windows or a time range; [`Aggregate`] does it for the
//! traces of several processes at once, merged by kernel name, with per-process totals and the
//! crashes in the range: the one summary `backscope trace` and `sweep --trace` build on.

#![warn(missing_debug_implementations)]
#![forbid(unsafe_code)]

mod dir;
mod join;
mod reader;
mod records;
mod segments;
mod summary;

pub use dir::{read_dir, read_dir_folded, DirTraces, MAX_DIR_TRACE_FILES};
pub use format::{FORMAT, MAX_VERSION, MIN_VERSION, ROTATING_VERSION, VERSION};
pub use join::join as join_segments;
pub use reader::{merge_by_name, KernelStats, Range, Reader, TraceError, TraceFile, LEFT_OUT, MAX_KEPT, MAX_LINE};
pub use records::{
    Crash, CrashLaunch, CrashThread, Device, DeviceFault, DeviceLost, End, Hang, Header, Impersonated,
    InFlightDispatch, KernelDef, PipelineStat, QueueAtLoss, QueueDispatch, QueueProgress, Rotated, Sequence, Shape,
    ShapeCount, Truncated, Warning, Window,
};
pub use segments::{Segment, Segments};
pub use summary::{
    Aggregate, CrashReport, DeviceLostReport, DispatchRun, HangReport, InFlightRun, LaunchRun, ProcessStats, QueueRuns,
    ThreadAtCrash,
};

/// Whether `name` is a trace file name: `trace-*.jsonl`.
pub fn is_trace_file_name(name: &str) -> bool {
    format::naming::is_trace_file_name(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEADER: &str = r#"{"format":"backscope-trace","version":1,"pid":42,"ppid":1,"exe":"/usr/bin/llama-server","cmdline":["llama-server","-m","x.gguf"],"clock":"monotonic","start_ns":1000,"interval_ms":50,"shape_buckets":8,"max_kernels":1048576,"observer":"0.1.0"}"#;

    fn sample() -> String {
        [
            HEADER,
            r#"{"kernel":1,"name":"_Z7add_onePfi","api":"hip","source":"register"}"#,
            r#"{"kernel":2,"name":"_Z8scale_byILi3EEvPf","api":"hip","source":"register"}"#,
            r#"{"window":[1000,2000],"counts":[[1,3]],"errors":[[1,1]],"shapes":[[1,[1,1,1],[64,1,1],3]]}"#,
            r#"{"kernel":3,"name":"_Z7add_onePfi","api":"hip","source":"register"}"#,
            r#"{"window":[2000,3000],"counts":[[1,2],[2,5],[3,1]],"graph":[[2,4]],"captured":[[2,1]],"shapes":[[1,[1,1,1],[64,1,1],1],[1,[2,1,1],[64,1,1],1],[2,[4,2,1],[32,4,1],5],[3,[1,1,1],[64,1,1],1]],"graph_launches":4}"#,
            r#"{"warning":"unknown_graph_exec","detail":"…"}"#,
            r#"{"window":[3000,4000],"counts":[[2,1]],"other_shapes":[[2,1]],"unknown_graph_launches":2}"#,
            r#"{"end_ns":4100,"reason":"exit"}"#,
        ]
        .join("\n")
            + "\n"
    }

    #[test]
    fn parses_every_record_kind() {
        let trace = TraceFile::parse(&sample()).unwrap();
        assert_eq!(trace.pid(), 42);
        assert_eq!(trace.header.cmdline, ["llama-server", "-m", "x.gguf"]);
        assert_eq!(trace.kernels.len(), 3);
        assert_eq!(trace.kernels[&2].name, "_Z8scale_byILi3EEvPf");
        assert_eq!(trace.windows.len(), 3);
        assert_eq!(
            trace.windows[1].shapes[2],
            ShapeCount { kernel: 2, shape: Shape { grid: [4, 2, 1], block: [32, 4, 1] }, launches: 5 }
        );
        assert_eq!(trace.windows[1].graph_launches, 4);
        assert_eq!(trace.warnings[0].code, "unknown_graph_exec");
        assert_eq!(trace.end, Some(End { end_ns: 4100, reason: "exit".into() }));
        assert!(trace.is_complete() && trace.is_finished());
        assert!(!trace.partial_last_line && !trace.is_cut());
    }

    #[test]
    fn aggregates_per_kernel_over_all_windows() {
        let trace = TraceFile::parse(&sample()).unwrap();
        let stats = trace.kernel_stats(Range::All);
        assert_eq!(stats.len(), 3);
        let a = &stats[0];
        assert_eq!((a.launches, a.errors, a.graph), (5, 1, 0));
        assert_eq!(
            a.shapes,
            vec![(Shape { grid: [1, 1, 1], block: [64, 1, 1] }, 4), (Shape { grid: [2, 1, 1], block: [64, 1, 1] }, 1)]
        );
        let b = &stats[1];
        assert_eq!((b.launches, b.graph, b.captured, b.other_shapes), (6, 4, 1, 1));
        assert_eq!(trace.total_launches(Range::All), 12);
        assert_eq!(trace.graph_launches(Range::All), 4);
    }

    #[test]
    fn aggregates_per_time_range() {
        let trace = TraceFile::parse(&sample()).unwrap();
        let within = trace.kernel_stats(Range::Within(2000, 3000));
        assert_eq!(within.iter().map(|s| s.launches).collect::<Vec<_>>(), [2, 5, 1]);
        // [2500, 3500] lies inside no window but overlaps two.
        assert_eq!(trace.total_launches(Range::Within(2500, 3500)), 0);
        assert_eq!(trace.total_launches(Range::Overlapping(2500, 3500)), 9);
        assert_eq!(trace.windows_in(Range::Overlapping(0, 999)).count(), 0);
    }

    #[test]
    fn merges_kernels_that_share_a_name() {
        let trace = TraceFile::parse(&sample()).unwrap();
        let by_name = trace.stats_by_name(Range::All);
        let add_one = &by_name[&("hip".to_string(), "_Z7add_onePfi".to_string())];
        assert_eq!(add_one.ids, [1, 3]);
        assert_eq!(add_one.launches, 6);
        assert_eq!(add_one.shapes[0], (Shape { grid: [1, 1, 1], block: [64, 1, 1] }, 5));
    }

    #[test]
    fn tolerates_a_partial_last_line() {
        let full = sample();
        // Cut inside the final window line (drop the end record and part of the window).
        let cut = full.find(r#""unknown_graph_launches""#).unwrap();
        let trace = TraceFile::parse(&full[..cut]).unwrap();
        assert!(trace.partial_last_line);
        assert!(!trace.is_complete() && !trace.is_cut());
        assert_eq!(trace.windows.len(), 2);
        // A killed process that had written only whole lines: no end record, no partial line.
        let whole_lines: String = full.lines().take(4).map(|l| format!("{l}\n")).collect();
        let trace = TraceFile::parse(&whole_lines).unwrap();
        assert!(!trace.partial_last_line && !trace.is_complete());
        assert_eq!(trace.windows.len(), 1);
    }

    #[test]
    fn rejects_corruption_that_is_not_truncation() {
        let broken = sample().replace(r#"{"window":[1000,2000]"#, r#"{"window":[1000,"#);
        let error = TraceFile::parse(&broken).unwrap_err();
        assert_eq!(error.line, Some(4), "{error}");
        assert!(error.message.starts_with("not JSON"), "{error}");
        assert!(error.to_string().starts_with("line 4: "), "{error}");
        let undefined = sample().replace(r#""counts":[[1,3]]"#, r#""counts":[[9,3]]"#);
        assert!(format!("{:#}", TraceFile::parse(&undefined).unwrap_err()).contains("kernel 9"));
        let twice = format!("{HEADER}\n{}", sample());
        assert!(format!("{:#}", TraceFile::parse(&twice).unwrap_err()).contains("second header"));
        let newer = sample().replace(r#""version":1"#, r#""version":5"#);
        assert!(format!("{:#}", TraceFile::parse(&newer).unwrap_err()).contains("version 5"));
        let bad_window = sample()
            .replace(r#"{"window":[1000,2000],"counts":[[1,3]]"#, r#"{"window":[1000,2000],"counts":[[1,"x"]]"#);
        let error = TraceFile::parse(&bad_window).unwrap_err();
        assert_eq!(error.line, Some(4));
        assert!(error.message.starts_with("window record: "), "{error}");
        assert!(TraceFile::parse("").is_err());
        let headless = r#"{"kernel":1,"name":"k","api":"hip"}"#.to_string() + "\n";
        assert!(TraceFile::parse(&headless).is_err());
    }

    /// Folding every window into one while reading (what `read_dir_folded` does, for summaries over all
    /// windows) must give the same totals as keeping them, and keep few warnings and crashes.
    #[test]
    fn a_folded_trace_sums_as_the_whole_one() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("trace-42.jsonl");
        let warnings: String =
            (0..MAX_KEPT + 10).map(|i| format!("{{\"warning\":\"w\",\"detail\":\"{i}\"}}\n")).collect();
        let text = sample().replace("{\"warning\"", &format!("{warnings}{{\"warning\""));
        std::fs::write(&path, &text).unwrap();
        let whole = TraceFile::read(&path).unwrap();
        let folded = TraceFile::read_folded(&path).unwrap();
        assert_eq!((whole.windows.len(), folded.windows.len()), (3, 1));
        assert_eq!((folded.windows[0].t0, folded.windows[0].t1), (1000, 4000));
        assert_eq!(folded.kernel_stats(Range::All), whole.kernel_stats(Range::All));
        assert_eq!(folded.total_launches(Range::All), 12);
        assert_eq!(folded.graph_launches(Range::All), 4);
        assert_eq!(folded.windows[0].unknown_graph_launches, 2);
        let all = |t: &TraceFile| Aggregate::of([t], Range::All);
        assert_eq!(all(&folded).kernels, all(&whole).kernels);
        assert_eq!(whole.warnings.len(), MAX_KEPT + 11);
        assert_eq!(folded.warnings.len(), MAX_KEPT + 1);
        let left_out = folded.warnings.last().unwrap();
        assert_eq!(left_out.code, LEFT_OUT);
        assert!(left_out.detail.contains("11 warnings and 0 crash records were left out"), "{}", left_out.detail);
        // read_dir_folded folds; read_dir keeps every window.
        let read = read_dir_folded(dir.path()).unwrap();
        assert_eq!(read.traces[0].windows.len(), 1);
        assert_eq!(read.traces[0].kernel_stats(Range::All), whole.kernel_stats(Range::All));
        assert_eq!(read_dir(dir.path()).unwrap().traces[0].windows.len(), 3);
    }

    #[test]
    fn a_line_longer_than_the_limit_is_an_error_not_an_allocation() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("trace-1.jsonl");
        let mut text = sample().into_bytes();
        text.truncate(HEADER.len() + 1);
        text.extend(std::iter::repeat_n(b' ', MAX_LINE + 10));
        text.extend(b"\n");
        std::fs::write(&path, &text).unwrap();
        let error = TraceFile::read_folded(&path).unwrap_err();
        assert_eq!(error.line, Some(2), "{error}");
        assert!(error.to_string().contains("line longer than 64 MiB"), "{error}");
    }

    #[test]
    fn huge_counts_saturate_instead_of_wrapping() {
        let max = u64::MAX;
        let text = sample()
            .replace(r#""counts":[[1,3]]"#, &format!(r#""counts":[[1,{max}]]"#))
            .replace(r#""counts":[[1,2],[2,5],[3,1]]"#, &format!(r#""counts":[[1,{max}],[2,5],[3,1]]"#));
        let trace = TraceFile::parse(&text).unwrap();
        assert_eq!(trace.total_launches(Range::All), max);
        assert_eq!(trace.kernel_stats(Range::All)[0].launches, max);
        assert_eq!(Aggregate::of([&trace], Range::All).total_launches, max);
    }

    #[test]
    fn skips_unknown_record_kinds() {
        let text = sample().replace(r#"{"warning""#, "{\"future_record\":true}\n{\"warning\"");
        let trace = TraceFile::parse(&text).unwrap();
        assert_eq!(trace.unknown_lines, 1);
    }

    /// A version 2 trace that the observer cut when its budget was spent: the same records as a
    /// version 1 file, then the `truncated` record instead of the end record.
    fn cut_sample() -> String {
        let v2_header = HEADER
            .replace(r#""version":1"#, r#""version":2"#)
            .replace(r#""max_kernels":1048576"#, r#""max_kernels":1048576,"max_bytes":65536"#);
        [
            v2_header.as_str(),
            r#"{"kernel":1,"name":"_Z7add_onePfi","api":"hip","source":"register"}"#,
            r#"{"window":[1000,2000],"counts":[[1,3]],"shapes":[[1,[1,1,1],[64,1,1],3]],"expired_captures":2}"#,
            r#"{"truncated":"budget","at_ns":2500,"bytes":65100,"max_bytes":65536}"#,
        ]
        .join("\n")
            + "\n"
    }

    #[test]
    fn reads_version_1_and_version_2_files() {
        let v1 = TraceFile::parse(&sample()).unwrap();
        assert_eq!((v1.header.version, v1.header.max_bytes), (1, 0));
        assert!(v1.windows.iter().all(|w| w.expired_captures == 0));
        let v2 = TraceFile::parse(&cut_sample()).unwrap();
        assert_eq!((v2.header.version, v2.header.max_bytes), (2, 65536));
        assert_eq!(v2.windows[0].expired_captures, 2);
        assert_eq!(v2.total_launches(Range::All), 3);
        let cut = v2.truncated.as_ref().unwrap();
        assert_eq!((cut.reason.as_str(), cut.at_ns, cut.bytes, cut.max_bytes), ("budget", 2500, 65100, Some(65536)));
        assert_eq!(cut.why(), "its budget of 65536 bytes (BACKSCOPE_TRACE_MAX_BYTES) was spent");
        assert!(v2.is_cut() && v2.is_finished() && !v2.is_complete());
        let write_error = cut_sample().replace(
            r#"{"truncated":"budget","at_ns":2500,"bytes":65100,"max_bytes":65536}"#,
            r#"{"truncated":"write_error","at_ns":2500,"bytes":900,"error":"No space left on device (os error 28)"}"#,
        );
        let cut = TraceFile::parse(&write_error).unwrap().truncated.unwrap();
        assert_eq!(cut.why(), "writing failed (No space left on device (os error 28))");
        // Nothing may follow the truncated record but records of unknown kinds.
        let after = format!("{}{}\n", cut_sample(), r#"{"window":[3000,4000],"counts":[[1,1]]}"#);
        let error = TraceFile::parse(&after).unwrap_err();
        assert_eq!((error.line, error.message.as_str()), (Some(5), "record after the truncated record"));
        assert!(TraceFile::parse(&format!("{}{{\"later\":1}}\n", cut_sample())).is_ok());
    }

    #[test]
    fn reads_a_directory_of_traces_and_reports_bad_files() {
        let dir = std::env::temp_dir().join(format!("backscope-trace-reader-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("trace-42.jsonl"), sample()).unwrap();
        std::fs::write(dir.join("trace-7.jsonl"), sample().replace(r#""pid":42"#, r#""pid":7"#)).unwrap();
        std::fs::write(dir.join("trace-8.jsonl"), sample().replace(r#""counts":[[2,1]]"#, r#""counts":[[2,"#)).unwrap();
        std::fs::write(dir.join("notes.txt"), "not a trace").unwrap();
        let read = read_dir(&dir).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(read.traces.iter().map(TraceFile::pid).collect::<Vec<_>>(), [7, 42]);
        assert!(read.traces[0].path.as_ref().unwrap().ends_with("trace-7.jsonl"));
        assert_eq!(read.problems.len(), 1);
        let problem = &read.problems[0];
        assert!(problem.path.as_ref().unwrap().ends_with("trace-8.jsonl"));
        assert_eq!(problem.line, Some(8));
        assert!(problem.to_string().contains("trace-8.jsonl:8: not JSON"), "{problem}");
    }
}
