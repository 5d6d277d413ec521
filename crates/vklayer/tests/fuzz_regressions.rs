//! Replays every input in `tests/regressions/` through the drains of the layer's fuzz targets (`tests/drain/mod.rs`),
//! then the targets' seeds: real ggml-vulkan shaders and the shipped device profiles. To add a regression: copy
//! `fuzz/artifacts/<target>/crash-<sha1>` to `tests/regressions/<target>-<first 8 hex digits>.bin`, fix the reader,
//! run this test.

mod drain;

use std::path::{Path, PathBuf};

use backscope_vklayer::fuzzing::{specialization_value, LocalSize};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

#[test]
fn every_regression_input_drains_without_panicking() {
    fuzz_replay::replay(&Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/regressions"), drain::TARGETS);
}

/// The `spirv_module` seeds: shaders glslc built from llama.cpp 11434's sources (scripts/llama-build.sh's Vulkan
/// build) and the bench's no-op shader. Their workgroup sizes are the ones their GLSL declares, read from SPIR-V.
#[test]
fn real_shaders_drain_and_give_the_sizes_their_sources_declare() {
    let seeds = repo().join("fuzz/seeds/spirv_module");
    // (seed, size without constants, the source line that declares it; llama.cpp paths under
    // ggml/src/ggml-vulkan/vulkan-shaders/). A dimension declared by `local_size_x_id = 0` is specialization constant
    // 0. glslang writes it into the `WorkgroupSize` built-in as a constant of its own with default 1, apart from the
    // `constant_id = 0` BLOCK_SIZE constant and its default (32, 256), so without a value for constant 0 the size is
    // 1; ggml always gives one.
    let cases: [(&str, [u32; 3], &str); 5] = [
        ("arange_f32.spv", [512, 1, 1], "arange.comp:6 local_size_x = 512"),
        ("get_rows_q4_k.spv", [512, 1, 1], "get_rows_quant.comp:9 local_size_x = 512"),
        ("mul_mat_vec_q4_k_f32_f32.spv", [1, 1, 1], "mul_mat_vec_q4_k.comp:7 local_size_x_id = 0"),
        ("matmul_mxfp4_f16_ocp_cm2.spv", [1, 1, 1], "mul_mm_cm2.comp:34 local_size_x_id = 0"),
        ("bench-noop.spv", [1, 1, 1], "bench/vklayer/noop.comp local_size_x = 1"),
    ];
    for (seed, size, source) in cases {
        let code = std::fs::read(seeds.join(seed)).unwrap();
        // Each patch instruction ggml-vulkan adds or strips (choice / 2 % 3), at several boundaries.
        for choice in [0u8, 3, 5, 0x17] {
            drain::spirv_module(&[&[choice], &code[..]].concat());
        }
        let local = LocalSize::parse(&code);
        assert_eq!(local.resolve(b"main", |_| None), Some(size), "{seed} ({source})");
        // ggml gives constant 0 through VkSpecializationInfo: a size that depends on it follows it.
        let data = 64u32.to_le_bytes();
        let given = local.resolve(b"main", |id| specialization_value(&[(0, 0, 4)], &data, id)).unwrap();
        let by_constant = source.contains("local_size_x_id");
        assert_eq!(given[0], if by_constant { 64 } else { size[0] }, "{seed}");
    }
}

/// The shipped device profiles (data/vulkan_profiles) drain: serde_json reads them alike, and each reads as a profile.
#[test]
fn shipped_profiles_drain() {
    let dir = repo().join("data/vulkan_profiles");
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let bytes = std::fs::read(&path).unwrap();
        drain::vulkan_profile(&bytes);
        backscope_vklayer::fuzzing::parse_profile(&bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        n += 1;
    }
    assert!(n >= 3, "data/vulkan_profiles holds the gfx900, H200 and lavapipe profiles");
}
