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
        // What is no longer a candidate is cancelled (its thread ends at its next read) and let go.
        bg.retain(|b| {
            let wanted = builds.contains(&b.build);
            if !wanted {
                b.cancel.store(true, Ordering::Relaxed);
            }
            wanted
        });
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
        let Ok(mut bg) = self.background.lock() else { return };
        for b in bg.iter() {
            b.cancel.store(true, Ordering::Relaxed);
        }
        for b in bg.drain(..) {
            let _ = b.handle.join();
        }
    }
}
