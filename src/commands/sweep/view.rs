//! What `sweep` prints when a run ends and `sweep report` prints again: a brief view of the run analysis's one
//! aggregation (`crate::run_analysis`), the same groups and claims `backscope report` shows in full. The view is
//! the summary line, the table of groups, a hint per error class that occurred, and the claims; its JSON is the
//! claims (`{"run", "status", "claims"}`).

use std::path::Path;

use anyhow::Result;

use crate::evidence::Claim;
use crate::output::text::truncate;
use crate::output::{messages, Block, ClaimList, Collapse, Column, Document, Render, Table};
use crate::run::write::store::Store;
use crate::run_analysis::aggregate::{Aggregator, Group, RunStats};
use crate::run_analysis::claims::{self, mean_sd};
use crate::run_analysis::stats;

/// Rows of the table terminal output shows (`--all`: every row).
const GROUP_ROWS: usize = 60;

/// A run's records folded into its summary (read one at a time from the store), and the claims about it. Values
/// not believed (a negative time, an impossible token count) are left out of the statistics and said on stderr.
pub fn summarize(store: &Store, run_id: &str, run_dir: &Path) -> Result<(RunStats, Vec<Claim>)> {
    let mut agg = Aggregator::new();
    store.for_each_record_json(run_id, |json| agg.add_json(json))?;
    let (summary, problems) = agg.finish_with_problems();
    for p in &problems {
        messages::note(format_args!("warning: {p}"));
    }
    let claims = claims::claims(&summary, run_id, run_dir);
    Ok((summary, claims))
}

/// A run's brief report.
#[derive(Debug)]
pub struct RunReport<'a> {
    pub run_id: &'a str,
    pub run_dir: &'a str,
    /// `running`, `finished`, `interrupted`.
    pub status: &'a str,
    pub summary: &'a RunStats,
    pub claims: &'a [Claim],
}

impl Render for RunReport<'_> {
    fn write_json(&self, out: &mut dyn std::io::Write) -> std::io::Result<()> {
        let v = serde_json::json!({"run": self.run_id, "status": self.status, "claims": self.claims});
        serde_json::to_writer(&mut *out, &v)?;
        writeln!(out)
    }

    fn document(&self) -> Document {
        document(self.run_id, self.run_dir, self.summary, self.claims)
    }
}

/// The whole human-readable report of a run.
pub fn document(run_id: &str, run_dir: &str, s: &RunStats, claims: &[Claim]) -> Document {
    let mut doc = Document::new(format!("backscope sweep: run {run_id}"));
    doc.paragraph(format!("run {run_id}: {} cells, {} ok, {} failed — records in {run_dir}", s.cells, s.ok, s.failed));
    if !s.groups.is_empty() {
        doc.push(table(s));
    }
    let mut notes: Vec<crate::output::Text> =
        s.error_classes.iter().map(|c| format!("{c}: {}", c.hint()).into()).collect();
    if s.prompt_count_includes_cache {
        notes.push("note: Ollama's prompt_eval_count includes cached prompt tokens while its duration covers only the new ones; prompt t/s of repeated prompts is overstated".into());
    }
    if !notes.is_empty() {
        doc.push(Block::List(notes));
    }
    doc.heading(2, "Claims");
    doc.push(ClaimList::new(claims.to_vec()).with_run_dir(run_id, run_dir));
    doc
}

/// The table of groups. Model, prompt and num_predict columns appear only when they vary.
pub fn table(s: &RunStats) -> Table {
    let mut columns = vec![Column::label("endpoint"), Column::text("backend (from log)")];
    if s.varies.model {
        columns.push(Column::label("model"));
    }
    columns.push(Column::number("num_gpu"));
    if s.varies.prompt {
        columns.push(Column::text("prompt"));
    }
    if s.varies.num_predict {
        columns.push(Column::number("n_predict"));
    }
    columns.extend([
        Column::text("status"),
        Column::number("prompt t/s"),
        Column::number("decode t/s"),
        Column::number("TTFT ms"),
        Column::keep("time to failure"),
    ]);
    let traced = s.groups.iter().any(|g| g.kernels.is_some());
    if traced {
        columns.push(Column::text("kernels (per request)"));
    }
    let mut t = Table::new(columns).collapse(Collapse::Head(GROUP_ROWS));
    for g in &s.groups {
        let mut row = vec![g.endpoint.clone(), g.backend_text().map_or_else(|| "-".into(), |b| truncate(&b, 40))];
        if s.varies.model {
            row.push(g.model.clone());
        }
        row.push(g.num_gpu.to_string());
        if s.varies.prompt {
            row.push(g.prompt.clone());
        }
        if s.varies.num_predict {
            row.push(g.num_predict.to_string());
        }
        let median = |x: Option<stats::Summary>, digits: usize| {
            x.map_or_else(|| "-".into(), |x| format!("{:.digits$}", x.median))
        };
        row.extend([
            status_text(g),
            median(g.prompt_tps, 1),
            median(g.decode_tps, 1),
            median(g.ttft_ms, 0),
            time_to_failure(g),
        ]);
        if traced {
            row.push(kernels_text(g));
        }
        t.row(row);
    }
    t
}

/// `ok 2/3, crash SIGSEGV 1/3`.
fn status_text(g: &Group) -> String {
    let mut parts = Vec::new();
    if g.ok > 0 {
        parts.push(format!("ok {}/{}", g.ok, g.n));
    }
    for (outcome, n) in &g.outcomes {
        parts.push(format!("{outcome} {n}/{}", g.n));
    }
    parts.join(", ")
}

/// The mean ± sd of every failed request's time to failure, whatever its outcome (the claims tell them apart).
fn time_to_failure(g: &Group) -> String {
    let times: Vec<f64> = g.failure_timing.iter().flat_map(|f| f.times_ms.iter().copied()).collect();
    stats::summarize(&times).map_or_else(|| "-".into(), |s| mean_sd(&s))
}

/// The group's median launches per request by family, most first; `none` without launches.
fn kernels_text(g: &Group) -> String {
    let Some(k) = &g.kernels else { return "-".into() };
    let mut fams: Vec<(&String, &f64)> = k.families.iter().filter(|(_, n)| **n > 0.0).collect();
    fams.sort_by(|a, b| b.1.total_cmp(a.1).then_with(|| a.0.cmp(b.0)));
    let mut text = if fams.is_empty() {
        "none".to_string()
    } else {
        truncate(&fams.iter().map(|(f, n)| format!("{f} {n:.0}")).collect::<Vec<_>>().join(", "), 60)
    };
    if k.cut > 0 {
        text.push_str(" (trace cut: lower bounds)");
    }
    text
}

/// The report as terminal text at a width that wraps nothing (for tests that look for whole statements).
#[cfg(test)]
pub fn render(run_id: &str, run_dir: &str, s: &RunStats, claims: &[Claim]) -> String {
    let layout = crate::output::text::Layout { width: crate::output::term::MAX_WIDTH, all: true };
    crate::output::text::render(&document(run_id, run_dir, s, claims), layout)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run::format::record::{BackendFacts, ErrorClass, Record, Status};
    use crate::run_analysis::aggregate::of_records;
    use crate::run_analysis::test_records::measured;

    fn crash(ep: &str, ngl: i64, seq: u64, ttf: f64) -> Record {
        measured(ep, ngl, seq, false, ttf)
    }

    /// The investigation's finding (a Vulkan endpoint that works at num_gpu=0 and crashes at 2.65 s whenever it
    /// offloads) as the table and the claims show it.
    #[test]
    fn the_table_counts_outcomes_and_times_failures_like_the_claims() {
        let mut records = vec![measured("vulkan", 0, 0, true, 100.0)];
        for (i, t) in [2590.0, 2650.0, 2710.0].into_iter().enumerate() {
            records.push(crash("vulkan", 1, 1 + i as u64, t));
        }
        records[0].prompt_count_includes_cache = true;
        records[0].backend =
            Some(BackendFacts { backend: "CPU".into(), offloaded: Some((0, 5)), ..Default::default() });
        let s = of_records(&records).unwrap();
        let cl = claims::claims(&s, "r", Path::new("/runs/r"));
        let text = render("r", "runs/r", &s, &cl);
        assert!(text.contains("run r: 4 cells, 1 ok, 3 failed — records in runs/r"), "{text}");
        assert!(text.contains("crash SIGSEGV 3/3"), "{text}");
        // Mean 2650 ms, sample sd 60 ms: the same figures the timing claim gives.
        assert!(text.contains("2.650 s ± 0.060 s"), "{text}");
        let timing = cl.iter().find(|c| c.id == "report.vulkan.m.ngl1.p.n8.timing.1").unwrap();
        assert!(timing.statement.contains("after 2.650 s ± 0.060 s"), "{}", timing.statement);
        assert!(text.contains(&timing.statement), "the view lists the floor's claims: {text}");
        assert!(text.contains("prompt_eval_count includes cached"), "{text}");
        assert!(text.contains(&format!("crash: {}", ErrorClass::Crash.hint())), "{text}");
        assert!(cl.iter().any(|c| c.id.ends_with(".offload_pattern")), "{cl:?}");
        let cpu = cl.iter().find(|c| c.id == "report.vulkan.m.ngl0.p.n8.backend").unwrap();
        assert!(cpu.statement.ends_with("ran on the CPU: no GPU device was in use (the log's offload line reads 0/5)"));
    }

    #[test]
    fn mixed_outcomes_are_counted_per_kind() {
        let mut timeout = crash("x", 2, 1, 300_000.0);
        timeout.error_class = Some(ErrorClass::ReadTimeout);
        timeout.signal = None;
        let mut plain = crash("x", 2, 2, 1000.0);
        plain.ttf_ms = None;
        let s = of_records(&[measured("x", 2, 0, true, 10.0), timeout, plain]).unwrap();
        assert_eq!(status_text(&s.groups[0]), "ok 1/3, crash SIGSEGV 1/3, read_timeout 1/3");
        assert_eq!(time_to_failure(&s.groups[0]), "300.000 s", "only the timed failure");
        assert_eq!(s.groups[0].ok, 1);
        assert_eq!(s.groups[0].n - s.groups[0].ok, 2);
        assert!(s.groups.iter().all(|g| g.first_ok.as_ref().is_none_or(|r| r.status == Status::Ok)));
    }

    #[test]
    fn the_json_is_the_run_its_status_and_the_claims() {
        let s = of_records(&[measured("x", 0, 0, true, 10.0)]).unwrap();
        let cl = claims::claims(&s, "r", Path::new("/runs/r"));
        let report = RunReport { run_id: "r", run_dir: "/runs/r", status: "finished", summary: &s, claims: &cl };
        let mut out = Vec::new();
        report.write_json(&mut out).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!((v["run"].as_str(), v["status"].as_str()), (Some("r"), Some("finished")));
        assert_eq!(v["claims"].as_array().unwrap().len(), cl.len());
        assert!(cl.iter().any(|c| c.id == "report.x.m.ngl0.p.n8.ok"));
    }
}
