//! `backscope push`: upload runs from a local SQLite file (a host's own `backscope.db`, or the `RUN_DIR.local.db`
//! a sweep fell back to when its PostgreSQL server went away) into a shared PostgreSQL store, exactly once.
//!
//! Each run goes up in one transaction: the run row (created, or checked to be this host's — another host's run
//! needs `--take-over`), every record by its deterministic id with `ON CONFLICT DO NOTHING` (a record stored
//! already must be the same record), and the run's status as the local file has it. A push repeated, or one cut
//! off and started again, stores nothing twice; a push that fails leaves the shared store as it was for that run.
//!
//! The file's bisects (`backscope bisect --db FILE`) go up too, each in one transaction: the bisect row (created
//! as this host's, or found to be this host's already), every step by `(bisect_id, seq)` (a step stored already
//! must be the same step), and its status. A bisect the server holds as another host's or role's is not
//! overwritten: the push says so and leaves it (`--take-over` moves another host's of the same role here first).

use anyhow::{bail, Context, Result};
use serde::Serialize;

use crate::exit;
use crate::output::messages;
use crate::output::{escape, Format, Inputs, Output, OutputOptions};
use crate::run::format::bisect::is_bisect_id;
use crate::run::format::record::Record;
use crate::run::format::run_row::RunStatus;
use crate::run::format::target::{DbTarget, DbValue};
use crate::run::write::bisect::pg::BisectPush;
use crate::run::write::bisect::BisectStore;
use crate::run::write::pg::PgStore;
use crate::run::write::sqlite::SqliteStore;
use crate::run::write::store::Store;

#[derive(Clone, Debug)]
pub struct PushOptions {
    /// The local SQLite file.
    pub from: DbValue,
    /// The shared PostgreSQL store.
    pub db: DbValue,
    /// Runs and bisects to push (by run id or bisect id); all of the file's when empty.
    pub runs: Vec<String>,
    /// Push into runs and bisects another host owns, moving them to this host.
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

/// What one bisect's push did.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PushedBisect {
    pub bisect_id: String,
    /// The bisect was not in the shared store before.
    pub bisect_created: bool,
    /// Steps stored by this push.
    pub uploaded: u64,
    /// Steps the shared store held already (the same step).
    pub already_stored: u64,
    /// Set when the shared store holds this bisect as another host's (or role's): nothing of it was pushed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub not_pushed: Option<String>,
}

/// One line of a push's result: a run or a bisect.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum PushedItem {
    Run(Pushed),
    Bisect(PushedBisect),
}

pub fn run(o: &PushOptions) -> Result<u8> {
    let pushed = push(o)?;
    let mut out = Output::open(&o.output, &Inputs::none().path(o.from.given()))?;
    if out.format() == Format::Json {
        out.write_raw(serde_json::to_string_pretty(&pushed)?.as_bytes())?;
        out.write_raw(b"\n")?;
    } else {
        for p in &pushed {
            // An id is whatever the local file holds: a terminal escape in it is printed visibly, not obeyed.
            let line = match p {
                PushedItem::Run(p) => format!(
                    "run {}: {} record(s) uploaded, {} already stored{}\n",
                    escape::printable(&p.run_id),
                    p.uploaded,
                    p.already_stored,
                    if p.run_created { " (run created)" } else { "" }
                ),
                PushedItem::Bisect(b) => match &b.not_pushed {
                    Some(why) => format!("bisect {}: not pushed: {why}\n", escape::printable(&b.bisect_id)),
                    None => format!(
                        "bisect {}: {} step(s) uploaded, {} already stored{}\n",
                        escape::printable(&b.bisect_id),
                        b.uploaded,
                        b.already_stored,
                        if b.bisect_created { " (bisect created)" } else { "" }
                    ),
                },
            };
            out.write_raw(line.as_bytes())?;
        }
    }
    out.finish()?;
    Ok(exit::OK)
}

/// Push the runs and bisects of `o.from` into `o.db`.
pub fn push(o: &PushOptions) -> Result<Vec<PushedItem>> {
    let DbTarget::Postgres(shared) = o.db.target()? else {
        bail!(
            "--db {}: push uploads into a shared PostgreSQL store (postgres://… or host=… dbname=…), not a file",
            o.db.display()
        );
    };
    let from = o.from.target()?;
    let DbTarget::Sqlite(from_path) = from else {
        bail!("--from: a local SQLite file (backscope.db, or the RUN_DIR.local.db a sweep fell back to)");
    };
    // A missing file is the sweep store's error to name.
    let local_bisects = if from_path.is_file() { BisectStore::open_local_if_any(from_path)? } else { None };
    let (bisect_ids, run_ids): (Vec<&String>, Vec<&String>) = o.runs.iter().partition(|id| is_bisect_id(id));
    // A file only `backscope bisect` wrote holds no runs: its bisects are all there is to push.
    let local = match &local_bisects {
        Some(_) if !SqliteStore::holds_runs(from_path)? => None,
        _ => Some(Store::open_read_only(from)?),
    };
    let rows = match &local {
        None if !run_ids.is_empty() => bail!("no run {} in {}", run_ids[0], o.from.display()),
        None => vec![],
        Some(local) if o.runs.is_empty() => local.runs()?,
        Some(local) => {
            let mut rows = Vec::new();
            for id in run_ids {
                rows.push(local.run(id)?.with_context(|| format!("no run {id} in {}", o.from.display()))?);
            }
            rows
        }
    };
    let bisects = match &local_bisects {
        None if !bisect_ids.is_empty() => bail!("no bisect {} in {}", bisect_ids[0], o.from.display()),
        None => vec![],
        Some(b) if o.runs.is_empty() => b.runs()?,
        Some(b) => bisect_ids.iter().map(|id| b.find(Some(id))).collect::<Result<_>>()?,
    };
    let mut pg = PgStore::connect(shared, true)?;
    let mut out = Vec::new();
    for row in rows {
        let Some(local) = &local else { break };
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
        out.push(PushedItem::Run(Pushed { run_id: row.run_id, run_created, uploaded, already_stored }));
    }
    if let Some(local_bisects) = local_bisects.filter(|_| !bisects.is_empty()) {
        let mut shared_bisects = BisectStore::open(o.db.target()?)?;
        for row in bisects {
            let steps = local_bisects.steps(&row.bisect_id)?;
            out.push(PushedItem::Bisect(push_bisect(&mut shared_bisects, &row, &steps, o.take_over)?));
        }
    }
    Ok(out)
}

fn push_bisect(
    shared: &mut BisectStore,
    row: &crate::run::format::bisect::BisectRow,
    steps: &[crate::run::format::bisect::Step],
    take_over: bool,
) -> Result<PushedBisect> {
    let id = row.bisect_id.clone();
    Ok(match shared.push(row, steps, take_over)? {
        BisectPush::Stored { created, uploaded, already_stored } => {
            PushedBisect { bisect_id: id, bisect_created: created, uploaded, already_stored, not_pushed: None }
        }
        BisectPush::NotOurs { host, role } => {
            let why = format!(
                "{} holds it as host `{host}`'s (role `{role}`); the stored bisect is not overwritten{}",
                shared.path.display(),
                if take_over { "" } else { " (--take-over moves it to this host, within the same role)" }
            );
            messages::note(format_args!("bisect {}: not pushed: {why}", escape::printable(&id)));
            PushedBisect { bisect_id: id, bisect_created: false, uploaded: 0, already_stored: 0, not_pushed: Some(why) }
        }
    })
}
