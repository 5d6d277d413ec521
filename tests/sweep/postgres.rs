//! Fleet runs against a real PostgreSQL server (Debian's `postgresql`, scripts/install-deps.sh): each test starts a
//! throw-away cluster in a temp dir, listening on a Unix socket only, and stops it by `pg_ctl` when the test ends,
//! also when it fails ([`Pg`]'s Drop). Sweeps run real CPU llama-servers (`--device none`) and play two hosts on one
//! machine through `BACKSCOPE_HOST_ID`. Expected counts come from the plan (cells × repetitions) and from `psql`,
//! not from backscope's own output.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::Value;

use crate::support::sweep::{event_is, heavy, llama_bin, records, tiny_model, Sweep};
use crate::support::util::backscope;

/// A throw-away PostgreSQL cluster: `DIR/pg` data, socket in `DIR`, database `fleet`, superuser `postgres` (trust
/// on the socket), every other role by password (scram), so that `~/.pgpass` is exercised.
pub(crate) struct Pg {
    dir: tempfile::TempDir,
    bin: PathBuf,
    /// More server settings (`-c …`): TLS on a TCP port for the TLS test.
    extra: String,
    /// The port (also the socket's name, `.s.PGSQL.PORT`).
    port: u16,
}

/// The newest installed server's programs (`/usr/lib/postgresql/N/bin`).
fn pg_bin() -> PathBuf {
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .expect("no /usr/lib/postgresql: install Debian's postgresql (scripts/install-deps.sh)")
        .flatten()
        .filter_map(|e| Some((e.file_name().to_str()?.parse().ok()?, e.path().join("bin"))))
        .filter(|(_, b)| b.join("initdb").exists())
        .collect();
    versions.sort();
    versions.pop().expect("no PostgreSQL server in /usr/lib/postgresql").1
}

fn is_root() -> bool {
    unsafe { libc::geteuid() == 0 }
}

impl Pg {
    pub(crate) fn start() -> Pg {
        Pg::start_with("", "", |_| {})
    }

    /// A cluster with more `-c` settings and `pg_hba.conf` lines, `prepare` run on its directory before it starts.
    fn start_with(extra: &str, hba: &str, prepare: impl FnOnce(&Path)) -> Pg {
        let dir = tempfile::Builder::new().prefix("bs-pg-").tempdir_in("/tmp").unwrap();
        if is_root() {
            // initdb refuses root: the cluster is the postgres user's.
            let ok = Command::new("chown").arg("postgres:postgres").arg(dir.path()).status().unwrap().success();
            assert!(ok, "chown postgres {}", dir.path().display());
        }
        let port = extra.split_once("-p ").and_then(|(_, p)| p.split(' ').next()?.parse().ok()).unwrap_or(5432);
        let pg = Pg { dir, bin: pg_bin(), extra: extra.to_string(), port };
        let data = pg.data();
        pg.as_postgres(&pg.bin.join("initdb"), &["-D", &data, "-U", "postgres", "-A", "trust"]);
        let hba_conf = format!("local all postgres trust\nlocal all all scram-sha-256\n{hba}");
        std::fs::write(Path::new(&data).join("pg_hba.conf"), hba_conf).unwrap();
        prepare(pg.dir.path());
        pg.start_server();
        pg.psql("CREATE DATABASE fleet");
        pg
    }

    fn socket_dir(&self) -> String {
        self.dir.path().display().to_string()
    }

    fn data(&self) -> String {
        self.dir.path().join("pg").display().to_string()
    }

    fn as_postgres(&self, program: &Path, args: &[&str]) {
        let mut cmd = if is_root() {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(program);
            c
        } else {
            Command::new(program)
        };
        let out = cmd.args(args).output().unwrap();
        assert!(out.status.success(), "{program:?} {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    }

    fn start_server(&self) {
        let opts = match self.extra.as_str() {
            "" => format!("-k {} -c listen_addresses=", self.socket_dir()),
            extra => format!("-k {} {extra}", self.socket_dir()),
        };
        let log = self.dir.path().join("pg.log").display().to_string();
        let started = std::panic::catch_unwind(|| {
            self.as_postgres(&self.bin.join("pg_ctl"), &["-D", &self.data(), "-o", &opts, "-l", &log, "-w", "start"])
        });
        if started.is_err() {
            panic!("the server did not start; its log:\n{}", std::fs::read_to_string(&log).unwrap_or_default());
        }
    }

    fn stop_server(&self) {
        self.as_postgres(&self.bin.join("pg_ctl"), &["-D", &self.data(), "-m", "fast", "-w", "stop"]);
    }

    /// The `--db` value for `user`.
    pub(crate) fn db(&self, user: &str) -> String {
        format!("host={} port={} dbname=fleet user={user}", self.socket_dir(), self.port)
    }

    /// `psql -At` as the superuser: the rows, `|`-separated.
    pub(crate) fn psql(&self, sql: &str) -> String {
        let db = if sql.starts_with("CREATE DATABASE") { "postgres" } else { "fleet" };
        let out = Command::new(self.bin.join("psql"))
            .args([
                "-X",
                "-At",
                "-v",
                "ON_ERROR_STOP=1",
                "-h",
                &self.socket_dir(),
                "-p",
                &self.port.to_string(),
                "-U",
                "postgres",
                "-d",
                db,
                "-c",
                sql,
            ])
            .output()
            .unwrap();
        assert!(out.status.success(), "psql {sql}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap().trim().to_string()
    }
}

impl Drop for Pg {
    fn drop(&mut self) {
        // Stopped whatever the test did; a server already stopped makes pg_ctl fail, which is fine here.
        let mut cmd = if is_root() {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(self.bin.join("pg_ctl"));
            c
        } else {
            Command::new(self.bin.join("pg_ctl"))
        };
        let _ = cmd.args(["-D", &self.data(), "-m", "immediate", "-w", "stop"]).output();
    }
}

/// A CPU sweep of `reps` cells, as host `host`, into `db`.
fn sweep_cmd(host: &str, db: &str, runs: &Path, reps: usize) -> Command {
    let (bin, model) = (llama_bin(), tiny_model());
    let mut cmd = backscope();
    cmd.env("BACKSCOPE_HOST_ID", host).arg("sweep").arg("--json").args(["--db", db]).arg("--runs-dir").arg(runs);
    cmd.args(["--server", "cpu=llama-server:--device,none", "--llama-bin"]).arg(bin).arg("--model").arg(model);
    cmd.args(["--num-gpu", "0", "--repetitions", &reps.to_string(), "--num-predict", "4", "--prompt", "Hello"]);
    cmd
}

fn run_id_of(events: &[Value]) -> String {
    let started = events.iter().find(|e| event_is(e, "run_started")).expect("a run_started event");
    started["run_id"].as_str().unwrap().to_string()
}

fn ok(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap();
    assert!(out.status.success(), "{cmd:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

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
        "1,2,3",
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
    let report: Value = serde_json::from_str(&ok(backscope().args(["report", &db, "--hosts", "--json"]))).unwrap();
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
        serde_json::from_str(&ok(backscope().args(["report", &db, "--host", "host-a", "--json"]))).unwrap();
    assert_eq!(only_a["hosts"].as_array().unwrap().len(), 1);
    let html = ok(backscope().args(["report", &db, "--hosts", "--format", "html"]));
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
    let line =
        ok(backscope().env("BACKSCOPE_HOST_ID", "host-a").args(["sweep", "--quiet", "--yes", "--resume", "--db", &db]));
    assert!(line.contains(&format!("run {run_id}: {CELLS} of {CELLS} cells recorded")), "{line}");
    let counts = pg.psql(&format!(
        "SELECT count(*) || ' ' || count(DISTINCT cell_key) || ' ' || min(seq) || ' ' || max(seq) FROM backscope.records WHERE run_id = '{run_id}'"
    ));
    assert_eq!(counts, format!("{CELLS} {CELLS} 0 {}", CELLS - 1));
    assert_eq!(pg.psql(&format!("SELECT status FROM backscope.runs WHERE run_id = '{run_id}'")), "finished");
}

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
        let out = ok(backscope()
            .env("BACKSCOPE_HOST_ID", "host-a")
            .args(["push", "--json", "--db", db])
            .arg("--from")
            .arg(&local));
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
    let export = ok(backscope().args(["sweep", "export", "--jsonl", "--db"]).arg(&local));
    let shared = ok(backscope().args(["sweep", "export", "--jsonl", "--db", &pg.db("postgres")]));
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
    let out = ok(backscope()
        .env("BACKSCOPE_HOST_ID", "host-a")
        .args(["push", "--json", "--db", &db])
        .arg("--from")
        .arg(&fallback));
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

/// The grant statements of docs/fleet.md, between its `<!-- grants -->` markers.
pub(crate) fn documented_grants() -> String {
    let doc = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/fleet.md")).unwrap();
    let block = doc.split("<!-- grants -->").nth(1).unwrap().split("<!-- /grants -->").next().unwrap();
    block.lines().filter(|l| !l.starts_with("```")).collect::<Vec<_>>().join("\n")
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
    ok(backscope().args(["sweep", "export", "--jsonl", "--db", &pg.db("postgres")]));
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
        let out = ok(backscope()
            .env("PGPASSFILE", &pgpass)
            .env("BACKSCOPE_HOST_ID", "host-a")
            .args(["push", "--json", "--db", &host_db])
            .arg("--from")
            .arg(&local));
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
    let out = ok(backscope()
        .current_dir(dir.path())
        .env("PGPASSFILE", &pgpass)
        .args(["bisect", "--json", "--db", &host_db, "--good", "100", "--bad", "102", "--builds", "dir:builds"])
        .args(["--", "sh", "-c", r#"test ! -e "$BACKSCOPE_BIN_DIR/bad""#]));
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
        "1,2,3"
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
    let report = ok(backscope().args(["report", &db, "--bisect", "--json"]));
    let r: Value = serde_json::from_str(&report).unwrap();
    assert_eq!(r["bisect"]["bisect_id"], v["bisect"]["bisect_id"]);
    assert_eq!(r["verdict"]["first_bad"], 105);
    let builds: Vec<String> = r["steps"].as_array().unwrap().iter().map(|s| format!("b{}", s["build"])).collect();
    let from_psql: Vec<String> = stored.split(' ').map(|s| s.split(':').nth(1).unwrap().to_string()).collect();
    assert_eq!(builds, from_psql);
}

/// `psql` as `role` (its password from `pgpass`): the output, whatever the exit status (a refusal is the point).
pub(crate) fn psql_as(pg: &Pg, pgpass: &Path, role: &str, sql: &str) -> (bool, String) {
    let out = Command::new(pg.bin.join("psql"))
        .env("PGPASSFILE", pgpass)
        .env_remove("PGPASSWORD")
        .args(["-X", "-At", "-v", "ON_ERROR_STOP=1", "-h", &pg.socket_dir(), "-U", role, "-d", "fleet", "-c", sql])
        .output()
        .unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.success(), text.trim().to_string())
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
    ok(backscope().args(["sweep", "export", "--jsonl", "--db", &pg.db("postgres")]));
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
    ok(c.args(["sweep", "import", "--db", &db_a, "--runs-dir", "runs-a"]).arg(&bench));
    let local = d.join("local.db");
    ok(backscope()
        .args(["sweep", "import", "--db"])
        .arg(&local)
        .args(["--runs-dir"])
        .arg(d.join("runs-l"))
        .arg(&bench));
    let (mut c, _) = as_role("host_a");
    ok(c.args(["push", "--db", &db_a]).arg("--from").arg(&local));
    crate::support::util::marker_builds(d, 100..=102, 102);
    let test = r#"echo "$BACKSCOPE_BUILD" >> "$RAN"; test ! -e "$BACKSCOPE_BIN_DIR/bad""#;
    let bisect = |role: &str, ran: &str, args: &[&str]| {
        let (mut c, db) = as_role(role);
        c.env("RAN", d.join(ran)).args(["bisect", "--json", "--db", &db]).args(args);
        c
    };
    let good_bad = ["--good", "100", "--bad", "102", "--builds", "dir:builds", "--", "sh", "-c", test];
    let mine: Value = serde_json::from_str(&ok(&mut bisect("host_a", "ran-a", &good_bad))).unwrap();
    let mine_id = mine["bisect"]["bisect_id"].as_str().unwrap().to_string();
    assert_eq!(
        pg.psql("SELECT string_agg(DISTINCT owner_role, ',') FROM (SELECT owner_role FROM backscope.runs UNION ALL SELECT owner_role FROM backscope.records UNION ALL SELECT owner_role FROM backscope.bisect_runs UNION ALL SELECT owner_role FROM backscope.bisect_steps) o"),
        "host_a",
        "every row A wrote is stamped with A's role by the server"
    );
    let before = pg.psql("SELECT run_id || host_id || status || owner_role FROM backscope.runs ORDER BY run_id");
    // B's own bisect (its command would mark `ran-b`), then a copy of it planted as the newest, claiming host-a.
    ok(&mut bisect("host_b", "ran-b", &good_bad));
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
    let resumed: Value = serde_json::from_str(&ok(&mut bisect("host_a", "ran-a", &["--resume", "--yes"]))).unwrap();
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
        serde_json::from_str(&ok(c.args(["push", "--json", "--db", &db_a]).arg("--from").arg(&local))).unwrap();
    assert_eq!((pushed[0]["uploaded"].as_u64(), pushed[0]["already_stored"].as_u64()), (Some(0), Some(1)));
    assert_eq!(pg.psql("SELECT run_id || host_id || status || owner_role FROM backscope.runs ORDER BY run_id"), before);
    // An admin role (here the superuser, which bypasses row-level security) can take a run over: it becomes its own.
    let run_l = pushed[0]["run_id"].as_str().unwrap();
    ok(backscope().args(["push", "--take-over", "--db", &pg.db("postgres")]).arg("--from").arg(&local));
    assert_eq!(pg.psql(&format!("SELECT owner_role FROM backscope.runs WHERE run_id = '{run_l}'")), "postgres");
}
