//! Vulkan predictions against the pipelines the Vulkan layer observed (a trace directory, a `backscope trace
//! --json` summary, or a sweep record's trace).
//!
//! A pipeline's debug name (ggml-vulkan names every pipeline with `GGML_VK_DEBUG_MARKERS`, which `backscope trace`
//! sets; without it the layer's SPIR-V hash names the embedded shader) carries what the rules decide: the path
//! (`mul_mat_vec_*` or `matmul_*`), integer dot (`_q8_1`), f16 accumulation (`_f16acc`), alignment (`_aligned`) and
//! the index of the tile among the enabled ones; the shader behind it carries the mat-vec reduction variant. So:
//!
//! - **Confirmed**: the predicted pipeline name was dispatched (and, where the trace knows the shader behind it,
//!   with the predicted shader); where the name is not composed (coopmat paths), a pipeline of the predicted family
//!   and op ran. Helper dispatches (q8_1 quantization, split-k reduce) are items of their own.
//! - **Contradicted**: not dispatched, while a matmul pipeline of the same op that no prediction accounts for was.
//! - **Unobserved**: neither.
//!
//! Run level: every matmul, matmul-helper or flash-attention pipeline no prediction accounts for is listed as
//! unexplained (a contradiction); where the trace knows the shaders behind a pipeline name, each of them must be
//! one a prediction names (ggml gives the mat-vec pipelines of both workgroup sizes one debug name, and only their
//! shaders tell the reduction variant apart). A trace of a whole llama-bench run mixes its phases, so a pipeline is
//! explained when any phase predicts it.
//!
//! Placement: weights whose matmuls run on the CPU predict no dispatch; their pipeline must not run unless GPU-run
//! weights account for it. Where the observation is one request (a sweep record's trace window), the dispatches
//! per pipeline are counted too: the nodes of the GPU-run weights over the request's phases, against the
//! dispatches the layer saw. That is what tells a partial offload from another (the same pipelines, fewer of them).

use super::super::model::MatmulOp;
use super::super::observed::{ObservedKernel, VkObservation};
use super::super::placement::Where;
use super::super::verdict::Verdict;
use super::prediction::{
    decision_source, prediction_text, VkComparison, VkCount, VkItem, VkPhase, VkWeightGroup, VulkanReport,
};
use crate::evidence::{Claim, Confidence, Source};

/// Families whose pipelines the prediction must account for.
const MATMUL_FAMILIES: &[&str] =
    &["MMV", "MMVQ", "MM", "MMQ", "MM-coopmat", "MM-coopmat2", "MM-support", "quantize", "dequantize"];
const FA_FAMILIES: &[&str] = &["FA", "FA-coopmat", "FA-coopmat2", "FA-support"];

/// What a prediction expects to see dispatched.
struct Expect<'a> {
    /// An exact pipeline name, or none (family + op).
    pipeline: Option<&'a str>,
    family: &'a str,
    op: &'a str,
    shader: Option<&'a str>,
}

impl<'a> Expect<'a> {
    fn helper(name: &'a str) -> Self {
        Expect { pipeline: Some(name), family: "", op: "", shader: None }
    }

    /// A weight group's main pipeline.
    fn main(g: &'a VkWeightGroup) -> Self {
        let pr = &g.prediction;
        let op = if g.op == MatmulOp::MulMatId { "MUL_MAT_ID" } else { pr.op.as_str() };
        Expect { pipeline: pr.pipeline.as_deref(), family: &pr.family, op, shader: pr.shader.as_deref() }
    }
}

fn hit(o: &ObservedKernel, e: &Expect<'_>) -> bool {
    if o.launches == 0 {
        return false;
    }
    match e.pipeline {
        Some(name) => o.name == name,
        None => o.family == e.family && o.op.as_deref() == Some(e.op),
    }
}

fn on_gpu(g: &VkWeightGroup) -> bool {
    g.placement.runs_on == Where::Gpu
}

/// The dispatches the GPU-run weights of every phase account for.
fn expects(r: &VulkanReport) -> Vec<Expect<'_>> {
    let mut out = Vec::new();
    for g in r.phases.iter().flat_map(|p| &p.weights).filter(|g| on_gpu(g)) {
        let pr = &g.prediction;
        out.push(Expect::main(g));
        out.extend(pr.helpers.iter().map(|h| Expect::helper(h)));
        // An undecided split accounts for a split-k reduce either way.
        if pr.split_k_undecided.is_some() {
            out.push(Expect::helper(SPLIT_K_REDUCE));
        }
    }
    out
}

const SPLIT_K_REDUCE: &str = "split_k_reduce";

/// Whether a pipeline some prediction (or the flash attention one) accounts for. Where the trace knows the shaders
/// behind the name, each must be one a hitting prediction names (or one that names none).
fn explained(r: &VulkanReport, all: &[Expect<'_>], o: &ObservedKernel) -> bool {
    let hits: Vec<&Expect<'_>> = all.iter().filter(|e| hit(o, e)).collect();
    if !hits.is_empty() {
        return hits.iter().any(|e| e.shader.is_none())
            || o.shaders.iter().all(|s| hits.iter().any(|e| e.shader == Some(s.as_str())));
    }
    if FA_FAMILIES.contains(&o.family.as_str()) {
        let fa: Vec<&str> = r.phases.iter().filter_map(|p| p.attention.as_ref()).map(|a| a.family.as_str()).collect();
        return o.family == "FA-support" && !fa.is_empty() || fa.contains(&o.family.as_str());
    }
    // Without flash attention the KQ and KQV products are F16/F32 matmuls against the KV cache, not modelled here.
    !r.flash_attn_used
        && (o.name.starts_with("mul_mat_vec_nc") || o.name.starts_with("mul_mat_vec_p021") || o.name.contains("f16"))
}

/// The shaders of an observed pipeline that no prediction hitting it names.
fn unpredicted_shaders<'o>(all: &[Expect<'_>], o: &'o ObservedKernel) -> Vec<&'o str> {
    let hits: Vec<&Expect<'_>> = all.iter().filter(|e| hit(o, e)).collect();
    if hits.is_empty() || hits.iter().any(|e| e.shader.is_none()) {
        return Vec::new();
    }
    o.shaders.iter().map(String::as_str).filter(|s| !hits.iter().any(|e| e.shader == Some(*s))).collect()
}

fn source_list(obs: &VkObservation) -> Vec<Source> {
    let mut out = Vec::new();
    if let Some(run) = &obs.run_id {
        out.push(Source::Run { run_id: run.clone(), file: Some(obs.path.clone()) });
    }
    if obs.files.is_empty() {
        out.push(Source::file(obs.path.clone(), None, None, format!("observed Vulkan pipelines ({})", obs.kind)));
    } else {
        out.extend(
            obs.files
                .iter()
                .take(4)
                .map(|f| Source::file(f.clone(), None, None, "backscope-trace file (Vulkan layer)")),
        );
    }
    out
}

fn show(o: &ObservedKernel) -> String {
    format!("{} ×{}{}", o.name, o.launches, o.shaders.first().map(|s| format!(" [{s}]")).unwrap_or_default())
}

/// Dispatch counts per composed pipeline name over one request: the GPU-run weights' nodes (times the dispatches
/// per node of the per-token paths) against the layer's dispatches. Judged only where the observation is one
/// complete request and flash attention is on (else ggml's KQ/KQV matmuls, not modelled, share the F16 names).
fn count_dispatches(r: &VulkanReport, obs: &VkObservation) -> Vec<VkCount> {
    if !obs.per_request || !r.flash_attn_used && r.model.attention.is_some() {
        return Vec::new();
    }
    let mut predicted: Vec<(String, u64)> = Vec::new();
    for g in r.phases.iter().flat_map(|p| &p.weights).filter(|g| on_gpu(g)) {
        let Some(name) = &g.prediction.pipeline else { continue };
        let n = g.nodes.saturating_mul(g.prediction.dispatches_per_node.max(1));
        match predicted.iter_mut().find(|(p, _)| p == name) {
            Some((_, total)) => *total = total.saturating_add(n),
            None => predicted.push((name.clone(), n)),
        }
    }
    predicted
        .into_iter()
        .map(|(pipeline, predicted)| {
            let observed = obs.pipelines.iter().filter(|o| o.name == pipeline).map(|o| o.launches).sum();
            let verdict = if observed == predicted { Verdict::Confirmed } else { Verdict::Contradicted };
            VkCount { pipeline, predicted, observed, verdict }
        })
        .collect()
}

/// The verdict on one expected dispatch of a GPU-run weight group: (verdict, note, evidence).
fn gpu_verdict(
    obs: &VkObservation,
    unexplained: &[ObservedKernel],
    what: &str,
    e: &Expect<'_>,
) -> (Verdict, String, Vec<String>) {
    let hits: Vec<&ObservedKernel> = obs.pipelines.iter().filter(|o| hit(o, e)).collect();
    let shown = |v: &[&ObservedKernel]| v.iter().map(|o| show(o)).collect::<Vec<_>>();
    if what.starts_with(&format!("helper {SPLIT_K_REDUCE} (undecided")) {
        // Neither a confirmation nor a contradiction: the prediction made none.
        let seen = if hits.is_empty() { "was not dispatched" } else { "was dispatched" };
        let note = format!("undecided: split_k_reduce {seen}, which the rules cannot check without the core count");
        return (Verdict::Unobserved, note, shown(&hits));
    }
    let shader_ok =
        |o: &&ObservedKernel| e.shader.is_none_or(|s| o.shaders.is_empty() || o.shaders.iter().any(|x| x == s));
    let rivals: Vec<&ObservedKernel> =
        unexplained.iter().filter(|o| e.op.is_empty() || o.op.as_deref() == Some(e.op)).collect();
    if !hits.is_empty() && hits.iter().any(shader_ok) {
        (Verdict::Confirmed, "the predicted pipeline was dispatched".to_string(), shown(&hits))
    } else if !hits.is_empty() {
        let note = format!("the pipeline ran, but not with shader {}", e.shader.unwrap_or_default());
        (Verdict::Contradicted, note, shown(&hits))
    } else if !rivals.is_empty() {
        (Verdict::Contradicted, format!("not dispatched, but {} was", rivals[0].name), shown(&rivals))
    } else if !obs.complete {
        (Verdict::Unobserved, "not among the pipelines the observation lists (it is incomplete)".into(), Vec::new())
    } else {
        (Verdict::Unobserved, "no such pipeline was dispatched".to_string(), Vec::new())
    }
}

/// The verdict on a weight group whose matmuls run on the CPU: its pipeline must not run beyond what the GPU-run
/// weights account for.
fn cpu_verdict(
    g: &VkWeightGroup,
    obs: &VkObservation,
    unexplained: &[ObservedKernel],
    counts: &[VkCount],
) -> (Verdict, String, Vec<String>) {
    let e = Expect::main(g);
    let ran: Vec<&ObservedKernel> = obs.pipelines.iter().filter(|o| hit(o, &e)).collect();
    let evidence: Vec<String> = ran.iter().map(|o| show(o)).collect();
    let rule = g.placement.rule;
    if ran.iter().any(|o| unexplained.iter().any(|u| u.name == o.name)) {
        let note = format!("predicted on the CPU ({rule}), but its pipeline ran and no GPU-run weight accounts for it");
        return (Verdict::Contradicted, note, evidence);
    }
    let counted = g.prediction.pipeline.as_ref().and_then(|p| counts.iter().find(|c| &c.pipeline == p));
    match (ran.is_empty(), counted) {
        (_, Some(c)) if c.verdict == Verdict::Contradicted => {
            let note = format!(
                "{} dispatches of {} against the {} the GPU-run weights account for: these weights may have run on \
                 the device",
                c.observed, c.pipeline, c.predicted
            );
            (Verdict::Contradicted, note, evidence)
        }
        (false, Some(c)) => {
            let note = format!(
                "{} ran {} times, as many as the GPU-run weights' nodes: none for these {} weight(s) ({rule})",
                c.pipeline, c.observed, g.tensors
            );
            (Verdict::Confirmed, note, evidence)
        }
        (true, _) if obs.complete => (
            Verdict::Confirmed,
            format!("its pipeline was not dispatched, as the CPU placement says ({rule})"),
            evidence,
        ),
        (true, _) => (Verdict::Unobserved, "the observation is incomplete: absence proves nothing".into(), evidence),
        (false, None) => {
            let note = "its pipeline ran for GPU-run weights too; without a per-request count a trace cannot tell \
                        whether these ran on the device"
                .to_string();
            (Verdict::Unobserved, note, evidence)
        }
    }
}

/// What one item claims, in words.
fn item_statement(
    on: &str,
    p: &VkPhase,
    g: &VkWeightGroup,
    what: &str,
    verdict: Verdict,
    note: &str,
    ev: &[String],
) -> String {
    format!(
        "Prediction {} on {on}: {} {} (ne11 = {}) -> {what}: {note}{}",
        match verdict {
            _ if what.contains("(undecided") => "left undecided",
            Verdict::Confirmed => "confirmed",
            Verdict::Contradicted => "CONTRADICTED",
            Verdict::Unobserved => "not observed",
        },
        p.id,
        g.ggml_type,
        g.ne11,
        if ev.is_empty() { String::new() } else { format!(" ({})", ev.join("; ")) }
    )
}

/// What is checked for a GPU-run group: its main pipeline, its helpers, an undecided split-k reduce.
fn checks(g: &VkWeightGroup) -> Vec<(String, Expect<'_>)> {
    let pr = &g.prediction;
    let mut out = vec![(prediction_text(pr), Expect::main(g))];
    out.extend(pr.helpers.iter().map(|h| (format!("helper {h}"), Expect::helper(h))));
    if let Some(why) = &pr.split_k_undecided {
        out.push((format!("helper {SPLIT_K_REDUCE} (undecided: {why})"), Expect::helper(SPLIT_K_REDUCE)));
    }
    out
}

/// Everything the items and claims of one comparison read.
struct Judge<'a> {
    r: &'a VulkanReport,
    obs: &'a VkObservation,
    unexplained: &'a [ObservedKernel],
    counts: &'a [VkCount],
    sources: Vec<Source>,
    on: String,
}

impl Judge<'_> {
    fn group_items(&self, p: &VkPhase, g: &VkWeightGroup, items: &mut Vec<VkItem>, claims: &mut Vec<Claim>) {
        let asked = self.r.placement.num_gpu.is_some() || !self.r.placement.gpu_device;
        let placement_rule = (asked || g.placement.rule != "weight-on-gpu").then(|| g.placement.rule.to_string());
        let judged: Vec<(String, Verdict, String, Vec<String>)> = if on_gpu(g) {
            checks(g)
                .into_iter()
                .map(|(what, e)| {
                    let (v, note, ev) = gpu_verdict(self.obs, self.unexplained, &what, &e);
                    (what, v, note, ev)
                })
                .collect()
        } else {
            let (v, note, ev) = cpu_verdict(g, self.obs, self.unexplained, self.counts);
            vec![(format!("on the CPU, not {}", prediction_text(&g.prediction)), v, note, ev)]
        };
        for (what, verdict, note, evidence) in judged {
            let statement = item_statement(&self.on, p, g, &what, verdict, &note, &evidence);
            let confidence =
                if verdict == Verdict::Unobserved { Confidence::Unresolved } else { Confidence::Confirmed };
            let id = format!("compare.vulkan.{}.{}.{}", p.id, g.ggml_type, verdict.to_string().to_lowercase());
            let mut c = Claim::new(id, confidence, statement);
            for d in &g.prediction.path {
                c = c.with_source(decision_source(d));
            }
            if placement_rule.is_some() {
                c = c.with_source(super::super::placement::rule_source(g.placement.rule));
            }
            claims.push(c.with_sources(self.sources.iter().cloned()));
            items.push(VkItem {
                phase: p.id.clone(),
                ggml_type: g.ggml_type.clone(),
                ne11: g.ne11,
                predicted: what,
                verdict,
                nodes: g.nodes,
                evidence,
                note,
                rules: g.prediction.path.iter().map(|d| format!("{}.{}", d.table, d.rule)).collect(),
                placement_rule: placement_rule.clone(),
            });
        }
    }

    fn attention_item(&self, p: &VkPhase) -> Option<VkItem> {
        let a = p.attention.as_ref()?;
        let hits: Vec<&ObservedKernel> =
            self.obs.pipelines.iter().filter(|o| o.launches > 0 && o.family == a.family).collect();
        let verdict = if !hits.is_empty() {
            Verdict::Confirmed
        } else if self.unexplained.iter().any(|o| FA_FAMILIES.contains(&o.family.as_str())) {
            Verdict::Contradicted
        } else {
            Verdict::Unobserved
        };
        Some(VkItem {
            phase: p.id.clone(),
            ggml_type: "attention".into(),
            ne11: a.tokens,
            predicted: a.family.clone(),
            verdict,
            nodes: p.repeat,
            evidence: hits.iter().map(|o| show(o)).collect(),
            note: format!("flash attention family {}", a.family),
            rules: a.path.iter().map(|d| format!("{}.{}", d.table, d.rule)).collect(),
            placement_rule: None,
        })
    }

    fn unexplained_claim(&self, u: &ObservedKernel, all: &[Expect<'_>]) -> Claim {
        let shaders = unpredicted_shaders(all, u);
        let what = if shaders.is_empty() {
            "which no phase of this prediction accounts for".to_string()
        } else {
            format!("whose shader(s) {} no prediction for this name picks", shaders.join(", "))
        };
        Claim::new(
            format!("compare.vulkan.unexplained.{}", u.family),
            Confidence::Confirmed,
            format!(
                "Observed on {}: {} ({}, {} dispatches), {what}: the run's selection differs from the rules (another \
                 device fact, build or shape)",
                self.on,
                show(u),
                u.family,
                u.launches
            ),
        )
        .with_sources(self.sources.iter().cloned())
    }

    fn count_claim(&self, c: &VkCount) -> Claim {
        let verb = if c.verdict == Verdict::Confirmed { "equals" } else { "DIFFERS FROM" };
        Claim::new(
            format!("compare.vulkan.count.{}", c.verdict.to_string().to_lowercase()),
            Confidence::Confirmed,
            format!(
                "On {}: {} dispatched {} time(s) in the request, which {verb} the {} its GPU-run weights' nodes \
                 predict (placement: {})",
                self.on,
                c.pipeline,
                c.observed,
                c.predicted,
                self.r.placement.describe(self.r.model.n_layer)
            ),
        )
        .with_sources(self.sources.iter().cloned())
    }
}

/// Compare a Vulkan prediction with observed pipelines.
pub fn compare(r: &VulkanReport, obs: &VkObservation) -> VkComparison {
    let all = expects(r);
    let unexplained: Vec<ObservedKernel> = obs
        .pipelines
        .iter()
        .filter(|o| o.launches > 0)
        .filter(|o| MATMUL_FAMILIES.contains(&o.family.as_str()) || FA_FAMILIES.contains(&o.family.as_str()))
        .filter(|o| !explained(r, &all, o))
        .cloned()
        .collect();
    let counts = count_dispatches(r, obs);
    let judge = Judge {
        r,
        obs,
        unexplained: &unexplained,
        counts: &counts,
        sources: source_list(obs),
        on: format!("{} (ggml-vulkan {})", r.device.label, r.rules_version),
    };
    let mut items = Vec::new();
    let mut claims = Vec::new();
    for p in &r.phases {
        for g in &p.weights {
            judge.group_items(p, g, &mut items, &mut claims);
        }
        items.extend(judge.attention_item(p));
    }
    claims.extend(unexplained.iter().map(|u| judge.unexplained_claim(u, &all)));
    claims.extend(counts.iter().map(|c| judge.count_claim(c)));
    let count = |v: Verdict| items.iter().filter(|i| i.verdict == v).count() as u64;
    let wrong_counts = counts.iter().filter(|c| c.verdict == Verdict::Contradicted).count() as u64;
    VkComparison {
        observed: obs.clone(),
        confirmed: count(Verdict::Confirmed),
        contradicted: count(Verdict::Contradicted) + unexplained.len() as u64 + wrong_counts,
        unobserved: count(Verdict::Unobserved),
        items,
        counts,
        unexplained,
        claims,
    }
}
