//! Plain-text rendering of a [`Report`], for tests and the example; the product's renderers (terminal,
//! Markdown, HTML) work from the same data.
//!
//! Text from the log is printed with control characters (escape sequences included) replaced by `�`,
//! so a hostile log cannot drive the terminal that shows this rendering.

use std::fmt::Write;

use crate::analysis::{Crash, Report, TimeBounds, TimelineEntry};

/// Replace control characters other than tab.
pub fn printable(s: &str) -> String {
    s.chars().map(|c| if c.is_control() && c != '\t' { '\u{fffd}' } else { c }).collect()
}

/// An entry's time as the timeline shows it: `+1.234s`, `(+1.234s)` when inherited from an earlier line, `-`.
pub fn time_cell(e: &TimelineEntry) -> String {
    match e.t {
        Some(t) if e.t_inherited => format!("(+{t:.3}s)"),
        Some(t) => format!("+{t:.3}s"),
        None => "-".to_string(),
    }
}

/// When a line was written, in words: `+1.234 s` (its own timestamp), `between +1.234 s and +2.000 s` (no
/// timestamp of its own: between the last earlier one and the next later one), `at or after +1.234 s` (no
/// later timestamp), `None` (the log has no time for it). A time a line inherits is never said as a point.
pub fn time_words(t: Option<f64>, bounds: Option<TimeBounds>) -> Option<String> {
    match bounds {
        Some((lo, Some(hi))) => Some(format!("between +{lo:.3} s and +{hi:.3} s")),
        Some((lo, None)) => Some(format!("at or after +{lo:.3} s")),
        None => t.map(|t| format!("+{t:.3} s")),
    }
}

/// The timeline, one entry per line: `+0.123s  L42  kind  summary`.
pub fn timeline_text(report: &Report) -> String {
    let mut out = String::new();
    for (i, e) in report.timeline.iter().enumerate() {
        if report.timeline_elided_at == Some(i) {
            let _ = writeln!(out, "… {} entries elided …", report.timeline_elided);
        }
        let _ = writeln!(out, "{:>12}  L{:<6} {:<20} {}", time_cell(e), e.line, e.kind, printable(&e.summary));
    }
    out
}

fn crash_text(out: &mut String, c: &Crash) {
    let t = time_words(c.t, c.t_bounds).map(|w| format!(" ({w})")).unwrap_or_default();
    let _ = writeln!(out, "crash at L{}{t}: phase {} ({})", c.line, c.phase.label(), printable(&c.phase_rule));
    if !c.phase_lines.is_empty() {
        let lines: Vec<String> = c.phase_lines.iter().map(|l| format!("L{l}")).collect();
        let _ = writeln!(out, "  phase evidence: {}", lines.join(", "));
    }
    if let Some(s) = &c.signal {
        let mut line = format!("  signal: {} {}", printable(&s.name), printable(&s.description));
        if let Some(pc) = &s.pc {
            let _ = write!(line, " PC={}", printable(pc));
        }
        if let Some(addr) = &s.addr {
            let _ = write!(line, " addr={}", printable(addr));
        }
        if s.in_foreign_code {
            line += " (during cgo execution)";
        }
        let _ = writeln!(out, "{line}");
    }
    for cause in &c.causes {
        let _ = writeln!(out, "  cause L{}: {}", cause.line, printable(&cause.text));
    }
    if let Some(g) = c.goroutine {
        let _ = writeln!(out, "  crashing goroutine {g}:");
    }
    for f in c.frames.iter().take(12) {
        let src = f.source.as_deref().map(|s| format!("  ({})", printable(s))).unwrap_or_default();
        let _ = writeln!(out, "    L{:<6} {}{src}", f.line, printable(&f.function));
    }
    if c.frames.len() > 12 {
        let _ = writeln!(out, "    … {} more frames", c.frames.len() - 12 + c.frames_dropped as usize);
    }
    for q in &c.consequences {
        let _ = writeln!(out, "  then L{}: {}", q.line, printable(&q.text));
    }
    let _ = writeln!(out, "  signature {}: {}", c.signature.id, printable(&c.signature.text));
}

/// The whole report as text: summary facts, crashes, then the timeline.
pub fn report_text(report: &Report) -> String {
    let mut out = String::new();
    let s = &report.stats;
    let _ = writeln!(
        out,
        "{} lines, {} bytes, flavor {}; {} unrecognised lines; {} truncated; {} unreadable timestamps",
        s.lines, s.bytes, report.flavor, report.other.count, report.truncated.count, report.bad_timestamps.count
    );
    for b in &report.facts.backends {
        let _ = writeln!(out, "backend {} from {} (L{})", printable(&b.name), printable(&b.path), b.line);
    }
    for d in &report.facts.devices {
        let detail =
            d.arch.clone().or_else(|| d.compute_capability.clone()).or_else(|| d.driver.clone()).unwrap_or_default();
        let _ = writeln!(
            out,
            "device {} {}: {} {} (L{})",
            d.backend,
            d.index,
            printable(&d.name),
            printable(&detail),
            d.line
        );
    }
    if let Some(o) = &report.facts.offload {
        let _ = writeln!(out, "offloaded {}/{} layers (L{})", o.offloaded, o.total, o.line);
    }
    for c in &report.crashes {
        crash_text(&mut out, c);
    }
    if report.crashes_dropped > 0 {
        let _ = writeln!(
            out,
            "{} crashes in all; the first {} are shown, {} more were counted and grouped but not kept",
            report.crashes_total,
            report.crashes.len(),
            report.crashes_dropped
        );
    }
    out.push_str(&timeline_text(report));
    out
}
