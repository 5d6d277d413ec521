//! Fuzz target `offload_bundle`: bundle::walk over the input as a `.hip_fatbin` section and Bundle::parse at
//! offset 0; every device entry through CodeObject::parse and its metadata note.
//! The drain logic and its properties are in crates/binfmt/tests/drain/mod.rs.

#![no_main]

#[path = "../../crates/binfmt/tests/drain/mod.rs"]
mod drain;

libfuzzer_sys::fuzz_target!(|data: &[u8]| drain::offload_bundle(data));
