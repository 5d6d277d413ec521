//! Text rendering of a [`GateReport`]: the layer matrix, each row's sources, the failures a log shows and the layer
//! that explains each, then the one-line verdict.

use std::fmt::Write as _;

use super::GateReport;
use crate::render::table;

pub fn render_text(r: &GateReport) -> String {
    let mut out = String::new();
    let family = r.family.as_deref().map(|f| format!(" ({f})")).unwrap_or_default();
    let _ = writeln!(out, "Gate for {}{family}", r.arch);
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
    let _ = writeln!(out, "inputs: {}\n", inputs.join("; "));

    let mut t = table(&["layer", "status", "confidence", "finding", "basis"]);
    for row in &r.layers {
        t.add_row(vec![
            format!("{} {}", row.number, row.title),
            row.status.to_string(),
            row.confidence.to_string(),
            row.finding.clone(),
            if row.basis.is_empty() { "no input".to_string() } else { row.basis.join(", ") },
        ]);
    }
    let _ = writeln!(out, "{t}\n");

    let _ = writeln!(out, "Sources");
    for row in &r.layers {
        if row.sources.is_empty() {
            continue;
        }
        let _ = writeln!(out, "  {} {}:", row.number, row.title);
        for s in &row.sources {
            let _ = writeln!(out, "    ← {s}");
        }
    }
    if !r.explanations.is_empty() {
        let _ = writeln!(out, "\nFailures in the log and the layer that explains them");
        for e in &r.explanations {
            let by = match e.explained_by {
                Some(l) => format!("layer {} ({})", l.number(), l.title()),
                None => "no layer".to_string(),
            };
            let _ = writeln!(out, "  [{}] {} → {by}: {}", e.confidence, e.event, e.reason);
            let _ = writeln!(out, "      ← {}", e.source);
        }
    }
    let _ = writeln!(out, "\nVerdict: {}", r.verdict);
    out
}
