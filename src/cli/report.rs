//! `backscope report`'s flags, and their conversion into `backscope::commands::report::ReportOptions`.

use std::path::PathBuf;

use backscope::commands::report::ReportOptions;
use backscope::run::format::target::DbValue;
use clap::Args;

#[derive(Debug, Args)]
#[command(after_help = "Examples:
    backscope report backscope.db
    backscope report backscope.db --run 20261121-120501-3fa2 --format html -o report.html
    backscope report backscope-runs/20261121-120501-3fa2 --bundle evidence.tar.gz
    backscope report backscope.db --bisect
    backscope report postgres://lab@db.example/fleet --hosts --gpu gfx906 --format html -o fleet.html")]
pub struct ReportArgs {
    /// A sweep database (backscope.db, or a shared PostgreSQL store: postgres://… or host=… dbname=…), or a run
    /// directory (what `backscope sweep` printed: its cells/ hold the
    /// records, no database needed).
    #[arg(value_name = "DB|RUN_DIR")]
    pub input: PathBuf,
    /// The run to report on, in a database (default: the latest).
    #[arg(long, value_name = "ID")]
    pub run: Option<String>,
    /// Also write an evidence bundle to attach to a bug report: a new directory, or an archive whose name ends in
    /// .tar.gz (report, environment, discovery lines, failing cells with their logs and timelines, library scans;
    /// secrets redacted).
    #[arg(long, value_name = "DIR|FILE.tar.gz", conflicts_with = "bisect")]
    pub bundle: Option<PathBuf>,
    /// Report a bisect stored in the database (`backscope bisect`): its verdict, evidence and steps. BISECT_ID
    /// defaults to the latest.
    #[arg(long, value_name = "BISECT_ID", num_args = 0..=1, default_missing_value = "latest", conflicts_with = "run")]
    pub bisect: Option<String>,
    /// Report every run of the database across hosts: the matched pivot by GPU/host for the same model, endpoint
    /// and num_gpu, crash-timing verdicts per host, HTML charts per GPU (docs/fleet.md).
    #[arg(long, conflicts_with_all = ["run", "bundle"])]
    pub hosts: bool,
    /// Only runs of this host (its BACKSCOPE_HOST_ID or host name); implies --hosts.
    #[arg(long, value_name = "HOST", conflicts_with_all = ["run", "bundle"])]
    pub host: Option<String>,
    /// Only runs of hosts with this GPU arch (gfx906) or name (H100); implies --hosts.
    #[arg(long, value_name = "ARCH", conflicts_with_all = ["run", "bundle"])]
    pub gpu: Option<String>,
    /// Output: text (the default), --json (docs/report-json.md), markdown, html.
    #[command(flatten)]
    pub output: super::output::OutputArgs,
}

impl From<ReportArgs> for ReportOptions {
    fn from(a: ReportArgs) -> Self {
        ReportOptions {
            input: DbValue::read(a.input),
            run: a.run,
            bundle: a.bundle,
            output: a.output.into(),
            bisect: a.bisect,
            hosts: a.hosts,
            host_filter: backscope::commands::report::hosts::HostFilter { host: a.host, gpu: a.gpu },
        }
    }
}
