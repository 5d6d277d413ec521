//! Running a short external program (a version probe, a device listing, a disassembler) under one deadline that
//! covers everything: the spawn, the exit and the pipes.
//!
//! Rules every caller gets: the program runs with stdin closed in a process group of its own, so what it starts
//! is ended with it; at the deadline the whole group is killed; its output is read while it runs (a full pipe
//! would stall it) and kept up to a byte limit; and a process it left behind holding a pipe open cannot hold the
//! caller — once the program has exited its pipes get a short linger and are then abandoned. A caller with more
//! to track than a process group (the sweep: tags, a ledger, orphans) supplies its own [`Supervisee`].

use std::io::{self, Read};
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::process::{Child, ChildStderr, ChildStdout, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use super::ExitInfo;

/// How long the pipes of an exited program may stay open (held by something it started) before they are abandoned.
pub const PIPE_LINGER: Duration = Duration::from_millis(250);
/// How long a program killed at its deadline may take to die before it is abandoned (D state only).
const KILL_WAIT: Duration = Duration::from_secs(2);
/// Longest single `poll`, so that the program's exit is noticed promptly.
const POLL_MS: i32 = 10;

/// A running child as the runner sees it: whoever spawned it decides what "ended" and "killed" take.
pub trait Supervisee {
    fn pid(&self) -> u32;
    /// Its exit status once it has exited (inner `None`: it ended but the status was lost), after whatever it
    /// started was ended; `None` while it runs.
    fn try_end(&mut self) -> Option<Option<ExitStatus>>;
    /// The deadline passed: kill it and everything it started.
    fn kill(&mut self);
}

/// A child spawned into a process group of its own ([`spawn_grouped`]).
#[derive(Debug)]
pub struct GroupChild {
    pub child: Child,
}

impl Supervisee for GroupChild {
    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn try_end(&mut self) -> Option<Option<ExitStatus>> {
        let pid = self.child.id();
        match has_exited(pid) {
            Some(false) => return None,
            // While the exited leader is unreaped its group id cannot be reused: end the rest of the group now.
            Some(true) => signal_group(pid, libc::SIGKILL),
            None => {}
        }
        match self.child.try_wait() {
            Ok(Some(s)) => Some(Some(s)),
            Ok(None) => None,
            Err(_) => Some(None),
        }
    }

    fn kill(&mut self) {
        signal_group(self.child.id(), libc::SIGKILL);
    }
}

/// Whether our child `pid` has exited, without reaping it (`None`: not waitable, e.g. reaped already).
pub fn has_exited(pid: u32) -> Option<bool> {
    // SAFETY: siginfo_t is plain data; waitid writes into the one we own.
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    let flags = libc::WEXITED | libc::WNOHANG | libc::WNOWAIT;
    // SAFETY: waitid on a pid we spawned; WNOWAIT leaves it unreaped.
    if unsafe { libc::waitid(libc::P_PID, pid as libc::id_t, &mut info, flags) } != 0 {
        return None;
    }
    // SAFETY: waitid filled the union's child fields (or left si_pid 0: nothing exited).
    Some(unsafe { info.si_pid() } != 0)
}

/// Signal the process group led by our child `leader`. The caller guarantees the leader is not reaped yet.
pub fn signal_group(leader: u32, sig: i32) {
    // SAFETY: plain syscall; a group that no longer exists gives ESRCH, which is fine.
    unsafe {
        libc::kill(-(leader as libc::pid_t), sig);
    }
}

/// Makes `cmd` start with an empty signal mask and SIGINT, SIGTERM, SIGCHLD and SIGPIPE at their default
/// action. The mask and ignored signals are inherited across fork and exec, and std's spawn resets neither:
/// without this a command started by `trace` (which blocks those signals) would keep every forwarded SIGINT/SIGTERM
/// pending forever (issue 21), and one started by a backscope that was itself started in the background by a shell
/// (which ignores SIGINT there) would ignore the SIGINT that `bisect` stops it with.
pub fn start_clean(cmd: &mut Command) {
    // SAFETY: only async-signal-safe calls (sigemptyset, pthread_sigmask, signal) between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            let mut empty: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut empty);
            let rc = libc::pthread_sigmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());
            if rc != 0 {
                return Err(io::Error::from_raw_os_error(rc));
            }
            for signal in [libc::SIGINT, libc::SIGTERM, libc::SIGCHLD, libc::SIGPIPE] {
                if libc::signal(signal, libc::SIG_DFL) == libc::SIG_ERR {
                    return Err(io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
}

/// Spawn `cmd` with stdin closed, stdout and stderr piped, in a process group of its own. A program written
/// moments ago can still be open for writing in a child another thread forked before the writer closed it; exec
/// then fails with ETXTBSY for a few milliseconds, so that is retried briefly.
pub fn spawn_grouped(mut cmd: Command) -> io::Result<GroupChild> {
    cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).process_group(0);
    let mut tries = 0;
    loop {
        match cmd.spawn() {
            Err(e) if e.raw_os_error() == Some(libc::ETXTBSY) && tries < 10 => {
                tries += 1;
                std::thread::sleep(Duration::from_millis(20));
            }
            other => return other.map(|child| GroupChild { child }),
        }
    }
}

/// What a bounded run printed and how it ended.
#[derive(Clone, Debug)]
pub struct Captured {
    pub exit: ExitInfo,
    /// Killed at the deadline.
    pub timed_out: bool,
    /// The first `max_bytes` of each stream.
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
}

/// Run `argv` (with `env` added) for at most `limit`, keeping up to `max_bytes` of each stream. A program that
/// does not exist is `Err`.
pub fn run_bounded(
    argv: &[String],
    env: &[(String, String)],
    limit: Duration,
    max_bytes: usize,
) -> io::Result<Captured> {
    let (program, args) = argv.split_first().ok_or_else(|| io::Error::other("empty argv"))?;
    let mut cmd = Command::new(program);
    cmd.args(args).envs(env.iter().map(|(k, v)| (k, v)));
    let spawned = Instant::now();
    let mut child = spawn_grouped(cmd)?;
    let (stdout, stderr) = (child.child.stdout.take(), child.child.stderr.take());
    capture(&mut child, stdout, stderr, spawned, limit, max_bytes)
}

/// One of the program's output pipes and what was kept of it.
struct Pipe<R> {
    reader: Option<R>,
    kept: Vec<u8>,
}

impl<R: Read + AsRawFd> Pipe<R> {
    fn new(reader: Option<R>) -> io::Result<Self> {
        if let Some(r) = &reader {
            let fd = r.as_raw_fd();
            // SAFETY: fcntl on a descriptor we own, with integer arguments.
            unsafe {
                let flags = libc::fcntl(fd, libc::F_GETFL);
                if flags < 0 || libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) < 0 {
                    return Err(io::Error::last_os_error());
                }
            }
        }
        Ok(Pipe { reader, kept: Vec::new() })
    }

    fn pollfd(&self) -> Option<libc::pollfd> {
        self.reader.as_ref().map(|r| libc::pollfd { fd: r.as_raw_fd(), events: libc::POLLIN, revents: 0 })
    }

    /// Read what is available; keep the first `max_bytes` and drop the rest. Closes the pipe at end of file.
    fn drain(&mut self, max_bytes: usize) {
        let Some(r) = self.reader.as_mut() else { return };
        let mut buf = [0u8; 8192];
        loop {
            match r.read(&mut buf) {
                Ok(0) => {
                    self.reader = None;
                    return;
                }
                Ok(n) => {
                    let room = max_bytes.saturating_sub(self.kept.len());
                    self.kept.extend_from_slice(&buf[..n.min(room)]);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(_) => {
                    self.reader = None;
                    return;
                }
            }
        }
    }
}

/// Wait up to `POLL_MS` (or until `until`) for either pipe to have data or close.
fn wait_readable(stdout: &Pipe<ChildStdout>, stderr: &Pipe<ChildStderr>, until: Instant) {
    let mut fds: Vec<libc::pollfd> = [stdout.pollfd(), stderr.pollfd()].into_iter().flatten().collect();
    let left = until.saturating_duration_since(Instant::now()).as_millis().min(POLL_MS as u128) as i32;
    if fds.is_empty() {
        std::thread::sleep(Duration::from_millis(left.max(1) as u64));
        return;
    }
    // SAFETY: fds is a live array of pollfd of the given length; poll only writes revents.
    unsafe {
        libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, left.max(1));
    }
}

/// Read `proc`'s pipes from this thread through `poll` (no reader thread to join) until it has exited and its
/// pipes are closed or have lingered [`PIPE_LINGER`], or until `limit` after `spawned`, when it is killed.
pub fn capture<S: Supervisee>(
    proc: &mut S,
    stdout: Option<ChildStdout>,
    stderr: Option<ChildStderr>,
    spawned: Instant,
    limit: Duration,
    max_bytes: usize,
) -> io::Result<Captured> {
    let deadline = spawned + limit;
    let pipes = Pipe::new(stdout).and_then(|o| Ok((o, Pipe::new(stderr)?)));
    let (mut stdout, mut stderr) = match pipes {
        Ok(p) => p,
        Err(e) => {
            // Unreadable pipes would block: the program is not waited for.
            proc.kill();
            wait_killed(proc, spawned);
            return Err(e);
        }
    };
    let mut exit: Option<ExitInfo> = None;
    let mut timed_out = false;
    // Until when the pipes are read: the deadline, or a short linger after the exit.
    let mut read_until = deadline;
    loop {
        wait_readable(&stdout, &stderr, read_until);
        stdout.drain(max_bytes);
        stderr.drain(max_bytes);
        let now = Instant::now();
        if exit.is_none() {
            if let Some(status) = proc.try_end() {
                exit = Some(ExitInfo::from_status(status, spawned));
                read_until = read_until.min(now + PIPE_LINGER);
            } else if now >= deadline {
                proc.kill();
                timed_out = true;
                exit = Some(wait_killed(proc, spawned));
                break;
            }
        }
        let pipes_open = stdout.reader.is_some() || stderr.reader.is_some();
        if exit.is_some() && (!pipes_open || now >= read_until) {
            break;
        }
    }
    // Pipes still open here are abandoned: whatever holds them gets EPIPE.
    let exit = exit.unwrap_or(ExitInfo { code: None, signal: None, after_ms: spawned.elapsed().as_secs_f64() * 1e3 });
    Ok(Captured { exit, timed_out, stdout: stdout.kept, stderr: stderr.kept })
}

/// The exit of a program SIGKILLed at its deadline, waited for at most [`KILL_WAIT`].
fn wait_killed<S: Supervisee>(proc: &mut S, spawned: Instant) -> ExitInfo {
    let until = Instant::now() + KILL_WAIT;
    while Instant::now() < until {
        if let Some(status) = proc.try_end() {
            return ExitInfo::from_status(status, spawned);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    ExitInfo { code: None, signal: Some(libc::SIGKILL), after_ms: spawned.elapsed().as_secs_f64() * 1e3 }
}

/// Whether a streaming reader took all the program printed or stopped early (then the rest is not wanted and the
/// program is stopped rather than drained).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadTo {
    End,
    Early,
}

/// What [`stream`] returns: the reader's value, how the program ended and the start of its stderr.
#[derive(Debug)]
pub struct Streamed<T> {
    pub value: T,
    pub exit: ExitInfo,
    pub timed_out: bool,
    pub stderr: Vec<u8>,
}

/// Run `cmd` and hand its stdout to `read` on this thread (for output too large to keep, such as a disassembly
/// listing), with the same deadline and group rules as [`run_bounded`]: at the deadline the group is killed,
/// which ends `read`'s input; up to `stderr_max` bytes of stderr are kept.
pub fn stream<T>(
    cmd: Command,
    limit: Duration,
    stderr_max: usize,
    read: impl FnOnce(ChildStdout) -> (T, ReadTo),
) -> io::Result<Streamed<T>> {
    let spawned = Instant::now();
    let mut proc = spawn_grouped(cmd)?;
    let pid = proc.pid();
    let (Some(stdout), stderr) = (proc.child.stdout.take(), proc.child.stderr.take()) else {
        proc.kill();
        wait_killed(&mut proc, spawned);
        return Err(io::Error::other("no output pipe"));
    };
    // Stderr is drained on its own thread, keeping only its start; its result is waited for only briefly.
    let (err_tx, err_rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut kept = Vec::new();
        if let Some(mut r) = stderr {
            let mut buf = [0u8; 8192];
            while let Ok(n) = r.read(&mut buf) {
                if n == 0 {
                    break;
                }
                let room = stderr_max.saturating_sub(kept.len());
                kept.extend_from_slice(&buf[..n.min(room)]);
            }
        }
        let _ = err_tx.send(kept);
    });
    // The watchdog kills the group at the deadline unless told first that the read is over. It signals the group
    // only while the leader is unreaped: the reaping below waits for the watchdog's answer.
    let (done_tx, done_rx) = mpsc::channel::<()>();
    let watchdog = std::thread::spawn(move || {
        if done_rx.recv_timeout(limit) == Err(mpsc::RecvTimeoutError::Timeout) {
            signal_group(pid, libc::SIGKILL);
            return true;
        }
        false
    });
    let (value, to) = read(stdout);
    if to == ReadTo::Early {
        proc.kill();
    }
    // The reader has the whole output (or gave up): wait for the exit, no longer than the deadline, without
    // reaping, so that the watchdog can only ever signal our own unreaped group.
    let exited = loop {
        if has_exited(pid) != Some(false) {
            break true;
        }
        if spawned.elapsed() >= limit {
            break false;
        }
        std::thread::sleep(Duration::from_millis(2));
    };
    let _ = done_tx.send(());
    let fired = watchdog.join().unwrap_or(false);
    if !exited {
        proc.kill();
    }
    let exit = match proc.try_end() {
        Some(status) => ExitInfo::from_status(status, spawned),
        None => wait_killed(&mut proc, spawned),
    };
    let timed_out = fired || !exited;
    let stderr = err_rx.recv_timeout(PIPE_LINGER).unwrap_or_default();
    Ok(Streamed { value, exit, timed_out, stderr })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(script: &str) -> Vec<String> {
        vec!["/bin/sh".into(), "-c".into(), script.into()]
    }

    #[test]
    fn bounded_runs_keep_each_stream_and_end_at_the_deadline() {
        let r = run_bounded(&sh("echo hello; echo oops >&2; exit 3"), &[], Duration::from_secs(10), 1 << 16).unwrap();
        assert_eq!((r.exit.code, r.timed_out), (Some(3), false));
        assert_eq!((r.stdout.as_slice(), r.stderr.as_slice()), (&b"hello\n"[..], &b"oops\n"[..]));
        let r = run_bounded(&sh("sleep 30"), &[], Duration::from_millis(100), 10).unwrap();
        assert!(r.timed_out);
        assert_eq!(r.exit.signal_name().as_deref(), Some("SIGKILL"));
        let r = run_bounded(&sh("yes | head -c 100000"), &[], Duration::from_secs(10), 10).unwrap();
        assert_eq!(r.stdout.len(), 10);
        let env = [("BACKSCOPE_PROC_TEST".to_string(), "v7".to_string())];
        let r = run_bounded(&sh("echo $BACKSCOPE_PROC_TEST"), &env, Duration::from_secs(10), 64).unwrap();
        assert_eq!(r.stdout, b"v7\n");
        assert!(run_bounded(&["/nonexistent/program".into()], &[], Duration::from_secs(1), 10).is_err());
    }

    /// A program that exits but leaves a background process holding stdout returns after the linger, not after
    /// the background process's minute; the one in its group is killed.
    #[test]
    fn a_background_child_holding_a_pipe_cannot_hold_the_caller() {
        let t0 = Instant::now();
        let r = run_bounded(&sh("echo v1.2; sleep 60 & echo $! >&2"), &[], Duration::from_secs(20), 1 << 10).unwrap();
        assert!(t0.elapsed() < PIPE_LINGER + Duration::from_secs(3), "took {:?}", t0.elapsed());
        assert_eq!((r.stdout.as_slice(), r.exit.code), (&b"v1.2\n"[..], Some(0)));
        let sleeper: i32 = String::from_utf8_lossy(&r.stderr).trim().parse().unwrap();
        std::thread::sleep(Duration::from_millis(100));
        assert!(super::super::stat::stat(sleeper).is_none_or(|s| s.is_zombie()), "the group's sleeper survived");
    }

    #[test]
    fn streaming_reads_to_the_end_stops_early_and_ends_at_the_deadline() {
        let lines = |cmd: &str, to: ReadTo, limit: Duration| {
            let mut c = Command::new("/bin/sh");
            c.args(["-c", cmd]);
            stream(c, limit, 1 << 10, |out| {
                let mut first = String::new();
                let _ = io::BufRead::read_line(&mut io::BufReader::new(out), &mut first);
                (first, to)
            })
            .unwrap()
        };
        let s = lines("echo one; echo warn >&2; exit 4", ReadTo::End, Duration::from_secs(10));
        assert_eq!((s.value.as_str(), s.exit.code, s.timed_out), ("one\n", Some(4), false));
        assert_eq!(s.stderr, b"warn\n");
        // After its first line the program writes nothing more, so only the early stop can end it: a program
        // that kept writing could die of SIGPIPE first, once the reader drops the pipe.
        let t0 = Instant::now();
        let s = lines("echo one; exec sleep 30", ReadTo::Early, Duration::from_secs(20));
        assert_eq!((s.value.as_str(), s.exit.signal_name().as_deref()), ("one\n", Some("SIGKILL")));
        assert!(t0.elapsed() < Duration::from_secs(5));
        let s = lines("sleep 30", ReadTo::End, Duration::from_millis(200));
        assert!(s.timed_out && s.value.is_empty());
    }
}
