//! Finding a build's archive (a directory's file, or a URL that answers), checking it against a published
//! `SHA256SUMS`, and unpacking it into the download store as a tree with `llama-server` in it. Everything here is
//! shared with the background prefetch threads (`Source` is `Send + Sync`).

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use anyhow::{bail, Context};

use super::names::{self, ArchiveName};
use crate::builds::cache;
use crate::builds::store::{self, Meta, Pin, Refused, Store};
use crate::builds::types::{Backend, BuildNumber};
use crate::builds::unpack::{self, Kind};
use crate::output::messages;

/// An archive is downloaded only up to this size (the largest llama.cpp Linux archives, ROCm's, are well below).
pub const ARCHIVE_CAP: u64 = 4 << 30;
/// A `SHA256SUMS` file is read only up to this size.
const SUMS_CAP: u64 = 1 << 20;
/// The most build numbers a URL pattern is probed for in one listing (about a year of llama.cpp releases).
pub const MAX_PROBED: u32 = 4096;
/// Probes in flight at once.
const PROBE_THREADS: u32 = 8;

/// Where builds come from.
#[derive(Clone, Debug)]
pub enum Origin {
    /// A URL pattern with `{build}` (and maybe `{ext}`).
    Url(String),
    /// A directory of downloaded archives, and the platform (from the backend and this machine) picked there.
    Dir { root: PathBuf, backend: Backend, arch: String },
}

/// One build's archive, found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Located {
    Url(String),
    File(PathBuf),
}

/// A prepared build, or why it cannot be had.
#[derive(Debug)]
pub enum Outcome {
    Ready { bin_dir: PathBuf, secs: f64, from_cache: bool, pin: Pin },
    Unbuildable(String),
}

/// A `SHA256SUMS` file's lines: file name, lowercase hex digest.
type Sums = Vec<(String, String)>;

/// The state a provider and its prefetch threads share.
pub struct Source {
    pub origin: Origin,
    pub store: Store,
    pub cache_dir: PathBuf,
    agent: ureq::Agent,
    /// Builds found so far (a directory's whole listing, or the URL probes of a range).
    found: Mutex<BTreeMap<u32, Located>>,
    /// `SHA256SUMS` by directory URL (or path): its lines, or none when there is no such file.
    sums: Mutex<HashMap<String, Option<Sums>>>,
    /// Whether the note that downloads go unchecked was given (once per source).
    unchecked_noted: AtomicBool,
}

impl Source {
    pub fn new(origin: Origin, store: Store, cache_dir: &Path) -> Source {
        Source {
            origin,
            store,
            cache_dir: cache_dir.to_path_buf(),
            agent: crate::builds::http::agent(),
            found: Mutex::new(BTreeMap::new()),
            sums: Mutex::new(HashMap::new()),
            unchecked_noted: AtomicBool::new(false),
        }
    }

    /// What the source is, in words.
    pub fn describe(&self) -> String {
        match &self.origin {
            Origin::Url(p) => p.clone(),
            Origin::Dir { root, .. } => root.display().to_string(),
        }
    }

    /// The builds found so far, with their archives.
    pub fn found(&self) -> BTreeMap<u32, Located> {
        self.found.lock().map(|f| f.clone()).unwrap_or_default()
    }

    /// A directory's archives for the backend's platform, one per build (`.tar.gz` over `.zip`, the newest ROCm).
    pub fn list_dir(&self) -> anyhow::Result<Vec<BuildNumber>> {
        let Origin::Dir { root, backend, arch } = &self.origin else { bail!("not a directory source") };
        let rd = std::fs::read_dir(root).with_context(|| format!("reading {}", root.display()))?;
        let mut best: BTreeMap<u32, (u64, u8, PathBuf)> = BTreeMap::new();
        for e in rd.flatten() {
            let Some(name) = e.file_name().to_str().map(str::to_string) else { continue };
            let Some(ArchiveName { build, platform, kind }) = names::parse_archive_name(&name) else { continue };
            let Some(rank) = names::platform_rank(&platform, *backend, arch) else { continue };
            let kind_rank = u8::from(kind == Kind::TarGz);
            let better = best.get(&build.0).is_none_or(|(r, k, _)| (rank, kind_rank) > (*r, *k));
            if better && e.file_type().is_ok_and(|t| t.is_file()) {
                best.insert(build.0, (rank, kind_rank, e.path()));
            }
        }
        if best.is_empty() {
            bail!(
                "{}: no llama.cpp release archive for this machine's {} builds (llama-bNNNN-bin-{}.tar.gz or .zip)",
                root.display(),
                backend.name(),
                names::platform_wanted(*backend, arch)
            );
        }
        let mut found = self.found.lock().map_err(|_| anyhow::anyhow!("listing lock poisoned"))?;
        for (b, (_, _, path)) in &best {
            found.insert(*b, Located::File(path.clone()));
        }
        Ok(best.keys().map(|b| BuildNumber(*b)).collect())
    }

    /// The builds from `lo` to `hi` whose archive the URL pattern's server has: every number probed, several at
    /// once; an archive already in the store counts without asking.
    pub fn probe_range(&self, lo: BuildNumber, hi: BuildNumber) -> anyhow::Result<Vec<BuildNumber>> {
        let Origin::Url(pattern) = &self.origin else { bail!("not a URL source") };
        let count = hi.0.saturating_sub(lo.0).saturating_add(1);
        if hi < lo || count > MAX_PROBED {
            bail!(
                "{pattern}: {lo}..{hi} is {count} build numbers; a URL source is probed for at most {MAX_PROBED} \
                 (narrow --good/--bad, or download the archives and use release-dir:)"
            );
        }
        let next = AtomicU32::new(lo.0);
        let failed: Mutex<Option<anyhow::Error>> = Mutex::new(None);
        std::thread::scope(|s| {
            for _ in 0..PROBE_THREADS.min(count) {
                s.spawn(|| loop {
                    let b = next.fetch_add(1, Ordering::Relaxed);
                    if b > hi.0 || failed.lock().is_ok_and(|f| f.is_some()) {
                        break;
                    }
                    if let Err(e) = self.probe(BuildNumber(b)) {
                        if let Ok(mut f) = failed.lock() {
                            f.get_or_insert(e);
                        }
                    }
                });
            }
        });
        if let Some(e) = failed.into_inner().ok().flatten() {
            return Err(e.context(format!("listing the builds {lo}..{hi} of {pattern}")));
        }
        let found = self.found.lock().map_err(|_| anyhow::anyhow!("listing lock poisoned"))?;
        Ok(found.range(lo.0..=hi.0).map(|(b, _)| BuildNumber(*b)).collect())
    }

    /// The first URL of `build` whose archive the store holds, else the first that answers with a file; recorded.
    fn probe(&self, build: BuildNumber) -> anyhow::Result<Option<Located>> {
        let Origin::Url(pattern) = &self.origin else { bail!("not a URL source") };
        let urls = names::urls_for(pattern, build);
        let mut hit = urls.iter().find(|u| self.store.meta(&archive_entry(u)).is_some()).cloned();
        if hit.is_none() {
            for url in &urls {
                if crate::builds::http::exists(&self.agent, url)? {
                    hit = Some(url.clone());
                    break;
                }
            }
        }
        let Some(url) = hit else { return Ok(None) };
        let located = Located::Url(url);
        if let Ok(mut f) = self.found.lock() {
            f.insert(build.0, located.clone());
        }
        Ok(Some(located))
    }

    /// Where `build`'s archive is: found by a listing, or probed now (a resumed bisect lists nothing).
    fn locate(&self, build: BuildNumber) -> anyhow::Result<Option<Located>> {
        if let Some(l) = self.found.lock().ok().and_then(|f| f.get(&build.0).cloned()) {
            return Ok(Some(l));
        }
        match &self.origin {
            Origin::Url(_) => self.probe(build),
            Origin::Dir { .. } => {
                self.list_dir()?;
                Ok(self.found.lock().ok().and_then(|f| f.get(&build.0).cloned()))
            }
        }
    }

    /// The digests published beside an archive: `SHA256SUMS` in its directory (URL or path), read once.
    fn sums_beside(&self, dir: &str) -> anyhow::Result<Option<Sums>> {
        if let Some(known) = self.sums.lock().ok().and_then(|s| s.get(dir).cloned()) {
            return Ok(known);
        }
        let what = format!("{dir}{}", names::SUMS_FILE);
        let bytes = match &self.origin {
            Origin::Url(_) => crate::builds::http::get_small(&self.agent, &what, SUMS_CAP)?,
            Origin::Dir { .. } => {
                let path = Path::new(&what);
                if path.exists() {
                    Some(crate::host::inputs::read_limited(path, SUMS_CAP).map_err(|e| anyhow::anyhow!("{e}"))?)
                } else {
                    None
                }
            }
        };
        let sums = bytes.map(|b| names::parse_sums(&b, &what)).transpose()?;
        if let Ok(mut s) = self.sums.lock() {
            s.insert(dir.to_string(), sums.clone());
        }
        Ok(sums)
    }

    /// The digest the published `SHA256SUMS` gives the archive `url_or_path`: none when there is no such file; an
    /// unbuildable reason when there is one that does not list the archive.
    fn published_sum(&self, url_or_path: &str) -> anyhow::Result<Result<Option<String>, String>> {
        let (dir, name) = names::split_url(url_or_path);
        Ok(match self.sums_beside(dir)? {
            None => Ok(None),
            Some(sums) => match names::sum_of(&sums, name) {
                Some(h) => Ok(Some(h.to_string())),
                None => Err(format!("{name}: {dir}{} does not list it (or lists it twice)", names::SUMS_FILE)),
            },
        })
    }

    /// `build` as a tree in the store with `llama-server` in it: from the store, or fetched, checked and unpacked
    /// now. `cancel` stops a download between reads (a prefetch no longer wanted).
    pub fn materialize(&self, build: BuildNumber, cancel: &AtomicBool) -> anyhow::Result<Outcome> {
        let t0 = Instant::now();
        let Some(located) = self.locate(build)? else {
            return Ok(Outcome::Unbuildable(match &self.origin {
                Origin::Url(p) => format!("no archive at {} (HTTP 404)", names::urls_for(p, build).join(" or ")),
                Origin::Dir { root, backend, arch } => format!(
                    "no llama-{build}-bin-{}.tar.gz (or .zip) in {}",
                    names::platform_wanted(*backend, arch),
                    root.display()
                ),
            }));
        };
        let archive = match self.archive(&located, cancel)? {
            Ok(a) => a,
            Err(reason) => return Ok(Outcome::Unbuildable(reason)),
        };
        let tree = format!("t-{}", &archive.sha256[..16]);
        let pin = self.store.pin(&tree)?;
        let (bin_dir, from_cache) = match self.store.meta(&tree) {
            Some(_) => (read_bin(&self.store, &tree)?, true),
            None => match self.unpack(&archive, &tree, build)? {
                Ok(bin) => (bin, false),
                Err(reason) => return Ok(Outcome::Unbuildable(reason)),
            },
        };
        self.store.touch(&tree);
        crate::host::cache::check_trusted(&self.cache_dir, &bin_dir.join("llama-server"))
            .map_err(|e| anyhow::anyhow!("refusing the unpacked build {}: {e}", bin_dir.display()))?;
        Ok(Outcome::Ready { bin_dir, secs: t0.elapsed().as_secs_f64(), from_cache, pin })
    }

    /// The archive's file and digest: a directory's file (hashed now) or the store's download (fetched now if
    /// missing). `Ok(Err(reason))`: this build cannot be had (absent, wrong digest, not listed, over the cap).
    fn archive(&self, located: &Located, cancel: &AtomicBool) -> anyhow::Result<Result<Archive, String>> {
        match located {
            Located::File(path) => {
                let shown = path.display().to_string();
                let sha256 = cache::sha256_file(path)?;
                match self.published_sum(&shown)? {
                    Err(reason) => return Ok(Err(reason)),
                    Ok(Some(want)) if want != sha256 => {
                        return Ok(Err(format!("{shown}: sha256 {sha256} does not match SHA256SUMS's {want}")))
                    }
                    Ok(_) => {}
                }
                let kind = Kind::of(&shown).context("not an archive name")?;
                Ok(Ok(Archive { path: path.clone(), kind, sha256, source: shown, _pin: None }))
            }
            Located::Url(url) => {
                let entry = archive_entry(url);
                let pin = self.store.pin(&entry)?;
                let kind = Kind::of(names::split_url(url).1).context("not an archive name")?;
                if let Some(Meta { sha256: Some(sha256), .. }) = self.store.meta(&entry) {
                    self.store.touch(&entry);
                    let path = self.store.path(&entry);
                    return Ok(Ok(Archive { path, kind, sha256, source: url.clone(), _pin: Some(pin) }));
                }
                let want = match self.published_sum(url)? {
                    Ok(w) => w,
                    Err(reason) => return Ok(Err(reason)),
                };
                if want.is_none() && !self.unchecked_noted.swap(true, Ordering::Relaxed) {
                    messages::note(format_args!(
                        "{}: no {} beside the archives (llama.cpp publishes none), so downloads are not checked \
                         against a published digest; each one's sha256 is recorded",
                        self.describe(),
                        names::SUMS_FILE
                    ));
                }
                let fetched = self.store.fetch(&self.agent, url, &entry, want.as_deref(), ARCHIVE_CAP, cancel);
                match fetched {
                    Ok(Some((path, meta))) => {
                        let sha256 = meta.sha256.context("a download without its digest")?;
                        Ok(Ok(Archive { path, kind, sha256, source: url.clone(), _pin: Some(pin) }))
                    }
                    Ok(None) => Ok(Err(format!("no archive at {url} (HTTP 404)"))),
                    Err(e) if e.is::<Refused>() => Ok(Err(format!("{e:#}"))),
                    Err(e) => Err(e),
                }
            }
        }
    }

    /// Unpack `archive` into the store entry `tree` (through a scratch directory renamed into place) and record
    /// where `llama-server` is in it. `Ok(Err(reason))`: the archive is refused (truncated, hostile, no server).
    fn unpack(&self, archive: &Archive, tree: &str, build: BuildNumber) -> anyhow::Result<Result<PathBuf, String>> {
        let _lock = self.store.lock(tree)?;
        if self.store.meta(tree).is_some() {
            return read_bin(&self.store, tree).map(Ok);
        }
        let scratch = self.store.scratch(tree)?;
        let size = match unpack::unpack_file(&archive.path, archive.kind, scratch.path(), unpack::RELEASE_LIMITS) {
            Ok(size) => size,
            // Shown as the archive's source (the URL), not the store's file name.
            Err(e) => {
                let text = format!("{e:#}").replace(&archive.path.display().to_string(), &archive.source);
                return Ok(Err(format!("refused: {text}")));
            }
        };
        let Some(rel) = find_server(scratch.path(), build) else {
            return Ok(Err(format!(
                "{}: no llama-server in it (looked at its top, llama-{build}/, build/bin/ and bin/)",
                archive.source
            )));
        };
        std::fs::write(scratch.path().join(BIN_FILE), rel.as_bytes())
            .with_context(|| format!("writing {}", scratch.path().join(BIN_FILE).display()))?;
        let dest = self.store.path(tree);
        if dest.exists() {
            // An unfinished earlier unpack (no record).
            std::fs::remove_dir_all(&dest).with_context(|| format!("removing the unfinished {}", dest.display()))?;
        }
        std::fs::rename(scratch.keep(), &dest)
            .with_context(|| format!("moving the unpacked tree to {}", dest.display()))?;
        let meta = Meta { size, sha256: Some(archive.sha256.clone()), source: archive.source.clone() };
        self.store.finish(tree, &meta)?;
        Ok(Ok(dest.join(rel)))
    }
}

/// An archive ready to unpack; the pin keeps a downloaded one in the store meanwhile.
struct Archive {
    path: PathBuf,
    kind: Kind,
    sha256: String,
    source: String,
    _pin: Option<Pin>,
}

/// The file in an unpacked tree that says where its `llama-server` is, relative to the tree.
const BIN_FILE: &str = ".backscope-bin";

/// The store entry of a downloaded archive.
pub fn archive_entry(url: &str) -> String {
    let (dir, name) = names::split_url(url);
    store::entry_name("a", dir, name)
}

/// The directory of a finished tree that holds `llama-server`.
fn read_bin(store: &Store, tree: &str) -> anyhow::Result<PathBuf> {
    let root = store.path(tree);
    let rel = crate::host::inputs::read_limited(&root.join(BIN_FILE), 4096).map_err(|e| anyhow::anyhow!("{e}"))?;
    let rel = String::from_utf8(rel).map_err(|_| anyhow::anyhow!("{}: not UTF-8", root.join(BIN_FILE).display()))?;
    if rel.is_empty() {
        return Ok(root);
    }
    let rel =
        unpack::entry_path(rel.as_bytes()).map_err(|e| anyhow::anyhow!("{}: {e}", root.join(BIN_FILE).display()))?;
    Ok(root.join(rel))
}

/// Where `llama-server` is in an unpacked archive, relative to its top ("" for the top itself): the top (Windows'
/// flat zips), `llama-bNNNN/` (today's tarballs), `build/bin/` (the Linux zips before), `bin/`, or the one
/// directory at the top and its `bin/`.
pub fn find_server(root: &Path, build: BuildNumber) -> Option<String> {
    let mut candidates = vec![String::new(), format!("llama-{build}"), "build/bin".into(), "bin".into()];
    let tops: Vec<String> = std::fs::read_dir(root)
        .ok()?
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .filter_map(|e| e.file_name().to_str().map(str::to_string))
        .collect();
    if let [only] = tops.as_slice() {
        candidates.extend([only.clone(), format!("{only}/bin")]);
    }
    candidates.into_iter().find(|rel| {
        let server = root.join(rel).join("llama-server");
        std::fs::symlink_metadata(&server).is_ok_and(|m| m.is_file())
    })
}
