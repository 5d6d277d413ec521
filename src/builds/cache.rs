//! The on-disk rules every provider shares: cache keys, completion markers written last (a half-done download,
//! unpack or build never looks complete) and an exclusive lock per cache entry. Unpacking is `unpack`'s; the
//! bounded store of downloads is `store`'s.

use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::os::fd::AsRawFd;
use std::path::Path;

use anyhow::Context;
use sha2::{Digest, Sha256};

use super::types::BuildFlags;

/// The name of the marker a finished cache entry (source tree or build) holds.
pub const COMPLETE: &str = ".complete";

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
    fn markers_appear_whole() {
        let dir = tempfile::tempdir().unwrap();
        assert!(!is_complete(dir.path()));
        mark_complete(dir.path(), "ok").unwrap();
        assert!(is_complete(dir.path()));
        assert_eq!(fs::read_to_string(dir.path().join(COMPLETE)).unwrap(), "ok");
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1, "no temporary file left behind");
    }
}
