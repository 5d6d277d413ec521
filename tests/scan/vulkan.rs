//! `backscope scan` on the Vulkan llama.cpp build's libggml-vulkan.so: the embedded SPIR-V shaders it lists
//! against tests/oracles/spirv_symbols.py, which reads the same library through GNU readelf's section headers and
//! symbol table and checks each array's first word for the SPIR-V magic itself.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use crate::support::sweep::llama_bin;
use crate::support::util::*;

/// NAME -> file offset of every embedded shader, by the oracle.
fn oracle_shaders(lib: &Path) -> BTreeMap<String, u64> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/oracles/spirv_symbols.py");
    let out = Command::new("python3").arg(&script).arg(lib).output().expect("python3 runs");
    assert!(out.status.success(), "oracle failed: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("the oracle prints JSON")
}

#[test]
fn vulkan_library_shaders_match_readelf() {
    let lib = llama_bin().join("libggml-vulkan.so");
    let lib = lib.canonicalize().unwrap_or(lib);
    let report = scan_json(&["--kernels"], &[&lib]);
    let file = report["files"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["vulkan"].is_object())
        .unwrap_or_else(|| panic!("no Vulkan shaders in the scan of {}: {report}", lib.display()));
    let vk = &file["vulkan"];
    let oracle = oracle_shaders(&lib);
    assert!(oracle.len() > 500, "the oracle found {} shaders", oracle.len());
    assert_eq!(vk["shaders"].as_u64(), Some(oracle.len() as u64));
    // Every shader by name and file offset.
    let listed: BTreeMap<String, u64> = vk["entries"]
        .as_array()
        .expect("entries with --kernels")
        .iter()
        .map(|e| (e["name"].as_str().unwrap().to_string(), e["offset"].as_u64().unwrap()))
        .collect();
    assert_eq!(listed, oracle);
    // Families and variants, counted here from the oracle's names.
    let count = |f: &dyn Fn(&str) -> bool| oracle.keys().filter(|n| f(n)).count() as u64;
    let fam = |k: &str| vk["families"][k].as_u64().unwrap_or(0);
    assert_eq!(fam("matmul_id"), count(&|n| n.starts_with("matmul_id_")));
    assert_eq!(fam("matmul"), count(&|n| n.starts_with("matmul_") && !n.starts_with("matmul_id_")));
    assert_eq!(fam("flash_attn"), count(&|n| n.starts_with("flash_attn_")));
    let variant = |k: &str| vk["variants"][k].as_u64().unwrap_or(0);
    assert_eq!(variant("cm2"), count(&|n| n.ends_with("_cm2")));
    assert_eq!(variant("subgroup"), count(&|n| n.contains("_subgroup")));
    assert_eq!(variant("f16acc"), count(&|n| n.contains("f16acc")));
    assert_eq!(variant("q8_1"), count(&|n| n.contains("_q8_1") && !n.starts_with("quantize_")));
    // Without --kernels the counts stay and the list goes.
    let brief = scan_json(&[], &[&lib]);
    let file = brief["files"].as_array().unwrap().iter().find(|f| f["vulkan"].is_object()).unwrap();
    assert_eq!(file["vulkan"]["shaders"].as_u64(), Some(oracle.len() as u64));
    assert!(file["vulkan"].get("entries").is_none());
}

/// `maps` (and `scan`) once called ggml's core `libggml.so` "ggml (vulkan)": it has `ggml_backend_vk_reg` in
/// its dynamic strings because it *imports* it (it registers the backends it was linked with). Only a defined
/// symbol is evidence of a backend; nm(1) is the independent judge of which of llama.cpp's Vulkan build's libraries
/// define one.
#[test]
fn only_a_library_that_defines_a_backends_reg_function_is_that_backend() {
    let bin = cache().join("llama.cpp").join(backscope::host::cache::LLAMA_VULKAN_BUILD).join("build/bin");
    let mut seen = 0;
    let cases = [
        ("libggml.so", "ggml", "ggml_backend_vk_reg"),
        ("libggml-vulkan.so", "vulkan", "ggml_backend_vk_reg"),
        ("libggml-cpu.so", "cpu", "ggml_backend_cpu_reg"),
    ];
    for (file, expected, reg) in cases {
        let path = bin.join(file);
        let nm = stdout_ok(Command::new("nm").arg("-D").arg("--defined-only").arg(&path));
        let defined_reg = nm.lines().any(|l| l.ends_with(&format!(" {reg}")));
        let scan = scan_json(&[], &[&path]);
        let backend = &scan["files"][0]["backend"];
        assert_eq!(backend["name"], expected, "{file}: {backend}");
        // Content evidence exactly where nm lists the backend's reg function as defined.
        assert_eq!(backend["content_evidence"].is_string(), defined_reg, "{file}: {backend}\n{nm}");
        seen += 1;
    }
    assert_eq!(seen, 3);
    let nm = stdout_ok(Command::new("nm").arg("-D").arg(bin.join("libggml.so")));
    assert!(nm.lines().any(|l| l.trim_start().starts_with("U ggml_backend_vk_reg")), "the core library imports it");
}
