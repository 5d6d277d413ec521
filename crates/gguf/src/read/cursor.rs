//! Bounds-checked little-endian reads over the file (or one array payload).
//!
//! Every read either returns the value or an [`Error`] at the field's offset; lengths and counts read from
//! the file are checked against the bytes left before anything is cut, so a length of 2^63 is an error, not
//! an allocation or an overflow. Errors come out in [`crate::Entry::Header`]; the caller places them.

use crate::error::{Error, Result};
use crate::types::ValueType;

use super::value::{Array, Value};
use super::MAX_ARRAY_DEPTH;

#[derive(Debug, Clone)]
pub(crate) struct Cursor<'a> {
    data: &'a [u8],
    pos: usize,
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

    fn array<const N: usize>(&mut self, field: &'static str) -> Result<[u8; N]> {
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

    /// A u32 type tag followed by a value of that type.
    pub(crate) fn tagged_value(&mut self, depth: u32) -> Result<Value<'a>> {
        let ty = self.value_type("value type")?;
        self.value(ty, depth)
    }

    fn value_type(&mut self, field: &'static str) -> Result<ValueType> {
        let at = self.offset();
        let tag = self.u32(field)?;
        ValueType::from_u32(tag).ok_or_else(|| Error::new(at, field, "a GGUF value type (0 to 12)").found(tag.into()))
    }

    /// One value of type `ty`; `depth` is how many arrays enclose it.
    pub(crate) fn value(&mut self, ty: ValueType, depth: u32) -> Result<Value<'a>> {
        Ok(match ty {
            ValueType::U8 => Value::U8(u8::from_le_bytes(self.array("u8")?)),
            ValueType::I8 => Value::I8(i8::from_le_bytes(self.array("i8")?)),
            ValueType::U16 => Value::U16(u16::from_le_bytes(self.array("u16")?)),
            ValueType::I16 => Value::I16(i16::from_le_bytes(self.array("i16")?)),
            ValueType::U32 => Value::U32(self.u32("u32")?),
            ValueType::I32 => Value::I32(i32::from_le_bytes(self.array("i32")?)),
            ValueType::F32 => Value::F32(f32::from_le_bytes(self.array("f32")?)),
            ValueType::Bool => {
                let at = self.offset();
                match self.array::<1>("bool")? {
                    [0] => Value::Bool(false),
                    [1] => Value::Bool(true),
                    [b] => return Err(Error::new(at, "bool", "0 or 1").found(b.into())),
                }
            }
            ValueType::String => Value::String(self.string("string", "string length")?),
            ValueType::U64 => Value::U64(self.u64("u64")?),
            ValueType::I64 => Value::I64(i64::from_le_bytes(self.array("i64")?)),
            ValueType::F64 => Value::F64(f64::from_le_bytes(self.array("f64")?)),
            ValueType::Array => {
                // Arrays of arrays are legal GGUF but nothing real nests deeply; the bound keeps this
                // recursion far from the stack limit.
                if depth >= MAX_ARRAY_DEPTH {
                    return Err(Error::new(self.offset(), "array", "arrays nested at most 8 deep"));
                }
                let elem = self.value_type("array element type")?;
                let len = self.u64("array length")?;
                Value::Array(self.array_body(elem, len, depth + 1)?)
            }
        })
    }

    /// `len` elements of type `elem`, validated, returned as a slice of this cursor's data.
    pub(crate) fn array_body(&mut self, elem: ValueType, len: u64, depth: u32) -> Result<Array<'a>> {
        let at = self.offset();
        // Bound the count by the bytes left before reading any element: a claimed 2^62 elements fails here.
        if len.checked_mul(elem.min_size() as u64).is_none_or(|n| n > self.remaining()) {
            return Err(Error::new(
                at.saturating_sub(8),
                "array length",
                "an element count whose elements fit in the bytes left in the file",
            )
            .found(len));
        }
        let start = self.pos;
        match elem.fixed_size() {
            Some(size) => {
                let elements = self.take(len * size as u64, "array elements")?;
                if elem == ValueType::Bool {
                    if let Some((i, &b)) = elements.iter().enumerate().find(|(_, &b)| b > 1) {
                        let i = i as u64;
                        return Err(Error::new(at + i, "bool", "0 or 1").found(b.into()).in_element(i));
                    }
                }
            }
            None => {
                for i in 0..len {
                    self.value(elem, depth).map_err(|e| e.in_element(i))?;
                }
            }
        }
        let payload = self.data.get(start..self.pos).unwrap_or_default();
        Ok(Array { elem, len, payload })
    }
}
