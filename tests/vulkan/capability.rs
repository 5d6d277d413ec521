//! The capability claim ("the device offers X, the build lacks Y") of `trace`, `doctor` and `report`
//! (`src/observe/vulkan/capability.rs`, `data/vulkan_capabilities.toml`), against facts read independently of it:
//! - what the build embeds: the shader array names (`NAME_data`) searched as plain bytes in libggml-vulkan.so's
//!   string table (vulkan-shaders-gen.cpp:437 appends `_cm1`/`_cm2`, 815-823 name integer-dot shaders `_q8_1_f32`);
//! - what the device offers: the H100's device record as the layer wrote it on the GPU machine
//!   (docs/validation/gpu-2026-11-23/vulkan/raw.tar.gz) and, for this machine's lavapipe, `vulkaninfo`'s output;
//! - what ggml made of it: its own device line in the same evidence (`int dot: 0 | matrix cores: none`).
//!
//! The H100 ran a build made with Debian 12's glslc, which could emit none of those shaders; this repository's build
//! now has them all. For the H100's record, a copy of this build's library with the integer-dot and cooperative-matrix
//! shader symbols renamed (same lengths, nothing else touched) stands for that build; the real library must give no
//! gap at all.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use crate::support::sweep::*;
use crate::support::util::*;

/// The trace text with the library its pipelines were recorded from (the GPU machine's carried copy of the build,
/// named by the kernels' `spirv_object`) replaced by `lib`: this machine's build of the same source. The trace must
/// name one such library, and the replacement must really happen.
fn with_library(trace: &str, lib: &std::path::Path) -> String {
    const KEY: &str = "\"spirv_object\":\"";
    let recorded: std::collections::BTreeSet<&str> = trace
        .match_indices(KEY)
        .filter_map(|(at, _)| trace[at + KEY.len()..].split('"').next())
        .filter(|path| path.ends_with("/libggml-vulkan.so.0"))
        .collect();
    assert_eq!(recorded.len(), 1, "the trace records one libggml-vulkan.so.0: {recorded:?}");
    let recorded = recorded.into_iter().next().unwrap();
    trace.replace(recorded, &lib.display().to_string())
}

/// Whether the library embeds a shader whose array name contains `marker` (searched as bytes: `…marker…_data\0`).
fn embeds(lib: &Path, marker: &str, exclude: &str) -> bool {
    let bytes = std::fs::read(lib).unwrap();
    let mut at = 0;
    while let Some(i) = bytes[at..].windows(marker.len()).position(|w| w == marker.as_bytes()) {
        let hit = at + i;
        let start = bytes[..hit].iter().rposition(|&b| b == 0).map_or(0, |p| p + 1);
        let end = hit + bytes[hit..].iter().position(|&b| b == 0).unwrap_or(0);
        let name = String::from_utf8_lossy(&bytes[start..end]);
        if name.ends_with("_data") && !name.starts_with(exclude) {
            return true;
        }
        at = hit + 1;
    }
    false
}

fn library() -> PathBuf {
    llama_bin().join("libggml-vulkan.so").canonicalize().unwrap()
}

/// What the build has, per capability id, by byte search.
fn build_has() -> [(&'static str, bool); 3] {
    build_has_in(&library())
}

fn build_has_in(lib: &Path) -> [(&'static str, bool); 3] {
    let lib = lib.to_path_buf();
    [
        ("integer_dot", embeds(&lib, "_q8_1_f32", "quantize_q8_1")),
        ("cooperative_matrix", embeds(&lib, "_cm1", "-")),
        ("cooperative_matrix2", embeds(&lib, "_cm2", "-")),
    ]
}

fn claims_with_prefix<'a>(summary: &'a Value, prefix: &str) -> Vec<&'a Value> {
    summary["claims"].as_array().unwrap().iter().filter(|c| c["id"].as_str().unwrap().starts_with(prefix)).collect()
}

fn claim<'a>(claims: &[&'a Value], id: &str) -> Option<&'a Value> {
    claims.iter().copied().find(|c| c["id"] == id)
}

/// The H100 device record and the pipelines of its Q4_K_M 8-token prompt, against a build without the shaders (see
/// the module documentation): the record says cooperative matrix 1 and 2 are offered and the build has neither, so
/// both gaps are Inferred and name the pipelines the trace ran that they would replace; integer dot is Unresolved
/// because that layer did not record the acceleration property ggml needs besides the feature. Against this
/// machine's build itself, which has all three, there is no gap.
#[test]
fn the_h100_record_against_this_build_states_the_coopmat_gaps() {
    let tmp = tempfile::tempdir().unwrap();
    let tarball = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/validation/gpu-2026-11-23/vulkan/raw.tar.gz");
    let status = Command::new("tar").arg("xzf").arg(&tarball).arg("-C").arg(tmp.path()).status().unwrap();
    assert!(status.success());
    let raw = tmp.path().join("raw");
    let original = std::fs::read_to_string(raw.join("vk-q4km-p8.traces/trace-5408.jsonl")).unwrap();
    let device: Value = serde_json::from_str(original.lines().find(|l| l.starts_with("{\"device\"")).unwrap()).unwrap();
    assert_eq!(device["name"], "NVIDIA H100 80GB HBM3");
    assert_eq!(
        (&device["cooperative_matrix"], &device["flags"]["cooperative_matrix2"]),
        (&Value::Bool(true), &Value::Bool(true))
    );
    assert!(device["flags"].get("integer_dot_accelerated").is_none());
    // ggml's own account of the same run: it used neither.
    let perf_log = std::fs::read_to_string(raw.join("vk-q4km-p8.perf.log")).unwrap();
    assert!(perf_log.contains("| int dot: 0 | matrix cores: none"), "{perf_log}");

    // The trace names the GPU machine's copy of the library; point it at this machine's build of the same source.
    let read_against = |lib: &Path, name: &str| -> Value {
        let dir = tmp.path().join(name);
        std::fs::create_dir(&dir).unwrap();
        std::fs::write(dir.join("trace-5408.jsonl"), with_library(&original, lib)).unwrap();
        serde_json::from_str(&stdout_ok(backscope().args(["trace", "--read"]).arg(&dir).arg("--json"))).unwrap()
    };
    assert!(build_has().iter().all(|(_, h)| *h), "this build embeds {:?}", build_has());
    let full = read_against(&library(), "this-build");
    assert!(claims_with_prefix(&full, "trace.vulkan.capability").is_empty(), "{}", full["claims"]);

    let lib = library_without_the_shaders(tmp.path());
    let summary = read_against(&lib, "without");
    let caps = claims_with_prefix(&summary, "trace.vulkan.capability");

    let has = build_has_in(&lib);
    assert!(has.iter().all(|(_, h)| !h), "this build embeds {has:?}: the expectations below assume none");
    let matmul_or_fa: u64 = summary["kernels"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|k| {
            let n = k["name"].as_str().unwrap();
            n.starts_with("matmul_") || n.starts_with("flash_attn_")
        })
        .map(|k| k["launches"].as_u64().unwrap())
        .sum();
    let total: u64 = summary["kernels"].as_array().unwrap().iter().map(|k| k["launches"].as_u64().unwrap()).sum();
    assert!(matmul_or_fa > 0);
    for (id, ext) in
        [("cooperative_matrix", "GL_KHR_cooperative_matrix"), ("cooperative_matrix2", "GL_NV_cooperative_matrix2")]
    {
        let c = claim(&caps, &format!("trace.vulkan.capability.{id}")).unwrap_or_else(|| panic!("{id}: {caps:?}"));
        assert_eq!(c["confidence"], "Inferred", "{c}");
        let s = c["statement"].as_str().unwrap();
        assert!(s.starts_with("NVIDIA H100 80GB HBM3 offers"), "{s}");
        assert!(s.contains(ext) && s.contains(&lib.display().to_string()), "{s}");
        assert!(s.contains(&format!("{matmul_or_fa} of {total} dispatches")), "{s}");
        assert!(s.contains("flash_attn_f32_f16"), "{s}");
        let sources = c["sources"].as_array().unwrap();
        assert!(sources
            .iter()
            .any(|x| x["kind"] == "rule" && x["upstream"].as_str().unwrap().contains("ggml-vulkan.cpp:")));
    }
    let dot = claim(&caps, "trace.vulkan.capability.integer_dot").expect("integer dot");
    assert_eq!(dot["confidence"], "Unresolved", "{dot}");
    let s = dot["statement"].as_str().unwrap();
    assert!(
        s.contains("integerDotProduct4x8BitPackedSignedAccelerated") && s.contains("mul_mat_vec_q4_k_f32_f32"),
        "{s}"
    );
    assert_eq!(caps.len(), 3, "{caps:?}");
}

/// `report`'s claims for a sweep run directory: the H100 trace as a server's trace directory and the same run's
/// ggml output as that server's log, against a build without the shaders (the module documentation); the claims
/// cite ggml's device line as corroboration.
#[test]
fn a_run_directory_with_a_vulkan_trace_and_its_server_log_gets_the_claims() {
    let tmp = tempfile::tempdir().unwrap();
    let tarball = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/validation/gpu-2026-11-23/vulkan/raw.tar.gz");
    let status = Command::new("tar").arg("xzf").arg(&tarball).arg("-C").arg(tmp.path()).status().unwrap();
    assert!(status.success());
    let raw = tmp.path().join("raw");
    let run = tmp.path().join("run");
    std::fs::create_dir_all(run.join("traces/s001-vk")).unwrap();
    std::fs::create_dir_all(run.join("servers")).unwrap();
    let original = std::fs::read_to_string(raw.join("vk-f16-p512.traces/trace-5376.jsonl")).unwrap();
    let lib = library_without_the_shaders(tmp.path());
    std::fs::write(run.join("traces/s001-vk/trace-5376.jsonl"), with_library(&original, &lib)).unwrap();
    std::fs::copy(raw.join("vk-f16-p512.perf.log"), run.join("servers/s001-vk.log")).unwrap();
    let claims = backscope::run_analysis::vulkan::run_claims("report.vulkan.capability", &run);
    let ids: Vec<&str> = claims.iter().map(|c| c.id.as_str()).collect();
    assert_eq!(
        ids,
        [
            "report.vulkan.capability.integer_dot",
            "report.vulkan.capability.cooperative_matrix",
            "report.vulkan.capability.cooperative_matrix2"
        ]
    );
    let cm2 = &claims[2];
    assert_eq!(cm2.confidence, backscope::evidence::Confidence::Inferred);
    assert!(cm2.statement.contains("ggml's own device line says matrix cores: none"), "{}", cm2.statement);
    // A 512-token F16 prompt runs matmul tiles: those are what coopmat2 would replace.
    assert!(cm2.statement.contains("matmul_f16"), "{}", cm2.statement);
    assert!(cm2
        .sources
        .iter()
        .any(|s| matches!(s, backscope::evidence::Source::LogLine { text, .. } if text.contains("int dot: 0"))));
    let dot = &claims[0];
    assert!(dot.statement.contains("int dot: 0"), "{}", dot.statement);
}

/// `vulkaninfo`'s device on this machine: (VK_KHR_shader_integer_dot_product listed, shaderIntegerDotProduct,
/// integerDotProduct4x8BitPackedSignedAccelerated, VK_KHR_cooperative_matrix listed, VK_NV_cooperative_matrix2 listed).
fn vulkaninfo_facts() -> (bool, bool, bool, bool) {
    let text = stdout_ok(Command::new("vulkaninfo").env("GGML_VK_VISIBLE_DEVICES", "0"));
    let gpu0 = text.split("\nGPU1:").next().unwrap();
    let value = |k: &str| {
        gpu0.lines().map(str::trim).any(|l| l.split_once('=').is_some_and(|(a, b)| a.trim() == k && b.trim() == "true"))
    };
    let listed = |e: &str| gpu0.lines().any(|l| l.trim().starts_with(&format!("{e} ")) && l.contains("revision"));
    (
        listed("VK_KHR_shader_integer_dot_product")
            && value("shaderIntegerDotProduct")
            && value("integerDotProduct4x8BitPackedSignedAccelerated"),
        value("integerDotProduct4x8BitPackedSignedAccelerated"),
        listed("VK_KHR_cooperative_matrix") && value("cooperativeMatrix"),
        listed("VK_NV_cooperative_matrix2"),
    )
}

/// The gaps vulkaninfo and the byte search imply, by capability id.
fn expected_gaps() -> Vec<&'static str> {
    let (dot, _, coop, coop2) = vulkaninfo_facts();
    let has = build_has();
    [("integer_dot", dot), ("cooperative_matrix", coop), ("cooperative_matrix2", coop2)]
        .into_iter()
        .filter(|(id, offered)| *offered && !has.iter().any(|(h, built)| h == id && *built))
        .map(|(id, _)| id)
        .collect()
}

/// A live trace on lavapipe: the layer records the acceleration property as vulkaninfo reports it (false on
/// lavapipe), so the integer-dot feature alone makes no claim; cooperative matrix is not offered at all.
#[test]
fn a_lavapipe_trace_claims_exactly_the_gaps_vulkaninfo_implies() {
    let _turn = heavy();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("t");
    let mut cmd = backscope();
    cmd.args(["trace", "--json", "--vklayer"]).arg(vklayer_library()).arg("--dir").arg(&dir).arg("--");
    cmd.arg(llama_bin().join("llama-bench")).arg("-m").arg(tiny_model());
    cmd.args(["-ngl", "99", "-p", "8", "-n", "0", "-r", "1"]).env("GGML_VK_VISIBLE_DEVICES", "0");
    let out = run(&mut cmd);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let summary: Value = serde_json::from_str(stdout.trim_end().rsplit('\n').next().unwrap()).unwrap();

    let traces = backscope::trace::read_dir(&dir).unwrap();
    let device = traces.traces.iter().flat_map(|t| t.devices.values()).next().expect("a device record");
    let (_, accelerated, _, _) = vulkaninfo_facts();
    assert_eq!(device.flags.get("integer_dot_accelerated"), Some(&accelerated), "{device:?}");

    let ids: Vec<String> = claims_with_prefix(&summary, "trace.vulkan.capability")
        .iter()
        .map(|c| c["id"].as_str().unwrap().trim_start_matches("trace.vulkan.capability.").to_string())
        .collect();
    assert_eq!(ids, expected_gaps(), "{summary}");
}

/// `doctor` finds the build on PATH, says what it embeds, and states the gaps vulkaninfo implies (none on lavapipe).
#[test]
fn doctor_describes_the_build_and_claims_the_gaps_vulkaninfo_implies() {
    let path = format!("{}:{}", llama_bin().display(), std::env::var("PATH").unwrap_or_default());
    let out = stdout_ok(backscope().args(["doctor", "--json", "--no-scan"]).env("PATH", path));
    let report: Value = serde_json::from_str(&out).unwrap();
    let builds = claims_with_prefix(&report, "doctor.vulkan.build.");
    let lib = library();
    let build = builds
        .iter()
        .find(|c| c["statement"].as_str().unwrap().starts_with(&lib.display().to_string()))
        .unwrap_or_else(|| panic!("{builds:?}"));
    assert_eq!(build["confidence"], "Confirmed");
    let s = build["statement"].as_str().unwrap();
    for (name, (_, has)) in
        ["integer dot product", "cooperative matrix (KHR_coopmat)", "cooperative matrix 2 (NV_coopmat2)"]
            .iter()
            .zip(build_has())
    {
        let said = if has { format!("{name}: built") } else { format!("{name}: not built") };
        assert!(s.contains(&said), "{said}: {s}");
    }
    let gaps: Vec<String> = claims_with_prefix(&report, "doctor.vulkan.capability")
        .iter()
        .map(|c| c["id"].as_str().unwrap().trim_start_matches("doctor.vulkan.capability.").to_string())
        .collect();
    assert_eq!(gaps, expected_gaps(), "{report}");
}
