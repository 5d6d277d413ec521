//! What a sweep leaves behind: no process (also after backscope itself is killed with SIGKILL), no file from a dry
//! run, and durable renames. The managed "server" is a shell that starts a long sleeper in the background and then
//! becomes python's http.server — the shape of `ollama serve` and its runner, which no real llama-server has.
//! Every process the tests start carries `MARKER=<unique value>` in its environment, set by the test; that is how
//! they are found in /proc, independently of how backscope finds them.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::support::sweep::*;
use crate::support::util::backscope;

/// A value no other process carries.
fn unique_marker() -> String {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos();
    format!("sweep-hardening-{}-{nanos}", std::process::id())
}

/// Live processes (not zombies) whose environment holds `MARKER=value`, with their command lines.
fn marked(value: &str) -> Vec<(i64, String)> {
    let entry = format!("MARKER={value}");
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i64>() else { continue };
        let Ok(env) = std::fs::read(format!("/proc/{pid}/environ")) else { continue };
        if !env.split(|&b| b == 0).any(|x| x == entry.as_bytes()) {
            continue;
        }
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        if stat.rsplit(')').next().is_some_and(|r| r.trim_start().starts_with('Z')) {
            continue;
        }
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        out.push((pid, String::from_utf8_lossy(&cmdline).replace('\0', " ").trim().to_string()));
    }
    out
}

/// Wait (bounded) until `pred` holds for the marked processes; returns them.
fn marked_until(value: &str, limit: Duration, pred: impl Fn(&[(i64, String)]) -> bool) -> Vec<(i64, String)> {
    let deadline = Instant::now() + limit;
    loop {
        let now = marked(value);
        if pred(&now) || Instant::now() >= deadline {
            return now;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Run a command to its end within `limit`, or kill it and fail.
fn run_limited(cmd: &mut Command, limit: Duration) -> Output {
    let child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("start backscope");
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(limit) {
        Ok(out) => out.unwrap(),
        Err(_) => {
            // SAFETY: killing the backscope this test started.
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
            panic!("{cmd:?} did not finish within {limit:?}");
        }
    }
}

/// A spec whose one managed server is a shell that leaves a sleeper behind and execs into http.server, ready on
/// GET /health (a file it serves); its generation requests get 501. Everything carries the marker.
/// `runner_prefix` goes before the sleeper's command (`setsid ` puts it in a session of its own).
fn spec_with_a_runner(dir: &Path, marker: &str, repetitions: u32, runner_prefix: &str) -> PathBuf {
    let www = dir.join("www");
    std::fs::create_dir_all(&www).unwrap();
    std::fs::write(www.join("health"), "ok").unwrap();
    let spec = format!(
        r#"
        models = ["m"]
        repetitions = {repetitions}
        [timeouts]
        grace_s = 2
        [[endpoints]]
        name = "runner"
        server = "command"
        program = "/bin/sh"
        args = ["-c", "{runner_prefix}python3 -c 'import time; time.sleep(300)' runner & exec python3 -m http.server {{port}} --bind 127.0.0.1 --directory {www}", "server"]
        ready_timeout_s = 30
        env = {{ MARKER = "{marker}" }}
        "#,
        www = www.display()
    );
    let path = dir.join("runner.toml");
    std::fs::write(&path, spec).unwrap();
    path
}

/// Start a sweep of that spec, wait until its server and the server's runner are up, and kill backscope's
/// watchdog and then backscope with SIGKILL (as `kill -9` of both would). Returns once the server died of its
/// death signal; the runner is left, as the kernel leaves it, for the next sweep to reclaim.
fn kill_backscope_mid_sweep(dir: &Path, marker: &str) -> i64 {
    let spec = spec_with_a_runner(dir, marker, 3, "");
    let mut sweep = Sweep::start(&["--spec", spec.to_str().unwrap()], &dir.join("db"), &dir.join("runs"));
    sweep.wait_for(Duration::from_secs(60), |e| event_is(e, "server_ready"));
    let both = marked_until(marker, Duration::from_secs(10), |m| m.len() == 2);
    assert_eq!(both.len(), 2, "the server and its runner: {both:?}");
    let watchdog = watchdog_of(sweep.child.id());
    // SAFETY: killing the watchdog of the backscope this test started.
    unsafe { libc::kill(watchdog as libc::pid_t, libc::SIGKILL) };
    assert!(gone_within(watchdog, Duration::from_secs(5)));
    sweep.child.kill().unwrap();
    sweep.child.wait().unwrap();
    // The server dies of its death signal; its runner got none and is reparented.
    let left = marked_until(marker, Duration::from_secs(10), |m| m.len() == 1);
    assert_eq!(left.len(), 1, "{left:?}");
    assert!(left[0].1.contains("time.sleep(300)"), "the runner is what is left: {left:?}");
    left[0].0
}

/// The pid of the watchdog (`backscope-sweep-watchdog RUN_DIR`) backscope `parent` started.
fn watchdog_of(parent: u32) -> i64 {
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i64>() else { continue };
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let ppid = stat.rsplit(')').next().and_then(|r| r.split_whitespace().nth(1)?.parse::<u32>().ok());
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        if ppid == Some(parent) && cmdline.starts_with(b"backscope-sweep-watchdog\0") {
            return pid;
        }
    }
    panic!("backscope {parent} runs no watchdog");
}

#[test]
fn resume_after_sigkill_stops_what_the_dead_sweeps_server_left_running() {
    let dir = tempfile::tempdir().unwrap();
    let marker = unique_marker();
    let runner = kill_backscope_mid_sweep(dir.path(), &marker);
    let out = run_limited(
        backscope().args(["sweep", "--resume", "--yes", "--quiet", "--db"]).arg(dir.path().join("db")),
        Duration::from_secs(120),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "the resumed cells fail with HTTP 501: {stderr}");
    assert!(
        stderr.contains("killed the processes left running") && stderr.contains(&format!("{runner} (python3)")),
        "the reclaim is reported: {stderr}"
    );
    assert!(gone_within(runner, Duration::from_secs(5)), "the runner survived --resume");
    // The resumed run started servers of its own: none of them, nor their runners, is left either.
    assert_eq!(marked(&marker), vec![], "left running after the resumed sweep finished");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("3 of 3 cells recorded"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let runs = std::fs::read_dir(dir.path().join("runs")).unwrap().next().unwrap().unwrap().path();
    assert_eq!(std::fs::read_dir(runs.join("groups")).unwrap().count(), 0, "the ledger is empty at the end");
}

#[test]
fn the_next_sweep_on_the_database_stops_what_a_killed_sweep_left_running() {
    let dir = tempfile::tempdir().unwrap();
    let marker = unique_marker();
    let runner = kill_backscope_mid_sweep(dir.path(), &marker);
    let refused = {
        let l = std::net::TcpListener::bind(("127.0.0.1", 0)).unwrap();
        l.local_addr().unwrap().port()
    };
    let out = run_limited(
        backscope()
            .args(["sweep", "--quiet", "--model", "m", "--endpoint", &format!("x=http://127.0.0.1:{refused}"), "--db"])
            .arg(dir.path().join("db"))
            .arg("--runs-dir")
            .arg(dir.path().join("runs")),
        Duration::from_secs(60),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains(&format!("{runner} (python3)")), "{stderr}");
    assert!(gone_within(runner, Duration::from_secs(5)), "the runner survived the next sweep's start");
    assert_eq!(marked(&marker), vec![]);
}

#[test]
fn a_sweep_that_ends_leaves_nothing_running() {
    // The normal path: servers stopped between cells and at the end take their runners with them.
    let dir = tempfile::tempdir().unwrap();
    let marker = unique_marker();
    let spec = spec_with_a_runner(dir.path(), &marker, 1, "");
    let out = run_limited(
        backscope()
            .args(["sweep", "--quiet", "--spec"])
            .arg(&spec)
            .arg("--db")
            .arg(dir.path().join("db"))
            .arg("--runs-dir")
            .arg(dir.path().join("runs")),
        Duration::from_secs(120),
    );
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(marked(&marker), vec![], "left running after the sweep");
}

#[test]
fn dry_runs_create_and_change_no_file() {
    let dir = tempfile::tempdir().unwrap();
    let listing = |d: &Path| -> Vec<(String, u64, std::time::SystemTime)> {
        let mut v: Vec<_> = walk(d)
            .into_iter()
            .map(|p| {
                let m = std::fs::metadata(&p).unwrap();
                (p.strip_prefix(d).unwrap().display().to_string(), m.len(), m.modified().unwrap())
            })
            .collect();
        v.sort();
        v
    };
    let (db, runs) = (dir.path().join("data/backscope.db"), dir.path().join("data/runs"));
    let dry = |extra: &[&str]| {
        run_limited(
            backscope().args(["sweep", "--dry-run"]).args(extra).arg("--db").arg(&db).arg("--runs-dir").arg(&runs),
            Duration::from_secs(30),
        )
    };
    let out = dry(&["--server", "x=llama-server", "--llama-bin", "/opt/l/bin", "--model", "m.gguf"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("1 cells:"), "{}", String::from_utf8_lossy(&out.stdout));
    assert_eq!(listing(dir.path()), vec![], "a dry run of a new sweep created files");
    let out = dry(&["--resume"]);
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains("does not exist"));
    assert_eq!(listing(dir.path()), vec![], "a dry run of --resume created the database");
    // A run to resume: one external cell to a port nobody listens on.
    let refused = {
        let l = std::net::TcpListener::bind(("127.0.0.1", 0)).unwrap();
        l.local_addr().unwrap().port()
    };
    let out = run_limited(
        backscope()
            .args(["sweep", "--quiet", "--model", "m,n", "--endpoint", &format!("x=http://127.0.0.1:{refused}")])
            .arg("--db")
            .arg(&db)
            .arg("--runs-dir")
            .arg(&runs),
        Duration::from_secs(60),
    );
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    let before = listing(dir.path());
    std::thread::sleep(Duration::from_millis(20));
    let out = dry(&["--resume"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("2 cells:"), "{}", String::from_utf8_lossy(&out.stdout));
    assert_eq!(listing(dir.path()), before, "a dry run of --resume changed or created files");
}

fn walk(d: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(d).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.push(p.clone());
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

/// A renamed `result.json` is durable only once its directory is synced. That is invisible in the files, so it is
/// read from the syscalls, as strace(1) reports them: the rename of the temporary file, then an fsync of a
/// descriptor opened on the cell's directory.
#[test]
fn a_cells_result_rename_is_followed_by_a_directory_fsync() {
    let strace = Path::new("/usr/bin/strace");
    assert!(strace.exists(), "strace(1) observes the fsync calls: apt-get install strace");
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("strace.log");
    let refused = {
        let l = std::net::TcpListener::bind(("127.0.0.1", 0)).unwrap();
        l.local_addr().unwrap().port()
    };
    let out = run_limited(
        Command::new(strace)
            .args(["-f", "-e", "trace=openat,fsync,rename,renameat,renameat2", "-o"])
            .arg(&log)
            .arg(env!("CARGO_BIN_EXE_backscope"))
            .args(["sweep", "--quiet", "--model", "m", "--endpoint", &format!("x=http://127.0.0.1:{refused}")])
            .arg("--db")
            .arg(dir.path().join("db"))
            .arg("--runs-dir")
            .arg(dir.path().join("runs")),
        Duration::from_secs(60),
    );
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    let trace = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<&str> = trace.lines().collect();
    let rename = lines
        .iter()
        .position(|l| l.contains("rename") && l.contains("/.result.json.tmp\""))
        .unwrap_or_else(|| panic!("no rename of a result.json:\n{trace}"));
    // `renameat2(AT_FDCWD, "/…/cells/00000-x/.result.json.tmp", AT_FDCWD, "/…/result.json", …) = 0`
    let cell_dir = lines[rename].split('"').nth(1).unwrap().trim_end_matches("/.result.json.tmp").to_string();
    let (open, fd) = lines
        .iter()
        .enumerate()
        .skip(rename)
        .find_map(|(i, l)| {
            let rest = l.split_once(&format!("openat(AT_FDCWD, \"{cell_dir}\","))?.1;
            Some((i, rest.rsplit("= ").next()?.trim().parse::<i32>().ok()?))
        })
        .unwrap_or_else(|| panic!("{cell_dir} is not opened after the rename:\n{trace}"));
    assert!(
        // strace pads before ` = 0`, and prints a call another thread interrupted as `fsync(6 <unfinished ...>`.
        lines[open..].iter().any(|l| l.contains(&format!("fsync({fd})")) || l.contains(&format!("fsync({fd} <"))),
        "no fsync of {cell_dir} (fd {fd}) after the rename:\n{trace}"
    );
}

/// Kills what carries the marker when the test ends, also when it fails, so a failure leaves nothing running.
struct KillMarked(String);

impl Drop for KillMarked {
    fn drop(&mut self) {
        for (pid, _) in marked(&self.0) {
            // SAFETY: a process of this test's stand-in server, found by the marker the test gave it.
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
        }
    }
}

/// Field `n` (1-based, as proc(5) counts) of `/proc/PID/stat`.
fn stat_field(pid: i64, n: usize) -> Option<i64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?.1.split_whitespace().nth(n - 3)?.parse().ok()
}

/// The pids of `parent`'s children whose command line starts with `argv0`.
fn children_named(parent: i64, argv0: &str) -> Vec<i64> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i64>() else { continue };
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        if stat_field(pid, 4) == Some(parent) && cmdline.split(|&b| b == 0).next() == Some(argv0.as_bytes()) {
            out.push(pid);
        }
    }
    out
}

/// The pids of the [`marked`] Python interpreters (the server and its runner), in order. What starts them carries
/// the marker too for a moment — the shell between its fork and its exec, `setsid`, and where `python3` is a pyenv
/// shim, the shim's bash and `pyenv exec` — and is not counted.
fn marked_pids(value: &str) -> Vec<i64> {
    let interpreter = |cmdline: &str| {
        let argv0 = cmdline.split(' ').next().unwrap_or("");
        argv0.rsplit('/').next().is_some_and(|name| name.starts_with("python"))
    };
    let mut pids: Vec<i64> =
        marked(value).into_iter().filter(|(_, cmdline)| interpreter(cmdline)).map(|(pid, _)| pid).collect();
    pids.sort();
    pids
}

/// A server the way `ollama serve` is one: it starts a runner, here in a session of its own (`setsid`, out of
/// the server's process group), and serves HTTP (python's http.server, ready on GET /health).
#[test]
fn a_sigkilled_sweeps_server_and_its_grandchild_die_without_another_sweep() {
    let dir = tempfile::tempdir().unwrap();
    let marker = unique_marker();
    let _cleanup = KillMarked(marker.clone());
    let spec = spec_with_a_runner(dir.path(), &marker, 3, "setsid ");
    let mut sweep = Sweep::start(&["--spec", spec.to_str().unwrap()], &dir.path().join("db"), &dir.path().join("runs"));
    sweep.wait_for(Duration::from_secs(60), |e| event_is(e, "server_ready"));
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut both = marked_pids(&marker);
    while both.len() < 2 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
        both = marked_pids(&marker);
    }
    assert_eq!(both.len(), 2, "the server and its runner: {both:?} of {:?}", marked(&marker));
    let backscope_pid = i64::from(sweep.child.id());
    // The runner left the server's session and group: neither a group kill nor a death signal reaches it.
    let sessions: Vec<Option<i64>> = both.iter().map(|&p| stat_field(p, 6)).collect();
    assert_ne!(sessions[0], sessions[1], "the runner has a session of its own: {both:?}");
    let watchdogs = children_named(backscope_pid, "backscope-sweep-watchdog");
    assert_eq!(watchdogs.len(), 1, "one watchdog for the run");
    sweep.child.kill().unwrap();
    sweep.child.wait().unwrap();
    for pid in both {
        assert!(gone_within(pid, Duration::from_secs(5)), "pid {pid} survived backscope's SIGKILL");
    }
    assert!(gone_within(watchdogs[0], Duration::from_secs(5)), "the watchdog outlived its job");
    let run_dir = std::fs::read_dir(dir.path().join("runs")).unwrap().next().unwrap().unwrap().path();
    assert_eq!(std::fs::read_dir(run_dir.join("groups")).unwrap().count(), 0, "the ledger is emptied");
}
