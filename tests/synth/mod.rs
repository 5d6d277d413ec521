//! `backscope synth` and the GGUF reader/writer against independent readers.

pub(crate) mod gguf;
