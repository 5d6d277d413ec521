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
pub(crate) mod facts;
pub mod jsonline;
pub mod kmsg;
mod limits;
pub mod lines;
pub mod milestones;
mod parser;
mod patterns;
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
pub use limits::Limits;
pub use parser::{strip_ansi, Parser, Stats, READ_BLOCK};

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
