//! What `/proc` says about processes: which exist, their names and parents, and the files they have mapped. Only
//! reads, no ptrace: a user's own processes need no privileges (`/proc/PID/maps` asks for the same permission
//! as ptrace's read mode, which the owner has).

use std::io::Read;
use std::path::{Path, PathBuf};

/// Most bytes read from one `/proc/PID/maps` (a process with a hundred thousand mappings stays far below it).
const MAX_MAPS_BYTES: u64 = 64 << 20;
/// Longest command line kept.
const MAX_CMDLINE: u64 = 4096;

/// Why a process could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ProcError {
    #[error("process {pid} does not exist (it has exited, or never ran)")]
    Gone { pid: u32 },
    #[error(
        "cannot read /proc/{pid}/maps: permission denied (the process belongs to another user; run backscope as \
         that user, or as root)"
    )]
    NotReadable { pid: u32 },
    #[error("cannot read /proc/{pid}/{file}: {source}")]
    Io { pid: u32, file: &'static str, source: std::io::Error },
}

fn io_error(pid: u32, file: &'static str, e: std::io::Error) -> ProcError {
    match e.kind() {
        std::io::ErrorKind::NotFound => ProcError::Gone { pid },
        // ESRCH: the process exited between open and read.
        _ if e.raw_os_error() == Some(libc::ESRCH) => ProcError::Gone { pid },
        std::io::ErrorKind::PermissionDenied if file == "maps" => ProcError::NotReadable { pid },
        _ => ProcError::Io { pid, file, source: e },
    }
}

/// One process as `/proc/PID/stat`, `exe` and `cmdline` describe it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProcessInfo {
    pub pid: u32,
    pub ppid: u32,
    /// The state letter of `/proc/PID/stat` (`R`, `S`, … `Z` for a zombie: exited, not yet reaped).
    pub state: char,
    /// `comm`: the executable's name, cut to 15 bytes by the kernel.
    pub comm: String,
    /// The executable (unreadable for other users' processes).
    pub exe: Option<PathBuf>,
    /// The command line, arguments joined by spaces, cut at [`MAX_CMDLINE`] bytes.
    pub cmdline: String,
}

fn read_bounded(path: &Path, cap: u64) -> std::io::Result<Vec<u8>> {
    let mut out = Vec::new();
    std::fs::File::open(path)?.take(cap).read_to_end(&mut out)?;
    Ok(out)
}

pub fn info(pid: u32) -> Result<ProcessInfo, ProcError> {
    let dir = PathBuf::from(format!("/proc/{pid}"));
    let stat = read_bounded(&dir.join("stat"), 4096).map_err(|e| io_error(pid, "stat", e))?;
    let stat = crate::host::proc::stat::parse_stat(&String::from_utf8_lossy(&stat)).ok_or_else(|| ProcError::Io {
        pid,
        file: "stat",
        source: std::io::Error::other("unexpected format"),
    })?;
    let (comm, state, ppid) = (stat.comm, stat.state, u32::try_from(stat.ppid).unwrap_or(0));
    let exe = std::fs::read_link(dir.join("exe")).ok();
    let cmdline = read_bounded(&dir.join("cmdline"), MAX_CMDLINE)
        .map(|b| {
            b.split(|&c| c == 0).filter(|a| !a.is_empty()).map(String::from_utf8_lossy).collect::<Vec<_>>().join(" ")
        })
        .unwrap_or_default();
    Ok(ProcessInfo { pid, ppid, state, comm, exe, cmdline })
}

/// A process that is running: it exists and is not a zombie (exited, waiting for its parent to reap it, with
/// nothing mapped any more).
pub fn live(pid: u32) -> Result<ProcessInfo, ProcError> {
    let p = info(pid)?;
    if p.state == 'Z' {
        return Err(ProcError::Gone { pid });
    }
    Ok(p)
}

/// Every live process visible in `/proc` (those that exit while listed are left out).
pub fn all() -> Vec<ProcessInfo> {
    let Ok(dir) = std::fs::read_dir("/proc") else { return Vec::new() };
    let mut out: Vec<ProcessInfo> = dir
        .flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()))
        .filter_map(|pid| live(pid).ok())
        .collect();
    out.sort_by_key(|p| p.pid);
    out
}

/// Whether a process is the program `name`: its `comm` (compared on the 15 bytes the kernel keeps), the file name
/// of its executable, or of its first argument (what a wrapper or an unreadable `exe` leaves).
pub fn is_named(p: &ProcessInfo, name: &str) -> bool {
    let cut: String = name
        .chars()
        .scan(0usize, |n, c| {
            *n += c.len_utf8();
            (*n <= 15).then_some(c)
        })
        .collect();
    let base = |s: &str| s.rsplit('/').next().unwrap_or(s).to_string();
    p.comm == cut
        || p.exe.as_ref().and_then(|e| e.file_name()).and_then(|n| n.to_str()) == Some(name)
        || p.cmdline.split(' ').next().map(base).as_deref() == Some(name)
}

/// The processes in `roots` and all their descendants, parents before children.
pub fn with_descendants(roots: &[u32], all: &[ProcessInfo]) -> Vec<u32> {
    let mut out: Vec<u32> = Vec::new();
    let mut queue: std::collections::VecDeque<u32> = roots.iter().copied().collect();
    while let Some(pid) = queue.pop_front() {
        if out.contains(&pid) {
            continue;
        }
        out.push(pid);
        queue.extend(all.iter().filter(|p| p.ppid == pid && p.pid != pid).map(|p| p.pid));
    }
    out
}

/// One line of `/proc/PID/maps` that maps a file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mapping {
    pub start: u64,
    pub end: u64,
    pub perms: String,
    pub offset: u64,
    pub inode: u64,
    pub path: String,
    /// The file was deleted (or replaced) after it was mapped: `(deleted)` after the path.
    pub deleted: bool,
    /// 1-based line in `/proc/PID/maps`, for the claim's source.
    pub line: u64,
}

/// The file mappings of a process (anonymous, `[heap]`, `[stack]`, `[vdso]` … are left out). Malformed lines are
/// skipped: the kernel writes this file, so none is expected.
pub fn maps(pid: u32) -> Result<Vec<Mapping>, ProcError> {
    let bytes =
        read_bounded(Path::new(&format!("/proc/{pid}/maps")), MAX_MAPS_BYTES).map_err(|e| io_error(pid, "maps", e))?;
    Ok(parse_maps(&String::from_utf8_lossy(&bytes)))
}

pub fn parse_maps(text: &str) -> Vec<Mapping> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        // address perms offset dev inode [path]: five fields, then the path (which may hold spaces).
        let mut rest = line;
        let mut fields = [""; 5];
        for f in &mut fields {
            rest = rest.trim_start();
            let end = rest.find(' ').unwrap_or(rest.len());
            *f = &rest[..end];
            rest = &rest[end..];
        }
        let path = rest.trim_start();
        if !path.starts_with('/') {
            continue;
        }
        let Some((start, end)) = fields[0].split_once('-') else { continue };
        let (Ok(start), Ok(end), Ok(offset), Ok(inode)) = (
            u64::from_str_radix(start, 16),
            u64::from_str_radix(end, 16),
            u64::from_str_radix(fields[2], 16),
            fields[4].parse::<u64>(),
        ) else {
            continue;
        };
        let (path, deleted) = match path.strip_suffix(" (deleted)") {
            Some(p) => (p, true),
            None => (path, false),
        };
        out.push(Mapping {
            start,
            end,
            perms: fields[1].to_string(),
            offset,
            inode,
            path: path.to_string(),
            deleted,
            line: i as u64 + 1,
        });
    }
    out
}

/// A shared object by its file name: `libfoo.so`, `libfoo.so.1.2.3`, `amdvlk64.so`.
pub fn is_shared_object(path: &str) -> bool {
    let name = path.rsplit('/').next().unwrap_or(path);
    name.ends_with(".so") || name.contains(".so.")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_lines_as_the_kernel_writes_them() {
        // Format: proc(5), /proc/[pid]/maps.
        let text = "55d0c0a00000-55d0c0a22000 r--p 00000000 fd:01 1311291                    /usr/bin/llama server\n\
            7f1c2a000000-7f1c2a022000 r-xp 00028000 fd:01 1234567                    /usr/lib/x86_64-linux-gnu/libc.so.6\n\
            7f1c2b000000-7f1c2b001000 rw-p 00000000 00:00 0 \n\
            7ffd1a9e0000-7ffd1aa01000 rw-p 00000000 00:00 0                          [stack]\n\
            7f1c2c000000-7f1c2c100000 r--s 00000000 00:05 42                         /memfd:ggml (deleted)\n\
            7f1c2d000000-7f1c2d100000 r-xp 00001000 fd:01 77                         /tmp/libx.so (deleted)\n";
        let m = parse_maps(text);
        // Anonymous mappings and [stack] are left out; a memfd is a file mapping, but no shared object.
        assert_eq!(m.len(), 4, "{m:?}");
        assert_eq!(m[0].path, "/usr/bin/llama server");
        assert_eq!((m[1].start, m[1].end, m[1].offset, m[1].inode), (0x7f1c2a000000, 0x7f1c2a022000, 0x28000, 1234567));
        assert_eq!((m[1].perms.as_str(), m[1].line), ("r-xp", 2));
        assert_eq!((m[2].path.as_str(), m[2].deleted), ("/memfd:ggml", true));
        assert_eq!((m[3].path.as_str(), m[3].deleted, m[3].line), ("/tmp/libx.so", true, 6));
        let so: Vec<bool> = m.iter().map(|m| is_shared_object(&m.path)).collect();
        assert_eq!(so, [false, true, false, true]);
    }

    #[test]
    fn this_process_and_a_missing_one() {
        let me = info(std::process::id()).unwrap();
        assert_eq!(me.ppid, std::os::unix::process::parent_id());
        assert!(maps(std::process::id()).unwrap().iter().any(|m| is_shared_object(&m.path)));
        // pid_max is at most 2^22 (proc(5), /proc/sys/kernel/pid_max), so this pid never exists.
        let gone = maps(1 << 23).unwrap_err();
        assert!(matches!(gone, ProcError::Gone { pid } if pid == 1 << 23), "{gone}");
        assert!(gone.to_string().contains("does not exist"));
    }

    #[test]
    fn descendants_are_followed_through_generations() {
        let p =
            |pid, ppid| ProcessInfo { pid, ppid, state: 'S', comm: String::new(), exe: None, cmdline: String::new() };
        let all = [p(1, 0), p(10, 1), p(11, 10), p(12, 11), p(20, 1), p(13, 10)];
        assert_eq!(with_descendants(&[10], &all), [10, 11, 13, 12]);
    }

    #[test]
    fn names_match_comm_exe_or_argv0() {
        let p = ProcessInfo {
            pid: 1,
            ppid: 0,
            state: 'S',
            comm: "llama-server-ve".into(),
            exe: Some("/opt/x/llama-server-verbose".into()),
            cmdline: "/opt/x/llama-server-verbose -m m.gguf".into(),
        };
        assert!(is_named(&p, "llama-server-verbose"));
        assert!(!is_named(&p, "llama-server"));
        let q = ProcessInfo { comm: "ollama".into(), exe: None, cmdline: "/usr/bin/ollama runner".into(), ..p };
        assert!(is_named(&q, "ollama"));
    }
}
