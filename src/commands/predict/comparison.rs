//! What a comparison of prediction and observation says, for either backend: a verdict per predicted item, the
//! observed kernels no prediction accounts for, and the claims. `compare` and `compare::vulkan` build them; the
//! reports (`prediction`, `vulkan::prediction`) hold them.

use std::fmt;

use serde::Serialize;

use super::observed::{Observed, VkObservation, VkObserved};
use crate::evidence::Claim;

/// Verdict of one prediction.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Verdict {
    Confirmed,
    Contradicted,
    Unobserved,
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Verdict::Confirmed => "Confirmed",
            Verdict::Contradicted => "Contradicted",
            Verdict::Unobserved => "Unobserved",
        })
    }
}

/// The verdict on one predicted (phase, type, family).
#[derive(Clone, Debug, Serialize)]
pub struct ItemVerdict {
    pub phase: String,
    /// A weight type, or `attention`.
    pub ggml_type: String,
    pub ne11: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub predicted: Option<String>,
    pub verdict: Verdict,
    /// Matmul nodes (or attention nodes) the phase runs with this prediction.
    pub nodes: u64,
    /// Launches of the observed kernels that confirm it.
    pub matching_launches: u64,
    /// The kernels that confirm or contradict it (demangled, with launches).
    pub evidence: Vec<String>,
    pub note: String,
    /// For a placement verdict (where the weights ran, GPU or CPU): the placement rule that decided it
    /// (data/ggml_placement_11434.toml).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub placement_rule: Option<String>,
}

/// An observed kernel no prediction of the run accounts for.
#[derive(Clone, Debug, Serialize)]
pub struct Unexplained {
    pub kernel: String,
    pub family: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ggml_type: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ncols: Option<u64>,
    pub launches: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct Comparison {
    pub observed: Observed,
    pub items: Vec<ItemVerdict>,
    pub unexplained: Vec<Unexplained>,
    pub confirmed: u64,
    pub contradicted: u64,
    pub unobserved: u64,
    pub claims: Vec<Claim>,
}

#[derive(Clone, Debug, Serialize)]
pub struct VkItem {
    pub phase: String,
    pub ggml_type: String,
    pub ne11: u64,
    pub predicted: String,
    pub verdict: Verdict,
    pub nodes: u64,
    pub evidence: Vec<String>,
    pub note: String,
    /// The rules that decided the prediction (`table.rule`, data/ggml_vulkan_11434.toml).
    pub rules: Vec<String>,
    /// The placement rule (data/ggml_placement_11434.toml) where placement was asked for or weights are in CPU
    /// memory.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub placement_rule: Option<String>,
}

/// Dispatches of one pipeline over a request: predicted (GPU-run weights' nodes) against observed.
#[derive(Clone, Debug, Serialize)]
pub struct VkCount {
    pub pipeline: String,
    pub predicted: u64,
    pub observed: u64,
    pub verdict: Verdict,
}

#[derive(Clone, Debug, Serialize)]
pub struct VkComparison {
    pub observed: VkObservation,
    pub items: Vec<VkItem>,
    /// Dispatch counts per predicted pipeline, where the observation is one request.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub counts: Vec<VkCount>,
    /// Matmul and flash-attention pipelines no prediction accounts for.
    pub unexplained: Vec<VkObserved>,
    pub confirmed: u64,
    pub contradicted: u64,
    pub unobserved: u64,
    pub claims: Vec<Claim>,
}
