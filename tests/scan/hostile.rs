//! Hostile and broken inputs made from real files: the scan reports the file, the offset and what was
//! expected, keeps going, and never panics or allocates without bound.

use std::os::unix::fs::symlink;
use std::path::Path;
use std::process::Command;

use serde_json::Value;

use crate::support::util::*;

fn problems(report: &Value) -> Vec<(String, Option<u64>, String)> {
    report["problems"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (p["path"].as_str().unwrap().to_string(), p["offset"].as_u64(), p["message"].as_str().unwrap().to_string())
        })
        .collect()
}

/// Scan under a memory cap: an allocation sized by a lying header would fail (and abort) instead of
/// succeeding quietly. 2 GiB of address space holds the map of a 170 MB library and the real work.
fn scan_capped(args: &[&str], path: &Path) -> (Option<i32>, Value) {
    let bin = env!("CARGO_BIN_EXE_backscope");
    let mut cmd = Command::new("bash");
    cmd.arg("-c").arg(format!("ulimit -v 2097152; exec \"{bin}\" scan --json {} \"$0\"", args.join(" "))).arg(path);
    let out = run(&mut cmd);
    let code = out.status.code();
    assert!(code.is_some(), "killed by a signal: {:?}\n{}", out.status, String::from_utf8_lossy(&out.stderr));
    (
        code,
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr))),
    )
}

/// Offsets of the first bundles of the real library's .hip_fatbin, from the independent oracle.
fn first_bundles(lib: &Path) -> (u64, Vec<u64>) {
    let o = oracle(lib, None);
    let section = o["section"][0].as_u64().unwrap();
    (section, o["bundles"].as_array().unwrap().iter().take(3).map(|b| b["offset"].as_u64().unwrap()).collect())
}

#[test]
fn lying_bundle_count_and_a_one_terabyte_ccob_are_reported_and_the_rest_is_scanned() {
    let lib = cyllama_hip();
    let (_, bundles) = first_bundles(&lib);
    let mut bytes = std::fs::read(&lib).unwrap();
    // Bundle 0: entry count 2^64 - 1.
    let count_at = bundles[0] as usize + 24;
    bytes[count_at..count_at + 8].copy_from_slice(&u64::MAX.to_le_bytes());
    // Bundle 1: replaced by a CCOB v3 header whose total size covers the old bundle but announces 1 TB.
    let b1 = bundles[1] as usize;
    let total = bundles[2] - bundles[1];
    let mut ccob = b"CCOB".to_vec();
    ccob.extend(3u16.to_le_bytes());
    ccob.extend(1u16.to_le_bytes());
    ccob.extend(total.to_le_bytes());
    ccob.extend((1u64 << 40).to_le_bytes());
    ccob.extend(0u64.to_le_bytes());
    bytes[b1..b1 + ccob.len()].copy_from_slice(&ccob);
    let tmp = tempfile::tempdir().unwrap();
    let bad = tmp.path().join("libggml-hip-bad.so");
    std::fs::write(&bad, &bytes).unwrap();

    let (code, report) = scan_capped(&[], &bad);
    assert_eq!(code, Some(1), "exit 1: scanned, with problems");
    let ps = problems(&report);
    let shown = bad.display().to_string();
    assert!(
        ps.iter().any(|(p, o, m)| *p == shown && *o == Some(count_at as u64) && m.contains("entry count")),
        "bundle count problem at {count_at:#x}: {ps:?}"
    );
    assert!(
        ps.iter().any(|(p, o, m)| *p == shown && *o == Some(b1 as u64 + 16) && m.contains("uncompressed size")),
        "CCOB size problem at {:#x}: {ps:?}",
        b1 + 16
    );
    let amd = &report["files"][0]["amdgpu"];
    assert_eq!(amd["code_objects"].as_array().unwrap().len(), 390 - 6, "the other 128 bundles are all there");
    assert!(report["claims"].as_array().unwrap().iter().any(|c| c["confidence"] == "Limited"));
}

#[test]
fn truncated_copies_of_a_real_library_never_crash() {
    let lib = fixture("jax_rocm7_plugin/jax_rocm7_plugin/_solver.so");
    let bytes = std::fs::read(&lib).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    // Cut points: inside the ELF header, inside .hip_fatbin (98304 + …, per the oracle), and near the end.
    let o = oracle(&lib, None);
    let sec = o["section"][0].as_u64().unwrap() as usize;
    for cut in [3, 40, 63, 4096, sec + 10, sec + 40, sec + 5000, bytes.len() - 1] {
        let p = tmp.path().join(format!("cut-{cut}.so"));
        std::fs::write(&p, &bytes[..cut.min(bytes.len())]).unwrap();
        let (code, report) = scan_capped(&[], &p);
        assert!(matches!(code, Some(0) | Some(1)), "cut {cut}: exit {code:?}");
        if cut > 64 {
            let ps = problems(&report);
            assert!(
                ps.iter().any(|(path, _, _)| path.ends_with(&format!("cut-{cut}.so"))),
                "cut {cut}: the file is named: {ps:?}"
            );
        }
    }
}

#[test]
fn lz4_size_lie_in_a_cuda_fatbin_is_reported_with_its_offset() {
    let lib = fixture("nvidia_nvjpeg_cu12/nvidia/nvjpeg/lib/libnvjpeg.so.12");
    let report = scan_json(&[], &[&lib]);
    let entries = report["files"][0]["cuda"]["entries"].as_array().unwrap();
    let lz4 = entries.iter().find(|e| e["compression"]["method"] == "lz4").expect("an LZ4 entry");
    let entry_at = lz4["offset"].as_u64().unwrap() as usize;
    let mut bytes = std::fs::read(&lib).unwrap();
    // +56: decompressed size (formats.md §4.3). Claim 3 bytes more than the stream yields.
    let claimed = u64::from_le_bytes(bytes[entry_at + 56..entry_at + 64].try_into().unwrap());
    bytes[entry_at + 56..entry_at + 64].copy_from_slice(&(claimed + 3).to_le_bytes());
    let tmp = tempfile::tempdir().unwrap();
    let bad = tmp.path().join("libnvjpeg-bad.so.12");
    std::fs::write(&bad, &bytes).unwrap();
    let (code, report) = scan_capped(&[], &bad);
    assert_eq!(code, Some(1));
    let ps = problems(&report);
    assert!(ps.iter().any(|(_, o, m)| o.is_some() && m.contains("CUDA fatbin entry payload")), "{ps:?}");
    let n = report["files"][0]["cuda"]["entries"].as_array().unwrap().len();
    assert_eq!(n, entries.len(), "every entry still has a record");
    let kernels: u64 = report["files"][0]["cuda"]["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["kernel_count"].as_u64().unwrap())
        .sum();
    let before: u64 = entries.iter().map(|e| e["kernel_count"].as_u64().unwrap()).sum();
    assert!(kernels < before && kernels > 0, "only the lying entry lost its kernels");
}

#[test]
fn odd_trees_loops_fifos_and_non_elf_files() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    std::fs::create_dir_all(d.join("lib/ollama/rocm")).unwrap();
    std::fs::copy(fixture("jax_rocm7_plugin/jax_rocm7_plugin/_prng.so"), d.join("lib/ollama/rocm/_prng.so")).unwrap();
    std::fs::write(d.join("lib/ollama/notes.txt"), b"not an ELF").unwrap();
    std::fs::write(d.join("lib/ollama/empty.so"), b"").unwrap();
    // The first 200 bytes of a real library: a valid ELF header whose section table lies past the end.
    let real = std::fs::read(fixture("jax_rocm7_plugin/jax_rocm7_plugin/_prng.so")).unwrap();
    std::fs::write(d.join("lib/ollama/fake.so"), &real[..200]).unwrap();
    symlink(d.join("lib"), d.join("lib/ollama/rocm/loop")).unwrap();
    symlink(d.join("missing.so"), d.join("lib/ollama/dangling.so")).unwrap();
    assert!(Command::new("mkfifo").arg(d.join("lib/ollama/fifo")).status().unwrap().success());
    let (code, report) = scan_capped(&[], d);
    assert_eq!(code, Some(1), "fake.so is a broken ELF");
    let ps = problems(&report);
    assert!(ps.iter().any(|(p, _, m)| p.ends_with("loop") && m.contains("already visited")), "{ps:?}");
    assert!(ps.iter().any(|(p, _, m)| p.ends_with("dangling.so") && m.contains("broken")), "{ps:?}");
    assert!(ps.iter().any(|(p, o, m)| p.ends_with("fake.so") && o.is_some() && m.contains("ELF")), "{ps:?}");
    let prng = report["files"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["path"].as_str().unwrap().ends_with("_prng.so"))
        .expect("the real library is still scanned");
    assert_eq!(prng["amdgpu"]["compressed_bundles"], 1);
}

#[test]
fn missing_path_is_a_usage_error() {
    let out = run(backscope().args(["scan", "/nonexistent/backscope-test"]));
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/backscope-test"));
}
