//! Messages to standard error: warnings, notes and the final error. A closed or broken standard error never
//! panics (as `eprintln!` would) and never changes the exit status: the message is dropped.

use std::fmt::Display;
use std::io::Write;

/// `backscope: MESSAGE` on standard error.
pub fn note(message: impl Display) {
    let _ = writeln!(std::io::stderr().lock(), "backscope: {message}");
}

/// A line on standard error as it is (a child's output shown with `-v`, a log tail after a failure).
pub fn line(text: impl Display) {
    let _ = writeln!(std::io::stderr().lock(), "{text}");
}
