//! `backscope predict --backend vulkan` against real dispatches: llama-bench of the llama.cpp 11434 Vulkan build on
//! Mesa's lavapipe under `backscope trace` with the Vulkan layer (ggml names each pipeline with its debug marker),
//! on synthesized tiny models in F16 and Q4_K_M; and the Vulkan layer's traces of an H200 (NVIDIA's driver) running
//! the same build, committed under docs/validation/gpu-2026-12-02-vulkan-intdot-coopmat. The expected side is the
//! pipelines the layer saw ggml dispatch and ggml's own device line (`int dot: … | matrix cores: …`), not backscope's
//! rules.

use std::path::{Path, PathBuf};

use backscope::commands::predict::{
    AttentionShape, Backend, Batch, DeviceSource, FlashAttn, MatmulOp, ModelWeights, ObservedSource, PredictOptions,
    WeightSource, WeightTensor,
};
use serde_json::Value;

use crate::support::sweep::*;
use crate::support::util::*;

/// llama-bench `-p prompt -n decode` under `backscope trace` with the layer; returns the trace dir and ggml's stderr.
fn bench_trace(model: &Path, prompt: u64, decode: u64, dir: &Path) -> String {
    let mut cmd = backscope();
    cmd.args(["trace", "--vklayer"]).arg(vklayer_library()).arg("--dir").arg(dir).arg("--");
    cmd.arg(llama_bin().join("llama-bench"))
        .arg("-m")
        .arg(model)
        .args(["-ngl", "99", "-r", "1", "-p", &prompt.to_string(), "-n", &decode.to_string()])
        .env("GGML_VK_VISIBLE_DEVICES", "0");
    let out = run(&mut cmd);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stderr}");
    stderr
}

fn predict(args: &[&str], extra: &[&Path]) -> Value {
    let mut cmd = backscope();
    cmd.args(["predict", "--json", "--backend", "vulkan"]).args(args);
    for p in extra {
        cmd.arg(p);
    }
    serde_json::from_str(&stdout_ok(&mut cmd)).expect("predict --json prints JSON")
}

fn verdicts(r: &Value) -> Vec<(String, String, String)> {
    r["comparison"]["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            (
                i["phase"].as_str().unwrap().to_string(),
                i["predicted"].as_str().unwrap().to_string(),
                i["verdict"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

fn assert_all_confirmed(r: &Value, what: &str) {
    let c = &r["comparison"];
    let items = verdicts(r);
    assert!(!items.is_empty(), "{what}: nothing predicted");
    assert!(items.iter().all(|(_, _, v)| v == "Confirmed"), "{what}: {items:#?}");
    assert_eq!(c["unexplained"].as_array().unwrap().len(), 0, "{what}: {}", c["unexplained"]);
    assert_eq!(c["contradicted"], 0, "{what}");
}

/// Every prediction for the llvmpipe device, read from the layer's device record, is confirmed by the pipelines
/// ggml dispatched, with none unexplained: F16 at 9 tokens (matrix path, small tile) and 512 (large tile), Q4_K_M at
/// 8 (the vector path with 8 columns, Q6_K output) and 64 (medium tile, the shared matmul_quant pipeline), each with a
/// decode of 2 tokens (vector path, one column). ggml's own device line says what the build lacks.
#[test]
fn lavapipe_pipelines_confirm_every_prediction_for_the_traced_device() {
    let _turn = heavy();
    let tmp = tempfile::tempdir().unwrap();
    let lib = llama_bin().join("libggml-vulkan.so");
    let cases =
        [(tiny_model(), 9, "F16"), (tiny_model(), 512, "F16"), (tiny_q4_k_m(), 8, "Q4_K"), (tiny_q4_k_m(), 64, "Q4_K")];
    for (model, prompt, ty) in cases {
        let dir = tmp.path().join(format!("{ty}-{prompt}"));
        let stderr = bench_trace(&model, prompt, 2, &dir);
        let dir_s = dir.to_str().unwrap();
        let p = prompt.to_string();
        let r = predict(
            &["--device", dir_s, "--trace", dir_s, "--prompt-tokens", &p, "--decode-tokens", "2", "--model"],
            &[&model],
        );
        let what = format!("{ty} prompt {prompt}");
        assert_all_confirmed(&r, &what);
        if prompt == 9 {
            // The same pipelines through `backscope trace --json`'s summary.
            let summary = tmp.path().join("summary.json");
            std::fs::write(&summary, stdout_ok(backscope().args(["trace", "--json", "--read"]).arg(&dir))).unwrap();
            let s = predict(
                &[
                    "--device",
                    dir_s,
                    "--prompt-tokens",
                    &p,
                    "--decode-tokens",
                    "2",
                    "--trace-json",
                    summary.to_str().unwrap(),
                    "--model",
                ],
                &[&model],
            );
            assert_all_confirmed(&s, "trace --json summary");
            assert_eq!(s["comparison"]["confirmed"], r["comparison"]["confirmed"]);
        }
        // The device and build facts against ggml's own line: `int dot: 0 | matrix cores: none`, warp size 8.
        let line = stderr.lines().find(|l| l.starts_with("ggml_vulkan: 0 = ")).expect("ggml's device line");
        assert!(
            line.contains("int dot: 0") && line.contains("matrix cores: none") && line.contains("warp size: 8"),
            "{line}"
        );
        let facts = &r["device"]["facts"];
        assert_eq!((facts["integer_dot"].as_bool(), facts["coopmat"].as_bool()), (Some(false), Some(false)), "{what}");
        // lavapipe offers the extension without accelerating the 4x8 dot product, so ggml leaves it unused
        // (ggml-vulkan.cpp:4280), though the build's glslc could emit the shaders.
        assert_eq!(facts["integer_dot_offered"], true);
        assert_eq!(facts["int_dot_accelerated"], false);
        assert_eq!(r["build"]["library"].as_str().map(|l| Path::new(l).file_name().is_some()), Some(true));
        assert_eq!(r["build"]["facts"]["glslc_integer_dot"], true);
        // The decode steps ran the vector path for every weight type of the model.
        let decode: Vec<_> = verdicts(&r).into_iter().filter(|(ph, _, _)| ph == "decode").collect();
        assert!(decode.iter().any(|(_, what, _)| what.starts_with("MMV `mul_mat_vec_")), "{decode:?}");
        if ty == "Q4_K" {
            // lavapipe's subgroup of 8 is below the 16 the K-quant mat-vec shaders need: the shared-memory variant.
            assert!(
                decode
                    .iter()
                    .any(|(_, w, _)| w.contains("shader mul_mat_vec_q4_k_f32_f32")
                        && !w.contains("q4_k_f32_f32_subgroup"))
            );
        }
        if prompt == 512 {
            assert!(verdicts(&r).iter().any(|(_, w, _)| w.contains("matmul_f16_f32_f16acc_aligned_2")));
        }
        // A gfx900 (GCN, wave64) profile predicts the subgroup mat-vec shaders this trace did not run: contradicted.
        if ty == "Q4_K" && prompt == 8 {
            let wrong = predict(
                &[
                    "--device",
                    "gfx900-radv",
                    "--vulkan-lib",
                    lib.to_str().unwrap(),
                    "--trace",
                    dir_s,
                    "--prompt-tokens",
                    &p,
                    "--model",
                ],
                &[&model],
            );
            let c = &wrong["comparison"];
            assert!(c["contradicted"].as_u64().unwrap() > 0, "{}", c);
            assert_eq!(wrong["device_decisions"][0]["value"], "AMD_GCN");
        }
    }
}

/// A mixture of experts (`synth --preset tiny-moe`: 8 experts, 2 used, Q4_K_M by the real llama-quantize) on
/// lavapipe: at 8 tokens MUL_MAT_ID takes ggml's per-token vector path (`mul_mat_vec_id_*`, one dispatch per token),
/// at 64 the matrix path (`matmul_id_*` after `count_experts`), and the decode the vector path; every prediction is
/// confirmed by the pipelines the layer saw, and none is unexplained. The expected paths are the pipelines ggml
/// dispatched, named by its debug markers.
#[test]
fn lavapipe_moe_pipelines_confirm_every_prediction() {
    let _turn = heavy();
    let tmp = tempfile::tempdir().unwrap();
    let model = tmp.path().join("tiny-moe-q4_k_m.gguf");
    let mut cmd = backscope();
    cmd.args(["synth", "--preset", "tiny-moe", "--type", "q4_k_m", "--llama-bin"])
        .arg(llama_bin())
        .arg("-o")
        .arg(&model);
    stdout_ok(&mut cmd);
    for prompt in [8u64, 64] {
        let dir = tmp.path().join(format!("moe-{prompt}"));
        bench_trace(&model, prompt, 2, &dir);
        let dir_s = dir.to_str().unwrap();
        let p = prompt.to_string();
        let r = predict(
            &["--device", dir_s, "--trace", dir_s, "--prompt-tokens", &p, "--decode-tokens", "2", "--model"],
            &[&model],
        );
        let what = format!("tiny-moe Q4_K_M prompt {prompt}");
        assert_all_confirmed(&r, &what);
        let items = verdicts(&r);
        let confirmed = |needle: &str| items.iter().any(|(_, w, v)| w.contains(needle) && v == "Confirmed");
        assert!(confirmed("mul_mat_vec_id_"), "{what}: the decode's per-token path: {items:#?}");
        if prompt == 64 {
            assert!(confirmed("matmul_id"), "{what}: the matrix path: {items:#?}");
        }
    }
}

/// TinyLlama 1.1B's weights as shapes (the validation's `synth --preset tinyllama-1.1b`: 2048 dims, 22 layers, 32
/// heads of 64 with 4 KV heads, n_ff 5632, vocabulary 32000), F16, without writing its 2 GB.
fn tinyllama_f16() -> ModelWeights {
    let mut tensors = Vec::new();
    let w = |name: String, k: u64, n: u64, after_gather: bool| WeightTensor {
        layer: name.strip_prefix("blk.").and_then(|r| r.split('.').next()).and_then(|l| l.parse().ok()),
        head: name == "output.weight",
        name,
        ggml_type: "F16".into(),
        ne00: Some(k),
        ne01: Some(n),
        experts: 0,
        op: MatmulOp::MulMat,
        after_gather,
    };
    for l in 0..22 {
        let last = l == 21;
        for (t, k, n) in
            [("attn_q", 2048, 2048), ("attn_k", 2048, 256), ("attn_v", 2048, 256), ("attn_output", 2048, 2048)]
        {
            tensors.push(w(format!("blk.{l}.{t}.weight"), k, n, false));
        }
        for (t, k, n) in [("ffn_gate", 2048, 5632), ("ffn_up", 2048, 5632), ("ffn_down", 5632, 2048)] {
            tensors.push(w(format!("blk.{l}.{t}.weight"), k, n, last));
        }
    }
    tensors.push(w("output.weight".into(), 2048, 32000, true));
    ModelWeights {
        source: "TinyLlama 1.1B shapes".into(),
        architecture: Some("llama".into()),
        n_layer: Some(22),
        tensors,
        attention: Some(AttentionShape { head_dim: 64, dv: 64, n_head: 32, n_head_kv: 4 }),
    }
}

/// The capability-gap claim: the H200's profile offers integer dot, coopmat and coopmat2; with this build (whose
/// library embeds those shaders) predict states no gap and predicts the coopmat2 matmul, while with a build lacking
/// them (the library with those shader names renamed: `library_without_the_shaders`) it predicts the plain matmul and
/// states, as an Inferred claim, what coopmat2 would have run and which define the build lacked.
#[test]
fn a_build_without_the_shaders_gets_the_capability_gap_claim() {
    let tmp = tempfile::tempdir().unwrap();
    let run = |lib: PathBuf| {
        let o = PredictOptions::new(
            Backend::Vulkan { device: DeviceSource::Profile("h200-nvidia".into()), library: Some(lib) },
            WeightSource::Weights(tinyllama_f16()),
            Batch::PromptTokens(512),
        );
        serde_json::to_value(backscope::commands::predict::vulkan::run(&o).unwrap()).unwrap()
    };
    let gap = |r: &Value| {
        r["claims"].as_array().unwrap().iter().find(|c| c["id"] == "predict.vulkan.capability-gap").cloned()
    };
    let families = |r: &Value| -> Vec<String> {
        r["phases"][0]["weights"]
            .as_array()
            .unwrap()
            .iter()
            .map(|g| g["family"].as_str().unwrap().to_string())
            .collect()
    };
    let full = run(llama_bin().join("libggml-vulkan.so"));
    assert_eq!(full["build"]["facts"]["glslc_coopmat2"], true);
    assert!(gap(&full).is_none(), "{}", full["claims"]);
    assert!(families(&full).iter().any(|f| f == "MM-coopmat2"), "{:?}", families(&full));
    let without = run(library_without_the_shaders(tmp.path()));
    assert_eq!(without["build"]["facts"]["glslc_coopmat2"], false);
    assert!(families(&without).iter().all(|f| f == "MM" || f == "MMV"), "{:?}", families(&without));
    let claim = gap(&without).expect("a capability-gap claim");
    assert_eq!(claim["confidence"], "Inferred");
    let s = claim["statement"].as_str().unwrap();
    assert!(s.contains("GGML_VULKAN_COOPMAT2_GLSLC_SUPPORT") && s.contains("MM-coopmat2 "), "{s}");
}

/// The H200 run's evidence (docs/validation/gpu-2026-12-02-vulkan-intdot-coopmat, from
/// bench/gpu/record_vulkan_dispatch.sh): the layer's traces of llama-bench on an H200 with NVIDIA's driver, running this
/// repository's Vulkan build (the glslc of scripts/llama-build.sh: integer-dot, coopmat and coopmat2 shaders), and
/// llama-quantize's own log of the Q4_K_M and Q8_0 models it quantized.
fn h200_evidence() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/validation/gpu-2026-12-02-vulkan-intdot-coopmat")
}

/// A trace directory holding the recorded trace file of `case` (`tl-q4km-ngl-99-p512`), as the layer names its files.
fn h200_trace(tmp: &Path, case: &str) -> PathBuf {
    let dir = tmp.join(case);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(h200_evidence().join("traces").join(format!("{case}.traces")), dir.join("trace-1.jsonl")).unwrap();
    dir
}

/// TinyLlama's weights with the types llama-quantize wrote for `model` (`q4km`, `q8`), read from its log
/// (`[  9/ 201] blk.0.ffn_down.weight - [  5632,   2048, 1, 1], type = f16, converting to q6_K`); the log's shapes
/// must be TinyLlama's.
fn tinyllama_quantized(model: &str) -> ModelWeights {
    let log = std::fs::read_to_string(h200_evidence().join("quantize.log")).unwrap();
    let target = format!("tl-{model}.gguf'");
    let section: Vec<&str> = log
        .split("llama_quantize: quantizing ")
        .find(|s| s.lines().next().is_some_and(|l| l.contains(&target)))
        .unwrap_or_else(|| panic!("no llama-quantize section for {model}"))
        .lines()
        .collect();
    let mut w = tinyllama_f16();
    for t in &mut w.tensors {
        let line = section
            .iter()
            .find(|l| l.split_whitespace().nth(3) == Some(t.name.as_str()))
            .unwrap_or_else(|| panic!("{model}: {} not in llama-quantize's log", t.name));
        let dims: Vec<u64> =
            line.split(['[', ']']).nth(3).unwrap().split(',').map(|d| d.trim().parse().unwrap()).collect();
        assert_eq!((Some(dims[0]), Some(dims[1])), (t.ne00, t.ne01), "{line}");
        let ty = line.split("converting to ").nth(1).unwrap().split_whitespace().next().unwrap();
        t.ggml_type = ty.to_ascii_uppercase();
    }
    w.source = format!("TinyLlama 1.1B shapes, {model} as llama-quantize wrote it");
    w
}

fn opts_label(o: &PredictOptions) -> &'static str {
    match o.backend {
        Backend::Vulkan { device: DeviceSource::Profile(_), .. } => "--device h200-nvidia",
        _ => "--device TRACE",
    }
}

fn h200_options(device: DeviceSource, dir: &Path, weights: ModelWeights, prompt: u64, decode: u64) -> PredictOptions {
    let library = Some(llama_bin().join("libggml-vulkan.so"));
    let mut o = PredictOptions::new(
        Backend::Vulkan { device, library },
        WeightSource::Weights(weights),
        Batch::PromptTokens(prompt),
    );
    o.decode_tokens = Some(decode);
    o.flash_attn = FlashAttn::Auto;
    o.observed = Some(ObservedSource::TraceDir(dir.to_path_buf()));
    o
}

/// The H200 cases of the validation, F16, Q4_K_M and Q8_0 at 1, 8, 9, 64 and 512 prompt tokens and a 16-token
/// decode, every layer offloaded: with the h200-nvidia profile (132 SMs) and with the traced device, every prediction
/// is confirmed by the pipelines the layer saw and none is unexplained; at 64 and 512 tokens ggml split K (the traces
/// hold split_k_reduce dispatches) and the split is predicted. The run's own ggml line says what the build and the
/// card gave it (`int dot: 1 | matrix cores: NV_coopmat2`): the matrix products run the coopmat2 pipelines, the
/// few-column ones of Q4_K_M the integer-dot MMVQ pipelines (`quantize_q8_1_x4` first), and flash attention the
/// coopmat2 one, each Confirmed.
#[test]
fn h200_vulkan_traces_confirm_every_prediction_with_the_h200_profile() {
    let devices = std::fs::read_to_string(h200_evidence().join("devices.txt")).unwrap();
    let line = devices.lines().find(|l| l.contains("ggml_vulkan: 0 = ")).expect("the H200 run's ggml line");
    assert!(line.contains("NVIDIA H200") && line.contains("int dot: 1") && line.contains("matrix cores: NV_coopmat2"));
    assert!(line.contains("shared memory: 49152"), "{line}");
    let tmp = tempfile::tempdir().unwrap();
    let mut families = std::collections::BTreeSet::new();
    for model in ["f16", "q4km", "q8"] {
        let weights = if model == "f16" { tinyllama_f16() } else { tinyllama_quantized(model) };
        for (case, prompt, decode) in
            [("p1", 1, 0), ("p8", 8, 0), ("p9", 9, 0), ("p64", 64, 0), ("p512", 512, 0), ("tg16", 0, 16)]
        {
            let name = format!("tl-{model}-ngl-99-{case}");
            let dir = h200_trace(tmp.path(), &name);
            let ran_split = std::fs::read_to_string(dir.join("trace-1.jsonl")).unwrap().contains("\"split_k_reduce\"");
            assert_eq!(ran_split, prompt >= 64, "{name}: the trace's own split_k_reduce dispatches");
            for device in [DeviceSource::Profile("h200-nvidia".into()), DeviceSource::TraceDir(dir.clone())] {
                let traced = matches!(device, DeviceSource::TraceDir(_));
                let opts = h200_options(device, &dir, weights.clone(), prompt, decode);
                let r = serde_json::to_value(backscope::commands::predict::vulkan::run(&opts).unwrap()).unwrap();
                assert_all_confirmed(&r, &name);
                eprintln!("{name} ({}): {} confirmed", opts_label(&opts), r["comparison"]["confirmed"]);
                assert_eq!(r["device"]["profile"], "h200-nvidia", "{name}");
                let from = r["device"]["shader_core_count_from"].as_str().unwrap();
                assert!(
                    if traced { from.starts_with("the layer's device record") } else { from == "profile h200-nvidia" },
                    "{name}: {from}"
                );
                let items = verdicts(&r);
                let split_items: Vec<_> = items.iter().filter(|(_, w, _)| w.starts_with("helper split_k")).collect();
                assert_eq!(!split_items.is_empty(), ran_split, "{name}: {split_items:?}");
                assert!(split_items.iter().all(|(_, w, _)| w == "helper split_k_reduce"), "{name}: {split_items:?}");
                families.extend(items.iter().map(|(_, w, _)| w.split(' ').next().unwrap().to_string()));
            }
        }
    }
    for family in ["MMVQ", "MM-coopmat2", "FA-coopmat2"] {
        assert!(families.contains(family), "no {family} item confirmed: {families:?}");
    }
}

/// The same card with coopmat2 turned off by ggml's own switch (`GGML_VK_DISABLE_COOPMAT2=1`, which the layer's
/// device record carries): ggml's line says `matrix cores: KHR_coopmat`, and the predictions from the traced device,
/// which honour the switch, are all confirmed by the KHR cooperative-matrix (coopmat1) pipelines it ran.
#[test]
fn h200_traces_with_coopmat2_switched_off_confirm_the_coopmat1_predictions() {
    let summary = std::fs::read_to_string(h200_evidence().join("summary.txt")).unwrap();
    let cm1_line = summary.lines().find(|l| l.contains("cm1-tl-q4km-ngl-99-p512:")).expect("the cm1 run's line");
    assert!(cm1_line.contains("int dot: 1 | matrix cores: KHR_coopmat"), "{cm1_line}");
    let tmp = tempfile::tempdir().unwrap();
    for model in ["f16", "q4km", "q8"] {
        let weights = if model == "f16" { tinyllama_f16() } else { tinyllama_quantized(model) };
        for (case, prompt) in [("p8", 8), ("p64", 64), ("p512", 512)] {
            let name = format!("cm1-tl-{model}-ngl-99-{case}");
            let dir = h200_trace(tmp.path(), &name);
            let opts = h200_options(DeviceSource::TraceDir(dir.clone()), &dir, weights.clone(), prompt, 0);
            let r = serde_json::to_value(backscope::commands::predict::vulkan::run(&opts).unwrap()).unwrap();
            assert_all_confirmed(&r, &name);
            assert_eq!(r["device"]["ggml_switches"], serde_json::json!(["GGML_VK_DISABLE_COOPMAT2"]), "{name}");
            assert_eq!(
                (r["device"]["facts"]["coopmat2"].as_bool(), r["device"]["facts"]["coopmat"].as_bool()),
                (Some(false), Some(true))
            );
            let items = verdicts(&r);
            let fa = if prompt > 1 { "FA-coopmat" } else { "FA" };
            assert!(items.iter().any(|(_, w, _)| w == fa), "{name}: {items:?}");
            if prompt >= 64 {
                assert!(items.iter().any(|(_, w, _)| w.starts_with("MM-coopmat ")), "{name}: {items:?}");
            }
        }
    }
}

/// A device no profile matches, traced by a layer that did not record the shader core count (the H200 traces with
/// the device renamed and the count taken out of the record, as earlier layers wrote it): whether ggml splits K, and
/// which coopmat2 tile it takes, is undecided, so the split_k_reduce the trace holds is neither unexplained nor a
/// contradiction, and the item says why; the other predictions stay confirmed.
#[test]
fn without_a_profile_or_a_recorded_core_count_split_k_is_undecided_not_contradicted() {
    let tmp = tempfile::tempdir().unwrap();
    for (model, prompt) in [("f16", 64), ("q4km", 512), ("q8", 64)] {
        let name = format!("tl-{model}-ngl-99-p{prompt}");
        let dir = h200_trace(tmp.path(), &name);
        let file = dir.join("trace-1.jsonl");
        let text = std::fs::read_to_string(&file).unwrap();
        let count = r#","shader_core_count":132,"shader_core_count_from":"VK_NV_shader_sm_builtins""#;
        assert!(text.contains("\"name\":\"NVIDIA H200\"") && text.contains(count), "{name}");
        std::fs::write(&file, text.replace("\"NVIDIA H200\"", "\"NVIDIA Hopper (unprofiled)\"").replace(count, ""))
            .unwrap();
        let weights = if model == "f16" { tinyllama_f16() } else { tinyllama_quantized(model) };
        let opts = h200_options(DeviceSource::TraceDir(dir.clone()), &dir, weights, prompt, 0);
        let r = serde_json::to_value(backscope::commands::predict::vulkan::run(&opts).unwrap()).unwrap();
        let c = &r["comparison"];
        assert_eq!(r["device"]["profile"], Value::Null, "{name}");
        assert_eq!(c["contradicted"], 0, "{name}: {c}");
        assert_eq!(c["unexplained"].as_array().unwrap().len(), 0, "{name}");
        let assumed = r["device"]["assumed"].to_string();
        assert!(assumed.contains("shader_core_count = 0"), "{assumed}");
        let items = verdicts(&r);
        let open: Vec<_> = items.iter().filter(|(_, _, v)| v != "Confirmed").collect();
        assert!(!open.is_empty(), "{name}: the split is not confirmed without the count");
        for (_, what, verdict) in &open {
            assert!(what.starts_with("helper split_k_reduce (undecided: depends on the shader core count"), "{what}");
            assert_eq!(verdict, "Unobserved", "{name}: {what}");
        }
        let claim =
            r["claims"].as_array().unwrap().iter().find(|c| {
                c["statement"].as_str().unwrap().contains("left undecided") && c["confidence"] == "Unresolved"
            });
        assert!(claim.is_some(), "{name}: an Unresolved claim for the split");
    }
}

/// The wrong device against the H200 traces: the gfx900 (GCN, wave64, RADV) profile predicts the Q4_K_M model's
/// K-quant mat-vec shaders by its subgroup of 64 and is contradicted.
#[test]
fn gfx900_profile_is_contradicted_by_the_h200_q4_k_m_traces() {
    let weights = tinyllama_quantized("q4km");
    let tmp = tempfile::tempdir().unwrap();
    for (case, prompt, decode) in [("p1", 1, 0), ("p8", 8, 0), ("p64", 64, 0), ("tg16", 0, 16)] {
        let dir = h200_trace(tmp.path(), &format!("tl-q4km-ngl-99-{case}"));
        let opts = h200_options(DeviceSource::Profile("gfx900-radv".into()), &dir, weights.clone(), prompt, decode);
        let r = serde_json::to_value(backscope::commands::predict::vulkan::run(&opts).unwrap()).unwrap();
        assert!(r["comparison"]["contradicted"].as_u64().unwrap() > 0, "{case}: {:?}", verdicts(&r));
        assert_eq!(r["device_decisions"][0]["value"], "AMD_GCN");
    }
}

/// F16 and Q8_0 mat-vec on gfx900 and on the H200: ggml names the pipelines of both workgroup sizes
/// `mul_mat_vec_<type>_f32_f32`, and picks the size by vendor and shape (ggml-vulkan.cpp:5576-5590: on NVIDIA past
/// Turing and Intel, four subgroups for M <= 8192 with K >= 1024, else one), the shader's reduction by workgroup size
/// and subgroup arithmetic (2899, 2923-2929: one subgroup -> SUBGROUP `_subgroup_no_shmem`, four -> HYBRID
/// `_subgroup`), the workgroup's width by the subgroup size (2918-2919). So for TinyLlama's 2048-wide weights the H200
/// profile predicts `_subgroup` and, for the 32000-row head, `_subgroup_no_shmem`, and gfx900 (AMD, wave64)
/// `_subgroup_no_shmem` for every weight. The expected shaders are the cited lines read by hand; the traces'
/// shaders (the layer's SPIR-V hashes matched against the library's embedded shaders) decide: the H200 profile is
/// confirmed with nothing unexplained, gfx900 is contradicted by the `_subgroup` shader it never picks.
#[test]
fn f16_and_q8_0_mat_vec_tell_gfx900_from_the_h200_by_their_shaders() {
    let tmp = tempfile::tempdir().unwrap();
    for model in ["f16", "q8"] {
        let weights = if model == "f16" { tinyllama_f16() } else { tinyllama_quantized(model) };
        let ty = if model == "f16" { "f16" } else { "q8_0" };
        let name = format!("mul_mat_vec_{ty}_f32_f32");
        // Q8_0 at 8 columns takes the integer-dot MMVQ pipelines (ggml-vulkan.cpp:6568-6571), not these.
        let cases: &[(&str, u64, u64)] = if model == "f16" {
            &[("p1", 1, 0), ("p8", 8, 0), ("tg16", 0, 16)]
        } else {
            &[("p1", 1, 0), ("tg16", 0, 16)]
        };
        for &(case, prompt, decode) in cases {
            let dir = h200_trace(tmp.path(), &format!("tl-{model}-ngl-99-{case}"));
            let shaders = |r: &Value| -> Vec<(String, String)> {
                let mut v: Vec<(String, String)> = r["phases"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .flat_map(|p| p["weights"].as_array().unwrap())
                    .filter(|g| g["pipeline"] == name.as_str())
                    .map(|g| {
                        (g["examples"][0].as_str().unwrap().to_string(), g["shader"].as_str().unwrap().to_string())
                    })
                    .collect();
                v.sort();
                v.dedup();
                v
            };
            let run = |profile: &str| {
                let opts = h200_options(DeviceSource::Profile(profile.into()), &dir, weights.clone(), prompt, decode);
                serde_json::to_value(backscope::commands::predict::vulkan::run(&opts).unwrap()).unwrap()
            };
            let (h200, gfx900) = (run("h200-nvidia"), run("gfx900-radv"));
            let what = format!("{model} {case}");
            let hybrid = format!("{name}_subgroup");
            let subgroup = format!("{name}_subgroup_no_shmem");
            let h = shaders(&h200);
            assert!(h.iter().any(|(w, s)| w.starts_with("blk.") && *s == hybrid), "{what}: {h:?}");
            assert!(h.iter().any(|(w, s)| w == "output.weight" && *s == subgroup), "{what}: {h:?}");
            assert!(h.iter().filter(|(w, _)| w.starts_with("blk.")).all(|(_, s)| *s == hybrid), "{what}: {h:?}");
            let g = shaders(&gfx900);
            assert!(!g.is_empty() && g.iter().all(|(_, s)| *s == subgroup), "{what}: {g:?}");
            assert_all_confirmed(&h200, &what);
            let c = &gfx900["comparison"];
            assert!(c["contradicted"].as_u64().unwrap() > 0, "{what}: {c}");
            let unexplained: Vec<&str> =
                c["unexplained"].as_array().unwrap().iter().map(|u| u["name"].as_str().unwrap()).collect();
            assert!(unexplained.contains(&name.as_str()), "{what}: {unexplained:?}");
            let claim = gfx900["claims"].as_array().unwrap().iter().any(|c| {
                c["id"] == "compare.vulkan.unexplained.MMV"
                    && c["statement"].as_str().unwrap().contains(&format!("whose shader(s) {hybrid} no prediction"))
            });
            assert!(claim, "{what}: the claim names the shader gfx900 never picks");
        }
    }
}
