//! The bounded store of downloads, shared by the build sources: PyPI's sdists, llama.cpp's release archives and the
//! trees unpacked from them live in `CACHE/downloads/`, and together they stay under a size cap
//! (`$BACKSCOPE_DOWNLOAD_CACHE_MAX`, default [`DEFAULT_CAP`]) by removing the least recently used entries.
//!
//! Layout: `downloads/<name>` is an entry (a file or a directory); `downloads/.meta/<name>` its record (JSON: size,
//! sha256, source), written last, so an entry without one is unfinished and never used; the record's mtime is the
//! entry's last use. `.locks/<name>` serialises making an entry (one download or unpack at a time, across
//! processes); `.pins/<name>` is held shared by whoever is using an entry (a bisect's current build, the build
//! prefetched for the next step, the good end a speed test compares with), and eviction passes over an entry it
//! cannot lock exclusively. Compiled builds (`builds/`), source trees (`src/`, `git-src/`) and ccache's objects are
//! not in the store: they are the builder's, and are not bounded.

use std::fs::{self, File};
use std::io::{self, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::time::{Duration, SystemTime};

use anyhow::{bail, Context};
use serde::{Deserialize, Serialize};

use super::cache::{self, Lock};
use super::http::{self, Got};

/// The cap when `$BACKSCOPE_DOWNLOAD_CACHE_MAX` is not set: about 70 Vulkan release builds, archive and tree.
pub const DEFAULT_CAP: u64 = 10 << 30;
/// The environment variable that sets the cap: bytes, or a number with K, M, G or T (binary units).
pub const CAP_ENV: &str = "BACKSCOPE_DOWNLOAD_CACHE_MAX";
/// Scratch files and directories older than this are a crashed run's and are removed by eviction.
const STALE_SCRATCH: Duration = Duration::from_secs(24 * 3600);

/// A problem with one download that makes that build unusable but need not stop a bisect (a checksum that does
/// not match, an archive over its cap): the release source turns it into an unbuildable build.
#[derive(Debug)]
pub struct Refused(pub String);

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Refused {}

/// An entry's record.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Meta {
    /// Bytes the entry takes (a file's size; a tree's file data).
    pub size: u64,
    /// A downloaded file's SHA-256, lowercase hex.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    /// Where it came from: a URL, or the archive a tree was unpacked from.
    pub source: String,
}

/// A shared hold on an entry: eviction leaves it alone while this lives.
#[derive(Debug)]
pub struct Pin {
    _file: File,
    pub name: String,
}

/// What one eviction removed.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Evicted {
    pub names: Vec<String>,
    pub bytes: u64,
    /// The store's size after it.
    pub left: u64,
}

/// The cap `$BACKSCOPE_DOWNLOAD_CACHE_MAX` gives, or [`DEFAULT_CAP`] when it is unset or empty.
pub fn cap_from_env() -> anyhow::Result<u64> {
    match std::env::var(CAP_ENV) {
        Ok(v) if !v.trim().is_empty() => parse_size(&v).with_context(|| format!("${CAP_ENV}")),
        _ => Ok(DEFAULT_CAP),
    }
}

/// `123`, `500M`, `10G`, `1.5T` (K, M, G, T binary; an optional `B`/`iB` after them) → bytes.
pub fn parse_size(text: &str) -> anyhow::Result<u64> {
    let t = text.trim();
    let t = t.strip_suffix("iB").or_else(|| t.strip_suffix('B')).unwrap_or(t);
    let (number, unit) = match t.char_indices().find(|(_, c)| c.is_ascii_alphabetic()) {
        Some((i, _)) => (&t[..i], &t[i..]),
        None => (t, ""),
    };
    let shift = match unit.to_ascii_uppercase().as_str() {
        "" => 0,
        "K" => 10,
        "M" => 20,
        "G" => 30,
        "T" => 40,
        _ => bail!("{text:?} is not a size (expected bytes or a number with K, M, G or T)"),
    };
    let value: f64 = number.trim().parse().map_err(|_| anyhow::anyhow!("{text:?} is not a size"))?;
    let bytes = value * (1u64 << shift) as f64;
    if !(bytes.is_finite() && bytes >= 0.0 && bytes < 2f64.powi(63)) {
        bail!("{text:?} is not a size this machine can hold");
    }
    Ok(bytes as u64)
}

/// The store under a cache root.
#[derive(Clone, Debug)]
pub struct Store {
    /// `CACHE/downloads`.
    pub root: PathBuf,
    pub cap: u64,
}

impl Store {
    pub fn new(cache_dir: &Path, cap: u64) -> Store {
        Store { root: cache_dir.join("downloads"), cap }
    }

    /// Where the entry `name` lives. Names are made by backscope from file names it checked ([`entry_name`]).
    pub fn path(&self, name: &str) -> PathBuf {
        self.root.join(name)
    }

    fn meta_path(&self, name: &str) -> PathBuf {
        self.root.join(".meta").join(name)
    }

    /// The record of a finished entry (none for one that is missing or unfinished).
    pub fn meta(&self, name: &str) -> Option<Meta> {
        let text = crate::host::inputs::read_limited(&self.meta_path(name), 1 << 16).ok()?;
        let meta: Meta = serde_json::from_slice(&text).ok()?;
        fs::symlink_metadata(self.path(name)).is_ok().then_some(meta)
    }

    /// Mark `name` finished with `meta` (the record is written through a temporary name and renamed), then evict
    /// what the cap asks for, `name` aside, and say what went.
    pub fn finish(&self, name: &str, meta: &Meta) -> anyhow::Result<Evicted> {
        let dir = self.root.join(".meta");
        cache::create_dirs(&dir)?;
        let mut tmp = tempfile::Builder::new()
            .prefix(".tmp-meta-")
            .tempfile_in(&dir)
            .with_context(|| format!("creating a record in {}", dir.display()))?;
        tmp.write_all(&serde_json::to_vec(meta)?).with_context(|| format!("writing the record of {name}"))?;
        tmp.persist(self.meta_path(name)).with_context(|| format!("recording {name} in {}", dir.display()))?;
        let evicted = self.evict(&[name])?;
        if !evicted.names.is_empty() {
            crate::output::messages::note(format_args!(
                "download cache {}: over its {} MiB cap, removed {} least recently used entr{} ({} MiB); {} MiB left",
                self.root.display(),
                self.cap >> 20,
                evicted.names.len(),
                if evicted.names.len() == 1 { "y" } else { "ies" },
                evicted.bytes >> 20,
                evicted.left >> 20
            ));
        }
        Ok(evicted)
    }

    /// Note a use of `name` (its record's mtime, the order eviction goes by).
    pub fn touch(&self, name: &str) {
        let _ = File::options().write(true).open(self.meta_path(name)).and_then(|f| f.set_modified(SystemTime::now()));
    }

    /// The exclusive lock for making `name`.
    pub fn lock(&self, name: &str) -> anyhow::Result<Lock> {
        Lock::acquire(&self.root.join(".locks").join(name))
    }

    /// A shared hold on `name` (waits while an eviction is removing it).
    pub fn pin(&self, name: &str) -> anyhow::Result<Pin> {
        let path = self.root.join(".pins").join(name);
        let file = open_lock_file(&path)?;
        flock(&file, libc::LOCK_SH).with_context(|| format!("locking {}", path.display()))?;
        Ok(Pin { _file: file, name: name.to_string() })
    }

    /// A scratch directory in the store (same file system: a finished tree is renamed into place).
    pub fn scratch(&self, name: &str) -> anyhow::Result<tempfile::TempDir> {
        cache::create_dirs(&self.root)?;
        tempfile::Builder::new()
            .prefix(&format!(".tmp-{name}-"))
            .tempdir_in(&self.root)
            .with_context(|| format!("creating a scratch directory in {}", self.root.display()))
    }

    /// The file `url` names, as the entry `name`: the finished entry if there is one (and, when `sha256` is given,
    /// it has that digest), else downloaded now — at most `cap` bytes, hashed while it streams, checked against
    /// `sha256`, renamed into place only when whole and right. None: the server has no such file.
    pub fn fetch(
        &self,
        agent: &ureq::Agent,
        url: &str,
        name: &str,
        sha256: Option<&str>,
        cap: u64,
        cancel: &AtomicBool,
    ) -> anyhow::Result<Option<(PathBuf, Meta)>> {
        let wanted = |m: &Meta| sha256.is_none_or(|s| m.sha256.as_deref() == Some(s));
        if let Some(m) = self.meta(name).filter(wanted) {
            self.touch(name);
            return Ok(Some((self.path(name), m)));
        }
        let _lock = self.lock(name)?;
        if let Some(m) = self.meta(name).filter(wanted) {
            self.touch(name);
            return Ok(Some((self.path(name), m)));
        }
        cache::create_dirs(&self.root)?;
        let part = tempfile::Builder::new()
            .prefix(&format!(".tmp-{name}-"))
            .tempfile_in(&self.root)
            .with_context(|| format!("creating a download file in {}", self.root.display()))?
            .into_temp_path();
        let (size, got) = match http::download(agent, url, &part, cap, cancel) {
            Ok(Got::File { size, sha256 }) => (size, sha256),
            Ok(Got::Absent { .. }) => return Ok(None),
            Err(e) if format!("{e:#}").contains("larger than") => return Err(Refused(format!("{e:#}")).into()),
            Err(e) => return Err(e),
        };
        if let Some(want) = sha256.filter(|w| *w != got) {
            return Err(Refused(format!("{url}: sha256 {got} does not match the published {want}")).into());
        }
        // A record of an earlier file of this name (another digest) goes first: the entry is unfinished until
        // the new record is written.
        let _ = fs::remove_file(self.meta_path(name));
        let dest = self.path(name);
        part.persist(&dest).with_context(|| format!("moving the download into {}", dest.display()))?;
        let meta = Meta { size, sha256: Some(got), source: url.to_string() };
        self.finish(name, &meta)?;
        Ok(Some((dest, meta)))
    }

    /// Remove least recently used finished entries (`keep` and pinned ones aside) until the store is within its
    /// cap; remove scratch files a crashed run left. Entries being made or used are passed over, not waited for.
    pub fn evict(&self, keep: &[&str]) -> anyhow::Result<Evicted> {
        let mut entries = self.finished()?;
        let mut total: u64 = entries.iter().map(|e| e.1.size).sum();
        let mut out = Evicted::default();
        // Oldest use first.
        entries.sort_by(|a, b| (a.2, &a.0).cmp(&(b.2, &b.0)));
        for (name, meta, _) in entries {
            if total <= self.cap {
                break;
            }
            if keep.contains(&name.as_str()) || !self.remove_if_unused(&name)? {
                continue;
            }
            total = total.saturating_sub(meta.size);
            out.bytes += meta.size;
            out.names.push(name);
        }
        self.sweep_scratch();
        out.left = total;
        Ok(out)
    }

    /// Every finished entry: name, record, last use.
    fn finished(&self) -> anyhow::Result<Vec<(String, Meta, SystemTime)>> {
        let dir = self.root.join(".meta");
        let rd = match fs::read_dir(&dir) {
            Ok(rd) => rd,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(e).with_context(|| format!("reading {}", dir.display())),
        };
        let mut out = Vec::new();
        for e in rd.flatten() {
            let Some(name) = e.file_name().to_str().map(str::to_string) else { continue };
            if name.starts_with('.') {
                continue;
            }
            let used = e.metadata().and_then(|m| m.modified()).unwrap_or(SystemTime::UNIX_EPOCH);
            if let Some(meta) = self.meta(&name) {
                out.push((name, meta, used));
            }
        }
        Ok(out)
    }

    /// Remove `name` if no one is making it or holds a pin on it; whether it was removed.
    fn remove_if_unused(&self, name: &str) -> anyhow::Result<bool> {
        let lock = open_lock_file(&self.root.join(".locks").join(name))?;
        let pin = open_lock_file(&self.root.join(".pins").join(name))?;
        if flock(&lock, libc::LOCK_EX | libc::LOCK_NB).is_err() || flock(&pin, libc::LOCK_EX | libc::LOCK_NB).is_err() {
            return Ok(false);
        }
        // The record first: from here on the entry is unfinished to every reader.
        let _ = fs::remove_file(self.meta_path(name));
        let path = self.path(name);
        let removed = match fs::symlink_metadata(&path) {
            Ok(m) if m.is_dir() => fs::remove_dir_all(&path),
            Ok(_) => fs::remove_file(&path),
            Err(_) => Ok(()),
        };
        removed.with_context(|| format!("removing {} from the download cache", path.display()))?;
        Ok(true)
    }

    fn sweep_scratch(&self) {
        let now = SystemTime::now();
        for e in fs::read_dir(&self.root).into_iter().flatten().flatten() {
            let is_scratch = e.file_name().to_str().is_some_and(|n| n.starts_with(".tmp-"));
            let old = e
                .metadata()
                .and_then(|m| m.modified())
                .is_ok_and(|t| now.duration_since(t).unwrap_or_default() > STALE_SCRATCH);
            if is_scratch && old {
                let p = e.path();
                let _ = if p.is_dir() { fs::remove_dir_all(&p) } else { fs::remove_file(&p) };
            }
        }
    }
}

/// A store entry name made from a file name: what it is, kept readable, and a digest of where it came from so
/// that two sources' files of one name do not meet (`a-1f2e3d4c5b6a-llama-b6000-bin-ubuntu-x64.zip`).
pub fn entry_name(prefix: &str, origin: &str, file_name: &str) -> String {
    let digest = <sha2::Sha256 as sha2::Digest>::digest(origin.as_bytes());
    let plain: String = file_name
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || "._+-".contains(c) { c } else { '_' })
        .take(120)
        .collect();
    format!("{prefix}-{}-{}", cache::hex(&digest[..6]), plain.trim_start_matches('.'))
}

fn open_lock_file(path: &Path) -> anyhow::Result<File> {
    if let Some(parent) = path.parent() {
        cache::create_dirs(parent)?;
    }
    File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .with_context(|| format!("opening lock {}", path.display()))
}

/// `flock` with EINTR retried.
fn flock(file: &File, op: libc::c_int) -> io::Result<()> {
    loop {
        // SAFETY: flock on a descriptor we own.
        if unsafe { libc::flock(file.as_raw_fd(), op) } == 0 {
            return Ok(());
        }
        let err = io::Error::last_os_error();
        if err.kind() != io::ErrorKind::Interrupted {
            return Err(err);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_with_binary_units() {
        assert_eq!(parse_size("123").unwrap(), 123);
        assert_eq!(parse_size("500M").unwrap(), 500 << 20);
        assert_eq!(parse_size("10G").unwrap(), 10 << 30);
        assert_eq!(parse_size("10GiB").unwrap(), 10 << 30);
        assert_eq!(parse_size(" 1.5k ").unwrap(), 1536);
        for bad in ["", "x", "10Q", "-1G", "1e30T", "NaN"] {
            assert!(parse_size(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn entry_names_keep_the_file_name_and_part_origins() {
        let a = entry_name("a", "https://x/b1/", "llama-b1-bin-ubuntu-x64.zip");
        assert!(a.starts_with("a-") && a.ends_with("-llama-b1-bin-ubuntu-x64.zip") && a.len() == 2 + 13 + 27, "{a}");
        assert_ne!(a, entry_name("a", "https://y/b1/", "llama-b1-bin-ubuntu-x64.zip"));
        let odd = entry_name("a", "o", "../x y/.z");
        assert!(!odd.contains('/') && !odd.contains(' '), "{odd}");
    }

    fn add(store: &Store, name: &str, size: usize, age_s: u64) {
        fs::create_dir_all(&store.root).unwrap();
        fs::write(store.path(name), vec![1u8; size]).unwrap();
        store.finish(name, &Meta { size: size as u64, sha256: None, source: "t".into() }).unwrap();
        let used = SystemTime::now() - Duration::from_secs(age_s);
        File::options().write(true).open(store.meta_path(name)).unwrap().set_modified(used).unwrap();
    }

    /// Over the cap, the least recently used entries go first; a pinned one and one being made stay; a use
    /// (touch) moves an entry to the back of the line.
    #[test]
    fn eviction_removes_the_least_recently_used_and_spares_pins_and_locks() {
        let tmp = tempfile::tempdir().unwrap();
        let roomy = Store::new(tmp.path(), 1 << 20);
        for (name, age) in [("old", 500), ("pinned", 400), ("locked", 300), ("mid", 200), ("new", 100)] {
            add(&roomy, name, 100, age);
        }
        let store = Store::new(tmp.path(), 300);
        store.touch("mid");
        let _pin = store.pin("pinned").unwrap();
        let _lock = store.lock("locked").unwrap();
        let ev = store.evict(&[]).unwrap();
        assert_eq!(ev.names, ["old", "new"], "oldest unpinned first; `mid` was just used");
        assert_eq!((ev.bytes, ev.left), (200, 300));
        assert!(store.meta("old").is_none() && !store.path("old").exists());
        assert!(store.meta("pinned").is_some() && store.meta("locked").is_some() && store.meta("mid").is_some());
        // Within the cap nothing goes.
        assert!(roomy.evict(&[]).unwrap().names.is_empty());
    }

    #[test]
    fn an_entry_without_its_record_is_unfinished() {
        let tmp = tempfile::tempdir().unwrap();
        let store = Store::new(tmp.path(), 1 << 20);
        fs::create_dir_all(&store.root).unwrap();
        fs::write(store.path("half"), b"x").unwrap();
        assert!(store.meta("half").is_none());
        assert!(store.evict(&[]).unwrap().names.is_empty(), "not counted, not removed: it is someone's download");
    }
}
