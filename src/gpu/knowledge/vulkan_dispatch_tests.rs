//! Table tests of data/ggml_vulkan_11434.toml and data/vulkan_devices.toml: each expected value is what the cited
//! lines of ggml-vulkan.cpp (llama.cpp 11434) compute for the profile's facts, worked out by hand from those lines.

use super::*;

/// A build whose glslc had every extension (the shader names vulkan-shaders-gen writes only under each define).
fn full_build() -> Facts {
    build_facts(["matmul_q4_0_q8_1", "matmul_f16_cm1", "matmul_f16_cm2", "matmul_bf16_cm1"]).unwrap()
}

/// The lavapipe build of this repository's tests: none of them (its ggml line says `int dot: 0 | matrix cores: none`).
fn bare_build() -> Facts {
    build_facts(["matmul_f16_f32", "mul_mat_vec_q4_k_f32_f32", "quantize_q8_1_x4"]).unwrap()
}

fn device_decisions(facts: Facts) -> Result<(Facts, Vec<Decision>)> {
    rules().device_decisions(facts)
}

fn matmul(device: &Facts, q: &VkMatmulQuery) -> Result<VkMatmulPrediction> {
    rules().matmul(device, q)
}

fn attention(device: &Facts, tokens: u64, kv_type: &str) -> Result<(String, Vec<Decision>)> {
    rules().attention(device, tokens, kv_type, 1)
}

fn device(id: &str, build: Facts) -> Facts {
    let mut f = profile(id).unwrap_or_else(|| panic!("profile {id}")).facts().unwrap();
    f.extend(build);
    device_decisions(f).unwrap().0
}

fn q(t: &str, k: u64, m: u64, n: u64) -> VkMatmulQuery {
    VkMatmulQuery { weight_type: t.into(), ne00: k, ne01: m, ne11: n, mul_mat_id: false }
}

fn rule_of(p: &VkMatmulPrediction, table: &str) -> String {
    p.path.iter().find(|d| d.table == table).map(|d| format!("{}={}", d.rule, d.value)).unwrap_or_default()
}

#[test]
fn every_row_cites_a_source_and_every_table_ends_unconditional() {
    assert_eq!(rules().version, "11434");
    assert_eq!(versions(), ["11434", "ollama-v0.17.4"]);
    for v in versions() {
        let r = rules_for(v).unwrap();
        assert_eq!(r.version, v);
        for t in r.device_table.iter().chain(&r.matmul_table).chain(&r.attention_table) {
            assert!(!t.source.is_empty(), "{v} {}", t.name);
            assert!(t.rule.last().unwrap().when.is_empty(), "{v}: table {} must end unconditional", t.name);
            for x in &t.rule {
                assert!(x.source.chars().any(|c| c.is_ascii_digit()), "{v} {}.{} cites no line", t.name, x.id);
            }
            // A delta's rows cite the vendored file by tag; the base's rows cite 11434's lines.
            let versioned = t.rule.iter().all(|x| x.source.contains("@v0.17.4:"));
            assert_eq!(versioned, t.file != RULES_FILE, "{v} {}", t.name);
        }
        // The tile selector chooses among the tiles the vendor switch left on.
        let at = |name: &str| r.matmul_table.iter().position(|t| t.name == name).unwrap();
        assert!(at("vendor_tiles") < at("tile_selector"), "{v}");
    }
    let r = rules();
    assert!(r.build_flag.iter().all(|f| !f.source.is_empty() && regex_lite::Regex::new(&f.shader).is_ok()));
    assert!(profiles().len() >= 9);
    assert!(profiles().iter().all(|p| !p.source.is_empty()));
}

#[test]
fn every_fact_a_rule_reads_is_known_for_every_profile_and_shape() {
    for (v, p) in versions().into_iter().flat_map(|v| profiles().iter().map(move |p| (v, p))) {
        let r = rules_for(v).unwrap();
        for build in [full_build(), bare_build()] {
            let mut f = p.facts().unwrap();
            f.extend(build);
            let d = r.device_decisions(f).unwrap().0;
            for t in ["F32", "F16", "BF16", "Q4_0", "Q8_0", "Q4_K", "Q6_K", "IQ4_XS", "IQ2_XXS"] {
                for n in [1, 4, 8, 9, 33, 65, 512] {
                    for id in [false, true] {
                        let mut query = q(t, 4096, 4096, n);
                        query.mul_mat_id = id;
                        r.matmul(&d, &query).unwrap_or_else(|e| panic!("{v} {} {t} n={n}: {e:#}", p.id));
                    }
                }
            }
            for tokens in [1, 9] {
                r.attention(&d, tokens, "F16", 1).unwrap();
            }
        }
    }
}

/// get_device_architecture (ggml-vulkan.cpp:8-149) on each profile's facts.
#[test]
fn device_classes_follow_get_device_architecture() {
    let arch = |id: &str| device(id, bare_build())["architecture"].to_string();
    // 46-48: AMD with min = max = 64.
    assert_eq!(arch("gfx900-radv"), "AMD_GCN");
    assert_eq!(arch("gfx906-radv"), "AMD_GCN");
    // 49-60: wave32/64; RDNA4 by shader_float8, RDNA3 by the accelerated mixed-sign dot, else RDNA2.
    assert_eq!(arch("rdna2-radv"), "AMD_RDNA2");
    assert_eq!(arch("rdna3-radv"), "AMD_RDNA3");
    assert_eq!(arch("rdna4-radv"), "AMD_RDNA4");
    // 88-96: Intel by minimum subgroup size.
    assert_eq!(arch("intel-xe2-anv"), "INTEL_XE2");
    assert_eq!(arch("intel-arc-a770-anv"), "INTEL_XE1");
    // 112-128: NVIDIA with cooperative matrix and 64 warps per SM is neither pre-Turing nor Turing: OTHER (148).
    assert_eq!(arch("h100-nvidia"), "OTHER");
    assert_eq!(arch("llvmpipe"), "OTHER");
    // 31-33: an AMD device without VK_AMD_shader_core_properties is OTHER whatever its subgroups.
    let mut f = profile("gfx900-radv").unwrap().facts().unwrap();
    f.insert("amd_shader_core_properties".into(), Fact::Bool(false));
    f.extend(bare_build());
    assert_eq!(device_decisions(f).unwrap().0["architecture"], Fact::Str("OTHER".into()));
    // 112-115: NVIDIA without cooperative matrix is pre-Turing.
    let mut f = profile("h100-nvidia").unwrap().facts().unwrap();
    f.insert("coopmat_offered".into(), Fact::Bool(false));
    f.extend(bare_build());
    assert_eq!(device_decisions(f).unwrap().0["architecture"], Fact::Str("NVIDIA_PRE_TURING".into()));
}

/// What the device offers against what the build can use (4061-4081, 4280, 16251-16269).
#[test]
fn the_build_gates_what_the_device_offers() {
    let h100 = device("h100-nvidia", bare_build());
    for f in ["integer_dot", "coopmat", "coopmat2"] {
        assert_eq!(h100[f], Fact::Bool(false), "{f}: the H100 build without glslc support uses none of them");
    }
    let h100 = device("h100-nvidia", full_build());
    assert_eq!((h100["integer_dot"].clone(), h100["coopmat2"].clone()), (Fact::Bool(true), Fact::Bool(true)));
    // 4280: gfx900 offers the extension without the accelerated 4x8 dot.
    assert_eq!(device("gfx900-radv", full_build())["integer_dot"], Fact::Bool(false));
    assert_eq!(device("gfx906-radv", full_build())["integer_dot"], Fact::Bool(true));
    // 16253-16256: coopmat stays off on a discrete Xe1 card, on on Xe2.
    assert_eq!(device("intel-arc-a770-anv", full_build())["coopmat"], Fact::Bool(false));
    assert_eq!(device("intel-xe2-anv", full_build())["coopmat"], Fact::Bool(true));
    // 16257-16261: AMD's own driver reporting coopmat on RDNA2 is not believed.
    let mut f = profile("rdna2-radv").unwrap().facts().unwrap();
    f.insert("coopmat_offered".into(), Fact::Bool(true));
    f.insert("driver".into(), Fact::Str("amdvlk".into()));
    f.extend(full_build());
    assert_eq!(device_decisions(f).unwrap().0["coopmat"], Fact::Bool(false));
}

/// ggml_vk_mul_mat's vector/matrix choice (7296-7300) and ggml_vk_should_use_mmvq (6554-6635).
#[test]
fn mmvq_follows_should_use_mmvq_per_vendor() {
    let mmvq = |id: &str, t: &str, k: u64, n: u64| {
        let p = matmul(&device(id, full_build()), &q(t, k, 4096, n)).unwrap();
        (p.family.clone(), rule_of(&p, "quantize_y"))
    };
    // 6595-6598: Q8_0 MMVQ on AMD only for GCN.
    assert_eq!(mmvq("gfx906-radv", "Q8_0", 4096, 1), ("MMVQ".into(), "amd-q8_0-gcn=true".into()));
    assert_eq!(mmvq("rdna2-radv", "Q8_0", 4096, 1), ("MMV".into(), "amd-q8_0=false".into()));
    // 6591-6593: K below 2048 is not worth quantizing on AMD.
    assert_eq!(mmvq("rdna2-radv", "Q4_K", 1024, 1), ("MMV".into(), "amd-small-k=false".into()));
    assert_eq!(mmvq("rdna2-radv", "Q4_K", 4096, 1), ("MMVQ".into(), "amd=true".into()));
    // 6580-6582 and 6568-6571: NVIDIA needs K > 4096 for one column, any K for a batch.
    assert_eq!(mmvq("h100-nvidia", "Q4_K", 4096, 1), ("MMV".into(), "nvidia-small-k=false".into()));
    assert_eq!(mmvq("h100-nvidia", "Q4_K", 4096, 4), ("MMVQ".into(), "batch=true".into()));
    // 6561-6566: Q6_K only on Intel.
    assert_eq!(mmvq("rdna3-radv", "Q6_K", 8192, 4), ("MMV".into(), "q6_k-not-intel=false".into()));
    // 6677: no integer dot (gfx900, 4280), no MMVQ.
    assert_eq!(mmvq("gfx900-radv", "Q4_K", 8192, 4).0, "MMV");
    // 7296-7300: nine columns are a matrix multiplication; with integer dot and a q8_1 pipeline, MMQ (6324).
    let p = matmul(&device("gfx906-radv", full_build()), &q("Q4_K", 4096, 4096, 9)).unwrap();
    assert_eq!((p.family.as_str(), p.pipeline.as_deref()), ("MMQ", Some("matmul_q4_k_q8_1_0")));
    assert_eq!(p.helpers, ["quantize_q8_1_x4"]);
}

/// The non-coopmat2 tile selector (2863-2870), alignment (6361-6364), f16 accumulation (5954-5968) and the
/// names create_mm_pipelines gives (2237-2250, 2617-2631).
#[test]
fn matrix_pipelines_are_named_as_create_mm_pipelines_names_them() {
    let lp = device("llvmpipe", bare_build());
    let name = |t: &str, k, m, n| matmul(&lp, &q(t, k, m, n)).unwrap().pipeline.unwrap();
    assert_eq!(name("F16", 256, 256, 9), "matmul_f16_f32_f16acc_aligned_0");
    assert_eq!(name("F16", 256, 256, 64), "matmul_f16_f32_f16acc_aligned_1");
    assert_eq!(name("F16", 256, 256, 512), "matmul_f16_f32_f16acc_aligned_2");
    // K = 100 is not a multiple of the s tile's 32: unaligned.
    assert_eq!(name("F16", 100, 256, 9), "matmul_f16_f32_f16acc_0");
    // Quantized non-LUT types share matmul_quant (the type is a specialization constant); LUT types have their own.
    assert_eq!(name("Q4_K", 4096, 4096, 512), "matmul_quant_f32_f16acc_aligned_2");
    assert_eq!(name("IQ4_XS", 4096, 4096, 512), "matmul_iq4_xs_f32_f16acc_aligned_2");
    // F32 weights never accumulate in f16 (5955).
    assert_eq!(name("F32", 4096, 4096, 512), "matmul_f32_f32_aligned_2");
    // A device without fp16 cannot fit the l tile in 32 KiB: (128 + 128) * (32 + 1) * 4 = 33792 (1427-1478).
    let mut f = profile("llvmpipe").unwrap().facts().unwrap();
    f.insert("fp16_offered".into(), Fact::Bool(false));
    f.extend(bare_build());
    let no_fp16 = device_decisions(f).unwrap().0;
    assert_eq!(enabled_tiles(rules(), &no_fp16, "F16", "sml").len(), 2);
    assert_eq!(enabled_tiles(rules(), &lp, "F16", "sml").len(), 3);
}

/// ggml_vk_guess_split_k (5863-5900): the H100's 132 SMs.
#[test]
fn split_k_counts_tiles_against_shader_cores() {
    let h100 = device("h100-nvidia", bare_build());
    // ffn_down of TinyLlama at 512 tokens: M 2048, K 5632: 16 x 4 tiles of 128 = 64 <= 66: 132 / 64 = 2 splits.
    let p = matmul(&h100, &q("F16", 5632, 2048, 512)).unwrap();
    assert_eq!((p.split_k, p.helpers.as_slice()), (2, ["split_k_reduce".to_string()].as_slice()));
    // K below 2048: no split.
    assert_eq!(matmul(&h100, &q("F16", 2048 - 32, 2048, 512)).unwrap().split_k, 1);
    // 32000 rows: 250 x 4 tiles, more than 2/3 of 132: no split.
    assert_eq!(matmul(&h100, &q("F16", 4096, 32000, 512)).unwrap().split_k, 1);
    // lavapipe has no core count (4233): never.
    assert_eq!(matmul(&device("llvmpipe", bare_build()), &q("F16", 5632, 2048, 512)).unwrap().split_k, 1);
}

/// A traced device whose record carries no core count and that no profile matches: ggml's split (5871-5878) is
/// left undecided wherever the count could matter, and decided where it cannot (K below 2048, N below the tile).
#[test]
fn split_k_is_undecided_without_a_core_count() {
    let mut f = profile("h200-nvidia").unwrap().facts().unwrap();
    f.insert("shader_core_count".into(), Fact::Int(0));
    f.insert("shader_core_count_known".into(), Fact::Bool(false));
    f.extend(bare_build());
    let unknown = device_decisions(f).unwrap().0;
    let p = matmul(&unknown, &q("F16", 5632, 2048, 512)).unwrap();
    assert_eq!((p.split_k, p.helpers.len()), (1, 0));
    assert_eq!(p.split_k_undecided.as_deref(), Some(SPLIT_K_UNDECIDED));
    assert_eq!(rule_of(&p, "split_k_possible"), "core-count-unknown=undecided");
    assert_eq!(matmul(&unknown, &q("F16", 2048 - 32, 2048, 512)).unwrap().split_k_undecided, None);
    // One token is the vector path: no split whatever the count.
    assert_eq!(matmul(&unknown, &q("F16", 5632, 2048, 1)).unwrap().split_k_undecided, None);
    // The H200 profile's 132 SMs (NVIDIA H200 datasheet) decide it: ffn_down at 512 tokens splits as on the H100.
    let h200 = device("h200-nvidia", bare_build());
    let p = matmul(&h200, &q("F16", 5632, 2048, 512)).unwrap();
    assert_eq!((p.split_k, p.split_k_undecided.as_deref()), (2, None));
}

/// MUL_MAT_ID: the per-token vector path up to 8 tokens (7911-7917), matmul_id above.
#[test]
fn mul_mat_id_is_per_token_up_to_eight_tokens() {
    let lp = device("llvmpipe", bare_build());
    let id = |n: u64| {
        let mut query = q("Q4_K", 2048, 5632, n);
        query.mul_mat_id = true;
        matmul(&lp, &query).unwrap()
    };
    let p = id(8);
    assert_eq!((p.family.as_str(), p.op.as_str(), p.dispatches_per_node), ("MMV", "MUL_MAT_ID", 8));
    assert_eq!(p.pipeline.as_deref(), Some("mul_mat_vec_id_q4_k_f32"));
    let p = id(9);
    assert_eq!((p.family.as_str(), p.op.as_str(), p.dispatches_per_node), ("MM", "MUL_MAT_ID", 1));
    // lavapipe's subgroup of 8 rules out the matmul_id_subgroup pipelines (2660): matmul_id_quant, tile s (n <= 32).
    assert_eq!(p.pipeline.as_deref(), Some("matmul_id_quant_f32_f16acc_aligned_0"));
    let mut query = q("Q4_K", 2048, 5632, 512);
    query.mul_mat_id = true;
    let p = matmul(&device("rdna2-radv", bare_build()), &query).unwrap();
    // 4788-4790: AMD never enables MUL_MAT_ID's large tile, so 512 tokens take the last of s, m (2869).
    assert_eq!(p.pipeline.as_deref(), Some("matmul_id_subgroup_quant_f32_f16acc_aligned_1"));
    assert_eq!(p.helpers, ["count_experts"], "7577-7590: the matrix id path counts experts first");
    assert_eq!(p.split_k, 1, "MUL_MAT_ID never splits K");
    // 7714: the vector id path quantizes with integer dot under should_use_mmvq (NVIDIA, a batch of tokens).
    let mut query = q("Q4_K", 2048, 5632, 4);
    query.mul_mat_id = true;
    let p = matmul(&device("h100-nvidia", full_build()), &query).unwrap();
    assert_eq!(p.pipeline.as_deref(), Some("mul_mat_vec_id_q4_k_q8_1_f32"));
}

/// The mat-vec reduction variant (2900-2933): K-quants need a subgroup of 16.
#[test]
fn mat_vec_shaders_follow_the_subgroup_sizes() {
    let shader = |id: &str, t: &str| matmul(&device(id, bare_build()), &q(t, 256, 512, 1)).unwrap().shader.unwrap();
    assert_eq!(shader("llvmpipe", "F16"), "mul_mat_vec_f16_f32_f32_subgroup_no_shmem");
    assert_eq!(shader("llvmpipe", "Q4_K"), "mul_mat_vec_q4_k_f32_f32");
    assert_eq!(shader("gfx900-radv", "Q4_K"), "mul_mat_vec_q4_k_f32_f32_subgroup_no_shmem");
    // 5586-5589: NVIDIA's four-subgroup workgroup for M <= 8192 and K >= 1024 is the hybrid reduction.
    let p = matmul(&device("h100-nvidia", bare_build()), &q("F16", 2048, 2048, 1)).unwrap();
    assert_eq!(p.shader.as_deref(), Some("mul_mat_vec_f16_f32_f32_subgroup"));
}

/// FaCodePath (1340-1369).
#[test]
fn flash_attention_paths() {
    assert_eq!(attention(&device("h100-nvidia", full_build()), 9, "F16").unwrap().0, "FA-coopmat2");
    assert_eq!(attention(&device("h100-nvidia", full_build()), 1, "F16").unwrap().0, "FA");
    assert_eq!(attention(&device("rdna3-radv", full_build()), 64, "F16").unwrap().0, "FA-coopmat");
    assert_eq!(attention(&device("gfx900-radv", full_build()), 64, "F16").unwrap().0, "FA");
    assert_eq!(attention(&device("llvmpipe", bare_build()), 64, "F16").unwrap().0, "FA");
}

/// A Q4_K/Q8_0/F16 weight of 4096 x 4096 at `n` columns on a profile: (pipeline, tile).
fn named(id: &str, build: Facts, t: &str, n: u64, mul_mat_id: bool) -> (String, String) {
    let mut query = q(t, 4096, 4096, n);
    query.mul_mat_id = mul_mat_id;
    let p = matmul(&device(id, build), &query).unwrap();
    (p.pipeline.unwrap_or_default(), p.tile.unwrap_or_default())
}

/// The per-vendor tile switch of ggml_vk_get_device (4781-4836): AMD without coopmat turns the large tile off
/// (4785), so create_mm_pipelines' filter_tc (2256-2273) numbers s, m as _0, _1 and the selector's "last" at 512
/// columns (2869) is _1, never _2.
#[test]
fn amd_without_coopmat_has_no_large_tile() {
    let m = "m (#1 of sm)".to_string();
    // gfx900: no accelerated integer dot (4280), so the f16-accumulating dequant pipelines (5967).
    for t in ["Q4_K", "Q8_0"] {
        assert_eq!(
            named("gfx900-radv", full_build(), t, 512, false),
            ("matmul_quant_f32_f16acc_aligned_1".into(), m.clone())
        );
    }
    assert_eq!(
        named("gfx900-radv", full_build(), "F16", 512, false),
        ("matmul_f16_f32_f16acc_aligned_1".into(), m.clone())
    );
    // gfx906 with integer dot: the q8_1 pipelines (2643-2656), unaligned by construction (6361-6362).
    assert_eq!(named("gfx906-radv", full_build(), "Q4_K", 512, false), ("matmul_q4_k_q8_1_1".into(), m.clone()));
    assert_eq!(named("gfx906-radv", full_build(), "Q8_0", 512, false), ("matmul_q8_0_q8_1_1".into(), m.clone()));
    assert_eq!(
        named("gfx906-radv", full_build(), "F16", 512, false),
        ("matmul_f16_f32_f16acc_aligned_1".into(), m.clone())
    );
    // A build without integer-dot glslc support on gfx906: the dequant pipelines, same tile.
    assert_eq!(
        named("gfx906-radv", bare_build(), "Q4_K", 512, false),
        ("matmul_quant_f32_f16acc_aligned_1".into(), m.clone())
    );
    // With two tiles, 64 columns are already the last one (2866-2867); 32 are the small one.
    assert_eq!(named("gfx900-radv", full_build(), "F16", 64, false).0, "matmul_f16_f32_f16acc_aligned_1");
    assert_eq!(named("gfx900-radv", full_build(), "F16", 32, false).0, "matmul_f16_f32_f16acc_aligned_0");
    // NVIDIA keeps all three (4829-4836): the H100 without glslc extensions gets _2 at 512.
    assert_eq!(named("h100-nvidia", bare_build(), "F16", 512, false).0, "matmul_f16_f32_f16acc_aligned_2");
    // RDNA3 on RADV with coopmat: mul_mat_l = coopmat_support && driver != AMD proprietary (4785).
    assert_eq!(named("rdna3-radv", full_build(), "F16", 512, false).1, "l (#2 of sml)");
    let mut f = profile("rdna3-radv").unwrap().facts().unwrap();
    f.insert("driver".into(), Fact::Str("amd_proprietary".into()));
    f.extend(full_build());
    let prop = device_decisions(f).unwrap().0;
    assert_eq!(prop["coopmat"], Fact::Bool(true), "16257-16261 allows RDNA3 on AMD's driver");
    assert_eq!(matmul(&prop, &q("F16", 4096, 4096, 512)).unwrap().tile.as_deref(), Some("m (#1 of sm)"));
}

/// MUL_MAT_ID above 8 tokens (7914-7919) on AMD: mul_mat_id_l is false whatever the device (4788), and the matrix
/// id path dispatches count_experts (7577-7590) before the q8_1 quantization (7628-7637).
#[test]
fn amd_mul_mat_id_above_64_tokens_takes_the_medium_tile() {
    for n in [65, 512] {
        let (name, tile) = named("gfx900-radv", full_build(), "Q4_K", n, true);
        assert_eq!((name.as_str(), tile.as_str()), ("matmul_id_subgroup_quant_f32_f16acc_aligned_1", "m (#1 of sm)"));
        let (name, _) = named("gfx906-radv", full_build(), "Q4_K", n, true);
        assert_eq!(name, "matmul_id_subgroup_q4_k_q8_1_1");
    }
    let mut query = q("Q4_K", 4096, 4096, 512);
    query.mul_mat_id = true;
    let p = matmul(&device("gfx906-radv", full_build()), &query).unwrap();
    assert_eq!(p.helpers, ["count_experts", "quantize_q8_1_x4"]);
    // RDNA3 with coopmat: still no large tile for MUL_MAT_ID (4788), though MUL_MAT has one.
    assert_eq!(named("rdna3-radv", full_build(), "F16", 512, true).1, "m (#1 of sm)");
    // The per-token vector path dispatches no count_experts.
    query.ne11 = 8;
    assert!(matmul(&device("gfx906-radv", full_build()), &query).unwrap().helpers.iter().all(|h| h != "count_experts"));
}

/// The other vendors' switches (4792-4827): Intel's large tile only with coopmat, Apple the medium tile only,
/// Qualcomm no large tile and no small one with coopmat, Samsung no large tile.
#[test]
fn other_vendors_tile_switches() {
    assert_eq!(named("intel-xe2-anv", full_build(), "Q4_K", 512, false).1.split(' ').next(), Some("l"));
    assert_eq!(named("intel-arc-a770-anv", full_build(), "F16", 512, false).1, "m (#1 of sm)");
    let as_vendor = |vendor: &str, coopmat: bool| {
        let mut f = profile("llvmpipe").unwrap().facts().unwrap();
        f.insert("vendor".into(), Fact::Str(vendor.into()));
        f.insert("coopmat_offered".into(), Fact::Bool(coopmat));
        f.extend(if coopmat { full_build() } else { bare_build() });
        let d = device_decisions(f).unwrap().0;
        matmul(&d, &q("F16", 4096, 4096, 512)).unwrap().tile.unwrap()
    };
    assert_eq!(as_vendor("APPLE", false), "m (#0 of m)");
    assert_eq!(as_vendor("SAMSUNG", false), "m (#1 of sm)");
    assert_eq!(as_vendor("QUALCOMM", false), "m (#1 of sm)");
    // 16262-16264 keeps coopmat off on a Qualcomm device that is not an Adreno: the small tile stays.
    assert_eq!(as_vendor("QUALCOMM", true), "m (#1 of sm)");
    let mut f = profile("llvmpipe").unwrap().facts().unwrap();
    f.insert("driver".into(), Fact::Str("honeykrisp".into()));
    f.extend(bare_build());
    let d = device_decisions(f).unwrap().0;
    assert_eq!(matmul(&d, &q("F16", 4096, 4096, 512)).unwrap().tile.as_deref(), Some("m (#0 of m)"), "4838-4849");
    assert_eq!(vendor_name(0x144d), "SAMSUNG");
}

/// The integer-dot (q8_1) matmul pipelines a coopmat1 device has (2491-2505; MUL_MAT_ID 2564-2577): RDNA4 lacks
/// Q4_1, Q5_1, Q4_K, Q5_K and NVFP4 for MUL_MAT; neither has Q2_K or IQ3_S; both have IQ4_NL.
#[test]
fn coopmat1_integer_dot_types_per_rdna_generation() {
    let family = |id: &str, t: &str, mul_mat_id: bool| {
        let mut query = q(t, 4096, 4096, 512);
        query.mul_mat_id = mul_mat_id;
        let p = matmul(&device(id, full_build()), &query).unwrap();
        (p.family.clone(), rule_of(&p, "quantize_y"))
    };
    assert_eq!(family("rdna3-radv", "Q2_K", false), ("MM-coopmat".into(), "matrix-coopmat1-type=false".into()));
    assert_eq!(family("rdna3-radv", "IQ3_S", false).0, "MM-coopmat");
    assert_eq!(family("rdna3-radv", "IQ4_NL", false), ("MMQ".into(), "matrix-coopmat1-int=true".into()));
    assert_eq!(family("rdna3-radv", "Q4_K", false).0, "MMQ");
    assert_eq!(family("rdna3-radv", "Q4_1", false).0, "MMQ");
    for t in ["Q4_K", "Q4_1", "Q5_K", "Q5_1"] {
        assert_eq!(family("rdna4-radv", t, false), ("MM-coopmat".into(), "matrix-coopmat1-rdna4-type=false".into()));
    }
    for t in ["Q4_0", "Q8_0", "IQ4_NL", "Q6_K", "Q3_K"] {
        assert_eq!(family("rdna4-radv", t, false).0, "MMQ", "{t}");
    }
    // MUL_MAT_ID keeps Q4_K and Q4_1 on RDNA4 (2564-2576); Q2_K has none.
    assert_eq!(family("rdna4-radv", "Q4_K", true).0, "MMQ");
    assert_eq!(family("rdna4-radv", "Q4_1", true).0, "MMQ");
    assert_eq!(family("rdna4-radv", "Q2_K", true), ("MM-coopmat".into(), "mmid-coopmat1-rdna4-type=false".into()));
    assert_eq!(family("rdna3-radv", "Q2_K", true), ("MM-coopmat".into(), "mmid-coopmat1-type=false".into()));
    // Without coopmat (RDNA2) the fp16 branch's list applies (2643-2656): Q2_K has a q8_1 pipeline.
    assert_eq!(family("rdna2-radv", "Q2_K", false).0, "MMQ");
    assert_eq!(family("rdna2-radv", "IQ4_NL", false).0, "MM");
}

/// quantize_y's `(ne11 * ne10) % 4 == 0` (6677 for the vector path, 6325 for the matrix path): the product of
/// B's row length and its columns, not K alone.
#[test]
fn quantize_y_tests_the_product_of_k_and_n() {
    let d = device("gfx906-radv", full_build());
    let rule = |k: u64, n: u64| rule_of(&matmul(&d, &q("Q4_0", k, 4096, n)).unwrap(), "quantize_y");
    // K = 4098 is 2 mod 4: with 2 columns the product 8196 is a multiple of 4, so the test passes and
    // should_use_mmvq decides (6568-6571: a batch).
    assert_eq!(rule(4098, 2), "batch=true");
    // 3 columns: 12294 is 2 mod 4.
    assert_eq!(rule(4098, 3), "row-not-multiple-of-4=false");
    // The matrix path: 10 columns pass (40980), 9 do not (36882).
    assert_eq!(rule(4098, 10), "matrix-int=true");
    assert_eq!(rule(4098, 9), "row-not-multiple-of-4=false");
}

/// The rules of Ollama v0.17.4's vendored ggml (a delta over 11434's): each expected value is what the cited lines
/// of ml/backend/ggml/ggml/src/ggml-vulkan/ggml-vulkan.cpp at v0.17.4 compute, worked out by hand.
#[test]
fn ollama_v0_17_4_rules_follow_its_vendored_ggml_vulkan() {
    let o17 = rules_for("ollama-v0.17.4").unwrap();
    assert_eq!(rules_for("o17").unwrap().version, "ollama-v0.17.4");
    assert_eq!(o17.file, "data/ggml_vulkan_ollama_v0.17.4.toml");
    let dev = |id: &str, build: Facts| {
        let mut f = profile(id).unwrap().facts().unwrap();
        f.extend(build);
        o17.device_decisions(f).unwrap().0
    };
    // 3550: no subgroup reduction on GCN, so Vega's mat-vec shaders are the shared-memory ones (no suffix).
    let vega = dev("gfx900-radv", full_build());
    assert_eq!(vega["use_subgroups"], Fact::Bool(false));
    let shader = |d: &Facts, t: &str| o17.matmul(d, &q(t, 4096, 4096, 1)).unwrap().shader.unwrap();
    assert_eq!(shader(&vega, "F16"), "mul_mat_vec_f16_f32_f32");
    assert_eq!(shader(&vega, "Q4_K"), "mul_mat_vec_q4_k_f32_f32");
    // 11434 reduces through subgroups on the same card (2899).
    assert_eq!(
        rules().matmul(&device("gfx900-radv", full_build()), &q("F16", 4096, 4096, 1)).unwrap().shader.unwrap(),
        "mul_mat_vec_f16_f32_f32_subgroup_no_shmem"
    );
    // 4871-4879 and 3219-3243, 3256-3276: AMD's medium tile at 512 columns, named by letter and per type.
    let name = |d: &Facts, t: &str, n: u64, id: bool| {
        let mut query = q(t, 4096, 4096, n);
        query.mul_mat_id = id;
        o17.matmul(d, &query).unwrap()
    };
    assert_eq!(name(&vega, "Q4_K", 512, false).pipeline.as_deref(), Some("matmul_q4_k_f32_f16acc_aligned_m"));
    assert_eq!(name(&vega, "F16", 512, false).pipeline.as_deref(), Some("matmul_f16_f32_f16acc_aligned_m"));
    let vega20 = dev("gfx906-radv", full_build());
    assert_eq!(name(&vega20, "Q4_K", 512, false).pipeline.as_deref(), Some("matmul_q4_k_q8_1_m"));
    // 7939-7944: MUL_MAT_ID is per token only for one token; two already take the matrix path, with no
    // count_experts.
    let p = name(&vega20, "Q4_K", 2, true);
    assert_eq!((p.family.as_str(), p.pipeline.as_deref()), ("MMQ", Some("matmul_id_subgroup_q4_k_q8_1_s")));
    assert_eq!(p.helpers, ["quantize_q8_1_x4"]);
    // 6928-6931: no MMVQ for Q6_K or Q3_K anywhere; 3280-3292: no IQ4_XS q8_1 matmul.
    assert_eq!(name(&vega20, "Q3_K", 4, false).family, "MMV");
    assert_eq!(name(&vega20, "IQ4_XS", 512, false).family, "MM");
    // 298-300: RDNA4 is classed RDNA3; 14612-14616 and 3100-3216: coopmat there has no q8_1 matmul.
    let rdna4 = dev("rdna4-radv", full_build());
    assert_eq!(rdna4["architecture"], Fact::Str("AMD_RDNA3".into()));
    assert_eq!(name(&rdna4, "Q4_0", 512, false).family, "MM-coopmat");
    // The tables it does not change are 11434's, and say so.
    let fp16 = vega.get("fp16").cloned();
    assert_eq!(fp16, Some(Fact::Bool(true)));
    let d = o17.device_decisions({
        let mut f = profile("gfx900-radv").unwrap().facts().unwrap();
        f.extend(full_build());
        f
    });
    let (_, decisions) = d.unwrap();
    let file_of = |t: &str| decisions.iter().find(|x| x.table == t).unwrap().file;
    assert_eq!((file_of("fp16"), file_of("use_subgroups")), (RULES_FILE, o17.file));
}

/// A version without Vulkan rules is refused with the list of those there are; a delta naming a table its base
/// lacks is an error naming the table.
#[test]
fn unknown_versions_and_bad_deltas_are_refused() {
    let e = rules_for("ollama-v0.24.0").unwrap_err().to_string();
    assert!(e.contains("ollama-v0.24.0") && e.contains("11434") && e.contains("ollama-v0.17.4"), "{e}");
    assert_eq!(rules_for("b11434").unwrap().version, "11434");
    let bad = "version = \"x\"\nname = \"x\"\nsource_root = \"x\"\nbase = \"11434\"\n\n[[matmul_table]]\nname = \"no_such\"\ndoc = \"\"\nsource = \"1\"\n[[matmul_table.rule]]\nid = \"a\"\nthen = true\nsource = \"1\"\n";
    let e = format!("{:#}", parse_rules("bad.toml", bad).unwrap_err());
    assert!(e.contains("bad.toml") && e.contains("no_such"), "{e}");
    let e = format!(
        "{:#}",
        parse_rules("bad.toml", "version = \"x\"\nname = \"x\"\nsource_root = \"x\"\nbase = \"9\"\n").unwrap_err()
    );
    assert!(e.contains("base 9"), "{e}");
}
