//! Can a user open the GPU device nodes? ROCm needs read-write access to `/dev/kfd` and a render node
//! (`/dev/dri/renderD*`), CUDA to `/dev/nvidiactl` and `/dev/nvidia<N>`; a service user (Ollama's `ollama`) that
//! lacks the owning group falls back to the CPU without a word. The check is the kernel's file-permission rule
//! (owner, then group, then other bits) on each node's mode and owner, against the user's uid and groups.

use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::host::{read_small, Host};

/// Entries of /dev/dri and /dev read.
const MAX_ENTRIES: usize = 256;

/// Whose access is checked.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct User {
    pub name: String,
    pub uid: u32,
    /// Primary and supplementary groups.
    pub gids: Vec<u32>,
    /// Where the groups come from: the process credentials, or /etc/passwd and /etc/group.
    pub from: String,
}

/// `name:x:gid:member,member` lines of an /etc/group file.
fn groups(text: &str) -> Vec<(String, u32, Vec<String>)> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let mut f = l.split(':');
            let name = f.next()?.to_string();
            let _pw = f.next()?;
            let gid = f.next()?.trim().parse().ok()?;
            let members = f
                .next()
                .unwrap_or("")
                .split(',')
                .map(str::trim)
                .filter(|m| !m.is_empty())
                .map(str::to_string)
                .collect();
            Some((name, gid, members))
        })
        .collect()
}

/// The name of a gid in the host's /etc/group.
pub fn group_name(host: &Host, gid: u32) -> Option<String> {
    let text = read_small(&host.path("/etc/group"))?;
    groups(&text).into_iter().find(|(_, g, _)| *g == gid).map(|(n, _, _)| n)
}

/// A user by name from the host's /etc/passwd and /etc/group.
pub fn named_user(host: &Host, name: &str) -> Result<User, String> {
    let passwd_path = host.path("/etc/passwd");
    let passwd = read_small(&passwd_path).ok_or_else(|| format!("cannot read {}", passwd_path.display()))?;
    let (uid, gid) = passwd
        .lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split(':').collect();
            (f.first() == Some(&name)).then(|| Some((f.get(2)?.parse().ok()?, f.get(3)?.parse().ok()?))).flatten()
        })
        .ok_or_else(|| format!("no user `{name}` in {}", passwd_path.display()))?;
    let mut gids = vec![gid];
    if let Some(text) = read_small(&host.path("/etc/group")) {
        for (_, g, members) in groups(&text) {
            if members.iter().any(|m| m == name) && !gids.contains(&g) {
                gids.push(g);
            }
        }
    }
    Ok(User {
        name: name.to_string(),
        uid,
        gids,
        from: format!("{} and {}", passwd_path.display(), host.path("/etc/group").display()),
    })
}

/// The user this process runs as, with the groups the kernel gave it.
pub fn current_user(host: &Host) -> User {
    // SAFETY: getuid/getgid cannot fail; getgroups(0, NULL) only returns the count (NGROUPS_MAX bounds it, 65536
    // on Linux), and then writes at most `len` entries into the buffer it is given.
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
    let count = unsafe { libc::getgroups(0, std::ptr::null_mut()) }.clamp(0, 65536);
    let mut buf = vec![0 as libc::gid_t; count as usize];
    let n = unsafe { libc::getgroups(count, buf.as_mut_ptr()) };
    buf.truncate(usize::try_from(n).unwrap_or(0));
    let mut gids = vec![gid];
    for g in buf {
        if !gids.contains(&g) {
            gids.push(g);
        }
    }
    let name = read_small(&host.path("/etc/passwd"))
        .and_then(|p| {
            p.lines().find_map(|l| {
                let f: Vec<&str> = l.split(':').collect();
                (f.get(2)?.parse::<u32>().ok()? == uid).then(|| f[0].to_string())
            })
        })
        .unwrap_or_else(|| format!("uid {uid}"));
    User { name, uid, gids, from: "this process's credentials (getuid, getgid, getgroups)".into() }
}

/// One device node and whether the user may open it read-write.
#[derive(Clone, Debug, Serialize)]
pub struct NodeAccess {
    pub path: String,
    /// `crw-rw----` style.
    pub mode: String,
    pub owner: u32,
    pub group: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub group_name: Option<String>,
    pub user: String,
    pub read_write: bool,
    /// Which rule decided.
    pub why: String,
}

fn mode_string(meta: &std::fs::Metadata) -> String {
    let ft = meta.file_type();
    let kind = if ft.is_char_device() {
        'c'
    } else if ft.is_block_device() {
        'b'
    } else if ft.is_dir() {
        'd'
    } else {
        '-'
    };
    let m = meta.mode();
    let bit = |mask: u32, c: char| if m & mask != 0 { c } else { '-' };
    [
        kind,
        bit(0o400, 'r'),
        bit(0o200, 'w'),
        bit(0o100, 'x'),
        bit(0o040, 'r'),
        bit(0o020, 'w'),
        bit(0o010, 'x'),
        bit(0o004, 'r'),
        bit(0o002, 'w'),
        bit(0o001, 'x'),
    ]
    .iter()
    .collect()
}

/// The device nodes the GPU runtimes open: `/dev/kfd`, `/dev/dri/renderD*`, `/dev/nvidiactl`, `/dev/nvidia-uvm`
/// and `/dev/nvidia<N>`.
pub fn gpu_nodes(host: &Host) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let kfd = host.path("/dev/kfd");
    if std::fs::symlink_metadata(&kfd).is_ok() {
        out.push(kfd);
    }
    let list = |dir: &Path| -> Vec<PathBuf> {
        let mut v: Vec<PathBuf> =
            std::fs::read_dir(dir).into_iter().flatten().flatten().take(MAX_ENTRIES).map(|e| e.path()).collect();
        v.sort();
        v
    };
    out.extend(
        list(&host.path("/dev/dri"))
            .into_iter()
            .filter(|p| p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with("renderD"))),
    );
    out.extend(list(&host.path("/dev")).into_iter().filter(|p| {
        p.file_name().and_then(|n| n.to_str()).is_some_and(|n| {
            n == "nvidiactl"
                || n == "nvidia-uvm"
                || n.strip_prefix("nvidia").is_some_and(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()))
        })
    }));
    out
}

/// Whether `user` may open `path` for reading and writing, by the owner/group/other bits.
pub fn check(host: &Host, path: &Path, user: &User) -> Option<NodeAccess> {
    let meta = std::fs::metadata(path).ok()?;
    let m = meta.mode();
    let (owner, group) = (meta.uid(), meta.gid());
    let (read_write, why) = if user.uid == 0 {
        (true, "root: file permissions do not restrict it (device cgroup rules are not checked)".to_string())
    } else if user.uid == owner {
        (m & 0o600 == 0o600, format!("owner bits {}", &mode_string(&meta)[1..4]))
    } else if user.gids.contains(&group) {
        (m & 0o060 == 0o060, format!("member of the owning group: group bits {}", &mode_string(&meta)[4..7]))
    } else {
        (
            m & 0o006 == 0o006,
            format!(
                "neither the owner nor in group {}: other bits {}",
                group_name(host, group).unwrap_or_else(|| group.to_string()),
                &mode_string(&meta)[7..10]
            ),
        )
    };
    Some(NodeAccess {
        path: path.display().to_string(),
        mode: mode_string(&meta),
        owner,
        group,
        group_name: group_name(host, group),
        user: user.name.clone(),
        read_write,
        why,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn group_lines_parse_with_and_without_members() {
        // Debian's /etc/group layout (group(5)).
        let g = groups("root:x:0:\nvideo:x:44:alice,ollama\n# comment\nrender:x:105:ollama\nbroken\n");
        assert_eq!(g.len(), 3);
        assert_eq!(g[1], ("video".to_string(), 44, vec!["alice".to_string(), "ollama".to_string()]));
        assert!(g[0].2.is_empty());
    }
}
