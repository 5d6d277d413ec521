//! Fuzz target `spirv_module`: the input read as what a program hands the Vulkan layer at `vkCreateShaderModule` and
//! pipeline creation: the SPIR-V walk and module hash (`backscope-trace`), the workgroup size and specialization
//! constants (the layer). The drain logic and its properties are in crates/vklayer/tests/drain/mod.rs.

#![no_main]

#[path = "../../crates/vklayer/tests/drain/mod.rs"]
mod drain;

libfuzzer_sys::fuzz_target!(|data: &[u8]| drain::spirv_module(data));
