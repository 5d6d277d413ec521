//! `backscope scan` on real GPU libraries, checked against independent readers: the Python bundle walker in
//! tests/oracles (written from clang's bundle layout), LLVM 15's llvm-readelf/clang-offload-bundler, GNU
//! c++filt and ldd.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use crate::support::hip::legacy_targets_program;
use crate::support::util::*;

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a number: {v}"))
}

fn code_objects(file: &Value) -> &Vec<Value> {
    file["amdgpu"]["code_objects"].as_array().expect("amdgpu.code_objects")
}

fn file_record<'a>(report: &'a Value, name_suffix: &str) -> &'a Value {
    report["files"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["path"].as_str().unwrap().ends_with(name_suffix))
        .unwrap_or_else(|| panic!("no record for {name_suffix}"))
}

/// Target of a bundle entry ID as the oracle sees it: everything after the 4-field triple's `--`.
fn oracle_target(id: &str) -> String {
    id.split_once("--").map(|(_, t)| t.to_string()).unwrap_or_default()
}

#[test]
fn cyllama_hip_library_matches_the_oracle_and_llvm_readelf() {
    let lib = cyllama_hip();
    let report = scan_json(&["--kernels"], &[&lib]);
    let tmp = tempfile::tempdir().unwrap();
    let oracle = oracle(&lib, Some(tmp.path()));
    let file = file_record(&report, "libggml-hip-f822f971.so");
    let amd = &file["amdgpu"];

    // Section and bundles.
    assert_eq!(u(&amd["section"]["offset"]), u(&oracle["section"][0]));
    assert_eq!(u(&amd["section"]["size"]), u(&oracle["section"][1]));
    let bundles = oracle["bundles"].as_array().unwrap();
    assert_eq!(u(&amd["bundles"]), bundles.len() as u64);
    assert_eq!(bundles.len(), 130, "formats.md §1.3 (verified): 130 bundles");
    assert_eq!(u(&amd["compressed_bundles"]), 0);

    // Every device entry of every bundle, by file offset.
    let mut oracle_cos: BTreeMap<u64, (String, u64, String)> = BTreeMap::new();
    for (i, b) in bundles.iter().enumerate() {
        for (j, e) in b["entries"].as_array().unwrap().iter().enumerate() {
            let id = e["id"].as_str().unwrap();
            if id.starts_with("host") {
                continue;
            }
            oracle_cos
                .insert(u(&b["offset"]) + u(&e["offset"]), (id.to_string(), u(&e["size"]), format!("{i}-{j}.co")));
        }
    }
    let cos = code_objects(file);
    assert_eq!(cos.len(), oracle_cos.len());
    assert_eq!(cos.len(), 390);
    let targets: BTreeSet<&str> = cos.iter().map(|c| c["target"].as_str().unwrap()).collect();
    let oracle_targets: BTreeSet<String> = oracle_cos.values().map(|(id, _, _)| oracle_target(id)).collect();
    assert_eq!(targets.iter().map(|s| s.to_string()).collect::<BTreeSet<_>>(), oracle_targets);
    assert_eq!(targets, BTreeSet::from(["gfx1100", "gfx90a", "gfx942"]));

    // Kernel metadata of all 390 code objects against llvm-readelf-15 --notes.
    let files: Vec<PathBuf> = oracle_cos.values().map(|(_, _, f)| tmp.path().join(f)).collect();
    let notes = readelf_notes(&files);
    let mut per_target: BTreeMap<String, u64> = BTreeMap::new();
    let mut compared = 0;
    for co in cos {
        let (id, size, f) = &oracle_cos[&u(&co["offset"])];
        assert_eq!(co["entry_id"].as_str().unwrap(), id);
        assert_eq!(u(&co["size"]), *size);
        let theirs = &notes[&tmp.path().join(f).display().to_string()];
        let ours = co["kernels"].as_array().unwrap();
        assert_eq!(ours.len(), theirs.len(), "{f}");
        assert_eq!(u(&co["kernel_count"]), theirs.len() as u64);
        *per_target.entry(co["target"].as_str().unwrap().to_string()).or_default() += theirs.len() as u64;
        for (k, t) in ours.iter().zip(theirs) {
            assert_eq!(k["name"].as_str().unwrap(), t.name);
            for (ours_key, readelf_key) in [
                ("vgpr", ".vgpr_count"),
                ("sgpr", ".sgpr_count"),
                ("agpr", ".agpr_count"),
                ("vgpr_spills", ".vgpr_spill_count"),
                ("sgpr_spills", ".sgpr_spill_count"),
                ("shared_bytes", ".group_segment_fixed_size"),
                ("scratch_bytes", ".private_segment_fixed_size"),
                ("wavefront_size", ".wavefront_size"),
                ("max_threads", ".max_flat_workgroup_size"),
                ("arg_bytes", ".kernarg_segment_size"),
            ] {
                let ours = k.get(ours_key).map(|v| v.to_string());
                assert_eq!(
                    ours.as_deref(),
                    t.fields.get(readelf_key).map(String::as_str),
                    "{} {ours_key} in {f}",
                    t.name
                );
            }
            compared += 1;
        }
    }
    assert_eq!(compared, 19_815, "formats.md §3.3: 19,815 kernels in the real file");
    assert_eq!(
        per_target,
        BTreeMap::from([("gfx1100".into(), 6605), ("gfx90a".into(), 6605), ("gfx942".into(), 6605)])
    );

    // clang-offload-bundler lists the same entry IDs for a few whole bundles.
    for i in [0usize, 64, 129] {
        let bundle = tmp.path().join(format!("{i}.bundle"));
        let listed = stdout_ok(
            Command::new("clang-offload-bundler-15")
                .args(["--list", "--type=o"])
                .arg(format!("--input={}", bundle.display())),
        );
        let listed: BTreeSet<&str> = listed.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
        let b_off = u(&bundles[i]["offset"]);
        let ours: BTreeSet<&str> =
            cos.iter().filter(|c| u(&c["bundle_offset"]) == b_off).map(|c| c["entry_id"].as_str().unwrap()).collect();
        assert!(
            ours.iter().all(|id| listed.contains(id)),
            "bundle {i}: ours {ours:?} vs clang-offload-bundler {listed:?}"
        );
        assert_eq!(listed.len(), ours.len() + 1, "plus the host entry");
    }

    // Families: ggml's MMVQ kernels exist for Q4_K on every target (names carry (ggml_type)12).
    let q4k_mmvq = cos
        .iter()
        .flat_map(|c| c["kernels"].as_array().unwrap())
        .filter(|k| k["family"] == "MMVQ" && k["ggml_type"] == "Q4_K")
        .count();
    let by_name = notes
        .values()
        .flatten()
        .filter(|k| {
            ["_ZL13mul_mat_vec_qIL9ggml_type12E", "_ZL17mul_mat_vec_q_moeIL9ggml_type12E"]
                .iter()
                .any(|p| k.name.starts_with(p))
        })
        .count();
    assert!(by_name > 0);
    assert_eq!(q4k_mmvq, by_name);
}

#[test]
fn arch_gfx900_on_the_cyllama_library_finds_no_code_and_names_what_is_there() {
    let lib = cyllama_hip();
    // Wide enough that the claim is one line: the test reads the whole statement.
    let text = stdout_ok(backscope().env("COLUMNS", "400").args(["scan", "--arch", "gfx900"]).arg(&lib));
    assert!(text.contains("carries no code for gfx900; it carries gfx1100, gfx90a, gfx942"), "{text}");
    let report = scan_json(&["--arch", "gfx900"], &[&lib]);
    let claim = report["claims"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == "scan.arch.gfx900.libggml-hip-f822f971.so")
        .expect("arch claim");
    assert_eq!(claim["confidence"], "Confirmed");
    let oracle = oracle(&lib, None);
    let src = &claim["sources"][0];
    assert_eq!(
        (u(&src["offset"]), u(&src["length"])),
        (u(&oracle["section"][0]), u(&oracle["section"][1])),
        "evidence points at .hip_fatbin"
    );
    let answer = &report["arch_answer"]["libraries"][0];
    assert_eq!(answer["verdict"], "nothing");
}

const HIP_SOURCE: &str = r#"#include <hip/hip_runtime.h>
enum ggml_type { GGML_TYPE_Q8_0 = 8, GGML_TYPE_Q4_K = 12 };
template <ggml_type T, int ncols>
__global__ void mul_mat_vec_q(const void* x, float* y) { y[threadIdx.x] = ncols * (int)T; }
template <ggml_type T>
__global__ void mul_mat_q(const void* x, float* y, int n) { for (int i = 0; i < n; ++i) y[i] += (int)T; }
__global__ void scale(float* y, float s) {
    __shared__ float tmp[256];
    tmp[threadIdx.x] = y[threadIdx.x];
    __syncthreads();
    y[threadIdx.x] = tmp[255 - threadIdx.x] * s;
}
template __global__ void mul_mat_vec_q<GGML_TYPE_Q4_K, 8>(const void*, float*);
template __global__ void mul_mat_vec_q<GGML_TYPE_Q8_0, 1>(const void*, float*);
template __global__ void mul_mat_q<GGML_TYPE_Q4_K>(const void*, float*, int);
int main() { return 0; }
"#;

#[test]
fn hipcc_built_code_objects_for_gfx900_gfx906_gfx1030() {
    let tmp = tempfile::tempdir().unwrap();
    let exe = legacy_targets_program(tmp.path(), HIP_SOURCE);
    let report = scan_json(&["--kernels", "--arch", "gfx900"], &[&exe]);
    let file = &report["files"][0];
    let cos = code_objects(file);
    let targets: BTreeSet<&str> = cos.iter().map(|c| c["target"].as_str().unwrap()).collect();
    assert_eq!(targets, BTreeSet::from(["gfx1030", "gfx900", "gfx906"]));

    // Kernels and resources against llvm-readelf-15 on the code objects the oracle extracts.
    let ex = tmp.path().join("ex");
    std::fs::create_dir(&ex).unwrap();
    let oracle = oracle(&exe, Some(&ex));
    let mut files: Vec<PathBuf> = std::fs::read_dir(&ex)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "co"))
        .collect();
    files.sort();
    let notes = readelf_notes(&files);
    assert_eq!(notes.len(), 3);
    for (path, kernels) in &notes {
        let (i, j) = {
            let stem = Path::new(path).file_stem().unwrap().to_str().unwrap();
            let (i, j) = stem.split_once('-').unwrap();
            (i.parse::<usize>().unwrap(), j.parse::<usize>().unwrap())
        };
        let entry = &oracle["bundles"][i]["entries"][j];
        let offset = u(&oracle["bundles"][i]["offset"]) + u(&entry["offset"]);
        let co = cos.iter().find(|c| u(&c["offset"]) == offset).expect("code object at the oracle's offset");
        let ours = co["kernels"].as_array().unwrap();
        assert_eq!(ours.len(), kernels.len());
        for (k, t) in ours.iter().zip(kernels) {
            assert_eq!(k["name"].as_str().unwrap(), t.name);
            assert_eq!(k["vgpr"].to_string(), t.fields[".vgpr_count"]);
            assert_eq!(k["shared_bytes"].to_string(), t.fields[".group_segment_fixed_size"]);
            assert_eq!(k["wavefront_size"].to_string(), t.fields[".wavefront_size"]);
            // GNU c++filt with --no-params is the independent demangler.
            let cxxfilt = stdout_ok(Command::new("c++filt").arg("-p").arg(&t.name));
            assert_eq!(k["demangled"].as_str().unwrap(), cxxfilt.trim().trim_start_matches("void "));
        }
        let scale = ours.iter().find(|k| k["name"] == "_Z5scalePff").expect("scale kernel");
        assert_eq!(scale["shared_bytes"], 1024, "__shared__ float[256]");
    }
    let mmvq: Vec<&Value> = cos[0]["kernels"].as_array().unwrap().iter().filter(|k| k["family"] == "MMVQ").collect();
    assert_eq!(
        mmvq.iter().map(|k| k["ggml_type"].as_str().unwrap()).collect::<BTreeSet<_>>(),
        BTreeSet::from(["Q4_K", "Q8_0"])
    );

    // The --arch answer finds gfx900 code, with an offset that holds an AMDGPU ELF for gfx900.
    let answer = &report["arch_answer"]["libraries"][0];
    assert_eq!(answer["verdict"], "ggml-kernels");
    assert_eq!(answer["families"]["MMVQ"], 2);
    assert_eq!(answer["families"]["MMQ"], 1);
    let at = u(&answer["evidence_offsets"][0]) as usize;
    let bytes = std::fs::read(&exe).unwrap();
    assert_eq!(&bytes[at..at + 4], b"\x7fELF");
    assert_eq!(bytes[at + 0x30], 0x2c, "e_flags mach 0x2c = gfx900 (LLVM ELF.h)");

    for (arch, verdict) in [("gfx906:xnack+", "ggml-kernels"), ("gfx1201", "nothing"), ("gfx90c", "nothing")] {
        let r = scan_json(&["--arch", arch], &[&exe]);
        assert_eq!(r["arch_answer"]["libraries"][0]["verdict"], verdict, "{arch}");
    }
}

#[test]
fn jax_plugin_ccob_v3_zstd_bundles() {
    let dir = fixture("jax_rocm7_plugin/jax_rocm7_plugin");
    let report = scan_json(&[], &[&dir]);
    for name in ["_prng.so", "_linalg.so", "_solver.so"] {
        let path = dir.join(name);
        let file = file_record(&report, &format!("/{name}"));
        let oracle = oracle(&path, None);
        let bundles = oracle["bundles"].as_array().unwrap();
        assert_eq!(u(&file["amdgpu"]["compressed_bundles"]), bundles.len() as u64);
        let cos = code_objects(file);
        let mut expected = 0;
        for b in bundles {
            let ccob = &b["ccob"];
            assert_eq!((u(&ccob["version"]), u(&ccob["method"])), (3, 1), "{name}: CCOB v3 zstd");
            assert_eq!(u(&ccob["uncompressed"]), u(&ccob["decompressed_len"]), "the zstd CLI agrees with the header");
            let ours: Vec<&Value> = cos.iter().filter(|c| u(&c["bundle_offset"]) == u(&b["offset"])).collect();
            let entries: Vec<&Value> = b["entries"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|e| !e["id"].as_str().unwrap().starts_with("host"))
                .collect();
            assert_eq!(ours.len(), entries.len());
            for (c, e) in ours.iter().zip(&entries) {
                assert_eq!(c["entry_id"], e["id"]);
                assert_eq!(u(&c["offset"]), u(&e["offset"]), "offset inside the decompressed bundle");
                assert_eq!(c["in_file"], false);
                assert_eq!(c["bundle_compression"]["format"], "ccob-v3");
                assert_eq!(c["bundle_compression"]["method"], "zstd");
                assert_eq!(u(&c["bundle_compression"]["uncompressed_size"]), u(&ccob["uncompressed"]));
            }
            expected += entries.len();
        }
        assert_eq!(cos.len(), expected);
        assert!(cos.iter().any(|c| c["target"] == "gfx900"));
    }
}

#[test]
fn rocsparse_from_debian_is_an_older_multi_target_sample() {
    let lib = Path::new("/usr/lib/x86_64-linux-gnu/librocsparse.so.0.1");
    assert!(lib.exists(), "install Debian's librocsparse0 (scripts/install-deps.sh)");
    let report = scan_json(&[], &[lib]);
    let oracle = oracle(lib, None);
    let file = &report["files"][0];
    let bundles = oracle["bundles"].as_array().unwrap();
    assert_eq!(u(&file["amdgpu"]["bundles"]), bundles.len() as u64);
    let oracle_targets: BTreeSet<String> = bundles
        .iter()
        .flat_map(|b| b["entries"].as_array().unwrap())
        .map(|e| e["id"].as_str().unwrap())
        .filter(|id| !id.starts_with("host"))
        .map(oracle_target)
        .collect();
    let ours: BTreeSet<String> = code_objects(file).iter().map(|c| c["target"].as_str().unwrap().to_string()).collect();
    assert_eq!(ours, oracle_targets);
    assert!(ours.contains("gfx906:xnack-") && ours.contains("gfx90a:xnack+"), "{ours:?}");
    // Feature-qualified targets: plain gfx906 is undecided, gfx906 with xnack off runs.
    let r = scan_json(&["--arch", "gfx906"], &[lib]);
    assert_eq!(r["arch_answer"]["libraries"][0]["verdict"], "depends-on-mode");
    assert!(r["claims"].as_array().unwrap().iter().any(|c| c["confidence"] == "Unresolved"));
    let r = scan_json(&["--arch", "gfx906:xnack-"], &[lib]);
    assert_eq!(r["arch_answer"]["libraries"][0]["verdict"], "gpu-code");
}

#[test]
fn cuda_ggml_library_sm_list_and_ptx_jit_verdicts() {
    let lib = fixture("cyllama_cuda12/cyllama_cuda12.libs/libggml-cuda-3851d25f.so");
    let report = scan_json(&[], &[&lib]);
    let cuda = &report["files"][0]["cuda"];
    // Counts verified by the independent Python fatbin walker in crates/binfmt/tests/cuda_real.rs.
    assert_eq!(u(&cuda["containers"]), 137);
    let entries = cuda["entries"].as_array().unwrap();
    assert_eq!(entries.len(), 274);
    let targets: BTreeSet<&str> = entries.iter().map(|e| e["target"].as_str().unwrap()).collect();
    assert_eq!(targets, BTreeSet::from(["compute_75", "sm_75"]));
    let kernels: u64 = entries.iter().filter(|e| e["kind"] == "cubin").map(|e| u(&e["kernel_count"])).sum();
    assert_eq!(kernels, 6537);
    for (arch, verdict, confidence) in
        [("sm_75", "ggml-kernels", "Confirmed"), ("8.6", "jit-from-ptx", "Inferred"), ("sm_70", "nothing", "Confirmed")]
    {
        let r = scan_json(&["--arch", arch], &[&lib]);
        let lib_answer = &r["arch_answer"]["libraries"][0];
        assert_eq!(lib_answer["verdict"], verdict, "{arch}");
        let claim = r["claims"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["id"].as_str().unwrap().starts_with("scan.arch.") && c["id"].as_str().unwrap().ends_with(".so"))
            .unwrap();
        assert_eq!(claim["confidence"], confidence, "{arch}");
    }
}

#[test]
fn install_tree_backends_and_dependencies_agree_with_ldd() {
    let dir = fixture("cyllama_rocm/cyllama_rocm.libs");
    let report = scan_json(&[], &[&dir]);
    let backends: BTreeMap<String, String> = report["files"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| !f["backend"].is_null())
        .map(|f| (f["backend"]["name"].as_str().unwrap().to_string(), f["backend"]["by"].as_str().unwrap().to_string()))
        .collect();
    assert_eq!(backends.get("hip").map(String::as_str), Some("name+content"));
    assert_eq!(backends.get("cpu").map(String::as_str), Some("name+content"));

    // ldd (glibc's loader in trace mode) is the independent resolver for direct dependencies.
    let hip = dir.join("libggml-hip-f822f971.so");
    let ldd = stdout_ok(Command::new("ldd").arg(&hip));
    let mut not_found = BTreeSet::new();
    let mut found = BTreeMap::new();
    for line in ldd.lines() {
        let Some((name, rest)) = line.trim().split_once(" => ") else { continue };
        if rest.starts_with("not found") {
            not_found.insert(name.to_string());
        } else if let Some(path) = rest.split(" (").next() {
            found.insert(name.to_string(), std::fs::canonicalize(path).unwrap());
        }
    }
    let file = file_record(&report, "libggml-hip-f822f971.so");
    let deps = file["dependencies"].as_array().unwrap();
    let ours_missing: BTreeSet<String> = deps
        .iter()
        .filter(|d| d["depth"] == 1 && d["resolved"].is_null())
        .map(|d| d["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(ours_missing, not_found);
    assert!(not_found.contains("libamdhip64.so.6"));
    for d in deps.iter().filter(|d| d["depth"] == 1 && !d["resolved"].is_null()) {
        let name = d["name"].as_str().unwrap();
        if let Some(theirs) = found.get(name) {
            assert_eq!(&std::fs::canonicalize(d["resolved"].as_str().unwrap()).unwrap(), theirs, "{name}");
        }
    }
    let claim = report["claims"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == "scan.deps.libggml-hip-f822f971.so")
        .expect("missing-deps claim");
    assert!(claim["statement"].as_str().unwrap().contains("libamdhip64.so.6"));
}

#[test]
fn rocblas_library_tree_from_debian_trixie() {
    let root = fixture("librocblas0");
    let lib_dir = root.join("usr/lib/x86_64-linux-gnu/rocblas/2.47.0/library");
    let report = scan_json(&["--arch", "gfx900"], &[&root]);
    let vendor = report["vendor_blas"].as_array().unwrap();
    assert_eq!(vendor.len(), 1);
    assert_eq!(vendor[0]["path"].as_str().unwrap(), lib_dir.display().to_string());
    // Independent count: file names per arch, by the shell's own globbing.
    for arch in ["gfx900", "gfx906", "gfx90a", "gfx1030"] {
        let n = stdout_ok(
            Command::new("bash")
                .arg("-c")
                .arg(format!("ls -1 '{}' | grep -cE '{arch}([^0-9a-z]|$)'", lib_dir.display())),
        );
        assert_eq!(vendor[0]["files_per_arch"][arch].as_u64(), Some(n.trim().parse().unwrap()), "{arch}");
    }
    // Kernels per code object file against llvm-readelf's kernel-descriptor (.kd) symbols.
    for name in ["TensileLibrary_gfx900.co", "TensileLibrary_gfx906.co", "Kernels.so-000-gfx900.hsaco"] {
        let path = lib_dir.join(name);
        let kd = stdout_ok(
            Command::new("bash")
                .arg("-c")
                .arg(format!("llvm-readelf-15 --dyn-syms '{}' | grep -c '\\.kd$'", path.display())),
        );
        let file = file_record(&report, &format!("/{name}"));
        let cos = code_objects(file);
        assert_eq!(cos.len(), 1);
        assert_eq!(u(&cos[0]["kernel_count"]), kd.trim().parse::<u64>().unwrap(), "{name}");
        assert!(
            u(&cos[0]["families"]["vendor-BLAS"]) + 1 >= u(&cos[0]["kernel_count"]),
            "{name}: Tensile/rocBLAS kernels"
        );
    }
    let summary = report["claims"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == "scan.arch.gfx900.summary")
        .expect("summary claim");
    assert!(summary["statement"].as_str().unwrap().contains("BLAS is the only GPU matrix path"), "{summary}");
    assert_eq!(report["arch_answer"]["vendor_blas"][0]["files_for_arch"], 2);
}

/// The fast demangling path must print exactly what cpp_demangle prints, on every kernel name of the real
/// ggml HIP and CUDA libraries, and leave every name it does not handle to cpp_demangle.
#[test]
fn fast_demangler_agrees_with_cpp_demangle_on_every_real_kernel_name() {
    use cpp_demangle::{DemangleOptions, Symbol};
    let mut names = BTreeSet::new();
    for lib in [cyllama_hip(), fixture("cyllama_cuda12/cyllama_cuda12.libs/libggml-cuda-3851d25f.so")] {
        let report = scan_json(&["--kernels"], &[&lib]);
        let f = &report["files"][0];
        let amd = f["amdgpu"]["code_objects"].as_array().into_iter().flatten();
        let cuda = f["cuda"]["entries"].as_array().into_iter().flatten();
        for k in amd.chain(cuda).flat_map(|c| c["kernels"].as_array().unwrap()) {
            names.insert(k["name"].as_str().unwrap().to_string());
        }
    }
    let (mut fast, mut fallback) = (0, 0);
    for name in &names {
        let full = Symbol::new(name.as_bytes())
            .ok()
            .and_then(|s| s.demangle_with_options(&DemangleOptions::default().no_params().no_return_type()).ok());
        match backscope::gpu::kernels::demangle_simple_template(name) {
            Some(ours) => {
                assert_eq!(Some(&ours), full.as_ref(), "{name}");
                fast += 1;
            }
            None => fallback += 1,
        }
    }
    assert!(names.len() > 10_000, "{}", names.len());
    assert!(fast > names.len() / 3, "the fast path should cover the common ggml names: {fast} of {}", names.len());
    eprintln!("{fast} names by the fast path, {fallback} by cpp_demangle");
}
