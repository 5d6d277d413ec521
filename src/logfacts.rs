//! Facts drawn from server logs for any command that cites them (`logs`, `report`'s timelines, the sweep's
//! forensics): the one-phrase description of a crash, and the text of cited log lines. A ground-floor module over
//! `crates/logs`, so that no command reaches into another's internals for them.

use std::path::Path;

use logs::analysis::Crash;
use logs::Limits;

use crate::evidence::{Claim, Source};
use crate::output::text::truncate;

/// Fills in the text of every `LogLine` source that cites `name` without its text, by reading `path` again
/// (streamed, each line capped as the parser caps it). Errors leave the texts empty.
pub fn fill_line_texts(claims: &mut [Claim], path: &Path, name: &str) {
    let wanted: std::collections::BTreeSet<u64> = claims
        .iter()
        .flat_map(|c| &c.sources)
        .filter_map(|s| match s {
            Source::LogLine { path: p, line, text } if p == name && text.is_empty() => Some(*line),
            _ => None,
        })
        .collect();
    let Some(&last) = wanted.last() else { return };
    // Only a regular file (a FIFO swapped in since the first read would block here).
    let Ok(crate::inputs::Input { file, .. }) = crate::inputs::open_input(path) else { return };
    let mut found = std::collections::BTreeMap::new();
    let _ = logs::Parser::parse_reader(file, Limits::default(), |e| {
        if e.line <= last && wanted.contains(&e.line) {
            found.insert(e.line, truncate(&String::from_utf8_lossy(e.raw), 300));
        }
    });
    for c in claims.iter_mut() {
        for s in &mut c.sources {
            if let Source::LogLine { path: p, line, text } = s {
                if p == name && text.is_empty() {
                    if let Some(t) = found.get(line) {
                        *text = t.clone();
                    }
                }
            }
        }
    }
}

/// When the crash was written, in parentheses: its own time, or the bracket of a time its first line inherits
/// from the lines around it (never a point: the line has no timestamp).
pub fn crash_time(c: &Crash) -> String {
    logs::render::time_words(c.t, c.t_bounds).map(|w| format!(" ({w})")).unwrap_or_default()
}

/// What a crash was, in words: the signal with its addresses, else its first cause, else its first consequence.
pub fn crash_what(c: &Crash) -> String {
    if let Some(s) = &c.signal {
        let mut w = if s.name.is_empty() { "a signal".to_string() } else { s.name.clone() };
        if !s.description.is_empty() {
            w += &format!(" ({})", s.description);
        }
        if let Some(pc) = &s.pc {
            w += &format!(" PC={pc}");
        }
        if let Some(addr) = &s.addr {
            w += &format!(" addr={addr}");
        }
        if s.in_foreign_code {
            w += ", in C/C++ code called from Go (signal arrived during cgo execution)";
        }
        return w;
    }
    c.causes.first().or(c.consequences.first()).map(|l| truncate(&l.text, 200)).unwrap_or_else(|| "a failure".into())
}
