//! Fuzz target `cubin_info`: InfoRecords over the input as a `.nv.info` section, and Cubin::parse with its
//! sections, `.nv.info` records and kernels.
//! The drain logic and its properties are in crates/binfmt/tests/drain/mod.rs.

#![no_main]

#[path = "../../crates/binfmt/tests/drain/mod.rs"]
mod drain;

libfuzzer_sys::fuzz_target!(|data: &[u8]| drain::cubin_info(data));
