//! Unit tests of the gate's rules on hand-made rows; the real fixtures are in tests/gate/real.rs.

use super::artifacts::miopen_arch_matches;
use super::logs::FactKind;
use super::rows::*;
use super::verdict::*;
use super::*;
use crate::evidence::Confidence;
use crate::gpu::binaries::ScanOptions;

fn row(layer: Layer, status: Status, confidence: Confidence) -> LayerRow {
    LayerRow::new(layer, status, confidence, "x")
}

fn rows(statuses: [(Status, Confidence); 6]) -> Vec<LayerRow> {
    // The first six layers; layer 7 (Ollama's device filter) has tests of its own below.
    Layer::ALL.iter().zip(statuses).map(|(l, (s, c))| row(*l, s, c)).collect()
}

use Confidence::{Confirmed, Inferred, Unresolved};
use Status::{Allows, Blocks, Unknown};

#[test]
fn the_verdict_keeps_policy_apart_from_executability() {
    // Policy blocks, nothing else does: not officially supported is not "not executable".
    let v = verdict(
        "gfx906",
        &rows([
            (Blocks, Inferred),
            (Allows, Inferred),
            (Unknown, Unresolved),
            (Unknown, Unresolved),
            (Unknown, Unresolved),
            (Unknown, Unresolved),
        ]),
        false,
    );
    assert!(v.contains("(1) not officially supported") && v.contains("alone does not make it non-executable"), "{v}");
    // Runs that succeeded outrank every knowledge row.
    let v = verdict(
        "gfx900",
        &rows([
            (Blocks, Inferred),
            (Blocks, Inferred),
            (Unknown, Unresolved),
            (Unknown, Unresolved),
            (Unknown, Unresolved),
            (Allows, Confirmed),
        ]),
        false,
    );
    assert!(v.ends_with("executable (runs succeeded) although not officially supported"), "{v}");
    // What the binaries show outranks what a knowledge row says; both are named.
    let v = verdict(
        "gfx900",
        &rows([
            (Blocks, Inferred),
            (Blocks, Inferred),
            (Allows, Confirmed),
            (Blocks, Confirmed),
            (Unknown, Unresolved),
            (Unknown, Unresolved),
        ]),
        true,
    );
    assert!(v.contains("layer 4 (binaries) blocks it, and so does layer 2"), "{v}");
}

#[test]
fn a_scanned_ggml_backend_with_code_overrules_the_release_build_targets() {
    // A self-built Ollama with gfx900 code: layer 2 (the release preset) blocks, the binaries allow.
    let r = rows([
        (Blocks, Inferred),
        (Blocks, Inferred),
        (Unknown, Unresolved),
        (Allows, Confirmed),
        (Unknown, Unresolved),
        (Unknown, Unresolved),
    ]);
    let v = verdict("gfx900", &r, true);
    assert!(!v.contains("not executable"), "{v}");
    assert!(v.contains("another build"), "{v}");
    // Other GPU code (a vendor library) does not overrule it.
    let v = verdict("gfx900", &r, false);
    assert!(v.contains("layer 2 (runtime build-target filter) blocks it"), "{v}");
}

#[test]
fn a_discovery_failure_is_explained_by_the_first_blocking_layer_in_evidence_order() {
    let log = LogEvidence {
        path: "l.log".into(),
        lines: 1,
        flavor: "ollama",
        facts: vec![logs::LogFact {
            line: 1,
            text: "msg=\"failure during GPU discovery\" error=\"runner crashed\"".into(),
            kind: FactKind::DiscoveryFailure { error: Some("runner crashed".into()) },
        }],
        crashes: Vec::new(),
    };
    let arch = DeviceArch::parse("gfx906");
    let only_build = rows([
        (Blocks, Inferred),
        (Blocks, Inferred),
        (Unknown, Unresolved),
        (Unknown, Unresolved),
        (Blocks, Inferred),
        (Unknown, Unresolved),
    ]);
    let e = explain(&arch, std::slice::from_ref(&log), &only_build);
    assert_eq!((e[0].explained_by, e[0].confidence), (Some(Layer::BuildTargets), Inferred));
    let with_scan = rows([
        (Blocks, Inferred),
        (Blocks, Inferred),
        (Blocks, Confirmed),
        (Blocks, Confirmed),
        (Blocks, Inferred),
        (Unknown, Unresolved),
    ]);
    assert_eq!(explain(&arch, std::slice::from_ref(&log), &with_scan)[0].explained_by, Some(Layer::Binaries));
    let nothing = rows([
        (Allows, Inferred),
        (Allows, Inferred),
        (Unknown, Unresolved),
        (Unknown, Unresolved),
        (Blocks, Inferred),
        (Unknown, Unresolved),
    ]);
    let e = explain(&arch, std::slice::from_ref(&log), &nothing);
    assert_eq!((e[0].explained_by, e[0].confidence), (None, Unresolved));
}

#[test]
fn ollama_releases_and_miopen_names() {
    assert_eq!(
        OllamaRelease::from_option(Some("0.12.5")).unwrap(),
        OllamaRelease::Release { tag: "v0.12.5".into(), newest: false }
    );
    assert_eq!(OllamaRelease::from_option(Some("NONE")).unwrap(), OllamaRelease::NotOllama);
    assert!(OllamaRelease::from_option(Some("latest")).is_err());
    assert!(matches!(OllamaRelease::from_option(None).unwrap(), OllamaRelease::Release { newest: true, .. }));
    // MIOpen database names: `gfx906_60.HIP.fdb.txt` (scan reads `gfx906`), `gfx90a68.kdb` (`gfx90a68`).
    assert!(miopen_arch_matches("gfx906", "gfx906") && miopen_arch_matches("gfx90a68", "gfx90a"));
    assert!(!miopen_arch_matches("gfx90a68", "gfx906") && !miopen_arch_matches("gfx1030", "gfx103"));
}

/// Layer 7 from the log: Ollama's own line (format of O discover/amd.go:470) drops gfx1031; the row blocks, Confirmed,
/// and the explanation names layer 7.
#[test]
fn ollama_device_filter_confirmed_by_its_log_line() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("ollama.log");
    std::fs::write(
        &log,
        "time=2026-08-01T10:00:00.000Z level=WARN source=amd.go:470 msg=\"dropping ROCm device \u{2014} no rocblas support for gfx target\" device=\"AMD Radeon RX 6700 XT\" gfx_target=gfx1031 supported=\"map[gfx1030:true gfx1100:true]\" hint=\"set HSA_OVERRIDE_GFX_VERSION to map to a supported target\"\n",
    )
    .unwrap();
    let ev = LogEvidence::read(&log).unwrap();
    let ollama = OllamaRelease::from_option(None).unwrap();
    let inputs = Inputs {
        arch: "gfx1031",
        scan: None,
        logs: std::slice::from_ref(&ev),
        records: None,
        ollama: &ollama,
        rocm: None,
    };
    let r = evaluate(&inputs).unwrap();
    let row = r.layers.iter().find(|l| l.layer == Layer::DeviceFilter).unwrap();
    assert_eq!((row.number, row.status, row.confidence), (7, Blocks, Confirmed), "{}", row.finding);
    assert!(r.verdict.contains("layer 7 (Ollama device filter) blocks it"), "{}", r.verdict);
    assert!(r.explanations.iter().any(|e| e.explained_by == Some(Layer::DeviceFilter)), "{:?}", r.explanations);
    // Another GPU's line does not block this one.
    let inputs = Inputs { arch: "gfx1100", ..inputs };
    let r = evaluate(&inputs).unwrap();
    let row = r.layers.iter().find(|l| l.layer == Layer::DeviceFilter).unwrap();
    assert_ne!(row.status, Blocks, "{}", row.finding);
}

/// Layer 7 predicted from an install tree: Ollama keeps a ROCm card only if `rocblas/library` holds
/// `TensileLibrary_lazy_<gfx>.dat` (O discover/amd.go:115-125).
#[test]
fn ollama_device_filter_predicted_from_the_install_tree() {
    let dir = tempfile::tempdir().unwrap();
    let lib = dir.path().join("lib/ollama/rocm/rocblas/library");
    std::fs::create_dir_all(&lib).unwrap();
    std::fs::write(lib.join("TensileLibrary_lazy_gfx1030.dat"), b"x").unwrap();
    let scan = crate::gpu::binaries::scan(&ScanOptions { paths: vec![dir.path().to_path_buf()], ..Default::default() });
    let ollama = OllamaRelease::from_option(None).unwrap();
    let judge = |arch: &str| {
        let inputs = Inputs { arch, scan: Some(&scan), logs: &[], records: None, ollama: &ollama, rocm: None };
        let r = evaluate(&inputs).unwrap();
        r.layers.into_iter().find(|l| l.layer == Layer::DeviceFilter).unwrap()
    };
    let kept = judge("gfx1030");
    assert_eq!((kept.status, kept.confidence), (Allows, Inferred), "{}", kept.finding);
    let dropped = judge("gfx1031");
    assert_eq!((dropped.status, dropped.confidence), (Blocks, Inferred), "{}", dropped.finding);
    assert!(dropped.finding.contains("TensileLibrary_lazy_gfx1031.dat"), "{}", dropped.finding);
    // A release before the checks (v0.30.0): the layer does not judge.
    let old = OllamaRelease::from_option(Some("v0.12.5")).unwrap();
    let inputs = Inputs { arch: "gfx1031", scan: Some(&scan), logs: &[], records: None, ollama: &old, rocm: None };
    let row = evaluate(&inputs).unwrap().layers.into_iter().find(|l| l.layer == Layer::DeviceFilter).unwrap();
    assert!(row.status == Unknown && row.finding.contains("predates"), "{}", row.finding);
    // Not Ollama: the layer does not apply.
    let inputs = Inputs {
        arch: "gfx1031",
        scan: Some(&scan),
        logs: &[],
        records: None,
        ollama: &OllamaRelease::NotOllama,
        rocm: None,
    };
    let r = evaluate(&inputs).unwrap();
    assert_eq!(r.layers.iter().find(|l| l.layer == Layer::DeviceFilter).unwrap().status, Unknown);
}
