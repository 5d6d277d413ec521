//! The SQLite store (`backscope.db` by default), behind [`crate::run::write::store::Store`]; a run directory per run.
//!
//! A cell is committed in two steps: its `result.json` is written to a temporary file, fsynced, renamed into place and
//! its directory fsynced (`durable`); then one SQLite transaction inserts its row. The database is the ledger of
//! completed cells: a crash or power cut between the steps leaves a `result.json` without a row, and `--resume` runs
//! that cell again and replaces the file. `(run_id, cell_key)` is the primary key, so a cell can never be recorded
//! twice. The database runs in WAL mode with `synchronous = FULL`, so a committed row survives a power cut; one fsync
//! per cell is nothing next to an LLM request. An import stores all its records in one transaction instead
//! ([`Store::batch`]): thousands of rows, one sync.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use rusqlite::types::{FromSql, FromSqlError, FromSqlResult, ToSqlOutput, ValueRef};
use rusqlite::{params, Connection, OpenFlags, OptionalExtension, ToSql};

use crate::host::identity::HostIdentity;
use crate::run::format::ids::utc_now;
use crate::run::format::record::{Record, RunSource};
use crate::run::format::run_row::{RunRow, RunStatus};

/// `PRAGMA user_version` of the schema below; migrations step from one version to the next.
const SCHEMA_VERSION: i64 = 3;

const SCHEMA_V1: &str = "
CREATE TABLE runs (
    run_id TEXT PRIMARY KEY,
    created_at TEXT NOT NULL,
    finished_at TEXT,
    status TEXT NOT NULL,
    source TEXT NOT NULL,
    run_dir TEXT NOT NULL,
    plan_json TEXT NOT NULL,
    cells_total INTEGER NOT NULL,
    backscope_version TEXT NOT NULL
);
CREATE TABLE records (
    run_id TEXT NOT NULL REFERENCES runs(run_id),
    cell_key TEXT NOT NULL,
    seq INTEGER NOT NULL,
    endpoint TEXT NOT NULL,
    model TEXT NOT NULL,
    num_gpu INTEGER NOT NULL,
    prompt TEXT NOT NULL,
    num_predict INTEGER NOT NULL,
    epoch INTEGER NOT NULL,
    repetition INTEGER NOT NULL,
    status TEXT NOT NULL,
    error_class TEXT,
    signal TEXT,
    http_status INTEGER,
    wall_ms REAL,
    ttft_ms REAL,
    ttf_ms REAL,
    prompt_tps REAL,
    decode_tps REAL,
    backend TEXT,
    file TEXT NOT NULL,
    json TEXT NOT NULL,
    recorded_at TEXT NOT NULL,
    PRIMARY KEY (run_id, cell_key)
);
CREATE INDEX records_by_point ON records(run_id, endpoint, model, num_gpu);
";

/// Version 2: `sweep --trace`. The record's `trace` section (also inside `json`) in a column of its own, and the
/// request's launch count, so that kernels can be queried without parsing every record (`json_extract(trace_json,
/// '$.families.MMVQ')`). Rows of version-1 databases get NULL: they were not traced.
const SCHEMA_V2: &str = "
ALTER TABLE records ADD COLUMN trace_launches INTEGER;
ALTER TABLE records ADD COLUMN trace_json TEXT;
";

/// Version 3: fleet runs. The host that ran the run: `host_id` (the name runs are owned by in a shared PostgreSQL
/// store, `BACKSCOPE_HOST_ID` or the host name) and its identity (`host::identity::HostIdentity` as JSON: host name,
/// kernel, GPUs with arch and driver, runtime versions). Runs of older databases get NULL: their host is unknown.
const SCHEMA_V3: &str = "
ALTER TABLE runs ADD COLUMN host_id TEXT;
ALTER TABLE runs ADD COLUMN host_json TEXT;
";

impl ToSql for RunStatus {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(self.as_str().into())
    }
}

impl FromSql for RunStatus {
    fn column_result(value: ValueRef<'_>) -> FromSqlResult<Self> {
        let s = value.as_str()?;
        RunStatus::parse(s).ok_or_else(|| FromSqlError::Other(format!("unknown run status `{s}`").into()))
    }
}

impl ToSql for RunSource {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(self.as_str().into())
    }
}

impl FromSql for RunSource {
    fn column_result(value: ValueRef<'_>) -> FromSqlResult<Self> {
        let s = value.as_str()?;
        RunSource::parse(s).ok_or_else(|| FromSqlError::Other(format!("unknown run source `{s}`").into()))
    }
}

#[derive(Debug)]
pub struct SqliteStore {
    conn: Connection,
    pub path: PathBuf,
}

impl SqliteStore {
    pub fn open(path: &Path) -> Result<SqliteStore> {
        let conn = connect_durable(path, std::time::Duration::from_secs(10))?;
        conn.execute_batch("PRAGMA foreign_keys = ON;")?;
        let mut store = SqliteStore { conn, path: path.to_path_buf() };
        store.migrate()?;
        Ok(store)
    }

    /// Open an existing database for reading only, changing no data (`sweep --dry-run --resume`, `push`,
    /// `report`): every committed transaction is seen, those still in the `-wal` file included, and no companion
    /// file is created but the `-shm` index of a `-wal` that lacks it ([`connect_read_only`] says when each is
    /// read how).
    pub fn open_read_only(path: &Path) -> Result<SqliteStore> {
        if !path.is_file() {
            bail!("{} does not exist: run a sweep first or pass --db", path.display());
        }
        let conn = connect_read_only(path, std::time::Duration::from_secs(10))?;
        let has_tables: bool = conn
            .query_row(
                "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name IN ('runs', 'records')",
                [],
                |r| r.get::<_, i64>(0),
            )
            .with_context(|| format!("{}: not an SQLite database", path.display()))?
            == 2;
        if !has_tables {
            bail!("{}: not a backscope sweep database (no `runs` and `records` tables)", path.display());
        }
        let version: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
        if version > SCHEMA_VERSION {
            bail!(
                "{} was written by a newer backscope (schema {version}, this one knows {SCHEMA_VERSION}); use that version or another --db",
                path.display()
            );
        }
        Ok(SqliteStore { conn, path: path.to_path_buf() })
    }

    fn migrate(&mut self) -> Result<()> {
        let version: i64 = self.conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
        if version > SCHEMA_VERSION {
            bail!(
                "{} was written by a newer backscope (schema {version}, this one knows {SCHEMA_VERSION}); use that version or another --db",
                self.path.display()
            );
        }
        if version < 1 {
            let tx = self.conn.transaction()?;
            tx.execute_batch(SCHEMA_V1)?;
            tx.execute_batch("PRAGMA user_version = 1")?;
            tx.commit()?;
        }
        if version < 2 {
            let tx = self.conn.transaction()?;
            tx.execute_batch(SCHEMA_V2)?;
            tx.execute_batch("PRAGMA user_version = 2")?;
            tx.commit()?;
        }
        if version < 3 {
            let tx = self.conn.transaction()?;
            tx.execute_batch(SCHEMA_V3)?;
            tx.execute_batch("PRAGMA user_version = 3")?;
            tx.commit()?;
        }
        Ok(())
    }

    pub fn create_run(&mut self, run: &RunRow) -> Result<()> {
        insert_run(&self.conn, run)
    }

    fn run_from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<RunRow> {
        Ok(RunRow {
            run_id: r.get(0)?,
            created_at: r.get(1)?,
            finished_at: r.get(2)?,
            status: r.get(3)?,
            source: r.get(4)?,
            run_dir: r.get(5)?,
            plan_json: r.get(6)?,
            cells_total: r.get::<_, i64>(7)? as u64,
            backscope_version: r.get(8)?,
            host: host_from_json(r.get::<_, Option<String>>(9)?),
            owner: None,
        })
    }

    const RUN_COLUMNS: &'static str =
        "run_id, created_at, finished_at, status, source, run_dir, plan_json, cells_total, backscope_version, host_json";

    pub fn run(&self, run_id: &str) -> Result<Option<RunRow>> {
        Ok(self
            .conn
            .query_row(
                &format!("SELECT {} FROM runs WHERE run_id = ?1", Self::RUN_COLUMNS),
                [run_id],
                Self::run_from_row,
            )
            .optional()?)
    }

    /// The most recent sweep run (imports are not resumable).
    pub fn latest_sweep_run(&self) -> Result<Option<RunRow>> {
        Ok(self
            .conn
            .query_row(
                &format!(
                    "SELECT {} FROM runs WHERE source = ?1 ORDER BY created_at DESC, rowid DESC LIMIT 1",
                    Self::RUN_COLUMNS
                ),
                [RunSource::Sweep],
                Self::run_from_row,
            )
            .optional()?)
    }

    pub fn runs(&self) -> Result<Vec<RunRow>> {
        let mut st =
            self.conn.prepare(&format!("SELECT {} FROM runs ORDER BY created_at, rowid", Self::RUN_COLUMNS))?;
        let rows = st.query_map([], Self::run_from_row)?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    pub fn completed_keys(&self, run_id: &str) -> Result<HashSet<String>> {
        let mut st = self.conn.prepare("SELECT cell_key FROM records WHERE run_id = ?1")?;
        let rows = st.query_map([run_id], |r| r.get::<_, String>(0))?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// Insert one record in its own transaction.
    pub fn insert_record(&mut self, rec: &Record) -> Result<()> {
        let json = serde_json::to_string(rec)?;
        let tx = self.conn.transaction()?;
        insert_record_json(&tx, rec, &json)?;
        tx.commit()?;
        Ok(())
    }

    /// A transaction for many rows at once (an import): one commit, so one sync of the database, at its end.
    /// Dropped without [`Batch::commit`], it leaves the database as it was.
    pub fn batch(&mut self) -> Result<SqliteBatch<'_>> {
        Ok(SqliteBatch { tx: self.conn.transaction()? })
    }

    pub fn set_run_status(&mut self, run_id: &str, status: RunStatus) -> Result<()> {
        let finished = (status != RunStatus::Running).then(utc_now);
        self.conn.execute(
            "UPDATE runs SET status = ?2, finished_at = ?3 WHERE run_id = ?1",
            params![run_id, status, finished],
        )?;
        Ok(())
    }

    /// Records as stored (JSON text), in plan order; all runs when `run_ids` is empty.
    pub fn record_json(&self, run_ids: &[String]) -> Result<Vec<String>> {
        let mut out = Vec::new();
        if run_ids.is_empty() {
            let mut st = self.conn.prepare(
                "SELECT r.json FROM records r JOIN runs u USING (run_id) ORDER BY u.created_at, u.rowid, r.seq",
            )?;
            for row in st.query_map([], |r| r.get::<_, String>(0))? {
                out.push(row?);
            }
        } else {
            let mut st = self.conn.prepare("SELECT json FROM records WHERE run_id = ?1 ORDER BY seq")?;
            for id in run_ids {
                if self.run(id)?.is_none() {
                    bail!("no run {id} in {}", self.path.display());
                }
                for row in st.query_map([id], |r| r.get::<_, String>(0))? {
                    out.push(row?);
                }
            }
        }
        Ok(out)
    }

    /// Calls `f` with each record of one run as stored (its `result.json` text), in plan order, without holding
    /// more than one record: a run of any size is read in bounded memory. Errors name the database, the run and
    /// the cell. Returns the number of records.
    pub fn for_each_record_json(&self, run_id: &str, mut f: impl FnMut(&str) -> Result<()>) -> Result<u64> {
        let mut st = self.conn.prepare("SELECT json, cell_key FROM records WHERE run_id = ?1 ORDER BY seq")?;
        let mut rows = st.query([run_id])?;
        let mut n = 0u64;
        while let Some(row) = rows.next()? {
            let at = || {
                format!(
                    "{}: record {} of run {run_id}",
                    self.path.display(),
                    row.get::<_, String>(1).unwrap_or_default()
                )
            };
            let json =
                std::str::from_utf8(row.get_ref(0)?.as_bytes()?).with_context(|| format!("{} is not UTF-8", at()))?;
            f(json).with_context(at)?;
            n += 1;
        }
        Ok(n)
    }

    /// The records of one run in plan order.
    pub fn records(&self, run_id: &str) -> Result<Vec<Record>> {
        crate::run::format::record::parse_records(|f| self.for_each_record_json(run_id, f))
    }
}

/// Rows written in one transaction ([`Store::batch`]).
pub struct SqliteBatch<'a> {
    tx: rusqlite::Transaction<'a>,
}

impl SqliteBatch<'_> {
    pub fn create_run(&self, run: &RunRow) -> Result<()> {
        insert_run(&self.tx, run)
    }

    /// Insert a record whose JSON text (`serde_json::to_string(rec)`) the caller already has.
    pub fn insert_record_json(&self, rec: &Record, json: &str) -> Result<()> {
        insert_record_json(&self.tx, rec, json)
    }

    pub fn commit(self) -> Result<()> {
        Ok(self.tx.commit()?)
    }
}

fn insert_run(conn: &Connection, run: &RunRow) -> Result<()> {
    conn.execute(
        "INSERT INTO runs (run_id, created_at, finished_at, status, source, run_dir, plan_json, cells_total, backscope_version,
            host_id, host_json)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
        params![
            run.run_id,
            run.created_at,
            run.finished_at,
            run.status,
            run.source,
            run.run_dir,
            run.plan_json,
            run.cells_total as i64,
            run.backscope_version,
            run.host.as_ref().map(|h| h.host_id.clone()),
            run.host.as_ref().map(serde_json::to_string).transpose()?,
        ],
    )
    .with_context(|| format!("cannot record run {}", run.run_id))?;
    Ok(())
}

/// One record's row; `json` is the record as stored (`serde_json::to_string(rec)`).
fn insert_record_json(conn: &Connection, rec: &Record, json: &str) -> Result<()> {
    let trace_json = rec.trace.as_ref().map(serde_json::to_string).transpose()?;
    let mut st = conn.prepare_cached(
        "INSERT INTO records (run_id, cell_key, seq, endpoint, model, num_gpu, prompt, num_predict, epoch, repetition,
            status, error_class, signal, http_status, wall_ms, ttft_ms, ttf_ms, prompt_tps, decode_tps, backend, file, json, recorded_at,
            trace_launches, trace_json)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21, ?22, ?23, ?24, ?25)",
    )?;
    st.execute(params![
        rec.run_id,
        rec.cell_key,
        rec.seq as i64,
        rec.endpoint,
        rec.model,
        rec.num_gpu,
        rec.prompt,
        rec.num_predict,
        rec.epoch,
        rec.repetition,
        if rec.is_ok() { "ok" } else { "fail" },
        rec.error_class.map(|c| c.as_str()),
        rec.signal,
        rec.http_status,
        rec.wall_ms,
        rec.ttft_ms,
        rec.ttf_ms,
        rec.prompt_tps,
        rec.decode_tps,
        rec.backend.as_ref().map(|b| b.backend.clone()),
        rec.file,
        json,
        utc_now(),
        rec.trace.as_ref().map(|t| t.total_launches as i64),
        trace_json,
    ])
    .with_context(|| format!("cannot record cell {} of run {}", rec.cell_key, rec.run_id))?;
    Ok(())
}

/// The stored host identity; one that does not parse (a newer backscope's) is left out rather than failing the
/// read of the run.
pub(crate) fn host_from_json(json: Option<String>) -> Option<HostIdentity> {
    json.and_then(|j| serde_json::from_str(&j).ok())
}

/// A path as the path part of an SQLite URI filename: bytes other than unreserved characters and `/` are
/// percent-encoded, so that `?`, `#` and `%` in a directory name are not read as URI syntax.
/// A connection for writing to the SQLite file at `path` (its directory created, the file created if missing), in WAL
/// mode with `synchronous = FULL`: a committed transaction survives a power cut, and other connections (a sweep
/// beside a bisect) write to the same file. Shared by the sweep store and the bisect tables.
pub fn connect_durable(path: &Path, busy: std::time::Duration) -> Result<Connection> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    if path.exists() {
        // An existing path must be a regular file: SQLite reports a FIFO or a device only as "disk I/O error".
        crate::host::inputs::open_input(path).with_context(|| format!("cannot open database {}", path.display()))?;
    }
    let conn = Connection::open(path).with_context(|| format!("cannot open database {}", path.display()))?;
    conn.busy_timeout(busy)?;
    let mode: String = conn.query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))?;
    if !mode.eq_ignore_ascii_case("wal") {
        bail!("{}: SQLite refused WAL mode ({mode}); put the database on a local file system", path.display());
    }
    conn.execute_batch("PRAGMA synchronous = FULL;")?;
    Ok(conn)
}

/// A read-only connection to the existing SQLite file at `path` that sees every committed transaction and changes
/// no data (see [`SqliteStore::open_read_only`]):
/// - no `-wal`, or an empty one without its `-shm`: every committed transaction is in the main file, which is
///   opened as immutable — no lock, no companion file created;
/// - a `-wal` with its `-shm` (a writer has the database open, or left both): read through them;
/// - a `-wal` with frames but no `-shm` (copied without it, or a writer that crashed): the transactions in the WAL
///   are committed ones, which the main file alone lacks, so it is read through the WAL too — SQLite rebuilds the
///   `-shm` index beside it, the one file this creates. Where the directory cannot be written, that cannot be done
///   and the open is refused with the reason (an immutable open would silently miss those transactions).
pub fn connect_read_only(path: &Path, busy: std::time::Duration) -> Result<Connection> {
    let companion = |suffix: &str| {
        let mut p = path.as_os_str().to_owned();
        p.push(suffix);
        PathBuf::from(p)
    };
    let (wal, shm) = (companion("-wal"), companion("-shm"));
    let wal_len = std::fs::symlink_metadata(&wal).ok().map(|m| m.len());
    let has_shm = std::fs::symlink_metadata(&shm).is_ok();
    let immutable = match wal_len {
        None => true,
        Some(0) => !has_shm,
        Some(_) if has_shm => false,
        Some(len) => {
            let dir = crate::run::format::paths::absolute(path)
                .parent()
                .map(Path::to_path_buf)
                .unwrap_or_else(|| PathBuf::from("/"));
            if !dir_writable(&dir) {
                bail!(
                    "cannot read {}: its write-ahead log {} holds {len} bytes of committed transactions that are not \
                     in the database file yet, and reading them needs its index {} (missing), which SQLite cannot \
                     create because {} is not writable; copy the database and its -wal file into a writable \
                     directory (or open it once with write access) and read that",
                    path.display(),
                    wal.display(),
                    shm.display(),
                    dir.display()
                );
            }
            false
        }
    };
    let immutable = if immutable { "&immutable=1" } else { "" };
    let uri = format!("file:{}?mode=ro{immutable}", uri_path(&crate::run::format::paths::absolute(path)));
    let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_URI | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = Connection::open_with_flags(&uri, flags)
        .with_context(|| format!("cannot open database {} for reading", path.display()))?;
    conn.busy_timeout(busy)?;
    Ok(conn)
}

/// Whether this process may create files in `dir` (`access(W_OK)`: permissions, a read-only mount).
fn dir_writable(dir: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let Ok(c) = std::ffi::CString::new(dir.as_os_str().as_bytes()) else { return false };
    // SAFETY: a NUL-terminated path that lives across the call.
    unsafe { libc::access(c.as_ptr(), libc::W_OK) == 0 }
}

fn uri_path(path: &Path) -> String {
    use std::os::unix::ffi::OsStrExt;
    let mut out = String::new();
    for &b in path.as_os_str().as_bytes() {
        if b.is_ascii_alphanumeric() || b"/-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
#[path = "sqlite_tests.rs"]
mod tests;
