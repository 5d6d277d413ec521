//! A [`DoctorReport`] as a document: how many findings, the gate verdict for each GPU found, then the claims
//! grouped by what they are about.

use std::io::Write;

use super::report::DoctorReport;
use crate::output::{Block, Document, Render, Span, Text};

/// Sections in print order: (claim id prefix, heading).
const SECTIONS: &[(&str, &str)] = &[
    ("doctor.gpu", "GPUs"),
    ("doctor.modules", "Kernel modules"),
    ("doctor.access", "Device access"),
    ("doctor.vulkan", "Vulkan"),
    ("doctor.service", "ollama.service"),
    ("doctor.env", "Environment"),
    ("doctor.override", "GPU overrides"),
    ("doctor.runtime", "Runtimes"),
    ("doctor.tool", "Tools"),
];

impl Render for DoctorReport {
    fn write_json(&self, out: &mut dyn Write) -> std::io::Result<()> {
        serde_json::to_writer(&mut *out, self)?;
        writeln!(out)
    }

    fn document(&self) -> Document {
        document(self)
    }
}

pub fn document(r: &DoctorReport) -> Document {
    let root = if r.root == "/" { String::new() } else { format!(" (root {})", r.root) };
    let mut doc = Document::new(format!("backscope doctor{root}"));
    doc.paragraph(format!("backscope doctor{root}: {} finding(s) in {:.0} ms", r.claims.len(), r.elapsed_ms));
    // The verdicts first: what the probe means for each GPU found.
    doc.heading(2, "Gate");
    if r.gates.is_empty() {
        doc.paragraph(
            Text::plain("no GPU to judge (").and_code("backscope gate --arch ARCH").and_plain(" judges one by name)"),
        );
    }
    let verdicts: Vec<Text> = r
        .gates
        .iter()
        .filter_map(|g| {
            let said = match (&g.report, &g.why_none) {
                (Some(rep), _) => format!(": {}", rep.verdict),
                (None, Some(why)) => format!(": no verdict: {why}"),
                (None, None) => return None,
            };
            let mut spans = vec![Span::Strong(g.gpu.clone())];
            spans.extend(Text::with_code_spans(&said).0);
            Some(Text(spans))
        })
        .collect();
    if !verdicts.is_empty() {
        doc.push(Block::List(verdicts));
    }
    for (prefix, heading) in SECTIONS {
        let in_section: Vec<_> = r
            .claims
            .iter()
            .filter(|c| {
                c.id == *prefix || c.id.starts_with(&format!("{prefix}.")) || c.id.starts_with(&format!("{prefix}s."))
            })
            .cloned()
            .collect();
        if in_section.is_empty() {
            continue;
        }
        doc.heading(2, *heading);
        doc.claims(&in_section);
    }
    doc
}
