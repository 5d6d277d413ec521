//! Constants of the GGUF format that the reader and the writer share.

pub const MAGIC: &[u8; 4] = b"GGUF";
pub const DEFAULT_ALIGNMENT: u64 = 32;
/// ggml's GGML_MAX_DIMS: llama.cpp and gguf-py reject tensors with more dimensions.
pub const MAX_DIMS: u32 = 4;
/// Arrays of arrays are legal GGUF but nothing real nests deeply; the bound keeps recursion off the stack limit.
pub const MAX_ARRAY_DEPTH: u32 = 8;
