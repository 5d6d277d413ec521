//! `sweep --resume` and the leftover reclaim against hostile stores: a stored run is data, not code. A real run is made
//! with `sweep` (a managed "server" that is `/bin/sh` exiting at once, or an external endpoint nothing listens on), and
//! its SQLite row is then rewritten with SQLite itself (rusqlite), as someone with write access to the file would. The
//! binary runs under the bounded runner.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Child, Command};
use std::time::Duration;

use rusqlite::Connection;
use serde_json::Value;

use crate::support::bounded::{self, Bounds, Done, MIB};

fn bounds(dir: &Path, seconds: u64) -> Bounds {
    Bounds { deadline: Duration::from_secs(seconds), cwd: Some(dir.to_path_buf()), ..Bounds::default() }
}

/// `backscope sweep --quiet --db s.db --runs-dir runs ARGS` in `dir`, bounded.
fn sweep(dir: &Path, args: &[&str]) -> Done {
    let mut all = vec!["sweep", "--quiet", "--db", "s.db", "--runs-dir", "runs"];
    all.extend(args);
    bounded::run(&all, bounds(dir, 60))
}

/// A finished run of one cell whose managed server is `sh -c 'exit 3'` (it dies before it is ready: a failed
/// cell, exit 1). Its id.
fn managed_run(dir: &Path) -> String {
    let spec = r#"
        models = ["m"]
        [timeouts]
        grace_s = 1
        [[endpoints]]
        name = "x"
        server = "command"
        program = "/bin/sh"
        args = ["-c", "exit 3", "{port}"]
        ready_timeout_s = 5
    "#;
    std::fs::write(dir.join("s.toml"), spec).unwrap();
    sweep(dir, &["--spec", "s.toml"]).assert_bounded(&[1], 30, 200 * MIB);
    only_run(dir)
}

/// The id of the one run in `dir/s.db`.
fn only_run(dir: &Path) -> String {
    let conn = Connection::open(dir.join("s.db")).unwrap();
    conn.query_row("SELECT run_id FROM runs", [], |r| r.get(0)).unwrap()
}

/// Rewrite the stored plan of the one run in `dir/s.db` with `edit`, and forget its records so that `--resume`
/// has its cell to run again.
fn rewrite_plan(dir: &Path, edit: impl FnOnce(&mut Value)) {
    let conn = Connection::open(dir.join("s.db")).unwrap();
    let text: String = conn.query_row("SELECT plan_json FROM runs", [], |r| r.get(0)).unwrap();
    let mut plan: Value = serde_json::from_str(&text).unwrap();
    edit(&mut plan);
    conn.execute("UPDATE runs SET plan_json = ?1", [plan.to_string()]).unwrap();
    conn.execute("DELETE FROM records", []).unwrap();
}

/// A rewritten plan_json once made a plain `sweep --resume` start the row's server command. Now
/// the command is shown (shell-quoted and escaped) and refused with exit 2 without `--yes`, and runs with it.
#[test]
fn a_planted_server_command_runs_only_after_yes() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let id = managed_run(d);
    let marker = d.join("planted-ran");
    // The planted command also carries a terminal escape (a window-title change) in an argument.
    let planted = format!("touch '{}'; exit 3 # \u{1b}]0;pwned\u{7}", marker.display());
    rewrite_plan(d, |p| p["endpoints"][0]["kind"]["args"] = serde_json::json!(["-c", planted, "{port}"]));

    let done = sweep(d, &["--resume"]);
    done.assert_bounded(&[2], 30, 200 * MIB);
    assert!(!marker.exists(), "the planted command ran without --yes");
    let err = &done.stderr;
    assert!(err.contains("server `x`: /bin/sh -c 'touch") && err.contains("--yes"), "{err}");
    assert!(err.contains(&id), "{err}");
    assert!(!err.contains('\u{1b}') && !err.contains('\u{7}'), "a raw escape: {err:?}");
    assert!(err.contains("\\x1b"), "the escape is shown visibly: {err}");

    let done = sweep(d, &["--resume", &id, "--yes"]);
    done.assert_no_panic();
    assert!(marker.exists(), "with --yes the stored command runs: {}", done.describe());
}

/// The environment of a managed server (LD_PRELOAD) is code too: shown, and refused without `--yes`.
#[test]
fn a_planted_server_environment_needs_yes() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    managed_run(d);
    rewrite_plan(d, |p| p["endpoints"][0]["kind"]["env"] = serde_json::json!([["LD_PRELOAD", "/tmp/evil.so"]]));
    let done = sweep(d, &["--resume"]);
    done.assert_bounded(&[2], 30, 200 * MIB);
    assert!(done.stderr.contains("server `x` env: LD_PRELOAD=/tmp/evil.so"), "{}", done.stderr);
}

/// The choice documented in docs/sweep.md: a run of external endpoints starts no program (it sends its requests
/// over HTTP), so its resume needs no `--yes`.
#[test]
fn a_resume_of_external_endpoints_only_needs_no_yes() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // Port 1 on loopback: nothing listens, the cell fails at once (connection refused).
    let spec = "models = [\"m\"]\n[[endpoints]]\nname = \"e\"\nurl = \"http://127.0.0.1:1\"\napi = \"ollama\"\n";
    std::fs::write(d.join("s.toml"), spec).unwrap();
    sweep(d, &["--spec", "s.toml"]).assert_bounded(&[1], 30, 200 * MIB);
    rewrite_plan(d, |_| {});
    let done = sweep(d, &["--resume"]);
    done.assert_bounded(&[1], 30, 200 * MIB);
    assert!(!done.stderr.contains("--yes"), "{}", done.stderr);
    assert_eq!(records(d), 1, "the resumed run ran its cell again: {}", done.describe());
}

fn records(dir: &Path) -> i64 {
    let conn = Connection::open(dir.join("s.db")).unwrap();
    conn.query_row("SELECT count(*) FROM records", [], |r| r.get(0)).unwrap()
}

/// A stored plan goes through the checks a new one does: numbers out of range and a broken shape are refused
/// naming the field, before anything is started (with `--yes` too).
#[test]
fn a_stored_plan_out_of_range_is_refused_naming_the_field() {
    type Edit = fn(&mut Value);
    let cases: [(&str, Edit); 6] = [
        ("epochs", |p| p["epochs"] = 5000.into()),
        ("repetitions", |p| p["repetitions"] = 0.into()),
        ("num_predict", |p| p["num_predict"] = serde_json::json!([0])),
        ("request timeout", |p| p["timeouts"]["request_s"] = 1e300.into()),
        ("temperature", |p| p["temperature"] = 1e9.into()),
        ("endpoints", |p| p["endpoints"][0]["name"] = "../x".into()),
    ];
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    managed_run(d);
    let conn = Connection::open(d.join("s.db")).unwrap();
    let original: String = conn.query_row("SELECT plan_json FROM runs", [], |r| r.get(0)).unwrap();
    for (field, edit) in cases {
        conn.execute("UPDATE runs SET plan_json = ?1", [&original]).unwrap();
        rewrite_plan(d, edit);
        let done = sweep(d, &["--resume", "--yes"]);
        done.assert_bounded(&[2], 30, 200 * MIB);
        assert!(done.stderr.contains("the stored plan is refused"), "{field}: {}", done.stderr);
        assert!(done.stderr.contains(field), "{field}: {}", done.stderr);
        assert_eq!(records(d), 0, "{field}: a refused plan ran a cell");
    }
}

/// A process carrying a sweep's tag in its environment, as a managed server's leftover would; killed on drop.
struct Leftover(Child);

impl Leftover {
    fn start(tag: &str) -> Leftover {
        Leftover(Command::new("sleep").arg("120").env("BACKSCOPE_SWEEP_TAG", tag).spawn().unwrap())
    }

    fn alive(&mut self) -> bool {
        self.0.try_wait().unwrap().is_none()
    }
}

impl Drop for Leftover {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A ledger in `run_dir` naming processes tagged `tag`, written as by a backscope that has died (a pid no process
/// has), and a sweep run row for it in `dir/s.db` (no host: a row of this host, as old rows are).
fn plant_ledger(dir: &Path, run_id: &str, run_dir: &Path, tag: &str) {
    std::fs::create_dir_all(run_dir.join("groups")).unwrap();
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap().trim().to_string();
    let entry = serde_json::json!({"tag": tag, "owner_pid": 2_000_000_000, "owner_start_ticks": 0,
        "boot_id": boot, "argv": ["planted"]});
    std::fs::write(run_dir.join("groups/x.json"), entry.to_string()).unwrap();
    let conn = Connection::open(dir.join("s.db")).unwrap();
    conn.execute(
        "INSERT INTO runs (run_id, created_at, status, source, run_dir, plan_json, cells_total, backscope_version)
         VALUES (?1, '2026-01-01T00:00:00.000Z', 'running', 'sweep', ?2, '{}', 1, 't')",
        [run_id, &run_dir.display().to_string()],
    )
    .unwrap();
}

/// The leftover reclaim kills the processes a stored run's ledger names. A row whose run directory any
/// user can write to (its ledgers could be anyone's) is not reclaimed; the same ledger in a private directory
/// is, which shows the planted one would have been.
#[test]
fn a_run_dir_others_can_write_to_is_not_reclaimed() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    managed_run(d);
    let shared = d.join("shared");
    std::fs::create_dir(&shared).unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o777)).unwrap();
    let shared_tag = format!("planted-shared-{}", std::process::id());
    let mut in_shared = Leftover::start(&shared_tag);
    plant_ledger(d, "20260101-000000-aaaa", &shared, &shared_tag);
    let private = d.join("private");
    std::fs::create_dir(&private).unwrap();
    std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o700)).unwrap();
    let private_tag = format!("planted-private-{}", std::process::id());
    let mut in_private = Leftover::start(&private_tag);
    plant_ledger(d, "20260101-000000-bbbb", &private, &private_tag);

    // Any sweep on the database reclaims first; this one then stops at the run it cannot find.
    let done = sweep(d, &["--resume", "20990101-000000-none"]);
    done.assert_bounded(&[2], 30, 200 * MIB);
    std::thread::sleep(Duration::from_millis(200));
    assert!(in_shared.alive(), "a ledger in a world-writable directory was obeyed: {}", done.describe());
    assert!(shared.join("groups/x.json").exists(), "its ledger was consumed");
    assert!(!in_private.alive(), "the private run's leftover was not reclaimed: {}", done.describe());
}

/// A ledger in `run_dir` as [`plant_ledger`] writes it, without the row.
fn ledger_only(run_dir: &Path, tag: &str) {
    std::fs::create_dir_all(run_dir.join("groups")).unwrap();
    std::fs::set_permissions(run_dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap().trim().to_string();
    let entry = serde_json::json!({"tag": tag, "owner_pid": 2_000_000_000, "owner_start_ticks": 0,
        "boot_id": boot, "argv": ["planted"]});
    std::fs::write(run_dir.join("groups/x.json"), entry.to_string()).unwrap();
}

/// In a shared PostgreSQL store, role B plants a run claiming A's host id whose ledger (in a private
/// directory of this user) names a process of A's host. A's next sweep reclaims only its own role's runs: B's
/// planted leftover lives on, A's own (the control: the same ledger in a row of A's role) is killed.
#[test]
fn another_roles_run_claiming_this_host_is_not_reclaimed() {
    let pg = crate::support::postgres::Pg::start();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let pgpass = d.join("pgpass");
    std::fs::write(&pgpass, "*:*:*:host_a:pw-a\n*:*:*:host_b:pw-b\n").unwrap();
    std::fs::set_permissions(&pgpass, std::fs::Permissions::from_mode(0o600)).unwrap();
    let as_role = |role: &str, args: &[&str]| {
        let mut all: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        all.extend(["--db".into(), pg.db(role)]);
        let env = vec![("PGPASSFILE", pgpass.display().to_string()), ("BACKSCOPE_HOST_ID", "host-a".to_string())];
        bounded::run(&all, Bounds { env, env_remove: vec!["PGPASSWORD"], ..bounds(d, 60) })
    };
    // The migration role (here the superuser) creates the schema; each host its own role, the documented grants.
    as_role("postgres", &["sweep", "export"]).assert_bounded(&[0], 30, 200 * MIB);
    for role in ["host_a", "host_b"] {
        pg.psql(&format!("CREATE ROLE {role} LOGIN PASSWORD 'pw-{}'", &role[5..]));
        pg.psql(&crate::support::postgres::documented_grants().replace("backscope_host", role));
    }
    let mut leftovers = Vec::new();
    for (role, run_id) in [("host_b", "20260101-000000-bbbb"), ("host_a", "20260101-000000-aaaa")] {
        let run_dir = d.join(format!("run-of-{role}"));
        let tag = format!("planted-{role}-{}", std::process::id());
        leftovers.push(Leftover::start(&tag));
        ledger_only(&run_dir, &tag);
        let insert = format!(
            "INSERT INTO backscope.runs (run_id, created_at, status, source, run_dir, plan_json, cells_total, \
             backscope_version, host_id) VALUES ('{run_id}', '2026-01-01T00:00:00.000Z', 'running', 'sweep', \
             '{}', '{{}}', 1, 't', 'host-a')",
            run_dir.display()
        );
        let (ok, out) = crate::support::postgres::psql_as(&pg, &pgpass, role, &insert);
        assert!(ok, "{role} inserts a run of its own: {out}");
    }
    assert_eq!(pg.psql("SELECT string_agg(owner_role, ',' ORDER BY run_id) FROM backscope.runs"), "host_a,host_b");

    // A sweep of host_a on the shared store reclaims first; this one then stops at the run it cannot find.
    let done = as_role("host_a", &["sweep", "--resume", "20990101-000000-none"]);
    done.assert_bounded(&[2], 30, 200 * MIB);
    std::thread::sleep(Duration::from_millis(200));
    let [planted_by_b, own] = &mut leftovers[..] else { unreachable!() };
    assert!(planted_by_b.alive(), "a run another role planted was reclaimed: {}", done.describe());
    assert!(!own.alive(), "the role's own run was not reclaimed: {}", done.describe());
}
