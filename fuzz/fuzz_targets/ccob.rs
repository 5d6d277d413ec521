//! Fuzz target `ccob`: CompressedBundle::parse at offset 0, decompress under small Limits, the result
//! through Bundle::parse, every device entry through CodeObject::parse and its metadata note.
//! The drain logic and its properties are in crates/binfmt/tests/drain/mod.rs.

#![no_main]

#[path = "../../crates/binfmt/tests/drain/mod.rs"]
mod drain;

libfuzzer_sys::fuzz_target!(|data: &[u8]| drain::ccob(data));
