//! The report as a document: the verdicts on crash timing first, the matched-results pivot and the backend that
//! served each cell, the claims; then the statistics per group, endpoint ratios, charts, outliers, kernels per
//! request, per-cell timelines and the methods the numbers rest on.

use super::charts::{self, CrashRow, Series};
use super::timeline::CellTimeline;
use super::view::ReportView;
use crate::output::{Block, Chart, ClaimList, Collapse, Column, Document, Table, Text};
use crate::run_analysis::aggregate::{Group, Metric, RunStats};
use crate::run_analysis::claims::{mean_sd, percent, secs, times};
use crate::run_analysis::stats::{self, Verdict};

/// Rows terminal output shows of the long tables (`--all`: every row).
const GROUP_ROWS: usize = 40;
const PIVOT_ROWS: usize = 40;
const TIMELINE_HEAD: usize = 5;
const TIMELINE_TAIL: usize = 12;
/// Claims terminal output shows (`--all`: every claim; documents show all).
const CLAIM_ROWS: usize = 14;
/// Throughput charts drawn (one per model × prompt × num_predict); the rest are in the tables.
const RATE_CHARTS: usize = 6;

fn opt(v: Option<f64>, digits: usize) -> String {
    v.map(|x| format!("{x:.digits$}")).unwrap_or_else(|| "-".into())
}

/// The columns that say where a group sits, besides its endpoint: the varying dimensions, then num_gpu.
fn place_columns(s: &RunStats) -> Vec<Column> {
    let mut c = Vec::new();
    if s.varies.model {
        c.push(Column::label("model"));
    }
    if s.varies.prompt {
        c.push(Column::text("prompt"));
    }
    if s.varies.num_predict {
        c.push(Column::number("n_predict"));
    }
    c.push(Column::number("num_gpu"));
    c
}

fn place_cells(s: &RunStats, model: &str, prompt: &str, num_predict: i64, num_gpu: i64) -> Vec<String> {
    let mut c = Vec::new();
    if s.varies.model {
        c.push(model.to_string());
    }
    if s.varies.prompt {
        c.push(prompt.to_string());
    }
    if s.varies.num_predict {
        c.push(num_predict.to_string());
    }
    c.push(num_gpu.to_string());
    c
}

/// Places (model, prompt, num_predict, num_gpu) in the order their first cell ran.
fn places(s: &RunStats) -> Vec<(&str, &str, i64, i64)> {
    let mut groups: Vec<&Group> = s.groups.iter().collect();
    groups.sort_by_key(|g| g.first_seq);
    let mut out: Vec<(&str, &str, i64, i64)> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for g in groups {
        let p = (g.model.as_str(), g.prompt.as_str(), g.num_predict, g.num_gpu);
        if seen.insert(p) {
            out.push(p);
        }
    }
    out
}

/// A group's failures in words: `crash SIGSEGV 3/3`.
fn failures_text(g: &Group) -> String {
    g.outcomes.iter().map(|(o, n)| format!("{o} {n}/{}", g.n)).collect::<Vec<_>>().join(", ")
}

/// A pivot cell: the median decode rate, with the failures beside it; the failures alone when nothing succeeded.
fn pivot_cell(g: Option<&Group>) -> String {
    let Some(g) = g else { return "-".into() };
    if g.ok == 0 {
        return failures_text(g);
    }
    let rate = g.decode_tps.map(|d| format!("{:.1}", d.median)).unwrap_or_else(|| "ok".into());
    if g.ok == g.n {
        rate
    } else {
        format!("{rate} (ok {}/{}; {})", g.ok, g.n, failures_text(g))
    }
}

fn verdict_lines(s: &RunStats) -> Vec<Text> {
    let mut out = Vec::new();
    for g in &s.groups {
        for f in &g.failure_timing {
            let when = match &f.ttf_ms {
                Some(t) => format!(" after {}", mean_sd(t)),
                None => String::new(),
            };
            let cv = f.cv.map(|c| format!(" (CV {})", percent(c))).unwrap_or_default();
            let verdict = match f.verdict {
                Verdict::TooFew if f.ttf_ms.is_none() => "no time to failure recorded".to_string(),
                v => v.words().to_string(),
            };
            out.push(Text::code(&g.endpoint).and_plain(format!(
                " at {}: {} {}/{}{when}{cv} — {verdict}",
                g.place(&s.varies),
                f.outcome,
                f.n,
                g.n
            )));
        }
    }
    out
}

fn pivot(s: &RunStats) -> Table {
    let mut columns = place_columns(s);
    columns.extend(s.endpoints.iter().map(|e| Column::text(e.clone())));
    let base = s.endpoints.first();
    let others = s.endpoints.get(1..).unwrap_or_default();
    columns.extend(others.iter().map(|e| Column::keep(format!("{e} / {} (95% CI)", base.map_or("", |b| b.as_str())))));
    let mut t = Table::new(columns).collapse(Collapse::Head(PIVOT_ROWS));
    // The decode ratios over the first endpoint, by numerator and place (a map: runs may hold thousands of places).
    let decode_ratio: std::collections::HashMap<_, _> = s
        .ratios
        .iter()
        .filter(|r| r.metric == Metric::DecodeTps && Some(&r.denominator) == base)
        .map(|r| ((r.numerator.as_str(), r.model.as_str(), r.prompt.as_str(), r.num_predict, r.num_gpu), r))
        .collect();
    for (model, prompt, num_predict, num_gpu) in places(s) {
        let mut row = place_cells(s, model, prompt, num_predict, num_gpu);
        for e in &s.endpoints {
            row.push(pivot_cell(s.group(e, model, num_gpu, prompt, num_predict)));
        }
        for e in others {
            let r = decode_ratio.get(&(e.as_str(), model, prompt, num_predict, num_gpu)).copied();
            row.push(match r {
                Some(r) => match &r.welch {
                    Some(w) => format!("{} ({}–{})", times(w.ratio), times(w.low), times(w.high)),
                    None => format!("{} (medians)", times(r.median_ratio)),
                },
                None => "-".into(),
            });
        }
        t.row(row);
    }
    t
}

fn backend_pivot(s: &RunStats) -> Table {
    let mut columns = place_columns(s);
    columns.extend(s.endpoints.iter().map(|e| Column::text(e.clone())));
    let mut t = Table::new(columns).collapse(Collapse::Head(PIVOT_ROWS));
    for (model, prompt, num_predict, num_gpu) in places(s) {
        let mut row = place_cells(s, model, prompt, num_predict, num_gpu);
        for e in &s.endpoints {
            row.push(match s.group(e, model, num_gpu, prompt, num_predict) {
                Some(g) => g.backend_text().unwrap_or_else(|| "not in the log".into()),
                None => "-".into(),
            });
        }
        t.row(row);
    }
    t
}

fn group_columns(s: &RunStats) -> Vec<Column> {
    let mut c = vec![Column::label("endpoint")];
    c.extend(place_columns(s));
    c
}

fn group_cells(s: &RunStats, g: &Group) -> Vec<String> {
    let mut c = vec![g.endpoint.clone()];
    c.extend(place_cells(s, &g.model, &g.prompt, g.num_predict, g.num_gpu));
    c
}

fn outcomes_table(s: &RunStats) -> Table {
    let mut columns = group_columns(s);
    columns.extend([
        Column::number("n"),
        Column::number("ok"),
        Column::text("failed"),
        Column::number("prompt t/s"),
        Column::number("decode t/s"),
        Column::number("decode MAD"),
        Column::number("TTFT ms"),
    ]);
    let mut t = Table::new(columns).collapse(Collapse::Head(GROUP_ROWS));
    for g in &s.groups {
        let mut row = group_cells(s, g);
        let failed = if g.failed.is_empty() {
            "-".to_string()
        } else {
            g.failed.iter().map(|(c, n)| format!("{c} {n}")).collect::<Vec<_>>().join(", ")
        };
        row.extend([
            g.n.to_string(),
            g.ok.to_string(),
            failed,
            opt(g.prompt_tps.map(|x| x.median), 1),
            opt(g.decode_tps.map(|x| x.median), 1),
            opt(g.decode_tps.map(|x| x.mad), 2),
            opt(g.ttft_ms.map(|x| x.median), 0),
        ]);
        t.row(row);
    }
    t
}

fn wall_table(s: &RunStats) -> Table {
    let mut columns = group_columns(s);
    columns.extend([
        Column::number("warm n"),
        Column::number("median"),
        Column::keep("mean ± sd"),
        Column::number("MAD"),
        Column::number("outliers"),
        Column::number("cold n"),
        Column::number("cold median"),
        Column::number("load (cold)"),
    ]);
    let mut t = Table::new(columns).collapse(Collapse::Head(GROUP_ROWS));
    for g in &s.groups {
        let mut row = group_cells(s, g);
        let w = g.wall_ms.warm;
        let c = g.wall_ms.cold;
        row.extend([
            w.map_or("0".into(), |w| w.n.to_string()),
            w.map_or("-".into(), |w| secs(w.median)),
            w.map_or("-".into(), |w| mean_sd(&w)),
            w.map_or("-".into(), |w| secs(w.mad)),
            g.outliers.len().to_string(),
            c.map_or("0".into(), |c| c.n.to_string()),
            c.map_or("-".into(), |c| secs(c.median)),
            g.load_ms.cold.map_or("-".into(), |l| secs(l.median)),
        ]);
        t.row(row);
    }
    t
}

fn timing_table(s: &RunStats) -> Table {
    let mut columns = group_columns(s);
    columns.extend([
        Column::text("outcome"),
        Column::number("n"),
        Column::keep("time to failure"),
        Column::number("CV"),
        Column::text("verdict"),
    ]);
    let mut t = Table::new(columns).collapse(Collapse::Head(GROUP_ROWS));
    for g in &s.groups {
        for f in &g.failure_timing {
            let mut row = group_cells(s, g);
            row.extend([
                f.outcome.clone(),
                format!("{}/{}", f.n, g.n),
                f.ttf_ms.as_ref().map_or("-".into(), mean_sd),
                f.cv.map_or("-".into(), percent),
                f.verdict.words().to_string(),
            ]);
            t.row(row);
        }
    }
    t
}

fn ratio_table(s: &RunStats) -> Table {
    let mut columns = vec![Column::keep("rate")];
    columns.extend(place_columns(s));
    columns.extend([
        Column::label("endpoints"),
        Column::number("median ratio"),
        Column::number("geo. mean ratio"),
        Column::keep("95% CI"),
        Column::number("n"),
        Column::number("df"),
    ]);
    let mut t = Table::new(columns).collapse(Collapse::Head(GROUP_ROWS));
    for r in &s.ratios {
        let mut row = vec![r.metric.words().to_string()];
        row.extend(place_cells(s, &r.model, &r.prompt, r.num_predict, r.num_gpu));
        row.extend([
            format!("{} / {}", r.numerator, r.denominator),
            times(r.median_ratio),
            r.welch.map_or("-".into(), |w| times(w.ratio)),
            r.welch.map_or("-".into(), |w| format!("{}–{}", times(w.low), times(w.high))),
            format!("{} / {}", r.n_numerator, r.n_denominator),
            r.welch.and_then(|w| w.df).map_or("-".into(), |d| format!("{d:.1}")),
        ]);
        t.row(row);
    }
    t
}

/// Throughput charts: per model × prompt × num_predict, a rate against num_gpu, one line per endpoint.
fn rate_charts(doc: &mut Document, s: &RunStats, metric: Metric) {
    // Distinct (model, prompt, num_predict) in the order they ran; only the first RATE_CHARTS are drawn, so the
    // search stops there (a run may hold thousands of prompt sizes).
    let mut seen: Vec<(&str, &str, i64)> = Vec::new();
    let mut known = std::collections::HashSet::new();
    for g in &s.groups {
        let p = (g.model.as_str(), g.prompt.as_str(), g.num_predict);
        if known.insert(p) {
            seen.push(p);
            if seen.len() == RATE_CHARTS {
                break;
            }
        }
    }
    for (model, prompt, num_predict) in seen.iter() {
        let series: Vec<Series> = s
            .endpoints
            .iter()
            .map(|e| {
                let groups: Vec<&Group> = s
                    .groups
                    .iter()
                    .filter(|g| {
                        &g.endpoint == e && g.model == *model && g.prompt == *prompt && g.num_predict == *num_predict
                    })
                    .collect();
                let backends: Vec<String> = {
                    let mut b: Vec<String> =
                        groups.iter().flat_map(|g| g.backends.iter().map(|b| short_backend(&b.backend))).collect();
                    b.dedup();
                    b.sort();
                    b.dedup();
                    b
                };
                let name = if backends.is_empty() { e.clone() } else { format!("{e} ({})", backends.join(", ")) };
                let points = groups
                    .iter()
                    .filter_map(|g| {
                        let v = match metric {
                            Metric::DecodeTps => g.decode_tps,
                            Metric::PromptTps => g.prompt_tps,
                        };
                        Some((g.num_gpu, v?.median))
                    })
                    .collect();
                Series { name, points }
            })
            .filter(|s| !s.points.is_empty())
            .collect();
        let mut title = format!("{} by num_gpu", metric.words());
        if s.varies.model || s.varies.prompt || s.varies.num_predict {
            title.push_str(&format!(" — {model}, prompt {prompt}, num_predict {num_predict}"));
        }
        // The plotted values are the medians of the outcomes table; the fallback says so instead of repeating them.
        let fallback = Block::Paragraph(Text::plain(format!(
            "(the chart, in the HTML report, plots the median {} of each endpoint at each num_gpu: the outcomes table under Statistics per group)",
            metric.words()
        )));
        push_chart(doc, title, charts::rate_by_num_gpu("", metric.words(), &series), vec![fallback]);
    }
}

/// A backend name without its driver details: `Vulkan0 (llvmpipe (…))` → `Vulkan0`.
fn short_backend(b: &str) -> String {
    b.split(" (").next().unwrap_or(b).to_string()
}

/// A chart, or its fallback with a word on why the chart is missing.
fn push_chart(
    doc: &mut Document,
    title: String,
    svg: Result<crate::output::Svg, charts::ChartError>,
    fallback: Vec<Block>,
) {
    match svg {
        Ok(svg) => {
            doc.push(Chart { title, svg, fallback });
        }
        Err(e) => {
            doc.paragraph(format!("{title} ({e})"));
            for b in fallback {
                doc.push(b);
            }
        }
    }
}

fn outlier_table(s: &RunStats) -> Table {
    let mut columns = group_columns(s);
    columns.extend([
        Column::number("request"),
        Column::keep("kind"),
        Column::number("wall"),
        Column::number("median"),
        Column::number("z"),
        Column::label("record"),
    ]);
    let mut t = Table::new(columns).collapse(Collapse::Head(GROUP_ROWS));
    for g in &s.groups {
        for o in &g.outliers {
            let median = if o.cold { g.wall_ms.cold } else { g.wall_ms.warm }.map(|m| m.median);
            let mut row = group_cells(s, g);
            row.extend([
                o.seq.to_string(),
                if o.cold { "cold" } else { "warm" }.to_string(),
                secs(o.wall_ms),
                median.map_or("-".into(), secs),
                format!("{:.1}", o.z),
                o.file.clone(),
            ]);
            t.row(row);
        }
    }
    t
}

fn kernel_table(s: &RunStats) -> Option<Table> {
    let traced: Vec<&Group> = s.groups.iter().filter(|g| g.kernels.is_some()).collect();
    if traced.is_empty() {
        return None;
    }
    let mut columns = group_columns(s);
    columns.extend([
        Column::number("traced"),
        Column::number("launches"),
        Column::text("families (median launches per request)"),
    ]);
    let mut t = Table::new(columns).collapse(Collapse::Head(GROUP_ROWS));
    for g in traced {
        let Some(k) = &g.kernels else { continue };
        let mut fams: Vec<(&String, &f64)> = k.families.iter().filter(|(_, n)| **n > 0.0).collect();
        fams.sort_by(|a, b| b.1.total_cmp(a.1).then_with(|| a.0.cmp(b.0)));
        let families = if fams.is_empty() {
            "none observed".to_string()
        } else {
            fams.iter().map(|(f, n)| format!("{f} {n:.0}")).collect::<Vec<_>>().join(", ")
        };
        let mut row = group_cells(s, g);
        row.extend([
            if k.cut > 0 { format!("{} ({} cut)", k.traced, k.cut) } else { k.traced.to_string() },
            opt(k.launches.map(|l| l.median), 0),
            families,
        ]);
        t.row(row);
    }
    Some(t)
}

fn timeline_section(doc: &mut Document, t: &CellTimeline) {
    doc.heading(3, format!("Cell {} — {} at num_gpu={}: {}", t.seq, t.endpoint, t.num_gpu, t.outcome));
    let mut facts: Vec<(String, Text)> = vec![("record".into(), Text::code(&t.record))];
    facts.push(("log".into(), Text::code(&t.log).and_plain(format!(" ({} lines)", t.lines))));
    if let Some(s) = &t.slice {
        facts.push(("cell's slice".into(), Text::code(s)));
    }
    if let Some(c) = &t.crash {
        // An inherited time is said as its bracket, never as a point.
        let at = logs::render::time_words(c.t, c.t_bounds).map(|w| format!(", {w}")).unwrap_or_default();
        facts.push(("crash".into(), format!("{} (line {}{at})", c.what, c.line).into()));
        facts.push(("phase".into(), format!("{} — {}", c.phase, c.phase_rule).into()));
        facts.push(("signature".into(), Text::code(&c.signature).and_plain(format!(" {}", c.signature_text))));
    }
    doc.push(Block::Facts(facts));
    let marks = t.marks();
    let span = marks.iter().map(|m| m.t).fold(0.0f64, f64::max);
    let title = format!("timeline of cell {} ({} events over {span:.3} s)", t.seq, t.entries.len());
    push_chart(doc, title.clone(), charts::timeline(&title, &marks), Vec::new());
    let mut table =
        Table::new(vec![Column::number("time"), Column::number("line"), Column::keep("event"), Column::text("what")])
            .collapse(Collapse::HeadTail(TIMELINE_HEAD, TIMELINE_TAIL));
    for (i, e) in t.entries.iter().enumerate() {
        if t.elided_at == Some(i) {
            table.row(["…".to_string(), "…".into(), "…".into(), format!("{} entries not kept", t.elided)]);
        }
        let time = e.t.map_or("-".into(), |t| format!("+{t:.3}s"));
        let what = if e.alarm { format!("⚠ {}", e.summary) } else { e.summary.clone() };
        table.row([time, e.line.to_string(), e.kind.clone(), what]);
    }
    doc.push(table);
}

pub fn document(v: &ReportView) -> Document {
    let s = &v.stats;
    let m = &v.run;
    let mut doc = Document::new(format!("backscope report: run {}", m.run_id));
    let status = m.status.as_deref().map(|s| format!(", {s}")).unwrap_or_default();
    let planned = match m.cells_planned {
        Some(p) if p as usize != s.cells => format!(" of {p} planned"),
        _ => String::new(),
    };
    doc.paragraph(
        Text::plain(format!(
            "run {} ({}{status}): {} cells{planned}, {} ok, {} failed; {} group(s) of cells over endpoints ",
            m.run_id,
            m.source,
            s.cells,
            s.ok,
            s.failed,
            s.groups.len()
        ))
        .and_plain(s.endpoints.join(", "))
        .and_plain(" — records in ")
        .and_code(&m.run_dir),
    );
    if !v.problems.is_empty() {
        doc.heading(2, "Problems");
        doc.paragraph("Left out of this report (the rest stands):");
        doc.push(Block::List(v.problems.iter().map(|p| Text::plain(p.clone())).collect()));
    }
    // The summary first, each with its chart right under it (a reader sees the picture with the words it
    // illustrates), then the claims, then the detail.
    let verdicts = verdict_lines(s);
    let crash_rows: Vec<CrashRow> = s
        .groups
        .iter()
        .flat_map(|g| {
            g.failure_timing.iter().filter(|f| !f.times_ms.is_empty()).map(move |f| CrashRow {
                name: format!("{} {} — {}", g.endpoint, g.place(&s.varies), f.outcome),
                times_s: f.times_ms.iter().map(|t| t / 1000.0).collect(),
            })
        })
        .collect();
    let crash_chart_first = !verdicts.is_empty() && !crash_rows.is_empty();
    if !verdicts.is_empty() {
        doc.heading(2, "Crash timing");
        doc.push(Block::List(verdicts));
        if crash_chart_first {
            push_chart(&mut doc, "time to failure".into(), charts::crash_times(&crash_rows), Vec::new());
        }
    }
    if !s.groups.is_empty() {
        doc.heading(2, "Matched results: decode t/s (median of the successful requests)");
        doc.push(pivot(s));
        if s.groups.iter().any(|g| g.decode_tps.is_some() || g.prompt_tps.is_some()) {
            doc.heading(2, "Tokens/s by num_gpu");
            rate_charts(&mut doc, s, Metric::DecodeTps);
            rate_charts(&mut doc, s, Metric::PromptTps);
        }
        doc.heading(2, "Backend that served each cell (from its server log)");
        doc.push(backend_pivot(s));
    }
    doc.heading(2, "Claims");
    let mut list = ClaimList::new(v.claims.clone()).collapse(CLAIM_ROWS).with_run_dir(&m.run_id, &m.run_dir);
    if let Some(db) = &m.db {
        list.run_dirs.push((format!("{}@{db}", m.run_id), m.run_dir.clone()));
    }
    doc.push(list);
    if s.groups.is_empty() {
        return doc;
    }
    doc.heading(2, "Statistics per group of cells");
    doc.paragraph(
        "Outcomes and rates (tokens/s from the server's own counts and durations; medians of the successful requests):",
    );
    doc.push(outcomes_table(s));
    doc.paragraph("Wall time of the successful requests (client side), warm and cold apart (cold: the first request of a server process, or the first after the endpoint switched model or num_gpu):");
    doc.push(wall_table(s));
    if s.groups.iter().any(|g| !g.failure_timing.is_empty()) {
        doc.heading(2, "Time to failure");
        if !crash_chart_first {
            push_chart(&mut doc, "time to failure".into(), charts::crash_times(&crash_rows), Vec::new());
        }
        doc.push(timing_table(s));
    }
    if !s.ratios.is_empty() {
        doc.heading(2, "Endpoint ratios");
        doc.paragraph("Each rate of one endpoint over another at the same place: the ratio of the medians, and the ratio of the geometric means with Welch's 95% confidence interval on the logarithms (none with fewer than two requests a side).");
        doc.push(ratio_table(s));
    }
    if s.groups.iter().any(|g| !g.outliers.is_empty()) {
        doc.heading(2, "Outliers");
        doc.paragraph(format!(
            "Requests whose wall time has a modified z-score beyond ±{} among the requests of their group and kind (cold or warm).",
            stats::OUTLIER_THRESHOLD
        ));
        doc.push(outlier_table(s));
    }
    if let Some(t) = kernel_table(s) {
        doc.heading(2, "Kernels per request (sweep --trace)");
        doc.push(t);
    }
    if !v.timelines.is_empty() {
        doc.heading(2, "Timelines");
        doc.paragraph("Each failed cell (the first ones) and the first successful cell of each endpoint, from its server log; times from the log's first timestamp, ⚠ marks the lines of a crash.");
        for t in &v.timelines {
            timeline_section(&mut doc, t);
        }
    }
    doc.heading(2, "Methods");
    doc.push(Block::List(vec![
        Text::plain(format!(
            "Outliers: modified z-score M = 0.6745 (x − median) / MAD, |M| > {} (Iglewicz and Hoaglin, 1993); when MAD = 0, (x − median) / (1.253314 · mean absolute deviation); at least {} values.",
            stats::OUTLIER_THRESHOLD,
            stats::MIN_OUTLIER_N
        )),
        Text::plain(format!(
            "Crash timing: coefficient of variation of the times to failure; at most {:.2} is deterministic (a fixed point of the work varies as the work does, a few percent; a random moment spreads over the request: CV ≈ 0.58 uniform, 1 exponential); at least {} timed failures.",
            stats::CV_DETERMINISTIC,
            stats::MIN_VERDICT_N
        )),
        Text::plain("Ratios: Welch's t interval on the logarithms of the rates, turned back into a ratio of geometric means; Satterthwaite's degrees of freedom."),
        Text::plain("Backends: what each cell's server log says ran it (devices, offloaded layers), not what the sweep asked for."),
    ]));
    doc
}

#[cfg(test)]
mod tests {
    use super::super::input::RunMeta;
    use super::super::view::{ReportView, Rules, SCHEMA};
    use crate::output::{render_document, text::Layout, Format, Render};
    use crate::run::format::record::Record;
    use crate::run_analysis::aggregate::of_records;

    const HOSTILE: &str = "</table><script>alert(1)</script> a|b\nnext \u{1b}[31mred\u{1b}]0;t\u{7}";

    /// A measured cell whose model and prompt are hostile text, which every format must escape.
    fn rec(ep: &str, ngl: i64, seq: u64, ok: bool, value: f64) -> Record {
        let mut r = crate::run_analysis::test_records::measured(ep, ngl, seq, ok, value);
        r.model = HOSTILE.into();
        r.prompt = format!("{HOSTILE} | p");
        r
    }

    fn view(records: &[Record]) -> ReportView {
        let stats = of_records(records).unwrap();
        let claims = crate::run_analysis::claims::claims(&stats, "r", std::path::Path::new("/runs/r"));
        ReportView {
            schema: SCHEMA,
            run: RunMeta {
                run_id: "r".into(),
                run_dir: "/runs/r".into(),
                source: "sweep".into(),
                ..Default::default()
            },
            stats,
            timelines: Vec::new(),
            claims,
            rules: Rules::default(),
            problems: Vec::new(),
        }
    }

    #[test]
    fn hostile_names_stay_inert_in_tables_claims_and_chart_labels() {
        let mut records = Vec::new();
        for (i, ep) in ["cpu", HOSTILE].into_iter().enumerate() {
            for ngl in [0, 1] {
                for k in 0..3 {
                    let seq = (i * 6 + ngl as usize * 3 + k) as u64;
                    let crash = i == 1 && ngl == 1;
                    let mut r =
                        rec(ep, ngl, seq, !crash, if crash { 2600.0 + k as f64 * 10.0 } else { 100.0 + k as f64 });
                    // Model and prompt vary, so that the tables and the places in words show them.
                    if i == 0 {
                        r.model = "m".into();
                    } else {
                        r.prompt = "p".into();
                    }
                    records.push(r);
                }
            }
        }
        let v = view(&records);
        let doc = v.document();
        let layout = Layout { width: 120, all: true };
        let (text, md, html) = (
            render_document(&doc, Format::Text, layout),
            render_document(&doc, Format::Markdown, layout),
            render_document(&doc, Format::Html, layout),
        );
        for out in [&text, &md, &html] {
            assert!(!out.contains('\u{1b}') && !out.contains('\u{7}'));
        }
        let body = &html[html.find("<body>").unwrap()..];
        assert!(!body.contains("<script"), "{body}");
        assert_eq!(body.matches("<table>").count(), body.matches("</table>").count());
        let svgs: Vec<&str> = body.split("<svg ").skip(1).collect();
        assert!(svgs.len() >= 2, "the rate and crash charts are drawn");
        assert!(svgs.iter().any(|s| s.contains("&lt;/table&gt;&lt;script")), "a chart label holds the name, escaped");
        // Markdown through an independent CommonMark reader: every row keeps its cell count, no element escapes.
        let mut rendered = String::new();
        pulldown_cmark::html::push_html(
            &mut rendered,
            pulldown_cmark::Parser::new_ext(&md, pulldown_cmark::Options::ENABLE_TABLES),
        );
        assert!(!rendered.contains("<script"), "{rendered}");
        for table in rendered.split("<table>").skip(1) {
            let table = &table[..table.find("</table>").unwrap()];
            let columns = table.matches("<th>").count() + table.matches("<th ").count();
            for row in table.split("<tr>").skip(2) {
                assert_eq!(row.matches("<td").count(), columns, "{row}");
            }
        }
        // Text shows the names as text, every line within the width.
        assert!(text.contains("</table><script>"), "{text}");
        assert!(text.lines().all(|l| l.chars().count() <= 120), "{text}");
    }

    #[test]
    fn verdicts_come_first_then_the_pivot_then_the_claims() {
        let mut records = vec![rec("cpu", 0, 0, true, 100.0), rec("vk", 0, 1, true, 300.0)];
        for k in 0..3 {
            records.push(rec("vk", 1, 2 + k, false, 2653.0 + 10.0 * k as f64));
        }
        let text = render_document(&view(&records).document(), Format::Text, Layout { width: 200, all: false });
        let at = |s: &str| text.find(s).unwrap_or_else(|| panic!("no {s:?}: {text}"));
        assert!(at("Crash timing") < at("Matched results") && at("Matched results") < at("Claims"));
        assert!(
            text.contains(
                "vk at num_gpu=1: crash SIGSEGV 3/3 after 2.663 s ± 0.010 s (CV 0.4%) — deterministic, not a race"
            ),
            "{text}"
        );
        // The pivot: cpu's and vk's medians, vk's crash where its rate would be, and the ratio of the two.
        assert!(text.contains("crash SIGSEGV 3/3"), "{text}");
        assert!(text.contains("┆ 10.0 ┆ 30.0 "), "{text}");
    }

    #[test]
    fn each_chart_stands_with_its_summary_before_the_claims() {
        let mut records = Vec::new();
        for (i, ep) in ["cpu", "vk"].into_iter().enumerate() {
            for k in 0..3 {
                records.push(rec(ep, 0, (i * 6 + k) as u64, true, 100.0 * (i + 1) as f64 + k as f64));
            }
        }
        for k in 0..3 {
            records.push(rec("vk", 1, 20 + k, false, 2653.0 + 10.0 * k as f64));
        }
        let html = render_document(&view(&records).document(), Format::Html, Layout { width: 120, all: true });
        let at = |s: &str| html.find(s).unwrap_or_else(|| panic!("no {s:?}"));
        let crash_chart = at("<figcaption>time to failure</figcaption>");
        let rate_chart = at("<figcaption>decode t/s by num_gpu</figcaption>");
        assert!(at(">Crash timing<") < crash_chart && crash_chart < at(">Matched results"), "under its verdicts");
        assert!(at(">Matched results") < rate_chart && rate_chart < at(">Backend that served"), "under its pivot");
        assert!(rate_chart < at(">Claims<") && at(">Claims<") < at(">Statistics per group"));
        assert_eq!(html.matches("<figcaption>time to failure</figcaption>").count(), 1, "drawn once");
    }
}
