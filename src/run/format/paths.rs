//! Paths and file names. A relative path is made absolute once, where it is read — a spec file's against the file's
//! directory, a flag's against the working directory — so the plan stored with a run names absolute files and
//! `--resume` works from any directory.

use std::path::{Component, Path, PathBuf};

/// `p` against the working directory.
pub fn absolute(p: &Path) -> PathBuf {
    if p.is_absolute() {
        return p.to_path_buf();
    }
    match std::env::current_dir() {
        Ok(d) => join_clean(&d, p),
        Err(_) => p.to_path_buf(),
    }
}

/// `p` against `base` (itself absolute).
pub fn absolute_in(base: &Path, p: &Path) -> PathBuf {
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        join_clean(base, p)
    }
}

/// A program: a bare name is looked up on PATH when it starts, so only a path is made absolute.
pub fn program_in(base: &Path, p: &Path) -> PathBuf {
    if p.components().count() > 1 {
        absolute_in(base, p)
    } else {
        p.to_path_buf()
    }
}

/// `base` joined with `p`, dropping `.` components so stored paths read cleanly (`/a/./b` → `/a/b`).
pub fn join_clean(base: &Path, p: &Path) -> PathBuf {
    let mut out = base.to_path_buf();
    for c in p.components() {
        match c {
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

/// File-name-safe: letters, digits, `.`, `_`, `-`; everything else becomes `_`; at most 60 characters.
pub fn sanitize(s: &str) -> String {
    let t: String = s.chars().map(|c| if c.is_ascii_alphanumeric() || "._-".contains(c) { c } else { '_' }).collect();
    t.chars().take(60).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_paths_join_their_base_without_dot_components() {
        let base = Path::new("/srv/run");
        assert_eq!(absolute_in(base, Path::new("./a/./b")), PathBuf::from("/srv/run/a/b"));
        // `..` is kept: resolving it needs the file system (a symlinked directory changes its meaning).
        assert_eq!(absolute_in(base, Path::new("../x")), PathBuf::from("/srv/run/../x"));
        assert_eq!(absolute_in(base, Path::new("/abs/./x")), PathBuf::from("/abs/./x"));
        assert_eq!(program_in(base, Path::new("ollama")), PathBuf::from("ollama"));
        assert_eq!(program_in(base, Path::new("./run.sh")), PathBuf::from("/srv/run/run.sh"));
    }

    #[test]
    fn names_become_file_name_safe() {
        assert_eq!(sanitize("rocm gfx/906:xnack-"), "rocm_gfx_906_xnack-");
        assert_eq!(sanitize(&"a".repeat(100)).len(), 60);
    }
}
