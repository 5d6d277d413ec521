//! Fleet runs against a real PostgreSQL server (Debian's `postgresql`, scripts/install-deps.sh): each test starts a
//! throw-away cluster in a temp dir, listening on a Unix socket only, and stops it by `pg_ctl` when the test ends,
//! also when it fails ([`Pg`]'s Drop). Sweeps run real CPU llama-servers (`--device none`) and play two hosts on one
//! machine through `BACKSCOPE_HOST_ID`. Expected counts come from the plan (cells × repetitions) and from `psql`,
//! not from backscope's own output.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use serde_json::Value;

use crate::support::postgres::{documented_grants, is_root, psql_as, run_id_of, sweep_cmd, Pg};
use crate::support::sweep::{event_is, heavy, records, Sweep};
use crate::support::util::{backscope, stdout_ok};

#[test]
fn two_hosts_sweep_at_once_into_one_database_and_migrate_it_once() {
    let _turn = heavy();
    let pg = Pg::start();
    let runs = tempfile::tempdir().unwrap();
    let db = pg.db("postgres");
    // Started together on an empty database: both find the schema missing; one applies it under the lock.
    let a = Sweep::spawn(sweep_cmd("host-a", &db, &runs.path().join("a"), 5));
    let b = Sweep::spawn(sweep_cmd("host-b", &db, &runs.path().join("b"), 7));
    let (sa, ea, err_a) = a.finish(Duration::from_secs(300));
    let (sb, eb, err_b) = b.finish(Duration::from_secs(300));
    assert!(sa.success() && sb.success(), "{err_a}\n{err_b}");
    assert_eq!(
        pg.psql("SELECT string_agg(version::text, ',' ORDER BY version) FROM backscope.schema_migrations"),
        "1,2,3,4",
        "applied once"
    );
    let (ra, rb) = (run_id_of(&ea), run_id_of(&eb));
    let owners = pg.psql("SELECT run_id || '=' || host_id FROM backscope.runs ORDER BY host_id");
    assert_eq!(owners, format!("{ra}=host-a\n{rb}=host-b"));
    for (run, n) in [(&ra, 5), (&rb, 7)] {
        let counts = pg.psql(&format!(
            "SELECT count(*) || ' ' || count(DISTINCT cell_key) || ' ' || count(DISTINCT record_id) FROM backscope.records WHERE run_id = '{run}'"
        ));
        assert_eq!(counts, format!("{n} {n} {n}"), "run {run}: every cell once");
    }
    assert_eq!(records(&ea).len(), 5);
    assert_eq!(records(&eb).len(), 7);
    // Each run carries its host's identity; the kernel release is the running one (uname -r).
    let kernel = String::from_utf8(Command::new("uname").arg("-r").output().unwrap().stdout).unwrap();
    let host_json = pg.psql(&format!("SELECT host_json FROM backscope.runs WHERE run_id = '{ra}'"));
    let host: Value = serde_json::from_str(&host_json).unwrap();
    assert_eq!((host["host_id"].as_str(), host["kernel"].as_str()), (Some("host-a"), Some(kernel.trim())));
    // The stored plan/run.json name the database without secrets, as postgresql://user@/db?host=….
    let run_json = std::fs::read_to_string(runs.path().join("a").join(&ra).join("run.json")).unwrap();
    let meta: Value = serde_json::from_str(&run_json).unwrap();
    assert_eq!(meta["db"], format!("postgresql://postgres@/fleet?host={}&port=5432", pg.socket_dir()));
    // One report across both hosts: the same model, endpoint and num_gpu, one column per GPU/host, with the cell
    // counts of each host's plan.
    let report: Value =
        serde_json::from_str(&stdout_ok(backscope().args(["report", &db, "--hosts", "--json"]))).unwrap();
    let hosts: Vec<&str> = report["hosts"].as_array().unwrap().iter().map(|h| h["host_id"].as_str().unwrap()).collect();
    assert_eq!(hosts, ["host-a", "host-b"]);
    let points = report["points"].as_array().unwrap();
    assert_eq!(points.len(), 1, "{points:?}");
    assert_eq!((points[0]["endpoint"].as_str(), points[0]["num_gpu"].as_i64()), (Some("cpu"), Some(0)));
    let cells: Vec<(&str, u64, u64)> = points[0]["hosts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| (h["host_id"].as_str().unwrap(), h["cells"].as_u64().unwrap(), h["ok"].as_u64().unwrap()))
        .collect();
    assert_eq!(cells, [("host-a", 5, 5), ("host-b", 7, 7)]);
    // The median decode rate of a host is the median of its records' decode_tps (read back with psql).
    let rates = pg.psql(&format!("SELECT decode_tps FROM backscope.records WHERE run_id = '{rb}' ORDER BY decode_tps"));
    let rates: Vec<f64> = rates.lines().map(|l| l.parse().unwrap()).collect();
    let median = points[0]["hosts"][1]["decode_tps_median"].as_f64().unwrap();
    assert!((median - rates[3]).abs() < 1e-6 * rates[3], "{median} vs {rates:?}");
    let only_a: Value =
        serde_json::from_str(&stdout_ok(backscope().args(["report", &db, "--host", "host-a", "--json"]))).unwrap();
    assert_eq!(only_a["hosts"].as_array().unwrap().len(), 1);
    let html = stdout_ok(backscope().args(["report", &db, "--hosts", "--format", "html"]));
    assert!(html.contains("<svg") && html.contains("host-b"), "a chart per GPU");
}

#[test]
fn a_host_killed_mid_cell_resumes_its_run_and_every_cell_is_recorded_once() {
    let _turn = heavy();
    let pg = Pg::start();
    let runs = tempfile::tempdir().unwrap();
    let db = pg.db("postgres");
    const CELLS: usize = 20;
    let mut sweep = Sweep::spawn(sweep_cmd("host-a", &db, runs.path(), CELLS));
    for _ in 0..3 {
        sweep.wait_for(Duration::from_secs(300), |e| event_is(e, "cell_finished"));
    }
    // Mid-cell: the fourth request is under way.
    sweep.wait_for(Duration::from_secs(60), |e| event_is(e, "cell_started"));
    sweep.child.kill().unwrap();
    let (_, events, _) = sweep.finish(Duration::from_secs(30));
    let run_id = run_id_of(&events);
    let stored: usize =
        pg.psql(&format!("SELECT count(*) FROM backscope.records WHERE run_id = '{run_id}'")).parse().unwrap();
    assert!((3..CELLS).contains(&stored), "{stored} stored before the kill");
    // Another host may not continue it …
    let out = backscope()
        .env("BACKSCOPE_HOST_ID", "host-b")
        .args(["sweep", "--quiet", "--yes", "--resume", &run_id, "--db", &db])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("belongs to host `host-a`") && err.contains("--take-over"), "{err}");
    // … its own host does (its latest run, by default).
    let line = stdout_ok(
        backscope().env("BACKSCOPE_HOST_ID", "host-a").args(["sweep", "--quiet", "--yes", "--resume", "--db", &db]),
    );
    assert!(line.contains(&format!("run {run_id}: {CELLS} of {CELLS} cells recorded")), "{line}");
    let counts = pg.psql(&format!(
        "SELECT count(*) || ' ' || count(DISTINCT cell_key) || ' ' || min(seq) || ' ' || max(seq) FROM backscope.records WHERE run_id = '{run_id}'"
    ));
    assert_eq!(counts, format!("{CELLS} {CELLS} 0 {}", CELLS - 1));
    assert_eq!(pg.psql(&format!("SELECT status FROM backscope.runs WHERE run_id = '{run_id}'")), "finished");
}

#[test]
fn bad_connection_strings_are_refused_naming_the_field_before_any_cell_runs() {
    let pg = Pg::start();
    let runs = tempfile::tempdir().unwrap();
    let nowhere = tempfile::tempdir().unwrap();
    let cases = [
        ("postgres://lab:hunter2@db.example/fleet", "holds a password"),
        (
            &*format!("host={} dbname=fleet user=postgres password=hunter2", pg.socket_dir()),
            "field `password` holds a secret",
        ),
        (&*format!("host={} port=54x2 user=postgres", pg.socket_dir()), "port: expected a number"),
        (&*format!("host={} user=postgres colour=blue", pg.socket_dir()), "an unknown field"),
        (&*format!("host={} user=postgres sslmode=sometimes", pg.socket_dir()), "sslmode"),
        (&*format!("host={} dbname=fleet user=postgres", nowhere.path().display()), "cannot connect to"),
        (&*format!("host={} dbname=nosuch user=postgres", pg.socket_dir()), "database \"nosuch\" does not exist"),
    ];
    for (db, expected) in cases {
        let out = sweep_cmd("host-a", db, runs.path(), 1).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{db}: {err}");
        assert!(err.contains(expected), "{db}: expected `{expected}` in: {err}");
        assert!(!err.contains("hunter2"), "the secret is not repeated: {err}");
        assert!(
            !runs.path().exists() || std::fs::read_dir(runs.path()).unwrap().next().is_none(),
            "{db}: no run started"
        );
    }
}

#[test]
fn a_host_role_with_only_the_documented_grants_can_sweep_and_push() {
    let _turn = heavy();
    let pg = Pg::start();
    let dir = tempfile::tempdir().unwrap();
    pg.psql("CREATE ROLE backscope_host LOGIN PASSWORD 's3cr:et'");
    // The password from a .pgpass file (0600), matched by the socket directory's path; `:` escaped.
    let pgpass = dir.path().join("pgpass");
    std::fs::write(&pgpass, format!("{}:5432:fleet:backscope_host:s3cr\\:et\n", pg.socket_dir())).unwrap();
    std::fs::set_permissions(&pgpass, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let host_db = pg.db("backscope_host");
    let local = dir.path().join("local.db");
    let (status, events, err) = Sweep::spawn(sweep_cmd("host-a", local.to_str().unwrap(), &dir.path().join("runs"), 3))
        .finish(Duration::from_secs(300));
    assert!(status.success(), "{err}");
    let pushed_run = run_id_of(&events);
    // On an empty database the host role cannot migrate, and says who can.
    let out = backscope()
        .env("PGPASSFILE", &pgpass)
        .env("BACKSCOPE_HOST_ID", "host-a")
        .args(["push", "--db", &host_db])
        .arg("--from")
        .arg(&local)
        .output()
        .unwrap();
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && e.contains("migration role"), "{e}");
    // The migration role (here the superuser) applies the schema (a read of the empty store creates it); then the
    // documented grants.
    stdout_ok(backscope().args(["sweep", "export", "--jsonl", "--db", &pg.db("postgres")]));
    pg.psql(&documented_grants());
    // The host role sweeps (INSERT runs and records, UPDATE of the status) …
    let mut cmd = sweep_cmd("host-b", &host_db, &dir.path().join("runs-b"), 3);
    cmd.env("PGPASSFILE", &pgpass).env_remove("PGPASSWORD");
    let (status, events, err) = Sweep::spawn(cmd).finish(Duration::from_secs(300));
    assert!(status.success(), "{err}");
    let swept = run_id_of(&events);
    assert_eq!(pg.psql(&format!("SELECT status FROM backscope.runs WHERE run_id = '{swept}'")), "finished");
    // … and pushes: the run is created (its role's), and a second push finds every record stored already.
    let push = || -> Value {
        let out = stdout_ok(
            backscope()
                .env("PGPASSFILE", &pgpass)
                .env("BACKSCOPE_HOST_ID", "host-a")
                .args(["push", "--json", "--db", &host_db])
                .arg("--from")
                .arg(&local),
        );
        serde_json::from_str(&out).unwrap()
    };
    let first = push();
    assert_eq!((first[0]["run_id"].as_str(), first[0]["uploaded"].as_u64()), (Some(&*pushed_run), Some(3)));
    let second = push();
    assert_eq!((second[0]["run_id"].as_str(), second[0]["already_stored"].as_u64()), (Some(&*pushed_run), Some(3)));
    assert_eq!(
        pg.psql("SELECT string_agg(DISTINCT owner_role, ',') FROM backscope.runs"),
        "backscope_host",
        "stamped by the server"
    );
    // It cannot delete what another host stored.
    let denied = Command::new(pg.bin.join("psql"))
        .env("PGPASSFILE", &pgpass)
        .args([
            "-X",
            "-h",
            &pg.socket_dir(),
            "-U",
            "backscope_host",
            "-d",
            "fleet",
            "-c",
            "DELETE FROM backscope.records",
        ])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&denied.stderr).contains("permission denied"));
    assert_eq!(pg.psql("SELECT count(*) FROM backscope.records"), "6");
    // The host role bisects too (INSERT of the bisect and its steps, UPDATE of its status and upstream range).
    crate::support::util::marker_builds(dir.path(), 100..=102, 102);
    let out = stdout_ok(
        backscope()
            .current_dir(dir.path())
            .env("PGPASSFILE", &pgpass)
            .args(["bisect", "--json", "--db", &host_db, "--good", "100", "--bad", "102", "--builds", "dir:builds"])
            .args(["--", "sh", "-c", r#"test ! -e "$BACKSCOPE_BIN_DIR/bad""#]),
    );
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["verdict"]["first_bad"], 102);
    assert_eq!(
        pg.psql("SELECT status || ' ' || (upstream_json::json ->> 'tags') FROM backscope.bisect_runs"),
        "finished b101..b102"
    );
}

/// A CA and a server certificate for `localhost` signed by it (webpki takes no self-signed leaf as its own root).
fn make_certs(dir: &Path) {
    let sh = |script: &str| {
        let out = Command::new("sh").arg("-ec").arg(script).current_dir(dir).output().unwrap();
        assert!(out.status.success(), "{script}: {}", String::from_utf8_lossy(&out.stderr));
    };
    sh("openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=backscope-test-ca -keyout ca.key -out ca.crt 2>/dev/null
        openssl req -newkey rsa:2048 -nodes -subj /CN=localhost -keyout server.key -out server.csr 2>/dev/null
        printf 'subjectAltName=DNS:localhost\nbasicConstraints=CA:FALSE\n' > ext
        openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 -extfile ext -out server.crt 2>/dev/null
        chmod 600 server.key");
    if is_root() {
        let ok = Command::new("chown").arg("postgres:postgres").arg(dir.join("server.key")).status().unwrap().success();
        assert!(ok);
    }
}

#[test]
fn tls_is_used_when_the_server_offers_it_and_its_certificate_is_verified() {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    // The certificate's directory is only known once the cluster's is: the settings go in postgresql.auto.conf.
    let extra = format!("-p {port} -c listen_addresses=127.0.0.1 -c ssl=on");
    // TCP only with TLS (`hostssl`): a connection without TLS is refused by the server.
    let pg = Pg::start_with(&extra, "hostssl all postgres 127.0.0.1/32 trust\n", |dir| {
        make_certs(dir);
        for f in ["server.crt", "server.key"] {
            std::fs::copy(dir.join(f), dir.join("pg").join(f)).unwrap();
        }
        let conf = format!(
            "ssl_cert_file = '{}'\nssl_key_file = '{}'\n",
            dir.join("pg/server.crt").display(),
            dir.join("pg/server.key").display()
        );
        std::fs::write(dir.join("pg/postgresql.auto.conf"), conf).unwrap();
        if is_root() {
            let ok =
                Command::new("chown").args(["-R", "postgres:postgres"]).arg(dir.join("pg")).status().unwrap().success();
            assert!(ok);
        }
    });
    let ca = pg.dir.path().join("ca.crt");
    let export = |db: &str| backscope().args(["sweep", "export", "--jsonl", "--db", db]).output().unwrap();
    // sslmode=prefer (the default) with the test CA: TLS, verified, connected (the schema is created).
    let out = export(&format!("host=localhost port={port} dbname=fleet user=postgres sslrootcert={}", ca.display()));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(
        pg.psql("SELECT string_agg(version::text, ',' ORDER BY version) FROM backscope.schema_migrations"),
        "1,2,3,4"
    );
    // Without the CA the server's certificate is not trusted: a clear error, no silent fallback to plain text.
    let out = export(&format!("postgres://postgres@localhost:{port}/fleet?sslmode=require"));
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && e.contains("cannot connect to") && e.to_lowercase().contains("certificate"),
        "{e}"
    );
    // sslmode=disable is refused by this server (hostssl only), which shows the first connection used TLS.
    let out = export(&format!("host=localhost port={port} dbname=fleet user=postgres sslmode=disable"));
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && e.contains("no pg_hba.conf entry"), "{e}");
}

#[test]
fn a_host_role_cannot_plant_or_change_another_roles_rows_and_its_own_work_goes_on() {
    let pg = Pg::start();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let pgpass = d.join("pgpass");
    std::fs::write(&pgpass, "*:*:*:host_a:pw-a\n*:*:*:host_b:pw-b\n").unwrap();
    std::fs::set_permissions(&pgpass, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    // The migration role (here the superuser) creates the schema; each host its own role, the documented grants.
    stdout_ok(backscope().args(["sweep", "export", "--jsonl", "--db", &pg.db("postgres")]));
    for role in ["host_a", "host_b"] {
        pg.psql(&format!("CREATE ROLE {role} LOGIN PASSWORD 'pw-{}'", &role[5..]));
        pg.psql(&documented_grants().replace("backscope_host", role));
    }
    // Both play the same self-declared host id: only the role tells them apart.
    let as_role = |role: &str| {
        let mut c = backscope();
        c.current_dir(d).env("PGPASSFILE", &pgpass).env_remove("PGPASSWORD").env("BACKSCOPE_HOST_ID", "host-a");
        (c, pg.db(role))
    };
    // A's own work: an import (a run and its records), a push, a bisect.
    let bench = d.join("bench.jsonl");
    std::fs::write(&bench, "{\"n_prompt\":8,\"n_gen\":0,\"avg_ns\":1000,\"avg_ts\":1.5}\n").unwrap();
    let (mut c, db_a) = as_role("host_a");
    stdout_ok(c.args(["sweep", "import", "--db", &db_a, "--runs-dir", "runs-a"]).arg(&bench));
    let local = d.join("local.db");
    stdout_ok(
        backscope()
            .args(["sweep", "import", "--db"])
            .arg(&local)
            .args(["--runs-dir"])
            .arg(d.join("runs-l"))
            .arg(&bench),
    );
    let (mut c, _) = as_role("host_a");
    stdout_ok(c.args(["push", "--db", &db_a]).arg("--from").arg(&local));
    crate::support::util::marker_builds(d, 100..=102, 102);
    let test = r#"echo "$BACKSCOPE_BUILD" >> "$RAN"; test ! -e "$BACKSCOPE_BIN_DIR/bad""#;
    let bisect = |role: &str, ran: &str, args: &[&str]| {
        let (mut c, db) = as_role(role);
        c.env("RAN", d.join(ran)).args(["bisect", "--json", "--db", &db]).args(args);
        c
    };
    let good_bad = ["--good", "100", "--bad", "102", "--builds", "dir:builds", "--", "sh", "-c", test];
    let mine: Value = serde_json::from_str(&stdout_ok(&mut bisect("host_a", "ran-a", &good_bad))).unwrap();
    let mine_id = mine["bisect"]["bisect_id"].as_str().unwrap().to_string();
    assert_eq!(
        pg.psql("SELECT string_agg(DISTINCT owner_role, ',') FROM (SELECT owner_role FROM backscope.runs UNION ALL SELECT owner_role FROM backscope.records UNION ALL SELECT owner_role FROM backscope.bisect_runs UNION ALL SELECT owner_role FROM backscope.bisect_steps) o"),
        "host_a",
        "every row A wrote is stamped with A's role by the server"
    );
    let before = pg.psql("SELECT run_id || host_id || status || owner_role FROM backscope.runs ORDER BY run_id");
    // B's own bisect (its command would mark `ran-b`), then a copy of it planted as the newest, claiming host-a.
    stdout_ok(&mut bisect("host_b", "ran-b", &good_bad));
    std::fs::remove_file(d.join("ran-b")).unwrap();
    let plant = "INSERT INTO backscope.bisect_runs (bisect_id, created_at, status, good, bad, builds, test, spec_json, \
                 candidates_json, backscope_version, host_id{owner}) SELECT 'bisect-29990101-000000-beef', '2999-01-01T00:00:00Z', 'running', \
                 good, bad, builds, test, spec_json, candidates_json, backscope_version, 'host-a'{value} \
                 FROM backscope.bisect_runs WHERE owner_role = 'host_b'";
    let (planted, e) =
        psql_as(&pg, &pgpass, "host_b", &plant.replace("{owner}", ", owner_role").replace("{value}", ", 'host_a'"));
    assert!(!planted && e.contains("row-level security"), "B cannot insert a row owned by A: {e}");
    let (planted, e) = psql_as(&pg, &pgpass, "host_b", &plant.replace("{owner}", "").replace("{value}", ""));
    assert!(planted, "B may store its own rows: {e}");
    // A's plain --resume continues A's own latest bisect, not the planted one; --resume of the planted id is refused.
    let resumed: Value =
        serde_json::from_str(&stdout_ok(&mut bisect("host_a", "ran-a", &["--resume", "--yes"]))).unwrap();
    assert_eq!(resumed["bisect"]["bisect_id"], mine_id.as_str());
    let out = bisect("host_a", "ran-a", &["--resume", "bisect-29990101-000000-beef", "--yes"]).output().unwrap();
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && e.contains("belongs to the database role `host_b`") && e.contains("not resumed"),
        "{e}"
    );
    assert!(!d.join("ran-b").exists(), "the planted command never ran");
    // B cannot change A's rows: updates find nothing, inserts into A's run or bisect are refused, no DELETE/UPDATE of
    // records or steps at all.
    let a_run = pg.psql("SELECT run_id FROM backscope.runs ORDER BY run_id LIMIT 1");
    for sql in [
        "UPDATE backscope.runs SET host_id = 'host-b', status = 'interrupted'".to_string(),
        "UPDATE backscope.bisect_runs SET status = 'interrupted' WHERE owner_role = 'host_a'".to_string(),
    ] {
        let (done, out) = psql_as(&pg, &pgpass, "host_b", &sql);
        assert!(done && out == "UPDATE 0", "{sql}: {out}");
    }
    for (sql, why) in [
        (format!("INSERT INTO backscope.records (record_id, run_id, cell_key, seq, endpoint, model, num_gpu, prompt, num_predict, epoch, repetition, status, file, json, recorded_at, host_id) VALUES ('x', '{a_run}', 'k', 99, 'e', 'm', 0, 'p', 1, 0, 0, 'ok', 'f', '{{}}', 't', 'host-a')"), "row-level security"),
        (format!("INSERT INTO backscope.bisect_steps (bisect_id, seq, build, role, outcome, reason, evidence_json, test_secs, recorded_at) VALUES ('{mine_id}', 99, 101, 'probe', 'good', 'r', '[]', 1, 't')"), "row-level security"),
        ("INSERT INTO backscope.runs (run_id, created_at, status, source, run_dir, plan_json, cells_total, backscope_version, host_id, owner_role) VALUES ('x', 'c', 'running', 'sweep', '/x', '{}', 1, 'v', 'host-a', 'host_a')".to_string(), "row-level security"),
        ("UPDATE backscope.records SET json = '{}'".to_string(), "permission denied"),
        ("UPDATE backscope.runs SET owner_role = 'host_b'".to_string(), "permission denied"),
        ("DELETE FROM backscope.bisect_steps".to_string(), "permission denied"),
    ] {
        let (done, out) = psql_as(&pg, &pgpass, "host_b", &sql);
        assert!(!done && out.contains(why), "{sql}: {out}");
    }
    assert_eq!(pg.psql("SELECT run_id || host_id || status || owner_role FROM backscope.runs ORDER BY run_id"), before);
    assert_eq!(pg.psql(&format!("SELECT status FROM backscope.bisect_runs WHERE bisect_id = '{mine_id}'")), "finished");
    // Through backscope, B's push into A's run is refused, --take-over or not (the same host id does not help).
    let (mut c, db_b) = as_role("host_b");
    let out = c.args(["push", "--take-over", "--db", &db_b]).arg("--from").arg(&local).output().unwrap();
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && e.contains("belongs to the database role `host_a`"), "{e}");
    // A's own work is unaffected: its push again stores nothing new, its rows are as they were.
    let (mut c, _) = as_role("host_a");
    let pushed: Value =
        serde_json::from_str(&stdout_ok(c.args(["push", "--json", "--db", &db_a]).arg("--from").arg(&local))).unwrap();
    assert_eq!((pushed[0]["uploaded"].as_u64(), pushed[0]["already_stored"].as_u64()), (Some(0), Some(1)));
    assert_eq!(pg.psql("SELECT run_id || host_id || status || owner_role FROM backscope.runs ORDER BY run_id"), before);
    // An admin role (here the superuser, which bypasses row-level security) can take a run over: it becomes its own.
    let run_l = pushed[0]["run_id"].as_str().unwrap();
    stdout_ok(backscope().args(["push", "--take-over", "--db", &pg.db("postgres")]).arg("--from").arg(&local));
    assert_eq!(pg.psql(&format!("SELECT owner_role FROM backscope.runs WHERE run_id = '{run_l}'")), "postgres");
}
