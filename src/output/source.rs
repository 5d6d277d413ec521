//! A claim's source as one line of markup: the layout Markdown and HTML share, written once, with each format's
//! escaping and links passed in as a [`Markup`].

use std::fmt::Write as _;

use super::doc::ClaimList;
use crate::evidence::Source;

/// How one format writes the pieces of a source line.
pub struct Markup {
    /// Running text, escaped.
    pub text: fn(&str) -> String,
    /// A name or a line as written (a path, a log line, a command line), escaped.
    pub code: fn(&str) -> String,
    /// `text` linked to the local file `path`.
    pub link: fn(text: &str, path: &str) -> String,
    /// The brackets around a rule's name, as the format must write them to show them literally.
    pub brackets: (&'static str, &'static str),
}

/// A source, linked where it names a file the reader can open (an absolute path, or a run record under a known
/// run directory).
pub fn source_line(s: &Source, list: &ClaimList, m: &Markup) -> String {
    let link = |text: &str, path: &str| -> String {
        if path.starts_with('/') {
            (m.link)(text, path)
        } else {
            (m.code)(text)
        }
    };
    match s {
        Source::File { path, offset, length, what } => {
            let mut at = String::new();
            if let Some(o) = offset {
                let _ = write!(at, " @ {o:#x}");
            }
            if let (Some(_), Some(l)) = (offset, length) {
                let _ = write!(at, " (+{l:#x})");
            }
            format!("{}{at}: {}", link(path, path), (m.text)(what))
        }
        Source::LogLine { path, line, text } => {
            format!("{}: {}", link(&format!("{path}:{line}"), path), (m.code)(text))
        }
        Source::Run { run_id, file } => match (file, list.run_dir(run_id)) {
            (Some(f), Some(d)) => format!("run {}: {}", (m.text)(run_id), link(f, &format!("{d}/{f}"))),
            (Some(f), None) => format!("run {}: {}", (m.text)(run_id), (m.code)(f)),
            (None, _) => format!("run {}", (m.text)(run_id)),
        },
        Source::Command { argv, excerpt } => {
            format!("{} → {}", (m.code)(&argv.join(" ")), (m.text)(excerpt))
        }
        Source::Rule { file, rule, upstream } => {
            let (open, close) = m.brackets;
            format!("{} {open}{}{close} ← {}", (m.code)(file), (m.text)(rule), (m.text)(upstream))
        }
    }
}
