//! Read-only access to the records a sweep stored in its SQLite database, for the commands that read runs without
//! writing any (`predict --run`, `predict --from-run`, `gate --runs`).
//!
//! The sweep's own store opens the database for writing and migrates it; a reader must do neither, so that looking
//! at a run never changes the file (or fails on a read-only copy). The records are read from the `json` column,
//! which holds each cell's [`Record`] as `result.json` has it, so the record layout stays the sweep's.

use std::path::Path;

use anyhow::{bail, Context, Result};
use rusqlite::{Connection, OpenFlags, OptionalExtension};

use crate::sweep::record::Record;

/// An open sweep database.
#[derive(Debug)]
pub struct SweepDb {
    conn: Connection,
    path: String,
}

/// A run as the database lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunInfo {
    pub run_id: String,
    pub created_at: String,
    pub finished_at: Option<String>,
    /// `running`, `finished`, `interrupted`.
    pub status: String,
    /// `sweep`, or `llama-bench` for imported results.
    pub source: String,
    pub run_dir: String,
    pub plan_json: String,
    pub cells_total: u64,
}

/// A path as the path part of an SQLite URI filename: bytes other than unreserved characters and `/` are
/// percent-encoded, so that `?`, `#` and `%` in a directory name are not read as URI syntax.
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

impl SweepDb {
    /// Open `path` read-only; a missing file is an error (a reader never creates a database).
    ///
    /// Nor any other file: a read-only connection to a WAL database creates its missing `-wal` and `-shm`
    /// companions and leaves them behind. So with both present (a writer has the database open) it reads through
    /// them; otherwise every committed transaction is in the main file, which is opened as immutable — no lock,
    /// no companion file (the sweep store's own read-only open does the same).
    pub fn open(path: &Path) -> Result<SweepDb> {
        if !path.is_file() {
            bail!("{}: no such sweep database (record runs with `backscope sweep … --db FILE`)", path.display());
        }
        let companion = |suffix: &str| {
            let mut p = path.as_os_str().to_owned();
            p.push(suffix);
            std::path::PathBuf::from(p).exists()
        };
        let immutable = if companion("-wal") && companion("-shm") { "" } else { "&immutable=1" };
        let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
        let uri = format!("file:{}?mode=ro{immutable}", uri_path(&absolute));
        let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_URI | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let conn = Connection::open_with_flags(&uri, flags)
            .with_context(|| format!("cannot open sweep database {}", path.display()))?;
        conn.busy_timeout(std::time::Duration::from_secs(10))?;
        let has_records: bool = conn
            .query_row(
                "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name IN ('runs', 'records')",
                [],
                |r| r.get::<_, i64>(0),
            )
            .with_context(|| format!("{}: not an SQLite database", path.display()))?
            == 2;
        if !has_records {
            bail!("{}: not a backscope sweep database (no `runs` and `records` tables)", path.display());
        }
        Ok(SweepDb { conn, path: path.display().to_string() })
    }

    pub fn path(&self) -> &str {
        &self.path
    }

    /// Every run id, oldest first.
    pub fn run_ids(&self) -> Result<Vec<String>> {
        let mut st = self.conn.prepare("SELECT run_id FROM runs ORDER BY created_at, rowid")?;
        let ids = st.query_map([], |r| r.get::<_, String>(0))?.collect::<rusqlite::Result<Vec<_>>>()?;
        Ok(ids)
    }

    /// The most recent run, by creation time; none in an empty database.
    pub fn latest_run(&self) -> Result<Option<String>> {
        Ok(self
            .conn
            .query_row("SELECT run_id FROM runs ORDER BY created_at DESC, rowid DESC LIMIT 1", [], |r| r.get(0))
            .optional()?)
    }

    /// An unknown run id as an error naming the runs there are.
    fn no_such_run(&self, run_id: &str) -> anyhow::Error {
        let ids = match self.run_ids() {
            Ok(ids) => ids,
            Err(e) => return e,
        };
        let shown: Vec<&str> = ids.iter().rev().take(5).map(String::as_str).collect();
        anyhow::anyhow!(
            "no run {run_id} in {} ({} run(s){}{})",
            self.path,
            ids.len(),
            if shown.is_empty() { "" } else { ", latest: " },
            shown.join(", ")
        )
    }

    /// What the database says about one run.
    pub fn run_info(&self, run_id: &str) -> Result<RunInfo> {
        let info = self
            .conn
            .query_row(
                "SELECT run_id, created_at, finished_at, status, source, run_dir, plan_json, cells_total FROM runs WHERE run_id = ?1",
                [run_id],
                |r| {
                    Ok(RunInfo {
                        run_id: r.get(0)?,
                        created_at: r.get(1)?,
                        finished_at: r.get(2)?,
                        status: r.get(3)?,
                        source: r.get(4)?,
                        run_dir: r.get(5)?,
                        plan_json: r.get(6)?,
                        cells_total: r.get::<_, i64>(7)?.max(0) as u64,
                    })
                },
            )
            .optional()?;
        info.ok_or_else(|| self.no_such_run(run_id))
    }

    /// Calls `f` with each record of one run as stored (its `result.json` text), in plan order, without holding
    /// more than one record: a run of any size is read in bounded memory. Returns the number of records.
    pub fn for_each_record_json(&self, run_id: &str, mut f: impl FnMut(&str) -> Result<()>) -> Result<u64> {
        self.run_info(run_id)?;
        let mut st = self.conn.prepare("SELECT json, cell_key FROM records WHERE run_id = ?1 ORDER BY seq")?;
        let mut rows = st.query([run_id])?;
        let mut n = 0u64;
        while let Some(row) = rows.next()? {
            let json = std::str::from_utf8(row.get_ref(0)?.as_bytes()?).with_context(|| {
                format!(
                    "{}: record {} of run {run_id} is not UTF-8",
                    self.path,
                    row.get::<_, String>(1).unwrap_or_default()
                )
            })?;
            f(json).with_context(|| {
                format!("{}: record {} of run {run_id}", self.path, row.get::<_, String>(1).unwrap_or_default())
            })?;
            n += 1;
        }
        Ok(n)
    }

    /// The records of one run in plan order. An unknown run id is an error naming the runs there are.
    pub fn records(&self, run_id: &str) -> Result<Vec<Record>> {
        let known: Option<i64> =
            self.conn.query_row("SELECT 1 FROM runs WHERE run_id = ?1", [run_id], |r| r.get(0)).optional()?;
        if known.is_none() {
            return Err(self.no_such_run(run_id));
        }
        let mut st = self.conn.prepare("SELECT json, cell_key FROM records WHERE run_id = ?1 ORDER BY seq")?;
        let rows = st.query_map([run_id], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))?;
        let mut out = Vec::new();
        for row in rows {
            let (json, key) = row?;
            let rec: Record = serde_json::from_str(&json).with_context(|| {
                format!(
                    "{}: record {key} of run {run_id} does not parse (written by another backscope version?)",
                    self.path
                )
            })?;
            out.push(rec);
        }
        Ok(out)
    }

    /// The records of every run, oldest run first.
    pub fn all_records(&self) -> Result<Vec<Record>> {
        let mut out = Vec::new();
        for id in self.run_ids()? {
            out.extend(self.records(&id)?);
        }
        Ok(out)
    }
}

/// The records of `records` that a `--cell` selector names: its position in the plan (`seq`), its whole cell key,
/// or its `result.json` path. `None` selects all.
pub fn select_cells<'r>(records: &'r [Record], cell: Option<&str>) -> Result<Vec<&'r Record>> {
    let Some(sel) = cell else { return Ok(records.iter().collect()) };
    let picked: Vec<&Record> = records
        .iter()
        .filter(|r| sel.parse::<u64>().is_ok_and(|n| n == r.seq) || r.cell_key == sel || r.file == sel)
        .collect();
    if picked.is_empty() {
        let keys: Vec<String> = records.iter().take(8).map(|r| format!("{} ({})", r.seq, r.cell_key)).collect();
        bail!("no cell `{sel}` in the run (cells are named by position or key: {})", keys.join(", "));
    }
    Ok(picked)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sweep::record::{RunSource, Status, RECORD_SCHEMA};
    use crate::sweep::store::{self, RunRow, RunStatus, Store};

    fn files(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> =
            std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
        v.sort();
        v
    }

    #[test]
    fn a_reader_creates_no_file_and_streams_records_in_plan_order() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("a ?#%b.db");
        {
            let mut s = Store::open(&db).unwrap();
            for (id, created) in [("r1", "2026-01-01T00:00:00.000Z"), ("r2", "2026-01-02T00:00:00.000Z")] {
                s.create_run(&RunRow {
                    run_id: id.into(),
                    created_at: created.into(),
                    finished_at: None,
                    status: RunStatus::Finished,
                    source: RunSource::Sweep,
                    run_dir: "/runs/x".into(),
                    plan_json: "{}".into(),
                    cells_total: 3,
                    backscope_version: "t".into(),
                })
                .unwrap();
            }
            // Inserted out of plan order.
            for seq in [2u64, 0, 1] {
                s.insert_record(&Record {
                    schema: RECORD_SCHEMA,
                    run_id: "r2".into(),
                    cell_key: format!("k{seq}"),
                    seq,
                    file: format!("cells/{seq:05}/result.json"),
                    started_at: store::utc_now(),
                    status: Status::Ok,
                    ..Default::default()
                })
                .unwrap();
            }
        }
        let before = files(dir.path());
        let r = SweepDb::open(&db).unwrap();
        assert_eq!(r.latest_run().unwrap().as_deref(), Some("r2"));
        let info = r.run_info("r2").unwrap();
        assert_eq!((info.status.as_str(), info.source.as_str(), info.cells_total), ("finished", "sweep", 3));
        let mut seqs = Vec::new();
        let n = r
            .for_each_record_json("r2", |j| {
                seqs.push(serde_json::from_str::<Record>(j)?.seq);
                Ok(())
            })
            .unwrap();
        assert_eq!((n, seqs), (3, vec![0, 1, 2]));
        let e = format!("{:#}", r.run_info("nope").unwrap_err());
        assert!(e.contains("no run nope") && e.contains("latest: r2, r1"), "{e}");
        drop(r);
        assert_eq!(files(dir.path()), before, "no -wal or -shm left by a reader");
    }
}
