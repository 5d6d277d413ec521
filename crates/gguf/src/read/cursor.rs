//! Bounds-checked little-endian reads over the file (or one array payload).
//!
//! Every read either returns the value or an [`Error`] at the field's offset; lengths and counts read from
//! the file are checked against the bytes left before anything is cut, so a length of 2^63 is an error, not
//! an allocation or an overflow. Errors come out in [`crate::Entry::Header`]; the caller places them.

use crate::error::{Error, Result};

#[derive(Debug, Clone)]
pub(crate) struct Cursor<'a> {
    pub(super) data: &'a [u8],
    pub(super) pos: usize,
}

/// What a fixed-width field needs, by width.
fn expected_bytes(n: u64) -> &'static str {
    match n {
        1 => "1 byte before the end of the file (truncated?)",
        2 => "2 bytes before the end of the file (truncated?)",
        4 => "4 bytes before the end of the file (truncated?)",
        8 => "8 bytes before the end of the file (truncated?)",
        _ => "the field's bytes before the end of the file (truncated?)",
    }
}

impl<'a> Cursor<'a> {
    pub(crate) fn new(data: &'a [u8]) -> Cursor<'a> {
        Cursor { data, pos: 0 }
    }

    /// A cursor at `offset`, if that lies inside `data`.
    pub(crate) fn at(data: &'a [u8], offset: u64) -> Option<Cursor<'a>> {
        let pos = usize::try_from(offset).ok().filter(|&p| p <= data.len())?;
        Some(Cursor { data, pos })
    }

    pub(crate) fn offset(&self) -> u64 {
        self.pos as u64
    }

    pub(crate) fn remaining(&self) -> u64 {
        self.data.len().saturating_sub(self.pos) as u64
    }

    /// The next `n` bytes.
    pub(crate) fn take(&mut self, n: u64, field: &'static str) -> Result<&'a [u8]> {
        let bytes = usize::try_from(n).ok().and_then(|n| self.data.get(self.pos..)?.get(..n));
        match bytes {
            Some(b) => {
                self.pos += b.len();
                Ok(b)
            }
            None => Err(Error::new(self.offset(), field, expected_bytes(n))),
        }
    }

    pub(super) fn array<const N: usize>(&mut self, field: &'static str) -> Result<[u8; N]> {
        let at = self.offset();
        self.take(N as u64, field)?.try_into().map_err(|_| Error::new(at, field, expected_bytes(N as u64)))
    }

    pub(crate) fn u32(&mut self, field: &'static str) -> Result<u32> {
        Ok(u32::from_le_bytes(self.array(field)?))
    }

    pub(crate) fn u64(&mut self, field: &'static str) -> Result<u64> {
        Ok(u64::from_le_bytes(self.array(field)?))
    }

    /// A u64 length (the field `length_field`) followed by that many bytes (the field `field`).
    pub(crate) fn string(&mut self, field: &'static str, length_field: &'static str) -> Result<&'a [u8]> {
        let at = self.offset();
        let len = self.u64(length_field)?;
        if len > self.remaining() {
            return Err(Error::new(at, length_field, "a length within the bytes left in the file").found(len));
        }
        self.take(len, field)
    }

    pub(crate) fn utf8(&mut self, field: &'static str, length_field: &'static str) -> Result<&'a str> {
        let at = self.offset();
        let s = self.string(field, length_field)?;
        std::str::from_utf8(s).map_err(|_| Error::new(at, field, "UTF-8 text"))
    }

    /// A key or tensor name at the cursor, if it reads cleanly (for error messages).
    pub(crate) fn name(&mut self) -> Option<&'a str> {
        self.utf8("name", "name length").ok()
    }
}
