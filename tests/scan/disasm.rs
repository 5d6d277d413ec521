//! `scan --disasm` on real code: kernels written here and built by Debian's hipcc, the cyllama-rocm library's
//! MMQ kernels, and the cyllama-cuda12 library's sm_75 cubins. Every expected count comes from the vendor's own
//! disassembler run by the test (llvm-objdump-19 on code objects the Python oracle extracted, counted with awk;
//! cuobjdump -sass on the library itself), never from backscope.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use crate::support::util::*;

/// Per symbol: total instructions and the instructions whose mnemonic matches each awk pattern, counted by awk
/// over `llvm-objdump-19 -d --mcpu=CPU` (addresses and encodings shown: not the options backscope uses).
fn objdump_counts(co: &Path, cpu: &str, patterns: &[&str]) -> BTreeMap<String, Vec<u64>> {
    let listing = stdout_ok(Command::new("llvm-objdump-19").arg("-d").arg(format!("--mcpu={cpu}")).arg(co));
    let mut program = String::from(
        "/^[0-9a-f]+ <[^>]+>:$/ { sym = $2; gsub(/[<>:]/, \"\", sym); next }\n\
         /^\\t[a-z]/ { split($0, f, /[ \\t]+/); m = f[2]; total[sym]++;\n",
    );
    for (i, p) in patterns.iter().enumerate() {
        program.push_str(&format!("  if (m ~ /{p}/) c{i}[sym]++;\n"));
    }
    program.push_str("}\nEND { for (s in total) { printf \"%s %d\", s, total[s];");
    for i in 0..patterns.len() {
        program.push_str(&format!(" printf \" %d\", c{i}[s] + 0;"));
    }
    program.push_str(" printf \"\\n\" } }\n");
    let tmp = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(tmp.path(), listing).unwrap();
    let out = stdout_ok(Command::new("awk").arg(&program).arg(tmp.path()));
    out.lines()
        .filter_map(|l| {
            let mut w = l.split(' ');
            let name = w.next()?.to_string();
            Some((name, w.map(|n| n.parse().unwrap()).collect()))
        })
        .filter(|(name, _): &(String, Vec<u64>)| !name.starts_with('.'))
        .collect()
}

/// The oracle's code objects of `lib`, extracted into `dir`: (file offset, processor, path of the .co file).
fn oracle_code_objects(lib: &Path, dir: &Path) -> Vec<(u64, String, PathBuf)> {
    let o = oracle(lib, Some(dir));
    let mut out = Vec::new();
    for (i, b) in o["bundles"].as_array().unwrap().iter().enumerate() {
        for (j, e) in b["entries"].as_array().unwrap().iter().enumerate() {
            let id = e["id"].as_str().unwrap();
            let Some(target) = id.strip_prefix("hipv4-amdgcn-amd-amdhsa--") else { continue };
            let processor = target.split(':').next().unwrap().to_string();
            // The oracle's bundle offsets are file offsets; entry offsets are from the bundle's start.
            let at = b["offset"].as_u64().unwrap() + e["offset"].as_u64().unwrap();
            out.push((at, processor, dir.join(format!("{i}-{j}.co"))));
        }
    }
    out
}

fn disasm_json(args: &[&str], lib: &Path) -> Value {
    let mut all = vec!["--disasm", "--no-disasm-cache"];
    all.extend_from_slice(args);
    let v = scan_json(&all, &[lib]);
    assert!(v["disasm"].is_object(), "no disasm section: {}", v["problems"]);
    v
}

/// Every kernel backscope reports for a code object at `offset` equals the awk counts of the same code object.
fn check_against_objdump(
    report: &Value,
    objects: &[(u64, String, PathBuf)],
    pattern_of: &[(&str, &str)],
) -> BTreeMap<String, u64> {
    let mut totals: BTreeMap<String, u64> = BTreeMap::new();
    let cos = report["disasm"]["code_objects"].as_array().unwrap();
    assert!(!cos.is_empty(), "nothing disassembled: {}", report["problems"]);
    for co in cos {
        assert!(co["in_file"].as_bool().unwrap());
        let offset = co["offset"].as_u64().unwrap();
        let (_, processor, file) = objects
            .iter()
            .find(|(at, ..)| *at == offset)
            .unwrap_or_else(|| panic!("the oracle has no code object at {offset:#x}"));
        assert!(co["target"].as_str().unwrap().starts_with(processor.as_str()));
        let patterns: Vec<&str> = pattern_of.iter().map(|(_, p)| *p).collect();
        let expected = objdump_counts(file, processor, &patterns);
        for k in co["kernels"].as_array().unwrap() {
            let name = k["name"].as_str().unwrap();
            let want = expected
                .get(name)
                .unwrap_or_else(|| panic!("{name} not in llvm-objdump's listing of {}", file.display()));
            assert_eq!(k["instructions"].as_u64(), Some(want[0]), "{processor} {name}: instructions");
            for (i, (key, _)) in pattern_of.iter().enumerate() {
                let (section, field) = key.split_once('.').unwrap();
                assert_eq!(k[section][field].as_u64().unwrap_or(0), want[i + 1], "{processor} {name}: {key}");
                *totals.entry(format!("{processor} {key}")).or_default() += want[i + 1];
            }
        }
    }
    totals
}

const KERNELS_HIP: &str = r#"
#include <hip/hip_runtime.h>
// A dot product of four int8 pairs: the native v_dot4_i32_i8 where the target has it (gfx906), bytes otherwise.
__global__ void dot4_kernel(const int *a, const int *b, int *c, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
#if defined(__gfx906__)
    c[i] = __builtin_amdgcn_sdot4(a[i], b[i], c[i], false);
#else
    const signed char *x = (const signed char *)&a[i];
    const signed char *y = (const signed char *)&b[i];
    c[i] += x[0] * y[0] + x[1] * y[1] + x[2] * y[2] + x[3] * y[3];
#endif
}
// A plain FMA loop.
__global__ void fma_loop(float *x, const float *y, int n, float a) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float acc = x[i];
    for (int k = 0; k < 64; k++) acc = fmaf(acc, y[k], a);
    x[i] = acc;
}
"#;

#[test]
fn hipcc_kernels_mix_equals_llvm_objdump() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("k.hip");
    std::fs::write(&src, KERNELS_HIP).unwrap();
    let lib = tmp.path().join("libk.so");
    stdout_ok(
        hipcc()
            .args([
                "-O3",
                "-fPIC",
                "-shared",
                "--offload-arch=gfx900",
                "--offload-arch=gfx906",
                "--offload-arch=gfx1030",
            ])
            .arg(&src)
            .arg("-o")
            .arg(&lib),
    );
    let report = disasm_json(&[], &lib);
    let objects = oracle_code_objects(&lib, tmp.path());
    let totals = check_against_objdump(
        &report,
        &objects,
        &[("paths.dot", "^v_dot"), ("classes.fma", "^(v_fma|v_fmac|v_mad|v_mac|v_pk_fma)")],
    );
    assert_eq!(report["disasm"]["code_objects"].as_array().unwrap().len(), 3);
    assert!(totals["gfx906 paths.dot"] > 0, "gfx906 has the native dot4: {totals:?}");
    assert_eq!(totals["gfx900 paths.dot"], 0, "gfx900 has no dot instructions: {totals:?}");
    for cpu in ["gfx900", "gfx906", "gfx1030"] {
        assert!(totals[&format!("{cpu} classes.fma")] > 0, "the FMA loop has FMAs on {cpu}: {totals:?}");
    }
    // A dot claim for gfx906 only; the others say nothing about dot (the family is `other`, not claimed when absent).
    let claims = report["claims"].as_array().unwrap();
    let dot: Vec<&str> = claims
        .iter()
        .filter(|c| c["id"].as_str().unwrap().starts_with("scan.disasm."))
        .map(|c| c["statement"].as_str().unwrap())
        .collect();
    assert!(dot.iter().any(|s| s.contains("gfx906") && s.contains("contain dot")), "{dot:?}");
    assert!(!dot.iter().any(|s| s.contains("gfx900:") || s.contains("gfx900,")), "{dot:?}");

    // The text sums per family (no --kernels, no --kernel): a table per code object's target, whose rows are the
    // sums of the kernels above (themselves equal to llvm-objdump's counts); within 120 columns, then the stats line.
    let args = ["scan", "--disasm", "--no-disasm-cache"];
    let text = stdout_ok(backscope().env("COLUMNS", "120").args(args).arg(&lib));
    crate::support::output::assert_fits(&text, 120);
    assert!(
        text.contains("\nInstruction mix per family (disassembly; --kernels or --kernel PATTERN for each kernel)\n")
    );
    assert!(
        text.contains("\ndisassembled 3 code objects (0 from the cache, 0 failed, 0 without a matching kernel) with ")
    );
    let markdown = stdout_ok(backscope().args(args).args(["--format", "markdown"]).arg(&lib));
    let tables = crate::support::output::html_tables(&crate::support::output::commonmark(&markdown));
    let per_family: Vec<_> = tables
        .iter()
        .filter(|(h, _)| h.starts_with(&["family".to_string(), "kernels".into(), "instrs".into()]))
        .collect();
    let mut targets: Vec<&str> =
        report["disasm"]["code_objects"].as_array().unwrap().iter().map(|c| c["target"].as_str().unwrap()).collect();
    targets.sort();
    assert_eq!(per_family.len(), targets.len(), "one table per target");
    for ((_, rows), target) in per_family.iter().zip(&targets) {
        let co = report["disasm"]["code_objects"].as_array().unwrap().iter().find(|c| c["target"] == *target).unwrap();
        let mut sums: BTreeMap<String, (u64, u64, u64)> = BTreeMap::new();
        for k in co["kernels"].as_array().unwrap() {
            let e = sums.entry(k["family"].as_str().unwrap().to_string()).or_default();
            e.0 += 1;
            e.1 += k["instructions"].as_u64().unwrap();
            e.2 += k["classes"]["fma"].as_u64().unwrap_or(0);
        }
        let got: BTreeMap<String, (u64, u64, u64)> = rows
            .iter()
            .map(|r| (r[0].clone(), (r[1].parse().unwrap(), r[2].parse().unwrap(), r[4].parse().unwrap())))
            .collect();
        assert_eq!(got, sums, "{target}");
    }

    // A second run is served from the cache with the same counts.
    let cache = tmp.path().join("cache");
    let first = scan_json(&["--disasm", "--disasm-cache", cache.to_str().unwrap()], &[&lib]);
    let second = scan_json(&["--disasm", "--disasm-cache", cache.to_str().unwrap()], &[&lib]);
    assert_eq!(first["disasm"]["stats"]["from_cache"], 0);
    assert_eq!(second["disasm"]["stats"]["from_cache"], 3);
    assert_eq!(first["disasm"]["code_objects"][0]["kernels"], second["disasm"]["code_objects"][0]["kernels"]);
}

#[test]
fn cyllama_rocm_mmq_uses_mfma_on_cdna_and_wmma_on_rdna3() {
    let lib = cyllama_hip();
    // One Q4_K MMQ tile size (mmq_x 64), in every target: two code objects' worth per target.
    let report = disasm_json(&["--kernel", "mul_mat_q<(ggml_type)12, 64, "], &lib);
    let tmp = tempfile::tempdir().unwrap();
    let objects = oracle_code_objects(&lib, tmp.path());
    let totals = check_against_objdump(&report, &objects, &[("paths.MFMA", "^v_mfma"), ("paths.WMMA", "^v_wmma")]);
    assert!(totals["gfx90a paths.MFMA"] > 0 && totals["gfx942 paths.MFMA"] > 0, "{totals:?}");
    assert!(totals["gfx1100 paths.WMMA"] > 0, "{totals:?}");
    assert_eq!(
        totals["gfx1100 paths.MFMA"] + totals["gfx90a paths.WMMA"] + totals["gfx942 paths.WMMA"],
        0,
        "{totals:?}"
    );
    // Only the wanted kernels are reported.
    for co in report["disasm"]["code_objects"].as_array().unwrap() {
        for k in co["kernels"].as_array().unwrap() {
            assert!(k["demangled"].as_str().unwrap().starts_with("mul_mat_q<(ggml_type)12, 64, "), "{k}");
        }
    }
    // --arch selects the targets that run there.
    let gfx942 = disasm_json(&["--arch", "gfx942", "--kernel", "mul_mat_q<(ggml_type)12, 64, "], &lib);
    let targets: std::collections::BTreeSet<&str> =
        gfx942["disasm"]["code_objects"].as_array().unwrap().iter().map(|c| c["target"].as_str().unwrap()).collect();
    assert_eq!(targets.into_iter().collect::<Vec<_>>(), ["gfx942"]);
    let claim = gfx942["claims"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"].as_str().unwrap().starts_with("scan.disasm.gfx942.MMQ"));
    let statement = claim.expect("an MMQ claim for gfx942")["statement"].as_str().unwrap().to_string();
    assert!(statement.contains("contain MFMA") && statement.contains("v_mfma_"), "{statement}");
}

fn cuobjdump() -> PathBuf {
    let p = cache().join("tools/nvidia-cuda-13.5.37/nvidia/cu13/bin/cuobjdump");
    assert!(p.exists(), "missing {}: run scripts/fixtures.sh", p.display());
    p
}

#[test]
fn cyllama_cuda_sm75_mmq_counts_equal_cuobjdump_sass() {
    let lib = fixture("cyllama_cuda12/cyllama_cuda12.libs/libggml-cuda-3851d25f.so");
    // backscope finds nvdisasm in the tool cache by itself; the oracle is the other tool, cuobjdump, on the library.
    let report = disasm_json(&["--arch", "sm_75", "--kernel", "mul_mat_q<(ggml_type)12, 64, "], &lib);
    let tools = report["disasm"]["tools"].as_array().unwrap();
    assert_eq!(tools[0]["kind"], "nvdisasm", "{tools:?}");
    let mut kernels = 0;
    let mut tensor = 0;
    for co in report["disasm"]["code_objects"].as_array().unwrap() {
        assert_eq!(co["target"], "sm_75");
        for k in co["kernels"].as_array().unwrap() {
            let name = k["name"].as_str().unwrap();
            let sass = stdout_ok(Command::new(cuobjdump()).args(["-sass", "-arch", "sm_75", "-fun", name]).arg(&lib));
            // Instruction lines: `/*ADDR*/  [@P] OPCODE …;` (encoding-only lines start with `/* 0x`).
            let mut total = 0u64;
            let mut by_op: BTreeMap<String, u64> = BTreeMap::new();
            for l in sass.lines() {
                let t = l.trim_start();
                let Some(rest) = t.strip_prefix("/*").and_then(|r| r.split_once("*/")) else { continue };
                if !rest.0.chars().all(|c| c.is_ascii_hexdigit()) || rest.0.is_empty() {
                    continue;
                }
                let mut w = rest.1.split_whitespace();
                let mut op = w.next().unwrap_or("");
                if op.starts_with('@') {
                    op = w.next().unwrap_or("");
                }
                total += 1;
                *by_op.entry(op.split('.').next().unwrap().trim_end_matches(';').to_string()).or_default() += 1;
            }
            assert_eq!(k["instructions"].as_u64(), Some(total), "{name}");
            for (path, op) in [("HMMA", "HMMA"), ("IMMA", "IMMA"), ("LDGSTS", "LDGSTS")] {
                assert_eq!(k["paths"][path].as_u64(), Some(by_op.get(op).copied().unwrap_or(0)), "{name} {path}");
            }
            assert_eq!(
                k["classes"]["lds"].as_u64().unwrap_or(0),
                ["LDS", "STS", "LDSM", "STSM", "ATOMS"]
                    .iter()
                    .map(|o| by_op.get(*o).copied().unwrap_or(0))
                    .sum::<u64>(),
                "{name} lds"
            );
            tensor += k["paths"]["HMMA"].as_u64().unwrap() + k["paths"]["IMMA"].as_u64().unwrap();
            kernels += 1;
        }
    }
    assert!(kernels >= 2, "both mul_mat_q<Q4_K, 64, …> variants");
    assert!(tensor > 0, "MMQ on sm_75 uses the tensor cores (HMMA/IMMA)");
}

#[test]
fn without_a_disassembler_the_scan_goes_on_with_a_limited_claim() {
    // An empty PATH and a cache without tools: llvm-objdump is still found in /usr/lib/llvm-N, so point the
    // NVIDIA side at nothing and check the CUDA library instead.
    let lib = fixture("cyllama_cuda12/cyllama_cuda12.libs/libggml-cuda-3851d25f.so");
    let empty = tempfile::tempdir().unwrap();
    let out = run(backscope()
        .args(["scan", "--json", "--disasm", "--no-disasm-cache", "--arch", "sm_75", "--kernel", "no-such-kernel-xyz"])
        .arg(&lib)
        .env("PATH", empty.path())
        .env("BACKSCOPE_CACHE", empty.path()));
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    // No kernel matches: every sm_75 cubin with kernels was looked at, none needed a tool, no claim about one.
    let cubins = v["files"][0]["cuda"]["entries"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "cubin" && e["kernel_count"].as_u64().unwrap() > 0)
        .count();
    assert_eq!(v["disasm"]["stats"]["no_matching_kernel"], cubins as u64);
    assert!(!v["claims"].to_string().contains("no-tool"));
    let out = run(backscope()
        .args([
            "scan",
            "--json",
            "--disasm",
            "--no-disasm-cache",
            "--arch",
            "sm_75",
            "--kernel",
            "mul_mat_q<(ggml_type)12, 64, ",
        ])
        .arg(&lib)
        .env("PATH", empty.path())
        .env("BACKSCOPE_CACHE", empty.path()));
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let limited: Vec<&Value> =
        v["claims"].as_array().unwrap().iter().filter(|c| c["id"] == "scan.disasm.no-tool.nvidia").collect();
    assert_eq!(limited.len(), 1, "said once: {}", v["claims"]);
    assert_eq!(limited[0]["confidence"], "Limited");
    assert!(v["disasm"]["stats"]["no_tool"].as_u64().unwrap() >= 1);
    // The rest of the scan is all there.
    assert_eq!(v["files"][0]["cuda"]["entries"].as_array().unwrap().len(), 274);
    // Naming a disassembler that is not one is a usage error.
    let out = run(backscope().args(["scan", "--disasm", "--nvdisasm", "/bin/true"]).arg(&lib));
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/bin/true"));
}
