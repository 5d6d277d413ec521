//! Fuzz target `gguf`: Gguf::parse, then every KV, array element, tensor info and tensor's data, and the
//! writer round trip (written back from what was read, the file reads back equal).
//! The drain logic and its properties are in crates/gguf/tests/drain/mod.rs.

#![no_main]

#[path = "../../crates/gguf/tests/drain/mod.rs"]
mod drain;

libfuzzer_sys::fuzz_target!(|data: &[u8]| drain::gguf(data));
