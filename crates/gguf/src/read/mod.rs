//! GGUF reader over a byte slice (normally an mmap): every string, array and tensor borrows from the input.
//! The caller maps the file: `backscope` maps through its SIGBUS-guarded `inputs::MappedFile`, so that a file
//! truncated while it is read (a model being re-downloaded) reads as zeros and is reported, instead of killing
//! the process; a plain map in this crate could not offer that.
//!
//! Layout (GGUF v2/v3, little-endian; llama.cpp ggml/src/gguf.cpp `gguf_init_from_file_impl`, gguf-py
//! gguf_reader.py): magic `GGUF`, u32 version, u64 tensor count, u64 KV count, the KVs (u64-length key, u32
//! value type, value), the tensor infos (name, u32 n_dims, n_dims × u64 dims, u32 ggml type, u64 offset into
//! the data section), padding to `general.alignment` (default 32), then the data section.
//!
//! Work is bounded by the file's size, whatever its numbers claim: every count and length is checked against
//! the bytes left before it is used, vectors grow with the entries actually read (a count never sizes an
//! allocation), and arrays are kept as validated slices, decoded only when iterated.

pub(crate) mod cursor;
mod tensor;
mod value;

use std::collections::{BTreeMap, HashSet};

use crate::error::{Entry, Error, Result};
use crate::types::GgmlType;

pub use crate::format::{DEFAULT_ALIGNMENT, MAGIC, MAX_ARRAY_DEPTH, MAX_DIMS};
use cursor::Cursor;
pub use tensor::TensorInfo;
pub use value::{Array, ArrayIter, Value};

/// Smallest tensor info: u64 name length (empty name), u32 n_dims (0), u32 type, u64 offset.
const MIN_TENSOR_INFO: u64 = 8 + 4 + 4 + 8;
/// Smallest KV: u64 key length (empty key), u32 type, one-byte value.
const MIN_KV: u64 = 8 + 4 + 1;
/// Entries reserved up front. A count that passed the size check can still be large (a 1 GB file may
/// claim 80 million KVs) and a decoded entry is bigger than its smallest encoding, so vectors start small
/// and grow only with entries that were actually read.
const MAX_RESERVED: u64 = 1024;

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Kv<'a> {
    pub key: &'a str,
    pub value: Value<'a>,
    /// File offset of the key's length field.
    pub offset: u64,
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

fn reserve(count: u64) -> usize {
    count.min(MAX_RESERVED) as usize
}

impl<'a> Gguf<'a> {
    pub fn parse(bytes: &'a [u8]) -> Result<Gguf<'a>> {
        let file_size = bytes.len() as u64;
        let mut c = Cursor::new(bytes);
        if c.take(4, "magic")? != MAGIC {
            return Err(Error::new(0, "magic", "the bytes \"GGUF\" that start every GGUF file"));
        }
        let version = c.u32("version")?;
        match version {
            2 | 3 => {}
            1 => {
                return Err(Error::new(4, "version", "2 or 3 (GGUF v1, with 32-bit counts, is not supported)").found(1))
            }
            v if v & 0xffff == 0 => {
                return Err(Error::new(
                    4,
                    "version",
                    "2 or 3, little-endian (this one is byte-swapped: a big-endian GGUF, which is not supported)",
                )
                .found(v.into()))
            }
            v => return Err(Error::new(4, "version", "2 or 3").found(v.into())),
        }
        let tensor_count_at = c.offset();
        let tensor_count = c.u64("tensor count")?;
        let kv_count_at = c.offset();
        let kv_count = c.u64("KV count")?;
        // Bound both counts by the bytes left before looping over either.
        let left = c.remaining();
        if tensor_count.checked_mul(MIN_TENSOR_INFO).is_none_or(|n| n > left) {
            return Err(Error::new(
                tensor_count_at,
                "tensor count",
                "a count of tensor infos (24 bytes each at least) that fits in the bytes after the header",
            )
            .found(tensor_count));
        }
        if kv_count.checked_mul(MIN_KV).is_none_or(|n| n > left) {
            return Err(Error::new(
                kv_count_at,
                "KV count",
                "a count of key/value pairs (13 bytes each at least) that fits in the bytes after the header",
            )
            .found(kv_count));
        }

        let mut kvs = Vec::with_capacity(reserve(kv_count));
        let mut keys = HashSet::with_capacity(reserve(kv_count));
        for index in 0..kv_count {
            let at = c.offset();
            let entry = Entry::Kv { index, at };
            let key = c.utf8("key", "key length").map_err(|e| e.in_entry(entry))?;
            if key.is_empty() {
                return Err(Error::new(at, "key", "a non-empty key").in_entry(entry));
            }
            if !keys.insert(key) {
                return Err(Error::new(at, "key", "a key that no earlier KV has").in_entry(entry));
            }
            let value = c.tagged_value(0).map_err(|e| e.in_entry(entry))?;
            kvs.push(Kv { key, value, offset: at });
        }

        let mut alignment = DEFAULT_ALIGNMENT;
        if let Some((index, kv)) = kvs.iter().enumerate().find(|(_, kv)| kv.key == "general.alignment") {
            let entry = Entry::Kv { index: index as u64, at: kv.offset };
            // The key was read from the file, so these offsets lie inside it.
            let type_at = kv.offset + 8 + kv.key.len() as u64;
            // llama.cpp and gguf-py both require a u32 here.
            match kv.value {
                Value::U32(a) if a != 0 && a.is_power_of_two() => alignment = a.into(),
                Value::U32(a) => {
                    return Err(Error::new(type_at + 4, "value", "a non-zero power of two (general.alignment)")
                        .found(a.into())
                        .in_entry(entry))
                }
                v => {
                    return Err(Error::new(
                        type_at,
                        "value type",
                        "UINT32 (4), as llama.cpp requires for general.alignment",
                    )
                    .found(v.value_type().to_u32().into())
                    .in_entry(entry))
                }
            }
        }

        let mut tensors = Vec::with_capacity(reserve(tensor_count));
        let mut names = HashSet::with_capacity(reserve(tensor_count));
        for index in 0..tensor_count {
            let at = c.offset();
            let entry = Entry::Tensor { index, at };
            let t = c.tensor_info().map_err(|e| e.in_entry(entry))?;
            if !names.insert(t.name) {
                return Err(Error::new(at, "name", "a name that no earlier tensor has").in_entry(entry));
            }
            if t.offset % alignment != 0 {
                return Err(Error::new(
                    t.offset_field_at,
                    "offset",
                    "a multiple of the alignment (general.alignment, 32 when absent)",
                )
                .found(t.offset)
                .in_entry(entry));
            }
            tensors.push(t);
        }
        let header_end = c.offset();
        let data_offset = header_end.checked_next_multiple_of(alignment).ok_or(Error::new(
            header_end,
            "data section",
            "a start that fits in 64 bits",
        ))?;
        for (index, t) in tensors.iter().enumerate() {
            let entry = Entry::Tensor { index: index as u64, at: t.info_offset };
            // Reported at the info's offset field: the data itself may lie anywhere, even past 2^64.
            let Some(end) = data_offset.checked_add(t.offset).and_then(|s| s.checked_add(t.n_bytes)) else {
                return Err(
                    Error::new(t.offset_field_at, "data end", "an offset + size that fits in 64 bits").in_entry(entry)
                );
            };
            if end > file_size {
                return Err(Error::new(t.offset_field_at, "data end", "at most the file's size (truncated?)")
                    .found(end)
                    .in_entry(entry));
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
