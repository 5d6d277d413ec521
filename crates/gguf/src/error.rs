//! The reader's one error type.
//!
//! It is `Copy` and allocation-free, like `binfmt::Error` (and `object::read::Error`): a reader that meets
//! hostile bytes reports them without allocating, whatever the file claims. It still says as much as a
//! person needs: the byte offset of the failing field, which key/value pair or tensor info holds it (by
//! index, and by name through [`Error::with_names`], which reads the name back from the file), which array
//! element, the field, what a well-formed file has there and, where it is a number, what was found.
//! The file's path is not stored: the caller that opened the file adds it.

use std::fmt;

/// The part of the file an error is in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Entry {
    /// The fixed header (magic, version, counts) or the file as a whole (the data section).
    Header,
    /// Key/value pair number `index` (from 0); its key's length field is at file offset `at`.
    Kv { index: u64, at: u64 },
    /// Tensor info number `index` (from 0); its name's length field is at file offset `at`.
    Tensor { index: u64, at: u64 },
    /// An array payload checked by [`crate::Array::new`]; offsets are relative to the payload.
    Payload,
}

/// What went wrong, where, and what was expected there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Error {
    /// Byte offset of the failing field in the file (in the payload for [`Entry::Payload`]).
    pub offset: u64,
    /// The key/value pair or tensor info that holds the field.
    pub entry: Entry,
    /// The element of the entry's array value that holds the field; for arrays of arrays, the index in the
    /// outermost one (`offset` says exactly where).
    pub element: Option<u64>,
    /// The field, e.g. `"string length"`, `"n_dims"`, `"tensor count"`.
    pub field: &'static str,
    /// What a well-formed file has there, e.g. `"a length within the bytes left in the file"`.
    pub expected: &'static str,
    /// The number read from the field, when it is one and helps (a length, a count, a type tag).
    pub found: Option<u64>,
}

impl Error {
    pub const fn new(offset: u64, field: &'static str, expected: &'static str) -> Error {
        Error { offset, entry: Entry::Header, element: None, field, expected, found: None }
    }

    /// The same error, saying what was found.
    #[must_use]
    pub const fn found(self, value: u64) -> Error {
        Error { found: Some(value), ..self }
    }

    /// The same error, placed in `entry` (errors from the byte reader start out in [`Entry::Header`]).
    #[must_use]
    pub(crate) const fn in_entry(self, entry: Entry) -> Error {
        Error { entry, ..self }
    }

    /// The same error, placed in element `index` of an array. Called on the way out of each nesting level,
    /// so the outermost index is the one kept.
    #[must_use]
    pub(crate) const fn in_element(self, index: u64) -> Error {
        Error { element: Some(index), ..self }
    }

    pub(crate) fn write(&self, f: &mut fmt::Formatter<'_>, name: Option<&str>) -> fmt::Result {
        write!(f, "GGUF offset {} ({:#x}), ", self.offset, self.offset)?;
        match self.entry {
            Entry::Header => {}
            Entry::Kv { index, .. } => write!(f, "kv[{index}]")?,
            Entry::Tensor { index, .. } => write!(f, "tensor[{index}]")?,
            Entry::Payload => f.write_str("array payload")?,
        }
        if let Some(name) = name {
            // Names come from the file: bounded, so a megabyte-long key does not flood the message.
            let shown = name.char_indices().nth(MAX_NAME_SHOWN).and_then(|(end, _)| name.get(..end)).unwrap_or(name);
            let more = if shown.len() < name.len() { "…" } else { "" };
            write!(f, " '{shown}{more}'")?;
        }
        if self.entry != Entry::Header {
            f.write_str(" > ")?;
        }
        if let Some(i) = self.element {
            write!(f, "element {i} > ")?;
        }
        write!(f, "{}: expected {}", self.field, self.expected)?;
        if let Some(v) = self.found {
            write!(f, ", found {v}")?;
        }
        Ok(())
    }
}

/// Characters of a key or tensor name shown in a message.
const MAX_NAME_SHOWN: usize = 96;

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.write(f, None)
    }
}

impl std::error::Error for Error {}

pub type Result<T> = std::result::Result<T, Error>;
