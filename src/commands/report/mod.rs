//! `backscope report DB|RUN_DIR [--run ID] [--bundle DIR|FILE.tar.gz]`: the statistics of a sweep run and the
//! documents a person reads or attaches to a bug report.
//!
//! The records of one run are read one at a time (from the database, or from a run directory's `result.json`
//! files, [`input`], which also vets the paths the kept records name) and folded into groups of cells by the run
//! analysis's one aggregation (`crate::run_analysis`: groups, statistics, claims); this command's own part is the
//! views: the document ([`document`]), charts drawn as SVG ([`charts`]) and per-cell timelines read from the
//! server logs ([`timeline`]). The result goes through the
//! output layer like every command's: text, `--json` (`backscope.report/1`, docs/report-json.md), Markdown or
//! one self-contained HTML file. `--bundle` also writes the evidence bundle ([`bundle`]), secrets redacted
//! ([`crate::output::redact`]).
//!
//! `backscope sweep report` is a brief view of the same aggregation (its table and the same claims); this command is
//! the full statistical report over a run, its documents and its bundle.

mod bisect;
pub mod bundle;
pub mod charts;
mod document;
pub mod hosts;
pub mod input;
pub mod timeline;
mod view;

// The aggregation, its statistics and its claims are the run analysis's (`sweep` shows the same ones); the views
// below name them by their own paths (`crate::run_analysis::…`), never through this file.
use crate::run_analysis::{aggregate, claims};

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{bail, Result};

use crate::exit;
use crate::output::{messages, Document, Output, OutputOptions, Render};
use crate::run::format::target::DbValue;
use aggregate::{Aggregator, RunStats};
use timeline::CellTimeline;
pub use view::{ReportView, Rules, SCHEMA};

/// Failed cells whose timelines the report shows, in all and per group.
const FAILED_TIMELINES: usize = 8;
const FAILED_TIMELINES_PER_GROUP: usize = 2;
/// Endpoints whose first successful cell's timeline is shown beside the failed ones.
const HEALTHY_TIMELINES: usize = 4;

/// One `backscope report` invocation.
#[derive(Clone, Debug, Default)]
pub struct ReportOptions {
    /// A sweep database (a file or a PostgreSQL store) or a run directory.
    pub input: DbValue,
    /// The run in the database; the latest when none.
    pub run: Option<String>,
    /// Also write the evidence bundle here: a directory, or an archive named `*.tar.gz`.
    pub bundle: Option<PathBuf>,
    pub output: OutputOptions,
    /// Report a bisect stored in the database instead of a run: its id, or `latest`.
    pub bisect: Option<String>,
    /// Report every run of the database across hosts, grouped by GPU/host (`hosts`); implied by a filter.
    pub hosts: bool,
    pub host_filter: hosts::HostFilter,
}

impl Render for ReportView {
    fn write_json(&self, out: &mut dyn Write) -> std::io::Result<()> {
        serde_json::to_writer(&mut *out, self)?;
        writeln!(out)
    }

    fn document(&self) -> Document {
        document::document(self)
    }
}

/// Reads a run and computes its report.
pub fn build(input: &DbValue, run: Option<&str>) -> Result<ReportView> {
    let mut problems = Vec::new();
    let (meta, records) = input::open(input, run, &mut problems)?;
    let mut agg = Aggregator::new();
    records.for_each(&meta.run_id, &mut problems, |json| agg.add_json(json))?;
    let (mut stats, flagged) = agg.finish_with_problems();
    problems.extend(flagged);
    let run_dir = PathBuf::from(&meta.run_dir);
    // The records kept whole name the logs that timelines, crash analysis and the bundle read: only the run's
    // own regular files are kept named.
    for g in &mut stats.groups {
        let kept = g.failed_records.iter_mut().chain(g.first_ok.as_deref_mut()).chain(g.backend_record.as_deref_mut());
        for r in kept {
            input::vet_record(r, &run_dir, &mut problems);
        }
    }
    let claims = claims::claims(&stats, &meta.run_id, &run_dir);
    let timelines = timelines(&stats, &run_dir);
    for p in &problems {
        messages::note(format_args!("warning: {p}"));
    }
    Ok(ReportView { schema: SCHEMA, run: meta, stats, timelines, claims, rules: Rules::default(), problems })
}

/// The timelines the report shows: the first failed cells (a few per group, so that different failures show),
/// then the first successful cell of each endpoint, to hold a healthy run beside them.
fn timelines(s: &RunStats, run_dir: &Path) -> Vec<CellTimeline> {
    let mut out = Vec::new();
    'groups: for g in &s.groups {
        for r in g.failed_records.iter().take(FAILED_TIMELINES_PER_GROUP) {
            if out.len() >= FAILED_TIMELINES {
                break 'groups;
            }
            out.extend(timeline::of_record(r, run_dir));
        }
    }
    let mut healthy = 0;
    for e in &s.endpoints {
        if healthy >= HEALTHY_TIMELINES {
            break;
        }
        let first = s.groups.iter().filter(|g| &g.endpoint == e).find_map(|g| g.first_ok.as_deref());
        if let Some(t) = first.and_then(|r| timeline::of_record(r, run_dir)) {
            out.push(t);
            healthy += 1;
        }
    }
    out
}

pub fn run(opts: &ReportOptions) -> Result<u8> {
    if let Some(id) = &opts.bisect {
        return bisect::run(&opts.input, Some(id.as_str()).filter(|id| *id != "latest"), &opts.output);
    }
    // The destination is opened first, so that a path that cannot be written fails before the work.
    let mut out = Output::open(&opts.output, &crate::output::Inputs::none().path(opts.input.given()))?;
    let f = &opts.host_filter;
    if opts.hosts || f.host.is_some() || f.gpu.is_some() {
        if opts.run.is_some() || opts.bundle.is_some() {
            bail!("--hosts (--host, --gpu) reports every run across hosts; --run and --bundle are for one run");
        }
        out.emit(&hosts::build(&opts.input, f)?)?;
        out.finish()?;
        return Ok(exit::OK);
    }
    let view = build(&opts.input, opts.run.as_deref())?;
    if let Some(dest) = &opts.bundle {
        let w = bundle::write(&view, dest)?;
        messages::note(format_args!(
            "evidence bundle written to {}: {} files, {} bytes, {} secret value(s) redacted{}",
            w.path.display(),
            w.files,
            w.bytes,
            w.redacted,
            if w.left_out.is_empty() { String::new() } else { format!("; left out: {}", w.left_out.join("; ")) }
        ));
    }
    out.emit(&view)?;
    out.finish()?;
    Ok(exit::OK)
}
