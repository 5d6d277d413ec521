//! Find the files to scan under the given paths: regular files only, symlinks followed, loops detected
//! by (device, inode), unreadable entries reported as problems instead of stopping the walk.

use std::collections::HashSet;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use super::records::{Problem, Severity};

/// Directories deeper than this are not entered (a guard against pathological trees, not a real limit).
const MAX_DEPTH: usize = 64;

#[derive(Debug, Default)]
pub struct Walked {
    /// Regular files, deduplicated by (device, inode) and sorted by path.
    pub files: Vec<PathBuf>,
}

pub fn walk(roots: &[PathBuf], problems: &mut Vec<Problem>) -> Walked {
    let mut seen_dirs = HashSet::new();
    let mut seen_files = HashSet::new();
    let mut files = Vec::new();
    for root in roots {
        visit(root, 0, &mut seen_dirs, &mut seen_files, &mut files, problems);
    }
    files.sort();
    Walked { files }
}

fn problem(path: &Path, message: String) -> Problem {
    Problem { path: path.display().to_string(), offset: None, severity: Severity::Warning, message }
}

fn visit(
    path: &Path,
    depth: usize,
    seen_dirs: &mut HashSet<(u64, u64)>,
    seen_files: &mut HashSet<(u64, u64)>,
    files: &mut Vec<PathBuf>,
    problems: &mut Vec<Problem>,
) {
    // `metadata` follows symlinks; a dangling link or a loop of links fails here.
    let meta = match fs::metadata(path) {
        Ok(m) => m,
        Err(e) => {
            let kind = if fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink()) {
                "broken or looping symlink"
            } else {
                "cannot read metadata"
            };
            problems.push(problem(path, format!("{kind}: {e}")));
            return;
        }
    };
    let key = (meta.dev(), meta.ino());
    if meta.is_file() {
        if seen_files.insert(key) {
            files.push(path.to_path_buf());
        }
        return;
    }
    if !meta.is_dir() {
        return; // sockets, fifos, devices: nothing to scan
    }
    if !seen_dirs.insert(key) {
        if fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink()) {
            problems.push(problem(
                path,
                "symlink to a directory already visited (loop or alias); not entered again".into(),
            ));
        }
        return;
    }
    if depth >= MAX_DEPTH {
        problems.push(problem(path, format!("directory nesting deeper than {MAX_DEPTH}; not entered")));
        return;
    }
    let entries = match fs::read_dir(path) {
        Ok(e) => e,
        Err(e) => {
            problems.push(problem(path, format!("cannot list directory: {e}")));
            return;
        }
    };
    let mut children: Vec<PathBuf> = Vec::new();
    for entry in entries {
        match entry {
            Ok(e) => children.push(e.path()),
            Err(e) => problems.push(problem(path, format!("cannot read directory entry: {e}"))),
        }
    }
    children.sort();
    for child in children {
        visit(&child, depth + 1, seen_dirs, seen_files, files, problems);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    #[test]
    fn survives_loops_dangling_links_and_aliases() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        fs::create_dir_all(d.join("a/b")).unwrap();
        fs::write(d.join("a/b/lib.so"), b"x").unwrap();
        symlink(d.join("a"), d.join("a/b/loop")).unwrap();
        symlink(d.join("nowhere"), d.join("dangling")).unwrap();
        symlink(d.join("a/b/lib.so"), d.join("alias.so")).unwrap();
        let mut problems = Vec::new();
        let w = walk(&[d.to_path_buf()], &mut problems);
        assert_eq!(w.files.len(), 1, "the alias is the same inode: {:?}", w.files);
        assert!(problems.iter().any(|p| p.path.ends_with("dangling") && p.message.contains("broken")));
        assert!(problems.iter().any(|p| p.path.ends_with("loop") && p.message.contains("already visited")));
    }
}
