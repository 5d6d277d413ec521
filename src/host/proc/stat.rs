//! What `/proc` says about a process: name, parent, process group, state and start time (`stat`), the processes
//! below one (from every process's parent), and whether a process carries a given environment entry (`environ`).
//! Every read is bounded and a process that vanishes mid-read is simply absent: processes come and go while the
//! table is walked.

use std::collections::HashMap;
use std::io::Read;

/// Most bytes of `/proc/PID/environ` read. Linux caps argv plus environment at a quarter of the stack limit
/// (2 MiB with the usual 8 MiB stack), so this covers every environment a process was started with.
const ENVIRON_CAP: u64 = 4 << 20;

/// Most bytes of `/proc/PID/stat` read: 52 numeric fields and a command name of at most 64 bytes fit in far less.
const STAT_CAP: u64 = 4096;

/// The fields of `/proc/PID/stat` backscope uses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProcStat {
    pub pid: i32,
    /// `comm` (field 2): the executable's name as the kernel keeps it, cut to 15 bytes; it may hold spaces and
    /// parentheses.
    pub comm: String,
    /// `R`, `S`, `D`, `Z` (zombie: exited, not yet reaped), …
    pub state: char,
    pub ppid: i32,
    pub pgid: i32,
    /// Clock ticks after boot at which the process started (field 22). With the pid it names one process for
    /// as long as the machine runs: a reused pid gets a later start time.
    pub start_ticks: u64,
}

impl ProcStat {
    pub fn is_zombie(&self) -> bool {
        self.state == 'Z'
    }
}

/// Parse the text of `/proc/PID/stat`. The command name (field 2) is in parentheses and may itself hold spaces and
/// parentheses, so the fields are counted from the last `)`.
pub fn parse_stat(text: &str) -> Option<ProcStat> {
    let (head, rest) = text.rsplit_once(')')?;
    let (pid, comm) = head.split_once(" (")?;
    let fields: Vec<&str> = rest.split_whitespace().take(20).collect();
    // `rest` starts at field 3 (state): ppid is field 4, pgrp 5, starttime 22.
    Some(ProcStat {
        pid: pid.trim().parse().ok()?,
        comm: comm.to_string(),
        state: fields.first()?.chars().next()?,
        ppid: fields.get(1)?.parse().ok()?,
        pgid: fields.get(2)?.parse().ok()?,
        start_ticks: fields.get(19)?.parse().ok()?,
    })
}

/// `/proc/PID/stat` of a live (or zombie) process; `None` once it is gone.
pub fn stat(pid: i32) -> Option<ProcStat> {
    let mut bytes = Vec::new();
    std::fs::File::open(format!("/proc/{pid}/stat")).ok()?.take(STAT_CAP).read_to_end(&mut bytes).ok()?;
    parse_stat(&String::from_utf8_lossy(&bytes))
}

/// Every process in the table, as the walk found it.
pub fn all() -> Vec<ProcStat> {
    let Ok(rd) = std::fs::read_dir("/proc") else { return Vec::new() };
    rd.flatten().filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok()).filter_map(stat).collect()
}

/// The processes below `root` (its children, their children, …) as the parent pids in `/proc` tell them now, in
/// breadth-first order; `root` itself is not among them.
pub fn descendants(root: i32) -> Vec<i32> {
    descendants_in(&all(), root)
}

/// [`descendants`] over a table already read.
pub fn descendants_in(table: &[ProcStat], root: i32) -> Vec<i32> {
    let mut children: HashMap<i32, Vec<i32>> = HashMap::new();
    for p in table {
        children.entry(p.ppid).or_default().push(p.pid);
    }
    let mut found = Vec::new();
    let mut seen = std::collections::HashSet::from([root]);
    let mut next = 0;
    let mut frontier = vec![root];
    while let Some(&pid) = frontier.get(next) {
        next += 1;
        for &child in children.get(&pid).map(Vec::as_slice).unwrap_or_default() {
            // A table read while processes come and go can hold a cycle (a reused pid): each pid once.
            if seen.insert(child) {
                found.push(child);
                frontier.push(child);
            }
        }
    }
    found
}

/// Whether the environment `pid` was started with holds exactly the entry `KEY=VALUE`. False when it cannot be
/// read (another user's process, a zombie, a kernel thread).
pub fn environ_has(pid: i32, entry: &str) -> bool {
    let Ok(f) = std::fs::File::open(format!("/proc/{pid}/environ")) else { return false };
    let mut bytes = Vec::new();
    if f.take(ENVIRON_CAP).read_to_end(&mut bytes).is_err() {
        return false;
    }
    bytes.split(|&b| b == 0).any(|e| e == entry.as_bytes())
}

/// This boot's id: process start times count from boot, so a recorded start time means nothing after a reboot.
pub fn boot_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id").map(|s| s.trim().to_string()).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_are_counted_from_the_last_parenthesis() {
        // proc(5): pid (comm) state ppid pgrp session tty_nr tpgid flags minflt cminflt majflt cmajflt utime stime
        // cutime cstime priority nice num_threads itrealvalue starttime …
        let line = "4242 (a) b (c)) S 17 4242 4242 0 -1 4194560 10 0 0 0 1 2 0 0 20 0 1 0 987654 1000 50";
        assert_eq!(
            parse_stat(line),
            Some(ProcStat {
                pid: 4242,
                comm: "a) b (c)".into(),
                state: 'S',
                ppid: 17,
                pgid: 4242,
                start_ticks: 987654
            })
        );
        assert_eq!(parse_stat("12 (x) Z 1 12"), None, "a cut line is no stat");
        assert_eq!(parse_stat("42 x S 7 42 42 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 5"), None, "no parenthesised comm");
    }

    #[test]
    fn this_process_is_found_with_its_environment() {
        let me = std::process::id() as i32;
        let s = stat(me).unwrap();
        assert_eq!(s.pid, me);
        // SAFETY: plain getters.
        assert_eq!((s.ppid, s.pgid), unsafe { (libc::getppid(), libc::getpgrp()) });
        assert!(all().iter().any(|p| p.pid == me));
        let path = std::env::var("PATH").unwrap();
        assert!(environ_has(me, &format!("PATH={path}")));
        assert!(!environ_has(me, "PATH="), "a whole entry, not a prefix");
        assert_eq!(boot_id().len(), 36);
    }

    fn p(pid: i32, ppid: i32) -> ProcStat {
        ProcStat { pid, comm: String::new(), state: 'S', ppid, pgid: pid, start_ticks: 0 }
    }

    #[test]
    fn descendants_are_every_generation_once_and_never_the_root() {
        let table = [p(1, 0), p(10, 1), p(11, 10), p(12, 10), p(13, 12), p(20, 1), p(10, 13)];
        assert_eq!(descendants_in(&table, 10), vec![11, 12, 13]);
        assert_eq!(descendants_in(&table, 13), vec![10, 11, 12], "a cycle from a reused pid ends");
        assert_eq!(descendants_in(&table, 99), Vec::<i32>::new());
    }

    #[test]
    fn a_child_of_this_process_is_its_descendant() {
        let mut child = std::process::Command::new("sleep").arg("5").spawn().unwrap();
        let found = descendants(std::process::id() as i32);
        // SAFETY: our own unreaped child.
        unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
        let _ = child.wait();
        assert!(found.contains(&(child.id() as i32)), "{found:?}");
        assert_eq!(stat(child.id() as i32), None, "reaped: gone from /proc");
    }
}
