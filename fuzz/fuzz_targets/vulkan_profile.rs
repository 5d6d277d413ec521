//! Fuzz target `vulkan_profile`: the input read as the device profile `BACKSCOPE_VK_IMPERSONATE` names, by the
//! Vulkan layer's flat JSON reader (checked against serde_json) and profile reader, then answered from. The drain
//! logic and its properties are in crates/vklayer/tests/drain/mod.rs.

#![no_main]

#[path = "../../crates/vklayer/tests/drain/mod.rs"]
mod drain;

libfuzzer_sys::fuzz_target!(|data: &[u8]| drain::vulkan_profile(data));
