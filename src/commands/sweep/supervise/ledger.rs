//! The run directory's record of what the sweep has running (`groups/<tag>.json`, one file per child), so that a
//! backscope killed with SIGKILL — which cannot clean up — leaves enough behind for the next one to finish the job.
//!
//! A file is written (durably) before its child is spawned, naming the child's tag and its owner (the backscope
//! process: pid, start time, boot); it is completed with the child's process group and start time once spawned,
//! and removed once the child and everything it started are stopped. A file that outlives its owner is
//! reclaimed by [`reclaim`] — `--resume` and the start of every later sweep on the same database call it — which
//! kills what the child left behind: processes carrying its tag, and members of its group while the recorded
//! leader (same pid, same start time) still runs. A process that dropped the tag and whose leader is gone cannot
//! be told from a stranger and is left alone.

use std::io::{self, Read};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::descendants::{self, Owner, Stopped, Tag};
use crate::host::proc::stat as procfs;
use crate::run::format::run_dir::RunDir;
use crate::run::write::durable;

/// Most ledger files read per run directory and bytes per file: a run starts a few servers per cell at most.
const MAX_ENTRIES: usize = 4096;
const MAX_ENTRY_BYTES: u64 = 64 << 10;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct Entry {
    tag: String,
    owner_pid: i32,
    owner_start_ticks: u64,
    boot_id: String,
    /// The child's pid, which is its process group's id; absent until it was spawned.
    #[serde(default)]
    pgid: Option<i32>,
    #[serde(default)]
    leader_start_ticks: Option<u64>,
    argv: Vec<String>,
}

impl Entry {
    fn owner(&self) -> Owner {
        Owner { pid: self.owner_pid, start_ticks: self.owner_start_ticks, boot_id: self.boot_id.clone() }
    }
}

/// The ledger of one run directory.
#[derive(Clone, Debug)]
pub struct Ledger {
    dir: PathBuf,
}

impl Ledger {
    pub fn new(run_dir: &Path) -> Ledger {
        Ledger { dir: RunDir::new(run_dir).groups_dir() }
    }

    /// Record a child about to be spawned with `tag`.
    pub fn begin(&self, tag: &Tag, argv: Vec<String>) -> io::Result<Recorded> {
        let o = descendants::owner();
        let entry = Entry {
            tag: tag.value().to_string(),
            owner_pid: o.pid,
            owner_start_ticks: o.start_ticks,
            boot_id: o.boot_id.clone(),
            pgid: None,
            leader_start_ticks: None,
            argv,
        };
        let recorded = Recorded { path: self.dir.join(format!("{}.json", tag.value())), entry };
        recorded.write()?;
        Ok(recorded)
    }
}

/// One child's file in the ledger.
#[derive(Debug)]
pub struct Recorded {
    path: PathBuf,
    entry: Entry,
}

impl Recorded {
    fn write(&self) -> io::Result<()> {
        let bytes = serde_json::to_vec_pretty(&self.entry).map_err(io::Error::other)?;
        durable::write_atomic(&self.path, &bytes)
    }

    /// The child was spawned as `pid`, leader of its own process group.
    pub fn started(&mut self, pid: u32) -> io::Result<()> {
        self.entry.pgid = Some(pid as i32);
        self.entry.leader_start_ticks = procfs::stat(pid as i32).map(|s| s.start_ticks);
        self.write()
    }

    /// The child and what it started are stopped.
    pub fn ended(self) -> io::Result<()> {
        durable::remove(&self.path)
    }
}

/// What [`reclaim`] stopped for one ledger file whose owner is gone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reclaimed {
    pub owner_pid: i32,
    pub argv: Vec<String>,
    pub stopped: Vec<Stopped>,
}

fn read_entry(path: &Path) -> Option<Entry> {
    let f = std::fs::File::open(path).ok()?;
    let mut bytes = Vec::new();
    f.take(MAX_ENTRY_BYTES).read_to_end(&mut bytes).ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// Stop what the children recorded in `run_dir`'s ledger left running when their backscope died, and remove
/// their files. Files of a backscope that still runs are left alone, as are files that do not parse.
pub fn reclaim(run_dir: &Path) -> Vec<Reclaimed> {
    let dir = Ledger::new(run_dir).dir;
    let Ok(rd) = std::fs::read_dir(&dir) else { return Vec::new() };
    let mut out = Vec::new();
    let boot = procfs::boot_id();
    for path in rd.flatten().map(|e| e.path()).filter(|p| p.extension().is_some_and(|x| x == "json")).take(MAX_ENTRIES)
    {
        let Some(entry) = read_entry(&path) else { continue };
        if entry.owner().is_alive() {
            continue;
        }
        // After a reboot nothing of that boot runs.
        let stopped = if entry.boot_id == boot { stop_leftovers(&entry) } else { Vec::new() };
        if durable::remove(&path).is_ok() {
            out.push(Reclaimed { owner_pid: entry.owner_pid, argv: entry.argv, stopped });
        }
    }
    out
}

fn stop_leftovers(entry: &Entry) -> Vec<Stopped> {
    let tag = Tag::from_value(entry.tag.clone()).entry();
    // The group counts only while its recorded leader runs: once the leader is gone its id can be reused.
    let group = match (entry.pgid, entry.leader_start_ticks) {
        (Some(pgid), Some(start)) => {
            procfs::stat(pgid).filter(|s| s.start_ticks == start && !s.is_zombie()).map(|_| pgid)
        }
        _ => None,
    };
    // Everything the child started began after it (and after its owner).
    let since = entry.leader_start_ticks.unwrap_or(entry.owner_start_ticks);
    descendants::kill_matching(since, &|p| group == Some(p.pgid) || procfs::environ_has(p.pid, &tag))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::CommandExt;
    use std::process::Command;

    #[test]
    fn a_dead_owners_tagged_processes_are_stopped_and_its_file_removed() {
        let dir = tempfile::tempdir().unwrap();
        let ledger = Ledger::new(dir.path());
        let tag = Tag::new();
        let mut rec = ledger.begin(&tag, vec!["sleeper".into()]).unwrap();
        let mut child = Command::new("sleep").arg("60").env("BACKSCOPE_SWEEP_TAG", tag.value()).spawn().unwrap();
        rec.started(child.id()).unwrap();
        let path = rec.path.clone();
        assert!(path.exists());
        // This process owns the entry and is alive: nothing is touched.
        assert!(reclaim(dir.path()).is_empty());
        assert!(procfs::stat(child.id() as i32).is_some());
        // The same entry as a backscope that has died would have left it: another start time for the owner.
        let mut stale = rec.entry.clone();
        stale.owner_start_ticks += 1;
        std::fs::write(&path, serde_json::to_vec(&stale).unwrap()).unwrap();
        let got = reclaim(dir.path());
        assert_eq!(got.len(), 1, "{got:?}");
        assert_eq!(got[0].stopped.iter().map(|s| s.pid).collect::<Vec<_>>(), [child.id() as i32]);
        assert_eq!(got[0].stopped[0].comm, "sleep");
        assert!(!path.exists());
        let _ = child.wait();
        // A file that does not parse is left alone.
        std::fs::write(dir.path().join("groups/x.json"), b"{").unwrap();
        assert!(reclaim(dir.path()).is_empty());
        assert!(dir.path().join("groups/x.json").exists());
    }

    #[test]
    fn an_untagged_stranger_in_a_reused_group_is_not_signalled() {
        // A stranger: its own group and no tag; the entry names its pid as the group with another start time, as a
        // group id reused after the recorded leader died would look.
        let dir = tempfile::tempdir().unwrap();
        let mut stranger = Command::new("sleep").arg("60").process_group(0).spawn().unwrap();
        let pid = stranger.id() as i32;
        let start = procfs::stat(pid).unwrap().start_ticks;
        let o = descendants::owner();
        let entry = Entry {
            tag: "not-a-live-tag".into(),
            owner_pid: o.pid,
            owner_start_ticks: o.start_ticks + 1,
            boot_id: o.boot_id.clone(),
            pgid: Some(pid),
            leader_start_ticks: Some(start.saturating_sub(1)),
            argv: vec![],
        };
        std::fs::create_dir_all(dir.path().join("groups")).unwrap();
        std::fs::write(dir.path().join("groups/e.json"), serde_json::to_vec(&entry).unwrap()).unwrap();
        let got = reclaim(dir.path());
        assert_eq!(got.len(), 1);
        assert!(got[0].stopped.is_empty(), "{got:?}");
        assert_eq!(descendants::has_exited(stranger.id()), Some(false), "the stranger runs on");
        stranger.kill().unwrap();
        let _ = stranger.wait();
    }
}
