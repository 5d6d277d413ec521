//! MERGE: a stand-in for `src/builds`' `dir:DIR` provider, so that the bisect command and its CLI tests run before
//! the build side is merged. Replace its one use in `super::open_provider` by `crate::builds::provider(spec,
//! flags)` and delete this file.
//!
//! Already-built versions, one directory per build: `DIR/bNNNN/bin` or `DIR/NNNN/bin`. Nothing is built.

use std::path::PathBuf;

use anyhow::{Context, Result};

use crate::builds::{BuildFlags, BuildNumber, Prepared, Provider};

pub struct DirBuilds {
    pub dir: PathBuf,
}

impl DirBuilds {
    fn bin(&self, build: BuildNumber) -> Option<PathBuf> {
        [format!("b{}", build.0), build.0.to_string()]
            .into_iter()
            .map(|name| self.dir.join(name).join("bin"))
            .find(|p| p.is_dir())
    }
}

impl Provider for DirBuilds {
    fn list(&self) -> Result<Vec<BuildNumber>> {
        let entries = std::fs::read_dir(&self.dir).with_context(|| format!("cannot list {}", self.dir.display()))?;
        let mut out: Vec<BuildNumber> = entries
            .flatten()
            .filter_map(|e| {
                let name = e.file_name().to_str()?.to_string();
                let n = name.strip_prefix('b').unwrap_or(&name).parse::<u32>().ok()?;
                e.path().join("bin").is_dir().then_some(BuildNumber(n))
            })
            .collect();
        out.sort_unstable();
        out.dedup();
        Ok(out)
    }

    fn prepare(&self, build: BuildNumber, _flags: &BuildFlags) -> Result<Prepared> {
        Ok(match self.bin(build) {
            Some(bin_dir) => Prepared::Ready { bin_dir, build_secs: 0.0, from_cache: true },
            None => Prepared::Unbuildable {
                reason: format!("{} has no {build}/bin or {}/bin directory", self.dir.display(), build.0),
                log: None,
            },
        })
    }

    fn between(&self, _good: BuildNumber, _bad: BuildNumber) -> Result<Vec<String>> {
        Ok(vec![])
    }
}
