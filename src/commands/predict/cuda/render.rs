//! A [`CudaReport`] as a document: what was predicted for (GPU, ggml version, model, tokens) and, when kernels
//! were observed, the tally of the comparison first; then a table per phase (with `--explain`, each decision
//! path), the comparison with the observed kernels, the assumptions and the claims. `predict --run` gives one
//! such part per traced record.

use std::io::Write;

use super::super::placement::Where;
use super::prediction::{family_text, Comparison, CudaReport};
use crate::gpu::knowledge::dispatch::{Check, RuleRef};
use crate::output::{Block, Column, Document, Render, Span, Table, Text};

impl Render for CudaReport {
    fn write_json(&self, out: &mut dyn Write) -> std::io::Result<()> {
        serde_json::to_writer(&mut *out, self)?;
        writeln!(out)
    }

    fn document(&self) -> Document {
        let mut doc = Document::new(format!("backscope predict --arch {}: {}", self.arch.label, self.model.source));
        doc.blocks = blocks(self, 0);
        doc
    }
}

fn rule_text(r: Option<&RuleRef>) -> (String, String) {
    match r {
        Some(r) => (r.id.clone(), r.source.clone()),
        None => ("-".into(), String::new()),
    }
}

/// One decision path: every rule checked, whether it held, what it decided and its inputs.
fn path_table(path: &[Check]) -> Table {
    let mut t =
        Table::new(vec![Column::keep("rule"), Column::keep("held"), Column::text("decided"), Column::text("inputs")]);
    for c in path {
        let held = match c.held {
            Some(true) => "holds",
            Some(false) => "no",
            None => "unknown",
        };
        t.row([c.rule.clone(), held.to_string(), c.decided.clone().unwrap_or_default(), c.inputs.clone()]);
    }
    t
}

/// The blocks of one report; `depth` pushes its headings down (a record's report inside `predict --run`).
pub fn blocks(r: &CudaReport, depth: u8) -> Vec<Block> {
    let mut doc = Document::default();
    let level = |l: u8| l + depth;
    // With observed kernels, the tally is the verdict; then what the prediction is for.
    if let Some(c) = &r.comparison {
        doc.paragraph(
            Text::plain(format!("Prediction vs observation ({} {}): ", c.observed.kind, c.observed.path)).and(
                Span::Strong(format!(
                    "{} confirmed, {} contradicted, {} unobserved",
                    c.confirmed, c.contradicted, c.unobserved
                )),
            ),
        );
    }
    let gpu = format!(
        "{} ({}, {} cc {}, warp {}) with {} [{}]",
        r.arch.label, r.arch.family, r.arch.vendor, r.arch.ggml_cc, r.arch.warp_size, r.ggml.name, r.ggml.file
    );
    let mut model = r.model.source.clone();
    if let Some(a) = &r.model.architecture {
        model.push_str(&format!(" ({a}"));
        if let Some(n) = r.model.n_layer {
            model.push_str(&format!(", {n} layers"));
        }
        model.push(')');
    }
    let types: Vec<String> = r.model.weights_per_type.iter().map(|(t, n)| format!("{n} {t}")).collect();
    let tokens = match (r.tokens.prompt_tokens, r.tokens.ne11) {
        (Some(p), _) => format!("prompt of {p} token(s), ubatch {}", r.tokens.ubatch),
        (None, Some(n)) => format!("ne11 = {n}"),
        _ => String::new(),
    };
    let fa = if r.flash_attn_used {
        "flash attention on"
    } else if r.model.attention.is_some() {
        "flash attention off"
    } else {
        "no attention shape (single weight)"
    };
    doc.push(Block::Facts(vec![
        ("GPU".into(), gpu.into()),
        ("model".into(), format!("{model}; weight matrices: {}", types.join(", ")).into()),
        ("tokens".into(), format!("{tokens}, {} decode step(s); {fa}", r.tokens.decode_tokens).into()),
    ]));

    for p in &r.phases {
        let mut t = Table::new(vec![
            Column::keep("type"),
            Column::keep("op"),
            Column::keep("weights"),
            Column::keep("ne11"),
            Column::text("family"),
            Column::keep("rule"),
            Column::text("citation"),
        ]);
        for g in &p.weights {
            let (rule, cite) = rule_text(g.prediction.rule.as_ref());
            let family = match (&g.prediction.family, &g.prediction.undecided) {
                (Some(f), _) => {
                    let c = g.prediction.blas_compute.as_ref().map(|c| format!(" ({c})")).unwrap_or_default();
                    format!("{}{c}", family_text(f))
                }
                (None, Some(why)) => format!("undecided: {why}"),
                (None, None) => "undecided".into(),
            };
            // Where the weights run (data/ggml_placement_11434.toml): a CPU group lists what the GPU would run.
            let family = match (g.placement.runs_on, g.placement.rule) {
                (Where::Cpu, rule) => format!("CPU ({rule}; on the GPU: {family})"),
                (Where::Gpu, "op-offload") => format!("{family} (GPU by op-offload, weights in CPU memory)"),
                (Where::Gpu, _) => family,
            };
            t.row([
                g.ggml_type.clone(),
                format!("{:?}", g.op).replace("MulMatId", "MUL_MAT_ID").replace("MulMat", "MUL_MAT"),
                g.tensors.to_string(),
                g.ne11.to_string(),
                family,
                rule,
                cite,
            ]);
        }
        for a in &p.attention {
            let (rule, cite) = rule_text(a.prediction.rule.as_ref());
            t.row([
                format!("attention (KV {})", a.kv_type),
                "FLASH_ATTN_EXT".into(),
                format!("D {} GQA {}", a.head_dim, a.gqa),
                format!("{} (KV {})", a.tokens, a.kv_len),
                a.prediction.family.clone().unwrap_or_else(|| "no kernel".into()),
                rule,
                cite,
            ]);
        }
        let times = if p.repeat > 1 { format!(", x{}", p.repeat) } else { String::new() };
        doc.heading(level(2), format!("{} (ne11 = {}{times})", p.label, p.ne11));
        doc.push(t);
        if r.explain {
            for g in &p.weights {
                doc.heading(level(3), format!("decision path for {} ({})", g.ggml_type, g.examples.join(", ")));
                doc.push(path_table(&g.prediction.path));
            }
            for a in &p.attention {
                doc.heading(level(3), format!("decision path for attention (gqa_eff {})", a.prediction.gqa_eff));
                doc.push(path_table(&a.prediction.path));
            }
        }
    }

    if let Some(c) = &r.comparison {
        comparison_blocks(c, &mut doc, &level);
    }
    doc.heading(level(2), "Assumptions");
    doc.push(Block::List(r.assumptions.iter().map(|a| Text::plain(a.as_str())).collect()));
    doc.heading(level(2), "Claims");
    doc.claims(&r.claims);
    doc.blocks
}

/// The items behind a comparison's tally, and the kernels no phase predicts.
fn comparison_blocks(c: &Comparison, doc: &mut Document, level: &dyn Fn(u8) -> u8) {
    // The tally is the report's first lines; here the items behind it.
    doc.heading(level(2), "Prediction vs observation");
    let mut t = Table::new(vec![
        Column::keep("phase"),
        Column::keep("type"),
        Column::number("ne11"),
        Column::text("predicted"),
        Column::keep("verdict"),
        Column::number("launches"),
        Column::text("note"),
    ]);
    for it in &c.items {
        t.row([
            it.phase.clone(),
            it.ggml_type.clone(),
            it.ne11.to_string(),
            match &it.placement_rule {
                Some(rule) => format!("on {} ({rule})", it.predicted.as_deref().unwrap_or_default()),
                None => it.predicted.clone().unwrap_or_default(),
            },
            it.verdict.to_string(),
            it.matching_launches.to_string(),
            it.note.clone(),
        ]);
    }
    doc.push(t);
    if !c.unexplained.is_empty() {
        doc.heading(level(3), "Observed but predicted by no phase (contradictions)");
        doc.push(Block::List(
            c.unexplained
                .iter()
                .map(|u| Text::code(&u.kernel).and_plain(format!(" ({}, {} launches)", u.family, u.launches)))
                .collect(),
        ));
    }
}
