//! The SQLite store's tests: uniqueness, reopening, stored spellings, migrations from older schemas, read-only
//! opens, the host column.

use super::*;
use crate::run::format::target::DbTarget;
use crate::run::write::store::tests::record;
use crate::run::write::store::{commit_record, Store};

fn run_row(id: &str, dir: &Path) -> RunRow {
    RunRow {
        run_id: id.into(),
        created_at: utc_now(),
        finished_at: None,
        status: RunStatus::Running,
        source: RunSource::Sweep,
        run_dir: dir.display().to_string(),
        plan_json: "{}".into(),
        cells_total: 2,
        backscope_version: "t".into(),
        host: None,
        owner: None,
    }
}

#[test]
fn records_are_unique_per_cell_and_survive_reopening() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("x/backscope.db");
    {
        let mut s = Store::open(&DbTarget::Sqlite(db.clone())).unwrap();
        s.create_run(&run_row("r1", dir.path())).unwrap();
        commit_record(&mut s, dir.path(), &record("r1", "a", 0)).unwrap();
        let dup = s.insert_record(&record("r1", "a", 0)).unwrap_err();
        assert!(format!("{dup:#}").contains("UNIQUE"), "{dup:#}");
    }
    let mut s = Store::open(&DbTarget::Sqlite(db.clone())).unwrap();
    assert_eq!(s.completed_keys("r1").unwrap(), HashSet::from(["a".to_string()]));
    assert!(dir.path().join("cells/00000/result.json").exists());
    s.set_run_status("r1", RunStatus::Finished).unwrap();
    let r = s.latest_sweep_run().unwrap().unwrap();
    assert_eq!((r.status, r.finished_at.is_some()), (RunStatus::Finished, true));
    assert_eq!(s.records("r1").unwrap()[0], record("r1", "a", 0).clone_with_started(&s.records("r1").unwrap()[0]));
    assert!(s.record_json(&["nope".into()]).unwrap_err().to_string().contains("no run nope"));
}

#[test]
fn run_status_and_source_keep_their_stored_spelling() {
    // The spellings databases of earlier versions hold (`status TEXT`, `source TEXT` of SCHEMA_V1's runs).
    let dir = tempfile::tempdir().unwrap();
    let mut s = SqliteStore::open(&dir.path().join("db")).unwrap();
    let mut row = run_row("r1", dir.path());
    row.source = RunSource::LlamaBench;
    s.create_run(&row).unwrap();
    let text = |s: &SqliteStore| -> (String, String) {
        s.conn.query_row("SELECT status, source FROM runs", [], |r| Ok((r.get(0)?, r.get(1)?))).unwrap()
    };
    assert_eq!(text(&s), ("running".to_string(), "llama-bench".to_string()));
    s.set_run_status("r1", RunStatus::Interrupted).unwrap();
    assert_eq!(text(&s).0, "interrupted");
    assert!(s.latest_sweep_run().unwrap().is_none(), "an import is no sweep");
    assert_eq!(serde_json::to_value(RunStatus::Finished).unwrap(), "finished");
    s.conn.execute("UPDATE runs SET status = 'paused'", []).unwrap();
    let e = format!("{:#}", s.run("r1").unwrap_err());
    assert!(e.contains("unknown run status `paused`"), "{e}");
}

#[test]
fn a_run_keeps_its_host_identity() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = SqliteStore::open(&dir.path().join("h.db")).unwrap();
    let mut row = run_row("r1", dir.path());
    row.host = Some(HostIdentity { host_id: "lab-a".into(), hostname: "a".into(), ..Default::default() });
    s.create_run(&row).unwrap();
    assert_eq!(s.run("r1").unwrap().unwrap(), row);
    let id: String = s.conn.query_row("SELECT host_id FROM runs", [], |r| r.get(0)).unwrap();
    assert_eq!(id, "lab-a");
}

impl Record {
    fn clone_with_started(mut self, other: &Record) -> Record {
        self.started_at = other.started_at.clone();
        self
    }
}

#[test]
fn a_version_1_database_is_migrated_and_keeps_its_records() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("v1.db");
    {
        let conn = Connection::open(&db).unwrap();
        conn.execute_batch(SCHEMA_V1).unwrap();
        conn.execute_batch("PRAGMA user_version = 1").unwrap();
        conn.execute("INSERT INTO runs VALUES ('r1', 't', NULL, 'finished', 'sweep', '/x', '{}', 1, 'old')", [])
            .unwrap();
        let old = serde_json::to_string(&record("r1", "a", 0)).unwrap();
        conn.execute(
            "INSERT INTO records (run_id, cell_key, seq, endpoint, model, num_gpu, prompt, num_predict, epoch,
                repetition, status, file, json, recorded_at) VALUES ('r1','a',0,'e','m',0,'p',1,1,1,'ok','f',?1,'t')",
            [old],
        )
        .unwrap();
    }
    let mut s = SqliteStore::open(&db).unwrap();
    assert_eq!(s.records("r1").unwrap().len(), 1);
    assert!(s.records("r1").unwrap()[0].trace.is_none());
    let v: i64 = s.conn.query_row("PRAGMA user_version", [], |r| r.get(0)).unwrap();
    assert_eq!(v, SCHEMA_VERSION);
    // A traced record fills the new columns.
    let mut traced = record("r1", "b", 1);
    traced.trace = Some(crate::run::format::record::RecordTrace {
        dir: "traces/s001-e".into(),
        files: vec![],
        window_ns: [1, 2],
        interval_ms: 20,
        spill_ns: [0, 0],
        observer_loaded: None,
        vulkan_layer: None,
        total_launches: 0,
        failed_launches: 0,
        families: Default::default(),
        kernels: vec![],
        distinct_kernels: 0,
        processes: vec![],
        cut: vec![],
        crashes: vec![],
        device_lost: vec![],
        hangs: vec![],
        kernel: vec![],
        notes: vec![],
    });
    s.insert_record(&traced).unwrap();
    let (n, j): (Option<i64>, Option<String>) = s
        .conn
        .query_row("SELECT trace_launches, trace_json FROM records WHERE cell_key = 'b'", [], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })
        .unwrap();
    assert_eq!(n, Some(0));
    assert!(j.unwrap().contains("\"window_ns\":[1,2]"));
    assert_eq!(s.records("r1").unwrap()[1].trace, traced.trace);
}

#[test]
fn a_read_only_open_creates_no_file() {
    let dir = tempfile::tempdir().unwrap();
    // A directory name that is URI syntax.
    let db = dir.path().join("a ?#%b/backscope.db");
    let files = || {
        let mut v: Vec<String> = std::fs::read_dir(db.parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    };
    assert!(Store::open_read_only(&DbTarget::Sqlite(db.clone())).err().unwrap().to_string().contains("does not exist"));
    assert!(!db.parent().unwrap().exists(), "a missing database is not created");
    {
        let mut s = SqliteStore::open(&db).unwrap();
        s.create_run(&run_row("r1", dir.path())).unwrap();
    }
    assert_eq!(files(), ["backscope.db"], "closing the last writer checkpoints and removes the companions");
    let r = Store::open_read_only(&DbTarget::Sqlite(db.clone())).unwrap();
    assert_eq!(r.runs().unwrap().len(), 1);
    drop(r);
    assert_eq!(files(), ["backscope.db"], "no -wal or -shm left by a reader");
    // With a writer open, the reader sees its committed rows through the companions it made.
    let mut w = SqliteStore::open(&db).unwrap();
    w.create_run(&run_row("r2", dir.path())).unwrap();
    let before = files();
    assert_eq!(Store::open_read_only(&DbTarget::Sqlite(db.clone())).unwrap().runs().unwrap().len(), 2);
    assert_eq!(files(), before);
    assert_eq!(uri_path(Path::new("/a b/c?d#e%f")), "/a%20b/c%3Fd%23e%25f");
}

#[test]
fn a_newer_schema_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("b.db");
    Connection::open(&db).unwrap().execute_batch("PRAGMA user_version = 99").unwrap();
    let err = SqliteStore::open(&db).err().unwrap().to_string();
    assert!(err.contains("newer backscope"), "{err}");
}
