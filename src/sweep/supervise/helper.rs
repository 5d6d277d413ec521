//! Short helper commands (version probes, device listings) under one hard deadline that covers everything: the
//! spawn, the exit, and the pipes. A helper's output is read through `poll` on both pipes from the calling thread —
//! no reader thread to join — so a background process that inherited stdout and keeps it open cannot hold the
//! sweep: once the helper has exited, its pipes get a short linger to deliver what is in flight and are then
//! abandoned; at the deadline the helper's whole group is killed.

use std::io::{self, Read};
use std::os::fd::AsRawFd;
use std::process::{ChildStderr, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use super::descendants;
use super::{ExitInfo, Ledger, Tracked};

/// How long the pipes of an exited helper may stay open (held by something it started) before they are abandoned.
const PIPE_LINGER: Duration = Duration::from_millis(250);
/// How long a helper killed at its deadline may take to die before it is abandoned (D state only).
const KILL_WAIT: Duration = Duration::from_secs(2);
/// Longest single `poll`, so that the helper's exit is noticed promptly.
const POLL_MS: i32 = 10;

/// One of the helper's output pipes and what was kept of it.
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

    /// Read what is available; keep the first `max_bytes` and drop the rest, so the helper never blocks on a full
    /// pipe. Closes the pipe at end of file.
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

/// Run a short helper command (version probes, GPU listings): its exit and up to `max_bytes` of stdout+stderr,
/// within `limit` from the spawn to the return, plus [`KILL_WAIT`] only for a helper that does not die of
/// SIGKILL. What the helper started is killed with it. A command that does not exist is `Err`. With a `ledger`,
/// the helper is recorded while it runs (see [`super::ledger`]).
pub fn run_bounded(
    argv: &[&str],
    env: &[(String, String)],
    limit: Duration,
    max_bytes: usize,
    ledger: Option<&Ledger>,
) -> io::Result<(ExitInfo, String)> {
    let deadline = Instant::now() + limit;
    let (program, args) = argv.split_first().ok_or_else(|| io::Error::other("empty argv"))?;
    let mut cmd = Command::new(program);
    cmd.args(args).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let spawned = Instant::now();
    let mut proc = Tracked::spawn(cmd, argv.iter().map(|a| a.to_string()).collect(), ledger)?;
    let pid = proc.child.id();
    let pipes = Pipe::new(proc.child.stdout.take()).and_then(|o| Ok((o, Pipe::new(proc.child.stderr.take())?)));
    let (mut stdout, mut stderr) = match pipes {
        Ok(p) => p,
        Err(e) => {
            // Unreadable pipes would block: the helper is not waited for.
            descendants::signal_group(pid, libc::SIGKILL);
            wait_killed(&mut proc, spawned);
            return Err(e);
        }
    };
    let mut exit: Option<ExitInfo> = None;
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
                descendants::signal_group(pid, libc::SIGKILL);
                exit = Some(wait_killed(&mut proc, spawned));
                break;
            }
        }
        let pipes_open = stdout.reader.is_some() || stderr.reader.is_some();
        if exit.is_some() && (!pipes_open || now >= read_until) {
            break;
        }
    }
    // Pipes still open here are abandoned: whatever holds them gets EPIPE.
    let mut out = stdout.kept;
    out.extend(stderr.kept);
    out.truncate(max_bytes);
    let exit = exit.unwrap_or(ExitInfo { code: None, signal: None, after_ms: spawned.elapsed().as_secs_f64() * 1e3 });
    Ok((exit, String::from_utf8_lossy(&out).into_owned()))
}

/// The exit of a helper SIGKILLed at its deadline, waited for at most [`KILL_WAIT`].
fn wait_killed(proc: &mut Tracked, spawned: Instant) -> ExitInfo {
    let until = Instant::now() + KILL_WAIT;
    while Instant::now() < until {
        if let Some(status) = proc.try_end() {
            return ExitInfo::from_status(status, spawned);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    ExitInfo { code: None, signal: Some(libc::SIGKILL), after_ms: spawned.elapsed().as_secs_f64() * 1e3 }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{marked, marker};
    use super::*;

    #[test]
    fn bounded_commands_time_out_and_cap_output() {
        let (e, out) =
            run_bounded(&["/bin/sh", "-c", "echo hello; echo oops >&2"], &[], Duration::from_secs(10), 1 << 16, None)
                .unwrap();
        assert_eq!(e.code, Some(0));
        assert_eq!(out, "hello\noops\n", "stdout, then stderr");
        let (e, _) = run_bounded(&["/bin/sh", "-c", "sleep 30"], &[], Duration::from_millis(100), 10, None).unwrap();
        assert_eq!(e.signal_name().as_deref(), Some("SIGKILL"));
        let (_, out) =
            run_bounded(&["/bin/sh", "-c", "yes | head -c 100000"], &[], Duration::from_secs(10), 10, None).unwrap();
        assert_eq!(out.len(), 10);
        assert!(run_bounded(&["/nonexistent/program"], &[], Duration::from_secs(1), 10, None).is_err());
    }

    /// A helper that prints its version and leaves a background process holding stdout: the background process in
    /// its group, one that left the group (`setsid`), and a helper that never exits. Each returns within its
    /// deadline (the linger after an exit, the limit otherwise; far below the minute the sleepers would hold the
    /// pipe), with the output printed before, and nothing it started is left running.
    #[test]
    fn a_background_child_holding_stdout_cannot_hold_the_helper() {
        let cases: &[(&str, Duration, Option<i32>)] = &[
            ("echo v1.2; sleep 60 &", Duration::from_secs(20), Some(0)),
            ("echo v1.2; setsid sleep 60 &", Duration::from_secs(20), Some(0)),
            ("echo v1.2; setsid sleep 60 & sleep 60", Duration::from_millis(700), None),
        ];
        for (script, limit, code) in cases {
            let (value, env) = marker();
            let t0 = Instant::now();
            let (e, out) = run_bounded(&["/bin/sh", "-c", script], &env, *limit, 1 << 10, None).unwrap();
            let took = t0.elapsed();
            assert_eq!(out, "v1.2\n", "{script}");
            assert_eq!(e.code, *code, "{script}: {e:?}");
            // An exited helper returns after the pipe linger, one that runs on after its limit; the slack is for
            // the kill and the process-table walks on a loaded machine.
            let bound = if code.is_some() { PIPE_LINGER } else { *limit } + Duration::from_secs(3);
            assert!(took < bound, "{script}: returned after {took:?}, bound {bound:?}");
            assert_eq!(marked(&value), Vec::<i32>::new(), "{script}: a process it started survived");
        }
    }
}
