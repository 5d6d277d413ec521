//! Text rendering of a [`PredictReport`]: a table per phase, the comparison with observed kernels, the claims.

use std::fmt::Write as _;

use super::{family_text, PredictReport};
use crate::knowledge::dispatch::Check;
use crate::render::table;

fn rule_text(r: Option<&crate::knowledge::dispatch::RuleRef>) -> (String, String) {
    match r {
        Some(r) => (r.id.clone(), r.source.clone()),
        None => ("-".into(), String::new()),
    }
}

fn path_lines(out: &mut String, path: &[Check]) {
    for c in path {
        let held = match c.held {
            Some(true) => "holds",
            Some(false) => "no",
            None => "unknown",
        };
        let decided = c.decided.as_ref().map(|d| format!(" => {d}")).unwrap_or_default();
        let _ = writeln!(out, "      {}: {held}{decided}  [{}]", c.rule, c.inputs);
    }
}

pub fn render(r: &PredictReport) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{} ({}, {} cc {}, warp {}) with {} [{}]",
        r.arch.label, r.arch.family, r.arch.vendor, r.arch.ggml_cc, r.arch.warp_size, r.ggml.name, r.ggml.file
    );
    let mut model = r.model.source.clone();
    if let Some(a) = &r.model.architecture {
        let _ = write!(model, " ({a}");
        if let Some(n) = r.model.n_layer {
            let _ = write!(model, ", {n} layers");
        }
        model.push(')');
    }
    let types: Vec<String> = r.model.weights_per_type.iter().map(|(t, n)| format!("{n} {t}")).collect();
    let _ = writeln!(out, "model: {model}; weight matrices: {}", types.join(", "));
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
    let _ = writeln!(out, "{tokens}, {} decode step(s); {fa}\n", r.tokens.decode_tokens);

    for p in &r.phases {
        let mut t = table(&["type", "op", "weights", "ne11", "family", "rule", "citation"]);
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
            t.add_row(vec![
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
            t.add_row(vec![
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
        let _ = writeln!(out, "{} (ne11 = {}{times})\n{t}", p.label, p.ne11);
        if r.explain {
            for g in &p.weights {
                let _ = writeln!(out, "    decision path for {} ({}):", g.ggml_type, g.examples.join(", "));
                path_lines(&mut out, &g.prediction.path);
            }
            for a in &p.attention {
                let _ = writeln!(out, "    decision path for attention (gqa_eff {}):", a.prediction.gqa_eff);
                path_lines(&mut out, &a.prediction.path);
            }
        }
        out.push('\n');
    }

    if let Some(c) = &r.comparison {
        let _ = writeln!(
            out,
            "Prediction vs observation ({} {}): {} confirmed, {} contradicted, {} unobserved",
            c.observed.kind, c.observed.path, c.confirmed, c.contradicted, c.unobserved
        );
        let mut t = table(&["phase", "type", "ne11", "predicted", "verdict", "launches", "note"]);
        for it in &c.items {
            t.add_row(vec![
                it.phase.clone(),
                it.ggml_type.clone(),
                it.ne11.to_string(),
                it.predicted.clone().unwrap_or_default(),
                it.verdict.to_string(),
                it.matching_launches.to_string(),
                it.note.clone(),
            ]);
        }
        let _ = writeln!(out, "{t}");
        if !c.unexplained.is_empty() {
            let _ = writeln!(out, "Observed but predicted by no phase (contradictions):");
            for u in &c.unexplained {
                let _ = writeln!(out, "  {} ({}, {} launches)", u.kernel, u.family, u.launches);
            }
        }
        out.push('\n');
    }
    let _ = writeln!(out, "Assumptions");
    for a in &r.assumptions {
        let _ = writeln!(out, "  - {a}");
    }
    let _ = writeln!(out, "\nClaims");
    crate::render::claims(&mut out, &r.claims);
    out
}
