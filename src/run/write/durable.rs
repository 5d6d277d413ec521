//! Files that survive a crash or power cut whole: written to a temporary file, fsynced, renamed into place, and
//! the directory fsynced. The rename is what makes the new content visible, but it is an update of the directory:
//! until the directory itself is synced, a power cut can leave the old name (or no name at all) behind even though
//! the file's bytes are on disk (fsync(2): "calling fsync() on a file descriptor for the file does not ensure
//! that the entry in the directory containing the file has also reached disk").

use std::fs::File;
use std::io::{self, Write};
use std::path::Path;

fn with_path(e: io::Error, what: &str, path: &Path) -> io::Error {
    io::Error::new(e.kind(), format!("cannot {what} {}: {e}", path.display()))
}

/// Flush a directory's entries (names created, renamed or removed in it) to disk.
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir).and_then(|d| d.sync_all()).map_err(|e| with_path(e, "sync the directory", dir))
}

/// Write `bytes` to `path` so that a reader, and the disk after a crash, holds either the old file or the complete
/// new one. Creates the parent directories.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let dir = path.parent().ok_or_else(|| io::Error::other(format!("{} has no directory", path.display())))?;
    std::fs::create_dir_all(dir).map_err(|e| with_path(e, "create", dir))?;
    let tmp = dir.join(format!(".{}.tmp", path.file_name().and_then(|n| n.to_str()).unwrap_or("file")));
    {
        let mut f = File::create(&tmp).map_err(|e| with_path(e, "write", &tmp))?;
        f.write_all(bytes).and_then(|_| f.sync_all()).map_err(|e| with_path(e, "write", &tmp))?;
    }
    std::fs::rename(&tmp, path)
        .map_err(|e| io::Error::new(e.kind(), format!("cannot rename {} to {}: {e}", tmp.display(), path.display())))?;
    sync_dir(dir)
}

/// Remove `path` and make the removal durable. A file that is already gone is fine.
pub fn remove(path: &Path) -> io::Result<()> {
    match std::fs::remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(with_path(e, "remove", path)),
    }
    match path.parent() {
        Some(dir) => sync_dir(dir),
        None => Ok(()),
    }
}

/// The refusal to continue `what` (e.g. "run R", "bisect B") in the shared store while its local fallback file
/// `path` holds `missing` `items` the server lacks: they would be done again, and clash with the local ones at push
/// time. Names the `push` that uploads them.
pub fn unpushed_fallback(what: &str, missing: usize, items: &str, path: &Path, db: &str) -> anyhow::Error {
    anyhow::anyhow!(
        "{what} has {missing} {items} only in its local fallback file {} (recorded while the server was away): push \
         them first (backscope push --from {} --db '{db}'), then resume",
        path.display(),
        path.display(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn atomic_write_replaces_whole_files() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a/b/result.json");
        write_atomic(&p, b"one").unwrap();
        write_atomic(&p, b"two").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"two");
        assert_eq!(std::fs::read_dir(p.parent().unwrap()).unwrap().count(), 1, "no temporary file left behind");
        remove(&p).unwrap();
        remove(&p).unwrap();
        assert!(!p.exists());
        let e = sync_dir(&dir.path().join("missing")).unwrap_err();
        assert!(e.to_string().contains("cannot sync the directory") && e.to_string().contains("missing"), "{e}");
    }
}
