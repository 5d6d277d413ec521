//! Fuzz target `nv_fatbin`: fatbin containers -> entries -> contents (LZ4/zstd under small Limits) ->
//! Cubin::parse + kernels, or ptx::parse.
//! The drain logic and its properties are in crates/binfmt/tests/drain/mod.rs.

#![no_main]

#[path = "../../crates/binfmt/tests/drain/mod.rs"]
mod drain;

libfuzzer_sys::fuzz_target!(|data: &[u8]| drain::nv_fatbin(data));
