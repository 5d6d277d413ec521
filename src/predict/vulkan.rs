//! `predict --backend vulkan`: which ggml-vulkan pipeline each weight's matmul runs, per phase of a request, on
//! a device (a profile of `data/vulkan_devices.toml`, or the device a trace's Vulkan layer recorded) with a
//! build (the shaders its `libggml-vulkan.so` embeds), from the rules in `data/ggml_vulkan_11434.toml`; and,
//! given the layer's observed pipelines, whether they confirm or contradict each prediction
//! ([`super::compare::vulkan`]).
//!
//! The phases are the CUDA prediction's ([`super::plan`]): prefill ubatches, the last layer's rows after the gather,
//! decode.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context, Result};
use serde::Serialize;

use super::compare::vulkan::{self as vkcompare, VkComparison};
use super::WeightSource;
use super::{model, plan, Batch, FlashAttn, MatmulOp, ModelSummary, ObservedSource, TokensInfo, WeightSet};
use crate::evidence::{Claim, Confidence, Source};
use crate::knowledge::vulkan_dispatch::{
    self as vkd, build_facts, device_decisions, Decision, Fact, Facts, VkMatmulPrediction, VkMatmulQuery,
};
use crate::output::{Column, Document, Render, Table, Text};

pub const SCHEMA: &str = "backscope.predict-vulkan/1";

/// Distinct matmul queries remembered (a real model has a few dozen; a hostile one may have 10^5).
const MAX_MEMO: usize = 4096;

/// Largest libggml-vulkan.so read for its shader names (11434's is 29 MB).
const MAX_LIBRARY_BYTES: u64 = 1 << 30;

/// Where the device facts come from.
#[derive(Clone, Debug)]
pub enum DeviceSource {
    /// A profile id of data/vulkan_devices.toml.
    Profile(String),
    /// A trace directory whose Vulkan layer recorded the device.
    TraceDir(PathBuf),
}

impl DeviceSource {
    /// `--device`: an existing directory is a trace, anything else a profile id.
    pub fn parse(arg: &str) -> DeviceSource {
        let p = Path::new(arg);
        if p.is_dir() {
            DeviceSource::TraceDir(p.to_path_buf())
        } else {
            DeviceSource::Profile(arg.to_string())
        }
    }
}

/// Options of [`run`].
#[derive(Clone, Debug)]
pub struct VulkanOptions {
    pub device: DeviceSource,
    /// A libggml-vulkan.so whose embedded shaders tell the build's glslc support; default: the one the trace's
    /// pipelines came from.
    pub library: Option<PathBuf>,
    pub weights: WeightSource,
    pub batch: Batch,
    pub decode_tokens: Option<u64>,
    pub ubatch: u64,
    pub kv_type: String,
    pub flash_attn: FlashAttn,
    pub explain: bool,
    pub observed: Option<ObservedSource>,
}

/// The device as predicted for.
#[derive(Clone, Debug, Serialize)]
pub struct VkDeviceInfo {
    pub label: String,
    /// `profile ID` or `trace DIR`.
    pub from: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub profile: Option<String>,
    pub source: String,
    pub facts: Facts,
    /// Facts neither the trace nor a profile gave, at their assumed value.
    pub assumed: Vec<String>,
    /// Where `shader_core_count` (split-k reads it) came from: the layer's record, a profile, or not known.
    pub shader_core_count_from: String,
}

/// The build as predicted for.
#[derive(Clone, Debug, Serialize)]
pub struct VkBuildInfo {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub library: Option<String>,
    pub embedded_shaders: usize,
    pub facts: Facts,
    pub note: String,
}

#[derive(Clone, Debug, Serialize)]
pub struct VkWeightGroup {
    pub ggml_type: String,
    pub op: MatmulOp,
    pub ne11: u64,
    pub tensors: u64,
    pub examples: Vec<String>,
    /// Graph nodes over the phase (tensors × repeat).
    pub nodes: u64,
    #[serde(flatten)]
    pub prediction: VkMatmulPrediction,
    /// The first weight's query, for re-evaluating with another build.
    #[serde(skip)]
    pub query: VkMatmulQuery,
}

#[derive(Clone, Debug, Serialize)]
pub struct VkAttention {
    pub tokens: u64,
    pub kv_len: u64,
    pub family: String,
    pub path: Vec<Decision>,
}

#[derive(Clone, Debug, Serialize)]
pub struct VkPhase {
    pub id: String,
    pub label: String,
    pub ne11: u64,
    pub repeat: u64,
    pub weights: Vec<VkWeightGroup>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub attention: Option<VkAttention>,
}

/// Everything `predict --backend vulkan` says (`--json`: schema backscope.predict-vulkan/1).
#[derive(Clone, Debug, Serialize)]
pub struct VulkanReport {
    pub schema: &'static str,
    pub rules: String,
    pub rules_version: String,
    pub device: VkDeviceInfo,
    pub build: VkBuildInfo,
    /// The device tables' decisions (architecture, integer dot, coopmat, …).
    pub device_decisions: Vec<Decision>,
    pub model: ModelSummary,
    pub tokens: TokensInfo,
    pub flash_attn_used: bool,
    pub assumptions: Vec<String>,
    pub phases: Vec<VkPhase>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub comparison: Option<VkComparison>,
    pub claims: Vec<Claim>,
    /// Whether every table's decision was kept (`--explain`).
    pub explain: bool,
}

/// The Vulkan layer's device facts mapped onto the rules' names: the driver name as ggml's driver ids say it.
fn driver_id(driver: &str) -> &'static str {
    let d = driver.to_ascii_lowercase();
    if d.contains("radv") {
        "radv"
    } else if d.contains("amd open-source") || d.contains("amdvlk") {
        "amdvlk"
    } else if d.contains("amd proprietary") {
        "amd_proprietary"
    } else if d.contains("intel open-source") || d.contains("anv") {
        "anv"
    } else if d.contains("intel") {
        "intel_windows"
    } else if d.contains("nvidia") {
        "nvidia"
    } else if d.contains("llvmpipe") {
        "llvmpipe"
    } else if d.contains("imagination") {
        "imagination_proprietary"
    } else {
        "other"
    }
}

/// The facts a profile does not give and a trace record does not carry, with the value assumed.
const TRACE_ASSUMED: &[(&str, Fact)] = &[("shared_memory", Fact::Int(32768))];

/// ggml-vulkan's shader core count for a traced device: the layer's record (what the driver reported through the
/// extension ggml reads) over a profile; unknown in traces of layers that did not record it, unless a profile gives
/// it. Returns the count, whether it is known, and where it came from.
fn shader_core_count(
    d: &crate::trace_summary::DeviceSummary,
    profile: Option<&vkd::DeviceProfile>,
    profile_facts: &Facts,
) -> (i64, bool, String) {
    let from_profile = |p: &vkd::DeviceProfile| {
        let n = profile_facts.get("shader_core_count").and_then(Fact::as_int).unwrap_or(0);
        (n, true, format!("profile {}", p.id))
    };
    match (d.shader_core_count, d.shader_core_count_from.as_deref()) {
        (Some(n), Some(ext)) if ext != "none" => {
            (i64::from(n), true, format!("the layer's device record ({ext}, as ggml-vulkan.cpp:4226-4229 reads it)"))
        }
        // Neither extension offered: ggml's count is 0 (4232-4233), except on Intel, where it looks the device
        // id up (4230-4231, ggml_vk_intel_shader_core_count), which only a profile says.
        (Some(_), _) if d.vendor_id != INTEL_VENDOR_ID => (
            0,
            true,
            "the layer's device record (no VK_NV_shader_sm_builtins or VK_AMD_shader_core_properties2: ggml counts \
             0, ggml-vulkan.cpp:4232-4233)"
                .into(),
        ),
        _ => match profile {
            Some(p) => from_profile(p),
            None => (0, false, "not known: the trace's device record does not carry it and no profile matches".into()),
        },
    }
}

const INTEL_VENDOR_ID: u32 = 0x8086;

fn device_from_trace(dir: &Path) -> Result<(VkDeviceInfo, Facts, Vec<String>)> {
    let read = crate::trace::read_dir_folded(dir).with_context(|| format!("reading traces in {}", dir.display()))?;
    let devices = crate::trace_summary::DeviceSummary::of(&read.traces);
    let Some(d) = devices.first() else {
        bail!("{}: no Vulkan device record (trace with the Vulkan layer: backscope trace --vklayer …)", dir.display());
    };
    let libraries: Vec<String> =
        read.traces.iter().flat_map(|t| t.kernels.values()).filter_map(|k| k.spirv_object.clone()).fold(
            Vec::new(),
            |mut v, o| {
                if !v.contains(&o) {
                    v.push(o);
                }
                v
            },
        );
    let profile = vkd::profiles().iter().find(|p| d.name.contains(&p.match_name));
    let mut facts = match profile {
        Some(p) => p.facts()?,
        None => vkd::default_facts(),
    };
    let mut assumed = Vec::new();
    if profile.is_none() {
        for (k, v) in TRACE_ASSUMED {
            facts.insert(k.to_string(), v.clone());
            assumed.push(format!("{k} = {v}"));
        }
    }
    let (cores, cores_known, cores_from) = shader_core_count(d, profile, &facts);
    facts.insert("shader_core_count".into(), Fact::Int(cores));
    facts.insert("shader_core_count_known".into(), Fact::Bool(cores_known));
    if !cores_known {
        assumed.push(format!("shader_core_count = 0 ({}): whether ggml splits K is left undecided", cores_from));
    }
    let flag = |n: &str| d.flags.get(n).copied().unwrap_or(false);
    let int = |v: u32| Fact::Int(i64::from(v));
    for (k, v) in [
        ("vendor_id", int(d.vendor_id)),
        ("driver", Fact::Str(driver_id(&d.driver).into())),
        ("device_type", Fact::Str(d.device_type.clone())),
        ("subgroup_size", int(d.subgroup_size)),
        ("subgroup_min", int(d.subgroup_size_min)),
        ("subgroup_max", int(d.subgroup_size_max)),
        ("subgroup_size_control", Fact::Bool(flag("subgroup_size_control"))),
        ("subgroup_arithmetic", Fact::Bool(flag("subgroup_arithmetic"))),
        ("fp16_offered", Fact::Bool(flag("fp16"))),
        ("integer_dot_offered", Fact::Bool(d.integer_dot)),
        ("coopmat_offered", Fact::Bool(d.cooperative_matrix)),
        ("coopmat2_offered", Fact::Bool(flag("cooperative_matrix2"))),
    ] {
        facts.insert(k.to_string(), v);
    }
    if profile.is_none() {
        // Without a profile, the record's offers stand for their accelerated/fp16-accumulating variants.
        for (k, from) in [
            ("int_dot_accelerated", "integer_dot_offered"),
            ("coopmat_acc_f16_offered", "coopmat_offered"),
            ("coopmat_int_offered", "coopmat_offered"),
        ] {
            let v = facts.get(from).cloned().unwrap_or(Fact::Bool(false));
            assumed.push(format!("{k} = {v} (as {from})"));
            facts.insert(k.to_string(), v);
        }
    }
    let vendor = vkd::vendor_name(i64::from(d.vendor_id));
    facts.insert("vendor".into(), Fact::Str(vendor));
    let info = VkDeviceInfo {
        label: format!("{} ({})", d.name, d.driver_info),
        from: format!("trace {}", dir.display()),
        profile: profile.map(|p| p.id.clone()),
        source: match profile {
            Some(p) => format!(
                "the layer's device record in {}; other facts from profile {} ({})",
                dir.display(),
                p.id,
                p.source
            ),
            None => format!("the layer's device record in {}", dir.display()),
        },
        facts: BTreeMap::new(),
        assumed,
        shader_core_count_from: cores_from,
    };
    Ok((info, facts, libraries))
}

fn device_facts(src: &DeviceSource) -> Result<(VkDeviceInfo, Facts, Vec<String>)> {
    match src {
        DeviceSource::TraceDir(dir) => device_from_trace(dir),
        DeviceSource::Profile(id) => {
            let p = vkd::profile(id).ok_or_else(|| {
                let known: Vec<&str> = vkd::profiles().iter().map(|p| p.id.as_str()).collect();
                anyhow!(
                    "no Vulkan device profile `{id}` ({} knows {}); or give a trace directory",
                    vkd::DEVICES_FILE,
                    known.join(", ")
                )
            })?;
            let info = VkDeviceInfo {
                label: p.label.clone(),
                from: format!("profile {}", p.id),
                profile: Some(p.id.clone()),
                source: p.source.clone(),
                facts: BTreeMap::new(),
                assumed: Vec::new(),
                shader_core_count_from: format!("profile {}", p.id),
            };
            Ok((info, p.facts()?, Vec::new()))
        }
    }
}

/// The build facts from a library's embedded shader names; all set (a current glslc) when no library is known.
fn build_info(library: Option<&Path>) -> Result<VkBuildInfo> {
    let Some(lib) = library else {
        let facts = build_facts(["matmul_q4_0_q8_1", "matmul_f16_cm1", "matmul_f16_cm2", "matmul_bf16_cm1"])?;
        return Ok(VkBuildInfo {
            library: None,
            embedded_shaders: 0,
            facts,
            note:
                "no libggml-vulkan.so given (--vulkan-lib) or named by a trace: assumed a build whose glslc supports \
                   integer dot, coopmat, coopmat2 and bfloat16"
                    .into(),
        });
    };
    let bytes = crate::inputs::read_limited(lib, MAX_LIBRARY_BYTES).with_context(|| {
        format!(
            "reading the build's libggml-vulkan ({}) for its embedded shaders; name the library the traced program \
             loaded with --vulkan-lib",
            lib.display()
        )
    })?;
    let shaders = binfmt::spirv::embedded_shaders(&bytes).map_err(|e| anyhow!("{}: {e}", lib.display()))?;
    if shaders.is_empty() {
        bail!("{}: no embedded shader names (a stripped library): its glslc support cannot be read", lib.display());
    }
    let facts = build_facts(shaders.iter().map(|s| s.name))?;
    Ok(VkBuildInfo {
        library: Some(lib.display().to_string()),
        embedded_shaders: shaders.len(),
        facts,
        note: "from the shader names the library embeds (data/ggml_vulkan_11434.toml build_flag)".into(),
    })
}

/// The weights' and attention's predictions, phase by phase.
fn predict_phases(
    opts: &VulkanOptions,
    facts: &Facts,
    weights: &model::ModelWeights,
    decode: u64,
    flash_attn_used: bool,
    kv_type: &str,
) -> Result<Vec<VkPhase>> {
    let gathered = weights.tensors.iter().any(|t| t.after_gather);
    let mut memo: HashMap<VkMatmulQuery, VkMatmulPrediction> = HashMap::new();
    let mut phases = Vec::new();
    for p in plan(opts.batch, opts.ubatch, decode, gathered) {
        let mut groups: Vec<VkWeightGroup> = Vec::new();
        let members = weights.tensors.iter().filter(|t| match p.weights {
            WeightSet::All => true,
            WeightSet::BeforeGather => !t.after_gather,
            WeightSet::AfterGather => t.after_gather,
        });
        for t in members {
            let q = VkMatmulQuery {
                weight_type: t.ggml_type.clone(),
                ne00: t.ne00.unwrap_or(4096),
                ne01: t.ne01.unwrap_or(4096),
                ne11: p.ne11,
                mul_mat_id: t.op == MatmulOp::MulMatId,
            };
            let prediction = match memo.get(&q) {
                Some(pr) => pr.clone(),
                None => {
                    let mut pr = vkd::matmul(facts, &q)?;
                    if !opts.explain {
                        pr.path.retain(|d| {
                            matches!(d.table.as_str(), "path" | "quantize_y" | "tile_selector" | "aligned")
                        });
                    }
                    // A model of many distinct shapes is evaluated shape by shape without keeping them all.
                    if memo.len() < MAX_MEMO {
                        memo.insert(q.clone(), pr.clone());
                    }
                    pr
                }
            };
            let same = |g: &VkWeightGroup| g.ggml_type == t.ggml_type && g.op == t.op && g.prediction == prediction;
            if let Some(g) = groups.iter_mut().find(|g| same(g)) {
                g.tensors += 1;
                g.nodes = g.nodes.saturating_add(p.repeat);
                if g.examples.len() < 4 {
                    g.examples.push(t.name.clone());
                }
            } else {
                groups.push(VkWeightGroup {
                    ggml_type: t.ggml_type.clone(),
                    op: t.op,
                    ne11: p.ne11,
                    tensors: 1,
                    examples: vec![t.name.clone()],
                    nodes: p.repeat,
                    prediction,
                    query: q.clone(),
                });
            }
        }
        let attention = match (flash_attn_used, p.kv_lens.first()) {
            (true, Some(&kv)) => {
                let (family, path) = vkd::attention(facts, p.ne11, kv_type)?;
                Some(VkAttention { tokens: p.ne11, kv_len: kv, family, path })
            }
            _ => None,
        };
        phases.push(VkPhase {
            id: p.id.to_string(),
            label: p.label.clone(),
            ne11: p.ne11,
            repeat: p.repeat,
            weights: groups,
            attention,
        });
    }
    Ok(phases)
}

/// Predict, and compare with the observed pipelines when `opts.observed` is set.
pub fn run(opts: &VulkanOptions) -> Result<VulkanReport> {
    let (mut device, dev_facts, libraries) = device_facts(&opts.device)?;
    let library = opts.library.clone().or_else(|| libraries.first().map(PathBuf::from));
    let build = build_info(library.as_deref())?;
    let device_only = dev_facts.clone();
    let mut facts = dev_facts;
    facts.extend(build.facts.clone());
    let (facts, decisions) = device_decisions(facts)?;
    device.facts = facts.clone();
    super::check_count("--ubatch", opts.ubatch, false)?;
    let weights = match &opts.weights {
        WeightSource::Model(path) => model::from_gguf(path)?,
        WeightSource::Single { weight_type, n, k } => model::single(weight_type, n.or(Some(4096)), k.or(Some(4096)))?,
        WeightSource::Weights(w) => w.clone(),
        WeightSource::EachRecord => bail!("say which weights: --model M.gguf or --type T"),
    };
    let decode = opts.decode_tokens.unwrap_or(match opts.batch {
        Batch::PromptTokens(_) => 1,
        Batch::Ne11(_) => 0,
    });
    let flash_attn_used = match opts.flash_attn {
        FlashAttn::Off => false,
        // ggml-vulkan supports FLASH_ATTN_EXT for the usual head sizes and F16 KV on every device
        // (ggml_backend_vk_device_supports_op), so auto turns it on.
        FlashAttn::On | FlashAttn::Auto => weights.attention.is_some(),
    };
    let (kv_type, _, _) = model::type_facts(&opts.kv_type)?;
    let phases = predict_phases(opts, &facts, &weights, decode, flash_attn_used, &kv_type.to_string())?;
    let mut assumptions = vec![
        "one sequence; weights contiguous; F32 activations; default matmul precision; no GGML_VK_* environment overrides".to_string(),
        "the device's tiles are enabled by the shared-memory test of the mmq warptiles (coopmat staging not counted)".into(),
    ];
    assumptions.extend(device.assumed.iter().map(|a| format!("device fact assumed: {a}")));
    assumptions.push(format!("build: {}", build.note));
    let mut report = VulkanReport {
        schema: SCHEMA,
        rules: vkd::RULES_FILE.into(),
        rules_version: vkd::rules().version.clone(),
        device,
        build,
        device_decisions: decisions,
        model: ModelSummary::of(&weights),
        tokens: TokensInfo::new(opts.batch, opts.ubatch, decode, None),
        flash_attn_used,
        assumptions,
        phases,
        comparison: None,
        claims: Vec::new(),
        explain: opts.explain,
    };
    report.claims = prediction_claims(&report);
    report.claims.extend(capability_gap(&report, device_only)?);
    if let Some(src) = &opts.observed {
        let observed = vkcompare::load(src, opts.library.as_deref())?;
        let cmp = vkcompare::compare(&report, &observed);
        report.claims.extend(cmp.claims.iter().cloned());
        report.comparison = Some(cmp);
    }
    Ok(report)
}

/// The evidence source of a decision.
pub fn decision_source(d: &Decision) -> Source {
    Source::Rule { file: vkd::RULES_FILE.into(), rule: format!("{}.{}", d.table, d.rule), upstream: d.source.clone() }
}

/// What a prediction reads as: the pipeline name, else the family.
pub fn prediction_text(p: &VkMatmulPrediction) -> String {
    let mut s = match &p.pipeline {
        Some(name) => format!("{} `{name}`", p.family),
        None => format!("{} ({})", p.family, p.tile.as_deref().unwrap_or("pipeline name not composed")),
    };
    if let Some(sh) = &p.shader {
        s += &format!(", shader {sh}");
    }
    if !p.helpers.is_empty() {
        s += &format!(" + {}", p.helpers.join(" + "));
    }
    if p.split_k_undecided.is_some() {
        s += " + split_k_reduce if ggml splits K (undecided)";
    }
    if p.dispatches_per_node > 1 {
        s += &format!(", {} dispatches per node (one per token)", p.dispatches_per_node);
    }
    s
}

fn prediction_claims(r: &VulkanReport) -> Vec<Claim> {
    let on = format!("{} (ggml-vulkan {})", r.device.label, r.rules_version);
    let mut out = Vec::new();
    let arch = r.device_decisions.iter().find(|d| d.table == "architecture");
    for p in &r.phases {
        for g in &p.weights {
            let statement = format!(
                "On {on}, {} (ne11 = {}): {} {} weight(s) of type {} -> {}",
                p.label,
                g.ne11,
                g.tensors,
                if g.op == MatmulOp::MulMatId { "MUL_MAT_ID" } else { "MUL_MAT" },
                g.ggml_type,
                prediction_text(&g.prediction)
            );
            let confidence =
                if g.prediction.undecided.is_some() { Confidence::Unresolved } else { Confidence::Inferred };
            let mut c = Claim::new(
                format!("predict.vulkan.{}.{}.{}", p.id, g.ggml_type, g.prediction.family),
                confidence,
                statement,
            );
            for d in arch.into_iter().chain(&g.prediction.path) {
                c = c.with_source(decision_source(d));
            }
            out.push(c);
        }
    }
    out
}

/// The build flags that gate a device capability: (capability fact, build fact, define, what it is).
const GATED: &[(&str, &str, &str, &str)] = &[
    ("integer_dot", "glslc_integer_dot", "GGML_VULKAN_INTEGER_DOT_GLSLC_SUPPORT", "integer dot product"),
    ("coopmat", "glslc_coopmat", "GGML_VULKAN_COOPMAT_GLSLC_SUPPORT", "cooperative matrix (KHR)"),
    ("coopmat2", "glslc_coopmat2", "GGML_VULKAN_COOPMAT2_GLSLC_SUPPORT", "cooperative matrix 2 (NV)"),
];

/// Device offers X, build lacks Y: what ggml would pick with a build whose glslc had Y, as an Inferred claim.
fn capability_gap(r: &VulkanReport, device_only: Facts) -> Result<Vec<Claim>> {
    let mut with_all = device_only;
    with_all.extend(vkd::build_facts(["matmul_q4_0_q8_1", "matmul_f16_cm1", "matmul_f16_cm2", "matmul_bf16_cm1"])?);
    let (full, _) = device_decisions(with_all)?;
    let lacking: Vec<&(&str, &str, &str, &str)> = GATED
        .iter()
        .filter(|(cap, flag, _, _)| {
            full.get(*cap) == Some(&Fact::Bool(true)) && r.build.facts.get(*flag) == Some(&Fact::Bool(false))
        })
        .collect();
    if lacking.is_empty() {
        return Ok(Vec::new());
    }
    let mut changes = Vec::new();
    for p in &r.phases {
        for g in &p.weights {
            let alt = vkd::matmul(&full, &g.query)?;
            if alt.family != g.prediction.family || alt.pipeline != g.prediction.pipeline {
                let line = format!(
                    "{} {}: {} instead of {}",
                    p.id,
                    g.ggml_type,
                    prediction_text(&alt),
                    prediction_text(&g.prediction)
                );
                if !changes.contains(&line) && changes.len() < 8 {
                    changes.push(line);
                }
            }
        }
    }
    let statement = format!(
        "{} offers {}, which this build cannot use: its glslc lacked {} (no such shaders embedded{}). With them ggml \
         would pick: {}",
        r.device.label,
        lacking.iter().map(|l| l.3).collect::<Vec<_>>().join(", "),
        lacking.iter().map(|l| l.2).collect::<Vec<_>>().join(", "),
        r.build.library.as_deref().map(|l| format!(" in {l}")).unwrap_or_default(),
        if changes.is_empty() {
            "the same pipelines for this model and these phases".to_string()
        } else {
            changes.join("; ")
        }
    );
    let mut c = Claim::new("predict.vulkan.capability-gap", Confidence::Inferred, statement);
    for (_, flag, _, _) in &lacking {
        if let Some(row) = vkd::rules().build_flag.iter().find(|b| b.name == *flag) {
            c = c.with_source(Source::Rule {
                file: vkd::RULES_FILE.into(),
                rule: format!("build_flag.{}", row.name),
                upstream: row.source.clone(),
            });
        }
    }
    Ok(vec![c])
}

/// Each table's decision: its value, the rule, what the rule read, and the cited lines.
fn decision_table(path: &[Decision]) -> Table {
    let mut t = Table::new(vec![
        Column::keep("table"),
        Column::keep("value"),
        Column::keep("rule"),
        Column::text("inputs"),
        Column::text("source"),
    ]);
    for d in path {
        t.row([d.table.clone(), d.value.to_string(), d.rule.clone(), d.inputs.clone(), d.source.clone()]);
    }
    t
}

impl Render for VulkanReport {
    fn write_json(&self, out: &mut dyn std::io::Write) -> std::io::Result<()> {
        serde_json::to_writer(&mut *out, self)?;
        writeln!(out)
    }

    fn document(&self) -> Document {
        let mut doc = Document::new(format!(
            "backscope predict --backend vulkan: {} on {}",
            self.model.source, self.device.label
        ));
        if let Some(c) = &self.comparison {
            doc.paragraph(Text::plain(format!(
                "Prediction vs observation ({}): {} confirmed, {} contradicted, {} unobserved, {} unexplained pipeline(s)",
                c.observed.path,
                c.confirmed,
                c.contradicted,
                c.unobserved,
                c.unexplained.len()
            )));
        }
        let mut dev = Table::new(vec![
            Column::keep("device table"),
            Column::keep("value"),
            Column::text("rule"),
            Column::text("source"),
        ]);
        for d in &self.device_decisions {
            dev.row([d.table.clone(), d.value.to_string(), d.rule.clone(), d.source.clone()]);
        }
        doc.heading(2, format!("Device: {} ({})", self.device.label, self.device.from));
        doc.push(dev);
        for p in &self.phases {
            doc.heading(2, format!("{} (ne11 = {}, ×{})", p.label, p.ne11, p.repeat));
            let mut t = Table::new(vec![
                Column::keep("type"),
                Column::keep("op"),
                Column::keep("weights"),
                Column::text("pipeline"),
                Column::text("variant"),
            ]);
            for g in &p.weights {
                let pr = &g.prediction;
                let variant = [
                    pr.tile.clone().map(|t| format!("tile {t}")),
                    pr.aligned.then(|| "aligned".to_string()),
                    pr.f16acc.then(|| "f16 acc".to_string()),
                    (pr.split_k > 1).then(|| format!("split-k {}", pr.split_k)),
                    pr.undecided.clone(),
                ]
                .into_iter()
                .flatten()
                .collect::<Vec<_>>()
                .join(", ");
                t.row([g.ggml_type.clone(), pr.op.clone(), g.tensors.to_string(), prediction_text(pr), variant]);
            }
            doc.push(t);
            if self.explain {
                for g in &p.weights {
                    doc.paragraph(Text::plain(format!("{} {}: decision path", g.ggml_type, g.prediction.op)));
                    doc.push(decision_table(&g.prediction.path));
                }
            }
            if let Some(a) = &p.attention {
                doc.paragraph(Text::plain(format!(
                    "flash attention: {} ({} query rows, KV {})",
                    a.family, a.tokens, a.kv_len
                )));
            }
        }
        if let Some(c) = &self.comparison {
            vkcompare::document(c, &mut doc);
        }
        doc.heading(2, "Assumptions");
        for a in &self.assumptions {
            doc.paragraph(Text::plain(format!("- {a}")));
        }
        doc.claims(&self.claims);
        doc
    }
}
