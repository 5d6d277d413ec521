//! Child processes backscope starts: managed servers and short helper commands (`llama-server --version`).
//!
//! Rules (those nextest runs its test processes by): every child gets its own process group, so a signal
//! reaches whatever it spawned (Ollama starts runner processes); stopping is SIGTERM to the group, a grace period,
//! then SIGKILL; the exit is always reaped and told apart as exit code or signal. Children also get
//! `PR_SET_PDEATHSIG(SIGKILL)`, so that a backscope killed with SIGKILL (which it cannot catch) takes its servers
//! with it instead of leaving them holding GPU memory. The death signal fires when the *thread* that spawned the
//! child exits, so servers are spawned from the sweep's main thread only.

use std::fs::{File, OpenOptions};
use std::io::{self, Read};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

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

/// How a child ended.
#[derive(Clone, Debug, PartialEq)]
pub struct ExitInfo {
    pub code: Option<i32>,
    pub signal: Option<i32>,
    /// Milliseconds from spawn to when the exit was observed.
    pub after_ms: f64,
}

impl ExitInfo {
    fn from_status(status: ExitStatus, spawned: Instant) -> Self {
        ExitInfo { code: status.code(), signal: status.signal(), after_ms: spawned.elapsed().as_secs_f64() * 1e3 }
    }

    pub fn signal_name(&self) -> Option<String> {
        self.signal.map(signal_name)
    }

    pub fn describe(&self) -> String {
        match (self.code, self.signal) {
            (_, Some(s)) => format!("killed by {}", signal_name(s)),
            (Some(c), None) => format!("exited with code {c}"),
            (None, None) => "ended".into(),
        }
    }
}

/// `SIGSEGV` for 11, …; `signal N` for numbers without a conventional name.
pub fn signal_name(sig: i32) -> String {
    let name = match sig {
        libc::SIGHUP => "SIGHUP",
        libc::SIGINT => "SIGINT",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGILL => "SIGILL",
        libc::SIGTRAP => "SIGTRAP",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGKILL => "SIGKILL",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGALRM => "SIGALRM",
        libc::SIGTERM => "SIGTERM",
        libc::SIGSYS => "SIGSYS",
        _ => return format!("signal {sig}"),
    };
    name.to_string()
}

/// Put the child in its own process group and tie its life to this thread.
fn isolate(cmd: &mut Command) {
    cmd.process_group(0);
    let parent = std::process::id() as libc::pid_t;
    // SAFETY: the closure runs between fork and exec and calls only async-signal-safe functions (prctl,
    // getppid); it allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong, 0, 0, 0) != 0 {
                return Err(io::Error::last_os_error());
            }
            // The parent may have died between fork and prctl; then nobody would stop this child.
            if libc::getppid() != parent {
                return Err(io::Error::from_raw_os_error(libc::ESRCH));
            }
            Ok(())
        });
    }
}

fn kill_group(pgid: u32, sig: i32) {
    // SAFETY: plain syscall; a group that no longer exists gives ESRCH, which is fine.
    unsafe {
        libc::kill(-(pgid as libc::pid_t), sig);
    }
}

/// A long-running child (a server) whose stdout and stderr go to one log file.
#[derive(Debug)]
pub struct Supervised {
    child: Child,
    pub pid: u32,
    pub spawned: Instant,
    exit: Option<ExitInfo>,
}

impl Supervised {
    /// Start `spec` with stdout and stderr appended to `log_path` (created if missing). Both streams go to one
    /// file opened with O_APPEND, so lines keep their order and nothing needs draining.
    pub fn spawn(spec: &ProcessSpec, log_path: &Path) -> io::Result<Self> {
        let log = OpenOptions::new().create(true).append(true).open(log_path)?;
        let mut cmd = Command::new(&spec.program);
        cmd.args(&spec.args).stdin(Stdio::null()).stdout(Stdio::from(log.try_clone()?)).stderr(Stdio::from(log));
        for (k, v) in &spec.env {
            cmd.env(k, v);
        }
        isolate(&mut cmd);
        let child = cmd.spawn()?;
        Ok(Supervised { pid: child.id(), child, spawned: Instant::now(), exit: None })
    }

    /// The exit, if the child has ended (reaps it).
    pub fn try_exit(&mut self) -> Option<ExitInfo> {
        if self.exit.is_none() {
            if let Ok(Some(status)) = self.child.try_wait() {
                self.exit = Some(ExitInfo::from_status(status, self.spawned));
                // The leader is gone; anything it started must not outlive it.
                kill_group(self.pid, libc::SIGKILL);
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
        kill_group(self.pid, libc::SIGTERM);
        if let Some(e) = self.wait_exit(grace) {
            return e;
        }
        kill_group(self.pid, libc::SIGKILL);
        // SIGKILL cannot be ignored; only a process stuck in the kernel (D state) outlives this wait.
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

/// Run a short helper command (version probes, GPU listings) with a time limit; returns its exit and up to
/// `max_bytes` of stdout+stderr. A command that does not exist is `Err`.
pub fn run_bounded(
    argv: &[&str],
    env: &[(String, String)],
    limit: Duration,
    max_bytes: usize,
) -> io::Result<(ExitInfo, String)> {
    let (program, args) = argv.split_first().ok_or_else(|| io::Error::other("empty argv"))?;
    let mut cmd = Command::new(program);
    cmd.args(args).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    isolate(&mut cmd);
    let spawned = Instant::now();
    let mut child = cmd.spawn()?;
    let readers: Vec<_> = [
        child.stdout.take().map(|s| Box::new(s) as Box<dyn Read + Send>),
        child.stderr.take().map(|s| Box::new(s) as Box<dyn Read + Send>),
    ]
    .into_iter()
    .flatten()
    .map(|mut r| {
        std::thread::spawn(move || {
            let mut kept = Vec::new();
            let mut buf = [0u8; 8192];
            // Keep the first max_bytes and keep draining, so the child never blocks on a full pipe.
            while let Ok(n) = r.read(&mut buf) {
                if n == 0 {
                    break;
                }
                let room = max_bytes.saturating_sub(kept.len());
                kept.extend_from_slice(&buf[..n.min(room)]);
            }
            kept
        })
    })
    .collect();
    let pid = child.id();
    let deadline = spawned + limit;
    let status = loop {
        if let Some(s) = child.try_wait()? {
            break s;
        }
        if Instant::now() >= deadline {
            kill_group(pid, libc::SIGKILL);
            break child.wait()?;
        }
        std::thread::sleep(POLL);
    };
    kill_group(pid, libc::SIGKILL);
    let mut out = Vec::new();
    for r in readers {
        out.extend(r.join().unwrap_or_default());
    }
    out.truncate(max_bytes);
    Ok((ExitInfo::from_status(status, spawned), String::from_utf8_lossy(&out).into_owned()))
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
    use super::*;

    fn sh(script: &str) -> ProcessSpec {
        ProcessSpec { program: "/bin/sh".into(), args: vec!["-c".into(), script.into()], env: vec![] }
    }

    #[test]
    fn exit_code_and_signal_are_told_apart() {
        let dir = tempfile::tempdir().unwrap();
        let mut p = Supervised::spawn(&sh("echo out; echo err >&2; exit 3"), &dir.path().join("a.log")).unwrap();
        let e = p.wait_exit(Duration::from_secs(10)).unwrap();
        assert_eq!((e.code, e.signal), (Some(3), None));
        assert_eq!(std::fs::read_to_string(dir.path().join("a.log")).unwrap(), "out\nerr\n");
        let mut p = Supervised::spawn(&sh("kill -SEGV $$"), &dir.path().join("b.log")).unwrap();
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
        let mut p = Supervised::spawn(&sh(&script), &dir.path().join("c.log")).unwrap();
        let t0 = Instant::now();
        while !pidfile.exists() && t0.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(10));
        }
        let grandchild: i32 = std::fs::read_to_string(&pidfile).unwrap().trim().parse().unwrap();
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
        let mut p = Supervised::spawn(&sh("exec sleep 30"), &dir.path().join("d.log")).unwrap();
        let e = p.stop(Duration::from_secs(5));
        assert_eq!(e.signal_name().as_deref(), Some("SIGTERM"));
        assert!(e.after_ms < 5000.0);
        assert_eq!(p.stop(Duration::from_secs(1)), e, "stopping twice returns the same exit");
    }

    #[test]
    fn bounded_commands_time_out_and_cap_output() {
        let (e, out) =
            run_bounded(&["/bin/sh", "-c", "echo hello; echo oops >&2"], &[], Duration::from_secs(10), 1 << 16)
                .unwrap();
        assert_eq!(e.code, Some(0));
        assert!(out.contains("hello") && out.contains("oops"));
        let (e, _) = run_bounded(&["/bin/sh", "-c", "sleep 30"], &[], Duration::from_millis(100), 10).unwrap();
        assert_eq!(e.signal_name().as_deref(), Some("SIGKILL"));
        let (_, out) =
            run_bounded(&["/bin/sh", "-c", "yes | head -c 100000"], &[], Duration::from_secs(10), 10).unwrap();
        assert_eq!(out.len(), 10);
        assert!(run_bounded(&["/nonexistent/program"], &[], Duration::from_secs(1), 10).is_err());
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
        assert_eq!(signal_name(libc::SIGABRT), "SIGABRT");
        assert_eq!(signal_name(64), "signal 64");
    }
}
