//! One child of the sweep as it is spawned and ended: tagged, in its own process group, tied to this thread's life
//! and recorded in the ledger while it runs; ended by killing its group and its tagged processes before it is
//! reaped. Both the long-running servers (`Supervised`) and the short helpers (`helper`) are `Tracked`.

use std::io;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, ExitStatus};
use std::time::Duration;

use super::descendants::{self, owner, spawn_tracked, Tag, TAG_VAR};
use super::ledger::{Ledger, Recorded};
use crate::host::proc::stat as procfs;

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

/// A child of ours, spawned tagged, isolated and tracked, with its ledger file if the sweep keeps one.
#[derive(Debug)]
pub(super) struct Tracked {
    pub(super) child: Child,
    tag: Tag,
    /// When it started (clock ticks after boot): everything it starts begins no earlier.
    start_ticks: u64,
    recorded: Option<Recorded>,
}

impl Tracked {
    pub(super) fn spawn(mut cmd: Command, argv: Vec<String>, ledger: Option<&Ledger>) -> io::Result<Tracked> {
        let tag = Tag::new();
        cmd.env(TAG_VAR, tag.value());
        isolate(&mut cmd);
        let mut recorded = ledger.map(|l| l.begin(&tag, argv)).transpose()?;
        let child = match spawn_tracked(&mut cmd) {
            Ok(c) => c,
            Err(e) => {
                if let Some(r) = recorded {
                    let _ = r.ended();
                }
                return Err(e);
            }
        };
        let start_ticks = procfs::stat(child.id() as i32).map(|s| s.start_ticks).unwrap_or(owner().start_ticks);
        if let Some(r) = recorded.as_mut() {
            // The file written before the spawn already names the tag, which is what a reclaim needs most; the
            // group only adds members that dropped it.
            let _ = r.started(child.id());
        }
        Ok(Tracked { child, tag, start_ticks, recorded })
    }

    /// The child's exit status once it has exited (inner `None`: it ended but its status was lost), after
    /// everything it started was killed; `None` while it runs.
    ///
    /// The order matters: while the exited child is an unreaped zombie its group id cannot be reused, so the group
    /// is killed first, then the tagged processes outside it, and only then is the child reaped.
    pub(super) fn try_end(&mut self) -> Option<Option<ExitStatus>> {
        let pid = self.child.id();
        match descendants::has_exited(pid) {
            Some(false) => return None,
            Some(true) => descendants::signal_group(pid, libc::SIGKILL),
            // Not waitable (reaped already): the group id may belong to someone else by now.
            None => {}
        }
        descendants::kill_tagged(&self.tag, self.start_ticks);
        let status = match self.child.try_wait() {
            Ok(Some(s)) => Some(s),
            Ok(None) => return None,
            // Reaped elsewhere: how it ended is lost.
            Err(_) => None,
        };
        descendants::untrack(pid);
        descendants::reap_orphans(ORPHAN_WAIT);
        if let Some(r) = self.recorded.take() {
            let _ = r.ended();
        }
        Some(status)
    }
}

/// How long orphans adopted by the subreaper may take to die after their SIGKILL.
const ORPHAN_WAIT: Duration = Duration::from_secs(2);
