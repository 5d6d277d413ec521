//! The matrix's rows and report: the layers, a row's status, confidence and sources, the failures a log shows
//! with the layer that explains each, and which Ollama and ROCm releases the knowledge rows judge.

use anyhow::{bail, Result};
use serde::Serialize;

use super::runs::RunGroup;
use crate::evidence::{Claim, Confidence, Source};
use crate::gpu::knowledge::{self, ollama::parse_release};

/// Sources cited per row.
pub(super) const ROW_SOURCES: usize = 8;

/// The layers, in the order a request meets them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Layer {
    VendorPolicy,
    BuildTargets,
    ShippedArtifacts,
    Binaries,
    Recognition,
    Execution,
    DeviceFilter,
}

impl Layer {
    pub const ALL: [Layer; 7] = [
        Layer::VendorPolicy,
        Layer::BuildTargets,
        Layer::ShippedArtifacts,
        Layer::Binaries,
        Layer::Recognition,
        Layer::Execution,
        Layer::DeviceFilter,
    ];

    pub fn number(self) -> u8 {
        self as u8 + 1
    }

    pub fn title(self) -> &'static str {
        match self {
            Layer::VendorPolicy => "vendor support policy",
            Layer::BuildTargets => "runtime build-target filter",
            Layer::ShippedArtifacts => "shipped artifacts",
            Layer::Binaries => "binaries",
            Layer::Recognition => "runtime recognition",
            Layer::Execution => "runtime execution",
            Layer::DeviceFilter => "Ollama device filter",
        }
    }

    pub fn id(self) -> &'static str {
        match self {
            Layer::VendorPolicy => "policy",
            Layer::BuildTargets => "build",
            Layer::ShippedArtifacts => "artifacts",
            Layer::Binaries => "binaries",
            Layer::Recognition => "recognition",
            Layer::Execution => "execution",
            Layer::DeviceFilter => "device_filter",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Status {
    Blocks,
    Allows,
    Unknown,
}

impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Status::Blocks => "Blocks",
            Status::Allows => "Allows",
            Status::Unknown => "Unknown",
        })
    }
}

/// One row of the matrix.
#[derive(Clone, Debug, Serialize)]
pub struct LayerRow {
    pub layer: Layer,
    pub number: u8,
    pub title: &'static str,
    pub status: Status,
    pub confidence: Confidence,
    pub finding: String,
    /// The inputs the row rests on: `knowledge`, `install scan`, `log`, `sweep runs`; empty when it had none.
    pub basis: Vec<&'static str>,
    pub sources: Vec<Source>,
}

impl LayerRow {
    pub(super) fn new(layer: Layer, status: Status, confidence: Confidence, finding: impl Into<String>) -> Self {
        LayerRow {
            layer,
            number: layer.number(),
            title: layer.title(),
            status,
            confidence,
            finding: finding.into(),
            basis: Vec::new(),
            sources: Vec::new(),
        }
    }

    /// A row the inputs given cannot fill: which input would.
    pub(super) fn no_input(layer: Layer, what: &str) -> Self {
        LayerRow::new(layer, Status::Unknown, Confidence::Unresolved, what)
    }

    pub(super) fn basis(mut self, b: &'static str) -> Self {
        if !self.basis.contains(&b) {
            self.basis.push(b);
        }
        self
    }

    pub(super) fn sources(mut self, s: impl IntoIterator<Item = Source>) -> Self {
        for src in s {
            if self.sources.len() < ROW_SOURCES && !self.sources.contains(&src) {
                self.sources.push(src);
            }
        }
        self
    }
}

/// A failure a log shows, and the layer that explains it.
#[derive(Clone, Debug, Serialize)]
pub struct Explanation {
    pub event: String,
    pub source: Source,
    /// `None`: no layer explains it on the evidence given.
    pub explained_by: Option<Layer>,
    pub confidence: Confidence,
    pub reason: String,
}

/// What the gate was given.
#[derive(Clone, Debug, Default, Serialize)]
pub struct GateInputs {
    pub install: Vec<String>,
    pub logs: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runs: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub run_ids: Vec<String>,
    /// The Ollama release layer 2 used (`none` when not Ollama).
    pub ollama: String,
    /// The ROCm release layer 1 used, when one was named.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rocm: Option<String>,
}

/// Everything `gate` says, in the form `--json` prints.
#[derive(Clone, Debug, Serialize)]
pub struct GateReport {
    pub schema: &'static str,
    pub arch: String,
    /// `amd` or `nvidia`.
    pub vendor: &'static str,
    /// The family from data/gpu_archs.toml, when backscope knows the arch.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub family: Option<String>,
    pub inputs: GateInputs,
    pub layers: Vec<LayerRow>,
    /// One line that keeps the layers apart.
    pub verdict: String,
    pub explanations: Vec<Explanation>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub run_groups: Vec<RunGroup>,
    pub claims: Vec<Claim>,
}

/// Which Ollama release layer 2 judges.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OllamaRelease {
    /// A release tag; `newest` says it was the default, not a choice.
    Release { tag: String, newest: bool },
    /// The runtime is not Ollama.
    NotOllama,
}

impl OllamaRelease {
    /// `None` → the newest release in the data; `none` → not Ollama; else a tag (`v0.12.5` or `0.12.5`).
    pub fn from_option(o: Option<&str>) -> Result<OllamaRelease> {
        match o.map(str::trim) {
            None => Ok(OllamaRelease::Release { tag: newest_ollama(), newest: true }),
            Some(v) if v.eq_ignore_ascii_case("none") => Ok(OllamaRelease::NotOllama),
            Some(v) => match parse_release(v) {
                Some([a, b, c]) => Ok(OllamaRelease::Release { tag: format!("v{a}.{b}.{c}"), newest: false }),
                None => bail!("--ollama {v}: not a release tag (v0.12.5), nor `none`"),
            },
        }
    }

    pub(super) fn label(&self) -> String {
        match self {
            OllamaRelease::Release { tag, .. } => tag.clone(),
            OllamaRelease::NotOllama => "none".into(),
        }
    }
}

/// The newest Ollama release the target data covers.
pub fn newest_ollama() -> String {
    let t = knowledge::ollama_amdgpu();
    t.preset
        .iter()
        .map(|p| p.last.as_str())
        .chain(t.filter.iter().map(|f| f.last.as_str()))
        .max_by_key(|v| parse_release(v).unwrap_or([0; 3]))
        .unwrap_or("v0.0.0")
        .to_string()
}

pub(super) fn version_key(v: &str) -> Vec<u64> {
    v.split('.').map(|p| p.parse().unwrap_or(0)).collect()
}

/// The newest ROCm release the support data covers.
pub fn newest_rocm() -> String {
    knowledge::rocm_support()
        .release
        .iter()
        .flat_map(|r| r.versions.iter())
        .max_by_key(|v| version_key(v))
        .cloned()
        .unwrap_or_default()
}

pub(super) fn rule(file: &str, rule: impl Into<String>, upstream: &str) -> Source {
    Source::Rule { file: file.into(), rule: rule.into(), upstream: upstream.into() }
}
