//! The one error type of every decoder in this crate.
//!
//! It is `Copy` and allocation-free (in the spirit of `object::read::Error`): a decoder that meets hostile
//! bytes must be able to report them without allocating, and a caller that scans thousands of embedded
//! objects can keep one per object cheaply. Offsets are relative to the slice the decoder was given;
//! callers that know where that slice sits in a file use [`Error::at_base`] to turn them into file
//! offsets before showing them to a person.

use std::fmt;

/// What went wrong, where, and what was expected there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Error {
    /// Byte offset of the offending field (relative to the decoder's input unless re-based).
    pub offset: u64,
    /// The structure and field being read, e.g. `"offload bundle entry size"`.
    pub field: &'static str,
    /// What a well-formed input has there, e.g. `"an entry that ends inside the bundle"`.
    pub expected: &'static str,
}

impl Error {
    pub const fn new(offset: u64, field: &'static str, expected: &'static str) -> Self {
        Error { offset, field, expected }
    }

    /// The same error with its offset moved by `base` (the position of the decoder's input in a
    /// larger buffer or file). Saturates instead of overflowing: the offset is for people to read.
    #[must_use]
    pub const fn at_base(self, base: u64) -> Self {
        Error { offset: self.offset.saturating_add(base), ..self }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "at byte offset {:#x}: {}: expected {}", self.offset, self.field, self.expected)
    }
}

impl std::error::Error for Error {}

pub type Result<T> = std::result::Result<T, Error>;
