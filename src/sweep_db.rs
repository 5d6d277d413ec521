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

impl SweepDb {
    /// Open `path` read-only; a missing file is an error (a reader never creates a database).
    pub fn open(path: &Path) -> Result<SweepDb> {
        if !path.is_file() {
            bail!("{}: no such sweep database (record runs with `backscope sweep … --db FILE`)", path.display());
        }
        let conn =
            Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX)
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

    /// The records of one run in plan order. An unknown run id is an error naming the runs there are.
    pub fn records(&self, run_id: &str) -> Result<Vec<Record>> {
        let known: Option<i64> =
            self.conn.query_row("SELECT 1 FROM runs WHERE run_id = ?1", [run_id], |r| r.get(0)).optional()?;
        if known.is_none() {
            let ids = self.run_ids()?;
            let shown: Vec<&str> = ids.iter().rev().take(5).map(String::as_str).collect();
            bail!(
                "no run {run_id} in {} ({} run(s){}{})",
                self.path,
                ids.len(),
                if shown.is_empty() { "" } else { ", latest: " },
                shown.join(", ")
            );
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
