//! Read-only access to the records a sweep stored in its database (an SQLite file or a shared PostgreSQL store), for the commands that read runs without
//! writing any (`predict --run`, `predict --from-run`, `gate --runs`).
//!
//! The sweep's own store opens the database for writing and migrates it; a reader must do neither, so that looking
//! at a run never changes the file (or fails on a read-only copy). The records are read from the `json` column,
//! which holds each cell's [`Record`] as `result.json` has it, so the record layout stays the sweep's.

use anyhow::{bail, Result};

use crate::run::format::record::Record;
use crate::run::format::run_row::RunRow;
use crate::run::format::target::{DbTarget, DbValue};
use crate::run::write::store::Store;

/// An open sweep database, read-only (the sweep store's own read-only open: no file created or changed, a newer
/// schema refused, a file without the sweep's tables refused).
#[derive(Debug)]
pub struct SweepDb {
    store: Store,
    /// As given, for messages and sources.
    path: String,
}

impl SweepDb {
    /// Open `db` read-only; a missing file is an error (a reader never creates a database).
    pub fn open(db: &DbValue) -> Result<SweepDb> {
        let target = db.target()?;
        let DbTarget::Sqlite(path) = target else {
            let store = Store::open_read_only(target)?;
            return Ok(SweepDb { path: store.describe(), store });
        };
        if !path.exists() {
            bail!("{}: no such sweep database (record runs with `backscope sweep … --db FILE`)", path.display());
        }
        // A FIFO, a device or a directory is named for what it is (the open does not block on it).
        crate::host::inputs::open_input(path)?;
        Ok(SweepDb { store: Store::open_read_only(target)?, path: path.display().to_string() })
    }

    pub fn path(&self) -> &str {
        &self.path
    }

    /// Every run, oldest first.
    pub fn runs(&self) -> Result<Vec<RunRow>> {
        self.store.runs()
    }

    /// The most recent run, by creation time; none in an empty database.
    pub fn latest_run(&self) -> Result<Option<String>> {
        Ok(self.store.runs()?.pop().map(|r| r.run_id))
    }

    /// An unknown run id as an error naming the runs there are.
    fn no_such_run(&self, run_id: &str) -> anyhow::Error {
        let runs = match self.store.runs() {
            Ok(runs) => runs,
            Err(e) => return e,
        };
        let shown: Vec<&str> = runs.iter().rev().take(5).map(|r| r.run_id.as_str()).collect();
        anyhow::anyhow!(
            "no run {run_id} in {} ({} run(s){}{})",
            self.path,
            runs.len(),
            if shown.is_empty() { "" } else { ", latest: " },
            shown.join(", ")
        )
    }

    /// What the database says about one run. An unknown run id is an error naming the runs there are.
    pub fn run_info(&self, run_id: &str) -> Result<RunRow> {
        self.store.run(run_id)?.ok_or_else(|| self.no_such_run(run_id))
    }

    /// Each record of one run as stored, in plan order, one at a time ([`Store::for_each_record_json`]).
    pub fn for_each_record_json(&self, run_id: &str, f: impl FnMut(&str) -> Result<()>) -> Result<u64> {
        self.run_info(run_id)?;
        self.store.for_each_record_json(run_id, f)
    }

    /// The records of one run in plan order. An unknown run id is an error naming the runs there are.
    pub fn records(&self, run_id: &str) -> Result<Vec<Record>> {
        self.run_info(run_id)?;
        self.store.records(run_id)
    }

    /// The records of every run, oldest run first.
    pub fn all_records(&self) -> Result<Vec<Record>> {
        let mut out = Vec::new();
        for run in self.store.runs()? {
            out.extend(self.records(&run.run_id)?);
        }
        Ok(out)
    }
}

/// Whether the `--cell` selector `sel` names record `r`: its position in the plan (`seq`), its whole cell key, or its
/// `result.json` path.
pub fn cell_selected(r: &Record, sel: &str) -> bool {
    sel.parse::<u64>().is_ok_and(|n| n == r.seq) || r.cell_key == sel || r.file == sel
}

/// The records of `records` that a `--cell` selector names: its position in the plan (`seq`), its whole cell key,
/// or its `result.json` path. `None` selects all.
pub fn select_cells<'r>(records: &'r [Record], cell: Option<&str>) -> Result<Vec<&'r Record>> {
    let Some(sel) = cell else { return Ok(records.iter().collect()) };
    let picked: Vec<&Record> = records.iter().filter(|r| cell_selected(r, sel)).collect();
    if picked.is_empty() {
        let keys: Vec<String> = records.iter().take(8).map(|r| format!("{} ({})", r.seq, r.cell_key)).collect();
        bail!("no cell `{sel}` in the run (cells are named by position or key: {})", keys.join(", "));
    }
    Ok(picked)
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::run::format::ids::utc_now;
    use crate::run::format::record::{RunSource, Status, RECORD_SCHEMA};
    use crate::run::format::run_row::{RunRow, RunStatus};
    use crate::run::write::store::Store;

    fn files(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> =
            std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
        v.sort();
        v
    }

    #[test]
    fn a_reader_creates_no_file_and_streams_records_in_plan_order() {
        let dir = tempfile::tempdir().unwrap();
        let db = DbValue::sqlite(dir.path().join("a ?#%b.db"));
        {
            let mut s = Store::open(db.target().unwrap()).unwrap();
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
                    host: None,
                    owner: None,
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
                    started_at: utc_now(),
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
