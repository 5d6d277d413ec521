//! Errors of the log parser.
//!
//! Almost nothing in a log is an error for this crate: unknown lines become `other` events, unreadable
//! timestamps are flagged, over-long lines are cut. What remains is input that is not a log at all, and
//! I/O failures of the reader.

use std::fmt;

#[derive(Debug)]
pub enum Error {
    /// A NUL byte within the first `Limits::binary_probe` bytes: the input is a binary file.
    Binary { offset: u64 },
    /// Reading the input failed.
    Io(std::io::Error),
    /// The parser was used after it failed or finished.
    Fused,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Binary { offset } => write!(
                f,
                "at byte offset {offset:#x}: NUL byte near the start of the input: expected a text log, \
                 this looks like a binary file"
            ),
            Error::Io(e) => write!(f, "reading the log failed: {e}"),
            Error::Fused => write!(f, "the log parser was used after it had failed or finished"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io(e) => Some(e),
            _ => None,
        }
    }
}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Self {
        Error::Io(e)
    }
}
