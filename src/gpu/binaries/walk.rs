//! Find the files to scan under the given paths: regular files only, symlinks followed while they stay
//! inside the given roots (a link out of them, such as `/proc/self/root` or a link to `/`, would walk the
//! whole file system: it is reported and followed only on request), loops detected by (device, inode),
//! unreadable entries reported as problems instead of stopping the walk. Nothing is opened but
//! directories: FIFOs and devices are recognised by `stat` and left alone.

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

/// Walk `roots`. Symlinks whose target lies outside every root are reported and not followed unless
/// `follow_outside`.
pub fn walk(roots: &[PathBuf], follow_outside: bool, problems: &mut Vec<Problem>) -> Walked {
    // Canonical roots: a root given through a symlink (or as `/proc/self`) is where that link leads.
    let canonical: Vec<PathBuf> = roots.iter().map(|r| fs::canonicalize(r).unwrap_or_else(|_| r.clone())).collect();
    let mut walker = Walker {
        roots: if follow_outside { None } else { Some(canonical) },
        seen_dirs: HashSet::new(),
        seen_files: HashSet::new(),
        files: Vec::new(),
        problems,
    };
    for root in roots {
        walker.visit(root, 0);
    }
    let mut files = walker.files;
    files.sort();
    Walked { files }
}

fn problem(path: &Path, message: String) -> Problem {
    Problem { path: path.display().to_string(), offset: None, severity: Severity::Warning, message }
}

struct Walker<'p> {
    /// The canonical roots links must stay inside; `None` to follow links anywhere.
    roots: Option<Vec<PathBuf>>,
    seen_dirs: HashSet<(u64, u64)>,
    seen_files: HashSet<(u64, u64)>,
    files: Vec<PathBuf>,
    problems: &'p mut Vec<Problem>,
}

impl Walker<'_> {
    fn visit(&mut self, path: &Path, depth: usize) {
        let is_link = fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink());
        // A link below a root that leads out of every root is not followed (a root itself may be a link:
        // the user named it).
        if let (true, true, Some(roots)) = (is_link, depth > 0, &self.roots) {
            match fs::canonicalize(path) {
                Ok(target) if !roots.iter().any(|r| target.starts_with(r)) => {
                    let message = format!(
                        "symlink to {} outside the scanned roots; not followed (--follow-outside follows it)",
                        target.display()
                    );
                    self.problems.push(problem(path, message));
                    return;
                }
                Ok(_) => {}
                Err(e) => {
                    self.problems.push(problem(path, format!("broken or looping symlink: {e}")));
                    return;
                }
            }
        }
        // `metadata` follows symlinks; a dangling link or a loop of links fails here.
        let meta = match fs::metadata(path) {
            Ok(m) => m,
            Err(e) => {
                let kind = if is_link { "broken or looping symlink" } else { "cannot read metadata" };
                self.problems.push(problem(path, format!("{kind}: {e}")));
                return;
            }
        };
        let key = (meta.dev(), meta.ino());
        if meta.is_file() {
            if self.seen_files.insert(key) {
                self.files.push(path.to_path_buf());
            }
            return;
        }
        if !meta.is_dir() {
            return; // sockets, fifos, devices: nothing to scan
        }
        if !self.seen_dirs.insert(key) {
            if is_link {
                self.problems.push(problem(
                    path,
                    "symlink to a directory already visited (loop or alias); not entered again".into(),
                ));
            }
            return;
        }
        if depth >= MAX_DEPTH {
            self.problems.push(problem(path, format!("directory nesting deeper than {MAX_DEPTH}; not entered")));
            return;
        }
        let entries = match fs::read_dir(path) {
            Ok(e) => e,
            Err(e) => {
                self.problems.push(problem(path, format!("cannot list directory: {e}")));
                return;
            }
        };
        let mut children: Vec<PathBuf> = Vec::new();
        for entry in entries {
            match entry {
                Ok(e) => children.push(e.path()),
                Err(e) => self.problems.push(problem(path, format!("cannot read directory entry: {e}"))),
            }
        }
        children.sort();
        for child in children {
            self.visit(&child, depth + 1);
        }
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
        let w = walk(&[d.to_path_buf()], false, &mut problems);
        assert_eq!(w.files.len(), 1, "the alias is the same inode: {:?}", w.files);
        assert!(problems.iter().any(|p| p.path.ends_with("dangling") && p.message.contains("broken")));
        assert!(problems.iter().any(|p| p.path.ends_with("loop") && p.message.contains("already visited")));
    }

    #[test]
    fn links_out_of_the_roots_are_reported_unless_followed() {
        let outside = tempfile::tempdir().unwrap();
        fs::write(outside.path().join("lib.so"), b"x").unwrap();
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        fs::create_dir(d.join("a")).unwrap();
        symlink(outside.path(), d.join("a/out")).unwrap();
        symlink(outside.path().join("lib.so"), d.join("a/lib.so")).unwrap();
        // A root given through a link is where the link leads; links inside it stay inside.
        symlink(d.join("a"), d.join("root-link")).unwrap();
        let mut problems = Vec::new();
        let w = walk(&[d.join("root-link")], false, &mut problems);
        assert!(w.files.is_empty(), "{:?}", w.files);
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(problems.iter().all(|p| p.message.contains("outside the scanned roots")));
        let mut problems = Vec::new();
        let w = walk(&[d.join("root-link")], true, &mut problems);
        assert_eq!(w.files, [d.join("root-link/lib.so")], "the file and the link to it are one inode");
        assert!(problems.is_empty(), "{problems:?}");
        // With both trees as roots the links stay inside.
        let mut problems = Vec::new();
        let w = walk(&[d.to_path_buf(), outside.path().to_path_buf()], false, &mut problems);
        assert_eq!(w.files.len(), 1);
        assert!(problems.iter().all(|p| !p.message.contains("outside")), "{problems:?}");
    }
}
