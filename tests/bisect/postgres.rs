//! `bisect` against a real PostgreSQL server (a throw-away cluster, [`Pg`]): a bisect killed mid-step resumes from
//! the shared store, and each step is stored once.

use std::time::Duration;

use serde_json::Value;

use crate::support::postgres::Pg;
use crate::support::sweep::heavy;
use crate::support::util::{backscope, stdout_ok};

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
        let mut c = backscope();
        c.current_dir(d).env("BACKSCOPE_HOST_ID", "host-a").env("CALLS", &calls);
        c.arg("bisect").args(["--db", &db, "--runs-dir", "runs"]).args(args);
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
