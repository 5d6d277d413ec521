//! Short helper commands (version probes, device listings) under the deadline rules of [`crate::host::proc::run`] (one
//! deadline for the spawn, the exit and the pipes; a background process holding a pipe cannot hold the sweep),
//! spawned tracked like every child of the sweep, so that what a helper starts is ended through its group, its tag
//! and the ledger.

use std::io;
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use super::ledger::Ledger;
use super::tracked::Tracked;
use crate::host::proc::run::{self, Supervisee};
use crate::host::proc::ExitInfo;

impl Supervisee for Tracked {
    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn try_end(&mut self) -> Option<Option<ExitStatus>> {
        Tracked::try_end(self)
    }

    fn kill(&mut self) {
        super::descendants::signal_group(self.child.id(), libc::SIGKILL);
    }
}

/// Run a short helper command (version probes, GPU listings): its exit and up to `max_bytes` of stdout+stderr,
/// within `limit` from the spawn to the return, plus a short wait only for a helper that does not die of
/// SIGKILL. What the helper started is killed with it (its group, its tag). A command that does not exist is
/// `Err`. With a `ledger`, the helper is recorded while it runs (see [`super::ledger`]).
pub fn run_bounded(
    argv: &[&str],
    env: &[(String, String)],
    limit: Duration,
    max_bytes: usize,
    ledger: Option<&Ledger>,
) -> io::Result<(ExitInfo, String)> {
    let (program, args) = argv.split_first().ok_or_else(|| io::Error::other("empty argv"))?;
    let mut cmd = Command::new(program);
    cmd.args(args).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let spawned = Instant::now();
    let mut proc = Tracked::spawn(cmd, argv.iter().map(|a| a.to_string()).collect(), ledger)?;
    let (stdout, stderr) = (proc.child.stdout.take(), proc.child.stderr.take());
    let done = run::capture(&mut proc, stdout, stderr, spawned, limit, max_bytes)?;
    let mut out = done.stdout;
    out.extend(done.stderr);
    out.truncate(max_bytes);
    Ok((done.exit, String::from_utf8_lossy(&out).into_owned()))
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
            let bound = if code.is_some() { run::PIPE_LINGER } else { *limit } + Duration::from_secs(3);
            assert!(took < bound, "{script}: returned after {took:?}, bound {bound:?}");
            assert_eq!(marked(&value), Vec::<i32>::new(), "{script}: a process it started survived");
        }
    }
}
