//! What classifying a message gives, and the state carried from line to line.

use crate::event::EventKind;
use crate::time::Timestamp;

/// State carried from line to line.
#[derive(Clone, Copy, Debug, Default)]
pub struct Context {
    /// Inside a Go goroutine dump (after a `goroutine N …:` header): frame lines are read as frames.
    pub in_go_trace: bool,
    /// Inside a native backtrace (after a first frame line).
    pub in_native_trace: bool,
}

/// A classified message.
#[derive(Clone, Copy, Debug)]
pub struct Classified<'a> {
    pub kind: EventKind<'a>,
    /// A timestamp inside the message (slog `time=`, Gin's date).
    pub time: Option<Timestamp>,
    /// The message had a timestamp field that could not be read.
    pub bad_timestamp: bool,
    /// A progress message the line began with, before the message `kind` describes (see [`Event::before`]).
    ///
    /// [`Event::before`]: crate::event::Event::before
    pub before: Option<crate::event::Before>,
}

impl<'a> Classified<'a> {
    pub(super) fn plain(kind: EventKind<'a>) -> Self {
        Classified { kind, time: None, bad_timestamp: false, before: None }
    }
}
