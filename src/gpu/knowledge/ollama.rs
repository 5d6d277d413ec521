//! Ollama's AMD GPU build targets per release (`data/ollama_amdgpu.toml`): the CMake regex that filters hip's
//! default target list in local builds, and the preset lists the release builds use.

use std::cmp::Ordering;

use serde::Deserialize;

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TargetFilter {
    pub id: String,
    pub first: String,
    pub last: String,
    pub regex: String,
    pub source: String,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TargetPreset {
    pub id: String,
    pub first: String,
    pub last: String,
    pub preset: String,
    pub rocm: String,
    pub targets: Vec<String>,
    pub source: String,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OllamaTargets {
    pub filter: Vec<TargetFilter>,
    pub preset: Vec<TargetPreset>,
}

/// A release tag `v0.12.4` (or `0.12.4`) as numbers; `None` if it is not one.
pub fn parse_release(tag: &str) -> Option<[u64; 3]> {
    let t = tag.trim().trim_start_matches('v');
    let mut parts = t.split('.');
    let mut out = [0u64; 3];
    for slot in &mut out {
        *slot = parts.next()?.parse().ok()?;
    }
    parts.next().is_none().then_some(out)
}

fn cmp_release(a: &str, b: &str) -> Option<Ordering> {
    Some(parse_release(a)?.cmp(&parse_release(b)?))
}

fn within(release: &str, first: &str, last: &str) -> bool {
    matches!(cmp_release(release, first), Some(Ordering::Greater | Ordering::Equal))
        && matches!(cmp_release(release, last), Some(Ordering::Less | Ordering::Equal))
}

impl TargetFilter {
    /// The entries of `targets` this filter keeps, in their order (CMake `list(FILTER … INCLUDE REGEX …)`).
    pub fn apply<'t>(&self, targets: &[&'t str]) -> Result<Vec<&'t str>, regex_lite::Error> {
        let re = regex_lite::Regex::new(&self.regex)?;
        Ok(targets.iter().copied().filter(|t| re.is_match(t)).collect())
    }
}

impl OllamaTargets {
    /// The regex-era filter in force at `release`.
    pub fn filter_at(&self, release: &str) -> Option<&TargetFilter> {
        self.filter.iter().find(|f| within(release, &f.first, &f.last))
    }

    /// The Linux release preset in force at `release`.
    pub fn preset_at(&self, release: &str) -> Option<&TargetPreset> {
        self.preset.iter().find(|p| within(release, &p.first, &p.last))
    }
}

impl TargetPreset {
    /// Whether the preset builds code for `processor` (any target-feature variant).
    pub fn builds(&self, processor: &str) -> bool {
        let p = processor.split(':').next().unwrap_or(processor);
        self.targets.iter().any(|t| t.split(':').next() == Some(p))
    }
}
