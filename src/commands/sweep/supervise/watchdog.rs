//! The sweep's watchdog: a small process that outlives a backscope killed with SIGKILL just long enough to stop
//! what its servers started.
//!
//! A server dies with backscope through its death signal, but what the server started does not get one: Ollama's
//! runner, or any process that called `setsid`, is reparented to init and would run until the next sweep on the
//! same database reclaimed it from the ledger. So before the first child of a run is spawned, backscope starts this
//! binary again as `backscope-sweep-watchdog RUN_DIR`, in a process group of its own (a Ctrl-C at the terminal is
//! backscope's to handle, not the watchdog's), with its standard input the read end of a pipe whose only write end
//! backscope holds (close-on-exec, so no server inherits it). The watchdog blocks on that pipe. When backscope is
//! gone, however it ended, the kernel closes the write end and the read returns end of file; the watchdog waits
//! until backscope is no longer alive and runs the same [`reclaim`] as `--resume`: tagged processes and live groups
//! of the ledger's children are killed, their files removed. After a normal end the ledger is empty and it simply
//! exits. It is spawned as a tracked child, so backscope's own orphan reaper never takes it for an orphan.
//!
//! What it cannot reach is what [`super::ledger`] cannot: a process that dropped the tag and whose group leader is
//! gone. And a watchdog killed together with backscope (`kill -9` of both) leaves the job to the next sweep.

use std::io::{self, Read};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::descendants::{self, Owner};
use super::ledger::{reclaim, Ledger};
use crate::host::proc::stat as procfs;

/// The watchdog's `argv[0]`, also how `ps` shows it.
pub const ARGV0: &str = "backscope-sweep-watchdog";
/// The environment entry that, with [`ARGV0`], makes this binary a watchdog: `<owner pid>:<owner start ticks>`.
const OWNER_VAR: &str = "BACKSCOPE_SWEEP_WATCHDOG_OWNER";
/// How long the watchdog waits, after end of file, for backscope to be gone (it is closing its files on the way
/// out: dead within milliseconds).
const OWNER_EXIT_WAIT: Duration = Duration::from_secs(10);

/// The watchdogs of this process, one per run directory, with the write end of their pipe. Never dropped: the
/// kernel closes the pipe when backscope ends.
static WATCHDOGS: Mutex<Vec<(PathBuf, Child)>> = Mutex::new(Vec::new());

/// Start the watchdog of `run_dir` unless it runs already.
pub fn watch(run_dir: &Path) -> io::Result<()> {
    let mut watchdogs = WATCHDOGS.lock().unwrap_or_else(|e| e.into_inner());
    if watchdogs.iter().any(|(dir, _)| dir == run_dir) {
        return Ok(());
    }
    let owner = descendants::owner();
    // This very binary, also when the file was replaced since it started.
    let mut cmd = Command::new("/proc/self/exe");
    cmd.arg0(ARGV0)
        .arg(run_dir)
        .env(OWNER_VAR, format!("{}:{}", owner.pid, owner.start_ticks))
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .process_group(0);
    let child = descendants::spawn_tracked(&mut cmd)?;
    watchdogs.push((run_dir.to_path_buf(), child));
    Ok(())
}

// The ledger's constructor that starts the watchdog lives here, beside `watch`, so that the ledger never calls up
// into the watchdog that reads it.
impl Ledger {
    /// The ledger of `run_dir` with its watchdog running (this file's [`watch`]), so that what the run's children
    /// start is stopped even when backscope is killed with SIGKILL. Without a watchdog (it could not be started)
    /// the sweep goes on, and the next one reclaims what a killed backscope left.
    pub fn watched(run_dir: &Path) -> Ledger {
        if let Err(e) = watch(run_dir) {
            crate::output::messages::note(format_args!(
                "cannot start the sweep's watchdog ({e}); if backscope is killed with SIGKILL, what its servers started runs until the next sweep on this database"
            ));
        }
        Ledger::new(run_dir)
    }
}

/// Run as the watchdog if this process was started as one (by [`watch`]); the exit status then. `None` for every
/// other start of the binary. Called first thing in `main`.
pub fn main_if_requested() -> Option<u8> {
    let mut args = std::env::args_os();
    if args.next().as_deref() != Some(ARGV0.as_ref()) {
        return None;
    }
    let owner = std::env::var(OWNER_VAR).ok()?;
    let run_dir = PathBuf::from(args.next()?);
    let (pid, start) = owner.split_once(':')?;
    let owner = Owner { pid: pid.parse().ok()?, start_ticks: start.parse().ok()?, boot_id: procfs::boot_id() };
    Some(run(&owner, &run_dir, io::stdin().lock()))
}

/// Wait for end of file on `pipe`, then for `owner` to be gone, and stop what it left running in `run_dir`.
fn run(owner: &Owner, run_dir: &Path, mut pipe: impl Read) -> u8 {
    let mut buf = [0u8; 64];
    loop {
        match pipe.read(&mut buf) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            // An unreadable pipe says nothing about backscope: watch its process instead.
            Err(_) => {
                while owner.is_alive() {
                    std::thread::sleep(Duration::from_millis(200));
                }
                break;
            }
        }
    }
    let deadline = Instant::now() + OWNER_EXIT_WAIT;
    while owner.is_alive() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    let stopped: Vec<String> =
        reclaim(run_dir).into_iter().flat_map(|r| r.stopped).map(|s| format!("{} ({})", s.pid, s.comm)).collect();
    if !stopped.is_empty() {
        // Best effort: whoever reads backscope's standard error may be gone too.
        crate::output::messages::note(format_args!(
            "backscope (pid {}) ended without stopping its servers; its watchdog killed what they left running: {}",
            owner.pid,
            stopped.join(", ")
        ));
    }
    0
}

#[cfg(test)]
mod tests {
    use super::super::ledger::Ledger;
    use super::super::tests::marked;
    use super::*;

    /// The watchdog's loop, run here on a pipe: a stand-in owner (a `sleep`, as backscope would be) records a
    /// child in the ledger that starts a grandchild in a session of its own; once the owner is killed and its end
    /// of the pipe closed, both are stopped by pid and the ledger is empty.
    #[test]
    fn end_of_file_and_a_dead_owner_stop_what_its_children_left() {
        let dir = tempfile::tempdir().unwrap();
        let mut owner_proc = Command::new("sleep").arg("60").spawn().unwrap();
        let owner_pid = owner_proc.id() as i32;
        let owner = Owner {
            pid: owner_pid,
            start_ticks: procfs::stat(owner_pid).unwrap().start_ticks,
            boot_id: procfs::boot_id(),
        };
        // The ledger file as that owner would have written it: its pid and start time, a tag.
        let ledger = Ledger::new(dir.path());
        let tag = descendants::Tag::new();
        let rec = ledger.begin(&tag, vec!["server".into()]).unwrap();
        let path = dir.path().join("groups").join(format!("{}.json", tag.value()));
        let mut entry: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        entry["owner_pid"] = owner.pid.into();
        entry["owner_start_ticks"] = owner.start_ticks.into();
        std::fs::write(&path, serde_json::to_vec(&entry).unwrap()).unwrap();
        std::mem::forget(rec);
        let (value, env) = super::super::tests::marker();
        let mut server = Command::new("/bin/sh")
            .args(["-c", "setsid sleep 60 & exec sleep 60"])
            .envs(env)
            .env(descendants::TAG_VAR, tag.value())
            .spawn()
            .unwrap();
        let t0 = Instant::now();
        while marked(&value).len() < 2 {
            assert!(t0.elapsed() < Duration::from_secs(10), "the server and its grandchild never ran");
            std::thread::sleep(Duration::from_millis(10));
        }
        let (reader, writer) = io::pipe().unwrap();
        let watching = {
            let (owner, run_dir) = (owner.clone(), dir.path().to_path_buf());
            std::thread::spawn(move || run(&owner, &run_dir, reader))
        };
        std::thread::sleep(Duration::from_millis(100));
        assert_eq!(marked(&value).len(), 2, "nothing is stopped while the pipe is open");
        owner_proc.kill().unwrap();
        owner_proc.wait().unwrap();
        drop(writer);
        assert_eq!(watching.join().unwrap(), 0);
        let _ = server.wait();
        assert_eq!(marked(&value), Vec::<i32>::new(), "the server or its grandchild survived");
        assert!(!path.exists(), "the ledger file is removed");
    }
}
