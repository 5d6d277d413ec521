//! Fuzz target `logs`: the log parser and analyzer over the input, whole and in chunks.
//! The drain logic and its properties are in crates/logs/tests/drain/mod.rs.

#![no_main]

#[path = "../../crates/logs/tests/drain/mod.rs"]
mod drain;

libfuzzer_sys::fuzz_target!(|data: &[u8]| drain::logs(data));
