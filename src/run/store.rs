//! Where records go: the store a `--db` value names ([`super::target::DbTarget`]) — an SQLite file (`backscope.db`
//! by default, [`super::sqlite`]) or a PostgreSQL database shared by many hosts ([`super::pg`]) — and a run directory
//! per run.
//!
//! A cell is committed in two steps: its `result.json` is written to a temporary file, fsynced, renamed into place
//! and its directory fsynced (`durable`); then one transaction inserts its row (SQLite: WAL with `synchronous =
//! FULL`; PostgreSQL: a committed statement). The database is the ledger of completed cells: a crash between the
//! steps leaves a `result.json` without a row, and `--resume` runs that cell again and replaces the file. `(run_id,
//! cell_key)` is unique in both stores, so a cell can never be recorded twice. An import stores all its records in
//! one transaction instead ([`Store::batch`]).

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::Result;
use serde::{Deserialize, Serialize};

use super::host::HostIdentity;
use super::pg::{PgBatch, PgStore};
use super::record::{Record, RunSource};
use super::sqlite::{SqliteBatch, SqliteStore};
use super::target::DbTarget;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunRow {
    pub run_id: String,
    pub created_at: String,
    pub finished_at: Option<String>,
    pub status: RunStatus,
    pub source: RunSource,
    pub run_dir: String,
    pub plan_json: String,
    pub cells_total: u64,
    pub backscope_version: String,
    /// The host that ran (or imported) the run; `None` for runs stored before hosts were recorded.
    pub host: Option<HostIdentity>,
}

/// Where a run stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    Running,
    Finished,
    /// Stopped by Ctrl-C (or SIGTERM/SIGHUP) with cells left; `--resume` continues it.
    Interrupted,
}

impl RunStatus {
    /// The stored spelling (SQLite, PostgreSQL, `sweep report --json`, events).
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Running => "running",
            RunStatus::Finished => "finished",
            RunStatus::Interrupted => "interrupted",
        }
    }

    pub(crate) fn parse(s: &str) -> Option<RunStatus> {
        [RunStatus::Running, RunStatus::Finished, RunStatus::Interrupted].into_iter().find(|x| x.as_str() == s)
    }
}

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
    pub fn open(db: &Path) -> Result<Store> {
        Ok(match DbTarget::parse(db)? {
            DbTarget::Sqlite(path) => Store::Sqlite(SqliteStore::open(&path)?),
            DbTarget::Postgres(t) => Store::Pg(Box::new(PgStore::connect(&t, true)?)),
        })
    }

    /// Open an existing store for reading only: no file created or changed, no migration applied.
    pub fn open_read_only(db: &Path) -> Result<Store> {
        Ok(match DbTarget::parse(db)? {
            DbTarget::Sqlite(path) => Store::Sqlite(SqliteStore::open_read_only(&path)?),
            DbTarget::Postgres(t) => Store::Pg(Box::new(PgStore::connect(&t, false)?)),
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
        let mut out = Vec::new();
        self.for_each_record_json(run_id, |json| {
            use anyhow::Context;
            out.push(
                serde_json::from_str(json)
                    .context("the stored record does not parse (written by another backscope version?)")?,
            );
            Ok(())
        })?;
        Ok(out)
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

pub use super::durable::write_atomic;

/// Commit one record: `result.json` first (atomic), then the database row.
pub fn commit_record(store: &mut Store, run_dir: &Path, rec: &Record) -> Result<()> {
    let json = serde_json::to_vec_pretty(rec)?;
    write_atomic(&run_dir.join(&rec.file), &json)?;
    store.insert_record(rec)
}

/// UTC now as RFC 3339 with milliseconds.
pub fn utc_now() -> String {
    let d = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
    format_utc(d.as_secs() as i64, d.subsec_millis())
}

/// Seconds since the epoch → `YYYY-MM-DDTHH:MM:SS.mmmZ` (proleptic Gregorian, Howard Hinnant's days-to-civil).
pub fn format_utc(secs: i64, millis: u32) -> String {
    let days = secs.div_euclid(86_400);
    let sod = secs.rem_euclid(86_400);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{millis:03}Z", sod / 3600, sod % 3600 / 60, sod % 60)
}

/// A new run id: UTC time to the second plus 4 hex digits, e.g. `20261121-120501-3fa2`. Sorts by time; the suffix
/// keeps two runs started in the same second apart.
pub fn new_run_id() -> String {
    let d = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
    let t = format_utc(d.as_secs() as i64, 0);
    let salt = (d.subsec_nanos() ^ std::process::id().rotate_left(16)) & 0xffff;
    format!("{}{}{}-{}{}{}-{salt:04x}", &t[0..4], &t[5..7], &t[8..10], &t[11..13], &t[14..16], &t[17..19])
}

/// A record's id in a shared store: the same cell of the same run always gets the same id, whichever host stores
/// it and however often (a push repeated, a cell stored by a run that lost its server and pushed later), so that
/// inserting it twice stores it once. SHA-256 of run id, cell key and repetition, length-prefixed so that no two
/// different triples hash the same bytes; 32 hex digits.
pub fn record_id(run_id: &str, cell_key: &str, repetition: u32) -> String {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    for part in [run_id.as_bytes(), cell_key.as_bytes(), &repetition.to_le_bytes()] {
        h.update((part.len() as u64).to_le_bytes());
        h.update(part);
    }
    h.finalize()[..16].iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::super::record::{Status, RECORD_SCHEMA};
    use super::*;

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

    #[test]
    fn utc_formatting_matches_known_dates() {
        assert_eq!(format_utc(0, 0), "1970-01-01T00:00:00.000Z");
        assert_eq!(format_utc(951_782_400, 5), "2000-02-29T00:00:00.005Z");
        assert_eq!(format_utc(1_795_262_400, 0), "2026-11-21T12:00:00.000Z");
        let id = new_run_id();
        assert_eq!(id.len(), "20261121-120501-3fa2".len());
        assert!(id.chars().nth(8) == Some('-'));
    }

    #[test]
    fn record_ids_are_deterministic_and_distinct() {
        let a = record_id("20261121-120501-3fa2", "cpu|m|ngl=0|p|n=1|e1|r1", 1);
        assert_eq!(a, record_id("20261121-120501-3fa2", "cpu|m|ngl=0|p|n=1|e1|r1", 1));
        // Computed independently with Python's hashlib over the same length-prefixed bytes.
        assert_eq!(a, "32b31d59bbe17d95b2d9ca42a30cb972");
        // Inputs that differ only in where one field ends and the next begins differ.
        assert_ne!(record_id("ab", "c", 1), record_id("a", "bc", 1));
        assert_ne!(a, record_id("20261121-120501-3fa2", "cpu|m|ngl=0|p|n=1|e1|r1", 2));
        assert_ne!(a, record_id("20261121-120501-3fa3", "cpu|m|ngl=0|p|n=1|e1|r1", 1));
    }
}
