//! Messages to standard error: warnings, notes and the final error. A closed or broken standard error never
//! panics (as `eprintln!` would) and never changes the exit status: the message is dropped.
//!
//! Every message goes through [`escape::message`]: names and values in it come from files, logs, records and
//! children (a GGUF tensor name, a path, a log line), and a terminal obeys the escape sequences they may hold
//! (window title, screen clear, OSC 52 clipboard writes); here they are written visibly instead.

use std::fmt::Display;
use std::io::Write;

use super::escape;

/// `backscope: MESSAGE` on standard error.
pub fn note(message: impl Display) {
    let text = escape::message(&message.to_string());
    let _ = writeln!(std::io::stderr().lock(), "backscope: {text}");
}

/// A line on standard error as it is, but for its hazards (a child's output shown with `-v`, a log tail after a
/// failure).
pub fn line(text: impl Display) {
    let text = escape::message(&text.to_string());
    let _ = writeln!(std::io::stderr().lock(), "{text}");
}
