//! A sweep database whose last transactions are only in its write-ahead log, copied without its `-shm`: what a
//! copy taken while a reader holds the database open looks like. Made with `backscope sweep import` and SQLite
//! itself (rusqlite).

use std::path::{Path, PathBuf};

/// `sweep import` of `n` minimal llama-bench tests into `db` as a new run; its id.
fn import(db: &Path, runs: &Path, n: usize) -> String {
    let dir = db.parent().unwrap();
    std::fs::create_dir_all(dir).unwrap();
    let input = dir.join(format!("bench-{n}.jsonl"));
    let lines: String =
        (0..n).map(|i| format!("{{\"n_prompt\":{},\"n_gen\":0,\"avg_ns\":1000,\"avg_ts\":1.5}}\n", i + 1)).collect();
    std::fs::write(&input, lines).unwrap();
    let out = crate::support::util::backscope()
        .args(["sweep", "import"])
        .arg(&input)
        .arg("--db")
        .arg(db)
        .arg("--runs-dir")
        .arg(runs)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    text.strip_prefix("run ").and_then(|t| t.split(':').next()).unwrap().to_string()
}

/// A sweep database whose last transactions are only in its `-wal`: run A (3 records) checkpointed into the main
/// file, then run B (5 records) imported while a reader holds the database open — so no checkpoint can move it —
/// and `rename` (new id of run B) applied by that connection; the three files copied into `into` while it is still
/// open, and the copy's `-shm` deleted. Returns the copy, run A's id and run B's.
pub fn wal_only_copy(dir: &Path, into: &Path, rename: Option<&str>) -> (PathBuf, String, String) {
    let db = dir.join("a.db");
    let runs = dir.join("runs");
    let a = import(&db, &runs, 3);
    let reader = rusqlite::Connection::open(&db).unwrap();
    reader.execute_batch("PRAGMA wal_autocheckpoint = 0; BEGIN; SELECT count(*) FROM runs;").unwrap();
    let mut b = import(&db, &runs, 5);
    reader.execute_batch("COMMIT").unwrap();
    if let Some(new) = rename {
        // Run B again under the new id (its records' JSON naming it too), in one transaction of this connection.
        let new_json = serde_json::to_string(new).unwrap();
        let new_json = &new_json[1..new_json.len() - 1];
        let tx = reader.unchecked_transaction().unwrap();
        tx.execute("CREATE TEMP TABLE r AS SELECT * FROM runs WHERE run_id = ?1", [&b]).unwrap();
        tx.execute("UPDATE temp.r SET run_id = ?1", [new]).unwrap();
        tx.execute("CREATE TEMP TABLE c AS SELECT * FROM records WHERE run_id = ?1", [&b]).unwrap();
        tx.execute("UPDATE temp.c SET run_id = ?1, json = replace(json, ?2, ?3)", rusqlite::params![new, b, new_json])
            .unwrap();
        tx.execute("DELETE FROM records WHERE run_id = ?1", [&b]).unwrap();
        tx.execute("DELETE FROM runs WHERE run_id = ?1", [&b]).unwrap();
        tx.execute("INSERT INTO runs SELECT * FROM temp.r", []).unwrap();
        tx.execute("INSERT INTO records SELECT * FROM temp.c", []).unwrap();
        tx.commit().unwrap();
        b = new.to_string();
    }
    std::fs::create_dir_all(into).unwrap();
    for suffix in ["", "-wal", "-shm"] {
        std::fs::copy(dir.join(format!("a.db{suffix}")), into.join(format!("a.db{suffix}"))).unwrap();
    }
    drop(reader);
    std::fs::remove_file(into.join("a.db-shm")).unwrap();
    let copy = into.join("a.db");
    // SQLite itself: the main file alone holds run A only, and the WAL is not empty.
    let main_only = rusqlite::Connection::open_with_flags(
        format!("file:{}?mode=ro&immutable=1", copy.display()),
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_URI,
    )
    .unwrap();
    let ids: Vec<String> = main_only
        .prepare("SELECT run_id FROM runs")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(ids, std::slice::from_ref(&a), "run B must be in the WAL only");
    assert!(std::fs::metadata(into.join("a.db-wal")).unwrap().len() > 0);
    (copy, a, b)
}
