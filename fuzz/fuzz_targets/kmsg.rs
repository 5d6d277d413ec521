//! Fuzz target `kmsg`: the /dev/kmsg record decoder (`logs::kmsg`) over the input, as one record and as a text of
//! records. The drain logic and its properties are in crates/logs/tests/drain/mod.rs.

#![no_main]

#[path = "../../crates/logs/tests/drain/mod.rs"]
mod drain;

libfuzzer_sys::fuzz_target!(|data: &[u8]| drain::kmsg(data));
