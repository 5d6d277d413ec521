//! Log forensics for local LLM runtimes: Ollama server logs (the Go-runner era up to v0.29 and the
//! llama-server era from v0.30), llama.cpp server/CLI logs (text, timestamped, or JSON records read by
//! [`jsonline`]), and the consoles and logs of the front ends built on them (KoboldCpp, LM Studio).
//!
//! - [`Parser`] streams bytes into typed, timestamped [`Event`]s, one per line, in bounded memory: lines
//!   are found with `memchr`, borrowed from the input, and over-long lines are cut at
//!   [`Limits::max_line`]. Unknown lines are events too ([`EventKind::Other`]), never dropped; unreadable
//!   timestamps and invalid UTF-8 are flagged, never fatal. Only input that is not a log (a NUL byte near
//!   the start) is an [`Error`].
//! - [`Analyzer`] turns events into a [`Report`]: a timeline with times relative to the first timestamp
//!   and line numbers as sources, the facts the log states (backends, devices, offload, buffers), and
//!   crash incidents with their [`Phase`] (discovery / load / first compute / decode, rules in
//!   [`analysis`]) and a normalised [`Signature`] so that identical crashes group.
//!   A log often ends without a word when its process is killed: [`Report::ending`] tells the state of
//!   the last runner (request in progress, phase), and [`Analyzer::process_exit`] lets a supervisor that
//!   saw the death (a sweep) record it as a crash placed by the same rules.
//! - [`render`] prints a report as plain text; the report is plain data (`serde::Serialize`) for other
//!   renderers.
//!
//! Every event and finding carries the line number and byte offset it rests on, so a claim built on it
//! can cite `file:line`.

#![forbid(unsafe_code)]
#![warn(missing_debug_implementations)]

pub mod analysis;
pub mod classify;
mod error;
pub mod event;
pub mod jsonline;
pub mod kmsg;
pub mod lines;
pub mod milestones;
mod parser;
pub mod placement;
pub mod prefix;
pub mod render;
pub mod signature;
pub mod slog;
pub mod time;

use std::io::Read;

pub use analysis::{Analyzer, Crash, Phase, Report, Signature};
pub use error::Error;
pub use event::{Event, EventKind};
pub use parser::{strip_ansi, Parser, Stats, READ_BLOCK};

/// Caps on memory and work, whatever the input.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Longest line kept, in bytes; the rest of a longer line is skipped and the line flagged. Real log
    /// lines run to a few KiB (Ollama's `server config` line, runner command lines).
    pub max_line: usize,
    /// A NUL byte within this many leading bytes makes the input a binary file (an error).
    pub binary_probe: usize,
    /// Timeline entries kept from the start of the log.
    pub timeline_head: usize,
    /// Timeline entries kept from the end of the log (where crashes are).
    pub timeline_tail: usize,
    pub max_crashes: usize,
    /// Frames kept per crash.
    pub max_frames: usize,
    /// Cause and consequence lines kept per crash.
    pub max_causes: usize,
    /// Ranges kept per line set (unrecognised, truncated, bad timestamps).
    pub max_ranges: usize,
    /// Entries kept per fact list (backends, devices, buffers, timings…).
    pub max_facts: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_line: 64 << 10,
            binary_probe: 8 << 10,
            timeline_head: 2000,
            timeline_tail: 2000,
            max_crashes: 256,
            max_frames: 64,
            max_causes: 32,
            max_ranges: 4096,
            max_facts: 256,
        }
    }
}

/// A set of literal patterns searched in one pass, leftmost-first (the first listed wins among matches at one place).
/// The SIMD packed searcher (Teddy) is several times faster per line than an Aho-Corasick DFA over the same
/// patterns, whose prefilter finds too many candidates in log text; the DFA is kept for a set the packed searcher
/// cannot take (too many patterns, or no SIMD on this CPU).
#[derive(Debug)]
pub(crate) enum Patterns {
    Packed(aho_corasick::packed::Searcher),
    Automaton(aho_corasick::AhoCorasick),
}

impl Patterns {
    pub(crate) fn new(patterns: &[&str]) -> Result<Self, aho_corasick::BuildError> {
        let packed = aho_corasick::packed::Config::new()
            .match_kind(aho_corasick::packed::MatchKind::LeftmostFirst)
            .builder()
            .extend(patterns)
            .build();
        match packed {
            Some(p) => Ok(Patterns::Packed(p)),
            None => aho_corasick::AhoCorasick::builder()
                .kind(Some(aho_corasick::AhoCorasickKind::DFA))
                .match_kind(aho_corasick::MatchKind::LeftmostFirst)
                .build(patterns)
                .map(Patterns::Automaton),
        }
    }

    /// The index of the leftmost match's pattern and where it starts.
    pub(crate) fn find(&self, h: &[u8]) -> Option<(usize, usize)> {
        let m = match self {
            Patterns::Packed(p) => p.find(h)?,
            Patterns::Automaton(a) => a.find(h)?,
        };
        Some((m.pattern().as_usize(), m.start()))
    }
}

/// The first position of `needle` in `h`. The needles of the rules are short literals searched in one line: finding
/// their first byte with `memchr` and comparing the rest costs less than building a `memmem` searcher for each call
/// (which the hot path did once per rule and line). Work is bounded by `h.len() × needle.len()`.
pub(crate) fn find_in(h: &[u8], needle: &[u8]) -> Option<usize> {
    let Some((&first, rest)) = needle.split_first() else { return Some(0) };
    let mut from = 0;
    while let Some(p) = memchr::memchr(first, h.get(from..)?) {
        let at = from + p;
        if h[at + 1..].starts_with(rest) {
            return Some(at);
        }
        from = at + 1;
    }
    None
}

/// Parse and analyse everything `reader` yields.
pub fn analyze_reader<R: Read>(reader: R, limits: Limits) -> Result<Report, Error> {
    let mut analyzer = Analyzer::new(limits);
    let stats = Parser::parse_reader(reader, limits, |e| analyzer.event(e))?;
    Ok(analyzer.finish(stats))
}

/// Parse and analyse a log held in memory.
pub fn analyze_bytes(log: &[u8], limits: Limits) -> Result<Report, Error> {
    let mut analyzer = Analyzer::new(limits);
    let mut parser = Parser::new(limits);
    parser.feed(log, |e| analyzer.event(e))?;
    let stats = parser.finish(|e| analyzer.event(e))?;
    Ok(analyzer.finish(stats))
}

#[cfg(test)]
mod tests {
    #[test]
    fn find_in_agrees_with_memmem() {
        let hay = b"aab abab ab\xffb aba";
        for needle in
            [&b""[..], b"a", b"ab", b"aba", b"b a", b"\xffb", b"abab ab", b"zz", b"aba ", b"aab abab ab\xffb aba!"]
        {
            assert_eq!(super::find_in(hay, needle), memchr::memmem::find(hay, needle), "{needle:?}");
        }
        assert_eq!(super::find_in(b"", b"a"), None);
    }

    /// The packed searcher and the automaton it stands in for find the same leftmost-first match: on every line of
    /// the logs of the tests and the corpus, and on patterns run together, overlapping and cut.
    #[test]
    fn packed_patterns_agree_with_the_automaton() {
        let table = crate::milestones::table();
        let patterns: Vec<&str> = table.rows.iter().map(|r| r.pattern.as_str()).collect();
        let packed = super::Patterns::new(&patterns).unwrap();
        assert!(matches!(packed, super::Patterns::Packed(_)), "this CPU's packed searcher takes the milestones");
        let automaton = super::Patterns::Automaton(
            aho_corasick::AhoCorasick::builder()
                .match_kind(aho_corasick::MatchKind::LeftmostFirst)
                .build(&patterns)
                .unwrap(),
        );
        let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
        let mut lines: Vec<Vec<u8>> = Vec::new();
        for dir in ["tests/data/logs-corpus", "crates/logs/tests/data"] {
            for entry in std::fs::read_dir(format!("{root}/{dir}")).unwrap() {
                let path = entry.unwrap().path();
                if path.extension().is_some_and(|e| e == "log") {
                    lines.extend(std::fs::read(&path).unwrap().split(|&b| b == b'\n').map(<[u8]>::to_vec));
                }
            }
        }
        for (a, b) in patterns.iter().zip(patterns.iter().skip(1)) {
            lines.push(format!("x {a}{b}").into_bytes());
            lines.push(format!("{b}{a}").into_bytes());
            lines.push(format!("{}{b}", &a[..a.len() / 2]).into_bytes());
            lines.push(a.as_bytes()[..a.len() - 1].to_vec());
        }
        let mut found = 0;
        for line in &lines {
            let got = packed.find(line);
            assert_eq!(got, automaton.find(line), "{}", String::from_utf8_lossy(line));
            found += usize::from(got.is_some());
        }
        assert!(found > 100, "{found}");
    }
}
