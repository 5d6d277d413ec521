//! GGUF reader over a byte slice (normally an mmap): every string, array and tensor borrows from the input.
//!
//! Layout (GGUF v2/v3, little-endian; llama.cpp ggml/src/gguf.cpp `gguf_init_from_file_impl`, gguf-py
//! gguf_reader.py): magic `GGUF`, u32 version, u64 tensor count, u64 KV count, the KVs (u64-length key, u32
//! value type, value), the tensor infos (name, u32 n_dims, n_dims × u64 dims, u32 ggml type, u64 offset into
//! the data section), padding to `general.alignment` (default 32), then the data section.
//!
//! Nothing is sized from an unchecked length: every count is checked against the bytes left before it is used,
//! so a tensor count of 2^63 or a string length past the end of the file is an error, not an allocation.

use std::collections::{BTreeMap, HashSet};
use std::fmt;
use std::path::{Path, PathBuf};

use super::error::GgufError;
use super::types::{GgmlType, ValueType};

pub const MAGIC: &[u8; 4] = b"GGUF";
pub const DEFAULT_ALIGNMENT: u64 = 32;
/// ggml's GGML_MAX_DIMS: llama.cpp and gguf-py reject tensors with more dimensions.
pub const MAX_DIMS: u32 = 4;
/// Arrays of arrays are legal GGUF but nothing real nests deeply; the bound keeps recursion off the stack limit.
pub const MAX_ARRAY_DEPTH: u32 = 8;
/// Smallest tensor info: u64 name length (empty name), u32 n_dims (0), u32 type, u64 offset.
const MIN_TENSOR_INFO: u64 = 8 + 4 + 4 + 8;
/// Smallest KV: u64 key length (empty key), u32 type, one-byte value.
const MIN_KV: u64 = 8 + 4 + 1;

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
    pub fn new(elem: ValueType, len: u64, payload: &'a [u8]) -> Result<Array<'a>, GgufError> {
        let mut c = Cursor::new(payload, 0);
        let arr = c.array_body(elem, len, 0)?;
        if c.remaining() != 0 {
            return Err(GgufError::new(
                c.offset(),
                "array payload",
                format!("{} bytes past the last element", c.remaining()),
            ));
        }
        Ok(arr)
    }

    pub fn iter(&self) -> ArrayIter<'a> {
        ArrayIter { cursor: Cursor::new(self.payload, 0), elem: self.elem, left: self.len }
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

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Kv<'a> {
    pub key: &'a str,
    pub value: Value<'a>,
    /// File offset of the key's length field.
    pub offset: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorInfo<'a> {
    pub name: &'a str,
    /// ggml order: `dims[0]` is the row length (ne0), the fastest-varying dimension.
    pub dims: Vec<u64>,
    pub ggml_type: GgmlType,
    /// Offset of the data relative to the data section.
    pub offset: u64,
    pub n_elements: u64,
    pub n_bytes: u64,
    /// File offset of this tensor info (its name's length field).
    pub info_offset: u64,
}

/// Tensors of one ggml type.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TypeTotals {
    pub tensors: u64,
    pub elements: u64,
    pub bytes: u64,
}

/// A parsed GGUF file.
#[derive(Debug, Clone)]
pub struct Gguf<'a> {
    pub version: u32,
    pub kvs: Vec<Kv<'a>>,
    pub tensors: Vec<TensorInfo<'a>>,
    pub alignment: u64,
    /// End of the tensor infos: where the header ends and padding to the data section begins.
    pub header_end: u64,
    /// Start of the data section (`header_end` rounded up to `alignment`).
    pub data_offset: u64,
    pub file_size: u64,
    bytes: &'a [u8],
}

impl<'a> Gguf<'a> {
    pub fn parse(bytes: &'a [u8]) -> Result<Gguf<'a>, GgufError> {
        let file_size = bytes.len() as u64;
        let mut c = Cursor::new(bytes, 0);
        let magic = c.take(4, "magic")?;
        if magic != MAGIC {
            return Err(GgufError::new(
                0,
                "magic",
                format!("expected \"GGUF\", found {:?}", String::from_utf8_lossy(magic)),
            ));
        }
        let version = c.u32("version")?;
        match version {
            2 | 3 => {}
            1 => return Err(GgufError::new(4, "version", "GGUF v1 (32-bit counts) is not supported; expected 2 or 3")),
            v if v & 0xffff == 0 => {
                return Err(GgufError::new(
                    4,
                    "version",
                    format!("found {v:#x}: a big-endian GGUF; only little-endian files are supported"),
                ))
            }
            v => return Err(GgufError::new(4, "version", format!("expected 2 or 3, found {v}"))),
        }
        let tensor_count_at = c.offset();
        let tensor_count = c.u64("tensor count")?;
        let kv_count_at = c.offset();
        let kv_count = c.u64("KV count")?;
        // Bound both counts by the bytes left before allocating anything from them.
        let left = c.remaining() as u64;
        if tensor_count.checked_mul(MIN_TENSOR_INFO).is_none_or(|n| n > left) {
            return Err(GgufError::new(
                tensor_count_at,
                "tensor count",
                format!(
                    "{tensor_count} tensors cannot fit: each tensor info takes at least {MIN_TENSOR_INFO} bytes and \
                     {left} bytes follow the header"
                ),
            ));
        }
        if kv_count.checked_mul(MIN_KV).is_none_or(|n| n > left) {
            return Err(GgufError::new(
                kv_count_at,
                "KV count",
                format!(
                    "{kv_count} key/value pairs cannot fit: each takes at least {MIN_KV} bytes and {left} bytes \
                     follow the header"
                ),
            ));
        }

        let mut kvs = Vec::with_capacity(kv_count as usize);
        let mut keys = HashSet::with_capacity(kv_count as usize);
        for i in 0..kv_count {
            let offset = c.offset();
            let key = c.utf8_string("key").map_err(|e| e.within(format!("kv[{i}]")))?;
            if key.is_empty() {
                return Err(GgufError::new(offset, format!("kv[{i}] key"), "expected a non-empty key"));
            }
            if !keys.insert(key) {
                return Err(GgufError::new(offset, format!("kv[{i}] '{key}'"), "duplicate key"));
            }
            let value = c.tagged_value("value type", 0).map_err(|e| e.within(format!("kv[{i}] '{key}'")))?;
            kvs.push(Kv { key, value, offset });
        }

        let mut alignment = DEFAULT_ALIGNMENT;
        if let Some(kv) = kvs.iter().find(|kv| kv.key == "general.alignment") {
            // llama.cpp and gguf-py both require a u32 here.
            match kv.value {
                Value::U32(a) if a != 0 && a.is_power_of_two() => alignment = a.into(),
                v => {
                    return Err(GgufError::new(
                        kv.offset,
                        "kv 'general.alignment'",
                        format!("expected a UINT32 non-zero power of two, found {} {v}", v.value_type()),
                    ))
                }
            }
        }

        let mut tensors = Vec::with_capacity(tensor_count as usize);
        let mut names = HashSet::with_capacity(tensor_count as usize);
        for i in 0..tensor_count {
            let t = c.tensor_info().map_err(|e| e.within(format!("tensor[{i}]")))?;
            if !names.insert(t.name) {
                return Err(GgufError::new(
                    t.info_offset,
                    format!("tensor[{i}] '{}'", t.name),
                    "duplicate tensor name",
                ));
            }
            if t.offset % alignment != 0 {
                return Err(GgufError::new(
                    t.info_offset,
                    format!("tensor[{i}] '{}' offset", t.name),
                    format!("expected a multiple of the alignment {alignment}, found {}", t.offset),
                ));
            }
            tensors.push(t);
        }
        let header_end = c.offset();
        let data_offset = header_end
            .checked_next_multiple_of(alignment)
            .ok_or_else(|| GgufError::new(header_end, "data section", "offset overflows"))?;
        for (i, t) in tensors.iter().enumerate() {
            let end = data_offset.checked_add(t.offset).and_then(|s| s.checked_add(t.n_bytes));
            if end.is_none_or(|e| e > file_size) {
                return Err(GgufError::new(
                    data_offset.saturating_add(t.offset),
                    format!("tensor[{i}] '{}' data", t.name),
                    format!(
                        "expected {} bytes at data offset {} + {}, but the file has {file_size} bytes (truncated?)",
                        t.n_bytes, data_offset, t.offset
                    ),
                ));
            }
        }
        Ok(Gguf { version, kvs, tensors, alignment, header_end, data_offset, file_size, bytes })
    }

    pub fn get(&self, key: &str) -> Option<&Value<'a>> {
        self.kvs.iter().find(|kv| kv.key == key).map(|kv| &kv.value)
    }

    pub fn get_str(&self, key: &str) -> Option<&'a str> {
        self.get(key).and_then(|v| v.as_str())
    }

    pub fn get_u64(&self, key: &str) -> Option<u64> {
        self.get(key).and_then(|v| v.as_u64())
    }

    /// `general.architecture`: the prefix of the model's hyperparameter keys (`llama`, `qwen2`, …).
    pub fn architecture(&self) -> Option<&'a str> {
        self.get_str("general.architecture")
    }

    /// `<arch>.<suffix>` as an unsigned integer.
    pub fn arch_u64(&self, suffix: &str) -> Option<u64> {
        self.get_u64(&format!("{}.{suffix}", self.architecture()?))
    }

    /// Transformer blocks (`<arch>.block_count`). llama.cpp offloads block_count + 1 layers with `-ngl all`
    /// (num_gpu = -1): the output layer counts as one, so a 4-block model logs "offloaded 5/5 layers".
    pub fn block_count(&self) -> Option<u64> {
        self.arch_u64("block_count")
    }

    /// Layers llama.cpp can offload: the blocks plus the output layer.
    pub fn offloadable_layers(&self) -> Option<u64> {
        self.block_count()?.checked_add(1)
    }

    pub fn embedding_length(&self) -> Option<u64> {
        self.arch_u64("embedding_length")
    }

    pub fn feed_forward_length(&self) -> Option<u64> {
        self.arch_u64("feed_forward_length")
    }

    pub fn head_count(&self) -> Option<u64> {
        self.arch_u64("attention.head_count")
    }

    /// KV heads; llama.cpp defaults it to the head count when absent.
    pub fn head_count_kv(&self) -> Option<u64> {
        self.arch_u64("attention.head_count_kv").or_else(|| self.head_count())
    }

    pub fn context_length(&self) -> Option<u64> {
        self.arch_u64("context_length")
    }

    /// `general.file_type`: llama.cpp's `llama_ftype` (1 = MOSTLY_F16, 15 = MOSTLY_Q4_K_M, …).
    pub fn file_type(&self) -> Option<u64> {
        self.get_u64("general.file_type")
    }

    /// Vocabulary size as llama.cpp takes it: the token list's length.
    pub fn vocab_size(&self) -> Option<u64> {
        self.get("tokenizer.ggml.tokens").and_then(|v| v.as_array()).map(|a| a.len)
    }

    /// Total elements of all tensors: what llama.cpp reports as the model's parameter count.
    pub fn n_params(&self) -> u64 {
        self.tensors.iter().map(|t| t.n_elements).fold(0, u64::saturating_add)
    }

    /// Total bytes of all tensors (llama.cpp's model size, without padding).
    pub fn tensor_bytes(&self) -> u64 {
        self.tensors.iter().map(|t| t.n_bytes).fold(0, u64::saturating_add)
    }

    pub fn type_totals(&self) -> BTreeMap<GgmlType, TypeTotals> {
        let mut out: BTreeMap<GgmlType, TypeTotals> = BTreeMap::new();
        for t in &self.tensors {
            let e = out.entry(t.ggml_type).or_default();
            e.tensors += 1;
            e.elements = e.elements.saturating_add(t.n_elements);
            e.bytes = e.bytes.saturating_add(t.n_bytes);
        }
        out
    }

    pub fn tensor(&self, name: &str) -> Option<&TensorInfo<'a>> {
        self.tensors.iter().find(|t| t.name == name)
    }

    /// A tensor's bytes (checked against the file size at parse time).
    pub fn tensor_data(&self, t: &TensorInfo<'_>) -> Option<&'a [u8]> {
        let start = usize::try_from(self.data_offset.checked_add(t.offset)?).ok()?;
        let len = usize::try_from(t.n_bytes).ok()?;
        self.bytes.get(start..)?.get(..len)
    }
}

/// A GGUF file mapped into memory.
#[derive(Debug)]
pub struct GgufFile {
    pub path: PathBuf,
    map: Option<memmap2::Mmap>,
}

impl GgufFile {
    pub fn open(path: impl AsRef<Path>) -> Result<GgufFile, GgufError> {
        let path = path.as_ref().to_path_buf();
        let io_err = |what: &str, e: std::io::Error| GgufError::new(0, "", format!("{what}: {e}")).in_file(&path);
        let file = std::fs::File::open(&path).map_err(|e| io_err("cannot open", e))?;
        let len = file.metadata().map_err(|e| io_err("cannot stat", e))?.len();
        // An empty file cannot be mapped on every platform; it parses as a truncated magic below.
        let map = if len == 0 {
            None
        } else {
            // SAFETY: the map is read-only and private to this process. If another process truncates the file
            // while it is mapped, reads fault (SIGBUS); GGUF readers (llama.cpp, gguf-py's np.memmap) accept the
            // same risk, and everything read is bounds-checked against the length seen here.
            Some(unsafe { memmap2::Mmap::map(&file) }.map_err(|e| io_err("cannot map", e))?)
        };
        Ok(GgufFile { path, map })
    }

    pub fn bytes(&self) -> &[u8] {
        self.map.as_deref().unwrap_or(&[])
    }

    pub fn parse(&self) -> Result<Gguf<'_>, GgufError> {
        Gguf::parse(self.bytes()).map_err(|e| e.in_file(&self.path))
    }
}

/// A bounds-checked little-endian reader; `base` is the file offset of `data[0]` for error messages.
#[derive(Debug, Clone)]
struct Cursor<'a> {
    data: &'a [u8],
    pos: usize,
    base: u64,
}

impl<'a> Cursor<'a> {
    fn new(data: &'a [u8], base: u64) -> Cursor<'a> {
        Cursor { data, pos: 0, base }
    }

    fn offset(&self) -> u64 {
        self.base + self.pos as u64
    }

    fn remaining(&self) -> usize {
        self.data.len() - self.pos
    }

    fn take(&mut self, n: u64, field: &str) -> Result<&'a [u8], GgufError> {
        let left = self.remaining();
        match usize::try_from(n).ok().filter(|&n| n <= left) {
            Some(n) => {
                let s = &self.data[self.pos..self.pos + n];
                self.pos += n;
                Ok(s)
            }
            None => Err(GgufError::new(
                self.offset(),
                field,
                format!("expected {n} bytes, {left} left before the end of the file (truncated?)"),
            )),
        }
    }

    fn array<const N: usize>(&mut self, field: &str) -> Result<[u8; N], GgufError> {
        let s = self.take(N as u64, field)?;
        let mut out = [0u8; N];
        out.copy_from_slice(s);
        Ok(out)
    }

    fn u32(&mut self, field: &str) -> Result<u32, GgufError> {
        Ok(u32::from_le_bytes(self.array(field)?))
    }

    fn u64(&mut self, field: &str) -> Result<u64, GgufError> {
        Ok(u64::from_le_bytes(self.array(field)?))
    }

    fn string(&mut self, field: &str) -> Result<&'a [u8], GgufError> {
        let at = self.offset();
        let len = self.u64(field).map_err(|e| GgufError { field: format!("{field} length"), ..e })?;
        if len > self.remaining() as u64 {
            return Err(GgufError::new(
                at,
                format!("{field} length"),
                format!("{len} bytes, but only {} bytes are left in the file", self.remaining()),
            ));
        }
        self.take(len, field)
    }

    fn utf8_string(&mut self, field: &str) -> Result<&'a str, GgufError> {
        let at = self.offset();
        let s = self.string(field)?;
        std::str::from_utf8(s).map_err(|e| GgufError::new(at, field, format!("expected UTF-8 text: {e}")))
    }

    /// A u32 type tag followed by a value of that type.
    fn tagged_value(&mut self, field: &str, depth: u32) -> Result<Value<'a>, GgufError> {
        let at = self.offset();
        let tag = self.u32(field)?;
        let ty = ValueType::from_u32(tag)
            .ok_or_else(|| GgufError::new(at, field, format!("expected a GGUF value type 0..=12, found {tag}")))?;
        self.value(ty, depth)
    }

    fn value(&mut self, ty: ValueType, depth: u32) -> Result<Value<'a>, GgufError> {
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
                match self.array::<1>("bool")?[0] {
                    0 => Value::Bool(false),
                    1 => Value::Bool(true),
                    b => return Err(GgufError::new(at, "bool", format!("expected 0 or 1, found {b}"))),
                }
            }
            ValueType::String => Value::String(self.string("string")?),
            ValueType::U64 => Value::U64(self.u64("u64")?),
            ValueType::I64 => Value::I64(i64::from_le_bytes(self.array("i64")?)),
            ValueType::F64 => Value::F64(f64::from_le_bytes(self.array("f64")?)),
            ValueType::Array => {
                if depth >= MAX_ARRAY_DEPTH {
                    return Err(GgufError::new(
                        self.offset(),
                        "array",
                        format!("arrays nested deeper than {MAX_ARRAY_DEPTH} levels"),
                    ));
                }
                let at = self.offset();
                let tag = self.u32("array element type")?;
                let elem = ValueType::from_u32(tag).ok_or_else(|| {
                    GgufError::new(at, "array element type", format!("expected a GGUF value type 0..=12, found {tag}"))
                })?;
                let len = self.u64("array length")?;
                Value::Array(self.array_body(elem, len, depth + 1)?)
            }
        })
    }

    /// `len` elements of type `elem`, validated, returned as a slice of this cursor's data.
    fn array_body(&mut self, elem: ValueType, len: u64, depth: u32) -> Result<Array<'a>, GgufError> {
        let at = self.offset();
        let left = self.remaining() as u64;
        if len.checked_mul(elem.min_size() as u64).is_none_or(|n| n > left) {
            return Err(GgufError::new(
                at.saturating_sub(8),
                "array length",
                format!(
                    "{len} elements of {elem} take at least {} bytes each, but only {left} bytes are left",
                    elem.min_size()
                ),
            ));
        }
        let start = self.pos;
        match elem.fixed_size() {
            Some(size) => {
                self.take(len * size as u64, "array elements")?;
                if elem == ValueType::Bool {
                    let bad = self.data[start..self.pos].iter().position(|&b| b > 1);
                    if let Some(i) = bad {
                        return Err(GgufError::new(
                            at + i as u64,
                            format!("element {i}"),
                            "expected a bool (0 or 1)".to_string(),
                        ));
                    }
                }
            }
            None => {
                for i in 0..len {
                    self.value(elem, depth).map_err(|e| e.within(format!("element {i}")))?;
                }
            }
        }
        Ok(Array { elem, len, payload: &self.data[start..self.pos] })
    }

    fn tensor_info(&mut self) -> Result<TensorInfo<'a>, GgufError> {
        let info_offset = self.offset();
        let name = self.utf8_string("name")?;
        let within = |e: GgufError| e.within(format!("'{name}'"));
        let at = self.offset();
        let n_dims = self.u32("n_dims").map_err(within)?;
        if n_dims > MAX_DIMS {
            return Err(GgufError::new(
                at,
                format!("'{name}' n_dims"),
                format!("expected at most {MAX_DIMS}, found {n_dims}"),
            ));
        }
        let mut dims = Vec::with_capacity(n_dims as usize);
        let mut n_elements: u64 = 1;
        for d in 0..n_dims {
            let at = self.offset();
            let v = self.u64("dims").map_err(within)?;
            // llama.cpp stores dims as int64_t and rejects negative ones.
            if v > i64::MAX as u64 {
                return Err(GgufError::new(at, format!("'{name}' dims[{d}]"), format!("{v} does not fit in an int64")));
            }
            n_elements = n_elements.checked_mul(v).ok_or_else(|| {
                GgufError::new(at, format!("'{name}' dims"), "the element count overflows 64 bits".to_string())
            })?;
            dims.push(v);
        }
        let type_at = self.offset();
        let ggml_type = GgmlType(self.u32("type").map_err(within)?);
        let info = ggml_type.info().ok_or_else(|| {
            GgufError::new(type_at, format!("'{name}' type"), format!("unknown ggml type {}", ggml_type.0))
        })?;
        let row = dims.first().copied().unwrap_or(1);
        let n_bytes = ggml_type.tensor_bytes(row, n_elements).ok_or_else(|| {
            GgufError::new(
                type_at,
                format!("'{name}' type"),
                format!("a {} row holds whole blocks of {} elements; dims[0] is {row}", info.name, info.block_size),
            )
        })?;
        let offset = self.u64("offset").map_err(within)?;
        Ok(TensorInfo { name, dims, ggml_type, offset, n_elements, n_bytes, info_offset })
    }
}
