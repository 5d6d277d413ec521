//! Ending everything a child started, never anything else.
//!
//! A child is found three ways, each safe against a reused process id:
//!
//! - **its process group**, signalled only while the group's leader is our unreaped child (running, or a zombie
//!   that [`has_exited`] saw without reaping): the leader's pid, and so the group's id, cannot be reused until
//!   backscope reaps it;
//! - **its tag**, an environment entry `BACKSCOPE_SWEEP_TAG=<owner pid>-<owner start>-<serial>` ([`Tag`]) that
//!   every process it starts inherits unless it rewrites its environment; this finds processes that left the
//!   group (`setsid`), and those left behind by a backscope that was killed. Tagged processes are signalled
//!   through a pidfd opened after their start time was checked ([`kill_verified`]), so a pid reused in between
//!   is never hit;
//! - **adoption**: with [`become_subreaper`], a descendant whose parent dies is reparented to backscope instead of
//!   init, so a child of ours that backscope did not spawn itself is such an orphan ([`reap_orphans`]) — found
//!   while backscope lives even if it dropped its tag.
//!
//! Every spawn goes through [`spawn_tracked`], which records the pid while holding the lock that [`reap_orphans`]
//! takes, so a new child is never mistaken for an orphan.

use std::collections::HashSet;
use std::io;
use std::process::{Child, Command};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

pub use crate::host::proc::run::{has_exited, signal_group};
use crate::host::proc::stat::{self as procfs, ProcStat};

/// The environment variable that tags a child and what it starts.
pub const TAG_VAR: &str = "BACKSCOPE_SWEEP_TAG";

/// Children spawned through [`spawn_tracked`] and not yet reaped.
static TRACKED: Mutex<Option<HashSet<i32>>> = Mutex::new(None);
static SUBREAPER: AtomicBool = AtomicBool::new(false);
static SERIAL: AtomicU64 = AtomicU64::new(0);

/// How long a SIGKILLed process may take to die before it is left to its fate (only a process stuck in the
/// kernel, in D state, takes longer).
const DEATH_WAIT: Duration = Duration::from_secs(2);
const POLL: Duration = Duration::from_millis(5);

/// This backscope process as its tags and the ledger name it: pid, start time, boot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Owner {
    pub pid: i32,
    pub start_ticks: u64,
    pub boot_id: String,
}

pub fn owner() -> &'static Owner {
    static OWNER: OnceLock<Owner> = OnceLock::new();
    OWNER.get_or_init(|| {
        let pid = std::process::id() as i32;
        Owner { pid, start_ticks: procfs::stat(pid).map(|s| s.start_ticks).unwrap_or(0), boot_id: procfs::boot_id() }
    })
}

impl Owner {
    /// Whether this owner still runs: same boot, and its pid still names a live process started at the same time.
    pub fn is_alive(&self) -> bool {
        self.boot_id == procfs::boot_id()
            && procfs::stat(self.pid).is_some_and(|s| s.start_ticks == self.start_ticks && !s.is_zombie())
    }
}

/// The mark a child and everything it starts carry in their environment. Unique among the processes of one boot:
/// the owner's pid and start time name the backscope process, the serial the child.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tag(String);

impl Tag {
    pub fn new() -> Tag {
        let o = owner();
        Tag(format!("{}-{}-{}", o.pid, o.start_ticks, SERIAL.fetch_add(1, Ordering::Relaxed)))
    }

    pub fn from_value(value: String) -> Tag {
        Tag(value)
    }

    pub fn value(&self) -> &str {
        &self.0
    }

    /// `BACKSCOPE_SWEEP_TAG=VALUE`, as it appears in `/proc/PID/environ`.
    pub fn entry(&self) -> String {
        format!("{TAG_VAR}={}", self.0)
    }
}

/// Spawn `cmd` and track the child until [`untrack`]: the orphan reaper leaves tracked children alone.
pub fn spawn_tracked(cmd: &mut Command) -> io::Result<Child> {
    let mut tracked = TRACKED.lock().unwrap_or_else(|e| e.into_inner());
    let child = cmd.spawn()?;
    tracked.get_or_insert_with(HashSet::new).insert(child.id() as i32);
    Ok(child)
}

/// Forget a child once it is reaped.
pub fn untrack(pid: u32) {
    let mut tracked = TRACKED.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(t) = tracked.as_mut() {
        t.remove(&(pid as i32));
    }
}

/// Make backscope the reaper of its orphaned descendants (`PR_SET_CHILD_SUBREAPER`), for the rest of its life.
/// Only for the sweep's process: [`reap_orphans`] then kills every child backscope did not spawn through
/// [`spawn_tracked`], which in a test binary would include other tests' children.
pub fn become_subreaper() -> io::Result<()> {
    // SAFETY: prctl with integer arguments only.
    if unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1 as libc::c_ulong, 0, 0, 0) } != 0 {
        return Err(io::Error::last_os_error());
    }
    SUBREAPER.store(true, Ordering::SeqCst);
    Ok(())
}

/// Send `sig` to the process `p` describes, only if the pid still names that process (same start time): the
/// check and the signal go through one pidfd, so a pid reused in between is never hit. Kernels without pidfds
/// (before 5.3) get the check and a plain kill.
pub fn kill_verified(p: &ProcStat, sig: i32) -> bool {
    // SAFETY: pidfd_open(pid, 0) returns a new descriptor or -1; it takes no pointers.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, p.pid, 0) } as libc::c_int;
    let same = procfs::stat(p.pid).is_some_and(|now| now.start_ticks == p.start_ticks);
    if fd < 0 {
        // SAFETY: plain syscall on a pid just checked.
        return same && unsafe { libc::kill(p.pid, sig) } == 0;
    }
    // SAFETY: the descriptor is ours; pidfd_send_signal with a null siginfo acts like kill on the pidfd's process.
    let sent = same
        && unsafe { libc::syscall(libc::SYS_pidfd_send_signal, fd, sig, std::ptr::null::<libc::siginfo_t>(), 0) } == 0;
    // SAFETY: closing the descriptor opened above.
    unsafe { libc::close(fd) };
    sent
}

/// A process that [`kill_tagged`] or a reclaim stopped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stopped {
    pub pid: i32,
    /// Its command name (`/proc/PID/comm`).
    pub comm: String,
}

/// SIGKILL every process (other than backscope) that matches `ours` and started no earlier than `since_ticks`,
/// until a pass over the process table finds none (bounded: a process that keeps forking tagged children
/// outlives the bound). Each match is killed through [`kill_verified`].
pub fn kill_matching(since_ticks: u64, ours: &dyn Fn(&ProcStat) -> bool) -> Vec<Stopped> {
    let me = std::process::id() as i32;
    let deadline = Instant::now() + DEATH_WAIT;
    let mut stopped: Vec<Stopped> = Vec::new();
    loop {
        let found: Vec<ProcStat> = procfs::all()
            .into_iter()
            .filter(|p| p.pid != me && !p.is_zombie() && p.start_ticks >= since_ticks && ours(p))
            .collect();
        if found.is_empty() || Instant::now() >= deadline {
            return stopped;
        }
        for p in found {
            let comm = std::fs::read_to_string(format!("/proc/{}/comm", p.pid)).unwrap_or_default();
            if kill_verified(&p, libc::SIGKILL) && !stopped.iter().any(|s| s.pid == p.pid) {
                stopped.push(Stopped { pid: p.pid, comm: comm.trim().to_string() });
            }
        }
        std::thread::sleep(POLL);
    }
}

/// SIGKILL every process carrying `tag` (see [`kill_matching`]).
pub fn kill_tagged(tag: &Tag, since_ticks: u64) -> Vec<Stopped> {
    let entry = tag.entry();
    kill_matching(since_ticks, &|p| procfs::environ_has(p.pid, &entry))
}

/// With [`become_subreaper`]: SIGKILL and reap every child of backscope it did not spawn itself — descendants
/// orphaned when their parent died — until none is left or `limit` passes. Killing an orphan orphans its own
/// children, which are adopted in turn, hence the loop. Does nothing without the subreaper.
pub fn reap_orphans(limit: Duration) {
    if !SUBREAPER.load(Ordering::SeqCst) {
        return;
    }
    let me = std::process::id() as i32;
    let deadline = Instant::now() + limit;
    loop {
        let orphans: Vec<ProcStat> = {
            let tracked = TRACKED.lock().unwrap_or_else(|e| e.into_inner());
            let orphans: Vec<ProcStat> = procfs::all()
                .into_iter()
                .filter(|p| p.ppid == me && !tracked.as_ref().is_some_and(|t| t.contains(&p.pid)))
                .collect();
            for p in &orphans {
                // SAFETY: p is our unreaped child, so its pid cannot have been reused; waitpid with WNOHANG
                // reaps it if it already died.
                unsafe {
                    if p.is_zombie() {
                        libc::waitpid(p.pid, std::ptr::null_mut(), libc::WNOHANG);
                    } else {
                        libc::kill(p.pid, libc::SIGKILL);
                    }
                }
            }
            orphans
        };
        if orphans.is_empty() || Instant::now() >= deadline {
            return;
        }
        std::thread::sleep(POLL);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_are_unique_and_name_their_owner() {
        let (a, b) = (Tag::new(), Tag::new());
        assert_ne!(a, b);
        let o = owner();
        assert!(a.value().starts_with(&format!("{}-{}-", o.pid, o.start_ticks)), "{a:?}");
        assert!(a.entry().starts_with("BACKSCOPE_SWEEP_TAG="));
        assert!(o.is_alive());
        let gone = Owner { start_ticks: o.start_ticks + 1, ..o.clone() };
        assert!(!gone.is_alive(), "the same pid with another start time is another process");
        let rebooted = Owner { boot_id: "another boot".into(), ..o.clone() };
        assert!(!rebooted.is_alive());
    }

    #[test]
    fn a_stale_process_description_is_not_signalled() {
        let mut child = Command::new("/bin/sh").args(["-c", "sleep 30"]).spawn().unwrap();
        let p = procfs::stat(child.id() as i32).unwrap();
        let stale = ProcStat { start_ticks: p.start_ticks + 1, ..p.clone() };
        assert!(!kill_verified(&stale, libc::SIGKILL), "a different start time means a different process");
        assert_eq!(has_exited(child.id()), Some(false));
        assert!(kill_verified(&p, libc::SIGKILL));
        let status = child.wait().unwrap();
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(status.signal(), Some(libc::SIGKILL));
    }
}
