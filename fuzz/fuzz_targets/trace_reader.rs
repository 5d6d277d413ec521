//! Fuzz target `trace_reader`: a trace read whole, folded (as `trace --read`) and line by line (as `sweep
//! --trace`), then aggregated. The drain logic and its properties are in crates/trace-reader/tests/drain/mod.rs.

#![no_main]

#[path = "../../crates/trace-reader/tests/drain/mod.rs"]
mod drain;

libfuzzer_sys::fuzz_target!(|data: &[u8]| drain::trace_reader(data));
