//! `predict --backend vulkan`: which ggml-vulkan pipeline each weight's matmul runs, per phase of a request, on
//! a device (a profile of `data/vulkan_devices.toml`, or the device a trace's Vulkan layer recorded) with a
//! build (the shaders its `libggml-vulkan.so` embeds), from the rules in `data/ggml_vulkan_11434.toml`; and,
//! given the layer's observed pipelines, whether they confirm or contradict each prediction
//! ([`super::compare::vulkan`]).
//!
//! The phases are the CUDA prediction's ([`super::phases::plan`]): prefill ubatches, the last layer's rows after the gather,
//! decode.

mod device;
pub mod prediction;
mod render;
pub mod verify;
pub mod verifying_build;

use std::collections::HashMap;
use std::path::PathBuf;

use anyhow::{bail, Result};

use super::compare::vulkan as vkcompare;
use super::model::{self, MatmulOp};
use super::options::{Batch, FlashAttn, ObservedSource, PromptFromRun, WeightSource, DEFAULT_UBATCH};
use super::phases::{plan, PhasePlan, WeightSet};
use super::placement::{GpuBackend, Offload, Placed, PlacementOptions, Where};
use super::prediction::{ModelSummary, TokensInfo};
use crate::evidence::{Claim, Confidence, Source};
use crate::gpu::knowledge::vulkan_dispatch::{
    self as vkd, Fact, Facts, VkMatmulPrediction, VkMatmulQuery, VulkanRules,
};
use crate::observe::vulkan::dispatch_record::{self, DispatchRecord};
use device::{build_info, device_facts};
pub use prediction::{
    decision_source, prediction_text, DeviceSource, VkAttention, VkBuildInfo, VkDeviceInfo, VkPhase, VkWeightGroup,
    VulkanReport, SCHEMA,
};

/// Distinct matmul queries remembered (a real model has a few dozen; a hostile one may have 10^5).
const MAX_MEMO: usize = 4096;

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
    /// Which layers are offloaded and whether op offload is on (`--num-gpu`, `--no-op-offload`, or a record's own).
    pub placement: PlacementOptions,
    /// Where the prompt token count came from (`--run`: the record's).
    pub prompt_from_run: Option<PromptFromRun>,
    /// The ggml version whose Vulkan rules decide (`--ggml`; [`vkd::versions`] lists those there are).
    pub ggml: String,
    /// The build whose ggml made the observed choices, when `--verify` ran one (`verify::observe`).
    pub verified_with: Option<verifying_build::VerifyingBuild>,
    /// `--verify --against DIR`: the real run the impersonated one is held against.
    pub against: Option<DispatchRecord>,
}

impl VulkanOptions {
    /// Options with the command line's defaults: every layer offloaded, op offload on, F16 KV, flash attention auto.
    pub fn new(device: DeviceSource, weights: WeightSource, batch: Batch) -> Self {
        VulkanOptions {
            device,
            library: None,
            weights,
            batch,
            decode_tokens: None,
            ubatch: DEFAULT_UBATCH,
            kv_type: "F16".into(),
            flash_attn: FlashAttn::Auto,
            explain: false,
            observed: None,
            placement: PlacementOptions { backend: GpuBackend::Vulkan, ..PlacementOptions::default() },
            prompt_from_run: None,
            ggml: crate::gpu::knowledge::DEFAULT_GGML_VERSION.to_string(),
            verified_with: None,
            against: None,
        }
    }
}

/// One weight's query for the rules in a phase whose matmuls see `ne11` columns.
fn query(t: &model::WeightTensor, ne11: u64) -> VkMatmulQuery {
    VkMatmulQuery {
        weight_type: t.ggml_type.clone(),
        ne00: t.ne00.unwrap_or(4096),
        ne01: t.ne01.unwrap_or(4096),
        ne11,
        mul_mat_id: t.op == MatmulOp::MulMatId,
    }
}

/// The rules' prediction for a query, remembered across weights and phases.
fn predict_matmul(
    rules: &VulkanRules,
    memo: &mut HashMap<VkMatmulQuery, VkMatmulPrediction>,
    facts: &Facts,
    q: &VkMatmulQuery,
    explain: bool,
) -> Result<VkMatmulPrediction> {
    if let Some(pr) = memo.get(q) {
        return Ok(pr.clone());
    }
    let mut pr = rules.matmul(facts, q)?;
    if !explain {
        pr.path.retain(|d| matches!(d.table.as_str(), "path" | "quantize_y" | "tile_selector" | "aligned"));
    }
    // A model of many distinct shapes is evaluated shape by shape without keeping them all.
    if memo.len() < MAX_MEMO {
        memo.insert(q.clone(), pr.clone());
    }
    Ok(pr)
}

/// Adds one weight to the phase's groups: weights of one type, op, placement and prediction share a group.
fn add_to_groups(
    groups: &mut Vec<VkWeightGroup>,
    t: &model::WeightTensor,
    p: &PhasePlan,
    q: VkMatmulQuery,
    prediction: VkMatmulPrediction,
    placement: Placed,
) {
    let same = |g: &VkWeightGroup| {
        g.ggml_type == t.ggml_type && g.op == t.op && g.placement == placement && g.prediction == prediction
    };
    if let Some(g) = groups.iter_mut().find(|g| same(g)) {
        g.tensors += 1;
        g.nodes = g.nodes.saturating_add(p.repeat);
        if g.examples.len() < 4 {
            g.examples.push(t.name.clone());
        }
        return;
    }
    groups.push(VkWeightGroup {
        ggml_type: t.ggml_type.clone(),
        op: t.op,
        ne11: p.ne11,
        tensors: 1,
        examples: vec![t.name.clone()],
        nodes: p.repeat,
        placement,
        prediction,
        query: q,
    });
}

/// What the phases are predicted from besides the weights.
struct PhaseInputs<'a> {
    rules: &'a VulkanRules,
    facts: &'a Facts,
    offload: &'a Offload,
    decode: u64,
    flash_attn_used: bool,
    kv_type: &'a str,
    /// Query heads per KV head (1 without grouped-query attention, or when the heads are not known).
    gqa_ratio: u64,
}

/// The weights' and attention's predictions, phase by phase. A weight whose matmul runs on the CPU (placement)
/// keeps the pipeline the GPU would have run, which a trace must then not show for it.
fn predict_phases(opts: &VulkanOptions, inp: &PhaseInputs<'_>, weights: &model::ModelWeights) -> Result<Vec<VkPhase>> {
    let gathered = weights.tensors.iter().any(|t| t.after_gather);
    let mut memo: HashMap<VkMatmulQuery, VkMatmulPrediction> = HashMap::new();
    let mut phases = Vec::new();
    for p in plan(opts.batch, opts.ubatch, inp.decode, gathered) {
        let mut groups: Vec<VkWeightGroup> = Vec::new();
        // Attention has no weight: the scheduler runs it next to its layer's matmuls (attention-follows-matmuls).
        let mut layer_on_gpu = false;
        let members = weights.tensors.iter().filter(|t| match p.weights {
            WeightSet::All => true,
            WeightSet::BeforeGather => !t.after_gather,
            WeightSet::AfterGather => t.after_gather,
        });
        for t in members {
            let q = query(t, p.ne11);
            let prediction = predict_matmul(inp.rules, &mut memo, inp.facts, &q, opts.explain)?;
            let placed = inp.offload.runs_on(t, p.ne11);
            layer_on_gpu |= !t.head && placed.runs_on == Where::Gpu;
            add_to_groups(&mut groups, t, &p, q, prediction, placed);
        }
        let attention = match (inp.flash_attn_used && layer_on_gpu, p.kv_lens.first()) {
            (true, Some(&kv)) => {
                let (family, path) = inp.rules.attention(inp.facts, p.ne11, inp.kv_type, inp.gqa_ratio)?;
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

/// The weights a prediction is for.
fn load_weights(w: &WeightSource) -> Result<model::ModelWeights> {
    match w {
        WeightSource::Model(path) => model::from_gguf(path),
        WeightSource::Single { weight_type, n, k } => model::single(weight_type, n.or(Some(4096)), k.or(Some(4096))),
        WeightSource::Weights(w) => Ok(w.clone()),
        WeightSource::EachRecord => bail!("say which weights: --model M.gguf or --type T"),
    }
}

/// What the prediction assumes, in words.
fn assumptions(
    device: &VkDeviceInfo,
    build: &VkBuildInfo,
    offload: &Offload,
    weights: &model::ModelWeights,
    from_run: Option<&PromptFromRun>,
) -> Vec<String> {
    let switches = if device.ggml_switches.is_empty() {
        "no GGML_VK_* environment overrides".to_string()
    } else {
        format!("the GGML_VK_* switches the traced process set: {}", device.ggml_switches.join(", "))
    };
    let mut out = vec![
        format!("one sequence; weights contiguous; F32 activations; default matmul precision; {switches}"),
        "the device's tiles are enabled by the shared-memory test of the mmq warptiles (coopmat staging not counted)"
            .into(),
    ];
    out.extend(device.assumed.iter().map(|a| format!("device fact assumed: {a}")));
    out.push(format!("build: {}", build.note));
    out.push(offload.describe(weights.n_layer));
    if let Some(r) = from_run.filter(|r| r.includes_cache) {
        out.push(format!(
            "the prompt token count ({}) comes from run {} and includes prompt tokens served from the prompt cache; \
             only the uncached suffix is evaluated, so the real ubatches may be fewer and smaller",
            r.prompt_tokens, r.run_id
        ));
    }
    out
}

/// Predict, and compare with the observed pipelines when `opts.observed` is set.
pub fn run(opts: &VulkanOptions) -> Result<VulkanReport> {
    let rules = vkd::rules_for(&opts.ggml)?;
    let (mut device, dev_facts, libraries) = device_facts(&opts.device)?;
    let build = build_info(opts.library.as_deref(), libraries.first().map(std::path::Path::new))?;
    let device_only = dev_facts.clone();
    let mut facts = dev_facts;
    facts.extend(build.facts.clone());
    let (facts, decisions) = rules.device_decisions(facts)?;
    device.facts = facts.clone();
    super::check_count("--ubatch", opts.ubatch, false)?;
    let weights = load_weights(&opts.weights)?;
    let offload = Offload::new(&opts.placement, weights.n_layer)?;
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
    let kv_type = kv_type.to_string();
    let gqa_ratio = weights
        .attention
        .as_ref()
        .filter(|a| a.n_head_kv > 0 && a.n_head % a.n_head_kv == 0)
        .map_or(1, |a| a.n_head / a.n_head_kv);
    let inputs =
        PhaseInputs { rules, facts: &facts, offload: &offload, decode, flash_attn_used, kv_type: &kv_type, gqa_ratio };
    let phases = predict_phases(opts, &inputs, &weights)?;
    let mut report = VulkanReport {
        schema: SCHEMA,
        rules: rules.file.into(),
        rules_version: rules.version.clone(),
        assumptions: assumptions(&device, &build, &offload, &weights, opts.prompt_from_run.as_ref()),
        device,
        build,
        device_decisions: decisions,
        model: ModelSummary::of(&weights),
        tokens: TokensInfo::new(opts.batch, opts.ubatch, decode, opts.prompt_from_run.clone()),
        flash_attn_used,
        placement: offload,
        phases,
        comparison: None,
        against: None,
        claims: Vec::new(),
        explain: opts.explain,
    };
    report.claims = prediction_claims(&report);
    report.claims.extend(capability_gap(rules, &report, device_only)?);
    if let Some(by) = &opts.verified_with {
        report.assumptions.push(format!("verified with {}", by.origin));
        report.claims.extend(verifying_build::version_claim(&rules.version, &rules.name, rules.file, by));
    }
    if let Some(src) = &opts.observed {
        let observed = vkcompare::load(src, opts.library.as_deref())?;
        let cmp = vkcompare::compare(&report, &observed);
        report.claims.extend(cmp.claims.iter().cloned());
        report.comparison = Some(cmp);
    }
    if let (Some(real), Some(ObservedSource::TraceDir(dir))) = (&opts.against, &opts.observed) {
        let impersonated = DispatchRecord::read(dir)?;
        let cmp = dispatch_record::compare(real, &impersonated);
        report.claims.extend(cmp.claims("predict.vulkan.verify.against", "the real run", "the impersonated run"));
        report.against = Some(cmp);
    }
    Ok(report)
}

fn prediction_claims(r: &VulkanReport) -> Vec<Claim> {
    let on = format!("{} (ggml-vulkan {})", r.device.label, r.rules_version);
    let mut out = Vec::new();
    let arch = r.device_decisions.iter().find(|d| d.table == "architecture");
    for p in &r.phases {
        for g in &p.weights {
            let cpu = g.placement.runs_on == Where::Cpu;
            let what = match (g.placement.runs_on, g.placement.rule) {
                (Where::Cpu, rule) => format!(
                    "the CPU ({rule}: {}), so no Vulkan dispatch for them (on the device they would run {})",
                    super::placement::data().rule(rule).statement,
                    prediction_text(&g.prediction)
                ),
                (Where::Gpu, "op-offload") => format!(
                    "{}, on the device although they live in CPU memory (op-offload: ne11 >= {})",
                    prediction_text(&g.prediction),
                    r.placement.min_batch
                ),
                (Where::Gpu, _) => prediction_text(&g.prediction),
            };
            let statement = format!(
                "On {on}, {} (ne11 = {}): {} {} weight(s) of type {} -> {what}",
                p.label,
                g.ne11,
                g.tensors,
                if g.op == MatmulOp::MulMatId { "MUL_MAT_ID" } else { "MUL_MAT" },
                g.ggml_type,
            );
            let confidence =
                if g.prediction.undecided.is_some() && !cpu { Confidence::Unresolved } else { Confidence::Inferred };
            let family = if cpu { "CPU" } else { g.prediction.family.as_str() };
            let mut c = Claim::new(format!("predict.vulkan.{}.{}.{family}", p.id, g.ggml_type), confidence, statement);
            for d in arch.into_iter().chain(&g.prediction.path) {
                c = c.with_source(decision_source(d));
            }
            if g.placement.rule != "weight-on-gpu" || r.placement.n_gpu_layers.is_some() {
                c = c.with_source(super::placement::rule_source(g.placement.resident_rule));
                c = c.with_source(super::placement::rule_source(g.placement.rule));
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
fn capability_gap(rules: &VulkanRules, r: &VulkanReport, device_only: Facts) -> Result<Vec<Claim>> {
    let mut with_all = device_only;
    with_all.extend(vkd::build_facts(["matmul_q4_0_q8_1", "matmul_f16_cm1", "matmul_f16_cm2", "matmul_bf16_cm1"])?);
    let (full, _) = rules.device_decisions(with_all)?;
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
            let alt = rules.matmul(&full, &g.query)?;
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
        if let Some(row) = rules.build_flag.iter().find(|b| b.name == *flag) {
            c = c.with_source(Source::Rule {
                file: rules.file.into(),
                rule: format!("build_flag.{}", row.name),
                upstream: row.source.clone(),
            });
        }
    }
    Ok(vec![c])
}
