//! An [`Error`] displayed with the name of the key/value pair or tensor it is in, read back from the file: the one
//! part of the error's display that needs the reader.

use std::fmt;

use crate::error::{Entry, Error};
use crate::read::cursor::Cursor;

impl Error {
    /// Displays the error with the key or tensor name read back from `file` (the bytes the error came from),
    /// when that name is readable: `kv[17] 'tokenizer.ggml.tokens' > element 5 > string length`.
    pub fn with_names(self, file: &[u8]) -> WithNames<'_> {
        WithNames { error: self, file }
    }
}

/// An [`Error`] displayed with the name of its key/value pair or tensor; see [`Error::with_names`].
#[derive(Clone, Copy, Debug)]
pub struct WithNames<'a> {
    error: Error,
    file: &'a [u8],
}

impl fmt::Display for WithNames<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match self.error.entry {
            Entry::Kv { at, .. } | Entry::Tensor { at, .. } => Cursor::at(self.file, at).and_then(|mut c| c.name()),
            Entry::Header | Entry::Payload => None,
        };
        self.error.write(f, name)
    }
}
