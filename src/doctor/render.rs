//! Text rendering of a [`DoctorReport`]: the claims, grouped by what they are about, then the gate verdict for
//! each GPU found.

use std::fmt::Write as _;

use super::DoctorReport;

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

pub fn render_text(r: &DoctorReport) -> String {
    let mut out = String::new();
    let root = if r.root == "/" { String::new() } else { format!(" (root {})", r.root) };
    let _ = writeln!(out, "backscope doctor{root}: {} finding(s) in {:.0} ms", r.claims.len(), r.elapsed_ms);
    for (prefix, heading) in SECTIONS {
        let in_section: Vec<_> = r
            .claims
            .iter()
            .filter(|c| {
                c.id == *prefix || c.id.starts_with(&format!("{prefix}.")) || c.id.starts_with(&format!("{prefix}s."))
            })
            .collect();
        if in_section.is_empty() {
            continue;
        }
        let _ = writeln!(out, "\n{heading}");
        for c in in_section {
            let _ = writeln!(out, "  [{}] {}", c.confidence, c.statement);
            for s in &c.sources {
                let _ = writeln!(out, "      ← {s}");
            }
        }
    }
    let _ = writeln!(out, "\nGate");
    if r.gates.is_empty() {
        let _ = writeln!(out, "  no GPU to judge (backscope gate --arch ARCH judges one by name)");
    }
    for g in &r.gates {
        match (&g.report, &g.why_none) {
            (Some(rep), _) => {
                let _ = writeln!(out, "  {}: {}", g.gpu, rep.verdict);
            }
            (None, Some(why)) => {
                let _ = writeln!(out, "  {}: no verdict: {why}", g.gpu);
            }
            _ => {}
        }
    }
    out
}
