//! A [`GateReport`] as a document: the one-line verdict first, what the gate was given, the layer matrix, each
//! layer's claim with its sources, and the failures a log shows with the layer that explains each.

use std::io::Write;

use crate::evidence::Claim;
use crate::output::{ClaimList, Column, Document, Render, Span, Table, Text};
use crate::support_matrix::GateReport;

impl Render for GateReport {
    fn write_json(&self, out: &mut dyn Write) -> std::io::Result<()> {
        serde_json::to_writer(&mut *out, self)?;
        writeln!(out)
    }

    fn document(&self) -> Document {
        document(self)
    }
}

/// What the gate was given, in one line.
fn inputs_line(r: &GateReport) -> String {
    let mut inputs = Vec::new();
    inputs.push(if r.inputs.install.is_empty() {
        "no install scanned".to_string()
    } else {
        format!("install {}", r.inputs.install.join(", "))
    });
    inputs.push(if r.inputs.logs.is_empty() {
        "no log".to_string()
    } else {
        format!("log {}", r.inputs.logs.join(", "))
    });
    inputs.push(match &r.inputs.runs {
        Some(db) if r.inputs.run_ids.is_empty() => format!("runs {db}"),
        Some(db) => format!("runs {} of {db}", r.inputs.run_ids.join(", ")),
        None => "no runs".to_string(),
    });
    inputs.push(format!("Ollama {}", r.inputs.ollama));
    if let Some(v) = &r.inputs.rocm {
        inputs.push(format!("ROCm {v}"));
    }
    format!("inputs: {}", inputs.join("; "))
}

/// The layer matrix; `--json` has the same rows.
fn layer_table(r: &GateReport) -> Table {
    let mut t = Table::new(vec![
        // Wrapped, so that the matrix stays a table on an 80-column terminal.
        Column::text("layer"),
        Column::keep("status"),
        Column::keep("confidence"),
        Column::text("finding"),
        Column::text("basis"),
    ]);
    for row in &r.layers {
        t.row([
            format!("{} {}", row.number, row.title),
            row.status.to_string(),
            row.confidence.to_string(),
            row.finding.clone(),
            if row.basis.is_empty() { "no input".to_string() } else { row.basis.join(", ") },
        ]);
    }
    t
}

pub fn document(r: &GateReport) -> Document {
    let family = r.family.as_deref().map(|f| format!(" ({f})")).unwrap_or_default();
    let mut doc = Document::new(format!("backscope gate --arch {}", r.arch));
    doc.heading(2, format!("Gate for {}{family}", r.arch));
    doc.paragraph(Text(vec![Span::Strong("Verdict:".into()), Span::Plain(format!(" {}", r.verdict))]));
    doc.paragraph(inputs_line(r));
    doc.push(layer_table(r));

    // Each layer's sources under the head of its claim (`Layer 1 (vendor support policy) Blocks`): the finding
    // that completes the claim is in the table above.
    let sourced: Vec<Claim> = r
        .layers
        .iter()
        .filter(|row| !row.sources.is_empty())
        .map(|row| {
            Claim::new(
                format!("gate.{}.{}", r.arch, row.layer.id()),
                row.confidence,
                format!("Layer {} ({}) {}", row.number, row.title, row.status),
            )
            .with_sources(row.sources.iter().cloned())
        })
        .collect();
    if !sourced.is_empty() {
        doc.heading(2, "Sources");
        doc.push(ClaimList::new(sourced));
    }
    let explain_prefix = format!("gate.{}.explain.", r.arch);
    let explained: Vec<_> = r.claims.iter().filter(|c| c.id.starts_with(&explain_prefix)).cloned().collect();
    if !explained.is_empty() {
        doc.heading(2, "Failures in the log and the layer that explains them");
        doc.push(ClaimList::new(explained));
    }
    doc
}
