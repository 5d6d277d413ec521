//! Child processes backscope starts: managed servers and short helper commands (`llama-server --version`).
//!
//! Rules (those nextest runs its test processes by): every child gets its own process group, so a signal
//! reaches whatever it spawned (Ollama starts runner processes); stopping is SIGTERM to the group, a grace period,
//! then SIGKILL; the exit is always reaped and told apart as exit code or signal. Helpers get one deadline for
//! everything, their pipes included ([`run_bounded`]).
//!
//! Nothing a sweep starts may outlive it. What ends what, and why:
//!
//! - **A child that exits, or is stopped**: before it is reaped, its process group is killed (the unreaped leader
//!   keeps the group id from being reused), then every process carrying its tag (`BACKSCOPE_SWEEP_TAG`, which
//!   what it starts inherits; this finds those that left the group), then, with the sweep's subreaper, every
//!   orphan adopted from it ([`descendants`]).
//! - **backscope ending normally, by an error, or by Ctrl-C**: it stops its server that way before it exits.
//! - **backscope killed with SIGKILL** (or a second Ctrl-C, which exits at once): it can do nothing, so the
//!   children carry `PR_SET_PDEATHSIG(SIGKILL)` and die with it. The death signal fires when the *thread* that
//!   spawned the child exits, so children are spawned from the sweep's main thread only. What *they* started does
//!   not get the signal and is reparented to init — Ollama's runners sit exactly there. For those the run
//!   directory keeps a ledger of the children ([`ledger`]), and a watchdog process started before the first child
//!   ([`watchdog`]) notices backscope's end through a pipe and kills, from the ledger, what was left running. If
//!   the watchdog was killed too, `--resume` and the next sweep on the same database do the same ([`reclaim`]).
//! - **Processes that rewrite their environment** (dropping the tag) are found through the group while its leader
//!   lives and through adoption while backscope lives; after a SIGKILL, without their leader, they cannot be told
//!   from strangers and are left alone.

mod descendants;
mod helper;
mod ledger;
mod tracked;
mod watchdog;

use std::fs::{File, OpenOptions};
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub use descendants::become_subreaper;
pub use helper::run_bounded;
pub use ledger::{reclaim, Ledger};
use tracked::Tracked;
pub use watchdog::main_if_requested as watchdog_main;

/// How often exits are polled while waiting. Short enough that a crash is noticed within a few ms of the
/// connection dropping; waits are bounded by their callers.
const POLL: Duration = Duration::from_millis(5);

/// A program with its argument vector and extra environment. Never a shell string.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProcessSpec {
    pub program: PathBuf,
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
}

impl ProcessSpec {
    pub fn argv(&self) -> Vec<String> {
        std::iter::once(self.program.display().to_string()).chain(self.args.iter().cloned()).collect()
    }
}

pub use crate::host::proc::ExitInfo;

/// A long-running child (a server) whose stdout and stderr go to one log file.
#[derive(Debug)]
pub struct Supervised {
    proc: Tracked,
    pub pid: u32,
    pub spawned: Instant,
    exit: Option<ExitInfo>,
}

impl Supervised {
    /// Start `spec` with stdout and stderr appended to `log_path` (created if missing). Both streams go to one
    /// file opened with O_APPEND, so lines keep their order and nothing needs draining. With a `ledger`, the
    /// server is recorded in it until it and what it started are stopped.
    pub fn spawn(spec: &ProcessSpec, log_path: &Path, ledger: Option<&Ledger>) -> io::Result<Self> {
        let log = OpenOptions::new().create(true).append(true).open(log_path)?;
        let mut cmd = Command::new(&spec.program);
        cmd.args(&spec.args).stdin(Stdio::null()).stdout(Stdio::from(log.try_clone()?)).stderr(Stdio::from(log));
        for (k, v) in &spec.env {
            cmd.env(k, v);
        }
        let proc = Tracked::spawn(cmd, spec.argv(), ledger)?;
        Ok(Supervised { pid: proc.child.id(), proc, spawned: Instant::now(), exit: None })
    }

    /// The exit, if the child has ended (reaps it, after killing whatever it left running).
    pub fn try_exit(&mut self) -> Option<ExitInfo> {
        if self.exit.is_none() {
            if let Some(status) = self.proc.try_end() {
                self.exit = Some(ExitInfo::from_status(status, self.spawned));
            }
        }
        self.exit.clone()
    }

    /// Wait up to `limit` for the child to end on its own.
    pub fn wait_exit(&mut self, limit: Duration) -> Option<ExitInfo> {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(e) = self.try_exit() {
                return Some(e);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(POLL);
        }
    }

    /// SIGTERM to the group, wait `grace`, then SIGKILL; returns how it ended. Idempotent.
    pub fn stop(&mut self, grace: Duration) -> ExitInfo {
        if let Some(e) = self.try_exit() {
            return e;
        }
        // The leader is not reaped yet (try_exit just said so): the group id is still ours.
        descendants::signal_group(self.pid, libc::SIGTERM);
        if let Some(e) = self.wait_exit(grace) {
            return e;
        }
        descendants::signal_group(self.pid, libc::SIGKILL);
        // SIGKILL cannot be ignored; only a process stuck in the kernel (D state) outlives this wait. Its ledger
        // file stays, so a later sweep finishes the job.
        if let Some(e) = self.wait_exit(Duration::from_secs(10)) {
            return e;
        }
        ExitInfo { code: None, signal: Some(libc::SIGKILL), after_ms: self.spawned.elapsed().as_secs_f64() * 1e3 }
    }
}

impl Drop for Supervised {
    fn drop(&mut self) {
        if self.exit.is_none() {
            self.stop(Duration::from_secs(3));
        }
    }
}

/// Ctrl-C, SIGTERM and SIGHUP set a flag the sweep checks between and during cells; it then stops its servers
/// cleanly and exits 130. A second signal exits at once (status 130); the servers then die through their
/// death signal.
#[derive(Clone, Debug)]
pub struct Interrupt(Arc<AtomicBool>);

impl Interrupt {
    pub fn install() -> io::Result<Self> {
        let flag = Arc::new(AtomicBool::new(false));
        for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM, signal_hook::consts::SIGHUP] {
            // Registered first, so it sees the flag as it was before this signal set it.
            signal_hook::flag::register_conditional_shutdown(sig, crate::exit::INTERRUPTED.into(), Arc::clone(&flag))?;
            signal_hook::flag::register(sig, Arc::clone(&flag))?;
        }
        Ok(Interrupt(flag))
    }

    /// A flag only the test itself sets.
    #[cfg(test)]
    pub fn none() -> Self {
        Interrupt(Arc::new(AtomicBool::new(false)))
    }

    pub fn requested(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }

    #[cfg(test)]
    pub fn request(&self) {
        self.0.store(true, Ordering::SeqCst)
    }
}

/// A free TCP port on 127.0.0.1, chosen by the kernel. Another process can take it before the server binds it;
/// callers detect that from the server's log and retry.
pub fn free_port() -> io::Result<u16> {
    let l = std::net::TcpListener::bind(("127.0.0.1", 0))?;
    Ok(l.local_addr()?.port())
}

/// Whether something already listens on 127.0.0.1:`port` (binding it fails with EADDRINUSE).
pub fn port_taken(port: u16) -> bool {
    matches!(std::net::TcpListener::bind(("127.0.0.1", port)), Err(e) if e.kind() == io::ErrorKind::AddrInUse)
}

/// Copy bytes `[start, end)` of a file into another file; the log slice of one cell.
pub fn copy_slice(from: &Path, start: u64, end: u64, to: &Path) -> io::Result<u64> {
    use std::io::{Seek, SeekFrom};
    let mut f = File::open(from)?;
    f.seek(SeekFrom::Start(start))?;
    let mut out = File::create(to)?;
    io::copy(&mut f.take(end.saturating_sub(start)), &mut out)
}

#[cfg(test)]
mod tests {
    use super::descendants::Tag;
    use super::*;
    use crate::host::proc::stat as procfs;

    fn sh(script: &str) -> ProcessSpec {
        ProcessSpec { program: "/bin/sh".into(), args: vec!["-c".into(), script.into()], env: vec![] }
    }

    #[test]
    fn exit_code_and_signal_are_told_apart() {
        let dir = tempfile::tempdir().unwrap();
        let mut p = Supervised::spawn(&sh("echo out; echo err >&2; exit 3"), &dir.path().join("a.log"), None).unwrap();
        let e = p.wait_exit(Duration::from_secs(10)).unwrap();
        assert_eq!((e.code, e.signal), (Some(3), None));
        assert_eq!(std::fs::read_to_string(dir.path().join("a.log")).unwrap(), "out\nerr\n");
        let mut p = Supervised::spawn(&sh("kill -SEGV $$"), &dir.path().join("b.log"), None).unwrap();
        let e = p.wait_exit(Duration::from_secs(10)).unwrap();
        assert_eq!(e.signal_name().as_deref(), Some("SIGSEGV"));
        assert_eq!(e.describe(), "killed by SIGSEGV");
    }

    #[test]
    fn stop_escalates_to_sigkill_and_reaches_grandchildren() {
        let dir = tempfile::tempdir().unwrap();
        let pidfile = dir.path().join("grandchild.pid");
        // The shell ignores SIGTERM and starts a grandchild that ignores it too.
        let script = format!("trap '' TERM; sh -c 'trap \"\" TERM; echo $$ > {}; while :; do sleep 0.05; done' & while :; do sleep 0.05; done", pidfile.display());
        let mut p = Supervised::spawn(&sh(&script), &dir.path().join("c.log"), None).unwrap();
        // The shell creates the file before it writes the pid into it: wait for a whole number.
        let t0 = Instant::now();
        let grandchild: i32 = loop {
            if let Some(pid) = std::fs::read_to_string(&pidfile).ok().and_then(|s| s.trim().parse().ok()) {
                break pid;
            }
            assert!(t0.elapsed() < Duration::from_secs(10), "the grandchild never wrote its pid");
            std::thread::sleep(Duration::from_millis(10));
        };
        let e = p.stop(Duration::from_millis(200));
        assert_eq!(e.signal_name().as_deref(), Some("SIGKILL"));
        // The grandchild was in the group: gone within a bounded wait (reaped by init).
        let gone = (0..200).any(|_| {
            std::thread::sleep(Duration::from_millis(10));
            // SAFETY: signal 0 only checks existence.
            unsafe { libc::kill(grandchild, 0) != 0 }
        });
        assert!(gone, "grandchild {grandchild} survived the group kill");
    }

    #[test]
    fn a_polite_child_stops_on_sigterm() {
        let dir = tempfile::tempdir().unwrap();
        let mut p = Supervised::spawn(&sh("exec sleep 30"), &dir.path().join("d.log"), None).unwrap();
        let e = p.stop(Duration::from_secs(5));
        assert_eq!(e.signal_name().as_deref(), Some("SIGTERM"));
        assert!(e.after_ms < 5000.0);
        assert_eq!(p.stop(Duration::from_secs(1)), e, "stopping twice returns the same exit");
    }

    /// Processes whose environment holds `MARKER=value`: how the tests find what they started, independently of
    /// the tag backscope adds.
    pub(super) fn marked(value: &str) -> Vec<i32> {
        let entry = format!("MARKER={value}");
        procfs::all()
            .into_iter()
            .filter(|p| !p.is_zombie() && procfs::environ_has(p.pid, &entry))
            .map(|p| p.pid)
            .collect()
    }

    pub(super) fn marker() -> (String, Vec<(String, String)>) {
        let value = format!("{}-{}", std::process::id(), Tag::new().value());
        (value.clone(), vec![("MARKER".to_string(), value)])
    }

    #[test]
    fn what_left_the_group_is_killed_when_the_server_exits() {
        let dir = tempfile::tempdir().unwrap();
        let (value, env) = marker();
        // The grandchild starts a session of its own (out of the group, out of reach of a group kill); the server
        // then exits on its own.
        let spec = ProcessSpec { env, ..sh("setsid sleep 60 & sleep 0.3; exit 0") };
        let ledger = Ledger::new(dir.path());
        let mut p = Supervised::spawn(&spec, &dir.path().join("e.log"), Some(&ledger)).unwrap();
        let recorded = || std::fs::read_dir(dir.path().join("groups")).map(|d| d.count()).unwrap_or(0);
        assert_eq!(recorded(), 1, "the running server is in the ledger");
        let e = p.wait_exit(Duration::from_secs(10)).unwrap();
        assert_eq!(e.code, Some(0));
        assert_eq!(marked(&value), Vec::<i32>::new(), "nothing the server started survives its exit");
        assert_eq!(recorded(), 0, "an ended server leaves the ledger");
    }

    #[test]
    fn ports_and_slices() {
        let l = std::net::TcpListener::bind(("127.0.0.1", 0)).unwrap();
        assert!(port_taken(l.local_addr().unwrap().port()));
        let p = free_port().unwrap();
        assert!(p > 0);
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("log"), b"0123456789").unwrap();
        copy_slice(&dir.path().join("log"), 3, 7, &dir.path().join("slice")).unwrap();
        assert_eq!(std::fs::read(dir.path().join("slice")).unwrap(), b"3456");
        use crate::host::proc::signal_name;
        assert_eq!(signal_name(libc::SIGABRT), "SIGABRT");
        assert_eq!(signal_name(64), "signal 64");
    }
}
