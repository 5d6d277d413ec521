//! Log forensics of failed cells, at report time: each failed record's log slice (the server log written while
//! its cell ran) goes through `backscope-logs`, which places the crash in a phase (discovery, load, first compute,
//! decode) and gives it a signature so that identical crashes group. The sweep runner is untouched: the logs are
//! read from the run directory when the claims are made.
//!
//! The phase rests on what the server did before the cell (was it ready, had it served a request), which is in
//! the server's log before the slice. So when a managed server died in the cell, its whole log is read: that log
//! ends with the slice, because a dead server writes no more and the next cell gets a new server and a new log.
//! A server that lived on is read through the slice alone (the rest of its log belongs to later cells).
//!
//! A server killed by a signal often logs nothing about it; the record's wait status is handed to the analysis
//! as the process's death (`Analyzer::process_exit`), which places it by the same rules.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use logs::analysis::{Crash, Report};
use logs::{Analyzer, Limits, Parser, Phase};

use crate::evidence::{Claim, Confidence, Source};
use crate::run::format::record::{ErrorClass, Record};

/// Most records whose slices are read per point (a point that failed a thousand times has one story).
const MAX_SLICES_PER_POINT: usize = 32;
/// Most run-record sources listed under one claim.
const MAX_RUN_SOURCES: usize = 8;

/// What a failed record's log says about its crash.
#[derive(Debug)]
pub struct SliceCrash {
    /// The log read: the cell's slice, or the whole log of the server that died in the cell.
    pub log: PathBuf,
    /// The cell's slice, when `log` is the server's whole log.
    pub slice: Option<PathBuf>,
    /// Holds at least one crash ([`slice_crash`] returns none otherwise).
    pub report: Report,
}

impl SliceCrash {
    /// The crash that ended the cell: the last one the log shows.
    pub fn crash(&self) -> &Crash {
        self.report.crashes.last().expect("slice_crash keeps only reports with a crash")
    }
}

/// How the record says its server process ended, in words for the analysis; `None` when the server did not die
/// (an HTTP error, a timeout) or its death is not known.
fn death(r: &Record) -> Option<String> {
    match (r.error_class, r.signal.as_deref(), r.signal_source.as_deref(), r.exit_code) {
        (Some(ErrorClass::Crash), Some(sig), Some("wait status"), _) => {
            Some(format!("the server was killed by {sig} (its wait status, read by backscope)"))
        }
        (Some(ErrorClass::ServerExit), _, _, Some(code)) => Some(format!("the server exited with status {code}")),
        _ => None,
    }
}

/// Analyses the log of `r`'s failure (see the module documentation for which log); `None` when the record has no
/// log, it cannot be read, or it shows no crash.
pub fn slice_crash(r: &Record, run_dir: &Path) -> Option<SliceCrash> {
    let slice = run_dir.join(r.log_slice.as_deref()?);
    let death = death(r);
    let server_log = r.server.as_ref().filter(|_| death.is_some()).map(|s| run_dir.join(&s.log));
    let (log, slice) = match server_log {
        Some(whole) if whole != slice && whole.is_file() => (whole, Some(slice)),
        _ => (slice, None),
    };
    let file = crate::host::inputs::open_input(&log).ok()?.file;
    let limits = Limits::default();
    let mut analyzer = Analyzer::new(limits);
    let stats = Parser::parse_reader(file, limits, |e| analyzer.event(e)).ok()?;
    if let Some(d) = death {
        analyzer.process_exit(&d);
    }
    let report = analyzer.finish(stats);
    if report.crashes.is_empty() {
        return None;
    }
    Some(SliceCrash { log, slice, report })
}

fn phase_words(p: Phase) -> &'static str {
    match p {
        Phase::Discovery => "GPU discovery",
        Phase::Load => "model loading",
        Phase::FirstCompute => "the first compute on the model",
        Phase::Decode => "decoding (a request had already computed in this server)",
        Phase::Unknown => "an unknown phase",
    }
}

fn line_source(sc: &SliceCrash, line: u64) -> Source {
    let text = sc.report.timeline.iter().find(|e| e.line == line).map(|e| e.raw.clone()).unwrap_or_default();
    let text: String = text.chars().take(300).collect();
    Source::LogLine { path: sc.log.display().to_string(), line, text }
}

/// One claim per crash signature among a point's failed records: the phase and signature their log slices give.
/// `base_id` and `at` are the point's claim id and its description (`num_gpu=1`).
pub fn point_claims(recs: &[&Record], base_id: &str, at: &str, endpoint: &str, run_dir: &Path) -> Vec<Claim> {
    let mut groups: BTreeMap<String, (SliceCrash, Vec<&Record>)> = BTreeMap::new();
    let mut order: Vec<String> = Vec::new();
    for r in recs.iter().copied().filter(|r| !r.is_ok()).take(MAX_SLICES_PER_POINT) {
        let Some(sc) = slice_crash(r, run_dir) else { continue };
        let id = sc.crash().signature.id.clone();
        match groups.get_mut(&id) {
            Some((_, rs)) => rs.push(r),
            None => {
                order.push(id.clone());
                groups.insert(id, (sc, vec![r]));
            }
        }
    }
    let mut out = Vec::new();
    for (n, id) in order.iter().enumerate() {
        let Some((sc, rs)) = groups.get(id) else { continue };
        let c = sc.crash();
        let confidence = if c.phase == Phase::Unknown { Confidence::Unresolved } else { Confidence::Inferred };
        let signature = if c.signature.text.is_empty() { String::new() } else { format!(": {}", c.signature.text) };
        let read = if sc.slice.is_some() {
            "the log of the server that died (it ends with the cell's slice)"
        } else {
            "the cell's log slice"
        };
        let statement = format!(
            "`{endpoint}` at {at}: {read} places the failure of {} run(s) in {}: {}; crash signature {}{signature}",
            rs.len(),
            phase_words(c.phase),
            c.phase_rule,
            c.signature.id,
        );
        let mut sources: Vec<Source> = Vec::new();
        if c.line > 0 {
            sources.push(line_source(sc, c.line));
        }
        sources.extend(c.phase_lines.iter().filter(|l| **l != c.line).take(4).map(|l| line_source(sc, *l)));
        if let Some(slice) = &sc.slice {
            sources.push(Source::file(slice.display().to_string(), None, None, "the cell's log slice"));
        }
        sources.extend(
            rs.iter()
                .take(MAX_RUN_SOURCES)
                .map(|r| Source::Run { run_id: r.run_id.clone(), file: Some(r.file.clone()) }),
        );
        let mut claim =
            Claim::new(format!("{base_id}.crash_phase.{}", n + 1), confidence, statement).with_sources(sources);
        let name = sc.log.display().to_string();
        crate::observe::logfacts::fill_line_texts(std::slice::from_mut(&mut claim), &sc.log, &name);
        out.push(claim);
    }
    out
}
