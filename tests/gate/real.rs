//! `backscope gate` on real inputs: the cyllama-rocm PyPI build of libggml-hip (code for gfx1100/gfx90a/gfx942
//! only), Debian trixie's rocBLAS tree (Tensile files per arch), a hipcc-built program for gfx900/gfx906/gfx1030,
//! Ollama and rocBLAS log lines quoted in public issues (crates/logs/tests/data, tests/data/gate) and real
//! llama-bench results from an H100 stored by `sweep import`. Expected offsets come from llvm-readelf and the
//! independent bundle walker (tests/oracles/offload.py); expected file names from listing the directories.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use crate::support::hip::{legacy_targets_program, SCALE_KERNEL};
use crate::support::util::*;

fn gate_json(args: &[&str]) -> Value {
    let mut cmd = backscope();
    cmd.arg("gate").arg("--json").args(args);
    serde_json::from_str(&stdout_ok(&mut cmd)).expect("gate --json prints JSON")
}

fn layer(r: &Value, n: u64) -> &Value {
    r["layers"].as_array().unwrap().iter().find(|l| l["number"] == n).unwrap_or_else(|| panic!("no layer {n}: {r:#}"))
}

fn status(r: &Value, n: u64) -> &str {
    layer(r, n)["status"].as_str().unwrap()
}

fn sources(r: &Value, n: u64) -> Vec<Value> {
    layer(r, n)["sources"].as_array().unwrap().clone()
}

fn gate_fixture(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/gate").join(name).display().to_string()
}

fn rocblas_library() -> PathBuf {
    fixture("librocblas0/usr/lib/x86_64-linux-gnu/rocblas/2.47.0/library")
}

/// Offset and size of `.hip_fatbin` as llvm-readelf prints them (`-S --wide`: Name Type Address Off Size …).
fn hip_fatbin_section(file: &Path) -> (u64, u64) {
    let text = stdout_ok(Command::new("llvm-readelf-15").args(["-S", "--wide"]).arg(file));
    let line = text.lines().find(|l| l.contains(".hip_fatbin")).expect("a .hip_fatbin section");
    let f: Vec<&str> = line.split_whitespace().collect();
    let at = f.iter().position(|w| *w == ".hip_fatbin").unwrap();
    let hex = |s: &str| u64::from_str_radix(s, 16).unwrap();
    (hex(f[at + 3]), hex(f[at + 4]))
}

#[test]
fn without_inputs_only_the_knowledge_rows_answer() {
    // AMD's compatibility matrix lists gfx900 for no release from 6.0.0 to 7.2.4 (data/rocm_support.toml cites
    // the rows); Ollama's release presets dropped gfx900 in v0.12.4 (commit c68f367ef) and list it up to v0.12.3.
    let r = gate_json(&["--arch", "gfx900"]);
    assert_eq!(r["schema"], "backscope.gate/1");
    assert_eq!((status(&r, 1), status(&r, 2)), ("Blocks", "Blocks"));
    for n in 3..=6 {
        assert_eq!(status(&r, n), "Unknown", "{n}");
        assert!(layer(&r, n)["basis"].as_array().unwrap().is_empty(), "row {n} is marked as having no input");
        assert_eq!(layer(&r, n)["confidence"], "Unresolved");
    }
    assert_eq!(sources(&r, 1)[0]["file"], "data/rocm_support.toml");
    assert_eq!(sources(&r, 2)[0]["file"], "data/ollama_amdgpu.toml");
    assert_eq!(layer(&r, 1)["basis"][0], "knowledge");
    let verdict = r["verdict"].as_str().unwrap();
    assert!(verdict.contains("(1) not officially supported") && verdict.contains("layer 2"), "{verdict}");

    let old = gate_json(&["--arch", "gfx900", "--ollama", "v0.12.3"]);
    assert_eq!(status(&old, 2), "Allows", "v0.12.3's preset 'ROCm 6' lists gfx900");
    assert!(old["verdict"]
        .as_str()
        .unwrap()
        .contains("not officially supported, which alone does not make it non-executable"));
    let new = gate_json(&["--arch", "gfx900", "--ollama", "0.12.4"]);
    assert_eq!(status(&new, 2), "Blocks");
    assert!(layer(&new, 2)["finding"].as_str().unwrap().contains("drops gfx900"), "{:#}", layer(&new, 2));
    let none = gate_json(&["--arch", "gfx900", "--ollama", "none"]);
    assert_eq!(status(&none, 2), "Unknown");
    // gfx1201 is on ROCm 7.2.4's list and in every preset since v0.6.4.
    let rdna4 = gate_json(&["--arch", "gfx1201"]);
    assert_eq!((status(&rdna4, 1), status(&rdna4, 2)), ("Allows", "Allows"));
    // A usage error names the problem.
    let out = run(backscope().args(["gate", "--arch", "banana"]));
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a GPU arch"));
}

#[test]
fn cyllama_libggml_hip_has_no_gfx900_and_explains_a_discovery_crash() {
    let cyllama = fixture("cyllama_rocm");
    let rocblas = fixture("librocblas0");
    let log = log_fixture("ollama-15762-discovery-failure.log").display().to_string();
    let args = [
        "--arch",
        "gfx900",
        "--install",
        cyllama.to_str().unwrap(),
        "--install",
        rocblas.to_str().unwrap(),
        "--ollama",
        "v0.12.5",
        "--log",
        &log,
    ];
    let r = gate_json(&args);
    // Layer 4: the bundles of libggml-hip carry no gfx900 code object; the source is its .hip_fatbin section.
    assert_eq!(status(&r, 4), "Blocks");
    assert_eq!(layer(&r, 4)["confidence"], "Confirmed");
    let hip = cyllama_hip();
    let (offset, size) = hip_fatbin_section(&hip);
    let s4 = sources(&r, 4);
    let src = s4.iter().find(|s| s["path"] == hip.to_str().unwrap()).unwrap_or_else(|| panic!("{s4:#?}"));
    assert_eq!((src["offset"].as_u64(), src["length"].as_u64()), (Some(offset), Some(size)));
    let finding = layer(&r, 4)["finding"].as_str().unwrap();
    assert!(finding.contains("gfx1100, gfx90a, gfx942"), "{finding}");
    // Layer 3: Debian's rocBLAS ships gfx900 Tensile files; the sources are those files.
    assert_eq!(status(&r, 3), "Allows");
    let mut want: Vec<String> = std::fs::read_dir(rocblas_library())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.contains("gfx900"))
        .collect();
    want.sort();
    let got: Vec<String> = sources(&r, 3)
        .iter()
        .map(|s| Path::new(s["path"].as_str().unwrap()).file_name().unwrap().to_str().unwrap().to_string())
        .collect();
    assert_eq!(got, want.into_iter().take(3).collect::<Vec<_>>());
    // Layer 5: the discovery failure, at line 1 of the log.
    assert_eq!(status(&r, 5), "Blocks");
    let s5 = &sources(&r, 5)[0];
    assert_eq!(
        (s5["kind"].as_str(), s5["path"].as_str(), s5["line"].as_u64()),
        (Some("log_line"), Some(log.as_str()), Some(1))
    );
    assert!(s5["text"].as_str().unwrap().contains("failure during GPU discovery"));
    // The crash is attributed to the layer with the binaries' evidence.
    let e = &r["explanations"][0];
    assert_eq!(e["explained_by"], "binaries", "{e:#}");
    assert_eq!(e["source"]["line"], 1);
    let verdict = r["verdict"].as_str().unwrap();
    assert!(verdict.contains("layer 4 (binaries) blocks it"), "{verdict}");
    assert!(verdict.contains("(3) vendor libraries ship data for it"), "{verdict}");
    // Text: the verdict first, within 120 columns, then the matrix, the sources and the failures the log shows.
    let text = stdout_ok(backscope().env("COLUMNS", "120").arg("gate").args(args));
    crate::support::output::assert_fits(&text, 120);
    let mut lines = text.lines();
    assert_eq!(lines.next(), Some("Gate for gfx900 (GCN5)"));
    assert!(lines.next().unwrap().starts_with("Verdict: gfx900: (1) not officially supported;"), "{text}");
    assert!(text.contains("\nFailures in the log and the layer that explains them\n"), "{text}");

    // Markdown (read by pulldown-cmark) and an HTML page in Chromium carry the layer-4 source with the offset and
    // size llvm-readelf gives, the explained failure with its log line, and load nothing.
    let at = format!("@ {offset:#x} (+{size:#x})");
    let markdown = crate::support::output::commonmark(&stdout_ok(
        backscope().arg("gate").args(args).args(["--format", "markdown"]),
    ));
    let tmp = tempfile::tempdir().unwrap();
    let page = tmp.path().join("gate.html");
    stdout_ok(backscope().arg("gate").args(args).args(["--format", "html", "-o"]).arg(&page));
    let shot = Path::new(env!("CARGO_TARGET_TMPDIR")).join("gate.png");
    let (dom, requests) = crate::support::output::load_in_chromium(&page, &shot);
    assert!(requests.is_empty(), "the page made requests: {requests:?}");
    crate::support::output::assert_no_external_reference(&std::fs::read_to_string(&page).unwrap());
    for doc in [&markdown, &dom] {
        let tables = crate::support::output::html_tables(doc);
        assert_eq!(tables.len(), 1, "the layer matrix");
        let statuses: Vec<&str> = tables[0].1.iter().map(|row| row[1].as_str()).collect();
        let want: Vec<&str> = (1..=7).map(|n| status(&r, n)).collect();
        assert_eq!(statuses, want);
        let text = crate::support::output::html_text(doc);
        assert!(text.contains(&format!("{} {at}: .hip_fatbin section", hip.display())), "{text}");
        let failures = text.find("Failures in the log and the layer that explains them").expect("the failures");
        assert!(text[failures..].contains(&format!("{log}:1: time=")), "{text}");
    }
    assert!(dom.contains("<span class=\"badge confirmed\">Confirmed</span>Layer 4 (binaries) Blocks"), "{dom}");
}

#[test]
fn a_rocblas_missing_arch_error_is_a_shipped_artifact_gap() {
    let log = gate_fixture("rocm-4625-rocblas-gfx906.log");
    let r = gate_json(&["--arch", "gfx906", "--log", &log]);
    assert_eq!(status(&r, 3), "Blocks");
    assert_eq!(layer(&r, 3)["confidence"], "Confirmed");
    let s = &sources(&r, 3)[0];
    assert_eq!((s["path"].as_str(), s["line"].as_u64()), (Some(log.as_str()), Some(1)));
    assert!(s["text"].as_str().unwrap().ends_with("for GPU arch : gfx906"));
    let e = &r["explanations"][0];
    assert_eq!((e["explained_by"].as_str(), e["confidence"].as_str()), (Some("shipped_artifacts"), Some("Confirmed")));
    assert!(r["verdict"].as_str().unwrap().contains("layer 3 (shipped artifacts) blocks it"));
    // With Debian's rocBLAS scanned too, which does ship gfx906 files, the log still decides, and says the scanned
    // install is not the one the log's runtime used.
    let rocblas = fixture("librocblas0");
    let r = gate_json(&["--arch", "gfx906", "--log", &log, "--install", rocblas.to_str().unwrap()]);
    assert_eq!(status(&r, 3), "Blocks");
    assert!(layer(&r, 3)["finding"].as_str().unwrap().contains("used another rocBLAS"), "{:#}", layer(&r, 3));
}

#[test]
fn a_hipblaslt_missing_arch_error_is_attributed_without_claiming_it_was_fatal() {
    // ollama#11555: hipBLASLt has no TensileLibrary_lazy_gfx1201.dat; the reporter says Ollama still answers.
    let log = log_fixture("ollama-11555-hipblaslt-tensile.log").display().to_string();
    let r = gate_json(&["--arch", "gfx1201", "--log", &log]);
    assert_eq!(status(&r, 3), "Unknown");
    assert!(layer(&r, 3)["finding"].as_str().unwrap().contains("hipBLASLt"));
    assert_eq!(sources(&r, 3)[0]["line"], 1);
    assert_eq!(r["explanations"][0]["explained_by"], "shipped_artifacts");
    assert_eq!(status(&r, 6), "Unknown", "an error message the runtime survived is not a failed execution");
}

#[test]
fn device_and_inference_compute_lines_are_recognition() {
    // ollama#13070 (journal): `Device 0: AMD Radeon RX 6700 XT, gfx1030 (0x1030), …` at line 3.
    let log = log_fixture("ollama-13070-rocm-discovery.log").display().to_string();
    let r = gate_json(&["--arch", "gfx1030", "--log", &log]);
    assert_eq!((status(&r, 5), layer(&r, 5)["confidence"].as_str()), ("Allows", Some("Confirmed")));
    assert_eq!(sources(&r, 5)[0]["line"], 3);
    let other = gate_json(&["--arch", "gfx900", "--log", &log]);
    assert_eq!(status(&other, 5), "Unknown");
    assert!(layer(&other, 5)["finding"].as_str().unwrap().contains("gfx1030, not gfx900"));
    // ollama PR#10569: `inference compute … library=cuda … compute=7.5` at line 2.
    let log = log_fixture("ollama-10569-inference-compute.log").display().to_string();
    let r = gate_json(&["--arch", "7.5", "--log", &log]);
    assert_eq!(r["arch"], "sm_75");
    assert_eq!(status(&r, 5), "Allows");
    assert_eq!(sources(&r, 5)[0]["line"], 2);
    assert_eq!(
        (status(&r, 1), status(&r, 2), status(&r, 3)),
        ("Unknown", "Unknown", "Unknown"),
        "no NVIDIA policy data"
    );
}

#[test]
fn hipcc_code_objects_allow_their_targets_only() {
    let tmp = tempfile::tempdir().unwrap();
    let exe = legacy_targets_program(tmp.path(), SCALE_KERNEL);
    let r = gate_json(&["--arch", "gfx906", "--install", exe.to_str().unwrap(), "--ollama", "none"]);
    assert_eq!((status(&r, 4), layer(&r, 4)["confidence"].as_str()), ("Allows", Some("Confirmed")));
    // The cited offset is where the oracle finds the gfx906 code object: bundle offset + entry offset.
    let oracle = oracle(&exe, None);
    let want: Vec<u64> = oracle["bundles"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|b| {
            let base = b["offset"].as_u64().unwrap();
            b["entries"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|e| e["id"].as_str().unwrap().ends_with("gfx906"))
                .map(move |e| base + e["offset"].as_u64().unwrap())
        })
        .collect();
    let got: Vec<u64> = sources(&r, 4).iter().filter_map(|s| s["offset"].as_u64()).collect();
    assert_eq!(got, want);
    assert!(
        r["verdict"].as_str().unwrap().contains("no layer blocks")
            || r["verdict"].as_str().unwrap().contains("not officially supported")
    );
    let rdna3 = gate_json(&["--arch", "gfx1100", "--install", exe.to_str().unwrap(), "--ollama", "none"]);
    assert_eq!(status(&rdna3, 4), "Blocks");
    assert!(layer(&rdna3, 4)["finding"].as_str().unwrap().contains("gfx1030, gfx900, gfx906"));
}

#[test]
fn matched_runs_are_execution_evidence() {
    // Real llama-bench results of an H100 (docs/validation/gpu-2026-11-21/overhead-run1.jsonl: one JSON object per
    // line), stored as records by `sweep import`.
    let jsonl = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/validation/gpu-2026-11-21/overhead-run1.jsonl");
    let lines = std::fs::read_to_string(&jsonl).unwrap().lines().filter(|l| !l.trim().is_empty()).count();
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("h.db");
    stdout_ok(
        backscope()
            .args(["sweep", "import", "--db"])
            .arg(&db)
            .arg("--runs-dir")
            .arg(tmp.path().join("runs"))
            .arg(&jsonl),
    );
    let r = gate_json(&["--arch", "sm_90", "--runs", db.to_str().unwrap()]);
    assert_eq!((status(&r, 6), layer(&r, 6)["confidence"].as_str()), ("Allows", Some("Confirmed")));
    let finding = layer(&r, 6)["finding"].as_str().unwrap();
    assert!(
        finding.contains(&format!("cuda [CUDA (NVIDIA H100 80GB HBM3)] at num_gpu 99: {lines} ok, 0 failed")),
        "{finding}"
    );
    let s = sources(&r, 6);
    // Imported records are lines of the run's records.jsonl.
    assert!(s.iter().all(|x| x["kind"] == "run" && x["file"] == "records.jsonl"), "{s:#?}");
    assert_eq!(r["run_groups"][0]["ok"].as_u64(), Some(lines as u64));
    assert!(r["verdict"].as_str().unwrap().ends_with("executable: runs succeeded"));
    // The same runs say nothing about an AMD GPU's ROCm path: no rocm cell.
    let amd = gate_json(&["--arch", "gfx906", "--runs", db.to_str().unwrap()]);
    assert_eq!(status(&amd, 6), "Unknown");
    assert!(layer(&amd, 6)["finding"].as_str().unwrap().contains("no rocm cell"));
}
