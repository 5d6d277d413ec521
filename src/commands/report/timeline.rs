//! A cell's timeline, read from its server log by `backscope-logs`: what the server did, with times relative to
//! the log's first timestamp, and the crash that ended the cell with its phase and signature.
//!
//! A failed cell whose server died in it is read through the whole log of that server (it ends with the cell's
//! slice, and the phase of the crash rests on what the server did before: loaded, served a request); the record's
//! wait status is handed to the analysis as the process's death. Any other cell is read through its slice.

use std::path::Path;

use logs::analysis::Report;
use logs::Limits;
use serde::Serialize;

use crate::run::format::record::Record;
use crate::run_analysis::forensics;

/// Timeline entries kept per cell: the first and the last (where crashes are).
const HEAD: usize = 40;
const TAIL: usize = 120;

/// One event of a cell's timeline.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Entry {
    /// Seconds from the log's first timestamp; none for a line without one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub t: Option<f64>,
    pub line: u64,
    pub kind: String,
    pub summary: String,
    /// A line of the crash (its signal, its causes, what followed).
    pub alarm: bool,
}

/// The crash that ended a cell, as its log shows it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CrashBrief {
    pub line: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub t: Option<f64>,
    /// When the crash line has no timestamp of its own: between which times it was written (`t` is then the
    /// earlier one, never the crash's own time).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub t_bounds: Option<logs::analysis::TimeBounds>,
    pub what: String,
    pub phase: String,
    pub phase_rule: String,
    pub signature: String,
    pub signature_text: String,
}

/// A cell's timeline.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CellTimeline {
    pub seq: u64,
    /// The record's `result.json`, relative to the run directory.
    pub record: String,
    pub endpoint: String,
    pub num_gpu: i64,
    pub outcome: String,
    /// The log read (absolute).
    pub log: String,
    /// The cell's slice, when `log` is its server's whole log.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub slice: Option<String>,
    pub lines: u64,
    pub entries: Vec<Entry>,
    /// Entries left out between the first and the last ones.
    pub elided: u64,
    /// Where in `entries` the left-out ones were.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub elided_at: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub crash: Option<CrashBrief>,
}

/// The timeline of `r`, read from its log under `run_dir`; none when the record names no log or it cannot be read.
/// A failed cell is read as the crash analysis reads it; a successful one through its server's whole log when it
/// has one (its start, the model load, the devices, then its requests), else its slice.
pub fn of_record(r: &Record, run_dir: &Path) -> Option<CellTimeline> {
    let slice = r.log_slice.as_deref().map(|s| run_dir.join(s));
    let (log, slice, report) = match (!r.is_ok()).then(|| forensics::slice_crash(r, run_dir)).flatten() {
        Some(sc) => (sc.log, sc.slice, sc.report),
        None => {
            let whole = r.server.as_ref().map(|s| run_dir.join(&s.log)).filter(|p| p.is_file());
            let log = whole.clone().or_else(|| slice.clone())?;
            // The record's paths were vetted (files of the run); opened still as a regular file only, never blocking.
            let file = crate::host::inputs::open_input(&log).ok()?.file;
            let report = logs::analyze_reader(file, Limits::default()).ok()?;
            (log, whole.and(slice), report)
        }
    };
    Some(build(r, &log, slice.as_deref(), &report))
}

fn build(r: &Record, log: &Path, slice: Option<&Path>, report: &Report) -> CellTimeline {
    let crash = report.crashes.last();
    let alarm_lines: Vec<u64> = report
        .crashes
        .iter()
        .flat_map(|c| {
            std::iter::once(c.line).chain(c.causes.iter().map(|l| l.line)).chain(c.consequences.iter().map(|l| l.line))
        })
        .filter(|l| *l > 0)
        .collect();
    let all: Vec<Entry> = report
        .timeline
        .iter()
        .map(|e| Entry {
            t: e.t,
            line: e.line,
            kind: e.kind.to_string(),
            summary: e.summary.clone(),
            alarm: alarm_lines.contains(&e.line),
        })
        .collect();
    let mut all = all;
    // A process killed by a signal often logs nothing about it: its crash then has no line of the timeline, and
    // is added as the last entry so that the timeline ends where the cell did.
    if let Some(c) = crash.filter(|c| !all.iter().any(|e| e.line == c.line && e.alarm)) {
        all.push(Entry {
            t: c.t.or_else(|| all.iter().filter_map(|e| e.t).reduce(f64::max)),
            line: c.line,
            kind: "crash".into(),
            summary: crate::observe::logfacts::crash_what(c),
            alarm: true,
        });
    }
    let mut elided = report.timeline_elided;
    let mut elided_at = report.timeline_elided_at;
    let entries = if all.len() > HEAD + TAIL {
        elided += (all.len() - HEAD - TAIL) as u64;
        elided_at = Some(HEAD);
        all[..HEAD].iter().chain(&all[all.len() - TAIL..]).cloned().collect()
    } else {
        all
    };
    CellTimeline {
        seq: r.seq,
        record: r.file.clone(),
        endpoint: r.endpoint.clone(),
        num_gpu: r.num_gpu,
        outcome: r.outcome(),
        log: log.display().to_string(),
        slice: slice.map(|s| s.display().to_string()),
        lines: report.stats.lines,
        entries,
        elided,
        elided_at: elided_at.filter(|_| elided > 0),
        crash: crash.map(|c| CrashBrief {
            line: c.line,
            t: c.t,
            t_bounds: c.t_bounds,
            what: crate::observe::logfacts::crash_what(c),
            phase: c.phase.label().to_string(),
            phase_rule: c.phase_rule.clone(),
            signature: c.signature.id.clone(),
            signature_text: c.signature.text.clone(),
        }),
    }
}

impl CellTimeline {
    /// The chart's marks: every timed entry.
    pub fn marks(&self) -> Vec<super::charts::Mark> {
        self.entries
            .iter()
            .filter_map(|e| Some(super::charts::Mark { t: e.t?, kind: e.kind.clone(), alarm: e.alarm }))
            .collect()
    }
}
