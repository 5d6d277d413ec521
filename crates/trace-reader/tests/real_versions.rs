//! Trace files that real observer builds of format versions 1 and 2 wrote: the observer of commit f146fcc
//! (version 1) and of commit c1aa5e4 (version 2), preloaded into the test-double programs of
//! `crates/observer/tests/c` (`host graph-cuda`, `host graph-hip`, and `host many 400` with an 8 KiB budget).
//! The program's stdout is kept beside each file: the test-double runtime prints what it executed per kernel,
//! which the counts read from the trace must equal.

use std::collections::BTreeMap;
use std::path::Path;

use trace_reader::{Range, TraceFile};

fn data(name: &str) -> (TraceFile, String) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data");
    let trace = TraceFile::read(&dir.join(format!("{name}.jsonl"))).unwrap();
    let stdout = std::fs::read_to_string(dir.join(format!("{name}.stdout"))).unwrap();
    (trace, stdout)
}

/// `fake NAME executed N failed M argsum X` lines: NAME -> (N, M), for kernels that ran.
fn fake_counts(stdout: &str) -> BTreeMap<String, (u64, u64)> {
    stdout
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.strip_prefix("fake ")?.split_whitespace().collect();
            let counts = (f.get(2)?.parse().ok()?, f.get(4)?.parse().ok()?);
            (counts != (0, 0)).then(|| (f[0].to_string(), counts))
        })
        .collect()
}

/// The program's counts without the kernels of its graph built node by node, which no observer can name:
/// the trace counts those replays as `unknown_graph_launches` (docs/trace-format.md, Window), one per
/// `… GraphLaunch (not captured)` line of the program.
fn nameable(mut counts: BTreeMap<String, (u64, u64)>, trace: &TraceFile, stdout: &str) -> BTreeMap<String, (u64, u64)> {
    counts.retain(|name, _| !name.contains("explicit_graph_kernel"));
    let not_captured = stdout.lines().filter(|l| l.contains("GraphLaunch (not captured)")).count() as u64;
    assert!(not_captured > 0);
    assert_eq!(trace.windows.iter().map(|w| w.unknown_graph_launches).sum::<u64>(), not_captured);
    counts
}

fn counts(trace: &TraceFile) -> BTreeMap<String, (u64, u64)> {
    trace
        .stats_by_name(Range::All)
        .into_values()
        .filter(|s| s.launches > 0)
        .map(|s| (s.name, (s.launches, s.errors)))
        .collect()
}

#[test]
fn a_version_1_file_reads_with_the_programs_counts() {
    let (trace, stdout) = data("v1-graph-cuda");
    assert_eq!((trace.header.version, trace.header.max_bytes), (1, 0));
    assert!(trace.is_complete() && trace.crashes.is_empty());
    let expected = nameable(fake_counts(&stdout), &trace, &stdout);
    assert_eq!(expected.len(), 2);
    assert_eq!(counts(&trace), expected);
    assert!(trace.graph_launches(Range::All) > 0, "the scenario replays a captured graph");
}

#[test]
fn version_2_files_read_with_the_programs_counts_and_a_cut_one_as_lower_bounds() {
    let (trace, stdout) = data("v2-graph-hip");
    assert_eq!(trace.header.version, 2);
    assert!(trace.is_complete());
    assert_eq!(counts(&trace), nameable(fake_counts(&stdout), &trace, &stdout));

    let (cut, stdout) = data("v2-budget");
    assert_eq!((cut.header.version, cut.header.max_bytes), (2, 8192));
    let truncated = cut.truncated.as_ref().expect("the budget cut the trace");
    assert_eq!((truncated.reason.as_str(), truncated.max_bytes), ("budget", Some(8192)));
    assert!(cut.is_cut() && !cut.is_complete());
    let executed: u64 = stdout
        .lines()
        .find_map(|l| l.strip_prefix("fake total executed "))
        .and_then(|n| n.trim().parse().ok())
        .expect("the program's own total");
    let traced = cut.total_launches(Range::All);
    assert!(traced < executed, "{traced} of {executed}: a cut trace holds a lower bound");
}
