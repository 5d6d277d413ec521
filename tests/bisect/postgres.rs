//! `bisect` against a real PostgreSQL server (a throw-away cluster, [`Pg`]): a bisect killed mid-step resumes from
//! the shared store, and each step is stored once.

use std::time::Duration;

use serde_json::Value;

use crate::support::postgres::Pg;
use crate::support::sweep::heavy;
use crate::support::util::{backscope, marker_bisect, stdout_ok, wait_for_file};

#[test]
fn a_bisect_killed_mid_step_resumes_from_postgres_and_each_step_is_stored_once() {
    let _turn = heavy();
    let pg = Pg::start();
    let db = pg.db("postgres");
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    crate::support::util::marker_builds(d, 100..=108, 105);
    let calls = d.join("calls");
    // The third step (the midpoint b104) hangs until the `.go` marker exists; the first bad build is b105 by layout.
    let test = r#"if [ "$BACKSCOPE_BUILD" = b104 ] && [ ! -e "$CALLS.go" ]; then echo $$ > "$CALLS.pid"; sleep 60; fi;
        echo "$BACKSCOPE_BUILD" >> "$CALLS"; test ! -e "$BACKSCOPE_BIN_DIR/bad""#;
    let bisect = |args: &[&str]| {
        let mut c = marker_bisect(d, "host-a", &calls, &db);
        c.args(args);
        c
    };
    let mut child = bisect(&["--good", "100", "--bad", "108", "--builds", "dir:builds", "--", "sh", "-c", test])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let pid_file = d.join("calls.pid");
    let t0 = std::time::Instant::now();
    // The test command writes its pid with a shell redirection: the file can exist before the pid is in it.
    let sleeper: i32 = loop {
        if let Ok(pid) = std::fs::read_to_string(&pid_file).unwrap_or_default().trim().parse() {
            break pid;
        }
        assert!(t0.elapsed() < Duration::from_secs(60), "the third step never began");
        std::thread::sleep(Duration::from_millis(20));
    };
    child.kill().unwrap(); // SIGKILL mid-step: no handler runs
    child.wait().unwrap();
    // SAFETY: kill(2) on the process group of the pid our own test command wrote.
    unsafe { libc::kill(-sleeper, libc::SIGKILL) };
    // The two ends were committed before the killed step began; the killed step left no row.
    let steps_sql =
        "SELECT string_agg(seq || ':b' || build || ':' || outcome, ' ' ORDER BY seq) FROM backscope.bisect_steps";
    assert_eq!(pg.psql(steps_sql), "0:b100:good 1:b108:bad");
    assert_eq!(pg.psql("SELECT host_id || ' ' || status FROM backscope.bisect_runs"), "host-a running");
    // Another host's `--resume` does not pick up host-a's bisect as its own latest.
    let other = bisect(&["--resume"]).env("BACKSCOPE_HOST_ID", "host-b").output().unwrap();
    let err = String::from_utf8_lossy(&other.stderr);
    assert!(!other.status.success() && err.contains("no bisect of host `host-b`"), "{err}");
    std::fs::write(d.join("calls.go"), "").unwrap();
    // The stored test is an external command: a resume runs it only when told to (--yes).
    let out = bisect(&["--resume", "--yes", "--json"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!((v["verdict"]["last_good"].as_u64(), v["verdict"]["first_bad"].as_u64()), (Some(104), Some(105)));
    // Each step once: as many rows as distinct seqs and distinct builds, the ends not run again.
    let counts = pg.psql(
        "SELECT count(*) || ' ' || count(DISTINCT seq) || ' ' || count(DISTINCT build) FROM backscope.bisect_steps",
    );
    let n = v["steps"].as_array().unwrap().len();
    assert_eq!(counts, format!("{n} {n} {n}"));
    let ran = std::fs::read_to_string(&calls).unwrap();
    assert_eq!(ran.lines().filter(|b| *b == "b100" || *b == "b108").count(), 2, "committed ends not rerun: {ran}");
    let stored = pg.psql(steps_sql);
    assert!(stored.starts_with("0:b100:good 1:b108:bad 2:b104:good"), "{stored}");
    assert_eq!(pg.psql("SELECT status FROM backscope.bisect_runs"), "finished");
    // `report --bisect` reads the same bisect back from PostgreSQL.
    let report = stdout_ok(backscope().args(["report", &db, "--bisect", "--json"]));
    let r: Value = serde_json::from_str(&report).unwrap();
    assert_eq!(r["bisect"]["bisect_id"], v["bisect"]["bisect_id"]);
    assert_eq!(r["verdict"]["first_bad"], 105);
    let builds: Vec<String> = r["steps"].as_array().unwrap().iter().map(|s| format!("b{}", s["build"])).collect();
    let from_psql: Vec<String> = stored.split(' ').map(|s| s.split(':').nth(1).unwrap().to_string()).collect();
    assert_eq!(builds, from_psql);
}

#[test]
fn another_hosts_bisect_is_resumed_only_with_take_over_and_the_old_host_writes_no_step_after_it() {
    let _turn = heavy();
    let pg = Pg::start();
    let db = pg.db("postgres");
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    crate::support::util::marker_builds(d, 100..=108, 105);
    let calls = d.join("calls");
    // host-a's test of the midpoint b104 waits (at most a minute) for the `.go` marker; host-b's runs at once.
    let test = r#"if [ "$BACKSCOPE_HOST_ID" = host-a ] && [ "$BACKSCOPE_BUILD" = b104 ]; then echo $$ > "$CALLS.pid";
        i=0; while [ ! -e "$CALLS.go" ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done; fi;
        echo "$BACKSCOPE_HOST_ID $BACKSCOPE_BUILD" >> "$CALLS"; test ! -e "$BACKSCOPE_BIN_DIR/bad""#;
    let bisect = |host: &str, args: &[&str]| {
        let mut c = marker_bisect(d, host, &calls, &db);
        c.args(args);
        c
    };
    let host_a = bisect("host-a", &["--good", "100", "--bad", "108", "--builds", "dir:builds", "--", "sh", "-c", test])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    wait_for_file(&d.join("calls.pid"), Duration::from_secs(60), "host-a's third step never began");
    let id = pg.psql("SELECT bisect_id FROM backscope.bisect_runs");
    let last_step = pg.psql("SELECT max(recorded_at) FROM backscope.bisect_steps");
    // By id, from another host of the same role: refused, naming the owner, its last step and the way to override.
    let out = bisect("host-b", &["--resume", &id, "--yes"]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("belongs to host `host-a`") && err.contains(&last_step) && err.contains("--take-over"),
        "{err}"
    );
    assert_eq!(pg.psql("SELECT host_id || ' ' || count(*) FROM backscope.bisect_runs GROUP BY host_id"), "host-a 1");
    // --take-over moves it to host-b, which finishes it; the row records where it came from.
    let out = bisect("host-b", &["--resume", &id, "--yes", "--take-over", "--json"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!((v["verdict"]["last_good"].as_u64(), v["verdict"]["first_bad"].as_u64()), (Some(104), Some(105)));
    assert_eq!(v["bisect"]["taken_over"]["from_host"], "host-a");
    assert_eq!(
        pg.psql("SELECT host_id || ' ' || taken_over_from || ' ' || status || ' ' || (taken_over_at IS NOT NULL) FROM backscope.bisect_runs"),
        "host-b host-a finished true"
    );
    let steps_sql =
        "SELECT string_agg(seq || ':b' || build || ':' || outcome, ' ' ORDER BY seq) FROM backscope.bisect_steps";
    let stored = pg.psql(steps_sql);
    // host-a's step b104 ends now: it is refused (the bisect is host-b's), and nothing host-b stored changes.
    std::fs::write(d.join("calls.go"), "").unwrap();
    let a = host_a.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&a.stderr);
    assert!(!a.status.success() && err.contains("belongs to host `host-b`"), "{err}");
    assert_eq!(pg.psql(steps_sql), stored);
    assert_eq!(pg.psql("SELECT host_id || ' ' || status FROM backscope.bisect_runs"), "host-b finished");
    let ran = std::fs::read_to_string(&calls).unwrap();
    assert!(ran.contains("host-a b104") && ran.contains("host-b b104"), "both hosts tested the midpoint: {ran}");
    // The report shows the take-over.
    let report = stdout_ok(backscope().args(["report", &db, "--bisect", &id]));
    assert!(report.contains("taken over") && report.contains("from host `host-a`"), "{report}");
    // host-a may not resume it any more without taking it back.
    let out = bisect("host-a", &["--resume", &id, "--yes"]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("belongs to host `host-b`"), "{err}");
}
