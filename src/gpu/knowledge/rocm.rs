//! ROCm's official GPU support per release (`data/rocm_support.toml`).

use serde::Deserialize;

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RocmRelease {
    pub versions: Vec<String>,
    pub targets: Vec<String>,
    pub source: String,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RocmSupport {
    pub release: Vec<RocmRelease>,
}

/// Whether a ROCm release lists a target as officially supported.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Support<'a> {
    Listed {
        source: &'a str,
    },
    NotListed {
        source: &'a str,
    },
    /// backscope has no table for this release.
    NoData,
}

impl RocmSupport {
    /// Whether ROCm `version` (e.g. `7.2.1`) lists `target` (a gfx name; target features are ignored).
    pub fn support(&self, version: &str, target: &str) -> Support<'_> {
        let processor = target.split(':').next().unwrap_or(target);
        match self.release.iter().find(|r| r.versions.iter().any(|v| v == version)) {
            Some(r) if r.targets.iter().any(|t| t == processor) => Support::Listed { source: &r.source },
            Some(r) => Support::NotListed { source: &r.source },
            None => Support::NoData,
        }
    }

    /// Every release version that lists `target`.
    pub fn releases_listing(&self, target: &str) -> Vec<&str> {
        let processor = target.split(':').next().unwrap_or(target);
        self.release
            .iter()
            .filter(|r| r.targets.iter().any(|t| t == processor))
            .flat_map(|r| r.versions.iter().map(String::as_str))
            .collect()
    }
}
