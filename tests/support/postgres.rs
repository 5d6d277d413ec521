//! A throw-away PostgreSQL cluster for the fleet tests (Debian's `postgresql`, scripts/install-deps.sh): started in
//! a temp dir, listening on a Unix socket only, and stopped by `pg_ctl` when the test ends, also when it fails
//! ([`Pg`]'s Drop); the grants the fleet guide documents; `psql` as a role; a CPU sweep played as one host.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use crate::support::sweep::{event_is, llama_bin, tiny_model};
use crate::support::util::backscope;

/// A throw-away PostgreSQL cluster: `DIR/pg` data, socket in `DIR`, database `fleet`, superuser `postgres` (trust
/// on the socket), every other role by password (scram), so that `~/.pgpass` is exercised.
pub struct Pg {
    pub dir: tempfile::TempDir,
    pub bin: PathBuf,
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

pub fn is_root() -> bool {
    unsafe { libc::geteuid() == 0 }
}

impl Pg {
    pub fn start() -> Pg {
        Pg::start_with("", "", |_| {})
    }

    /// A cluster with more `-c` settings and `pg_hba.conf` lines, `prepare` run on its directory before it starts.
    pub fn start_with(extra: &str, hba: &str, prepare: impl FnOnce(&Path)) -> Pg {
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

    pub fn socket_dir(&self) -> String {
        self.dir.path().display().to_string()
    }

    pub fn data(&self) -> String {
        self.dir.path().join("pg").display().to_string()
    }

    pub fn as_postgres(&self, program: &Path, args: &[&str]) {
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

    pub fn start_server(&self) {
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

    pub fn stop_server(&self) {
        self.as_postgres(&self.bin.join("pg_ctl"), &["-D", &self.data(), "-m", "fast", "-w", "stop"]);
    }

    /// The `--db` value for `user`.
    pub fn db(&self, user: &str) -> String {
        format!("host={} port={} dbname=fleet user={user}", self.socket_dir(), self.port)
    }

    /// `psql -At` as the superuser: the rows, `|`-separated.
    pub fn psql(&self, sql: &str) -> String {
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
pub fn sweep_cmd(host: &str, db: &str, runs: &Path, reps: usize) -> Command {
    let (bin, model) = (llama_bin(), tiny_model());
    let mut cmd = backscope();
    cmd.env("BACKSCOPE_HOST_ID", host).arg("sweep").arg("--json").args(["--db", db]).arg("--runs-dir").arg(runs);
    cmd.args(["--server", "cpu=llama-server:--device,none", "--llama-bin"]).arg(bin).arg("--model").arg(model);
    cmd.args(["--num-gpu", "0", "--repetitions", &reps.to_string(), "--num-predict", "4", "--prompt", "Hello"]);
    cmd
}

pub fn run_id_of(events: &[Value]) -> String {
    let started = events.iter().find(|e| event_is(e, "run_started")).expect("a run_started event");
    started["run_id"].as_str().unwrap().to_string()
}

/// The grant statements of docs/fleet.md, between its `<!-- grants -->` markers.
pub fn documented_grants() -> String {
    let doc = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/fleet.md")).unwrap();
    let block = doc.split("<!-- grants -->").nth(1).unwrap().split("<!-- /grants -->").next().unwrap();
    block.lines().filter(|l| !l.starts_with("```")).collect::<Vec<_>>().join("\n")
}

/// `psql` as `role` (its password from `pgpass`): the output, whatever the exit status (a refusal is the point).
pub fn psql_as(pg: &Pg, pgpass: &Path, role: &str, sql: &str) -> (bool, String) {
    let out = Command::new(pg.bin.join("psql"))
        .env("PGPASSFILE", pgpass)
        .env_remove("PGPASSWORD")
        .args(["-X", "-At", "-v", "ON_ERROR_STOP=1", "-h", &pg.socket_dir(), "-U", role, "-d", "fleet", "-c", sql])
        .output()
        .unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.success(), text.trim().to_string())
}
