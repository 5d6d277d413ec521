//! Streaming GGUF v3 writer: the header, KVs and tensor infos go out first (all offsets are known from the
//! shapes and types), then tensor data is streamed in order with alignment padding after each tensor, as
//! llama.cpp's `gguf_write_to_file` and gguf-py's `GGUFWriter` lay it out. No tensor is held in memory.

use std::io::{self, Write};

use crate::format::{DEFAULT_ALIGNMENT, MAGIC, MAX_DIMS};
use crate::read::{Array, Value};
use crate::types::{GgmlType, ValueType};

/// ggml's GGML_MAX_NAME: llama.cpp rejects tensor names of this length or longer.
pub const MAX_TENSOR_NAME: usize = 64;

/// A tensor to be written: its name, shape in ggml order (`dims[0]` = row length) and type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorSpec {
    pub name: String,
    pub dims: Vec<u64>,
    pub ggml_type: GgmlType,
}

impl TensorSpec {
    pub fn new(name: impl Into<String>, dims: &[u64], ggml_type: GgmlType) -> TensorSpec {
        TensorSpec { name: name.into(), dims: dims.to_vec(), ggml_type }
    }

    pub fn n_elements(&self) -> Option<u64> {
        self.dims.iter().try_fold(1u64, |acc, &d| acc.checked_mul(d))
    }

    pub fn n_bytes(&self) -> Option<u64> {
        self.ggml_type.tensor_bytes(self.dims.first().copied().unwrap_or(1), self.n_elements()?)
    }
}

fn invalid(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg)
}

/// Writes one GGUF file. `new` writes everything up to the data section; `write_data` then takes the tensors'
/// bytes in order, in chunks of any size; `finish` checks every tensor got exactly its size.
#[derive(Debug)]
pub struct GgufWriter<W: Write> {
    out: W,
    alignment: u64,
    /// Byte size of each tensor, in order.
    sizes: Vec<u64>,
    current: usize,
    written_in_current: u64,
}

impl<W: Write> GgufWriter<W> {
    /// Writes the header, `kvs` (in order) and the tensor infos. `general.alignment`, if among `kvs`, must be a
    /// u32 power of two and sets the alignment; otherwise it is 32.
    pub fn new(out: W, kvs: &[(&str, Value<'_>)], tensors: &[TensorSpec]) -> io::Result<GgufWriter<W>> {
        let mut alignment = DEFAULT_ALIGNMENT;
        let mut seen = std::collections::HashSet::new();
        for (key, value) in kvs {
            if key.is_empty() || !seen.insert(*key) {
                return Err(invalid(format!("GGUF key {key:?} is empty or repeated")));
            }
            if *key == "general.alignment" {
                match value {
                    Value::U32(a) if *a != 0 && a.is_power_of_two() => alignment = (*a).into(),
                    v => return Err(invalid(format!("general.alignment must be a u32 power of two, not {v}"))),
                }
            }
        }
        let mut sizes = Vec::with_capacity(tensors.len());
        let mut names = std::collections::HashSet::new();
        for t in tensors {
            if t.name.is_empty() || t.name.len() >= MAX_TENSOR_NAME || !names.insert(t.name.as_str()) {
                return Err(invalid(format!(
                    "tensor name {:?} is empty, repeated or not shorter than {MAX_TENSOR_NAME} bytes",
                    t.name
                )));
            }
            if t.dims.len() > MAX_DIMS as usize || t.dims.iter().any(|&d| d > i64::MAX as u64) {
                return Err(invalid(format!(
                    "tensor {:?}: dims {:?} (at most {MAX_DIMS}, each < 2^63)",
                    t.name, t.dims
                )));
            }
            let size = t.n_bytes().ok_or_else(|| {
                invalid(format!("tensor {:?}: {} cannot hold shape {:?}", t.name, t.ggml_type, t.dims))
            })?;
            sizes.push(size);
        }

        let mut out = Counting { inner: out, count: 0 };
        out.write_all(MAGIC)?;
        out.write_all(&3u32.to_le_bytes())?;
        out.write_all(&(tensors.len() as u64).to_le_bytes())?;
        out.write_all(&(kvs.len() as u64).to_le_bytes())?;
        let mut buf = Vec::new();
        for (key, value) in kvs {
            buf.clear();
            encode_str(&mut buf, key.as_bytes());
            buf.extend_from_slice(&value.value_type().to_u32().to_le_bytes());
            out.write_all(&buf)?;
            write_value(&mut out, value)?;
        }
        let mut offset = 0u64;
        for (t, &size) in tensors.iter().zip(&sizes) {
            buf.clear();
            encode_str(&mut buf, t.name.as_bytes());
            buf.extend_from_slice(&(t.dims.len() as u32).to_le_bytes());
            for d in &t.dims {
                buf.extend_from_slice(&d.to_le_bytes());
            }
            buf.extend_from_slice(&t.ggml_type.0.to_le_bytes());
            buf.extend_from_slice(&offset.to_le_bytes());
            out.write_all(&buf)?;
            offset = size
                .checked_next_multiple_of(alignment)
                .and_then(|s| offset.checked_add(s))
                .ok_or_else(|| invalid("tensor data offsets overflow 64 bits".to_string()))?;
        }
        let pad = out.count.next_multiple_of(alignment) - out.count;
        write_zeros(&mut out, pad)?;
        let mut w = GgufWriter { out: out.inner, alignment, sizes, current: 0, written_in_current: 0 };
        w.skip_empty()?;
        Ok(w)
    }

    /// The next bytes of tensor data, continuing where the last call stopped; may span tensors.
    pub fn write_data(&mut self, mut data: &[u8]) -> io::Result<()> {
        while !data.is_empty() {
            let Some(&size) = self.sizes.get(self.current) else {
                return Err(invalid(format!("{} bytes of tensor data past the last tensor", data.len())));
            };
            let n = (size - self.written_in_current).min(data.len() as u64) as usize;
            self.out.write_all(&data[..n])?;
            self.written_in_current += n as u64;
            data = &data[n..];
            self.skip_empty()?;
        }
        Ok(())
    }

    /// Index of the tensor the next `write_data` bytes go to (`None` once all are complete).
    pub fn current_tensor(&self) -> Option<usize> {
        (self.current < self.sizes.len()).then_some(self.current)
    }

    /// Pads and moves past every complete tensor (zero-sized ones included).
    fn skip_empty(&mut self) -> io::Result<()> {
        while let Some(&size) = self.sizes.get(self.current) {
            if self.written_in_current < size {
                break;
            }
            write_zeros(&mut self.out, size.next_multiple_of(self.alignment) - size)?;
            self.current += 1;
            self.written_in_current = 0;
        }
        Ok(())
    }

    /// Checks that every tensor is complete, flushes and returns the sink.
    pub fn finish(mut self) -> io::Result<W> {
        if let Some(&size) = self.sizes.get(self.current) {
            return Err(invalid(format!(
                "tensor {} got {} of its {size} bytes; {} tensors left unwritten",
                self.current,
                self.written_in_current,
                self.sizes.len() - self.current
            )));
        }
        self.out.flush()?;
        Ok(self.out)
    }
}

/// Counts the header's bytes so the padding to the data section is known.
struct Counting<W> {
    inner: W,
    count: u64,
}

impl<W: Write> Write for Counting<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.count += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// Padding, written from a fixed buffer: an alignment can be up to 2^31 bytes.
fn write_zeros<W: Write>(out: &mut W, mut n: u64) -> io::Result<()> {
    const ZEROS: [u8; 4096] = [0; 4096];
    while n > 0 {
        let chunk = n.min(ZEROS.len() as u64) as usize;
        out.write_all(ZEROS.get(..chunk).unwrap_or_default())?;
        n -= chunk as u64;
    }
    Ok(())
}

fn encode_str(buf: &mut Vec<u8>, s: &[u8]) {
    buf.extend_from_slice(&(s.len() as u64).to_le_bytes());
    buf.extend_from_slice(s);
}

/// A value's encoding without its type tag. Arrays are written from their encoded payload as is.
fn write_value<W: Write>(out: &mut W, value: &Value<'_>) -> io::Result<()> {
    let mut buf = Vec::with_capacity(16);
    encode_scalar(&mut buf, value);
    match value {
        Value::String(s) => {
            buf.extend_from_slice(&(s.len() as u64).to_le_bytes());
            out.write_all(&buf)?;
            out.write_all(s)?;
        }
        Value::Array(a) => {
            buf.extend_from_slice(&a.elem.to_u32().to_le_bytes());
            buf.extend_from_slice(&a.len.to_le_bytes());
            out.write_all(&buf)?;
            out.write_all(a.payload)?;
        }
        _ => out.write_all(&buf)?,
    }
    Ok(())
}

/// Appends a scalar's little-endian bytes; strings and arrays append nothing here.
fn encode_scalar(buf: &mut Vec<u8>, value: &Value<'_>) {
    match *value {
        Value::U8(v) => buf.push(v),
        Value::I8(v) => buf.extend_from_slice(&v.to_le_bytes()),
        Value::U16(v) => buf.extend_from_slice(&v.to_le_bytes()),
        Value::I16(v) => buf.extend_from_slice(&v.to_le_bytes()),
        Value::U32(v) => buf.extend_from_slice(&v.to_le_bytes()),
        Value::I32(v) => buf.extend_from_slice(&v.to_le_bytes()),
        Value::F32(v) => buf.extend_from_slice(&v.to_le_bytes()),
        Value::Bool(v) => buf.push(v.into()),
        Value::U64(v) => buf.extend_from_slice(&v.to_le_bytes()),
        Value::I64(v) => buf.extend_from_slice(&v.to_le_bytes()),
        Value::F64(v) => buf.extend_from_slice(&v.to_le_bytes()),
        Value::String(_) | Value::Array(_) => {}
    }
}

/// An array assembled in memory (a padded token list, a test fixture); `as_array` lends it as a `Value`.
#[derive(Debug, Clone, PartialEq)]
pub struct ArrayBuf {
    elem: ValueType,
    len: u64,
    payload: Vec<u8>,
}

impl ArrayBuf {
    pub fn new(elem: ValueType) -> ArrayBuf {
        ArrayBuf { elem, len: 0, payload: Vec::new() }
    }

    /// Appends one element; it must have the array's element type.
    pub fn push(&mut self, v: &Value<'_>) -> io::Result<()> {
        if v.value_type() != self.elem {
            return Err(invalid(format!("array of {} cannot take a {}", self.elem, v.value_type())));
        }
        write_value(&mut self.payload, v)?;
        self.len += 1;
        Ok(())
    }

    pub fn from_values<'v>(elem: ValueType, values: impl IntoIterator<Item = Value<'v>>) -> io::Result<ArrayBuf> {
        let mut a = ArrayBuf::new(elem);
        for v in values {
            a.push(&v)?;
        }
        Ok(a)
    }

    pub fn strings<S: AsRef<[u8]>>(items: impl IntoIterator<Item = S>) -> ArrayBuf {
        let mut a = ArrayBuf::new(ValueType::String);
        for s in items {
            encode_str(&mut a.payload, s.as_ref());
            a.len += 1;
        }
        a
    }

    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn as_array(&self) -> Array<'_> {
        Array { elem: self.elem, len: self.len, payload: &self.payload }
    }

    pub fn value(&self) -> Value<'_> {
        Value::Array(self.as_array())
    }
}
