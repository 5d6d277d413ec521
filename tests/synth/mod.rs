//! `backscope synth` and the GGUF reader/writer against independent readers.

mod gguf;
