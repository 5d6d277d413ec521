//! `backscope push`: upload runs from a local SQLite file (a host's own `backscope.db`, or the `RUN_DIR.local.db`
//! a sweep fell back to when its PostgreSQL server went away) into a shared PostgreSQL store, exactly once.
//!
//! Each run goes up in one transaction: the run row (created, or checked to be this host's — another host's run
//! needs `--take-over`), every record by its deterministic id with `ON CONFLICT DO NOTHING` (a record stored
//! already must be the same record), and the run's status as the local file has it. A push repeated, or one cut
//! off and started again, stores nothing twice; a push that fails leaves the shared store as it was for that run.

use anyhow::{bail, Context, Result};
use serde::Serialize;

use crate::exit;
use crate::output::{escape, Format, Inputs, Output, OutputOptions};
use crate::run::format::record::Record;
use crate::run::format::run_row::RunStatus;
use crate::run::format::target::{DbTarget, DbValue};
use crate::run::write::pg::PgStore;
use crate::run::write::store::Store;

#[derive(Clone, Debug)]
pub struct PushOptions {
    /// The local SQLite file.
    pub from: DbValue,
    /// The shared PostgreSQL store.
    pub db: DbValue,
    /// Runs to push; all of the file's when empty.
    pub runs: Vec<String>,
    /// Push into runs another host owns, moving them to this host.
    pub take_over: bool,
    pub output: OutputOptions,
}

/// What one run's push did.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Pushed {
    pub run_id: String,
    /// The run was not in the shared store before.
    pub run_created: bool,
    /// Records stored by this push.
    pub uploaded: u64,
    /// Records the shared store held already (the same record).
    pub already_stored: u64,
}

pub fn run(o: &PushOptions) -> Result<u8> {
    let pushed = push(o)?;
    let mut out = Output::open(&o.output, &Inputs::none().path(o.from.given()))?;
    if out.format() == Format::Json {
        out.write_raw(serde_json::to_string_pretty(&pushed)?.as_bytes())?;
        out.write_raw(b"\n")?;
    } else {
        for p in &pushed {
            // A run id is whatever the local file holds: a terminal escape in it is printed visibly, not obeyed.
            let line = format!(
                "run {}: {} record(s) uploaded, {} already stored{}\n",
                escape::printable(&p.run_id),
                p.uploaded,
                p.already_stored,
                if p.run_created { " (run created)" } else { "" }
            );
            out.write_raw(line.as_bytes())?;
        }
    }
    out.finish()?;
    Ok(exit::OK)
}

/// Push the runs of `o.from` into `o.db`.
pub fn push(o: &PushOptions) -> Result<Vec<Pushed>> {
    let DbTarget::Postgres(shared) = o.db.target()? else {
        bail!(
            "--db {}: push uploads into a shared PostgreSQL store (postgres://… or host=… dbname=…), not a file",
            o.db.display()
        );
    };
    let from = o.from.target()?;
    let DbTarget::Sqlite(_) = from else {
        bail!("--from: a local SQLite file (backscope.db, or the RUN_DIR.local.db a sweep fell back to)");
    };
    let local = Store::open_read_only(from)?;
    let rows = if o.runs.is_empty() {
        local.runs()?
    } else {
        let mut rows = Vec::new();
        for id in &o.runs {
            rows.push(local.run(id)?.with_context(|| format!("no run {id} in {}", o.from.display()))?);
        }
        rows
    };
    let mut pg = PgStore::connect(shared, true)?;
    let mut out = Vec::new();
    for row in rows {
        let mut batch = pg.batch()?;
        let run_created = batch.adopt_run(&row, o.take_over)?;
        let (mut uploaded, mut already_stored) = (0u64, 0u64);
        local.for_each_record_json(&row.run_id, |json| {
            let rec: Record = serde_json::from_str(json)
                .context("the stored record does not parse (written by another backscope version?)")?;
            // The stored text as it is, not serialised again: serde_json's float parsing is not exact, and a record a
            // sweep stored in the shared store before its server went away must compare equal to the same record here.
            if batch.insert_record_json(&rec, json)? {
                uploaded += 1;
            } else {
                already_stored += 1;
            }
            Ok(())
        })?;
        if row.status != RunStatus::Running {
            batch.set_run_status(&row.run_id, row.status, row.finished_at.as_deref())?;
        }
        batch.commit()?;
        out.push(Pushed { run_id: row.run_id, run_created, uploaded, already_stored });
    }
    Ok(out)
}
