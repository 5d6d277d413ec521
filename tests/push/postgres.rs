//! `push` into a real PostgreSQL server (a throw-away cluster, [`Pg`]) from the SQLite store a CPU sweep wrote, and
//! from the local fallback a sweep writes when the server goes away mid-run. Expected counts come from the plan
//! (cells × repetitions) and from `psql`, not from backscope's own output.

use std::time::Duration;

use serde_json::Value;

use crate::support::postgres::{run_id_of, sweep_cmd, Pg};
use crate::support::sweep::{event_is, heavy, records, Sweep};
use crate::support::util::{backscope, marker_bisect, stdout_ok, wait_for_file};

#[test]
fn a_run_pushed_twice_from_sqlite_is_stored_once() {
    let _turn = heavy();
    let pg = Pg::start();
    let dir = tempfile::tempdir().unwrap();
    let local = dir.path().join("local.db");
    let (status, events, err) = Sweep::spawn(sweep_cmd("host-a", local.to_str().unwrap(), &dir.path().join("runs"), 4))
        .finish(Duration::from_secs(300));
    assert!(status.success(), "{err}");
    let run_id = run_id_of(&events);
    let push = |db: &str| -> Value {
        let out = stdout_ok(
            backscope()
                .env("BACKSCOPE_HOST_ID", "host-a")
                .args(["push", "--json", "--db", db])
                .arg("--from")
                .arg(&local),
        );
        serde_json::from_str(&out).unwrap()
    };
    let first = push(&pg.db("postgres"));
    assert_eq!(first[0]["run_id"], run_id.as_str());
    assert_eq!((first[0]["uploaded"].as_u64(), first[0]["already_stored"].as_u64()), (Some(4), Some(0)));
    let second = push(&pg.db("postgres"));
    assert_eq!((second[0]["uploaded"].as_u64(), second[0]["already_stored"].as_u64()), (Some(0), Some(4)));
    assert_eq!(pg.psql("SELECT count(*) FROM backscope.records"), "4");
    assert_eq!(pg.psql("SELECT status || ' ' || host_id FROM backscope.runs"), "finished host-a");
    // The JSON stored is the record the local file holds, byte for byte.
    let export = stdout_ok(backscope().args(["sweep", "export", "--jsonl", "--db"]).arg(&local));
    let shared = stdout_ok(backscope().args(["sweep", "export", "--jsonl", "--db", &pg.db("postgres")]));
    assert_eq!(export, shared);
}

#[test]
fn a_server_stopped_mid_run_leaves_the_records_in_the_local_fallback_and_push_completes_the_run() {
    let _turn = heavy();
    let pg = Pg::start();
    let runs = tempfile::tempdir().unwrap();
    let db = pg.db("postgres");
    const CELLS: usize = 16;
    let mut sweep = Sweep::spawn(sweep_cmd("host-a", &db, runs.path(), CELLS));
    for _ in 0..3 {
        sweep.wait_for(Duration::from_secs(300), |e| event_is(e, "cell_finished"));
    }
    pg.stop_server();
    let (status, events, err) = sweep.finish(Duration::from_secs(300));
    assert!(status.success(), "the sweep keeps going: {err}");
    let run_id = run_id_of(&events);
    assert_eq!(records(&events).len(), CELLS, "every cell ran");
    let fallback = runs.path().join(format!("{run_id}.local.db"));
    assert!(err.contains("went away") && err.contains(&fallback.display().to_string()), "{err}");
    assert!(err.contains("backscope push --from"), "{err}");
    pg.start_server();
    // Resuming before the push would run the locally recorded cells again: refused, naming the file.
    let out = backscope()
        .env("BACKSCOPE_HOST_ID", "host-a")
        .args(["sweep", "--quiet", "--yes", "--resume", &run_id, "--db", &db])
        .output()
        .unwrap();
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && e.contains("push them first") && e.contains(&fallback.display().to_string()),
        "{e}"
    );
    let in_pg: usize =
        pg.psql(&format!("SELECT count(*) FROM backscope.records WHERE run_id = '{run_id}'")).parse().unwrap();
    assert!((3..CELLS).contains(&in_pg), "{in_pg} in the shared store before the push");
    let out = stdout_ok(
        backscope()
            .env("BACKSCOPE_HOST_ID", "host-a")
            .args(["push", "--json", "--db", &db])
            .arg("--from")
            .arg(&fallback),
    );
    let pushed: Value = serde_json::from_str(&out).unwrap();
    let (up, already) = (pushed[0]["uploaded"].as_u64().unwrap(), pushed[0]["already_stored"].as_u64().unwrap());
    assert_eq!(in_pg as u64 + up, CELLS as u64, "pushed {up}, {already} already there");
    let counts = pg.psql(&format!(
        "SELECT count(*) || ' ' || count(DISTINCT cell_key) FROM backscope.records WHERE run_id = '{run_id}'"
    ));
    assert_eq!(counts, format!("{CELLS} {CELLS}"), "nothing lost, nothing twice");
    assert_eq!(pg.psql(&format!("SELECT status FROM backscope.runs WHERE run_id = '{run_id}'")), "finished");
}

#[test]
fn a_local_bisect_is_pushed_once_with_its_steps_and_another_hosts_copy_is_left_alone_unless_taken_over() {
    let pg = Pg::start();
    let db = pg.db("postgres");
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    crate::support::util::marker_builds(d, 100..=108, 105);
    let local = d.join("local.db");
    let out = backscope()
        .current_dir(d)
        .env("BACKSCOPE_HOST_ID", "host-a")
        .args(["bisect", "--json", "--runs-dir", "runs", "--good", "100", "--bad", "108", "--builds", "dir:builds"])
        .arg("--db")
        .arg(&local)
        .args(["--", "sh", "-c", r#"test ! -e "$BACKSCOPE_BIN_DIR/bad""#])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let id = v["bisect"]["bisect_id"].as_str().unwrap().to_string();
    let n = v["steps"].as_array().unwrap().len() as u64;
    let push = |host: &str| -> Value {
        let out = stdout_ok(
            backscope().env("BACKSCOPE_HOST_ID", host).args(["push", "--json", "--db", &db]).arg("--from").arg(&local),
        );
        serde_json::from_str(&out).unwrap()
    };
    let first = push("host-a");
    let b = first.as_array().unwrap().iter().find(|p| p["bisect_id"] == id.as_str()).expect("the bisect was pushed");
    assert_eq!(
        (b["bisect_created"].as_bool(), b["uploaded"].as_u64(), b["already_stored"].as_u64()),
        (Some(true), Some(n), Some(0))
    );
    let second = push("host-a");
    let b = second.as_array().unwrap().iter().find(|p| p["bisect_id"] == id.as_str()).unwrap();
    assert_eq!(
        (b["bisect_created"].as_bool(), b["uploaded"].as_u64(), b["already_stored"].as_u64()),
        (Some(false), Some(0), Some(n))
    );
    assert_eq!(pg.psql("SELECT count(*) FROM backscope.bisect_steps"), n.to_string());
    assert_eq!(pg.psql("SELECT host_id || ' ' || status FROM backscope.bisect_runs"), "host-a finished");
    // The same bisect pushed from another host: the server's copy is host-a's, and stays as it is.
    let out = backscope()
        .env("BACKSCOPE_HOST_ID", "host-b")
        .args(["push", "--db", &db])
        .arg("--from")
        .arg(&local)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains(&format!("bisect {id}: not pushed")) && text.contains("host `host-a`"), "{text}");
    assert_eq!(pg.psql("SELECT host_id FROM backscope.bisect_runs"), "host-a");
    // With --take-over it moves to host-b (recorded), and no step is stored twice.
    let out = stdout_ok(
        backscope()
            .env("BACKSCOPE_HOST_ID", "host-b")
            .args(["push", "--take-over", "--db", &db])
            .arg("--from")
            .arg(&local),
    );
    assert!(out.contains(&format!("bisect {id}: 0 step(s) uploaded, {n} already stored")), "{out}");
    assert_eq!(pg.psql("SELECT host_id || ' ' || taken_over_from FROM backscope.bisect_runs"), "host-b host-a");
    assert_eq!(pg.psql("SELECT count(*) FROM backscope.bisect_steps"), n.to_string());
    // Read back from PostgreSQL, it is the same bisect: the same verdict and steps.
    let report: Value =
        serde_json::from_str(&stdout_ok(backscope().args(["report", &db, "--bisect", &id, "--json"]))).unwrap();
    assert_eq!(report["verdict"], v["verdict"]);
    assert_eq!(report["steps"], v["steps"]);
}

#[test]
fn a_server_stopped_mid_bisect_leaves_the_steps_in_the_local_fallback_and_push_keeps_the_verdict() {
    let _turn = heavy();
    let pg = Pg::start();
    let db = pg.db("postgres");
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    crate::support::util::marker_builds(d, 100..=108, 105);
    let calls = d.join("calls");
    // The third step (the midpoint b104) waits, at most a minute, for the `.go` marker: the server stops meanwhile.
    let test = r#"if [ "$BACKSCOPE_BUILD" = b104 ]; then touch "$CALLS.waiting"; i=0;
        while [ ! -e "$CALLS.go" ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done; fi;
        test ! -e "$BACKSCOPE_BIN_DIR/bad""#;
    let bisect = |args: &[&str]| {
        let mut c = marker_bisect(d, "host-a", &calls, &db);
        c.args(args);
        c
    };
    let child = bisect(&["--json", "--good", "100", "--bad", "108", "--builds", "dir:builds", "--", "sh", "-c", test])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    wait_for_file(&d.join("calls.waiting"), Duration::from_secs(60), "the third step never began");
    let id = pg.psql("SELECT bisect_id FROM backscope.bisect_runs");
    pg.stop_server();
    std::fs::write(d.join("calls.go"), "").unwrap();
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    // The bisect went on locally and reached its verdict.
    assert_eq!(out.status.code(), Some(0), "{err}");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!((v["verdict"]["last_good"].as_u64(), v["verdict"]["first_bad"].as_u64()), (Some(104), Some(105)));
    let fallback = d.join("runs").join(format!("{id}.local.db"));
    assert!(err.contains("went away") && err.contains(&fallback.display().to_string()), "{err}");
    assert!(err.contains("backscope push --from"), "{err}");
    pg.start_server();
    assert_eq!(pg.psql("SELECT count(*) || ' ' || max(seq) FROM backscope.bisect_steps"), "2 1", "the ends only");
    // Resuming before the push would test the local steps again: refused, naming the file.
    let out = bisect(&["--resume", &id, "--yes"]).output().unwrap();
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && e.contains("push them first") && e.contains(&fallback.display().to_string()),
        "{e}"
    );
    let pushed = stdout_ok(
        backscope()
            .env("BACKSCOPE_HOST_ID", "host-a")
            .args(["push", "--json", "--db", &db])
            .arg("--from")
            .arg(&fallback),
    );
    let pushed: Value = serde_json::from_str(&pushed).unwrap();
    let n = v["steps"].as_array().unwrap().len() as u64;
    assert_eq!(pushed[0]["bisect_id"], id.as_str());
    assert_eq!((pushed[0]["uploaded"].as_u64(), pushed[0]["already_stored"].as_u64()), (Some(n - 2), Some(2)));
    assert_eq!(pg.psql("SELECT status FROM backscope.bisect_runs"), "finished");
    let report: Value =
        serde_json::from_str(&stdout_ok(backscope().args(["report", &db, "--bisect", &id, "--json"]))).unwrap();
    assert_eq!(report["verdict"], v["verdict"]);
    assert_eq!(report["steps"], v["steps"]);
}
