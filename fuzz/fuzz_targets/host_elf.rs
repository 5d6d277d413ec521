//! Fuzz target `host_elf`: HostElf::parse, then the `.hip_fatbin` and `.nv_fatbin` sections it finds,
//! drained like the offload_bundle and nv_fatbin targets, and the embedded SPIR-V shaders its symbols name.
//! The drain logic and its properties are in crates/binfmt/tests/drain/mod.rs.

#![no_main]

#[path = "../../crates/binfmt/tests/drain/mod.rs"]
mod drain;

libfuzzer_sys::fuzz_target!(|data: &[u8]| drain::host_elf(data));
