//! The types every build source and the builder share: a build's number, its backend and flags, what `prepare`
//! gives, and the `Provider` trait.

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
    /// The builds from `lo` to `hi` (both included) this provider offers, ascending: [`Provider::list`] within the
    /// range, unless the source can only look at a range (a URL pattern, which is probed number by number).
    fn list_range(&self, lo: BuildNumber, hi: BuildNumber) -> anyhow::Result<Vec<BuildNumber>> {
        Ok(self.list()?.into_iter().filter(|b| (lo..=hi).contains(b)).collect())
    }
    /// Start preparing `builds` in the background — the candidates for the next step, while this one is tested —
    /// and let go of background work for any other build. The builds it started on now (none for a source that
    /// does not prefetch: compiling one build at a time is all a machine's cores can do).
    fn prefetch(&self, _builds: &[BuildNumber], _flags: &BuildFlags) -> Vec<BuildNumber> {
        Vec::new()
    }
    /// What lies between two builds upstream, one line each (commit hashes and subjects where the provider has a
    /// git history; empty otherwise).
    fn between(&self, good: BuildNumber, bad: BuildNumber) -> anyhow::Result<Vec<String>>;
}

use anyhow::bail;

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
