//! Metadata values: scalars, strings and arrays, all borrowed from the file.

use std::fmt;

use crate::error::{Entry, Error, Result};
use crate::format::MAX_ARRAY_DEPTH;
use crate::types::ValueType;

use super::cursor::Cursor;

/// A metadata value. Strings are raw bytes (GGUF says UTF-8; tokenizer vocabularies do not always comply).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Value<'a> {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    F32(f32),
    Bool(bool),
    String(&'a [u8]),
    Array(Array<'a>),
    U64(u64),
    I64(i64),
    F64(f64),
}

impl<'a> Value<'a> {
    pub fn value_type(&self) -> ValueType {
        match self {
            Value::U8(_) => ValueType::U8,
            Value::I8(_) => ValueType::I8,
            Value::U16(_) => ValueType::U16,
            Value::I16(_) => ValueType::I16,
            Value::U32(_) => ValueType::U32,
            Value::I32(_) => ValueType::I32,
            Value::F32(_) => ValueType::F32,
            Value::Bool(_) => ValueType::Bool,
            Value::String(_) => ValueType::String,
            Value::Array(_) => ValueType::Array,
            Value::U64(_) => ValueType::U64,
            Value::I64(_) => ValueType::I64,
            Value::F64(_) => ValueType::F64,
        }
    }

    /// Any integer type holding a non-negative value (writers disagree on u32 vs u64 vs i32 for counts).
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            Value::U8(v) => Some(v.into()),
            Value::U16(v) => Some(v.into()),
            Value::U32(v) => Some(v.into()),
            Value::U64(v) => Some(v),
            Value::I8(v) => u64::try_from(v).ok(),
            Value::I16(v) => u64::try_from(v).ok(),
            Value::I32(v) => u64::try_from(v).ok(),
            Value::I64(v) => u64::try_from(v).ok(),
            _ => None,
        }
    }

    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            Value::F32(v) => Some(v.into()),
            Value::F64(v) => Some(v),
            _ => None,
        }
    }

    pub fn as_str(&self) -> Option<&'a str> {
        match *self {
            Value::String(s) => std::str::from_utf8(s).ok(),
            _ => None,
        }
    }

    pub fn as_array(&self) -> Option<Array<'a>> {
        match *self {
            Value::Array(a) => Some(a),
            _ => None,
        }
    }
}

impl fmt::Display for Value<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::U8(v) => write!(f, "{v}"),
            Value::I8(v) => write!(f, "{v}"),
            Value::U16(v) => write!(f, "{v}"),
            Value::I16(v) => write!(f, "{v}"),
            Value::U32(v) => write!(f, "{v}"),
            Value::I32(v) => write!(f, "{v}"),
            Value::F32(v) => write!(f, "{v}"),
            Value::Bool(v) => write!(f, "{v}"),
            Value::String(s) => write!(f, "{:?}", String::from_utf8_lossy(s)),
            Value::Array(a) => write!(f, "[{}; {}]", a.elem, a.len),
            Value::U64(v) => write!(f, "{v}"),
            Value::I64(v) => write!(f, "{v}"),
            Value::F64(v) => write!(f, "{v}"),
        }
    }
}

/// An array value kept as its encoded payload: a 150,000-token vocabulary costs a slice, not 150,000 values.
/// Elements are decoded on iteration; the payload was fully validated when the file was parsed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Array<'a> {
    pub elem: ValueType,
    pub len: u64,
    /// The encoded elements, without the array's own type and count.
    pub payload: &'a [u8],
}

impl<'a> Array<'a> {
    /// Check that `payload` holds exactly `len` valid elements of type `elem` (used for arrays built in memory).
    pub fn new(elem: ValueType, len: u64, payload: &'a [u8]) -> Result<Array<'a>> {
        let mut c = Cursor::new(payload);
        let arr = c.array_body(elem, len, 0).map_err(|e| e.in_entry(Entry::Payload))?;
        if c.remaining() != 0 {
            return Err(Error::new(c.offset(), "trailing bytes", "none after the last element")
                .found(c.remaining())
                .in_entry(Entry::Payload));
        }
        Ok(arr)
    }

    pub fn iter(&self) -> ArrayIter<'a> {
        ArrayIter { cursor: Cursor::new(self.payload), elem: self.elem, left: self.len }
    }

    /// The elements as byte strings, if this is an array of strings.
    pub fn strings(&self) -> Option<impl Iterator<Item = &'a [u8]> + 'a> {
        (self.elem == ValueType::String).then(|| {
            self.iter().map(|v| match v {
                Value::String(s) => s,
                _ => &[][..],
            })
        })
    }
}

/// Decodes an already validated array payload; stops (fused) at the first inconsistency instead of panicking.
#[derive(Debug, Clone)]
pub struct ArrayIter<'a> {
    cursor: Cursor<'a>,
    elem: ValueType,
    left: u64,
}

impl<'a> Iterator for ArrayIter<'a> {
    type Item = Value<'a>;

    fn next(&mut self) -> Option<Value<'a>> {
        if self.left == 0 {
            return None;
        }
        match self.cursor.value(self.elem, 1) {
            Ok(v) => {
                self.left -= 1;
                Some(v)
            }
            Err(_) => {
                self.left = 0;
                None
            }
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (0, usize::try_from(self.left).ok())
    }
}

/// Values as the file encodes them: a type tag, then the value; arrays validated element by element.
impl<'a> Cursor<'a> {
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
