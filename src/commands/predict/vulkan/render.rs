//! How a Vulkan prediction reads: the device's decisions, each phase's pipelines, the comparison, the claims.

use super::prediction::{prediction_text, VkComparison, VulkanReport};
use crate::gpu::knowledge::vulkan_dispatch::Decision;
use crate::observe::vulkan::dispatch_record::RecordComparison;
use crate::output::{Column, Document, Render, Table, Text};

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
                Column::keep("runs on"),
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
                let runs_on = match g.placement.rule {
                    "weight-on-gpu" => g.placement.runs_on.to_string(),
                    rule => format!("{} ({rule})", g.placement.runs_on),
                };
                t.row([
                    g.ggml_type.clone(),
                    pr.op.clone(),
                    g.tensors.to_string(),
                    runs_on,
                    prediction_text(pr),
                    variant,
                ]);
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
            comparison(c, &mut doc);
        }
        if let Some(a) = &self.against {
            against(a, &mut doc);
        }
        doc.heading(2, "Assumptions");
        for a in &self.assumptions {
            doc.paragraph(Text::plain(format!("- {a}")));
        }
        doc.claims(&self.claims);
        doc
    }
}

/// `--verify --against`: the impersonated run held against the real one, pipeline by pipeline and in order.
fn against(a: &RecordComparison, doc: &mut Document) {
    doc.heading(2, format!("The impersonated run against the real run ({})", a.expected.display()));
    for claim in a.claims("", "the real run", "the impersonated run") {
        doc.paragraph(Text::plain(claim.statement));
    }
    if !a.pipelines.differences.is_empty() {
        let mut t = Table::new(vec![
            Column::text("pipeline"),
            Column::keep("shader"),
            Column::keep("real"),
            Column::keep("impersonated"),
        ]);
        for d in &a.pipelines.differences {
            t.row([d.name.clone(), d.shader.clone(), d.expected.to_string(), d.got.to_string()]);
        }
        doc.push(t);
    }
}

/// The comparison's tables in a document.
fn comparison(c: &VkComparison, doc: &mut Document) {
    doc.heading(2, "Against the observed pipelines");
    let mut t = Table::new(vec![
        Column::keep("phase"),
        Column::keep("type"),
        Column::keep("verdict"),
        Column::text("predicted"),
        Column::text("evidence"),
    ]);
    for i in &c.items {
        t.row([
            i.phase.clone(),
            i.ggml_type.clone(),
            i.verdict.to_string(),
            i.predicted.clone(),
            i.evidence.join("; "),
        ]);
    }
    doc.push(t);
    if !c.counts.is_empty() {
        let mut t = Table::new(vec![
            Column::text("pipeline"),
            Column::number("predicted dispatches"),
            Column::number("observed"),
            Column::keep("verdict"),
        ]);
        for n in &c.counts {
            t.row([n.pipeline.clone(), n.predicted.to_string(), n.observed.to_string(), n.verdict.to_string()]);
        }
        doc.paragraph(Text::plain("Dispatches in the request, per pipeline (GPU-run weights' nodes):"));
        doc.push(t);
    }
    for n in &c.observed.notes {
        doc.paragraph(Text::plain(format!("note: {n}")));
    }
    if !c.unexplained.is_empty() {
        doc.paragraph(Text::plain(format!(
            "Unexplained pipelines: {}",
            c.unexplained
                .iter()
                .map(|u| format!("{} ({}, ×{})", u.name, u.family, u.launches))
                .collect::<Vec<_>>()
                .join(", ")
        )));
    }
}
