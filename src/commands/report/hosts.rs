//! `report --hosts` (also `--host H`, `--gpu ARCH`): one report over every sweep run of a store, shared by many
//! hosts or not — the matched pivot by GPU/host for the same model, endpoint and num_gpu, the crash-timing verdict
//! per host, and (HTML) one decode-rate chart per GPU.
//!
//! The grouping reads only [`Record`]s and each run's [`HostIdentity`] (stored with the run), so it does not depend
//! on how the single-run report aggregates. Verdicts use the report's one rule ([`stats::timing_verdict`]).

use std::collections::BTreeMap;
use std::io::Write;

use anyhow::{bail, Context, Result};
use serde::Serialize;

use super::charts;
use crate::host::identity::HostIdentity;
use crate::output::doc::{Block, Chart, Column, Document, Table};
use crate::output::Render;
use crate::run::format::record::{ErrorClass, Record};
use crate::run::format::target::DbValue;
use crate::run::read::db::SweepDb;
use crate::run_analysis::stats::{self, Verdict};

pub const SCHEMA: &str = "backscope.report-hosts/1";

/// Which runs count: those of one host, those whose host has a GPU of one arch (or whose GPU label or name holds
/// the text).
#[derive(Clone, Debug, Default)]
pub struct HostFilter {
    pub host: Option<String>,
    pub gpu: Option<String>,
}

impl HostFilter {
    fn admits(&self, h: &HostIdentity) -> bool {
        let host_ok = self.host.as_ref().is_none_or(|want| &h.host_id == want || &h.hostname == want);
        let gpu_ok = self.gpu.as_ref().is_none_or(|want| {
            let want = want.to_ascii_lowercase();
            h.gpu_label().to_ascii_lowercase().contains(&want)
                || h.gpus.iter().any(|g| g.name.as_deref().is_some_and(|n| n.to_ascii_lowercase().contains(&want)))
        });
        host_ok && gpu_ok
    }
}

/// A host that ran at least one of the runs read.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct HostRow {
    pub host_id: String,
    /// The GPUs as grouped: their archs joined (`gfx906`, `gfx1201+gfx906`), `no GPU` for none.
    pub gpu: String,
    pub hostname: String,
    pub kernel: String,
    pub runs: Vec<String>,
}

/// One column of the pivot: a GPU on a host.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct HostCell {
    pub gpu: String,
    pub host_id: String,
    pub cells: u64,
    pub ok: u64,
    pub crashes: u64,
    pub decode_tps_median: Option<f64>,
    pub prompt_tps_median: Option<f64>,
}

/// One row of the pivot: the same model, endpoint and num_gpu on every host that ran it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Point {
    pub model: String,
    pub endpoint: String,
    pub num_gpu: i64,
    pub hosts: Vec<HostCell>,
}

/// The crash-timing verdict of one point on one host.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct HostCrashTiming {
    pub host_id: String,
    pub gpu: String,
    pub model: String,
    pub endpoint: String,
    pub num_gpu: i64,
    /// Times to failure (ms) of the crashes.
    pub ttf_ms: Vec<f64>,
    pub cv: Option<f64>,
    pub verdict: Verdict,
}

#[derive(Clone, Debug, Serialize)]
pub struct HostsView {
    pub schema: &'static str,
    pub db: String,
    pub hosts: Vec<HostRow>,
    pub points: Vec<Point>,
    pub crash_timing: Vec<HostCrashTiming>,
    /// Runs without a stored host (recorded before hosts were), counted under `unknown`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub problems: Vec<String>,
}

#[derive(Default)]
struct Acc {
    cells: u64,
    ok: u64,
    decode: Vec<f64>,
    prompt: Vec<f64>,
    ttf: Vec<f64>,
}

type Key = (String, String, i64);
type Column2 = (String, String);

/// Records grouped by point and by GPU/host.
#[derive(Default)]
pub struct Grouping {
    points: BTreeMap<Key, BTreeMap<Column2, Acc>>,
}

impl Grouping {
    /// Count one record of a run that `host` ran.
    pub fn add(&mut self, host: &HostIdentity, r: &Record) {
        let key = (r.model.clone(), r.endpoint.clone(), r.num_gpu);
        let acc = self.points.entry(key).or_default().entry((host.gpu_label(), host.host_id.clone())).or_default();
        acc.cells += 1;
        if r.is_ok() {
            acc.ok += 1;
            acc.decode.extend(r.decode_tps);
            acc.prompt.extend(r.prompt_tps);
        }
        if r.error_class == Some(ErrorClass::Crash) {
            // A crash without a time to failure counts as a crash (NaN); only timed ones enter the verdict.
            acc.ttf.push(r.ttf_ms.unwrap_or(f64::NAN));
        }
    }

    /// The pivot rows and the per-host crash verdicts.
    pub fn finish(self) -> (Vec<Point>, Vec<HostCrashTiming>) {
        let mut points = Vec::new();
        let mut timings = Vec::new();
        for ((model, endpoint, num_gpu), cols) in self.points {
            let mut hosts = Vec::new();
            for ((gpu, host_id), acc) in cols {
                let timed: Vec<f64> = acc.ttf.iter().copied().filter(|t| t.is_finite()).collect();
                let crashes = acc.ttf.len() as u64;
                if crashes > 0 {
                    let (verdict, cv) = stats::timing_verdict(&timed);
                    timings.push(HostCrashTiming {
                        host_id: host_id.clone(),
                        gpu: gpu.clone(),
                        model: model.clone(),
                        endpoint: endpoint.clone(),
                        num_gpu,
                        ttf_ms: timed,
                        cv,
                        verdict,
                    });
                }
                hosts.push(HostCell {
                    gpu,
                    host_id,
                    cells: acc.cells,
                    ok: acc.ok,
                    crashes,
                    decode_tps_median: crate::run_analysis::stats::median(&acc.decode),
                    prompt_tps_median: crate::run_analysis::stats::median(&acc.prompt),
                });
            }
            points.push(Point { model, endpoint, num_gpu, hosts });
        }
        (points, timings)
    }
}

/// Read every run of `input` that `filter` admits and group its records.
pub fn build(input: &DbValue, filter: &HostFilter) -> Result<HostsView> {
    if input.given().is_dir() {
        bail!(
            "{}: a run directory holds one run of one host; --hosts reads a database (SQLite or PostgreSQL)",
            input.display()
        );
    }
    let db = SweepDb::open(input)?;
    let mut grouping = Grouping::default();
    let mut hosts: BTreeMap<String, HostRow> = BTreeMap::new();
    let mut problems = Vec::new();
    for run in db.runs()? {
        let host = run.host.clone().unwrap_or_else(|| {
            problems
                .push(format!("run {}: no host stored (recorded before hosts were); counted as `unknown`", run.run_id));
            HostIdentity { host_id: "unknown".into(), hostname: "unknown".into(), ..Default::default() }
        });
        if !filter.admits(&host) {
            continue;
        }
        db.for_each_record_json(&run.run_id, |json| {
            let r: Record = serde_json::from_str(json).context("the stored record does not parse")?;
            grouping.add(&host, &r);
            Ok(())
        })?;
        let row = hosts.entry(host.host_id.clone()).or_insert_with(|| HostRow {
            host_id: host.host_id.clone(),
            gpu: host.gpu_label(),
            hostname: host.hostname.clone(),
            kernel: host.kernel.clone(),
            runs: Vec::new(),
        });
        row.runs.push(run.run_id.clone());
    }
    if hosts.is_empty() {
        let shown = |flag: &str, v: &Option<String>| v.as_ref().map(|v| format!(" {flag} {v}")).unwrap_or_default();
        bail!("{}: no run matches{}{}", db.path(), shown("--host", &filter.host), shown("--gpu", &filter.gpu));
    }
    let (points, crash_timing) = grouping.finish();
    Ok(HostsView {
        schema: SCHEMA,
        db: db.path().to_string(),
        hosts: hosts.into_values().collect(),
        points,
        crash_timing,
        problems,
    })
}

fn rate(v: Option<f64>) -> String {
    v.map_or_else(|| "—".into(), |x| format!("{x:.1}"))
}

impl Render for HostsView {
    fn write_json(&self, out: &mut dyn Write) -> std::io::Result<()> {
        serde_json::to_writer(&mut *out, self)?;
        writeln!(out)
    }

    fn document(&self) -> Document {
        let mut doc = Document::new("backscope report: across hosts");
        doc.paragraph(format!("{} host(s) in {}", self.hosts.len(), self.db));
        let mut t = Table::new(vec![
            Column::label("host"),
            Column::label("GPU"),
            Column::label("host name"),
            Column::label("kernel"),
            Column::number("runs"),
        ]);
        for h in &self.hosts {
            t.row([h.host_id.clone(), h.gpu.clone(), h.hostname.clone(), h.kernel.clone(), h.runs.len().to_string()]);
        }
        doc.push(t);
        doc.heading(2, "Matched results by GPU/host: decode t/s (median of the successful requests)");
        let mut columns: Vec<(String, String)> =
            self.points.iter().flat_map(|p| p.hosts.iter().map(|h| (h.gpu.clone(), h.host_id.clone()))).collect();
        columns.sort();
        columns.dedup();
        let mut header = vec![Column::label("model"), Column::label("endpoint"), Column::number("num_gpu")];
        header.extend(columns.iter().map(|(g, h)| Column::number(format!("{g} @ {h}"))));
        let mut pivot = Table::new(header);
        for p in &self.points {
            let mut row = vec![p.model.clone(), p.endpoint.clone(), p.num_gpu.to_string()];
            for c in &columns {
                row.push(match p.hosts.iter().find(|h| (&h.gpu, &h.host_id) == (&c.0, &c.1)) {
                    Some(h) => format!("{} ({}/{} ok)", rate(h.decode_tps_median), h.ok, h.cells),
                    None => "—".into(),
                });
            }
            pivot.row(row);
        }
        doc.push(pivot);
        self.crash_section(&mut doc);
        self.charts(&mut doc);
        for p in &self.problems {
            doc.paragraph(format!("warning: {p}"));
        }
        doc
    }
}

impl HostsView {
    fn crash_section(&self, doc: &mut Document) {
        doc.heading(2, "Crash timing per host");
        if self.crash_timing.is_empty() {
            doc.paragraph("No crashes on any host.");
            return;
        }
        let mut t = Table::new(vec![
            Column::label("host"),
            Column::label("GPU"),
            Column::label("endpoint"),
            Column::number("num_gpu"),
            Column::number("timed crashes"),
            Column::text("time to failure"),
            Column::text("verdict"),
        ]);
        for c in &self.crash_timing {
            t.row([
                c.host_id.clone(),
                c.gpu.clone(),
                c.endpoint.clone(),
                c.num_gpu.to_string(),
                c.ttf_ms.len().to_string(),
                crate::run_analysis::stats::summarize(&c.ttf_ms)
                    .map(|s| crate::run_analysis::claims::mean_sd(&s))
                    .unwrap_or_else(|| "—".into()),
                c.verdict.words().to_string(),
            ]);
        }
        doc.push(t);
    }

    /// One chart per GPU: median decode t/s against num_gpu, a line per endpoint and host.
    fn charts(&self, doc: &mut Document) {
        let mut gpus: Vec<&str> = self.hosts.iter().map(|h| h.gpu.as_str()).collect();
        gpus.sort();
        gpus.dedup();
        for gpu in gpus {
            let mut series: BTreeMap<String, Vec<(i64, f64)>> = BTreeMap::new();
            for p in &self.points {
                for h in p.hosts.iter().filter(|h| h.gpu == gpu) {
                    if let Some(y) = h.decode_tps_median {
                        series.entry(format!("{} @ {}", p.endpoint, h.host_id)).or_default().push((p.num_gpu, y));
                    }
                }
            }
            let series: Vec<charts::Series> =
                series.into_iter().map(|(name, points)| charts::Series { name, points }).collect();
            let title = format!("decode t/s by num_gpu on {gpu}");
            match charts::rate_by_num_gpu("", "decode t/s", &series) {
                Ok(svg) => {
                    let fallback = vec![Block::Paragraph(
                        format!("(the chart, in the HTML report, plots the median decode t/s on {gpu} per endpoint and host)").into(),
                    )];
                    doc.push(Chart { title, svg, fallback });
                }
                Err(e) => {
                    doc.paragraph(format!("{title} ({e})"));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::identity::HostGpu;
    use crate::run::format::record::Status;

    fn host(id: &str, arch: &str) -> HostIdentity {
        let gpus = vec![HostGpu { vendor: "amd".into(), arch: Some(arch.into()), ..Default::default() }];
        HostIdentity { host_id: id.into(), hostname: id.into(), gpus, ..Default::default() }
    }

    fn rec(decode: Option<f64>, crash_ttf: Option<f64>) -> Record {
        Record {
            model: "m".into(),
            endpoint: "rocm".into(),
            num_gpu: 99,
            status: if crash_ttf.is_some() { Status::Fail } else { Status::Ok },
            error_class: crash_ttf.map(|_| ErrorClass::Crash),
            ttf_ms: crash_ttf,
            decode_tps: decode,
            ..Default::default()
        }
    }

    #[test]
    fn the_same_point_is_split_by_gpu_and_host_with_a_verdict_per_host() {
        let (vega, mi50) = (host("lab-vega", "gfx900"), host("lab-mi50", "gfx906"));
        let mut g = Grouping::default();
        for d in [10.0, 30.0, 20.0] {
            g.add(&mi50, &rec(Some(d), None));
        }
        // The study's shape: gfx900 crashes at nearly the same point every time (2.59/2.65/2.71 s: CV 0.023).
        for t in [2590.0, 2650.0, 2710.0] {
            g.add(&vega, &rec(None, Some(t)));
        }
        g.add(&vega, &rec(Some(5.0), None));
        let (points, timings) = g.finish();
        assert_eq!(points.len(), 1, "one model/endpoint/num_gpu");
        let cols: Vec<(&str, &str, u64, u64, Option<f64>)> = points[0]
            .hosts
            .iter()
            .map(|h| (h.gpu.as_str(), h.host_id.as_str(), h.cells, h.crashes, h.decode_tps_median))
            .collect();
        assert_eq!(cols, [("gfx900", "lab-vega", 4, 3, Some(5.0)), ("gfx906", "lab-mi50", 3, 0, Some(20.0))]);
        assert_eq!(timings.len(), 1);
        assert_eq!((timings[0].host_id.as_str(), timings[0].verdict), ("lab-vega", Verdict::Deterministic));
        let f = HostFilter { gpu: Some("GFX906".into()), host: None };
        assert!(f.admits(&mi50) && !f.admits(&vega));
        assert!(HostFilter { host: Some("lab-vega".into()), gpu: None }.admits(&vega));
    }
}
