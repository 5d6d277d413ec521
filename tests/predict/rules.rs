//! `predict` on models `backscope synth` writes (quantized by llama.cpp's own llama-quantize, so the tensor types
//! are the ones real Q4_K_M/Q8_0 files have), against expectations written by hand from the cited llama.cpp 11434
//! and Ollama v0.24.0 source lines; prediction vs observation on the H100 traces committed in
//! docs/validation/gpu-2026-11-21; Ollama's target regexes against a hipcc-built fixture.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use backscope::commands::predict::command::PredictOutput;
use backscope::commands::predict::cuda::observed;
use backscope::commands::predict::{
    self, Backend, Batch, CudaReport, ObservedSource, PredictOptions, Verdict, WeightSource,
};
use backscope::output::text::Layout;
use backscope::output::{render_document, Format, Render};

use crate::support::hip::{legacy_targets_program, traced_mmvq_program, SCALE_KERNEL};
use crate::support::models::models;

fn predict_ne11(arch: &str, ggml: &str, model: &Path, ne11: u64) -> CudaReport {
    let mut o = PredictOptions::new(Backend::cuda(arch), WeightSource::Model(model.to_path_buf()), Batch::Ne11(ne11));
    o.ggml = ggml.into();
    predict::cuda::run(&o).unwrap_or_else(|e| panic!("predict {arch} {ggml} ne11={ne11}: {e:#}"))
}

/// The one family every weight of `ty` gets in the report's single phase.
fn family_of(r: &CudaReport, ty: &str) -> String {
    let fams: BTreeSet<String> = r.phases[0]
        .weights
        .iter()
        .filter(|g| g.ggml_type == ty)
        .map(|g| g.prediction.family.clone().unwrap_or_else(|| format!("undecided: {:?}", g.prediction.undecided)))
        .collect();
    assert_eq!(fams.len(), 1, "{} {ty}: weights split over {fams:?}", r.arch.label);
    let f = fams.into_iter().next().unwrap();
    match f.as_str() {
        "MMVQ" => "VQ",
        "MMQ" => "Q",
        "MMVF" => "VF",
        "MMF" => "F",
        "BLAS" => "BL",
        _ => panic!("unexpected family {f}"),
    }
    .to_string()
}

const NE11: [u64; 11] = [1, 2, 3, 8, 9, 64, 128, 129, 256, 257, 512];

/// Expected families per (arch, weight type) at ne11 = 1, 2, 3, 8, 9, 64, 128, 129, 256, 257, 512. VQ = MMVQ,
/// Q = MMQ, VF = MMVF, F = MMF, BL = dequantize/convert + vendor BLAS. Written from the source lines cited above
/// each group (llama.cpp 11434 ggml/src/ggml-cuda/), in the order ggml_cuda_mul_mat consults them
/// (ggml-cuda.cu:1899-1931: MMVF, MMF, MMVQ, MMQ, BLAS).
const EXPECTED_11434: &[(&str, &str, &str)] = &[
    // Quantized weights. MMVQ up to 8 columns except the exact-cc overrides (mmvq.cu:318-427); none applies to
    // sm_75/86/90, gfx900/906, RDNA. NVIDIA >= 7.5 has int8 MMA: MMQ for any batch (mmq.cu:371-373).
    ("sm_75", "Q8_0", "VQ VQ VQ VQ Q Q Q Q Q Q Q"),
    ("sm_75", "Q4_K", "VQ VQ VQ VQ Q Q Q Q Q Q Q"),
    ("sm_75", "Q6_K", "VQ VQ VQ VQ Q Q Q Q Q Q Q"),
    ("sm_86", "Q8_0", "VQ VQ VQ VQ Q Q Q Q Q Q Q"),
    ("sm_86", "Q4_K", "VQ VQ VQ VQ Q Q Q Q Q Q Q"),
    ("sm_86", "Q6_K", "VQ VQ VQ VQ Q Q Q Q Q Q Q"),
    ("sm_90", "Q8_0", "VQ VQ VQ VQ Q Q Q Q Q Q Q"),
    ("sm_90", "Q4_K", "VQ VQ VQ VQ Q Q Q Q Q Q Q"),
    ("sm_90", "Q6_K", "VQ VQ VQ VQ Q Q Q Q Q Q Q"),
    // gfx900 (cc == GGML_CUDA_CC_VEGA) lacks native dp4a: dense weights above the MMVQ range go to hipBLAS
    // (mmq.cu:437-442).
    ("gfx900", "Q8_0", "VQ VQ VQ VQ BL BL BL BL BL BL BL"),
    ("gfx900", "Q4_K", "VQ VQ VQ VQ BL BL BL BL BL BL BL"),
    ("gfx900", "Q6_K", "VQ VQ VQ VQ BL BL BL BL BL BL BL"),
    // gfx906: GCN with dp4a, not CDNA: MMQ at any batch (mmq.cu:449).
    ("gfx906", "Q8_0", "VQ VQ VQ VQ Q Q Q Q Q Q Q"),
    ("gfx906", "Q4_K", "VQ VQ VQ VQ Q Q Q Q Q Q Q"),
    ("gfx906", "Q6_K", "VQ VQ VQ VQ Q Q Q Q Q Q Q"),
    // gfx90a (CDNA2): MMVQ Q4_K <= 3, Q6_K <= 5 (mmvq.cu:414-425); MFMA MMQ up to 128 columns, Q4_K up to 256,
    // else hipBLAS (mmq.cu:396-405).
    ("gfx90a", "Q8_0", "VQ VQ VQ VQ Q Q Q BL BL BL BL"),
    ("gfx90a", "Q4_K", "VQ VQ VQ Q Q Q Q Q Q BL BL"),
    ("gfx90a", "Q6_K", "VQ VQ VQ Q Q Q Q BL BL BL BL"),
    // gfx942 (CDNA3): the same MMVQ limits, then MMQ always (mmq.cu:393-395).
    ("gfx942", "Q8_0", "VQ VQ VQ VQ Q Q Q Q Q Q Q"),
    ("gfx942", "Q4_K", "VQ VQ VQ Q Q Q Q Q Q Q Q"),
    ("gfx942", "Q6_K", "VQ VQ VQ Q Q Q Q Q Q Q Q"),
    // gfx1100 (RDNA3.0): MMQ except Q6_K above 128 columns (mmq.cu:408-428).
    ("gfx1100", "Q8_0", "VQ VQ VQ VQ Q Q Q Q Q Q Q"),
    ("gfx1100", "Q4_K", "VQ VQ VQ VQ Q Q Q Q Q Q Q"),
    ("gfx1100", "Q6_K", "VQ VQ VQ VQ Q Q Q BL BL BL BL"),
    // gfx1201 (RDNA4): MMVQ for ne11 <= 8, MMQ above (mmq.cu:432-434), the study's Q4_K reading.
    ("gfx1201", "Q8_0", "VQ VQ VQ VQ Q Q Q Q Q Q Q"),
    ("gfx1201", "Q4_K", "VQ VQ VQ VQ Q Q Q Q Q Q Q"),
    ("gfx1201", "Q6_K", "VQ VQ VQ VQ Q Q Q Q Q Q Q"),
    // F16 weights (tiny model rows: 128/256/512/32000, row lengths 256/512, so MMF's tile checks pass,
    // mmf.cu:139-156). NVIDIA: MMVF only where MMF does not apply or at 1 column on Ampere+ (mmvf.cu:829-836),
    // 3 on Turing (:840-842); MMF up to 16 columns with tensor cores (mmf.cu:176-184); then cuBLAS.
    ("sm_75", "F16", "VF VF VF F F BL BL BL BL BL BL"),
    ("sm_86", "F16", "VF F F F F BL BL BL BL BL BL"),
    ("sm_90", "F16", "VF F F F F BL BL BL BL BL BL"),
    // GCN: MMVF up to 8 (mmvf.cu:857), no MMF (no matrix units, mmf.cu:183-189), then hipBLAS.
    ("gfx900", "F16", "VF VF VF VF BL BL BL BL BL BL BL"),
    ("gfx906", "F16", "VF VF VF VF BL BL BL BL BL BL BL"),
    // CDNA: MMVF up to 2 (mmvf.cu:855); MMF never for F16 on CDNA2 (mmf.cu:171-173), up to 16 on CDNA3.
    ("gfx90a", "F16", "VF VF BL BL BL BL BL BL BL BL BL"),
    ("gfx942", "F16", "VF VF F F F BL BL BL BL BL BL"),
    // RDNA3.0: MMVF up to 3 (mmvf.cu:849-851), MMF up to 8 (mmf.cu:169-170); RDNA4: MMVF up to 5 (:852-854),
    // MMF up to 16.
    ("gfx1100", "F16", "VF VF VF F BL BL BL BL BL BL BL"),
    ("gfx1201", "F16", "VF VF VF F F BL BL BL BL BL BL"),
];

/// Ollama v0.24.0's vendored ggml (ml/backend/ggml/ggml/src/ggml-cuda/ at tag v0.24.0).
const EXPECTED_O24: &[(&str, &str, &str)] = &[
    // No gfx900 exception: GCN goes to MMQ above the flat MMVQ limit of 8 (ggml-cuda.cu:2329-2331, mmq.cu:313).
    ("gfx900", "Q4_K", "VQ VQ VQ VQ Q Q Q Q Q Q Q"),
    ("gfx900", "Q8_0", "VQ VQ VQ VQ Q Q Q Q Q Q Q"),
    // gfx90a is CDNA1 here (CDNA2 = 0x910, common.cuh:121): flat MMVQ, MFMA MMQ to 128 / Q4_K to 256
    // (mmq.cu:300-306).
    ("gfx90a", "Q4_K", "VQ VQ VQ VQ Q Q Q Q Q BL BL"),
    ("gfx90a", "Q6_K", "VQ VQ VQ VQ Q Q Q BL BL BL BL"),
    // RDNA3 and RDNA4: always MMQ (mmq.cu:309-311).
    ("gfx1100", "Q6_K", "VQ VQ VQ VQ Q Q Q Q Q Q Q"),
    ("gfx1201", "Q4_K", "VQ VQ VQ VQ Q Q Q Q Q Q Q"),
    ("sm_86", "Q4_K", "VQ VQ VQ VQ Q Q Q Q Q Q Q"),
    // F16: CDNA MMVF up to 2 (mmvf.cu:774), no MFMA MMF in this version (mmf.cu:164-165); Ampere MMVF at 1
    // column (mmvf.cu:756-758), MMF to 16.
    ("gfx90a", "F16", "VF VF BL BL BL BL BL BL BL BL BL"),
    ("sm_86", "F16", "VF F F F F BL BL BL BL BL BL"),
];

fn check_table(ggml: &str, table: &[(&str, &str, &str)]) {
    let m = models();
    let mut failures = Vec::new();
    for (arch, ty, want) in table {
        let model = match *ty {
            "F16" => &m.f16,
            "Q8_0" => &m.q8_0,
            _ => &m.q4_k_m,
        };
        let got: Vec<String> = NE11.iter().map(|&n| family_of(&predict_ne11(arch, ggml, model, n), ty)).collect();
        let got = got.join(" ");
        if got != *want {
            failures.push(format!("{arch} {ty}: want {want}\n{:>w$}   got  {got}", "", w = arch.len() + ty.len()));
        }
    }
    assert!(failures.is_empty(), "ggml {ggml}: ne11 = {NE11:?}\n{}", failures.join("\n"));
}

#[test]
fn families_per_arch_and_batch_follow_llama_cpp_11434() {
    check_table("11434", EXPECTED_11434);
}

#[test]
fn families_per_arch_and_batch_follow_ollama_v0_24_ggml() {
    check_table("ollama-v0.24.0", EXPECTED_O24);
}

#[test]
fn q4_k_m_mixes_q4_k_and_q6_k() {
    let r = predict_ne11("gfx1201", "11434", &models().q4_k_m, 9);
    let types: BTreeSet<&str> = r.model.weights_per_type.keys().map(String::as_str).collect();
    assert_eq!(types, BTreeSet::from(["Q4_K", "Q6_K"]));
}

/// A prompt of 1100 tokens with ubatch 512: two full ubatches, one of 76, the gathered rows, decode
/// (src/llama-batch.cpp split_simple; src/models/llama.cpp:174-176).
#[test]
fn prompt_splits_into_ubatches_and_the_gathered_rows() {
    let m = models();
    let mut o =
        PredictOptions::new(Backend::cuda("gfx1201"), WeightSource::Model(m.q4_k_m.clone()), Batch::PromptTokens(1100));
    o.explain = true;
    let r = predict::cuda::run(&o).unwrap();
    let shape: Vec<(&str, u64, u64)> = r.phases.iter().map(|p| (p.id.as_str(), p.ne11, p.repeat)).collect();
    assert_eq!(shape, vec![("prefill", 512, 2), ("prefill-last", 76, 1), ("last-rows", 1, 1), ("decode", 1, 1)]);
    // The tiny preset has 4 blocks: the last one's gate/up/down and the output head are gathered.
    let last: BTreeSet<String> = r.phases[2].weights.iter().flat_map(|g| g.examples.clone()).collect();
    assert_eq!(
        last,
        BTreeSet::from(
            ["blk.3.ffn_down.weight", "blk.3.ffn_gate.weight", "blk.3.ffn_up.weight", "output.weight"]
                .map(String::from)
        )
    );
    let n_before: u64 = r.phases[0].weights.iter().map(|g| g.tensors).sum();
    let n_all: u64 = r.phases[3].weights.iter().map(|g| g.tensors).sum();
    assert_eq!((n_before, n_all), (4 * 7 - 3, 4 * 7 + 1));
    for (phase, fam) in [(0, "MMQ"), (1, "MMQ"), (2, "MMVQ"), (3, "MMVQ")] {
        assert!(r.phases[phase].weights.iter().all(|g| g.prediction.family.as_deref() == Some(fam)), "phase {phase}");
    }
    // explain keeps the path: MMVQ said no for 76 columns on RDNA4 before MMQ said yes.
    let path = &r.phases[1].weights[0].prediction.path;
    assert!(path.iter().any(|c| c.table == "mmvq" && c.rule == "mmvq.default" && c.decided.as_deref() == Some("no")));
    assert!(path.iter().any(|c| c.table == "mmq" && c.rule == "mmq.rdna4" && c.held == Some(true)));
    // Text as the output layer writes it.
    let doc = PredictOutput::One(Box::new(r.clone())).document();
    let text = render_document(&doc, Format::Text, Layout { width: 120, all: true });
    assert!(text.contains("mmq.rdna4") && text.contains("decision path"), "{text}");
    let json = serde_json::to_value(&r).unwrap();
    assert_eq!(json["schema"], "backscope.predict/1");
    assert_eq!(json["phases"][2]["weights"][0]["family"], "MMVQ");
}

/// llama.cpp 11434 treats gfx900 differently from Ollama v0.24's ggml: 9+ columns go to hipBLAS there and to MMQ
/// here, and the claim names the rule.
#[test]
fn gfx900_differs_between_versions() {
    let m = models();
    let l = predict_ne11("gfx900", "11434", &m.q4_k_m, 64);
    let o = predict_ne11("gfx900", "o24", &m.q4_k_m, 64);
    let g = &l.phases[0].weights[0];
    assert_eq!(g.prediction.family.as_deref(), Some("BLAS"));
    assert_eq!(g.prediction.rule.as_ref().unwrap().id, "mmq.vega-no-dp4a");
    assert_eq!(g.prediction.blas_compute.as_deref(), Some("F16"));
    assert_eq!(o.phases[0].weights[0].prediction.family.as_deref(), Some("MMQ"));
    assert!(l
        .claims
        .iter()
        .any(|c| c.statement.contains("vendor BLAS")
            && c.sources.iter().any(|s| s.to_string().contains("mmq.cu:437-442"))));
}

/// A single weight without shape: quantized types decide without it, float types say which input is missing.
#[test]
fn single_weight_type_with_and_without_shape() {
    let one = |ty: &str, n: Option<u64>, k: Option<u64>, ne11: u64| {
        let o = PredictOptions::new(
            Backend::cuda("gfx942"),
            WeightSource::Single { weight_type: ty.into(), n, k },
            Batch::Ne11(ne11),
        );
        predict::cuda::run(&o).unwrap().phases[0].weights[0].prediction.clone()
    };
    assert_eq!(one("q4_k", None, None, 2).family.as_deref(), Some("MMVQ"));
    assert_eq!(one("Q4_K", None, None, 4).family.as_deref(), Some("MMQ"));
    let f16 = one("F16", None, None, 8);
    assert_eq!(f16.family, None);
    assert!(f16.undecided.as_deref().unwrap().contains("ne00"), "{f16:?}");
    assert_eq!(one("F16", Some(4096), Some(4096), 8).family.as_deref(), Some("MMF"));
    assert_eq!(one("F16", Some(4096), Some(4096), 1).family.as_deref(), Some("MMVF"));
    let bad = PredictOptions::new(
        Backend::cuda("gfx942"),
        WeightSource::Single { weight_type: "Q9".into(), n: None, k: None },
        Batch::Ne11(1),
    );
    assert!(predict::cuda::run(&bad).unwrap_err().to_string().contains("unknown ggml type"));
    let arch = PredictOptions::new(
        Backend::cuda("gfx9999"),
        WeightSource::Single { weight_type: "Q8_0".into(), n: None, k: None },
        Batch::Ne11(1),
    );
    assert!(predict::cuda::run(&arch).unwrap_err().to_string().contains("no architecture data"));
}

// ---------------------------------------------------------------------------------------------------------------
// Prediction vs observation on the H100 runs of docs/validation/gpu-2026-11-21 (llama.cpp 11434 built for sm_90,
// llama-bench -r 1 --no-warmup on a TinyLlama-shaped Q4_K_M model: `-p N -n 0` for prompts, `-p 0 -n 16` for
// decode; traces by `backscope trace --json`).

fn validation(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/validation/gpu-2026-11-21").join(name)
}

fn compare_with(case: &str, observed: ObservedSource) -> CudaReport {
    let (batch, decode) = match case.strip_prefix('p') {
        Some(n) => (Batch::PromptTokens(n.parse().unwrap()), 0),
        None => (Batch::PromptTokens(0), case.trim_start_matches("tg").parse().unwrap()),
    };
    let mut o = PredictOptions::new(Backend::cuda("sm_90"), WeightSource::Model(models().tl_q4_k_m.clone()), batch);
    o.decode_tokens = Some(decode);
    o.observed = Some(observed);
    predict::cuda::run(&o).unwrap()
}

fn compare_case(case: &str, graphs: &str) -> CudaReport {
    compare_with(case, ObservedSource::TraceSummary(validation(&format!("trace-{case}-{graphs}.json"))))
}

fn all_confirmed(r: &CudaReport, what: &str) {
    let c = r.comparison.as_ref().unwrap();
    let bad: Vec<String> = c
        .items
        .iter()
        .filter(|i| i.verdict != Verdict::Confirmed)
        .map(|i| format!("{} {} {:?} {}: {}", i.phase, i.ggml_type, i.predicted, i.verdict, i.note))
        .chain(c.unexplained.iter().map(|u| format!("unexplained {} {}", u.family, u.kernel)))
        .collect();
    assert!(bad.is_empty(), "{what}:\n{}", bad.join("\n"));
    assert!(c.confirmed >= 2, "{what}: {c:?}");
}

#[test]
fn h100_h200_traces_and_ncu_counts_confirm_every_prediction() {
    for case in ["p1", "p8", "p9", "p64", "p256", "p257", "p512", "tg16"] {
        for graphs in ["on", "off"] {
            let r = compare_case(case, graphs);
            all_confirmed(&r, &format!("{case} graphs {graphs}"));
            let c = r.comparison.as_ref().unwrap();
            assert!(c.claims.iter().all(|cl| cl.sources.len() >= 2), "rule and trace file behind every verdict");
            // The independent count of the same run: Nsight Compute's launches per mangled kernel name.
            let ncu: std::collections::BTreeMap<String, u64> = serde_json::from_str(
                &std::fs::read_to_string(validation(&format!("ncu-{case}-{graphs}.counts.json"))).unwrap(),
            )
            .unwrap();
            let observed = predict::Observed {
                kind: "ncu".into(),
                path: format!("ncu-{case}-{graphs}.counts.json"),
                run_id: None,
                files: Vec::new(),
                kernels: ncu.iter().map(|(name, n)| observed::classify(name, *n)).collect(),
                complete: true,
                counts_lower_bound: false,
                notes: Vec::new(),
            };
            all_confirmed(&compare_with(case, ObservedSource::Loaded(observed)), &format!("{case} {graphs} (ncu)"));
        }
    }
    // The H200 re-run of p8, p9 and decode (docs/validation/gpu-2026-11-21b/counts).
    for case in ["p8", "p9", "tg16"] {
        for graphs in ["on", "off"] {
            let path = Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("docs/validation/gpu-2026-11-21b/counts")
                .join(format!("trace-{case}-{graphs}.json"));
            all_confirmed(&compare_with(case, ObservedSource::TraceSummary(path)), &format!("H200 {case} {graphs}"));
        }
    }
    // What each case confirms, from the kernel lists: 8 tokens run MMVQ with 8 columns, 9 tokens MMQ, and the
    // last layer's FFN and output head MMVQ with one column.
    let p8 = compare_case("p8", "off");
    let items = &p8.comparison.as_ref().unwrap().items;
    assert!(items.iter().any(|i| i.phase == "prefill-last"
        && i.ggml_type == "Q4_K"
        && i.predicted.as_deref() == Some("MMVQ")
        && i.ne11 == 8));
    assert!(items.iter().any(|i| i.phase == "last-rows" && i.ggml_type == "Q6_K" && i.ne11 == 1));
    let p9 = compare_case("p9", "off");
    assert!(p9
        .comparison
        .as_ref()
        .unwrap()
        .items
        .iter()
        .any(|i| i.phase == "prefill-last" && i.predicted.as_deref() == Some("MMQ") && i.matching_launches >= 132));
    let tg = compare_case("tg16", "on");
    assert!(tg
        .comparison
        .as_ref()
        .unwrap()
        .items
        .iter()
        .any(|i| i.phase == "decode" && i.ggml_type == "attention" && i.predicted.as_deref() == Some("FA-vec")));
}

/// The same traces compared with a wrong run description show contradictions: a 9-token prompt predicted for
/// the 8-token trace expects MMQ, and the trace's 8-column MMVQ is predicted by no phase.
#[test]
fn a_wrong_prediction_is_contradicted_with_both_sources() {
    let mut o = PredictOptions::new(
        Backend::cuda("sm_90"),
        WeightSource::Model(models().tl_q4_k_m.clone()),
        Batch::PromptTokens(9),
    );
    o.decode_tokens = Some(0);
    o.observed = Some(ObservedSource::TraceSummary(validation("trace-p8-off.json")));
    let r = predict::cuda::run(&o).unwrap();
    let c = r.comparison.unwrap();
    let q4k = c.items.iter().find(|i| i.phase == "prefill-last" && i.ggml_type == "Q4_K").unwrap();
    assert_eq!(q4k.verdict, Verdict::Contradicted, "{q4k:?}");
    assert!(c.unexplained.iter().any(|u| u.family == "MMVQ" && u.ncols == Some(8)));
    let claim = c.claims.iter().find(|cl| cl.id == "compare.prefill-last.Q4_K.contradicted").unwrap();
    let sources: Vec<String> = claim.sources.iter().map(|s| s.to_string()).collect();
    assert!(sources.iter().any(|s| s.contains("mmq.turing-mma")), "{sources:?}");
    assert!(sources.iter().any(|s| s.contains("trace-")), "{sources:?}");

    // gfx900 rules against an NVIDIA trace: BLAS predicted, MMQ observed.
    let mut o = PredictOptions::new(
        Backend::cuda("gfx900"),
        WeightSource::Model(models().tl_q4_k_m.clone()),
        Batch::PromptTokens(9),
    );
    o.decode_tokens = Some(0);
    o.observed = Some(ObservedSource::TraceSummary(validation("trace-p9-off.json")));
    let c = predict::cuda::run(&o).unwrap().comparison.unwrap();
    assert!(c.items.iter().any(|i| i.predicted.as_deref() == Some("BLAS") && i.verdict == Verdict::Contradicted));
}

/// A sweep record's trace (a top-kernel list) reads through the same comparison; kernels beyond the list make
/// absences Unobserved rather than contradictions.
#[test]
fn sweep_record_trace_is_an_observation() {
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(validation("trace-p8-off.json")).unwrap()).unwrap();
    let kernels: Vec<serde_json::Value> = summary["kernels"]
        .as_array()
        .unwrap()
        .iter()
        .take(2)
        .map(|k| {
            serde_json::json!({"name": k["name"], "demangled": k["demangled"], "family": k["family"], "api": "cuda",
                               "launches": k["launches"]})
        })
        .collect();
    let record = serde_json::json!({
        "run_id": "r-test",
        "trace": {"dir": "traces", "files": ["traces/trace-1.jsonl"], "window_ns": [0, 1], "interval_ms": 50,
                  "spill_ns": [0, 0], "total_launches": 529, "failed_launches": 0,
                  "families": {"MMVQ": 154}, "kernels": kernels, "distinct_kernels": 15, "processes": []}
    });
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("record.json");
    std::fs::write(&path, record.to_string()).unwrap();
    let observed = observed::load(&ObservedSource::SweepRecord(path)).unwrap();
    assert!(!observed.complete);
    assert_eq!(observed.run_id.as_deref(), Some("r-test"));
    let mut o = PredictOptions::new(
        Backend::cuda("sm_90"),
        WeightSource::Model(models().tl_q4_k_m.clone()),
        Batch::PromptTokens(8),
    );
    o.decode_tokens = Some(0);
    o.observed = Some(ObservedSource::Loaded(observed));
    let c = predict::cuda::run(&o).unwrap().comparison.unwrap();
    // The two listed kernels: quantize_q8_1 and MMVQ Q4_K with 8 columns.
    assert!(c.items.iter().any(|i| i.ggml_type == "Q4_K" && i.ne11 == 8 && i.verdict == Verdict::Confirmed));
    assert!(c.items.iter().any(|i| i.verdict == Verdict::Unobserved && i.note.contains("incomplete")));
    assert_eq!(c.contradicted, 0);
    assert!(c.claims.iter().any(|cl| cl.id == "compare.observation-limited"));
}

// ---------------------------------------------------------------------------------------------------------------
// Ollama's target regexes against real code objects.

/// hipcc builds for gfx900, gfx906 and gfx1030 (the investigation's legacy targets); scan reads the code objects;
/// each regex era of data/ollama_amdgpu.toml keeps what `grep -E` with the same expression keeps, and what the
/// expressions say when read by hand: gfx900 and gfx1030 until v0.12.3, only gfx1030 from v0.12.4.
#[test]
fn ollama_target_regexes_filter_a_hipcc_fixture() {
    let dir = tempfile::tempdir().unwrap();
    let exe = legacy_targets_program(dir.path(), SCALE_KERNEL);
    let report = backscope::gpu::binaries::scan(&backscope::gpu::binaries::ScanOptions {
        paths: vec![exe],
        ..Default::default()
    });
    let mut targets: Vec<String> = report
        .files
        .iter()
        .flat_map(|f| f.amdgpu.iter().flat_map(|a| a.code_objects.iter().map(|c| c.processor.clone())))
        .collect();
    targets.sort();
    targets.dedup();
    assert_eq!(targets, vec!["gfx1030", "gfx900", "gfx906"]);
    let refs: Vec<&str> = targets.iter().map(String::as_str).collect();
    let ollama = backscope::gpu::knowledge::ollama_amdgpu();
    for (release, want) in [
        ("v0.5.8", vec!["gfx1030", "gfx900"]),
        ("v0.6.4", vec!["gfx1030", "gfx900"]),
        ("v0.12.3", vec!["gfx1030", "gfx900"]),
        ("v0.12.4", vec!["gfx1030"]),
        ("v0.24.0", vec!["gfx1030"]),
    ] {
        let f = ollama.filter_at(release).unwrap_or_else(|| panic!("no filter for {release}"));
        let kept = f.apply(&refs).unwrap();
        assert_eq!(kept, want, "{release} ({})", f.regex);
        let mut grep = Command::new("grep");
        grep.args(["-E", &f.regex]).stdin(std::process::Stdio::piped()).stdout(std::process::Stdio::piped());
        let mut child = grep.spawn().unwrap();
        use std::io::Write;
        child.stdin.take().unwrap().write_all(format!("{}\n", refs.join("\n")).as_bytes()).unwrap();
        let out = child.wait_with_output().unwrap();
        let by_grep: Vec<&str> = std::str::from_utf8(&out.stdout).unwrap().lines().collect();
        assert_eq!(kept, by_grep, "{release}: grep -E disagrees");
    }
    assert!(ollama.filter_at("v0.30.0").is_none(), "no regex era after v0.24.0");
}

/// A trace directory written by the observer around a hipcc-built program that launches a kernel named like
/// ggml's `mul_mat_vec_q<Q4_K, 1>`. Without a GPU every launch fails (hipErrorNoDevice), so the kernel is seen
/// and classified but did not run: it cannot confirm the MMVQ prediction, which stays Unobserved.
#[test]
fn trace_directory_is_read_and_failed_launches_do_not_confirm() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = traced_mmvq_program(tmp.path());

    let observed = observed::load(&ObservedSource::TraceDir(dir.clone())).unwrap();
    let k = observed.kernels.iter().find(|k| k.family == "MMVQ").expect("the MMVQ kernel is in the trace");
    assert_eq!((k.ggml_type.as_deref(), k.ncols, k.launches), (Some("Q4_K"), Some(1), 0));
    assert!(observed.files.iter().all(|f| f.starts_with(dir.to_str().unwrap())) && !observed.files.is_empty());

    let mut o = PredictOptions::new(
        Backend::cuda("gfx900"),
        WeightSource::Single { weight_type: "Q4_K".into(), n: Some(4096), k: Some(4096) },
        Batch::Ne11(1),
    );
    o.observed = Some(ObservedSource::Loaded(observed));
    let c = predict::cuda::run(&o).unwrap().comparison.unwrap();
    assert_eq!(c.items.len(), 1);
    assert_eq!(c.items[0].verdict, Verdict::Unobserved, "{:?}", c.items[0]);
    assert!(c.unexplained.is_empty(), "a kernel that never ran contradicts nothing");
}
