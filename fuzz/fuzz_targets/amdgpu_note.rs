//! Fuzz target `amdgpu_note`: metadata::parse over the input as an NT_AMDGPU_METADATA descriptor, and
//! CodeObject::parse with its metadata.
//! The drain logic and its properties are in crates/binfmt/tests/drain/mod.rs.

#![no_main]

#[path = "../../crates/binfmt/tests/drain/mod.rs"]
mod drain;

libfuzzer_sys::fuzz_target!(|data: &[u8]| drain::amdgpu_note(data));
