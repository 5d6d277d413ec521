//! llama.cpp's prebuilt release archives as a build source: nothing is compiled, a step is a download (once) and
//! an unpack (once) into the shared download store ([`crate::builds::store`]).
//!
//! - `release:URL` — a URL pattern with `{build}` (`bNNNN`) and optionally `{ext}` (tried as `tar.gz`, then
//!   `zip`); `release:github` is llama.cpp's own release downloads for this machine and `--backend` (CPU or
//!   Vulkan). A URL cannot list builds, so the builds between two ends are the numbers whose archive the server has
//!   (each probed with a GET whose body is not read, several at once; at most [`fetch::MAX_PROBED`] numbers).
//! - `release-dir:DIR` — a directory of downloaded archives, `llama-bNNNN-bin-<platform>.tar.gz` or `.zip`; the
//!   platform is `--backend`'s on this machine's architecture ([`names::platform_rank`]).
//!
//! Checksums: llama.cpp publishes none, so a `SHA256SUMS` file beside the archives (the URL's directory, or `DIR`)
//! is used when there is one: an archive it does not list, or whose digest differs, is not used (the build is
//! skipped with the reason). A build without an archive, or whose archive is truncated, hostile
//! ([`crate::builds::unpack`]) or has no `llama-server`, is unbuildable and skipped, as a failed compile is.
//!
//! Prefetch: [`Provider::prefetch`] starts the candidates for the next step in background threads while the current
//! one is tested (mozregression's model); `prepare` then takes a finished prefetch's result, or waits for it.

pub mod fetch;
pub mod names;

use std::collections::VecDeque;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Instant;

use anyhow::bail;

use super::store::{Pin, Store};
use super::types::{Backend, BuildFlags, BuildNumber, Prepared, Provider};
use crate::output::messages;
use fetch::{Located, Origin, Outcome, Source};

/// One background preparation.
struct Background {
    build: BuildNumber,
    cancel: Arc<AtomicBool>,
    handle: JoinHandle<anyhow::Result<Outcome>>,
    started: Instant,
}

/// The pins a provider holds on the trees it handed out, so that another process's eviction leaves them be: the
/// first (a bisect's good end, which speed tests compare every candidate with) and the last few.
#[derive(Default)]
struct Held {
    first: Option<Pin>,
    recent: VecDeque<Pin>,
}

const RECENT_PINS: usize = 3;
/// Background preparations at once: the two candidates of the next step.
const MAX_BACKGROUND: usize = 2;

pub struct ReleaseProvider {
    source: Arc<Source>,
    background: Mutex<Vec<Background>>,
    /// Background work no longer wanted: cancelled, and waited for when the provider goes.
    retired: Mutex<Vec<JoinHandle<anyhow::Result<Outcome>>>>,
    held: Mutex<Held>,
}

impl ReleaseProvider {
    /// `release:URL` (a checked pattern) or `release:github` for `backend`.
    pub fn url(spec_url: &str, backend: Backend, cache_dir: &Path, store: Store) -> anyhow::Result<ReleaseProvider> {
        let pattern = if spec_url == "github" {
            names::github_pattern(backend, names::arch_name())?
        } else {
            names::check_pattern(spec_url)?;
            spec_url.to_string()
        };
        Ok(ReleaseProvider::with(Origin::Url(pattern), cache_dir, store))
    }

    /// `release-dir:DIR`, its archives for `backend` on this machine.
    pub fn dir(root: &Path, backend: Backend, cache_dir: &Path, store: Store) -> anyhow::Result<ReleaseProvider> {
        if !root.is_dir() {
            bail!("{} is not a directory", root.display());
        }
        if backend == Backend::Cuda {
            bail!("llama.cpp publishes CUDA archives for Windows only; build them instead (--builds pypi)");
        }
        let origin = Origin::Dir { root: root.to_path_buf(), backend, arch: names::arch_name().to_string() };
        Ok(ReleaseProvider::with(origin, cache_dir, store))
    }

    fn with(origin: Origin, cache_dir: &Path, store: Store) -> ReleaseProvider {
        ReleaseProvider {
            source: Arc::new(Source::new(origin, store, cache_dir)),
            background: Mutex::new(Vec::new()),
            retired: Mutex::new(Vec::new()),
            held: Mutex::new(Held::default()),
        }
    }

    /// The URL pattern or directory.
    pub fn describe(&self) -> String {
        self.source.describe()
    }

    /// Keep `pin` (see [`Held`]).
    fn hold(&self, pin: Pin) {
        let Ok(mut held) = self.held.lock() else { return };
        if held.first.is_none() {
            held.first = Some(pin);
            return;
        }
        if held.first.as_ref().is_some_and(|f| f.name == pin.name) || held.recent.iter().any(|p| p.name == pin.name) {
            return;
        }
        held.recent.push_back(pin);
        while held.recent.len() > RECENT_PINS {
            held.recent.pop_front();
        }
    }

    /// The background preparation of `build`, taken out of the list, if one was started.
    fn take_background(&self, build: BuildNumber) -> Option<Background> {
        let mut bg = self.background.lock().ok()?;
        let at = bg.iter().position(|b| b.build == build)?;
        Some(bg.remove(at))
    }
}

impl Provider for ReleaseProvider {
    /// A directory's builds; a URL pattern lists nothing without a range ([`Provider::list_range`]).
    fn list(&self) -> anyhow::Result<Vec<BuildNumber>> {
        match &self.source.origin {
            Origin::Dir { .. } => self.source.list_dir(),
            Origin::Url(p) => bail!("{p}: a URL source lists builds only between two ends (--good and --bad)"),
        }
    }

    fn list_range(&self, lo: BuildNumber, hi: BuildNumber) -> anyhow::Result<Vec<BuildNumber>> {
        match &self.source.origin {
            Origin::Dir { .. } => Ok(self.source.list_dir()?.into_iter().filter(|b| (lo..=hi).contains(b)).collect()),
            Origin::Url(_) => self.source.probe_range(lo, hi),
        }
    }

    fn prepare(&self, build: BuildNumber, _flags: &BuildFlags) -> anyhow::Result<Prepared> {
        let t0 = Instant::now();
        let mut from_prefetch = None;
        let outcome = match self.take_background(build) {
            Some(bg) => {
                let finished_before = bg.handle.is_finished();
                match bg.handle.join() {
                    Ok(Ok(outcome)) => {
                        from_prefetch = Some((finished_before, bg.started.elapsed().as_secs_f64()));
                        outcome
                    }
                    // A prefetch that failed (the network, a full disk) is tried again here, where its error stops
                    // the bisect with the step named.
                    _ => self.source.materialize(build, &AtomicBool::new(false))?,
                }
            }
            None => self.source.materialize(build, &AtomicBool::new(false))?,
        };
        Ok(match outcome {
            Outcome::Ready { bin_dir, secs, from_cache, pin } => {
                self.hold(pin);
                let waited = t0.elapsed().as_secs_f64();
                if let Some((finished_before, since)) = from_prefetch {
                    let how =
                        if finished_before { "ready".to_string() } else { format!("waited {waited:.1} s for it") };
                    messages::note(format_args!(
                        "{build}: from the background prefetch started {since:.1} s ago ({how})"
                    ));
                }
                let from_cache = from_cache || from_prefetch.is_some_and(|(done, _)| done);
                Prepared::Ready { bin_dir, build_secs: if from_cache { waited } else { secs.max(waited) }, from_cache }
            }
            Outcome::Unbuildable(reason) => Prepared::Unbuildable { reason: format!("{build}: {reason}"), log: None },
        })
    }

    fn prefetch(&self, builds: &[BuildNumber], _flags: &BuildFlags) -> Vec<BuildNumber> {
        let Ok(mut bg) = self.background.lock() else { return Vec::new() };
        // What is no longer a candidate is cancelled (its thread ends at its next read) and retired.
        let (keep, gone): (Vec<Background>, Vec<Background>) = bg.drain(..).partition(|b| builds.contains(&b.build));
        *bg = keep;
        if let Ok(mut retired) = self.retired.lock() {
            retired.retain(|h| !h.is_finished());
            for b in gone {
                b.cancel.store(true, Ordering::Relaxed);
                retired.push(b.handle);
            }
        }
        let mut started = Vec::new();
        for &build in builds {
            if bg.len() >= MAX_BACKGROUND || bg.iter().any(|b| b.build == build) {
                continue;
            }
            let cancel = Arc::new(AtomicBool::new(false));
            let (source, stop) = (Arc::clone(&self.source), Arc::clone(&cancel));
            let spawned = std::thread::Builder::new()
                .name(format!("prefetch-{build}"))
                .spawn(move || source.materialize(build, &stop));
            if let Ok(handle) = spawned {
                bg.push(Background { build, cancel, handle, started: Instant::now() });
                started.push(build);
            }
        }
        started
    }

    /// The builds found between the two (the archives carry no git history).
    fn between(&self, good: BuildNumber, bad: BuildNumber) -> anyhow::Result<Vec<String>> {
        let (lo, hi) = (good.min(bad), good.max(bad));
        if hi.0 <= lo.0 + 1 {
            return Ok(Vec::new());
        }
        Ok(self
            .source
            .found()
            .range(lo.0 + 1..hi.0)
            .map(|(b, at)| {
                let name = match at {
                    Located::Url(u) => names::split_url(u).1.to_string(),
                    Located::File(p) => p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default(),
                };
                format!("b{b} ({name})")
            })
            .collect())
    }
}

impl Drop for ReleaseProvider {
    /// Background work is cancelled and waited for (a download stops at its next read), so that nothing is left
    /// half-written when the command ends.
    fn drop(&mut self) {
        if let Ok(mut bg) = self.background.lock() {
            for b in bg.iter() {
                b.cancel.store(true, Ordering::Relaxed);
            }
            for b in bg.drain(..) {
                let _ = b.handle.join();
            }
        }
        if let Ok(mut retired) = self.retired.lock() {
            for h in retired.drain(..) {
                let _ = h.join();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;
    use std::io::Write;
    use std::path::PathBuf;

    /// `DIR/llama-bN-bin-ubuntu-<arch>.tar.gz` for each build: the release layout, a `llama-server` script that says
    /// its build, `pad` bytes of library beside it.
    fn archives(dir: &Path, builds: &[u32], pad: usize) {
        for b in builds {
            let mut tar = tar::Builder::new(Vec::new());
            for (name, data, mode) in [
                (format!("llama-b{b}/llama-server"), format!("#!/bin/sh\necho b{b}\n").into_bytes(), 0o755),
                (format!("llama-b{b}/libggml-base.so"), vec![7u8; pad], 0o644),
            ] {
                let mut h = tar::Header::new_gnu();
                h.set_size(data.len() as u64);
                h.set_mode(mode);
                h.set_cksum();
                tar.append_data(&mut h, name, &data[..]).unwrap();
            }
            let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            gz.write_all(&tar.into_inner().unwrap()).unwrap();
            let name = format!("llama-b{b}-bin-ubuntu-{}.tar.gz", names::arch_name());
            fs::write(dir.join(name), gz.finish().unwrap()).unwrap();
        }
    }

    fn flags() -> BuildFlags {
        BuildFlags { backend: Backend::Cpu, cmake_args: vec![], targets: vec![], jobs: 1 }
    }

    fn private(dir: &Path) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let cache = dir.join("cache");
        fs::create_dir(&cache).unwrap();
        fs::set_permissions(&cache, fs::Permissions::from_mode(0o700)).unwrap();
        cache
    }

    #[test]
    fn a_prefetched_build_is_taken_from_its_thread_and_counts_as_cached() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("rel");
        fs::create_dir(&dir).unwrap();
        archives(&dir, &[10, 11, 12], 100);
        let cache = private(tmp.path());
        let p = ReleaseProvider::dir(&dir, Backend::Cpu, &cache, Store::new(&cache, 1 << 30)).unwrap();
        assert_eq!(p.list().unwrap(), [10, 11, 12].map(BuildNumber).to_vec());
        assert_eq!(p.list_range(BuildNumber(11), BuildNumber(20)).unwrap(), [11, 12].map(BuildNumber).to_vec());
        assert_eq!(p.prefetch(&[BuildNumber(11), BuildNumber(12)], &flags()), [BuildNumber(11), BuildNumber(12)]);
        assert!(p.prefetch(&[BuildNumber(11)], &flags()).is_empty(), "already running; b12 is let go");
        assert!(p.retired.lock().unwrap().len() <= 1, "b12's thread is retired (or already finished)");
        let bg = p.background.lock().unwrap().iter().map(|b| b.build).collect::<Vec<_>>();
        assert_eq!(bg, [BuildNumber(11)]);
        // Wait for the thread, so that the step finds it finished.
        while !p.background.lock().unwrap()[0].handle.is_finished() {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        match p.prepare(BuildNumber(11), &flags()).unwrap() {
            Prepared::Ready { bin_dir, from_cache, .. } => {
                assert!(from_cache, "a finished prefetch is a cached build to the step");
                assert_eq!(fs::read_to_string(bin_dir.join("llama-server")).unwrap(), "#!/bin/sh\necho b11\n");
                assert!(bin_dir.ends_with("llama-b11") && bin_dir.starts_with(cache.join("downloads")));
            }
            other => panic!("{other:?}"),
        }
        assert!(p.background.lock().unwrap().is_empty());
        // Unprefetched, then again: made now, then from the store.
        let first = p.prepare(BuildNumber(10), &flags()).unwrap();
        assert!(matches!(first, Prepared::Ready { from_cache: false, .. }), "{first:?}");
        assert!(matches!(p.prepare(BuildNumber(10), &flags()).unwrap(), Prepared::Ready { from_cache: true, .. }));
        assert!(matches!(p.prepare(BuildNumber(13), &flags()).unwrap(), Prepared::Unbuildable { .. }));
        assert_eq!(p.between(BuildNumber(10), BuildNumber(12)).unwrap().len(), 1);
    }

    /// With a cap of two and a half trees, preparing more evicts the least recently used ones, but never a tree the
    /// provider still holds (the first, and the last three).
    #[test]
    fn trees_in_use_survive_eviction_and_the_rest_go_oldest_first() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("rel");
        fs::create_dir(&dir).unwrap();
        let builds = [20, 21, 22, 23, 24, 25];
        archives(&dir, &builds, 1 << 20);
        let cache = private(tmp.path());
        let store = Store::new(&cache, 5 << 19);
        let p = ReleaseProvider::dir(&dir, Backend::Cpu, &cache, store.clone()).unwrap();
        let mut bins = Vec::new();
        for b in builds {
            match p.prepare(BuildNumber(b), &flags()).unwrap() {
                Prepared::Ready { bin_dir, .. } => bins.push(bin_dir),
                other => panic!("{other:?}"),
            }
        }
        let present: Vec<bool> = bins.iter().map(|b| b.join("llama-server").is_file()).collect();
        // Eviction runs as each tree comes in and spares what is held then: b20 (the first) always, the last three,
        // and the one coming in. b21, let go when b24 was handed out, went when b25 came in; b22 was let go only
        // after that, so it is still there until the next eviction.
        assert_eq!(present, [true, false, true, true, true, true]);
        drop(p);
        let ev = store.evict(&[]).unwrap();
        assert!(!ev.names.is_empty() && ev.left <= store.cap, "{ev:?}");
    }

    #[test]
    fn a_cuda_or_missing_directory_is_refused_and_patterns_are_checked() {
        let tmp = tempfile::tempdir().unwrap();
        let cache = private(tmp.path());
        let store = || Store::new(&cache, 1 << 20);
        assert!(ReleaseProvider::dir(tmp.path(), Backend::Cuda, &cache, store()).is_err());
        assert!(ReleaseProvider::dir(&tmp.path().join("none"), Backend::Cpu, &cache, store()).is_err());
        let empty = ReleaseProvider::dir(tmp.path(), Backend::Vulkan, &cache, store()).unwrap();
        let e = empty.list().unwrap_err().to_string();
        assert!(e.contains("ubuntu-vulkan-") && e.contains("no llama.cpp release archive"), "{e}");
        assert!(ReleaseProvider::url("https://x/{build}/a.tgz", Backend::Cpu, &cache, store()).is_ok());
        assert!(ReleaseProvider::url("https://x/a.tgz", Backend::Cpu, &cache, store()).is_err());
        let url = ReleaseProvider::url("github", Backend::Vulkan, &cache, store()).unwrap();
        assert!(url.describe().contains("ubuntu-vulkan-"), "{}", url.describe());
        assert!(url.list().is_err(), "a URL lists only a range");
    }
}
