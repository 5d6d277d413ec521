//! Where records go: the store a `--db` value names ([`crate::run::format::target::DbTarget`]) — an SQLite file
//! (`backscope.db` by default, [`crate::run::write::sqlite`]) or a PostgreSQL database shared by many hosts
//! ([`crate::run::write::pg`]) — and a run directory per run.
//!
//! A cell is committed in two steps: its `result.json` is written to a temporary file, fsynced, renamed into place
//! and its directory fsynced (`durable`); then one transaction inserts its row (SQLite: WAL with `synchronous =
//! FULL`; PostgreSQL: a committed statement). The database is the ledger of completed cells: a crash between the
//! steps leaves a `result.json` without a row, and `--resume` runs that cell again and replaces the file. `(run_id,
//! cell_key)` is unique in both stores, so a cell can never be recorded twice. An import stores all its records in
//! one transaction instead ([`Store::batch`]).

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use anyhow::Result;

use crate::run::format::record::Record;
use crate::run::format::target::DbTarget;
use crate::run::write::pg::{PgBatch, PgStore};
use crate::run::write::sqlite::{SqliteBatch, SqliteStore};

use crate::run::format::run_row::{RunRow, RunStatus};
use crate::run::write::durable::write_atomic;

/// An open store. Both kinds keep the same promises; PostgreSQL adds run ownership ([`Store::claim_run`]) and a
/// local fallback file when its server goes away mid-run.
#[derive(Debug)]
pub enum Store {
    Sqlite(SqliteStore),
    Pg(Box<PgStore>),
}

macro_rules! each {
    ($self:expr, $s:ident => $e:expr) => {
        match $self {
            Store::Sqlite($s) => $e,
            Store::Pg($s) => $e,
        }
    };
}

impl Store {
    /// Open (and create or migrate) the store a `--db` value names.
    pub fn open(db: &DbTarget) -> Result<Store> {
        Ok(match db {
            DbTarget::Sqlite(path) => Store::Sqlite(SqliteStore::open(path)?),
            DbTarget::Postgres(t) => Store::Pg(Box::new(PgStore::connect(t, true)?)),
        })
    }

    /// Open an existing store for reading only: no file created or changed, no migration applied.
    pub fn open_read_only(db: &DbTarget) -> Result<Store> {
        Ok(match db {
            DbTarget::Sqlite(path) => Store::Sqlite(SqliteStore::open_read_only(path)?),
            DbTarget::Postgres(t) => Store::Pg(Box::new(PgStore::connect(t, false)?)),
        })
    }

    /// The store as named in messages and run metadata: the path, or the PostgreSQL target without secrets.
    pub fn describe(&self) -> String {
        match self {
            Store::Sqlite(s) => s.path.display().to_string(),
            Store::Pg(p) => p.describe(),
        }
    }

    pub fn create_run(&mut self, run: &RunRow) -> Result<()> {
        each!(self, s => s.create_run(run))
    }

    pub fn run(&self, run_id: &str) -> Result<Option<RunRow>> {
        each!(self, s => s.run(run_id))
    }

    /// The most recent sweep run (imports are not resumable); in a shared store, this host's most recent one.
    pub fn latest_sweep_run(&self) -> Result<Option<RunRow>> {
        each!(self, s => s.latest_sweep_run())
    }

    pub fn runs(&self) -> Result<Vec<RunRow>> {
        each!(self, s => s.runs())
    }

    pub fn completed_keys(&self, run_id: &str) -> Result<HashSet<String>> {
        each!(self, s => s.completed_keys(run_id))
    }

    /// Insert one record in its own transaction.
    pub fn insert_record(&mut self, rec: &Record) -> Result<()> {
        match self {
            Store::Sqlite(s) => s.insert_record(rec),
            Store::Pg(p) => p.insert_record(rec).map(|_| ()),
        }
    }

    /// A transaction for many rows at once (an import): one commit at its end. Dropped without
    /// [`Batch::commit`], it leaves the store as it was.
    pub fn batch(&mut self) -> Result<Batch<'_>> {
        Ok(match self {
            Store::Sqlite(s) => Batch::Sqlite(s.batch()?),
            Store::Pg(p) => Batch::Pg(p.batch()?),
        })
    }

    pub fn set_run_status(&mut self, run_id: &str, status: RunStatus) -> Result<()> {
        each!(self, s => s.set_run_status(run_id, status))
    }

    /// Make sure this host may write run `run_id`: in a shared store a run belongs to the host that created it, and
    /// another host continues it only with `take_over` (which moves it). An SQLite file has one writer: always yes.
    pub fn claim_run(&mut self, run_id: &str, take_over: bool) -> Result<()> {
        match self {
            Store::Sqlite(_) => Ok(()),
            Store::Pg(p) => p.claim_run(run_id, take_over),
        }
    }

    /// Where a shared store's records go if its server goes away mid-run (`None` for SQLite).
    pub fn fallback_path(&self, run_id: &str) -> Option<PathBuf> {
        match self {
            Store::Sqlite(_) => None,
            Store::Pg(p) => p.fallback_path(run_id),
        }
    }

    /// The local file a shared store's records went to after its server went away during this process.
    pub fn fallback_in_use(&self) -> Option<&Path> {
        match self {
            Store::Sqlite(_) => None,
            Store::Pg(p) => p.fallback_in_use(),
        }
    }

    /// Records as stored (JSON text), in plan order; all runs when `run_ids` is empty.
    pub fn record_json(&self, run_ids: &[String]) -> Result<Vec<String>> {
        each!(self, s => s.record_json(run_ids))
    }

    /// Calls `f` with each record of one run as stored (its `result.json` text), in plan order, without holding
    /// more than one record. Returns the number of records.
    pub fn for_each_record_json(&self, run_id: &str, f: impl FnMut(&str) -> Result<()>) -> Result<u64> {
        each!(self, s => s.for_each_record_json(run_id, f))
    }

    /// The records of one run in plan order.
    pub fn records(&self, run_id: &str) -> Result<Vec<Record>> {
        crate::run::format::record::parse_records(|f| self.for_each_record_json(run_id, f))
    }
}

/// Rows written in one transaction ([`Store::batch`]).
pub enum Batch<'a> {
    Sqlite(SqliteBatch<'a>),
    Pg(PgBatch<'a>),
}

impl Batch<'_> {
    pub fn create_run(&mut self, run: &RunRow) -> Result<()> {
        match self {
            Batch::Sqlite(b) => b.create_run(run),
            Batch::Pg(b) => b.create_run(run),
        }
    }

    /// Insert a record whose JSON text (`serde_json::to_string(rec)`) the caller already has.
    pub fn insert_record_json(&mut self, rec: &Record, json: &str) -> Result<()> {
        match self {
            Batch::Sqlite(b) => b.insert_record_json(rec, json),
            Batch::Pg(b) => b.insert_record_json(rec, json).map(|_| ()),
        }
    }

    pub fn commit(self) -> Result<()> {
        match self {
            Batch::Sqlite(b) => b.commit(),
            Batch::Pg(b) => b.commit(),
        }
    }
}

/// Commit one record: `result.json` first (atomic), then the database row.
pub fn commit_record(store: &mut Store, run_dir: &Path, rec: &Record) -> Result<()> {
    let json = serde_json::to_vec_pretty(rec)?;
    write_atomic(&run_dir.join(&rec.file), &json)?;
    store.insert_record(rec)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::run::format::ids::utc_now;
    use crate::run::format::record::{RunSource, Status, RECORD_SCHEMA};

    pub(crate) fn record(run_id: &str, key: &str, seq: u64) -> Record {
        Record {
            schema: RECORD_SCHEMA,
            run_id: run_id.into(),
            cell_key: key.into(),
            seq,
            source: RunSource::Sweep,
            file: format!("cells/{seq:05}/result.json"),
            endpoint: "e".into(),
            model: "m".into(),
            prompt: "p".into(),
            num_predict: 1,
            epoch: 1,
            repetition: 1,
            stream: true,
            started_at: utc_now(),
            status: Status::Ok,
            http_status: Some(200),
            wall_ms: Some(1.0),
            ..Default::default()
        }
    }
}
