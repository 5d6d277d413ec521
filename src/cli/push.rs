//! `backscope push`'s flags, and their conversion into `backscope::commands::push::PushOptions`.

use std::path::PathBuf;

use backscope::commands::push::PushOptions;
use backscope::run::format::target::DbValue;
use clap::Args;

#[derive(Debug, Args)]
#[command(after_help = "Examples:
    backscope push --from backscope-runs/20261121-120501-3fa2.local.db --db postgres://lab@db.example/fleet
    backscope push --from backscope.db --db 'host=/var/run/postgresql dbname=fleet' --run 20261121-120501-3fa2

The password comes from PGPASSWORD or ~/.pgpass, never from --db. Pushing the same run twice stores it once.")]
pub struct PushArgs {
    /// The local SQLite file to upload from.
    #[arg(long, value_name = "FILE")]
    pub from: PathBuf,
    /// The shared PostgreSQL store: postgres://user@host/db or host=… dbname=… user=….
    #[arg(long, value_name = "POSTGRES")]
    pub db: PathBuf,
    /// Push only this run (repeatable); default: every run in --from.
    #[arg(long = "run", value_name = "RUN_ID")]
    pub runs: Vec<String>,
    /// Push into a run another host owns, moving it to this host.
    #[arg(long)]
    pub take_over: bool,
    /// Output: text (one line per run), --json (an array: run_id, run_created, uploaded, already_stored).
    #[command(flatten)]
    pub output: super::output::OutputArgs,
}

impl From<PushArgs> for PushOptions {
    fn from(a: PushArgs) -> Self {
        PushOptions {
            from: DbValue::read(a.from),
            db: DbValue::read(a.db),
            runs: a.runs,
            take_over: a.take_over,
            output: a.output.into(),
        }
    }
}
